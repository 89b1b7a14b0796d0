"""``make demo`` (``examples/demo.sh``) without running its training: its helpers show progress and the lines worth
reading while keeping every tool's whole output in a log, a failing step ends the demo with that step's status and
log, and every ``robo-loaders`` command it runs exists with the options it gives.

Why not run the demo here: it trains two policies (2.3 min on a quiet 2-core machine); its last measured run is
committed in ``benchmarks/results/demo_run.log``.
"""

import os
import re
import subprocess

import click
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(ROOT, "examples", "demo.sh")
LIB = os.path.join(ROOT, "examples", "demo_lib.sh")


def helpers(script: str, tmp_path) -> subprocess.CompletedProcess:
    """``script`` run by bash after sourcing the demo's helpers, as the demo does."""
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail; started=$SECONDS; steps=2; n=0; source {LIB}; {script}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_demo_script_parses():
    assert subprocess.run(["bash", "-n", DEMO]).returncode == 0


def test_run_shows_the_matching_lines_as_they_come_and_keeps_the_whole_output(tmp_path):
    p = helpers(
        "step 'first'; run out.log '^keep' bash -c 'echo keep one; echo noise; echo keep two >&2'; step 'second'",
        tmp_path,
    )
    assert p.returncode == 0, p.stderr
    assert re.fullmatch(
        r"\n== \[1/2, 0:0\d elapsed\] first\nkeep one\nkeep two\n\n== \[2/2, 0:0\d elapsed\] "
        r"second\n",
        p.stdout,
    ), p.stdout
    assert (tmp_path / "out.log").read_text() == "keep one\nnoise\nkeep two\n"


def test_a_failing_step_ends_the_demo_with_its_status_and_names_its_log(tmp_path):
    p = helpers("run bad.log '^x' bash -c 'echo x; exit 3'; echo not reached", tmp_path)
    assert p.returncode == 3
    assert "not reached" not in p.stdout and p.stdout == "x\n"
    assert p.stderr.strip() == "failed (exit 3): see bad.log"


def commands(text: str) -> list[list[str]]:
    """Every ``robo-loaders`` command line of a shell script (continued lines joined), as words."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [
        line[line.index("robo-loaders ") :].split()
        for line in joined.splitlines()
        if "robo-loaders " in line and not line.lstrip().startswith(("#", "echo", "step", '"', "printf"))
    ]


def unknown_options(words: list[str]) -> list[str]:
    """The options of one ``robo-loaders`` command line that its click command does not take (or the command path
    that does not exist)."""
    from robo_loaders_plugin.cli import main

    cmd, i = main, 1
    while isinstance(cmd, click.Group) and i < len(words):
        sub = cmd.get_command(click.Context(cmd), words[i])  # lazily loaded commands too (report, transcode)
        if sub is None:
            break
        cmd, i = sub, i + 1
    if isinstance(cmd, click.Group):
        return [" ".join(words[: i + 1])]
    if cmd.context_settings.get("ignore_unknown_options"):  # robomimic-train: every argument goes to robomimic
        return []
    known = {o for p in cmd.params for o in p.opts + p.secondary_opts}
    return [w for w in words[i:] if w.startswith("--") and w.split("=")[0] not in known]


def test_every_robo_loaders_command_of_the_demo_takes_its_options():
    with open(DEMO) as f:
        found = commands(f.read())
    assert {tuple(c[1:3]) for c in found} >= {
        ("sample-data", "robomimic"),
        ("robomimic-train", "--config"),
        ("bench", "robomimic"),
        ("sample-data", "lerobot"),
        ("bench", "lerobot"),
    }, found
    assert [u for c in found for u in unknown_options(c)] == []


@pytest.mark.parametrize(
    "line", ["robo-loaders bench robomimic --dataset x --batches-per-pass 3", "robo-loaders sample-data mujoco out"]
)
def test_the_option_check_sees_a_command_or_option_that_does_not_exist(line):
    """Negative control: an option the command does not take, a subcommand that does not exist."""
    assert unknown_options(line.split())
