"""The benchmark harness's bookkeeping and formats without running a benchmark: the matrix (fake bench rows), the
loss-curve and epoch-time formats, ``robo-loaders report`` over all of them, and the README tables regenerated
between markers (synthetic result files; fake rows from tests/report_fakes.py)."""

import csv
import json
import os

import numpy as np
import pytest
from click.testing import CliRunner
from report_fakes import MACHINE, bench_payload, dump, fake_row, training_payload

from benchmarks.harness import matrix as mx
from benchmarks.harness import readme_tables
from benchmarks.harness.epoch_times import time_epochs
from benchmarks.harness.loss_curves import loss_run, runs_from_array, write_loss_curves
from robo_loaders_plugin.bench.tables import TableError

pytestmark = pytest.mark.fast  # fake rows, no benchmark run: part of `make test-fast`


@pytest.fixture
def fake_bench(monkeypatch, tmp_path):
    """run_matrix with every cell answered by fake_row (no subprocess); records the calls and conversions."""
    calls, conversions = [], []

    def bench_one(framework, setup, label, cell, kwargs, timeout, echo):
        calls.append((label, dict(cell), json.loads(json.dumps(kwargs))))
        if label in fail:
            return {"backend": label, "error": "exit 1:\nRuntimeError: boom"}
        return fake_row(label, cell["batch_size"], cell.get("seq_length", cell.get("preset")), cell["num_workers"])

    def convert_once(framework, setup, base, workers, echo, timeout):
        out = f"{base}-w{workers}"
        os.makedirs(out, exist_ok=True)
        open(os.path.join(out, "index.json"), "w").close()
        conversions.append(out)
        return [
            {
                "workers": workers,
                "wall_s": 3.0,
                "source_mb_per_s": 50.0,
                "decoded_mb_per_s": 50.0,
                "shards_bytes": 1 << 20,
                "out": out,
            }
        ]

    fail = set()
    monkeypatch.setattr(mx, "_bench_one", bench_one)
    monkeypatch.setattr(mx, "_convert_once", convert_once)
    monkeypatch.setattr(mx, "machine", lambda: dict(MACHINE))
    data = tmp_path / "lift.hdf5"
    data.write_bytes(b"")
    return {"calls": calls, "conversions": conversions, "fail": fail, "dataset": str(data), "out": str(tmp_path / "m")}


def run_fake(fb, **kw):
    args = dict(backends=["native:low_dim", "compressed_cache"], batch_sizes=[16, 64], second=[1, 10], workers=[0])
    extra = {k: v for k, v in kw.items() if k not in args}
    args.update((k, v) for k, v in kw.items() if k in args)
    return mx.run_matrix(
        "robomimic",
        fb["dataset"],
        args["backends"],
        args["batch_sizes"],
        args["second"],
        args["workers"],
        5,
        fb["out"],
        echo=lambda *a, **k: None,
        **extra,
    )


# -- matrix ---------------------------------------------------------------------------------------------------------
def test_matrix_measures_every_cell_once_and_writes_json_and_csv(fake_bench):
    payload = run_fake(fake_bench)
    assert len(fake_bench["calls"]) == 8 and len(payload["rows"]) == 8
    assert {(r["backend"], r["batch_size"], r["seq_length"], r["num_workers"]) for r in payload["rows"]} == {
        (b, bs, s, 0) for b in ("native:low_dim", "compressed_cache") for bs in (16, 64) for s in (1, 10)
    }
    for r in payload["rows"]:  # ratios against the baseline of the same cell
        base = next(
            n
            for n in payload["rows"]
            if n["backend"] == "native:low_dim"
            and (n["batch_size"], n["seq_length"]) == (r["batch_size"], r["seq_length"])
        )
        assert r["ratios"]["samples_per_s_vs_native:low_dim"] == round(r["samples_per_s"] / base["samples_per_s"], 3)
        assert r["machine"] == MACHINE and r["batches"] == 5 and r["measured_at"]
    json_path, csv_path = mx.paths(fake_bench["out"], "matrix_robomimic")
    assert json.load(open(json_path))["rows"] == json.loads(json.dumps(payload["rows"]))
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 8
    assert all(r["machine_cores"] == "2" and r["machine_cpu"] == "x86_64" and r["machine_gpu"] == "" for r in rows)
    assert {r["backend"] for r in rows} == {"native:low_dim", "compressed_cache"}
    assert all(float(r["samples_per_s"]) > 0 and r["ratio_samples_per_s_vs_native:low_dim"] for r in rows)


def test_matrix_resumes_and_extends(fake_bench):
    run_fake(fake_bench)
    first = json.load(open(mx.paths(fake_bench["out"], "matrix_robomimic")[0]))
    fake_bench["calls"].clear()
    again = run_fake(fake_bench)  # nothing left to measure
    assert fake_bench["calls"] == [] and len(again["rows"]) == 8
    assert sorted(r["measured_at"] for r in again["rows"]) == sorted(r["measured_at"] for r in first["rows"])
    extended = run_fake(fake_bench, batch_sizes=[16, 64, 256])  # a new axis value: only its cells run
    assert sorted((c[0], c[1]["batch_size"]) for c in fake_bench["calls"]) == sorted(
        (b, 256) for b in ("native:low_dim", "compressed_cache") for _ in (1, 10)
    )
    assert len(extended["rows"]) == 12 and extended["axes"]["batch_size"] == [16, 64, 256]
    assert [r["batch_size"] for r in extended["rows"]] == sorted(r["batch_size"] for r in extended["rows"])


def test_matrix_retries_failed_cells_and_reports_them(fake_bench):
    fake_bench["fail"].add("compressed_cache")
    payload = run_fake(fake_bench, batch_sizes=[16], second=[10])
    assert [bool(r.get("error")) for r in payload["rows"]] == [False, True]
    fake_bench["calls"].clear()
    run_fake(fake_bench, batch_sizes=[16], second=[10], retry_failed=False)
    assert fake_bench["calls"] == []
    fake_bench["fail"].clear()
    payload = run_fake(fake_bench, batch_sizes=[16], second=[10])
    assert [c[0] for c in fake_bench["calls"]] == ["compressed_cache"]
    assert not any(r.get("error") for r in payload["rows"]) and len(payload["rows"]) == 2


def test_matrix_converts_once_for_datapipe_and_removes_the_shards_when_complete(fake_bench):
    payload = run_fake(fake_bench, backends=["native:low_dim", "datapipe"])
    (out,) = fake_bench["conversions"]
    dp_calls = [c for c in fake_bench["calls"] if c[0] == "datapipe"]
    assert len(dp_calls) == 4 and all(c[2]["datapipe"]["shards"] == out for c in dp_calls)
    assert payload["conversion"][0]["out"] == out and not os.path.exists(out)  # complete: shards removed
    assert payload["settings"]["backend_kwargs"] == {}  # the settings keep what was asked, not the shards path
    run_fake(fake_bench, backends=["native:low_dim", "datapipe"], batch_sizes=[16, 64, 256], keep_shards=True)
    assert len(fake_bench["conversions"]) == 2 and os.path.exists(fake_bench["conversions"][-1])
    given = run_fake(
        fake_bench, backends=["datapipe"], batch_sizes=[8], name="given", kwargs={"datapipe": {"shards": "/elsewhere"}}
    )
    assert len(fake_bench["conversions"]) == 2 and given["conversion"] is None
    assert fake_bench["calls"][-1][2]["datapipe"]["shards"] == "/elsewhere"


def test_matrix_refuses_other_settings_and_other_machines(fake_bench, monkeypatch):
    run_fake(fake_bench, batch_sizes=[16], second=[10])
    with pytest.raises(mx.MatrixError, match=r"other settings.*batches"):
        mx.run_matrix(
            "robomimic",
            fake_bench["dataset"],
            ["native:low_dim"],
            [16],
            [10],
            [0],
            7,
            fake_bench["out"],
            echo=lambda *a: None,
        )
    monkeypatch.setattr(mx, "machine", lambda: dict(MACHINE, cores=64))
    with pytest.raises(mx.MatrixError, match="another machine"):
        run_fake(fake_bench, batch_sizes=[16], second=[10])
    payload = run_fake(fake_bench, batch_sizes=[16, 32], second=[10], allow_other_machine=True)
    assert {r["machine"]["cores"] for r in payload["rows"]} == {2, 64}
    with pytest.raises(mx.MatrixError, match="sequence lengths"):
        run_fake(fake_bench, second=[0])
    with pytest.raises(ValueError, match="cache mode"):
        run_fake(fake_bench, backends=["native:bogus"])
    with pytest.raises(mx.MatrixError, match="presets"):
        mx.run_matrix("lerobot", fake_bench["dataset"], ["native"], [8], ["act", "bogus"], [0], 3, fake_bench["out"])


def test_matrix_cli(fake_bench):
    res = CliRunner().invoke(
        mx.matrix_group,
        [
            "robomimic",
            "--dataset",
            fake_bench["dataset"],
            "--backends",
            "native:low_dim,compressed_cache",
            "--batch-sizes",
            "8,16",
            "--seq-lengths",
            "5",
            "--workers",
            "0",
            "--batches",
            "3",
            "--backend-kwargs",
            'compressed_cache={"codec": "lz4"}',
            "--out",
            fake_bench["out"],
        ],
    )
    assert res.exit_code == 0, res.output
    assert len(fake_bench["calls"]) == 4 and fake_bench["calls"][0][2] == {"compressed_cache": {"codec": "lz4"}}
    assert "matrix_robomimic.csv" in res.output
    fake_bench["fail"].add("native")
    os.makedirs(fake_bench["dataset"] + "_root")
    res = CliRunner().invoke(
        mx.matrix_group,
        [
            "lerobot",
            "--root",
            fake_bench["dataset"] + "_root",
            "--batch-sizes",
            "8",
            "--presets",
            "none,act",
            "--workers",
            "0",
            "--backends",
            "native",
            "--out",
            fake_bench["out"],
        ],
    )
    assert res.exit_code == 1 and "2 cell(s) failed" in res.output
    res = CliRunner().invoke(
        mx.matrix_group,
        ["robomimic", "--dataset", fake_bench["dataset"], "--seq-lengths", "x", "--out", fake_bench["out"]],
    )
    assert res.exit_code == 2 and "comma-separated integers" in res.output


# -- formats --------------------------------------------------------------------------------------------------------
def test_loss_curves_format_and_merge(tmp_path):
    path = str(tmp_path / "lc.json")
    metrics = ["L1_Loss", "L2_Loss", "Cosine_Loss"]
    native = np.random.default_rng(0).random((3, 4, 3))
    write_loss_curves(
        path,
        "robomimic",
        runs_from_array("native", native, [100, 101, 102], metrics),
        metrics=metrics,
        settings={"epochs": 4},
        with_machine=False,
    )
    write_loss_curves(
        path,
        "robomimic",
        runs_from_array("datapipe", native[:2] * 1.01, [200, 201], metrics),
        metrics=metrics,
        settings={"epochs": 4},
        with_machine=False,
    )
    data = json.load(open(path))
    assert data["kind"] == "loss_curves" and data["metrics"] == metrics and data["reference"] == "native"
    assert [(r["backend"], r["seed"]) for r in data["runs"]] == [
        ("native", 100),
        ("native", 101),
        ("native", 102),
        ("datapipe", 200),
        ("datapipe", 201),
    ]
    assert data["runs"][0]["epochs"][2]["L2_Loss"] == pytest.approx(native[0, 2, 1])
    # the same run again replaces it; another label with the same backend and seed is kept apart
    write_loss_curves(
        path,
        "robomimic",
        [
            loss_run("datapipe", 200, [[1, 2, 3]] * 4, metrics),
            loss_run("datapipe", 200, [[9, 9, 9]] * 4, metrics, label="control"),
        ],
        metrics=metrics,
        settings={"epochs": 4},
        with_machine=False,
    )
    data = json.load(open(path))
    assert len(data["runs"]) == 6 and [r["label"] for r in data["runs"]].count("control") == 1
    assert next(r for r in data["runs"] if r["seed"] == 200 and r["label"] == "datapipe")["epochs"][0]["L1_Loss"] == 1
    # other settings: the old runs are not comparable and go
    write_loss_curves(
        path,
        "robomimic",
        runs_from_array("native", native[:1], [1], metrics),
        metrics=metrics,
        settings={"epochs": 5},
        with_machine=False,
    )
    assert len(json.load(open(path))["runs"]) == 1
    # LeRobot's per-pass dicts (non-metric numbers kept, metrics inferred in order)
    passes = {
        "pass0": {"L1": 0.5, "L2": 0.4, "cosine": 0.1, "n": 550},
        "pass1": {"L1": 0.4, "L2": 0.3, "cosine": 0.1, "n": 550},
    }
    write_loss_curves(path, "lerobot", [loss_run("native", 11, passes)], with_machine=False, merge=False)
    data = json.load(open(path))
    assert data["metrics"] == ["L1", "L2", "cosine", "n"] and data["runs"][0]["epochs"][1]["L2"] == 0.3
    with pytest.raises(ValueError, match="nan"):
        write_loss_curves(path, "lerobot", [loss_run("native", 1, [{"L1": float("nan")}])], with_machine=False)
    with pytest.raises(ValueError, match="2 runs but 1 seeds"):
        runs_from_array("native", native[:2], [1], metrics)


def test_time_epochs():
    loader = [[0] * 4, [0] * 4, [0] * 3]
    out = time_epochs(loader, 3, len)
    assert out["epoch_samples"] == [11, 11, 11] and len(out["epoch_times_s"]) == 3
    assert all(t >= 0 for t in out["epoch_times_s"])

    def endless():
        while True:
            yield [0] * 2

    out = time_epochs(type("L", (), {"__iter__": lambda self: endless()})(), 2, len, batches_per_epoch=5)
    assert out["epoch_samples"] == [10, 10]


# -- report ---------------------------------------------------------------------------------------------------------
def is_png(path):
    with open(path, "rb") as f:
        return f.read(8) == b"\x89PNG\r\n\x1a\n" and os.path.getsize(path) > 10_000


def test_report_plots_and_markdown(fake_bench, tmp_path):
    bench = dump(tmp_path / "lift_w2.json", bench_payload(failed="gpu_resampler"))
    lr = dump(
        tmp_path / "lr_act.json", bench_payload("lerobot", ("native", "compressed_cache", "datapipe"), epochs=False)
    )
    fake_bench["fail"].add("compressed_cache#zstd")
    run_fake(
        fake_bench,
        backends=["native:low_dim", "compressed_cache", "datapipe", "compressed_cache#zstd"],
        batch_sizes=[16, 64, 256],
        second=[1, 10, 20],
        workers=[0, 2],
    )
    mat = mx.paths(fake_bench["out"], "matrix_robomimic")[0]
    lc = str(tmp_path / "lc.json")
    rng = np.random.default_rng(1)
    curve = np.linspace(1.0, 0.3, 6)[None, :, None] * np.array([1.0, 0.8, 0.2])
    metrics = ["L1_Loss", "L2_Loss", "Cosine_Loss"]
    write_loss_curves(
        lc,
        "robomimic",
        runs_from_array("native", curve + rng.normal(0, 0.01, (10, 6, 3)), range(100, 110), metrics)
        + runs_from_array("datapipe", curve + rng.normal(0, 0.01, (3, 6, 3)), range(200, 203), metrics)
        + runs_from_array(
            "datapipe", curve * 1.3, [300], metrics, label="datapipe, shuffled actions (negative control)"
        ),
        metrics=metrics,
        notes="K=10 native runs, M=3 datapipe runs",
        with_machine=False,
    )
    from robo_loaders_plugin.bench.plots import report

    out = tmp_path / "rep"
    train = dump(tmp_path / "train_w2.json", training_payload())
    md_path = report([bench, lr, mat, lc, train], str(out))
    md = open(md_path).read()
    images = [line[line.index("(") + 1 : -1] for line in md.splitlines() if line.startswith("![")]
    expected = {
        "lift_w2_throughput",
        "lift_w2_memory",
        "lift_w2_startup",
        "lift_w2_epochs",
        "lr_act_throughput",
        "lr_act_memory",
        "lr_act_startup",
        "matrix_robomimic_vs_batch_size",
        "matrix_robomimic_vs_seq_length",
        "lc_loss_curves",
        "train_w2_throughput",
        "train_w2_memory",
        "train_w2_startup",
        "train_w2_epochs",
    }
    assert {os.path.splitext(i)[0] for i in images} == expected
    assert sorted(os.listdir(out)) == sorted([f"{e}.png" for e in expected] + ["report.md"])
    assert all(is_png(out / i) for i in images)
    # the fakes record "23.5 GiB" (as the committed files do): shown in decimal units
    assert "x86_64, 2 cores, 25.2 GB RAM, no GPU" in md and "Failed (not plotted): `gpu_resampler`" in md
    assert "18 failed cell(s)" in md  # every cell of compressed_cache#zstd: listed, not plotted
    assert "| `native` | 10 |" in md and "(reference)" in md  # loss summary: seeds per group
    assert "samples/s, seq_length 10, 2 workers:" in md and "| backend | batch 16 | batch 64 | batch 256 |" in md
    assert "No result here has per-epoch times" not in md
    assert (
        "| backend | steps/s | samples/s | data stall | 1st epoch (s) | data build (s) | launch to end of epoch 1 "
        "(s) | peak mem | steps/s vs native:low_dim | launch to epoch 1 vs native:low_dim |" in md
    )


# -- README tables --------------------------------------------------------------------------------------------------
README = """# Project

Intro.

<!-- robo-loaders:table lift_w2 -->
stale numbers: 1,000,000 samples/s
<!-- /robo-loaders:table -->

LeRobot, one table over three files:

<!-- robo-loaders:table lr_act,lr_none columns=preset,backend,samples_per_s,vs:native backends=datapipe,native -->
<!-- /robo-loaders:table -->

<!-- robo-loaders:table lift_w2 table=conversion source=no -->
<!-- /robo-loaders:table -->

<!-- robo-loaders:table m/matrix_robomimic.json table=pivot by=batch_size seq_length=10 num_workers=0 -->
<!-- /robo-loaders:table -->

```markdown
<!-- robo-loaders:table does_not_exist -->
```

The end.
"""


@pytest.fixture
def readme_dir(tmp_path, fake_bench):
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    dump(results / "lift_w2.json", bench_payload(epochs=False, failed="gpu_resampler"))
    dump(results / "lr_act.json", bench_payload("lerobot", ("native", "compressed_cache", "datapipe"), epochs=False))
    dump(
        results / "lr_none.json",
        bench_payload("lerobot", ("native", "compressed_cache", "datapipe"), epochs=False, preset="none"),
    )
    fake_bench["out"] = str(tmp_path / "m")
    run_fake(fake_bench, batch_sizes=[16, 64], second=[10])
    (tmp_path / "README.md").write_text(README)
    return tmp_path


def test_readme_tables_regenerated_and_idempotent(readme_dir):
    readme = str(readme_dir / "README.md")
    assert len(readme_tables.update_readme(readme, check=True)) == 4
    assert open(readme).read() == README  # --check: no write
    changed = readme_tables.update_readme(readme)
    assert len(changed) == 4
    text = open(readme).read()
    assert "stale numbers" not in text and text.startswith("# Project\n\nIntro.\n") and text.endswith("The end.\n")
    lines = text.splitlines()
    first = lines[lines.index("<!-- robo-loaders:table lift_w2 -->") + 2]
    assert first.startswith("| backend | samples/s | vs native:low_dim | vs native:all | first batch (s) |")
    assert "| `gpu_resampler` | FAILED: RuntimeError: boom | - |" in text
    assert "| delta_timestamps | backend | samples/s | vs native |" in text
    lr = [line for line in lines if line.startswith(("| act |", "| none |"))]
    assert [line.split(" | ")[1] for line in lr] == ["`datapipe`", "`native`"] * 2  # backends= order, per file
    assert "| convert workers | wall (s) | source MB/s | decoded MB/s | shards |" in text
    assert "| 1 | 8.5 | 101 | 101 | 367.0 MB |" in text  # robomimic conversion rows
    assert "| backend | batch 16 | batch 64 |" in text
    assert (
        "<sub>From `benchmarks/results/lift_w2.json`. Machine: x86_64, 2 cores, 25.2 GB RAM, no GPU, "
        "Python 3.12.1, torch 2.11.0. Settings: batch 64, seq_length 10, 2 workers, 150 timed batches.</sub>" in text
    )
    assert "`benchmarks/results/lr_none.json`: delta_timestamps none" in text
    assert "<!-- robo-loaders:table does_not_exist -->\n```" in text  # inside a code fence: left alone
    assert readme_tables.update_readme(readme) == [] and open(readme).read() == text  # idempotent
    assert readme_tables.update_readme(readme, check=True) == []


@pytest.mark.parametrize(
    "body,message",
    [
        (
            "<!-- robo-loaders:table missing_w2 -->\n<!-- /robo-loaders:table -->\n",
            r"README.md:3: the marker names result 'missing_w2', but .*missing_w2.json does not exist",
        ),
        ("<!-- robo-loaders:table lift_w2 -->\nx\n", "README.md:3: marker not closed"),
        (
            "<!-- robo-loaders:table lift_w2 -->\n<!-- robo-loaders:table lift_w2 -->\n<!-- /robo-loaders:table -->\n",
            "marker not closed before the next one at line 4",
        ),
        ("<!-- /robo-loaders:table -->\n", "README.md:3: closing"),
        (
            "<!-- robo-loaders:table lift_w2 columns=backend,speed -->\n<!-- /robo-loaders:table -->\n",
            "unknown column 'speed'",
        ),
        ("<!-- robo-loaders:table lift_w2 colour=red -->\n<!-- /robo-loaders:table -->\n", "unknown marker option"),
        ("<!-- robo-loaders:table lift_w2,lr_act -->\n<!-- /robo-loaders:table -->\n", "cannot mix frameworks"),
        ("text <!-- robo-loaders:table lift_w2 --> inline\n", "malformed"),
    ],
)
def test_readme_marker_errors_change_nothing(readme_dir, body, message):
    readme = readme_dir / "README.md"
    text = "# P\n\n" + body + "\n<!-- robo-loaders:table lift_w2 -->\nold\n<!-- /robo-loaders:table -->\n"
    readme.write_text(text)
    with pytest.raises(TableError, match=message):
        readme_tables.update_readme(str(readme))
    assert readme.read_text() == text


def test_readme_cmd(readme_dir):
    from benchmarks.harness.cli import main

    readme = str(readme_dir / "README.md")
    r = CliRunner().invoke(main, ["readme", readme, "--check"])
    assert r.exit_code == 1 and "out of date: table lift_w2" in r.output
    r = CliRunner().invoke(main, ["readme", readme])
    assert r.exit_code == 0 and "updated: table lift_w2" in r.output
    r = CliRunner().invoke(main, ["readme", readme, "--check"])
    assert r.exit_code == 0 and "up to date" in r.output
    (readme_dir / "benchmarks" / "results" / "lift_w2.json").unlink()
    r = CliRunner().invoke(main, ["readme", readme])
    assert r.exit_code == 1 and "lift_w2.json does not exist" in r.output
