//! An own model's port over the fixture ([`OwnNet`]), its data ([`OwnData`]), its loss
//! ([`own_loss`]) and its optimizer ([`OwnStepper`]): the built-in families' pieces
//! (`crate::model::loss`, `crate::optim::Stepper`, parity-common's frames) around the user's
//! [`CandleModel`].

use std::collections::HashMap;
use std::marker::PhantomData;

use anyhow::{anyhow, bail, Context, Result};
use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor, Var};
use parity_common::frames::RawTensor;
use parity_common::optim::{FrameMoments, Parameters, RunOptimizer};
use parity_common::own::candle::{CandleModel, FixtureStore, Taps};
use parity_common::probe_spec::catch_panic;
use parity_common::spec::{FloatType, Model, OwnInput, OwnTarget, RunSpec};

use crate::device;
use crate::optim::Stepper;

/// The fixture of an own model's run, read once: every tensor by name (on the CPU, as
/// stored) and the run's data ([`OwnData`]).
pub struct OwnFixture {
    /// Every tensor of the fixture, by name, as stored (float32 parameters and buffers).
    pub tensors: HashMap<String, Tensor>,
    /// The batches.
    pub data: OwnData,
}

/// The training data of an own model, on the run device.
pub struct OwnData {
    /// Inputs `[batches, B, …]`: token ids as `DType::U32` ([`OwnInput::Tokens`], stored
    /// int64 `[batches, B, T]`) or floats in the run dtype.
    pub x: Tensor,
    /// Targets `[batches, B, …]`: int64 next tokens `[batches, B, T]` or class labels
    /// `[batches, B]`, or floats in the run dtype.
    pub y: Tensor,
}

impl OwnData {
    /// Step `t`'s batch (t ≥ 1): batch `(t − 1) mod batches`, `(x, y)` without the leading
    /// dimension.
    ///
    /// # Errors
    /// Only on internal indexing failures.
    pub fn batch(&self, t: u32) -> Result<(Tensor, Tensor)> {
        let i = (t as usize - 1) % self.x.dims()[0];
        Ok((self.x.get(i)?, self.y.get(i)?))
    }
}

impl OwnFixture {
    /// Reads the fixture of `spec` (an own model) and its data in the run dtype on `dev`:
    /// `x` int64 token ids `[batches, B, T]`, every id in `0..2³²` (converted to U32), or
    /// float32 `[batches, B, …]`; `y` int64 `[batches, B, T]` of `x`'s shape (next tokens),
    /// int64 `[batches, B]` (class labels) or float32 `[batches, B, …]`.
    ///
    /// # Errors
    /// An unreadable fixture, a spec that is not an own model, or data other than the above
    /// (the message names the fixture and the tensor).
    pub fn read(spec: &RunSpec, dev: &Device) -> Result<Self> {
        let Model::Own { input, target, .. } = &spec.model else {
            bail!("the run spec's model is not an own model (family \"own\")");
        };
        let path = spec.fixture.display();
        let tensors = candle_core::safetensors::load(&spec.fixture, &Device::Cpu)
            .with_context(|| format!("reading fixture {path}"))?;
        let get = |name: &str, dtype: DType, rank: Option<usize>| -> Result<Tensor> {
            let t = tensors
                .get(name)
                .with_context(|| format!("fixture {path} has no tensor {name:?}"))?;
            if t.dtype() != dtype || rank.is_some_and(|r| t.rank() != r) || t.rank() < 2 {
                bail!(
                    "fixture {path}: {name} is {:?} {:?}; expected {dtype:?} [batches, batch{}]",
                    t.dtype(),
                    t.dims(),
                    match rank {
                        Some(3) => ", T",
                        Some(_) => "",
                        None => ", …",
                    }
                );
            }
            Ok(t.clone())
        };
        let dt = device::dtype(spec.dtype);
        let x = match input {
            OwnInput::Tokens => {
                let x = get("x", DType::I64, Some(3))?;
                let ids = x.flatten_all()?.to_vec1::<i64>()?;
                if let Some(bad) = ids.iter().find(|&&i| i < 0 || i > i64::from(u32::MAX)) {
                    bail!("fixture {path}: x holds token id {bad}, which is no U32");
                }
                x.to_dtype(DType::U32)?
            }
            OwnInput::Float => get("x", DType::F32, None)?.to_dtype(dt)?,
        };
        let y = match target {
            OwnTarget::Tokens => get("y", DType::I64, Some(3))?,
            OwnTarget::Classes => get("y", DType::I64, Some(2))?,
            OwnTarget::Float => get("y", DType::F32, None)?.to_dtype(dt)?,
        };
        let (xd, yd) = (x.dims(), y.dims());
        let same = match target {
            OwnTarget::Tokens => xd == yd,
            _ => xd[..2] == yd[..2],
        };
        if !same {
            bail!("fixture {path}: x is {xd:?} and y {yd:?}; they must agree in [batches, batch] (next tokens: in every dimension)");
        }
        let data = OwnData {
            x: x.to_device(dev)?,
            y: y.to_device(dev)?,
        };
        Ok(Self { tensors, data })
    }
}

/// The first line of each cause of `e`, joined by `: ` (candle appends backtraces on later
/// lines): a framework error as one line for a frame or a JSON field.
pub fn message(e: &anyhow::Error) -> String {
    e.chain()
        .map(|c| c.to_string().lines().next().unwrap_or_default().to_string())
        .collect::<Vec<_>>()
        .join(": ")
}

/// Runs `f`, turning a panic inside the port or candle into an error
/// ([`parity_common::probe_spec::catch_panic`]: `panic: <message>`).
///
/// # Errors
/// Those of `f`, and a panic.
pub fn guarded<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_panic(f).unwrap_or_else(|msg| Err(anyhow!(msg)))
}

/// A user's port `M` built over the fixture's parameters: the parameters are the store's
/// `Var`s in state_dict order (the spec's `params`), whatever the port did with them.
pub struct OwnNet<M> {
    /// The user's model.
    pub model: M,
    params: Vec<(String, Var)>,
}

impl<M: CandleModel> OwnNet<M> {
    /// `M::build(config, vb)` with `vb` over `store` (the spec's `model.config`); a panic in
    /// the port's build is an error.
    ///
    /// # Errors
    /// The port's (a name the fixture lacks or holds with another shape, a config it cannot
    /// read), with the context "building the port".
    pub fn build(spec: &RunSpec, store: &FixtureStore) -> Result<Self> {
        let Model::Own { config, .. } = &spec.model else {
            bail!("the run spec's model is not an own model (family \"own\")");
        };
        let model = guarded(|| M::build(config, store.var_builder()))
            .context(format!("building the port {}", std::any::type_name::<M>()))?;
        Ok(Self {
            model,
            params: store.params().to_vec(),
        })
    }

    /// The port's forward pass on one batch `x` ([`CandleModel::forward`]); a panic is an
    /// error.
    ///
    /// # Errors
    /// The port's or candle's.
    pub fn forward(&self, x: &Tensor, taps: &mut Taps) -> Result<Tensor> {
        guarded(|| self.model.forward(x, taps))
    }
}

impl<M> OwnNet<M> {
    /// The parameters in state_dict order, each a `Var`.
    pub fn params(&self) -> &[(String, Var)] {
        &self.params
    }

    /// The `Var`s, for the optimizer.
    pub fn vars(&self) -> Vec<Var> {
        self.params.iter().map(|(_, v)| v.clone()).collect()
    }
}

/// The frames' copies of the port's parameters: each `Var` in state_dict order (candle's
/// layout is PyTorch's; the store put every one in the run dtype, so `ty` is not consulted).
impl<M> Parameters for OwnNet<M> {
    type Grads = GradStore;

    /// # Errors
    /// When a device copy fails.
    fn frame_params(
        &self,
        _ty: FloatType,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<(String, RawTensor)>> {
        device::frame_vars(&self.params, keep)
    }

    /// A parameter a fused op cut off from the loss has no gradient and is left out.
    ///
    /// # Errors
    /// When a device copy fails.
    fn frame_grads(
        &self,
        grads: &GradStore,
        _ty: FloatType,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<(String, RawTensor)>> {
        device::frame_var_grads(&self.params, grads, keep)
    }
}

/// The loss of the port's output `out` against the batch's targets `y`, as the built-in
/// runs compute it ([`crate::model::loss`], PyTorch's means): token targets, `out`
/// `[B, T, V]` against `y` `[B, T]`, the cross-entropy over `[B·T, V]`; class labels, `out`
/// `[B, C]` against `y` `[B]`, the cross-entropy; float targets, `out` of `y`'s shape, the
/// MSE (summed instead with the `MseSum` fault).
///
/// # Errors
/// An output of another shape (the message says which the loss needs), or candle's errors.
pub fn own_loss(spec: &RunSpec, out: &Tensor, y: &Tensor) -> Result<Tensor> {
    let Model::Own { target, .. } = &spec.model else {
        bail!("the run spec's model is not an own model (family \"own\")");
    };
    let (o, t) = (out.dims(), y.dims());
    let fits = match target {
        OwnTarget::Tokens => o.len() == 3 && o[..2] == *t,
        OwnTarget::Classes => o.len() == 2 && o[0] == t[0],
        OwnTarget::Float => o == t,
    };
    if !fits {
        let needs = match target {
            OwnTarget::Tokens => format!("[{}, {}, vocab]", t[0], t[1]),
            OwnTarget::Classes => format!("[{}, classes]", t[0]),
            OwnTarget::Float => format!("{t:?}"),
        };
        bail!("the port's output has shape {o:?}; the loss ({target:?} targets) needs {needs}");
    }
    crate::model::loss(spec.loss, out, y, spec.fault)
}

/// The optimizer of an own model's run: [`Stepper`] (candle-nn's SGD or AdamW, or the
/// hand-written AdamW, as the spec says) over the port's `Var`s, stepping them in place.
pub struct OwnStepper<M> {
    inner: Stepper,
    _model: PhantomData<fn() -> M>,
}

impl<M> OwnStepper<M> {
    /// Wraps `inner`, which must have been built over `net.vars()` of the net it steps.
    pub fn new(inner: Stepper) -> Self {
        Self {
            inner,
            _model: PhantomData,
        }
    }
}

/// The optimizer both runners drive ([`RunOptimizer`]), over an [`OwnNet`]: the same
/// update and moments as the built-in runs' ([`Stepper`]).
impl<M> RunOptimizer for OwnStepper<M> {
    type Params = OwnNet<M>;

    /// [`Stepper`]'s (`candle_nn::SGD`, `candle_nn::AdamW`, the manual AdamW).
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    /// `opt.step(&grads)` ([`Stepper::step_vars`]).
    ///
    /// # Errors
    /// On tensor failures.
    fn step(&mut self, net: OwnNet<M>, grads: GradStore) -> Result<OwnNet<M>> {
        self.inner.step_vars(&grads)?;
        Ok(net)
    }

    /// [`Stepper::frame_moments_of`] the net's parameters.
    ///
    /// # Errors
    /// As [`Stepper::frame_moments_of`].
    fn frame_moments(
        &self,
        net: &OwnNet<M>,
        _ty: FloatType,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<FrameMoments>> {
        self.inner.frame_moments_of(net.params(), keep)
    }
}
