"""The training-time benchmark on LeRobot: ``lerobot-train`` per backend, its JSON checked as
test_train_bench.py checks robomimic's (the shared checks: train_bench_checks.py). A module of its own so that
pytest-xdist (``--dist loadscope``) runs it on one worker while the other runs robomimic's."""

import importlib.util
import json

import pytest
from click.testing import CliRunner

from benchmarks.harness.cli import main
from benchmarks.tests.train_bench_checks import consistent, ratios_to

pytestmark = pytest.mark.usefixtures("passive_threads")


@pytest.fixture(scope="module")
def le_root(tmp_path_factory):
    from robo_loaders_plugin.sample_data.lerobot_v3 import write_lerobot_dataset

    return str(
        write_lerobot_dataset(
            tmp_path_factory.mktemp("train_bench") / "le",
            episode_lengths=(30, 36, 42),
            cameras=1,
            image_size=(32, 32),
            mode="h264",
            seed=4,
            progress=False,
        )
    )


def test_lerobot_train_bench(le_root, tmp_path):
    out, work = tmp_path / "l.json", tmp_path / "work"
    res = CliRunner().invoke(
        main,
        [
            "train",
            "lerobot",
            "--root",
            le_root,
            "--repo-id",
            "local/sample",
            "--backends",
            "native,compressed_cache",
            "--epochs",
            "2",
            "--steps-per-epoch",
            "2",
            "--batch-size",
            "4",
            "--num-workers",
            "0",
            "--device",
            "cpu",
            "--work-dir",
            str(work),
            "--json",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output[-4000:]
    data = json.loads(out.read_text())
    assert data["framework"] == "lerobot" and data["baseline"] == "native"
    policy = "diffusion" if importlib.util.find_spec("diffusers") else "act"
    assert data["settings"]["policy"] == policy and data["settings"]["steps"] == 4
    native, cc = data["results"]
    assert native["backend"] == "native" and cc["backend"] == "compressed_cache"
    for r in (native, cc):
        consistent(r, 2, 2, 4, waits=r is native)  # native decodes video in the training process (0 workers)
        assert [s["step"] for s in r["steps"]] == [1, 2, 3, 4] and all(s["updt_s"] > 0 for s in r["steps"])
        for k, e in enumerate(r["epochs"]):  # an epoch is a block of steps; its times are the steps' sums
            block = r["steps"][2 * k : 2 * k + 2]
            assert e["data_s"] == pytest.approx(sum(s["data_s"] for s in block))
            assert e["step_s"] == pytest.approx(sum(s["data_s"] + s["updt_s"] for s in block))
    ratios_to(native, [native, cc])
    native_log, cc_log = (work / "native.log").read_text(), (work / "compressed_cache.log").read_text()
    assert "[robo-loaders]" not in native_log and "'dataset': {'backend': 'native'," in native_log  # stock loader
    assert "[robo-loaders] lerobot data backend: compressed_cache [local/sample]" in cc_log
    assert "data stall" in res.output and "vs native" in res.output
