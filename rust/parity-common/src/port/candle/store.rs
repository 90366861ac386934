//! [`FixtureStore`]: the `VarBuilder` backend that serves a port the fixture's tensors by
//! PyTorch state_dict key, as trainable `Var`s, and records what the port asked for.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::{bail, Context};
use candle_core::{DType, Device, Shape, Tensor, Var};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::VarBuilder;

use crate::spec::{ParamSpec, RunSpec};

/// What a port asked its `VarBuilder` for (see [`crate::port::Inspection`], which reports it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Asked {
    /// Parameters by state_dict key (after the rename table and the tied aliases) with the
    /// shape asked for, in the order first asked, each once.
    pub params: Vec<(String, Vec<usize>)>,
    /// Buffers by state_dict key, in the order first asked, each once.
    pub buffers: Vec<String>,
    /// Names (after the rename table) the fixture does not hold, each once.
    pub missing: Vec<String>,
    /// `(name, fixture shape, asked shape)` of tensors asked for with another shape.
    pub shape_mismatch: Vec<(String, Vec<usize>, Vec<usize>)>,
}

/// What the backend serves; shared by every `VarBuilder` made from one store.
struct Shared {
    /// The parameters in the spec's (state_dict) order.
    params: Vec<(String, Var)>,
    /// state_dict key → index into `params`.
    index: HashMap<String, usize>,
    /// Buffers in the run dtype on the run device.
    buffers: HashMap<String, Tensor>,
    tied: BTreeMap<String, String>,
    rename: BTreeMap<String, String>,
    /// Serve zeros for a missing name or a wrong shape instead of failing (so `inspect`
    /// lists every one; the inspection then reports them as the build's error).
    lenient: bool,
    asked: Mutex<Asked>,
}

/// The tensors of an own model's run, by state_dict key: every parameter of the spec as a
/// trainable `Var` and every buffer as a plain tensor, both in the run dtype on the run
/// device, served to the port through [`FixtureStore::var_builder`].
///
/// A name the port asks for is looked up as: the rename table's state_dict key for it (or
/// the name itself), then, for a tied alias, the name it is recorded under. So a tied alias
/// gets the recorded tensor's own `Var` (one parameter, trained once, recorded once), and
/// every ask of one name gets the same `Var`. Asked with a dtype or device other than the
/// run's, the `Var` comes converted (`to_dtype`, `to_device`: differentiable, so its
/// gradient still reaches the `Var`).
///
/// Errors name the tensor: a name the fixture does not hold, or one asked for with another
/// shape, fails the port's build (candle's `Error::Msg`), unless the store is lenient
/// ([`FixtureStore::new`]). Every ask is recorded ([`FixtureStore::asked`]).
#[derive(Clone)]
pub struct FixtureStore {
    shared: Arc<Shared>,
    dtype: DType,
    device: Device,
}

impl FixtureStore {
    /// The store of `spec` (its parameters, and its model's buffers, tied aliases and rename
    /// table, [`crate::spec::ModelSpec`]) from the fixture's tensors
    /// `tensors` (as `candle_core::safetensors::load` reads them): each of `spec.params` and
    /// of the model's buffers must be float32 of the spec's shape, and is converted to
    /// `dtype` (F32 or F64; float32 values widen exactly) and moved to `device`. `lenient`:
    /// serve zeros for what the fixture lacks or holds with another shape (for `inspect`),
    /// instead of failing.
    ///
    /// # Errors
    /// When the fixture lacks one of its tensors or holds one with another dtype or shape (the message names the fixture and the tensor), or
    /// candle fails to convert or move it.
    pub fn new(
        spec: &RunSpec,
        tensors: &HashMap<String, Tensor>,
        dtype: DType,
        device: &Device,
        lenient: bool,
    ) -> anyhow::Result<Self> {
        let m = &spec.model;
        let fixture = spec.fixture.display();
        let load = |p: &ParamSpec| -> anyhow::Result<Tensor> {
            let t = tensors
                .get(&p.name)
                .with_context(|| format!("fixture {fixture} has no tensor {:?}", p.name))?;
            if t.dtype() != DType::F32 || t.dims() != p.shape.as_slice() {
                bail!(
                    "fixture {fixture}: {} is {:?} {:?}, expected F32 {:?}",
                    p.name,
                    t.dtype(),
                    t.dims(),
                    p.shape
                );
            }
            Ok(t.to_dtype(dtype)?.to_device(device)?)
        };
        let mut params = Vec::with_capacity(spec.params.len());
        for p in &spec.params {
            params.push((p.name.clone(), Var::from_tensor(&load(p)?)?));
        }
        let index = params
            .iter()
            .enumerate()
            .map(|(i, (n, _))| (n.clone(), i))
            .collect();
        let buffers = m
            .buffers
            .iter()
            .map(|b| Ok((b.name.clone(), load(b)?)))
            .collect::<anyhow::Result<_>>()?;
        Ok(Self {
            shared: Arc::new(Shared {
                params,
                index,
                buffers,
                tied: m.tied.clone(),
                rename: m.rename.clone(),
                lenient,
                asked: Mutex::new(Asked::default()),
            }),
            dtype,
            device: device.clone(),
        })
    }

    /// A `VarBuilder` (root prefix, the run dtype and device) over this store, for the
    /// port's `build`.
    pub fn var_builder(&self) -> VarBuilder<'static> {
        VarBuilder::from_backend(
            Box::new(Backend(self.shared.clone())),
            self.dtype,
            self.device.clone(),
        )
    }

    /// The parameters in the spec's (state_dict) order, each a trainable `Var`.
    pub fn params(&self) -> &[(String, Var)] {
        &self.shared.params
    }

    /// What the port asked for so far (a copy).
    pub fn asked(&self) -> Asked {
        self.shared.record().clone()
    }

    /// The parameters (state_dict order) the port has not asked for so far: after its
    /// build, the ones it would never train.
    pub fn unasked(&self) -> Vec<String> {
        let asked = self.shared.record();
        self.shared
            .params
            .iter()
            .map(|(n, _)| n)
            .filter(|n| !asked.params.iter().any(|(a, _)| a == *n))
            .cloned()
            .collect()
    }
}

/// The `SimpleBackend` of a [`FixtureStore`]'s `VarBuilder`s.
struct Backend(Arc<Shared>);

/// A tensor as served: converted to the asked dtype and device where they differ.
fn served(t: &Tensor, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
    let t = if t.dtype() == dtype {
        t.clone()
    } else {
        t.to_dtype(dtype)?
    };
    if t.device().same_device(dev) {
        Ok(t)
    } else {
        t.to_device(dev)
    }
}

/// Pushes `item` onto `list` unless it is there already.
fn push_once<T: PartialEq>(list: &mut Vec<T>, item: T) {
    if !list.contains(&item) {
        list.push(item);
    }
}

impl Shared {
    fn record(&self) -> MutexGuard<'_, Asked> {
        // A port that panicked while holding the lock left nothing half-written here.
        self.asked.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state_dict key a port's name stands for (the rename table's entry or the name).
    fn key(&self, name: &str) -> String {
        self.rename
            .get(name)
            .cloned()
            .unwrap_or_else(|| name.to_string())
    }

    /// The tensor served for `name` asked with `shape` (`None`: any), recording the ask.
    fn lookup(
        &self,
        name: &str,
        shape: Option<&Shape>,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        let key = self.key(name);
        let recorded = self.tied.get(&key).cloned().unwrap_or_else(|| key.clone());
        let (tensor, is_param) = if let Some(&i) = self.index.get(&recorded) {
            (self.params[i].1.as_tensor(), true)
        } else if let Some(b) = self.buffers.get(&key) {
            (b, false)
        } else {
            push_once(&mut self.record().missing, key.clone());
            return match shape {
                Some(s) if self.lenient => Tensor::zeros(s, dtype, dev),
                _ => Err(candle_core::Error::Msg(format!(
                    "the fixture holds no tensor {key:?}{} (the PyTorch model's parameters \
                     and handed-over buffers are served by state_dict key; rename it in \
                     model.rename if the port names it differently)",
                    if key == name {
                        String::new()
                    } else {
                        format!(" (asked for as {name:?})")
                    }
                ))
                .bt()),
            };
        };
        let have = tensor.dims().to_vec();
        let asked = shape.map_or_else(|| have.clone(), |s| s.dims().to_vec());
        {
            let mut record = self.record();
            if is_param {
                if !record.params.iter().any(|(n, _)| n == &recorded) {
                    record.params.push((recorded.clone(), asked.clone()));
                }
            } else {
                push_once(&mut record.buffers, key.clone());
            }
            if asked != have {
                push_once(
                    &mut record.shape_mismatch,
                    (recorded.clone(), have.clone(), asked.clone()),
                );
            }
        }
        if asked != have {
            if self.lenient {
                return Tensor::zeros(asked, dtype, dev);
            }
            return Err(candle_core::Error::Msg(format!(
                "{recorded:?} asked for with shape {asked:?}; the fixture's (PyTorch's) is {have:?}"
            ))
            .bt());
        }
        served(tensor, dtype, dev)
    }
}

impl SimpleBackend for Backend {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _h: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        self.0.lookup(name, Some(&s), dtype, dev)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        self.0.lookup(name, None, dtype, dev)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        let key = self.0.key(name);
        let recorded = self.0.tied.get(&key).unwrap_or(&key);
        self.0.index.contains_key(recorded) || self.0.buffers.contains_key(&key)
    }
}
