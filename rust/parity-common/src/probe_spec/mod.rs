//! The probe specification: one op probe, normalized by the workflow.
//!
//! A probe file (`probes/{name}.yaml`, schema `schemas/probe.schema.yaml`) is validated and
//! normalized by `scripts/parity/probe/format.py` (`Probe.runner_spec`): inputs expanded to flat
//! float64 values with their shape, every op argument explicit, the loss as a list of terms.
//! Nothing here has a default and unknown fields are an error, so a drift between the two
//! sides fails loudly. Reference values and known bugs stay on the Python side, which judges.
//!
//! Every runner reports its outcomes the same way: one `result` frame per (case, quantity)
//! whose metadata is [`result_meta`] with a [`Status`].
//!
//! The contract is split by concern, every type re-exported here: [`ProbeBatch`],
//! [`ProbeSpec`] and [`CaseSpec`] with their checks in this file; the inputs in `inputs.rs`
//! ([`InputSpec`], [`InputKind`], [`ProbeDtype`]); the op language in `op.rs` ([`Op`] and its
//! argument types); a case's steps, loss, optimizer and quantities in `steps.rs`
//! ([`StepSpec`], [`LossTerm`], [`ProbeOptimizer`], [`MicroBatch`], [`GradTransform`],
//! [`StateSlot`], [`Quantity`]); the
//! outcomes in `status.rs` ([`Status`], [`result_meta`], [`catch_panic`]).

use std::collections::HashSet;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use crate::spec::DeviceKind;

mod inputs;
mod op;
mod status;
mod steps;
#[cfg(test)]
mod tests;

pub use inputs::{InputKind, InputSpec, ProbeDtype};
pub use op::{dim_index, pool_size, GeluApproximate, Op, OpVariant, Reduction};
pub use status::{catch_panic, result_meta, Status};
pub use steps::{
    GradTransform, LossTerm, MicroBatch, ProbeOptimizer, Quantity, StateSlot, StepSpec,
};

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
    /// The optimizer stepped after each `loss.backward()`.
    pub optimizer: Option<ProbeOptimizer>,
    /// Iterations of forward, backward and optimizer step (1 without an optimizer); see
    /// [`Quantity`] for how quantities are stacked when it exceeds 1.
    pub optimizer_steps: usize,
    /// Forward and backward passes per optimizer step whose gradients add up (1: none
    /// added; 1 without an optimizer). Absent: 1.
    #[serde(default = "one")]
    pub accumulate: usize,
    /// Names bound to one row of a stacked input per micro-step. Absent: none.
    #[serde(default)]
    pub micro_batches: Vec<MicroBatch>,
    /// What happens to the accumulated gradients before the step, in order. Absent: none.
    #[serde(default)]
    pub grad_transforms: Vec<GradTransform>,
    /// Quantities to report, in order.
    pub compare: Vec<String>,
}

fn one() -> usize {
    1
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

/// One probe run: the probe in one dtype on one device.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeSpec {
    /// Probe name (the file name without `.yaml`).
    pub probe: String,
    /// Run dtype.
    pub dtype: ProbeDtype,
    /// Device.
    pub device: DeviceKind,
    /// Inputs, shared by every case (each case starts from fresh tensors).
    pub inputs: Vec<InputSpec>,
    /// Cases in order.
    pub cases: Vec<CaseSpec>,
}

/// Several probes run by one process (`probe --spec`): the workflow batches every probe of a
/// (framework, dtype, device) so that a process starts once, not once per probe.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeBatch {
    /// The probes, in the order their frames are written.
    pub probes: Vec<ProbeSpec>,
}

impl ProbeBatch {
    /// Parses and checks a batch (each spec as [`ProbeSpec::from_json`] does).
    ///
    /// # Errors
    /// Malformed JSON, an unknown field, or a spec that cannot run (named by its probe).
    pub fn from_json(text: &str) -> Result<Self> {
        let batch: ProbeBatch =
            serde_json::from_str(text).context("parsing the probe batch JSON")?;
        for spec in &batch.probes {
            spec.check()
                .with_context(|| format!("in probe {:?}", spec.probe))?;
        }
        Ok(batch)
    }

    /// Reads a batch from a file; see [`ProbeBatch::from_json`].
    ///
    /// # Errors
    /// As [`ProbeBatch::from_json`], or when the file cannot be read.
    pub fn from_path(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading probe batch {}", path.display()))?;
        Self::from_json(&text).with_context(|| format!("in probe batch {}", path.display()))
    }
}

impl ProbeSpec {
    /// Parses and checks a spec.
    ///
    /// # Errors
    /// Malformed JSON, an unknown field, or a spec that cannot run: values that do not fill
    /// their shape, a name used before it is defined or defined twice, an op with the wrong
    /// number of inputs, a quantity that does not exist, an optimizer without a loss, an
    /// integer input with a gradient or a non-integer value.
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
            if i.dtype == InputKind::Int64 {
                if i.requires_grad {
                    bail!("input {:?}: an int64 input has no gradient", i.name);
                }
                if let Some(v) = i.values.iter().find(|v| v.fract() != 0.0 || !v.is_finite()) {
                    bail!("input {:?}: int64 value {v} is not an integer", i.name);
                }
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
        self.check_loop(case)?;
        for m in &case.micro_batches {
            if m.name == "loss" || !known.insert(m.name.as_str()) {
                bail!("micro-batch name {:?} is taken", m.name);
            }
        }
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
        if case.optimizer_steps == 0 || (case.optimizer.is_none() && case.optimizer_steps != 1) {
            bail!(
                "optimizer_steps is {}: at least 1, and 1 without an optimizer",
                case.optimizer_steps
            );
        }
        let leaf = |n: &str| self.input(n).is_some_and(|i| i.requires_grad);
        for q in &case.compare {
            let ok = match Quantity::parse(q)? {
                Quantity::Loss => case.loss.is_some(),
                Quantity::Value(n) => known.contains(n.as_str()),
                Quantity::Grad(n) => leaf(&n) && case.loss.is_some(),
                Quantity::AfterStep(n) => leaf(&n) && case.optimizer.is_some(),
                Quantity::State(n, slot) => {
                    leaf(&n)
                        && match (&case.optimizer, slot) {
                            (
                                Some(ProbeOptimizer::Sgd { momentum, .. }),
                                StateSlot::MomentumBuffer,
                            ) => *momentum != 0.0,
                            (
                                Some(ProbeOptimizer::Adam { .. } | ProbeOptimizer::Adamw { .. }),
                                StateSlot::ExpAvg | StateSlot::ExpAvgSq,
                            ) => true,
                            _ => false,
                        }
                }
            };
            if !ok {
                bail!("quantity {q:?} does not exist in this case");
            }
        }
        Ok(())
    }

    /// The checks of a case's loop besides its steps: `accumulate` at least 1 (1 without an
    /// optimizer), micro-batch sources that are inputs without `requires_grad` of rank 2 or
    /// more with one row per micro-step, and gradient transforms only with an optimizer,
    /// each replacing the gradient of an input with `requires_grad` by one value per element.
    fn check_loop(&self, case: &CaseSpec) -> Result<()> {
        let k = case.accumulate;
        if k == 0 || (case.optimizer.is_none() && k != 1) {
            bail!("accumulate is {k}: at least 1, and 1 without an optimizer");
        }
        if case.optimizer.is_none()
            && (!case.micro_batches.is_empty() || !case.grad_transforms.is_empty())
        {
            bail!("micro_batches and grad_transforms need an optimizer");
        }
        let rows = case.optimizer_steps * k;
        for m in &case.micro_batches {
            let Some(i) = self.input(&m.input) else {
                bail!(
                    "micro-batch {:?} reads {:?}, which is not an input",
                    m.name,
                    m.input
                );
            };
            if i.requires_grad || i.shape.len() < 2 || i.shape[0] != rows {
                bail!(
                    "micro-batch {:?}: input {:?} (shape {:?}) needs no requires_grad, rank 2 or \
                     more and {rows} rows",
                    m.name,
                    m.input,
                    i.shape
                );
            }
        }
        for t in &case.grad_transforms {
            if let GradTransform::Replace { input, values } = t {
                let Some(i) = self.input(input).filter(|i| i.requires_grad) else {
                    bail!("replace: {input:?} is not an input with requires_grad");
                };
                if values.len() != i.values.len() {
                    bail!(
                        "replace {input:?}: {} values for {} elements",
                        values.len(),
                        i.values.len()
                    );
                }
            }
        }
        Ok(())
    }
}
