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
    /// name; `loss`, a one-element F64 tensor, when given (every step but 0: the loss of that
    /// step's forward pass, before the update); `grad:<name>` for each recorded parameter in
    /// `grads` ([`Parameters::recorded_grads`]); and, when `spec.record.moments` is set and
    /// `t` > 0, `exp_avg:<name>` and `exp_avg_sq:<name>` ([`RunOptimizer::frame_moments`]).
    /// Every tensor is flattened, in PyTorch layout, in the run dtype; non-finite values are
    /// recorded as they are.
    ///
    /// # Errors
    /// As [`Parameters::frame_params`] and [`RunOptimizer::frame_moments`].
    fn step_tensors(
        &self,
        spec: &RunSpec,
        t: u32,
        params: &Self::Params,
        loss: Option<f64>,
        grads: Vec<(String, RawTensor)>,
    ) -> Result<Vec<(String, RawTensor)>> {
        let keep = |name: &str| spec.records_tensor(name);
        let mut tensors = Vec::new();
        if let Some(l) = loss {
            tensors.push(("loss".to_string(), RawTensor::from_f64(&[l])));
        }
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
        loss: Option<f64>,
        grads: Vec<(String, RawTensor)>,
    ) -> Result<()> {
        let tensors = self.step_tensors(spec, t, params, loss, grads)?;
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
mod tests {
    use super::*;
    use anyhow::bail;

    /// A host-only "framework": float32 parameters by name, gradients by name.
    struct Host(Vec<(String, Vec<f32>)>);

    impl Parameters for Host {
        type Grads = HashMap<String, Vec<f32>>;

        fn frame_params(
            &self,
            _ty: FloatType,
            keep: &dyn Fn(&str) -> bool,
        ) -> Result<Vec<(String, RawTensor)>> {
            Ok(self
                .0
                .iter()
                .filter(|(n, _)| keep(n))
                .map(|(n, v)| (n.clone(), RawTensor::from_f32(v)))
                .collect())
        }

        fn frame_grads(
            &self,
            grads: &Self::Grads,
            _ty: FloatType,
            keep: &dyn Fn(&str) -> bool,
        ) -> Result<Vec<(String, RawTensor)>> {
            Ok(self
                .0
                .iter()
                .filter(|(n, _)| keep(n))
                .filter_map(|(n, _)| grads.get(n).map(|g| (n.clone(), RawTensor::from_f32(g))))
                .collect())
        }
    }

    /// θ ← θ − g, counting its steps; its "moments" are the step count, if it has any.
    struct Descent {
        steps: u32,
        moments: bool,
    }

    impl RunOptimizer for Descent {
        type Params = Host;

        fn name(&self) -> &'static str {
            "test::Descent"
        }

        fn step(&mut self, mut params: Host, grads: HashMap<String, Vec<f32>>) -> Result<Host> {
            self.steps += 1;
            for (n, v) in &mut params.0 {
                if let Some(g) = grads.get(n) {
                    v.iter_mut().zip(g).for_each(|(x, g)| *x -= g);
                }
            }
            Ok(params)
        }

        fn frame_moments(
            &self,
            params: &Host,
            _ty: FloatType,
            keep: &dyn Fn(&str) -> bool,
        ) -> Result<Vec<FrameMoments>> {
            if !self.moments {
                bail!("no moments");
            }
            let t = RawTensor::from_f32(&[self.steps as f32]);
            Ok(params
                .0
                .iter()
                .filter(|(n, _)| keep(n))
                .map(|(n, _)| FrameMoments {
                    name: n.clone(),
                    exp_avg: t.clone(),
                    exp_avg_sq: t.clone(),
                })
                .collect())
        }
    }

    fn spec(record: serde_json::Value, fault: serde_json::Value) -> RunSpec {
        let v = serde_json::json!({
            "experiment": "e", "run": "r", "fixture": "f.safetensors",
            "dtype": "f32", "device": "cpu", "steps": 3,
            "model": {"family": "mlp", "config": {"sizes": [2, 1], "activation": "relu"},
                      "input": "float", "target": "float", "tied": {}, "buffers": [],
                      "rename": {}},
            "loss": "mse",
            "optimizer": {"name": "adamw", "lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8,
                           "weight_decay": 0.0, "implementation": "manual", "bias_correction": "f64"},
            "record": record,
            "params": [{"name": "fc1.weight", "shape": [1, 2]}, {"name": "fc1.bias", "shape": [1]}],
            "fault": fault
        });
        RunSpec::from_json(&v.to_string()).unwrap()
    }

    fn net() -> Host {
        Host(vec![
            ("fc1.weight".into(), vec![1.0, 2.0]),
            ("fc1.bias".into(), vec![0.5]),
        ])
    }

    fn grads() -> HashMap<String, Vec<f32>> {
        HashMap::from([
            ("fc1.weight".to_string(), vec![0.25, -0.5]),
            ("fc1.bias".to_string(), vec![1.0]),
        ])
    }

    fn names(tensors: &[(String, RawTensor)]) -> Vec<&str> {
        let mut n: Vec<&str> = tensors.iter().map(|(n, _)| n.as_str()).collect();
        n.sort();
        n
    }

    #[test]
    fn a_step_frame_holds_what_the_spec_records() {
        let none = serde_json::json!({"kind": "none"});
        let all = serde_json::json!({"every": 1, "tensors": ["fc1.weight"], "grads": true, "moments": true});
        let spec = spec(all, none);
        let mut opt = Descent {
            steps: 0,
            moments: true,
        };
        let params = net();
        let step0 = opt
            .step_tensors(&spec, 0, &params, None, Vec::new())
            .unwrap();
        assert_eq!(names(&step0), ["fc1.weight"]);
        let g = params.recorded_grads(&spec, 1, &grads()).unwrap();
        assert_eq!(
            names(&g),
            ["fc1.weight"],
            "only the recorded parameters' gradients"
        );
        let params = opt.update(&spec, 1, params, grads()).unwrap();
        let step1 = opt.step_tensors(&spec, 1, &params, Some(0.5), g).unwrap();
        assert_eq!(
            names(&step1),
            [
                "exp_avg:fc1.weight",
                "exp_avg_sq:fc1.weight",
                "fc1.weight",
                "grad:fc1.weight",
                "loss"
            ]
        );
        let get = |n: &str| &step1.iter().find(|(m, _)| m == n).unwrap().1;
        assert_eq!(
            get("fc1.weight").data,
            RawTensor::from_f32(&[0.75, 2.5]).data
        );
        assert_eq!(get("loss").data, 0.5f64.to_le_bytes().to_vec());
        // Moments asked of an optimizer without them are an error, from step 1 on only.
        opt.moments = false;
        assert!(opt
            .step_tensors(&spec, 0, &params, None, Vec::new())
            .is_ok());
        assert!(opt
            .step_tensors(&spec, 1, &params, Some(0.5), Vec::new())
            .is_err());
    }

    #[test]
    fn gradients_are_recorded_on_recorded_steps_only() {
        let none = serde_json::json!({"kind": "none"});
        let every2 =
            serde_json::json!({"every": 2, "tensors": null, "grads": true, "moments": false});
        let spec2 = spec(every2, none.clone());
        let got: Vec<usize> = (1..=3)
            .map(|t| net().recorded_grads(&spec2, t, &grads()).unwrap().len())
            .collect();
        assert_eq!(got, [0, 2, 2], "steps 2 and 3 (the last) are recorded");
        let off =
            serde_json::json!({"every": 1, "tensors": null, "grads": false, "moments": false});
        let spec_off = spec(off, none);
        assert!(net()
            .recorded_grads(&spec_off, 1, &grads())
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_skipped_update_leaves_the_parameters_and_the_state() {
        let rec =
            serde_json::json!({"every": 1, "tensors": null, "grads": false, "moments": false});
        let spec = spec(rec, serde_json::json!({"kind": "skip_update", "step": 2}));
        let mut opt = Descent {
            steps: 0,
            moments: false,
        };
        let p = opt.update(&spec, 1, net(), grads()).unwrap();
        let p = opt.update(&spec, 2, p, grads()).unwrap();
        assert_eq!(opt.steps, 1);
        assert_eq!(p.0[1].1, vec![-0.5]);
        let mut header = HashMap::new();
        opt.describe(&mut header);
        assert_eq!(header["optimizer_impl"], "test::Descent");
    }

    #[test]
    fn a_replay_names_gradients_and_updated_parameters() {
        let after = names(&net().replay_after(FloatType::F32).unwrap())
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
        assert_eq!(after, ["after:fc1.bias", "after:fc1.weight"]);
        let mut g = grads();
        g.remove("fc1.bias");
        let got = net().replay_grads(&g, FloatType::F32).unwrap();
        assert_eq!(names(&got), ["grad:fc1.weight"]);
    }
}
