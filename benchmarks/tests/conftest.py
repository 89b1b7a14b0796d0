"""The harness's tests: the datasets and environment are the root conftest.py's; the fake benchmark rows are the
package tests' (tests/report_fakes.py, the formats ``robo-loaders bench`` writes)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tests"))


@pytest.fixture
def passive_threads(monkeypatch):
    """For the training benchmark's real runs (test_train_bench*.py): the machine is shared, and spinning OpenMP
    threads of a descheduled training process would only slow the test."""
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
