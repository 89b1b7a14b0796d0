"""The project's benchmark tooling, beside the package and not installed with it: ``harness/`` (run it from the
repository root: ``python -m benchmarks.harness --help``), its tests (``tests/``), the scripts that produce the
committed ``results/`` (``*.sh``) and the codec comparison (``codecs.py``)."""
