//! Transformer checks shared by `transformer_f32.rs` and `transformer_f64.rs` (one process per
//! float type, as burn's ndarray device takes its default float type once per process), on
//! the tiny transformer of [`replay_common::transformer`] (vocab 11, d_model 8, 2 heads,
//! 2 blocks, seq_len 5) with its fixture of 2 batches of 3 sequences.

use burn::tensor::{Int, Tensor, TensorData};
use burn_parity::device::{self, Host};
use burn_parity::model::{self, Net};
use burn_parity::optim::Stepper;
use burn_parity::taps::Taps;
use burn_parity::transformer::Transformer;
use parity_common::spec::{DeviceKind, FloatType, Optimizer, RunSpec};

use crate::replay_common::{self, adam, adamw, sgd, transformer, widen};
use crate::tempdir::Fixture;

const B: usize = 3;
const T: usize = 5;
const V: usize = 11;
const D: usize = 8;
const HEADS: usize = 2;

fn tiny(tag: &str, optimizer: serde_json::Value, steps: u32, dtype: &str) -> Fixture {
    replay_common::spec(tag, transformer(), "cross_entropy", optimizer, steps, dtype)
}

fn load(spec: &RunSpec) -> (Net, model::Data, burn::tensor::Device) {
    let dev = device::open(DeviceKind::Cpu, spec.dtype).unwrap();
    let (net, data) = Net::load(spec, &dev).unwrap();
    (net, data, dev)
}

fn as_transformer(net: &Net) -> &Transformer {
    match net {
        Net::Transformer(t) => t,
        _ => panic!("a transformer spec loads a transformer"),
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
    assert_eq!(net.forward_step(&data, 1).dims(), [B * T, V]);
    let tf = as_transformer(&net);
    let x: Vec<i64> = (0..B * T).map(|i| ((i * 5 + 2) % V) as i64).collect();
    let base = tf.forward(tokens(&x, &dev));
    assert_eq!(base.dims(), [B, T, V]);
    let base = bits(base, spec.dtype);
    for t in 0..T {
        let mut changed = x.clone();
        for b in 0..B {
            changed[b * T + t] = (changed[b * T + t] + 3) % V as i64;
        }
        let out = bits(tf.forward(tokens(&changed, &dev)), spec.dtype);
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
    let attn = &as_transformer(&net).blocks[0].attn;
    let a: Vec<f64> = (0..B * T * D)
        .map(|i| ((i * 37 % 29) as f64 - 14.0) / 8.0)
        .collect();
    let a_t = device::float_tensor_from_f64(&a, [B, T, D], ty, &dev);
    let a = Host::read(a_t.clone().inner(), ty).unwrap().widened();
    let context = Host::read(attn.context(a_t.clone()).inner(), ty)
        .unwrap()
        .widened();
    let output = Host::read(attn.forward(a_t).inner(), ty).unwrap().widened();
    let params: std::collections::HashMap<String, Vec<f64>> = net
        .export(ty)
        .unwrap()
        .into_iter()
        .map(|(n, h)| (n, h.widened()))
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

/// Every parameter, exported after loading (PyTorch layout, run dtype), is the fixture's
/// float32 value bit for bit (widened exactly in float64), and setting the exported values
/// again gives the same export; the names are the spec's, in state_dict order.
pub fn export_after_load_is_the_fixture(dtype: &str) {
    let spec = tiny("tf-export", adam(0.0), 1, dtype);
    let (mut net, _, dev) = load(&spec);
    let ty = spec.dtype;
    let bytes = std::fs::read(&spec.fixture).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let exported = net.export(ty).unwrap();
    let names: Vec<&str> = exported.iter().map(|(n, _)| n.as_str()).collect();
    let want: Vec<&str> = spec.params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, want);
    for (name, host) in &exported {
        let view = st.tensor(name).unwrap();
        let fixture: Vec<u64> = view
            .data()
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap())).to_bits())
            .collect();
        let got: Vec<u64> = host.widened().iter().map(|v| v.to_bits()).collect();
        assert_eq!(got, fixture, "{name}");
        assert_eq!(matches!(host, Host::F64(_)), ty == FloatType::F64);
    }
    let infos = net.params();
    let head = infos.iter().find(|p| p.name == "head.weight").unwrap();
    assert_eq!(
        (head.burn_shape.clone(), head.linear),
        (vec![D, V], Some((D, V)))
    );
    let emb = infos.iter().find(|p| p.name == "tok_emb.weight").unwrap();
    assert_eq!((emb.burn_shape.clone(), emb.linear), (vec![V, D], None));
    let values: Vec<(String, Vec<f64>)> = exported
        .iter()
        .map(|(n, h)| (n.clone(), h.widened()))
        .collect();
    let refs: Vec<(String, &[f64])> = values
        .iter()
        .map(|(n, v)| (n.clone(), v.as_slice()))
        .collect();
    net.set_params(&refs, ty, &dev).unwrap();
    assert_eq!(net.export(ty).unwrap(), exported);
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
    let mut opt = Stepper::new(&spec.optimizer, false).unwrap();
    let run = |net, opt: &mut Stepper| {
        burn_parity::train::step(
            &spec,
            net,
            &data,
            1,
            opt,
            &mut Taps::off(),
            |_, _, _| Ok(()),
        )
        .unwrap()
    };
    let (net, before) = run(net, &mut opt);
    let (_, after) = run(net, &mut opt);
    let (before, after) = (before.scalar().unwrap(), after.scalar().unwrap());
    assert!(after < before, "SGD step: loss {before} → {after}");
}

/// The candle-side settings are refused by name, at load (so by `train` and `replay` too).
pub fn candle_side_settings_are_refused(dtype: &str) {
    for (field, value) in [
        ("layer_norm", "fused"),
        ("softmax", "last_dim"),
        ("gelu", "tanh"),
    ] {
        let mut model = transformer();
        model[field] = serde_json::json!(value);
        let spec = replay_common::spec("tf-refused", model, "cross_entropy", sgd(), 1, dtype);
        let dev = device::open(DeviceKind::Cpu, spec.dtype).unwrap();
        let err = Net::load(&spec, &dev).err().expect("refused");
        let msg = format!("{err:#}");
        assert!(msg.contains("is a candle-side setting"), "{msg}");
        assert!(msg.contains(field), "{msg}");
        let err = burn_parity::train::run(&spec, Vec::new()).unwrap_err();
        assert!(format!("{err:#}").contains("candle-side"), "{err:#}");
    }
}

/// A token id outside `0..vocab` in `x` or `y` is refused at load, naming the tensor.
pub fn tokens_outside_the_vocabulary_are_refused(dtype: &str) {
    for name in ["x", "y"] {
        let spec = tiny(&format!("tf-bad-{name}"), sgd(), 1, dtype);
        let bytes = std::fs::read(&spec.fixture).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let mut raw: Vec<(String, parity_common::frames::RawTensor)> = st
            .tensors()
            .into_iter()
            .map(|(n, v)| {
                let mut data = v.data().to_vec();
                if n == name {
                    data[8..16].copy_from_slice(&(V as i64).to_le_bytes());
                }
                let (dtype, shape) = (v.dtype(), v.shape().to_vec());
                (n, parity_common::frames::RawTensor { dtype, shape, data })
            })
            .collect();
        raw.sort_by(|a, b| a.0.cmp(&b.0));
        std::fs::write(&spec.fixture, safetensors::serialize(raw, None).unwrap()).unwrap();
        let dev = device::open(DeviceKind::Cpu, spec.dtype).unwrap();
        let err = Net::load(&spec, &dev).err().expect("refused");
        let msg = format!("{err:#}");
        assert!(msg.contains(&format!("{name} holds token {V}")), "{msg}");
    }
}

/// The replay's taps on the transformer: every name of `forward_names` but `loss`, in
/// forward order, each with its PyTorch element count (`pos_emb.out` `[1, T, d]` here,
/// `[T, d]` in PyTorch); the tapped logits are bit for bit the untapped ones, and every tap
/// receives a gradient.
pub fn taps_name_every_module_output_in_forward_order(dtype: &str) {
    let spec = tiny("tf-taps", sgd(), 1, dtype);
    let (net, _, dev) = load(&spec);
    let tf = as_transformer(&net);
    let x: Vec<i64> = (0..B * T).map(|i| ((i * 5 + 2) % V) as i64).collect();
    let mut taps = Taps::on(&dev);
    let tapped = tf.forward_tapped(tokens(&x, &dev), &mut taps);
    let values = taps.values(spec.dtype).unwrap();
    let names: Vec<&str> = values.iter().map(|(n, _)| n.as_str()).collect();
    let mut want = parity_common::replay::forward_names(&spec.model);
    assert_eq!(want.pop().as_deref(), Some("loss"));
    assert_eq!(names, want);
    assert_eq!(names[12], "blocks.0.mlp.gelu.out");
    let len = |n: &str| {
        values
            .iter()
            .find(|(m, _)| m == n)
            .unwrap()
            .1
            .widened()
            .len()
    };
    assert_eq!(len("pos_emb.out"), T * D);
    assert_eq!(len("blocks.1.attn.scores.out"), B * HEADS * T * T);
    assert_eq!(len("blocks.1.attn.softmax.out"), B * HEADS * T * T);
    assert_eq!(len("blocks.0.mlp.gelu.out"), B * T * 4 * D);
    assert_eq!(len("head.out"), B * T * V);
    let untapped = bits(tf.forward(tokens(&x, &dev)), spec.dtype);
    assert_eq!(bits(tapped.clone(), spec.dtype), untapped);
    let grads = tapped.sum().backward();
    for (name, g) in taps.grads(&grads, spec.dtype).unwrap() {
        assert!(g.is_some(), "no gradient at {name}");
    }
}
