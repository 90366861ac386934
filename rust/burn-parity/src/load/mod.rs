//! Loading tensors in PyTorch names and layout into a port (a built-in family or a user's)
//! through burn-store:
//! `SafetensorsStore::from_bytes` holding the tensors, the key remapping of the run's rename
//! table and the port's [`BurnModel::key_remap`], `PyTorchToBurnAdapter` (a Linear weight
//! `[out, in]` transposed to burn's `[in, out]`, a norm's `weight`/`bias` found as
//! `gamma`/`beta`) chained with `FloatCastAdapter` to the run dtype, and
//! `model.load_from(&mut store)`, whose `ApplyResult` is reported ([`Loaded`]).
//!
//! The way back (recording the port's parameters, gradients and moments in PyTorch names
//! and layout) is measured from burn-store's own `BurnToPyTorchAdapter`: each parameter's
//! position is passed through it once ([`ports_params`]), which gives the PyTorch-style
//! name it is looked up by and whether the adapter transposes it.

use std::collections::{BTreeMap, HashMap};

use anyhow::{anyhow, bail, Context, Result};
use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::store::{
    bridge, ApplyError, BurnToPyTorchAdapter, FloatCastAdapter, KeyRemapper, ModuleAdapter,
    ModuleContext, ModuleSnapshot, PyTorchToBurnAdapter, SafetensorsStore,
};
use burn::tensor::{DType, Tensor, TensorData};
use parity_common::burn::BurnModel;
use parity_common::spec::FloatType;

use crate::device::{dtype, Host};
use crate::layout;

#[cfg(test)]
mod tests;

/// A named tensor as burn-store's adapters and key remapper take and give it: burn-pack's
/// tensor in burn 0.22, burn-store's `StoreTensor` from 0.23 (cfg `burn_store_0_23`, set by
/// build.rs from the locked burn version).
#[cfg(not(burn_store_0_23))]
type StoreTensor = burn::store::burn_pack::Tensor;
#[cfg(burn_store_0_23)]
type StoreTensor = burn::store::StoreTensor;

/// A [`StoreTensor`] named `name` holding `data`.
fn store_tensor(data: TensorData, name: String) -> StoreTensor {
    #[allow(clippy::useless_conversion)]
    StoreTensor::from(bridge::from_data(data, name, None))
}

/// The name of a [`StoreTensor`].
#[cfg(not(burn_store_0_23))]
fn store_name(t: &StoreTensor) -> String {
    t.name.clone()
}

/// The name of a [`StoreTensor`].
#[cfg(burn_store_0_23)]
fn store_name(t: &StoreTensor) -> String {
    t.name().to_string()
}

/// The data of a [`StoreTensor`] (burn-store's error on failure, printed with `{:?}`).
#[cfg(not(burn_store_0_23))]
fn store_data(t: StoreTensor) -> std::result::Result<TensorData, impl std::fmt::Debug> {
    bridge::into_data(t)
}

/// The data of a [`StoreTensor`] (burn-store's error on failure, printed with `{:?}`).
#[cfg(burn_store_0_23)]
fn store_data(t: StoreTensor) -> std::result::Result<TensorData, impl std::fmt::Debug> {
    t.into_data()
}

/// One parameter of a port: what ties a PyTorch state_dict entry to burn's parameter.
#[derive(Debug, Clone)]
pub struct ParamInfo {
    /// PyTorch state_dict name (`fc1.weight`).
    pub name: String,
    /// burn's id of the parameter, which keys its optimizer state.
    pub id: ParamId,
    /// Shape in burn's layout (`[in, out]` for a Linear weight).
    pub burn_shape: Vec<usize>,
    /// `(in, out)` for a Linear weight (burn `[in, out]`, PyTorch `[out, in]`); `None` for a
    /// tensor laid out alike in both.
    pub linear: Option<(usize, usize)>,
}

impl ParamInfo {
    /// Row-major values in PyTorch layout → burn's layout (a transpose for a Linear weight).
    pub fn to_burn<T: Copy>(&self, torch: &[T]) -> Vec<T> {
        match self.linear {
            Some((inp, out)) => layout::torch_to_burn_linear(torch, out, inp),
            None => torch.to_vec(),
        }
    }

    /// Host values in burn's layout → PyTorch layout, the inverse of [`ParamInfo::to_burn`].
    pub fn to_torch(&self, burn: Host) -> Host {
        match self.linear {
            Some((inp, out)) => burn.rearrange(
                |v| layout::burn_to_torch_linear(v, inp, out),
                |v| layout::burn_to_torch_linear(v, inp, out),
            ),
            None => burn,
        }
    }
}

/// One float parameter of a port as burn-store's adapter sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct PortParam {
    /// The module path (`blocks.0.norm1.gamma`).
    pub path: String,
    /// The name `BurnToPyTorchAdapter` gives it (`blocks.0.norm1.weight`): what the loader
    /// also looks a norm's parameter up by.
    pub torch_path: String,
    /// burn's id of the parameter (keys the optimizer's state).
    pub id: ParamId,
    /// Its shape in burn's layout.
    pub burn_shape: Vec<usize>,
    /// `(in, out)` when the adapter transposes it (a Linear weight, burn `[in, out]`).
    pub linear: Option<(usize, usize)>,
}

impl PortParam {
    /// Its shape in PyTorch layout.
    pub fn torch_shape(&self) -> Vec<usize> {
        match self.linear {
            Some((inp, out)) => vec![out, inp],
            None => self.burn_shape.clone(),
        }
    }
}

/// Walks a module, passing an iota tensor of each float parameter's shape through
/// `BurnToPyTorchAdapter` in that parameter's module context.
#[derive(Default)]
struct Walk {
    path: Vec<String>,
    containers: Vec<String>,
    found: Vec<Result<PortParam>>,
}

impl ModuleVisitor for Walk {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.path.push(name.to_string());
        self.containers.push(container_type.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
        self.containers.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let path = self.path.join(".");
        let shape = param.lazy_shape().to_vec();
        let n: usize = shape.iter().product();
        let iota: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let probe = store_tensor(TensorData::new(iota, shape.clone()), path.clone());
        let adapted = BurnToPyTorchAdapter.adapt(probe, ModuleContext::new(&self.containers));
        let torch_path = store_name(&adapted);
        let found = store_data(adapted)
            .map_err(|e| anyhow!("{path}: burn-store's adapter gave no data: {e:?}"))
            .and_then(|d| {
                let got: Vec<f32> = d.try_to_vec::<f32>().map_err(|e| anyhow!("{path}: {e:?}"))?;
                let linear = match shape.as_slice() {
                    _ if got.iter().enumerate().all(|(i, &v)| v == i as f32) => None,
                    &[inp, out] if got == layout::burn_to_torch_linear(&iota_f32(n), inp, out) => {
                        Some((inp, out))
                    }
                    _ => bail!("{path}: burn-store's BurnToPyTorchAdapter rearranges it in a way other than a transpose"),
                };
                Ok(PortParam {
                    path: path.clone(),
                    torch_path,
                    id: param.id,
                    burn_shape: shape.clone(),
                    linear,
                })
            });
        self.found.push(found);
    }
}

fn iota_f32(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}

/// Every float parameter of `model`, in module order, with what burn-store's
/// `BurnToPyTorchAdapter` does to it (see [`PortParam`]).
///
/// # Errors
/// When the adapter does something to a parameter other than renaming or transposing it.
pub fn ports_params<M: Module>(model: &M) -> Result<Vec<PortParam>> {
    let mut walk = Walk::default();
    model.visit(&mut walk);
    walk.found.into_iter().collect()
}

/// One tensor to load: its state_dict key, its shape and values (PyTorch layout, row-major)
/// in float32 or float64.
pub struct Source {
    /// The state_dict key.
    pub name: String,
    /// The shape in PyTorch layout.
    pub shape: Vec<usize>,
    /// The values.
    pub values: TensorData,
}

/// What loading reported, in PyTorch names: the port's parameters mapped to state_dict
/// keys, and every problem burn-store's `ApplyResult` listed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Loaded {
    /// `(state_dict key, parameter)` of each parameter a source tensor was loaded into, in
    /// module order.
    pub params: Vec<(String, PortParam)>,
    /// The port's parameters no source tensor reached (`ApplyResult.missing`), each by the
    /// PyTorch-style name it was looked up by.
    pub missing: Vec<String>,
    /// Source tensors loaded into no parameter (`ApplyResult.unused`), by state_dict key.
    pub unused: Vec<String>,
    /// `(state_dict key, source shape, the port's shape)`, both in PyTorch layout
    /// (`ApplyError::ShapeMismatch`).
    pub shape_mismatch: Vec<(String, Vec<usize>, Vec<usize>)>,
    /// burn-store's other errors (a dtype it refuses, data it cannot read), its own words.
    pub errors: Vec<String>,
}

impl Loaded {
    /// One sentence per problem (unused sources; burn-store's other errors), or `None`
    /// when every source reached a parameter and burn-store reported no error other than
    /// the missing names and shapes ([`parity_common::Inspection`] lists those).
    pub fn other_problems(&self) -> Option<String> {
        let mut out: Vec<String> = Vec::new();
        if !self.unused.is_empty() {
            out.push(format!(
                "the fixture's {} reached no parameter of the port (burn-store's unused; map them with key_remap or model.rename.burn)",
                self.unused.join(", ")
            ));
        }
        out.extend(self.errors.iter().cloned());
        (!out.is_empty()).then(|| out.join("; "))
    }
}

/// The key remapping of a load: the rename table's entries first (the port's path ← a
/// state_dict key, matched exactly), then the port's own patterns ([`BurnModel::key_remap`]).
///
/// # Errors
/// A pattern that is not a regular expression (named).
pub fn remapper(
    rename: &BTreeMap<String, String>,
    port: Vec<(String, String)>,
) -> Result<KeyRemapper> {
    let exact = rename
        .iter()
        .map(|(path, key)| (format!("^{}$", regex_escape(key)), path.clone()));
    let mut r = KeyRemapper::new();
    for (from, to) in exact.chain(port) {
        r = r.add_pattern(&from, to.clone()).map_err(|e| {
            anyhow!("key remapping {from:?} → {to:?}: not a regular expression: {e}")
        })?;
    }
    Ok(r)
}

/// `s` with every regular-expression metacharacter escaped.
fn regex_escape(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let special = "\\.+*?()|[]{}^$#&-~".contains(c);
            special.then_some('\\').into_iter().chain([c])
        })
        .collect()
}

/// Loads `sources` into `model` through burn-store (module docs) in the run dtype `ty`,
/// remapped by `remap`, and reports in PyTorch names what it did ([`Loaded`]).
///
/// # Errors
/// When the sources cannot be written as safetensors, two sources remap to one name, two of
/// the port's parameters take one source, or burn-store fails outright.
pub fn load_into<M: BurnModel>(
    model: &mut M,
    sources: &[Source],
    remap: &KeyRemapper,
    ty: FloatType,
) -> Result<Loaded> {
    let bytes = safetensors_bytes(sources)?;
    // The remapped name of each source, and back.
    let probes = sources
        .iter()
        .map(|s| store_tensor(TensorData::new(vec![0f32], [1]), s.name.clone()))
        .collect();
    let (_, pairs) = remap.remap(probes);
    let mut key_of: HashMap<String, String> = HashMap::new();
    for (new, old) in pairs {
        if let Some(other) = key_of.insert(new.clone(), old.clone()) {
            bail!("the key remapping maps both {other:?} and {old:?} to {new:?}");
        }
    }
    let adapter = PyTorchToBurnAdapter.chain(FloatCastAdapter::to(dtype(ty)));
    let mut store = SafetensorsStore::from_bytes(Some(bytes))
        .remap(remap.clone())
        .with_from_adapter(adapter)
        .validate(false)
        .allow_partial(true);
    let result = model
        .load_from(&mut store)
        .map_err(|e| anyhow!("burn-store could not load the fixture: {e}"))?;
    let params = ports_params(model)?;
    let by_path: HashMap<&str, &PortParam> = params.iter().map(|p| (p.path.as_str(), p)).collect();
    let source_shape: HashMap<&str, &Vec<usize>> = sources
        .iter()
        .map(|s| (s.name.as_str(), &s.shape))
        .collect();

    let mut loaded = Loaded::default();
    let mut taken: HashMap<String, String> = HashMap::new();
    for p in &params {
        let key = key_of
            .get(&p.path)
            .or_else(|| key_of.get(&p.torch_path))
            .cloned();
        match key {
            Some(k) => {
                if let Some(other) = taken.insert(k.clone(), p.path.clone()) {
                    bail!("{k:?} is loaded into two parameters of the port, {other} and {} (a tied weight is one parameter in burn: reuse it)", p.path);
                }
                loaded.params.push((k, p.clone()));
            }
            None => loaded.missing.push(p.torch_path.clone()),
        }
    }
    loaded.unused = result
        .unused
        .iter()
        .map(|n| key_of.get(n).cloned().unwrap_or_else(|| n.clone()))
        .collect();
    for e in &result.errors {
        match e {
            ApplyError::ShapeMismatch { path, .. } => {
                let p = by_path
                    .get(path.as_str())
                    .context("a shape error of no parameter")?;
                let k = key_of
                    .get(&p.path)
                    .or_else(|| key_of.get(&p.torch_path))
                    .cloned()
                    .unwrap_or_else(|| p.torch_path.clone());
                let have = source_shape
                    .get(k.as_str())
                    .map(|s| s.to_vec())
                    .unwrap_or_default();
                loaded.shape_mismatch.push((k, have, p.torch_shape()));
            }
            other => loaded.errors.push(other.to_string()),
        }
    }
    Ok(loaded)
}

/// The sources as one safetensors buffer (row-major, their own dtype).
fn safetensors_bytes(sources: &[Source]) -> Result<Vec<u8>> {
    let views = sources
        .iter()
        .map(|s| {
            let dt = match s.values.dtype() {
                DType::F32 => safetensors::Dtype::F32,
                DType::F64 => safetensors::Dtype::F64,
                other => bail!("{}: {other:?} is not a float32 or float64 tensor", s.name),
            };
            let view =
                safetensors::tensor::TensorView::new(dt, s.shape.clone(), s.values.as_bytes())
                    .map_err(|e| anyhow!("{}: {e:?}", s.name))?;
            Ok((s.name.clone(), view))
        })
        .collect::<Result<Vec<_>>>()?;
    safetensors::serialize(views, None)
        .map_err(|e| anyhow!("writing the tensors as safetensors: {e:?}"))
}

/// The [`ParamInfo`] (state_dict key, id, burn layout) of each of `names` (the spec's
/// parameters, state_dict order) from a load.
///
/// # Errors
/// When a name reached no parameter of the port.
pub fn param_infos(loaded: &Loaded, names: &[String]) -> Result<Vec<ParamInfo>> {
    names
        .iter()
        .map(|n| {
            let (_, p) = loaded
                .params
                .iter()
                .find(|(k, _)| k == n)
                .with_context(|| {
                    format!("the fixture's {n:?} was loaded into no parameter of the port")
                })?;
            Ok(ParamInfo {
                name: n.clone(),
                id: p.id,
                burn_shape: p.burn_shape.clone(),
                linear: p.linear,
            })
        })
        .collect()
}
