#!/usr/bin/env bash
# make demo: generate a Lift-PH-sized robomimic dataset, train BC-RNN with robomimic's unmodified training script
# using the compressed_cache backend (selected in examples/robomimic_bc_rnn_compressed_cache.json), then benchmark
# the backends against robomimic's own loader.
set -euo pipefail
out=${1:-demo_out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
here=$(cd "$(dirname "$0")" && pwd)

echo "== registered backends"
robo-loaders list

echo "== sample data: 200 demos x ~50 steps, 2 cameras 84x84 (Lift PH sized)"
[ -f "$out/lift_like.hdf5" ] || robo-loaders sample-data robomimic "$out/lift_like.hdf5" --demos 200 \
  --min-length 45 --max-length 55 --image-size 84 --cameras 2 --seed 0

echo "== robomimic training (python -m robomimic.scripts.train, unmodified) with data_backend=compressed_cache"
rm -rf "$out/robomimic_runs"
python - "$here/robomimic_bc_rnn_compressed_cache.json" "$out" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["train"]["data"] = f"{sys.argv[2]}/lift_like.hdf5"
cfg["train"]["output_dir"] = f"{sys.argv[2]}/robomimic_runs"  # robomimic resolves relative paths to its package
json.dump(cfg, open(f"{sys.argv[2]}/config.json", "w"), indent=2)
PY
python -m robomimic.scripts.train --config "$out/config.json" 2>&1 | tee "$out/train.log" | \
  grep -E "robo-loaders|Train Epoch|Validation Epoch|\"Loss\"|run failed|Error" || true
if grep -q "run failed" "$out/train.log" || ! grep -q "Train Epoch 2" "$out/train.log"; then
  echo "training failed: see $out/train.log" >&2; exit 1
fi

echo "== benchmark (each backend in its own process; ratios measured in this run)"
robo-loaders bench robomimic --dataset "$out/lift_like.hdf5" \
  --backends native:low_dim,native:all,compressed_cache --seq-length 10 --batch-size 64 \
  --num-workers 2 --batches 100 --json "$out/bench_robomimic.json"
echo "results: $out/bench_robomimic.json"

echo "== LeRobot: a v3 dataset written by LeRobot's own writer (AV1, 2 cameras), then the normal lerobot-train"
echo "   command plus --dataset.backend=compressed_cache"
export HF_HUB_OFFLINE=1
[ -d "$out/lerobot_sample" ] || robo-loaders sample-data lerobot "$out/lerobot_sample" --repo-id local/sample \
  --episodes 20 --min-length 80 --max-length 120 --cameras 2 --image-size 84x84 --codec av1
# lerobot_train RUN_NAME EXPECTED_LOG_LINE FLAGS...: the normal lerobot-train command plus FLAGS, 20 steps on CPU
lerobot_train() {
  local run=$1 expect=$2
  shift 2
  rm -rf "$out/$run"
  lerobot-train --dataset.repo_id=local/sample --dataset.root="$out/lerobot_sample" "$@" \
    --policy.type=act --policy.pretrained_backbone_weights=null --policy.device=cpu --policy.push_to_hub=false \
    --steps=20 --batch_size=8 --log_freq=5 --num_workers=2 --wandb.enable=false --output_dir="$out/$run" 2>&1 | \
    tee "$out/$run.log" | grep -E "robo-loaders|step:|Error|error" || true
  grep -q "$expect" "$out/$run.log" && [ -f "$out/$run/checkpoints/000020/pretrained_model/train_config.json" ] || \
    { echo "lerobot-train failed: see $out/$run.log" >&2; exit 1; }
}
lerobot_train lerobot_run "lerobot data backend: compressed_cache" --dataset.backend=compressed_cache

echo "== the same lerobot-train command with --dataset.backend=datapipe (converted into robo-shards on first use)"
lerobot_train lerobot_run_datapipe "batches come from the torchdata pipeline" --dataset.backend=datapipe \
  --dataset.backend_kwargs="{\"cache_dir\": \"$out/shards\"}"

echo "== LeRobot benchmark (ACT-like 100-step action chunks; datapipe includes timing the conversion)"
robo-loaders bench lerobot --root "$out/lerobot_sample" --repo-id local/sample \
  --backends native,compressed_cache,datapipe \
  --batch-size 64 --num-workers 2 --batches 40 --delta-timestamps act --json "$out/bench_lerobot.json"
