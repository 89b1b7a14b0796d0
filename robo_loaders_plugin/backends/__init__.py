"""Backends: framework-free data structures and pipelines; the adapters in robomimic/ and lerobot/ drive them."""
