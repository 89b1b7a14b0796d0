"""The datatrove side of :mod:`robo_loaders_plugin.storage.shards.executors` (imported only when a datatrove
executor is chosen: datatrove is an optional dependency).

:class:`ConvertUnits` is the one pipeline step: its ``run(data, rank, world_size)`` calls the framework's
``_worker(args)``, which leases and converts units through ``manifest.json`` until none is left. Tasks do not own
units by rank: any task converts any unit, so a unit given back or left by a killed task is taken over by whichever
task leases next, and a task with nothing left to lease returns at once.

Why ``skip_completed=False`` on every executor built here: the manifest, not datatrove's ``completions/`` files,
records what is done. A rank marked complete by datatrove would be skipped on a re-run even when its units must be
converted again (a shard deleted since is planned again), and a rank that converts nothing costs a few seconds.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping

from datatrove.executor import LocalPipelineExecutor, SlurmPipelineExecutor
from datatrove.pipeline.base import PipelineStep

from robo_loaders_plugin.core.files import atomic_write_bytes
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.storage.shards import manifest

logger = get_logger(__name__)


def _marker(markers: str | None, kind: str, rank: int) -> None:
    """``<markers>/<kind>-<rank>`` holding this process's pid: how the launcher of a local run tells a task that
    died (its pid gone, no ``finished`` marker) from one still converting."""
    if markers is None:
        return
    os.makedirs(markers, exist_ok=True)
    atomic_write_bytes(os.path.join(markers, f"{kind}-{rank:05d}"), str(os.getpid()).encode())


class ConvertUnits(PipelineStep):
    """Convert robo-shards work units with ``worker(args)`` (e.g. ``robomimic.convert._worker``).

    Args:
        worker: Leases and converts units until none is left; returns how many it converted. Picklable.
        args: ``worker``'s one argument.
        out_dir: The conversion's output directory (holds ``manifest.json``).
        publish: ``{"codec", "metadata", "source"}`` to publish ``index.json`` when this task finds every unit done
            after its own work (the task that completes the last unit does; :func:`manifest.finish` runs under the
            manifest lock, so exactly one sees them all done first, and a later publish writes the same bytes), or
            ``None`` when the launching process publishes.
        markers: A local directory for start/finish markers (local runs), or ``None``.
    """

    name = "convert robo-shards units"
    type = "robo-loaders"

    def __init__(
        self, worker: Callable, args, out_dir: str, publish: Mapping | None = None, markers: str | None = None
    ):
        super().__init__()
        self.worker, self.args, self.out_dir = worker, args, out_dir
        self.publish, self.markers = (dict(publish) if publish is not None else None), markers

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        """One datatrove task: convert units until none is left, then publish if asked to and every unit is done.

        Writes a ``started-<rank>`` marker first and a ``finished-<rank>`` marker last (when ``markers`` is set), so the
        launcher can tell a task that died from one still converting.

        Args:
            data: The pipeline's input, passed through unchanged (this step is the whole pipeline).
            rank: This task's rank (for the markers and the log line).
            world_size: How many tasks (for the log line).

        Returns:
            ``data``.
        """
        _marker(self.markers, "started", rank)
        with self.track_time("task"):
            converted = self.worker(self.args)
        self.stat_update("units", value=int(converted or 0), unit="task")
        if self.publish is not None:  # the source looked at again before anything is published (a stat per file)
            manifest.withdraw_if_source_stat_changed(self.out_dir, self.publish["source"])
        if self.publish is not None and manifest.finish(self.out_dir, **self.publish):
            logger.info(f"task {rank}/{world_size}: every unit is done; published {self.out_dir}/index.json")
        _marker(self.markers, "finished", rank)
        return data


def local_executor(
    step: ConvertUnits, tasks: int, workers: int, logging_dir: str, start_method: str = "forkserver"
) -> LocalPipelineExecutor:
    """datatrove's ``LocalPipelineExecutor`` running ``step`` in ``tasks`` tasks, ``skip_completed=False`` (see the
    module's docstring).

    Args:
        step: The step every task runs.
        tasks: How many tasks.
        workers: How many run at once.
        logging_dir: datatrove's logs and stats.
        start_method: multiprocessing's start method for the tasks.

    Returns:
        The executor, not yet run.
    """
    return LocalPipelineExecutor(
        pipeline=[step],
        tasks=tasks,
        workers=workers,
        logging_dir=logging_dir,
        skip_completed=False,
        start_method=start_method,
    )


def default_env_command() -> str | None:
    """Activate the virtualenv this process runs in (the job needs ``launch_pickled_pipeline`` and this package)."""
    activate = os.path.join(sys.prefix, "bin", "activate")
    if sys.prefix != sys.base_prefix and os.path.exists(activate):
        return f"source {activate}"
    return None


def slurm_executor(
    step: ConvertUnits,
    tasks: int,
    logging_dir: str,
    partition: str,
    time: str = "24:00:00",
    cpus_per_task: int = 1,
    mem_per_cpu_gb: int = 4,
    job_name: str = "robo-loaders-convert",
    qos: str | None = None,
    sbatch_args: Mapping | None = None,
    env_command: str | None = None,
    workers: int = -1,
    slurm_logs_folder: str | None = None,
    **extra,
) -> SlurmPipelineExecutor:
    """A job array of ``tasks`` Slurm tasks running ``step`` (datatrove's ``SlurmPipelineExecutor``, not submitted).

    Args:
        step: The step every task runs.
        tasks: How many array tasks.
        logging_dir: datatrove's logs, stats and the job's files.
        partition: The Slurm partition.
        time: Time limit per task.
        cpus_per_task: CPUs per task.
        mem_per_cpu_gb: Memory per CPU, in GB.
        job_name: The job's name.
        qos: ``None`` leaves the cluster's default (datatrove's own default, ``normal``, does not exist everywhere).
        sbatch_args: Extra ``#SBATCH --KEY=VALUE`` lines as ``{KEY: VALUE}``.
        env_command: Run before each task; default: activate this virtualenv (:func:`default_env_command`).
        workers: Caps how many array tasks run at once (-1: no cap).
        slurm_logs_folder: Where Slurm writes the tasks' output (datatrove's default when ``None``).
        **extra: Passed to ``SlurmPipelineExecutor`` as is (e.g. ``mail_user``, ``srun_args``, ``requeue``).

    Returns:
        The executor.
    """
    return SlurmPipelineExecutor(
        pipeline=[step],
        tasks=tasks,
        time=time,
        partition=partition,
        cpus_per_task=cpus_per_task,
        mem_per_cpu_gb=mem_per_cpu_gb,
        job_name=job_name,
        qos=qos,
        sbatch_args=dict(sbatch_args or {}),
        env_command=env_command if env_command is not None else default_env_command(),
        workers=workers,
        logging_dir=logging_dir,
        slurm_logs_folder=slurm_logs_folder,
        skip_completed=False,
        **extra,
    )
