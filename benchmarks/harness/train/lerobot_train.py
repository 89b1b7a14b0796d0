"""``python -m benchmarks.harness train lerobot``: the real ``lerobot-train`` console script per backend.

A small Diffusion Policy (2 observation frames per camera, the windows that stall a video loader most) when
``diffusers`` is installed, else a small ACT; reduced dimensions so that a CPU can run it. ``lerobot-train`` times
every step itself: ``data_s`` (``next(dl_iter)``, uint8 -> float and the preprocessor) and ``updt_s``
(``update_policy``: forward, backward, optimizer); ``--log_freq=1`` prints them for every step. Every backend gets
the same command line except ``--dataset.backend`` / ``--dataset.backend_kwargs`` (left out for ``native``:
stock ``lerobot-train``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import tempfile

from benchmarks.harness.train.common import BIN, child_env, epoch_summary, error_result, finish, run_logged, summarise
from robo_loaders_plugin.bench.runner import backend_of, options_for

# MetricsTracker.__str__ (0.6.1): "step:12 smpl:48 ep:1 epch:0.34 loss:... updt_s:0.123 data_s:0.004 smp/s:..."
# step and smpl go through format_big_number ("step:1K" from step 1000 on): steps are counted, not read
STEP_LINE = re.compile(r"\bstep:(\S+) smpl:\S+ ep:\S+ epch:\S+ .*?\bupdt_s:([0-9.]+) data_s:([0-9.]+)")

# reduced for a CPU; any of them can be replaced with train_args ("--policy.down_dims=[512,1024,2048]")
POLICIES = {
    "diffusion": {
        "--policy.type": "diffusion",
        "--policy.pretrained_backbone_weights": "null",
        "--policy.use_group_norm": "true",
        "--policy.down_dims": "[64,128,256]",
        "--policy.diffusion_step_embed_dim": "64",
        "--policy.spatial_softmax_num_keypoints": "32",
        "--policy.n_obs_steps": "2",
        "--policy.horizon": "16",
        "--policy.n_action_steps": "8",
        "--policy.drop_n_last_frames": "7",
    },  # horizon - n_action_steps - n_obs_steps + 1
    "act": {
        "--policy.type": "act",
        "--policy.pretrained_backbone_weights": "null",
        "--policy.dim_model": "64",
        "--policy.n_heads": "2",
        "--policy.dim_feedforward": "128",
    },
}


def resolve_policy(policy: str) -> str:
    """``auto``: diffusion when ``diffusers`` (LeRobot's diffusion extra) is importable, else ACT."""
    if policy == "auto":
        return "diffusion" if importlib.util.find_spec("diffusers") else "act"
    if policy == "diffusion" and not importlib.util.find_spec("diffusers"):
        raise ValueError(
            "--policy diffusion needs diffusers (pip install 'lerobot[diffusers-dep]'); "
            "--policy act or auto trains ACT instead"
        )
    if policy not in POLICIES:
        raise ValueError(f"--policy must be auto, diffusion or act, got {policy!r}")
    return policy


def merge_args(base: dict, extra: list[str]) -> list[str]:
    """``--key=value`` flags of ``base``, each replaced by an ``extra`` flag with the same key; the other extra
    arguments are appended."""
    flags, rest = dict(base), []
    for a in extra:
        key, sep, value = a.partition("=")
        if sep and key.startswith("--"):
            flags[key] = value
        else:
            rest.append(a)
    return [f"{k}={v}" for k, v in flags.items()] + rest


def parse_steps(run) -> list[dict]:
    out = []
    for t, text in run.lines:
        m = STEP_LINE.search(text)
        if m:
            out.append(
                {
                    "step": len(out) + 1,
                    "logged_step": m.group(1),
                    "data_s": float(m.group(3)),
                    "updt_s": float(m.group(2)),
                    "t": t,
                }
            )
    return out


def result_from_run(label: str, run, epochs: int, steps_per_epoch: int, batch_size: int) -> dict:
    if run.rc != 0:
        return error_result(label, run, f"lerobot-train exited with {run.rc}")
    steps = parse_steps(run)
    if len(steps) != epochs * steps_per_epoch:
        return error_result(
            label, run, f"expected {epochs * steps_per_epoch} step lines (--log_freq=1), parsed {len(steps)}"
        )
    _, prev_t = run.first("Start offline training")
    per_epoch = []
    for e in range(epochs):
        block = steps[e * steps_per_epoch : (e + 1) * steps_per_epoch]
        data_s = sum(s["data_s"] for s in block)
        updt_s = sum(s["updt_s"] for s in block)
        end_t = block[-1]["t"]
        per_epoch.append(
            epoch_summary(
                e + 1,
                len(block),
                data_s=data_s,
                step_s=data_s + updt_s,
                wall_s=None if prev_t is None else end_t - prev_t,
                updt_s=updt_s,
            )
        )
        prev_t = end_t
    _, t_data = run.first("Creating dataset")
    _, t_policy = run.first("Creating policy")
    return dict(
        summarise(per_epoch, batch_size),
        backend=label,
        epochs=per_epoch,
        steps=[{k: s[k] for k in ("step", "data_s", "updt_s")} for s in steps],
        dataset_build_s=None if t_data is None or t_policy is None else t_policy - t_data,
        time_to_first_epoch_end_s=steps[steps_per_epoch - 1]["t"],
        wall_s=run.wall_s,
        peak_mem_bytes=run.peak_mem_bytes,
        load_avg_1m=list(run.load_avg),
    )


def bench_lerobot_train(
    root: str,
    repo_id: str,
    backends: list[str],
    epochs: int = 3,
    steps_per_epoch: int = 20,
    batch_size: int = 16,
    num_workers: int = 2,
    policy: str = "auto",
    train_args: list[str] | None = None,
    kwargs: dict | None = None,
    json_out: str | None = None,
    device: str = "auto",
    threads: int | None = None,
    work_dir: str | None = None,
    timeout: float = 7200,
    echo=print,
) -> dict:
    """Run ``lerobot-train`` for ``epochs x steps_per_epoch`` steps once per backend and report steps/s, the
    data-stall fraction and the first block of steps, with ratios to ``native`` measured in the same run. An
    "epoch" here is a block of ``steps_per_epoch`` steps (lerobot-train counts steps, not epochs)."""
    if epochs < 2:
        raise ValueError("--epochs must be at least 2: the first epoch is warm-up and is not measured")
    policy = resolve_policy(policy)
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    kwargs = {k: dict(v) for k, v in (kwargs or {}).items()}
    steps = epochs * steps_per_epoch
    common = {
        "--dataset.repo_id": repo_id,
        "--dataset.root": os.path.abspath(root),
        **POLICIES[policy],
        "--policy.device": device,
        "--policy.push_to_hub": "false",
        "--steps": str(steps),
        "--batch_size": str(batch_size),
        "--num_workers": str(num_workers),
        "--save_checkpoint": "false",
        "--log_freq": "1",
        "--wandb.enable": "false",
    }
    settings = dict(
        root=os.path.abspath(root),
        repo_id=repo_id,
        backends=backends,
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        steps=steps,
        batch_size=batch_size,
        num_workers=num_workers,
        policy=policy,
        device=device,
        train_args=list(train_args or []),
        command=["lerobot-train", *merge_args(common, list(train_args or []))],
        torch_threads=threads,
        backend_kwargs=kwargs,
    )  # torch_threads None: torch's default
    own_dir = work_dir is None
    work = tempfile.mkdtemp(prefix="robo-loaders-train-bench-") if own_dir else os.path.abspath(work_dir)
    os.makedirs(work, exist_ok=True)
    results = []
    try:
        for label in backends:
            name = backend_of(label)
            opts = options_for(label, kwargs)
            safe = re.sub(r"[^A-Za-z0-9_.-]", "_", label)
            if name == "datapipe" and not opts.get("shards") and not opts.get("cache_dir"):
                opts["cache_dir"] = os.path.join(work, f"{safe}-cache")  # converted in this run, paid in its build
            flags = dict(common, **{"--output_dir": os.path.join(work, f"out-{safe}")})
            if name != "native":
                flags.update({"--dataset.backend": name, "--dataset.backend_kwargs": json.dumps(opts)})
            cmd = [os.path.join(BIN, "lerobot-train"), *merge_args(flags, list(train_args or []))]
            echo(f"[bench] lerobot-train {label} ({policy}, {steps} steps) ...")
            run = run_logged(
                cmd, child_env({"HF_HUB_OFFLINE": "1"}, threads), os.path.join(work, f"{safe}.log"), timeout
            )
            r = result_from_run(label, run, epochs, steps_per_epoch, batch_size)
            r.update(dataset_backend=name, dataset_backend_kwargs=opts if name != "native" else {})
            if r.get("error"):
                echo(f"[bench] {label} FAILED\n{r['error']}")
            results.append(r)
    finally:
        if own_dir:
            shutil.rmtree(work, ignore_errors=True)
    method = {
        "timings": "lerobot-train's own per-step timers, printed every step with --log_freq=1: data_s = "
        "next(dl_iter) + uint8->float + preprocessor (normalization); updt_s = update_policy "
        "(forward, backward, clip, optimizer); step_s = data_s + updt_s (logging between steps "
        "excluded; wall_s per epoch, timed from outside, includes it)",
        "epoch": f"a block of {steps_per_epoch} steps (lerobot-train counts steps, not epochs)",
        "dataset_build_s": "time between lerobot-train's 'Creating dataset' and 'Creating policy' log lines "
        "(make_dataset: where a backend caches or converts), timed from outside",
        "time_to_first_epoch_end_s": "process start to the log line of the last step of the first block",
        "policy": f"{policy}, dims reduced for CPU: {' '.join(f'{k}={v}' for k, v in POLICIES[policy].items())}",
    }
    return finish("lerobot", settings, results, method, json_out, echo)
