//! Weight layouts. PyTorch stores a Linear weight as `[out, in]` (`y = x Wᵀ + b`); burn's
//! `nn::Linear` stores it as `[in, out]` (`y = x W + b`, burn-nn 0.22 `Linear::weight`).
//! Fixtures and traces use PyTorch's layout, so the runner converts on load and on export;
//! comparisons then never need to know about layouts. Conv1d weights are
//! `[out, in, kernel]` in both frameworks and are not converted.
//!
//! Both functions work on host values (row-major, contiguous) and only move elements, so
//! they are exact for any element type.

/// PyTorch `[out, in]` (row-major) → burn `[in, out]` (row-major): element `[o, i]` moves
/// from `o·in + i` to `i·out + o`.
///
/// # Panics
/// When `values.len() != out · inp`.
pub fn torch_to_burn_linear<T: Copy>(values: &[T], out: usize, inp: usize) -> Vec<T> {
    transpose(values, out, inp)
}

/// burn `[in, out]` (row-major) → PyTorch `[out, in]` (row-major), the inverse of
/// [`torch_to_burn_linear`].
///
/// # Panics
/// When `values.len() != inp · out`.
pub fn burn_to_torch_linear<T: Copy>(values: &[T], inp: usize, out: usize) -> Vec<T> {
    transpose(values, inp, out)
}

/// Transpose of a row-major `[rows, cols]` matrix, as a row-major `[cols, rows]` one.
fn transpose<T: Copy>(values: &[T], rows: usize, cols: usize) -> Vec<T> {
    assert_eq!(
        values.len(),
        rows * cols,
        "a [{rows}, {cols}] matrix has {} elements, got {}",
        rows * cols,
        values.len()
    );
    (0..cols)
        .flat_map(|c| (0..rows).map(move |r| values[r * cols + c]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_2x3_torch_weight_becomes_its_3x2_transpose() {
        // PyTorch W [out 2, in 3] = [[1, 2, 3], [4, 5, 6]]; burn's [in 3, out 2] is Wᵀ.
        let w = [1, 2, 3, 4, 5, 6];
        assert_eq!(torch_to_burn_linear(&w, 2, 3), vec![1, 4, 2, 5, 3, 6]);
        assert_eq!(burn_to_torch_linear(&[1, 4, 2, 5, 3, 6], 3, 2), w.to_vec());
    }

    #[test]
    fn round_trip_is_the_identity() {
        let w: Vec<f32> = (0..48 * 3).map(|i| i as f32 * 0.5 - 7.0).collect();
        let back = burn_to_torch_linear(&torch_to_burn_linear(&w, 3, 48), 48, 3);
        assert_eq!(back, w);
    }

    #[test]
    #[should_panic(expected = "has 6 elements")]
    fn wrong_length_panics() {
        torch_to_burn_linear(&[1.0f64; 5], 2, 3);
    }
}
