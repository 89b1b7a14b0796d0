"""``python -m benchmarks.harness ...`` (from the repository root)."""

from benchmarks.harness.cli import run

run()
