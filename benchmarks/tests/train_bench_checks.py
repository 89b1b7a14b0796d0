"""What every run of the training benchmark must report, whichever framework ran it: the checks that
test_train_bench.py (robomimic) and test_train_bench_lerobot.py share. Two modules so that pytest-xdist
(``--dist loadscope``, a module's tests on one worker) can run the two frameworks' real training runs on both
workers at once."""

import pytest


def consistent(r, epochs, steps_per_epoch, batch_size, waits=True):
    """``waits``: the loader is slow enough for every epoch's data time to be above the log's resolution
    (lerobot-train prints data_s in whole milliseconds: an in-RAM cache's 2 steps can print 0.000 on a fast machine)."""
    assert not r.get("error"), r.get("error")
    assert [e["epoch"] for e in r["epochs"]] == list(range(1, epochs + 1))
    assert all(e["steps"] == steps_per_epoch for e in r["epochs"])
    for e in r["epochs"]:
        assert (e["data_s"] > 0 if waits else e["data_s"] >= 0) and e["data_s"] < e["step_s"], e
        assert e["stall_fraction"] < 1 and e["stall_fraction"] == pytest.approx(e["data_s"] / e["step_s"])
        # timed from outside as the time between the log lines that end two epochs: lines arrive through a pipe,
        # so one epoch's line can be read late and the next epoch's span comes out shorter than its step time
        # (CI saw 0.347 s against 0.389 s); only the order is certain per epoch, the sum is checked below
        assert e["wall_s"] is None or e["wall_s"] >= 0, e
    measured = r["epochs"][1:]
    assert r["warmup_steps"] == steps_per_epoch and r["measured_steps"] == steps_per_epoch * (epochs - 1)
    assert r["measured_s"] == pytest.approx(sum(e["step_s"] for e in measured))
    assert r["steps_per_s"] > 0 and r["steps_per_s"] == pytest.approx(r["measured_steps"] / r["measured_s"])
    assert r["samples_per_s"] == pytest.approx(r["steps_per_s"] * batch_size)
    low, high = r["steps_per_s_range"]
    assert low <= r["steps_per_s"] * (1 + 1e-9) and r["steps_per_s"] <= high * (1 + 1e-9)
    assert (r["stall_fraction"] > 0 if waits else r["stall_fraction"] >= 0) and r["stall_fraction"] < 1
    assert r["stall_fraction"] == pytest.approx(sum(e["data_s"] for e in measured) / r["measured_s"])
    assert r["first_epoch_s"] == r["epochs"][0]["step_s"] > 0
    assert r["dataset_build_s"] > 0
    # dataset_build_s is timed from outside (between two log lines as read from the pipe), the epochs inside: a
    # reader held up for seconds stamps the second line late and inflates the build (CI: build 10.0 s and epoch 1
    # 10.0 s before a first epoch end read at 13.6 s), so no bound adds an outside span to an inside one. What
    # holds whatever the pipe's timing: lines are read in order and after they are printed, and the process
    # outlives the lines it printed and every step it timed.
    assert r["time_to_first_epoch_end_s"] > r["dataset_build_s"]
    assert r["time_to_first_epoch_end_s"] > r["first_epoch_s"]
    assert r["wall_s"] > r["time_to_first_epoch_end_s"]
    assert r["wall_s"] > sum(e["step_s"] for e in r["epochs"])
    assert r["peak_mem_bytes"] > 100e6  # a process with torch imported, sampled from outside


def ratios_to(base, results):
    b = base["backend"]
    for r in results:
        for f in ("steps_per_s", "stall_fraction", "first_epoch_s", "time_to_first_epoch_end_s"):
            assert r["ratios"][f"{f}_vs_{b}"] == round(r[f] / base[f], 3), (r["backend"], f)
    assert base["ratios"][f"steps_per_s_vs_{b}"] == 1.0
