"""Click commands of the training benchmark: ``python -m benchmarks.harness train robomimic|lerobot`` (registered in
``benchmarks/harness/cli.py``)."""

from __future__ import annotations

import json
import os
import sys

import click


def parse_backend_kwargs(values) -> dict:
    """``BACKEND='{json}'`` options (as ``--backend-kwargs`` of the loader-only benchmark)."""
    from robo_loaders_plugin.core.backend_json import click_backend_pairs

    return click_backend_pairs(None, None, values)


def parse_config_set(values) -> dict:
    out = {}
    for v in values:
        key, sep, payload = v.partition("=")
        if not sep or not key:
            raise click.BadParameter(
                f"{v!r}: expected dotted.key=JSON, e.g. algo.gmm.enabled=false", param_hint="--config-set"
            )
        try:
            out[key] = json.loads(payload)
        except json.JSONDecodeError:
            out[key] = payload  # a bare string
    return out


def _split(backends: str) -> list[str]:
    return [b.strip() for b in backends.split(",") if b.strip()]


def _common(f):
    """Options both training benchmarks share (the loop's length, DataLoader settings, where and how to run)."""
    for opt in reversed(
        [
            click.option(
                "--epochs",
                default=3,
                show_default=True,
                type=click.IntRange(min=2),
                help="epochs per backend; the first is warm-up, reported alone and left out of steps/s",
            ),
            click.option(
                "--steps-per-epoch",
                default=20,
                show_default=True,
                type=click.IntRange(min=1),
                help="training steps per epoch",
            ),
            click.option("--batch-size", default=16, show_default=True, type=click.IntRange(min=1)),
            click.option(
                "--num-workers",
                default=2,
                show_default=True,
                type=click.IntRange(min=0),
                help="DataLoader workers (robomimic: train.num_data_workers; LeRobot: --num_workers)",
            ),
            click.option(
                "--backend-kwargs",
                "backend_kwargs",
                multiple=True,
                metavar="BACKEND='{json}'",
                help='options for one backend, e.g. compressed_cache=\'{"codec": "zstd"}\' (datapipe without '
                "shards/cache_dir converts into a fresh directory, so the run pays the conversion)",
            ),
            click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True),
            click.option(
                "--torch-threads",
                type=click.IntRange(min=1),
                default=None,
                help="OMP_NUM_THREADS/MKL_NUM_THREADS for the training processes (default: the framework's; "
                "robomimic's train() sets torch.set_num_threads(2) itself)",
            ),
            click.option(
                "--work-dir",
                type=click.Path(file_okay=False),
                default=None,
                help="keep the configs and training logs here (default: a temporary directory, removed)",
            ),
            click.option("--timeout", default=7200.0, show_default=True, type=float, help="seconds per backend"),
            click.option("--json", "json_out", type=click.Path(dir_okay=False), help="also write the results here"),
        ]
    ):
        f = opt(f)
    return f


def _exit_on_failure(payload):
    if any(r.get("error") for r in payload["results"]):
        sys.exit(1)


@click.command("robomimic")
@click.option("--dataset", required=True, type=click.Path(exists=True, dir_okay=False), help="robomimic HDF5 file")
@click.option(
    "--backends",
    default="native:low_dim,compressed_cache,datapipe,gpu_resampler",
    show_default=True,
    help="comma-separated; native:<hdf5_cache_mode> (low_dim, all, none) is robomimic's own loader",
)
@_common
@click.option(
    "--seq-length",
    default=10,
    show_default=True,
    type=click.IntRange(min=1),
    help="train.seq_length and algo.rnn.horizon",
)
@click.option(
    "--rnn-hidden-dim",
    type=click.IntRange(min=1),
    default=None,
    help="algo.rnn.hidden_dim (default: the paper's 1000 for image data; smaller for a CPU)",
)
@click.option(
    "--obs-keys", default=None, help="comma-separated obs keys (default: every camera and the paper's low-dim keys)"
)
@click.option(
    "--config-set",
    "config_set",
    multiple=True,
    metavar="KEY=JSON",
    help="override one key of the generated robomimic config, e.g. algo.gmm.enabled=false",
)
def robomimic_train_command(
    dataset,
    backends,
    epochs,
    steps_per_epoch,
    batch_size,
    num_workers,
    backend_kwargs,
    device,
    torch_threads,
    work_dir,
    timeout,
    json_out,
    seq_length,
    rnn_hidden_dim,
    obs_keys,
    config_set,
):
    """Training-time benchmark: robomimic's own train script (BC-RNN, image observations) for EPOCHS x
    STEPS-PER-EPOCH steps per backend; steps/s, data-stall fraction, first epoch and ratios to native."""
    from benchmarks.harness.train.robomimic_train import bench_robomimic_train

    try:
        payload = bench_robomimic_train(
            dataset,
            _split(backends),
            epochs,
            steps_per_epoch,
            batch_size,
            num_workers,
            seq_length,
            rnn_hidden_dim,
            obs_keys.split(",") if obs_keys else None,
            parse_backend_kwargs(backend_kwargs),
            json_out,
            device,
            torch_threads,
            parse_config_set(config_set),
            work_dir,
            timeout,
            echo=click.echo,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    _exit_on_failure(payload)


@click.command("lerobot")
@click.option("--root", required=True, type=click.Path(exists=True, file_okay=False), help="local LeRobot dataset")
@click.option("--repo-id", default=None, help="default: local/<name of the root directory>")
@click.option("--backends", default="native,compressed_cache,datapipe,gpu_resampler", show_default=True)
@_common
@click.option(
    "--policy",
    type=click.Choice(["auto", "diffusion", "act"]),
    default="auto",
    show_default=True,
    help="auto: diffusion when diffusers is installed, else ACT (both with dimensions reduced for a CPU)",
)
@click.option(
    "--train-arg",
    "train_args",
    multiple=True,
    metavar="--KEY=VALUE",
    help="extra lerobot-train flag, replacing the benchmark's own with the same key, e.g. "
    "--train-arg=--policy.down_dims=[512,1024,2048]",
)
def lerobot_train_command(
    root,
    repo_id,
    backends,
    epochs,
    steps_per_epoch,
    batch_size,
    num_workers,
    backend_kwargs,
    device,
    torch_threads,
    work_dir,
    timeout,
    json_out,
    policy,
    train_args,
):
    """Training-time benchmark: the real lerobot-train for EPOCHS x STEPS-PER-EPOCH steps per backend; steps/s,
    data-stall fraction (data_s / (data_s + updt_s)), first block of steps and ratios to native."""
    from benchmarks.harness.train.lerobot_train import bench_lerobot_train

    repo_id = repo_id or f"local/{os.path.basename(os.path.abspath(root))}"
    try:
        payload = bench_lerobot_train(
            root,
            repo_id,
            _split(backends),
            epochs,
            steps_per_epoch,
            batch_size,
            num_workers,
            policy,
            list(train_args),
            parse_backend_kwargs(backend_kwargs),
            json_out,
            device,
            torch_threads,
            work_dir,
            timeout,
            echo=click.echo,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    _exit_on_failure(payload)
