#!/usr/bin/env bash
# One backend of two versions of this package measured alternately (old, new, old, new ...), each run with its
# framework's native loader in the same process tree, so that a change's effect on speed is told from the machine's
# drift: a regression check for a refactor that should not change speed (issue 43: compressed_cache moved onto the
# SDK). Usage:
#   OLD=<git ref> [ROUNDS=3] [BACKEND=compressed_cache] bash benchmarks/ab_versions.sh
# The two trees are `git archive` copies put first on PYTHONPATH (the venv's editable install is shadowed); the data,
# the Lift-shaped robomimic set of benchmarks/robomimic_lift.sh (200 demos, 816 MB) and the LeRobot set of
# benchmarks/lerobot.sh (the shared renders x10), is generated once into $ROBO_LOADERS_WORKLOADS/ab (outside the
# repository; delete it when done). Results: benchmarks/results/ab_<backend>/{old,new}_{rm,lr}_r<round>.json and
# summary.json (medians per version, load at each run), printed by benchmarks/ab_summary.py.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
old=${OLD:?set OLD to the git ref to compare with}
backend=${BACKEND:-compressed_cache}
rounds=${ROUNDS:-3}
work=${ROBO_LOADERS_WORKLOADS:?set ROBO_LOADERS_WORKLOADS to a directory outside the repository}/ab
out=$here/results/ab_$backend
mkdir -p "$work" "$out"
export HF_HUB_OFFLINE=1
rm -rf "$work/old" "$work/new" && mkdir "$work/old" "$work/new"
git -C "$repo" archive "$old" | tar -x -C "$work/old"
git -C "$repo" archive HEAD | tar -x -C "$work/new"
[ -f "$work/lift_like.hdf5" ] || robo-loaders sample-data robomimic "$work/lift_like.hdf5" --demos 200 \
  --min-length 45 --max-length 55 --seed 0
shared=$repo/../shared/data/robosuite_lift_84_20demos.hdf5
[ -d "$work/lerobot_lift_x10" ] || robo-loaders sample-data lerobot "$work/lerobot_lift_x10" \
  --repo-id local/lerobot_lift_x10 --from-robomimic "$shared" --repeat 10
for r in $(seq 0 $((rounds - 1))); do
  for v in old new; do
    echo "round $r $v $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" | tee -a "$out/runs.log"
    PYTHONPATH=$work/$v robo-loaders bench robomimic --dataset "$work/lift_like.hdf5" \
      --backends "native:low_dim,$backend" --seq-length 10 --batch-size 64 --num-workers 2 --batches 150 \
      --json "$out/${v}_rm_r$r.json" > /dev/null
    PYTHONPATH=$work/$v robo-loaders bench lerobot --root "$work/lerobot_lift_x10" --repo-id local/lerobot_lift_x10 \
      --backends "native,$backend" --batch-size 64 --num-workers 2 --batches 60 --delta-timestamps diffusion \
      --json "$out/${v}_lr_r$r.json" > /dev/null
  done
done
python "$here/ab_summary.py" "$out" "$backend" "$old" "$(git -C "$repo" rev-parse --short HEAD)"
