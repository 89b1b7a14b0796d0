"""What the built-in backends import beyond the base install, each with the extra that installs it, and the
frameworks tuples their options name (``Option.frameworks``).
"""

from __future__ import annotations

ROBOMIMIC, LEROBOT = ("robomimic",), ("lerobot",)


def _extra(name: str) -> str:
    # double quotes: the same command works in bash, zsh (where [...] unquoted is a glob) and Windows' cmd; several
    # missing at once are merged into one command (core.installs.install_command)
    return f'pip install "robo-loaders-plugin[{name}]"'


# what each backend imports beyond the base install, and the extra that installs it
TORCHDATA = ("torchdata", _extra("datapipe"))
TORCHCODEC = ("torchcodec", _extra("video"))
PYAV = ("av", _extra("video"))
# what `robo-loaders sample-data lerobot` writes with (LeRobot's own writer)
LEROBOT_PACKAGE = ("lerobot", _extra("lerobot"))
