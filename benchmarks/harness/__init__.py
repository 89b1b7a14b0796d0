"""The project's benchmark harness (``python -m benchmarks.harness --help`` from the repository root): the matrix
(``matrix.py``), the decoder alone (``decode.py``), the training-time benchmark (``train/``), the README's tables
(``readme_tables.py``), and the formats the tests and scripts write for ``robo-loaders report``: loss curves
(``loss_curves.py``), epoch times (``epoch_times.py``); conversion timing per executor (``executor_timing.py``).

It builds on what the package keeps for users (``robo_loaders_plugin.bench``: the loader benchmarks, their runner
and memory sampler, ``robo-loaders report``) and adds nothing to it."""
