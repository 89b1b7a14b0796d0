#!/usr/bin/env bash
# video_stream's decoder alone (`python -m benchmarks.harness decode`): frames/s on the CPU and with NVDEC (cuda) on the same
# files in one run, and NVDEC's PSNR against the CPU decode; each dataset as AV1 (LeRobot's default) and as an H.264
# copy written by `robo-loaders transcode` (CRF 18, GOP 10). Datasets: a generated 480x640 one (1 camera, 20 episodes x
# 100 frames: a real LeRobot camera's size, where NVDEC matters) and, when ../shared is present, its 20 real robosuite
# Lift demos written 10 times (2 cameras 84x84, video_stream.sh's dataset). Where torch sees no GPU (these machines)
# the cuda rows say so and only CPU numbers are written; on a GPU whose NVDEC cannot decode AV1 (A100, H100/H200) the
# AV1 cuda row is video_stream's refusal, with what to do. THREADS: episodes decoded at once (default 2, like
# video_stream's decode_threads). Needs the venv on PATH.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH="$here/..${PYTHONPATH:+:$PYTHONPATH}"  # the harness (benchmarks/harness) beside the package
out=$here/../bench_out
threads=${THREADS:-2}
export HF_HUB_OFFLINE=1
names=(lerobot_480p)
[ -d "$out/lerobot_480p" ] || robo-loaders sample-data lerobot "$out/lerobot_480p" --repo-id local/lerobot_480p \
  --episodes 20 --min-length 100 --max-length 100 --cameras 1 --image-size 480x640 --codec av1
shared=$here/../../shared/data/robosuite_lift_84_20demos.hdf5
if [ -f "$shared" ]; then
  names+=(lerobot_lift_x10)
  [ -d "$out/lerobot_lift_x10" ] || robo-loaders sample-data lerobot "$out/lerobot_lift_x10" \
    --repo-id local/lerobot_lift_x10 --from-robomimic "$shared" --repeat 10
fi
for name in "${names[@]}"; do
  [ -d "$out/${name}_h264" ] || robo-loaders transcode "$out/$name" "$out/${name}_h264" --codec h264 --num-workers 2
  python -m benchmarks.harness decode --root "$out/$name" --threads "$threads" --json "$here/results/decode_${name}_av1.json"
  python -m benchmarks.harness decode --root "$out/${name}_h264" --threads "$threads" \
    --json "$here/results/decode_${name}_h264.json"
done
