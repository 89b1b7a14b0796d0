"""``robo-loaders`` command line (click)."""
from __future__ import annotations

import json
import sys

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="robo-loaders-plugin")
def main():
    """Faster, lighter dataset backends for robomimic and LeRobot."""


@main.command("list")
@click.option("--json", "as_json", is_flag=True, help="print a JSON list instead of a table")
def list_cmd(as_json):
    """List the registered backends (built-in and from the robo_loaders entry-point group)."""
    from tabulate import tabulate

    from robo_loaders_plugin.registry import get_backend, list_backends

    specs = [get_backend(n).as_dict() for n in list_backends()]
    if as_json:
        click.echo(json.dumps(specs, indent=2))
        return
    rows = [[s["name"], s["kind"], ",".join(s["frameworks"]), "yes" if s["needs_gpu"] else "no",
             "yes" if s["lossless"] else "no", s["plugin"], s["description"]] for s in specs]
    click.echo(tabulate(rows, headers=["name", "kind", "frameworks", "GPU", "lossless", "plugin", "description"]))


@main.group("sample-data")
def sample_data():
    """Write small synthetic datasets (no network, no simulator)."""


@sample_data.command("robomimic")
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("--demos", default=10, show_default=True, type=click.IntRange(min=1))
@click.option("--image-size", default=84, show_default=True, type=click.IntRange(min=8))
@click.option("--cameras", default=2, show_default=True, type=click.IntRange(min=0))
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--min-length", default=40, show_default=True, type=click.IntRange(min=1))
@click.option("--max-length", default=60, show_default=True, type=click.IntRange(min=1))
@click.option("--no-next-obs", is_flag=True, help="omit next_obs/ (like dataset_states_to_obs --exclude-next-obs)")
def sample_data_robomimic(out, demos, image_size, cameras, seed, min_length, max_length, no_next_obs):
    """Write a robomimic-format HDF5 file to OUT."""
    from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5

    if min_length > max_length:
        raise click.BadParameter(f"--min-length {min_length} > --max-length {max_length}")
    write_robomimic_hdf5(out, demos=demos, image_size=image_size, cameras=cameras, seed=seed,
                         min_length=min_length, max_length=max_length, next_obs=not no_next_obs)
    click.echo(f"wrote {out}")


@main.command("robomimic-train", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.pass_context
def robomimic_train(ctx):
    """Run robomimic's unmodified training script with the plugin's patches applied (for users who disabled
    the import hook with ROBO_LOADERS_DISABLE=1). All arguments go to robomimic.scripts.train."""
    from robo_loaders_plugin.robomimic.train_cli import run_robomimic_train

    run_robomimic_train(list(ctx.args))


@main.group("bench")
def bench():
    """Measure backends against the native loader in one run."""


def _parse_kwargs(values):
    out = {}
    for v in values:
        name, sep, payload = v.partition("=")
        if not sep:
            raise click.BadParameter(f"{v!r}: expected BACKEND='{{json}}'")
        try:
            out[name] = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f"{v!r}: {exc}") from None
    return out


@bench.command("robomimic")
@click.option("--dataset", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--backends", default="native:low_dim,native:all,compressed_cache", show_default=True,
              help="comma-separated; native:<hdf5_cache_mode> (low_dim, all, none) selects robomimic's cache mode")
@click.option("--seq-length", default=10, show_default=True, type=click.IntRange(min=1))
@click.option("--frame-stack", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--batch-size", default=64, show_default=True, type=click.IntRange(min=1))
@click.option("--num-workers", default=2, show_default=True, type=click.IntRange(min=0))
@click.option("--batches", default=100, show_default=True, type=click.IntRange(min=1))
@click.option("--obs-keys", default=None, help="comma-separated obs keys (default: every obs key in the file)")
@click.option("--backend-kwargs", "backend_kwargs", multiple=True, metavar="BACKEND='{json}'",
              help="options for one backend, e.g. compressed_cache='{\"codec\": \"zstd\"}'")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="also write results here")
def bench_robomimic_cmd(dataset, backends, seq_length, frame_stack, batch_size, num_workers, batches, obs_keys,
                        backend_kwargs, json_out):
    """samples/s, first-batch latency, peak memory and batch latency percentiles of robomimic backends."""
    from robo_loaders_plugin.bench.robomimic_bench import bench_robomimic

    try:
        payload = bench_robomimic(dataset, [b.strip() for b in backends.split(",") if b.strip()], seq_length,
                                  frame_stack, batch_size, num_workers, batches, _parse_kwargs(backend_kwargs),
                                  json_out, obs_keys.split(",") if obs_keys else None, echo=click.echo)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if any(r.get("error") for r in payload["results"]):
        sys.exit(1)


def _run():
    from robo_loaders_plugin.spec import RoboLoadersError

    try:
        main(standalone_mode=True)
    except RoboLoadersError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
