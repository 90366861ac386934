//! The v2 ops, optimizer loops and batches on burn's CPU device in float32 (the library's
//! test process opens the device once, in float32; `tests/probe_f64.rs` covers float64).
//! Inputs are small integers, so most expected values are exact; transcendental ones are
//! computed here from their formulas in float64 and compared within 1e-6.
//!
//! Where burn's semantics differ from PyTorch's the test asserts what burn does, and says
//! what PyTorch gives (the report's findings).

use parity_common::probe_spec::ProbeSpec;
use parity_common::spec::{DeviceKind, FloatType};
use serde_json::{json, Value as Json};

use super::{run_case, Outcome};
use crate::device::{self, Host};

pub(super) fn input(name: &str, shape: &[usize], values: &[f64], requires_grad: bool) -> Json {
    json!({"name": name, "dtype": "float", "shape": shape, "values": values,
           "requires_grad": requires_grad})
}

pub(super) fn int_input(name: &str, shape: &[usize], values: &[f64]) -> Json {
    json!({"name": name, "dtype": "int64", "shape": shape, "values": values,
           "requires_grad": false})
}

pub(super) fn step(out: &str, inputs: &[&str], op: Json) -> Json {
    json!({"out": out, "inputs": inputs, "op": op})
}

/// A case with a `sum` loss over `loss` (none when empty) and no optimizer.
pub(super) fn case(name: &str, steps: Vec<Json>, loss: &str, compare: &[&str]) -> Json {
    let loss = if loss.is_empty() {
        Json::Null
    } else {
        json!([{"kind": "sum", "input": loss}])
    };
    json!({"name": name, "steps": steps, "loss": loss, "optimizer": null,
           "optimizer_steps": 1, "compare": compare})
}

pub(super) fn probe_json(dtype: &str, inputs: Vec<Json>, cases: Vec<Json>) -> Json {
    json!({"probe": "p", "dtype": dtype, "device": "cpu", "inputs": inputs, "cases": cases})
}

pub(super) fn spec(inputs: Vec<Json>, cases: Vec<Json>) -> ProbeSpec {
    ProbeSpec::from_json(&probe_json("f32", inputs, cases).to_string()).unwrap()
}

/// Every case's outcomes on burn's CPU device.
pub(super) fn run_all(spec: &ProbeSpec) -> Vec<Vec<Outcome>> {
    let dev = device::open(DeviceKind::Cpu, FloatType::F32).unwrap();
    spec.cases
        .iter()
        .map(|c| run_case(spec, c, &dev).unwrap())
        .collect()
}

/// The values of an `ok` float outcome (float32), widened, after checking its shape.
pub(super) fn values(o: &Outcome, shape: &[usize]) -> Vec<f64> {
    let Outcome::Ok { values, shape: got } = o else {
        panic!("not ok: {o:?}");
    };
    assert_eq!(got, shape, "{o:?}");
    assert!(matches!(values, Host::F32(_)), "{values:?}");
    values.widened()
}

/// The values of an `ok` integer outcome: float64, integers.
pub(super) fn ints(o: &Outcome, shape: &[usize]) -> Vec<f64> {
    let Outcome::Ok { values, shape: got } = o else {
        panic!("not ok: {o:?}");
    };
    assert_eq!(got, shape, "{o:?}");
    let Host::F64(v) = values else {
        panic!("an integer quantity is sent as float64: {values:?}");
    };
    v.clone()
}

pub(super) fn close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-6 * w.abs().max(1.0),
            "{got:?} vs {want:?}"
        );
    }
}

pub(super) fn unsupported(o: &Outcome, needle: &str) {
    assert!(
        matches!(o, Outcome::Unsupported(m) if m.contains(needle)),
        "{o:?} should be unsupported naming {needle:?}"
    );
}

mod layers;
mod reduce;
mod runs;
