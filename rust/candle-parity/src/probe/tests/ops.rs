//! Each op against hand-computed values.
