"""The objective family side by side: per-token coefficients of each method on a step."""
