"""The benchmark's child runs: each starts from an empty cache directory of its own unless asked to reuse the
user's, so no backend's first-run cost depends on what an earlier run left (issue 23, item 14)."""

import os

from robo_loaders_plugin.bench.runner import run_child

CHILD = """
import json, os, sys
cache = os.environ.get("ROBO_LOADERS_CACHE")
left = sorted(os.listdir(cache)) if cache and os.path.isdir(cache) else None
open(os.path.join(cache, "left-by-this-run"), "w").close() if cache and os.path.isdir(cache) else None
json.dump({"cache": cache, "left": left, "baseline_pss_bytes": 0}, open(sys.argv[2], "w"))
"""


def test_every_run_gets_an_empty_cache_unless_reuse_is_asked(tmp_path, monkeypatch):
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "cache_probe.py").write_text(CHILD)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "mods") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    user = tmp_path / "user-cache"
    user.mkdir()
    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(user))
    logs = tmp_path / "logs"
    logs.mkdir()
    first = run_child("cache_probe", {}, "a", str(logs), 120)
    second = run_child("cache_probe", {}, "a", str(logs), 120)
    assert "error" not in first, first
    assert first["cache"] != str(user) and first["cache"].startswith(str(logs)) and first["left"] == []
    assert second["left"] == [] and not os.path.exists(first["cache"])  # what the first left is gone
    reused = run_child("cache_probe", {}, "b", str(logs), 120, fresh_cache=False)
    again = run_child("cache_probe", {}, "b", str(logs), 120, fresh_cache=False)
    assert reused["cache"] == str(user) and again["left"] == ["left-by-this-run"]  # negative control: reuse sees it


FAILING = """
import sys
for i in range(300):
    print(f"line {i:03d} of a long traceback", flush=True)
sys.exit("the last line")
"""


def test_a_failed_runs_log_is_kept_from_the_start_of_a_line(tmp_path, monkeypatch):
    """Issue 30 item 14: a failed child's log was kept as its last 2,000 characters, cut mid-word. Control: the
    last line is kept whole."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "failing_child.py").write_text(FAILING)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "mods") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    error = run_child("failing_child", {}, "f", str(tmp_path), 120)["error"]
    first, rest = error.split("\n", 1)
    assert first == "exit 1:" and rest.startswith("line ") and rest.endswith("the last line\n"), error[:200]
    assert len(rest) <= 2000 and all(ln.startswith("line ") for ln in rest.splitlines()[:-1])


def test_the_decode_split_counts_only_the_profiling_threads_frame_reads():
    """The timed batches' pipeline may still be assembling batches while single items are profiled; its frame reads
    ran in other threads and were counted, so the split reported a negative fetch time (-100 ms/sample)."""
    import threading
    import time

    import numpy as np

    from robo_loaders_plugin.bench.lerobot_run import decode_split

    class Info:
        frames = True

    class Frames:
        def info(self, field):
            return Info()

        def take(self, field, *args):
            time.sleep(0.002)

    class Dataset:
        frames = Frames()

        def __len__(self):
            return 10

        def __getitem__(self, i):
            self.frames.take("cam")

    ds, stop = Dataset(), threading.Event()
    split = {}

    def other():  # a pipeline thread reading frames the whole time
        while not stop.is_set():
            ds.frames.take("cam")

    t = threading.Thread(target=other)
    try:
        decode_split_thread = threading.Thread(target=lambda: split.update(decode_split(ds, False, 50)))
        decode_split_thread.start()
        t.start()
        decode_split_thread.join()
    finally:
        stop.set()
        t.join()
    assert split["fetch_ms_per_sample"] >= 0 and 1.5 <= split["decode_ms_per_sample"] <= 10, split
    assert np.isfinite(split["single_process_samples_per_s"])


def test_the_decode_split_counts_a_store_read_through_gather_fields_once():
    """A store may read every field at once (``gather_fields``, which may call ``take`` inside): the split counts its
    time once, and a source that offers only ``take`` (the contract's minimum) is still profiled (the CI failure of
    stop 46: the profiler required ``gather``)."""
    import time

    from robo_loaders_plugin.bench.lerobot_run import decode_split

    class Info:
        frames = True

    class Frames:
        def info(self, field):
            return Info()

        def take(self, field, *args):
            time.sleep(0.002)

        def gather(self, field, *args):
            return self.take(field)

        def gather_fields(self, fields, *args):
            for f in fields:
                self.take(f)

    class Dataset:
        frames = Frames()

        def __len__(self):
            return 10

        def __getitem__(self, i):
            self.frames.gather_fields(["cam", "wrist"])
            time.sleep(0.002)  # the rest of the item: fetch, not decode

    split = decode_split(Dataset(), False, 40)
    # two reads of 2 ms each counted once, and 2 ms of fetch: decode ~2x fetch (~4x if take inside gather_fields
    # were counted again); a ratio, since a loaded machine stretches every sleep alike
    assert split["decode_ms_per_sample"] >= 3.5 and split["fetch_ms_per_sample"] >= 1.5, split
    assert 1.2 <= split["decode_ms_per_sample"] / split["fetch_ms_per_sample"] <= 3.0, split


def test_the_memory_sampler_says_what_its_sampling_cost_and_stops_without_waiting_an_interval():
    """A row records the sampler's own CPU seconds (``sampler_cpu_s``): its walks of the tree's mappings run on the
    cores the measured loader uses, so a row says what measuring it cost. Control: a sampler that never sampled
    has spent none; and leaving the block does not wait out the interval."""
    import subprocess
    import sys
    import time

    from robo_loaders_plugin.bench.memory import TreeMemorySampler

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        idle = TreeMemorySampler(child.pid, interval=0.05)
        assert idle.cpu_s == 0.0
        t = time.perf_counter()
        with TreeMemorySampler(child.pid, interval=3600) as mem:  # one sample, then woken at the block's end
            time.sleep(0.3)
        assert time.perf_counter() - t < 5  # not the interval's hour
        with TreeMemorySampler(child.pid, interval=0.05) as busy:
            time.sleep(0.5)
        assert mem.cpu_s > 0 and busy.cpu_s > mem.cpu_s and busy.peak_pss > 0
    finally:
        child.kill()
        child.wait()
