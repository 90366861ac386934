//! Probe checks shared by `probe_f32.rs` and `probe_f64.rs`. They are separate test binaries
//! because burn's ndarray device takes its default float type once per process.
//!
//! Specs are written here in the normalized form the workflow hands the runner
//! (`Probe.runner_spec`); the study's conv1d_grad and conv2d_grad are the repository's
//! `probes/conv1d_grad.yaml` and `probes/conv2d_grad.yaml`. Every value is an integer (or a
//! small dyadic number), so every comparison is equality.

/// The `#[test]` functions of one float type (`"f32"` or `"f64"`): each calls the check of
/// the same name here.
macro_rules! probe_tests {
    ($dtype:literal) => {
        #[test]
        fn conv1d_grad_is_the_study_value() {
            probe_cases::conv1d_grad_is_the_study_value($dtype);
        }

        #[test]
        fn conv2d_grad_is_the_study_value() {
            probe_cases::conv2d_grad_is_the_study_value($dtype);
        }

        #[test]
        fn what_burn_lacks_is_unsupported() {
            probe_cases::what_burn_lacks_is_unsupported($dtype);
        }

        #[test]
        fn burn_panics_are_framework_errors() {
            probe_cases::burn_panics_are_framework_errors($dtype);
        }

        #[test]
        fn views_and_an_sgd_step() {
            probe_cases::views_and_an_sgd_step($dtype);
        }

        #[test]
        fn sgd_momentum_is_a_float32_factor() {
            probe_cases::sgd_momentum_is_a_float32_factor($dtype);
        }
    };
}

use burn_parity::device::{self, Host};
use burn_parity::probe::{run_case, Outcome};
use parity_common::probe_spec::ProbeSpec;
use parity_common::spec::{DeviceKind, FloatType};
use serde_json::{json, Value};

/// The study's conv1d probe (docs/study.md): PyTorch's values (the study's and this
/// workflow's torch rows).
const RIGHT_1D: [f64; 6] = [340.0, 392.0, 444.0, 484.0, 568.0, 652.0];
const BATCH1_1D: [f64; 6] = [20.0, 30.0, 40.0, 44.0, 70.0, 96.0];
const RIGHT_2D: [f64; 8] = [
    4728.0, 4980.0, 5736.0, 5988.0, 6834.0, 7248.0, 8490.0, 8904.0,
];

fn arange(start: f64, n: usize) -> Vec<f64> {
    (0..n).map(|i| start + i as f64).collect()
}

fn input(name: &str, shape: &[usize], values: Vec<f64>, requires_grad: bool) -> Value {
    json!({"name": name, "dtype": "float", "shape": shape, "values": values, "requires_grad": requires_grad})
}

fn spec(dtype: &str, inputs: Vec<Value>, cases: Vec<Value>) -> ProbeSpec {
    let v =
        json!({"probe": "p", "dtype": dtype, "device": "cpu", "inputs": inputs, "cases": cases});
    ProbeSpec::from_json(&v.to_string()).unwrap()
}

/// The run's float type (these specs are f32 or f64).
fn ty(spec: &ProbeSpec) -> FloatType {
    spec.dtype.float_type().expect("an f32 or f64 spec")
}

/// Every case's outcomes, in order, on burn's CPU device in the spec's dtype.
fn run(spec: &ProbeSpec) -> Vec<Vec<Outcome>> {
    let dev = device::open(DeviceKind::Cpu, ty(spec)).unwrap();
    spec.cases
        .iter()
        .map(|c| run_case(spec, c, &dev).unwrap())
        .collect()
}

/// The values of an `ok` outcome, widened to f64, after checking they are in the run dtype
/// and have `shape`.
fn values(o: &Outcome, ty: FloatType, shape: &[usize]) -> Vec<f64> {
    let Outcome::Ok { values, shape: got } = o else {
        panic!("not ok: {o:?}");
    };
    assert_eq!(got, shape);
    match (values, ty) {
        (Host::F32(_), FloatType::F32) | (Host::F64(_), FloatType::F64) => {}
        _ => panic!("a {} run gave {values:?}", ty.name()),
    }
    values.widened()
}

fn conv(padding: usize) -> Value {
    json!({"padding": padding, "stride": 1, "dilation": 1, "groups": 1})
}

/// `probes/conv1d_grad.yaml`: loss = sum(conv1d(x, w)·c) with batch 2 and 2 output channels,
/// and the batch-1 control. burn's kernel gradient is PyTorch's in both.
pub fn conv1d_grad_is_the_study_value(dtype: &str) {
    let (x, c) = (arange(0.0, 12), arange(1.0, 16));
    // The reference by loops: dL/dw[o, 0, k] = Σ_b Σ_l c[b, o, l]·x[b, 0, l + k].
    let grad = |batches: usize| -> Vec<f64> {
        let mut g = vec![0.0; 6];
        for o in 0..2 {
            for k in 0..3 {
                for b in 0..batches {
                    for l in 0..4 {
                        g[o * 3 + k] += c[b * 8 + o * 4 + l] * x[b * 6 + l + k];
                    }
                }
            }
        }
        g
    };
    assert_eq!(grad(2), RIGHT_1D);
    assert_eq!(grad(1), BATCH1_1D);
    let mut op = conv(0);
    op["name"] = json!("conv1d");
    let s = spec(
        dtype,
        vec![
            input("x", &[2, 1, 6], x, false),
            input("w", &[2, 1, 3], vec![1.0, -1.0, 2.0, 0.5, 0.25, -2.0], true),
            input("c", &[2, 2, 4], c, false),
        ],
        vec![
            json!({"name": "batch2", "steps": [{"out": "y", "inputs": ["x", "w"], "op": op}],
                "loss": [{"kind": "weighted_sum", "input": "y", "weights": "c"}],
                "optimizer": null, "optimizer_steps": 1, "compare": ["loss", "w.grad"]}),
            json!({"name": "batch1", "steps": [
                    {"out": "x1", "inputs": ["x"], "op": {"name": "narrow", "dim": 0, "start": 0, "length": 1}},
                    {"out": "c1", "inputs": ["c"], "op": {"name": "narrow", "dim": 0, "start": 0, "length": 1}},
                    {"out": "y", "inputs": ["x1", "w"], "op": op}],
                "loss": [{"kind": "weighted_sum", "input": "y", "weights": "c1"}],
                "optimizer": null, "optimizer_steps": 1, "compare": ["w.grad"]}),
        ],
    );
    let out = run(&s);
    // burn has no rank-0 tensors: the loss is a one-element vector.
    assert_eq!(values(&out[0][0], ty(&s), &[1]), vec![-84.0]);
    assert_eq!(values(&out[0][1], ty(&s), &[2, 1, 3]), RIGHT_1D);
    assert_eq!(values(&out[1][0], ty(&s), &[2, 1, 3]), BATCH1_1D);
}

/// `probes/conv2d_grad.yaml`: loss = sum(conv2d(x, w)·c) with batch 2 and 2 output channels.
pub fn conv2d_grad_is_the_study_value(dtype: &str) {
    let (x, c) = (arange(0.0, 32), arange(1.0, 36));
    let w = vec![1.0, -1.0, 2.0, 0.5, 0.25, -2.0, 1.0, 3.0];
    // The references by loops, over y[b, o, i, j] = Σ w[o, 0, p, q]·x[b, 0, i + p, j + q].
    let (mut grad, mut loss) = (vec![0.0; 8], 0.0);
    for b in 0..2 {
        for o in 0..2 {
            for i in 0..3 {
                for j in 0..3 {
                    let cw = c[((b * 2 + o) * 3 + i) * 3 + j];
                    for p in 0..2 {
                        for q in 0..2 {
                            let xv = x[b * 16 + (i + p) * 4 + j + q];
                            grad[o * 4 + p * 2 + q] += cw * xv;
                            loss += cw * w[o * 4 + p * 2 + q] * xv;
                        }
                    }
                }
            }
        }
    }
    assert_eq!(grad, RIGHT_2D);
    // conv2d takes every argument but `groups` per axis.
    let op = json!({"name": "conv2d", "padding": [0, 0], "stride": [1, 1], "dilation": [1, 1],
        "groups": 1});
    let s = spec(
        dtype,
        vec![
            input("x", &[2, 1, 4, 4], x, false),
            input("w", &[2, 1, 2, 2], w, true),
            input("c", &[2, 2, 3, 3], c, false),
        ],
        vec![
            json!({"name": "batch2", "steps": [{"out": "y", "inputs": ["x", "w"], "op": op}],
            "loss": [{"kind": "weighted_sum", "input": "y", "weights": "c"}],
            "optimizer": null, "optimizer_steps": 1, "compare": ["loss", "w.grad"]}),
        ],
    );
    let out = run(&s);
    assert_eq!(values(&out[0][0], ty(&s), &[1]), vec![loss]);
    assert_eq!(values(&out[0][1], ty(&s), &[2, 1, 2, 2]), RIGHT_2D);
}

/// An op burn's API lacks (`contiguous`) and a rank it has no tensors of (0) make every
/// quantity of their case `unsupported`, with the reason; the other cases still run, and an
/// input burn cannot hold spoils only the cases that read it.
pub fn what_burn_lacks_is_unsupported(dtype: &str) {
    let s = spec(
        dtype,
        vec![
            input("x", &[2, 3], arange(-2.0, 6), true),
            input("s", &[], vec![2.0], false),
        ],
        vec![
            json!({"name": "copy", "steps": [
                    {"out": "t", "inputs": ["x"], "op": {"name": "transpose", "dim0": 0, "dim1": 1}},
                    {"out": "tc", "inputs": ["t"], "op": {"name": "contiguous"}},
                    {"out": "r", "inputs": ["tc"], "op": {"name": "relu"}}],
                "loss": [{"kind": "sum", "input": "r"}], "optimizer": null, "optimizer_steps": 1,
                "compare": ["t", "r", "loss", "x.grad"]}),
            json!({"name": "scalar", "steps": [{"out": "y", "inputs": ["x", "s"], "op": {"name": "mul"}}],
                "loss": null, "optimizer": null, "optimizer_steps": 1, "compare": ["y", "s"]}),
            json!({"name": "plain", "steps": [{"out": "r", "inputs": ["x"], "op": {"name": "relu"}}],
                "loss": [{"kind": "sum", "input": "r"}], "optimizer": null, "optimizer_steps": 1,
                "compare": ["r", "x.grad"]}),
        ],
    );
    let out = run(&s);
    assert_eq!(out[0].len(), 4);
    for o in &out[0] {
        assert!(
            matches!(o, Outcome::Unsupported(m) if m.contains("contiguous")),
            "{o:?}"
        );
    }
    for o in &out[1] {
        assert!(
            matches!(o, Outcome::Unsupported(m) if m.contains("rank-0")),
            "{o:?}"
        );
    }
    assert_eq!(
        values(&out[2][0], ty(&s), &[2, 3]),
        vec![0.0, 0.0, 0.0, 1.0, 2.0, 3.0]
    );
    assert_eq!(out[2].len(), 2);
    assert!(matches!(out[2][1], Outcome::Ok { .. }), "{:?}", out[2][1]);
}

/// burn checks shapes by panicking: the panic is a `framework-error` outcome of every quantity
/// of the case, with burn's message, and the next case runs. Element-wise ops on unequal
/// shapes are framework errors too (the probe format's rule, as on the PyTorch side), not
/// unsupported, even when the ranks differ.
pub fn burn_panics_are_framework_errors(dtype: &str) {
    let s = spec(
        dtype,
        vec![
            input("a", &[2, 3], arange(1.0, 6), true),
            input("b", &[2, 2], arange(1.0, 4), false),
        ],
        vec![
            json!({"name": "mismatch", "steps": [{"out": "y", "inputs": ["a", "b"], "op": {"name": "matmul"}}],
                "loss": [{"kind": "sum", "input": "y"}], "optimizer": null, "optimizer_steps": 1,
                "compare": ["y", "a.grad"]}),
            json!({"name": "after", "steps": [{"out": "y", "inputs": ["b", "a"], "op": {"name": "matmul"}}],
                "loss": [{"kind": "sum", "input": "y"}], "optimizer": null, "optimizer_steps": 1,
                "compare": ["y"]}),
            json!({"name": "unequal", "steps": [
                    {"out": "f", "inputs": ["a"], "op": {"name": "reshape", "shape": [6]}},
                    {"out": "y", "inputs": ["a", "f"], "op": {"name": "mul"}}],
                "loss": null, "optimizer": null, "optimizer_steps": 1, "compare": ["f", "y"]}),
        ],
    );
    let out = run(&s);
    for o in &out[2] {
        assert!(
            matches!(o, Outcome::FrameworkError(m) if m == "mul: shapes [2, 3] and [6] differ"),
            "{o:?}"
        );
    }
    for o in &out[0] {
        assert!(
            matches!(o, Outcome::FrameworkError(m) if m.starts_with("panic: ")),
            "{o:?}"
        );
    }
    // b·a = [[1, 2], [3, 4]]·[[1, 2, 3], [4, 5, 6]].
    assert_eq!(
        values(&out[1][0], ty(&s), &[2, 3]),
        vec![9.0, 12.0, 15.0, 19.0, 26.0, 33.0]
    );
}

/// Views, add and one SGD step, with hand-derived values (the Python tests' `NEW_PROBE`):
/// r = xᵀ flattened = [0, 3, 1, 4, 2, 5]; a = 2r; loss = Σ a·w = 130 for w = 1…6;
/// dloss/dx[k, j] = 2·w[2j + k]; x after SGD(lr 0.5) = x − grad/2.
pub fn views_and_an_sgd_step(dtype: &str) {
    let s = spec(
        dtype,
        vec![
            input("x", &[2, 3], arange(0.0, 6), true),
            input("w", &[6], arange(1.0, 6), false),
        ],
        vec![json!({"name": "views", "steps": [
                {"out": "xt", "inputs": ["x"], "op": {"name": "transpose", "dim0": 0, "dim1": 1}},
                {"out": "r", "inputs": ["xt"], "op": {"name": "reshape", "shape": [6]}},
                {"out": "u", "inputs": ["r"], "op": {"name": "unsqueeze", "dim": 0}},
                {"out": "q", "inputs": ["u"], "op": {"name": "squeeze", "dim": 0}},
                {"out": "a", "inputs": ["q", "q"], "op": {"name": "add"}}],
            "loss": [{"kind": "weighted_sum", "input": "a", "weights": "w"}],
            "optimizer": {"name": "sgd", "lr": 0.5, "momentum": 0.0, "dampening": 0.0,
                "nesterov": false, "weight_decay": 0.0}, "optimizer_steps": 1,
            "compare": ["r", "a", "loss", "x.grad", "x.after_step"]})],
    );
    let out = &run(&s)[0];
    let ty = ty(&s);
    assert_eq!(
        values(&out[0], ty, &[6]),
        vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
    );
    assert_eq!(
        values(&out[1], ty, &[6]),
        vec![0.0, 6.0, 2.0, 8.0, 4.0, 10.0]
    );
    assert_eq!(values(&out[2], ty, &[1]), vec![130.0]);
    assert_eq!(
        values(&out[3], ty, &[2, 3]),
        vec![2.0, 6.0, 10.0, 4.0, 8.0, 12.0]
    );
    assert_eq!(
        values(&out[4], ty, &[2, 3]),
        vec![-1.0, -2.0, -3.0, 1.0, 0.0, -1.0]
    );
}

/// burn's `Momentum` holds the momentum factor as `f32` (burn-optim 0.22.1 `momentum.rs`):
/// in a float64 run μ = 0.9 multiplies the buffer as 0.89999997615814…, so after two steps
/// with gradient g = [1, 2] the buffer is (1 + μ₃₂)·g = [1.899999976158142, 3.799999952316284]
/// where PyTorch's float64 SGD gives [1.9, 3.8]. In a float32 run both round μ alike.
pub fn sgd_momentum_is_a_float32_factor(dtype: &str) {
    let s = spec(
        dtype,
        vec![
            input("x", &[2], vec![1.0, 2.0], true),
            input("c", &[2], vec![1.0, 2.0], false),
        ],
        vec![json!({"name": "loop", "steps": [],
            "loss": [{"kind": "weighted_sum", "input": "x", "weights": "c"}],
            "optimizer": {"name": "sgd", "lr": 0.5, "momentum": 0.9, "dampening": 0.0,
                "nesterov": false, "weight_decay": 0.0},
            "optimizer_steps": 2, "compare": ["x.momentum_buffer"]})],
    );
    let ty = ty(&s);
    let got = values(&run(&s)[0][0], ty, &[2, 2]);
    let mu = f64::from(0.9f32);
    let want: Vec<f64> = match ty {
        FloatType::F64 => [1.0, 2.0, (1.0 + mu), (1.0 + mu) * 2.0].to_vec(),
        FloatType::F32 => [1.0f32, 2.0, 1.0 + 0.9f32, 2.0 + 0.9f32 * 2.0]
            .map(f64::from)
            .to_vec(),
    };
    assert_eq!(got, want);
    if ty == FloatType::F64 {
        assert_eq!(got[2], 1.899_999_976_158_142);
        assert_ne!(got[2], 1.9, "PyTorch's float64 buffer");
    }
}
