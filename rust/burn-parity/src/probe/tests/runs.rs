//! Half precision, optimizer loops with state, and a batch of two probes.

use parity_common::probe_spec::{ProbeBatch, ProbeSpec};
use serde_json::{json, Value as Json};

use super::*;
use crate::probe::run;

/// The frames of a batch: metadata of each, and the shape of its `values` tensor.
type Frames = Vec<(
    std::collections::HashMap<String, String>,
    Option<Vec<usize>>,
)>;

#[test]
fn probe_half_precision_is_unsupported() {
    for dtype in ["f16", "bf16"] {
        let v = probe_json(
            dtype,
            vec![input("x", &[2], &[1.0, 2.0], true)],
            vec![case(
                "c",
                vec![step("y", &["x"], json!({"name": "relu"}))],
                "y",
                &["y", "x.grad"],
            )],
        );
        let s = ProbeSpec::from_json(&v.to_string()).unwrap();
        // ndarray has no half-precision tensors; Flex has, but the probes do not drive them.
        let why = if crate::BURN_BACKEND == "ndarray" {
            "no f16/bf16 tensors"
        } else {
            "probes run float32 and float64 only"
        };
        for o in &run_all(&s)[0] {
            unsupported(o, why);
        }
    }
}

fn sgd(momentum: f64, dampening: f64, nesterov: bool, weight_decay: f64) -> Json {
    json!({"name": "sgd", "lr": 0.5, "momentum": momentum, "dampening": dampening,
           "nesterov": nesterov, "weight_decay": weight_decay})
}

/// loss = Σ x·c with c = [1, 2]: the gradient is c at every iteration.
fn loop_spec(optimizer: Json, steps: usize, compare: &[&str]) -> ProbeSpec {
    spec(
        vec![
            input("x", &[2], &[1.0, 2.0], true),
            input("c", &[2], &[1.0, 2.0], false),
        ],
        vec![
            json!({"name": "loop", "steps": [step("y", &["x"], json!({"name": "relu"}))],
            "loss": [{"kind": "weighted_sum", "input": "x", "weights": "c"}],
            "optimizer": optimizer, "optimizer_steps": steps, "compare": compare}),
        ],
    )
}

#[test]
fn probe_sgd_momentum_loop() {
    // b₁ = g, b ← 0.5·b + g; x ← x − 0.5·b.
    let s = loop_spec(
        sgd(0.5, 0.0, false, 0.0),
        3,
        &["loss", "y", "x.grad", "x.after_step", "x.momentum_buffer"],
    );
    let out = &run_all(&s)[0];
    assert_eq!(values(&out[0], &[3]), [5.0, 2.5, -1.25]);
    assert_eq!(values(&out[1], &[3, 2]), [1.0, 2.0, 0.5, 1.0, 0.0, 0.0]);
    assert_eq!(values(&out[2], &[3, 2]), [1.0, 2.0, 1.0, 2.0, 1.0, 2.0]);
    assert_eq!(
        values(&out[3], &[3, 2]),
        [0.5, 1.0, -0.25, -0.5, -1.125, -2.25]
    );
    assert_eq!(values(&out[4], &[3, 2]), [1.0, 2.0, 1.5, 3.0, 1.75, 3.5]);

    // Dampening 0.5, nesterov, L2 decay 0.5 (PyTorch's formulas, hand-derived):
    // g = c + 0.5·x; b₁ = g, b ← 0.5·b + 0.5·g; step g + 0.5·b.
    let s = loop_spec(
        sgd(0.5, 0.5, true, 0.5),
        2,
        &["x.grad", "x.after_step", "x.momentum_buffer"],
    );
    let out = &run_all(&s)[0];
    assert_eq!(values(&out[0], &[2, 2]), [1.0, 2.0, 1.0, 2.0]);
    assert_eq!(
        values(&out[1], &[2, 2]),
        [-0.125, -0.25, -0.8984375, -1.796875]
    );
    assert_eq!(values(&out[2], &[2, 2]), [1.5, 3.0, 1.21875, 2.4375]);
}

#[test]
fn probe_adam_loops() {
    let adam = |name: &str, weight_decay: f64| {
        json!({"name": name, "lr": 0.5, "betas": [0.5, 0.75], "eps": 1e-8,
               "weight_decay": weight_decay})
    };
    // m ← 0.5·m + 0.5·g, v ← 0.75·v + 0.25·g², g = [1, 2]; bias-corrected m̂ = g, v̂ = g²,
    // so each step moves x by lr·g/(|g| + ε) ≈ 0.5.
    let s = loop_spec(
        adam("adam", 0.0),
        2,
        &["x.exp_avg", "x.exp_avg_sq", "x.after_step"],
    );
    let out = &run_all(&s)[0];
    assert_eq!(values(&out[0], &[2, 2]), [0.5, 1.0, 0.75, 1.5]);
    assert_eq!(values(&out[1], &[2, 2]), [0.25, 1.0, 0.4375, 1.75]);
    close(&values(&out[2], &[2, 2]), &[0.5, 1.5, 0.0, 1.0]);

    // Adam's L2 decay enters the moments: g = c + 0.5·x₀ = [1.5, 3] at the first step.
    let s = loop_spec(adam("adam", 0.5), 1, &["x.exp_avg", "x.exp_avg_sq"]);
    let out = &run_all(&s)[0];
    assert_eq!(values(&out[0], &[2]), [0.75, 1.5]);
    assert_eq!(values(&out[1], &[2]), [0.5625, 2.25]);

    // AdamW's decay does not: moments of c, x ← x·(1 − 0.5·0.5) − 0.5·(≈1).
    let s = loop_spec(
        adam("adamw", 0.5),
        1,
        &["x.exp_avg", "x.exp_avg_sq", "x.after_step"],
    );
    let out = &run_all(&s)[0];
    assert_eq!(values(&out[0], &[2]), [0.5, 1.0]);
    assert_eq!(values(&out[1], &[2]), [0.25, 1.0]);
    close(&values(&out[2], &[2]), &[0.25, 1.0]);
}

/// Reads the frames `run` wrote.
fn frames(bytes: &[u8]) -> Frames {
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = u64::from_le_bytes(rest[..8].try_into().unwrap()) as usize;
        let body = &rest[8..8 + n];
        let (_, m) = safetensors::SafeTensors::read_metadata(body).unwrap();
        let st = safetensors::SafeTensors::deserialize(body).unwrap();
        let shape = st.tensor("values").ok().map(|t| t.shape().to_vec());
        out.push((m.metadata().clone().unwrap(), shape));
        rest = &rest[8 + n..];
    }
    out
}

#[test]
fn probe_batch_of_two() {
    let a = probe_json(
        "f32",
        vec![input("x", &[2], &[-1.0, 2.0], true)],
        vec![case(
            "relu",
            vec![step("y", &["x"], json!({"name": "relu"}))],
            "y",
            &["y", "x.grad"],
        )],
    );
    let mut b = probe_json(
        "f32",
        vec![input("x", &[2, 2], &[1.0, 2.0, 3.0, 4.0], false)],
        vec![
            case(
                "argmax",
                vec![step(
                    "i",
                    &["x"],
                    json!({"name": "argmax", "dim": 1, "keepdim": false}),
                )],
                "",
                &["i"],
            ),
            case(
                "copy",
                vec![step("y", &["x"], json!({"name": "contiguous"}))],
                "",
                &["y"],
            ),
        ],
    );
    b["probe"] = json!("q");
    let batch = ProbeBatch::from_json(&json!({"probes": [a, b]}).to_string()).unwrap();
    let mut sink = Vec::new();
    run(&batch, &mut sink).unwrap();
    let f = frames(&sink);
    let kinds: Vec<&str> = f.iter().map(|(m, _)| m["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        ["header", "result", "result", "result", "result", "end"]
    );
    let row = |i: usize| {
        let m = &f[i].0;
        (
            m["probe"].as_str(),
            m["case"].as_str(),
            m["quantity"].as_str(),
            m["status"].as_str(),
        )
    };
    assert_eq!(row(1), ("p", "relu", "y", "ok"));
    assert_eq!(row(2), ("p", "relu", "x.grad", "ok"));
    assert_eq!(row(3), ("q", "argmax", "i", "ok"));
    assert_eq!(row(4), ("q", "copy", "y", "unsupported"));
    assert!(f[4].0["message"].contains("contiguous"));
    assert_eq!(f[3].1, Some(vec![2]));
    assert_eq!(f[4].1, None);
}

/// x = [1, 2], rows r of `xs` = [[1, 0], [0, 1], [2, 2], [1, 1]]; loss Σ x·r; plain SGD, lr
/// 1/2, with `accumulate` micro-steps and the given gradient transforms.
fn accumulation_spec(accumulate: usize, steps: usize, transforms: Json) -> ProbeSpec {
    spec(
        vec![
            input("x", &[2], &[1.0, 2.0], true),
            input(
                "xs",
                &[4, 2],
                &[1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 1.0, 1.0],
                false,
            ),
        ],
        vec![json!({"name": "acc", "steps": [],
            "loss": [{"kind": "weighted_sum", "input": "x", "weights": "r"}],
            "optimizer": sgd(0.0, 0.0, false, 0.0), "optimizer_steps": steps,
            "accumulate": accumulate, "micro_batches": [{"name": "r", "input": "xs"}],
            "grad_transforms": transforms,
            "compare": ["loss", "r", "x.grad", "x.after_step"]})],
    )
}

#[test]
fn probe_accumulation_adds_micro_step_gradients_and_stacks_forward_values() {
    // 2 steps of 2 micro-steps (burn's GradientsAccumulator): rows 0+1 = [1, 1], then
    // rows 2+3 = [3, 3]; the loss of each micro-step is stacked [steps, micro-steps].
    let out = &run_all(&accumulation_spec(2, 2, json!([])))[0];
    assert_eq!(values(&out[0], &[2, 2]), [1.0, 2.0, 4.0, 2.0]);
    assert_eq!(values(&out[1], &[2, 2, 2]).len(), 8);
    assert_eq!(values(&out[2], &[2, 2]), [1.0, 1.0, 3.0, 3.0]);
    assert_eq!(values(&out[3], &[2, 2]), [0.5, 1.5, -1.0, 0.0]);
}

#[test]
fn probe_grad_transforms_apply_in_order() {
    // The sum of 4 micro-steps [4, 4], clamped to [−3, 3] (GradientClipping::Value), halved.
    let t = json!([{"kind": "clip_value", "clip_value": 3.0}, {"kind": "scale", "factor": 0.5}]);
    let out = &run_all(&accumulation_spec(4, 1, t))[0];
    assert_eq!(values(&out[2], &[2]), [1.5, 1.5]);
    assert_eq!(values(&out[3], &[2]), [0.25, 1.25]);
    // Replaced by [3, 4] (norm 5), then clipped to the global norm 2.5: the coefficient
    // (5 + 1e-6)⁻¹·2.5 in float32, as PyTorch computes it.
    let t = json!([{"kind": "replace", "input": "x", "values": [3.0, 4.0]},
                   {"kind": "clip_norm", "max_norm": 2.5}]);
    let out = &run_all(&accumulation_spec(4, 1, t))[0];
    let coef = (1.0f32 / (5.0f32 + 1e-6f32)) * 2.5f32;
    assert_eq!(
        values(&out[2], &[2]),
        [f64::from(3.0 * coef), f64::from(4.0 * coef)]
    );
    // max_norm above the norm: the coefficient is clamped to 1.
    let t = json!([{"kind": "clip_norm", "max_norm": 6.0}]);
    assert_eq!(
        values(&run_all(&accumulation_spec(4, 1, t))[0][2], &[2]),
        [4.0, 4.0]
    );
}
