"""The cost-growth harness (issue 22): workload commands, where workloads go, and the held-bytes measure."""

import numpy as np

from benchmarks.harness import growth
from benchmarks.harness.growth_child import held_bytes


def test_workloads_go_where_the_environment_variable_says(monkeypatch, tmp_path):
    monkeypatch.setenv(growth.WORKLOADS_ENV, str(tmp_path))
    w = growth.Workload("lerobot", "1m")
    assert w.path() == str(tmp_path / "lerobot_video64_1m")
    assert growth.Workload("robomimic", "10k").path() == str(tmp_path / "robomimic_lowdim_10k.hdf5")
    monkeypatch.delenv(growth.WORKLOADS_ENV)
    assert growth.workloads_root() == growth.DEFAULT_WORKLOADS


def test_workload_commands_promise_the_issues_sizes():
    cmd = growth.Workload("lerobot", "1m").command("OUT")
    assert cmd[:3] == ["sample-data", "lerobot", "OUT"]
    assert "--writer" in cmd and cmd[cmd.index("--writer") + 1] == "fast"
    assert cmd[cmd.index("--episodes") + 1] == "10000" and cmd[cmd.index("--image-size") + 1] == "64x64"
    low = growth.Workload("robomimic", "1m").command("OUT.hdf5")
    assert low[low.index("--cameras") + 1] == "0" and low[low.index("--demos") + 1] == "10000"
    image = growth.Workload("robomimic_image", "100k").command("OUT.hdf5")
    assert image[image.index("--image-size") + 1] == "84" and "--no-next-obs" in image
    # the smallest episode length times the episodes reaches each size
    for size, episodes in growth.SIZES.items():
        assert episodes * (growth.LENGTHS[0] + growth.LENGTHS[1]) / 2 >= growth.MIN_FRAMES[size]
    assert [w.name for w in growth.all_workloads()].count("robomimic_image84_1m") == 0


class Holder:
    def __init__(self):
        self.index = np.arange(1000, dtype=np.int64)  # 8000 bytes
        self.view = self.index[10:]  # a view: not counted again
        self.cache = {"frames": np.zeros(10_000, np.uint8)}  # frame data: a skipped attribute
        self.per_episode = [{"length": 5}] * 3


def test_held_bytes_counts_index_arrays_once_and_skips_frame_data():
    h = Holder()
    total = held_bytes(h)
    assert 8000 <= total < 8000 + 2000
    # negative control: the same holder without the skip list counts the frame data too
    assert held_bytes(h, skip=set()) >= total + 10_000


def test_time_loader_serves_the_warm_up_untimed_and_rolls_over_passes():
    """The warm-up batches are served but not counted (a pass's start planning the next pass in the background
    would otherwise weigh 250x its share at a million items); passes roll over as a training loop's do."""
    from robo_loaders_plugin.bench.runner import time_loader

    served = []

    class Loader:
        def __iter__(self):
            for b in range(5):  # a pass of 5 batches of 2
                served.append(b)
                yield [b, b]

    r = time_loader(Loader(), batches=4, batch_size_of=len, warmup=3)
    assert served == [0, 1, 2, 3, 4, 0, 1, 2]  # first, 3 warm-up, then 4 timed (rolling over into pass 2)
    assert r["samples_per_s"] > 0 and len(r["batch_latency_ms"]) == 3
    served.clear()
    time_loader(Loader(), batches=4, batch_size_of=len)
    assert served == [0, 1, 2, 3, 4]  # negative control: without a warm-up, the timed batches follow the first


def test_time_pass_serves_exactly_one_pass_from_an_endless_or_an_ending_loader():
    """A full pass stops where the pass does: an endless loader (lerobot-train's ``cycle``) after ``samples``, an
    epoch loader at its end; the pass's last partial batch is counted as served."""
    import itertools

    from benchmarks.harness.growth_child import pass_samples, time_pass

    served = []

    def one_pass():
        for b in range(5):  # 4 batches of 3, then a last one of 2: 14 samples
            served.append(b)
            yield [b] * (3 if b < 4 else 2)

    class Endless:
        def __iter__(self):
            return itertools.chain.from_iterable(one_pass() for _ in itertools.count())

    r = time_pass(Endless(), len, 14)
    assert served == [0, 1, 2, 3, 4] and r["pass_samples"] == 14 and r["pass_batches"] == 5
    assert r["pass_s"] >= r["first_batch_s"] and r["samples_per_s"] > 0
    served.clear()
    r = time_pass(Endless(), len, 28)  # negative control: two passes' samples take both passes
    assert served == [0, 1, 2, 3, 4] * 2 and r["pass_samples"] == 28
    assert pass_samples("robomimic", 14, 3) == 12 and pass_samples("lerobot", 14, 3) == 14


def test_full_pass_setting_reaches_every_child_but_lerobots_own_dataset():
    from benchmarks.harness.growth import Settings, Workload, child_args

    s = Settings(full_pass=True)
    assert child_args(Workload("lerobot", "1m"), "datapipe", {}, s)["full_pass"]
    assert child_args(Workload("robomimic", "1m"), "native", {}, s)["full_pass"]
    assert not child_args(Workload("lerobot", "1m"), "native", {}, s)["full_pass"]  # ~45 min a pass: sampled
    assert not child_args(Workload("robomimic", "1m"), "native", {}, s, batches=1)["full_pass"]  # one-time runs
    assert not child_args(Workload("robomimic", "1m"), "native", {}, Settings())["full_pass"]


def test_held_bytes_skips_loaded_episodes_reached_through_a_bound_method():
    """video_stream's decode-ahead holds ``cache.load_ahead``: the walk reached the episode cache (decoded frames,
    bounded by its buffer) through the bound method and counted ~20 kB per frame as if it were index overhead."""
    import numpy as np

    from robo_loaders_plugin.core.lru import LoadOnceLRU

    cache = LoadOnceLRU(lambda k: np.zeros(100_000, np.uint8), 4)
    cache.get(1)

    class Ahead:
        def __init__(self):
            self.load = cache.get
            self.index = np.zeros(1000, np.int64)

    assert 8000 <= held_bytes(Ahead()) < 8000 + 2000
    # negative control: an object holding the same bytes directly is counted
    assert held_bytes({"frames": np.zeros(100_000, np.uint8)}) >= 100_000


def test_page_cache_helpers_read_in_and_evict_a_files_pages(tmp_path):
    import os
    import shutil

    import pytest

    if shutil.which("fincore") is None:
        pytest.skip("util-linux fincore is not installed")
    path = tmp_path / "f.bin"
    path.write_bytes(os.urandom(4 << 20))
    files = [str(path)]
    growth.evict(files)
    if growth.resident_bytes(files) > (1 << 20):  # e.g. a tmpfs: its pages cannot be dropped
        pytest.skip("this filesystem keeps the file's pages")
    assert growth.read_through(files) >= 0
    assert growth.resident_bytes(files) == 4 << 20  # every page read in
    growth.evict(files)
    assert growth.resident_bytes(files) < (1 << 20)  # and dropped again: the cold pass starts cold


def test_page_cache_passes_refuses_a_backend_that_writes_no_files():
    import pytest

    with pytest.raises(ValueError, match="video_stream: only the backends"):
        growth.page_cache_passes(growth.Workload("lerobot", "10k"), ["video_stream"], growth.Settings())


def test_workload_scratch_sets_one_cache_root_and_leaves_nothing(monkeypatch, tmp_path):
    import os

    monkeypatch.setenv(growth.WORKLOADS_ENV, str(tmp_path))
    monkeypatch.setenv("ROBO_LOADERS_CACHE", "/user/cache")
    with growth.workload_scratch(growth.Workload("lerobot", "10k"), "growth") as (scratch, log_dir):
        assert os.path.dirname(scratch) == str(tmp_path) and os.path.isdir(log_dir)
        assert os.environ["ROBO_LOADERS_CACHE"] == os.path.join(scratch, "cache-root")
    assert os.environ["ROBO_LOADERS_CACHE"] == "/user/cache"  # the user's, back
    assert not os.path.exists(scratch) and not os.path.exists(log_dir)


def test_time_loader_times_rounds_of_a_minimum_duration_and_reports_their_median():
    """A fast loader is timed for a stretch of wall time, not a fixed count of batches (30 batches of a fast backend
    last 0.1 s); the rate is the median of the rounds'."""
    import time

    from robo_loaders_plugin.bench.runner import time_loader

    class Loader:
        def __iter__(self):
            while True:
                time.sleep(0.01)
                yield [0, 0]

    r = time_loader(Loader(), batches=2, batch_size_of=len, rounds=3, min_round_s=0.2)
    assert len(r["round_samples_per_s"]) == 3
    # each round went on past its 2 batches until 0.2 s had passed (2 batches of >= 10 ms last 0.2 s only if a
    # 10 ms sleep took 100 ms: a machine this test does not run on)
    assert r["timed_batches"] > 3 * 2
    assert round(r["samples_per_s"], 2) == sorted(r["round_samples_per_s"])[1]
    control = time_loader(Loader(), batches=2, batch_size_of=len, rounds=3)
    assert control["timed_batches"] == 6  # negative control: without a minimum, exactly 2 batches a round


def test_time_loader_warms_up_for_a_time_then_times_the_rounds():
    """A time-based warm-up serves untimed batches until ``warmup_s`` has passed and reports their rate: a loader
    slow at first (one-time costs spread over its first batches) is timed at its steady rate."""
    import time

    from robo_loaders_plugin.bench.runner import time_loader

    class Loader:
        def __iter__(self):
            start = time.perf_counter()
            while True:
                time.sleep(0.02 if time.perf_counter() - start < 0.3 else 0.002)  # slow for 0.3 s, then fast
                yield [0, 0]

    r = time_loader(Loader(), batches=5, batch_size_of=len, rounds=3, warmup_s=0.4)
    assert r["warmup_s"] >= 0.4 and 0 < r["warmup_samples_per_s"] < r["samples_per_s"]
    assert r["samples_per_s"] > 2 / 0.01  # every timed batch after the slow start (2 samples in < 10 ms)
    control = time_loader(Loader(), batches=5, batch_size_of=len, rounds=3)
    assert "warmup_s" not in control
    assert control["samples_per_s"] < 2 / 0.015  # negative control: without it, the slow start is timed
