"""Every ``robo-loaders`` command's ``--help`` is its docstring's text before the first section, by one shared
command class (``core.command_help.Command``): each of the 13 commands repeated a ``\\f`` line and "(click shows the
text above as the command's help; what follows is for readers of the code.)" to keep its ``Args:`` out of the help."""

import inspect
import os

import click
from click.testing import CliRunner

from robo_loaders_plugin.cli import main
from robo_loaders_plugin.core.command_help import Command, user_help

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = """Do the thing to OUT.

    Exits 1 when it fails.

    Args:
        out: OUT.

    Raises:
        click.ClickException: never.
    """


def commands(group: click.Group, ctx: click.Context, prefix=()) -> list[tuple[tuple[str, ...], click.Command]]:
    """Every command under ``group`` (those loaded lazily included), with its path of names."""
    out = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            out += commands(command, click.Context(command, parent=ctx, info_name=name), (*prefix, name))
        else:
            out.append(((*prefix, name), command))
    return out


def test_every_command_shows_its_docstring_up_to_the_sections():
    found = commands(main, click.Context(main, info_name="robo-loaders"))
    assert len(found) >= 13, [p for p, _ in found]  # the walk reaches every command, report and transcode too
    assert {("report",), ("transcode",), ("cache", "prune")} <= {p for p, _ in found}
    for path, command in found:
        assert isinstance(command, Command), path
        out = CliRunner().invoke(main, [*path, "--help"]).output
        text = out.split("\nOptions:")[0]
        assert len(text.splitlines()) > 2 and "Args:" not in text and "Raises:" not in text, (path, out)
        takes = bool(inspect.signature(command.callback).parameters)
        assert "Args:" in command.callback.__doc__ or not takes, path  # its parameters documented for the code
    for module in ("cli.py", "bench/plots.py", "tools/transcode.py"):
        with open(os.path.join(ROOT, "robo_loaders_plugin", module)) as f:
            assert "click shows the text above" not in f.read(), module


def test_a_plain_click_command_would_show_the_sections():
    """Negative control: with click's own class, the same docstring's ``Args:`` and ``Raises:`` reach ``--help``;
    with the shared class they do not, and the text before them (an exit status) does."""

    def run(out):
        pass

    run.__doc__ = DOC
    plain = CliRunner().invoke(click.command("thing")(click.argument("out")(run)), ["--help"]).output
    assert "Args:" in plain and "Raises:" in plain
    shared = CliRunner().invoke(click.command("thing", cls=Command)(click.argument("out")(run)), ["--help"]).output
    assert "Args:" not in shared and "Raises:" not in shared and "Exits 1 when it fails." in shared
    assert user_help(DOC) == "Do the thing to OUT.\n\nExits 1 when it fails."
    assert user_help("One line, no sections.") == "One line, no sections." and user_help(None) is None
    assert user_help("Text.\n\n    Note:\n        Why.\n") == "Text."
