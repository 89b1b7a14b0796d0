"""robo-loaders convert on an existing engine (storage/shards/executors.py): datatrove's local executor writes the
same bytes as the local converter; a task killed mid-unit is taken over in the same run, and a killed run is
resumed redoing only its unfinished units; a Slurm job is built, submitted (to a stand-in sbatch) and its array
tasks, run as Slurm would run them, convert and publish; executor options are checked."""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("datatrove")

from robo_loaders_plugin.robomimic import convert as robomimic_convert
from robo_loaders_plugin.robomimic.convert import convert_robomimic, verify_robomimic
from robo_loaders_plugin.sources.robomimic_hdf5 import RobomimicHdf5
from robo_loaders_plugin.storage.codec import FrameCodec
from robo_loaders_plugin.storage.shards import ShardWriter, executors, manifest

BIN = os.path.dirname(sys.executable)
SHARD_BYTES = 100_000  # about one demo per unit: 12 units, planned alike for 1 and 2 workers
REAL_WORKER = robomimic_convert._worker


def dataset_files(out) -> dict:
    """Every file a reader uses, by path: index.json, dataset.json and the shards (nothing else may differ)."""
    names = ["index.json", "dataset.json"] + [f"shards/{n}" for n in sorted(os.listdir(os.path.join(out, "shards")))]
    files = {}
    for n in names:
        with open(os.path.join(out, n), "rb") as f:
            files[n] = f.read()
    return files


def assert_same_bytes(out, reference):
    got, want = dataset_files(out), dataset_files(reference)
    assert sorted(got) == sorted(want)  # no temporary file left, no shard missing or extra
    assert [n for n in want if got[n] != want[n]] == []


def units(out):
    with open(os.path.join(out, "manifest.json")) as f:
        return json.load(f)["units"]


def converted_by_tasks(logs) -> int:
    """Units the datatrove tasks report converting (their per-task stats)."""
    total = 0
    for name in os.listdir(os.path.join(logs, "stats")):
        with open(os.path.join(logs, "stats", name)) as f:
            units = json.load(f)[0]["stats"]["units"]
            total += units if isinstance(units, int) else units["total"]  # datatrove saves a zero as 0
    return total


@pytest.fixture(scope="module")
def reference(tiny_hdf5, tmp_path_factory):
    """The local converter's output (this process, one worker)."""
    out = str(tmp_path_factory.mktemp("reference") / "shards")
    assert convert_robomimic(tiny_hdf5, out, shard_bytes=SHARD_BYTES, progress=False) == {"episodes": 12, "shards": 12}
    assert verify_robomimic(out, tiny_hdf5) == []
    return out


def test_datatrove_local_two_tasks_write_the_local_converters_bytes(tiny_hdf5, reference, tmp_path):
    out, logs = str(tmp_path / "shards"), str(tmp_path / "logs")
    res = convert_robomimic(
        tiny_hdf5,
        out,
        num_workers=2,
        shard_bytes=SHARD_BYTES,
        progress=False,
        executor="datatrove-local",
        executor_options={"logging_dir": logs},
    )
    assert res == {"episodes": 12, "shards": 12}
    assert [u["episodes"] for u in units(out)] == [u["episodes"] for u in units(reference)]  # the same plan
    assert_same_bytes(out, reference)
    assert sorted(os.listdir(os.path.join(logs, "completions"))) == ["00000", "00001"]  # two datatrove tasks ran
    assert converted_by_tasks(logs) == 12  # ... and converted every unit (not the launcher after them)


def dying_worker(args):
    """The first task to call it leases a unit, writes part of its shard, waits until the other task has converted
    every other unit and returned, then dies as if OOM-killed; any later call converts as the framework's worker
    does (the other task once the first holds its lease, so who converts what is the same in every run)."""
    in_path, out_dir, codec_dict, _ = args
    try:
        os.close(os.open(out_dir + ".died", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        while not os.path.exists(out_dir + ".leased"):
            time.sleep(0.05)
        return REAL_WORKER(args)
    source = RobomimicHdf5(in_path)
    with source.open() as f:
        unit = manifest.lease(out_dir)
        open(out_dir + ".leased", "w").close()
        writer = ShardWriter(
            out_dir, FrameCodec(**codec_dict), {}, shard_bytes=2**62, shard_prefix=f"unit-{unit['id']:06d}"
        )
        writer.add_episode(unit["episodes"][0], *source.read_all(f, unit["episodes"][0]))
        writer._file.flush()
        completions = os.path.join(os.path.dirname(out_dir), "logs", "completions")
        while not (os.path.isdir(completions) and os.listdir(completions)):
            time.sleep(0.05)  # the other task has returned (this one never completes)
        os._exit(9)


@pytest.mark.timeout(150)  # datatrove's pool alone would wait forever for the killed task's result
def test_a_killed_task_is_noticed_and_its_half_written_unit_converted_again(
    tiny_hdf5, reference, tmp_path, monkeypatch, capfd
):
    out, logs = str(tmp_path / "shards"), str(tmp_path / "logs")
    monkeypatch.setattr(robomimic_convert, "_worker", dying_worker)  # pickled by reference: tasks import this module
    res = convert_robomimic(
        tiny_hdf5,
        out,
        num_workers=2,
        shard_bytes=SHARD_BYTES,
        progress=False,
        executor="datatrove-local",
        executor_options={"logging_dir": logs},
    )
    assert re.search(
        r"datatrove task\(s\) [01] died without finishing; converting what they left here", capfd.readouterr().out
    )
    assert res == {"episodes": 12, "shards": 12}
    assert converted_by_tasks(logs) == 11  # the dead task's unit was converted by the launching process
    assert all(u["state"] == "done" for u in units(out))
    assert_same_bytes(out, reference)  # the half-written shard was redone; its temporary file is gone


KILLED_RUN = textwrap.dedent("""
    import os, sys
    from robo_loaders_plugin.storage.shards import writer
    from robo_loaders_plugin.robomimic.convert import convert_robomimic

    src, out, logs = sys.argv[1:4]
    written = []
    add_episode = writer.ShardWriter.add_episode

    def dies_on_the_fourth_episode(self, *args, **kwargs):
        add_episode(self, *args, **kwargs)
        written.append(args[0])
        if len(written) == 4:  # three units done, the fourth half-written: the whole run is killed
            self._file.flush()
            os._exit(9)

    writer.ShardWriter.add_episode = dies_on_the_fourth_episode
    convert_robomimic(src, out, num_workers=2, shard_bytes=100_000, progress=False, executor="datatrove-local",
                      executor_options={"logging_dir": logs, "workers": 1})  # tasks in this process, one by one
""")


def test_a_killed_run_is_resumed_redoing_only_its_unfinished_units(tiny_hdf5, reference, tmp_path):
    out, logs = str(tmp_path / "shards"), str(tmp_path / "logs")
    with open(tmp_path / "killed.log", "w+") as log:
        # its own session: datatrove's manager process outlives a killed launcher (holding its pipes); ended below
        p = subprocess.Popen(
            [sys.executable, "-c", KILLED_RUN, tiny_hdf5, out, logs],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            assert p.wait(timeout=300) == 9, (tmp_path / "killed.log").read_text()[-3000:]
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    states = [u["state"] for u in units(out)]
    assert states == ["done"] * 3 + ["leased"] + ["planned"] * 8, states
    assert not os.path.exists(os.path.join(out, "index.json"))
    shards = os.path.join(out, "shards")
    assert [n for n in os.listdir(shards) if n.startswith("unit-000003-000000.tar.tmp-")]  # the half-written shard
    done = {
        n: (os.stat(os.path.join(shards, n)).st_ino, os.stat(os.path.join(shards, n)).st_mtime_ns)
        for n in os.listdir(shards)
        if n.endswith(".tar")
    }
    assert sorted(done) == [f"unit-{i:06d}-000000.tar" for i in range(3)]

    res = convert_robomimic(
        tiny_hdf5,
        out,
        num_workers=2,
        shard_bytes=SHARD_BYTES,
        progress=False,
        executor="datatrove-local",
        executor_options={"logging_dir": logs},
    )
    assert res == {"episodes": 12, "shards": 12}
    assert_same_bytes(out, reference)
    assert converted_by_tasks(logs) == 9  # the dead lease's unit and the 8 never started, nothing else
    assert {
        n: (os.stat(os.path.join(shards, n)).st_ino, os.stat(os.path.join(shards, n)).st_mtime_ns) for n in done
    } == done  # the units done before the kill were not rewritten


FAKE_SBATCH = """#!/bin/sh
# stands in for Slurm's sbatch: keeps each submitted script and its arguments, answers as sbatch does
n=$(ls "{calls}" | wc -l)
mkdir -p "{calls}/$n"
echo "$@" > "{calls}/$n/args"
for last; do :; done
cp "$last" "{calls}/$n/script"
echo "Submitted batch job $((4242 + n))"
"""
FAKE_SCONTROL = "#!/bin/sh\necho node001\n"  # scontrol show hostnames $SLURM_NODELIST, as a task calls it


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    bin_dir, calls = tmp_path / "fake-slurm-bin", tmp_path / "sbatch-calls"
    bin_dir.mkdir()
    calls.mkdir()
    for name, text in (("sbatch", FAKE_SBATCH.format(calls=calls)), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return calls


def submitted(calls) -> list[tuple[str, str]]:
    return [
        ((calls / d / "args").read_text(), (calls / d / "script").read_text())
        for d in sorted(os.listdir(calls), key=int)
    ]


def test_slurm_job_is_built_submitted_and_its_array_tasks_convert_and_publish(
    tiny_hdf5, reference, tmp_path, fake_slurm
):
    out, logs = str(tmp_path / "shards"), str(tmp_path / "logs")
    options = {
        "partition": "cpu",
        "time": "00:30:00",
        "cpus_per_task": 2,
        "mem_per_cpu_gb": 3,
        "job_name": "rl-conv",
        "sbatch_args": {"account": "proj", "exclusive": ""},
        "logging_dir": logs,
    }
    res = convert_robomimic(
        tiny_hdf5,
        out,
        num_workers=2,
        shard_bytes=SHARD_BYTES,
        progress=False,
        executor="datatrove-slurm",
        executor_options=options,
    )
    assert res == {
        "job_id": "4242",
        "tasks": 2,
        "units": 12,
        "pending_units": 12,
        "logging_dir": logs,
        "launch_script": os.path.join(logs, "launch_script.slurm"),
    }
    assert not os.path.exists(os.path.join(out, "index.json"))  # submitted, not converted
    (args, script), (_merge_args, merge_script) = submitted(fake_slurm)  # the job array, then datatrove's stats merge
    assert args.split()[0] == "--export=ALL,RUN_OFFSET=0" and "merge_stats" in merge_script
    assert "--dependency=afterok:4242" in merge_script
    directives = [ln for ln in script.splitlines() if ln.startswith("#SBATCH")]
    for want in (
        "--partition=cpu",
        "--time=00:30:00",
        "--cpus-per-task=2",
        "--mem-per-cpu=3G",
        "--job-name=rl-conv",
        "--array=0-1",
        "--account=proj",
        "--exclusive",
        "--requeue",
        "--nodes=1",
    ):
        assert f"#SBATCH {want}" in directives, (want, directives)
    assert not any("--qos" in d for d in directives)  # the cluster's default QOS, not datatrove's "normal"
    assert f"source {sys.prefix}/bin/activate" in script
    assert f"launch_pickled_pipeline {logs}/executor.pik" in script
    with open(os.path.join(logs, "launch_script.slurm")) as f:
        assert f.read() == script

    logs_out = run_array_tasks(logs, 2)  # as Slurm would: each task loads the pickled executor, runs its rank
    assert sum("every unit is done; published" in o for o in logs_out) >= 1, logs_out  # the last task published
    assert_same_bytes(out, reference)
    assert converted_by_tasks(logs) == 12

    # a shard lost since: the same command submits again (datatrove's completion files must not skip the ranks),
    # for the one unit to redo, and the task publishes
    os.unlink(os.path.join(out, "shards", "unit-000005-000000.tar"))
    res = convert_robomimic(
        tiny_hdf5,
        out,
        num_workers=2,
        shard_bytes=SHARD_BYTES,
        progress=False,
        executor="datatrove-slurm",
        executor_options=options,
    )
    assert (res["job_id"], res["tasks"], res["pending_units"]) == ("4244", 1, 1)
    assert "#SBATCH --array=0-0" in submitted(fake_slurm)[2][1]
    assert not os.path.exists(os.path.join(out, "index.json"))  # withdrawn while a unit is missing
    run_array_tasks(logs, 1)
    assert_same_bytes(out, reference)

    # the same command once more: everything is done, so it publishes here and submits nothing
    again = convert_robomimic(
        tiny_hdf5,
        out,
        num_workers=2,
        shard_bytes=SHARD_BYTES,
        progress=False,
        executor="datatrove-slurm",
        executor_options=options,
    )
    assert again == {"episodes": 12, "shards": 12} and len(submitted(fake_slurm)) == 4


def test_slurm_paths_are_checked_as_given_and_after_datatrove_is_found(tiny_hdf5, tmp_path, fake_slurm, monkeypatch):
    """A reviewer's reproductions of this session's path check: an output directory with a space and a clean
    logging directory (the only one the job script names) was refused after planning, the default <out>/datatrove
    checked instead of the directory given; without datatrove the check imported it first (a traceback, not the
    install hint). Control: the same logging directory inside the spaced output directory is refused up front."""
    out, logs = tmp_path / "out dir", str(tmp_path / "logs")
    res = convert_robomimic(tiny_hdf5, str(out), num_workers=2, progress=False, executor="datatrove-slurm",
                            executor_options={"partition": "cpu", "logging_dir": logs})  # fmt: skip
    assert res["job_id"] == "4242" and res["logging_dir"] == logs
    with pytest.raises(executors.ExecutorError, match="holds a space or shell character"):
        executors.check_options("datatrove-slurm", {"partition": "cpu"}, str(out))
    monkeypatch.setitem(sys.modules, "datatrove", None)  # not installed
    with pytest.raises(executors.ExecutorError, match=r"needs datatrove: pip install"):
        executors.check_options("datatrove-slurm", {"partition": "cpu"}, str(out))


def run_array_tasks(logs, n) -> list[str]:
    env = {**os.environ, "SLURM_NODELIST": "node001", "SLURM_JOB_ID": "4242"}
    tasks = [
        subprocess.Popen(
            [os.path.join(BIN, "launch_pickled_pipeline"), os.path.join(logs, "executor.pik")],
            env={**env, "SLURM_ARRAY_TASK_ID": str(i)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(n)
    ]
    out = [t.communicate(timeout=300)[0] for t in tasks]
    assert [t.returncode for t in tasks] == [0] * n, out
    return out


def test_executor_options_are_checked_before_the_source_is_read(tmp_path):
    missing = str(tmp_path / "no-such.hdf5")  # never opened: options are checked first
    cases = [
        ("spark", {}, "unknown executor 'spark'; choose one of local, datatrove-local, datatrove-slurm"),
        ("local", {"logging_dir": "x"}, "executor 'local' does not take option(s) logging_dir"),
        ("datatrove-local", {"partition": "cpu"}, "does not take option(s) partition"),
        ("datatrove-slurm", {"time": "1:00:00"}, "needs a Slurm partition"),
    ]
    for executor, options, message in cases:
        with pytest.raises(executors.ExecutorError, match=message.replace("(", r"\(").replace(")", r"\)")):
            convert_robomimic(missing, str(tmp_path / "out"), executor=executor, executor_options=options)
    assert not os.path.exists(tmp_path / "out")
    # paths datatrove writes unquoted into the job script: every task failed to start (a reviewer's reproduction)
    for out, options in (
        (tmp_path / "out dir", {"partition": "cpu"}),  # its default logging directory, <out>/datatrove
        (tmp_path / "out", {"partition": "cpu", "logging_dir": str(tmp_path / "my logs")}),
    ):
        with pytest.raises(executors.ExecutorError, match=r"--logging-dir .* holds a space or shell character"):
            convert_robomimic(missing, str(out), executor="datatrove-slurm", executor_options=options)
        assert not os.path.exists(out)
    executors.check_options("datatrove-slurm", {"partition": "cpu"}, str(tmp_path / "out"))  # control
    # a logging directory datatrove cannot create: a traceback after the manifest was written (a reviewer's)
    (tmp_path / "afile").write_text("")
    for executor, options in (("datatrove-local", {}), ("datatrove-slurm", {"partition": "cpu"})):
        options = dict(options, logging_dir=str(tmp_path / "afile" / "logs"))
        with pytest.raises(executors.ExecutorError, match=r"--logging-dir: cannot create .*afile/logs"):
            convert_robomimic(missing, str(tmp_path / "out"), executor=executor, executor_options=options)
        assert not os.path.exists(tmp_path / "out")
    # a logging directory inside the LeRobot root: its logs changed the source, and the whole conversion was
    # withdrawn at its end, every run after refused (a reviewer's reproduction); refused before anything is read
    from robo_loaders_plugin.lerobot.convert import convert_lerobot

    root = tmp_path / "lerobot_root"
    root.mkdir()
    with pytest.raises(executors.ExecutorError, match=r"--logging-dir .*lerobot_root/logs: inside the source"):
        convert_lerobot(str(root), str(tmp_path / "out"), executor="datatrove-local",
                        executor_options={"logging_dir": str(root / "logs")})  # fmt: skip
    assert not os.path.exists(tmp_path / "out") and not os.path.exists(root / "logs")
    executors.check_options("datatrove-local", {"logging_dir": str(tmp_path / "logs")}, source=str(root))  # control

    assert executors.options_from_cli(
        "datatrove-slurm",
        logging_dir="L",
        concurrent_tasks=4,
        slurm_partition="gpu",
        slurm_time="2:00:00",
        slurm_cpus_per_task=2,
        slurm_mem_per_cpu_gb=8,
        slurm_job_name="j",
        slurm_qos="high",
        sbatch_arg=("account=proj", "--exclusive", "constraint=a100|h100"),
        slurm_env_command="module load x",
    ) == {
        "logging_dir": "L",
        "workers": 4,
        "partition": "gpu",
        "time": "2:00:00",
        "cpus_per_task": 2,
        "mem_per_cpu_gb": 8,
        "job_name": "j",
        "qos": "high",
        "env_command": "module load x",
        "sbatch_args": {"account": "proj", "exclusive": "", "constraint": "a100|h100"},
    }
    local = executors.options_from_cli("datatrove-local", logging_dir="L", concurrent_tasks=1)
    assert local == {"logging_dir": "L", "workers": 1}
    assert executors.options_from_cli("local") == {}
    with pytest.raises(executors.ExecutorError, match=r"--slurm-partition do.es. not apply to --executor datatrove-l"):
        executors.options_from_cli("datatrove-local", slurm_partition="cpu")
    with pytest.raises(
        executors.ExecutorError,
        match=r"--logging-dir, --concurrent-tasks do.es. not apply to "
        r"--executor local",
    ):
        executors.options_from_cli("local", logging_dir="L", concurrent_tasks=2)
    with pytest.raises(executors.ExecutorError, match="expected KEY=VALUE"):
        executors.parse_sbatch_args(["=x"])
