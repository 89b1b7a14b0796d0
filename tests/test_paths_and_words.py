"""Issue 30 items 5, 6, 12, 13 at the unit level: paths named by options checked when the options are resolved
(one line each, before any data is read), the plugin's errors printed as one line at the end of a training script
(others keep their traceback), --dataset.backend_kwargs read as JSON, and where a backend writes."""

import json
import os
import re
import subprocess
import sys

import pytest
from fake_machine import patch_available

from robo_loaders_plugin.core import paths
from robo_loaders_plugin.core.errors import BackendOptionError, one_line
from robo_loaders_plugin.core.registry import choose_backend as _choose

FLAG = "--dataset.backend_kwargs"


def choose_backend(framework, name, given, options_where=FLAG):
    return _choose(framework, name, given, name_where="backend", options_where=options_where)


# -- item 12: paths checked when the options are resolved ----------------------------------------------------------
def test_writable_dir_problem(tmp_path):
    (tmp_path / "f").write_text("x")
    assert "is a file" in paths.writable_dir_problem(str(tmp_path / "f"))
    assert "cannot create" in paths.writable_dir_problem(str(tmp_path / "f" / "sub"))
    assert "a parent of it is a file" in paths.writable_dir_problem(str(tmp_path / "f" / "sub"))
    assert "cannot create '/proc/nope'" in paths.writable_dir_problem("/proc/nope")  # root may not create there
    assert paths.writable_dir_problem(str(tmp_path / "new" / "dir")) is None  # negative control: created, usable
    assert os.path.isdir(tmp_path / "new" / "dir") and os.listdir(tmp_path / "new" / "dir") == []  # probe removed


def test_shards_dir_problem_does_not_blame_a_conversion_that_never_ran(tmp_path):
    missing, empty, unfinished, done = (tmp_path / n for n in ("missing", "empty", "unfinished", "done"))
    for d in (empty, unfinished, done):
        d.mkdir()
    (unfinished / "manifest.json").write_text("{}")
    (done / "index.json").write_text("{}")
    assert paths.shards_dir_problem(str(missing)) == f"{str(missing)!r} does not exist"
    no_index = paths.shards_dir_problem(str(empty))
    assert "is not a robo-shards directory" in no_index and "conversion" not in no_index
    assert "has not finished" in paths.shards_dir_problem(str(unfinished))
    assert "run the same 'robo-loaders convert' command again" in paths.shards_dir_problem(str(unfinished))
    assert paths.shards_dir_problem(str(done)) is None  # negative control (the reader checks the rest)


@pytest.mark.parametrize(
    "backend, options, message",
    [
        (
            "compressed_cache",
            {"cache_dir": "/proc/nope"},
            f"{FLAG}.cache_dir must be a directory you can write to: cannot create '/proc/nope' "
            "(No such file or directory) "
            "(backend 'compressed_cache')",
        ),
        ("datapipe", {"cache_dir": "/proc/nope"}, f"{FLAG}.cache_dir must be a directory you can write to"),
        ("gpu_resampler", {"cache_dir": "/proc/nope"}, f"{FLAG}.cache_dir must be a directory you can write to"),
        ("video_stream", {"cache_dir": "/proc/nope"}, f"{FLAG}.cache_dir must be a directory you can write to"),
        (
            "video_stream",
            {"local_cache_dir": "/proc/nope"},
            f"{FLAG}.local_cache_dir must be a directory you can write",
        ),
        (
            "datapipe",
            {"shards": "/nonexistent/shards"},
            f"{FLAG}.shards must be a directory 'robo-loaders convert' wrote (left out, the dataset is converted on "
            "first use "
            "into the cache directory): '/nonexistent/shards' does not exist (backend 'datapipe')",
        ),
        (
            "video_stream",
            {"source": "/nonexistent/root"},
            f"{FLAG}: source must be a LeRobot dataset root or a URL: '/nonexistent/root' does not exist",
        ),
    ],
)
def test_bad_paths_are_one_line_when_the_options_are_resolved(backend, options, message):
    with pytest.raises(BackendOptionError) as e:
        choose_backend("lerobot", backend, options, options_where=FLAG)
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_robomimic_video_shards_source_and_good_paths(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(
        BackendOptionError,
        match=r"source must be a directory 'robo-loaders convert robomimic IN OUT "
        r"--frames h264' wrote .*has no index.json",
    ):
        choose_backend("robomimic", "video_stream", {"source": str(empty)}, options_where="train.data_backend_kwargs")
    # negative control: paths that are fine resolve; a URL is not looked at here
    cache = str(tmp_path / "c")
    for backend in ("compressed_cache", "datapipe", "gpu_resampler", "video_stream"):
        assert choose_backend("lerobot", backend, {"cache_dir": cache}).options.cache_dir == cache
    assert choose_backend("lerobot", "video_stream", {"source": "s3://bucket/ds"}).options.source == "s3://bucket/ds"
    # robomimic reads its shards from a local directory: a URL was taken for a relative path (a reviewer's finding)
    with pytest.raises(BackendOptionError, match=r"source 'http://h/rm_vid' is a URL; robomimic's video shards are"):
        choose_backend("robomimic", "video_stream", {"source": "http://h/rm_vid"}, options_where="x")


def test_cache_dir_is_an_option_of_every_backend_that_writes():
    """Item 13: passing cache_dir to video_stream suggested cache_memory; every backend that writes takes it."""
    from robo_loaders_plugin.core.registry import get_backend

    for name in ("compressed_cache", "datapipe", "gpu_resampler", "video_stream"):
        spec = get_backend(name)
        assert "cache_dir" in spec.options and spec.options["cache_dir"].per_host, name
    with pytest.raises(BackendOptionError) as e:  # negative control: an unknown option still gets a suggestion
        choose_backend("lerobot", "video_stream", {"cache_dirr": "/x"}, options_where=FLAG)
    assert "did you mean 'cache_dir'?" in str(e.value) and "cache_memory'?" not in str(e.value)


def test_records_go_under_the_backends_cache_dir(tmp_path, monkeypatch):
    from robo_loaders_plugin.storage import cache

    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(tmp_path / "env"))
    assert cache.records_dir(str(tmp_path / "mine")) == str(tmp_path / "mine" / ".validated")
    assert cache.records_dir(None) == str(tmp_path / "env" / ".validated")
    assert cache.location("~/x") == os.path.join(os.path.expanduser("~"), "x")


def test_the_cache_root_is_probed(tmp_path):
    from robo_loaders_plugin.storage import cache

    with pytest.raises(cache.CacheError, match=r"cache_dir='/proc/nope': cannot create '/proc/nope'"):
        cache.cache_root("/proc/nope")
    assert cache.cache_root(str(tmp_path / "ok")) == str(tmp_path / "ok")


# -- item 6: one line for the plugin's errors, tracebacks for everything else ------------------------------------
def test_one_line_keeps_a_workers_own_message():
    worker = RuntimeError(
        "Caught SourceError in DataLoader worker process 0.\nOriginal Traceback (most recent call "
        'last):\n  File "x.py", line 1, in f\n    g()\n'
        "robo_loaders_plugin.core.errors.SourceError: "
        "/data/x.hdf5: demo_3 is broken\n"
    )
    assert one_line(worker) == "/data/x.hdf5: demo_3 is broken"
    assert one_line(ValueError("a\nb")) == "a b"


HOOKED = """
import sys
from robo_loaders_plugin.core.errors import SourceError, install_one_line_excepthook
install_one_line_excepthook()
install_one_line_excepthook()  # idempotent
def late():
    raise {error}("{message}")
late()
"""


@pytest.mark.parametrize("error, traceback", [("SourceError", False), ("ValueError", True)])
def test_the_excepthook_prints_the_plugins_errors_in_one_line_and_nothing_else(error, traceback):
    """The plugin's error: one line, exit 1. Negative control: any other error (a bug) keeps its traceback."""
    code = HOOKED.format(error=error, message="/data/x: bad")
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    assert p.returncode == 1
    assert ("Traceback" in p.stderr) == traceback, p.stderr
    if not traceback:
        assert p.stderr == "error: /data/x: bad\n"


PASSED_ON = """
from robo_loaders_plugin.core.errors import install_one_line_excepthook, pass_through
install_one_line_excepthook()
def lerobots_own():
    raise ValueError("'repo_id' argument missing. Please specify it to push the model to the hub.")
def plugin_wrapper():
    return lerobots_own()
{mark}
plugin_wrapper()
"""


@pytest.mark.parametrize("marked", [True, False])
def test_an_error_the_framework_raises_itself_is_printed_without_the_plugins_wrapper(marked):
    """Issue 42 item 15: LeRobot's own refusal (no --policy.push_to_hub=false) printed a traceback through the
    plugin's ``lerobot/compat.py`` (the wrapper around LeRobot's ``train``), so it looked like the plugin's. A
    wrapper marked ``pass_through`` is left out of the printed traceback, every other frame kept in order, the
    error unchanged. Negative control: the same wrapper unmarked is printed."""
    code = PASSED_ON.format(mark="plugin_wrapper = pass_through(plugin_wrapper)" if marked else "")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 1
    frames = re.findall(r", in (\S+)\n", p.stderr)
    assert frames == (["<module>", "lerobots_own"] if marked else ["<module>", "plugin_wrapper", "lerobots_own"])
    assert p.stderr.splitlines()[-1] == (
        "ValueError: 'repo_id' argument missing. Please specify it to push the model to the hub."
    )


# -- item 5: --dataset.backend_kwargs is JSON ---------------------------------------------------------------------
def test_lerobot_command_line_is_read_as_json():
    from robo_loaders_plugin.lerobot.flags import command_line_options
    from robo_loaders_plugin.lerobot.integration import check_command_line

    assert check_command_line([f"{FLAG}="]) == [f"{FLAG}={{}}"]  # empty: no options, as typed elsewhere
    assert check_command_line([FLAG, "  ", "--x=1"]) == [FLAG, "{}", "--x=1"]
    argv = ["--steps=3", f'{FLAG}={{"target_fps": 1e9, "offsets": [5e-2]}}']
    assert check_command_line(argv) == argv
    yaml_read = {"target_fps": "1e9", "offsets": ["5e-2"], "from_config_file": 1}  # what LeRobot's YAML pass gives
    assert command_line_options(yaml_read, argv) == {"target_fps": 1e9, "offsets": [5e-2], "from_config_file": 1}
    assert command_line_options({"a": 1}, ["--steps=3"]) == {"a": 1}  # negative control: no flag, untouched
    with pytest.raises(BackendOptionError, match="must be a JSON object"):
        command_line_options({}, [FLAG, "{codec: zstd}"])
    text = json.dumps({"target_fps": 1e9})
    assert command_line_options({"target_fps": "1e9"}, [FLAG, "x", f"{FLAG}={text}"]) == {"target_fps": 1e9}


def test_byte_sizes_take_json_numbers():
    opts = choose_backend("lerobot", "gpu_resampler", {"max_memory": 2e9, "max_device_memory": 8e9}).options
    assert (opts.max_memory, opts.max_device_memory) == (2e9, 8e9)
    assert choose_backend("lerobot", "datapipe", {"cache_memory": 5e8}).options.cache_memory == 5e8
    with pytest.raises(BackendOptionError, match=r"max_memory .*must be >= 0"):  # negative control: still checked
        choose_backend("lerobot", "gpu_resampler", {"max_memory": -1e9})


def test_gpu_resampler_spills_into_its_cache_dir(tmp_path, monkeypatch):
    """Item 13: the compressed tier that RAM cannot hold goes to a file in gpu_resampler's cache_dir (a negative
    control: without it, $ROBO_LOADERS_CACHE)."""
    import types

    import numpy as np
    import torch

    from robo_loaders_plugin.backends.gpu_resampler import tiers as tensors
    from robo_loaders_plugin.core.data_size import DataSize

    patch_available(monkeypatch)
    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(tmp_path / "env"))
    lengths = (5, 3, 7, 4, 6)
    size = DataSize(np.array(lengths), {"cam": 3 * 32 * 32}, 8)
    budget = tensors.BUILD_EPISODES * max(lengths) * 3 * 32 * 32 + 8 * sum(lengths) + 64  # frames do not fit
    for cache_dir, where in ((str(tmp_path / "mine"), str(tmp_path / "mine")), (None, str(tmp_path / "env"))):
        opts = types.SimpleNamespace(max_memory=budget, max_device_memory=None, cache_dir=cache_dir)
        plan, _ = tensors.plan_tiers_checked(size, torch.device("cpu"), opts, "kw", quiet=True)
        assert plan.spill_dir == where, (plan.spill_dir, where)


def test_the_kept_tiers_name_their_raw_demos_in_words():
    """A reviewer's finding: tiers holding no raw demo were said to hold "demos 0--1"."""
    from robo_loaders_plugin.backends.gpu_resampler.stored_tiers import _first

    assert [_first(n, "demo") for n in (0, 1, 5)] == ["no demos", "demo 0", "demos 0-4"]
