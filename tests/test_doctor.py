"""robo-loaders doctor: passes with the installed (pinned) frameworks, fails naming a patch point that moved."""
from click.testing import CliRunner

from robo_loaders_plugin.cli import main


def test_doctor_passes_with_the_pinned_versions():
    r = CliRunner().invoke(main, ["doctor"])
    assert r.exit_code == 0, r.output
    for row in ("robomimic 0.3.0", "lerobot 0.6.", "run_epoch", "cycle", "DatasetReader._tolerance_s",
                "DataLoader draws one base seed", "torchcodec"):
        assert row in r.output, row


def test_doctor_fails_on_a_renamed_patch_point(monkeypatch):
    import robomimic.utils.train_utils as train_utils

    monkeypatch.setattr(train_utils, "run_epoch_renamed", train_utils.run_epoch, raising=False)
    monkeypatch.delattr(train_utils, "run_epoch")
    r = CliRunner().invoke(main, ["doctor"])
    assert r.exit_code == 1
    line = next(x for x in r.output.splitlines() if "train_utils.run_epoch" in x)
    assert line.startswith("FAIL") and "missing" in line and "cannot hook in" in line


def test_doctor_fails_on_a_changed_signature(monkeypatch):
    import lerobot.datasets.factory as factory

    from robo_loaders_plugin.lerobot import compat

    monkeypatch.setattr(factory, "make_dataset", lambda config, extra: None)
    monkeypatch.setitem(compat.ORIGINALS, "make_dataset", factory.make_dataset)
    r = CliRunner().invoke(main, ["doctor"])
    assert r.exit_code == 1
    line = next(x for x in r.output.splitlines() if "factory.make_dataset" in x)
    assert line.startswith("FAIL") and "expected ('cfg',)" in line
