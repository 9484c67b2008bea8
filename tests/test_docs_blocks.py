"""Finding the fenced code blocks of the user documentation (docs/*.md and README.md).

Sybil lexes the Markdown (fences of any length, indented fences inside list items); each block
becomes a `Block` with the words of its info string:

    ```LANG [TAG ...] [KEY=VALUE ...]

The tags and attributes the test suite reads:

- ```yaml policy name=FILE, ```yaml condition, ```json report, ```hcl name=FILE: examples the
  content tests load (tests/test_docs_examples.py); a named block is written to the scratch
  directory where the shell examples run;
- ```sh / ```console: shell examples, run by tests/test_docs_shell.py unless marked
  `needs=WHAT[,WHAT]` (credentials, a cluster, the network: see NEEDS there);
- ```python: run here by Sybil's own Python parser, `>>>` lines as doctests (output checked).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest
from sybil import Document, Region, Sybil
from sybil.parsers.markdown import PythonCodeBlockParser
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

from tests.conftest import REPO

DOCS = REPO / "docs"
README = "../README.md"  # pages are named relative to docs/
# The whole info string; Sybil's FencedCodeBlockLexer would keep only a language.
INFO_LINE = re.compile(r"(?P<info>[^\n]*)$\n", re.M)


@dataclass(frozen=True)
class Block:
    """One fenced code block: its language, tags and `key=value` attributes from the info
    string, and its text."""

    doc: str
    line: int
    lang: str
    tags: frozenset[str]
    attrs: tuple[tuple[str, str], ...]
    body: str

    @property
    def name(self) -> str | None:
        return dict(self.attrs).get("name")

    @property
    def needs(self) -> tuple[str, ...]:
        """What running the block needs that a test cannot have (`needs=aws,k8s`)."""
        value = dict(self.attrs).get("needs", "")
        return tuple(word for word in value.split(",") if word)

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}"


def block_from_info(doc: str, line: int, info: str, body: str) -> Block:
    words = info.split()
    lang = words[0] if words else ""
    pairs = (word.partition("=") for word in words[1:] if "=" in word)
    attrs = tuple((key, value) for key, _, value in pairs)
    tags = frozenset(w for w in words[1:] if "=" not in w)
    return Block(doc, line, lang, tags, attrs, body)


class FencedBlockParser:
    """A Sybil parser: one region per fenced block, parsed into a `Block`. Regions carry no
    evaluator: the tests evaluate blocks themselves, with their pytest fixtures."""

    def __init__(self, doc: str) -> None:
        self.doc = doc
        self.lexer = RawFencedCodeBlockLexer(info_pattern=INFO_LINE)

    def __call__(self, document: Document) -> Iterable[Region]:
        for region in self.lexer(document):
            line = document.text.count("\n", 0, region.start) + 1
            region.parsed = block_from_info(self.doc, line, region.lexemes["info"],
                                            str(region.lexemes["source"]))
            yield region


def fenced_blocks(doc: str) -> list[Block]:
    """The blocks of one page (`getting-started.md`, or README as `../README.md`)."""
    path = (DOCS / doc).resolve()
    sybil = Sybil(parsers=[FencedBlockParser(doc)], path=str(path.parent))
    blocks = [example.parsed for example in sybil.parse(path)]
    assert all(isinstance(block, Block) for block in blocks)
    return blocks


def all_docs() -> list[str]:
    return sorted(p.name for p in DOCS.glob("*.md"))


def all_pages() -> list[str]:
    """Every page whose examples must work: docs/*.md and the README."""
    return [*all_docs(), README]


def page_path(doc: str) -> Path:
    return (DOCS / doc).resolve()


def blocks_tagged(lang: str, tag: str, docs: Iterable[str]) -> list[Block]:
    return [b for d in docs for b in fenced_blocks(d) if b.lang == lang and tag in b.tags]


# ---------------------------------------------------------------------------- Python examples


def python_pages() -> list[str]:
    return [doc for doc in all_pages() if any(b.lang == "python" for b in fenced_blocks(doc))]


@pytest.mark.parametrize("doc", python_pages())
def test_python_examples_run_and_print_what_the_page_shows(doc: str) -> None:
    path = page_path(doc)
    examples = list(Sybil(parsers=[PythonCodeBlockParser()], path=str(path.parent)).parse(path))
    assert examples
    for example in examples:
        example.evaluate()


# ---------------------------------------------------------------------------- tests of the parser


def test_info_strings_give_language_tags_and_attributes(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Intro\n\n"
        "```yaml policy name=a.yaml\nk: v\n```\n\n"
        "1. a step:\n\n   ```sh needs=aws,k8s\n   gpuwarden scan --source aws\n   ```\n\n"
        "````console\n$ gpuwarden policies list\n```\nnot a fence end\n````\n",
        "utf-8",
    )
    sybil = Sybil(parsers=[FencedBlockParser("page.md")], path=str(tmp_path))
    blocks = [example.parsed for example in sybil.parse(page)]
    assert [(b.lang, b.line, b.name, b.needs, sorted(b.tags)) for b in blocks] == [
        ("yaml", 3, "a.yaml", (), ["policy"]),
        ("sh", 9, None, ("aws", "k8s"), []),
        ("console", 13, None, (), []),
    ]
    assert blocks[1].body == "gpuwarden scan --source aws\n"  # the list indent is stripped
    assert blocks[2].body.splitlines()[1:] == ["```", "not a fence end"]


def test_every_page_parses_and_holds_blocks() -> None:
    for doc in all_pages():
        assert fenced_blocks(doc), doc
