"""``robo-loaders robomimic-train``: robomimic's own training script, run as ``__main__`` after patching."""
from __future__ import annotations

import runpy
import sys


def run_robomimic_train(argv: list[str]) -> None:
    from robo_loaders_plugin.robomimic.patches import apply_all

    apply_all()
    sys.argv = ["robomimic.scripts.train"] + list(argv)
    runpy.run_module("robomimic.scripts.train", run_name="__main__", alter_sys=True)
