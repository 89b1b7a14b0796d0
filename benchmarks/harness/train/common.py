"""Shared plumbing of the training benchmark: one training process per backend with its output lines timestamped
on arrival, per-epoch summaries, ratios to native, the table and the JSON payload."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from tabulate import tabulate

from robo_loaders_plugin.bench.memory import TreeMemorySampler
from robo_loaders_plugin.bench.report import add_ratios, code_version, machine
from robo_loaders_plugin.core.files import atomic_write_json
from robo_loaders_plugin.core.units import format_bytes

BIN = os.path.dirname(sys.executable)
RATIO_FIELDS = ("steps_per_s", "stall_fraction", "first_epoch_s", "dataset_build_s", "time_to_first_epoch_end_s")

STALL_NOTE = (
    "stall_fraction = time the training loop waited for its next batch / step time, summed over the "
    "measured epochs (every epoch but the first)"
)
WARMUP_NOTE = (
    "steps_per_s and stall_fraction exclude the first epoch (warm-up: DataLoader workers starting, "
    "lazy caches filling, first-touch file reads); first_epoch_s reports it alone"
)


@dataclass
class LoggedRun:
    """A finished process: its output lines with the time each arrived (seconds since launch)."""

    rc: object
    lines: list = field(default_factory=list)  # [(t, text)]
    wall_s: float = 0.0
    peak_mem_bytes: int = 0
    load_avg: tuple = ()

    def first(self, needle: str, start: int = 0):
        """(index, time) of the first line at or after ``start`` that contains ``needle``, else (None, None)."""
        for i in range(start, len(self.lines)):
            if needle in self.lines[i][1]:
                return i, self.lines[i][0]
        return None, None

    def tail(self, chars: int = 3000) -> str:
        return "\n".join(text for _, text in self.lines)[-chars:]


def child_env(extra: dict | None = None, threads: int | None = None) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1", PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    env.pop("ROBO_LOADERS_DISABLE", None)  # the plugin's import hook must be active in the training process
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    env.update(extra or {})
    return env


def run_logged(cmd: list[str], env: dict, log_path: str, timeout: float, mem_interval: float = 1.0) -> LoggedRun:
    """Run ``cmd`` (stderr merged into stdout), timestamping every output line as it arrives and sampling the
    process tree's memory from outside; the whole output also goes to ``log_path``."""
    load_start = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    killed = threading.Event()

    def kill():
        killed.set()
        proc.kill()

    timer = threading.Timer(timeout, kill)
    timer.start()
    run = LoggedRun(rc=None)
    try:
        with TreeMemorySampler(proc.pid, interval=mem_interval) as mem, open(log_path, "w") as log:
            for raw in proc.stdout:
                t = time.perf_counter() - t0
                text = raw.decode("utf-8", "replace").rstrip("\r\n")
                log.write(text + "\n")
                # tqdm redraws its bar with carriage returns on one line: keep what the line ends with
                run.lines.append((t, text.rsplit("\r", 1)[-1]))
            rc = proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
    run.rc = "timeout" if killed.is_set() else rc
    run.wall_s = time.perf_counter() - t0
    run.peak_mem_bytes = mem.peak_pss
    run.load_avg = (round(load_start, 2), round(os.getloadavg()[0], 2))
    return run


def epoch_summary(epoch: int, steps: int, data_s: float, step_s: float, wall_s: float | None, **extra) -> dict:
    return dict(
        epoch=epoch,
        steps=steps,
        data_s=data_s,
        step_s=step_s,
        stall_fraction=data_s / step_s if step_s > 0 else None,
        steps_per_s=steps / step_s if step_s > 0 else None,
        wall_s=wall_s,
        **extra,
    )


def summarise(epochs: list[dict], batch_size: int) -> dict:
    """Headline numbers from the per-epoch list: the first epoch is the warm-up, the others are measured."""
    measured = epochs[1:]
    steps = sum(e["steps"] for e in measured)
    step_s = sum(e["step_s"] for e in measured)
    data_s = sum(e["data_s"] for e in measured)
    out = {
        "first_epoch_s": epochs[0]["step_s"] if epochs else None,
        "warmup_steps": epochs[0]["steps"] if epochs else 0,
        "measured_steps": steps,
        "measured_s": step_s,
        "steps_per_s": None,
        "samples_per_s": None,
        "stall_fraction": None,
        "steps_per_s_range": None,
    }
    if steps and step_s > 0:
        per = [e["steps_per_s"] for e in measured if e["steps_per_s"] is not None]
        # the spread over measured epochs: identical work, so a wide range means the machine was not quiet
        out.update(
            steps_per_s=steps / step_s,
            samples_per_s=steps * batch_size / step_s,
            stall_fraction=data_s / step_s,
            steps_per_s_range=[min(per), max(per)],
        )
    return out


def finish(framework: str, settings: dict, results: list[dict], method: dict, json_out: str | None, echo) -> dict:
    baselines = [
        b for b in ("native", "native:low_dim", "native:all", "native:none") if any(r["backend"] == b for r in results)
    ][:1]
    add_ratios(results, baselines, fields=RATIO_FIELDS)
    payload = {
        "framework": framework,
        "benchmark": "training",
        "settings": settings,
        "machine": dict(machine(), load_avg_1_5_15m=list(os.getloadavg())),
        "code": code_version(),  # which code the run measured (docs cite it)
        "date": time.strftime("%Y-%m-%d"),
        "baseline": baselines[0] if baselines else None,
        "method": dict(method, stall_fraction=STALL_NOTE, warmup=WARMUP_NOTE),
        "results": results,
    }
    echo(train_table(results, payload["baseline"]))
    echo(f"(steps/s and data stall over epochs 2..{settings['epochs']}: the first epoch is warm-up, shown alone)")
    if json_out:
        atomic_write_json(json_out, payload, indent=2)
    return payload


def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


def train_table(results: list[dict], baseline: str | None) -> str:
    rows = []
    for r in results:
        if r.get("error"):
            rows.append([r["backend"], "FAILED: " + r["error"].strip().splitlines()[-1][:100]])
            continue
        rr = r.get("ratios", {})
        spread = r.get("steps_per_s_range")
        row = [
            r["backend"],
            _fmt(r["steps_per_s"], ".3g")
            + ("" if not spread or len(r["epochs"]) < 3 else f" ({spread[0]:.3g}-{spread[1]:.3g})"),
            _fmt(r["samples_per_s"], ".1f"),
            _fmt(r["stall_fraction"], ".1%"),
            _fmt(r["first_epoch_s"], ".1f"),
            _fmt(r["dataset_build_s"], ".1f"),
            _fmt(r["time_to_first_epoch_end_s"], ".1f"),
            format_bytes(r["peak_mem_bytes"]),
        ]
        if baseline:
            sp = rr.get(f"steps_per_s_vs_{baseline}")
            first = rr.get(f"time_to_first_epoch_end_s_vs_{baseline}")
            row.append("-" if sp is None else f"{sp:.2f}x / {first:.2f}x" if first is not None else f"{sp:.2f}x")
        rows.append(row)
    headers = [
        "backend",
        "steps/s (epoch min-max)",
        "samples/s",
        "data stall",
        "1st epoch s",
        "data build s",
        "launch to end of epoch 1 s",
        "peak mem",
    ]
    if baseline:
        headers.append(f"vs {baseline}: steps/s / launch-to-epoch-1")
    return tabulate(rows, headers=headers, disable_numparse=True)


def error_result(label: str, run: LoggedRun | None, why: str) -> dict:
    """A failed backend: the log's tail, then why (the table shows the last line)."""
    tail = f"--- end of the training log ---\n{run.tail()}\n" if run else ""
    return {"backend": label, "error": f"{tail}{why}"}
