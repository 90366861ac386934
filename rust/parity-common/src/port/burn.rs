//! The burn side of a port (feature `burn`; contract in [`crate::port`]): the trait a burn
//! 0.22.1 port implements and its taps, which the runner `burn_parity` drives (the built-in
//! families in `burn_parity::families`, a user's own model in the user's crate).
//!
//! burn 0.22.1 dispatches its backend at run time (`burn::tensor::Device`: the ndarray
//! device with autodiff, its float type the run dtype), so one port type serves float32 and
//! float64 runs: the generated runner's `main` is one line per port, as for candle. The
//! runner loads the fixture into the module with burn-store (a `SafetensorsStore` of the
//! fixture's tensors `.with_from_adapter(PyTorchToBurnAdapter)`, remapped by the rename
//! table and [`BurnModel::key_remap`], `model.load_from(&mut store)`), reports its
//! `ApplyResult.missing/unused/errors` in `inspect`, and records the parameters back in
//! PyTorch names and layout (the inverse of the adapter, measured from
//! `BurnToPyTorchAdapter`).

use burn::module::Module;
use burn::tensor::{Device, Gradients, Int, Tensor, TensorData};

/// One batch's input: token ids `[B, T]` (int) or floats `[B, …]` (rank 2 to 4) in the run
/// dtype.
#[derive(Debug, Clone)]
pub enum Input {
    /// Token ids `[B, T]`.
    Tokens(Tensor<2, Int>),
    /// Floats `[B, F]`.
    Float2(Tensor<2>),
    /// Floats `[B, C, L]`.
    Float3(Tensor<3>),
    /// Floats `[B, C, H, W]`.
    Float4(Tensor<4>),
}

/// A port's output: logits `[B, C]` (class labels) or `[B, T, V]` (token targets), or the
/// float target's shape `[B, …]`, in the run dtype.
#[derive(Debug, Clone)]
pub enum Output {
    /// `[B, C]` or `[B, F]`.
    Rank2(Tensor<2>),
    /// `[B, T, V]` or `[B, C, L]`.
    Rank3(Tensor<3>),
    /// `[B, C, H, W]`.
    Rank4(Tensor<4>),
}

/// A burn port of a PyTorch model, as the runner drives it (`burn_parity`): initialised and
/// loaded from the fixture once per run, then `forward` once per step (`train`), or once with
/// active taps (`replay`, `inspect`). The runner computes the loss, calls `loss.backward()`
/// and steps burn's optimizer, the same for every port.
pub trait BurnModel: Module + Sized {
    /// Whether the forward pass names its own output with its last tap (the built-in
    /// families: `fc2`, `head`), so that a replay records no separate `output`
    /// (`parity_common::replay::replay_names`). A user's port leaves it `false`: the runner
    /// taps its result as `output`, the name the PyTorch side gives a model's output.
    const TAPS_ITS_OUTPUT: bool = false;

    /// The module, initialised from `config` (the run spec's model config, see
    /// [`crate::spec::ModelSpec::port_config`]: for a user's port handed over verbatim) on
    /// `device`; the runner then loads the fixture's weights into it (burn-store; the
    /// module's initial values are all replaced).
    ///
    /// # Errors
    /// Whatever the port refuses (a config it cannot read).
    fn init(config: &serde_json::Value, device: &Device) -> anyhow::Result<Self>;

    /// The forward pass of one batch (see [`Input`], [`Output`]); each intermediate worth
    /// comparing goes through [`Taps::tap`] under the PyTorch module path whose output it is,
    /// in PyTorch's layout.
    ///
    /// # Errors
    /// The framework's errors.
    fn forward(&self, x: Input, taps: &mut Taps) -> anyhow::Result<Output>;

    /// burn-store `KeyRemapper` patterns (regex, replacement) from PyTorch state_dict keys to
    /// the port's module paths, for the port of `config` (the one [`BurnModel::init`] got:
    /// the paths may depend on it, e.g. `fc{i}` → `layers.{i−1}` for each layer); none by
    /// default.
    fn key_remap(_config: &serde_json::Value) -> Vec<(String, String)> {
        Vec::new()
    }
}

/// How a recorded tap reads its gradient from a backward pass's gradients.
type GradReader = Box<dyn Fn(&Gradients) -> Option<TensorData>>;

/// A recorded tap: its path, the intermediate's values, and how to read the tap's gradient.
struct Marked {
    path: String,
    value: Box<dyn Fn() -> TensorData>,
    grad: GradReader,
}

/// The intermediates a burn port's forward pass names, as [`crate::port::candle::Taps`] does
/// for candle: inactive in `train` (no op added), active in `replay` and `inspect`, where the
/// first call of a path returns `h + v`, `v` a leaf of −0.0 of `h`'s shape that requires grad
/// (burn-tensor 0.22.1 keeps gradients of leaves only), so that `v`'s gradient is
/// d loss / d h and no value changes.
#[derive(Default)]
pub struct Taps {
    on: Option<Device>,
    marked: Vec<Marked>,
}

impl Taps {
    /// Taps that record nothing and add no op.
    pub fn inactive() -> Self {
        Self::default()
    }

    /// Taps that record, creating their leaves on `device` (the autodiff device the model
    /// runs on).
    pub fn active(device: &Device) -> Self {
        Self {
            on: Some(device.clone()),
            marked: Vec::new(),
        }
    }

    /// Whether [`Taps::tap`] records.
    pub fn is_active(&self) -> bool {
        self.on.is_some()
    }

    /// Names `h` after the PyTorch module path `path`; returns `h` when inactive or already
    /// recorded, else `h + v` (see the type's docs).
    pub fn tap<const D: usize>(&mut self, path: &str, h: Tensor<D>) -> Tensor<D> {
        let Some(device) = &self.on else { return h };
        if self.marked.iter().any(|m| m.path == path) {
            return h;
        }
        let shape = h.dims();
        let n: usize = shape.iter().product();
        let data = match h.dtype() {
            burn::tensor::DType::F64 => TensorData::new(vec![-0.0f64; n], shape),
            _ => TensorData::new(vec![-0.0f32; n], shape),
        };
        let tap = Tensor::<D>::from_data(data, (device, h.dtype())).require_grad();
        let out = h + tap.clone();
        let value = out.clone();
        self.marked.push(Marked {
            path: path.to_string(),
            value: Box::new(move || value.to_data()),
            grad: Box::new(move |g| tap.grad(g).map(|t| t.into_data())),
        });
        out
    }

    /// The recorded paths, in the order first called.
    pub fn paths(&self) -> Vec<String> {
        self.marked.iter().map(|m| m.path.clone()).collect()
    }

    /// Each recorded intermediate's values (row-major), in the order first called.
    pub fn values(&self) -> Vec<(String, TensorData)> {
        self.marked
            .iter()
            .map(|m| (m.path.clone(), (m.value)()))
            .collect()
    }

    /// d loss / d intermediate of each recorded tap from `grads` (`loss.backward()`); `None`
    /// where no gradient reached it.
    pub fn grads(&self, grads: &Gradients) -> Vec<(String, Option<TensorData>)> {
        self.marked
            .iter()
            .map(|m| (m.path.clone(), (m.grad)(grads)))
            .collect()
    }
}
