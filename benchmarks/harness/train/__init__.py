"""Training-time benchmark: the frameworks' own training loops (robomimic's ``train()``, ``lerobot-train``) run for
a fixed number of steps per backend, every backend in the same run, timings read from the frameworks' own logs.

The loader-only benchmark (``robo_loaders_plugin.bench.robomimic_bench`` / ``lerobot_bench``) measures batches per
second without a model; this one measures what a user sees: steps per second of real training and the fraction of
each step spent waiting for data (docs/training-benchmark.md). Entry points:
``robomimic_train.bench_robomimic_train``, ``lerobot_train.bench_lerobot_train`` and the click commands in
``commands``.
"""
