//! The fixture writer of the replay tests: random parameters and data of a model family,
//! written to a temporary folder that the returned [`Fixture`] removes when dropped.

use parity_common::frames::RawTensor;
use parity_common::spec::{Model, RunSpec};

use crate::tempdir::{Fixture, TempDir};

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
/// temporary folder, removed when the returned [`Fixture`] is dropped.
pub fn spec(
    tag: &str,
    model: serde_json::Value,
    loss: &str,
    optimizer: serde_json::Value,
    steps: u32,
    dtype: &str,
) -> Fixture {
    let m: Model = serde_json::from_value(model.clone()).unwrap();
    let transformer = matches!(m, Model::Transformer { .. });
    let (batches, batch) = (2usize, if transformer { 3 } else { 4 });
    let mut seed = 0x5eed ^ tag.len() as u64;
    let mut raw: Vec<(String, RawTensor)> = Vec::new();
    for p in m.params() {
        let n = p.shape.iter().product();
        raw.push((
            p.name.clone(),
            f32_tensor(p.shape.clone(), &values(&mut seed, n, 0.5)),
        ));
    }
    if let Model::Transformer { vocab, seq_len, .. } = m {
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
        let (x_shape, outputs) = match &m {
            Model::Mlp { sizes, .. } => (vec![batches, batch, sizes[0]], sizes[sizes.len() - 1]),
            Model::Cnn1d {
                in_channels,
                length,
                classes,
                ..
            } => (vec![batches, batch, *in_channels, *length], *classes),
            Model::Transformer { .. } | Model::Own { .. } => unreachable!(),
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
    let params: Vec<_> = m
        .params()
        .into_iter()
        .map(|p| serde_json::json!({"name": p.name, "shape": p.shape}))
        .collect();
    let moments = optimizer["name"] != "sgd";
    let spec = serde_json::json!({
        "experiment": tag, "run": "burn", "fixture": path, "dtype": dtype, "device": "cpu",
        "steps": steps, "model": model, "loss": loss, "optimizer": optimizer,
        "record": {"every": 1, "tensors": null, "grads": true, "moments": moments},
        "params": params, "fault": {"kind": "none"}
    });
    Fixture::new(RunSpec::from_json(&spec.to_string()).unwrap(), dir)
}
