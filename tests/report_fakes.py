"""Fake benchmark results in the formats ``robo-loaders bench`` writes (loader-only and training rows), for the report
and README-table tests here and in benchmarks/tests (which puts this directory on sys.path)."""

import json

from robo_loaders_plugin.bench import tables

MACHINE = {"cpu": "x86_64", "cores": 2, "ram": "23.5 GiB", "python": "3.12.1", "torch": "2.11.0", "gpu": None}
SPEED = {"native:low_dim": 1000.0, "native:all": 900.0, "compressed_cache": 5000.0, "datapipe": 8000.0, "native": 200.0}


def fake_row(label, batch_size=64, second=10, workers=2, epochs=False):
    sp = SPEED.get(label, 3000.0) * (1 + batch_size / 256) / (1 + (second if isinstance(second, int) else 5) / 20)
    row = {
        "backend": label,
        "samples_per_s": sp,
        "first_batch_s": 0.1 + workers * 0.05,
        "build_s": 2.0,
        "batch_latency_ms": {"p50": 5.0, "p95": 9.0, "p99": 12.0},
        "episode_mix": 0.8,
        "num_samples": 9000,
        "baseline_pss_bytes": 600 << 20,
        "peak_mem_bytes": (700 + 40 * len(label)) << 20,
        "data_mem_bytes": (100 + 40 * len(label)) << 20,
        "wall_s": 9.0,
        "summary": None,
    }
    if epochs:
        row["epoch_times_s"] = [9000 / sp + 1.5, 9000 / sp, 9000 / sp * 1.02]
    return row


def bench_payload(
    framework="robomimic",
    labels=("native:low_dim", "native:all", "compressed_cache", "datapipe"),
    epochs=True,
    failed=None,
    preset="act",
):
    from robo_loaders_plugin.bench.report import add_ratios

    rows = [fake_row(b, epochs=epochs) for b in labels]
    if framework == "lerobot":
        for r in rows:
            r.update(
                decoded_frames_per_s=2 * r["samples_per_s"],
                frames_per_sample=2,
                cache_bytes=0 if r["backend"] == "native" else 120 << 20,
                raw_decoded_frames_bytes=426 << 20,
                fetch_ms_per_sample=0.1,
                decode_ms_per_sample=0.2,
            )
    if failed:
        rows.append({"backend": failed, "error": "exit 1:\nTraceback...\nRuntimeError: boom"})
    base = tables.baselines_in(rows)
    add_ratios(rows, base, fields=("samples_per_s", "peak_mem_bytes", "data_mem_bytes"))
    settings = (
        {
            "dataset": "/data/lift.hdf5",
            "seq_length": 10,
            "frame_stack": 1,
            "batch_size": 64,
            "num_workers": 2,
            "batches": 150,
            "obs_keys": None,
        }
        if framework == "robomimic"
        else {
            "root": "/data/lr",
            "repo_id": "local/lr",
            "batch_size": 64,
            "num_workers": 2,
            "batches": 60,
            "preset": preset,
        }
    )
    conv = (
        [
            {
                "workers": 1,
                "wall_s": 8.5,
                "source_mb_per_s": 101.03,
                "decoded_mb_per_s": 100.8,
                "shards_bytes": 350 << 20,
                "out": "/tmp/x/shards-w1",
            },
            {
                "workers": 2,
                "wall_s": 5.7,
                "source_mb_per_s": 149.1,
                "decoded_mb_per_s": 148.8,
                "shards_bytes": 350 << 20,
                "out": "/tmp/x/shards-w2",
            },
        ]
        if "datapipe" in labels
        else None
    )
    return {"framework": framework, "settings": settings, "machine": MACHINE, "results": rows, "conversion": conv}


def training_payload(framework="robomimic", labels=("native:low_dim", "compressed_cache", "datapipe")):
    """The shape the training benchmark (benchmarks/harness/train/) writes (``benchmark: training``): per-epoch step
    times, launch to end of epoch 1."""
    from robo_loaders_plugin.bench.report import add_ratios

    rows = []
    for i, b in enumerate(labels):
        step = 10.0 / (1 + i)
        epochs = [
            {
                "epoch": e,
                "steps": 20,
                "data_s": step * 0.3,
                "step_s": step * (1.5 if e == 1 else 1.0),
                "wall_s": None if e == 1 else step + 0.2,
                "loss": 1.0 / e,
            }
            for e in (1, 2, 3)
        ]
        rows.append(
            {
                "backend": b,
                "epochs": epochs,
                "steps_per_s": 20 / step,
                "samples_per_s": 320 / step,
                "stall_fraction": 0.3,
                "first_epoch_s": step * 1.5,
                "dataset_build_s": 1.0 + 4 * i,
                "time_to_first_epoch_end_s": 12.0 + 4 * i + step * 1.5,
                "wall_s": 60.0,
                "peak_mem_bytes": (900 + 100 * i) << 20,
            }
        )
    add_ratios(
        rows,
        [labels[0]],
        fields=("steps_per_s", "stall_fraction", "first_epoch_s", "dataset_build_s", "time_to_first_epoch_end_s"),
    )
    return {
        "framework": framework,
        "benchmark": "training",
        "baseline": labels[0],
        "machine": MACHINE,
        "settings": {
            "dataset": "/data/lift.hdf5",
            "epochs": 3,
            "steps_per_epoch": 20,
            "batch_size": 16,
            "num_workers": 2,
            "seq_length": 10,
        },
        "method": {},
        "results": rows,
    }


def dump(path, payload):
    path.write_text(json.dumps(payload))
    return str(path)
