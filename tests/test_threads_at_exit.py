"""A pass built by ``core.threads.ordered_map`` and left suspended until the interpreter exits ends quietly.

At exit such a generator can be finalized after the modules its executor's shutdown uses are torn down (seen after
lerobot-train runs: "Exception ignored in: <generator object SamplerBatches.__iter__> ... 'NoneType' object has no
attribute 'Empty'"). The order of that teardown is not reproducible in a test, so the shutdown is made to fail as it
does there, with and without the interpreter finalizing.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from robo_loaders_plugin.core.threads import ordered_map


def torn_down_shutdown(self, wait=True, *, cancel_futures=False):
    raise AttributeError("'NoneType' object has no attribute 'Empty'")


def suspended_pass():
    it = ordered_map(lambda x: x, range(10), threads=2, depth=2)
    assert next(it) == 0
    return it


def test_a_pass_closed_while_the_interpreter_finalizes_ends_quietly(monkeypatch):
    monkeypatch.setattr(sys, "is_finalizing", lambda: True)
    it = suspended_pass()
    monkeypatch.setattr(ThreadPoolExecutor, "shutdown", torn_down_shutdown)
    it.close()  # raises nothing


def test_a_failing_shutdown_outside_exit_still_raises(monkeypatch):
    # the control: the guard is only for the interpreter's exit
    it = suspended_pass()
    monkeypatch.setattr(ThreadPoolExecutor, "shutdown", torn_down_shutdown)
    with pytest.raises(AttributeError, match="Empty"):
        it.close()
