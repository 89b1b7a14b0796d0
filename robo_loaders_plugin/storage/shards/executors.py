"""Running a conversion's work units on an engine: this process's pool, or datatrove's local or Slurm executors.

Every converter plans its units in ``manifest.json`` (:mod:`manifest`), then calls :func:`execute` with its
``_worker(args)``, a picklable function that leases and converts units until none is left (``manifest.work``).
Whatever runs the workers, the manifest is what makes a conversion exactly-once and resumable: a unit is converted
by the process holding its lease (an ``flock``), a unit whose holder died is taken over by the next process that
leases, and ``index.json`` is published only once every planned unit is done.

Executors (``--executor``):

- ``local``: today's behaviour, :func:`manifest.run` (this process, or processes spawned by :mod:`worker_pool`).
- ``datatrove-local``: datatrove's ``LocalPipelineExecutor`` with ``num_workers`` tasks, each running
  :class:`~robo_loaders_plugin.storage.shards.datatrove_step.ConvertUnits`. The launching process publishes
  once the executor returns: it waits, so it is the one place that sees every task end. It also watches the tasks
  (start/finish markers with their pids): a task killed outright (OOM killer, ``kill -9``) makes datatrove's pool
  wait forever for its result, so once every task has either finished or died, the launcher stops waiting,
  converts what the dead tasks left (their leases are free) and publishes.
- ``datatrove-slurm``: datatrove's ``SlurmPipelineExecutor``, a job array of ``num_workers`` tasks. The launching
  process returns once the job is submitted (:class:`Submitted`), so the tasks publish: each one, after leasing
  found nothing left, calls :func:`manifest.finish`, which publishes exactly when every unit is done, and the task
  that completes the last unit always does. A job that ended with units left (a task killed after the others had
  finished) is completed by running the same command again: it submits tasks for the units not done, or publishes
  at once if they all are.

Options of each executor are keyword arguments of :func:`execute` (:data:`OPTIONS`); :func:`options_from_cli`
maps the command line's to them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping

from tqdm.auto import tqdm

from robo_loaders_plugin.core.errors import RoboLoadersError
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.core.progress import inner_bars_quiet
from robo_loaders_plugin.storage.codec import FrameCodec
from robo_loaders_plugin.storage.shards import manifest
from robo_loaders_plugin.storage.shards.manifest import Converted

logger = get_logger(__name__)

EXECUTORS = ("local", "datatrove-local", "datatrove-slurm")
OPTIONS = {
    "local": (),
    "datatrove-local": ("logging_dir", "workers", "start_method"),
    "datatrove-slurm": (
        "logging_dir",
        "partition",
        "time",
        "cpus_per_task",
        "mem_per_cpu_gb",
        "job_name",
        "qos",
        "sbatch_args",
        "env_command",
        "workers",
        "slurm_logs_folder",
        "extra",
    ),
}
LOGGING_SUBDIR = "datatrove"  # default logging_dir: <out_dir>/datatrove (readers ignore it, as manifest.json)
POLL_S = 0.5
DEAD_TASK_GRACE_S = 2.0  # once every task has finished or died, wait this long for the executor to return itself


class ExecutorError(RoboLoadersError, ValueError):
    """An unknown executor, an option it does not take, or datatrove missing."""


@dataclasses.dataclass(frozen=True)
class Submitted:
    """What :func:`execute` returns for ``datatrove-slurm``: the conversion runs on as a Slurm job array."""

    job_id: str
    tasks: int
    units: int
    pending_units: int
    logging_dir: str
    launch_script: str

    def as_dict(self) -> dict:
        """The fields as a dict (for ``--json`` output)."""
        return dataclasses.asdict(self)


def check_options(executor: str, options: Mapping, out_dir: str | None = None, source: str | None = None) -> None:
    """Refuse an executor that does not take these options or cannot run here; converters call it before planning,
    so a typo fails before the source is read.

    Args:
        executor: One of :data:`EXECUTORS`.
        options: Its options (keyword arguments of :func:`execute`).
        out_dir: The conversion's output directory, for ``datatrove-slurm``'s default logging directory in it
            (``None``: only a given ``logging_dir`` is checked).
        source: The source directory the conversion reads (``None``: not compared): a ``logging_dir`` inside it is
            refused (its logs would change the source while it is read).

    Raises:
        ExecutorError: an unknown executor, an option it does not take, ``datatrove-slurm`` without a partition or
            with a path datatrove writes unquoted into the job script holding a space or shell character, a
            ``logging_dir`` that cannot be written in or lies inside ``source``, or datatrove not installed for a
            datatrove executor.
    """
    if executor not in EXECUTORS:
        raise ExecutorError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
    unknown = sorted(set(options) - set(OPTIONS[executor]))
    if unknown:
        takes = ", ".join(OPTIONS[executor]) or "no options"
        raise ExecutorError(f"executor {executor!r} does not take option(s) {', '.join(unknown)} (it takes {takes})")
    if executor == "datatrove-slurm" and not options.get("partition"):
        raise ExecutorError("executor 'datatrove-slurm' needs a Slurm partition (--slurm-partition)")
    if executor.startswith("datatrove"):
        try:
            import datatrove  # noqa: F401
        except ImportError:
            raise ExecutorError(
                f"executor {executor!r} needs datatrove: pip install 'robo-loaders-plugin[datatrove]' "
                "(or datatrove==0.10.1)"
            ) from None
    if executor == "datatrove-slurm":  # after datatrove's check: its activate line is datatrove_step's
        _check_script_paths(options, out_dir)
    if options.get("logging_dir"):  # datatrove creates it inside its run: a traceback after planning (a reviewer's)
        from robo_loaders_plugin.core.paths import writable_dir_problem

        logs = os.path.realpath(str(options["logging_dir"]))
        src = os.path.realpath(source) if source is not None else None
        if src is not None and (logs == src or logs.startswith(src + os.sep)):
            # its logs changed the source while it was read: the whole conversion was withdrawn at its end, and
            # every run after refused (a reviewer's reproduction)
            raise ExecutorError(
                f"--logging-dir {options['logging_dir']}: inside the source {source}, whose files must not change "
                "while it is converted; give a directory outside it"
            )
        problem = writable_dir_problem(str(options["logging_dir"]))
        if problem:
            raise ExecutorError(f"--logging-dir: {problem}; give a directory datatrove can write its logs in")


_UNQUOTABLE = re.compile(r"[\s'\"$`\\;&|<>()*?!#~{}\[\]]")  # what a shell reads as other than the path


def _check_script_paths(options: Mapping, out_dir: str | None) -> None:
    """The paths datatrove's Slurm executor writes unquoted into the job script (``#SBATCH --output``, ``srun ...
    <logging_dir>/executor.pik``, ``source <venv>/bin/activate``) hold no space or shell character.

    Why: with one (an output directory ``my data/``), submission succeeded and every array task failed to start
    ("unrecognized arguments: data/.../executor.pik"), writing nothing (a reviewer's reproduction with a fake Slurm).
    """
    from robo_loaders_plugin.storage.shards import datatrove_step

    paths = {}
    if options.get("logging_dir") or out_dir is not None:
        paths["--logging-dir (default <out>/datatrove)"] = _logging_dir(out_dir or "", options.get("logging_dir"))
    if options.get("slurm_logs_folder"):
        paths["slurm_logs_folder"] = str(options["slurm_logs_folder"])
    if options.get("env_command") is None:
        activate = datatrove_step.default_env_command()
        if activate:
            paths["this virtualenv (its activate script)"] = activate.removeprefix("source ")
    for what, path in paths.items():
        if _UNQUOTABLE.search(path):
            raise ExecutorError(
                f"executor 'datatrove-slurm': {what} is {path!r}, which holds a space or shell character; datatrove "
                "writes it unquoted into the job script, so every task would fail to start: choose a path without "
                "them (--logging-dir for the logs), or give env_command yourself"
            )


def execute(
    executor: str,
    out_dir: str,
    worker: Callable,
    args,
    num_workers: int,
    codec: FrameCodec,
    metadata: Mapping,
    source: Mapping,
    desc: str,
    progress: bool = True,
    timeout_s: float | None = None,
    **options,
) -> Converted | Submitted:
    """Convert the units planned in ``out_dir/manifest.json`` with ``worker(args)``, and publish ``index.json``
    when every unit is done.

    Args:
        executor: ``local``, ``datatrove-local`` or ``datatrove-slurm`` (see the module's docstring).
        out_dir: The conversion's output directory, planned already (``manifest.plan``).
        worker: Leases and converts units until none is left (``manifest.work``); must be picklable (a module-level
            function) for every executor but ``local`` with one worker.
        args: ``worker``'s one argument.
        num_workers: Processes (``local``) or tasks (datatrove); datatrove runs at most one task per unit not done.
        codec: The shards' frame codec, or a :class:`~robo_loaders_plugin.storage.shards.manifest.Publisher` for
            units that are not shards.
        metadata: The framework's metadata, published in ``dataset.json``.
        source: The source (its path and fingerprint), published in ``dataset.json``.
        desc: The progress bar's label.
        progress: Whether to show the progress bar.
        timeout_s: How long to wait for other processes holding leases (``local``, and what ``datatrove-local``
            converts itself afterwards); default: the lock timeout.
        **options: The executor's options (:data:`OPTIONS`).

    Returns:
        :class:`Converted`, or :class:`Submitted` when a Slurm job was submitted (its tasks publish).

    Raises:
        ExecutorError: see :func:`check_options`.
        ShardError: a worker failed or died, or another process's leases outlasted the timeout.
    """
    check_options(executor, options)
    if executor == "local":
        return manifest.run(out_dir, worker, args, num_workers, codec, metadata, source, desc, progress, timeout_s)
    if executor == "datatrove-local":
        return _datatrove_local(
            out_dir, worker, args, num_workers, codec, metadata, source, desc, progress, timeout_s, **options
        )
    return _datatrove_slurm(out_dir, worker, args, num_workers, codec, metadata, source, desc, **options)


def _counts(out_dir: str) -> tuple[int, int]:
    """(units planned, units not done)."""
    units = manifest._read(out_dir)["units"]
    return len(units), sum(u["state"] != "done" for u in units)


def _logging_dir(out_dir: str, logging_dir: str | None) -> str:
    return os.path.abspath(logging_dir or os.path.join(out_dir, LOGGING_SUBDIR))


# ---- datatrove-local --------------------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _task_states(markers: str, tasks: int) -> tuple[list[int], list[int]]:
    """(ranks finished, ranks that started and whose process is gone without finishing)."""
    finished, dead = [], []
    for rank in range(tasks):
        if os.path.exists(os.path.join(markers, f"finished-{rank:05d}")):
            finished.append(rank)
            continue
        try:
            with open(os.path.join(markers, f"started-{rank:05d}")) as f:
                pid = int(f.read())
        except (OSError, ValueError):
            continue  # not started yet
        if not _alive(pid):
            dead.append(rank)
    return finished, dead


def _datatrove_local(
    out_dir,
    worker,
    args,
    num_workers,
    codec,
    metadata,
    source,
    desc,
    progress,
    timeout_s,
    logging_dir=None,
    workers=None,
    start_method="forkserver",
) -> Converted:
    from robo_loaders_plugin.storage.shards import datatrove_step

    total, pending = _counts(out_dir)
    tasks = max(1, min(int(num_workers), pending))
    logging_dir = _logging_dir(out_dir, logging_dir)
    markers = os.path.join(logging_dir, "robo-loaders-tasks", uuid.uuid4().hex[:12])  # this run's only
    if pending:
        step = datatrove_step.ConvertUnits(worker, args, out_dir, publish=None, markers=markers)
        ex = datatrove_step.local_executor(
            step,
            tasks=tasks,
            workers=min(int(workers or tasks), tasks),
            logging_dir=logging_dir,
            start_method=start_method,
        )
        outcome: dict = {}

        def run():
            try:
                outcome["stats"] = ex.run()
            except BaseException as exc:  # noqa: BLE001 - re-raised in the launching thread
                outcome["error"] = exc

        thread = threading.Thread(target=run, name="datatrove-local", daemon=True)
        bar = tqdm(
            total=total, desc=desc, unit=getattr(codec, "unit", "shard"), disable=not progress or inner_bars_quiet()
        )
        try:
            thread.start()
            gone_since = None
            while thread.is_alive():
                thread.join(POLL_S)
                manifest._show_progress(out_dir, bar)
                finished, dead = _task_states(markers, tasks)
                if dead and len(finished) + len(dead) == tasks:
                    gone_since = gone_since or time.monotonic()
                    if time.monotonic() - gone_since > DEAD_TASK_GRACE_S and thread.is_alive():
                        # datatrove's pool never returns a killed task's result: stop waiting for it
                        logger.warning(
                            f"{out_dir}: datatrove task(s) {manifest._ids(dead)} died without "
                            "finishing; converting what they left here"
                        )
                        break
        finally:
            bar.close()
        if "error" in outcome:
            raise outcome["error"]
        shutil.rmtree(markers, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(markers))  # when no other run's markers are left
    published = manifest._finish(out_dir, codec, metadata, source)
    if published is None:  # units left by a killed task, or leased by another live process: as the local executor
        return manifest.run(out_dir, worker, args, 1, codec, metadata, source, desc, progress, timeout_s)
    return Converted(units=total, shards=published[0], episodes=published[1])


# ---- datatrove-slurm --------------------------------------------------------------------------------------------


def build_slurm(
    out_dir: str,
    worker: Callable,
    args,
    tasks: int,
    codec: FrameCodec,
    metadata: Mapping,
    source: Mapping,
    logging_dir: str | None = None,
    **options,
):
    """The ``SlurmPipelineExecutor`` :func:`execute` submits (not submitted): its tasks publish ``index.json``.

    Args:
        out_dir: The conversion's output directory.
        worker: Leases and converts units (picklable).
        args: ``worker``'s one argument.
        tasks: How many array tasks.
        codec: The shards' frame codec (or a ``Publisher``), pickled with the tasks.
        metadata: Published in ``dataset.json``.
        source: Published in ``dataset.json``.
        logging_dir: datatrove's logs and the job's files (default ``<out_dir>/datatrove``).
        **options: Those of :data:`OPTIONS` ``["datatrove-slurm"]`` but ``logging_dir``; ``extra`` (a mapping) goes
            to ``SlurmPipelineExecutor`` as is.

    Returns:
        The executor.

    Raises:
        ExecutorError: see :func:`check_options`.
    """
    from robo_loaders_plugin.storage.shards import datatrove_step

    # logging_dir is this function's own argument: checked as given, not as the default in out_dir (a reviewer's
    # reproduction: an output directory with a space and a clean logging_dir was refused after planning)
    check_options("datatrove-slurm", {**options, "logging_dir": _logging_dir(out_dir, logging_dir)})
    extra = dict(options.pop("extra", None) or {})
    step = datatrove_step.ConvertUnits(
        worker,
        args,
        os.path.abspath(out_dir),
        publish={"codec": codec, "metadata": dict(metadata), "source": dict(source)},
    )
    return datatrove_step.slurm_executor(
        step, tasks=tasks, logging_dir=_logging_dir(out_dir, logging_dir), **options, **extra
    )


def _datatrove_slurm(
    out_dir, worker, args, num_workers, codec, metadata, source, desc, logging_dir=None, **options
) -> Converted | Submitted:
    published = manifest._finish(out_dir, codec, metadata, source)
    total, pending = _counts(out_dir)  # after _finish, which plans damaged units again
    if published is not None:  # every unit done already (a job that converted them all but did not publish)
        return Converted(units=total, shards=published[0], episodes=published[1])
    tasks = max(1, min(int(num_workers), pending))
    ex = build_slurm(out_dir, worker, args, tasks, codec, metadata, source, logging_dir, **options)
    # launch_job, not run: run() inside a Slurm array task (an interactive job) would convert instead of submitting
    ex.launch_job()  # writes executor.pik and launch_script.slurm into logging_dir, then calls sbatch
    logger.info(
        f"{desc}: submitted Slurm job {ex.job_id} ({tasks} task(s), {pending} of {total} unit(s) "
        f"to convert); the last task to finish publishes {os.path.join(out_dir, 'index.json')}"
    )
    return Submitted(
        job_id=str(ex.job_id),
        tasks=tasks,
        units=total,
        pending_units=pending,
        logging_dir=ex.logging_dir.path,
        launch_script=ex.logging_dir.resolve_paths("launch_script.slurm"),
    )


# ---- the command line -------------------------------------------------------------------------------------------


def parse_sbatch_args(pairs: Iterable[str]) -> dict:
    """``["KEY=VALUE", "KEY"]`` (``--sbatch-arg`` given several times) as ``{"KEY": "VALUE", "KEY": ""}``; a
    leading ``--`` is dropped (``--sbatch-arg --exclusive`` works too).

    Args:
        pairs: The values given.

    Returns:
        ``{KEY: VALUE}``; a later KEY replaces an earlier one.

    Raises:
        ExecutorError: a value with no key.
    """
    out = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        key = key.strip().lstrip("-")
        if not key:
            raise ExecutorError(f"--sbatch-arg {pair!r}: expected KEY=VALUE (e.g. account=myproject)")
        out[key] = value
    return out


def options_from_cli(
    executor: str,
    logging_dir: str | None = None,
    concurrent_tasks: int | None = None,
    slurm_partition: str | None = None,
    slurm_time: str | None = None,
    slurm_cpus_per_task: int | None = None,
    slurm_mem_per_cpu_gb: int | None = None,
    slurm_job_name: str | None = None,
    slurm_qos: str | None = None,
    sbatch_arg: Iterable[str] = (),
    slurm_env_command: str | None = None,
) -> dict:
    """The command line's executor options as :func:`execute`'s keyword arguments.

    Options given for another executor than the chosen one are an error (they would be silently ignored).

    Args:
        executor: ``--executor``.
        logging_dir: ``--logging-dir``.
        concurrent_tasks: ``--concurrent-tasks`` (becomes ``workers``).
        slurm_partition: ``--slurm-partition``.
        slurm_time: ``--slurm-time``.
        slurm_cpus_per_task: ``--slurm-cpus-per-task``.
        slurm_mem_per_cpu_gb: ``--slurm-mem-per-cpu-gb``.
        slurm_job_name: ``--slurm-job-name``.
        slurm_qos: ``--slurm-qos``.
        sbatch_arg: ``--sbatch-arg`` values (:func:`parse_sbatch_args`).
        slurm_env_command: ``--slurm-env-command``.

    Returns:
        The options given (``None`` left out), named as :data:`OPTIONS` names them.

    Raises:
        ExecutorError: an option that does not apply to ``executor``, or see :func:`check_options`.
    """
    given = {
        "logging_dir": logging_dir,
        "workers": concurrent_tasks,
        "partition": slurm_partition,
        "time": slurm_time,
        "cpus_per_task": slurm_cpus_per_task,
        "mem_per_cpu_gb": slurm_mem_per_cpu_gb,
        "job_name": slurm_job_name,
        "qos": slurm_qos,
        "env_command": slurm_env_command,
        "sbatch_args": parse_sbatch_args(sbatch_arg) or None,
    }
    options = {k: v for k, v in given.items() if v is not None}
    flags = {
        "logging_dir": "--logging-dir",
        "workers": "--concurrent-tasks",
        "sbatch_args": "--sbatch-arg",
        "env_command": "--slurm-env-command",
    }
    wrong = [flags.get(k, "--slurm-" + k.replace("_", "-")) for k in options if k not in OPTIONS.get(executor, ())]
    if executor in EXECUTORS and wrong:
        raise ExecutorError(f"{', '.join(wrong)} do(es) not apply to --executor {executor}")
    check_options(executor, options)
    return options


def click_options(logging_dir_default: str):
    """The ``--executor`` option and its datatrove/Slurm options, as every command that converts takes them
    (``robo-loaders convert robomimic|lerobot``, ``robo-loaders transcode``): one declaration, so the commands
    cannot drift apart.

    Args:
        logging_dir_default: What ``--logging-dir`` defaults to, for its help text.

    Returns:
        A decorator adding the options to a click command.
    """
    import click

    options = [
        click.option(
            "--executor",
            type=click.Choice(list(EXECUTORS)),
            default="local",
            show_default=True,
            help="where the work units run (docs/distributed-conversion.md); --num-workers is the number of tasks",
        ),
        click.option(
            "--concurrent-tasks",
            type=click.IntRange(min=1),
            default=None,
            help="datatrove: tasks running at once (default: all of them)",
        ),
        click.option(
            "--logging-dir",
            type=click.Path(file_okay=False),
            default=None,
            help=f"datatrove: logs, stats and the Slurm job's files (default: {logging_dir_default})",
        ),
        click.option("--slurm-partition", default=None, help="datatrove-slurm: partition (required)"),
        click.option("--slurm-time", default=None, help="datatrove-slurm: time limit per task [24:00:00]"),
        click.option("--slurm-cpus-per-task", type=click.IntRange(min=1), default=None, help="datatrove-slurm [1]"),
        click.option("--slurm-mem-per-cpu-gb", type=click.IntRange(min=1), default=None, help="datatrove-slurm [4]"),
        click.option("--slurm-job-name", default=None, help="datatrove-slurm [robo-loaders-convert]"),
        click.option("--slurm-qos", default=None, help="datatrove-slurm [the cluster's default]"),
        click.option(
            "--sbatch-arg",
            multiple=True,
            metavar="KEY=VALUE",
            help="datatrove-slurm: an extra #SBATCH --KEY=VALUE line (repeatable; KEY alone for a flag)",
        ),
        click.option(
            "--slurm-env-command",
            default=None,
            help="datatrove-slurm: run before each task [source <this virtualenv>/bin/activate]",
        ),
    ]

    def decorate(f):
        for option in reversed(options):
            f = option(f)
        return f

    return decorate
