"""The Python examples of README.md, CONTRIBUTING.md and docs/**/*.md, as
files to run (tests/unit/test_docs.py checks how they are marked,
tests/world/test_docs.py runs them).

Every ```python block is preceded (blank lines aside) by one marker that
says what it is:

- ``<!-- test: test_NAME.py -->``: (part of) a pytest file; every test in it
  must pass. Blocks of one document that name the same file are joined, in
  order, so a later block can use what an earlier one defined.
- ``<!-- module: NAME.py -->``: a module the other examples import.
- ``<!-- script: NAME.py -->``: run as ``python NAME.py``; it must exit 0.
- ``<!-- fragment: REASON -->``: not run, for the reason given (which is
  required): say why it cannot be complete as printed.

All the files go into one folder: a name is one document's only. The
markers are HTML comments, which neither GitHub nor the built site shows.
"""

from __future__ import annotations

import pathlib
import re
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parent.parent
KINDS = ("test", "module", "script", "fragment")

_FENCE = re.compile(r"^\s*```")
_PYTHON = re.compile(r"^\s*```(?:python|py)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*(?P<kind>[a-z]+):\s*(?P<what>.*?)\s*-->\s*$")
_FILE = re.compile(r"^[a-z_][a-z0-9_]*\.py$")


@dataclass(frozen=True)
class Block:
    """One ```python block: where it is, how it is marked, its code."""

    document: str  # relative to the repository
    line: int  # of its opening fence, 1-based
    kind: str
    what: str  # the file name, or a fragment's reason
    code: str

    @property
    def where(self) -> str:
        return f"{self.document}:{self.line}"


def documents() -> list[pathlib.Path]:
    """README.md, CONTRIBUTING.md and every Markdown file under docs/."""
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(path: pathlib.Path) -> tuple[list[Block], list[str]]:
    """The ```python blocks of one document, and what is wrong with their markers."""
    document = path.relative_to(ROOT).as_posix()
    lines = path.read_text().splitlines()
    found: list[Block] = []
    problems: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if not _FENCE.match(line):
            index += 1
            continue
        end = next((i for i in range(index + 1, len(lines)) if _FENCE.match(lines[i])), len(lines))
        if _PYTHON.match(line):
            indent = len(line) - len(line.lstrip())
            code = "\n".join(text[indent:] for text in lines[index + 1:end]) + "\n"
            before = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
            marker = _MARKER.match(before)
            where = f"{document}:{index + 1}"
            if marker is None or marker["kind"] not in KINDS:
                problems.append(f"{where}: a python block without a marker before it "
                                f"(<!-- test|module|script: NAME.py --> or <!-- fragment: REASON -->)")
            elif marker["kind"] == "fragment" and not marker["what"]:
                problems.append(f"{where}: a fragment must say why it is not run")
            elif marker["kind"] != "fragment" and not _FILE.match(marker["what"]):
                problems.append(f"{where}: {marker['what']!r} is not a file name like name.py")
            elif marker["kind"] == "test" and not marker["what"].startswith("test_"):
                problems.append(f"{where}: a test file's name starts with test_, not {marker['what']!r}")
            else:
                found.append(Block(document, index + 1, marker["kind"], marker["what"], code))
        index = end + 1
    return found, problems


def files() -> tuple[dict[str, tuple[str, str]], list[str]]:
    """Every runnable example as ``{file name: (kind, code)}``, and every
    problem found in the documents (none when all is well)."""
    out: dict[str, tuple[str, str]] = {}
    owner: dict[str, str] = {}
    problems: list[str] = []
    for path in documents():
        found, wrong = blocks(path)
        problems += wrong
        for block in found:
            if block.kind == "fragment":
                continue
            if owner.setdefault(block.what, block.document) != block.document:
                problems.append(f"{block.where}: {block.what} is also a file of {owner[block.what]}; "
                                "name it differently")
                continue
            kind, code = out.get(block.what, (block.kind, ""))
            if kind != block.kind:
                problems.append(f"{block.where}: {block.what} is marked {block.kind} here, {kind} before")
                continue
            out[block.what] = (kind, code + ("\n\n" if code else "") + block.code)
    return out, problems
