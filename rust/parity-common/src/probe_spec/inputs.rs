//! A probe's inputs: the run dtype ([`ProbeDtype`]) and the named input tensors
//! ([`InputSpec`]) with their element type ([`InputKind`]) and values.

use serde::Deserialize;

use crate::spec::FloatType;

/// The dtype of a probe run: the training dtypes plus the half-precision ones (probes only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProbeDtype {
    /// IEEE 754 binary16.
    F16,
    /// bfloat16 (8 exponent bits, 7 fraction bits).
    Bf16,
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary64.
    F64,
}

impl ProbeDtype {
    /// The short name used in paths and metadata (`f16`, `bf16`, `f32`, `f64`).
    pub fn name(self) -> &'static str {
        match self {
            ProbeDtype::F16 => "f16",
            ProbeDtype::Bf16 => "bf16",
            ProbeDtype::F32 => "f32",
            ProbeDtype::F64 => "f64",
        }
    }

    /// The training dtype of the same name, or `None` for a half-precision one.
    pub fn float_type(self) -> Option<FloatType> {
        match self {
            ProbeDtype::F32 => Some(FloatType::F32),
            ProbeDtype::F64 => Some(FloatType::F64),
            ProbeDtype::F16 | ProbeDtype::Bf16 => None,
        }
    }
}

/// The element type of an input: the run's float dtype, or 64-bit integers (indices,
/// class targets) whatever the run's dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InputKind {
    /// Float values rounded once to the run's dtype.
    Float,
    /// Integer values (exact in the float64 list); never `requires_grad`.
    Int64,
}

/// Reads a list of float64 values where a non-finite value is written as the string `inf`,
/// `-inf` or `nan` (JSON has no literal for them; `Probe.runner_spec` writes them so).
fn de_values<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Vec<f64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Value {
        Number(f64),
        Text(String),
    }
    Vec::<Value>::deserialize(d)?
        .into_iter()
        .map(|v| match v {
            Value::Number(x) => Ok(x),
            Value::Text(t) => match t.as_str() {
                "inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                "nan" => Ok(f64::NAN),
                other => Err(serde::de::Error::custom(format!(
                    "{other:?} is not a number (only \"inf\", \"-inf\" and \"nan\" are)"
                ))),
            },
        })
        .collect()
}

/// A named input tensor.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputSpec {
    /// Name the steps refer to.
    pub name: String,
    /// Element type.
    pub dtype: InputKind,
    /// Shape; `[]` is a scalar.
    pub shape: Vec<usize>,
    /// Row-major float64 values, `shape.iter().product()` of them, rounded once to the run's
    /// dtype (integers for [`InputKind::Int64`]); ±∞ and NaN allowed.
    #[serde(deserialize_with = "de_values")]
    pub values: Vec<f64>,
    /// A leaf whose gradient may be compared (a `Var` on the candle side).
    pub requires_grad: bool,
}
