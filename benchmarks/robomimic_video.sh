#!/usr/bin/env bash
# robomimic video robo-shards on the real robosuite renders of ../shared: size against the HDF5 and PSNR per camera
# (robo-loaders convert --frames h264, default crf), then samples/s of video_stream against native:low_dim and
# datapipe (lossless shards) in one run; REPEATS rounds of every backend, each reported by its median run (default 1).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
data=${DATA:-$here/../../shared/data/robosuite_lift_84_20demos.hdf5}
workers=${WORKERS:-2}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
robo-loaders convert robomimic "$data" "$out/video" --frames h264 2>/dev/null \
  | tee "$here/results/robomimic_shared_renders_video_convert.txt"
robo-loaders bench robomimic --dataset "$data" --backends native:low_dim,datapipe,video_stream \
  --seq-length 10 --batch-size 64 --num-workers "$workers" --batches "${BATCHES:-100}" --repeats "${REPEATS:-1}" \
  --json "$here/results/robomimic_shared_renders_video_w${workers}.json"
