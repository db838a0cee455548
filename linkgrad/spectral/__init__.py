"""Spectral link-gradient estimation: pure functions over numpy arrays (thesis ch. 2–4)."""
