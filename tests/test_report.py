"""``robo-loaders report`` without running a benchmark: tables and plots from the committed results, the command's
usage, the median of repeated runs and the captions (fake rows: tests/report_fakes.py). The harness's own formats
(matrix, loss curves, epoch times) and the README tables are tested in benchmarks/tests/test_report_inputs.py."""

import glob
import json
import os

from click.testing import CliRunner
from report_fakes import bench_payload, dump

from robo_loaders_plugin.bench import tables

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_report_on_committed_results(tmp_path):
    """The committed result files (whatever backends they hold) give tables and plots."""
    files = sorted(
        p
        for p in glob.glob(os.path.join(REPO, "benchmarks", "results", "*.json"))
        # a per-sample cost profile's table is benchmarks/sample_costs.py's (benchmarks/tests/test_sample_costs.py)
        if tables.kind_of(json.load(open(p))) not in ("unknown", "sample_costs")
    )
    assert files
    for p in files:
        payload = tables.load_result(p)
        assert tables.results_table([payload]).count("\n") == len(payload["results"]) + 1
    from robo_loaders_plugin.bench.plots import report

    md = open(report(files[:1], str(tmp_path))).read()
    assert "throughput.png" in md and "No result here has per-epoch times" in md


def test_report_cmd_usage(tmp_path):
    """Issue 30 item 14: with no arguments it said "give --out DIR" while its usage showed RESULTS and --out as
    optional. Both are required, and the usage line says so."""
    from robo_loaders_plugin.bench.plots import report_cmd

    usage = "Usage: robo-loaders report --out DIR [OPTIONS] RESULTS..."
    bench = dump(tmp_path / "b.json", bench_payload(epochs=False))
    r = CliRunner().invoke(report_cmd, [], prog_name="robo-loaders report")
    assert r.exit_code == 2 and r.output.splitlines()[0] == usage
    assert "Error: Missing argument 'RESULTS...'." in r.output
    r = CliRunner().invoke(report_cmd, [bench])
    assert r.exit_code == 2 and "Error: Missing option '--out'." in r.output
    r = CliRunner().invoke(report_cmd, ["--help"], prog_name="robo-loaders report")
    assert r.output.splitlines()[0] == usage and "[required]" in r.output
    other = tmp_path / "codecs.json"
    other.write_text('{"x": 1}')
    r = CliRunner().invoke(report_cmd, [str(other), "--out", str(tmp_path / "o")])
    assert r.exit_code == 1 and "not a benchmark, matrix or loss-curves result" in r.output  # skipped: nothing left
    r = CliRunner().invoke(report_cmd, [bench, "--out", str(tmp_path / "o")])
    assert r.exit_code == 0 and os.path.exists(tmp_path / "o" / "report.md"), r.output


def test_repeated_benchmark_runs_reported_by_their_median_and_a_failure_is_never_hidden():
    from robo_loaders_plugin.bench.runner import median_run

    runs = [{"samples_per_s": v, "run": i} for i, v in enumerate([300.0, 100.0, 200.0, 400.0])]
    assert median_run(runs[:3]) == dict(runs[2], samples_per_s_runs=[300.0, 100.0, 200.0])
    timed = [dict(r, first_batch_s=float(i)) for i, r in enumerate(runs[:3])]
    assert median_run(timed)["first_batch_s_runs"] == [0.0, 1.0, 2.0] and median_run(timed)["first_batch_s"] == 2.0
    assert median_run(runs)["run"] == 2  # even count: the lower middle run, not a better one
    assert median_run([runs[0]]) == runs[0]
    failed = {"error": "Traceback ...\nRuntimeError: boom"}
    assert median_run([runs[0], failed, runs[3]]) is failed


def test_the_caption_says_when_each_row_is_the_median_of_several_runs():
    settings = {"batch_size": 64, "preset": "diffusion", "num_workers": 2, "batches": 200}
    one = tables.settings_caption({"_kind": "bench", "settings": dict(settings, repeats=1)})
    assert one == "batch 64, delta_timestamps diffusion, 2 workers, 200 timed batches"
    three = tables.settings_caption({"_kind": "bench", "settings": dict(settings, repeats=3)})
    assert three == one + ", median of 3 runs per backend"


def test_a_result_says_the_machines_load_and_the_code_it_measured(tmp_path):
    """Issue 45: a committed table records how busy the machine was and which commit ran, so that no table is read
    as describing code it predates."""
    import subprocess

    from robo_loaders_plugin.bench.report import code_version
    from robo_loaders_plugin.bench.runner import median_run

    runs = [
        {"samples_per_s": 100.0, "load_1min": [1.2, 1.5]},
        {"samples_per_s": 200.0, "load_1min": [0.9, 3.4]},
        {"samples_per_s": 300.0, "load_1min": [1.1, 1.3]},
    ]
    assert median_run(runs)["load_1min"] == [0.9, 3.4]  # every run's load, not only the median run's
    payload = {
        "_kind": "bench",
        "settings": {"batch_size": 64},
        "results": [median_run(runs), {"samples_per_s": 5.0, "load_1min": [0.4, 0.7]}],
        "code": "abc1234",
    }
    assert tables.settings_caption(payload) == "batch 64, 1-min load 0.4-3.4, code abc1234"
    # control: a result without them (written before) says neither
    assert (
        tables.settings_caption(
            {"_kind": "bench", "settings": {"batch_size": 64}, "results": [runs[0] | {"load_1min": None}]}
        )
        == "batch 64"
    )
    # a kind that keeps something else under "results" (a text) has no load to say
    assert tables.settings_caption({"_kind": "bench", "settings": {"batch_size": 64}, "results": "see x"}) == "batch 64"
    # a checkout: results and docs written by the benchmark are no modified code; a changed source file is
    repo = tmp_path / "repo"
    (repo / "benchmarks" / "results").mkdir(parents=True)
    (repo / "pkg.py").write_text("x = 1\n")
    (repo / "benchmarks" / "results" / "r.json").write_text("{}\n")
    (repo / "README.md").write_text("a\n")
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "c"], check=True)
    commit = subprocess.run(git[:3] + ["rev-parse", "--short=7", "HEAD"], capture_output=True, text=True).stdout
    assert code_version(str(repo)) == commit.strip()
    (repo / "benchmarks" / "results" / "r.json").write_text('{"a": 1}\n')
    (repo / "README.md").write_text("b\n")
    assert code_version(str(repo)) == commit.strip()
    (repo / "pkg.py").write_text("x = 2\n")
    assert code_version(str(repo)) == commit.strip() + "-modified"
    assert code_version(str(tmp_path)) is None  # not a checkout
    head = subprocess.run(
        ["git", "-C", os.path.dirname(tables.__file__), "rev-parse", "--short=7", "HEAD"],
        capture_output=True,
        text=True,
    )
    version = code_version()
    if head.returncode != 0:  # an installed copy outside a checkout
        assert version is None
    else:
        assert version is not None and version.split("-")[0] == head.stdout.strip()
