"""Conversion timing per executor and task count (``benchmarks/harness/executor_timing.py``, what
benchmarks/convert_executors.sh runs): a row per configuration, from a conversion in a fresh process that wrote
the dataset whole. That datatrove's executor writes the local converter's bytes is integration_tests/
test_convert_executors.py's business."""

import os

import pytest

pytest.importorskip("datatrove")

from benchmarks.harness.executor_timing import executor_conversion_table, time_executor_conversions
from robo_loaders_plugin.robomimic.convert import verify_robomimic

SHARD_BYTES = 100_000  # about one demo per unit: 12 units


def test_times_a_conversion_per_executor_and_task_count(tiny_hdf5, tmp_path):
    rows = time_executor_conversions(
        "robomimic",
        tiny_hdf5,
        str(tmp_path / "bench"),
        configs=[("datatrove-local", 1)],
        shard_bytes=SHARD_BYTES,
        echo=lambda *_: None,
    )
    (row,) = rows
    assert row["executor"] == "datatrove-local" and row["tasks"] == 1 and row["episodes"] == 12
    assert row["shards"] == 12 and row["out"] == str(tmp_path / "bench") + "-datatrove-local-t1"
    assert row["source_bytes"] == os.path.getsize(tiny_hdf5) and row["wall_s"] > 0
    assert row["mb_per_s_per_task"] == row["source_mb_per_s"] > 0
    assert verify_robomimic(row["out"], tiny_hdf5) == []  # the timed conversion is a whole, correct dataset
    assert "MB/s per task" in executor_conversion_table(rows)
