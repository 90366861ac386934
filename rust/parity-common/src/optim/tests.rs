//! Tests of the shared recording and update rules, on a host-only "framework".

use super::*;
use anyhow::bail;

/// Step 1's record: loss 0.5, `grads`, no loop.
fn recorded(grads: Vec<(String, RawTensor)>) -> Recorded<'static> {
    Recorded {
        loss: 0.5,
        grads,
        scalars: None,
    }
}

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
                       "weight_decay": 0.0, "amsgrad": false, "implementation": "manual",
                       "bias_correction": "f64"},
        "record": record,
        "params": [{"name": "fc1.weight", "shape": [1, 2]}, {"name": "fc1.bias", "shape": [1]}],
        "fault": fault,
        "loop": null
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
    let all =
        serde_json::json!({"every": 1, "tensors": ["fc1.weight"], "grads": true, "moments": true});
    let spec = spec(all, none);
    let mut opt = Descent {
        steps: 0,
        moments: true,
    };
    let params = net();
    let step0 = opt.step_tensors(&spec, 0, &params, None).unwrap();
    assert_eq!(names(&step0), ["fc1.weight"]);
    let g = params.recorded_grads(&spec, 1, &grads()).unwrap();
    assert_eq!(
        names(&g),
        ["fc1.weight"],
        "only the recorded parameters' gradients"
    );
    let params = opt.update(&spec, 1, params, grads()).unwrap();
    let step1 = opt
        .step_tensors(&spec, 1, &params, Some(recorded(g)))
        .unwrap();
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
    assert!(opt.step_tensors(&spec, 0, &params, None).is_ok());
    assert!(opt
        .step_tensors(&spec, 1, &params, Some(recorded(Vec::new())))
        .is_err());
}

#[test]
fn gradients_are_recorded_on_recorded_steps_only() {
    let none = serde_json::json!({"kind": "none"});
    let every2 = serde_json::json!({"every": 2, "tensors": null, "grads": true, "moments": false});
    let spec2 = spec(every2, none.clone());
    let got: Vec<usize> = (1..=3)
        .map(|t| net().recorded_grads(&spec2, t, &grads()).unwrap().len())
        .collect();
    assert_eq!(got, [0, 2, 2], "steps 2 and 3 (the last) are recorded");
    let off = serde_json::json!({"every": 1, "tensors": null, "grads": false, "moments": false});
    let spec_off = spec(off, none);
    assert!(net()
        .recorded_grads(&spec_off, 1, &grads())
        .unwrap()
        .is_empty());
}

#[test]
fn a_skipped_update_leaves_the_parameters_and_the_state() {
    let rec = serde_json::json!({"every": 1, "tensors": null, "grads": false, "moments": false});
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
