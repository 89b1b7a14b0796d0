#!/usr/bin/env bash
# Conversion to robo-shards on each executor (local processes, datatrove's LocalPipelineExecutor) with 1 and 2
# tasks, each a fresh process as `robo-loaders convert` runs (imports and task start-up included): source MB/s and
# MB/s per task on a small file of real renders (86 MiB), a Lift-PH-sized robomimic file (815 MiB, generated) and
# the 10,540-frame LeRobot AV1 dataset of benchmarks/video_stream.sh. Writes results/convert_executors.json and
# prints the tables (docs/distributed-conversion.md quotes them). Needs the venv on PATH.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH="$here/..${PYTHONPATH:+:$PYTHONPATH}"  # the harness (benchmarks/harness) beside the package
out=$here/../bench_out
shared=$here/../../shared/data/robosuite_lift_84_20demos.hdf5
lift=$out/lift_like.hdf5
[ -f "$lift" ] || robo-loaders sample-data robomimic "$lift" --demos 200 --min-length 45 --max-length 55 --seed 0
lerobot=$out/lerobot_lift_x10
if [ ! -d "$lerobot" ] && [ -f "$shared" ]; then
  robo-loaders sample-data lerobot "$lerobot" --repo-id local/lerobot_lift_x10 --from-robomimic "$shared" --repeat 10
fi
python - "$here/results/convert_executors.json" "$out/convert_bench" "$shared" "$lift" "$lerobot" <<'PY'
import os, shutil, sys

from benchmarks.harness.executor_timing import executor_conversion_table, time_executor_conversions
from robo_loaders_plugin.bench.report import machine
from robo_loaders_plugin.core.files import atomic_write_json

dest, scratch, shared, lift, lerobot = sys.argv[1:6]
datasets = [(name, fw, path) for name, fw, path in (("robomimic real renders", "robomimic", shared),
                                                     ("robomimic Lift-sized", "robomimic", lift),
                                                     ("LeRobot Lift x10 (AV1)", "lerobot", lerobot))
            if os.path.exists(path)]
results = []
for name, framework, path in datasets:
    rows = time_executor_conversions(framework, path, os.path.join(scratch, framework))
    for r in rows:
        shutil.rmtree(r.pop("out"), ignore_errors=True)
    print(f"\n{name} ({rows[0]['source_bytes'] / 1e6:.1f} MB)\n{executor_conversion_table(rows)}\n", flush=True)
    results.append({"dataset": name, "framework": framework, "rows": rows})
atomic_write_json(dest, {"machine": machine(), "results": results}, indent=1)
print(f"wrote {dest}")
PY
