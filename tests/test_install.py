"""What installing the package asks for (issue 23 B11): the Python LeRobot 0.6.1 needs, an extra for every backend
dependency a missing-dependency message names, and no test tools in ``[all]``. The message itself is
``tests/test_registry.py::test_every_missing_dependency_is_named_in_one_line_with_one_pip_command``. And ``make
setup`` says what it is doing while it installs (issue 42 item 18)."""

import ast
import contextlib
import glob
import os
import re
import shutil
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


# modules the package imports only where a declared framework or extra is installed, which brings them (checked
# below: each is in the requirements of a declared distribution); every other third-party import is declared itself
_BROUGHT = {
    "PIL": "LeRobot's images",
    "accelerate": "lerobot-train's",
    "cv2": "LeRobot's (an optional fast path, storage/frame_layout.py)",
    "datasets": "LeRobot's tables",
    "draccus": "lerobot-train's configs",
    "fsspec": "LeRobot's and s3fs's filesystems",
    "huggingface_hub": "LeRobot's Hub access",
    "pandas": "LeRobot's tables",
    "pyarrow": "LeRobot's tables",
}


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~ ;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _third_party_imports(package: str) -> set[str]:
    found = set()
    for path in glob.glob(os.path.join(package, "**", "*.py"), recursive=True):
        with open(path, encoding="utf-8") as f:
            for node in ast.walk(ast.parse(f.read(), path)):
                if isinstance(node, ast.Import):
                    found |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m != os.path.basename(package)}


def _undeclared(imports: set[str], declared: set[str]) -> list[str]:
    """The imported modules whose distribution is not declared, nor listed in ``_BROUGHT`` (and brought)."""
    import importlib.metadata as md

    dists = md.packages_distributions()

    def closure(names):
        seen, todo = set(), list(names)
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            with contextlib.suppress(md.PackageNotFoundError):  # an extra's package that is not installed here
                todo += [_name(r) for r in md.requires(name) or ()]
        return seen

    brought = closure(declared)
    out = []
    for module in sorted(imports):
        names = {_name(d) for d in dists.get(module, [module])}
        if names & declared or (module in _BROUGHT and names & brought):
            continue
        out.append(module)
    return out


def test_every_third_party_module_the_package_imports_is_declared():
    """filelock was imported (sources/file_cache.py, sources/lerobot_v3.py) without being declared: it came with
    torch. A module the package imports is declared in pyproject.toml (dependencies or an extra), or brought by a
    declared framework where only that framework's code uses it (``_BROUGHT``, each checked to be brought).
    Control: without filelock's declaration it is reported."""
    p = project()
    requirements = p["dependencies"] + [r for extra in p["optional-dependencies"].values() for r in extra]
    declared = {_name(r) for r in requirements}
    imports = _third_party_imports(os.path.join(ROOT, "robo_loaders_plugin"))
    assert {"filelock", "torch", "pluggy"} <= imports
    assert _undeclared(imports, declared) == []
    assert _undeclared(imports, declared - {"filelock"}) == ["filelock"]


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


STUB_PYTHON = """#!/usr/bin/env bash
# a stand-in for .venv/bin/python: records each call; pip prints what pip prints, slowly for torch
echo "$*" >> "$STUB_CALLS"
[ "$1" = -m ] || exit 0  # the version and import checks
echo "Collecting something"
echo "  Downloading something-1.0-py3-none-any.whl (1.0 MB)"
case "$*" in *torch==*lerobot*) sleep 2.5 ;; esac
case "$*" in *"$STUB_FAIL"*) echo "ERROR: No matching distribution found for $STUB_FAIL"; exit 1 ;; esac
echo "Successfully installed something-1.0"
"""


def make_setup(tmp_path, fail: str = "") -> tuple[subprocess.CompletedProcess, list[str]]:
    """The Makefile's real ``setup`` recipe with a stub interpreter as the environment's Python (no download): its
    output, and the stub's calls (arguments, one line each)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    stub = venv / "bin" / "python"
    stub.write_text(STUB_PYTHON)
    stub.chmod(0o755)
    calls = tmp_path / "calls"
    env = dict(
        os.environ, PYTHON312=str(stub), STUB_CALLS=str(calls), STUB_FAIL=fail or "no-such-fail", PROGRESS_QUIET_S="1"
    )
    p = subprocess.run(
        ["make", "--no-print-directory", "-C", ROOT, "setup", f"VENV={venv}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    return p, calls.read_text().splitlines() if calls.exists() else []


@pytest.fixture
def ffmpeg_found():
    found = subprocess.run("ldconfig -p 2>/dev/null | grep -q 'libavcodec\\.so'", shell=True).returncode == 0
    if not found or not shutil.which("make"):
        pytest.skip("make setup would install FFmpeg here (apt), or make is missing")


def test_make_setup_says_each_step_and_shows_pips_progress_as_it_comes(tmp_path, ffmpeg_found):
    """Issue 42 item 18: ``make setup`` printed four lines in 6 minutes. Each of its six steps now prints a header
    with the time elapsed and what it takes, pip's downloads as they come, "still running" when nothing was shown
    for PROGRESS_QUIET_S seconds (1 here, 30 by default), and keeps pip's whole output in a log per step; every
    install still runs, in order."""
    p, calls = make_setup(tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    headers = re.findall(r"^== \[(\d)/6, \d+:\d\d elapsed\] (.*)$", p.stdout, re.M)
    assert [int(i) for i, _ in headers] == [1, 2, 3, 4, 5, 6], p.stdout
    assert "minutes" in headers[3][1] and p.stdout.startswith("[setup] building "), p.stdout
    assert p.stdout.count("  Downloading something-1.0") == 5  # every pip install's (robomimic's step runs two)
    assert re.search(r"torchcodec.*\n(.*\n)*   \.\.\. still running \(\d+:\d\d elapsed; its whole output: .*"
                     r"setup-torch-lerobot\.log\)", p.stdout), p.stdout  # fmt: skip
    assert "Collecting something" not in p.stdout  # shown only in the logs
    assert "Collecting something" in (tmp_path / "venv" / "setup-torch-lerobot.log").read_text()
    what = re.compile(r"(-U pip|lerobot\[dataset|egl_probe|robomimic==0.3.0|-e \.\[all,test\])")
    pips = [what.search(c).group(1) for c in calls if c.startswith("-m pip")]
    assert pips == ["-U pip", "lerobot[dataset", "egl_probe", "robomimic==0.3.0", "-e .[all,test]"], calls
    assert (tmp_path / "venv" / ".robo-loaders-setup").exists()
    # the stub takes any argument: real pip's parser reads each call's (a global option placed after `install`, or
    # an install option before it, stopped the first real setup: "no such option: --progress-bar")
    bad = [c for c in calls if c.startswith("-m pip") and not pip_parses(c.split()[2:])]
    assert not bad, bad


def pip_parses(args: list[str]) -> bool:
    """Whether pip's own command-line parser accepts ``args`` (what follows ``python -m pip``); nothing is run."""
    from pip._internal.cli.main_parser import parse_command
    from pip._internal.commands import create_command

    try:
        name, rest = parse_command(args)
        create_command(name).parse_args(rest)
    except SystemExit:
        return False
    return True


def test_pip_parses_is_pips_own_parser():
    """Negative control of the check above: an install option before the command, an unknown option, are refused."""
    assert pip_parses(["--disable-pip-version-check", "install", "--progress-bar", "off", "-U", "pip"])
    assert not pip_parses(["--disable-pip-version-check", "--progress-bar", "off", "install", "-U", "pip"])
    assert not pip_parses(["install", "--no-such-option", "pip"])


def test_a_failing_setup_step_stops_setup_naming_its_log(tmp_path, ffmpeg_found):
    """Negative control: pip failing at robomimic ends setup there with its status and the step's log; the plugin
    is not installed and setup is not marked done."""
    p, calls = make_setup(tmp_path, fail="robomimic==0.3.0")
    assert p.returncode != 0
    assert re.search(r"failed \(exit 1\): see .*setup-robomimic\.log", p.stderr), p.stderr
    assert "ERROR: No matching distribution found for robomimic==0.3.0" in p.stdout
    assert not any("-e .[all,test]" in c for c in calls)
    assert not (tmp_path / "venv" / ".robo-loaders-setup").exists()
