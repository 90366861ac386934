//! [`Taps`]: a candle port's intermediates named after the PyTorch model's module paths
//! (see [`crate::port`] for the contract).

use std::collections::HashSet;

use candle_core::{Tensor, Var};

/// One recorded tap: the intermediate after the tap and the zero `Var` added to it.
#[derive(Debug, Clone)]
pub struct Tap {
    /// The PyTorch module path the port named it after (`model.layers.0.self_attn`).
    pub path: String,
    /// `h + var`: the intermediate as the forward pass continued with it, bit for bit `h`.
    pub value: Tensor,
    /// The tap: a `Var` of `h`'s shape, dtype and device holding −0.0; after
    /// `loss.backward()`, `grads.get(&var)` is d loss / d h.
    pub var: Var,
}

/// The intermediates a port's forward pass names ([`Taps::tap`]).
///
/// Inactive ([`Taps::inactive`], what `train` passes): `tap` returns its input and adds no
/// op to the graph. Active ([`Taps::active`], `replay` and `inspect`): the first call of
/// each path returns `h + v` with `v` a `Var` of −0.0 and records it ([`Taps::recorded`]);
/// a later call of the same path, and a tensor that is not a float (token ids), is returned
/// as it is.
///
/// Adding −0.0 is the identity of IEEE 754 addition for every value, −0.0 included (+0.0
/// would turn −0.0 into +0.0), so every value is bit for bit that of the untapped pass;
/// candle's `Add` backward hands the incoming gradient to both operands unchanged, so the
/// `Var`'s gradient is d loss / d h (candle's backward keeps the gradients of `Var`s only),
/// and no other gradient changes.
#[derive(Debug, Default)]
pub struct Taps {
    active: bool,
    recorded: Vec<Tap>,
    seen: HashSet<String>,
}

impl Taps {
    /// Taps that record nothing and add no op (the training loop's).
    pub fn inactive() -> Self {
        Self::default()
    }

    /// Taps that record the first call of each path (the replay's and the inspection's).
    pub fn active() -> Self {
        Self {
            active: true,
            ..Self::default()
        }
    }

    /// Whether [`Taps::tap`] records (a port may skip work that only feeds taps).
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// Names `h` (any shape, the run dtype) after the PyTorch module path `path` whose
    /// output it is, in PyTorch's layout (the shape and element order PyTorch's module
    /// returns, so the two can be compared element by element); returns the tensor the
    /// forward pass is to continue with: `h` itself when inactive, already recorded or not a
    /// float, else `h + v` (see the type's docs).
    ///
    /// # Errors
    /// When candle cannot allocate the tap or add it (a device failure).
    pub fn tap(&mut self, path: &str, h: &Tensor) -> candle_core::Result<Tensor> {
        if !self.active || !h.dtype().is_float() || self.seen.contains(path) {
            return Ok(h.clone());
        }
        let var = Var::from_tensor(&h.zeros_like()?.neg()?)?;
        let value = (h + var.as_tensor())?;
        self.seen.insert(path.to_string());
        self.recorded.push(Tap {
            path: path.to_string(),
            value: value.clone(),
            var,
        });
        Ok(value)
    }

    /// The recorded taps, in the order first called.
    pub fn recorded(&self) -> &[Tap] {
        &self.recorded
    }

    /// The recorded paths, in the order first called.
    pub fn paths(&self) -> Vec<String> {
        self.recorded.iter().map(|t| t.path.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    fn bits(t: &Tensor) -> Vec<u32> {
        t.flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect()
    }

    #[test]
    fn a_tap_changes_no_value_and_carries_the_gradient() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        let w = Var::from_tensor(&Tensor::new(&[-0f32, 1.5, -2.0], &dev)?)?;
        let mut taps = Taps::active();
        let h = (w.as_tensor() * 1.0)?;
        let tapped = taps.tap("layer", &h)?;
        assert_eq!(bits(&tapped), bits(&h), "−0.0 survives the tap");
        // A second call of the same path is not recorded; neither are token ids.
        let again = taps.tap("layer", &tapped)?;
        let ids = Tensor::new(&[1u32, 2], &dev)?;
        taps.tap("ids", &ids)?;
        assert_eq!(taps.paths(), ["layer"]);
        let loss = (again.sqr()?.sum_all()? * 0.5)?;
        let grads = loss.backward()?;
        let g = grads
            .get(&taps.recorded()[0].var)
            .expect("the tap's gradient");
        assert_eq!(g.to_vec1::<f32>()?, vec![-0.0, 1.5, -2.0], "d(½h²)/dh = h");
        assert_eq!(
            grads.get(&w).unwrap().to_vec1::<f32>()?,
            vec![-0.0, 1.5, -2.0]
        );
        Ok(())
    }

    #[test]
    fn inactive_taps_add_nothing() -> candle_core::Result<()> {
        let mut taps = Taps::inactive();
        let h = Tensor::zeros(3, DType::F32, &Device::Cpu)?;
        let out = taps.tap("layer", &h)?;
        assert_eq!(out.id(), h.id(), "the same tensor, no op");
        assert!(taps.recorded().is_empty() && !taps.is_active());
        Ok(())
    }
}
