"""The help of every ``robo-loaders`` command, taken from its docstring's text before the first section.

Why: a command's docstring serves two readers. ``--help`` shows its first part to the user; its ``Args:`` (each
option as the command line gives it), ``Raises:`` and ``Note:`` sections are for readers of the code. Click's own
way to keep them apart is a ``\\f`` line in every docstring, which each command then explained again in a line of its
own; here one command class cuts the help where the sections begin, for the commands of ``cli.py`` (their groups'
``command_class``) and for those defined in other modules and loaded when they run (``cls=Command``).
"""

from __future__ import annotations

import inspect
import re

import click

# a Google-style section header on a line of its own: where the text for readers of the code begins
SECTION = re.compile(r"^(Args|Arguments|Returns|Raises|Yields|Note|Notes|Example|Examples):\s*$", re.M)


def user_help(doc: str | None) -> str | None:
    """The part of a command's docstring that ``--help`` shows: the text before its first section.

    Args:
        doc: The docstring (``None``: no help).

    Returns:
        The text, dedented and without trailing blank lines (``None`` for ``None``).
    """
    if doc is None:
        return None
    text = inspect.cleandoc(doc)
    found = SECTION.search(text)
    return (text[: found.start()] if found else text).rstrip()


class Command(click.Command):
    """A click command whose help is :func:`user_help` of the ``help`` it is given (its callback's docstring, for a
    command declared with a decorator, which passes it by keyword).

    Args:
        *args: click.Command's positional arguments (its name first).
        **kwargs: click.Command's keyword arguments, ``help`` among them.
    """

    def __init__(self, *args, **kwargs):
        kwargs["help"] = user_help(kwargs.get("help"))
        super().__init__(*args, **kwargs)
