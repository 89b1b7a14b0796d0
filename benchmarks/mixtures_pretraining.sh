#!/usr/bin/env bash
# A pretraining-shaped LeRobot mixture (docs/benchmarks.md, "A pretraining-shaped mixture"; issue 44 item 5): 400
# small datasets of three robots (7-, 14- and 6-wide vectors, 1-3 cameras, weights over two orders of magnitude),
# every backend against the hand-written ConcatDataset + WeightedRandomSampler at 1, 10, 100 and 400 components and on
# one dataset of the same frames. Datasets are generated into a fresh directory in $ROBO_LOADERS_WORKLOADS (else the
# system's temporary directory; about 1 GB) and removed afterwards. Needs the venv on PATH.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH="$here/..${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1
cd "$here/.."
python -m benchmarks.mixtures_pretraining run --json benchmarks/results/mixtures_pretraining.json \
  --plots benchmarks/results/mixtures_plots "$@"
