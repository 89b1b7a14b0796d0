"""The README and docs stay true to the committed results and to the repository.

Why: every figure in README.md and docs/benchmarks.md is generated from ``benchmarks/results/*.json`` between
``robo-loaders:table`` markers (``benchmarks/harness/readme_tables.py``); a result re-run without regenerating the
tables, or a table edited by hand, would make the documents claim numbers no committed file holds. Docs also move and
get renamed, so every relative link must still lead to a file (and the README's own anchors to a heading). The README
is the front door: it stays short, with the rest in docs/.
"""

import glob
import os
import re
import shutil

import pytest

from benchmarks.harness import readme_tables

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
DOCS = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
README_MAX_CHARS = 13_000  # a limit with room (the README is ~12.5k): past it, move detail to docs/

LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every markdown link outside code blocks and inline code."""
    out, fence = [], None
    for n, line in enumerate(text.splitlines(), 1):
        f = FENCE.match(line)
        if f:
            fence = None if fence == f.group(1) else (fence or f.group(1))
            continue
        if fence:
            continue
        out += [(n, m.group(1)) for m in LINK.finditer(INLINE_CODE.sub("", line))]
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (but - and _), spaces to -."""
    text = INLINE_CODE.sub(lambda m: m.group(0)[1:-1], heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: str) -> set[str]:
    with open(path) as f:
        text = f.read()
    out, fence = set(), None
    for line in text.splitlines():
        f = FENCE.match(line)
        if f:
            fence = None if fence == f.group(1) else (fence or f.group(1))
        elif not fence and line.startswith("#"):
            out.add(slug(line.lstrip("#")))
    return out


def broken_links(path: str, check_anchors: bool = False) -> list[str]:
    """Relative links of ``path`` that lead nowhere (with ``check_anchors``, also ``#anchors`` without a heading)."""
    with open(path) as f:
        text = f.read()
    bad = []
    for n, target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:, ...
            continue
        file_part, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        where = f"{os.path.relpath(path, ROOT)}:{n}: {target}"
        if not os.path.exists(dest):
            bad.append(f"{where} (no such file {os.path.relpath(dest, ROOT)})")
        elif check_anchors and anchor and dest.endswith(".md") and anchor not in anchors(dest):
            bad.append(f"{where} (no heading #{anchor} in {os.path.relpath(dest, ROOT)})")
    return bad


@pytest.mark.parametrize("doc", ["README.md", "docs/benchmarks.md"])
def test_generated_tables_are_up_to_date(doc):
    stale = readme_tables.update_readme(os.path.join(ROOT, doc), check=True)
    assert not stale, (
        f"{doc}: tables out of date with benchmarks/results: {stale}; run: python -m benchmarks.harness readme {doc}"
    )


def test_readme_has_generated_tables_from_both_frameworks():
    with open(README) as f:
        specs = [m.group("spec") for m in map(readme_tables.OPEN.match, f.read().splitlines()) if m]
    assert any(s.startswith("robomimic_") for s in specs), specs
    assert any(s.startswith("lerobot_") for s in specs), specs


def test_a_stale_table_is_detected(tmp_path):
    """Negative control: a number edited by hand in a generated table makes the check fail."""
    shutil.copytree(os.path.join(ROOT, "benchmarks", "results"), tmp_path / "benchmarks" / "results")
    with open(README) as f:
        text = f.read()
    block = re.search(r"<!-- robo-loaders:table robomimic_lift_w2.*?<!-- /robo-loaders:table -->", text, re.S)
    assert block and "| `datapipe` | " in block.group(0)
    edited = block.group(0).replace("| `datapipe` | ", "| `datapipe` | 1", 1)
    (tmp_path / "README.md").write_text(text.replace(block.group(0), edited))
    assert readme_tables.update_readme(str(tmp_path / "README.md"), check=True)


def test_readme_is_short():
    with open(README) as f:
        size = len(f.read())
    assert size <= README_MAX_CHARS, (
        f"README.md has {size} characters (at most {README_MAX_CHARS}): move detail to docs/"
    )


def test_readme_links_and_anchors_lead_somewhere():
    assert not broken_links(README, check_anchors=True)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: os.path.relpath(p, ROOT))
def test_docs_links_lead_to_files(doc):
    assert not broken_links(doc)


def test_link_check_can_fail(tmp_path):
    """Negative control: a missing file, a missing anchor are found; code, URLs and real files are not flagged."""
    (tmp_path / "there.md").write_text("# A heading\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok](there.md#a-heading) [url](https://example.com/x.md)\n"
        "`[code](nowhere.md)`\n```\n[fenced](nowhere.md)\n```\n"
        "[gone](missing.md) [bad anchor](there.md#nope) [self](#a-heading)\n"
    )
    bad = broken_links(str(page), check_anchors=True)
    assert len(bad) == 3, bad
    assert "missing.md" in bad[0] and "#nope" in bad[1] and "#a-heading" in bad[2]


def test_slug_matches_github_anchors():
    assert slug(" Which backend should I use?") == "which-backend-should-i-use"
    assert slug(" Quickstart: LeRobot") == "quickstart-lerobot"
    assert slug(" `compressed_cache`") == "compressed_cache"


def contents_problems(text: str) -> list[str]:
    """Sections (``## `` headings) the README's contents line does not link, and contents links to no section."""
    line = next((ln for ln in text.split("\n\n") if ln.startswith("**Contents:**")), "")
    linked = {m.group(1) for m in re.finditer(r"\]\(#([^)]+)\)", line)}
    sections = {slug(h[3:]) for h in text.splitlines() if h.startswith("## ")}
    return [f"not in the contents: #{s}" for s in sorted(sections - linked)] + [
        f"contents link to no section: #{s}" for s in sorted(linked - sections)
    ]


def test_readme_contents_link_every_section():
    with open(README) as f:
        assert contents_problems(f.read()) == []


def test_contents_check_can_fail():
    """Negative control: a section left out of the contents, and a contents link to no section, are found."""
    text = "# T\n\n**Contents:** [a](#a) · [gone](#gone)\n\n## A\n\n## B\n"
    assert contents_problems(text) == ["not in the contents: #b", "contents link to no section: #gone"]
