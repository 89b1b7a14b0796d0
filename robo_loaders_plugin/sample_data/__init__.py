"""Offline sample datasets for tests, demos and benchmarks (no network, no simulator)."""
