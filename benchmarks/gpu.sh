#!/usr/bin/env bash
# On a machine with a CUDA GPU: the CUDA tests (pytest -m cuda), video_stream's NVDEC against CPU decode (nvdec.sh),
# and the GPU benchmark, gpu_resampler with its episodes on the device against the same backend's CPU path and the
# native loaders, measured in one run. Prints a notice and exits 0 where torch sees no GPU (these machines): no GPU
# number is claimed without one.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if ! python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "benchmarks/gpu.sh: torch sees no CUDA GPU here; nothing to run"; exit 0
fi
workers=${WORKERS:-2}
python -m pytest -q -m cuda "$here/../tests" "$here/../integration_tests" "$here/tests"
bash "$here/nvdec.sh"
data=${DATA:-$here/../bench_out/lift_like.hdf5}
[ -f "$data" ] || robo-loaders sample-data robomimic "$data" --demos 200 --min-length 45 --max-length 55 --seed 0
robo-loaders bench robomimic --dataset "$data" --backends native:low_dim,gpu_resampler,gpu_resampler#cpu \
  --backend-kwargs 'gpu_resampler#cpu={"device": "cpu"}' --seq-length 10 --batch-size 64 \
  --num-workers "$workers" --batches "${BATCHES:-150}" --json "$here/results/gpu_robomimic_lift_w${workers}.json"
root=${ROOT:-$here/../bench_out/lerobot_generated_10k}
[ -d "$root" ] || robo-loaders sample-data lerobot "$root" --repo-id local/lerobot_generated_10k --episodes 50 \
  --min-length 200 --max-length 220 --cameras 2 --image-size 84x84 --codec av1
robo-loaders bench lerobot --root "$root" --backends native,gpu_resampler,gpu_resampler#cpu \
  --backend-kwargs 'gpu_resampler#cpu={"device": "cpu"}' --batch-size 64 --num-workers "$workers" \
  --batches "${BATCHES:-60}" --delta-timestamps diffusion --json "$here/results/gpu_lerobot_diffusion_w${workers}.json"
