"""Benchmarks: every backend measured in its own subprocess, in one run, with ratios to native."""
