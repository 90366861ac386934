//! Gradient accumulation, micro-batches and gradient transforms on the candle side, float64
//! on the CPU, against hand-computed values (PyTorch's definitions; see
//! `tests/probes/ops/accumulation.yaml` for the same checks through the workflow).

use super::*;

/// x = [1, 2] (a `Var`), rows r of `xs` = [[1, 0], [0, 1], [2, 2], [1, 1]]; loss Σ x·r.
fn accumulation_spec(accumulate: usize, steps: usize, transforms: Value) -> ProbeSpec {
    let mut c = case(
        "acc",
        json!([]),
        json!([{"kind": "weighted_sum", "input": "x", "weights": "r"}]),
        &["loss", "r", "x.grad", "x.after_step"],
    );
    c["optimizer"] = json!({"name": "sgd", "lr": 0.5, "momentum": 0.0, "dampening": 0.0,
                            "nesterov": false, "weight_decay": 0.0});
    c["optimizer_steps"] = json!(steps);
    c["accumulate"] = json!(accumulate);
    c["micro_batches"] = json!([{"name": "r", "input": "xs"}]);
    c["grad_transforms"] = transforms;
    probe(
        "acc",
        "f64",
        vec![
            input("x", &[2], &[1.0, 2.0], true),
            input(
                "xs",
                &[4, 2],
                &[1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 1.0, 1.0],
                false,
            ),
        ],
        vec![c],
    )
}

#[test]
fn micro_step_gradients_add_up_and_forward_values_stack() {
    // 2 steps of 2 micro-steps: rows 0+1 = [1, 1], then rows 2+3 = [3, 3].
    let s = accumulation_spec(2, 2, json!([]));
    let out = &run_all(&s)[0];
    assert_eq!(ok(&out[0]), (vec![1.0, 2.0, 4.0, 2.0], vec![2, 2]));
    assert_eq!(ok(&out[1]).1, vec![2, 2, 2]);
    assert_eq!(vals(&out[2]), [1.0, 1.0, 3.0, 3.0]);
    assert_eq!(vals(&out[3]), [0.5, 1.5, -1.0, 0.0]);
}

#[test]
fn transforms_apply_in_order_to_the_summed_gradient() {
    // One step of 4 micro-steps: the sum [4, 4]; clamped to [−3, 3]; halved: [1.5, 1.5].
    let s = accumulation_spec(
        4,
        1,
        json!([{"kind": "clip_value", "clip_value": 3.0}, {"kind": "scale", "factor": 0.5}]),
    );
    let out = &run_all(&s)[0];
    assert_eq!(ok(&out[2]), (vec![1.5, 1.5], vec![2]));
    assert_eq!(vals(&out[3]), [0.25, 1.25]);
    // Replaced, then clipped by the global norm: [3, 4] has norm 5; max_norm 2.5 gives
    // the coefficient (5 + 1e-6)⁻¹·2.5 (the reciprocal, then the product, as PyTorch).
    let s = accumulation_spec(
        4,
        1,
        json!([{"kind": "replace", "input": "x", "values": [3.0, 4.0]},
               {"kind": "clip_norm", "max_norm": 2.5}]),
    );
    let out = &run_all(&s)[0];
    let coef = (1.0 / (5.0 + 1e-6)) * 2.5;
    assert_eq!(vals(&out[2]), [3.0 * coef, 4.0 * coef]);
    // max_norm above the norm leaves the gradient as it is (coefficient clamped to 1).
    let s = accumulation_spec(4, 1, json!([{"kind": "clip_norm", "max_norm": 6.0}]));
    assert_eq!(vals(&run_all(&s)[0][2]), [4.0, 4.0]);
}
