#!/usr/bin/env bash
# LeRobot mixtures (docs/benchmarks.md, "Mixtures of datasets"): every backend against a hand-written
# ConcatDataset + WeightedRandomSampler of LeRobotDatasets in the same run (3 components, other camera layouts; other
# rates at target_fps with gpu_resampler), and start-up against the number of components and their frames.
# Datasets are generated into a fresh directory in $ROBO_LOADERS_WORKLOADS (else the system's temporary directory)
# and removed afterwards; about 10 minutes on 2 cores. Needs the venv on PATH.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH="$here/..${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1
cd "$here/.."
python -m benchmarks.mixtures run --json benchmarks/results/mixtures.json --plots benchmarks/results/mixtures_plots \
  --repeats "${REPEATS:-1}" "$@"
