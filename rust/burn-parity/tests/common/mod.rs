//! Forward-pass layout checks shared by `forward_f32.rs` and `forward_f64.rs`. They are
//! separate test binaries because burn's ndarray device takes its default float type once
//! per process.
//!
//! A fixture is written in PyTorch layout (`fc.weight` `[out, in]`), loaded into the family's
//! port by [`Started::new`] (burn-store, as `train` loads it), and the port's forward pass
//! (flattened as the loss takes it, [`flat_output`]) is compared with the same model written out as loops
//! over the PyTorch-layout values (PyTorch's `F.linear(x, W, b) = x Wᵀ + b`, `F.conv1d`,
//! ReLU, `flatten(1)`). Small dyadic values keep every product and sum exact, so the
//! check is equality; weights are not square, so reading `[out, in]` as `[in, out]` would
//! be caught by the values, not only by a shape.

use burn::tensor::Tensor;
use burn_parity::device::Host;
use burn_parity::families::cnn::Cnn;
use burn_parity::families::mlp::Mlp;
use burn_parity::net::flat_output;
use burn_parity::train::Started;
use parity_common::burn::{BurnModel, Taps};
use parity_common::frames::RawTensor;
use parity_common::optim::Parameters;
use parity_common::spec::{FloatType, RunSpec};

use crate::replay_common::fixture::spec_json;
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
    let spec = spec_json(tag, &path, &model, loss, dtype);
    Fixture::new(RunSpec::from_json(&spec.to_string()).unwrap(), dir)
}

/// Host values of a forward output, widened to f64, and whether they were float64 already.
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

/// Port `M` loaded from the fixture of `spec`, and its forward pass (taps inactive) on step
/// 1's batch flattened as the loss takes it; with the port, for further checks.
fn forward_step_1<M: BurnModel>(spec: &RunSpec) -> (Started<M>, Vec<f64>) {
    let started = Started::<M>::new(spec, None).unwrap();
    let x = started.data.input(started.data.index(1));
    let out = started.net.forward(x, &mut Taps::inactive()).unwrap();
    let (_, flat) = flat_output(spec, out);
    let values = output(flat, spec.dtype);
    (started, values)
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
    let (started, out) = forward_step_1::<Mlp>(&spec);
    assert_eq!(out, expected);
    // Recorded again in PyTorch layout and the run's own type (as every step frame records
    // the parameters): the fixture's values.
    let exported = started.net.frame_params(spec.dtype, &|_| true).unwrap();
    assert_eq!(exported[0].0, "fc1.weight");
    let want_dtype = match spec.dtype {
        FloatType::F32 => safetensors::Dtype::F32,
        FloatType::F64 => safetensors::Dtype::F64,
    };
    assert_eq!(exported[0].1.dtype, want_dtype);
    let back = crate::replay_common::widen(&exported[0].1);
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
    let model = |conv_impl: &str| {
        serde_json::json!({"family": "cnn1d", "in_channels": 1, "channels": c_out,
            "kernel": k, "length": len, "classes": classes, "activation": "relu",
            "conv_impl": conv_impl})
    };
    let tensors = vec![
        ("conv.weight", vec![c_out, 1, k], conv_w),
        ("conv.bias", vec![c_out], conv_b),
        ("fc.weight", vec![classes, fc_in], fc_w),
        ("fc.bias", vec![classes], fc_b),
        ("x", vec![1, 2, 1, len], x),
    ];
    let labels = (vec![1, 2], vec![2, 0]);
    let spec = fixture_spec(
        "cnn",
        model("conv1d"),
        "cross_entropy",
        tensors.clone(),
        Some(labels.clone()),
        dtype,
    );
    let (_, out) = forward_step_1::<Cnn>(&spec);
    assert_eq!(out, expected);
    // candle's conv2d workaround is refused when the port is initialised: burn-parity calls
    // burn's conv1d.
    let spec = fixture_spec(
        "cnn-conv2d",
        model("conv2d"),
        "cross_entropy",
        tensors,
        Some(labels),
        dtype,
    );
    let err = Started::<Cnn>::new(&spec, None).err().expect("refused");
    let msg = format!("{err:#}");
    assert!(msg.contains("initialising the port"), "{msg}");
    assert!(msg.contains("conv_impl Conv2d"), "{msg}");
}
