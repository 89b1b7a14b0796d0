"""benchmarks/sample_costs.py: how a sampled stack is put in a stage, and how the rows are summed up."""

from __future__ import annotations

import pytest

from benchmarks import sample_costs as sc

GATHER = "take_rows (robo_loaders_plugin/backends/gpu_resampler/tensors.py:120)"
NUMPY_TAKE = "_wrapfunc (numpy/_core/fromnumeric.py:57)"
DECOMPRESS = "decompress (blosc2/core.py:229)"
COPY_WINDOWS = "copy_windows (robo_loaders_plugin/frames/base.py:297)"
H5 = "Dataset.__getitem__ (h5py/_hl/dataset.py:872)"
ROOT = "main (benchmarks/sample_costs.py:300)"


@pytest.mark.parametrize(
    "stack, stage",
    [
        ([ROOT, GATHER, NUMPY_TAKE], "gather"),  # numpy's own frames name no stage: the caller's does
        (
            [
                ROOT,
                COPY_WINDOWS,
                "EncodedFrames.decode_into (robo_loaders_plugin/storage/encoded_frames.py:147)",
                DECOMPRESS,
            ],
            "decode",
        ),  # the innermost frame that names one wins over the frames around it
        ([ROOT, "SequenceDataset.get_item (robomimic/utils/dataset.py:437)", H5], "read"),
        ([ROOT, "Condition.wait (threading.py:359)"], "queue"),
        ([ROOT, "pad_sequence_single (robomimic/utils/tensor_utils.py:790)"], "copy"),
        ([ROOT, "busy (somewhere/else.py:3)"], "other"),
    ],
)
def test_each_stack_is_put_in_the_stage_its_innermost_named_frame_says(stack, stage):
    assert sc.stage_of(stack) == stage


def test_a_library_path_is_matched_from_its_root_not_inside_another_name():
    # control: "av/" inside another package's path is not PyAV, and gpu_resampler is not a sampler
    assert sc.stage_of(["f (nav/route.py:1)"]) == "other"
    assert sc.stage_of(["g (av/frame.py:1)"]) == "decode"
    assert sc.stage_of(["_rows (robo_loaders_plugin/backends/gpu_resampler/tensors.py:222)"]) == "gather"


def test_raw_counts_and_summary(tmp_path):
    raw = tmp_path / "raw.txt"
    raw.write_text(f"{ROOT};{GATHER};{NUMPY_TAKE} 30\n{ROOT};{COPY_WINDOWS};{DECOMPRESS} 10\n\n")
    counts = sc.read_raw(str(raw))
    assert counts == {"gather": 30, "decode": 10}
    row = dict(samples=2000, busy_samples=40, stage_samples=dict(counts))
    out = sc.summarize(row, rate=100)
    # 40 samples at 100 Hz = 0.4 CPU s for 2,000 samples: 0.2 s per 1,000, three quarters of it gathering
    assert out["cpu_s_per_1k_samples"] == pytest.approx(0.2)
    assert out["stages"]["gather"]["share"] == pytest.approx(0.75)
    assert out["stages"]["gather"]["ms_per_1k_samples"] == pytest.approx(150.0)
    assert list(out["stages"]) == ["gather", "decode"]  # the largest first


def _result(tmp_path):
    row = sc.summarize(
        dict(
            backend="gpu_resampler",
            samples=1000,
            seconds=2.0,
            samples_per_s=500.0,
            busy_samples=40,
            stage_samples={"gather": 30, "queue": 10},
            user_ms_per_sample=1.5,
            system_ms_per_sample=0.5,
            minor_faults_per_sample=0.25,
            load_1min=[1.2],
        ),
        rate=100,
    )
    payload = dict(
        kind="sample_costs",
        framework="robomimic",
        workload=sc.WORKLOAD_TITLES["w1"],
        settings=dict(batch_size=64, num_workers=2, seconds=10.0, rate_hz=100, seq_length=10),
        stages=[s for s, _, _ in sc.STAGES] + ["other"],
        machine=None,
        code="abc1234",
        results=[row],
    )
    path = tmp_path / "sample_costs_w1.json"
    path.write_text(__import__("json").dumps(payload))
    return payload, path


def test_the_table_gives_cpu_per_sample_cores_busy_and_each_stage_share(tmp_path):
    payload, _ = _result(tmp_path)
    table = sc.costs_table(payload)
    header, _, row = table.splitlines()
    assert header.split(" | ")[-1] == "other |"
    cells = [c.strip() for c in row.strip("|").split("|")]
    # 2 ms of CPU per sample at 500 samples/s: one core busy; gather 75%, queue 25%, no other stage
    assert cells[:5] == ["`gpu_resampler`", "500", "1.500 + 0.500", "1.00", "0.2"]
    stages = dict(zip(payload["stages"], cells[5:]))
    assert stages["gather"] == "75%" and stages["queue"] == "25%" and stages["decode"] == "-"


def test_a_readme_marker_renders_the_costs_table_with_its_source_line(tmp_path):
    from benchmarks.harness.readme_tables import regenerate

    _, path = _result(tmp_path)
    text = f"x\n<!-- robo-loaders:table {path.name} -->\nold\n<!-- /robo-loaders:table -->\n"
    out, _ = regenerate(text, str(tmp_path), str(tmp_path), "doc.md")
    assert "| `gpu_resampler` | 500 |" in out and "old" not in out
    assert "10 s profiled per backend at 100 Hz" in out and "code abc1234" in out and "1-min load 1.2-1.2" in out
