"""``python -m benchmarks.harness``: the project's benchmark tooling, run from the repository root.

Why not ``robo-loaders`` subcommands: a user benchmarks their own loader (``robo-loaders bench robomimic|lerobot``)
and plots results (``robo-loaders report``), and those stay in the package. What is here measures the project
itself: the matrix over batch size x window x workers, the decoder alone on CPU and NVDEC, the training-time
benchmark through the frameworks' own training scripts, and the README's tables regenerated from the committed
results (docs/benchmarks.md, docs/training-benchmark.md).
"""
from __future__ import annotations

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


@main.command("readme")
@click.argument("readme", type=click.Path(exists=True, dir_okay=False))
@click.option("--results-dir", type=click.Path(exists=True, file_okay=False),
              help="where the markers' names are looked up (default: benchmarks/results beside the README)")
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
