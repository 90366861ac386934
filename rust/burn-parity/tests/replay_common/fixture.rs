//! The fixture writer of the replay tests: random parameters and data of a model family,
//! written to a temporary folder that the returned [`Fixture`] removes when dropped; and the
//! run spec's model of a test model, whose parameters come from parity-common's family
//! configs (the spec carries them, as the workflow writes it).

use parity_common::families::{self, CnnConfig, MlpConfig, TransformerConfig};
use parity_common::frames::RawTensor;
use parity_common::spec::{ModelSpec, ParamSpec, RunSpec};
use serde_json::{json, Value};

use crate::tempdir::{Fixture, TempDir};

/// A test model in the config's flat form (`{"family": "mlp", "sizes": …}`) split into its
/// family and its config (the run spec's `model.family` and `model.config`).
fn split_model(model: &Value) -> (String, Value) {
    let mut config = model.as_object().expect("a model object").clone();
    let family = config.remove("family").expect("a family");
    (family.as_str().unwrap().to_string(), Value::Object(config))
}

/// The parameters (state_dict order) of a built-in family's `config`, from parity-common's
/// family configs.
fn family_params(family: &str, config: &Value) -> Vec<ParamSpec> {
    match family {
        "mlp" => families::parse::<MlpConfig>("mlp", config)
            .unwrap()
            .params(),
        "cnn1d" => families::parse::<CnnConfig>("cnn1d", config)
            .unwrap()
            .params(),
        "transformer" => TransformerConfig::from_config(config).unwrap().params(),
        other => panic!("no test family {other}"),
    }
}

/// The parameters (state_dict order) of a test model (flat form).
fn params_of(model: &Value) -> Vec<ParamSpec> {
    let (family, config) = split_model(model);
    family_params(&family, &config)
}

/// The names of a built-in family's taps with their `.out`, in forward order: what its port
/// names (`fc{i}`, `relu{i}` but none after the last layer; `conv`, `relu`, `fc`;
/// [`TransformerConfig::tap_names`]), as `scripts/parity/localise/walk.py` expects them.
pub fn tap_names(model: &ModelSpec) -> Vec<String> {
    match model.family.as_str() {
        "mlp" => {
            let c: MlpConfig = families::parse("mlp", &model.config).unwrap();
            let layers = c.sizes.len() - 1;
            (1..=layers)
                .flat_map(|i| {
                    let mut v = vec![format!("fc{i}.out")];
                    if i < layers {
                        v.push(format!("relu{i}.out"));
                    }
                    v
                })
                .collect()
        }
        "cnn1d" => ["conv.out", "relu.out", "fc.out"]
            .map(String::from)
            .to_vec(),
        "transformer" => TransformerConfig::from_config(&model.config)
            .unwrap()
            .tap_names(),
        other => panic!("no test family {other}"),
    }
}

/// The run spec's `model` of a test model (flat form) trained on `loss`: token inputs and
/// targets for the transformer, else float inputs, with float targets for the MSE and
/// class labels for the cross-entropy.
fn model_spec(model: &Value, loss: &str) -> Value {
    let (family, config) = split_model(model);
    let tokens = family == "transformer";
    let target = match (tokens, loss) {
        (true, _) => "tokens",
        (false, "mse") => "float",
        _ => "classes",
    };
    json!({"family": family, "config": config, "input": if tokens { "tokens" } else { "float" },
           "target": target, "tied": {}, "buffers": [], "rename": {}})
}

/// The JSON of a run spec for the fixture at `fixture` of a test model (flat form): the
/// model of [`model_spec`] and its parameters ([`params_of`]), on the CPU, no fault; one SGD
/// step (lr 0.1) recording the parameters only. A test sets other `steps`, `optimizer` or
/// `record` in the JSON.
pub fn spec_json(
    tag: &str,
    fixture: &std::path::Path,
    model: &Value,
    loss: &str,
    dtype: &str,
) -> Value {
    let params: Vec<_> = params_of(model)
        .into_iter()
        .map(|p| json!({"name": p.name, "shape": p.shape}))
        .collect();
    json!({
        "experiment": tag, "run": "burn", "fixture": fixture, "dtype": dtype, "device": "cpu",
        "steps": 1, "model": model_spec(model, loss), "loss": loss,
        "optimizer": explicit_optimizer(&json!({"name": "sgd", "lr": 0.1})),
        "record": {"every": 1, "tensors": null, "grads": false, "moments": false},
        "params": params, "fault": {"kind": "none"}, "loop": null
    })
}

/// `optimizer` with every field the run spec needs, PyTorch's defaults for those the test
/// leaves out (SGD without momentum or decay, no amsgrad; an Adam is burn's).
pub fn explicit_optimizer(optimizer: &Value) -> Value {
    let mut o = optimizer.clone();
    let map = o.as_object_mut().expect("an optimizer object");
    let mut fill = |k: &str, v: Value| {
        map.entry(k.to_string()).or_insert(v);
    };
    match optimizer["name"].as_str() {
        Some("sgd") => {
            fill("momentum", json!(0.0));
            fill("dampening", json!(0.0));
            fill("nesterov", json!(false));
            fill("weight_decay", json!(0.0));
        }
        Some("adam") => {
            fill("amsgrad", json!(false));
            fill("implementation", json!("burn"));
            fill("bias_correction", json!("f32"));
        }
        _ => fill("amsgrad", json!(false)),
    }
    o
}

/// Deterministic values in [−scale, scale) on a 1/1024 grid.
fn values(seed: &mut u64, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (((*seed >> 33) % 2048) as f32 / 1024.0 - 1.0) * scale
        })
        .collect()
}

fn f32_tensor(shape: Vec<usize>, v: &[f32]) -> RawTensor {
    let mut t = RawTensor::from_f32(v);
    t.shape = shape;
    t
}

/// A run spec of `steps` steps recording everything each step, with a fixture of random
/// parameters and data (2 batches of 4 samples; of 3 sequences for the transformer, whose `x`
/// is int64 token ids `[2, 3, seq_len]` and `y` the next tokens, same shape) written to a
/// temporary folder, removed when the returned [`Fixture`] is dropped. `model` is a test
/// model in flat form.
pub fn spec(
    tag: &str,
    model: Value,
    loss: &str,
    optimizer: Value,
    steps: u32,
    dtype: &str,
) -> Fixture {
    let (family, config) = split_model(&model);
    let transformer = family == "transformer";
    let (batches, batch) = (2usize, if transformer { 3 } else { 4 });
    let mut seed = 0x5eed ^ tag.len() as u64;
    let mut raw: Vec<(String, RawTensor)> = Vec::new();
    for p in params_of(&model) {
        let n = p.shape.iter().product();
        raw.push((
            p.name.clone(),
            f32_tensor(p.shape.clone(), &values(&mut seed, n, 0.5)),
        ));
    }
    if transformer {
        let TransformerConfig { vocab, seq_len, .. } =
            TransformerConfig::from_config(&config).unwrap();
        // One sequence of seq_len + 1 tokens per sample: x its first seq_len, y the rest.
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for _ in 0..batches * batch {
            let seq: Vec<i64> = values(&mut seed, seq_len + 1, 1.0)
                .iter()
                .map(|v| ((v + 1.0) * 1024.0) as i64 % vocab as i64)
                .collect();
            x.extend_from_slice(&seq[..seq_len]);
            y.extend_from_slice(&seq[1..]);
        }
        for (name, v) in [("x", x), ("y", y)] {
            let data = v.iter().flat_map(|t| t.to_le_bytes()).collect();
            let dtype = safetensors::Dtype::I64;
            let shape = vec![batches, batch, seq_len];
            raw.push((name.into(), RawTensor { dtype, shape, data }));
        }
    } else {
        let (x_shape, outputs) = match family.as_str() {
            "mlp" => {
                let c: MlpConfig = families::parse("mlp", &config).unwrap();
                (vec![batches, batch, c.sizes[0]], c.sizes[c.sizes.len() - 1])
            }
            "cnn1d" => {
                let c: CnnConfig = families::parse("cnn1d", &config).unwrap();
                (vec![batches, batch, c.in_channels, c.length], c.classes)
            }
            other => panic!("no test family {other}"),
        };
        let n = x_shape.iter().product();
        raw.push(("x".into(), f32_tensor(x_shape, &values(&mut seed, n, 1.0))));
        if loss == "mse" {
            let n = batches * batch * outputs;
            let y = values(&mut seed, n, 1.0);
            raw.push(("y".into(), f32_tensor(vec![batches, batch, outputs], &y)));
        } else {
            let labels: Vec<i64> = (0..batches * batch)
                .map(|i| ((i * 7 + 1) % outputs) as i64)
                .collect();
            let data = labels.iter().flat_map(|v| v.to_le_bytes()).collect();
            let dtype = safetensors::Dtype::I64;
            let shape = vec![batches, batch];
            raw.push(("y".into(), RawTensor { dtype, shape, data }));
        }
    }
    let dir = TempDir::new("replay");
    let path = dir.path().join(format!("{tag}-{dtype}.safetensors"));
    std::fs::write(&path, safetensors::serialize(raw, None).unwrap()).unwrap();
    let moments = optimizer["name"] != "sgd";
    let mut spec = spec_json(tag, &path, &model, loss, dtype);
    spec["steps"] = json!(steps);
    spec["optimizer"] = explicit_optimizer(&optimizer);
    spec["record"] = json!({"every": 1, "tensors": null, "grads": true, "moments": moments});
    Fixture::new(RunSpec::from_json(&spec.to_string()).unwrap(), dir)
}
