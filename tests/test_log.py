"""The plugin's log (issue 31 item 5): ``logging.getLogger("robo_loaders")`` and one child per module, printing the
``[robo-loaders] ...`` lines exactly as the ``print()`` calls it replaced did (on the stdout of the moment, flushed:
pytest's ``capsys``, ``CliRunner`` and robomimic's log-file tee replace ``sys.stdout``), once even where the root
logger is configured, quieted or raised by ``ROBO_LOADERS_LOG_LEVEL`` or the logger's level; and no ``print()`` left
in runtime code but the command-line output this file lists."""

import ast
import contextlib
import io
import logging
import os
import subprocess
import sys
import types

import pytest

from robo_loaders_plugin.core import log

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "robo_loaders_plugin")
PROMPT = "WARNING: model directory already exists! \noverwrite? \ny/n\n"  # robomimic's get_exp_dir question
# what keep_existing_runs' answer printed before the logger, print(f"{prompt.strip()}\n[robo-loaders] ...")
ANSWER = (
    "[robo-loaders] no terminal to answer: keeping the existing runs; this run goes to a new timestamped "
    "folder beside them (set experiment.name to start a fresh one)\n"
)


def answer(prompt: str = PROMPT) -> str:
    """What robomimic's prompt shows when the plugin answers it (``robomimic.compat.keep_existing_runs``)."""
    from robo_loaders_plugin.robomimic import compat

    module = types.SimpleNamespace()
    compat.keep_existing_runs(module)
    assert module.input(prompt) == "n"
    return prompt.strip() + "\n" + ANSWER


def test_lines_keep_their_words_on_the_stdout_of_the_moment(capsys):
    """A real line (robomimic's prompt answered) and a warning, byte for byte as ``print`` wrote them, captured by
    capsys (which replaced stdout after the handler was made); a stdout replaced later still gets the next line."""
    expected = answer()
    assert capsys.readouterr().out == expected
    log.get_logger("robo_loaders_plugin.storage.cache").warning("warning: the episode cache holds 2 units")
    assert capsys.readouterr().out == "[robo-loaders] warning: the episode cache holds 2 units\n"
    with contextlib.redirect_stdout(io.StringIO()) as other:
        log.get_logger(__name__).info("to the new stdout")
    assert other.getvalue() == "[robo-loaders] to the new stdout\n"
    assert capsys.readouterr().out == ""  # negative control: nothing went to the stdout it replaced


def test_warn_once_logs_a_warning_once_per_process(capsys):
    """The same warning asked for again (a mixture checked at parsing, then for each split) is one line; another
    message, or the same one on another logger, is its own line (control: the logger's own warning repeats)."""
    logger = log.get_logger("robo_loaders_plugin.mixtures.test_warn_once")
    assert log.warn_once(logger, "warning: components disagree") is True
    assert log.warn_once(logger, "warning: components disagree") is False
    assert log.warn_once(logger, "warning: another thing") is True
    assert log.warn_once(log.get_logger("x.test_warn_once"), "warning: components disagree") is True
    assert capsys.readouterr().out == "".join(
        f"[robo-loaders] warning: {m}\n" for m in ("components disagree", "another thing", "components disagree")
    )
    logger.warning("warning: components disagree")
    logger.warning("warning: components disagree")
    assert capsys.readouterr().out.count("components disagree") == 2


def test_loggers_are_children_of_robo_loaders_with_one_handler_and_no_propagation():
    from robo_loaders_plugin.storage import cache

    assert cache.logger.name == "robo_loaders.storage.cache"
    assert log.get_logger("robo_loaders.x") is log.get_logger("x") is logging.getLogger("robo_loaders.x")
    assert log.get_logger("") is logging.getLogger("robo_loaders")
    top = logging.getLogger("robo_loaders")
    ours = [h for h in top.handlers if isinstance(h, log.StdoutHandler)]  # pytest attaches its capture handlers too
    assert [h.name for h in ours] == [log.HANDLER_NAME] and top.propagate is False, top.handlers
    log.install_default_handler()
    assert [h for h in top.handlers if isinstance(h, log.StdoutHandler)] == ours  # installed once


def test_the_loggers_level_quiets_info_lines(capsys):
    top = logging.getLogger("robo_loaders")
    before = top.level
    try:
        top.setLevel(logging.WARNING)
        answer()
        log.get_logger(__name__).warning("still said")
        out = capsys.readouterr().out
        assert "no terminal to answer" not in out and out.endswith("[robo-loaders] still said\n"), out
    finally:
        top.setLevel(before)
    assert capsys.readouterr().out == "" and answer() == capsys.readouterr().out  # control: info lines print again


SCRIPT = """
import logging, sys
{setup}
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.robomimic import compat
ns = type(sys)("train_utils")
compat.keep_existing_runs(ns)
ns.input("overwrite?")
get_logger(__name__).warning("warning: a warning")
get_logger(__name__).debug("a debug line")
"""


def run(level: str | None = None, setup: str = "") -> subprocess.CompletedProcess:
    """The script in a fresh process (the handler and the level are set up once per process)."""
    env = {k: v for k, v in os.environ.items() if k != log.ENV_LEVEL}
    if level is not None:
        env[log.ENV_LEVEL] = level
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
    return subprocess.run(
        [sys.executable, "-c", SCRIPT.format(setup=setup)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


INFO = "[robo-loaders] no terminal to answer: "
WARN = "[robo-loaders] warning: a warning\n"
DEBUG = "[robo-loaders] a debug line\n"


@pytest.mark.parametrize(
    "level, info, debug",
    [
        (None, True, False),
        ("WARNING", False, False),
        ("warning", False, False),
        ("DEBUG", True, True),
        ("10", True, True),
        ("ERROR", False, False),
    ],
)
def test_the_level_variable_quiets_or_raises_the_lines(level, info, debug):
    """Without the variable (the negative control) info lines print and debug ones do not; the variable, by name in
    any case or number, sets the level; stderr stays empty."""
    r = run(level)
    assert (INFO in r.stdout) is info and (DEBUG in r.stdout) is debug, r.stdout
    assert (WARN in r.stdout) is (level != "ERROR") and r.stderr == "", (r.stdout, r.stderr)


def test_a_level_that_is_no_level_is_one_line_naming_the_variable_and_ignored():
    r = run("LOUD")
    assert r.stdout.startswith(
        f"[robo-loaders] warning: {log.ENV_LEVEL}='LOUD' is not a logging level, so it is "
        "ignored; set it to one of DEBUG, INFO, WARNING, ERROR, CRITICAL or a number\n"
    )
    assert INFO in r.stdout and DEBUG not in r.stdout, r.stdout


def test_a_level_that_is_no_level_is_warned_once_per_run_not_once_per_worker():
    """A DataLoader worker (here a process started after the warning, with its environment) stays quiet about the
    value already warned about; another bad value in a child is warned (the control: the marker holds the value)."""
    code = "from robo_loaders_plugin.core.log import get_logger; get_logger('x')"
    script = (
        "import os, subprocess, sys\n"
        f"{code}\n"
        f"subprocess.run([sys.executable, '-c', {code!r}], check=True)\n"
        f"subprocess.run([sys.executable, '-c', {code!r}], env={{**os.environ, {log.ENV_LEVEL!r}: 'LOUDER'}}, "
        "check=True)\n"
    )
    env = {**os.environ, log.ENV_LEVEL: "LOUD"}
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=True)
    assert r.stdout.count(f"{log.ENV_LEVEL}='LOUD' is not a logging level") == 1, r.stdout
    assert r.stdout.count(f"{log.ENV_LEVEL}='LOUDER' is not a logging level") == 1, r.stdout


def test_a_misspelt_variable_is_one_line_naming_the_variable_it_meant_once_per_run():
    """``ROBO_LOADERS_CACHE_SIZ`` set: one warning naming ``ROBO_LOADERS_CACHE_SIZE``, and a process started after it
    (a DataLoader worker) stays quiet; control: the variables every part of the repository reads raise nothing."""
    code = "from robo_loaders_plugin.core.log import get_logger; get_logger('x')"
    script = f"import subprocess, sys\n{code}\nsubprocess.run([sys.executable, '-c', {code!r}], check=True)\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROBO_LOADERS_", "_ROBO_LOADERS_"))}
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
    known = dict.fromkeys(log.KNOWN_VARIABLES, "")
    known.update(ROBO_LOADERS_LOG_LEVEL="INFO", ROBO_LOADERS_LOCK_TIMEOUT="60", ROBO_LOADERS_CACHE_SIZE="5GB")
    r = subprocess.run(
        [sys.executable, "-c", script], env={**env, **known}, capture_output=True, text=True, timeout=120, check=True
    )
    assert r.stdout == "" and r.stderr == "", (r.stdout, r.stderr)
    r = subprocess.run(
        [sys.executable, "-c", script],
        env={**env, "ROBO_LOADERS_CACHE_SIZ": "5GB"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert r.stdout.count("ROBO_LOADERS_CACHE_SIZ is set but robo-loaders reads no such variable") == 1, r.stdout
    assert "did you mean ROBO_LOADERS_CACHE_SIZE?" in r.stdout and r.stdout.startswith("[robo-loaders] warning: ")


def test_every_variable_the_repository_reads_is_known():
    """``core.log.KNOWN_VARIABLES`` lists every ``ROBO_LOADERS_*`` name in the package, the benchmarks, the tests and
    the docs, so that none of them is warned about as unknown; control: a name missing from the list is caught."""
    import re

    found = set()
    for where in ("robo_loaders_plugin", "benchmarks", "tests", "integration_tests", "docs", "examples"):
        for folder, _, files in os.walk(os.path.join(ROOT, where)):
            for name in files:
                if name.endswith((".py", ".md", ".sh")):
                    with open(os.path.join(folder, name), errors="replace") as f:
                        found |= set(re.findall(r"(?<![A-Z_])ROBO_LOADERS_[A-Z0-9_]*[A-Z0-9]", f.read()))
    found -= {"ROBO_LOADERS_CACHE_SIZ", "ROBO_LOADERS_RAM_DIRS"}  # the misspellings these tests set
    assert found <= set(log.KNOWN_VARIABLES), sorted(found - set(log.KNOWN_VARIABLES))
    assert log.unknown_variables(dict.fromkeys(found, "1")) == []
    assert log.unknown_variables({"ROBO_LOADERS_RAM_DIRS": "/x"}) != []  # control


def test_a_configured_root_logger_does_not_print_the_lines_twice():
    r = run(setup="logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format='ROOT %(message)s')")
    assert r.stdout.count("no terminal to answer") == 1 and "ROOT" not in r.stdout, r.stdout
    assert r.stdout.count(WARN) == 1


def test_a_logger_the_user_configured_first_keeps_their_handler_and_propagation():
    setup = (
        "h = logging.StreamHandler(sys.stdout); h.setFormatter(logging.Formatter('MINE %(levelname)s "
        "%(message)s'))\nlogging.getLogger('robo_loaders').addHandler(h)"
    )
    r = run(setup=setup)
    assert "MINE INFO no terminal to answer: " in r.stdout and "MINE WARNING warning: a warning" in r.stdout
    assert "[robo-loaders]" not in r.stdout, r.stdout  # no default handler beside theirs


# Where a runtime module may still write to stdout/stderr itself: the command's own output and errors.
ALLOWED = {
    "cli.py": "the robo-loaders command's output",
    "bench/": "robo-loaders bench/report: progress and tables printed to the user",
    "tools/transcode.py:transcode_cmd": "robo-loaders transcode's output",
    "core/option_docs.py:main": "the docs generator's command line (python -m ...)",
    "core/errors.py:exit_with_one_line": "a training command line's last line, error: ... on stderr",
    "core/errors.py:install_one_line_excepthook.hook": "the same, from the excepthook",
    "lerobot/integration.py:check_command_line": "lerobot-train's bad --dataset.backend_kwargs, error: ... on stderr",
    "robomimic/train_cli.py:run_robomimic_train": "robo-loaders robomimic-train's exit line on stderr",
    "robomimic/compat.py:keep_existing_runs.answer_no": "robomimic's own question, shown as input() shows it",
    "_autopatch/__init__.py:_run_patch": "the start-up import hook (every interpreter start) says on stderr that a "
    "patch failed, with nothing of the package loaded",
}


def writes_to_the_terminal(tree: ast.AST):
    """``(function qualname, line)`` of each ``print`` (called or passed as a value), ``sys.stdout/stderr.write``
    and ``click.echo/secho`` in a module."""
    found = []

    def walk(node, scope):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                walk(child, scope + [child.name])
                continue
            if isinstance(child, ast.Name) and child.id == "print":
                found.append((".".join(scope), child.lineno))
            elif isinstance(child, ast.Attribute):
                text = ast.unparse(child)
                if text in ("sys.stdout.write", "sys.stderr.write", "click.echo", "click.secho"):
                    found.append((".".join(scope), child.lineno))
            walk(child, scope)

    walk(tree, [])
    return found


def test_no_print_in_runtime_code_but_the_command_lines_output():
    """Every line a backend, a source, the storage or an adapter says goes through the logger (quieted with it);
    only the command-line output listed in ALLOWED writes to the terminal itself. Each entry is still needed."""
    used, offending = set(), []
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, PACKAGE).replace(os.sep, "/")
            with open(path) as f:
                tree = ast.parse(f.read(), path)
            for scope, line in writes_to_the_terminal(tree):
                keys = [k for k in ALLOWED if (rel.startswith(k) and k.endswith("/")) or k in (rel, f"{rel}:{scope}")]
                if keys:
                    used.update(keys)
                else:
                    offending.append(f"{rel}:{line} ({scope or 'module'})")
    assert not offending, f"write through robo_loaders_plugin.core.log.get_logger(__name__) instead: {offending}"
    assert used == set(ALLOWED), f"no longer needed: {set(ALLOWED) - used}"


def test_the_scan_finds_a_print_a_default_print_and_a_stream_write():
    """Negative control for the scan above."""
    tree = ast.parse(
        "import sys\ndef f(log=print):\n    print('x')\n    sys.stderr.write('y')\n"
        "class C:\n    def g(self):\n        click.echo('z')\n"
    )
    assert writes_to_the_terminal(tree) == [("f", 2), ("f", 3), ("f", 4), ("C.g", 7)]
