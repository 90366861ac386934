//! A port loaded from the fixture ([`Net`]), the run's data ([`Data`]), the loss every run
//! computes ([`loss`]) and the optimizer that steps a port ([`NetOptimizer`]): burn-parity's
//! pieces ([`crate::data::batch_loss`], [`Stepper`], [`crate::moments`], parity-common's
//! frames) around a [`BurnModel`], a built-in family's or a user's.

use std::collections::HashMap;

use anyhow::{bail, Context, Result};
use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Int, Tensor, TensorData};
use parity_common::burn::{BurnModel, Input, Output, Taps};
use parity_common::frames::RawTensor;
use parity_common::guard::guarded;
use parity_common::optim::{FrameMoments, Parameters, RunOptimizer};
use parity_common::spec::{FloatType, InputKind, RunSpec, TargetKind};

use crate::data::{batch_loss, per_batch, Targets};
use crate::device::{float_tensor, Host};
use crate::fixture::Fixture;
use crate::load::{self, Loaded, ParamInfo, Source};
use crate::optim::Stepper;

/// The batches of a run on the run device: inputs as the port receives them and targets as
/// the loss takes them.
pub struct Data {
    inputs: Vec<Input>,
    targets: Targets,
    device: Device,
}

impl Data {
    /// The data of `spec` from the fixture: `x` int64 token ids `[batches, B, T]` or float32
    /// `[batches, B, …]` (rank 2 to 4 per batch) in the run dtype; `y` int64 next tokens
    /// (`x`'s shape, flattened per batch to `[B·T]`), int64 class labels `[batches, B]`, or
    /// float32 targets `[batches, B, …]` (flattened per batch to `[B, F]`; the MSE's mean is
    /// over every element either way).
    ///
    /// # Errors
    /// `x`/`y` missing or of another dtype or shape (the message names the fixture and the
    /// tensor).
    pub(crate) fn read(spec: &RunSpec, fx: &Fixture, device: &Device) -> Result<Self> {
        let (input, target) = (&spec.model.input, &spec.model.target);
        let ty = spec.dtype;
        let i64s = |name: &str| {
            fx.i64s
                .get(name)
                .with_context(|| format!("fixture {}: {name} must be int64 here", fx.path))
        };
        let f32s = |name: &str| {
            fx.f32s
                .get(name)
                .with_context(|| format!("fixture {}: {name} must be float32 here", fx.path))
        };
        let (x_shape, inputs) = match input {
            InputKind::Tokens => {
                let (s, v) = i64s("x")?;
                if s.len() != 3 {
                    bail!("fixture {}: x is {s:?}, expected [batches, B, T]", fx.path);
                }
                let per = per_batch(v, s[0])
                    .map(|b| {
                        let t = Tensor::<2, Int>::from_data(
                            TensorData::new(b.to_vec(), [s[1], s[2]]),
                            device,
                        );
                        Input::Tokens(t)
                    })
                    .collect();
                (s.clone(), per)
            }
            InputKind::Float => {
                let (s, v) = f32s("x")?;
                let per = per_batch(v, s[0])
                    .map(|b| match s.len() {
                        3 => Ok(Input::Float2(float_tensor(b, [s[1], s[2]], ty, device))),
                        4 => Ok(Input::Float3(float_tensor(
                            b,
                            [s[1], s[2], s[3]],
                            ty,
                            device,
                        ))),
                        5 => Ok(Input::Float4(float_tensor(
                            b,
                            [s[1], s[2], s[3], s[4]],
                            ty,
                            device,
                        ))),
                        _ => bail!(
                            "fixture {}: x is {s:?}; a port takes [B, …] of rank 2 to 4",
                            fx.path
                        ),
                    })
                    .collect::<Result<_>>()?;
                (s.clone(), per)
            }
        };
        let (batches, b) = (x_shape[0], x_shape[1]);
        let targets = match target {
            TargetKind::Tokens | TargetKind::Classes => {
                let (s, v) = i64s("y")?;
                let want: Vec<usize> = match target {
                    TargetKind::Tokens => x_shape.clone(),
                    _ => vec![batches, b],
                };
                if *s != want {
                    bail!("fixture {}: y is {s:?}, expected {want:?}", fx.path);
                }
                let n = v.len() / batches.max(1);
                Targets::Classes(
                    per_batch(v, batches)
                        .map(|c| {
                            Tensor::<1, Int>::from_data(TensorData::new(c.to_vec(), [n]), device)
                        })
                        .collect(),
                )
            }
            TargetKind::Float => {
                let (s, v) = f32s("y")?;
                if s.len() < 3 || s[..2] != [batches, b] {
                    bail!(
                        "fixture {}: y is {s:?}, expected [{batches}, {b}, …]",
                        fx.path
                    );
                }
                let f = s[2..].iter().product();
                Targets::Values(
                    per_batch(v, batches)
                        .map(|c| float_tensor(c, [b, f], ty, device))
                        .collect(),
                )
            }
        };
        Ok(Self {
            inputs,
            targets,
            device: device.clone(),
        })
    }

    /// Step `t`'s batch index (t ≥ 1): `(t − 1) mod batches`.
    pub fn index(&self, t: u32) -> usize {
        (t as usize - 1) % self.inputs.len()
    }

    /// The batch of micro-batch `j` of `k` of step `t` (from 1): `((t − 1)·k + j) mod
    /// batches`.
    pub fn micro_index(&self, t: u32, j: u32, k: u32) -> usize {
        ((t as usize - 1) * k as usize + j as usize) % self.inputs.len()
    }

    /// The input of batch `i`.
    pub fn input(&self, i: usize) -> Input {
        self.inputs[i].clone()
    }
}

/// The port's output flattened as the loss takes it, with its shape: logits `[B, T, V]` to
/// `[B·T, V]`, `[B, C]` as is, float outputs to `[B, F]`.
pub fn flat_output(spec: &RunSpec, out: Output) -> (Vec<usize>, Tensor<2>) {
    let target = &spec.model.target;
    match out {
        Output::Rank2(t) => (t.dims().to_vec(), t),
        Output::Rank3(t) => {
            let [b, x, y] = t.dims();
            let flat = match target {
                TargetKind::Tokens => t.reshape([b * x, y]),
                _ => t.reshape([b, x * y]),
            };
            (vec![b, x, y], flat)
        }
        Output::Rank4(t) => {
            let [b, c, h, w] = t.dims();
            (vec![b, c, h, w], t.reshape([b, c * h * w]))
        }
    }
}

/// The loss of the port's flattened output `out` (see [`flat_output`], whose shape it was)
/// on batch `i` ([`crate::data::batch_loss`]: burn's `MseLoss` with `Reduction::Mean`, or
/// `CrossEntropyLoss` on logits, every position a sample for token targets).
///
/// # Errors
/// An output whose shape does not fit the targets (the message says what the loss needs).
pub fn loss(
    spec: &RunSpec,
    shape: &[usize],
    out: Tensor<2>,
    data: &Data,
    i: usize,
) -> Result<Tensor<1>> {
    let [rows, cols] = out.dims();
    let fits = match &data.targets {
        Targets::Values(y) => y[i].dims() == [rows, cols],
        Targets::Classes(y) => y[i].dims()[0] == rows,
    };
    if !fits {
        let needs = match &data.targets {
            Targets::Values(y) => format!("{} elements per sample", y[i].dims()[1]),
            Targets::Classes(y) => format!("{} rows of logits (one per label)", y[i].dims()[0]),
        };
        bail!("the port's output has shape {shape:?}; the loss needs {needs}");
    }
    Ok(batch_loss(spec.loss, out, &data.targets, i, &data.device))
}

/// A port `M` loaded from the fixture, with its parameters' map to the spec's state_dict
/// keys ([`ParamInfo`], spec order).
#[derive(Debug)]
pub struct Net<M> {
    /// The port.
    pub model: M,
    /// The spec's parameters, state_dict order, each tied to the port's parameter.
    pub params: Vec<ParamInfo>,
}

/// The sources of a load: every parameter of the spec and every buffer, from the fixture.
///
/// # Errors
/// When the fixture lacks one or holds it with another shape.
pub(crate) fn fixture_sources(spec: &RunSpec, fx: &Fixture) -> Result<Vec<Source>> {
    spec.params
        .iter()
        .chain(&spec.model.buffers)
        .map(|p| {
            let v = fx.f32(&p.name, &p.shape)?;
            Ok(Source {
                name: p.name.clone(),
                shape: p.shape.clone(),
                values: TensorData::new(v.to_vec(), p.shape.clone()),
            })
        })
        .collect()
}

/// `M::init(config, device)` with the config of `spec`
/// ([`parity_common::spec::ModelSpec::port_config`]; a panic is an error), then the fixture
/// loaded into it ([`load::load_into`]). Returns the model and what the load reported.
///
/// # Errors
/// The port's init (with the context "initialising the port"), a bad key remapping, or as
/// [`load::load_into`].
pub(crate) fn init_and_load<M: BurnModel>(
    spec: &RunSpec,
    sources: &[Source],
    device: &Device,
) -> Result<(M, Loaded)> {
    let config = spec.model.port_config(spec.fault);
    let mut model = guarded(|| M::init(&config, device))
        .with_context(|| format!("initialising the port {}", std::any::type_name::<M>()))?;
    let remap = load::remapper(&spec.model.rename, M::key_remap(&config))?;
    let loaded = guarded(|| load::load_into(&mut model, sources, &remap, spec.dtype))?;
    Ok((model, loaded))
}

impl<M: BurnModel> Net<M> {
    /// The port of `spec` loaded from `sources` ([`init_and_load`]), refusing any problem
    /// the load reported.
    ///
    /// # Errors
    /// As [`init_and_load`]; and every missing name, unused source, shape or other error the
    /// load reported, in one message.
    pub(crate) fn load(spec: &RunSpec, sources: &[Source], device: &Device) -> Result<Self> {
        let (model, loaded) = init_and_load::<M>(spec, sources, device)?;
        let mut why: Vec<String> = Vec::new();
        if !loaded.missing.is_empty() {
            why.push(format!(
                "no fixture tensor reached the port's {}",
                loaded.missing.join(", ")
            ));
        }
        why.extend(loaded.shape_mismatch.iter().map(|(n, have, asked)| {
            format!(
                "{n:?} has shape {have:?} in the fixture, {asked:?} in the port (PyTorch layout)"
            )
        }));
        why.extend(loaded.other_problems());
        if !why.is_empty() {
            bail!("loading the fixture into the port: {}", why.join("; "));
        }
        let names: Vec<String> = spec.params.iter().map(|p| p.name.clone()).collect();
        let params = load::param_infos(&loaded, &names)?;
        Ok(Self { model, params })
    }

    /// The port's forward pass on `x`; a panic is an error.
    ///
    /// # Errors
    /// The port's or burn's.
    pub fn forward(&self, x: Input, taps: &mut Taps) -> Result<Output> {
        guarded(|| self.model.forward(x, taps))
    }
}

/// Reads the float parameters of a module whose ids are wanted, as host values in burn's
/// layout, or their gradients.
struct Reader<'a> {
    want: &'a HashMap<ParamId, usize>,
    ty: FloatType,
    grads: Option<&'a GradientsParams>,
    got: Vec<Option<Result<Host>>>,
}

impl ModuleVisitor for Reader<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let Some(&i) = self.want.get(&param.id) else {
            return;
        };
        self.got[i] = match self.grads {
            None => Some(Host::read(param.val().inner(), self.ty)),
            Some(g) => g.get::<D>(param.id).map(|t| Host::read(t, self.ty)),
        };
    }
}

impl<M: Module> Net<M> {
    /// Each parameter (spec order) in PyTorch layout (see [`ParamInfo::to_torch`]), or its
    /// gradient from `grads` (`None` where it has none).
    fn read(&self, ty: FloatType, grads: Option<&GradientsParams>) -> Result<Vec<Option<Host>>> {
        let want: HashMap<ParamId, usize> = self
            .params
            .iter()
            .enumerate()
            .map(|(i, p)| (p.id, i))
            .collect();
        let mut r = Reader {
            want: &want,
            ty,
            grads,
            got: (0..self.params.len()).map(|_| None).collect(),
        };
        self.model.visit(&mut r);
        r.got
            .into_iter()
            .zip(&self.params)
            .map(|(h, p)| match h {
                Some(h) => Ok(Some(p.to_torch(h?))),
                None if grads.is_some() => Ok(None),
                None => bail!("the port no longer holds a parameter for {}", p.name),
            })
            .collect()
    }
}

/// The frames' copies of the port's parameters: each in PyTorch layout (the inverse of
/// burn-store's adapter, see [`load::ports_params`]), checked to be in the run dtype.
impl<M: Module> Parameters for Net<M> {
    type Grads = GradientsParams;

    /// # Errors
    /// When a parameter cannot be read or is not in `ty`.
    fn frame_params(
        &self,
        ty: FloatType,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<(String, RawTensor)>> {
        let values = self.read(ty, None)?;
        Ok(self
            .params
            .iter()
            .zip(values)
            .filter(|(p, _)| keep(&p.name))
            .filter_map(|(p, h)| h.map(|h| (p.name.clone(), h.into_raw())))
            .collect())
    }

    /// A parameter without a gradient is left out.
    ///
    /// # Errors
    /// As [`Parameters::frame_params`].
    fn frame_grads(
        &self,
        grads: &GradientsParams,
        ty: FloatType,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<(String, RawTensor)>> {
        let values = self.read(ty, Some(grads))?;
        Ok(self
            .params
            .iter()
            .zip(values)
            .filter(|(p, _)| keep(&p.name))
            .filter_map(|(p, h)| h.map(|h| (p.name.clone(), h.into_raw())))
            .collect())
    }
}

/// The optimizer of a run: burn-parity's [`Stepper`] (burn's SGD, Adam or AdamW, configured
/// from the spec) stepping the port, driven as both runners drive theirs ([`RunOptimizer`]).
pub struct NetOptimizer<M> {
    /// burn-parity's stepper.
    pub inner: Stepper,
    _model: std::marker::PhantomData<fn() -> M>,
}

impl<M> NetOptimizer<M> {
    /// Wraps `inner`.
    pub fn new(inner: Stepper) -> Self {
        Self {
            inner,
            _model: std::marker::PhantomData,
        }
    }
}

impl<M: Module> RunOptimizer for NetOptimizer<M> {
    type Params = Net<M>;

    /// [`Stepper`]'s (`burn::optim::Sgd`, `burn::optim::Adam`, `burn::optim::AdamW`).
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    /// `optim.step(lr, model, grads)`.
    ///
    /// # Errors
    /// None (burn's step panics on its own failures).
    fn step(&mut self, net: Net<M>, grads: GradientsParams) -> Result<Net<M>> {
        let Net { model, params } = net;
        Ok(Net {
            model: self.inner.step_module(model, grads),
            params,
        })
    }

    /// [`Stepper::moments`] of the port's parameters, PyTorch layout.
    ///
    /// # Errors
    /// As [`Stepper::moments`].
    fn frame_moments(
        &self,
        net: &Net<M>,
        ty: FloatType,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<FrameMoments>> {
        Ok(self
            .inner
            .moments(&net.params, ty)?
            .into_iter()
            .filter(|m| keep(&m.name))
            .map(|m| FrameMoments {
                name: m.name,
                exp_avg: m.exp_avg.into_raw(),
                exp_avg_sq: m.exp_avg_sq.into_raw(),
            })
            .collect())
    }
}
