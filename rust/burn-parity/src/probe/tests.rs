//! The v2 ops, optimizer loops and batches on burn's CPU device in float32 (the library's
//! test process opens the device once, in float32; `tests/probe_f64.rs` covers float64).
//! Inputs are small integers, so most expected values are exact; transcendental ones are
//! computed here from their formulas in float64 and compared within 1e-6.
//!
//! Where burn's semantics differ from PyTorch's the test asserts what burn does, and says
//! what PyTorch gives (the report's findings).

use parity_common::probe_spec::{ProbeBatch, ProbeSpec};
use parity_common::spec::{DeviceKind, FloatType};
use serde_json::{json, Value as Json};

use super::{run, run_case, Outcome};
use crate::device::{self, Host};

fn input(name: &str, shape: &[usize], values: &[f64], requires_grad: bool) -> Json {
    json!({"name": name, "dtype": "float", "shape": shape, "values": values,
           "requires_grad": requires_grad})
}

fn int_input(name: &str, shape: &[usize], values: &[f64]) -> Json {
    json!({"name": name, "dtype": "int64", "shape": shape, "values": values,
           "requires_grad": false})
}

fn step(out: &str, inputs: &[&str], op: Json) -> Json {
    json!({"out": out, "inputs": inputs, "op": op})
}

/// A case with a `sum` loss over `loss` (none when empty) and no optimizer.
fn case(name: &str, steps: Vec<Json>, loss: &str, compare: &[&str]) -> Json {
    let loss = if loss.is_empty() {
        Json::Null
    } else {
        json!([{"kind": "sum", "input": loss}])
    };
    json!({"name": name, "steps": steps, "loss": loss, "optimizer": null,
           "optimizer_steps": 1, "compare": compare})
}

fn probe_json(dtype: &str, inputs: Vec<Json>, cases: Vec<Json>) -> Json {
    json!({"probe": "p", "dtype": dtype, "device": "cpu", "inputs": inputs, "cases": cases})
}

fn spec(inputs: Vec<Json>, cases: Vec<Json>) -> ProbeSpec {
    ProbeSpec::from_json(&probe_json("f32", inputs, cases).to_string()).unwrap()
}

/// Every case's outcomes on burn's CPU device.
fn run_all(spec: &ProbeSpec) -> Vec<Vec<Outcome>> {
    let dev = device::open(DeviceKind::Cpu, FloatType::F32).unwrap();
    spec.cases
        .iter()
        .map(|c| run_case(spec, c, &dev).unwrap())
        .collect()
}

/// The values of an `ok` float outcome (float32), widened, after checking its shape.
fn values(o: &Outcome, shape: &[usize]) -> Vec<f64> {
    let Outcome::Ok { values, shape: got } = o else {
        panic!("not ok: {o:?}");
    };
    assert_eq!(got, shape, "{o:?}");
    assert!(matches!(values, Host::F32(_)), "{values:?}");
    values.widened()
}

/// The values of an `ok` integer outcome: float64, integers.
fn ints(o: &Outcome, shape: &[usize]) -> Vec<f64> {
    let Outcome::Ok { values, shape: got } = o else {
        panic!("not ok: {o:?}");
    };
    assert_eq!(got, shape, "{o:?}");
    let Host::F64(v) = values else {
        panic!("an integer quantity is sent as float64: {values:?}");
    };
    v.clone()
}

fn close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-6 * w.abs().max(1.0), "{got:?} vs {want:?}");
    }
}

fn unsupported(o: &Outcome, needle: &str) {
    assert!(
        matches!(o, Outcome::Unsupported(m) if m.contains(needle)),
        "{o:?} should be unsupported naming {needle:?}"
    );
}

#[test]
fn probe_conv_transpose() {
    let ct1 = |stride: usize, output_padding: usize| {
        json!({"name": "conv_transpose1d", "padding": 0, "output_padding": output_padding,
               "stride": stride, "dilation": 1, "groups": 1})
    };
    let ct2 = |padding: usize| {
        json!({"name": "conv_transpose2d", "padding": [padding, padding],
               "output_padding": [0, 0], "stride": [1, 1], "dilation": [1, 1], "groups": 1})
    };
    let s = spec(
        vec![
            input("x", &[1, 1, 3], &[1.0, 2.0, 3.0], true),
            input("w", &[1, 1, 2], &[1.0, -1.0], true),
            input("c", &[1, 1, 6], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], false),
            input("a", &[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0], true),
            input("k", &[1, 1, 2, 2], &[1.0, 0.0, 0.0, 1.0], true),
        ],
        vec![
            json!({"name": "1d", "steps": [step("y", &["x", "w"], ct1(2, 0))],
                "loss": [{"kind": "weighted_sum", "input": "y", "weights": "c"}],
                "optimizer": null, "optimizer_steps": 1,
                "compare": ["y", "loss", "x.grad", "w.grad"]}),
            case("1d_output_padding", vec![step("y", &["x", "w"], ct1(2, 1))], "", &["y"]),
            case("2d", vec![step("y", &["a", "k"], ct2(0))], "y", &["y", "a.grad", "k.grad"]),
            case("2d_padded", vec![step("y", &["a", "k"], ct2(1))], "", &["y"]),
        ],
    );
    let out = run_all(&s);
    // y[2i + k] = x[i]·w[k]; dL/dx[i] = c[2i] − c[2i+1]; dL/dw[k] = Σ x[i]·c[2i + k].
    assert_eq!(
        values(&out[0][0], &[1, 1, 6]),
        [1.0, -1.0, 2.0, -2.0, 3.0, -3.0]
    );
    assert_eq!(values(&out[0][1], &[1]), [-6.0]);
    assert_eq!(values(&out[0][2], &[1, 1, 3]), [-1.0, -1.0, -1.0]);
    assert_eq!(values(&out[0][3], &[1, 1, 2]), [22.0, 28.0]);
    assert_eq!(
        values(&out[1][0], &[1, 1, 7]),
        [1.0, -1.0, 2.0, -2.0, 3.0, -3.0, 0.0]
    );
    // a placed at (0, 0) plus a placed at (1, 1).
    assert_eq!(
        values(&out[2][0], &[1, 1, 3, 3]),
        [1.0, 2.0, 0.0, 3.0, 5.0, 2.0, 0.0, 3.0, 4.0]
    );
    assert_eq!(values(&out[2][1], &[1, 1, 2, 2]), [2.0; 4]);
    assert_eq!(values(&out[2][2], &[1, 1, 2, 2]), [10.0; 4]);
    assert_eq!(values(&out[3][0], &[1, 1, 1, 1]), [5.0]);
}

#[test]
fn probe_pooling() {
    let mp1 = |padding: usize| {
        json!({"name": "max_pool1d", "kernel": 2, "stride": 2, "padding": padding})
    };
    let s = spec(
        vec![
            input("x", &[1, 1, 5], &[1.0, 3.0, 2.0, 5.0, 4.0], true),
            input("m", &[1, 1, 2, 2], &[1.0, 4.0, 3.0, 2.0], true),
            input("a", &[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0], true),
        ],
        vec![
            case("mp1", vec![step("y", &["x"], mp1(0))], "y", &["y", "x.grad"]),
            case("mp1_pad", vec![step("y", &["x"], mp1(1))], "y", &["y", "x.grad"]),
            case(
                "mp2",
                vec![step("y", &["m"], json!({"name": "max_pool2d", "kernel": [2, 2],
                    "stride": [2, 2], "padding": [0, 0]}))],
                "y",
                &["y", "m.grad"],
            ),
            case(
                "avg2",
                vec![step("y", &["a"], json!({"name": "avg_pool2d", "kernel": [2, 2],
                    "stride": [1, 1], "padding": [1, 1]}))],
                "y",
                &["y", "a.grad"],
            ),
        ],
    );
    let out = run_all(&s);
    assert_eq!(values(&out[0][0], &[1, 1, 2]), [3.0, 5.0]);
    assert_eq!(values(&out[0][1], &[1, 1, 5]), [0.0, 1.0, 0.0, 1.0, 0.0]);
    // Windows [−∞, 1], [3, 2], [5, 4].
    assert_eq!(values(&out[1][0], &[1, 1, 3]), [1.0, 3.0, 5.0]);
    assert_eq!(values(&out[1][1], &[1, 1, 5]), [1.0, 1.0, 0.0, 1.0, 0.0]);
    assert_eq!(values(&out[2][0], &[1, 1, 1, 1]), [4.0]);
    assert_eq!(values(&out[2][1], &[1, 1, 2, 2]), [0.0, 1.0, 0.0, 0.0]);
    // Padding zeros count: every window sum over 4.
    assert_eq!(
        values(&out[3][0], &[1, 1, 3, 3]),
        [0.25, 0.75, 0.5, 1.0, 2.5, 1.5, 0.75, 1.75, 1.0]
    );
    assert_eq!(values(&out[3][1], &[1, 1, 2, 2]), [1.0; 4]);
}
