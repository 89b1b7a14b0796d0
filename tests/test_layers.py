"""The import-linter contracts of pyproject.toml (the layer order docs/architecture.md describes, and no import
cycle: scripts/import_cycles.py) hold, and would catch a module importing from a layer above its own, or a cycle.

``make lint`` runs ``lint-imports`` too (in ``make test-fast`` and ``make test``); this test keeps the negative
control next to it: a contract that cannot fail would be a defect.
"""

from __future__ import annotations

import itertools
import os
import re
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
        [LINT_IMPORTS, os.path.join(project, "pyproject.toml"), "--no-cache"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
    )


def test_the_layer_contracts_hold():
    out = _lint(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


def _project_with(tmp_path, module: str, planted: str) -> str:
    """A copy of the package, its pyproject.toml and the project's contracts, with ``planted`` appended to
    ``module``."""
    project = tmp_path / "project"
    shutil.copytree(
        os.path.join(ROOT, "robo_loaders_plugin"),
        project / "robo_loaders_plugin",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copytree(os.path.join(ROOT, "scripts"), project / "scripts", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), project / "pyproject.toml")
    path = project / "robo_loaders_plugin" / module
    path.write_text(path.read_text() + "\n" + planted)
    return str(project)


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
    out = _lint(_project_with(tmp_path, module, planted))
    assert out.returncode != 0, out.stdout
    # the named contract is among the broken ones (an upward import often closes an import cycle too)
    assert broken in out.stdout.split("Broken contracts", 1)[-1], out.stdout


IN_A_FUNCTION = "def _planted():\n    from {module} import {name}  # noqa: F401\n"


@pytest.mark.parametrize(
    "module, planted, importer, imported",
    [
        # an import inside a function closes a loop: core.registry imports core.errors at its top
        (
            "core/errors.py",
            IN_A_FUNCTION.format(module="robo_loaders_plugin.core", name="registry"),
            "core.errors",
            "core.registry",
        ),
        # through a package's __init__, which import-linter's own acyclic_siblings does not see: storage/shards/
        # __init__.py imports format (through reader, too)
        (
            "storage/shards/format.py",
            IN_A_FUNCTION.format(module="robo_loaders_plugin.storage.shards", name="ShardReader"),
            "storage.shards.format",
            "storage.shards",
        ),
    ],
)
def test_a_planted_import_cycle_breaks_the_cycle_contract(tmp_path, module, planted, importer, imported):
    """Issue 43 item 3: a cycle within one layer, which the layers contract cannot see, is refused naming its
    modules, with one loop through them and the lines of its imports."""
    out = _lint(_project_with(tmp_path, module, planted))
    assert out.returncode != 0, out.stdout
    assert "1 broken" in out.stdout and "No import cycles" in out.stdout, out.stdout
    text = " ".join(out.stdout.split())  # the report wraps long lines
    found = re.search(r"Import cycle among (\d+) modules of robo_loaders_plugin: (.*?) (\w[\w.]*) -> ", text)
    assert found, text
    names = found.group(2).split(", ")
    assert importer in names and imported in names and len(names) == int(found.group(1)), text
    loop = re.findall(r"([\w.]+) -> ([\w.]+) \(line [\d, ]+\)", text)
    closed = loop[0][0] == loop[-1][1] and all(a[1] == b[0] for a, b in itertools.pairwise(loop))
    assert len(loop) >= 2 and closed, text


def test_a_type_checking_import_is_no_cycle(tmp_path):
    """Control: the same import as the first planted cycle, under ``if TYPE_CHECKING:`` (it never runs), is no
    cycle, and the real tree's exceptions are still matched."""
    planted = "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from robo_loaders_plugin.core import registry"
    out = _lint(_project_with(tmp_path, "core/errors.py", planted))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


def test_an_exception_that_matches_no_import_fails(tmp_path):
    """An allowed import cycle's exception (``ignore_imports``) that no longer matches an import fails the check,
    so it is removed when the cycle is broken."""
    project = _project_with(tmp_path, "core/units.py", "")
    config = os.path.join(project, "pyproject.toml")
    with open(config, encoding="utf-8") as f:
        text = f.read()
    exceptions = "ignore_imports = [\n"
    assert exceptions in text
    stale = '    "robo_loaders_plugin.core.units -> robo_loaders_plugin.cli",\n'  # core.units imports no cli
    with open(config, "w", encoding="utf-8") as f:
        f.write(text.replace(exceptions, exceptions + stale))
    out = _lint(project)
    assert out.returncode != 0, out.stdout
    assert "No matches for ignored import robo_loaders_plugin.core.units -> robo_loaders_plugin.cli" in " ".join(
        (out.stdout + out.stderr).split()
    )
