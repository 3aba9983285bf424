"""The README, docs/ and the examples' pages stay true to the repository: every relative link resolves, every shell block says
whether a test runs it, and the README stays a front page.

Shell blocks (```sh, ```bash, ```shell, ```console) carry a marker on the line before the fence (blank
lines allowed between), read by testkit/doc_blocks.py:

- `<!-- not run: REASON -->`: shown, not executed; the reason is required.
- `<!-- run: tests/test_x.py -->`: tests/test_x.py extracts and runs the block; it must exist and name the
  doc's path, so that the doc and its test cannot drift apart.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testkit.doc_blocks import ROOT, fenced_blocks, shell_blocks

README = ROOT / "README.md"
README_MAX_LINES = 250
DOCS = [README, *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "examples").rglob("*.md"))]
# The front pages (README.md, docs/*.md) are user documentation, not a development log.
BANNED = ("this session", "an earlier session", "timed by hand", "by hand (", "issue #")
FRONT_PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
_EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//)", re.IGNORECASE)


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _prose_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of the lines outside fenced blocks, inline code spans blanked."""
    inside: set[int] = set()
    lines = path.read_text(encoding="utf-8").splitlines()
    for block in fenced_blocks(path):
        n_body = block.text.count("\n")
        inside.update(range(block.line, block.line + n_body + 2))  # the fences and the body, 1-based
    return [(n, _CODE_SPAN.sub("", text)) for n, text in enumerate(lines, 1) if n not in inside]


def _links(path: Path) -> list[tuple[int, str]]:
    found = []
    for n, text in _prose_lines(path):
        targets = [m[1] for m in _LINK.finditer(text)]
        ref = _REF_DEF.match(text)
        if ref:
            targets.append(ref[1])
        found += [(n, t) for t in targets]
    return found


@pytest.mark.parametrize("doc", DOCS, ids=_rel)
def test_relative_links_resolve(doc: Path) -> None:
    broken = []
    for n, target in _links(doc):
        if _EXTERNAL.match(target) or target.startswith("#"):
            continue  # a web address, or an anchor in this file
        file_part = target.split("#", 1)[0].split("?", 1)[0]
        resolved = (ROOT / file_part.lstrip("/")) if file_part.startswith("/") else (doc.parent / file_part)
        if not resolved.exists():
            broken.append(f"{_rel(doc)}:{n}: link to {target!r}: {_rel_or_abs(resolved)} does not exist")
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("doc", DOCS, ids=_rel)
def test_shell_blocks_are_marked(doc: Path) -> None:
    problems = []
    for block in shell_blocks(doc):
        where = f"{_rel(doc)}:{block.line}"
        if block.marker_kind is None:
            problems.append(
                f"{where}: ```{block.lang} block without a marker on the line before it: add "
                "<!-- not run: REASON --> or <!-- run: tests/test_....py -->"
            )
        elif block.marker_kind == "not run" and not block.marker_arg:
            problems.append(f"{where}: <!-- not run: --> needs a reason")
        elif block.marker_kind == "run":
            problems.extend(_check_run_marker(doc, block.marker_arg or "", where))
    assert not problems, "\n".join(problems)


def _check_run_marker(doc: Path, arg: str, where: str) -> list[str]:
    if not arg:
        return [f"{where}: <!-- run: --> needs the test file that runs the block"]
    test_file = ROOT / arg
    if not (arg.startswith("tests/") and arg.endswith(".py") and test_file.is_file()):
        return [f"{where}: <!-- run: {arg} -->: no such test file (give a path like tests/test_x.py)"]
    if _rel(doc) not in test_file.read_text(encoding="utf-8"):
        return [
            f"{where}: <!-- run: {arg} -->: {arg} does not mention {_rel(doc)}, so it cannot be running it"
        ]
    return []


def test_readme_is_a_front_page() -> None:
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, (
        f"README.md:{n}: {n} lines, over {README_MAX_LINES}: move the detail into a page of docs/ and link it"
    )


@pytest.mark.parametrize("doc", FRONT_PAGES, ids=_rel)
def test_no_development_log(doc: Path) -> None:
    found = [
        f"{_rel(doc)}:{n}: {phrase!r}: say what the software does, and link the benchmark that measured it"
        for n, text in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1)
        for phrase in BANNED
        if phrase in text.lower()
    ]
    assert not found, "\n".join(found)


def _rel_or_abs(path: Path) -> str:
    try:
        return _rel(path.resolve())
    except ValueError:
        return str(path)


def test_every_run_the_docs_use_is_made_by_a_command_in_them() -> None:
    """A page that exports `runs/pd-td3` needs a page whose `train ... --out runs/pd-td3` makes it (issue 52:
    docs/export.md used it in four commands and no page made it)."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in DOCS)
    used = set(re.findall(r"\bruns/[A-Za-z0-9_.-]*[A-Za-z0-9_]", text))
    made = set(re.findall(r"rl2edge (?:train|tune)\b[^\n]*?--out (runs/[A-Za-z0-9_.-]*[A-Za-z0-9_])", text))
    assert used and not used - made, f"runs the docs use but never make: {sorted(used - made)}"
