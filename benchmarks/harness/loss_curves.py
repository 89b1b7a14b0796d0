"""Loss curves as JSON: what the loss-parity tests measured, per run and per epoch, for ``robo-loaders report``.

Format (``kind: "loss_curves"``, one file per comparison)::

    {"kind": "loss_curves", "version": 1, "framework": "robomimic", "name": "robomimic_datapipe",
     "metrics": ["L1_Loss", "L2_Loss", "Cosine_Loss"],     # what the report plots, in this order
     "reference": "native",                                 # label the other runs are compared with
     "x": "epoch",                                          # what a point is: "epoch" (default) or "step"
     "settings": {...}, "notes": "...", "machine": {...},   # free-form; machine: bench/report.py's machine()
     "runs": [{"label": "native", "backend": "native", "seed": 100,
               "epochs": [{"L1_Loss": 0.41, "L2_Loss": 0.30, "Cosine_Loss": 0.12}, ...]}, ...]}

``label`` groups runs into one curve (mean and min-max band over its seeds); it defaults to ``backend``, and is
what tells apart runs of one backend under different options (e.g. a negative control). Point ``k`` of a run is
``epochs[k - 1]``: one dict of metric -> value per epoch (or per training step with ``"x": "step"``, e.g.
lerobot-train's loop; the plots then say "training step"), other numeric keys allowed (ignored by the plots).

This module imports neither matplotlib nor torch (``machine()`` imports torch only when asked for).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence

from robo_loaders_plugin.core.files import atomic_write_json

KIND = "loss_curves"
VERSION = 1
ENV_DIR = "ROBO_LOADERS_LOSS_CURVES_DIR"
DEFAULT_DIR = os.path.join("bench_out", "loss_curves")


def loss_curves_path(name: str) -> str:
    """Where the tests write ``<name>.json``: ``$ROBO_LOADERS_LOSS_CURVES_DIR``, else ``bench_out/loss_curves``
    under the current directory (ignored by git: commit a file to ``benchmarks/results/`` deliberately)."""
    return os.path.join(os.environ.get(ENV_DIR) or DEFAULT_DIR, f"{name}.json")


def _epochs(epochs, metrics: Sequence[str] | None) -> list[dict]:
    """Per-epoch values as a list of {metric: float}: from a list of dicts, a dict of dicts (in insertion order,
    e.g. ``{"pass0": {...}, "pass1": {...}}``) or a 2-D array-like (epochs x metrics, ``metrics`` naming columns)."""
    if isinstance(epochs, Mapping):
        epochs = list(epochs.values())
    if hasattr(epochs, "tolist"):
        epochs = epochs.tolist()
    out = []
    for e in epochs:
        if isinstance(e, Mapping):
            out.append(
                {str(k): float(v) for k, v in e.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            )
        else:
            if not metrics:
                raise ValueError("per-epoch values given as rows of numbers need metrics= naming the columns")
            row = list(e)
            if len(row) != len(metrics):
                raise ValueError(f"an epoch has {len(row)} values for {len(metrics)} metrics {list(metrics)}")
            out.append({m: float(v) for m, v in zip(metrics, row)})
    return out


def loss_run(
    backend: str, seed, epochs, metrics: Sequence[str] | None = None, label: str | None = None, **extra
) -> dict:
    """One run: ``epochs`` as accepted by the format (see ``_epochs``); ``extra`` keys are kept as they are."""
    return dict(extra, label=label or backend, backend=backend, seed=seed, epochs=_epochs(epochs, metrics))


def runs_from_array(backend: str, values, seeds: Iterable, metrics: Sequence[str], label: str | None = None) -> list:
    """Runs from an array-like of shape (runs, epochs, metrics), e.g. ``np.stack`` of per-run loss tables."""
    values = values.tolist() if hasattr(values, "tolist") else values
    seeds = list(seeds)
    if len(seeds) != len(values):
        raise ValueError(f"{len(values)} runs but {len(seeds)} seeds")
    return [loss_run(backend, s, v, metrics, label) for s, v in zip(seeds, values)]


def _key(run: dict):
    return run.get("label") or run["backend"], run["backend"], json.dumps(run.get("seed"))


def write_loss_curves(
    path: str,
    framework: str,
    runs: Sequence[dict],
    metrics: Sequence[str] | None = None,
    reference: str = "native",
    settings: dict | None = None,
    notes: str | None = None,
    name: str | None = None,
    merge: bool = True,
    with_machine: bool = True,
    x: str = "epoch",
) -> str:
    """Write (or merge into) a loss-curves file and return its path.

    With ``merge`` (default), runs already in the file with the same (label, backend, seed) are replaced and the
    others kept, so several tests of one module can each add their runs; a file written for another framework,
    metric list, ``settings`` or ``x`` is replaced instead (runs under other settings are not comparable).
    ``x``: what each entry of a run's ``epochs`` is, ``"epoch"`` or ``"step"`` (one point per training step)."""
    if x not in ("epoch", "step"):
        raise ValueError(f"x must be 'epoch' or 'step', got {x!r}")
    runs = [dict(r, label=r.get("label") or r["backend"], epochs=_epochs(r["epochs"], metrics)) for r in runs]
    for r in runs:
        for e in r["epochs"]:
            for k, v in e.items():
                if not math.isfinite(v):
                    raise ValueError(f"run {r['label']} seed {r.get('seed')}: {k} is {v}")
    if metrics is None:
        seen = []
        for r in runs:
            for e in r["epochs"]:
                seen += [k for k in e if k not in seen]
        metrics = seen
    payload = {
        "kind": KIND,
        "version": VERSION,
        "framework": framework,
        "name": name or os.path.splitext(os.path.basename(path))[0],
        "metrics": list(metrics),
        "reference": reference,
        "x": x,
        "settings": settings or {},
        "notes": notes,
        "runs": [],
    }
    if merge and os.path.exists(path):
        try:
            with open(path) as f:
                old = json.load(f)
        except (OSError, ValueError):
            old = None
        if (
            isinstance(old, dict)
            and old.get("kind") == KIND
            and old.get("framework") == framework
            and old.get("metrics") == payload["metrics"]
            and old.get("settings") == payload["settings"]
            and old.get("x", "epoch") == x
        ):
            new_keys = {_key(r) for r in runs}
            payload["runs"] = [r for r in old.get("runs", []) if _key(r) not in new_keys]
            payload["notes"] = notes if notes is not None else old.get("notes")
    payload["runs"] += runs
    if with_machine:
        from robo_loaders_plugin.bench.report import machine

        payload["machine"] = machine()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write_json(path, payload, indent=2)
    return path
