#!/usr/bin/env bash
# The video_stream backend against LeRobotDataset (native) and LeRobot's StreamingLeRobotDataset (streaming, as
# `lerobot-train --dataset.streaming=true` builds it) on one >= 10k-frame AV1 dataset, diffusion-like windows
# (2 observation frames, actions -1..14), the same DataLoader workers (equal CPU budget), 300 batches (more than a
# pass of video_stream: 165 batches), REPEATS (3) rounds of every loader, each reported by its median run; then the
# same video_stream reading the dataset from a local S3 endpoint (moto's server, started here on 127.0.0.1),
# streaming byte ranges (video_stream#s3) and through a local_cache_dir (video_stream#s3_cache: the first round
# copies each video whole, so its first batch includes a download; the later rounds reuse the copies).
# The dataset: the 20 real robosuite Lift demos of ../shared (2 cameras 84x84) written 10 times (10,540 frames)
# when ../shared is present, else 50 generated episodes x 200-220 frames. Needs the venv on PATH (robo-loaders,
# python with moto and s3fs).
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

port=$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python -m moto.server -H 127.0.0.1 -p "$port" >/dev/null 2>&1 &
moto_pid=$!
scratch=$(mktemp -d)
trap 'kill "$moto_pid" 2>/dev/null || true; rm -rf "$scratch"' EXIT
storage='{"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": "http://127.0.0.1:'$port'", "region_name": "eu-west-1"}}'
python - "$root" "$storage" <<'PY'
import json, sys, time
import s3fs
root, storage = sys.argv[1], json.loads(sys.argv[2])
fs = s3fs.S3FileSystem(**storage)
for _ in range(100):  # wait for the server
    try:
        fs.mkdir("robo-bench")
        break
    except Exception:
        time.sleep(0.2)
fs.put(root.rstrip("/") + "/", "robo-bench/dataset/", recursive=True)
PY
s3="s3://robo-bench/dataset"

robo-loaders bench lerobot --root "$root" --repo-id "local/$name" \
  --backends native,streaming,video_stream,video_stream#s3,video_stream#s3_cache \
  --backend-kwargs "video_stream#s3={\"source\": \"$s3\", \"storage_options\": $storage}" \
  --backend-kwargs "video_stream#s3_cache={\"source\": \"$s3\", \"storage_options\": $storage, \"local_cache_dir\": \"$scratch/cache\"}" \
  --batch-size 64 --num-workers "$workers" --batches "${BATCHES:-300}" --repeats "${REPEATS:-3}" --delta-timestamps diffusion \
  --json "$here/results/lerobot_video_stream.json"
