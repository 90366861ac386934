//! Forward-pass layout checks shared by `forward_f32.rs` and `forward_f64.rs`. They are
//! separate test binaries because burn's ndarray device takes its default float type once
//! per process.
//!
//! A fixture is written in PyTorch layout (`fc.weight` `[out, in]`), loaded by
//! [`Net::load`], and the forward pass is compared with the same model written out as loops
//! over the PyTorch-layout values (PyTorch's `F.linear(x, W, b) = x Wᵀ + b`, `F.conv1d`,
//! ReLU, `flatten(1)`). Small dyadic values keep every product and sum exact, so the
//! check is equality; weights are not square, so reading `[out, in]` as `[in, out]` would
//! be caught by the values, not only by a shape.

use burn::tensor::Tensor;
use burn_parity::device::{self, Host};
use burn_parity::model::Net;
use parity_common::frames::RawTensor;
use parity_common::spec::{DeviceKind, FloatType, Model, RunSpec};

use crate::tempdir::{Fixture, TempDir};

/// Writes a fixture (float32 tensors and optional int64 labels `y`) to a temporary folder
/// and returns a one-step SGD run spec for it, with the folder (removed when dropped).
fn fixture_spec(
    tag: &str,
    model: serde_json::Value,
    loss: &str,
    tensors: Vec<(&str, Vec<usize>, Vec<f32>)>,
    labels: Option<(Vec<usize>, Vec<i64>)>,
    dtype: &str,
) -> Fixture {
    let dir = TempDir::new("test");
    let path = dir.path().join(format!("{tag}-{dtype}.safetensors"));
    let mut raw: Vec<(String, RawTensor)> = tensors
        .into_iter()
        .map(|(n, shape, v)| {
            let mut t = RawTensor::from_f32(&v);
            t.shape = shape;
            (n.to_string(), t)
        })
        .collect();
    if let Some((shape, v)) = labels {
        let data = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let dtype = safetensors::Dtype::I64;
        raw.push(("y".into(), RawTensor { dtype, shape, data }));
    }
    std::fs::write(&path, safetensors::serialize(raw, None).unwrap()).unwrap();
    let m: Model = serde_json::from_value(model.clone()).unwrap();
    let params: Vec<_> = m
        .params()
        .into_iter()
        .map(|p| serde_json::json!({"name": p.name, "shape": p.shape}))
        .collect();
    let spec = serde_json::json!({
        "experiment": tag, "run": "burn", "fixture": path, "dtype": dtype, "device": "cpu",
        "steps": 1, "model": model, "loss": loss,
        "optimizer": {"name": "sgd", "lr": 0.1},
        "record": {"every": 1, "tensors": null, "grads": false, "moments": false},
        "params": params,
        "fault": {"kind": "none"}
    });
    Fixture::new(RunSpec::from_json(&spec.to_string()).unwrap(), dir)
}

/// Host values of a forward output (or an exported tensor), widened to f64, and whether
/// they were float64 already.
fn widen(h: Host) -> (Vec<f64>, bool) {
    match h {
        Host::F32(v) => (v.into_iter().map(f64::from).collect(), false),
        Host::F64(v) => (v, true),
    }
}

fn output(t: Tensor<2>, ty: FloatType) -> Vec<f64> {
    let (v, is_f64) = widen(Host::read(t.inner(), ty).unwrap());
    assert_eq!(is_f64, ty == FloatType::F64);
    v
}

/// MLP 2→3 (one Linear, no activation after the last layer) on a batch of two samples.
pub fn linear_from_a_fixture_computes_torch_linear(dtype: &str) {
    // W [out 3, in 2] (PyTorch layout), b [3], x [batches 1, batch 2, in 2].
    let w = vec![0.5f32, -1.25, 2.0, 0.75, -0.5, 1.5];
    let b = vec![0.25f32, -1.0, 0.125];
    let x = vec![1.0f32, 2.0, -3.0, 0.5];
    let mut expected = Vec::new();
    for s in 0..2 {
        for o in 0..3 {
            let mut acc = f64::from(b[o]);
            for i in 0..2 {
                acc += f64::from(x[s * 2 + i]) * f64::from(w[o * 2 + i]);
            }
            expected.push(acc);
        }
    }
    // The loops themselves, checked by hand: sample 0 is x = [1, 2], so output 1 is
    // 2·1 + 0.75·2 − 1 = 2.5; sample 1 is [−3, 0.5], output 2 is 1.5 + 0.75 + 0.125 = 2.375.
    assert_eq!(expected, vec![-1.75, 2.5, 2.625, -1.875, -6.625, 2.375]);
    let spec = fixture_spec(
        "linear",
        serde_json::json!({"family": "mlp", "sizes": [2, 3], "activation": "relu"}),
        "mse",
        vec![
            ("fc1.weight", vec![3, 2], w.clone()),
            ("fc1.bias", vec![3], b),
            ("x", vec![1, 2, 2], x),
            ("y", vec![1, 2, 3], vec![0.0; 6]),
        ],
        None,
        dtype,
    );
    let dev = device::open(DeviceKind::Cpu, spec.dtype).unwrap();
    let (net, data) = Net::load(&spec, &dev).unwrap();
    assert_eq!(output(net.forward_step(&data, 1), spec.dtype), expected);
    // Exported again in PyTorch layout and the run's own type: the fixture's values.
    let exported = net.export(spec.dtype).unwrap();
    assert_eq!(exported[0].0, "fc1.weight");
    let (back, is_f64) = widen(exported[0].1.clone());
    assert_eq!(is_f64, spec.dtype == FloatType::F64);
    assert_eq!(back, w.iter().map(|&v| f64::from(v)).collect::<Vec<_>>());
}

/// CNN: Conv1d(1→2, k 2) on length 4 → ReLU → flatten (2·3) → Linear(6→3), two samples.
pub fn cnn_from_a_fixture_computes_torch_conv1d_relu_flatten_linear(dtype: &str) {
    let (c_out, k, len, classes) = (2usize, 2usize, 4usize, 3usize);
    let l_out = len - k + 1;
    let fc_in = c_out * l_out;
    let conv_w = vec![1.0f32, -0.5, 0.25, 2.0]; // [2, 1, 2]
    let conv_b = vec![-0.5f32, 0.25];
    let fc_w: Vec<f32> = (0..classes * fc_in)
        .map(|i| (i as f32 - 8.0) * 0.125)
        .collect();
    let fc_b = vec![0.5f32, -0.25, 1.0];
    let x = vec![1.0f32, -2.0, 0.5, 3.0, -1.0, 0.25, 2.0, -0.75]; // [1, 2, 1, 4]
    let mut expected = Vec::new();
    let mut clipped = 0;
    for s in 0..2 {
        let mut flat = Vec::new();
        for c in 0..c_out {
            for l in 0..l_out {
                let mut acc = f64::from(conv_b[c]);
                for j in 0..k {
                    acc += f64::from(conv_w[c * k + j]) * f64::from(x[s * len + l + j]);
                }
                clipped += usize::from(acc < 0.0);
                flat.push(acc.max(0.0));
            }
        }
        for o in 0..classes {
            let mut acc = f64::from(fc_b[o]);
            for (i, h) in flat.iter().enumerate() {
                acc += h * f64::from(fc_w[o * fc_in + i]);
            }
            expected.push(acc);
        }
    }
    assert!(clipped > 0, "the data must exercise the ReLU");
    let spec = fixture_spec(
        "cnn",
        serde_json::json!({"family": "cnn1d", "in_channels": 1, "channels": c_out,
            "kernel": k, "length": len, "classes": classes, "activation": "relu",
            "conv_impl": "conv1d"}),
        "cross_entropy",
        vec![
            ("conv.weight", vec![c_out, 1, k], conv_w),
            ("conv.bias", vec![c_out], conv_b),
            ("fc.weight", vec![classes, fc_in], fc_w),
            ("fc.bias", vec![classes], fc_b),
            ("x", vec![1, 2, 1, len], x),
        ],
        Some((vec![1, 2], vec![2, 0])),
        dtype,
    );
    let dev = device::open(DeviceKind::Cpu, spec.dtype).unwrap();
    let (net, data) = Net::load(&spec, &dev).unwrap();
    assert_eq!(output(net.forward_step(&data, 1), spec.dtype), expected);
}
