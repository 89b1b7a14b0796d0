"""The README's quickstarts as the integration tests run them: the section under a heading, its first fenced code
block, a command in it as words (issue 42 item 15: the LeRobot quickstart could not be run as written)."""

import os
import re
import shlex

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def section(title: str, path: str = README) -> str:
    """The text under the ``## title`` heading, up to the next ``## `` heading."""
    with open(path) as f:
        text = f.read()
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, f"no '## {title}' section in {path}"
    return m.group(1)


def first_command(text: str) -> list[str]:
    """The first fenced ``bash`` block of ``text``, its continued lines joined, read as a shell reads it (quotes
    removed, ``#`` comments dropped): its words."""
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block, "no bash block"
    return shlex.split(re.sub(r"\\\n", " ", block.group(1)), comments=True)


def linked_files(text: str, pattern: str) -> list[str]:
    """The targets of the markdown links in ``text`` matching ``pattern``, as paths from the repository root."""
    root = os.path.dirname(README)
    return [os.path.join(root, t) for t in re.findall(r"\]\(([^)\s]+)\)", text) if re.fullmatch(pattern, t)]
