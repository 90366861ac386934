//! One case of a probe: fresh tensors from the inputs, then `optimizer_steps` iterations of
//! (`accumulate` micro-steps of forward, loss and `backward` whose gradients burn's
//! `GradientsAccumulator` adds up, the gradient transforms of [`super::grads`], the optimizer
//! step) with one burn optimizer, every quantity recorded at each iteration and stacked along
//! a new leading dimension when there is more than one (the loss and forward values of
//! several micro-steps along a micro-step dimension inside it; see
//! [`parity_common::probe_spec::Quantity`]).

use std::collections::HashMap;

use anyhow::{anyhow, Result};
use burn::optim::{GradientsAccumulator, GradientsParams};
use burn::tensor::{Device, Tensor};
use parity_common::probe_spec::{
    CaseSpec, InputKind, InputSpec, LossTerm, ProbeDtype, ProbeSpec, Quantity, StateSlot,
};
use parity_common::spec::FloatType;

use super::args::same_shape;
use super::dyn_tensor::{Dyn, DynInt, Value};
use super::grads::transform;
use super::leaves::{Leaves, Slot};
use super::ops::apply;
use super::outcome::{guarded, Fault, Outcome, Refusal, Step};
use crate::device::Host;
use crate::optim::Stepper;

/// Why a half-precision probe cannot run on burn-parity's backend.
fn half_reason(dtype: ProbeDtype) -> String {
    if crate::BURN_BACKEND == "ndarray" {
        format!(
            "dtype {}: burn's ndarray backend has no f16/bf16 tensors (NdArray::dtype_usage of \
             DType::F16 and DType::BF16 is empty)",
            dtype.name()
        )
    } else {
        format!(
            "dtype {}: burn-parity's probes run float32 and float64 only (burn's {} backend \
             has half-precision tensors; these probes do not drive them yet)",
            dtype.name(),
            crate::BURN_BACKEND
        )
    }
}

/// Named tensors of a case, or why burn could not make one.
type Env = HashMap<String, std::result::Result<Value, Refusal>>;

fn lookup(env: &Env, name: &str) -> Step<Value> {
    match env.get(name) {
        Some(Ok(t)) => Ok(t.clone()),
        Some(Err(r)) => Err(Fault::Refused(r.clone())),
        None => Err(Fault::Spec(anyhow!("{name:?} is not defined"))),
    }
}

fn float(env: &Env, name: &str) -> Step<Dyn> {
    lookup(env, name)?.float("loss", &format!("loss term {name:?}"))
}

fn loss_term(term: &LossTerm, env: &Env) -> Step<Tensor<1>> {
    Ok(match term {
        LossTerm::Sum { input } => each_rank!(float(env, input)?, t => t.sum()),
        LossTerm::SumSquares { input } => {
            each_rank!(float(env, input)?, t => (t.clone() * t).sum())
        }
        LossTerm::WeightedSum { input, weights } => {
            let (t, w) = (float(env, input)?, float(env, weights)?);
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

/// One input as a burn tensor: float values rounded once to the run dtype, int64 values as
/// a burn `Tensor<D, Int>` of dtype `I64`; or why burn cannot hold it.
fn input(spec: &InputSpec, ty: FloatType, dev: &Device) -> Step<Value> {
    guarded(|| match spec.dtype {
        InputKind::Float => Ok(Dyn::from_f64(&spec.values, &spec.shape, ty, dev)?.into()),
        InputKind::Int64 => Ok(DynInt::from_f64(&spec.values, &spec.shape, dev)?.into()),
    })
}

/// What stays fixed over a case's iterations.
struct Case<'a> {
    case: &'a CaseSpec,
    quantities: Vec<Quantity>,
    /// Inputs without `requires_grad` (or that burn could not hold).
    fixed: Env,
    /// Where each input with `requires_grad` is among the leaves.
    slots: HashMap<String, Slot>,
    /// The same, in input order (the order PyTorch's optimizer and clipping see them in).
    params: Vec<(String, Slot)>,
    ty: FloatType,
    dev: &'a Device,
}

/// The outcomes of one case, in its `compare` order. With `optimizer_steps` n > 1 each is
/// the n iterations' values stacked along a new leading dimension (the loss, a scalar that
/// burn holds as `[1]`, as `[n]`; every other quantity as `[n, …burn's shape]`), or the first
/// iteration's refusal.
///
/// A half-precision spec (f16, bf16) gives `unsupported` for every quantity: burn's ndarray
/// backend has no f16/bf16 tensors, and on Flex these probes do not drive them.
///
/// # Errors
/// Only for a spec that cannot run (a name that is not defined, an invalid quantity) or a
/// value that cannot be read back in the run dtype; burn's panics and errors, missing
/// gradients and what burn's API lacks are outcomes.
pub fn run_case(spec: &ProbeSpec, case: &CaseSpec, dev: &Device) -> Result<Vec<Outcome>> {
    let quantities = case.quantities()?;
    let Some(ty) = spec.dtype.float_type() else {
        let why = half_reason(spec.dtype);
        return Ok(quantities
            .iter()
            .map(|_| Outcome::Unsupported(why.clone()))
            .collect());
    };
    let mut leaves = Leaves::new();
    let mut params = Vec::new();
    let mut fixed = Env::new();
    for i in &spec.inputs {
        match input(i, ty, dev) {
            Ok(Value::Float(t)) if i.requires_grad => {
                params.push((i.name.clone(), leaves.push(t)));
            }
            Ok(t) => {
                fixed.insert(i.name.clone(), Ok(t));
            }
            Err(Fault::Refused(r)) => {
                fixed.insert(i.name.clone(), Err(r));
            }
            Err(Fault::Spec(e)) => return Err(e),
        }
    }
    let mut stepper = case
        .optimizer
        .as_ref()
        .map(Stepper::for_probe)
        .transpose()?;
    let ctx = Case {
        case,
        quantities,
        fixed,
        slots: params.iter().cloned().collect(),
        params,
        ty,
        dev,
    };
    let n = case.optimizer_steps;
    let mut rows: Vec<Vec<Outcome>> = ctx.quantities.iter().map(|_| Vec::new()).collect();
    let mut stop = None;
    let mut current = Some(leaves);
    for it in 0..n {
        let Some(leaves) = current.take() else { break };
        let (outcomes, next) = ctx.iterate(it, leaves, stepper.as_mut())?;
        for (row, o) in rows.iter_mut().zip(outcomes) {
            row.push(o);
        }
        match next {
            Ok(l) => current = Some(l),
            Err(r) => stop = Some(r),
        }
    }
    Ok(rows
        .into_iter()
        .zip(&ctx.quantities)
        .map(|(row, q)| combine(row, n, stop.as_ref(), *q == Quantity::Loss))
        .collect())
}

/// One quantity's outcome over the iterations run (see [`run_case`]).
fn combine(row: Vec<Outcome>, n: usize, stop: Option<&Refusal>, scalar: bool) -> Outcome {
    if let Some(bad) = row.iter().find(|o| !matches!(o, Outcome::Ok { .. })) {
        return bad.clone();
    }
    if row.len() < n {
        return stop.map_or_else(
            || Outcome::FrameworkError("the training loop stopped early".into()),
            Refusal::outcome,
        );
    }
    if n == 1 {
        return row.into_iter().next().expect("one iteration");
    }
    let mut shape = None;
    let mut values: Option<Host> = None;
    for o in row {
        let Outcome::Ok {
            values: v,
            shape: s,
        } = o
        else {
            unreachable!("checked above")
        };
        if shape.get_or_insert_with(|| s.clone()) != &s {
            return Outcome::FrameworkError(format!(
                "the iterations gave shapes {shape:?} and {s:?}"
            ));
        }
        values = Some(match (values, v) {
            (None, v) => v,
            (Some(Host::F32(mut a)), Host::F32(b)) => {
                a.extend(b);
                Host::F32(a)
            }
            (Some(Host::F64(mut a)), Host::F64(b)) => {
                a.extend(b);
                Host::F64(a)
            }
            _ => return Outcome::FrameworkError("the iterations gave two dtypes".into()),
        });
    }
    let inner = shape.expect("n > 1 iterations");
    let mut shape = vec![n];
    if !(scalar && inner == [1]) {
        shape.extend(inner);
    }
    Outcome::Ok {
        values: values.expect("n > 1 iterations"),
        shape,
    }
}

impl Case<'_> {
    /// The tensors micro-step `m` starts from: the fixed inputs, the leaves' current values
    /// and each micro-batch name bound to row `m` of its input (burn's `narrow(0, m, 1)`
    /// then `squeeze_dim(0)`, through the probe ops of the same names).
    fn micro_env(&self, leaves: &Leaves, m: usize) -> Result<Env> {
        let mut env = self.fixed.clone();
        for (name, slot) in &self.params {
            env.insert(name.clone(), Ok(leaves.get(*slot).into()));
        }
        for b in &self.case.micro_batches {
            let narrow = parity_common::probe_spec::Op::Narrow {
                dim: 0,
                start: m,
                length: 1,
            };
            let squeeze = parity_common::probe_spec::Op::Squeeze { dim: 0 };
            let row = lookup(&env, &b.input).and_then(|t| {
                let t = guarded(|| apply(&narrow, vec![t], self.ty, self.dev))?;
                guarded(|| apply(&squeeze, vec![t], self.ty, self.dev))
            });
            let row = match row {
                Ok(t) => Ok(t),
                Err(Fault::Refused(r)) => Err(r),
                Err(Fault::Spec(e)) => return Err(e),
            };
            env.insert(b.name.clone(), row);
        }
        Ok(env)
    }

    /// Iteration `it` from the parameters `leaves`: `accumulate` micro-steps (forward, loss,
    /// `backward`, the gradients added up by burn's `GradientsAccumulator`), the gradient
    /// transforms, the optimizer step. Every quantity's outcome (the loss and forward values
    /// of several micro-steps stacked), and the leaves after the step (unchanged without an
    /// optimizer), or why the loop cannot go on.
    fn iterate(
        &self,
        it: usize,
        leaves: Leaves,
        mut stepper: Option<&mut Stepper>,
    ) -> Result<(Vec<Outcome>, std::result::Result<Leaves, Refusal>)> {
        let ty = self.ty;
        let k = self.case.accumulate;
        let qs = &self.quantities;
        let mut found: Vec<Option<Outcome>> = qs.iter().map(|_| None).collect();
        let mut micro: Vec<Vec<Outcome>> = qs.iter().map(|_| Vec::new()).collect();
        let mut acc = GradientsAccumulator::<Leaves>::new();
        let mut backward_ran = false;
        for j in 0..k {
            let env = self.micro_env(&leaves, it * k + j)?;
            let (env, loss) = match forward(self.case, env, ty, self.dev) {
                Ok(r) => r,
                Err(Fault::Spec(e)) => return Err(e),
                Err(Fault::Refused(r)) => {
                    return Ok((qs.iter().map(|_| r.outcome()).collect(), Err(r)))
                }
            };
            // An input burn cannot hold that the case never reads: its own quantities say why.
            let refused = |n: &str| match env.get(n) {
                Some(Err(r)) => Some(r.outcome()),
                _ => None,
            };
            for ((slot, row), q) in found.iter_mut().zip(micro.iter_mut()).zip(qs) {
                match q {
                    Quantity::Loss => {
                        if let Some(l) = &loss {
                            row.push(Dyn::from(l.clone()).outcome(ty)?);
                        }
                    }
                    Quantity::Value(n) => row.push(match lookup(&env, n) {
                        Ok(t) => t.outcome(ty)?,
                        Err(Fault::Refused(r)) => r.outcome(),
                        Err(Fault::Spec(e)) => return Err(e),
                    }),
                    Quantity::Grad(n) | Quantity::AfterStep(n) | Quantity::State(n, _) => {
                        if slot.is_none() {
                            *slot = refused(n);
                        }
                    }
                }
                if row.len() == k {
                    let scalar = *q == Quantity::Loss;
                    *slot = Some(combine(std::mem::take(row), k, None, scalar));
                }
            }
            let Some(loss) = loss else { continue };
            let backward = guarded(|| {
                let grads = GradientsParams::from_grads(loss.backward(), &leaves);
                acc.accumulate(&leaves, grads);
                Ok(())
            });
            if let Err(f) = backward {
                return self.stopped(f, found);
            }
            backward_ran = true;
        }
        if !backward_ran {
            return Ok((finish(found, qs)?, Ok(leaves)));
        }
        let (slots, params) = (&self.slots, &self.params);
        let step = guarded(|| {
            let mut grads = acc.grads();
            transform(
                &mut grads,
                &leaves,
                params,
                &self.case.grad_transforms,
                ty,
                self.dev,
            )?;
            // None for an input burn could not hold (its outcome is known already).
            let mut before_step = Vec::new();
            for q in qs {
                if let Quantity::Grad(n) = q {
                    before_step.push(slots.get(n).map(|s| leaves.grad_in(*s, &grads)));
                }
            }
            let stepped = match stepper.as_deref_mut() {
                Some(s) => s.step_module(leaves, grads),
                None => leaves,
            };
            Ok((before_step, stepped))
        });
        let (grads, stepped) = match step {
            Ok(r) => r,
            Err(f) => return self.stopped(f, found),
        };
        let leaf = |n: &str| {
            slots
                .get(n)
                .copied()
                .ok_or_else(|| anyhow!("{n:?} is not an input with requires_grad"))
        };
        let mut grads = grads.into_iter();
        for (slot, q) in found.iter_mut().zip(qs) {
            let g = matches!(q, Quantity::Grad(_)).then(|| grads.next().flatten());
            if slot.is_some() {
                continue;
            }
            *slot = Some(match q {
                Quantity::Grad(n) => match g.flatten() {
                    Some(Some(g)) => g.outcome(ty)?,
                    Some(None) => Outcome::MissingGradient,
                    None => return Err(anyhow!("{n:?} has no leaf")),
                },
                Quantity::AfterStep(n) => stepped.get(leaf(n)?).outcome(ty)?,
                Quantity::State(n, s) => {
                    let stepper = stepper
                        .as_deref()
                        .ok_or_else(|| anyhow!("{n}.{} without an optimizer", s.name()))?;
                    state(stepper, &stepped.info(leaf(n)?, n), *s, ty)
                }
                Quantity::Loss | Quantity::Value(_) => continue,
            });
        }
        Ok((finish(found, qs)?, Ok(stepped)))
    }

    /// The outcomes of an iteration that `f` stopped: every quantity not yet known gets the
    /// refusal's outcome, and the loop ends.
    fn stopped(
        &self,
        f: Fault,
        mut found: Vec<Option<Outcome>>,
    ) -> Result<(Vec<Outcome>, std::result::Result<Leaves, Refusal>)> {
        let r = match f {
            Fault::Spec(e) => return Err(e),
            Fault::Refused(r) => r,
        };
        for slot in found.iter_mut().filter(|s| s.is_none()) {
            *slot = Some(r.outcome());
        }
        Ok((finish(found, &self.quantities)?, Err(r)))
    }
}

/// The optimizer state slot `s` of one parameter after the step, read from burn's record.
fn state(stepper: &Stepper, p: &crate::load::ParamInfo, s: StateSlot, ty: FloatType) -> Outcome {
    let read = match s {
        StateSlot::MomentumBuffer => stepper.momentum_buffer(p, ty),
        StateSlot::ExpAvg | StateSlot::ExpAvgSq => {
            stepper.moments(std::slice::from_ref(p), ty).map(|mut m| {
                let m = m.remove(0);
                if s == StateSlot::ExpAvg {
                    m.exp_avg
                } else {
                    m.exp_avg_sq
                }
            })
        }
    };
    match read {
        Ok(values) => Outcome::Ok {
            values,
            shape: p.burn_shape.clone(),
        },
        Err(e) => Outcome::FrameworkError(format!("{e:#}")),
    }
}

fn finish(found: Vec<Option<Outcome>>, qs: &[Quantity]) -> Result<Vec<Outcome>> {
    found
        .into_iter()
        .zip(qs)
        .map(|(o, q)| o.ok_or_else(|| anyhow!("quantity {q:?} was not computed")))
        .collect()
}

/// Every quantity of a case `unsupported` for `why`.
pub(crate) fn all_unsupported(case: &CaseSpec, why: &str) -> Result<Vec<Outcome>> {
    Ok(case
        .quantities()?
        .iter()
        .map(|_| Outcome::Unsupported(why.to_string()))
        .collect())
}
