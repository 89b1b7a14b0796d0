#!/usr/bin/env bash
# The pipeline backends' default episode buffer (cache_memory not given: the whole dataset when it takes at most
# 25% of the available memory, each unit decoded once per run; else the 1GB bound) against the 1GB bound given
# explicitly, on two shapes, LeRobotDataset (native) in the same run, diffusion windows:
#   480p: 4 episodes x 150 frames x 3 cameras 480x640 (1.7 GB decoded), AV1, generated into a fresh directory in
#         $ROBO_LOADERS_WORKLOADS (else the system's temporary directory), removed afterwards;
#   84:   the 20 robosuite Lift demos of ../shared written 10 times (2 cameras 84x84, 446 MB decoded: within 1GB,
#         so both settings hold every unit; the control), skipped without ../shared.
# Results: benchmarks/results/buffer_default_{480p,84}.json. Needs the venv on PATH. BATCHES (60), REPEATS (1),
# SHAPES ("480p 84": the shapes to measure).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export HF_HUB_OFFLINE=1
batches=${BATCHES:-60}
repeats=${REPEATS:-1}
base=${ROBO_LOADERS_WORKLOADS:-${TMPDIR:-/tmp}}
mkdir -p "$base"
free_gb=$(df -Pk "$base" | awk 'NR==2 {print int($4 / 1048576)}')
if [ "$free_gb" -lt 10 ]; then
  echo "buffer_default.sh: $base has ${free_gb} GB free; the run needs about 10 GB (data and caches)" >&2
  exit 1
fi
scratch=$(mktemp -d "$base/buffer-default.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
backends=native,video_stream,video_stream#bound_1gb,datapipe,datapipe#bound_1gb
bound=(--backend-kwargs 'video_stream#bound_1gb={"cache_memory": "1GB"}'
       --backend-kwargs 'datapipe#bound_1gb={"cache_memory": "1GB"}')

shapes=" ${SHAPES:-480p 84} "
if [[ "$shapes" == *" 480p "* ]]; then
  robo-loaders sample-data lerobot "$scratch/l480" --repo-id local/l480 --episodes 4 --min-length 150 --max-length 150 \
    --cameras 3 --image-size 480x640 --codec av1
  ROBO_LOADERS_CACHE="$scratch/cache" robo-loaders bench lerobot --root "$scratch/l480" --backends "$backends" \
    "${bound[@]}" --delta-timestamps diffusion --batches "$batches" --repeats "$repeats" --profile-samples 20 \
    --json "$here/results/buffer_default_480p.json"
fi

shared=$here/../../shared/data/robosuite_lift_84_20demos.hdf5
if [[ "$shapes" == *" 84 "* ]] && [ -f "$shared" ]; then
  robo-loaders sample-data lerobot "$scratch/l84" --repo-id local/l84 --from-robomimic "$shared" --repeat 10
  ROBO_LOADERS_CACHE="$scratch/cache" robo-loaders bench lerobot --root "$scratch/l84" --backends "$backends" \
    "${bound[@]}" --delta-timestamps diffusion --batches "$batches" --repeats "$repeats" \
    --json "$here/results/buffer_default_84.json"
fi
