#!/usr/bin/env bash
# The training-time results (docs/training-benchmark.md): the frameworks' real training loops, every backend in one
# run, ratios against the native loader measured in the same run. robomimic: BC-RNN on the image observations of
# the real robosuite renders in ../shared (skipped when absent); LeRobot: lerobot-train (diffusion when diffusers is
# installed, else ACT) on those renders in LeRobot v3 form (AV1). CPU budget of these machines: 2 workers.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH="$here/..${PYTHONPATH:+:$PYTHONPATH}"  # the harness (benchmarks/harness) beside the package
shared=${SHARED:-$here/../../shared/data}
workers=${WORKERS:-2}
epochs=${EPOCHS:-3}
steps=${STEPS:-10}
if [ -f "$shared/robosuite_lift_84_20demos.hdf5" ]; then
  python -m benchmarks.harness train robomimic --dataset "$shared/robosuite_lift_84_20demos.hdf5" \
    --backends native:low_dim,compressed_cache,datapipe,gpu_resampler --epochs "$epochs" --steps-per-epoch "$steps" \
    --batch-size 16 --num-workers "$workers" --device cpu --json "$here/results/train_robomimic_bc_rnn_image_w${workers}.json"
  # the same with a model small enough that the data, not the model, bounds a CPU step (where native stalls most)
  python -m benchmarks.harness train robomimic --dataset "$shared/robosuite_lift_84_20demos.hdf5" \
    --backends native:low_dim,compressed_cache,datapipe,gpu_resampler --epochs "$epochs" --steps-per-epoch "$steps" \
    --batch-size 16 --num-workers "$workers" --device cpu --rnn-hidden-dim 64 \
    --config-set observation.encoder.rgb.core_kwargs.backbone_class=ShallowConv \
    --json "$here/results/train_robomimic_bc_rnn_image_small_w${workers}.json"
fi
if [ -d "$shared/robosuite_lift_84_20demos_lerobot" ]; then
  python -m benchmarks.harness train lerobot --root "$shared/robosuite_lift_84_20demos_lerobot" \
    --repo-id local/robosuite_lift \
    --backends native,compressed_cache,datapipe,gpu_resampler,video_stream --epochs "$epochs" \
    --steps-per-epoch "$steps" --batch-size 16 --num-workers "$workers" --device cpu \
    --json "$here/results/train_lerobot_w${workers}.json"
fi
