"""``benchmarks/batch_threads.py`` at its smallest, and its docs table against the committed result."""

import copy
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_backend_and_thread_count_is_measured_and_its_caches_removed(tmp_path):
    """Each backend, window preset and thread count gets a row, each count against one thread; the caches' work
    directory is removed afterwards."""
    from benchmarks import batch_threads
    from benchmarks.mixtures import write

    root = tmp_path / "data"
    write(str(root), "local/threads", episode_lengths=(12, 9, 15), cameras=2, image_size=(16, 16), fps=10)
    work = tmp_path / "work"
    result = batch_threads.run(
        str(root),
        "local/threads",
        threads=(0, 1, 2),
        rounds=1,
        round_s=0.05,
        warm_s=0.0,
        batch_size=4,
        workdir=str(work),
    )
    assert not work.exists()  # the caches removed with it
    got = {(r["backend"], r["preset"], r["threads"]) for r in result["rows"]}
    assert got == {(b, p, n) for b in batch_threads.BACKENDS for p in batch_threads.PRESETS for n in (0, 1, 2)}
    assert all(r["samples_per_s"] > 0 and len(r["rounds"]) == 1 for r in result["rows"])
    assert {r["vs_one_thread"] for r in result["rows"] if r["threads"] == 1} == {1.0}
    text = batch_threads.table(result)
    assert "| data | compressed_cache | act |" in text and "| 2 threads |" in text


@pytest.mark.fast
def test_docs_table_is_the_committed_result():
    """docs/benchmarks.md's table is the ``table`` command's output on the committed result; control: another number
    is caught."""
    from benchmarks import batch_threads

    with open(os.path.join(ROOT, "benchmarks", "results", "batch_threads.json")) as f:
        result = json.load(f)
    text = open(os.path.join(ROOT, "docs", "benchmarks.md")).read()
    doc = text[text.index(batch_threads.DOC_BEGIN) + len(batch_threads.DOC_BEGIN) : text.index(batch_threads.DOC_END)]
    assert doc.strip("\n") == batch_threads.table(result).strip("\n"), (
        "docs/benchmarks.md's batch_threads table differs from the committed result: paste "
        "`python -m benchmarks.batch_threads table benchmarks/results/batch_threads.json` between its markers"
    )
    changed = copy.deepcopy(result)
    changed["rows"][0]["samples_per_s"] *= 2
    assert doc.strip("\n") != batch_threads.table(changed).strip("\n")
