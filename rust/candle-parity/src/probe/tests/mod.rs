//! Tests of the candle probe interpreter: the v1 behaviours (conv1d kernel-gradient bug,
//! missing gradient of a fused op, errors as outcomes), batches, the training loop, dtypes
//! ([`mod@self`]), and each op against hand-computed values ([`ops`]).

mod ops;

use super::*;
use serde_json::{json, Value};

/// A float input (`requires_grad` as given).
pub(super) fn input(name: &str, shape: &[usize], values: &[f64], grad: bool) -> Value {
    json!({"name": name, "dtype": "float", "shape": shape, "values": values, "requires_grad": grad})
}

/// An int64 input.
pub(super) fn int_input(name: &str, shape: &[usize], values: &[f64]) -> Value {
    json!({"name": name, "dtype": "int64", "shape": shape, "values": values, "requires_grad": false})
}

/// A case without optimizer.
pub(super) fn case(name: &str, steps: Value, loss: Value, compare: &[&str]) -> Value {
    json!({"name": name, "steps": steps, "loss": loss, "optimizer": null,
           "optimizer_steps": 1, "compare": compare})
}

/// A probe spec in `dtype` on the CPU.
pub(super) fn probe(name: &str, dtype: &str, inputs: Vec<Value>, cases: Vec<Value>) -> ProbeSpec {
    let json = json!({"probe": name, "dtype": dtype, "device": "cpu",
                      "inputs": inputs, "cases": cases});
    ProbeSpec::from_json(&json.to_string()).unwrap()
}

/// Runs every case of `spec` on the CPU, the outcomes of each case in order.
pub(super) fn run_all(spec: &ProbeSpec) -> Vec<Vec<Outcome>> {
    spec.cases
        .iter()
        .map(|c| run_case(spec, c, &Device::Cpu).unwrap())
        .collect()
}

/// The values of an `ok` outcome, widened to f64, and its shape.
pub(super) fn ok(o: &Outcome) -> (Vec<f64>, Vec<usize>) {
    match o {
        Outcome::Ok(t) => (
            t.flatten_all()
                .unwrap()
                .to_dtype(DType::F64)
                .unwrap()
                .to_vec1::<f64>()
                .unwrap(),
            t.dims().to_vec(),
        ),
        other => panic!("not ok: {other:?}"),
    }
}

/// The values of an `ok` outcome, widened to f64.
pub(super) fn vals(o: &Outcome) -> Vec<f64> {
    ok(o).0
}

/// Asserts `got` equals `want` within `tol` per element.
pub(super) fn close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= tol, "{got:?} vs {want:?}");
    }
}

/// The study's conv1d probe (docs/study.md), built by hand: candle 0.11.0's CPU kernel
/// gradient is the known wrong one with batch 2, and right with batch 1.
fn conv1d_spec(batch: usize) -> ProbeSpec {
    let x: Vec<f64> = (0..6 * batch).map(|i| i as f64).collect();
    let c: Vec<f64> = (1..=8 * batch).map(|i| i as f64).collect();
    probe(
        "conv1d_grad",
        "f32",
        vec![
            input("x", &[batch, 1, 6], &x, false),
            input("w", &[2, 1, 3], &[1.0, -1.0, 2.0, 0.5, 0.25, -2.0], true),
            input("c", &[batch, 2, 4], &c, false),
        ],
        vec![case(
            "case",
            json!([{"out": "y", "inputs": ["x", "w"],
                    "op": {"name": "conv1d", "padding": 0, "stride": 1, "dilation": 1, "groups": 1}}]),
            json!([{"kind": "weighted_sum", "input": "y", "weights": "c"}]),
            &["loss", "w.grad"],
        )],
    )
}

#[test]
fn conv1d_kernel_gradient_is_the_known_bug_with_batch_two() {
    let out = &run_all(&conv1d_spec(2))[0];
    assert_eq!(vals(&out[0]), vec![-84.0]);
    assert_eq!(
        vals(&out[1]),
        vec![220.0, 256.0, 292.0, 508.0, 608.0, 708.0]
    );
}

#[test]
fn conv1d_kernel_gradient_is_right_with_batch_one() {
    let out = &run_all(&conv1d_spec(1))[0];
    assert_eq!(vals(&out[1]), vec![20.0, 30.0, 40.0, 44.0, 70.0, 96.0]);
}

#[test]
fn candle_errors_are_outcomes_not_failures() {
    let spec = probe(
        "p",
        "f32",
        vec![
            input("a", &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], true),
            input("b", &[2, 2], &[1.0, 2.0, 3.0, 4.0], false),
        ],
        vec![case(
            "shape_mismatch",
            json!([{"out": "y", "inputs": ["a", "b"], "op": {"name": "matmul"}}]),
            json!([{"kind": "sum", "input": "y"}]),
            &["y", "a.grad"],
        )],
    );
    let out = &run_all(&spec)[0];
    assert!(
        matches!(&out[0], Outcome::FrameworkError(m) if m.contains("matmul")),
        "{out:?}"
    );
    assert!(matches!(&out[1], Outcome::FrameworkError(_)));
}

#[test]
fn a_fused_op_without_backward_is_a_missing_gradient() {
    let spec = probe(
        "p",
        "f32",
        vec![input("x", &[1, 3], &[1.0, -2.0, 0.5], true)],
        vec![case(
            "fused",
            json!([{"out": "y", "inputs": ["x"],
                    "op": {"name": "softmax", "dim": -1, "candle": "fused"}}]),
            json!([{"kind": "sum_squares", "input": "y"}]),
            &["y", "x.grad"],
        )],
    );
    let out = &run_all(&spec)[0];
    assert!(matches!(out[0], Outcome::Ok(_)));
    assert!(matches!(out[1], Outcome::MissingGradient), "{out:?}");
}
