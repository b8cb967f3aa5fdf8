"""Device profile, tuning tables and the dispatcher (never imports kernels)."""
