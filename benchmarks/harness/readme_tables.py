"""The README's tables regenerated from committed benchmark results, between markers (the project's own tooling;
``python -m benchmarks.harness readme README.md [--check]``).

A README table is written between two HTML comments (invisible once rendered)::

    <!-- robo-loaders:table robomimic_lift_w2 columns=backend,samples_per_s,vs:native:low_dim,peak_mem -->
    (generated: replaced on every run)
    <!-- /robo-loaders:table -->

The first word names one result file, or several joined by commas (rows concatenated in that order): a name is
``<results dir>/<name>.json`` (``benchmarks/results`` beside the README unless told otherwise), or a path relative
to the README when it contains ``/`` or ends in ``.json``. Options, ``key=value`` separated by spaces: those of
``robo_loaders_plugin.bench.tables.results_table`` (``columns``, ``table``, ``backends``, ``by``, ``value`` and the
axis filters; a cost-growth result's tables are ``growth_plots.growth_table``'s: ``table=results`` or ``goals``), and
``source=no``: leave out the line under the table naming the file(s), the machine and the settings.

Markers inside fenced code blocks are left alone (so documentation can show them). Regeneration is idempotent, and
a marker naming a missing file, an unknown column or option, or an unclosed marker fails before anything is written.
"""

from __future__ import annotations

import os
import re

from robo_loaders_plugin.bench.tables import (
    AXIS_KEYS,
    TableError,
    load_result,
    machine_caption,
    results_table,
    settings_parts,
    unique_in_order,
)
from robo_loaders_plugin.core.files import atomic_write_bytes

OPEN = re.compile(r"^\s*<!--\s*robo-loaders:table\s+(?P<spec>.*?)\s*-->\s*$")
CLOSE = re.compile(r"^\s*<!--\s*/robo-loaders:table\s*-->\s*$")
ANY_MARKER = re.compile(r"<!--\s*/?\s*robo-loaders:table")
FENCE = re.compile(r"^\s*(```|~~~)")
OPTIONS = {"columns", "table", "backends", "by", "value", "source"} | set(AXIS_KEYS)


def source_note(payloads: list[dict], base_dir: str) -> str:
    """One line naming the file(s), the machine(s) and the settings behind a table."""

    def rel(p):
        return os.path.relpath(p["_path"], base_dir).replace(os.sep, "/")

    files = ", ".join(f"`{rel(p)}`" for p in payloads)
    machines = unique_in_order([machine_caption(p.get("machine")) for p in payloads])
    if len(machines) == 1:
        machine = f"Machine: {machines[0]}."
    else:
        machine = "Machines: " + "; ".join(f"`{rel(p)}`: {machine_caption(p.get('machine'))}" for p in payloads) + "."
    parts = [settings_parts(p) for p in payloads]
    common = [x for x in parts[0] if all(x in q for q in parts)]
    rest = [(p, [x for x in q if x not in common]) for p, q in zip(payloads, parts)]
    settings = ", ".join(common)
    if any(r for _, r in rest):
        settings += ("; " if settings else "") + "; ".join(f"`{rel(p)}`: {', '.join(r)}" for p, r in rest if r)
    return f"<sub>From {files}. {machine} Settings: {settings}.</sub>"


def parse_spec(spec: str, where: str) -> tuple[list[str], dict]:
    words = spec.split()
    if not words or "=" in words[0]:
        raise TableError(
            f"{where}: the marker must start with the result file name(s): "
            "<!-- robo-loaders:table NAME[,NAME...] [key=value ...] -->"
        )
    opts = {}
    for w in words[1:]:
        k, sep, v = w.partition("=")
        if not sep or k not in OPTIONS:
            raise TableError(f"{where}: unknown marker option {w!r}; options: {', '.join(sorted(OPTIONS))}")
        opts[k] = v
    return [n for n in words[0].split(",") if n], opts


def resolve(name: str, results_dir: str, base_dir: str) -> str:
    if "/" in name or name.endswith(".json"):
        return os.path.normpath(os.path.join(base_dir, name))
    return os.path.join(results_dir, f"{name}.json")


def render_block(spec: str, results_dir: str, base_dir: str, where: str) -> str:
    names, opts = parse_spec(spec, where)
    payloads = []
    for n in names:
        path = resolve(n, results_dir, base_dir)
        if not os.path.exists(path):
            raise TableError(
                f"{where}: the marker names result {n!r}, but {path} does not exist (results directory: {results_dir})"
            )
        try:
            payloads.append(load_result(path))
        except TableError as exc:
            raise TableError(f"{where}: {exc}") from None
    if any(p["_kind"] == "loss_curves" for p in payloads):
        raise TableError(f"{where}: loss-curve files have no README table (plot them with robo-loaders report)")
    try:
        growth = [p for p in payloads if p["_kind"].startswith("growth")]
        costs = [p for p in payloads if p["_kind"] == "sample_costs"]
        if costs:  # issue 45's per-sample costs: their own table (benchmarks/sample_costs.py)
            from benchmarks.sample_costs import costs_table

            table = "\n".join(costs_table(p) for p in costs)
        elif growth:  # issue 22's cost-growth results: their own tables (growth_plots.py)
            from benchmarks.harness.growth_plots import growth_table

            table = "\n".join(growth_table(p, opts.get("table", "results")) for p in growth)
        else:
            table = results_table(payloads, opts)
    except TableError as exc:
        raise TableError(f"{where}: {exc}") from None
    if opts.get("source", "yes") not in ("yes", "no"):
        raise TableError(f"{where}: source= takes yes or no")
    note = "" if opts.get("source") == "no" else "\n\n" + source_note(payloads, base_dir)
    return f"\n{table}{note}\n\n"


def regenerate(text: str, results_dir: str, base_dir: str, filename: str = "README.md") -> tuple[str, list[str]]:
    """``text`` with every marked table regenerated, and the specs of the tables whose content changed."""
    lines = text.splitlines(keepends=True)
    out, changed, i, fence = [], [], 0, None
    while i < len(lines):
        line = lines[i]
        f = FENCE.match(line)
        if f:
            fence = None if fence == f.group(1) else (fence or f.group(1))
        m = OPEN.match(line) if fence is None else None
        if fence is None and not m and CLOSE.match(line):
            raise TableError(f"{filename}:{i + 1}: closing <!-- /robo-loaders:table --> without an opening marker")
        if fence is None and not m and not CLOSE.match(line) and ANY_MARKER.search(line):
            raise TableError(
                f"{filename}:{i + 1}: malformed robo-loaders:table marker (it must be alone on its "
                f"line: <!-- robo-loaders:table NAME [key=value ...] -->): {line.strip()}"
            )
        out.append(line)
        i += 1
        if not m:
            continue
        where = f"{filename}:{i}"
        j = i
        while j < len(lines) and not CLOSE.match(lines[j]):
            if OPEN.match(lines[j]):
                raise TableError(
                    f"{where}: marker not closed before the next one at line {j + 1} (add <!-- /robo-loaders:table -->)"
                )
            j += 1
        if j == len(lines):
            raise TableError(f"{where}: marker not closed (add <!-- /robo-loaders:table --> after it)")
        block = render_block(m.group("spec"), results_dir, base_dir, where)
        if "".join(lines[i:j]) != block:
            changed.append(m.group("spec"))
        out += [block, lines[j]]
        i = j + 1
    return "".join(out), changed


def update_readme(readme: str, results_dir: str | None = None, check: bool = False) -> list[str]:
    """Regenerate the marked tables of ``readme`` in place (unless ``check``); returns the specs of the tables that
    changed (were out of date). ``results_dir`` defaults to ``benchmarks/results`` beside the README."""
    base_dir = os.path.dirname(os.path.abspath(readme))
    results_dir = os.path.abspath(results_dir) if results_dir else os.path.join(base_dir, "benchmarks", "results")
    with open(readme) as f:
        text = f.read()
    new, changed = regenerate(text, results_dir, base_dir, os.path.basename(readme))
    if changed and not check:
        atomic_write_bytes(readme, new.encode("utf-8"))
    return changed
