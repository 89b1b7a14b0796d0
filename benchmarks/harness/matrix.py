"""``python -m benchmarks.harness matrix robomimic|lerobot``: the benchmark over batch size x window x workers x
backend.

Every cell is one ordinary benchmark row (``bench_robomimic`` / ``bench_lerobot`` with a single backend, so one
subprocess per backend and cell, measured exactly as ``robo-loaders bench``). The second axis is ``seq_length``
for robomimic and the ``delta_timestamps`` preset for LeRobot.

Output, in ``OUT``: ``<name>.json`` (the source of truth, rewritten atomically after every row) and ``<name>.csv``
(the same rows flattened, the machine's details on every row). Resumable: run the same command again and only
cells without a row (or whose row failed) are measured; new axis values or backends extend the matrix. Rows
measured on another machine are refused unless asked for (a plot mixing machines would mislead).

``datapipe`` without ``shards``/``cache_dir`` reads shards converted once for the whole matrix (timed, recorded
under ``conversion`` like the bench's conversion rows) into ``OUT/<name>-shards-w<N>``, removed when the matrix is
complete unless ``keep_shards``.
"""

from __future__ import annotations

import copy
import csv
import datetime
import io
import itertools
import json
import os
import shutil

import click

from robo_loaders_plugin.bench.report import add_ratios, machine
from robo_loaders_plugin.bench.runner import backend_of
from robo_loaders_plugin.bench.tables import unique_in_order
from robo_loaders_plugin.core.files import atomic_write_bytes, atomic_write_json

KIND = "matrix"
VERSION = 1
AXES = {"robomimic": ("batch_size", "seq_length", "num_workers"), "lerobot": ("batch_size", "preset", "num_workers")}
PRESETS = ("none", "act", "diffusion")
BASELINES = {"robomimic": ["native:low_dim", "native:all"], "lerobot": ["native"]}
RATIO_FIELDS = ("samples_per_s", "peak_mem_bytes", "data_mem_bytes")
MACHINE_KEYS = ("cpu", "cores", "ram", "python", "torch", "gpu")
CSV_FIELDS = [
    "framework",
    "dataset",
    "backend",
    "batch_size",
    "seq_length",
    "preset",
    "num_workers",
    "frame_stack",
    "batches",
    "samples_per_s",
    "decoded_frames_per_s",
    "first_batch_s",
    "build_s",
    "peak_mem_bytes",
    "data_mem_bytes",
    "batch_ms_p50",
    "batch_ms_p95",
    "batch_ms_p99",
    "episode_mix",
    "num_samples",
    "epoch_times_s",
    "error",
    "measured_at",
] + [f"machine_{k}" for k in MACHINE_KEYS]


class MatrixError(ValueError):
    """The matrix cannot run as asked (bad axis values, or an output measured under other settings)."""


def paths(out_dir: str, name: str) -> tuple[str, str]:
    return os.path.join(out_dir, f"{name}.json"), os.path.join(out_dir, f"{name}.csv")


def cell_key(row: dict, framework: str) -> tuple:
    return (row["backend"],) + tuple(row[a] for a in AXES[framework])


def load(path: str) -> dict | None:
    if not os.path.exists(path):
        return None
    with open(path) as f:
        payload = json.load(f)
    if payload.get("kind") != KIND:
        raise MatrixError(
            f"{path} exists and is not a matrix result (kind {payload.get('kind')!r}): choose another "
            "output directory or --name"
        )
    return payload


def _check_axes(framework: str, backends, batch_sizes, second, workers):
    if framework not in AXES:
        raise MatrixError(f"framework must be one of {sorted(AXES)}, got {framework!r}")
    for what, values in (
        ("backends", backends),
        ("batch sizes", batch_sizes),
        (AXES[framework][1], second),
        ("workers", workers),
    ):
        if not values:
            raise MatrixError(f"no {what} given")
    if framework == "robomimic":
        from robo_loaders_plugin.bench.robomimic_bench import parse_backend

        for b in backends:
            parse_backend(b)
        bad = [s for s in second if not isinstance(s, int) or isinstance(s, bool) or s < 1]
        if bad:
            raise MatrixError(f"sequence lengths must be integers >= 1, got {bad}")
    else:
        bad = [p for p in second if p not in PRESETS]
        if bad:
            raise MatrixError(f"delta-timestamps presets must be among {list(PRESETS)}, got {bad}")
    if any(not isinstance(b, int) or b < 1 for b in batch_sizes):
        raise MatrixError(f"batch sizes must be integers >= 1, got {list(batch_sizes)}")
    if any(not isinstance(w, int) or w < 0 for w in workers):
        raise MatrixError(f"workers must be integers >= 0, got {list(workers)}")


def _needs_conversion(label: str, kwargs: dict) -> bool:
    dp = kwargs.get(label, kwargs.get("datapipe", {})) or {}
    return backend_of(label) == "datapipe" and not dp.get("shards") and not dp.get("cache_dir")


def _convert_once(framework: str, setup: dict, base: str, workers: int, echo, timeout: float) -> list[dict]:
    """Time one ``robo-loaders convert`` with ``workers`` workers into ``<base>-w<workers>`` (bench's own timer)."""
    from robo_loaders_plugin.bench.conversion import dir_bytes, time_conversions

    if framework == "robomimic":
        from robo_loaders_plugin.bench.robomimic_bench import array_bytes

        ds = setup["dataset"]
        return time_conversions(["robomimic", ds], base, [workers], os.path.getsize(ds), array_bytes(ds), echo, timeout)
    from robo_loaders_plugin.bench.lerobot_bench import raw_frame_bytes

    root = setup["dataset"]
    return time_conversions(
        ["lerobot", root, "--repo-id", setup["repo_id"]],
        base,
        [workers],
        dir_bytes(root),
        raw_frame_bytes(root),
        echo,
        timeout,
    )


def _bench_one(framework: str, setup: dict, label: str, cell: dict, kwargs: dict, timeout: float, echo) -> dict:
    """One backend in one cell, through the ordinary bench function (its own subprocess); returns its row."""
    kwargs = copy.deepcopy(kwargs)  # the bench functions write the shards they convert into their kwargs
    if framework == "robomimic":
        from robo_loaders_plugin.bench.robomimic_bench import bench_robomimic

        payload = bench_robomimic(
            setup["dataset"],
            [label],
            cell["seq_length"],
            setup["frame_stack"],
            cell["batch_size"],
            cell["num_workers"],
            setup["batches"],
            kwargs,
            None,
            setup["obs_keys"],
            timeout=timeout,
            echo=echo,
        )
    else:
        from robo_loaders_plugin.bench.lerobot_bench import bench_lerobot

        payload = bench_lerobot(
            setup["dataset"],
            setup["repo_id"],
            [label],
            cell["batch_size"],
            cell["num_workers"],
            setup["batches"],
            cell["preset"],
            kwargs,
            None,
            timeout=timeout,
            echo=echo,
        )
    (row,) = payload["results"]
    return row


def _recompute_ratios(rows: list[dict], framework: str, baselines: list[str]) -> None:
    """Ratios against the baselines of the same cell (rows of a cell may come from different resumed runs)."""
    cells = {}
    for r in rows:
        cells.setdefault(cell_key(r, framework)[1:], []).append(r)
    for cell_rows in cells.values():
        add_ratios(cell_rows, [b for b in baselines if any(r["backend"] == b for r in cell_rows)], fields=RATIO_FIELDS)


def csv_row(row: dict, framework: str, dataset: str) -> dict:
    lat = row.get("batch_latency_ms") or {}
    m = row.get("machine") or {}
    out = {
        "framework": framework,
        "dataset": dataset,
        "backend": row["backend"],
        "batch_ms_p50": lat.get("p50"),
        "batch_ms_p95": lat.get("p95"),
        "batch_ms_p99": lat.get("p99"),
        "error": (row.get("error") or "").strip().splitlines()[-1][:200] if row.get("error") else "",
        "epoch_times_s": " ".join(f"{t:.3f}" for t in row["epoch_times_s"]) if row.get("epoch_times_s") else "",
    }
    for k in CSV_FIELDS:
        if k not in out:
            out[k] = row.get(k, "")
    for k in MACHINE_KEYS:
        out[f"machine_{k}"] = m.get(k)
    for k, v in sorted((row.get("ratios") or {}).items()):
        out[f"ratio_{k}"] = v
    return {k: ("" if v is None else v) for k, v in out.items()}


def write_csv(path: str, payload: dict) -> None:
    rows = [csv_row(r, payload["framework"], payload["settings"]["dataset"]) for r in payload["rows"]]
    ratio_cols = sorted({k for r in rows for k in r if k.startswith("ratio_")})
    text = io.StringIO(newline="")
    w = csv.DictWriter(text, fieldnames=CSV_FIELDS + ratio_cols, restval="")
    w.writeheader()
    w.writerows(rows)
    atomic_write_bytes(path, text.getvalue().encode("utf-8"))


def _save(json_path: str, csv_path: str, payload: dict) -> None:
    _recompute_ratios(payload["rows"], payload["framework"], payload["baselines"])
    atomic_write_json(json_path, payload, indent=2)
    write_csv(csv_path, payload)


def run_matrix(
    framework: str,
    dataset: str,
    backends,
    batch_sizes,
    seq_lengths_or_presets,
    workers,
    batches: int,
    out_dir: str,
    *,
    kwargs: dict | None = None,
    repo_id: str | None = None,
    frame_stack: int = 1,
    obs_keys=None,
    name: str | None = None,
    timeout: float = 3600,
    retry_failed: bool = True,
    keep_shards: bool = False,
    allow_other_machine: bool = False,
    echo=print,
) -> dict:
    """Measure every (batch size, seq length or preset, workers, backend) cell not measured yet in
    ``out_dir/<name>.json`` (default name ``matrix_<framework>``); returns the whole matrix payload."""
    backends, batch_sizes = unique_in_order(backends), unique_in_order(batch_sizes)
    second, workers = unique_in_order(seq_lengths_or_presets), unique_in_order(workers)
    _check_axes(framework, backends, batch_sizes, second, workers)
    if framework == "lerobot" and not repo_id:
        repo_id = f"local/{os.path.basename(os.path.abspath(dataset))}"
    kwargs = copy.deepcopy(kwargs or {})
    name = name or f"matrix_{framework}"
    os.makedirs(out_dir, exist_ok=True)
    json_path, csv_path = paths(out_dir, name)
    setup = {"dataset": os.path.abspath(dataset), "batches": batches, "backend_kwargs": copy.deepcopy(kwargs)}
    if framework == "robomimic":
        setup.update(frame_stack=frame_stack, obs_keys=list(obs_keys) if obs_keys else None)
    else:
        setup.update(repo_id=repo_id)
    here = machine()
    payload = load(json_path)
    if payload is None:
        payload = {
            "kind": KIND,
            "version": VERSION,
            "framework": framework,
            "name": name,
            "settings": setup,
            "axes": {},
            "backends": [],
            "baselines": BASELINES[framework],
            "machine": here,
            "conversion": None,
            "rows": [],
        }
    else:
        if payload["framework"] != framework or payload["settings"] != json.loads(json.dumps(setup)):
            diff = sorted(
                k
                for k in set(setup) | set(payload["settings"])
                if json.loads(json.dumps(setup.get(k))) != payload["settings"].get(k)
            )
            raise MatrixError(
                f"{json_path} holds a {payload['framework']} matrix measured with other settings "
                f"({', '.join(diff) or 'framework'} differ): choose another output directory or --name"
            )
        others = {json.dumps(r.get("machine"), sort_keys=True) for r in payload["rows"]} - {
            json.dumps(here, sort_keys=True)
        }
        if others and not allow_other_machine:
            raise MatrixError(
                f"{json_path} has rows measured on another machine ({'; '.join(sorted(others))}; this "
                f"one: {json.dumps(here, sort_keys=True)}): use another output directory, or allow it "
                "explicitly (--allow-other-machine)"
            )
    for axis, values in zip(AXES[framework], (batch_sizes, second, workers)):
        payload["axes"][axis] = unique_in_order(payload["axes"].get(axis, []) + list(values))
    payload["backends"] = unique_in_order(payload["backends"] + list(backends))
    done = {cell_key(r, framework): r for r in payload["rows"] if retry_failed is False or not r.get("error")}
    cells = [dict(zip(AXES[framework], c)) for c in itertools.product(batch_sizes, second, workers)]
    todo = [(c, b) for c in cells for b in backends if (b,) + tuple(c[a] for a in AXES[framework]) not in done]
    echo(f"[matrix] {len(cells) * len(backends)} cells requested, {len(todo)} to measure -> {json_path}")
    shards_base = os.path.join(out_dir, f"{name}-shards")
    try:
        if any(_needs_conversion(b, kwargs) for _, b in todo):
            n = int((kwargs.get("datapipe") or {}).get("convert_workers") or max(1, max(workers)))
            conv = payload.get("conversion") or []
            if not (conv and os.path.exists(os.path.join(conv[-1]["out"], "index.json"))):
                payload["conversion"] = _convert_once(framework, setup, shards_base, n, echo, timeout)
                _save(json_path, csv_path, payload)
            shards = payload["conversion"][-1]["out"]
            for label in {b for _, b in todo if _needs_conversion(b, kwargs)}:
                key = label if label in kwargs else "datapipe"
                kwargs[key] = dict(kwargs.get(key) or {}, shards=shards)
        for i, (cell, label) in enumerate(todo, 1):
            where = " ".join(f"{a}={cell[a]}" for a in AXES[framework])
            echo(f"[matrix] {i}/{len(todo)} {where} backend={label}")
            row = _bench_one(framework, setup, label, cell, kwargs, timeout, echo)
            row.update(
                cell,
                frame_stack=setup.get("frame_stack"),
                batches=batches,
                machine=here,
                measured_at=datetime.datetime.now().isoformat(timespec="seconds"),
            )
            key = cell_key(row, framework)
            payload["rows"] = [r for r in payload["rows"] if cell_key(r, framework) != key] + [row]
            _save(json_path, csv_path, payload)
    finally:
        complete = all(
            (b,) + tuple(c[a] for a in AXES[framework])
            in {cell_key(r, framework) for r in payload["rows"] if not r.get("error")}
            for c in cells
            for b in backends
        )
        if complete and not keep_shards and payload.get("conversion"):
            for c in payload["conversion"]:
                if os.path.abspath(c["out"]).startswith(os.path.abspath(shards_base)):
                    shutil.rmtree(c["out"], ignore_errors=True)
    order = {b: i for i, b in enumerate(payload["backends"])}
    payload["rows"].sort(
        key=lambda r: (
            tuple(_axis_sort(payload, a, r[a]) for a in AXES[framework]),
            order.get(r["backend"], len(order)),
        )
    )
    _save(json_path, csv_path, payload)
    echo(f"[matrix] wrote {json_path} and {csv_path}")
    return payload


def _axis_sort(payload: dict, axis: str, value):
    values = payload["axes"].get(axis, [])
    return values.index(value) if value in values else len(values)


# -- command line ---------------------------------------------------------------------------------------------------
def _ints(what):
    def parse(ctx, param, value):
        try:
            return [int(v) for v in value.split(",") if v.strip()]
        except ValueError:
            raise click.BadParameter(f"{what}: comma-separated integers, got {value!r}") from None

    return parse


def _names(ctx, param, value):
    return [v.strip() for v in value.split(",") if v.strip()]


def _kwargs(ctx, param, values):
    from robo_loaders_plugin.core.backend_json import click_backend_pairs

    return click_backend_pairs(ctx, param, values)


def _common(f):
    for opt in reversed(
        [
            click.option("--batch-sizes", default="16,64,256", show_default=True, callback=_ints("--batch-sizes")),
            click.option(
                "--workers",
                default="0,2",
                show_default=True,
                callback=_ints("--workers"),
                help="DataLoader workers (threads for batch backends), comma-separated",
            ),
            click.option(
                "--batches", default=50, show_default=True, type=click.IntRange(min=1), help="timed batches per cell"
            ),
            click.option(
                "--backend-kwargs",
                "backend_kwargs",
                multiple=True,
                metavar="BACKEND='{json}'",
                callback=_kwargs,
                help="options for one backend (label), as for bench",
            ),
            click.option(
                "--out",
                "out_dir",
                required=True,
                type=click.Path(file_okay=False),
                help="directory of <name>.json and <name>.csv (resumed when they exist)",
            ),
            click.option("--name", default=None, help="file name stem (default: matrix_<framework>)"),
            click.option("--timeout", default=3600.0, show_default=True, type=float, help="seconds per backend run"),
            click.option("--keep-shards", is_flag=True, help="keep the shards converted for datapipe"),
            click.option("--no-retry-failed", "no_retry", is_flag=True, help="do not measure failed cells again"),
            click.option(
                "--allow-other-machine",
                is_flag=True,
                help="resume a matrix whose rows were measured on another machine",
            ),
        ]
    ):
        f = opt(f)
    return f


def _run_cli(
    framework,
    dataset,
    backends,
    batch_sizes,
    second,
    workers,
    batches,
    backend_kwargs,
    out_dir,
    name,
    timeout,
    keep_shards,
    no_retry,
    allow_other_machine,
    **extra,
):
    import sys

    try:
        payload = run_matrix(
            framework,
            dataset,
            backends,
            batch_sizes,
            second,
            workers,
            batches,
            out_dir,
            kwargs=backend_kwargs,
            name=name,
            timeout=timeout,
            retry_failed=not no_retry,
            keep_shards=keep_shards,
            allow_other_machine=allow_other_machine,
            echo=click.echo,
            **extra,
        )
    except MatrixError as exc:
        raise click.UsageError(str(exc)) from None
    failed = [r for r in payload["rows"] if r.get("error")]
    if failed:
        click.echo(f"[matrix] {len(failed)} cell(s) failed (their rows hold the error; run again to retry)", err=True)
        sys.exit(1)


@click.group("matrix")
def matrix_group():
    """The benchmark over batch size x seq length (LeRobot: delta-timestamps preset) x workers x backend;
    JSON + CSV, resumable (cells already measured are skipped)."""


@matrix_group.command("robomimic")
@click.option("--dataset", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--backends", default="native:low_dim,compressed_cache,datapipe", show_default=True, callback=_names)
@click.option("--seq-lengths", default="1,10,20", show_default=True, callback=_ints("--seq-lengths"))
@click.option("--frame-stack", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--obs-keys", default=None, help="comma-separated obs keys (default: every obs key in the file)")
@_common
def matrix_robomimic_cmd(dataset, backends, seq_lengths, frame_stack, obs_keys, **common):
    """robomimic backends over batch size x seq_length x num_workers (robo-loaders bench robomimic per cell)."""
    _run_cli(
        "robomimic",
        dataset,
        backends,
        common.pop("batch_sizes"),
        seq_lengths,
        common.pop("workers"),
        frame_stack=frame_stack,
        obs_keys=obs_keys.split(",") if obs_keys else None,
        **common,
    )


@matrix_group.command("lerobot")
@click.option("--root", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--repo-id", default=None, help="default: local/<name of the root directory>")
@click.option("--backends", default="native,compressed_cache,datapipe", show_default=True, callback=_names)
@click.option(
    "--presets",
    default="none,act,diffusion",
    show_default=True,
    callback=_names,
    help="delta-timestamps presets (none, act, diffusion)",
)
@_common
def matrix_lerobot_cmd(root, repo_id, backends, presets, **common):
    """LeRobot backends over batch size x delta-timestamps preset x num_workers (robo-loaders bench lerobot per
    cell)."""
    _run_cli(
        "lerobot", root, backends, common.pop("batch_sizes"), presets, common.pop("workers"), repo_id=repo_id, **common
    )
