"""Cost-growth results (issue 22) in the harness's ``growth report``: log-log plots per backend and the goals table;
``robo-loaders report`` (the package) skips them with one line naming that command (issue 31: the harness's plots
are not in the wheel)."""

import json

import pytest
from click.testing import CliRunner

from benchmarks.harness import growth_plots
from benchmarks.harness.cli import main as harness
from robo_loaders_plugin.cli import main

pytestmark = pytest.mark.fast  # fake rows, no benchmark run: part of `make test-fast`

MACHINE = {"cpu": "x86_64", "cores": 2, "ram": "23.5 GiB", "python": "3.12.1", "torch": "2.11.0", "gpu": None}


def growth_payload(slow_plan=False, failed=False):
    rows = []
    for frames in (10_250, 102_500, 1_025_000):
        for backend, start, speed in (("native", 2.0 + frames / 1e5, 300.0), ("datapipe", 1.0, 5000.0)):
            plan = None if backend == "native" else (0.9 if slow_plan else 0.15)
            rows.append(
                {
                    "backend": backend,
                    "frames": frames,
                    "size": str(frames),
                    "startup_s": start,
                    "build_s": start - 0.1,
                    "first_batch_s": 0.1,
                    "samples_per_s": speed,
                    "peak_mem_bytes": (800 << 20) + frames * 40,
                    "held_bytes_per_frame": 20.0 + (backend == "native") * 90,
                    "plan_s_per_million": plan,
                    "once": None if backend == "native" else {"wall_s": frames / 2e4, "mb_per_s_per_worker": 9.5},
                }
            )
    if failed:
        rows.append({"backend": "video_stream", "frames": 1_025_000, "error": "exit 1:\nRuntimeError: boom"})
    return {
        "kind": "growth",
        "framework": "lerobot",
        "workload": "lerobot",
        "machine": MACHINE,
        "settings": {"batch_size": 64, "num_workers": 2, "batches": 60, "preset": "act"},
        "rows": rows,
    }


def test_growth_result_is_plotted_log_log_with_its_goals(tmp_path):
    path = tmp_path / "growth_lerobot.json"
    path.write_text(json.dumps(growth_payload(failed=True)))
    r = CliRunner().invoke(harness, ["growth", "report", str(path), "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    md = (tmp_path / "out" / "report.md").read_text()
    assert (tmp_path / "out" / "growth_lerobot_growth.png").stat().st_size > 10_000
    assert "Goals at 1,025,000 frames" in md and "`datapipe` | 1.00 (12.25) ok" in md
    assert "Failed: `video_stream` at 1,025,000 frames (RuntimeError: boom)" in md
    assert "**missed**" in md  # native holds 110 bytes per frame in this fake


def test_goals_are_judged_against_native_at_the_largest_size():
    ok = {g["backend"]: g for g in growth_plots.goals(growth_payload())}
    assert ok["datapipe"]["startup_ok"] and ok["datapipe"]["plan_ok"] and ok["datapipe"]["held_ok"]
    assert ok["datapipe"]["speed_kept"] == 1.0 and ok["native"]["startup_ok"] is None
    # a row from a rerun is judged against the native start-up of its own run
    rerun = growth_payload()
    rerun["rows"][-1].update(startup_s=20.0, rerun_native_startup_s=19.0)
    judged = {g["backend"]: g for g in growth_plots.goals(rerun)}["datapipe"]
    assert judged["native_startup_s"] == 19.0 and judged["startup_ok"]
    rerun["rows"][-1].pop("rerun_native_startup_s")  # negative control: against this run's native (12.25 s)
    assert not {g["backend"]: g for g in growth_plots.goals(rerun)}["datapipe"]["startup_ok"]
    # negative control: a planner slower than 0.2 s per million items is marked as missing its goal
    slow = {g["backend"]: g for g in growth_plots.goals(growth_payload(slow_plan=True))}
    assert slow["datapipe"]["plan_ok"] is False


def test_a_full_pass_result_shows_each_pass_and_which_rows_were_sampled():
    payload = growth_payload()
    for r in payload["rows"]:
        if r["backend"] == "datapipe":
            r.update(pass_s=r["frames"] / 5000.0, pass_samples=r["frames"])
    text = growth_plots.growth_tables(payload)
    assert "full pass s (samples)" in text and "| 205 (1,025,000) |" in text and "| sampled |" in text
    # negative control: a sampled result has no such column
    assert "full pass" not in growth_plots.growth_tables(growth_payload())


FINDINGS = {
    "kind": "growth_findings",
    "framework": "both",
    "machine": MACHINE,
    "results": {
        "planner": {"what": "planning a pass", "before_s": 1.6, "after_s": 0.17},
        "robomimic_validation": {
            "what": "robomimic file validation, 10,000 demos",
            "before_s": 40.0,
            "after_s": 12.0,
            "recorded_s": 0.0002,
            "read_us_per_dataset_before": 900.0,
            "read_us_per_dataset_after": 200.0,
        },
        "store": {
            "what": "compressed store",
            "blob_bounds_before_s": 2.0,
            "blob_bounds_after_s": 0.2,
            "raw_concat_before_s": 0.3,
            "raw_concat_after_s": 0.02,
            "crc_s": 1.0,
            "crc_bytes": 2_000_000_000,
        },
        "gather": [
            {"row": "row", "row_bytes": 704, "frames": 10_000, "windows_per_s": 90_000.0, "kept": 1.0},
            {"row": "row", "row_bytes": 704, "frames": 1_000_000, "windows_per_s": 45_000.0, "kept": 0.5},
        ],
        "digests": [{"source": "x.hdf5", "bytes": 700_000_000, "digest_s": 1.4, "mb_per_s": 500.0}],
    },
}
CONVERSION = {
    "kind": "growth_conversion",
    "framework": "both",
    "machine": MACHINE,
    "results": [
        {
            "workload": "robomimic_lowdim_1m",
            "frames": 1_025_354,
            "source_bytes": 717_000_000,
            "runs": [
                {
                    "executor": "local",
                    "workers": 2,
                    "wall_s": 60.0,
                    "source_mb_per_s": 11.9,
                    "mb_per_s_per_worker": 5.97,
                    "units": 12,
                },
                {"executor": "datatrove-local", "workers": 2, "wall_s": 70.0, "error": "boom"},
            ],
            "killed": {
                "killed_after_s": 25.0,
                "shards_done_at_kill": 4,
                "shards_kept": 4,
                "shards_written_by_rerun": 8,
                "shards_total": 12,
                "rerun_s": 41.0,
                "rerun_ok": True,
                "full_run_s": 60.0,
            },
        }
    ],
}


def test_findings_and_conversion_results_are_tables_in_the_report_and_the_readme(tmp_path):
    from benchmarks.harness.readme_tables import update_readme

    for name, payload in (
        ("findings.json", FINDINGS),
        ("conversion.json", CONVERSION),
        ("growth.json", growth_payload()),
    ):
        (tmp_path / name).write_text(json.dumps(payload))
    r = CliRunner().invoke(
        harness,
        [
            "growth",
            "report",
            str(tmp_path / "findings.json"),
            str(tmp_path / "conversion.json"),
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert r.exit_code == 0, r.output
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| planning a pass | 1.6 s | 0.17 s |" in md and "| `x.hdf5` | 700 | 1.4 | 500 |" in md
    assert "| row | 1,000,000 | 45,000 | 0.50 |" in md
    assert "| local | 2 | 60 | 11.90 | 5.97 | 12 |" in md and "FAILED" in md
    assert "| 4 of 12 | 4 | 8 | 41 (60) | yes |" in md
    readme = tmp_path / "README.md"
    readme.write_text("<!-- robo-loaders:table growth.json table=goals source=no -->\n<!-- /robo-loaders:table -->\n")
    update_readme(str(readme), str(tmp_path))
    assert "Goals at 1,025,000 frames" in readme.read_text() and "| `datapipe` |" in readme.read_text()


def test_the_package_report_skips_growth_results_naming_the_harness_command(tmp_path):
    """The growth plots left the package (they are the harness's): ``robo-loaders report`` given a growth result
    says in one line where it is plotted, and still reports the other files given."""
    from report_fakes import bench_payload, dump

    growth, bench = tmp_path / "growth.json", tmp_path / "bench.json"
    growth.write_text(json.dumps(growth_payload()))
    dump(bench, bench_payload())
    r = CliRunner().invoke(main, ["report", str(growth), str(bench), "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert (
        f"skipped {growth}: a cost-growth result of the project's benchmark harness: plot it from a clone of the "
        "repository with `python -m benchmarks.harness growth report FILES --out DIR`"
    ) in r.output
    assert (
        not list((tmp_path / "out").glob("*growth*.png"))
        and "`growth.json`" in (tmp_path / "out" / "report.md").read_text()
    )  # named among the skipped files, not plotted
    # growth alone: nothing to report, the skip line still printed
    r = CliRunner().invoke(main, ["report", str(growth), "--out", str(tmp_path / "out2")])
    assert r.exit_code == 1 and "benchmarks.harness growth report" in r.output
    # negative control: the harness's command plots the same file
    r = CliRunner().invoke(harness, ["growth", "report", str(growth), "--out", str(tmp_path / "out3")])
    assert r.exit_code == 0 and (tmp_path / "out3" / "growth_growth.png").exists(), r.output


def test_the_harness_growth_report_skips_other_results(tmp_path):
    from report_fakes import bench_payload, dump

    bench = tmp_path / "bench.json"
    dump(bench, bench_payload())
    r = CliRunner().invoke(harness, ["growth", "report", str(bench), "--out", str(tmp_path / "out")])
    assert r.exit_code == 1
    assert f"skipped {bench}: not a cost-growth result (`robo-loaders report` plots it)" in r.output
    assert "none of the 1 file(s) given is a cost-growth result" in r.output
