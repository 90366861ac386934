//! The inputs with `requires_grad` as burn parameters, gathered in one module so that burn's
//! optimizers (which step a [`Module`]) can update them and key their state by parameter id.

use burn::module::{Module, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;

use super::dyn_tensor::Dyn;
use crate::load::ParamInfo;

/// Every input with `requires_grad` as a burn parameter, by rank.
#[derive(Module, Debug)]
pub struct Leaves {
    r1: Vec<Param<Tensor<1>>>,
    r2: Vec<Param<Tensor<2>>>,
    r3: Vec<Param<Tensor<3>>>,
    r4: Vec<Param<Tensor<4>>>,
}

/// Where a leaf is in [`Leaves`]: its rank and index.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot(usize, usize);

impl Leaves {
    pub(crate) fn new() -> Self {
        Leaves {
            r1: Vec::new(),
            r2: Vec::new(),
            r3: Vec::new(),
            r4: Vec::new(),
        }
    }

    /// Makes `t` a parameter (`require_grad`) and returns where it is.
    pub(crate) fn push(&mut self, t: Dyn) -> Slot {
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
    pub(crate) fn get(&self, Slot(rank, i): Slot) -> Dyn {
        match rank {
            1 => Dyn::R1(self.r1[i].val()),
            2 => Dyn::R2(self.r2[i].val()),
            3 => Dyn::R3(self.r3[i].val()),
            _ => Dyn::R4(self.r4[i].val()),
        }
    }

    /// The parameter's id and shape (a probe's leaves have one layout in PyTorch and burn),
    /// which [`crate::moments`] reads the optimizer state by.
    pub(crate) fn info(&self, Slot(rank, i): Slot, name: &str) -> ParamInfo {
        let (id, burn_shape) = match rank {
            1 => (self.r1[i].id, self.r1[i].val().dims().to_vec()),
            2 => (self.r2[i].id, self.r2[i].val().dims().to_vec()),
            3 => (self.r3[i].id, self.r3[i].val().dims().to_vec()),
            _ => (self.r4[i].id, self.r4[i].val().dims().to_vec()),
        };
        ParamInfo {
            name: name.to_string(),
            id,
            burn_shape,
            linear: None,
        }
    }

    /// The parameter's id, which burn's `GradientsParams` keys its gradient by.
    pub(crate) fn id(&self, Slot(rank, i): Slot) -> ParamId {
        match rank {
            1 => self.r1[i].id,
            2 => self.r2[i].id,
            3 => self.r3[i].id,
            _ => self.r4[i].id,
        }
    }

    /// The parameter's gradient in `grads` (`GradientsParams::get`), if it has one.
    pub(crate) fn grad_in(&self, slot: Slot, grads: &GradientsParams) -> Option<Dyn> {
        let id = self.id(slot);
        match slot.0 {
            1 => grads.get::<1>(id).map(Dyn::R1),
            2 => grads.get::<2>(id).map(Dyn::R2),
            3 => grads.get::<3>(id).map(Dyn::R3),
            _ => grads.get::<4>(id).map(Dyn::R4),
        }
    }

    /// Makes `g` the parameter's gradient in `grads` (`GradientsParams::register`, which
    /// replaces one already there); `g` has the parameter's rank.
    pub(crate) fn set_grad(&self, slot: Slot, grads: &mut GradientsParams, g: Dyn) {
        let id = self.id(slot);
        each_rank!(g, t => grads.register(id, t));
    }
}
