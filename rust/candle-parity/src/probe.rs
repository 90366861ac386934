//! Op probes on the candle side: interprets a [`ProbeSpec`] and streams one `result` frame
//! per (case, quantity).
//!
//! Per case: fresh tensors from the inputs' float64 values rounded to the run dtype (a
//! [`Var`] for each input with `requires_grad`), the steps in order (layout changes are
//! candle views: `transpose`, `narrow` and `broadcast_as` give strided tensors), the loss
//! terms added in order, `loss.backward()`, then an optional single optimizer step.
//!
//! Whatever candle does is an outcome, never a failure of the run: an error it returns (or a
//! panic inside it) becomes `framework-error` with its message for every quantity not yet
//! known, and a gradient absent from the `GradStore` becomes `missing-gradient`. Only a
//! malformed spec or a failing sink ends the run with an error.

use std::collections::HashMap;
use std::io::Write;

use anyhow::{anyhow, Result};
use candle_core::backprop::GradStore;
use candle_core::{Device, Tensor, Var};
use candle_nn::{AdamW, Module, Optimizer as _, ParamsAdamW, SGD};
use parity_common::frames::{meta, FrameWriter};
use parity_common::probe_spec::{
    catch_panic, dim_index, result_meta, CandleImpl, CaseSpec, LossTerm, Op, ProbeOptimizer,
    ProbeSpec, Quantity, Status,
};

use crate::device::{self, to_raw};

/// What candle reported for one quantity.
#[derive(Debug)]
pub enum Outcome {
    /// The values, in the run dtype, with their shape.
    Ok(Tensor),
    /// The `GradStore` holds no gradient for the input.
    MissingGradient,
    /// candle's error message.
    FrameworkError(String),
}

/// Why a case stopped: candle refused (an outcome) or the spec is broken (an error).
#[derive(Debug)]
enum Fault {
    Framework(String),
    Spec(anyhow::Error),
}

impl From<candle_core::Error> for Fault {
    fn from(e: candle_core::Error) -> Self {
        // The first line: candle appends backtraces and context on later lines.
        let text = e.to_string();
        Fault::Framework(text.lines().next().unwrap_or_default().to_string())
    }
}

type Step<T> = std::result::Result<T, Fault>;

/// Runs `f`, turning a panic inside candle into a framework error (see
/// [`parity_common::probe_spec::catch_panic`]).
fn guarded<T>(f: impl FnOnce() -> Step<T>) -> Step<T> {
    catch_panic(f).unwrap_or_else(|msg| Err(Fault::Framework(msg)))
}

/// A signed dimension (negative counts from the end) as an index below `rank`.
fn dim(d: i64, rank: usize) -> Step<usize> {
    dim_index(d, rank)
        .ok_or_else(|| Fault::Framework(format!("dimension {d} out of range for rank {rank}")))
}

/// Applies one op to its inputs (their count is checked by [`ProbeSpec`]).
fn apply(op: &Op, x: &[&Tensor]) -> Step<Tensor> {
    let a = x[0];
    let rank = a.rank();
    Ok(match op {
        Op::Transpose { dim0, dim1 } => a.transpose(dim(*dim0, rank)?, dim(*dim1, rank)?)?,
        Op::Narrow {
            dim: d,
            start,
            length,
        } => a.narrow(dim(*d, rank)?, *start, *length)?,
        Op::BroadcastTo { shape } => a.broadcast_as(shape.as_slice())?,
        Op::Unsqueeze { dim: d } => a.unsqueeze(dim(*d, rank + 1)?)?,
        Op::Squeeze { dim: d } => a.squeeze(dim(*d, rank)?)?,
        Op::Reshape { shape } => a.reshape(shape.as_slice())?,
        Op::Contiguous => a.contiguous()?,
        Op::Conv1d {
            padding,
            stride,
            dilation,
            groups,
        } => a.conv1d(x[1], *padding, *stride, *dilation, *groups)?,
        Op::Conv2d {
            padding,
            stride,
            dilation,
            groups,
        } => a.conv2d(x[1], *padding, *stride, *dilation, *groups)?,
        Op::Linear => {
            candle_nn::Linear::new(x[1].clone(), x.get(2).map(|b| (*b).clone())).forward(a)?
        }
        Op::Matmul => a.matmul(x[1])?,
        Op::LayerNorm { eps, candle } => match candle {
            CandleImpl::Fused => candle_nn::ops::layer_norm(a, x[1], x[2], *eps as f32)?,
            CandleImpl::Slow => candle_nn::ops::layer_norm_slow(a, x[1], x[2], *eps as f32)?,
        },
        Op::Softmax { dim: d, candle } => match candle {
            CandleImpl::Fused => {
                if dim(*d, rank)? + 1 != rank {
                    return Err(Fault::Spec(anyhow!(
                        "the fused softmax works over the last dimension only"
                    )));
                }
                candle_nn::ops::softmax_last_dim(a)?
            }
            CandleImpl::Slow => candle_nn::ops::softmax(a, dim(*d, rank)?)?,
        },
        Op::UpsampleNearest1d { size } => a.upsample_nearest1d(*size)?,
        Op::UpsampleNearest2d { size } => a.upsample_nearest2d(size[0], size[1])?,
        Op::Relu => a.relu()?,
        Op::Abs => a.abs()?,
        Op::Add => a.add(x[1])?,
        Op::Mul => a.mul(x[1])?,
        Op::BceWithLogits => candle_nn::loss::binary_cross_entropy_with_logit(a, x[1])?,
    })
}

fn lookup<'a>(env: &'a HashMap<String, Tensor>, name: &str) -> Step<&'a Tensor> {
    env.get(name)
        .ok_or_else(|| Fault::Spec(anyhow!("{name:?} is not defined")))
}

fn loss_term(term: &LossTerm, env: &HashMap<String, Tensor>) -> Step<Tensor> {
    Ok(match term {
        LossTerm::Sum { input } => lookup(env, input)?.sum_all()?,
        LossTerm::SumSquares { input } => lookup(env, input)?.sqr()?.sum_all()?,
        LossTerm::WeightedSum { input, weights } => {
            lookup(env, input)?.mul(lookup(env, weights)?)?.sum_all()?
        }
    })
}

/// The forward pass of a case: every named tensor, and the loss if the case has one.
fn forward(
    case: &CaseSpec,
    mut env: HashMap<String, Tensor>,
) -> Step<(HashMap<String, Tensor>, Option<Tensor>)> {
    for step in &case.steps {
        let inputs = step
            .inputs
            .iter()
            .map(|n| lookup(&env, n))
            .collect::<Step<Vec<_>>>()?;
        let out = apply(&step.op, &inputs)?;
        env.insert(step.out.clone(), out);
    }
    let loss = match &case.loss {
        None => None,
        Some(terms) => {
            let mut total: Option<Tensor> = None;
            for term in terms {
                let t = loss_term(term, &env)?;
                total = Some(match total {
                    None => t,
                    Some(acc) => acc.add(&t)?,
                });
            }
            total
        }
    };
    Ok((env, loss))
}

fn optimizer_step(spec: &ProbeOptimizer, vars: Vec<Var>, grads: &GradStore) -> Step<()> {
    match spec {
        ProbeOptimizer::Sgd { lr } => SGD::new(vars, *lr)?.step(grads)?,
        ProbeOptimizer::Adamw {
            lr,
            betas,
            eps,
            weight_decay,
        } => {
            let params = ParamsAdamW {
                lr: *lr,
                beta1: betas[0],
                beta2: betas[1],
                eps: *eps,
                weight_decay: *weight_decay,
            };
            AdamW::new(vars, params)?.step(grads)?
        }
    }
    Ok(())
}

/// The outcomes of one case, in its `compare` order.
///
/// # Errors
/// Only for a spec that cannot run (a name that is not defined, an invalid quantity);
/// candle's own errors and panics are outcomes.
pub fn run_case(spec: &ProbeSpec, case: &CaseSpec, dev: &Device) -> Result<Vec<Outcome>> {
    let dt = device::dtype(spec.dtype);
    let mut vars: Vec<(String, Var)> = Vec::new();
    let mut env = HashMap::new();
    for input in &spec.inputs {
        let t = Tensor::from_vec(input.values.clone(), input.shape.as_slice(), &Device::Cpu)?
            .to_dtype(dt)?
            .to_device(dev)?;
        let t = if input.requires_grad {
            let v = Var::from_tensor(&t)?;
            vars.push((input.name.clone(), v.clone()));
            v.as_tensor().clone()
        } else {
            t
        };
        env.insert(input.name.clone(), t);
    }
    let quantities = case.quantities()?;
    let mut found: Vec<Option<Outcome>> = quantities.iter().map(|_| None).collect();
    let var = |name: &str| vars.iter().find(|(n, _)| n == name).map(|(_, v)| v);

    let forward_result = guarded(|| forward(case, env));
    let (env, loss) = match forward_result {
        Ok(r) => r,
        Err(Fault::Spec(e)) => return Err(e),
        Err(Fault::Framework(msg)) => {
            return Ok(quantities
                .iter()
                .map(|_| Outcome::FrameworkError(msg.clone()))
                .collect())
        }
    };
    for (slot, q) in found.iter_mut().zip(&quantities) {
        match q {
            Quantity::Loss => *slot = loss.clone().map(Outcome::Ok),
            Quantity::Value(n) => {
                let t = env.get(n).ok_or_else(|| anyhow!("{n:?} is not defined"))?;
                *slot = Some(Outcome::Ok(t.clone()));
            }
            _ => {}
        }
    }
    if let Some(loss) = &loss {
        let backward = guarded(|| {
            let grads = loss.backward()?;
            let mut before_step = Vec::new();
            for q in &quantities {
                if let Quantity::Grad(n) = q {
                    let v = var(n).ok_or_else(|| Fault::Spec(anyhow!("{n:?} is no Var")))?;
                    before_step.push(grads.get(v.as_tensor()).cloned());
                }
            }
            if let Some(opt) = &case.optimizer {
                let trained = vars.iter().map(|(_, v)| v.clone()).collect();
                optimizer_step(opt, trained, &grads)?;
            }
            Ok(before_step)
        });
        match backward {
            Ok(grads) => {
                let mut grads = grads.into_iter();
                for (slot, q) in found.iter_mut().zip(&quantities) {
                    match q {
                        Quantity::Grad(_) => {
                            *slot = Some(match grads.next().flatten() {
                                Some(g) => Outcome::Ok(g),
                                None => Outcome::MissingGradient,
                            })
                        }
                        Quantity::AfterStep(n) => {
                            let v = var(n).ok_or_else(|| anyhow!("{n:?} is no Var"))?;
                            *slot = Some(Outcome::Ok(v.as_tensor().clone()));
                        }
                        _ => {}
                    }
                }
            }
            Err(Fault::Spec(e)) => return Err(e),
            Err(Fault::Framework(msg)) => {
                for slot in found.iter_mut().filter(|s| s.is_none()) {
                    *slot = Some(Outcome::FrameworkError(msg.clone()));
                }
            }
        }
    }
    found
        .into_iter()
        .zip(&case.compare)
        .map(|(o, q)| o.ok_or_else(|| anyhow!("quantity {q:?} was not computed")))
        .collect()
}

/// Runs every case of `spec` and writes its frames to `sink`: a header, one `result` frame
/// per (case, quantity) in order, and an `end` frame.
///
/// A `result` frame's metadata is [`result_meta`] (status `ok`, `missing-gradient` or
/// `framework-error`: candle-parity maps every op); with status `ok` it holds one tensor
/// `values` in the run dtype with the quantity's shape.
///
/// # Errors
/// An unavailable device, a spec that cannot run, or a failing sink.
pub fn run<W: Write>(spec: &ProbeSpec, sink: W) -> Result<()> {
    let dev = device::open(spec.device)?;
    let mut out = FrameWriter::new(sink);
    out.write_meta(crate::train::header_meta(&dev))?;
    for case in &spec.cases {
        let outcomes = run_case(spec, case, &dev)?;
        for (q, outcome) in case.compare.iter().zip(outcomes) {
            let (status, message, tensor) = match outcome {
                Outcome::Ok(t) => (Status::Ok, String::new(), Some(t)),
                Outcome::MissingGradient => (Status::MissingGradient, String::new(), None),
                Outcome::FrameworkError(m) => (Status::FrameworkError, m, None),
            };
            eprintln!("{} {q}: {} {message}", case.name, status.name());
            let m = result_meta(&case.name, q, status, &message);
            let mut tensors = Vec::new();
            if let Some(t) = tensor {
                let mut raw = to_raw(&t)?;
                raw.shape = t.dims().to_vec();
                tensors.push(("values".to_string(), raw));
            }
            out.write(m, tensors)?;
        }
    }
    out.write_meta(meta([
        ("kind", "end".into()),
        ("status", "complete".into()),
    ]))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The study's conv1d probe (docs/study.md), built by hand: candle 0.11.0's CPU kernel
    /// gradient is the known wrong one with batch 2, and right with batch 1.
    fn conv1d_spec(batch: usize) -> ProbeSpec {
        let x: Vec<f64> = (0..6 * batch).map(|i| i as f64).collect();
        let c: Vec<f64> = (1..=8 * batch).map(|i| i as f64).collect();
        let json = serde_json::json!({
            "probe": "conv1d_grad", "dtype": "f32", "device": "cpu",
            "inputs": [
                {"name": "x", "shape": [batch, 1, 6], "values": x, "requires_grad": false},
                {"name": "w", "shape": [2, 1, 3], "values": [1.0, -1.0, 2.0, 0.5, 0.25, -2.0],
                 "requires_grad": true},
                {"name": "c", "shape": [batch, 2, 4], "values": c, "requires_grad": false}
            ],
            "cases": [{
                "name": "case",
                "steps": [{"out": "y", "inputs": ["x", "w"],
                           "op": {"name": "conv1d", "padding": 0, "stride": 1, "dilation": 1, "groups": 1}}],
                "loss": [{"kind": "weighted_sum", "input": "y", "weights": "c"}],
                "optimizer": null,
                "compare": ["loss", "w.grad"]
            }]
        });
        ProbeSpec::from_json(&json.to_string()).unwrap()
    }

    fn values(o: &Outcome) -> Vec<f32> {
        match o {
            Outcome::Ok(t) => t.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            other => panic!("not ok: {other:?}"),
        }
    }

    #[test]
    fn conv1d_kernel_gradient_is_the_known_bug_with_batch_two() -> Result<()> {
        let spec = conv1d_spec(2);
        let out = run_case(&spec, &spec.cases[0], &Device::Cpu)?;
        assert_eq!(values(&out[0]), vec![-84.0]);
        assert_eq!(
            values(&out[1]),
            vec![220.0, 256.0, 292.0, 508.0, 608.0, 708.0]
        );
        Ok(())
    }

    #[test]
    fn conv1d_kernel_gradient_is_right_with_batch_one() -> Result<()> {
        let spec = conv1d_spec(1);
        let out = run_case(&spec, &spec.cases[0], &Device::Cpu)?;
        assert_eq!(values(&out[1]), vec![20.0, 30.0, 40.0, 44.0, 70.0, 96.0]);
        Ok(())
    }

    #[test]
    fn candle_errors_are_outcomes_not_failures() -> Result<()> {
        let json = serde_json::json!({
            "probe": "p", "dtype": "f32", "device": "cpu",
            "inputs": [
                {"name": "a", "shape": [2, 3], "values": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "requires_grad": true},
                {"name": "b", "shape": [2, 2], "values": [1.0, 2.0, 3.0, 4.0], "requires_grad": false}
            ],
            "cases": [{
                "name": "shape_mismatch",
                "steps": [{"out": "y", "inputs": ["a", "b"], "op": {"name": "matmul"}}],
                "loss": [{"kind": "sum", "input": "y"}],
                "optimizer": null,
                "compare": ["y", "a.grad"]
            }]
        });
        let spec = ProbeSpec::from_json(&json.to_string())?;
        let out = run_case(&spec, &spec.cases[0], &Device::Cpu)?;
        assert!(
            matches!(&out[0], Outcome::FrameworkError(m) if m.contains("matmul")),
            "{out:?}"
        );
        assert!(matches!(&out[1], Outcome::FrameworkError(_)));
        Ok(())
    }

    #[test]
    fn a_fused_op_without_backward_is_a_missing_gradient() -> Result<()> {
        let json = serde_json::json!({
            "probe": "p", "dtype": "f32", "device": "cpu",
            "inputs": [
                {"name": "x", "shape": [1, 3], "values": [1.0, -2.0, 0.5], "requires_grad": true}
            ],
            "cases": [{
                "name": "fused",
                "steps": [{"out": "y", "inputs": ["x"],
                           "op": {"name": "softmax", "dim": -1, "candle": "fused"}}],
                "loss": [{"kind": "sum_squares", "input": "y"}],
                "optimizer": null,
                "compare": ["y", "x.grad"]
            }]
        });
        let spec = ProbeSpec::from_json(&json.to_string())?;
        let out = run_case(&spec, &spec.cases[0], &Device::Cpu)?;
        assert!(matches!(out[0], Outcome::Ok(_)));
        assert!(matches!(out[1], Outcome::MissingGradient), "{out:?}");
        Ok(())
    }
}
