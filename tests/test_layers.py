"""The import-linter contracts of pyproject.toml (the layer order docs/architecture.md describes) hold, and would
catch a module importing from a layer above its own.

``make lint`` runs ``lint-imports`` too (in ``make test-fast`` and ``make test``); this test keeps the negative
control next to it: a contract that cannot fail would be a defect.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINT_IMPORTS = os.path.join(os.path.dirname(sys.executable), "lint-imports")

pytestmark = pytest.mark.skipif(not os.path.exists(LINT_IMPORTS), reason="import-linter not installed (make setup)")


def _lint(project: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": project}
    return subprocess.run(
        [LINT_IMPORTS, "--config", os.path.join(project, "pyproject.toml"), "--no-cache"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
    )


def test_the_layer_contracts_hold():
    out = _lint(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


@pytest.mark.parametrize(
    "module, planted, broken",
    [
        # core imports a layer above it
        ("core/units.py", "from robo_loaders_plugin.storage import cache  # noqa\n", "Layers"),
        # a framework adapter imports the other one
        ("robomimic/sequence.py", "from robo_loaders_plugin.lerobot import dataset  # noqa\n", "Layers"),
        # one backend package imports another
        (
            "backends/datapipe/robomimic.py",
            "from robo_loaders_plugin.backends.gpu_resampler import tiers  # noqa\n",
            "Backend packages",
        ),
    ],
)
def test_a_planted_upward_import_breaks_a_contract(tmp_path, module, planted, broken):
    project = tmp_path / "project"
    shutil.copytree(
        os.path.join(ROOT, "robo_loaders_plugin"),
        project / "robo_loaders_plugin",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), project / "pyproject.toml")
    path = project / "robo_loaders_plugin" / module
    path.write_text(path.read_text() + "\n" + planted)
    out = _lint(str(project))
    assert out.returncode != 0, out.stdout
    assert "1 broken" in out.stdout and broken in out.stdout, out.stdout
