#!/usr/bin/env bash
# The README's LeRobot numbers. The dataset is >= 10k frames of LeRobot v3 (AV1, as LeRobot encodes by default)
# written with LeRobot's own writer: the 20 real robosuite Lift demos of ../shared (2 cameras 84x84) written 10
# times (10,540 frames) when ../shared is present, else 50 generated episodes x 200-220 frames. LeRobotDataset vs
# the backends with lerobot-train's DataLoader (EpisodeAwareSampler, spawn workers, prefetch 4) or what its patched
# cycle() yields, one run per delta-timestamps preset; gpu_resampler#third counts the windows at a third of 20 fps.
# REPEATS rounds of every loader, each reported by its median run (default 1).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
workers=${WORKERS:-2}
export HF_HUB_OFFLINE=1
shared=$here/../../shared/data/robosuite_lift_84_20demos.hdf5
if [ -f "$shared" ]; then
  name=lerobot_lift_x10
  root=${ROOT:-$here/../bench_out/$name}
  [ -d "$root" ] || robo-loaders sample-data lerobot "$root" --repo-id "local/$name" --from-robomimic "$shared" \
    --repeat 10
else
  name=lerobot_generated_10k
  root=${ROOT:-$here/../bench_out/$name}
  [ -d "$root" ] || robo-loaders sample-data lerobot "$root" --repo-id "local/$name" --episodes 50 \
    --min-length 200 --max-length 220 --cameras 2 --image-size 84x84 --codec av1
fi
for preset in ${PRESETS:-act diffusion none}; do
  robo-loaders bench lerobot --root "$root" --repo-id "local/$name" \
    --backends native,compressed_cache,datapipe,gpu_resampler,gpu_resampler#third,video_stream \
    --backend-kwargs 'gpu_resampler#third={"target_fps": 6.666666666666667}' \
    --batch-size 64 --num-workers "$workers" --batches "${BATCHES:-60}" --repeats "${REPEATS:-1}" \
    --delta-timestamps "$preset" \
    --json "$here/results/${name}_${preset}_w${workers}.json"
done
