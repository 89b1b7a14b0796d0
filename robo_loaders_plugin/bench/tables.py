"""Markdown tables from benchmark result files: what ``robo-loaders report`` puts in its ``report.md``, and what the
project's README tables are generated from (``benchmarks/harness/readme_tables.py``, between markers).

``results_table(payloads, opts)`` takes the options a README marker takes (``opts``, a dict):

- ``columns=a,b,...``: columns by name (``COLUMNS`` below; ``vs:<baseline>`` and ``mem_vs:<baseline>`` for ratios);
  default: the columns of ``robo-loaders bench``'s own table for that framework.
- ``table=results`` (default), ``table=conversion`` (the conversion rows), ``table=pivot`` (matrix results: one row
  per backend, one column per value of ``by=<axis>``, cells ``value=<column>``, default ``samples_per_s``).
- ``backends=a,b``: only these rows, in this order; ``batch_size=64``, ``seq_length=10``, ``preset=act``,
  ``num_workers=2``: only rows with these values (what a matrix needs to pick one cell).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from robo_loaders_plugin.core.units import format_bytes, format_size_text

AXIS_KEYS = ("batch_size", "seq_length", "preset", "num_workers")
AXIS_LABEL = {
    "batch_size": "batch",
    "seq_length": "seq_length",
    "preset": "delta_timestamps",
    "num_workers": "workers",
    "frame_stack": "frame_stack",
}


class TableError(ValueError):
    """A result file or a README marker that cannot give a table (the message says where and why)."""


# -- result files ---------------------------------------------------------------------------------------------------
def kind_of(payload: dict) -> str:
    """What a result file is: ``bench``, ``training``, ``matrix``, ``loss_curves``, ``growth`` (with
    ``growth_findings`` and ``growth_conversion``: the project harness's, tables and plots in
    ``benchmarks/harness/growth_plots.py``), ``sample_costs`` (``benchmarks/sample_costs.py``'s, its table there), or
    ``unknown``.

    Args:
        payload: The file's JSON content.
    """
    if not isinstance(payload, dict):
        return "unknown"
    if payload.get("kind") in (
        "matrix",
        "loss_curves",
        "growth",
        "growth_findings",
        "growth_conversion",
        "sample_costs",
    ):
        return payload["kind"]
    if payload.get("benchmark") == "training" and "results" in payload:
        return "training"  # the training benchmark (benchmarks/harness/train/)
    return "bench" if "results" in payload and "framework" in payload else "unknown"


def load_result(path: str) -> dict:
    """A result file as a dict, with its kind under ``_kind`` and its path under ``_path``.

    Args:
        path: The JSON file.

    Returns:
        The payload.

    Raises:
        TableError: the file is missing, not JSON, or none of the known kinds (e.g. ``codecs.json``).
    """
    try:
        with open(path) as f:
            payload = json.load(f)
    except FileNotFoundError:
        raise TableError(f"{path}: no such result file") from None
    except (OSError, ValueError) as exc:
        raise TableError(f"{path}: not a readable JSON result ({exc})") from None
    kind = kind_of(payload)
    if kind == "unknown":
        raise TableError(f"{path}: not a benchmark, matrix or loss-curves result (no 'framework'/'results' or 'kind')")
    payload["_kind"], payload["_path"] = kind, path
    return payload


def rows_of(payload: dict) -> list[dict]:
    """Result rows with the file's settings folded in (bench files keep batch size etc. in ``settings``).

    Args:
        payload: A loaded result (:func:`load_result`).

    Returns:
        New dicts, one per row; none for loss curves.
    """
    if payload["_kind"] in ("matrix", "growth"):
        return [dict(r) for r in payload["rows"]]
    if payload["_kind"] not in ("bench", "training"):
        return []
    s = payload.get("settings") or {}
    fixed = {k: s[k] for k in AXIS_KEYS + ("frame_stack",) if k in s}
    return [dict(fixed, **r) for r in payload["results"]]


def machine_caption(m: dict | None) -> str:
    """One line naming the machine a result was measured on (sizes in this package's units).

    Args:
        m: The result's ``machine``, or ``None``.
    """
    if not m:
        return "machine not recorded"
    ram = format_size_text(m.get("ram"))  # files written before the decimal units recorded "23.5 GiB"
    return (
        f"{m.get('cpu') or '?'}, {m.get('cores')} cores, {ram} RAM, {m.get('gpu') or 'no GPU'}, "
        f"Python {m.get('python')}, torch {m.get('torch')}"
    )


def settings_parts(payload: dict) -> list[str]:
    """The result's settings worth a caption, as phrases (batch, seq_length, workers, timed batches, repeats,
    epochs, ..., the machine's load over the runs and the commit measured, where the result records them).

    Args:
        payload: A loaded result.
    """
    s = payload.get("settings") or {}
    if payload["_kind"] == "matrix":
        parts = [f"dataset {os.path.basename(str(s.get('dataset')))}"] if s.get("dataset") else []
        if s.get("frame_stack", 1) != 1:
            parts.append(f"frame_stack {s['frame_stack']}")
        return parts + [f"{s.get('batches')} timed batches per cell"]
    parts = [f"batch {s['batch_size']}"] if "batch_size" in s else []
    framework = payload.get("framework") if payload["_kind"] == "growth" else None  # growth settings hold both
    if "seq_length" in s and framework != "lerobot":
        parts.append(f"seq_length {s['seq_length']}")
    if s.get("frame_stack", 1) != 1:
        parts.append(f"frame_stack {s['frame_stack']}")
    if "preset" in s and framework != "robomimic":
        parts.append(f"delta_timestamps {s['preset']}")
    if "num_workers" in s:
        parts.append(f"{s['num_workers']} workers")
    if s.get("full_pass"):
        parts.append(
            "one full pass per run"
            + (f" (LeRobotDataset: {s['batches']} timed batches)" if framework == "lerobot" else "")
        )
    elif "batches" in s:
        parts.append(f"{s['batches']} timed batches")
    if s.get("repeats", 1) > 1:
        parts.append(f"median of {s['repeats']} runs per backend")
    if payload["_kind"] == "sample_costs" and "seconds" in s:
        parts.append(f"{s['seconds']:g} s profiled per backend at {s.get('rate_hz')} Hz")
    if payload["_kind"] == "training" and s.get("epochs"):
        parts.append(f"{s['epochs']} epochs x {s.get('steps_per_epoch')} training steps")
        if s.get("policy") or s.get("algo"):
            parts.append(str(s.get("policy") or s.get("algo")))
    rows = payload.get("results")
    rows = rows if isinstance(rows, list) else []  # some kinds keep other things under "results"
    loads = [x for r in rows if isinstance(r, dict) for x in r.get("load_1min") or ()]
    if loads:
        parts.append(f"1-min load {min(loads):.1f}-{max(loads):.1f}")
    if payload.get("code"):
        parts.append(f"code {payload['code']}")
    return parts


def settings_caption(payload: dict) -> str:
    """:func:`settings_parts` joined with commas.

    Args:
        payload: A loaded result.
    """
    return ", ".join(settings_parts(payload))


def baselines_in(rows, payload: dict | None = None) -> list[str]:
    """The baselines ratios are given against: the training file's one baseline, else the native rows present.

    Args:
        rows: Result rows.
        payload: Their file, if known (a training result names its baseline).

    Returns:
        Baseline backend labels, in column order.
    """
    if payload and payload.get("_kind") == "training":  # its ratios are against one baseline
        return [payload["baseline"]] if payload.get("baseline") else []
    names = [r["backend"] for r in rows]
    return [b for b in ("native:low_dim", "native:all", "native") if b in names]


# -- columns --------------------------------------------------------------------------------------------------------
def _num(fmt):
    def f(v):
        return "-" if v is None else format(v, fmt)

    return f


def _get(key, fmt=None):
    fmt = fmt or (lambda v: "-" if v is None else str(v))
    return lambda r, ctx: fmt(r.get(key))


def _mem(key):
    return lambda r, ctx: "-" if r.get(key) is None else format_bytes(r[key])


def _latency(r, ctx):
    lat = r.get("batch_latency_ms")
    return "-" if not lat else "/".join(f"{lat[p]:.0f}" for p in ("p50", "p95", "p99"))


def _stored(r, ctx):
    if not r.get("cache_bytes"):
        return "-"
    raw = r.get("raw_decoded_frames_bytes")
    return format_bytes(r["cache_bytes"]) + (f" ({r['cache_bytes'] / raw:.0%})" if raw else "")


def _fetch_decode(r, ctx):
    if r.get("fetch_ms_per_sample") is None:
        return "-"
    return f"{r['fetch_ms_per_sample']:.2f} / {r['decode_ms_per_sample']:.2f}"


def conversion_for(row: dict, payload: dict) -> dict | None:
    """The conversion this row's backend read: datapipe's, when the benchmark converted itself (the last row).

    Args:
        row: A result row.
        payload: Its result file.

    Returns:
        The conversion row, or ``None`` (another backend, or datapipe given shards or a cache directory).
    """
    conv = payload.get("conversion")
    if not conv or row.get("backend", "").split("#", 1)[0] != "datapipe":
        return None
    opts = (payload.get("settings") or {}).get("backend_kwargs") or {}
    dp = opts.get(row["backend"], opts.get("datapipe")) or {}
    return None if dp.get("shards") or dp.get("cache_dir") else conv[-1]


def _startup(r, ctx):
    if r.get("build_s") is None:
        return "-"
    conv = conversion_for(r, ctx["payload"])
    return f"{(conv['wall_s'] if conv else 0) + r['build_s'] + r['first_batch_s']:.1f}"


def _ratio(field, baseline):
    def f(r, ctx):
        v = (r.get("ratios") or {}).get(f"{field}_vs_{baseline}")
        return "-" if v is None else f"{v:.2f}x"

    return f


def error_cell(r: dict, width: int = 80) -> str:
    """A failed run in one cell: ``REFUSED: <why>`` when the backend refused before reading data (the footprint
    contract, ``core.footprint.ResourceRefused``), else ``FAILED: <last line>``.

    Args:
        r: The run's result (its ``error`` holds the child's output).
        width: Characters of the reason kept (a refusal keeps 20 more: it carries the numbers).

    Returns:
        The cell's text."""
    last = r["error"].strip().splitlines()[-1]
    if "ResourceRefused: " in last:
        return "REFUSED: " + last.split("ResourceRefused: ", 1)[1][: width + 20]
    return "FAILED: " + last[:width]


def _mem_ratio(baseline):
    def f(r, ctx):
        rr = r.get("ratios") or {}
        p, d = rr.get(f"peak_mem_bytes_vs_{baseline}"), rr.get(f"data_mem_bytes_vs_{baseline}")
        return "-" if p is None else f"{p:.1%} / " + ("-" if d is None else f"{d:.1%}")

    return f


def epoch_times(row: dict) -> list[float] | None:
    """Seconds per successive epoch: loader rows' ``epoch_times_s``, or a training row's ``epochs[].step_s``.

    Args:
        row: A result row.

    Returns:
        The times, or ``None`` when the row has none.
    """
    if row.get("epoch_times_s"):
        return list(row["epoch_times_s"])
    eps = row.get("epochs")
    if isinstance(eps, list) and eps and all(isinstance(e, dict) and e.get("step_s") is not None for e in eps):
        return [e["step_s"] for e in eps]
    return None


def _epochs(r, ctx):
    t = epoch_times(r)
    return "-" if not t else " / ".join(f"{x:.1f}" for x in t)


@dataclass(frozen=True)
class Column:
    """One column of a results table.

    Attributes:
        header: The column's header.
        cell: ``cell(row, ctx) -> str``; ``ctx["payload"]`` is the row's result file.
        numeric: Right-aligned.
    """

    header: str
    cell: object  # (row, ctx) -> str
    numeric: bool = True


COLUMNS = {
    "backend": Column("backend", lambda r, ctx: f"`{r['backend']}`", numeric=False),
    "batch_size": Column("batch", _get("batch_size")),
    "seq_length": Column("seq_length", _get("seq_length")),
    "frame_stack": Column("frame_stack", _get("frame_stack")),
    "preset": Column("delta_timestamps", _get("preset"), numeric=False),
    "num_workers": Column("workers", _get("num_workers")),
    "samples_per_s": Column("samples/s", _get("samples_per_s", _num(".0f"))),
    "frames_per_s": Column("frames/s", _get("decoded_frames_per_s", _num(".0f"))),
    "first_batch_s": Column("first batch (s)", _get("first_batch_s", _num(".2f"))),
    "build_s": Column("build (s)", _get("build_s", _num(".1f"))),
    "startup_s": Column("conversion + build + first batch (s)", _startup),
    "peak_mem": Column("peak mem", _mem("peak_mem_bytes")),
    # memory the run held (PSS of its anonymous pages, plus its RAM files), the page cache of files it maps left out
    "held_mem": Column("RAM held", _mem("peak_anon_bytes")),
    "shm": Column("/dev/shm", _mem("shm_bytes")),
    "disk": Column("disk used", _mem("peak_disk_bytes")),
    "data_mem": Column("data mem", _mem("data_mem_bytes")),
    "frames_stored": Column("frames stored (vs raw)", _stored),
    "latency": Column("batch ms p50/p95/p99", _latency),
    "fetch_decode": Column("ms/sample fetch / decode", _fetch_decode),
    "episode_mix": Column("episode mix", _get("episode_mix", _num(".2f"))),
    "num_samples": Column("samples", _get("num_samples")),
    "epoch_times_s": Column("epoch times (s)", _epochs),
    # training benchmark (benchmarks/harness/train/)
    "steps_per_s": Column("steps/s", _get("steps_per_s", _num(".3f"))),
    "stall_fraction": Column("data stall", _get("stall_fraction", _num(".1%"))),
    "first_epoch_s": Column("1st epoch (s)", _get("first_epoch_s", _num(".1f"))),
    "dataset_build_s": Column("data build (s)", _get("dataset_build_s", _num(".1f"))),
    "launch_to_epoch1_s": Column("launch to end of epoch 1 (s)", _get("time_to_first_epoch_end_s", _num(".1f"))),
}


def _rate(v: float) -> str:
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:.0f}"


CONVERSION_COLUMNS = {
    "workers": Column("convert workers", lambda r, ctx: str(r["workers"])),
    "wall_s": Column("wall (s)", lambda r, ctx: f"{r['wall_s']:.1f}"),
    "source_mb_per_s": Column("source MB/s", lambda r, ctx: _rate(r["source_mb_per_s"])),
    "decoded_mb_per_s": Column("decoded MB/s", lambda r, ctx: _rate(r["decoded_mb_per_s"])),
    "shards": Column("shards", lambda r, ctx: format_bytes(r["shards_bytes"])),
}


def column(name: str) -> Column:
    """The column of that name: one of :data:`COLUMNS`, or ``vs:``, ``mem_vs:``, ``data_mem_vs:``, ``steps_vs:``,
    ``launch_vs:`` followed by a baseline.

    Args:
        name: The column's name.

    Returns:
        The :class:`Column`.

    Raises:
        TableError: an unknown name (the message lists the known ones).
    """
    if name in COLUMNS:
        return COLUMNS[name]
    kind, _, baseline = name.partition(":")
    if baseline and kind == "vs":
        return Column(f"vs {baseline}", _ratio("samples_per_s", baseline))
    if baseline and kind == "mem_vs":
        return Column(f"mem vs {baseline} (peak / data)", _mem_ratio(baseline))
    if baseline and kind == "data_mem_vs":
        return Column(f"data mem vs {baseline}", _ratio("data_mem_bytes", baseline))
    if baseline and kind == "steps_vs":
        return Column(f"steps/s vs {baseline}", _ratio("steps_per_s", baseline))
    if baseline and kind == "launch_vs":
        return Column(f"launch to epoch 1 vs {baseline}", _ratio("time_to_first_epoch_end_s", baseline))
    raise TableError(
        f"unknown column {name!r}; columns: {', '.join(COLUMNS)}, vs:<baseline>, mem_vs:<baseline>, "
        "data_mem_vs:<baseline>, steps_vs:<baseline>, launch_vs:<baseline>"
    )


def default_columns(
    framework: str, rows: list[dict], varying: list[str], kind: str = "bench", base: list[str] | None = None
) -> list[str]:
    """The columns of ``robo-loaders bench``'s own table for that framework (or the training benchmark's).

    Args:
        framework: ``robomimic`` or ``lerobot``.
        rows: The rows shown (an epoch-times column is added when one has them).
        varying: The axes that differ between rows, shown first.
        kind: ``bench`` or ``training``.
        base: The baselines (default: those in ``rows``).

    Returns:
        Column names.
    """
    base = baselines_in(rows) if base is None else base
    if kind == "training":
        return (
            varying
            + [
                "backend",
                "steps_per_s",
                "samples_per_s",
                "stall_fraction",
                "first_epoch_s",
                "dataset_build_s",
                "launch_to_epoch1_s",
                "peak_mem",
            ]
            + [c for b in base for c in (f"steps_vs:{b}", f"launch_vs:{b}")]
        )
    if framework == "lerobot":
        cols = (
            ["backend", "samples_per_s", "frames_per_s"]
            + [f"vs:{b}" for b in base]
            + [
                "first_batch_s",
                "build_s",
                "frames_stored",
                "peak_mem",
                "data_mem",
                "latency",
                "fetch_decode",
                "episode_mix",
            ]
        )
    else:
        cols = (
            ["backend", "samples_per_s"]
            + [f"vs:{b}" for b in base]
            + ["first_batch_s", "build_s", "peak_mem", "data_mem"]
            + [f"mem_vs:{b}" for b in base[-1:]]
            + ["latency", "episode_mix"]
        )
    if any(epoch_times(r) for r in rows):
        cols.append("epoch_times_s")
    return varying + cols


def markdown_table(headers: list[str], rows: list[list[str]], numeric: list[bool]) -> str:
    """A markdown table (``|`` in cells escaped, newlines flattened).

    Args:
        headers: The header cells.
        rows: The body's cells, row by row.
        numeric: Per column, whether it is right-aligned.

    Returns:
        The table, without a final newline.
    """

    def esc(s):
        return str(s).replace("|", "\\|").replace("\n", " ")

    lines = [
        "| " + " | ".join(esc(h) for h in headers) + " |",
        "|" + "|".join("---:" if n else "---" for n in numeric) + "|",
    ]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _filter(rows: list[dict], opts: dict) -> list[dict]:
    for k in AXIS_KEYS:
        if k in opts:
            rows = [r for r in rows if str(r.get(k)) == opts[k]]
    if "backends" in opts:
        wanted = [b for b in opts["backends"].split(",") if b]
        rows = sorted((r for r in rows if r["backend"] in wanted), key=lambda r: wanted.index(r["backend"]))
    return rows


def results_table(payloads: list[dict], opts: dict | None = None) -> str:
    """A markdown table of the rows of one or more result files.

    Args:
        payloads: Loaded results (:func:`load_result`) of one framework.
        opts: The README marker's options (see the module's docstring); ``None``: the default table.

    Returns:
        The table.

    Raises:
        TableError: a cost-growth result (its tables are the project harness's); mixed frameworks, or training with
            loader-only results; no rows match; no conversion rows; an unknown table or column.
    """
    opts = dict(opts or {})
    table = opts.get("table", "results")
    growth = [p["_path"] for p in payloads if p["_kind"].startswith("growth")]
    if growth:  # issue 22's cost-growth results: the harness's tables (benchmarks/harness/growth_plots.py)
        raise TableError(
            f"{', '.join(growth)}: cost-growth results have their tables in the project's harness "
            "(`python -m benchmarks.harness readme DOC.md` or `growth report`, from a clone)"
        )
    frameworks = {p.get("framework") for p in payloads}
    if len(frameworks) > 1:
        raise TableError(f"one table cannot mix frameworks ({sorted(frameworks)})")
    framework = frameworks.pop()
    if table == "conversion":
        rows, ctx_rows = [], []
        for p in payloads:
            for c in p.get("conversion") or []:
                rows.append(c)
                ctx_rows.append(p)
        if not rows:
            raise TableError(f"{', '.join(p['_path'] for p in payloads)}: no conversion rows")
        names = opts["columns"].split(",") if "columns" in opts else list(CONVERSION_COLUMNS)
        cols = []
        for n in names:
            if n not in CONVERSION_COLUMNS:
                raise TableError(f"unknown conversion column {n!r}; columns: {', '.join(CONVERSION_COLUMNS)}")
            cols.append(CONVERSION_COLUMNS[n])
        body = [[c.cell(r, {"payload": p}) for c in cols] for r, p in zip(rows, ctx_rows)]
        return markdown_table([c.header for c in cols], body, [c.numeric for c in cols])
    pairs = [(r, p) for p in payloads for r in _filter(rows_of(p), opts)]
    if not pairs:
        raise TableError(f"{', '.join(p['_path'] for p in payloads)}: no rows match {opts}")
    rows = [r for r, _ in pairs]
    if table == "pivot":
        return _pivot(pairs, opts)
    if table != "results":
        raise TableError(f"table={table!r}: expected results, conversion or pivot")
    varying = [k for k in AXIS_KEYS if len({json.dumps(r.get(k)) for r in rows}) > 1]
    kinds = {p["_kind"] for p in payloads}
    if "training" in kinds and len(kinds) > 1:
        raise TableError("one table cannot mix training and loader-only results (report both, labelled)")
    kind = kinds.pop()
    base = unique_in_order([b for p in payloads for b in baselines_in(rows_of(p), p)]) if kind == "training" else None
    names = opts["columns"].split(",") if "columns" in opts else default_columns(framework, rows, varying, kind, base)
    cols = [column(n) for n in names]
    body = []
    keys = AXIS_KEYS + ("backend", "frame_stack")
    first_metric = next((i for i, n in enumerate(names) if n not in keys), None)
    for r, p in pairs:
        ctx = {"payload": p}
        if r.get("error"):
            err = error_cell(r)
            body.append(
                [
                    c.cell(r, ctx) if names[i] in keys else (err if i == first_metric else "-")
                    for i, c in enumerate(cols)
                ]
            )
        else:
            body.append([c.cell(r, ctx) for c in cols])
    return markdown_table([c.header for c in cols], body, [c.numeric for c in cols])


def _pivot(pairs, opts) -> str:
    by = opts.get("by")
    if by not in AXIS_KEYS:
        raise TableError(f"table=pivot needs by=<axis>, one of {', '.join(AXIS_KEYS)}")
    value = column(opts.get("value", "samples_per_s"))
    backends, values, cells = [], [], {}
    for r, p in pairs:
        if r["backend"] not in backends:
            backends.append(r["backend"])
        if r.get(by) not in values:
            values.append(r.get(by))
        key = (r["backend"], r.get(by))
        if key in cells:
            raise TableError(
                f"table=pivot by={by}: several rows for backend {r['backend']} at {by}={r.get(by)}; "
                f"fix the other axes ({', '.join(k for k in AXIS_KEYS if k != by)}=...)"
            )
        cells[key] = "FAILED" if r.get("error") else value.cell(r, {"payload": p})
    if isinstance(values[0], (int, float)):
        values.sort()
    headers = ["backend"] + [f"{AXIS_LABEL[by]} {v}" for v in values]
    body = [[f"`{b}`"] + [cells.get((b, v), "-") for v in values] for b in backends]
    return markdown_table(headers, body, [False] + [True] * len(values))


def unique_in_order(values):
    """``values`` without repeats, in first-seen order.

    Args:
        values: Any iterable of comparable values.

    Returns:
        A list.
    """
    out = []
    for v in values:
        if v not in out:
            out.append(v)
    return out
