"""The README and docs stay true to the committed results and to the repository.

Why: every measured table in README.md and docs/ is generated from ``benchmarks/results/*.json`` between
``robo-loaders:table`` markers (``benchmarks/harness/readme_tables.py``); a result re-run without regenerating the
tables, or a table edited by hand, would make the documents claim numbers no committed file holds. Docs also move and
get renamed, so every relative link must still lead to a file (and the README's own anchors to a heading), and every
test a document names as its evidence (``file.py::test_name``) must still exist. The README is the front door: it
stays short, with the rest in docs/.
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


def _with_tables() -> list[str]:
    """Every document holding a generated table (README.md and docs/*.md): listed by hand, two of four were never
    checked (docs/scale.md, docs/training-benchmark.md; a reviewer's reproduction)."""
    out = []
    for path in [README, *DOCS]:
        with open(path) as f:
            if "<!-- robo-loaders:table " in f.read():
                out.append(os.path.relpath(path, ROOT))
    return out


def test_every_document_with_tables_is_checked():
    docs = _with_tables()
    assert {"README.md", "docs/benchmarks.md", "docs/scale.md", "docs/training-benchmark.md"} <= set(docs), docs


@pytest.mark.parametrize("doc", _with_tables())
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


TEST_REF = re.compile(r"((?:[\w.-]+/)*[\w.-]+\.py|)::(test\w*)")


def named_tests(text: str) -> list[tuple[int, str, str]]:
    """(line, file, test) of every ``file.py::test_name`` a document names; ``::test_name`` alone (or after ``..``)
    is in the file named last before it; a bare file name is looked up in the test folders."""
    out, last = [], None
    for n, line in enumerate(text.splitlines(), 1):
        for m in TEST_REF.finditer(line):
            path, name = m.groups()
            if path:
                found = [
                    p for d in ("", "tests", "integration_tests", "benchmarks/tests") for p in [os.path.join(d, path)]
                ]
                path = next((p for p in found if os.path.exists(os.path.join(ROOT, p))), path)
                last = path
            out.append((n, path or last, name))
    return out


def missing_tests(path: str) -> list[str]:
    """The tests ``path`` names that do not exist (no such file, or no ``def``/``class`` of that name in it)."""
    with open(path) as f:
        refs = named_tests(f.read())
    bad, sources = [], {}
    for n, file, name in refs:
        where = f"{os.path.relpath(path, ROOT)}:{n}: {file}::{name}"
        full = os.path.join(ROOT, file) if file else None
        if full is None or not os.path.exists(full):
            bad.append(f"{where} (no such file)")
            continue
        if full not in sources:
            with open(full) as f:
                sources[full] = f.read()
        if not re.search(rf"\b(def|class) {re.escape(name)}\b", sources[full]):
            bad.append(f"{where} (no such test)")
    return bad


def test_every_test_the_docs_name_exists():
    """A row of docs/reliability.md named a test renamed when the behaviour changed (a reviewer's reproduction):
    the row kept describing the old behaviour."""
    bad = [b for path in [README, *DOCS] for b in missing_tests(path)]
    assert not bad, "documents name tests that do not exist (update the text and the name):\n" + "\n".join(bad)


def test_a_renamed_test_is_detected(tmp_path):
    """Negative control: a document naming a test that no file holds fails the check; an existing one passes."""
    doc = tmp_path / "doc.md"
    doc.write_text("see `tests/test_readme.py::test_readme_is_short`, `::test_no_such_thing`\n")
    assert missing_tests(str(doc)) == [
        f"{os.path.relpath(str(doc), ROOT)}:1: tests/test_readme.py::test_no_such_thing (no such test)"
    ]


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
