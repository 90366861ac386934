//! The candle side of a port (feature `candle`; contract in [`crate::port`]).
//!
//! A port implements [`CandleModel`]: the built-in families inside `candle-parity`
//! (`candle_parity::families`), a user's own model in the user's crate, which
//! `candle_parity::main::<M>` turns into a runner binary. The port gets its tensors from a `VarBuilder` over a
//! [`FixtureStore`] (the fixture's, by PyTorch state_dict key, as `Var`s the optimizer
//! trains), and names its intermediates with [`Taps`].
//!
//! ```
//! use candle_core::Tensor;
//! use candle_nn::{Linear, Module, VarBuilder};
//! use parity_common::candle::{CandleModel, Taps};
//!
//! /// `nn.Sequential(nn.Linear(4, 2))`: state_dict key `0.weight`, `0.bias`.
//! struct Port(Linear);
//!
//! impl CandleModel for Port {
//!     fn build(_config: &serde_json::Value, vb: VarBuilder) -> anyhow::Result<Self> {
//!         Ok(Port(candle_nn::linear(4, 2, vb.pp("0"))?))
//!     }
//!     fn forward(&self, x: &Tensor, taps: &mut Taps) -> anyhow::Result<Tensor> {
//!         Ok(taps.tap("0", &self.0.forward(x)?)?)
//!     }
//! }
//! ```

mod own_loop;
mod store;
mod taps;
#[cfg(test)]
mod tests;

pub use own_loop::{GradScalars, Groups, PortOptimizer};
pub use store::{Asked, FixtureStore};
pub use taps::{Tap, Taps};

use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use candle_nn::VarBuilder;

/// A candle port of a PyTorch model, as the runner drives it (`candle_parity`): built once
/// per run from the fixture, then `forward` once per step (`train`), or once with active taps
/// (`replay`, `inspect`). The runner computes the loss, calls `loss.backward()` and steps the
/// optimizer, the same for every port.
pub trait CandleModel: Sized {
    /// Whether the forward pass names its own output with its last tap (the built-in
    /// families: `fc2`, `head`), so that a replay records no separate `output`
    /// ([`crate::replay::replay_names`]). A user's port leaves it `false`: the runner taps
    /// its result as `output`, the name the PyTorch side gives a model's output.
    const TAPS_ITS_OUTPUT: bool = false;

    /// Builds the port from `config` (the run spec's model config, see
    /// [`crate::spec::ModelSpec::port_config`]: for a user's port, handed over verbatim, a
    /// `transformers` config's `to_dict()` as its `config.json` holds it or a factory's
    /// keyword arguments) and `vb`, which serves the fixture's tensors by PyTorch state_dict
    /// key ([`FixtureStore`]): parameters as trainable `Var`s in the run dtype (F32 or F64)
    /// on the run device, buffers as plain tensors, a tied alias as the recorded tensor's
    /// `Var`, a rename-table name as its state_dict key's. Weights come in PyTorch's layout
    /// (a Linear weight `[out, in]`, as `candle_nn::Linear` takes it).
    ///
    /// # Errors
    /// Asking for a name the fixture lacks, or with another shape, fails with that name (and
    /// `inspect` reports it); whatever else the port refuses (a config it cannot read).
    fn build(config: &serde_json::Value, vb: VarBuilder) -> anyhow::Result<Self>;

    /// The forward pass of one batch: `x` is `[B, T]` token ids (`DType::U32`) or `[B, …]`
    /// floats in the run dtype; returns logits `[B, T, V]` (token targets), `[B, C]` (class
    /// labels) or `[B, …]` of the target's shape (float targets), in the run dtype. Each
    /// intermediate worth comparing goes through `taps.tap(path, h)` under the PyTorch
    /// module path whose output it is, in PyTorch's layout ([`Taps::tap`]).
    ///
    /// # Errors
    /// The framework's errors (shapes, dtypes, an op without a kernel).
    fn forward(&self, x: &Tensor, taps: &mut Taps) -> anyhow::Result<Tensor>;

    /// Why a tap or a parameter of this port gets no gradient, when the port knows (the
    /// built-in transformer with a fused op: candle implements no backward for it); `None`
    /// lets the runner give its general reason.
    fn why_no_gradient(&self) -> Option<&'static str> {
        None
    }

    /// The port's own optimizer, as its training code builds it (docs/loop.md, "Your own
    /// loop"): for instance one `candle_nn::AdamW` per parameter group in a [`Groups`].
    /// `params` are the parameters by PyTorch state_dict key, in state_dict order, as the
    /// `Var`s to optimize. `None` (the default): the workflow's, from the config's
    /// `optimizer` and `param_groups`.
    ///
    /// # Errors
    /// Whatever building it fails with (it fails the run before its first step).
    fn optimizer(
        &self,
        params: &[(String, Var)],
    ) -> anyhow::Result<Option<Box<dyn PortOptimizer>>> {
        let _ = params;
        Ok(None)
    }

    /// The learning rate of each of the optimizer's groups (group order) for step `t`
    /// (from 1), as the port's own schedule computes it; the runner sets them on the
    /// optimizer before the step's update. `None` (the default): the workflow's schedule
    /// (the config's `schedule`), or the optimizer's rates as they are without one.
    fn learning_rates(&self, t: u32) -> Option<Vec<f64>> {
        let _ = t;
        None
    }

    /// The port's own transform of a step's gradients before the update (its clipping), in
    /// place on `grads`, with the parameters `params` (state_dict key, `Var`): returns the
    /// total gradient norm before it and the clip coefficient, where the port computes them
    /// (the trace's `scalar:grad_norm`, `scalar:clip_coef`). `None` (the default): the
    /// workflow's (the config's `clip`).
    ///
    /// # Errors
    /// candle's, which fail the step.
    fn transform_gradients(
        &self,
        grads: &mut GradStore,
        params: &[(String, Var)],
    ) -> anyhow::Result<Option<GradScalars>> {
        let _ = (grads, params);
        Ok(None)
    }
}
