"""Measured tuning tables (``<generation>_ws<N>.json``), written by ``commrt tune``."""
