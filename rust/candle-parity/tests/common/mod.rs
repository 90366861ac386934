//! Helpers of the replay tests: a temporary directory, deterministic values, a frame
//! decoder (parity-common has only the writer), fixtures and specs.
//!
//! Shared by several test crates (`replay`, `transformer`), each of which uses a part.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Result;
use candle_parity::NoPort;
use parity_common::cli::PortJob;
use parity_common::families::{self, CnnConfig, MlpConfig, TransformerConfig};
use parity_common::frames::RawTensor;
use parity_common::replay::ReplayState;
use parity_common::spec::{ParamSpec, RunSpec};
use safetensors::Dtype;
use serde_json::{json, Value};

pub const BATCHES: usize = 2;
pub const BATCH: usize = 5;
/// The replayed step; with two batches it uses batch 0 again, (3 − 1) mod 2.
pub const K: u32 = 3;
/// The transformer's batch (sequences per batch).
pub const T_BATCH: usize = 3;
/// The tiny transformer's vocabulary, sequence length and width.
pub const VOCAB: usize = 11;
pub const SEQ: usize = 5;
pub const D_MODEL: usize = 8;

/// A directory under the system's temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> Result<Self> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("candle-parity-replay-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Deterministic values in [−1, 1).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.next()).collect()
    }
}

/// One decoded frame: metadata and tensors (dtype, values widened to f64, exactly).
pub struct Frame {
    pub meta: HashMap<String, String>,
    pub tensors: HashMap<String, (Dtype, Vec<f64>)>,
}

impl Frame {
    pub fn get(&self, name: &str) -> &[f64] {
        &self
            .tensors
            .get(name)
            .unwrap_or_else(|| panic!("no {name} in {:?}", self.meta))
            .1
    }
}

/// Reads a frame stream: u64 LE byte count + one safetensors buffer, repeated.
pub fn decode(mut bytes: &[u8]) -> Result<Vec<Frame>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let n = u64::from_le_bytes(bytes[..8].try_into()?) as usize;
        let body = &bytes[8..8 + n];
        let (_, md) = safetensors::SafeTensors::read_metadata(body)?;
        let st = safetensors::SafeTensors::deserialize(body)?;
        let mut tensors = HashMap::new();
        for (name, view) in st.tensors() {
            let d = view.data();
            let values = match view.dtype() {
                Dtype::F32 => d
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
                    .collect(),
                Dtype::F64 => d
                    .chunks_exact(8)
                    .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                    .collect(),
                other => anyhow::bail!("unexpected dtype {other:?}"),
            };
            tensors.insert(name, (view.dtype(), values));
        }
        out.push(Frame {
            meta: md.metadata().clone().unwrap_or_default(),
            tensors,
        });
        bytes = &bytes[8 + n..];
    }
    Ok(out)
}

pub fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

pub fn raw(dtype: Dtype, shape: &[usize], data: Vec<u8>) -> RawTensor {
    RawTensor {
        dtype,
        shape: shape.to_vec(),
        data,
    }
}

pub fn f32_raw(values: &[f32], shape: &[usize]) -> RawTensor {
    raw(
        Dtype::F32,
        shape,
        values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    )
}

/// What a case varies; everything else is fixed.
pub struct Case {
    pub model: Value,
    pub loss: &'static str,
    pub optimizer: Value,
    pub dtype: &'static str,
    pub fault: Value,
}

pub fn mlp() -> Value {
    json!({"family": "mlp", "sizes": [4, 6, 6, 3], "activation": "relu"})
}

pub fn cnn(conv_impl: &str) -> Value {
    json!({"family": "cnn1d", "in_channels": 2, "channels": 3, "kernel": 3, "length": 8,
           "classes": 4, "activation": "relu", "conv_impl": conv_impl})
}

/// The tiny transformer (V 11, d 8, 2 heads, 2 blocks, T 5) with the given layer norm
/// (`composed`, `fused`), softmax (`generic`, `last_dim`) and GELU (`erf`, `tanh`).
pub fn transformer(layer_norm: &str, softmax: &str, gelu: &str) -> Value {
    json!({"family": "transformer", "vocab": VOCAB, "d_model": D_MODEL, "heads": 2,
           "blocks": 2, "seq_len": SEQ, "layer_norm": layer_norm, "softmax": softmax,
           "gelu": gelu})
}

pub fn adamw(implementation: &str, factors: &str) -> Value {
    json!({"name": "adamw", "lr": 0.05, "betas": [0.9, 0.999], "eps": 1e-8,
           "weight_decay": 0.01, "implementation": implementation, "bias_correction": factors})
}

pub fn sgd() -> Value {
    json!({"name": "sgd", "lr": 0.1})
}

pub fn case(model: Value, loss: &'static str, optimizer: Value) -> Case {
    Case {
        model,
        loss,
        optimizer,
        dtype: "f32",
        fault: json!({"kind": "none"}),
    }
}

/// A test model in the config's flat form (`{"family": "mlp", "sizes": …}`) split into its
/// family and its config (the run spec's `model.family` and `model.config`).
pub fn split_model(model: &Value) -> (String, Value) {
    let mut config = model.as_object().expect("a model object").clone();
    let family = config.remove("family").expect("a family");
    (family.as_str().unwrap().to_string(), Value::Object(config))
}

/// The parameters (state_dict order) of a test model (flat form), from parity-common's
/// family configs.
pub fn params_of(model: &Value) -> Vec<ParamSpec> {
    let (family, config) = split_model(model);
    match family.as_str() {
        "mlp" => families::parse::<MlpConfig>("mlp", &config)
            .unwrap()
            .params(),
        "cnn1d" => families::parse::<CnnConfig>("cnn1d", &config)
            .unwrap()
            .params(),
        "transformer" => TransformerConfig::from_config(&config).unwrap().params(),
        other => panic!("no test family {other}"),
    }
}

/// The names of a test model's (flat form) taps with their `.out`, in forward order: what
/// its port names, as `scripts/parity/localise/walk.py` (`forward_names`) expects them.
pub fn forward_names(model: &Value) -> Vec<String> {
    let (family, config) = split_model(model);
    match family.as_str() {
        "mlp" => {
            let layers = families::parse::<MlpConfig>("mlp", &config)
                .unwrap()
                .sizes
                .len()
                - 1;
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
        "transformer" => TransformerConfig::from_config(&config).unwrap().tap_names(),
        other => panic!("no test family {other}"),
    }
}

/// The run spec's `model` of a test model (flat form) trained on `loss`.
pub fn model_spec(model: &Value, loss: &str) -> Value {
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

/// Writes the fixture (parameters, `x`, `y` as float32; int64 labels for cross-entropy;
/// for the transformer int64 token ids `x` `[BATCHES, T_BATCH, T]` and their next tokens `y`).
pub fn write_fixture(dir: &Path, c: &Case) -> Result<PathBuf> {
    let mut rng = Lcg(7);
    let mut tensors = Vec::new();
    for p in params_of(&c.model) {
        let n = p.shape.iter().product();
        let v: Vec<f32> = rng.vec(n).iter().map(|x| x * 0.5).collect();
        tensors.push((p.name, f32_raw(&v, &p.shape)));
    }
    let (family, config) = split_model(&c.model);
    let (input, outputs) = match family.as_str() {
        "transformer" => {
            let cfg = TransformerConfig::from_config(&config)?;
            let (vocab, seq_len) = (cfg.vocab, cfg.seq_len);
            let mut x = Vec::new();
            let mut y = Vec::new();
            for _ in 0..BATCHES * T_BATCH {
                let seq: Vec<i64> = (0..=seq_len)
                    .map(|_| ((rng.next() + 1.0) * 0.5 * vocab as f32) as i64 % vocab as i64)
                    .collect();
                x.extend_from_slice(&seq[..seq_len]);
                y.extend_from_slice(&seq[1..]);
            }
            let ids = |v: Vec<i64>| -> Vec<u8> { v.iter().flat_map(|i| i.to_le_bytes()).collect() };
            let shape = [BATCHES, T_BATCH, seq_len];
            tensors.push(("x".into(), raw(Dtype::I64, &shape, ids(x))));
            tensors.push(("y".into(), raw(Dtype::I64, &shape, ids(y))));
            let path = dir.join("fixture.safetensors");
            safetensors::serialize_to_file(tensors, None, &path)?;
            return Ok(path);
        }
        "mlp" => {
            let c: MlpConfig = families::parse("mlp", &config)?;
            (vec![c.sizes[0]], *c.sizes.last().unwrap())
        }
        _ => {
            let c: CnnConfig = families::parse("cnn1d", &config)?;
            (vec![c.in_channels, c.length], c.classes)
        }
    };
    let x_shape = [vec![BATCHES, BATCH], input].concat();
    tensors.push((
        "x".into(),
        f32_raw(&rng.vec(x_shape.iter().product()), &x_shape),
    ));
    let y = if c.loss == "mse" {
        f32_raw(
            &rng.vec(BATCHES * BATCH * outputs),
            &[BATCHES, BATCH, outputs],
        )
    } else {
        let labels: Vec<u8> = (0..BATCHES * BATCH)
            .flat_map(|i| ((i * 7 % outputs) as i64).to_le_bytes())
            .collect();
        raw(Dtype::I64, &[BATCHES, BATCH], labels)
    };
    tensors.push(("y".into(), y));
    let path = dir.join("fixture.safetensors");
    safetensors::serialize_to_file(tensors, None, &path)?;
    Ok(path)
}

/// The spec JSON of case `c` with `optimizer`: K steps, every step recorded with its
/// gradients, and the moments if `moments`.
pub fn spec_json(c: &Case, fixture: &Path, optimizer: &Value, moments: bool) -> Result<Value> {
    let params: Vec<Value> = params_of(&c.model)
        .iter()
        .map(|p| json!({"name": p.name, "shape": p.shape}))
        .collect();
    Ok(json!({
        "experiment": "replay_test", "run": "candle", "fixture": fixture, "dtype": c.dtype,
        "device": "cpu", "steps": K, "model": model_spec(&c.model, c.loss), "loss": c.loss,
        "optimizer": explicit_optimizer(optimizer),
        "record": {"every": 1, "tensors": null, "grads": true, "moments": moments},
        "params": params, "fault": c.fault, "loop": null,
    }))
}

/// `optimizer` with every field the run spec needs, PyTorch's defaults for those the test
/// leaves out (SGD without momentum or decay, no amsgrad; an Adam is the recipe).
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
            fill("implementation", json!("recipe"));
            fill("bias_correction", json!("f64"));
        }
        _ => fill("amsgrad", json!(false)),
    }
    o
}

/// [`spec_json`] parsed.
pub fn spec(c: &Case, fixture: &Path, optimizer: &Value, moments: bool) -> Result<RunSpec> {
    RunSpec::from_json(&spec_json(c, fixture, optimizer, moments)?.to_string())
}

/// `train` of the spec's built-in family, as the runner dispatches it.
pub fn train(spec: &RunSpec) -> Result<Vec<Frame>> {
    let mut buf = Vec::new();
    let sink = Box::new(&mut buf);
    candle_parity::run_port::<NoPort>(PortJob::Train { spec, sink })?;
    decode(&buf)
}

/// The replay's frame stream of `spec` from `state`, as the runner dispatches it.
pub fn replay(spec: &RunSpec, state: &ReplayState) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    let sink = Box::new(&mut buf);
    candle_parity::run_port::<NoPort>(PortJob::Replay { spec, state, sink })?;
    Ok(buf)
}

pub fn step(frames: &[Frame], t: u32) -> &Frame {
    frames
        .iter()
        .find(|f| f.meta["kind"] == "step" && f.meta["step"] == t.to_string())
        .unwrap_or_else(|| panic!("no step {t}"))
}
