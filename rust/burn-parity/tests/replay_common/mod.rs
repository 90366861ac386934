//! Replay self-consistency, shared by `replay_f32.rs` and `replay_f64.rs` (one process per
//! float type, as burn's ndarray device takes its default float type once per process).
//! The frame decoder and one check per family and optimizer, shared by both float types; the
//! fixture writer is in `fixture.rs`.
//!
//! A run is trained for a few steps with gradients and (Adam/AdamW) moments recorded into
//! memory; the frames are decoded; a state file is written from step k − 1's parameters and
//! moments; step k is replayed; and the replay must give, bit for bit, what training gave at
//! step k: `after:<param>` = the parameters after step k, `loss` = step k's loss, `grad:<param>`
//! = step k's gradients. Training runs the untapped forward pass and replay the tapped one, so
//! this also shows that the taps change no value and no gradient.

use std::collections::HashMap;

use anyhow::Result;
use burn::tensor::{DType, TensorData};
use burn_parity::NoPort;
use parity_common::cli::PortJob;
use parity_common::frames::RawTensor;
use parity_common::replay::{replay_names, ReplayState};
use parity_common::spec::{FloatType, RunSpec};

pub mod fixture;

pub use fixture::{spec, tap_names};

/// One decoded frame: metadata and tensors (dtype, shape, little-endian bytes).
pub struct Frame {
    pub meta: HashMap<String, String>,
    pub tensors: HashMap<String, RawTensor>,
}

/// Decodes a frame stream: each frame a u64 LE byte count and a safetensors buffer.
pub fn decode(mut bytes: &[u8]) -> Vec<Frame> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let body = &bytes[8..8 + n];
        let (_, md) = safetensors::SafeTensors::read_metadata(body).unwrap();
        let st = safetensors::SafeTensors::deserialize(body).unwrap();
        let tensors = st
            .tensors()
            .into_iter()
            .map(|(name, v)| {
                let t = RawTensor {
                    dtype: v.dtype(),
                    shape: v.shape().to_vec(),
                    data: v.data().to_vec(),
                };
                (name, t)
            })
            .collect();
        let meta = md.metadata().clone().unwrap_or_default();
        out.push(Frame { meta, tensors });
        bytes = &bytes[8 + n..];
    }
    out
}

/// Values of a frame tensor widened to f64 (F32 or F64).
pub fn widen(t: &RawTensor) -> Vec<f64> {
    match t.dtype {
        safetensors::Dtype::F32 => t
            .data
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap())))
            .collect(),
        safetensors::Dtype::F64 => t
            .data
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        other => panic!("unexpected dtype {other:?}"),
    }
}

/// A tap's values or gradient ([`parity_common::burn::Taps`]), checked to be in the run
/// dtype `ty`, widened exactly to f64.
pub fn widen_data(d: &TensorData, ty: FloatType) -> Vec<f64> {
    match (d.dtype(), ty) {
        (DType::F32, FloatType::F32) => d
            .as_slice::<f32>()
            .unwrap()
            .iter()
            .map(|&v| f64::from(v))
            .collect(),
        (DType::F64, FloatType::F64) => d.as_slice::<f64>().unwrap().to_vec(),
        (other, _) => panic!("a {} run tapped a tensor of dtype {other:?}", ty.name()),
    }
}

/// The MLP 4 → 6 → 3 (two Linear layers, one ReLU).
pub fn mlp() -> serde_json::Value {
    serde_json::json!({"family": "mlp", "sizes": [4, 6, 3], "activation": "relu"})
}

/// Conv1d(1 → 3, kernel 3) on length 8 → ReLU → flatten (18) → Linear(18 → 3).
pub fn cnn() -> serde_json::Value {
    serde_json::json!({"family": "cnn1d", "in_channels": 1, "channels": 3, "kernel": 3,
        "length": 8, "classes": 3, "activation": "relu", "conv_impl": "conv1d"})
}

/// The tiny transformer: vocab 11, d_model 8, 2 heads, 2 blocks, seq_len 5, burn's own
/// layer norm, softmax and exact GELU.
pub fn transformer() -> serde_json::Value {
    serde_json::json!({"family": "transformer", "vocab": 11, "d_model": 8, "heads": 2,
        "blocks": 2, "seq_len": 5, "layer_norm": "composed", "softmax": "generic",
        "gelu": "erf"})
}

pub fn sgd() -> serde_json::Value {
    serde_json::json!({"name": "sgd", "lr": 0.05})
}

pub fn adam(weight_decay: f64) -> serde_json::Value {
    serde_json::json!({"name": "adam", "lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8,
        "weight_decay": weight_decay})
}

pub fn adamw() -> serde_json::Value {
    serde_json::json!({"name": "adamw", "lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8,
        "weight_decay": 0.01, "implementation": "burn", "bias_correction": "f32"})
}

/// Trains `spec` (its family's port, dispatched as the runner does) and returns its frames,
/// or the error that ended it before its header (a framework error inside the loop ends
/// the stream with a `failed` end frame instead).
pub fn try_train(spec: &RunSpec) -> Result<Vec<Frame>> {
    let mut buf = Vec::new();
    let sink = Box::new(&mut buf);
    burn_parity::run_port::<NoPort>(PortJob::Train { spec, sink })?;
    Ok(decode(&buf))
}

/// Trains `spec` and returns its frames, checking that the run completed: its last frame is
/// the `end` frame with status `complete` and the training time.
pub fn train(spec: &RunSpec) -> Vec<Frame> {
    let frames = try_train(spec).unwrap();
    assert_eq!(frames[0].meta["kind"], "header");
    assert!(frames[0].meta["port"].starts_with("burn_parity::families::"));
    let end = &frames.last().expect("no frames").meta;
    assert_eq!(end["kind"], "end");
    assert_eq!(end["status"], "complete", "{end:?}");
    let seconds: f64 = end["train_seconds"].parse().unwrap();
    assert!(seconds >= 0.0, "train_seconds {seconds}");
    frames
}

/// Writes the state for replaying step `k` from the training frames (parameters and moments
/// after step k − 1; zero moments before step 1) next to the spec's fixture, so in the
/// fixture's temporary folder, and reads it back as the CLI does.
pub fn state(spec: &RunSpec, frames: &[Frame], k: u32) -> ReplayState {
    let before = &frames[k as usize]; // frames[0] is the header, frames[t + 1] step t
    assert_eq!(before.meta["step"], (k - 1).to_string());
    let adam = spec.record.moments;
    let mut raw: Vec<(String, RawTensor)> = Vec::new();
    for p in &spec.params {
        let mut t = before.tensors[&p.name].clone();
        t.shape = p.shape.clone();
        raw.push((p.name.clone(), t.clone()));
        if adam {
            for prefix in ["exp_avg", "exp_avg_sq"] {
                let name = format!("{prefix}:{}", p.name);
                let m = match before.tensors.get(&name) {
                    Some(m) => RawTensor {
                        shape: p.shape.clone(),
                        ..m.clone()
                    },
                    None => {
                        assert_eq!(k, 1, "moments recorded from step 1 on");
                        RawTensor {
                            data: vec![0; t.data.len()],
                            ..t.clone()
                        }
                    }
                };
                raw.push((name, m));
            }
        }
    }
    let path = spec.fixture.with_file_name(format!(
        "{}-{:?}-state-{k}.safetensors",
        spec.experiment, spec.dtype
    ));
    std::fs::write(&path, safetensors::serialize(raw, None).unwrap()).unwrap();
    ReplayState::from_path(&path, k, spec).unwrap()
}

/// Replays step `k` from `state` (the spec's family's port, dispatched as the runner does)
/// and returns its frames.
pub fn replay(spec: &RunSpec, state: &ReplayState) -> Vec<Frame> {
    let mut buf = Vec::new();
    let sink = Box::new(&mut buf);
    burn_parity::run_port::<NoPort>(PortJob::Replay { spec, state, sink }).unwrap();
    decode(&buf)
}

/// Trains, then replays each step of `ks` and checks it bit for bit against training; returns
/// the replay frames of the last.
pub fn self_consistent(spec: &RunSpec, ks: &[u32]) -> Frame {
    let frames = train(spec);
    let mut last = None;
    for &k in ks {
        let state = state(spec, &frames, k);
        let mut out = replay(spec, &state);
        assert_eq!(out.len(), 3);
        let end = out.pop().unwrap();
        let rep = out.pop().unwrap();
        let header = &out[0];
        assert_eq!(header.meta["kind"], "header");
        assert_eq!(header.meta["framework"], "burn");
        assert!(header.meta["optimizer_impl"].starts_with("burn::optim::"));
        assert!(
            header.meta["port"].starts_with("burn_parity::families::"),
            "{}",
            header.meta["port"]
        );
        assert!(!header.meta["replay_note"].is_empty());
        assert_eq!(end.meta["kind"], "end");
        assert_eq!(end.meta["status"], "complete");
        assert_eq!(rep.meta["kind"], "replay");
        assert_eq!(rep.meta["step"], k.to_string());
        assert_eq!(rep.meta["missing"], "", "nothing is missing");
        let mut names: Vec<&String> = rep.tensors.keys().collect();
        // The built-in families name their output with their last tap: no `output`.
        let taps: Vec<String> = tap_names(&spec.model)
            .iter()
            .map(|n| n.strip_suffix(".out").unwrap().to_string())
            .collect();
        let mut expected = replay_names(&taps, false, &spec.params);
        names.sort();
        expected.sort();
        assert_eq!(names, expected.iter().collect::<Vec<_>>());

        let trained = &frames[k as usize + 1];
        assert_eq!(trained.meta["step"], k.to_string());
        let run_dtype = trained.tensors[&spec.params[0].name].dtype;
        for (name, t) in &rep.tensors {
            assert_eq!(t.dtype, run_dtype, "{name} is in the run dtype");
        }
        // Step k's loss: recorded by train widened to F64, by replay in the run dtype.
        let loss = widen(&rep.tensors["loss"]);
        assert_eq!(loss.len(), 1);
        let want = widen(&trained.tensors["loss"]);
        assert_eq!(loss[0].to_bits(), want[0].to_bits(), "step {k} loss");
        for p in &spec.params {
            let after = &rep.tensors[&format!("after:{}", p.name)];
            assert_eq!(
                after.data, trained.tensors[&p.name].data,
                "after:{} at step {k}",
                p.name
            );
            let g = format!("grad:{}", p.name);
            assert_eq!(
                rep.tensors[&g].data, trained.tensors[&g].data,
                "{g} at step {k}"
            );
        }
        last = Some(rep);
    }
    last.unwrap()
}

/// Every case of one float type: MLP with SGD (MSE), Adam (MSE, with and without L2 decay,
/// replaying step 1 from zero moments and later steps from recorded ones) and AdamW
/// (cross-entropy), the CNN with Adam (cross-entropy).
pub fn all_cases_replay_their_training_steps(dtype: &str) {
    let s = spec("mlp-sgd", mlp(), "mse", sgd(), 3, dtype);
    self_consistent(&s, &[1, 2, 3]);
    let s = spec("mlp-adam", mlp(), "mse", adam(0.0), 4, dtype);
    self_consistent(&s, &[1, 2, 4]);
    let s = spec("mlp-adam-l2", mlp(), "cross_entropy", adam(0.01), 3, dtype);
    self_consistent(&s, &[3]);
    let s = spec("mlp-adamw", mlp(), "cross_entropy", adamw(), 3, dtype);
    self_consistent(&s, &[1, 3]);
    let rep = {
        let s = spec("cnn-adam", cnn(), "cross_entropy", adam(0.0), 3, dtype);
        self_consistent(&s, &[2, 3])
    };
    // conv.out and relu.out are [batch 4, channels 3, 8 − 3 + 1], fc.out [4, 3].
    for (name, n) in [("conv.out", 72), ("relu.out", 72), ("fc.out", 12)] {
        assert_eq!(widen(&rep.tensors[name]).len(), n, "{name}");
        assert_eq!(widen(&rep.tensors[&format!("grad:{name}")]).len(), n);
    }
    let relu = widen(&rep.tensors["relu.out"]);
    let conv = widen(&rep.tensors["conv.out"]);
    assert!(
        conv.iter().any(|&v| v < 0.0),
        "the data must exercise the ReLU"
    );
    for (r, c) in relu.iter().zip(&conv) {
        assert_eq!(*r, c.max(0.0));
    }
}

/// A hand check of one intermediate gradient: for MSE with mean reduction over n elements,
/// d loss / d out = 2 (out − y) / n. With batch 4 and 2 outputs, n = 8, so both the formula
/// and burn's backward are exact scalings of out − y and must agree bit for bit. Also
/// `loss` = mean((out − y)²) within rounding, and `relu1.out` = max(fc1.out, 0).
pub fn mse_output_gradient_is_two_residuals_over_n(dtype: &str) {
    let model = serde_json::json!({"family": "mlp", "sizes": [4, 5, 2], "activation": "relu"});
    let s = spec("mlp-mse-hand", model, "mse", sgd(), 2, dtype);
    let frames = train(&s);
    let rep = &replay(&s, &state(&s, &frames, 2))[1];
    // Batch (2 − 1) mod 2 = 1 of the fixture's y [2, 4, 2].
    let bytes = std::fs::read(&s.fixture).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let y: Vec<f64> = st.tensor("y").unwrap().data()[8 * 4..]
        .chunks_exact(4)
        .map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap())))
        .collect();
    let out = widen(&rep.tensors["fc2.out"]);
    let grad = widen(&rep.tensors["grad:fc2.out"]);
    assert_eq!((out.len(), grad.len(), y.len()), (8, 8, 8));
    let f32_run = dtype == "f32";
    let mut sum = 0.0;
    for i in 0..8 {
        // out − y in the run dtype (y is a float32 value; exact in f64).
        let diff = if f32_run {
            f64::from(out[i] as f32 - y[i] as f32)
        } else {
            out[i] - y[i]
        };
        assert_eq!(grad[i], 2.0 * diff / 8.0, "grad:fc2.out[{i}]");
        sum += diff * diff;
    }
    let loss = widen(&rep.tensors["loss"])[0];
    let tol = if f32_run { 1e-6 } else { 1e-14 };
    assert!(
        (loss - sum / 8.0).abs() <= tol * loss.abs().max(1e-3),
        "loss {loss} vs {}",
        sum / 8.0
    );
    let fc1 = widen(&rep.tensors["fc1.out"]);
    let relu1 = widen(&rep.tensors["relu1.out"]);
    assert!(
        fc1.iter().any(|&v| v < 0.0),
        "the data must exercise the ReLU"
    );
    for (r, f) in relu1.iter().zip(&fc1) {
        assert_eq!(*r, f.max(0.0));
    }
}

/// The tap is an identity on every bit, negative zero included (`x + (−0) = x`, whereas
/// `−0 + (+0) = +0`), and its gradient is the gradient of the tapped tensor.
pub fn a_negative_zero_tap_keeps_every_bit(dtype: &str) {
    use burn::tensor::Tensor;
    use burn_parity::device::{self, Host};
    use parity_common::burn::Taps;
    use parity_common::spec::DeviceKind;

    let ty = if dtype == "f32" {
        FloatType::F32
    } else {
        FloatType::F64
    };
    let dev = device::open(DeviceKind::Cpu, ty).unwrap();
    let x = [-0.0f64, 0.0, 1.5, -2.0, 3.25, -0.0];
    let h = device::float_tensor_from_f64(&x, [2, 3], ty, &dev).require_grad();
    let bits = |t: Tensor<2>| -> Vec<u64> {
        Host::read(t.inner(), ty)
            .unwrap()
            .widened()
            .iter()
            .map(|v| v.to_bits())
            .collect()
    };
    let mut taps = Taps::active(&dev);
    let tapped = taps.tap("h", h.clone());
    assert_eq!(
        bits(tapped.clone()),
        bits(h.clone()),
        "the tap changes no bit"
    );
    let plus_zero = h.clone() + h.zeros_like();
    assert_ne!(
        bits(plus_zero),
        bits(h.clone()),
        "a +0 tap would turn −0 into +0"
    );
    assert_eq!(taps.paths(), ["h"]);
    // loss = Σ c ⊙ tapped, so d loss / d h = c, through the tap as through h itself.
    let c = [0.5f64, -1.0, 2.0, 0.25, -0.75, 4.0];
    let c_t = device::float_tensor_from_f64(&c, [2, 3], ty, &dev);
    let grads = (tapped * c_t).sum().backward();
    let g_h = Host::read(h.grad(&grads).unwrap(), ty).unwrap().widened();
    let (name, g_tap) = taps.grads(&grads).pop().unwrap();
    assert_eq!(name, "h");
    assert_eq!(widen_data(&g_tap.unwrap(), ty), c.to_vec());
    assert_eq!(g_h, c.to_vec());
    let (_, value) = taps.values().pop().unwrap();
    assert_eq!(
        widen_data(&value, ty)
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>(),
        x.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
}

/// The recorded moments are burn's: after step 1, `exp_avg` = (1 − β₁)·g and `exp_avg_sq` =
/// (1 − β₂)·g² elementwise, with burn's float32 factors, in PyTorch layout like `grad:`; none
/// at step 0.
pub fn recorded_moments_are_burns_first_step(dtype: &str) {
    let s = spec("mlp-moments", mlp(), "mse", adam(0.0), 1, dtype);
    let frames = train(&s);
    assert!(!frames[1].tensors.keys().any(|n| n.starts_with("exp_avg")));
    let step1 = &frames[2];
    let (f1, f2) = (f64::from(1.0f32 - 0.9f32), f64::from(1.0f32 - 0.999f32));
    for p in &s.params {
        let g = widen(&step1.tensors[&format!("grad:{}", p.name)]);
        let m = widen(&step1.tensors[&format!("exp_avg:{}", p.name)]);
        let v = widen(&step1.tensors[&format!("exp_avg_sq:{}", p.name)]);
        for i in 0..g.len() {
            let (want_m, want_v) = if dtype == "f32" {
                let g = g[i] as f32;
                (f64::from(g * f1 as f32), f64::from(g * g * f2 as f32))
            } else {
                (g[i] * f1, g[i] * g[i] * f2)
            };
            assert_eq!(m[i], want_m, "exp_avg:{}[{i}]", p.name);
            assert_eq!(v[i], want_v, "exp_avg_sq:{}[{i}]", p.name);
        }
    }
}

/// The transformer with SGD, Adam (L2 decay) and AdamW replays its training steps bit for bit
/// (step 1 from zero moments, later steps from recorded ones), every intermediate of
/// `TransformerConfig::tap_names` with its gradient included; its logits `head.out` are
/// `[batch 3, seq_len 5, vocab 11]`, and `grad:head.out` is (softmax − one-hot) / 15 per
/// position, so each position's gradient sums to zero within rounding; the attention
/// weights `blocks.1.attn.softmax.out` `[3, 2 heads, 5, 5]` sum to one over the keys.
pub fn transformer_replays_its_training_steps(dtype: &str) {
    let s = spec("tf-sgd", transformer(), "cross_entropy", sgd(), 3, dtype);
    self_consistent(&s, &[1, 3]);
    let s = spec(
        "tf-adam",
        transformer(),
        "cross_entropy",
        adam(0.01),
        3,
        dtype,
    );
    self_consistent(&s, &[1, 2, 3]);
    let rep = {
        let s = spec(
            "tf-adamw",
            transformer(),
            "cross_entropy",
            adamw(),
            3,
            dtype,
        );
        self_consistent(&s, &[2, 3])
    };
    let weights = widen(&rep.tensors["blocks.1.attn.softmax.out"]);
    assert_eq!(weights.len(), 3 * 2 * 5 * 5);
    for row in weights.chunks_exact(5) {
        let sum: f64 = row.iter().sum();
        assert!((sum - 1.0).abs() <= 1e-6, "attention weights sum to {sum}");
    }
    let logits = widen(&rep.tensors["head.out"]);
    let grad = widen(&rep.tensors["grad:head.out"]);
    assert_eq!((logits.len(), grad.len()), (3 * 5 * 11, 3 * 5 * 11));
    let tol = if dtype == "f32" { 1e-7 } else { 1e-16 };
    for row in grad.chunks_exact(11) {
        let sum: f64 = row.iter().sum();
        assert!(
            sum.abs() <= tol,
            "a position's logit gradient sums to {sum}"
        );
        assert_eq!(
            row.iter().filter(|&&g| g < 0.0).count(),
            1,
            "one target per position"
        );
    }
}
