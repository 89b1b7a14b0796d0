#!/usr/bin/env bash
# Mixtures (docs/benchmarks.md, "Mixtures of datasets"), LeRobot and robomimic: every backend against a hand-written
# ConcatDataset + WeightedRandomSampler of the framework's own datasets in the same run (3 components, other camera
# layouts; other rates at target_fps with gpu_resampler; 100 small components), and LeRobot's start-up against the
# number of components and their frames. Datasets are generated into a fresh directory in $ROBO_LOADERS_WORKLOADS
# (else the system's temporary directory) and removed afterwards; about 20-25 minutes on 2 quiet cores (34 shared).
# Needs the venv on PATH. PARTS=throughput,startup,robomimic (a subset with --merge keeps the other parts' rows).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH="$here/..${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1
cd "$here/.."
python -m benchmarks.mixtures run --json benchmarks/results/mixtures.json --plots benchmarks/results/mixtures_plots \
  --repeats "${REPEATS:-1}" --parts "${PARTS:-throughput,startup,robomimic}" "$@"
