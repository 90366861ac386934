//! Transformer checks shared by `transformer_f32.rs` and `transformer_f64.rs` (one process per
//! float type, as burn's ndarray device takes its default float type once per process), on
//! the tiny transformer of [`replay_common::transformer`] (vocab 11, d_model 8, 2 heads,
//! 2 blocks, seq_len 5) with its fixture of 2 batches of 3 sequences.

use burn::tensor::{Int, Tensor, TensorData};
use burn_parity::device::{self, Host};
use burn_parity::families::transformer::Transformer;
use burn_parity::net::{flat_output, Data, Net, NetOptimizer};
use burn_parity::optim::Stepper;
use burn_parity::train::{gradients, Started};
use parity_common::burn::{BurnModel, Input, Output, Taps};
use parity_common::frames::RawTensor;
use parity_common::optim::{Parameters, RunOptimizer};
use parity_common::replay::{Moments, ReplayState, StateTensor};
use parity_common::spec::{FloatType, Optimizer, RunSpec};

use crate::replay_common::{self, adam, adamw, sgd, tap_names, transformer, widen, widen_data};
use crate::tempdir::Fixture;

const B: usize = 3;
const T: usize = 5;
const V: usize = 11;
const D: usize = 8;
const HEADS: usize = 2;

fn tiny(tag: &str, optimizer: serde_json::Value, steps: u32, dtype: &str) -> Fixture {
    replay_common::spec(tag, transformer(), "cross_entropy", optimizer, steps, dtype)
}

/// The transformer port loaded from the fixture of `spec` (as `train` loads it), its data
/// and its device.
fn load(spec: &RunSpec) -> (Net<Transformer>, Data, burn::tensor::Device) {
    let Started { dev, net, data } = Started::<Transformer>::new(spec, None).unwrap();
    (net, data, dev)
}

/// The port's forward pass ([`BurnModel::forward`], as the runner calls it) on token ids `x`:
/// its logits `[B, T, V]`.
fn logits(tf: &Transformer, x: Tensor<2, Int>, taps: &mut Taps) -> Tensor<3> {
    match BurnModel::forward(tf, Input::Tokens(x), taps).unwrap() {
        Output::Rank3(t) => t,
        other => panic!("the transformer's logits are [B, T, V], got {other:?}"),
    }
}

/// The parameters as every step frame records them (PyTorch names and layout, run dtype).
fn recorded(net: &Net<Transformer>, ty: FloatType) -> Vec<(String, RawTensor)> {
    net.frame_params(ty, &|_| true).unwrap()
}

/// The safetensors dtype of the run dtype `ty`.
fn st_dtype(ty: FloatType) -> safetensors::Dtype {
    match ty {
        FloatType::F32 => safetensors::Dtype::F32,
        FloatType::F64 => safetensors::Dtype::F64,
    }
}

fn bits<const N: usize>(t: Tensor<N>, ty: FloatType) -> Vec<u64> {
    let h = Host::read(t.inner(), ty).unwrap();
    assert_eq!(matches!(h, Host::F64(_)), ty == FloatType::F64, "run dtype");
    h.widened().iter().map(|v| v.to_bits()).collect()
}

fn tokens(v: &[i64], dev: &burn::tensor::Device) -> Tensor<2, Int> {
    Tensor::from_data(TensorData::new(v.to_vec(), [B, T]), dev)
}

/// Logits are `[batch, seq_len, vocab]` (`[batch·seq_len, vocab]` as the loss takes them), and
/// changing the token at position t changes no logit at a position before t, bit for bit,
/// while it does change position t's.
pub fn forward_shapes_and_the_causal_mask(dtype: &str) {
    let spec = tiny("tf-forward", sgd(), 1, dtype);
    let (net, data, dev) = load(&spec);
    let out = net
        .forward(data.input(data.index(1)), &mut Taps::inactive())
        .unwrap();
    let (shape, flat) = flat_output(&spec, out);
    assert_eq!((shape, flat.dims()), (vec![B, T, V], [B * T, V]));
    let tf = &net.model;
    let x: Vec<i64> = (0..B * T).map(|i| ((i * 5 + 2) % V) as i64).collect();
    let base = logits(tf, tokens(&x, &dev), &mut Taps::inactive());
    assert_eq!(base.dims(), [B, T, V]);
    let base = bits(base, spec.dtype);
    for t in 0..T {
        let mut changed = x.clone();
        for b in 0..B {
            changed[b * T + t] = (changed[b * T + t] + 3) % V as i64;
        }
        let out = bits(
            logits(tf, tokens(&changed, &dev), &mut Taps::inactive()),
            spec.dtype,
        );
        for b in 0..B {
            for s in 0..T {
                let at = |v: &[u64]| v[(b * T + s) * V..(b * T + s + 1) * V].to_vec();
                if s < t {
                    assert_eq!(at(&out), at(&base), "token {t} reached position {s}");
                } else if s == t {
                    assert_ne!(at(&out), at(&base), "token {t} must change its own logits");
                }
            }
        }
    }
}

/// Block 0's attention against the same computation written out in f64 from the
/// PyTorch-layout weights: per head h, softmax over keys j ≤ i of q_i·k_j / √dh, times v,
/// then `attn.out`. Each head's columns of the context (head h in columns h·dh .. (h+1)·dh)
/// and the whole output must agree to rounding (float64: 1e-12; float32: 1e-5, values of order 1).
pub fn one_attention_head_by_hand(dtype: &str) {
    let spec = tiny("tf-attn", sgd(), 1, dtype);
    let (net, _, dev) = load(&spec);
    let ty = spec.dtype;
    let attn = &net.model.blocks[0].attn;
    let a: Vec<f64> = (0..B * T * D)
        .map(|i| ((i * 37 % 29) as f64 - 14.0) / 8.0)
        .collect();
    let a_t = device::float_tensor_from_f64(&a, [B, T, D], ty, &dev);
    let a = Host::read(a_t.clone().inner(), ty).unwrap().widened();
    let context = Host::read(attn.context(a_t.clone()).inner(), ty)
        .unwrap()
        .widened();
    let output = Host::read(attn.forward(a_t).inner(), ty).unwrap().widened();
    let params: std::collections::HashMap<String, Vec<f64>> = recorded(&net, ty)
        .into_iter()
        .map(|(n, t)| (n, widen(&t)))
        .collect();
    let p = |n: &str| &params[&format!("blocks.0.attn.{n}")];
    // y[b, t, o] = bias[o] + Σ_i x[b, t, i] W[o, i] (PyTorch layout).
    // The key projection has no bias.
    let zeros = vec![0.0; D];
    let lin = |x: &[f64], m: &str| -> Vec<f64> {
        let w = p(&format!("{m}.weight"));
        let bias = params
            .get(&format!("blocks.0.attn.{m}.bias"))
            .unwrap_or(&zeros);
        let mut y = vec![0.0; B * T * D];
        for r in 0..B * T {
            for o in 0..D {
                y[r * D + o] = bias[o] + (0..D).map(|i| x[r * D + i] * w[o * D + i]).sum::<f64>();
            }
        }
        y
    };
    let (q, k, v) = (lin(&a, "q"), lin(&a, "k"), lin(&a, "v"));
    let dh = D / HEADS;
    let mut ctx = vec![0.0; B * T * D];
    for b in 0..B {
        for h in 0..HEADS {
            for i in 0..T {
                let col = |x: &[f64], t: usize, c: usize| x[(b * T + t) * D + h * dh + c];
                let s: Vec<f64> = (0..=i)
                    .map(|j| (0..dh).map(|c| col(&q, i, c) * col(&k, j, c)).sum::<f64>())
                    .map(|s| s / (dh as f64).sqrt())
                    .collect();
                let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|s| (s - max).exp()).collect();
                let z: f64 = e.iter().sum();
                for c in 0..dh {
                    ctx[(b * T + i) * D + h * dh + c] =
                        (0..=i).map(|j| e[j] / z * col(&v, j, c)).sum::<f64>();
                }
            }
        }
    }
    let out = lin(&ctx, "out");
    let tol = if ty == FloatType::F64 { 1e-12 } else { 1e-5 };
    for r in 0..B * T {
        for c in 0..D {
            let i = r * D + c;
            assert!(
                (context[i] - ctx[i]).abs() <= tol,
                "context[{r}, {c}]: burn {} by hand {}",
                context[i],
                ctx[i]
            );
        }
    }
    for i in 0..B * T * D {
        assert!(
            (output[i] - out[i]).abs() <= tol,
            "out[{i}]: burn {} by hand {}",
            output[i],
            out[i]
        );
    }
    // The first query attends to itself only: its context is v at position 0, up to rounding.
    for c in 0..D {
        assert!((context[c] - v[c]).abs() <= tol);
    }
}

/// Every parameter, recorded after loading (PyTorch layout, run dtype, as the step frames
/// record them), is the fixture's float32 value bit for bit (widened exactly in float64),
/// and loading the recorded values again (as a replay loads its state) gives the same
/// record; the names are the spec's, in state_dict order.
pub fn export_after_load_is_the_fixture(dtype: &str) {
    let spec = tiny("tf-export", adam(0.0), 1, dtype);
    let (net, _, _) = load(&spec);
    let ty = spec.dtype;
    let bytes = std::fs::read(&spec.fixture).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let exported = recorded(&net, ty);
    let names: Vec<&str> = exported.iter().map(|(n, _)| n.as_str()).collect();
    let want: Vec<&str> = spec.params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, want);
    for (name, raw) in &exported {
        let view = st.tensor(name).unwrap();
        let fixture: Vec<u64> = view
            .data()
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap())).to_bits())
            .collect();
        let got: Vec<u64> = widen(raw).iter().map(|v| v.to_bits()).collect();
        assert_eq!(got, fixture, "{name}");
        assert_eq!(raw.dtype, st_dtype(ty));
    }
    let infos = &net.params;
    let names: Vec<&str> = infos.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, want);
    let head = infos.iter().find(|p| p.name == "head.weight").unwrap();
    assert_eq!(
        (head.burn_shape.clone(), head.linear),
        (vec![D, V], Some((D, V)))
    );
    let emb = infos.iter().find(|p| p.name == "tok_emb.weight").unwrap();
    assert_eq!((emb.burn_shape.clone(), emb.linear), (vec![V, D], None));
    // The recorded values as a replay's state (PyTorch names, shapes and layout), loaded
    // into a fresh port.
    let state_tensor = |(name, raw): &(String, RawTensor)| {
        let shape = spec
            .params
            .iter()
            .find(|p| &p.name == name)
            .unwrap()
            .shape
            .clone();
        StateTensor {
            shape,
            values: widen(raw),
        }
    };
    let params: Vec<(String, StateTensor)> = exported
        .iter()
        .map(|p| (p.0.clone(), state_tensor(p)))
        .collect();
    let zeros: Vec<StateTensor> = params
        .iter()
        .map(|(_, t)| StateTensor {
            shape: t.shape.clone(),
            values: vec![0.0; t.values.len()],
        })
        .collect();
    let state = ReplayState {
        step: 1,
        params,
        moments: Some(Moments {
            exp_avg: zeros.clone(),
            exp_avg_sq: zeros,
            steps_taken: 0,
        }),
    };
    let again = Started::<Transformer>::new(&spec, Some(&state))
        .unwrap()
        .net;
    let twice = recorded(&again, ty);
    assert_eq!(twice.len(), exported.len());
    for ((n1, a), (n2, b)) in twice.iter().zip(&exported) {
        assert_eq!(n1, n2);
        assert_eq!(
            (a.dtype, &a.shape, &a.data),
            (b.dtype, &b.shape, &b.data),
            "{n1}"
        );
    }
}

/// Three training steps with Adam, AdamW and SGD give finite parameters, gradients, moments
/// and losses; and one SGD step with a small learning rate lowers the loss of its batch.
pub fn training_is_finite_and_sgd_descends(dtype: &str) {
    for (tag, opt) in [
        ("tf-train-adam", adam(0.01)),
        ("tf-train-adamw", adamw()),
        ("tf-train-sgd", sgd()),
    ] {
        let spec = tiny(tag, opt, 3, dtype);
        let frames = replay_common::train(&spec);
        assert_eq!(frames.len(), 6, "header, steps 0 to 3, end");
        for f in &frames[1..5] {
            for (name, t) in &f.tensors {
                assert!(widen(t).iter().all(|v| v.is_finite()), "{tag} {name}");
            }
        }
        assert!(frames[4].tensors.contains_key("loss"));
        if !matches!(spec.optimizer, Optimizer::Sgd { .. }) {
            assert!(frames[4]
                .tensors
                .contains_key("exp_avg:blocks.1.attn.q.weight"));
        }
    }
    let spec = tiny(
        "tf-descent",
        serde_json::json!({"name": "sgd", "lr": 1e-3}),
        2,
        dtype,
    );
    let (net, data, _) = load(&spec);
    let mut opt = NetOptimizer::<Transformer>::new(Stepper::new(&spec.optimizer, false).unwrap());
    // Step 1 as `train` takes it: forward (taps inactive) → loss → backward → burn's SGD;
    // returns the parameters after it and the loss before it.
    let run = |net: Net<Transformer>, opt: &mut NetOptimizer<Transformer>| {
        let (value, grads) = gradients(&spec, &net, &data, 1).unwrap();
        (opt.update(&spec, 1, net, grads).unwrap(), value)
    };
    let (net, before) = run(net, &mut opt);
    let (_, after) = run(net, &mut opt);
    assert!(after < before, "SGD step: loss {before} → {after}");
}

/// The candle-side settings are refused by name when the port is initialised (so by `train`
/// and `replay` too, before any frame).
pub fn candle_side_settings_are_refused(dtype: &str) {
    for (field, value) in [
        ("layer_norm", "fused"),
        ("softmax", "last_dim"),
        ("gelu", "tanh"),
        ("gelu", "gelu_erf"),
    ] {
        let mut model = transformer();
        model[field] = serde_json::json!(value);
        let spec = replay_common::spec("tf-refused", model, "cross_entropy", sgd(), 1, dtype);
        let err = Started::<Transformer>::new(&spec, None)
            .err()
            .expect("refused");
        let msg = format!("{err:#}");
        assert!(msg.contains("initialising the port"), "{msg}");
        assert!(msg.contains("is a candle-side setting"), "{msg}");
        assert!(msg.contains(field), "{msg}");
        let err = replay_common::try_train(&spec).err().expect("refused");
        assert!(format!("{err:#}").contains("candle-side"), "{err:#}");
    }
}

/// Token ids outside `0..vocab` (in `x` or in `y`) are not refused when the fixture is read;
/// they fail step 1 inside burn (a panic of burn-ndarray's: `x` in the embedding's lookup,
/// `y` in the cross-entropy's gather), which ends the stream with a `failed` end frame
/// after step 0's. Float values where token ids are expected are refused by the fixture's
/// reader, naming the tensor.
pub fn tokens_outside_the_vocabulary_are_refused(dtype: &str) {
    // Rewrites tensor `name` of the fixture of `spec` with `edit`.
    let rewrite = |spec: &RunSpec, name: &str, edit: &dyn Fn(RawTensor) -> RawTensor| {
        let bytes = std::fs::read(&spec.fixture).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let mut raw: Vec<(String, RawTensor)> = st
            .tensors()
            .into_iter()
            .map(|(n, v)| {
                let t = RawTensor {
                    dtype: v.dtype(),
                    shape: v.shape().to_vec(),
                    data: v.data().to_vec(),
                };
                let t = if n == name { edit(t) } else { t };
                (n, t)
            })
            .collect();
        raw.sort_by(|a, b| a.0.cmp(&b.0));
        std::fs::write(&spec.fixture, safetensors::serialize(raw, None).unwrap()).unwrap();
    };
    for name in ["x", "y"] {
        let spec = tiny(&format!("tf-bad-{name}"), sgd(), 1, dtype);
        rewrite(&spec, name, &|mut t| {
            t.data[8..16].copy_from_slice(&(V as i64).to_le_bytes());
            t
        });
        let frames = replay_common::try_train(&spec).unwrap();
        let end = &frames.last().unwrap().meta;
        assert_eq!(end["kind"], "end");
        assert_eq!(
            (end["status"].as_str(), end["step"].as_str()),
            ("failed", "1"),
            "{name}: {end:?}"
        );
        assert!(end["error"].starts_with("panic: "), "{name}: {end:?}");
        assert_eq!(frames.len(), 3, "header, step 0, end");
    }
    for name in ["x", "y"] {
        let spec = tiny(&format!("tf-float-{name}"), sgd(), 1, dtype);
        rewrite(&spec, name, &|t| {
            let values: Vec<f32> = t
                .data
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as f32)
                .collect();
            RawTensor {
                shape: t.shape,
                ..RawTensor::from_f32(&values)
            }
        });
        let err = Started::<Transformer>::new(&spec, None)
            .err()
            .expect("refused");
        let msg = format!("{err:#}");
        assert!(msg.contains(&format!("{name} must be int64 here")), "{msg}");
        let err = replay_common::try_train(&spec).err().expect("refused");
        assert!(format!("{err:#}").contains("must be int64"), "{err:#}");
    }
}

/// The replay's taps on the transformer: every name of `TransformerConfig::tap_names`, in
/// forward order, each with its PyTorch element count (`pos_emb.out` `[1, T, d]` here,
/// `[T, d]` in PyTorch); the tapped logits are bit for bit the untapped ones, and every tap
/// receives a gradient.
pub fn taps_name_every_module_output_in_forward_order(dtype: &str) {
    let spec = tiny("tf-taps", sgd(), 1, dtype);
    let (net, _, dev) = load(&spec);
    let tf = &net.model;
    let x: Vec<i64> = (0..B * T).map(|i| ((i * 5 + 2) % V) as i64).collect();
    let mut taps = Taps::active(&dev);
    let tapped = logits(tf, tokens(&x, &dev), &mut taps);
    let values = taps.values();
    let names: Vec<String> = values.iter().map(|(n, _)| format!("{n}.out")).collect();
    assert_eq!(names, tap_names(&spec.model));
    assert_eq!(taps.paths().len(), names.len());
    assert_eq!(names[12], "blocks.0.mlp.gelu.out");
    let len = |n: &str| {
        let (_, v) = values
            .iter()
            .find(|(m, _)| format!("{m}.out") == n)
            .unwrap();
        widen_data(v, spec.dtype).len()
    };
    assert_eq!(len("pos_emb.out"), T * D);
    assert_eq!(len("blocks.1.attn.scores.out"), B * HEADS * T * T);
    assert_eq!(len("blocks.1.attn.softmax.out"), B * HEADS * T * T);
    assert_eq!(len("blocks.0.mlp.gelu.out"), B * T * 4 * D);
    assert_eq!(len("head.out"), B * T * V);
    let untapped = bits(
        logits(tf, tokens(&x, &dev), &mut Taps::inactive()),
        spec.dtype,
    );
    assert_eq!(bits(tapped.clone(), spec.dtype), untapped);
    let grads = tapped.sum().backward();
    for (name, g) in taps.grads(&grads) {
        assert!(g.is_some(), "no gradient at {name}");
    }
}
