//! What a candle port brings of its own training loop (docs/loop.md, "Your own loop"):
//! its optimizer ([`PortOptimizer`], every `candle_nn::Optimizer` is one, [`Groups`] one
//! per parameter group) and the scalars of its own gradient transform ([`GradScalars`]).

use candle_core::backprop::GradStore;

/// An optimizer as the runner drives a port's own: `step`, and each group's learning rate.
/// Every `candle_nn::Optimizer` is one (one group); a port with several parameter groups
/// gives one optimizer per group in a [`Groups`].
pub trait PortOptimizer {
    /// `opt.step(&grads)`: one update of every `Var` it holds that has a gradient.
    ///
    /// # Errors
    /// candle's.
    fn step(&mut self, grads: &GradStore) -> candle_core::Result<()>;

    /// Each group's learning rate now, group order (the trace's `scalar:lr`).
    fn learning_rates(&self) -> Vec<f64>;

    /// Sets each group's learning rate (`lrs`, group order; a port's schedule or the
    /// workflow's).
    fn set_learning_rates(&mut self, lrs: &[f64]);

    /// The type that steps, for the trace's header (`optimizer_impl`).
    fn name(&self) -> &'static str {
        std::any::type_name::<Self>()
    }
}

impl<O: candle_nn::Optimizer> PortOptimizer for O {
    fn step(&mut self, grads: &GradStore) -> candle_core::Result<()> {
        candle_nn::Optimizer::step(self, grads)
    }

    fn learning_rates(&self) -> Vec<f64> {
        vec![self.learning_rate()]
    }

    /// The first of `lrs` (one group).
    fn set_learning_rates(&mut self, lrs: &[f64]) {
        if let Some(&lr) = lrs.first() {
            self.set_learning_rate(lr);
        }
    }
}

/// One optimizer per parameter group, stepped in order: what a candle porter writes for
/// PyTorch's `param_groups` (candle-nn has none).
pub struct Groups(pub Vec<Box<dyn PortOptimizer>>);

impl PortOptimizer for Groups {
    fn step(&mut self, grads: &GradStore) -> candle_core::Result<()> {
        self.0.iter_mut().try_for_each(|o| o.step(grads))
    }

    fn learning_rates(&self) -> Vec<f64> {
        self.0.iter().flat_map(|o| o.learning_rates()).collect()
    }

    /// Each group's optimizer gets its own rates, in order.
    fn set_learning_rates(&mut self, lrs: &[f64]) {
        let mut rest = lrs;
        for o in &mut self.0 {
            let n = o.learning_rates().len().min(rest.len());
            o.set_learning_rates(&rest[..n]);
            rest = &rest[n..];
        }
    }

    fn name(&self) -> &'static str {
        self.0.first().map_or("Groups", |o| o.name())
    }
}

/// What a port's own gradient transform computed, for the trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GradScalars {
    /// The total 2-norm of the gradients before the transform.
    pub grad_norm: f64,
    /// The coefficient every gradient was multiplied by (norm clipping), if any.
    pub clip_coef: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};
    use candle_nn::{Optimizer, SGD};

    /// A port's two groups: each optimizer gets its own rate, in order, and steps its own vars.
    #[test]
    fn groups_hand_each_optimizer_its_rates_and_step_them_all() -> candle_core::Result<()> {
        let (a, b) = (
            Var::new(&[1.0f64], &Device::Cpu)?,
            Var::new(&[1.0f64], &Device::Cpu)?,
        );
        let mut groups = Groups(vec![
            Box::new(SGD::new(vec![a.clone()], 0.1)?),
            Box::new(SGD::new(vec![b.clone()], 0.1)?),
        ]);
        groups.set_learning_rates(&[0.5, 0.25]);
        assert_eq!(groups.learning_rates(), vec![0.5, 0.25]);
        let loss = (a.as_tensor() + b.as_tensor())?.sum_all()?;
        PortOptimizer::step(&mut groups, &loss.backward()?)?;
        assert_eq!(a.to_vec1::<f64>()?, vec![0.5]);
        assert_eq!(b.to_vec1::<f64>()?, vec![0.75]);
        assert_eq!(groups.name(), "candle_nn::optim::SGD");
        Ok(())
    }
}
