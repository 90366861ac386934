//! A port built over the fixture ([`Net`]: the port and its parameters), the parameters as
//! the optimizer and the frames see them ([`Params`]), and the loss every run computes
//! ([`loss`]).

use anyhow::{bail, Context, Result};
use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use parity_common::candle::{CandleModel, FixtureStore, Taps};
use parity_common::frames::RawTensor;
use parity_common::guard::guarded;
use parity_common::optim::Parameters;
use parity_common::spec::{Fault, FloatType, Loss, RunSpec, TargetKind};

use crate::device;

/// The parameters of a run in the spec's (state_dict) order, each a trainable `Var` in the
/// run dtype on the run device: what the optimizer updates in place and the frames record.
#[derive(Debug, Clone, Default)]
pub struct Params(pub Vec<(String, Var)>);

impl Params {
    /// The `Var`s, for the optimizer.
    pub fn vars(&self) -> Vec<Var> {
        self.0.iter().map(|(_, v)| v.clone()).collect()
    }
}

/// The frames' copies of the parameters: each `Var` in state_dict order, copied by
/// [`device::to_raw`] (flattened; candle's layout is PyTorch's, and the store put every
/// parameter in the run dtype, so `ty` needs no conversion and is not consulted).
impl Parameters for Params {
    type Grads = GradStore;

    /// # Errors
    /// When a device copy fails.
    fn frame_params(
        &self,
        _ty: FloatType,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<(String, RawTensor)>> {
        device::frame_vars(&self.0, keep)
    }

    /// The `GradStore`'s entry of each kept `Var`; a parameter cut off from the loss (a fused
    /// op without a backward pass) has none and is left out.
    ///
    /// # Errors
    /// When a device copy fails.
    fn frame_grads(
        &self,
        grads: &GradStore,
        _ty: FloatType,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<(String, RawTensor)>> {
        device::frame_var_grads(&self.0, grads, keep)
    }
}

/// A port `M` built over the fixture's parameters: the parameters are the store's `Var`s in
/// state_dict order (the spec's `params`), whatever the port did with them.
pub struct Net<M> {
    /// The port.
    pub port: M,
    /// Its parameters.
    pub params: Params,
}

impl<M: CandleModel> Net<M> {
    /// `M::build(config, vb)` with `vb` over `store` and the config of `spec`
    /// ([`parity_common::spec::ModelSpec::port_config`]); a panic in the port's build is an
    /// error, and so is a parameter of the spec the port never asked for (it would never be
    /// trained).
    ///
    /// # Errors
    /// The port's (a name the fixture lacks or holds with another shape, a config it cannot
    /// read), with the context "building the port", or the parameters it did not ask for.
    pub fn build(spec: &RunSpec, store: &FixtureStore) -> Result<Self> {
        let port = Self::build_port(spec, store)?;
        let unasked = store.unasked();
        if !unasked.is_empty() {
            bail!(
                "the port {} never asks for {} (rename them in model.rename if it names them differently)",
                std::any::type_name::<M>(),
                unasked.join(", ")
            );
        }
        Ok(Self {
            port,
            params: Params(store.params().to_vec()),
        })
    }

    /// `M::build` alone (see [`Net::build`]), for `inspect`, which reports what the port
    /// asked for itself.
    ///
    /// # Errors
    /// As [`Net::build`], without the check of what it asked for.
    pub fn build_port(spec: &RunSpec, store: &FixtureStore) -> Result<M> {
        let config = spec.model.port_config(spec.fault);
        guarded(|| M::build(&config, store.var_builder()))
            .context(format!("building the port {}", std::any::type_name::<M>()))
    }

    /// The port's forward pass on one batch `x` ([`CandleModel::forward`]); a panic is an
    /// error.
    ///
    /// # Errors
    /// The port's or candle's.
    pub fn forward(&self, x: &Tensor, taps: &mut Taps) -> Result<Tensor> {
        guarded(|| self.port.forward(x, taps))
    }
}

/// The loss of the port's output `out` against the batch's targets `y`, PyTorch's means:
/// token targets, `out` `[B, T, V]` against `y` `[B, T]`, the cross-entropy over `[B·T, V]`
/// (`candle_nn::loss::cross_entropy(out.reshape((B*T, V)), y.reshape(B*T))`); class
/// labels, `out` `[B, C]` against `y` `[B]`, the cross-entropy; float targets, `out` of
/// `y`'s shape, the MSE (`candle_nn::loss::mse`), or with [`Fault::MseSum`] the squared
/// differences summed over the elements instead.
///
/// # Errors
/// An output of another shape (the message says which the loss needs), or candle's errors.
pub fn loss(spec: &RunSpec, out: &Tensor, y: &Tensor) -> Result<Tensor> {
    let target = spec.model.target;
    let (o, t) = (out.dims(), y.dims());
    let fits = match target {
        TargetKind::Tokens => o.len() == 3 && o[..2] == *t,
        TargetKind::Classes => o.len() == 2 && o[0] == t[0],
        TargetKind::Float => o == t,
    };
    if !fits {
        let needs = match target {
            TargetKind::Tokens => format!("[{}, {}, vocab]", t[0], t[1]),
            TargetKind::Classes => format!("[{}, classes]", t[0]),
            TargetKind::Float => format!("{t:?}"),
        };
        bail!("the port's output has shape {o:?}; the loss ({target:?} targets) needs {needs}");
    }
    Ok(match spec.loss {
        Loss::Mse if spec.fault == Fault::MseSum => (out - y)?.sqr()?.sum_all()?,
        Loss::Mse => candle_nn::loss::mse(out, y)?,
        Loss::CrossEntropy if out.rank() == 3 => {
            let (b, t, v) = out.dims3()?;
            candle_nn::loss::cross_entropy(&out.reshape((b * t, v))?, &y.reshape(b * t)?)?
        }
        Loss::CrossEntropy => candle_nn::loss::cross_entropy(out, y)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    fn spec(loss: &str, target: &str, fault: serde_json::Value) -> RunSpec {
        let v = serde_json::json!({
            "experiment": "e", "run": "candle", "fixture": "f.safetensors",
            "dtype": "f32", "device": "cpu", "steps": 1,
            "model": {"family": "mlp", "config": {}, "input": "float", "target": target,
                      "tied": {}, "buffers": [], "rename": {}},
            "loss": loss,
            "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.0, "dampening": 0.0,
                          "nesterov": false, "weight_decay": 0.0},
            "record": {"every": 1, "tensors": null, "grads": false, "moments": false},
            "params": [], "fault": fault, "loop": null
        });
        RunSpec::from_json(&v.to_string()).unwrap()
    }

    #[test]
    fn mse_sum_fault_sums_instead_of_averaging() -> Result<()> {
        let dev = Device::Cpu;
        let out = Tensor::new(&[[1f32, 2.0], [3.0, 4.0]], &dev)?;
        let y = Tensor::zeros((2, 2), DType::F32, &dev)?;
        let none = serde_json::json!({"kind": "none"});
        let sum = serde_json::json!({"kind": "mse_sum"});
        let mean = loss(&spec("mse", "float", none), &out, &y)?.to_scalar::<f32>()?;
        let summed = loss(&spec("mse", "float", sum), &out, &y)?.to_scalar::<f32>()?;
        assert_eq!((mean, summed), (7.5, 30.0));
        Ok(())
    }

    #[test]
    fn an_output_that_does_not_fit_the_targets_is_named() {
        let dev = Device::Cpu;
        let out = Tensor::zeros((2, 3), DType::F32, &dev).unwrap();
        let y = Tensor::zeros((2, 2), DType::F32, &dev).unwrap();
        let none = serde_json::json!({"kind": "none"});
        let err = loss(&spec("mse", "float", none), &out, &y).unwrap_err();
        assert!(format!("{err}").contains("[2, 3]"), "{err}");
    }
}
