"""What installing the package asks for (issue 23 B11): the Python LeRobot 0.6.1 needs, an extra for every backend
dependency a missing-dependency message names, and no test tools in ``[all]``. The message itself is
``tests/test_registry.py::test_a_missing_dependency_names_the_extra_to_install``."""

import ast
import glob
import os
import re
import subprocess
import sys
import tomllib
import zipfile

import pytest

from robo_loaders_plugin.backends import requirements as backends

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def project():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def test_requires_python_is_what_lerobot_needs():
    """It said >=3.10 while LeRobot 0.6.1 needs 3.12: pip installed the plugin on 3.10, then LeRobot failed."""
    assert project()["requires-python"].startswith(">=3.12")


def test_every_extra_a_backend_names_exists_and_all_holds_no_test_tools():
    extras = project()["optional-dependencies"]
    named = {
        re.search(r"\[(\w+)\]", hint).group(1) for _, hint in (backends.TORCHDATA, backends.TORCHCODEC, backends.PYAV)
    }
    assert named <= set(extras), named - set(extras)
    assert any(d.startswith("torchdata") for d in extras["datapipe"]) and {"torchcodec", "av"} <= {
        re.split(r"[<>=\[]", d)[0] for d in extras["video"]
    }
    everything = " ".join(extras["all"])
    assert "pytest" not in everything and "moto" not in everything
    assert {"pytest", "moto"} <= {re.split(r"[<>=\[]", d)[0] for d in extras["test"]}


def test_the_readme_says_how_to_install_from_a_clone_and_from_git():
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert 'pip install -e ".[robomimic]"' in readme and "@ git+" in readme


def not_the_package(names: list[str]) -> list[str]:
    """Wheel entries that are not the package, its metadata or its start-up hook (``.pth``)."""
    return [
        n
        for n in names
        if not n.startswith(("robo_loaders_plugin/", "robo_loaders_plugin-"))
        and n != "robo_loaders_plugin_autopatch.pth"
    ]


def harness_files(names: list[str]) -> list[str]:
    """Wheel entries that are the project's own benchmark tooling (issue 31 item 8: the growth plots shipped)."""
    return [n for n in names if n.startswith("benchmarks/") or os.path.basename(n).startswith("growth")]


def test_the_wheel_holds_the_package_and_not_the_benchmark_harness(tmp_path):
    """``pip wheel .`` (hatchling, in pip's build isolation): the package, its metadata and the import hook, and
    nothing of ``benchmarks/`` (the growth plots were in ``robo_loaders_plugin/bench/`` until issue 31)."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), ROOT],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if out.returncode and "installing build dependencies" in out.stderr:
        pytest.skip(f"pip could not install the build backend (no index?): {out.stderr.strip().splitlines()[-1]}")
    assert out.returncode == 0, out.stderr
    (wheel,) = glob.glob(os.path.join(tmp_path, "*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert {
        "robo_loaders_plugin/cli.py",
        "robo_loaders_plugin/bench/plots.py",
        "robo_loaders_plugin_autopatch.pth",
    } <= set(names)
    assert not not_the_package(names) and not harness_files(names), names
    # negative control: what the wheel held before, and the harness, are caught
    before = ["robo_loaders_plugin/bench/growth_plots.py", "benchmarks/harness/growth.py"]
    assert harness_files(before) == before and not_the_package(before) == before[1:]


def test_the_package_never_imports_the_benchmark_harness():
    """An installed wheel has no ``benchmarks/``: a package module importing it would fail there, not in a clone."""

    def imports_harness(source: str) -> bool:
        for node in ast.walk(ast.parse(source)):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            if any(n == "benchmarks" or n.startswith("benchmarks.") for n in names):
                return True
        return False

    found = []
    for path in glob.glob(os.path.join(ROOT, "robo_loaders_plugin", "**", "*.py"), recursive=True):
        with open(path) as f:
            if imports_harness(f.read()):
                found.append(os.path.relpath(path, ROOT))
    assert not found, found
    # negative control: both import forms are seen, a relative import of a package module named so is not
    assert imports_harness("from benchmarks.harness import growth_plots") and imports_harness("import benchmarks")
    assert not imports_harness("from .benchmarks import x") and not imports_harness("import benchmarksx")
