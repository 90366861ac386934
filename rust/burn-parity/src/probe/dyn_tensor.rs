//! burn's tensors carry their rank (and float/int kind) in their type (`Tensor<D>`,
//! `Tensor<D, Int>`), a probe's only at run time: [`Dyn`] holds a float tensor of rank 1 to
//! 4, [`DynInt`] an int64 one, and [`Value`] either (see [`RANKS`]).

use anyhow::{anyhow, Result};
use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use parity_common::probe_spec::dim_index;
use parity_common::spec::FloatType;

use super::outcome::{framework, unsupported, Fault, Outcome, Step};
use crate::device::{float_tensor_from_f64, Host};

/// The ranks the interpreter holds (burn has no rank 0).
pub const RANKS: std::ops::RangeInclusive<usize> = 1..=4;

/// A float tensor of rank 1 to 4 (see [`RANKS`]).
#[derive(Debug, Clone)]
pub enum Dyn {
    /// Rank 1.
    R1(Tensor<1>),
    /// Rank 2.
    R2(Tensor<2>),
    /// Rank 3.
    R3(Tensor<3>),
    /// Rank 4.
    R4(Tensor<4>),
}

/// An int64 tensor of rank 1 to 4: indices, class targets, argmax/argmin/argsort results.
#[derive(Debug, Clone)]
pub enum DynInt {
    /// Rank 1.
    R1(Tensor<1, Int>),
    /// Rank 2.
    R2(Tensor<2, Int>),
    /// Rank 3.
    R3(Tensor<3, Int>),
    /// Rank 4.
    R4(Tensor<4, Int>),
}

/// A named tensor of a case: float (the run dtype) or int64.
#[derive(Debug, Clone)]
pub enum Value {
    /// Float tensor.
    Float(Dyn),
    /// Int64 tensor.
    Int(DynInt),
}

/// Evaluates `$body` with `$x` bound to the tensor `$t` (a [`Dyn`] or a [`DynInt`],
/// named by `$ty`) holds, whatever its rank.
macro_rules! each_rank {
    ($t:expr, $x:ident => $body:expr) => {
        each_rank!(Dyn, $t, $x => $body)
    };
    ($ty:ident, $t:expr, $x:ident => $body:expr) => {
        match $t {
            $ty::R1($x) => $body,
            $ty::R2($x) => $body,
            $ty::R3($x) => $body,
            $ty::R4($x) => $body,
        }
    };
}

/// Evaluates `$body` with the constant `$r` set to `$rank`; returns unsupported for a rank
/// outside [`RANKS`].
macro_rules! with_rank {
    ($rank:expr, $r:ident => $body:expr) => {
        match $rank {
            1 => {
                const $r: usize = 1;
                $body
            }
            2 => {
                const $r: usize = 2;
                $body
            }
            3 => {
                const $r: usize = 3;
                $body
            }
            4 => {
                const $r: usize = 4;
                $body
            }
            other => return Err($crate::probe::dyn_tensor::unsupported_rank(other)),
        }
    };
}

/// Why a rank cannot be held.
pub(crate) fn unsupported_rank(rank: usize) -> Fault {
    if rank == 0 {
        unsupported("burn has no rank-0 tensors")
    } else {
        unsupported(format!(
            "rank {rank}: burn-parity's probe interpreter holds ranks {} to {}",
            RANKS.start(),
            RANKS.end()
        ))
    }
}

/// A burn tensor type of one fixed rank, taken out of a [`Dyn`] or [`DynInt`] (`Src`).
pub(crate) trait Ranked: Sized {
    type Src;
    const RANK: usize;
    fn take(t: Self::Src) -> Option<Self>;
}

macro_rules! ranked {
    ($($d:literal => $v:ident),*) => {$(
        impl From<Tensor<$d>> for Dyn {
            fn from(t: Tensor<$d>) -> Self {
                Dyn::$v(t)
            }
        }
        impl From<Tensor<$d, Int>> for DynInt {
            fn from(t: Tensor<$d, Int>) -> Self {
                DynInt::$v(t)
            }
        }
        impl Ranked for Tensor<$d> {
            type Src = Dyn;
            const RANK: usize = $d;
            fn take(t: Dyn) -> Option<Self> {
                match t {
                    Dyn::$v(x) => Some(x),
                    _ => None,
                }
            }
        }
        impl Ranked for Tensor<$d, Int> {
            type Src = DynInt;
            const RANK: usize = $d;
            fn take(t: DynInt) -> Option<Self> {
                match t {
                    DynInt::$v(x) => Some(x),
                    _ => None,
                }
            }
        }
    )*};
}
ranked!(1 => R1, 2 => R2, 3 => R3, 4 => R4);

/// `v` as an array of its own length `R` (the callers choose `R = v.len()`).
pub(crate) fn array<const R: usize>(v: &[usize]) -> [usize; R] {
    v.try_into().expect("the rank was chosen from the length")
}

/// A signed dimension (negative counts from the end) as an index below `rank`.
pub(crate) fn dim(d: i64, rank: usize) -> Step<usize> {
    dim_index(d, rank)
        .ok_or_else(|| framework(format!("dimension {d} out of range for rank {rank}")))
}

fn wrong_rank(op: &str, role: &str, want: usize, got: usize) -> Fault {
    unsupported(format!(
        "burn's {op} takes a rank-{want} {role}, this one has rank {got}"
    ))
}

impl Dyn {
    /// The rank.
    pub fn rank(&self) -> usize {
        match self {
            Dyn::R1(_) => 1,
            Dyn::R2(_) => 2,
            Dyn::R3(_) => 3,
            Dyn::R4(_) => 4,
        }
    }

    /// The shape.
    pub fn dims(&self) -> Vec<usize> {
        each_rank!(self, x => x.dims().to_vec())
    }

    /// A tensor of `shape` from float64 values rounded to `ty` (see
    /// [`float_tensor_from_f64`]).
    pub(crate) fn from_f64(
        values: &[f64],
        shape: &[usize],
        ty: FloatType,
        dev: &Device,
    ) -> Step<Dyn> {
        Ok(with_rank!(shape.len(), R => Dyn::from(
            float_tensor_from_f64::<R>(values, array(shape), ty, dev)
        )))
    }

    /// The tensor as the fixed rank an API of burn takes; unsupported for another rank.
    pub(crate) fn to<T: Ranked<Src = Dyn>>(self, op: &str, role: &str) -> Step<T> {
        let rank = self.rank();
        T::take(self).ok_or_else(|| wrong_rank(op, role, T::RANK, rank))
    }

    /// The tensor with the rank of `like` (see [`Dyn::to`]), for an op on two operands.
    pub(crate) fn like<const D: usize>(
        self,
        _like: &Tensor<D>,
        op: &str,
        role: &str,
    ) -> Step<Tensor<D>>
    where
        Tensor<D>: Ranked<Src = Dyn>,
    {
        self.to(op, role)
    }

    /// Host values in the run dtype (row-major), read without the autodiff graph.
    pub(crate) fn host(self, ty: FloatType) -> Result<Host> {
        each_rank!(self, x => Host::read(x.inner(), ty))
    }

    /// Host values and shape, in the run dtype.
    pub(crate) fn outcome(self, ty: FloatType) -> Result<Outcome> {
        let shape = self.dims();
        Ok(Outcome::Ok {
            values: self.host(ty)?,
            shape,
        })
    }
}

impl DynInt {
    /// The rank.
    pub fn rank(&self) -> usize {
        match self {
            DynInt::R1(_) => 1,
            DynInt::R2(_) => 2,
            DynInt::R3(_) => 3,
            DynInt::R4(_) => 4,
        }
    }

    /// The shape.
    pub fn dims(&self) -> Vec<usize> {
        each_rank!(DynInt, self, x => x.dims().to_vec())
    }

    /// An int64 tensor (burn `Tensor<D, Int>` of dtype `I64`) of `shape` from integer-valued
    /// float64 values (checked by the spec).
    pub(crate) fn from_f64(values: &[f64], shape: &[usize], dev: &Device) -> Step<DynInt> {
        let ints: Vec<i64> = values.iter().map(|&v| v as i64).collect();
        Ok(
            with_rank!(shape.len(), R => DynInt::from(Tensor::<R, Int>::from_data(
                TensorData::new(ints, array::<R>(shape)),
                (dev, DType::I64),
            ))),
        )
    }

    /// The tensor as the fixed rank an API of burn takes; unsupported for another rank.
    pub(crate) fn to<T: Ranked<Src = DynInt>>(self, op: &str, role: &str) -> Step<T> {
        let rank = self.rank();
        T::take(self).ok_or_else(|| wrong_rank(op, role, T::RANK, rank))
    }

    /// The values widened exactly to float64 (an integer quantity's frame type), and the
    /// shape.
    pub(crate) fn outcome(self) -> Result<Outcome> {
        let shape = self.dims();
        let ints = each_rank!(DynInt, self, x => x.try_to_vec_as::<i64>())
            .map_err(|e| anyhow!("reading an int tensor back: {e:?}"))?;
        Ok(Outcome::Ok {
            values: Host::F64(ints.into_iter().map(|v| v as f64).collect()),
            shape,
        })
    }
}

impl Value {
    /// The shape.
    pub fn dims(&self) -> Vec<usize> {
        match self {
            Value::Float(t) => t.dims(),
            Value::Int(t) => t.dims(),
        }
    }

    /// The float tensor; unsupported for an int64 one (`op` and `role` name the place).
    pub(crate) fn float(self, op: &str, role: &str) -> Step<Dyn> {
        match self {
            Value::Float(t) => Ok(t),
            Value::Int(_) => Err(unsupported(format!(
                "{op}: the {role} is an int64 tensor; burn's function takes a float tensor"
            ))),
        }
    }

    /// The int64 tensor; unsupported for a float one (burn takes `Tensor<D, Int>` indices).
    pub(crate) fn int(self, op: &str, role: &str) -> Step<DynInt> {
        match self {
            Value::Int(t) => Ok(t),
            Value::Float(_) => Err(unsupported(format!(
                "{op}: the {role} is a float tensor; burn's function takes Tensor<D, Int>"
            ))),
        }
    }

    /// Host values and shape: the run dtype for a float tensor, float64 for an int64 one.
    pub(crate) fn outcome(self, ty: FloatType) -> Result<Outcome> {
        match self {
            Value::Float(t) => t.outcome(ty),
            Value::Int(t) => t.outcome(),
        }
    }
}

impl From<Dyn> for Value {
    fn from(t: Dyn) -> Self {
        Value::Float(t)
    }
}

impl From<DynInt> for Value {
    fn from(t: DynInt) -> Self {
        Value::Int(t)
    }
}
