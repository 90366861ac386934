//! The `mlp` family ([`MlpConfig`]) as a candle port: `fc1 … fcN` written with tensor ops on
//! the `Var`s, as in the study (`x·Wᵀ + b`, ReLU between the layers).

use anyhow::{bail, Result};
use candle_core::Tensor;
use candle_nn::VarBuilder;
use parity_common::candle::{CandleModel, Taps};
use parity_common::families::{self, Activation, MlpConfig, ModelFault};

/// The MLP: per layer its weight `[out, in]` (PyTorch's layout, candle's too) and bias
/// `[out]`, and the run's forward-pass fault.
pub struct Mlp {
    layers: Vec<(Tensor, Tensor)>,
    activation: Activation,
    fault: ModelFault,
}

impl CandleModel for Mlp {
    const TAPS_ITS_OUTPUT: bool = true;

    /// `fc{i}.weight` `[sizes[i], sizes[i−1]]` and `fc{i}.bias` `[sizes[i]]` from `vb`.
    ///
    /// # Errors
    /// A config that is not an MLP's, the transposed-weight fault without a square weight, or
    /// the store's refusals.
    fn build(config: &serde_json::Value, vb: VarBuilder) -> Result<Self> {
        let c: MlpConfig = families::parse("mlp", config)?;
        if c.fault == ModelFault::TransposedWeight && !c.has_square_weight() {
            bail!("fault TransposedWeight needs an MLP with a square weight (two equal consecutive sizes)");
        }
        let layers = c
            .sizes
            .windows(2)
            .enumerate()
            .map(|(i, w)| {
                let fc = vb.pp(format!("fc{}", i + 1));
                Ok((fc.get((w[1], w[0]), "weight")?, fc.get(w[1], "bias")?))
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            layers,
            activation: c.activation,
            fault: c.fault,
        })
    }

    /// `x` `[batch, sizes[0]]` (run dtype) → `[batch, sizes[N]]`, tapping `fc{i}` (each
    /// layer's output before its activation) and `relu{i}` (the activation's output).
    ///
    /// With the transposed-weight fault every square weight is used as `W` instead of `Wᵀ`
    /// (the shapes still fit, which is why the mistake runs).
    fn forward(&self, x: &Tensor, taps: &mut Taps) -> Result<Tensor> {
        let last = self.layers.len();
        let mut h = x.clone();
        for (i, (w, b)) in self.layers.iter().enumerate() {
            let i = i + 1;
            let square = w.dims()[0] == w.dims()[1];
            h = if self.fault == ModelFault::TransposedWeight && square {
                h.matmul(w)?
            } else {
                h.matmul(&w.t()?)?
            }
            .broadcast_add(b)?;
            h = taps.tap(&format!("fc{i}"), &h)?;
            if i < last {
                h = match self.activation {
                    Activation::Relu => h.relu()?,
                };
                h = taps.tap(&format!("{}{i}", self.activation.name()), &h)?;
            }
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    fn square_mlp(fault: ModelFault) -> Mlp {
        let dev = Device::Cpu;
        let t = |v: &[f32], shape: &[usize]| Tensor::new(v, &dev).unwrap().reshape(shape).unwrap();
        Mlp {
            layers: vec![
                (t(&[1.0, 2.0, -3.0, 4.0], &[2, 2]), t(&[0.0, 0.0], &[2])),
                (t(&[1.0, 1.0], &[1, 2]), t(&[0.0], &[1])),
            ],
            activation: Activation::Relu,
            fault,
        }
    }

    #[test]
    fn transposed_weight_fault_uses_the_square_weight_as_is() -> Result<()> {
        let x = Tensor::new(&[[1f32, 1.0]], &Device::Cpu)?;
        let run = |fault| -> Result<Vec<Vec<f32>>> {
            Ok(square_mlp(fault)
                .forward(&x, &mut Taps::inactive())?
                .to_vec2::<f32>()?)
        };
        // W·x = [3, 1] → relu sum 4; Wᵀ·x = [-2, 6] → 6.
        assert_eq!(run(ModelFault::None)?, vec![vec![4.0]]);
        assert_eq!(run(ModelFault::TransposedWeight)?, vec![vec![6.0]]);
        Ok(())
    }

    #[test]
    fn the_fault_needs_a_square_weight() {
        let vb = VarBuilder::zeros(DType::F32, &Device::Cpu);
        let config = serde_json::json!({"sizes": [2, 3, 1], "activation": "relu",
                                        "fault": "transposed_weight"});
        let err = Mlp::build(&config, vb).err().unwrap();
        assert!(format!("{err}").contains("square"), "{err}");
    }
}
