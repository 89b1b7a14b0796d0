"""``robo-loaders`` command line (click).

A command's ``--help`` is its docstring up to the first section (``Args:``, ``Raises:``, ``Note:``): the sections
are for readers of the code (``core.command_help``, the class of every command here and of those loaded lazily).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys

import click

from robo_loaders_plugin.core.codecs import CODECS, DEFAULT_CODEC
from robo_loaders_plugin.core.command_help import Command


class _LazyGroup(click.Group):
    """A click group whose commands defined in other modules are imported only when looked up (when that command
    runs, or a help listing names it), as click documents for lazily loaded subcommands: ``robo-loaders list`` or
    ``doctor`` does not import ``robo_loaders_plugin.bench`` (the report's plots and tables) or the transcoder.

    ``lazy_subcommands`` maps a command's name to ``"module.attribute"``, the click command to import. Its commands
    are :class:`~robo_loaders_plugin.core.command_help.Command` (help cut where the docstring's sections begin) and
    its subgroups of its own class.
    """

    command_class = Command
    group_class = type

    def __init__(self, *args, lazy_subcommands: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy_subcommands = dict(lazy_subcommands or {})

    def list_commands(self, ctx):
        return sorted([*super().list_commands(ctx), *self.lazy_subcommands])

    def get_command(self, ctx, cmd_name):
        if cmd_name in self.lazy_subcommands:
            module, _, attribute = self.lazy_subcommands[cmd_name].rpartition(".")
            return getattr(importlib.import_module(module), attribute)
        return super().get_command(ctx, cmd_name)


# Subcommands in their own modules, imported when they run. The project's own benchmark tooling (matrix, decoder
# alone, training benchmark, cost growth, README tables) is not a user command: it lives beside the package in
# benchmarks/harness (docs/architecture.md says why).
LAZY_COMMANDS = {
    "report": "robo_loaders_plugin.bench.plots.report_cmd",
    "transcode": "robo_loaders_plugin.tools.transcode.transcode_cmd",
}


@click.group(cls=_LazyGroup, lazy_subcommands=LAZY_COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="robo-loaders-plugin")
def main():
    """Faster, lighter dataset backends for robomimic and LeRobot."""


@main.command("list")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="print every backend with its per-framework kind, lossless promise, GPU use and options as JSON",
)
def list_cmd(as_json):
    """List the registered backends (built-in and from the robo_loaders entry-point group): one row per backend
    and framework, then what each backend does. Exits with status 1, after the backends that work, when a
    third-party plugin was skipped or one of its backends refused: one error line each on stderr.

    Args:
        as_json: ``--json``: print every backend's spec (``BackendSpec.as_dict``) as JSON instead of the table.

    Note:
        Why status 1 (``core.registry`` skips and refuses): an installation check (a CI step, a setup script) must
        see that a plugin it installed does not work; the list still shows everything usable.
    """
    import textwrap
    import warnings

    from tabulate import tabulate

    from robo_loaders_plugin.core.registry import get_backend, list_backends, refused_backends, rejected_plugins

    with warnings.catch_warnings():  # said once below, as error lines, rather than as warnings too
        warnings.simplefilter("ignore")
        specs = [get_backend(n).as_dict() for n in list_backends()]
    problems = list(rejected_plugins().values()) + list(refused_backends().values())
    if as_json:
        click.echo(json.dumps(specs, indent=2, default=str))
        _report_problems(problems)
        return
    rows = [
        [s["name"], fw, s["kind"][fw], s["gpu"][fw], SHORT_LOSSLESS.get(s["lossless"][fw], s["lossless"][fw])]
        for s in specs
        for fw in s["frameworks"]
    ]
    click.echo(tabulate(rows, headers=["backend", "framework", "kind", "GPU", "lossless"]))
    width = _width()
    click.echo("")
    for s in specs:
        plugin = "" if s["plugin"] == "builtin" else f" (plugin {s['plugin']})"
        click.echo(textwrap.fill(f"{s['name']}{plugin}: {s['description']}", width=width, subsequent_indent="  "))
    click.echo(textwrap.fill("Options: 'robo-loaders list --json', or docs/backends.md.", width=width))
    _report_problems(problems)


def _width() -> int:
    """The width text is wrapped to: the terminal's, at most 100 columns (80 without a terminal)."""
    import shutil

    return min(100, shutil.get_terminal_size((80, 24)).columns)


def _report_problems(problems: list[str]) -> None:
    """One line on stderr per skipped plugin or refused backend (each once: a skipped plugin's backends are refused
    with its line), then exit status 1 (the working backends were listed): a plugin author sees what is wrong
    here, not at the first training run."""
    for line in dict.fromkeys(problems):
        click.echo(f"error: {line}", err=True)
    if problems:
        raise SystemExit(1)


SHORT_LOSSLESS = {"yes on the CPU; not bit-identical with NVDEC": "CPU: yes, NVDEC: no"}


@main.group("sample-data")
def sample_data():
    """Write small synthetic datasets (no network, no simulator). An existing OUT is replaced only with
    --overwrite, and only when it is a dataset sample-data could have written."""


def _check_sample_output(out: str, framework: str, overwrite: bool) -> None:
    """Refuse an existing OUT in one line naming it and ``--overwrite`` (``sample_data.outputs``), before anything
    is drawn or written."""
    from robo_loaders_plugin.core.paths import writable_parent_problem
    from robo_loaders_plugin.sample_data.outputs import OutputExistsError, check_output

    try:
        check_output(out, framework, overwrite, "--overwrite")
    except OutputExistsError as exc:
        raise click.ClickException(str(exc)) from None
    # a read-only or full location: one line now, not an OSError traceback after the data was drawn
    problem = writable_parent_problem(out)
    if problem:
        raise click.ClickException(f"{out}: {problem}; choose a location you can write to")


def _quiet_writers() -> None:
    """LeRobot's writer prints ~16 lines of SVT-AV1 banner and settings per encoded video, a ``datasets`` "Map:"
    bar per episode and FFmpeg's "moving the moov atom" per appended episode (81 of the 99 lines of a 5-episode
    sample): the encoder's log is limited to its errors (``SVT_LOG=1``, read when each encoder starts; a value the
    user set is kept), the bars are off, and FFmpeg logs errors only (LeRobot hands logging back to FFmpeg's own
    printer after each encode). Errors still reach stderr."""
    import os

    os.environ.setdefault("SVT_LOG", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    try:
        import av.logging
    except ImportError:  # LeRobot's writer imports PyAV itself: its own error says what is missing
        return
    av.logging.set_libav_level(av.logging.ERROR)


@sample_data.command("robomimic")
@click.argument("out", type=click.Path())
@click.option("--demos", default=10, show_default=True, type=click.IntRange(min=1))
@click.option("--image-size", default=84, show_default=True, type=click.IntRange(min=8))
@click.option("--cameras", default=2, show_default=True, type=click.IntRange(min=0))
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--min-length", default=40, show_default=True, type=click.IntRange(min=1))
@click.option("--max-length", default=60, show_default=True, type=click.IntRange(min=1))
@click.option("--no-next-obs", is_flag=True, help="omit next_obs/ (like dataset_states_to_obs --exclude-next-obs)")
@click.option(
    "--content",
    type=click.Choice(["renders", "camera"]),
    default="renders",
    show_default=True,
    help="renders: simulator-like frames; camera: like a real camera (texture, shake, sensor noise)",
)
@click.option(
    "--noise",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="--content camera: sensor noise, sigma in grey levels",
)
@click.option(
    "--overwrite", is_flag=True, help="replace OUT if it is a robomimic HDF5 file (anything else is never replaced)"
)
def sample_data_robomimic(
    out, demos, image_size, cameras, seed, min_length, max_length, no_next_obs, content, noise, overwrite
):
    """Write a robomimic-format HDF5 file to OUT (docs/scale.md: the large workloads, their time and disk).

    Args:
        out: OUT, the HDF5 file written.
        demos: ``--demos``, the number of demos.
        image_size: ``--image-size``, the side of the square camera images in pixels.
        cameras: ``--cameras``, the number of RGB cameras (0: low-dimensional observations only).
        seed: ``--seed`` of the random generator.
        min_length: ``--min-length``, the shortest demo in steps.
        max_length: ``--max-length``, the longest demo in steps.
        no_next_obs: ``--no-next-obs``: write no ``next_obs/`` group.
        content: ``--content``: ``renders`` (simulator-like frames) or ``camera`` (like a real camera).
        noise: ``--noise``, the sensor noise of ``--content camera`` (sigma in grey levels).
        overwrite: ``--overwrite`` an existing robomimic HDF5 file at OUT.

    Raises:
        click.BadParameter: ``--min-length`` is greater than ``--max-length``.
        click.ClickException: OUT exists and ``--overwrite`` was not given, or OUT is not a robomimic HDF5 file.
    """
    from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5

    if min_length > max_length:
        raise click.BadParameter(f"--min-length {min_length} > --max-length {max_length}")
    _check_noise(_given_flags(click.get_current_context()), content)
    _check_sample_output(out, "robomimic", overwrite)
    write_robomimic_hdf5(
        out,
        demos=demos,
        image_size=image_size,
        cameras=cameras,
        seed=seed,
        min_length=min_length,
        max_length=max_length,
        next_obs=not no_next_obs,
        content=content,
        noise=noise,
        overwrite=overwrite,
    )
    click.echo(f"wrote {out}")


def _check_bench_root(root: str, repo_id: str) -> None:
    """The LeRobot dataset ``bench lerobot`` measures is readable, as ``lerobot-train`` checks it at parsing: a
    ``meta/info.json`` that is no JSON, or a copy without its data files, gave each backend's child process its own
    traceback (a reviewer's reproduction)."""
    from robo_loaders_plugin.core.errors import RoboLoadersError
    from robo_loaders_plugin.lerobot.dataset_root import check_local_dataset
    from robo_loaders_plugin.sources.lerobot_v3 import LeRobotV3

    fix = "give a LeRobot v3 dataset root (robo-loaders sample-data lerobot writes one)"
    try:
        check_local_dataset(root, repo_id, None, root_label=root, episodes_label="--episodes", fix_root=fix)
        LeRobotV3(root).data_files()
    except RoboLoadersError as exc:
        raise click.BadParameter(str(exc), param_hint="--root") from None
    except (KeyError, TypeError, AttributeError, ValueError) as exc:  # an info.json of another shape (no fps)
        raise click.BadParameter(
            f"{root}/meta/info.json is not a LeRobot v3 dataset's ({type(exc).__name__}: {exc}); {fix}",
            param_hint="--root",
        ) from None


def _check_noise(given, content: str) -> None:
    """``--noise`` is the sensor noise of ``--content camera``: given with renders, it was ignored without a word (a
    reviewer's reproduction: the frames were those of the same command without it)."""
    if "noise" in given and content != "camera":
        raise click.BadParameter(
            f"--noise is the sensor noise of --content camera; --content {content} draws none", param_hint="--noise"
        )


def _given_flags(ctx: click.Context) -> set[str]:
    """The parameters of this command the user gave on the command line (or through the environment), not defaults."""
    from click.core import ParameterSource

    return {
        name
        for name in ctx.params
        if ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP, None)
    }


@sample_data.command("lerobot")
@click.argument("out", type=click.Path())
@click.option("--repo-id", default="local/sample", show_default=True)
@click.option("--episodes", default=5, show_default=True, type=click.IntRange(min=1))
@click.option("--min-length", default=40, show_default=True, type=click.IntRange(min=2))
@click.option("--max-length", default=60, show_default=True, type=click.IntRange(min=2))
@click.option("--cameras", default=1, show_default=True, type=click.IntRange(min=0))
@click.option("--image-size", default="84x84", show_default=True, help="HxW")
@click.option(
    "--codec",
    type=click.Choice(["av1", "h264", "png"]),
    default="av1",
    show_default=True,
    help="av1 (LeRobot's default) or h264 video, or png images in the parquet files",
)
@click.option("--fps", default=20, show_default=True, type=click.IntRange(min=1))
@click.option("--seed", default=0, show_default=True, type=int)
@click.option(
    "--from-robomimic",
    "from_robomimic",
    type=click.Path(exists=True, dir_okay=False),
    help="take cameras, state and actions from this robomimic HDF5 instead of drawing scenes",
)
@click.option(
    "--repeat",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="with --from-robomimic: write every demo this many times (benchmark-sized real pixels)",
)
@click.option(
    "--scenes",
    type=click.IntRange(min=1),
    default=None,
    help="render only this many distinct camera scenes, reused by episode (states and actions stay "
    "distinct): rendering costs ~0.4 ms per 64x64 frame",
)
@click.option(
    "--writer",
    type=click.Choice(["lerobot", "fast"]),
    default="lerobot",
    show_default=True,
    help="'lerobot': LeRobot's own writer; 'fast': the same files without LeRobot's per-frame PNGs and "
    "per-episode video rewrites (video codecs only; for datasets of a million frames)",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="replace OUT if it is a LeRobot dataset holding only what LeRobot writes, or empty (anything else is "
    "never replaced)",
)
@click.option(
    "--content",
    type=click.Choice(["renders", "camera"]),
    default="renders",
    show_default=True,
    help="renders: simulator-like frames; camera: like a real camera (texture, shake, sensor noise)",
)
@click.option(
    "--noise",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="--content camera: sensor noise, sigma in grey levels",
)
@click.option(
    "--stream-encode",
    is_flag=True,
    help="encode each frame as it is added (LeRobot's streaming_encoding: the same encoder, no PNG files "
    "in between; for large datasets)",
)
def sample_data_lerobot(
    out,
    repo_id,
    episodes,
    min_length,
    max_length,
    cameras,
    image_size,
    codec,
    fps,
    seed,
    from_robomimic,
    repeat,
    scenes,
    writer,
    overwrite,
    content,
    noise,
    stream_encode,
):
    """Write a LeRobot v3 dataset to OUT with LeRobot's own writer or the equivalent fast one (docs/scale.md: the
    large workloads, their time and disk).

    Args:
        out: OUT, the dataset root written.
        repo_id: ``--repo-id`` recorded in the dataset.
        episodes: ``--episodes``, the number of episodes (ignored with ``--from-robomimic``).
        min_length: ``--min-length``, the shortest episode in frames.
        max_length: ``--max-length``, the longest episode in frames.
        cameras: ``--cameras``, the number of cameras (0: state and actions only).
        image_size: ``--image-size``, ``HxW`` in pixels (e.g. ``84x84``).
        codec: ``--codec``: ``av1`` or ``h264`` video, or ``png`` images in the parquet files.
        fps: ``--fps``, the frame rate recorded and used for timestamps.
        seed: ``--seed`` of the random generator (also draws the episode lengths).
        from_robomimic: ``--from-robomimic``, a robomimic HDF5 file whose cameras, state and actions are written
            instead of drawn scenes (``None``: draw scenes).
        repeat: ``--repeat``: with ``--from-robomimic``, how many times every demo is written.
        scenes: ``--scenes``, the number of distinct camera scenes rendered and reused by episode (``None``: one
            per episode).
        writer: ``--writer``: ``lerobot`` (LeRobot's own writer) or ``fast`` (the same files, video codecs only).
        overwrite: ``--overwrite`` an existing OUT.
        content: ``--content``: ``renders`` (simulator-like frames) or ``camera`` (like a real camera).
        noise: ``--noise``, the sensor noise of ``--content camera`` (sigma in grey levels).
        stream_encode: ``--stream-encode``: LeRobot's writer encodes each frame as it is added.

    With ``--from-robomimic`` only ``repo_id``, ``repeat``, ``codec``, ``fps`` and ``overwrite`` apply (the others are
    refused), and ``--repeat`` only with it.

    Raises:
        click.BadParameter: ``--image-size`` is not ``HxW``, ``--min-length`` is greater than ``--max-length``,
            or ``--writer fast`` is combined with ``--codec png`` or ``--stream-encode``.
        click.UsageError: a drawing flag with ``--from-robomimic``, or ``--repeat`` without it.
        click.ClickException: LeRobot is not installed; OUT exists and ``--overwrite`` was not given, or OUT is
            not a LeRobot dataset directory.
    """
    import numpy as np

    from robo_loaders_plugin.backends.requirements import LEROBOT_PACKAGE
    from robo_loaders_plugin.core.installs import missing, missing_line

    gone = missing([LEROBOT_PACKAGE])
    if gone:
        raise click.ClickException(missing_line("sample-data lerobot (LeRobot's own writer)", gone))
    _check_sample_output(out, "lerobot", overwrite)
    _quiet_writers()
    from robo_loaders_plugin.sample_data.lerobot_v3 import (
        check_cameras,
        check_image_size,
        write_lerobot_dataset,
        write_lerobot_from_robomimic,
    )

    # flags that do not apply to the chosen way of writing are refused, not ignored (--image-size 64x64 with
    # --from-robomimic wrote the file's 16x16 frames, --writer fast LeRobot's slow writer: a reviewer's reproduction)
    given = _given_flags(click.get_current_context())
    drawing = ("episodes", "min_length", "max_length", "cameras", "image_size", "seed", "scenes", "writer", "content",
               "noise", "stream_encode")  # fmt: skip
    unused = [n for n in (drawing if from_robomimic else ("repeat",)) if n in given]
    if unused:
        flags = ", ".join("--" + n.replace("_", "-") for n in unused)
        raise click.UsageError(
            f"{flags} {'do' if len(unused) > 1 else 'does'} not apply "
            + ("with --from-robomimic (the file's demos are written)" if from_robomimic else "without --from-robomimic")
        )
    if from_robomimic:
        from robo_loaders_plugin.core.errors import SourceError

        try:
            check_cameras(from_robomimic, codec)
        except SourceError as exc:
            raise click.BadParameter(str(exc), param_hint="--from-robomimic") from None
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--codec") from None
        write_lerobot_from_robomimic(
            from_robomimic, out, repo_id=repo_id, repeat=repeat, mode=codec, fps=fps, overwrite=overwrite
        )
        click.echo(f"wrote {out} (repo_id {repo_id}) from {from_robomimic} x{repeat}")
        return

    try:
        h, w = (int(x) for x in image_size.lower().split("x"))
    except ValueError:
        raise click.BadParameter(f"--image-size must look like 84x84, got {image_size!r}") from None
    try:
        check_image_size((h, w), codec)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--image-size") from None
    if min_length > max_length:
        raise click.BadParameter(f"--min-length {min_length} > --max-length {max_length}")
    lengths = np.random.default_rng(seed).integers(min_length, max_length + 1, size=episodes).tolist()
    if writer == "fast" and codec == "png":
        raise click.BadParameter(
            "--writer fast writes video cameras: choose --codec h264 or av1", param_hint="--writer"
        )
    _check_noise(given, content)
    if stream_encode and codec == "png":
        raise click.BadParameter(
            "--stream-encode encodes video cameras; --codec png writes images: drop one", param_hint="--stream-encode"
        )
    if writer == "fast" and stream_encode:
        raise click.BadParameter(
            "--stream-encode is LeRobot's writer's option (the fast writer always encodes "
            "from memory): drop it or use --writer lerobot",
            param_hint="--stream-encode",
        )
    if writer == "fast":
        from robo_loaders_plugin.sample_data.lerobot_fast import write_lerobot_fast as write_lerobot_dataset
    write_lerobot_dataset(
        out,
        repo_id=repo_id,
        episode_lengths=lengths,
        cameras=cameras,
        image_size=(h, w),
        mode=codec,
        fps=fps,
        seed=seed,
        overwrite=overwrite,
        scenes=scenes,
        content=content,
        noise=noise,
        **({"streaming_encoding": stream_encode} if writer == "lerobot" else {}),
    )
    click.echo(f"wrote {out} (repo_id {repo_id}, {sum(lengths)} frames)")


@main.command("robomimic-train", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.pass_context
def robomimic_train(ctx):
    """Run robomimic's unmodified training script with the plugin's patches applied (also when the import hook is
    disabled with ROBO_LOADERS_DISABLE=1). All arguments go to robomimic.scripts.train. Exits 1 when the run
    failed (robomimic's script itself exits 0); without a terminal, an existing run folder of the same name is
    kept and the run written beside it instead of waiting on robomimic's overwrite prompt.

    Args:
        ctx: The click context; its ``args`` (every argument, unparsed) go to robomimic's training script.
    """
    from robo_loaders_plugin.robomimic.train_cli import config_problem, run_robomimic_train

    problem = config_problem(list(ctx.args))
    if problem:
        raise click.UsageError(problem)
    sys.exit(run_robomimic_train(list(ctx.args)))


@main.group("bench")
def bench():
    """Measure backends against the native loader in one run."""


def _parse_kwargs(values):
    from robo_loaders_plugin.core.backend_json import click_backend_pairs

    return click_backend_pairs(None, None, values)


def _bench_args(check, backends: str, backend_kwargs) -> tuple[list[str], dict]:
    """``--backends`` and ``--backend-kwargs`` checked before any backend runs: a bad name, cache mode or option is
    a usage error (one line naming the option, with the known names), not a failed run after the others ran."""
    from robo_loaders_plugin.core.errors import RoboLoadersError

    labels, kwargs = [b.strip() for b in backends.split(",") if b.strip()], _parse_kwargs(backend_kwargs)
    try:
        check(labels, kwargs)
    except (ValueError, RoboLoadersError) as exc:
        raise click.UsageError(str(exc)) from None
    return labels, kwargs


def _check_json_out(json_out: str | None) -> None:
    """``--json``'s location can be written, checked before the benchmark runs (a read-only one was an OSError
    traceback after the whole run: a reviewer's reproduction)."""
    from robo_loaders_plugin.core.paths import writable_parent_problem

    problem = json_out and writable_parent_problem(json_out)
    if problem:
        raise click.BadParameter(f"{problem}; give a file in a directory you can write to", param_hint="--json")


@bench.command("robomimic")
@click.option("--dataset", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--backends",
    default="native:low_dim,native:all,compressed_cache",
    show_default=True,
    help="comma-separated; native:<hdf5_cache_mode> (low_dim, all, none) selects robomimic's cache mode",
)
@click.option("--seq-length", default=10, show_default=True, type=click.IntRange(min=1))
@click.option("--frame-stack", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--batch-size", default=64, show_default=True, type=click.IntRange(min=1))
@click.option("--num-workers", default=2, show_default=True, type=click.IntRange(min=0))
@click.option("--batches", default=100, show_default=True, type=click.IntRange(min=1))
@click.option("--obs-keys", default=None, help="comma-separated obs keys (default: every obs key in the file)")
@click.option(
    "--backend-kwargs",
    "backend_kwargs",
    multiple=True,
    metavar="BACKEND='{json}'",
    help='options for one backend, e.g. compressed_cache=\'{"codec": "zstd"}\'',
)
@click.option(
    "--repeats",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="run every backend this many times (in rounds) and report each by its median run",
)
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="also write results here")
@click.option(
    "--reuse-cache",
    is_flag=True,
    help="let backends reuse what your cache directory holds (default: every run starts from an empty "
    "cache, so every backend pays its first-run cost the same way)",
)
def bench_robomimic_cmd(
    dataset,
    backends,
    seq_length,
    frame_stack,
    batch_size,
    num_workers,
    batches,
    obs_keys,
    backend_kwargs,
    repeats,
    json_out,
    reuse_cache,
):
    """samples/s, first-batch latency, peak memory and batch latency percentiles of robomimic backends.

    Exits 1 when a backend's run failed.

    Args:
        dataset: ``--dataset``, the robomimic HDF5 file.
        backends: ``--backends``, comma-separated labels (``native:<hdf5_cache_mode>`` selects robomimic's mode).
        seq_length: ``--seq-length``, steps per sample.
        frame_stack: ``--frame-stack``, observation frames per sample.
        batch_size: ``--batch-size``.
        num_workers: ``--num-workers`` of the DataLoader.
        batches: ``--batches`` timed per run.
        obs_keys: ``--obs-keys``, comma-separated (``None``: every obs key in the file).
        backend_kwargs: ``--backend-kwargs``, ``BACKEND='{json}'`` strings: options for one backend.
        repeats: ``--repeats``: runs per backend (in rounds), each reported by its median run.
        json_out: ``--json``, a file the results are also written to (``None``: none).
        reuse_cache: ``--reuse-cache``: let backends reuse the cache directory instead of an empty one per run.

    Raises:
        click.UsageError: before anything runs: an unknown backend, a cache mode after ``native:`` other than
            ``low_dim``, ``all`` or ``none``, a bad option, options for a label ``--backends`` does not list.
    """
    from robo_loaders_plugin.bench.robomimic_bench import bench_robomimic, check_backends

    labels, kwargs = _bench_args(check_backends, backends, backend_kwargs)
    _check_json_out(json_out)
    _check_bench_obs_keys(dataset, obs_keys)
    payload = bench_robomimic(
        dataset,
        labels,
        seq_length,
        frame_stack,
        batch_size,
        num_workers,
        batches,
        kwargs,
        json_out,
        obs_keys.split(",") if obs_keys else None,
        echo=click.echo,
        repeats=repeats,
        fresh_cache=not reuse_cache,
    )
    if any(r.get("error") for r in payload["results"]):
        sys.exit(1)


def _check_bench_obs_keys(dataset: str, obs_keys: str | None) -> None:
    """``--dataset`` is a robomimic file and every ``--obs-keys`` key is among its observations, before anything
    runs. Why: a file that is no HDF5 gave each backend's child an h5py traceback, and an unknown key was dropped,
    the benchmark running without that observation (a camera left out: 237k samples/s) without a word (a
    reviewer's reproductions)."""
    from robo_loaders_plugin.bench.robomimic_run import image_and_low_dim_keys
    from robo_loaders_plugin.core.errors import RoboLoadersError
    from robo_loaders_plugin.sources.robomimic_hdf5 import open_hdf5

    try:
        open_hdf5(dataset).close()
        rgb, low = image_and_low_dim_keys(dataset)
    except RoboLoadersError as exc:
        raise click.BadParameter(str(exc), param_hint="--dataset") from None
    except (KeyError, IndexError, ValueError) as exc:
        raise click.BadParameter(
            f"{dataset} holds no robomimic demos (data/demo_<n>/obs: {exc!r}); give a robomimic HDF5 file "
            "(robo-loaders sample-data robomimic writes one)",
            param_hint="--dataset",
        ) from None
    unknown = [k for k in (obs_keys.split(",") if obs_keys else []) if k not in rgb + low]
    if unknown:
        raise click.BadParameter(
            f"{', '.join(map(repr, unknown))} not among {dataset}'s observations: {', '.join(sorted(rgb + low))}",
            param_hint="--obs-keys",
        )


@bench.command("lerobot")
@click.option("--root", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--repo-id", default=None, help="default: local/<name of the root directory>")
@click.option("--backends", default="native,compressed_cache", show_default=True)
@click.option("--batch-size", default=64, show_default=True, type=click.IntRange(min=1))
@click.option("--num-workers", default=2, show_default=True, type=click.IntRange(min=0))
@click.option("--batches", default=50, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--delta-timestamps",
    "preset",
    type=click.Choice(["none", "act", "diffusion"]),
    default="act",
    show_default=True,
    help="act: 100-step action chunk; diffusion: 2 obs frames + actions -1..14",
)
@click.option("--backend-kwargs", "backend_kwargs", multiple=True, metavar="BACKEND='{json}'")
@click.option(
    "--repeats",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="run every backend this many times (in rounds) and report each by its median run",
)
@click.option("--json", "json_out", type=click.Path(dir_okay=False))
@click.option(
    "--reuse-cache",
    is_flag=True,
    help="let backends reuse what your cache directory holds (default: every run starts from an empty cache)",
)
@click.option(
    "--profile-samples",
    default=200,
    show_default=True,
    type=click.IntRange(min=1),
    help="random single items timed after the batches for the fetch/decode split (fewer on large data)",
)
def bench_lerobot_cmd(
    root,
    repo_id,
    backends,
    batch_size,
    num_workers,
    batches,
    preset,
    backend_kwargs,
    repeats,
    json_out,
    reuse_cache,
    profile_samples,
):
    """samples/s, decoded frames/s, first batch, memory, latency and fetch/decode split vs LeRobotDataset.

    Exits 1 when a backend's run failed.

    Args:
        root: ``--root``, the LeRobot v3 dataset root.
        repo_id: ``--repo-id`` (``None``: ``local/<name of the root directory>``).
        backends: ``--backends``, comma-separated labels.
        batch_size: ``--batch-size``.
        num_workers: ``--num-workers`` of the DataLoader.
        batches: ``--batches`` timed per run.
        preset: ``--delta-timestamps``: ``none``, ``act`` or ``diffusion``.
        backend_kwargs: ``--backend-kwargs``, ``BACKEND='{json}'`` strings: options for one backend.
        repeats: ``--repeats``: runs per backend (in rounds), each reported by its median run.
        json_out: ``--json``, a file the results are also written to (``None``: none).
        reuse_cache: ``--reuse-cache``: let backends reuse the cache directory instead of an empty one per run.
        profile_samples: ``--profile-samples``, random single items timed for the fetch/decode split.

    Raises:
        click.UsageError: before anything runs: an unknown backend, a bad option, options for a label
            ``--backends`` does not list, a ``--root`` holding no LeRobot dataset.
    """
    import os

    from robo_loaders_plugin.bench.lerobot_bench import bench_lerobot, check_backends

    labels, kwargs = _bench_args(check_backends, backends, backend_kwargs)
    _check_json_out(json_out)
    if not os.path.isfile(os.path.join(root, "meta", "info.json")):  # LeRobot would go to the Hub for it
        raise click.BadParameter(
            f"{root} holds no LeRobot dataset (no meta/info.json); give a LeRobot v3 dataset root "
            "(robo-loaders sample-data lerobot writes one)",
            param_hint="--root",
        )
    repo_id = repo_id or f"local/{os.path.basename(os.path.abspath(root))}"
    _check_bench_root(root, repo_id)
    payload = bench_lerobot(
        root,
        repo_id,
        labels,
        batch_size,
        num_workers,
        batches,
        preset,
        kwargs,
        json_out,
        echo=click.echo,
        repeats=repeats,
        fresh_cache=not reuse_cache,
        profile_samples=profile_samples,
    )
    if any(r.get("error") for r in payload["results"]):
        sys.exit(1)


@main.group("convert")
def convert():
    """Convert a dataset into robo-shards (docs/robo-shards.md): parallel, resumable, atomic."""


def _executor_options(f):
    """--executor and its options (docs/distributed-conversion.md), shared by every converter."""
    from robo_loaders_plugin.storage.shards.executors import click_options

    return click_options("OUT_DIR/datatrove")(f)


def _report_conversion(out_dir, res, episode: str = "episode"):
    if "job_id" in res:
        click.echo(
            f"submitted Slurm job {res['job_id']}: {res['tasks']} task(s) convert {res['pending_units']} of "
            f"{res['units']} unit(s) into {out_dir}; the last task publishes index.json (logs: "
            f"{res['logging_dir']})"
        )
    else:
        from robo_loaders_plugin.core.units import plural

        click.echo(f"wrote {out_dir}: {plural(res['episodes'], episode)} in {plural(res['shards'], 'shard')}")


@convert.command("robomimic")
@click.argument("in_path", type=click.Path(exists=True, dir_okay=False))
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--num-workers", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--shard-size", default="256MB", show_default=True, help="target shard size")
@click.option("--codec", default=DEFAULT_CODEC, show_default=True, type=click.Choice(CODECS))
@click.option("--level", default=5, show_default=True, type=click.IntRange(0, 9))
@click.option(
    "--frames",
    type=click.Choice(["lossless", "h264", "hevc", "av1"]),
    default="lossless",
    show_default=True,
    help="RGB cameras: lossless Blosc2 frames, or one lossy video segment per demo and "
    "camera (trained from with data_backend 'video_stream')",
)
@click.option(
    "--crf", type=click.IntRange(0, 63), default=None, help="video quality, lower is better [h264 18, hevc 20, av1 30]"
)
@click.option(
    "--gop",
    type=click.IntRange(min=1),
    default=32,
    show_default=True,
    help="video: frames between keyframes (each demo starts with one)",
)
@click.option(
    "--pix-fmt",
    type=click.Choice(["yuv444p", "yuv420p"]),
    default="yuv444p",
    show_default=True,
    help="video: yuv420p halves colour resolution (smaller files; costs 1-4 dB on small images)",
)
@click.option(
    "--min-psnr",
    type=click.FloatRange(min=0),
    default=35.0,
    show_default=True,
    help="video: the lowest PSNR (dB) of a camera segment over its frames; a segment below it fails the conversion "
    "naming it (0: no floor)",
)
@_executor_options
def convert_robomimic_cmd(
    in_path,
    out_dir,
    num_workers,
    shard_size,
    codec,
    level,
    frames,
    crf,
    gop,
    pix_fmt,
    min_psnr,
    executor,
    **executor_cli,
):
    """Convert a robomimic HDF5 file; re-running the same command resumes an interrupted conversion.

    Args:
        in_path: IN_PATH, the robomimic HDF5 file.
        out_dir: OUT_DIR, the robo-shards directory written.
        num_workers: ``--num-workers``, processes (or executor tasks) converting at once.
        shard_size: ``--shard-size``, the target shard size as text (e.g. ``256MB``).
        codec: ``--codec`` of the lossless frames (a Blosc2 codec name).
        level: ``--level`` of that codec (0-9).
        frames: ``--frames``: ``lossless``, or a video codec (``h264``, ``hevc``, ``av1``) for RGB cameras.
        crf: ``--crf`` of the video (``None``: the codec's default).
        gop: ``--gop``, video frames between keyframes.
        pix_fmt: ``--pix-fmt`` of the video: ``yuv444p`` or ``yuv420p``.
        min_psnr: ``--min-psnr``, the video segments' floor in dB (0: none).
        executor: ``--executor``.
        **executor_cli: The executor's options as the command line gives them
            (:func:`~robo_loaders_plugin.storage.shards.executors.options_from_cli`).

    Raises:
        click.BadParameter: video options were given with ``--frames lossless``, or the shard size, codec or
            video settings are invalid.
    """
    from robo_loaders_plugin.core.units import parse_bytes
    from robo_loaders_plugin.robomimic.convert import convert_robomimic, format_video_report
    from robo_loaders_plugin.storage.codec import FrameCodec
    from robo_loaders_plugin.storage.shards.executors import options_from_cli
    from robo_loaders_plugin.storage.video import VideoError, VideoSettings

    if frames == "lossless" and (crf is not None or gop != 32 or pix_fmt != "yuv444p" or min_psnr != 35.0):
        raise click.BadParameter(
            "--crf, --gop, --pix-fmt and --min-psnr apply to video frames; add --frames h264|hevc|av1"
        )
    try:
        size, frame_codec = parse_bytes(shard_size, "--shard-size"), FrameCodec(codec, level)
        video = None if frames == "lossless" else VideoSettings(frames, crf, gop, pix_fmt)
    except (ValueError, VideoError) as exc:
        raise click.BadParameter(str(exc)) from None
    with _resumable(out_dir):
        res = convert_robomimic(
            in_path,
            out_dir,
            num_workers=num_workers,
            shard_bytes=size,
            codec=frame_codec,
            executor=executor,
            executor_options=options_from_cli(executor, **executor_cli),
            video=video,
            min_psnr=min_psnr,
        )
    _report_conversion(out_dir, res, "demo")
    if "video" in res:
        click.echo(format_video_report(res["video"]))


@convert.command("lerobot")
@click.argument("root", type=click.Path(exists=True, file_okay=False))
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--repo-id", default=None, help="repo_id recorded in the shards' metadata (default: local/<ROOT's name>)")
@click.option("--num-workers", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--shard-size", default="256MB", show_default=True, help="target shard size")
@click.option("--codec", default=DEFAULT_CODEC, show_default=True, type=click.Choice(CODECS))
@click.option("--level", default=5, show_default=True, type=click.IntRange(0, 9))
@click.option(
    "--tolerance-s",
    default=1e-4,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="timestamp tolerance checked on every frame, as lerobot-train's --tolerance_s",
)
@_executor_options
def convert_lerobot_cmd(
    root, out_dir, repo_id, num_workers, shard_size, codec, level, tolerance_s, executor, **executor_cli
):
    """Convert a LeRobot v3 dataset (video decoded once, frames stored losslessly); re-running the same command
    resumes an interrupted conversion.

    Args:
        root: ROOT, the LeRobot v3 dataset root.
        out_dir: OUT_DIR, the robo-shards directory written.
        repo_id: ``--repo-id`` recorded in the shards' metadata (``None``: ``local/<ROOT's name>``).
        num_workers: ``--num-workers``, processes (or executor tasks) converting at once.
        shard_size: ``--shard-size``, the target shard size as text (e.g. ``256MB``).
        codec: ``--codec`` of the lossless frames (a Blosc2 codec name).
        level: ``--level`` of that codec (0-9).
        tolerance_s: ``--tolerance-s``, the timestamp tolerance in seconds checked on every frame.
        executor: ``--executor``.
        **executor_cli: The executor's options as the command line gives them
            (:func:`~robo_loaders_plugin.storage.shards.executors.options_from_cli`).

    Raises:
        click.BadParameter: the shard size or codec is invalid.
    """
    from robo_loaders_plugin.core.units import parse_bytes
    from robo_loaders_plugin.lerobot.convert import convert_lerobot
    from robo_loaders_plugin.storage.codec import FrameCodec
    from robo_loaders_plugin.storage.shards.executors import options_from_cli

    try:
        size, frame_codec = parse_bytes(shard_size, "--shard-size"), FrameCodec(codec, level)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    with _resumable(out_dir):
        res = convert_lerobot(
            root,
            out_dir,
            repo_id=repo_id,
            num_workers=num_workers,
            shard_bytes=size,
            codec=frame_codec,
            tolerance_s=tolerance_s,
            executor=executor,
            executor_options=options_from_cli(executor, **executor_cli),
        )
    _report_conversion(out_dir, res)


@main.command("verify")
@click.argument("out_dir", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--source",
    type=click.Path(exists=True),
    help="also compare every array with the source: a robomimic HDF5 file or a LeRobot dataset root",
)
def verify_cmd(out_dir, source):
    """Re-check a robo-shards directory: shard sizes and SHA-256, decoding, and (with --source) the data. Prints
    every problem found and exits 1 when there is one. With --source, the framework recorded in OUT_DIR's
    dataset.json chooses the comparison (LeRobot's, otherwise robomimic's).

    Args:
        out_dir: OUT_DIR, the robo-shards directory.
        source: ``--source``: a robomimic HDF5 file or a LeRobot dataset root (``None``: check the shards alone).
    """
    import os

    from robo_loaders_plugin.storage.shards import verify_dir

    framework = None
    if source:
        try:
            with open(os.path.join(out_dir, "dataset.json")) as f:
                framework = json.load(f).get("metadata", {}).get("framework")
        except (OSError, ValueError, AttributeError):
            pass  # verify_dir reports what is wrong with it
    if not source:
        problems = verify_dir(out_dir)
    elif framework == "lerobot":
        from robo_loaders_plugin.lerobot.convert import verify_lerobot

        problems = verify_lerobot(out_dir, source)
    else:
        from robo_loaders_plugin.robomimic.convert import verify_robomimic

        problems = verify_robomimic(out_dir, source)
    for p in problems:
        click.echo(f"problem: {p}", err=True)
    if problems:
        sys.exit(1)
    click.echo(f"{out_dir}: ok")


@main.command("doctor")
def doctor_cmd():
    """Check the installed frameworks against every patch and private read the plugin relies on, the import hook,
    FFmpeg/torchcodec and CUDA/NVDEC; exit 1 when the installed versions cannot work."""
    from robo_loaders_plugin.doctor import all_checks, render

    rows = all_checks()
    for line in render(rows, _width()):
        click.echo(line)
    failed = [r for r in rows if r.status == "FAIL"]
    if failed:
        click.echo(
            f"\n{len(failed)} required check(s) failed: the plugin cannot work with what is installed "
            "(see the rows marked FAIL)",
            err=True,
        )
        sys.exit(1)


@main.group("cache")
def cache_group():
    """The cache directory: conversions and persisted caches, reused while their source is unchanged."""


def _cache_command(name: str, *options):
    """A ``cache`` subcommand: its ``--cache-dir`` (declared once for the three) resolved to the cache root, created,
    before the command runs; the command receives ``root`` and its own ``options`` (click options, declared in
    order)."""
    import functools

    def declare(run):
        @functools.wraps(run)
        def command(cache_dir, **given):
            import os

            from robo_loaders_plugin.storage import cache

            # a directory the user named (or $ROBO_LOADERS_CACHE) that does not exist is a typo: created, it was
            # listed as an empty cache and left behind (a reviewer's finding); the default root is created
            named = f"--cache-dir {cache_dir}" if cache_dir else f"${cache.ENV_ROOT}={os.environ.get(cache.ENV_ROOT)}"
            root = cache.location(cache_dir)
            if (cache_dir or os.environ.get(cache.ENV_ROOT)) and not os.path.exists(root):
                raise click.ClickException(
                    f"{named}: no such directory (a run makes its cache directory when it first writes there); "
                    "check the path"
                )
            return run(cache.cache_root(cache_dir, "--cache-dir"), **given)

        for option in reversed(options):
            command = option(command)
        command = click.option(
            "--cache-dir", default=None, help="default: $ROBO_LOADERS_CACHE or ~/.cache/robo-loaders"
        )(command)
        return cache_group.command(name)(command)

    return declare


def _remove_unused(root: str, limit: int | None, where: str | None = None) -> None:
    """Remove builds' leftovers and, least recently used first, the entries nothing uses until ``root`` fits
    ``limit`` (``None``: no limit; 0: every one), each removal echoed (``storage.cache.prune``)."""
    from robo_loaders_plugin.storage import cache

    for p in cache.sweep_temporary(root) + cache.prune(root, limit, where=where or cache.ENV_SIZE):
        click.echo(f"removed {p}")


@_cache_command("list")
def cache_list(root):
    """Entries with their size, last use and whether a process uses them now.

    Args:
        root: The cache root, from ``--cache-dir`` (default: ``$ROBO_LOADERS_CACHE`` or ``~/.cache/robo-loaders``).
    """
    import datetime

    from tabulate import tabulate

    from robo_loaders_plugin.core.units import format_bytes
    from robo_loaders_plugin.storage import cache
    from robo_loaders_plugin.storage.shards.manifest import MANIFEST

    def state(e) -> str:  # a conversion on first use that was stopped: planned (manifest), not published (index)
        if os.path.isfile(os.path.join(e.path, MANIFEST)) and not os.path.exists(os.path.join(e.path, "index.json")):
            return "unfinished conversion (the next run resumes it)"
        return ""

    rows = [
        [
            e.name,
            format_bytes(e.nbytes()),
            datetime.datetime.fromtimestamp(e.last_used()).isoformat(" ", "seconds"),
            "yes" if e.in_use() else "",
            state(e),
        ]
        for e in cache.entries(root)
    ]
    limit = format_bytes(cache.size_limit() or 0) if cache.size_limit() else "none"
    click.echo(f"{root} (limit {cache.ENV_SIZE}={limit})")
    headers = ["entry", "size", "last used", "in use", "state"]
    click.echo(tabulate(rows, headers=headers) if rows else "(empty)")
    temporary = cache.temporary_files(root)
    if temporary:  # the leftovers of a killed build were not listed at all, "(empty)" beside 16 MB of them
        size = format_bytes(sum(cache.path_bytes(p) for p in temporary))
        click.echo(
            f"plus {len(temporary)} temporary file(s) of builds ({size}): a build running now, or left by a killed "
            "one (`robo-loaders cache prune` removes those nobody builds)"
        )


@_cache_command(
    "prune",
    click.option(
        "--max-size",
        default=None,
        help="prune to this size, e.g. 10GB; 0: no limit, as ROBO_LOADERS_CACHE_SIZE=0 (default: "
        "ROBO_LOADERS_CACHE_SIZE, 50GB when unset; `cache clear` removes every entry nothing uses)",
    ),
)
def cache_prune(root, max_size):
    """Remove least recently used entries nothing uses until the cache fits its limit, and builds' leftovers.

    Entries a run uses are kept, and so is anything in the directory that is not one of its entries (another
    cache directory inside it, such as a run's cache_dir: prune that one with --cache-dir).

    Args:
        root: The cache root, from ``--cache-dir`` (default: ``$ROBO_LOADERS_CACHE`` or ``~/.cache/robo-loaders``).
        max_size: ``--max-size`` as text (e.g. ``10GB``; 0: no limit; ``None``: the cache's limit,
            ``$ROBO_LOADERS_CACHE_SIZE``), read by ``storage.cache.parse_size_limit`` as the variable is.
    """
    from robo_loaders_plugin.storage import cache

    limit = cache.parse_size_limit(max_size, "--max-size") if max_size is not None else cache.size_limit()
    _remove_unused(root, limit, "--max-size" if max_size is not None else cache.ENV_SIZE)
    if limit is None:
        given = "--max-size 0" if max_size is not None else f"{cache.ENV_SIZE}=0"
        click.echo(
            f"{root} has no size limit ({given}): no entry removed; `robo-loaders cache clear` removes "
            "every entry nothing uses"
        )


@_cache_command("clear")
def cache_clear(root):
    """Remove every entry nothing uses (another cache directory inside it is left alone), and the mixture index
    with its kept tables (``.mixture-index/``).

    Why the index too: it is a cache of the components' metadata and small tables (``mixtures.index``,
    ``mixtures.kept_tables``), ~20 MB at 400 components, which a clear left behind. Removing it is safe while a run
    uses it: a record or copy not found is read from the dataset again, and writing one is never an error.

    Args:
        root: The cache root, from ``--cache-dir`` (default: ``$ROBO_LOADERS_CACHE`` or ``~/.cache/robo-loaders``).
    """
    import shutil

    from robo_loaders_plugin.mixtures.index import INDEX_DIR

    _remove_unused(root, 0, "cache clear")
    index = os.path.join(root, INDEX_DIR)
    if os.path.isdir(index):
        shutil.rmtree(index, ignore_errors=True)
        click.echo(f"removed {index} (the mixture index: read from the datasets again at the next start)")


@contextlib.contextmanager
def _resumable(out_dir: str):
    """Ctrl-C during a conversion: one line saying what was kept and that the same command resumes, exit status 130.

    Why: click's own handling printed "Aborted!" alone, though the finished work units are kept and the same
    command goes on from them (a reviewer's reproduction)."""
    from robo_loaders_plugin.storage.shards import manifest

    try:
        yield
    except KeyboardInterrupt:
        done = manifest.progress(out_dir)
        kept = f"{done[0]} of {done[1]} work units finished are kept in {out_dir}" if done else "nothing was kept"
        click.echo(f"interrupted: {kept}; run the same command again to resume", err=True)
        sys.exit(130)


def _run():
    from robo_loaders_plugin.core.errors import RoboLoadersError

    try:
        main(standalone_mode=True)
    except RoboLoadersError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":  # python -m robo_loaders_plugin.cli: the same one-line errors as the robo-loaders script
    _run()
