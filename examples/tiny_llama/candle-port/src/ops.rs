//! The ops of transformers' Llama (`transformers/models/llama/modeling_llama.py`, 5.23.0)
//! composed from differentiable candle ops, each with the dtype casts transformers makes:
//! its RMSNorm, its softmax and its rotary tables compute in float32 whatever the model's
//! dtype, and so do these.

use candle_core::{DType, Device, Result, Tensor, D};

/// `LlamaRMSNorm.forward`: `weight * (x₃₂ · rsqrt(mean(x₃₂²) + eps)).to(x.dtype)`, with
/// `x₃₂` the input rounded to float32 (transformers computes the norm in float32 in every
/// model dtype). `x`: `[…, H]` in the run dtype; `weight`: `[H]` in the run dtype; returns
/// `x`'s shape and dtype.
///
/// The mean is the sum divided by `H` (`Tensor::mean` multiplies by `1/H`, which rounds
/// differently unless `H` is a power of two); `rsqrt` is `1 / sqrt`, as PyTorch's CPU
/// kernel computes it. Differentiable throughout (candle-nn's fused `rms_norm` is not: it
/// has no backward pass in 0.11.0, and `rms_norm_slow` divides by the root instead of
/// multiplying by its reciprocal).
///
/// # Errors
/// candle's (a weight of another width than `x`'s last dimension).
pub fn rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
    let dtype = x.dtype();
    let dev = x.device();
    let h = x.to_dtype(DType::F32)?;
    let width = h.dim(D::Minus1)?;
    let mean = h
        .sqr()?
        .sum_keepdim(D::Minus1)?
        .broadcast_div(&Tensor::new(width as f32, dev)?)?;
    // eps as PyTorch adds a Python float to a float32 tensor: rounded to float32.
    let var = mean.broadcast_add(&Tensor::new(eps as f32, dev)?)?;
    let normed = h.broadcast_mul(&var.sqrt()?.recip()?)?;
    weight.broadcast_mul(&normed.to_dtype(dtype)?)
}

/// `LlamaRotaryEmbedding`'s tables for positions `0..seq_len`: `(cos, sin)`, each
/// `[seq_len, head_dim]` in `dtype`, computed in float32 as transformers does:
/// `inv_freq[i] = 1 / theta^(2i / head_dim)` (`compute_default_rope_parameters`),
/// `freqs = position · inv_freq`, `emb = cat(freqs, freqs)`, then `cos(emb)`, `sin(emb)`
/// rounded to `dtype`. `theta` is the rotary base as candle-transformers'
/// `LlamaConfig::rope_theta` read it.
///
/// PyTorch's float32 `cos`/`sin` on the CPU (SLEEF, 1 ULP) and candle's (the C library's)
/// can differ in the last bit of a few entries.
///
/// # Errors
/// candle's.
pub fn rotary_tables(
    theta: f32,
    head_dim: usize,
    seq_len: usize,
    dtype: DType,
    dev: &Device,
) -> Result<(Tensor, Tensor)> {
    let inv_freq: Vec<f32> = (0..head_dim)
        .step_by(2)
        .map(|i| 1f32 / theta.powf(i as f32 / head_dim as f32))
        .collect();
    let half = inv_freq.len();
    let inv_freq = Tensor::from_vec(inv_freq, (1, half), dev)?;
    let positions = Tensor::arange(0u32, seq_len as u32, dev)?
        .to_dtype(DType::F32)?
        .reshape((seq_len, 1))?;
    let freqs = positions.broadcast_mul(&inv_freq)?;
    let emb = Tensor::cat(&[&freqs, &freqs], D::Minus1)?;
    Ok((emb.cos()?.to_dtype(dtype)?, emb.sin()?.to_dtype(dtype)?))
}

/// transformers' `rotate_half`: `cat(−x₂, x₁)` over the last dimension, `x₁` and `x₂` its
/// halves. Any shape with an even last dimension; differentiable.
///
/// # Errors
/// candle's.
pub fn rotate_half(x: &Tensor) -> Result<Tensor> {
    let d = x.dim(D::Minus1)?;
    let x1 = x.narrow(D::Minus1, 0, d / 2)?;
    let x2 = x.narrow(D::Minus1, d / 2, d - d / 2)?;
    Tensor::cat(&[&x2.neg()?, &x1], D::Minus1)
}

/// `apply_rotary_pos_emb` for one of q and k: `x · cos + rotate_half(x) · sin`. `x`:
/// `[B, heads, T, head_dim]`; `cos`, `sin`: `[T, head_dim]` in `x`'s dtype.
///
/// # Errors
/// candle's.
pub fn apply_rotary(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    x.broadcast_mul(cos)? + rotate_half(x)?.broadcast_mul(sin)?
}

/// The additive causal mask of transformers' eager attention: `[T, T]` in `dtype`, 0 where
/// key position ≤ query position, else the dtype's lowest finite value (`torch.finfo.min`).
///
/// # Errors
/// candle's; a dtype other than F32 and F64.
pub fn causal_mask(seq_len: usize, dtype: DType, dev: &Device) -> Result<Tensor> {
    let low = match dtype {
        DType::F32 => f64::from(f32::MIN),
        DType::F64 => f64::MIN,
        other => candle_core::bail!("the causal mask is F32 or F64, not {other:?}"),
    };
    let mask: Vec<f64> = (0..seq_len)
        .flat_map(|i| (0..seq_len).map(move |j| if j > i { low } else { 0.0 }))
        .collect();
    Tensor::from_vec(mask, (seq_len, seq_len), dev)?.to_dtype(dtype)
}

/// `softmax(x, dim=-1, dtype=torch.float32).to(x.dtype)`, as transformers' eager attention
/// takes it: computed in float32 with candle-nn's composed `softmax` (max-subtracted
/// exponentials over their sum; differentiable, unlike `softmax_last_dim`), then rounded
/// back to `x`'s dtype.
///
/// # Errors
/// candle's.
pub fn softmax_f32(x: &Tensor) -> Result<Tensor> {
    candle_nn::ops::softmax(&x.to_dtype(DType::F32)?, D::Minus1)?.to_dtype(x.dtype())
}

/// A scalar in `dtype` on `dev`, for exact broadcast products (candle's `Tensor * f64` is an
/// affine map `x · a + 0`, which turns −0.0 into +0.0).
///
/// # Errors
/// candle's.
pub fn scalar(v: f64, dtype: DType, dev: &Device) -> Result<Tensor> {
    Tensor::new(v, dev)?.to_dtype(dtype)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotate_half_and_mask_match_transformers() -> Result<()> {
        let dev = Device::Cpu;
        let x = Tensor::new(&[[1f64, 2., 3., 4.]], &dev)?;
        assert_eq!(rotate_half(&x)?.to_vec2::<f64>()?, [[-3., -4., 1., 2.]]);
        let m = causal_mask(3, DType::F64, &dev)?.to_vec2::<f64>()?;
        assert_eq!(m[0], [0.0, f64::MIN, f64::MIN]);
        assert_eq!(m[2], [0.0, 0.0, 0.0]);
        Ok(())
    }

    #[test]
    fn rms_norm_is_the_float32_formula() -> Result<()> {
        let dev = Device::Cpu;
        let x = Tensor::new(&[[3f64, 4.]], &dev)?;
        let w = Tensor::new(&[1f64, 2.], &dev)?;
        // mean(x²) = 12.5; 1 / sqrt(12.5) in float32.
        let r = 1f32 / (12.5f32 + 1e-6f32).sqrt();
        let got = rms_norm(&x, &w, 1e-6)?.to_vec2::<f64>()?;
        assert_eq!(got, [[f64::from(3f32 * r), 2.0 * f64::from(4f32 * r)]]);
        Ok(())
    }

    #[test]
    fn rotary_tables_start_at_position_zero() -> Result<()> {
        let (cos, sin) = rotary_tables(10_000.0, 4, 2, DType::F32, &Device::Cpu)?;
        assert_eq!(cos.to_vec2::<f32>()?[0], [1.0; 4]);
        assert_eq!(sin.to_vec2::<f32>()?[0], [0.0; 4]);
        // position 1: inv_freq = [1, 1/100], cat(freqs, freqs)
        assert_eq!(
            cos.to_vec2::<f32>()?[1],
            [1f32.cos(), 0.01f32.cos(), 1f32.cos(), 0.01f32.cos()]
        );
        Ok(())
    }
}
