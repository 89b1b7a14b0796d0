#!/usr/bin/env bash
# The README's LeRobot numbers: a ~10k-frame LeRobot v3 dataset (50 episodes x 200-220 frames, 2 cameras 84x84,
# AV1 as LeRobot encodes by default) written with LeRobot's own writer; LeRobotDataset vs compressed_cache with
# lerobot-train's DataLoader (EpisodeAwareSampler, spawn workers, prefetch 4), measured in one run per preset.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=${ROOT:-$here/../bench_out/lerobot_10k}
workers=${WORKERS:-2}
export HF_HUB_OFFLINE=1
[ -d "$root" ] || robo-loaders sample-data lerobot "$root" --repo-id local/lerobot_10k --episodes 50 \
  --min-length 200 --max-length 220 --cameras 2 --image-size 84x84 --codec av1
for preset in ${PRESETS:-act diffusion none}; do
  robo-loaders bench lerobot --root "$root" --repo-id local/lerobot_10k --backends native,compressed_cache \
    --batch-size 64 --num-workers "$workers" --batches "${BATCHES:-60}" --delta-timestamps "$preset" \
    --json "$here/results/lerobot_10k_${preset}_w${workers}.json"
done
shared=$here/../../shared/data/robosuite_lift_84_20demos_lerobot
if [ -d "$shared" ]; then
  robo-loaders bench lerobot --root "$shared" --repo-id local/robosuite_lift --backends native,compressed_cache \
    --batch-size 64 --num-workers "$workers" --batches "${BATCHES:-60}" --delta-timestamps diffusion \
    --json "$here/results/lerobot_shared_renders_diffusion_w${workers}.json"
fi
