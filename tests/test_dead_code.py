"""vulture finds no dead code in the package ([tool.vulture] in pyproject.toml, run by ``make lint``), and would
find a planted one; its whitelist (``scripts/vulture_whitelist.py``) names only what exists.

The negative controls sit beside the check, as for the layer contracts (``tests/test_layers.py``): a check that
cannot fail would be a defect.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WHITELIST = os.path.join(ROOT, "scripts", "vulture_whitelist.py")

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vulture") is None, reason="vulture not installed (make setup)"
)


def _vulture(project: str) -> subprocess.CompletedProcess:
    """``vulture`` as ``make lint`` runs it: from the project's root, configured by its pyproject.toml."""
    return subprocess.run([sys.executable, "-m", "vulture"], cwd=project, capture_output=True, text=True, timeout=300)


def _copy(tmp_path) -> str:
    project = tmp_path / "project"
    shutil.copytree(
        os.path.join(ROOT, "robo_loaders_plugin"),
        project / "robo_loaders_plugin",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    (project / "scripts").mkdir()
    shutil.copy(WHITELIST, project / "scripts")
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), project)
    return str(project)


def test_vulture_finds_no_dead_code():
    out = _vulture(ROOT)
    assert out.returncode == 0 and out.stdout == "", out.stdout + out.stderr


def test_a_planted_dead_function_and_a_name_left_out_of_the_whitelist_are_reported(tmp_path):
    project = _copy(tmp_path)
    units = os.path.join(project, "robo_loaders_plugin", "core", "units.py")
    with open(units, "a") as f:
        f.write("\n\ndef planted_helper_nobody_calls(x):\n    return x\n")
    whitelist = os.path.join(project, "scripts", "vulture_whitelist.py")
    with open(whitelist) as f:
        text = f.read()
    with open(whitelist, "w") as f:
        f.write(text.replace("testing.assert_same_pass\n", ""))
    out = _vulture(project)
    assert out.returncode == 3, out.stdout + out.stderr  # vulture's status for dead code found
    lines = out.stdout.splitlines()
    planted = "unused function 'planted_helper_nobody_calls'"
    assert any(line.startswith("robo_loaders_plugin/core/units.py:") and planted in line for line in lines), lines
    assert any("testing.py:" in line and "unused function 'assert_same_pass'" in line for line in lines), lines
    assert len(lines) == 2, lines  # nothing else


def test_the_whitelist_names_only_what_exists(tmp_path):
    runpy.run_path(WHITELIST)  # every listed name is looked up
    stale = tmp_path / "stale_whitelist.py"
    with open(WHITELIST) as f:
        stale.write_text(f.read() + "\ntesting.assert_same_everything_removed_since\n")
    with pytest.raises(AttributeError, match="assert_same_everything_removed_since"):
        runpy.run_path(str(stale))
