//! Tests of the optimizers: what candle-parity refuses, the bias-correction factors, the
//! manual AdamW's identity with candle-nn's and its faults.

use super::*;
use candle_core::{DType, Device};

/// candle-parity refuses what candle cannot run instead of substituting something else.
#[test]
fn adam_and_burn_adamw_are_refused() {
    let var = Var::new(&[1.0f32], &Device::Cpu).unwrap();
    let adam = Optimizer::Adam {
        lr: 0.01,
        betas: [0.9, 0.999],
        eps: 1e-8,
        weight_decay: 0.0,
    };
    let err = Stepper::new(&adam, vec![var.clone()], false, Fault::None)
        .err()
        .unwrap();
    assert!(err.to_string().contains("no Adam"), "{err:#}");
    let burn = Optimizer::Adamw {
        lr: 0.01,
        betas: [0.9, 0.999],
        eps: 1e-8,
        weight_decay: 0.01,
        implementation: AdamWImpl::Burn,
        bias_correction: FactorType::F32,
    };
    let err = Stepper::new(&burn, vec![var], false, Fault::None)
        .err()
        .unwrap();
    assert!(err.to_string().contains("burn's AdamW"), "{err:#}");
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
    let spec = Optimizer::Adamw {
        lr: 0.01,
        betas: [0.9, 0.999],
        eps: 1e-8,
        weight_decay: 0.01,
        implementation: AdamWImpl::Candle,
        bias_correction: FactorType::F64,
    };
    let err = Stepper::new(&spec, vec![v], false, Fault::EpsInSqrt)
        .err()
        .expect("refused");
    assert!(err.to_string().contains("manual"), "{err}");
}
