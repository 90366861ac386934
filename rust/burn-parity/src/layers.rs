//! The layers both model families are made of ([`crate::model`]'s MLP and CNN,
//! [`crate::transformer`]'s decoder): burn-nn `Linear`s loaded from the fixture in burn's
//! layout ([`linear`], [`linear_without_bias`]), and the slots that tie a PyTorch state_dict
//! entry to one of burn's parameters ([`Slot`], [`SlotMut`]; a Linear's are
//! [`linear_slots`] and [`linear_slot_mut`]). Every family maps its parameters through
//! these, so a key cannot be mapped two ways.

use anyhow::Result;
use burn::module::Param;
use burn::nn::Linear;
use burn::tensor::{Device, Tensor};
use parity_common::spec::FloatType;

use crate::device::{float_tensor, Host};
use crate::fixture::Fixture;
use crate::layout;

/// One parameter of a model ([`crate::model::Net`], a probe's leaves excepted), with how
/// its PyTorch layout maps onto burn's.
pub(crate) enum Slot<'a> {
    /// A Linear weight: burn `[in, out]`, PyTorch `[out, in]`.
    LinearWeight(&'a Param<Tensor<2>>, usize, usize),
    /// A bias `[n]`, same layout.
    Vector(&'a Param<Tensor<1>>),
    /// A Conv1d weight `[out, in, kernel]`, same layout.
    Kernel(&'a Param<Tensor<3>>),
    /// A matrix laid out alike in both (an embedding `[rows, d_model]`).
    Matrix(&'a Param<Tensor<2>>),
}

/// One parameter of a model, mutably, by rank.
pub(crate) enum SlotMut<'a> {
    /// A vector `[n]` (a bias, a layer norm's weight or bias).
    One(&'a mut Param<Tensor<1>>),
    /// A matrix (a Linear weight in burn's layout, an embedding).
    Two(&'a mut Param<Tensor<2>>),
    /// A Conv1d weight `[out, in, kernel]`.
    Three(&'a mut Param<Tensor<3>>),
}

/// A Linear `inp → out` with bias named `name` in the fixture (PyTorch layout), in burn's.
pub(crate) fn linear(
    fx: &Fixture,
    name: &str,
    inp: usize,
    out: usize,
    ty: FloatType,
    device: &Device,
) -> Result<Linear> {
    let b = fx.f32(&format!("{name}.bias"), &[out])?;
    let mut l = linear_without_bias(fx, name, inp, out, ty, device)?;
    l.bias = Some(Param::from_tensor(float_tensor(b, [out], ty, device)));
    Ok(l)
}

/// A Linear `inp → out` without bias from the fixture's `{name}.weight` (PyTorch layout
/// `[out, in]`, converted to burn's `[in, out]`), in dtype `ty` on `device` (the
/// transformer's key projection, see `parity_common::spec::Model::Transformer`).
///
/// # Errors
/// When the fixture lacks the weight or holds it with another shape.
pub(crate) fn linear_without_bias(
    fx: &Fixture,
    name: &str,
    inp: usize,
    out: usize,
    ty: FloatType,
    device: &Device,
) -> Result<Linear> {
    let w = fx.f32(&format!("{name}.weight"), &[out, inp])?;
    let w = layout::torch_to_burn_linear(w, out, inp);
    Ok(Linear {
        weight: Param::from_tensor(float_tensor(&w, [inp, out], ty, device)),
        bias: None,
    })
}

/// The slots of a Linear named `name`: `{name}.weight` and, if it has one, `{name}.bias`.
pub(crate) fn linear_slots(name: String, l: &Linear) -> Vec<(String, Slot<'_>)> {
    let [inp, out] = l.weight.val().dims();
    let mut v = vec![(
        format!("{name}.weight"),
        Slot::LinearWeight(&l.weight, inp, out),
    )];
    if let Some(b) = &l.bias {
        v.push((format!("{name}.bias"), Slot::Vector(b)));
    }
    v
}

/// The parameter `field` (`weight` or `bias`) of a Linear, mutably.
pub(crate) fn linear_slot_mut<'a>(l: &'a mut Linear, field: &str) -> SlotMut<'a> {
    match field {
        "weight" => SlotMut::Two(&mut l.weight),
        _ => SlotMut::One(l.bias.as_mut().expect("Linear with bias")),
    }
}

/// burn `[in, out]` host values → PyTorch `[out, in]` (a Linear weight's, see
/// [`crate::layout`]).
pub(crate) fn torch_layout(h: Host, inp: usize, out: usize) -> Host {
    h.rearrange(
        |v| layout::burn_to_torch_linear(v, inp, out),
        |v| layout::burn_to_torch_linear(v, inp, out),
    )
}
