//! The optimizer of a training run as every runner drives it, and what a recorded step
//! holds: the traits both runners implement ([`Parameters`] for their model, [`RunOptimizer`]
//! for their optimizer), so that they cannot drift in what they report.
//!
//! Modelled on candle-nn 0.11.0's `Optimizer` trait (`candle_nn::optim`): a runner supplies
//! what only its framework can do (the update itself, and copying its tensors to the host),
//! and the algorithm around it is written once, as provided methods:
//!
//! * whether step `t`'s update runs ([`RunOptimizer::update`]: not where the run's
//!   [`crate::spec::Fault::SkipUpdate`] skips it);
//! * which gradients step `t` records ([`Parameters::recorded_grads`], read before the update,
//!   since a framework may consume its gradients in it);
//! * the tensors of a `step` frame ([`RunOptimizer::step_tensors`], written by
//!   [`RunOptimizer::write_step`]) and the gradients and updated parameters of a `replay`
//!   frame ([`Parameters::replay_grads`], [`Parameters::replay_after`]);
//! * the header entry naming the optimizer ([`RunOptimizer::describe`]).
//!
//! A runner for another framework, or for a model of its own, implements the two traits and
//! gets the same frames.

use std::collections::HashMap;
use std::io::Write;

use anyhow::Result;

use crate::frames::{meta, FrameWriter, RawTensor};
use crate::spec::{FloatType, RunSpec};

/// The first and second moments of one parameter as a frame records them.
#[derive(Debug, Clone)]
pub struct FrameMoments {
    /// The parameter's state_dict name (`fc1.weight`).
    pub name: String,
    /// Adam's first moment m (PyTorch's `exp_avg`), laid out as the parameter's copy in
    /// [`Parameters::frame_params`].
    pub exp_avg: RawTensor,
    /// Adam's second moment v (PyTorch's `exp_avg_sq`), laid out alike.
    pub exp_avg_sq: RawTensor,
}

/// What the frame of a step after step 0 records besides the parameters and moments.
#[derive(Debug, Clone)]
pub struct Recorded<'a> {
    /// The loss of the step's forward pass (the mean over its micro-batches), widened to f64.
    pub loss: f64,
    /// The recorded gradients ([`Parameters::recorded_grads`]).
    pub grads: Vec<(String, RawTensor)>,
    /// The loop's scalars, in a run with a training loop.
    pub scalars: Option<&'a Scalars>,
}

/// What a step of a run with a training loop ([`crate::spec::Loop`]) records besides its
/// tensors: the frame's `scalar:lr` (each group's learning rate in the step's update, group
/// order), `scalar:grad_norm` (the total 2-norm of the gradients before clipping) and, with
/// norm clipping, `scalar:clip_coef` (the coefficient the gradients were multiplied by), each
/// a float64 tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Scalars {
    /// Each group's learning rate.
    pub lrs: Vec<f64>,
    /// The total gradient norm before clipping.
    pub grad_norm: f64,
    /// The clip coefficient, with norm clipping.
    pub clip_coef: Option<f64>,
}

impl Scalars {
    /// The frame tensors (see the type's docs).
    pub fn tensors(&self) -> Vec<(String, RawTensor)> {
        let mut out = vec![
            ("scalar:lr".to_string(), RawTensor::from_f64(&self.lrs)),
            (
                "scalar:grad_norm".to_string(),
                RawTensor::from_f64(&[self.grad_norm]),
            ),
        ];
        if let Some(c) = self.clip_coef {
            out.push(("scalar:clip_coef".to_string(), RawTensor::from_f64(&[c])));
        }
        out
    }
}

/// A model's trainable parameters as a runner's framework holds them, copied to the host for
/// the frames.
///
/// Every copy is one tensor per parameter, named by its PyTorch state_dict key, in
/// state_dict order ([`crate::spec::Model::params`]), flattened to one dimension in PyTorch
/// layout (a Linear weight `[out, in]`), in the run dtype.
pub trait Parameters {
    /// The gradients of one backward pass (candle's `GradStore`, burn's `Gradients`).
    type Grads;

    /// Host copies of the parameters `keep` selects (by state_dict name), in the run dtype
    /// `ty` (see the trait docs for the layout).
    ///
    /// # Errors
    /// When a tensor cannot be copied to the host or is not in `ty` (the implementation's
    /// docs say which).
    fn frame_params(
        &self,
        ty: FloatType,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<(String, RawTensor)>>;

    /// Host copies of the gradients in `grads` of the parameters `keep` selects, each named
    /// and laid out as its parameter in [`Parameters::frame_params`]; a parameter without a
    /// gradient is left out.
    ///
    /// # Errors
    /// As [`Parameters::frame_params`].
    fn frame_grads(
        &self,
        grads: &Self::Grads,
        ty: FloatType,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<(String, RawTensor)>>;

    /// The gradients step `t` of `spec` records (for [`RunOptimizer::step_tensors`]): those of
    /// the recorded parameters ([`RunSpec::records_tensor`]) when `spec.record.grads` is set
    /// and step `t` is recorded ([`RunSpec::records_step`]), none otherwise. Called before
    /// the update, which may consume `grads`.
    ///
    /// # Errors
    /// As [`Parameters::frame_grads`].
    fn recorded_grads(
        &self,
        spec: &RunSpec,
        t: u32,
        grads: &Self::Grads,
    ) -> Result<Vec<(String, RawTensor)>> {
        if spec.record.grads && spec.records_step(t) {
            self.frame_grads(grads, spec.dtype, &|name| spec.records_tensor(name))
        } else {
            Ok(Vec::new())
        }
    }

    /// `grad:<param>` of every parameter with a gradient in `grads`, as a `replay` frame
    /// holds them ([`crate::replay::replay_names`]), in the run dtype `ty`.
    ///
    /// # Errors
    /// As [`Parameters::frame_grads`].
    fn replay_grads(&self, grads: &Self::Grads, ty: FloatType) -> Result<Vec<(String, RawTensor)>> {
        Ok(prefixed("grad:", self.frame_grads(grads, ty, &|_| true)?))
    }

    /// `after:<param>` of every parameter (its value after the update), as a `replay` frame
    /// holds them, in the run dtype `ty`.
    ///
    /// # Errors
    /// As [`Parameters::frame_params`].
    fn replay_after(&self, ty: FloatType) -> Result<Vec<(String, RawTensor)>> {
        Ok(prefixed("after:", self.frame_params(ty, &|_| true)?))
    }
}

/// The optimizer of one training run (or replayed step), as both runners drive it.
///
/// Required: the framework's own update ([`RunOptimizer::step`]), its name, and its moments
/// ([`RunOptimizer::frame_moments`]). Provided: everything the runners must do alike around
/// them (see the module docs).
pub trait RunOptimizer {
    /// The parameters the optimizer updates, as the framework holds them (the runner's model).
    type Params: Parameters;

    /// The framework's type that steps (`candle_nn::AdamW`, `burn::optim::AdamW`, …), the
    /// header's `optimizer_impl`.
    fn name(&self) -> &'static str;

    /// One update of every parameter of `params` that has a gradient in `grads`, by the
    /// framework's own optimizer; returns the parameters after it. (candle's optimizer
    /// updates its `Var`s in place and hands `params` back; burn's takes the module and
    /// returns the updated one.)
    ///
    /// # Errors
    /// On the framework's tensor failures.
    fn step(
        &mut self,
        params: Self::Params,
        grads: <Self::Params as Parameters>::Grads,
    ) -> Result<Self::Params>;

    /// Host copies of the optimizer's first and second moments of the parameters `keep`
    /// selects, each laid out as its parameter in [`Parameters::frame_params`], in the run
    /// dtype `ty`.
    ///
    /// # Errors
    /// When the optimizer keeps no moments or does not expose them (SGD; candle-nn's AdamW),
    /// or they cannot be read back (the implementation's docs say which).
    fn frame_moments(
        &self,
        params: &Self::Params,
        ty: FloatType,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<FrameMoments>>;

    /// Adds the optimizer's entry to a `header` frame's metadata: `optimizer_impl`, its
    /// [`RunOptimizer::name`].
    fn describe(&self, header: &mut HashMap<String, String>) {
        header.insert("optimizer_impl".into(), self.name().into());
    }

    /// Step `t` (from 1) of `spec`'s update: [`RunOptimizer::step`], unless the run's fault
    /// skips it ([`crate::spec::Fault::skips`]), which leaves the parameters and the
    /// optimizer's state as they were.
    ///
    /// # Errors
    /// As [`RunOptimizer::step`].
    fn update(
        &mut self,
        spec: &RunSpec,
        t: u32,
        params: Self::Params,
        grads: <Self::Params as Parameters>::Grads,
    ) -> Result<Self::Params> {
        if spec.fault.skips(t) {
            Ok(params)
        } else {
            self.step(params, grads)
        }
    }

    /// The tensors of step `t`'s `step` frame (see [`crate::frames`]), after that step's
    /// update: every recorded parameter ([`RunSpec::records_tensor`]) under its state_dict
    /// name; with `step` (every step but 0) its `loss`, a one-element F64 tensor (the loss of
    /// that step's forward pass, before the update), `grad:<name>` for each recorded
    /// parameter in its `grads` ([`Parameters::recorded_grads`]) and the loop's `scalars`
    /// where given ([`Scalars::tensors`]); and, when `spec.record.moments` is set and `t` > 0,
    /// `exp_avg:<name>` and `exp_avg_sq:<name>` ([`RunOptimizer::frame_moments`]). Every
    /// tensor is flattened, in PyTorch layout, in the run dtype (the loss and scalars
    /// float64); non-finite values are recorded as they are.
    ///
    /// # Errors
    /// As [`Parameters::frame_params`] and [`RunOptimizer::frame_moments`].
    fn step_tensors(
        &self,
        spec: &RunSpec,
        t: u32,
        params: &Self::Params,
        step: Option<Recorded<'_>>,
    ) -> Result<Vec<(String, RawTensor)>> {
        let keep = |name: &str| spec.records_tensor(name);
        let mut tensors = Vec::new();
        let grads = match step {
            Some(Recorded {
                loss,
                grads,
                scalars,
            }) => {
                tensors.push(("loss".to_string(), RawTensor::from_f64(&[loss])));
                if let Some(s) = scalars {
                    tensors.extend(s.tensors());
                }
                grads
            }
            None => Vec::new(),
        };
        let mut moments: HashMap<String, FrameMoments> = HashMap::new();
        if spec.record.moments && t > 0 {
            for m in self.frame_moments(params, spec.dtype, &keep)? {
                moments.insert(m.name.clone(), m);
            }
        }
        let mut grads: HashMap<String, RawTensor> = grads.into_iter().collect();
        for (name, value) in params.frame_params(spec.dtype, &keep)? {
            if let Some(g) = grads.remove(&name) {
                tensors.push((format!("grad:{name}"), g));
            }
            if let Some(m) = moments.remove(&name) {
                tensors.push((format!("exp_avg:{name}"), m.exp_avg));
                tensors.push((format!("exp_avg_sq:{name}"), m.exp_avg_sq));
            }
            tensors.push((name, value));
        }
        Ok(tensors)
    }

    /// Writes step `t`'s `step` frame (metadata `kind` `step`, `step` t; tensors
    /// [`RunOptimizer::step_tensors`]) to `out`.
    ///
    /// # Errors
    /// As [`RunOptimizer::step_tensors`] and [`FrameWriter::write`].
    fn write_step<W: Write>(
        &self,
        out: &mut FrameWriter<W>,
        spec: &RunSpec,
        t: u32,
        params: &Self::Params,
        step: Option<Recorded<'_>>,
    ) -> Result<()> {
        let tensors = self.step_tensors(spec, t, params, step)?;
        out.write(
            meta([("kind", "step".into()), ("step", t.to_string())]),
            tensors,
        )
    }
}

/// `tensors` with `prefix` before each name.
fn prefixed(prefix: &str, tensors: Vec<(String, RawTensor)>) -> Vec<(String, RawTensor)> {
    tensors
        .into_iter()
        .map(|(name, t)| (format!("{prefix}{name}"), t))
        .collect()
}

#[cfg(test)]
mod tests;
