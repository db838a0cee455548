"""Helpers for tests that build network namespaces (root only)."""
