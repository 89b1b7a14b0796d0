"""``python -m benchmarks.harness``: the project's benchmark tooling, run from the repository root.

Why not ``robo-loaders`` subcommands: a user benchmarks their own loader (``robo-loaders bench robomimic|lerobot``)
and plots results (``robo-loaders report``), and those stay in the package. What is here measures the project
itself: the matrix over batch size x window x workers, the decoder alone on CPU and NVDEC, the training-time
benchmark through the frameworks' own training scripts, and the README's tables regenerated from the committed
results (docs/benchmarks.md, docs/training-benchmark.md).
"""

from __future__ import annotations

import dataclasses
import os
import sys

import click

from benchmarks.harness.decode import decode_cmd
from benchmarks.harness.matrix import matrix_group
from benchmarks.harness.train.commands import lerobot_train_command, robomimic_train_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main():
    """The project's benchmark harness (matrix, decoder, training benchmark, README tables)."""


@main.group("train")
def train_group():
    """Training-time benchmark: the frameworks' real training loops per backend (docs/training-benchmark.md)."""


train_group.add_command(robomimic_train_command)
train_group.add_command(lerobot_train_command)
main.add_command(matrix_group)
main.add_command(decode_cmd)


@main.group("growth")
def growth_group():
    """Cost growth with the number of frames: workloads of 10k, 100k and 1M frames, every backend on each
    (issue 22; docs/benchmarks.md)."""


@growth_group.command("workloads")
@click.option("--kinds", default="lerobot,robomimic,robomimic_image", show_default=True)
@click.option("--sizes", default="10k,100k,1m", show_default=True)
def growth_workloads_cmd(kinds, sizes):
    """Generate the missing workloads into $ROBO_LOADERS_WORKLOADS (default /work/workloads) and print their
    frames, size and generation time (recorded in workloads.json there)."""
    from benchmarks.harness.growth import all_workloads, generate

    for r in generate(all_workloads(tuple(kinds.split(",")), tuple(sizes.split(",")))):
        click.echo(
            f"{r['name']}: {r['frames']} frames, {r['bytes'] / 2**20:.0f} MiB, generated in {r['generate_s']:.0f} s"
        )


@growth_group.command("run")
@click.argument("kind", type=click.Choice(["lerobot", "robomimic", "robomimic_image"]))
@click.option("--sizes", default=None, help="default: 10k,100k,1m (robomimic_image: 10k,100k)")
@click.option("--backends", default="native,compressed_cache,datapipe,gpu_resampler,video_stream", show_default=True)
@click.option("--batches", default=60, show_default=True, type=click.IntRange(min=1))
@click.option("--full-pass", is_flag=True, help="time one whole pass per run (LeRobotDataset itself still sampled)")
@click.option("--json", "json_out", required=True, type=click.Path(dir_okay=False))
def growth_run_cmd(kind, sizes, backends, batches, full_pass, json_out):
    """Every backend at every size of workload KIND; results (kind: growth) for `growth report`."""
    from benchmarks.harness.growth import Settings, run_growth

    sizes = sizes.split(",") if sizes else (["10k", "100k"] if kind == "robomimic_image" else ["10k", "100k", "1m"])
    run_growth(
        kind,
        sizes,
        [b.strip() for b in backends.split(",") if b.strip()],
        Settings(batches=batches, full_pass=full_pass),
        json_out,
        echo=click.echo,
    )


@growth_group.command("page-cache")
@click.argument("kind", type=click.Choice(["lerobot", "robomimic", "robomimic_image"]))
@click.option("--sizes", default="10k,1m", show_default=True)
@click.option("--backends", default="compressed_cache,datapipe", show_default=True)
@click.option("--json", "json_out", required=True, type=click.Path(dir_okay=False))
def growth_page_cache_cmd(kind, sizes, backends, json_out):
    """A full pass of each backend that serves from files it writes, with them evicted from the page cache and
    read into it first: how much of its speed at each size is the disk's (docs/benchmarks.md)."""
    from benchmarks.harness.growth import Settings, Workload, page_cache_passes
    from robo_loaders_plugin.bench.report import machine
    from robo_loaders_plugin.core.files import atomic_write_json

    s = Settings(full_pass=True)
    payload = {
        "kind": "growth_page_cache",
        "framework": Workload(kind, "10k").framework,
        "workload": kind,
        "machine": machine(),
        "settings": dataclasses.asdict(s),
        "rows": [],
    }
    for size in sizes.split(","):
        payload["rows"] += page_cache_passes(
            Workload(kind, size.strip()), [b.strip() for b in backends.split(",") if b.strip()], s, echo=click.echo
        )
        atomic_write_json(json_out, payload, indent=1)
    click.echo(f"wrote {json_out}")


@growth_group.command("profile")
@click.argument("kind", type=click.Choice(["lerobot", "robomimic", "robomimic_image"]))
@click.argument("size")
@click.argument("backend")
@click.option("--kwargs", "kwargs_json", default="{}", help="the backend's options, a JSON object")
@click.option(
    "--batches",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="profile this many batches in steady state (after 50) instead of the start-up",
)
@click.option("--out", "out_path", type=click.Path(dir_okay=False), help="write the profile here (text)")
def growth_profile_cmd(kind, size, backend, kwargs_json, batches, out_path):
    """cProfile of BACKEND's factory call, first batch (no workers) and pass planning on workload KIND at SIZE:
    where its start-up goes (docs/benchmarks.md, "what profiling found"); with --batches, of that many batches
    in steady state instead: where its time per batch goes."""
    import json
    import subprocess
    import sys
    import tempfile

    from benchmarks.harness.growth import Settings, Workload, child_args

    w = Workload(kind, size)
    args = dict(child_args(w, backend, json.loads(kwargs_json), Settings()), profile=True, profile_batches=batches)
    with tempfile.TemporaryDirectory() as tmp:
        res = os.path.join(tmp, "out.json")
        subprocess.run([sys.executable, "-m", "benchmarks.harness.growth_child", json.dumps(args), res], check=True)
        with open(res) as f:
            prof = json.load(f)
    if batches:
        text = (
            f"{backend} on {w.name}: {batches} batches after 50, {prof['samples_per_s']:.0f} samples/s in "
            f"one process (cProfile on)\n\n{prof['by_tottime']}\n{prof['by_cumulative']}"
        )
    else:
        plan = prof["plan_cpu_s"] if prof["plan_cpu_s"] is None else round(prof["plan_cpu_s"], 3)
        text = (
            f"{backend} on {w.name}: factory {prof['build_s']:.2f} s, to first batch "
            f"{prof['to_first_batch_s']:.2f} s, planning a pass {plan} s CPU\n\n{prof['by_tottime']}\n"
            f"{prof['by_cumulative']}"
        )
    if out_path:
        with open(out_path, "w") as f:
            f.write(text)
    click.echo(text)


@growth_group.command("findings")
@click.option("--json", "json_out", default="benchmarks/results/growth/profiling_findings.json", show_default=True)
def growth_findings_cmd(json_out):
    """The O(dataset) costs profiling found, each timed before and after on the million-frame workloads."""
    from benchmarks.harness.growth_findings import findings

    findings(json_out, echo=click.echo)


@growth_group.command("convert")
@click.option("--kinds", default="lerobot,robomimic", show_default=True)
@click.option("--size", default="1m", show_default=True)
@click.option("--json", "json_out", required=True, type=click.Path(dir_okay=False))
def growth_convert_cmd(kinds, size, json_out):
    """Conversion at size: 2 workers on the local and datatrove executors, and a killed run resumed."""
    import tempfile

    from benchmarks.harness.growth import Workload, convert_at_size, generate, workloads_root
    from robo_loaders_plugin.bench.report import machine
    from robo_loaders_plugin.core.files import atomic_write_json

    results = []
    for kind in kinds.split(","):
        w = Workload(kind, size)
        generate([w], echo=click.echo)
        scratch = tempfile.mkdtemp(prefix=".growth-convert-", dir=workloads_root())
        try:
            results.append(convert_at_size(w, scratch, echo=click.echo))
        finally:
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)
        atomic_write_json(
            json_out,
            {
                "kind": "growth_conversion",
                "framework": "robomimic and LeRobot",
                "machine": machine(),
                "results": results,
            },
            indent=1,
        )
    click.echo(f"wrote {json_out}")


@growth_group.command("report")
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--out",
    "out_dir",
    required=True,
    metavar="DIR",
    type=click.Path(file_okay=False),
    help="write the log-log plots and report.md for RESULTS here",
)
def growth_report_cmd(results, out_dir):
    """Tables and log-log plots of cost-growth results (growth run, findings, convert); other files given are
    skipped with one line each. The committed benchmarks/results/growth/plots/ are its <stem>_growth.png."""
    from benchmarks.harness.growth_plots import growth_report
    from robo_loaders_plugin.bench.tables import TableError

    skipped: list = []
    try:
        path = growth_report(results, out_dir, skipped)
    except TableError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        for line in skipped:
            click.echo(f"skipped {line}")
    click.echo(f"wrote {path}")


@main.command("readme")
@click.argument("readme", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--results-dir",
    type=click.Path(exists=True, file_okay=False),
    help="where the markers' names are looked up (default: benchmarks/results beside the README)",
)
@click.option("--check", is_flag=True, help="change nothing, exit 1 if a table is out of date")
def readme_cmd(readme, results_dir, check):
    """Regenerate the tables between <!-- robo-loaders:table NAME ... --> markers in README (or check them)."""
    from benchmarks.harness.readme_tables import update_readme
    from robo_loaders_plugin.bench.tables import TableError

    try:
        changed = update_readme(readme, results_dir, check=check)
    except TableError as exc:
        raise click.ClickException(str(exc)) from None
    for spec in changed:
        click.echo(f"{'out of date' if check else 'updated'}: table {spec}")
    if not changed:
        click.echo(f"{readme}: every table is up to date")
    if check and changed:
        sys.exit(1)


def run():
    """``main`` with the package's errors (a bad dataset, an option a backend refuses) as one line, exit status 2, as
    ``robo-loaders`` reports them."""
    from robo_loaders_plugin.core.errors import RoboLoadersError

    try:
        main(standalone_mode=True)
    except RoboLoadersError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
