#!/usr/bin/env bash
# Issue 21: the datasets bigger than memory (docs/scale.md). Workloads live outside the repository, in
# $ROBO_LOADERS_WORKLOADS/scale21 (default /work/workloads/scale21), never committed:
#   L480     LeRobot v3, 3 cameras 480x640, 30 fps, 40 episodes x 600 frames (24,000 per camera, 66.4 GB decoded),
#            camera-like frames (texture, shake, sensor noise), AV1 with LeRobot's own encoder defaults
#   L480_h264  the same, transcoded to H.264 by `robo-loaders transcode`
#   L480_5G  3 episodes x 600 frames of the same (5.0 GB decoded: fits in RAM)
#   R240     robomimic HDF5, 2 cameras 240x240, 200 demos x 150 steps (30,000 steps, 10.4 GB of observation frames),
#            render-like frames, next_obs images omitted (BC-RNN image configs do not load them)
# Usage: benchmarks/scale.sh STAGE...  (generate-r240 generate-l480 generate-l480-h264 generate-l480-5g content
#        r240 r240-gpu r240-native-all r240-ceiling l480-video l480-decode l480-gpu l480-datapipe l480-cache l480-5g
#        l480-5g-unit-loads disk-read spilled-tier clean-conversions)
# Every benchmark runs under `flock /work/bench.lock` so that it never overlaps another engineer's; results go to
# benchmarks/results/scale_*.json (ratios against the native loader measured in the same run).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
W=${ROBO_LOADERS_WORKLOADS:-/work/workloads}/scale21
LOCK=${BENCH_LOCK:-/work/bench.lock}
workers=${WORKERS:-2}
batches=${BATCHES:-50}
export HF_HUB_OFFLINE=1
results=${RESULTS:-$here/results}  # where the result files go (a snapshot of the code may run elsewhere)
mkdir -p "$W" "$results"
locked() { flock "$LOCK" "$@"; }

# one line of JSON per generation/conversion step: what, seconds, bytes on disk (benchmarks/results/scale_steps.jsonl)
record() {  # record NAME SECONDS PATH
  python - "$1" "$2" "$3" "$results/scale_steps.jsonl" <<'PY'
import json, os, sys, time
name, secs, path, out = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
size = os.path.getsize(path) if os.path.isfile(path) else sum(
    os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
with open(out, "a") as f:
    f.write(json.dumps({"step": name, "seconds": round(secs, 1), "bytes": size, "path": path,
                        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n")
PY
}

timed() {  # timed NAME PATH COMMAND...: run it (under the lock), then record its time and PATH's size
  local name=$1 path=$2
  shift 2
  local t0=$SECONDS
  locked "$@"
  record "$name" $((SECONDS - t0)) "$path"
}

for stage in "$@"; do
  case $stage in
    generate-r240)
      [ -f "$W/R240.hdf5" ] || timed generate-R240 "$W/R240.hdf5" robo-loaders sample-data robomimic "$W/R240.hdf5" \
        --demos 200 --min-length 150 --max-length 150 --image-size 240 --cameras 2 --no-next-obs --content renders ;;
    generate-l480)
      [ -d "$W/L480" ] || timed generate-L480 "$W/L480" robo-loaders sample-data lerobot "$W/L480" --repo-id local/L480 \
        --episodes 40 --min-length 600 --max-length 600 --cameras 3 --image-size 480x640 --fps 30 --codec av1 \
        --content camera --stream-encode ;;
    generate-l480-h264)
      [ -d "$W/L480_h264" ] || timed transcode-L480-h264 "$W/L480_h264" robo-loaders transcode "$W/L480" \
        "$W/L480_h264" --codec h264 --num-workers "$workers" --psnr-frames 8 ;;
    generate-l480-5g)
      [ -d "$W/L480_5G" ] || timed generate-L480_5G "$W/L480_5G" robo-loaders sample-data lerobot "$W/L480_5G" \
        --repo-id local/L480_5G --episodes 3 --min-length 600 --max-length 600 --cameras 3 --image-size 480x640 \
        --fps 30 --codec av1 --content camera --stream-encode --seed 1 ;;
    content)  # LZ4 and AV1 ratios of the workloads' frames beside the 84x84 renders of ../shared upscaled
      locked python "$here/scale_content.py" "$W" "$results/scale_content.json" ;;
    r240)  # BC-RNN windows (seq_length 10, batch 16); datapipe reads shards converted (and timed) here
      t0=$SECONDS
      locked robo-loaders convert robomimic "$W/R240.hdf5" "$W/R240_shards" --num-workers "$workers" \
        | tee "$results/scale_r240_convert.txt"
      record convert-R240-lossless $((SECONDS - t0)) "$W/R240_shards"
      # 25% of the observation frames (10.4 GB): 2.6 GB
      locked robo-loaders bench robomimic --dataset "$W/R240.hdf5" \
        --backends native:low_dim,compressed_cache,compressed_cache#25pct,datapipe,gpu_resampler,gpu_resampler#25pct,video_stream \
        --backend-kwargs "datapipe={\"shards\": \"$W/R240_shards\"}" \
        --backend-kwargs 'compressed_cache#25pct={"max_memory": "2.6GB"}' \
        --backend-kwargs 'gpu_resampler#25pct={"max_memory": "2.6GB"}' \
        --seq-length 10 --batch-size 16 --num-workers "$workers" --batches "${R240_BATCHES:-300}" \
        --json "$results/scale_r240_bc_rnn_w${workers}.json" || true
      rm -rf "$W/R240_shards" ;;
    r240-gpu)  # gpu_resampler held in RAM against native low_dim alone, one run (the copy-ceiling goal, docs/scale.md)
      locked robo-loaders bench robomimic --dataset "$W/R240.hdf5" --backends native:low_dim,gpu_resampler \
        --seq-length 10 --batch-size 16 --num-workers "$workers" --batches "${R240_BATCHES:-300}" \
        --json "$results/scale_r240_gpu_w${workers}.json" || true ;;
    r240-native-all)  # robomimic's hdf5_cache_mode "all" holds every window: run alone, its address space capped
      # at 14 GiB (prlimit) so that it fails with a MemoryError instead of pushing the machine into the OOM killer
      locked prlimit --as=$((14 * 1024 * 1024 * 1024)) robo-loaders bench robomimic --dataset "$W/R240.hdf5" \
        --backends native:all --seq-length 10 --batch-size 16 --num-workers "$workers" --batches "${R240_BATCHES:-300}" \
        --json "$results/scale_r240_native_all_w${workers}.json" || true ;;
    r240-ceiling)  # the copy rate that bounds every backend on R240 (no dataset code), as multiples of native low_dim
      locked python "$here/scale_ceiling.py" "$results/scale_r240_ceiling.json" \
        "$results/scale_r240_bc_rnn_w${workers}.json" ;;
    l480-video)  # video_stream from the AV1 original and from the H.264 copy (LeRobotDataset on each, same run)
      for preset in act diffusion; do
        locked robo-loaders bench lerobot --root "$W/L480" --repo-id local/L480 --backends native,video_stream \
          --batch-size 64 --num-workers "$workers" --batches "$batches" --delta-timestamps "$preset" --profile-samples 20 \
          --json "$results/scale_l480_${preset}_video_w${workers}.json" || true
        locked robo-loaders bench lerobot --root "$W/L480_h264" --repo-id local/L480 --backends native,video_stream#h264 \
          --batch-size 64 --num-workers "$workers" --batches "$batches" --delta-timestamps "$preset" --profile-samples 20 \
          --json "$results/scale_l480_h264_${preset}_video_w${workers}.json" || true
      done ;;
    l480-gpu)  # gpu_resampler: 66 GB of frames, more than RAM even compressed: its compressed tier spills to disk;
      # max_memory 8GB (not the default 90% of what is available) leaves the other users of this machine their RAM
      for preset in ${PRESETS:-diffusion act}; do
        locked robo-loaders bench lerobot --root "$W/L480" --repo-id local/L480 --backends native,gpu_resampler \
          --backend-kwargs 'gpu_resampler={"max_memory": "8GB"}' \
          --batch-size 64 --num-workers "$workers" --batches "$batches" --delta-timestamps "$preset" --profile-samples 20 \
          --json "$results/scale_l480_${preset}_gpu_w${workers}.json" || true
      done ;;
    l480-datapipe)
      t0=$SECONDS
      locked robo-loaders convert lerobot "$W/L480" "$W/L480_shards" --num-workers "$workers" \
        | tee "$results/scale_l480_convert.txt"
      record convert-L480-lossless $((SECONDS - t0)) "$W/L480_shards"
      for preset in ${PRESETS:-act diffusion}; do
        locked robo-loaders bench lerobot --root "$W/L480" --repo-id local/L480 --backends native,datapipe \
          --backend-kwargs "datapipe={\"shards\": \"$W/L480_shards\"}" \
          --batch-size 64 --num-workers "$workers" --batches "$batches" --delta-timestamps "$preset" --profile-samples 10 \
          --json "$results/scale_l480_${preset}_datapipe_w${workers}.json" || true
      done
      # what the conversion packed beside scale_content's sample (1.25:1 vs 1.76:1 in the first L480 run)
      locked python "$here/shard_ratio.py" "$W/L480_shards" "$results/scale_l480_shard_ratio.json" || true
      rm -rf "$W/L480_shards" ;;
    l480-cache)  # compressed_cache spills to a file-backed cache on disk: built by the first preset's run (its build
      # time measured) in a cache directory of the workloads, reused by the second (--reuse-cache), then deleted
      for preset in act diffusion; do
        ROBO_LOADERS_CACHE="$W/cache" locked robo-loaders bench lerobot --root "$W/L480" --repo-id local/L480 \
          --backends native,compressed_cache --backend-kwargs 'compressed_cache={"build_workers": 2}' --reuse-cache \
          --batch-size 64 --num-workers "$workers" --batches "$batches" --delta-timestamps "$preset" --profile-samples 20 \
          --json "$results/scale_l480_${preset}_cache_w${workers}.json" || true
      done
      rm -rf "$W/cache" ;;
    l480-5g)
      for preset in act diffusion; do
        locked robo-loaders bench lerobot --root "$W/L480_5G" --repo-id local/L480_5G \
          --backends native,gpu_resampler,compressed_cache,video_stream \
          --batch-size 64 --num-workers "$workers" --batches "$batches" --delta-timestamps "$preset" --profile-samples 50 \
          --json "$results/scale_l480_5g_${preset}_w${workers}.json" || true
      done ;;
    l480-5g-unit-loads)  # how often video_stream decodes each unit (a unit decoded twice in a pass was evicted early)
      for args in "act 20" "diffusion 20" 'diffusion 20 {"cache_memory":"3GB"}'; do
        # shellcheck disable=SC2086
        locked python "$here/video_stream_unit_loads.py" "$W/L480_5G" local/L480_5G $args 2>/dev/null | grep '^{'
      done > "$results/scale_l480_5g_video_stream_unit_loads.jsonl" ;;
    l480-decode)  # the decode ceiling of video_stream on L480: frames/s of 2 episodes decoded on the CPU, AV1 and H.264
      locked python -m benchmarks.harness decode --root "$W/L480" --devices cpu --threads "$workers" --episodes 2 \
        --json "$results/scale_l480_decode_av1.json"
      locked python -m benchmarks.harness decode --root "$W/L480_h264" --devices cpu --threads "$workers" --episodes 2 \
        --json "$results/scale_l480_decode_h264.json" ;;
    disk-read)  # the disk's read rate with nothing cached: what bounds a pass over a lossless copy bigger than RAM
      locked python "$here/disk_read.py" "$W" "$results/scale_disk_read.json" ;;
    spilled-tier)  # gpu_resampler's compressed tier spilled to disk, read cold: as it was against the file's order
      locked python "$here/spilled_tier.py" "$W" "$results/spilled_tier.json" ;;
    clean-conversions)
      rm -rf "$W/R240_shards" "$W/L480_shards" ;;
    *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
done
