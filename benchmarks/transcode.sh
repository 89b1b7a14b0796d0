#!/usr/bin/env bash
# `robo-loaders transcode` on the real robosuite renders of ../shared in LeRobot v3 form (AV1, 2 cameras 84x84,
# 20 episodes): H.264 and HEVC at their default quality, 2 workers, every frame compared with the source. The
# reports (size and PSNR per camera and per file, encode and compare times) are committed as
# results/transcode_shared_<codec>.json; docs/transcode.md quotes them. Needs the venv on PATH.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$here/../../shared/data/robosuite_lift_84_20demos_lerobot
[ -d "$src" ] || { echo "needs ../shared/data/robosuite_lift_84_20demos_lerobot" >&2; exit 1; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for codec in h264 hevc; do
  start=$(date +%s.%N)
  robo-loaders transcode "$src" "$scratch/$codec" --codec "$codec" --num-workers 2 2>/dev/null
  python - "$scratch/$codec/.robo-loaders-transcode/report.json" "$here/results/transcode_shared_$codec.json" \
    "$start" <<'PY'
import json, os, sys, time
from robo_loaders_plugin.bench.report import machine
report = json.load(open(sys.argv[1]))
report["wall_s"] = round(time.time() - float(sys.argv[3]), 2)
report["machine"] = machine()
for key in ("out",):  # scratch paths mean nothing in a committed result
    report.pop(key, None)
with open(sys.argv[2], "w") as f:
    json.dump(report, f, indent=1)
print(f"wrote {sys.argv[2]} ({report['wall_s']} s)")
PY
done
