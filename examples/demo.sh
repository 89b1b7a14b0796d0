#!/usr/bin/env bash
# make demo: a few minutes end to end (the README says how long its measured run took, benchmarks/results/demo_run.log):
# a small robomimic image dataset, BC-RNN trained by robomimic's unmodified training script on compressed_cache
# (selected in examples/robomimic_bc_rnn_compressed_cache.json), a quick loader benchmark against robomimic's own
# loader; then a LeRobot v3 dataset written by LeRobot's own writer, the normal lerobot-train command with
# --dataset.backend (twice) and a quick LeRobot benchmark. The README's full benchmarks are `make bench`
# (benchmarks/*.sh, tens of minutes).
#
# A demo, sized for a 2-core machine other jobs share: small workloads, one compute thread per process (the
# DataLoader workers add theirs), every step printing a header with the time elapsed and, at least every 30 s, a line
# (the tools' own progress, or "still running"); what the tools print is filtered to the lines worth reading and
# kept whole in a log beside the results (named when a step fails). The last lines say how long it took, the CPU
# time it used, and where everything is.
set -euo pipefail
out=${1:-demo_out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
started=$SECONDS
steps=7
n=0

# quieter tools: no SVT-AV1 info/warning lines (LeRobot's AV1 writer), no datasets "Map:" bars, output unbuffered so
# that the filtered lines appear as they are printed
export SVT_LOG=1 HF_DATASETS_DISABLE_PROGRESS_BARS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TQDM_MININTERVAL=5
# bounded CPU: one compute thread per process (torch, OpenMP, BLAS) unless the caller set more; on two cores the
# DataLoader workers already keep both busy, and more threads than cores only make a shared machine slower
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
# what the quick benchmarks' ratios are, printed under each
caveat() {
  echo "   (a quick look: tiny data, few batches, one run, on this machine as loaded now; the ratios move a lot with"
  echo "   all three. The measured ones are the README's tables: benchmarks/results/, docs/benchmarks.md, make bench)"
}

# shellcheck source=scripts/progress_lib.sh
source "$here/../scripts/progress_lib.sh"

step "sample data: robomimic HDF5, 20 demos x ~50 steps, 2 cameras 84x84"
[ -f "$out/lift_like.hdf5" ] || run "$out/sample_robomimic.log" "^Wrote|^wrote" \
  robo-loaders sample-data robomimic "$out/lift_like.hdf5" --demos 20 --min-length 45 --max-length 55 \
  --image-size 84 --cameras 2 --seed 0
ls -l "$out/lift_like.hdf5" | awk '{printf "   %s (%.0f MB)\n", $NF, $5 / 1e6}'

step "robomimic: BC-RNN, 2 epochs of 3 batches, robomimic's unmodified training script, train.data_backend=compressed_cache"
echo "   (robo-loaders robomimic-train runs robomimic.scripts.train and exits non-zero when the run fails)"
rm -rf "$out/robomimic_runs"
python - "$here/robomimic_bc_rnn_compressed_cache.json" "$out" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["train"]["data"] = f"{sys.argv[2]}/lift_like.hdf5"
cfg["train"]["output_dir"] = f"{sys.argv[2]}/robomimic_runs"  # robomimic resolves relative paths to its package
# a demo, not a training run: BC-RNN's ResNet-18 encoders take seconds per batch on a CPU, so small batches and
# short epochs (the example config keeps its real settings)
cfg["train"]["batch_size"] = 4
cfg["experiment"]["epoch_every_n_steps"] = 3
cfg["experiment"]["validation_epoch_every_n_steps"] = 2
json.dump(cfg, open(f"{sys.argv[2]}/config.json", "w"), indent=2)
PY
run "$out/train_robomimic.log" '^\[robo-loaders\]|^(Train|Validation) Epoch|"Loss"|run failed|Error' \
  robo-loaders robomimic-train --config "$out/config.json"

step "robomimic loader benchmark (quick: 20 batches; each backend in its own process, ratios from this run)"
run "$out/bench_robomimic.log" '^\||^[a-z_:]+ +[0-9]|samples/s|^\[(robo-loaders\] )?bench' \
  robo-loaders bench robomimic --dataset "$out/lift_like.hdf5" \
  --backends native:low_dim,compressed_cache,gpu_resampler --seq-length 10 --batch-size 64 \
  --num-workers 2 --batches 20 --json "$out/bench_robomimic.json"
caveat

step "sample data: LeRobot v3 (LeRobot's own writer, AV1), 6 episodes x ~60 frames, 2 cameras 84x84"
[ -d "$out/lerobot_sample" ] || run "$out/sample_lerobot.log" "^Wrote|^wrote" \
  robo-loaders sample-data lerobot "$out/lerobot_sample" --repo-id local/sample \
  --episodes 6 --min-length 50 --max-length 70 --cameras 2 --image-size 84x84 --codec av1

# lerobot_train RUN EXPECTED_LOG_LINE FLAGS...: the normal lerobot-train command plus FLAGS, 4 steps of ACT on CPU
# (--policy.pretrained_backbone_weights=null: ACT's ImageNet backbone weights need the internet)
lerobot_train() {
  local run_name=$1 expect=$2
  shift 2
  rm -rf "${out:?}/$run_name"
  run "$out/$run_name.log" '^\[robo-loaders\]|step:|Error' \
    lerobot-train --dataset.repo_id=local/sample --dataset.root="$out/lerobot_sample" "$@" \
    --policy.type=act --policy.pretrained_backbone_weights=null --policy.device=cpu --policy.push_to_hub=false \
    --steps=4 --save_freq=4 --batch_size=4 --log_freq=2 --num_workers=2 --wandb.enable=false \
    --output_dir="$out/$run_name"
  grep -q "$expect" "$out/$run_name.log" && [ -f "$out/$run_name/checkpoints/000004/pretrained_model/train_config.json" ] \
    || { echo "lerobot-train did not train on the backend: see $out/$run_name.log" >&2; exit 1; }
}

step "LeRobot: lerobot-train (ACT, 4 steps) with --dataset.backend=compressed_cache"
lerobot_train lerobot_run "lerobot data backend: compressed_cache" --dataset.backend=compressed_cache

step "LeRobot: the same command with --dataset.backend=datapipe (converted into robo-shards on first use)"
lerobot_train lerobot_run_datapipe "batches come from the torchdata pipeline" --dataset.backend=datapipe \
  --dataset.backend_kwargs="{\"cache_dir\": \"$out/shards\"}"

step "LeRobot loader benchmark (quick: ACT action chunks, 10 batches)"
run "$out/bench_lerobot.log" '^\||^[a-z_:]+ +[0-9]|samples/s|^\[(robo-loaders\] )?bench' \
  robo-loaders bench lerobot --root "$out/lerobot_sample" --repo-id local/sample \
  --backends native,compressed_cache,gpu_resampler --batch-size 64 --num-workers 2 --batches 10 \
  --profile-samples 20 --delta-timestamps act --json "$out/bench_lerobot.json"
caveat

printf '\n== done in %s, using ' "$(elapsed)"
cpu_minutes
printf ' CPU-minutes (every process of the demo, user + system). Everything is in %s:\n' "$out"
printf '   %-36s %s\n' \
  "robomimic_runs/" "robomimic's run folder (checkpoints, logs)" \
  "train_robomimic.log" "robomimic's whole output" \
  "bench_robomimic.json" "robomimic loader benchmark (robo-loaders report --out DIR plots it)" \
  "lerobot_run/, lerobot_run_datapipe/" "lerobot-train output folders (checkpoints, train_config.json)" \
  "bench_lerobot.json" "LeRobot loader benchmark" \
  "*.log" "each step's whole output"
