//! The probe specification: one op probe, normalized by the workflow.
//!
//! A probe file (`probes/{name}.yaml`, schema `schemas/probe.schema.yaml`) is validated and
//! normalized by `scripts/parity/probes.py` (`Probe.runner_spec`): inputs expanded to flat
//! float64 values with their shape, every op argument explicit, the loss as a list of terms.
//! Nothing here has a default and unknown fields are an error, so a drift between the two
//! sides fails loudly. Reference values and known bugs stay on the Python side, which judges.
//!
//! Every runner reports its outcomes the same way: one `result` frame per (case, quantity)
//! whose metadata is [`result_meta`] with a [`Status`].

use std::collections::{HashMap, HashSet};
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use crate::frames::meta;
use crate::spec::{DeviceKind, FloatType};

/// What a runner reports for one (case, quantity): the `status` of its `result` frame, one of
/// the Python side's `probe_results.STATUSES`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The values, in the run dtype, are in the frame's `values` tensor.
    Ok,
    /// The framework gave no gradient for the input.
    MissingGradient,
    /// The framework raised an error (or panicked) before the quantity was known; the
    /// message says what.
    FrameworkError,
    /// The framework's API offers no way to compute the case (an op or an argument it
    /// lacks, or one the runner's interpreter does not map); the message says which.
    Unsupported,
}

impl Status {
    /// The name in the frame and in the result file: `ok`, `missing-gradient`,
    /// `framework-error`, `unsupported`.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::MissingGradient => "missing-gradient",
            Status::FrameworkError => "framework-error",
            Status::Unsupported => "unsupported",
        }
    }
}

/// Metadata of the `result` frame of one (case, quantity): `kind` `result`, `case`,
/// `quantity`, `status` ([`Status::name`]) and `message` (empty unless the framework raised
/// or cannot run the case). With [`Status::Ok`] the frame holds one tensor `values` in the
/// run dtype with the quantity's shape; otherwise none.
pub fn result_meta(
    case: &str,
    quantity: &str,
    status: Status,
    message: &str,
) -> HashMap<String, String> {
    meta([
        ("kind", "result".into()),
        ("case", case.into()),
        ("quantity", quantity.into()),
        ("status", status.name().into()),
        ("message", message.into()),
    ])
}

/// A signed dimension (negative counts from the end, as in PyTorch) as an index below
/// `rank`, or `None` when it is out of range.
pub fn dim_index(d: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let i = if d < 0 { d + r } else { d };
    (0..r).contains(&i).then_some(i as usize)
}

/// A named input tensor.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputSpec {
    /// Name the steps refer to.
    pub name: String,
    /// Shape; `[]` is a scalar.
    pub shape: Vec<usize>,
    /// Row-major float64 values, `shape.iter().product()` of them, rounded once to the run's
    /// dtype.
    pub values: Vec<f64>,
    /// A leaf whose gradient may be compared (a `Var` on the candle side).
    pub requires_grad: bool,
}

/// Which candle function computes an op that candle has twice. Runners of frameworks with
/// one function for the op (burn) ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CandleImpl {
    /// The single-kernel `candle_nn::ops` function (`layer_norm`, `softmax_last_dim`).
    Fused,
    /// The reference built from elementary tensor ops (`layer_norm_slow`, `softmax`).
    Slow,
}

/// One op and its arguments (see the schema for what each computes). Dimensions are signed:
/// negative counts from the end, as in PyTorch.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "name", rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    /// Swap two dimensions (a strided view).
    Transpose {
        /// First dimension.
        dim0: i64,
        /// Second dimension.
        dim1: i64,
    },
    /// `length` elements of `dim` from `start` (a view with an offset).
    Narrow {
        /// Dimension.
        dim: i64,
        /// First element kept.
        start: usize,
        /// Elements kept.
        length: usize,
    },
    /// Expand to `shape` with stride 0 along broadcast dimensions.
    BroadcastTo {
        /// Target shape.
        shape: Vec<usize>,
    },
    /// Insert a dimension of size 1.
    Unsqueeze {
        /// Position of the new dimension.
        dim: i64,
    },
    /// Drop a dimension of size 1.
    Squeeze {
        /// Dimension.
        dim: i64,
    },
    /// Reshape (a copy when the input is not contiguous).
    Reshape {
        /// Target shape.
        shape: Vec<usize>,
    },
    /// A contiguous copy.
    Contiguous,
    /// 1-D convolution of `[b, c_in, l]` with a `[c_out, c_in/groups, k]` kernel, no bias.
    Conv1d {
        /// Zero padding on both sides.
        padding: usize,
        /// Stride.
        stride: usize,
        /// Dilation.
        dilation: usize,
        /// Groups.
        groups: usize,
    },
    /// 2-D convolution of `[b, c_in, h, w]` with a `[c_out, c_in/groups, kh, kw]` kernel.
    Conv2d {
        /// Zero padding on every side.
        padding: usize,
        /// Stride.
        stride: usize,
        /// Dilation.
        dilation: usize,
        /// Groups.
        groups: usize,
    },
    /// `x·weightᵀ (+ bias)`: inputs `[x, weight]` or `[x, weight, bias]`.
    Linear,
    /// Batched matrix product with equal batch dimensions.
    Matmul,
    /// Layer norm over the last dimension: inputs `[x, weight, bias]`.
    LayerNorm {
        /// ε added to the variance (candle takes it as f32).
        eps: f64,
        /// Fused or slow candle function.
        candle: CandleImpl,
    },
    /// Softmax along `dim` (fused: the last dimension only).
    Softmax {
        /// Dimension.
        dim: i64,
        /// Fused or slow candle function.
        candle: CandleImpl,
    },
    /// Nearest upsampling `[b, c, l]` → `[b, c, size]`.
    UpsampleNearest1d {
        /// Output length.
        size: usize,
    },
    /// Nearest upsampling `[b, c, h, w]` → `[b, c, size[0], size[1]]`.
    UpsampleNearest2d {
        /// Output height and width.
        size: [usize; 2],
    },
    /// max(x, 0).
    Relu,
    /// |x|.
    Abs,
    /// Element-wise sum of two equal shapes.
    Add,
    /// Element-wise product of two equal shapes.
    Mul,
    /// Mean binary cross-entropy of `[logits, targets]` (a scalar).
    BceWithLogits,
}

impl Op {
    /// How many input tensors the op takes: (least, most).
    pub fn arity(&self) -> (usize, usize) {
        match self {
            Op::Linear => (2, 3),
            Op::LayerNorm { .. } => (3, 3),
            Op::Conv1d { .. }
            | Op::Conv2d { .. }
            | Op::Matmul
            | Op::Add
            | Op::Mul
            | Op::BceWithLogits => (2, 2),
            _ => (1, 1),
        }
    }
}

/// One step: `out = op(inputs…)`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepSpec {
    /// Name of the result; new within its case.
    pub out: String,
    /// Names of the inputs (probe inputs or earlier steps' outs).
    pub inputs: Vec<String>,
    /// The op.
    pub op: Op,
}

/// One term of the scalar loss; terms are added in order.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LossTerm {
    /// Sum of every element.
    Sum {
        /// Tensor name.
        input: String,
    },
    /// Sum of squares of every element.
    SumSquares {
        /// Tensor name.
        input: String,
    },
    /// Sum of `input·weights` over every element (equal shapes).
    WeightedSum {
        /// Tensor name.
        input: String,
        /// Tensor name.
        weights: String,
    },
}

impl LossTerm {
    /// The tensor names the term reads.
    pub fn names(&self) -> Vec<&str> {
        match self {
            LossTerm::Sum { input } | LossTerm::SumSquares { input } => vec![input],
            LossTerm::WeightedSum { input, weights } => vec![input, weights],
        }
    }
}

/// One optimizer step over every input with `requires_grad`, every hyperparameter explicit.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "name", rename_all = "snake_case", deny_unknown_fields)]
pub enum ProbeOptimizer {
    /// θ ← θ − lr·g (`candle_nn::SGD`).
    Sgd {
        /// Learning rate.
        lr: f64,
    },
    /// `candle_nn::AdamW`.
    Adamw {
        /// Learning rate.
        lr: f64,
        /// (β₁, β₂).
        betas: [f64; 2],
        /// ε added to √v̂.
        eps: f64,
        /// Decoupled weight decay λ.
        weight_decay: f64,
    },
}

/// What a case reports: parsed from `loss`, `<name>`, `<input>.grad`, `<input>.after_step`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Quantity {
    /// The scalar loss.
    Loss,
    /// Forward values of a named tensor.
    Value(String),
    /// Gradient of an input with `requires_grad`.
    Grad(String),
    /// Value of an input with `requires_grad` after the optimizer step.
    AfterStep(String),
}

impl Quantity {
    /// Parses a quantity name.
    ///
    /// # Errors
    /// For a suffix other than `grad` and `after_step`.
    pub fn parse(q: &str) -> Result<Self> {
        Ok(match q.split_once('.') {
            None if q == "loss" => Quantity::Loss,
            None => Quantity::Value(q.to_string()),
            Some((n, "grad")) => Quantity::Grad(n.to_string()),
            Some((n, "after_step")) => Quantity::AfterStep(n.to_string()),
            Some((_, s)) => bail!("quantity {q:?}: unknown suffix {s:?}"),
        })
    }
}

impl CaseSpec {
    /// The case's `compare` list, parsed, in order.
    ///
    /// # Errors
    /// For a quantity [`Quantity::parse`] refuses.
    pub fn quantities(&self) -> Result<Vec<Quantity>> {
        self.compare.iter().map(|q| Quantity::parse(q)).collect()
    }
}

/// One case: steps, optional loss and optimizer, and the quantities to report.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseSpec {
    /// Case name.
    pub name: String,
    /// Steps in order.
    pub steps: Vec<StepSpec>,
    /// Loss terms, or `None` for a forward-only case.
    pub loss: Option<Vec<LossTerm>>,
    /// One optimizer step after `loss.backward()`.
    pub optimizer: Option<ProbeOptimizer>,
    /// Quantities to report, in order.
    pub compare: Vec<String>,
}

/// One probe run: the probe in one dtype on one device.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeSpec {
    /// Probe name (the file name without `.yaml`).
    pub probe: String,
    /// Run dtype.
    pub dtype: FloatType,
    /// Device.
    pub device: DeviceKind,
    /// Inputs, shared by every case (each case starts from fresh tensors).
    pub inputs: Vec<InputSpec>,
    /// Cases in order.
    pub cases: Vec<CaseSpec>,
}

impl ProbeSpec {
    /// Parses and checks a spec.
    ///
    /// # Errors
    /// Malformed JSON, an unknown field, or a spec that cannot run: values that do not fill
    /// their shape, a name used before it is defined or defined twice, an op with the wrong
    /// number of inputs, a quantity that does not exist, an optimizer without a loss.
    pub fn from_json(text: &str) -> Result<Self> {
        let spec: ProbeSpec = serde_json::from_str(text).context("parsing the probe spec JSON")?;
        spec.check()?;
        Ok(spec)
    }

    /// Reads a spec from a file; see [`ProbeSpec::from_json`].
    ///
    /// # Errors
    /// As [`ProbeSpec::from_json`], or when the file cannot be read.
    pub fn from_path(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading probe spec {}", path.display()))?;
        Self::from_json(&text).with_context(|| format!("in probe spec {}", path.display()))
    }

    /// The input called `name`.
    pub fn input(&self, name: &str) -> Option<&InputSpec> {
        self.inputs.iter().find(|i| i.name == name)
    }

    fn check(&self) -> Result<()> {
        let mut inputs = HashSet::new();
        for i in &self.inputs {
            if !inputs.insert(i.name.as_str()) {
                bail!("input {:?} is defined twice", i.name);
            }
            let n: usize = i.shape.iter().product();
            if n != i.values.len() {
                bail!(
                    "input {:?}: shape {:?} holds {n} values, {} given",
                    i.name,
                    i.shape,
                    i.values.len()
                );
            }
        }
        for case in &self.cases {
            self.check_case(case, &inputs)
                .with_context(|| format!("case {:?}", case.name))?;
        }
        Ok(())
    }

    fn check_case(&self, case: &CaseSpec, inputs: &HashSet<&str>) -> Result<()> {
        let mut known: HashSet<&str> = inputs.clone();
        for (i, step) in case.steps.iter().enumerate() {
            let (least, most) = step.op.arity();
            if step.inputs.len() < least || step.inputs.len() > most {
                bail!(
                    "step {i} ({:?}) takes {least} to {most} inputs, {} given",
                    step.op,
                    step.inputs.len()
                );
            }
            if let Some(n) = step.inputs.iter().find(|n| !known.contains(n.as_str())) {
                bail!("step {i} reads {n:?}, which is not defined before it");
            }
            if step.out == "loss" || !known.insert(step.out.as_str()) {
                bail!("step {i} defines {:?}, which is taken", step.out);
            }
        }
        for term in case.loss.iter().flatten() {
            if let Some(n) = term.names().into_iter().find(|n| !known.contains(n)) {
                bail!("the loss reads {n:?}, which is not defined");
            }
        }
        if case.optimizer.is_some() && case.loss.is_none() {
            bail!("an optimizer step needs a loss");
        }
        let leaf = |n: &str| self.input(n).is_some_and(|i| i.requires_grad);
        for q in &case.compare {
            let ok = match Quantity::parse(q)? {
                Quantity::Loss => case.loss.is_some(),
                Quantity::Value(n) => known.contains(n.as_str()),
                Quantity::Grad(n) => leaf(&n) && case.loss.is_some(),
                Quantity::AfterStep(n) => leaf(&n) && case.optimizer.is_some(),
            };
            if !ok {
                bail!("quantity {q:?} does not exist in this case");
            }
        }
        Ok(())
    }
}

/// Runs `f`, catching a panic inside the framework it calls: `Err` holds the panic's message
/// on one line, prefixed `panic: ` (a probe case that panics is a framework error, an
/// outcome of the probe, not a crash of the runner).
pub fn catch_panic<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|payload| {
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        format!(
            "panic: {}",
            msg.split_whitespace().collect::<Vec<_>>().join(" ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> serde_json::Value {
        serde_json::json!({
            "probe": "p", "dtype": "f32", "device": "cpu",
            "inputs": [
                {"name": "x", "shape": [1, 1, 3], "values": [0.0, 1.0, 2.0], "requires_grad": false},
                {"name": "w", "shape": [1, 1, 2], "values": [1.0, -1.0], "requires_grad": true}
            ],
            "cases": [{
                "name": "a",
                "steps": [{"out": "y", "inputs": ["x", "w"],
                           "op": {"name": "conv1d", "padding": 0, "stride": 1, "dilation": 1, "groups": 1}}],
                "loss": [{"kind": "sum", "input": "y"}],
                "optimizer": null,
                "compare": ["loss", "y", "w.grad"]
            }]
        })
    }

    #[test]
    fn parses_a_normalized_probe() {
        let spec = ProbeSpec::from_json(&base().to_string()).unwrap();
        assert_eq!(spec.cases[0].steps[0].op.arity(), (2, 2));
        assert!(matches!(
            spec.cases[0].steps[0].op,
            Op::Conv1d { stride: 1, .. }
        ));
        assert_eq!(
            Quantity::parse("w.grad").unwrap(),
            Quantity::Grad("w".into())
        );
    }

    #[test]
    fn op_names_are_the_schema_names() {
        for (json, want) in [
            (r#"{"name": "broadcast_to", "shape": [2]}"#, "BroadcastTo"),
            (
                r#"{"name": "upsample_nearest1d", "size": 4}"#,
                "UpsampleNearest1d",
            ),
            (
                r#"{"name": "upsample_nearest2d", "size": [4, 4]}"#,
                "UpsampleNearest2d",
            ),
            (r#"{"name": "bce_with_logits"}"#, "BceWithLogits"),
            (
                r#"{"name": "layer_norm", "eps": 1e-5, "candle": "slow"}"#,
                "LayerNorm",
            ),
        ] {
            let op: Op = serde_json::from_str(json).unwrap();
            assert!(format!("{op:?}").starts_with(want), "{json} → {op:?}");
        }
    }

    #[test]
    fn signed_dimensions_count_from_the_end() {
        assert_eq!(dim_index(-1, 3), Some(2));
        assert_eq!(dim_index(-3, 3), Some(0));
        assert_eq!(dim_index(2, 3), Some(2));
        assert_eq!(dim_index(3, 3), None);
        assert_eq!(dim_index(-4, 3), None);
        assert_eq!(dim_index(0, 0), None);
    }

    #[test]
    fn statuses_are_the_python_names() {
        let m = result_meta("c", "w.grad", Status::Unsupported, "why");
        assert_eq!(m["kind"], "result");
        assert_eq!(m["status"], "unsupported");
        assert_eq!(m["message"], "why");
        let names: Vec<_> = [
            Status::Ok,
            Status::MissingGradient,
            Status::FrameworkError,
            Status::Unsupported,
        ]
        .map(Status::name)
        .to_vec();
        assert_eq!(
            names,
            ["ok", "missing-gradient", "framework-error", "unsupported"]
        );
    }

    #[test]
    fn unknown_argument_is_refused() {
        let mut v = base();
        v["cases"][0]["steps"][0]["op"]["paddin"] = serde_json::json!(1);
        let err = ProbeSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("paddin"), "{err:#}");
    }

    #[test]
    fn undefined_names_and_quantities_are_refused() {
        let mut v = base();
        v["cases"][0]["steps"][0]["inputs"] = serde_json::json!(["x", "k"]);
        let err = ProbeSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("\"k\""), "{err:#}");

        let mut v = base();
        v["cases"][0]["compare"] = serde_json::json!(["x.grad"]);
        let err = ProbeSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("x.grad"), "{err:#}");
    }

    #[test]
    fn values_must_fill_the_shape() {
        let mut v = base();
        v["inputs"][0]["values"] = serde_json::json!([0.0, 1.0]);
        let err = ProbeSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("holds 3 values"), "{err:#}");
    }

    /// The workflow writes Python's shortest round-trip decimals (`repr`); they must parse to
    /// the same binary64 value, or inputs such as 0.1·i would differ between the frameworks
    /// by an ulp. Rust's `str::parse` is exact; serde_json needs its `float_roundtrip`.
    #[test]
    fn floats_round_trip_exactly() {
        for i in 0..20_000u32 {
            let x = f64::from(i) * 0.1 + 1e-3 * f64::from(i % 7);
            let text = format!("{x:?}");
            let parsed: f64 = serde_json::from_str(&text).unwrap();
            assert_eq!(parsed.to_bits(), x.to_bits(), "{text}");
        }
    }

    #[test]
    fn a_panic_is_caught_as_one_line() {
        assert_eq!(catch_panic(|| 3), Ok(3));
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let caught = catch_panic(|| -> u8 { panic!("shape mismatch\n  lhs [2, 3]") });
        std::panic::set_hook(hook);
        assert_eq!(caught, Err("panic: shape mismatch lhs [2, 3]".to_string()));
    }
}
