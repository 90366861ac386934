//! Op probes on the burn side: interprets a [`ProbeSpec`] with burn's ndarray backend and
//! autodiff and streams one `result` frame per (case, quantity), as `candle-parity probe`
//! does (metadata [`result_meta`]).
//!
//! Per case: fresh tensors from the inputs' float64 values rounded once to the run dtype
//! (each input with `requires_grad` a burn [`Param`], gathered in one module, [`Leaves`], so
//! that burn's optimizers can step them), the steps in order, the loss terms added in order,
//! `loss.backward()`, then an optional single optimizer step (burn's `Sgd` or `AdamW`, built
//! by [`Stepper::for_probe`]).
//!
//! burn's tensors carry their rank in their type (`Tensor<D>`), a probe's only at run time:
//! the interpreter holds ranks 1 to 4 ([`Dyn`]). How each op maps onto burn's API:
//!
//! | probe op | burn 0.22.1 |
//! |---|---|
//! | `transpose`, `narrow`, `broadcast_to` | `swap_dims`, `narrow`, `expand` |
//! | `unsqueeze`, `squeeze`, `reshape` | `unsqueeze_dim`, `squeeze_dim`, `reshape` |
//! | `contiguous` | unsupported: burn's tensor API has no contiguous copy |
//! | `conv1d`, `conv2d` | `tensor::module::conv1d` / `conv2d`, no bias, `ConvOptions` |
//! | `linear` | `tensor::module::linear(x, w.transpose(), b)`: burn's weight is `[in, out]` |
//! | `matmul` | `matmul` (equal ranks) |
//! | `layer_norm`, `softmax` | `tensor::module::layer_norm`, `activation::softmax` (one function each: the `candle` argument is ignored) |
//! | `upsample_nearest1d`, `…2d` | `nn::interpolate::Interpolate1d` / `Interpolate2d`, mode `Nearest` |
//! | `relu`, `abs`, `add`, `mul` | `activation::relu`, `abs`, `+`, `*` (equal shapes) |
//! | `bce_with_logits` | `nn::loss::BinaryCrossEntropyLoss` with `logits: true` (integer targets) |
//! | loss `sum`, `sum_squares`, `weighted_sum` | `sum()`, `(t·t).sum()`, `(t·w).sum()` |
//!
//! Whatever burn does is an outcome, never a failure of the run: burn checks shapes and
//! arguments by panicking, and a panic (or an error it returns) becomes `framework-error` with
//! its message for every quantity not yet known; a gradient burn does not give is
//! `missing-gradient`; an op, rank or argument burn's API does not offer makes every quantity
//! of the case `unsupported`, with the reason. burn has no rank-0 tensors, so a scalar (the
//! loss, `bce_with_logits`) has shape `[1]`. Only a malformed spec, a device other than the
//! CPU or a failing sink ends the run with an error.

use std::collections::HashMap;
use std::io::Write;

use anyhow::{anyhow, Result};
use burn::module::{Module, Param};
use burn::nn::interpolate::{Interpolate1dConfig, Interpolate2dConfig, InterpolateMode};
use burn::nn::loss::BinaryCrossEntropyLossConfig;
use burn::optim::GradientsParams;
use burn::tensor::activation::{relu, softmax};
use burn::tensor::module::{conv1d, conv2d, layer_norm, linear};
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Device, Gradients, Tensor};
use parity_common::frames::{meta, FrameWriter};
use parity_common::probe_spec::{
    catch_panic, dim_index, result_meta, CaseSpec, InputSpec, LossTerm, Op, ProbeSpec, Quantity,
    Status,
};
use parity_common::spec::FloatType;

use crate::device::{self, float_tensor_from_f64, Host};
use crate::optim::Stepper;

/// The ranks the interpreter holds (burn has no rank 0).
pub const RANKS: std::ops::RangeInclusive<usize> = 1..=4;

/// What burn reported for one quantity.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The values (row-major, in the run dtype) and burn's shape of them.
    Ok {
        /// Host values.
        values: Host,
        /// Shape as burn gives it (`[1]` for a scalar).
        shape: Vec<usize>,
    },
    /// burn gave no gradient for the input.
    MissingGradient,
    /// burn's panic or error message.
    FrameworkError(String),
    /// Why burn's API cannot run the case.
    Unsupported(String),
}

/// Why burn gave no value: an outcome of the probe.
#[derive(Debug, Clone)]
enum Refusal {
    /// burn panicked or returned an error.
    Framework(String),
    /// burn's API has no such op, rank or argument.
    Unsupported(String),
}

impl Refusal {
    fn outcome(&self) -> Outcome {
        match self {
            Refusal::Framework(m) => Outcome::FrameworkError(m.clone()),
            Refusal::Unsupported(m) => Outcome::Unsupported(m.clone()),
        }
    }
}

/// Why a case stopped: burn refused (an outcome) or the spec is broken (an error).
#[derive(Debug)]
enum Fault {
    Refused(Refusal),
    Spec(anyhow::Error),
}

impl From<Refusal> for Fault {
    fn from(r: Refusal) -> Self {
        Fault::Refused(r)
    }
}

type Step<T> = std::result::Result<T, Fault>;

fn unsupported(why: String) -> Fault {
    Fault::Refused(Refusal::Unsupported(why))
}

fn framework(message: String) -> Fault {
    Fault::Refused(Refusal::Framework(message))
}

/// Runs `f`, turning a panic inside burn into a framework error (see
/// [`parity_common::probe_spec::catch_panic`]).
fn guarded<T>(f: impl FnOnce() -> Step<T>) -> Step<T> {
    catch_panic(f).unwrap_or_else(|msg| Err(framework(msg)))
}

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

/// Evaluates `$body` with `$x` bound to the tensor `$t` holds, whatever its rank.
macro_rules! each_rank {
    ($t:expr, $x:ident => $body:expr) => {
        match $t {
            Dyn::R1($x) => $body,
            Dyn::R2($x) => $body,
            Dyn::R3($x) => $body,
            Dyn::R4($x) => $body,
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
            other => return Err(unsupported_rank(other)),
        }
    };
}

fn unsupported_rank(rank: usize) -> Fault {
    if rank == 0 {
        unsupported("burn has no rank-0 tensors".into())
    } else {
        unsupported(format!(
            "rank {rank}: burn-parity's probe interpreter holds ranks {} to {}",
            RANKS.start(),
            RANKS.end()
        ))
    }
}

/// A burn tensor type of one fixed rank, taken out of a [`Dyn`].
trait Ranked: Sized {
    const RANK: usize;
    fn take(t: Dyn) -> Option<Self>;
}

macro_rules! ranked {
    ($($d:literal => $v:ident),*) => {$(
        impl From<Tensor<$d>> for Dyn {
            fn from(t: Tensor<$d>) -> Self {
                Dyn::$v(t)
            }
        }
        impl Ranked for Tensor<$d> {
            const RANK: usize = $d;
            fn take(t: Dyn) -> Option<Self> {
                match t {
                    Dyn::$v(x) => Some(x),
                    _ => None,
                }
            }
        }
    )*};
}
ranked!(1 => R1, 2 => R2, 3 => R3, 4 => R4);

/// `v` as an array of its own length `R` (the callers choose `R = v.len()`).
fn array<const R: usize>(v: &[usize]) -> [usize; R] {
    v.try_into().expect("the rank was chosen from the length")
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
    fn from_f64(values: &[f64], shape: &[usize], ty: FloatType, dev: &Device) -> Step<Dyn> {
        Ok(with_rank!(shape.len(), R => Dyn::from(
            float_tensor_from_f64::<R>(values, array(shape), ty, dev)
        )))
    }

    /// The tensor as the fixed rank an API of burn takes; unsupported for another rank.
    fn to<T: Ranked>(self, op: &str, role: &str) -> Step<T> {
        let rank = self.rank();
        T::take(self).ok_or_else(|| {
            unsupported(format!(
                "burn's {op} takes a rank-{} {role}, this one has rank {rank}",
                T::RANK
            ))
        })
    }

    /// The tensor with the rank of `like` (see [`Dyn::to`]), for an op on two operands.
    fn like<const D: usize>(self, _like: &Tensor<D>, op: &str, role: &str) -> Step<Tensor<D>>
    where
        Tensor<D>: Ranked,
    {
        self.to(op, role)
    }

    /// Host values in the run dtype (row-major), read without the autodiff graph.
    fn host(self, ty: FloatType) -> Result<Host> {
        each_rank!(self, x => Host::read(x.inner(), ty))
    }

    /// Host values and shape, in the run dtype.
    fn outcome(self, ty: FloatType) -> Result<Outcome> {
        let shape = self.dims();
        Ok(Outcome::Ok {
            values: self.host(ty)?,
            shape,
        })
    }

    /// burn's gradient of this leaf, if it has one.
    fn grad(&self, grads: &Gradients) -> Option<Dyn> {
        each_rank!(self, x => x.grad(grads).map(Dyn::from))
    }
}

/// A signed dimension (negative counts from the end) as an index below `rank`.
fn dim(d: i64, rank: usize) -> Step<usize> {
    dim_index(d, rank)
        .ok_or_else(|| framework(format!("dimension {d} out of range for rank {rank}")))
}

/// Refuses two tensors of different shapes (ranks included), as PyTorch's interpreter does:
/// probes broadcast explicitly with `broadcast_to`.
fn same_shape(op: &str, a: &Dyn, b: &Dyn) -> Step<()> {
    if a.dims() != b.dims() {
        return Err(framework(format!(
            "{op}: shapes {:?} and {:?} differ",
            a.dims(),
            b.dims()
        )));
    }
    Ok(())
}

/// Every input with `requires_grad` as a burn parameter, by rank, so that burn's
/// optimizers (which step a [`Module`]) can update them.
#[derive(Module, Debug)]
pub struct Leaves {
    r1: Vec<Param<Tensor<1>>>,
    r2: Vec<Param<Tensor<2>>>,
    r3: Vec<Param<Tensor<3>>>,
    r4: Vec<Param<Tensor<4>>>,
}

/// Where a leaf is in [`Leaves`]: its rank and index.
#[derive(Debug, Clone, Copy)]
struct Slot(usize, usize);

impl Leaves {
    fn new() -> Self {
        Leaves {
            r1: Vec::new(),
            r2: Vec::new(),
            r3: Vec::new(),
            r4: Vec::new(),
        }
    }

    /// Makes `t` a parameter (`require_grad`) and returns where it is.
    fn push(&mut self, t: Dyn) -> Slot {
        fn add<const D: usize>(v: &mut Vec<Param<Tensor<D>>>, t: Tensor<D>) -> usize {
            v.push(Param::from_tensor(t));
            v.len() - 1
        }
        match t {
            Dyn::R1(x) => Slot(1, add(&mut self.r1, x)),
            Dyn::R2(x) => Slot(2, add(&mut self.r2, x)),
            Dyn::R3(x) => Slot(3, add(&mut self.r3, x)),
            Dyn::R4(x) => Slot(4, add(&mut self.r4, x)),
        }
    }

    /// The parameter's current value (the tensor the forward pass reads).
    fn get(&self, Slot(rank, i): Slot) -> Dyn {
        match rank {
            1 => Dyn::R1(self.r1[i].val()),
            2 => Dyn::R2(self.r2[i].val()),
            3 => Dyn::R3(self.r3[i].val()),
            _ => Dyn::R4(self.r4[i].val()),
        }
    }
}

/// Applies one op to its inputs (their count is checked by [`ProbeSpec`]) in a run of dtype
/// `ty` on `dev`.
fn apply(op: &Op, mut x: Vec<Dyn>, ty: FloatType, dev: &Device) -> Step<Dyn> {
    let b = (x.len() > 1).then(|| x.remove(1));
    let c = (x.len() > 1).then(|| x.remove(1));
    let a = x.remove(0);
    let rank = a.rank();
    let second = || {
        b.clone()
            .ok_or_else(|| Fault::Spec(anyhow!("{op:?} needs two inputs")))
    };
    Ok(match op {
        Op::Transpose { dim0, dim1 } => {
            let (d0, d1) = (dim(*dim0, rank)?, dim(*dim1, rank)?);
            each_rank!(a, t => Dyn::from(t.swap_dims(d0, d1)))
        }
        Op::Narrow {
            dim: d,
            start,
            length,
        } => {
            let d = dim(*d, rank)?;
            each_rank!(a, t => Dyn::from(t.narrow(d, *start, *length)))
        }
        Op::BroadcastTo { shape } => {
            each_rank!(a, t => with_rank!(shape.len(), R => Dyn::from(
                t.expand::<R, _>(array::<R>(shape))
            )))
        }
        Op::Unsqueeze { dim: d } => {
            let d = dim(*d, rank + 1)?;
            each_rank!(a, t => with_rank!(rank + 1, R => Dyn::from(t.unsqueeze_dim::<R>(d))))
        }
        Op::Squeeze { dim: d } => {
            let d = dim(*d, rank)?;
            each_rank!(a, t => with_rank!(rank - 1, R => Dyn::from(t.squeeze_dim::<R>(d))))
        }
        Op::Reshape { shape } => {
            each_rank!(a, t => with_rank!(shape.len(), R => Dyn::from(
                t.reshape::<R, _>(array::<R>(shape))
            )))
        }
        Op::Contiguous => {
            return Err(unsupported(
                "contiguous: burn's tensor API has no contiguous copy (memory layout is the \
                 backend's)"
                    .into(),
            ))
        }
        Op::Conv1d {
            padding,
            stride,
            dilation,
            groups,
        } => {
            let opts = ConvOptions::new([*stride], [*padding], [*dilation], *groups);
            let w = second()?.to::<Tensor<3>>("conv1d", "kernel")?;
            Dyn::from(conv1d(a.to("conv1d", "input")?, w, None, opts))
        }
        Op::Conv2d {
            padding,
            stride,
            dilation,
            groups,
        } => {
            let opts = ConvOptions::new([*stride; 2], [*padding; 2], [*dilation; 2], *groups);
            let w = second()?.to::<Tensor<4>>("conv2d", "kernel")?;
            Dyn::from(conv2d(a.to("conv2d", "input")?, w, None, opts))
        }
        Op::Linear => {
            // PyTorch's weight [out, in] as burn's [in, out]: a transposed view in the graph,
            // so the gradient arrives in the probe's layout.
            let w = second()?.to::<Tensor<2>>("linear", "weight")?.transpose();
            let bias = match c {
                Some(c) => Some(c.to::<Tensor<1>>("linear", "bias")?),
                None => None,
            };
            each_rank!(a, t => Dyn::from(linear(t, w, bias)))
        }
        Op::Matmul => {
            let b = second()?;
            each_rank!(a, t => {
                let u = b.like(&t, "matmul", "right factor")?;
                Dyn::from(t.matmul(u))
            })
        }
        Op::LayerNorm { eps, .. } => {
            let gamma = second()?.to::<Tensor<1>>("layer_norm", "weight")?;
            let beta = c
                .ok_or_else(|| Fault::Spec(anyhow!("layer_norm needs a bias")))?
                .to::<Tensor<1>>("layer_norm", "bias")?;
            each_rank!(a, t => Dyn::from(layer_norm(t, gamma, Some(beta), *eps)))
        }
        Op::Softmax { dim: d, .. } => {
            let d = dim(*d, rank)?;
            each_rank!(a, t => Dyn::from(softmax(t, d)))
        }
        Op::UpsampleNearest1d { size } => {
            let up = Interpolate1dConfig::new()
                .with_output_size(Some(*size))
                .with_mode(InterpolateMode::Nearest)
                .with_align_corners(false)
                .init();
            Dyn::from(up.forward(a.to("upsample_nearest1d (Interpolate1d)", "input")?))
        }
        Op::UpsampleNearest2d { size } => {
            let up = Interpolate2dConfig::new()
                .with_output_size(Some(*size))
                .with_mode(InterpolateMode::Nearest)
                .with_align_corners(false)
                .init();
            Dyn::from(up.forward(a.to("upsample_nearest2d (Interpolate2d)", "input")?))
        }
        Op::Relu => each_rank!(a, t => Dyn::from(relu(t))),
        Op::Abs => each_rank!(a, t => Dyn::from(t.abs())),
        Op::Add => {
            let b = second()?;
            same_shape("add", &a, &b)?;
            each_rank!(a, t => {
                let u = b.like(&t, "add", "second operand")?;
                Dyn::from(t + u)
            })
        }
        Op::Mul => {
            let b = second()?;
            same_shape("mul", &a, &b)?;
            each_rank!(a, t => {
                let u = b.like(&t, "mul", "second operand")?;
                Dyn::from(t * u)
            })
        }
        Op::BceWithLogits => {
            let targets = second()?;
            same_shape("bce_with_logits", &a, &targets)?;
            let values = targets.clone().host(ty).map_err(Fault::Spec)?;
            if let Some(v) = values.widened().into_iter().find(|v| v.fract() != 0.0) {
                return Err(unsupported(format!(
                    "bce_with_logits: burn's BinaryCrossEntropyLoss takes integer targets, got {v}"
                )));
            }
            let loss = BinaryCrossEntropyLossConfig::new()
                .with_logits(true)
                .with_weights(None)
                .with_smoothing(None)
                .init(dev);
            each_rank!(a, t => {
                let u = targets.like(&t, "bce_with_logits", "target")?;
                Dyn::from(loss.forward(t, u.int()))
            })
        }
    })
}

/// Named tensors of a case, or why burn could not make an input.
type Env = HashMap<String, std::result::Result<Dyn, Refusal>>;

fn lookup(env: &Env, name: &str) -> Step<Dyn> {
    match env.get(name) {
        Some(Ok(t)) => Ok(t.clone()),
        Some(Err(r)) => Err(Fault::Refused(r.clone())),
        None => Err(Fault::Spec(anyhow!("{name:?} is not defined"))),
    }
}

fn loss_term(term: &LossTerm, env: &Env) -> Step<Tensor<1>> {
    Ok(match term {
        LossTerm::Sum { input } => each_rank!(lookup(env, input)?, t => t.sum()),
        LossTerm::SumSquares { input } => {
            each_rank!(lookup(env, input)?, t => (t.clone() * t).sum())
        }
        LossTerm::WeightedSum { input, weights } => {
            let (t, w) = (lookup(env, input)?, lookup(env, weights)?);
            same_shape("weighted_sum", &t, &w)?;
            each_rank!(t, t => {
                let w = w.like(&t, "weighted_sum", "weights")?;
                (t * w).sum()
            })
        }
    })
}

/// The forward pass of a case: every named tensor (or why burn could not make it), and the
/// loss if the case has one.
fn forward(
    case: &CaseSpec,
    mut env: Env,
    ty: FloatType,
    dev: &Device,
) -> Step<(Env, Option<Tensor<1>>)> {
    for step in &case.steps {
        let inputs = step
            .inputs
            .iter()
            .map(|n| lookup(&env, n))
            .collect::<Step<Vec<_>>>()?;
        let out = guarded(|| apply(&step.op, inputs, ty, dev))?;
        env.insert(step.out.clone(), Ok(out));
    }
    let loss = match &case.loss {
        None => None,
        Some(terms) => {
            let mut total: Option<Tensor<1>> = None;
            for term in terms {
                let t = guarded(|| loss_term(term, &env))?;
                total = Some(match total {
                    None => t,
                    Some(acc) => guarded(|| Ok(acc + t))?,
                });
            }
            total
        }
    };
    Ok((env, loss))
}

/// One input as a burn tensor in the run dtype, or why burn cannot hold it.
fn input(spec: &InputSpec, ty: FloatType, dev: &Device) -> Step<Dyn> {
    guarded(|| Dyn::from_f64(&spec.values, &spec.shape, ty, dev))
}

/// The outcomes of one case, in its `compare` order.
///
/// # Errors
/// Only for a spec that cannot run (a name that is not defined, an invalid quantity) or a
/// value that cannot be read back in the run dtype; burn's panics and errors, missing
/// gradients and what burn's API lacks are outcomes.
pub fn run_case(spec: &ProbeSpec, case: &CaseSpec, dev: &Device) -> Result<Vec<Outcome>> {
    let ty = spec.dtype;
    let mut leaves = Leaves::new();
    let mut slots: HashMap<String, Slot> = HashMap::new();
    let mut env = Env::new();
    for i in &spec.inputs {
        let t = match input(i, ty, dev) {
            Ok(t) if i.requires_grad => {
                let slot = leaves.push(t);
                slots.insert(i.name.clone(), slot);
                Ok(leaves.get(slot))
            }
            Ok(t) => Ok(t),
            Err(Fault::Refused(r)) => Err(r),
            Err(Fault::Spec(e)) => return Err(e),
        };
        env.insert(i.name.clone(), t);
    }
    let quantities = case.quantities()?;
    let mut found: Vec<Option<Outcome>> = quantities.iter().map(|_| None).collect();

    let (env, loss) = match forward(case, env, ty, dev) {
        Ok(r) => r,
        Err(Fault::Spec(e)) => return Err(e),
        Err(Fault::Refused(r)) => return Ok(quantities.iter().map(|_| r.outcome()).collect()),
    };
    // An input burn cannot hold that the case never reads: its own quantities say why.
    let refused = |n: &str| match env.get(n) {
        Some(Err(r)) => Some(r.outcome()),
        _ => None,
    };
    for (slot, q) in found.iter_mut().zip(&quantities) {
        match q {
            Quantity::Loss => {
                if let Some(l) = &loss {
                    *slot = Some(Dyn::from(l.clone()).outcome(ty)?);
                }
            }
            Quantity::Value(n) => {
                *slot = Some(match lookup(&env, n) {
                    Ok(t) => t.outcome(ty)?,
                    Err(Fault::Refused(r)) => r.outcome(),
                    Err(Fault::Spec(e)) => return Err(e),
                });
            }
            Quantity::Grad(n) | Quantity::AfterStep(n) => *slot = refused(n),
        }
    }
    let Some(loss) = loss else {
        return finish(found, &case.compare);
    };
    let mut stepper = match &case.optimizer {
        Some(o) => Some(Stepper::for_probe(o)?),
        None => None,
    };
    let leaf = |n: &str| {
        slots
            .get(n)
            .copied()
            .ok_or_else(|| anyhow!("{n:?} is not an input with requires_grad"))
    };
    let backward = guarded(|| {
        let grads = loss.backward();
        // None for an input burn could not hold (its outcome is known already).
        let mut before_step = Vec::new();
        for q in &quantities {
            if let Quantity::Grad(n) = q {
                before_step.push(slots.get(n).map(|s| leaves.get(*s).grad(&grads)));
            }
        }
        let stepped = match stepper.as_mut() {
            Some(s) => {
                let params = GradientsParams::from_grads(grads, &leaves);
                Some(s.step(leaves, params))
            }
            None => None,
        };
        Ok((before_step, stepped))
    });
    match backward {
        Ok((grads, stepped)) => {
            let mut grads = grads.into_iter();
            for (slot, q) in found.iter_mut().zip(&quantities) {
                match q {
                    Quantity::Grad(n) => {
                        let g = grads.next().flatten();
                        if slot.is_none() {
                            *slot = Some(match g {
                                Some(Some(g)) => g.outcome(ty)?,
                                Some(None) => Outcome::MissingGradient,
                                None => return Err(anyhow!("{n:?} has no leaf")),
                            });
                        }
                    }
                    Quantity::AfterStep(n) if slot.is_none() => {
                        let stepped = stepped
                            .as_ref()
                            .ok_or_else(|| anyhow!("{n}.after_step without an optimizer"))?;
                        *slot = Some(stepped.get(leaf(n)?).outcome(ty)?);
                    }
                    _ => {}
                }
            }
        }
        Err(Fault::Spec(e)) => return Err(e),
        Err(Fault::Refused(r)) => {
            for slot in found.iter_mut().filter(|s| s.is_none()) {
                *slot = Some(r.outcome());
            }
        }
    }
    finish(found, &case.compare)
}

fn finish(found: Vec<Option<Outcome>>, compare: &[String]) -> Result<Vec<Outcome>> {
    found
        .into_iter()
        .zip(compare)
        .map(|(o, q)| o.ok_or_else(|| anyhow!("quantity {q:?} was not computed")))
        .collect()
}

/// Runs every case of `spec` and writes its frames to `sink`: a header (as a training run's,
/// without the optimizer), one `result` frame per (case, quantity) in order (metadata
/// [`result_meta`]; with status `ok` one tensor `values` in the run dtype with burn's shape),
/// and an `end` frame.
///
/// # Errors
/// A device other than the CPU (see [`device::open`]), a spec that cannot run, or a failing
/// sink.
pub fn run<W: Write>(spec: &ProbeSpec, sink: W) -> Result<()> {
    let dev = device::open(spec.device, spec.dtype)?;
    let mut out = FrameWriter::new(sink);
    out.write_meta(crate::train::header_meta(&dev))?;
    for case in &spec.cases {
        let outcomes = run_case(spec, case, &dev)?;
        for (q, outcome) in case.compare.iter().zip(outcomes) {
            let (status, message, tensor) = match outcome {
                Outcome::Ok { values, shape } => {
                    let mut raw = values.into_raw();
                    raw.shape = shape;
                    (Status::Ok, String::new(), Some(raw))
                }
                Outcome::MissingGradient => (Status::MissingGradient, String::new(), None),
                Outcome::FrameworkError(m) => (Status::FrameworkError, m, None),
                Outcome::Unsupported(m) => (Status::Unsupported, m, None),
            };
            eprintln!("{} {q}: {} {message}", case.name, status.name());
            let tensors: Vec<_> = tensor
                .map(|t| ("values".to_string(), t))
                .into_iter()
                .collect();
            out.write(result_meta(&case.name, q, status, &message), tensors)?;
        }
    }
    out.write_meta(meta([
        ("kind", "end".into()),
        ("status", "complete".into()),
    ]))?;
    Ok(())
}
