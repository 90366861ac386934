//! Tests of the optimizers: what candle-parity refuses, the bias-correction factors, the
//! manual AdamW's identity with candle-nn's and its faults.

use super::recipe::{AdamRecipe, ParamsAdam, ParamsSgd, SgdRecipe};
use super::*;
use candle_core::{DType, Device};
use parity_common::spec::FactorType;

fn adam(implementation: AdamWImpl, amsgrad: bool) -> Optimizer {
    Optimizer::Adam {
        lr: 0.01,
        betas: [0.9, 0.999],
        eps: 1e-8,
        weight_decay: 0.0,
        amsgrad,
        implementation,
        bias_correction: FactorType::F64,
    }
}

fn adamw(implementation: AdamWImpl, amsgrad: bool) -> Optimizer {
    Optimizer::Adamw {
        lr: 0.01,
        betas: [0.9, 0.999],
        eps: 1e-8,
        weight_decay: 0.01,
        amsgrad,
        implementation,
        bias_correction: FactorType::F64,
    }
}

fn opt(spec: &Optimizer, vars: Vec<Var>, fault: Fault) -> Result<Opt> {
    Opt::new(spec, spec.lr(), spec.weight_decay(), vars, false, fault)
}

/// candle-parity refuses what candle cannot run instead of substituting something else: an
/// Adam that is not the recipe, burn's Adam and AdamW, amsgrad of candle-nn's AdamW.
#[test]
fn what_candle_lacks_is_the_recipe_or_refused() {
    let var = Var::new(&[1.0f32], &Device::Cpu).unwrap();
    let refused = |spec: Optimizer| opt(&spec, vec![var.clone()], Fault::None).err().unwrap();
    assert!(refused(adam(AdamWImpl::Candle, false))
        .to_string()
        .contains("no Adam"));
    assert!(refused(adamw(AdamWImpl::Burn, false))
        .to_string()
        .contains("burn's"));
    assert!(refused(adamw(AdamWImpl::Candle, true))
        .to_string()
        .contains("amsgrad"));
    let recipe = opt(&adam(AdamWImpl::Recipe, true), vec![var], Fault::None).unwrap();
    assert_eq!(recipe.name(), "candle_parity::optim::recipe::AdamRecipe");
}

#[test]
fn f64_factors_match_candle_nn_formula() {
    let (m, v) = bias_correction(0.9, 0.999, 1, FactorType::F64);
    assert_eq!(m, 1.0 / (1.0 - 0.9f64));
    assert_eq!(v, 1.0 / (1.0 - 0.999f64));
}

#[test]
fn f32_factors_differ_from_f64_at_step_one() {
    let (_, v64) = bias_correction(0.9, 0.999, 1, FactorType::F64);
    let (_, v32) = bias_correction(0.9, 0.999, 1, FactorType::F32);
    // 1 - 0.999 in float32 is 0.0009999871..., a relative error of about 1.3e-5.
    let rel = (v32 - v64).abs() / v64;
    assert!(rel > 1e-6 && rel < 1e-4, "relative error {rel}");
}

/// The identity the ablation rests on: with float64 factors the manual AdamW equals
/// candle-nn's AdamW bit for bit.
#[test]
fn manual_adamw_with_f64_factors_equals_candle_adamw_bitwise() -> Result<()> {
    let dev = Device::Cpu;
    let init = Tensor::new(&[0.5f32, -1.25, 2.0, 1e-3], &dev)?;
    let a = Var::from_tensor(&init)?;
    let b = Var::from_tensor(&init)?;
    let params = ParamsAdamW {
        lr: 0.01,
        weight_decay: 0.01,
        ..ParamsAdamW::default()
    };
    let mut oa = AdamW::new(vec![a.clone()], params.clone())?;
    let mut ob = ManualAdamW::new(vec![b.clone()], params, FactorType::F64, Fault::None)?;
    let c = Tensor::new(&[0.3f32, -0.7, 1.1, 2.5], &dev)?;
    for _ in 0..50 {
        let ga = (a.as_tensor().sqr()? * &c)?.sum_all()?.backward()?;
        oa.step(&ga)?;
        let gb = (b.as_tensor().sqr()? * &c)?.sum_all()?.backward()?;
        ob.step(&gb)?;
        let va = a.as_tensor().to_vec1::<f32>()?;
        let vb = b.as_tensor().to_vec1::<f32>()?;
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&va), bits(&vb));
    }
    assert_eq!(a.dtype(), DType::F32);
    Ok(())
}

/// Three steps of the manual AdamW on `f(θ) = Σ c·θ²` from fixed values, with `fault`.
fn three_steps(fault: Fault) -> Result<Vec<f32>> {
    let dev = Device::Cpu;
    let theta = Var::from_tensor(&Tensor::new(&[0.5f32, -1.25, 2.0, 1e-3], &dev)?)?;
    let params = ParamsAdamW {
        lr: 0.01,
        weight_decay: 0.01,
        ..ParamsAdamW::default()
    };
    let mut opt = ManualAdamW::new(vec![theta.clone()], params, FactorType::F64, fault)?;
    let c = Tensor::new(&[0.3f32, -0.7, 1.1, 2.5], &dev)?;
    for _ in 0..3 {
        let g = (theta.as_tensor().sqr()? * &c)?.sum_all()?.backward()?;
        opt.step(&g)?;
    }
    Ok(theta.as_tensor().to_vec1::<f32>()?)
}

#[test]
fn each_adamw_fault_changes_the_update() -> Result<()> {
    let clean = three_steps(Fault::None)?;
    for fault in [Fault::EpsInSqrt, Fault::NoBiasCorrection] {
        let faulty = three_steps(fault)?;
        assert!(
            faulty.iter().all(|v| v.is_finite()),
            "{fault:?}: {faulty:?}"
        );
        assert_ne!(faulty, clean, "{fault:?} left the update unchanged");
    }
    // 1 − β⁰ = 0: the factors are infinite at step 1 and the update is NaN.
    let from_zero = three_steps(Fault::StepFromZero)?;
    assert!(from_zero.iter().all(|v| v.is_nan()), "{from_zero:?}");
    // Faults outside the update leave it bit for bit as it was.
    let other = three_steps(Fault::MseSum)?;
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&other), bits(&clean));
    Ok(())
}

#[test]
fn adamw_faults_are_refused_for_candle_nn_adamw() {
    let v = Var::from_tensor(&Tensor::new(&[1f32], &Device::Cpu).unwrap()).unwrap();
    let spec = adamw(AdamWImpl::Candle, false);
    let err = opt(&spec, vec![v], Fault::EpsInSqrt)
        .err()
        .expect("refused");
    assert!(err.to_string().contains("manual"), "{err}");
}

fn grads_of(vars: &[Var], g: &[&[f64]]) -> Result<GradStore> {
    // A GradStore holding `g` for each var, from a backward pass of Σ g·v.
    let mut loss = Tensor::zeros((), candle_core::DType::F64, &Device::Cpu)?;
    for (v, g) in vars.iter().zip(g) {
        let g = Tensor::new(*g, &Device::Cpu)?;
        loss = (loss + (v.as_tensor() * g)?.sum_all()?)?;
    }
    Ok(loss.backward()?)
}

fn f64_var(v: &[f64]) -> Var {
    Var::new(v, &Device::Cpu).unwrap()
}

/// The SGD recipe without momentum or decay is candle-nn's SGD bit for bit; with momentum,
/// dampening, Nesterov and L2 decay it follows PyTorch's `_single_tensor_sgd`, the buffer
/// taking the gradient as it is on its first step.
#[test]
fn the_sgd_recipe_is_pytorchs_sgd() -> Result<()> {
    use candle_nn::Optimizer as _;
    let (a, b) = (f64_var(&[1.0, -2.0]), f64_var(&[1.0, -2.0]));
    let mut plain = SgdRecipe::new(
        vec![a.clone()],
        ParamsSgd {
            lr: 0.1,
            momentum: 0.0,
            dampening: 0.0,
            nesterov: false,
            weight_decay: 0.0,
        },
    )?;
    let mut candle = SGD::new(vec![b.clone()], 0.1)?;
    for g in [[0.3, -0.7], [1.1, 0.25]] {
        plain.step(&grads_of(std::slice::from_ref(&a), &[&g])?)?;
        candle.step(&grads_of(std::slice::from_ref(&b), &[&g])?)?;
        assert_eq!(a.to_vec1::<f64>()?, b.to_vec1::<f64>()?);
    }
    let (mu, tau, lr, wd) = (0.9, 0.1, 0.05, 0.01);
    for nesterov in [false, true] {
        let tau = if nesterov { 0.0 } else { tau };
        let v = f64_var(&[0.5]);
        let mut sgd = SgdRecipe::new(
            vec![v.clone()],
            ParamsSgd {
                lr,
                momentum: mu,
                dampening: tau,
                nesterov,
                weight_decay: wd,
            },
        )?;
        let (mut theta, mut buf): (f64, Option<f64>) = (0.5, None);
        for g in [0.3, -0.2, 0.7] {
            sgd.step(&grads_of(std::slice::from_ref(&v), &[&[g]])?)?;
            let d = g + theta * wd;
            let b = match buf {
                None => d,
                Some(b) => b * mu + d * (1.0 - tau),
            };
            buf = Some(b);
            let step = if nesterov { d + b * mu } else { b };
            theta -= step * lr;
            let got = v.to_vec1::<f64>()?[0];
            assert!(
                (got - theta).abs() <= 1e-15,
                "nesterov {nesterov}: {got} vs {theta}"
            );
        }
    }
    Ok(())
}

/// The Adam recipe follows PyTorch's `_single_tensor_adam`: L2 or decoupled decay, float64
/// bias corrections, the amsgrad maximum of the raw second moments.
#[test]
fn the_adam_recipe_is_pytorchs_adam() -> Result<()> {
    use candle_nn::Optimizer as _;
    for (decoupled, amsgrad) in [(false, false), (true, false), (false, true)] {
        let v = f64_var(&[0.5]);
        let p = ParamsAdam {
            lr: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.1,
            decoupled,
            amsgrad,
        };
        let mut adam = AdamRecipe::new(vec![v.clone()], p)?;
        let (mut theta, mut m, mut s, mut smax) = (0.5f64, 0.0f64, 0.0f64, 0.0f64);
        for (t, g) in [0.3, -0.9, 0.05].into_iter().enumerate() {
            adam.step(&grads_of(std::slice::from_ref(&v), &[&[g]])?)?;
            let t = (t + 1) as f64;
            let mut g = g;
            if decoupled {
                theta *= 1.0 - p.lr * p.weight_decay;
            } else {
                g += theta * p.weight_decay;
            }
            m = m * p.beta1 + g * (1.0 - p.beta1);
            s = s * p.beta2 + g * g * (1.0 - p.beta2);
            smax = smax.max(s);
            let denom =
                (if amsgrad { smax } else { s }).sqrt() / (1.0 - p.beta2.powf(t)).sqrt() + p.eps;
            theta -= p.lr / (1.0 - p.beta1.powf(t)) * m / denom;
            let got = v.to_vec1::<f64>()?[0];
            assert!(
                (got - theta).abs() <= 1e-15,
                "{decoupled} {amsgrad} step {t}: {got} vs {theta}"
            );
        }
    }
    Ok(())
}

/// `clip_grad_norm_` on a GradStore: the total norm of [3, 4] and [0] is 5, and a bound of 5
/// scales by 5/(5 + 1e-6), as PyTorch's does (the study's [3, 4] case).
#[test]
fn clipping_scales_by_the_total_norm() -> Result<()> {
    let (a, b) = (f64_var(&[0.0, 0.0]), f64_var(&[0.0]));
    let vars = [a.clone(), b.clone()];
    let mut grads = grads_of(&vars, &[&[3.0, 4.0], &[0.0]])?;
    let norm = clip::total_norm(&grads, &vars)?.expect("two gradients");
    assert_eq!(clip::widened(&norm)?, 5.0);
    let coef = clip::widened(&clip::clip_grad_norm(&mut grads, &vars, &norm, 5.0)?)?;
    assert_eq!(
        coef,
        (1.0 / (5.0 + 1e-6)) * 5.0,
        "reciprocal, then times max_norm"
    );
    let g = grads.get(&a).unwrap().to_vec1::<f64>()?;
    assert_eq!(g, vec![3.0 * coef, 4.0 * coef]);
    let small = Tensor::new(1.0f64, &Device::Cpu)?;
    assert_eq!(
        clip::widened(&clip::clip_grad_norm(&mut grads, &vars, &small, 5.0)?)?,
        1.0,
        "no clip below the bound"
    );
    clip::clip_grad_value(&mut grads, &vars, 3.5)?;
    assert_eq!(
        grads.get(&a).unwrap().to_vec1::<f64>()?,
        vec![3.0 * coef, 3.5]
    );
    Ok(())
}
