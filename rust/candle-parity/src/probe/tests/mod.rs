//! Tests of the candle probe interpreter: the v1 behaviours (conv1d kernel-gradient bug,
//! missing gradient of a fused op, errors as outcomes), batches, the training loop, dtypes
//! ([`mod@self`]), and each op against hand-computed values ([`ops`], [`lookup`]).

mod accumulate;
mod lookup;
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

/// Runs `y = op(names…)` with loss `sum(y)` (or `weighted_sum(y, c)` when an input `c`
/// exists), comparing `compare`; float64 on the CPU.
pub(super) fn one_op(
    inputs: Vec<Value>,
    names: &[&str],
    op: Value,
    compare: &[&str],
) -> Vec<Outcome> {
    let weighted = inputs.iter().any(|i| i["name"] == "c");
    let loss = if weighted {
        json!([{"kind": "weighted_sum", "input": "y", "weights": "c"}])
    } else {
        json!([{"kind": "sum", "input": "y"}])
    };
    let steps = json!([{"out": "y", "inputs": names, "op": op}]);
    let spec = probe("p", "f64", inputs, vec![case("c0", steps, loss, compare)]);
    run_all(&spec).remove(0)
}

/// A forward-only `y = op(names…)`, float64 on the CPU.
pub(super) fn forward_only(inputs: Vec<Value>, names: &[&str], op: Value) -> Outcome {
    let steps = json!([{"out": "y", "inputs": names, "op": op}]);
    let spec = probe(
        "p",
        "f64",
        inputs,
        vec![case("c0", steps, Value::Null, &["y"])],
    );
    run_all(&spec).remove(0).remove(0)
}

pub(super) fn unsupported_message(o: &Outcome) -> &str {
    match o {
        Outcome::Unsupported(m) => m,
        other => panic!("not unsupported: {other:?}"),
    }
}

pub(super) fn framework_error(o: &Outcome) -> &str {
    match o {
        Outcome::FrameworkError(m) => m,
        other => panic!("not a framework error: {other:?}"),
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

/// Reads back the frames `run` wrote: (metadata, `values` as f64 with its safetensors dtype
/// and shape, if any).
type Frame = (
    HashMap<String, String>,
    Option<(Vec<f64>, safetensors::Dtype, Vec<usize>)>,
);

fn read_frames(mut bytes: &[u8]) -> Vec<Frame> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let body = &bytes[8..8 + n];
        let (_, md) = safetensors::SafeTensors::read_metadata(body).unwrap();
        let st = safetensors::SafeTensors::deserialize(body).unwrap();
        let values = st.tensor("values").ok().map(|t| {
            let v = match t.dtype() {
                safetensors::Dtype::F32 => t
                    .data()
                    .chunks_exact(4)
                    .map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap())))
                    .collect(),
                safetensors::Dtype::F64 => t
                    .data()
                    .chunks_exact(8)
                    .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                    .collect(),
                other => panic!("unexpected dtype {other:?}"),
            };
            (v, t.dtype(), t.shape().to_vec())
        });
        out.push((md.metadata().clone().unwrap_or_default(), values));
        bytes = &bytes[8 + n..];
    }
    out
}

/// Runs a batch through [`run`] and reads its frames back.
fn run_batch(probes: Vec<ProbeSpec>) -> Vec<Frame> {
    let mut buf = Vec::new();
    run(&ProbeBatch { probes }, &mut buf).unwrap();
    read_frames(&buf)
}

#[test]
fn a_batch_writes_one_header_the_results_of_each_probe_in_order_and_one_end() {
    let add = probe(
        "add",
        "f32",
        vec![
            input("a", &[2], &[1.0, 2.0], true),
            input("b", &[2], &[10.0, 20.0], false),
        ],
        vec![case(
            "plain",
            json!([{"out": "y", "inputs": ["a", "b"], "op": {"name": "add"}}]),
            json!([{"kind": "sum", "input": "y"}]),
            &["y", "a.grad"],
        )],
    );
    let pool = probe(
        "pool",
        "f32",
        vec![input("x", &[1, 1, 4], &[1.0, 2.0, 3.0, 4.0], false)],
        vec![case(
            "one_d",
            json!([{"out": "y", "inputs": ["x"],
                    "op": {"name": "max_pool1d", "kernel": 2, "stride": 2, "padding": 0,
                           "dilation": 1, "ceil_mode": false}}]),
            Value::Null,
            &["y"],
        )],
    );
    let frames = run_batch(vec![add, pool]);
    let kinds: Vec<&str> = frames.iter().map(|(m, _)| m["kind"].as_str()).collect();
    assert_eq!(kinds, ["header", "result", "result", "result", "end"]);
    assert_eq!(frames[0].0["framework"], "candle");
    let (m, v) = &frames[1];
    assert_eq!((m["probe"].as_str(), m["case"].as_str()), ("add", "plain"));
    assert_eq!((m["quantity"].as_str(), m["status"].as_str()), ("y", "ok"));
    assert_eq!(
        v.as_ref().unwrap(),
        &(vec![11.0, 22.0], safetensors::Dtype::F32, vec![2])
    );
    assert_eq!(frames[2].0["quantity"], "a.grad");
    assert_eq!(frames[2].1.as_ref().unwrap().0, vec![1.0, 1.0]);
    // The unsupported op: a result without values, with the reason.
    let (m, v) = &frames[3];
    assert_eq!(
        (m["probe"].as_str(), m["status"].as_str()),
        ("pool", "unsupported")
    );
    assert!(m["message"].contains("no 1-D max pooling"), "{m:?}");
    assert!(v.is_none());
    assert_eq!(frames[4].0["status"], "complete");
}

#[test]
fn a_half_precision_run_rounds_inputs_once_and_exports_float32() {
    // 0.1 rounded once to the half dtype (nearest even).
    for (dtype, want) in [
        ("f16", (DType::F16, 0.0999755859375_f64)),
        ("bf16", (DType::BF16, 0.10009765625_f64)),
    ] {
        let spec = probe(
            "half",
            dtype,
            vec![input("x", &[2], &[0.1, 3.0], true)],
            vec![case(
                "mul",
                json!([{"out": "y", "inputs": ["x", "x"], "op": {"name": "mul"}}]),
                json!([{"kind": "sum", "input": "y"}]),
                &["x", "x.grad"],
            )],
        );
        let out = &run_all(&spec)[0];
        match &out[0] {
            Outcome::Ok(t) => assert_eq!(t.dtype(), want.0),
            other => panic!("{other:?}"),
        }
        let frames = run_batch(vec![spec]);
        let (v, st_dtype, shape) = frames[1].1.clone().unwrap();
        assert_eq!((st_dtype, shape), (safetensors::Dtype::F32, vec![2]));
        assert_eq!(v, vec![want.1, 3.0], "{dtype}");
        // d(x·x)/dx = 2x, exact in the half dtype.
        assert_eq!(frames[2].1.clone().unwrap().0, vec![2.0 * want.1, 6.0]);
    }
}

#[test]
fn integer_outputs_are_exported_as_float64() {
    let spec = probe(
        "arg",
        "f32",
        vec![input("x", &[2, 2], &[1.0, 5.0, 7.0, 2.0], false)],
        vec![case(
            "argmax",
            json!([{"out": "i", "inputs": ["x"],
                    "op": {"name": "argmax", "dim": 1, "keepdim": false}}]),
            Value::Null,
            &["i"],
        )],
    );
    let frames = run_batch(vec![spec]);
    assert_eq!(
        frames[1].1.clone().unwrap(),
        (vec![1.0, 0.0], safetensors::Dtype::F64, vec![2])
    );
}

/// A training loop over `w` = [1, 2]: `y = abs(w)`, loss Σy² (gradient 2w while w > 0).
fn loop_spec(optimizer: Value, steps: usize, compare: &[&str]) -> ProbeSpec {
    let mut c = case(
        "loop",
        json!([{"out": "y", "inputs": ["w"], "op": {"name": "abs"}}]),
        json!([{"kind": "sum_squares", "input": "y"}]),
        compare,
    );
    c["optimizer"] = optimizer;
    c["optimizer_steps"] = json!(steps);
    probe(
        "loop",
        "f64",
        vec![input("w", &[2], &[1.0, 2.0], true)],
        vec![c],
    )
}

fn sgd(lr: f64, momentum: f64, weight_decay: f64) -> Value {
    json!({"name": "sgd", "lr": lr, "momentum": momentum, "dampening": 0.0,
           "nesterov": false, "weight_decay": weight_decay})
}

#[test]
fn a_two_step_sgd_loop_stacks_every_quantity() {
    // grad = 2w, lr 0.25: w halves at each step.
    let spec = loop_spec(
        sgd(0.25, 0.0, 0.0),
        2,
        &["loss", "y", "w", "w.grad", "w.after_step"],
    );
    let out = &run_all(&spec)[0];
    assert_eq!(ok(&out[0]), (vec![5.0, 1.25], vec![2]));
    assert_eq!(ok(&out[1]), (vec![1.0, 2.0, 0.5, 1.0], vec![2, 2]));
    // The input's forward value at each iteration, not the Var after the last step.
    assert_eq!(ok(&out[2]), (vec![1.0, 2.0, 0.5, 1.0], vec![2, 2]));
    assert_eq!(ok(&out[3]), (vec![2.0, 4.0, 1.0, 2.0], vec![2, 2]));
    assert_eq!(ok(&out[4]), (vec![0.5, 1.0, 0.25, 0.5], vec![2, 2]));
    // One step: nothing stacked.
    let spec = loop_spec(sgd(0.25, 0.0, 0.0), 1, &["loss", "w.after_step"]);
    let out = &run_all(&spec)[0];
    assert_eq!(ok(&out[0]), (vec![5.0], vec![]));
    assert_eq!(ok(&out[1]), (vec![0.5, 1.0], vec![2]));
}

#[test]
fn optimizer_settings_candle_lacks_are_unsupported() {
    let spec = loop_spec(sgd(0.1, 0.9, 0.0), 2, &["loss", "w.momentum_buffer"]);
    let out = &run_all(&spec)[0];
    assert!(matches!(&out[0], Outcome::Unsupported(m) if m.contains("momentum")));
    assert!(matches!(&out[1], Outcome::Unsupported(_)));
    let spec = loop_spec(sgd(0.1, 0.0, 0.01), 1, &["w.after_step"]);
    assert!(matches!(&run_all(&spec)[0][0], Outcome::Unsupported(m) if m.contains("weight_decay")));
    let adam = json!({"name": "adam", "lr": 0.1, "betas": [0.9, 0.999], "eps": 1e-8,
                      "weight_decay": 0.01});
    let spec = loop_spec(adam, 1, &["w.after_step"]);
    assert!(matches!(&run_all(&spec)[0][0], Outcome::Unsupported(m) if m.contains("AdamW only")));
}

#[test]
fn adam_runs_as_adamw_without_decay_and_its_moments_are_unsupported() {
    for name in ["adam", "adamw"] {
        let opt = json!({"name": name, "lr": 0.1, "betas": [0.9, 0.999], "eps": 1e-8,
                         "weight_decay": 0.0});
        let spec = loop_spec(
            opt,
            2,
            &["w.after_step", "w.exp_avg", "w.grad", "w.exp_avg_sq"],
        );
        let out = &run_all(&spec)[0];
        // Step 1: m̂ = g, v̂ = g², so w moves by lr·g/(|g| + ε) ≈ lr.
        let (after, shape) = ok(&out[0]);
        assert_eq!(shape, vec![2, 2]);
        close(&after[..2], &[0.9, 1.9], 1e-7);
        assert!(
            matches!(&out[1], Outcome::Unsupported(m) if m.contains("private")),
            "{out:?}"
        );
        assert_eq!(vals(&out[2])[..2], [2.0, 4.0]);
        assert!(matches!(&out[3], Outcome::Unsupported(m) if m.contains("exp_avg_sq")));
    }
}
