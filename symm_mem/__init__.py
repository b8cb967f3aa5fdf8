"""Symmetric-memory workspace and commrt's Triton all-reduce kernels (no policy here)."""
