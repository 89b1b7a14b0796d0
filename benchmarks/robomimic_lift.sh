#!/usr/bin/env bash
# The README's robomimic numbers: a Lift-PH-sized image dataset (200 demos x ~50 steps, 2 cameras 84x84),
# BC-RNN windows of 10, batch 64, equal workers, every backend measured in this one run; datapipe reads shards
# from a timed `robo-loaders convert` at 1 and $WORKERS workers (conversion MB/s in the JSON); gpu_resampler#third is
# gpu_resampler counting its windows at a third of the recorded 20 Hz (the cost of rate conversion). REPEATS rounds
# of every backend, each reported by its median run (default 1).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
data=${DATA:-$here/../bench_out/lift_like.hdf5}
workers=${WORKERS:-2}
[ -f "$data" ] || robo-loaders sample-data robomimic "$data" --demos 200 --min-length 45 --max-length 55 --seed 0
backends=native:low_dim,native:all,compressed_cache,datapipe,gpu_resampler,gpu_resampler#third
third='gpu_resampler#third={"target_fps": 6.666666666666667}'
robo-loaders bench robomimic --dataset "$data" --backends "$backends" --backend-kwargs "$third" \
  --seq-length 10 --batch-size 64 --num-workers "$workers" --batches "${BATCHES:-150}" --repeats "${REPEATS:-1}" \
  --json "$here/results/robomimic_lift_w${workers}.json"
shared=$here/../../shared/data/robosuite_lift_84_20demos.hdf5
if [ -f "$shared" ]; then  # real robosuite renders (20 demos): small, but real pixels
  robo-loaders bench robomimic --dataset "$shared" --backends "$backends" --backend-kwargs "$third" \
    --seq-length 10 --batch-size 64 --num-workers "$workers" --batches "${BATCHES:-150}" --repeats "${REPEATS:-1}" \
    --json "$here/results/robomimic_shared_renders_w${workers}.json"
fi
