"""``python -m benchmarks.harness matrix`` end to end on the tiny robomimic file: two cells (seq_length 1 and 5) of
datapipe, each in its own subprocess through the ordinary bench, reading shards converted once for the whole matrix;
a second run measures nothing; the report plots the result. Tiny settings: this checks the plumbing, never speed (two
children, ~15 s each on a loaded 2-CPU machine: torch and robomimic imports). Ratios, failures and extension are
covered with fake rows in benchmarks/tests/test_report_inputs.py."""

import csv
import json
import os

from click.testing import CliRunner

from benchmarks.harness import matrix as mx


def test_two_cell_matrix_resumes_and_reports(tiny_hdf5, tmp_path):
    out = str(tmp_path / "m")
    args = [
        "robomimic",
        "--dataset",
        tiny_hdf5,
        "--backends",
        "datapipe",
        "--batch-sizes",
        "8",
        "--seq-lengths",
        "1,5",
        "--workers",
        "0",
        "--batches",
        "3",
        "--out",
        out,
        "--backend-kwargs",
        'datapipe={"shuffle_buffer": 4}',
    ]
    res = CliRunner().invoke(mx.matrix_group, args)
    assert res.exit_code == 0, res.output[-3000:]
    json_path, csv_path = mx.paths(out, "matrix_robomimic")
    data = json.load(open(json_path))
    assert [(r["backend"], r["seq_length"]) for r in data["rows"]] == [("datapipe", 1), ("datapipe", 5)]
    for r in data["rows"]:
        assert not r.get("error"), r["error"]
        # memory recorded; data_mem_bytes may be 0: a cell of 3 tiny batches can end between two 0.5-s samples
        assert r["samples_per_s"] > 0 and r["first_batch_s"] > 0 and r["peak_mem_bytes"] > r["data_mem_bytes"] >= 0
        assert r["batch_size"] == 8 and r["num_workers"] == 0 and r["machine"]["cores"] == os.cpu_count()
        assert r["ratios"] == {}  # no baseline in this matrix
    (conv,) = data["conversion"]  # one conversion for both datapipe cells, removed once the matrix is complete
    assert conv["workers"] == 1 and conv["wall_s"] > 0 and not os.path.exists(conv["out"])
    assert res.output.count("convert robomimic with") == 1
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 and all(r["machine_cores"] == str(os.cpu_count()) for r in rows)

    res = CliRunner().invoke(mx.matrix_group, args)  # resumed: every cell exists
    assert res.exit_code == 0 and "2 cells requested, 0 to measure" in res.output, res.output[-3000:]
    assert json.load(open(json_path))["rows"] == data["rows"]

    from robo_loaders_plugin.bench.plots import report

    md = open(report([json_path], str(tmp_path / "rep"))).read()
    png = tmp_path / "rep" / "matrix_robomimic_vs_seq_length.png"
    assert png.name in md and os.path.getsize(png) > 10_000
