"""A fresh clone stands on its own: no project file reads outside the repository.

The reference inputs the tests use are copied into `tests/data/reference/` with their licenses and
sources; nothing may point back at the folder they were copied from, or at a machine's own
absolute paths (a home directory, a build machine's workspace).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REFERENCE, REPO

# Folders that are not part of the project: tool caches, installed tools, virtual environments.
NOT_PROJECT = {".git", ".tools", ".ruff_cache", ".mypy_cache", ".pytest_cache", ".hypothesis",
               "__pycache__", "node_modules", ".venv", "venv", "build", "dist"}
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".json", ".sh", ".tf", ".txt", ".cfg",
                 ".ini", ".j2", ".html", ".rego", ".csv", ""}
THIRD_PARTY = REPO / "tests" / "data"
BENCH_OUTPUT = REPO / "bench" / "out"  # what benchmarks write (git-ignored: venvs, plans)
SHARED = "../" + "shared"  # spelled in two parts so this file does not match itself
# Machine paths that only exist on the machine a file was written on.
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|root|home/[\w.-]+|Users/[\w.-]+)/")


def project_files() -> Iterator[Path]:
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in NOT_PROJECT and not d.endswith(".egg-info")
                   and Path(root) / d != BENCH_OUTPUT]
        for name in files:
            path = Path(root) / name
            if path.suffix in TEXT_SUFFIXES or name in {"run", "Dockerfile"}:
                yield path


def offending_lines(pattern: re.Pattern[str] | str, *, skip: Path | None = None) -> list[str]:
    found = []
    for path in project_files():
        if skip is not None and path.is_relative_to(skip):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            hit = pattern.search(line) if isinstance(pattern, re.Pattern) else pattern in line
            if hit:
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:120]}")
    return found


def test_the_walk_sees_the_project() -> None:
    names = {p.relative_to(REPO).as_posix() for p in project_files()}
    assert {"README.md", "pyproject.toml", ".ci/run", "engine/cli.py", "tests/conftest.py"} <= names


# The same folder reached by path arithmetic from the checkout (its parent joined with it).
SHARED_JOIN = re.compile(r"""parents?\b[^#\n]*/\s*["']""" + "shared" + r"""["']""")


def test_no_project_file_names_the_shared_folder() -> None:
    assert offending_lines(SHARED) == []
    assert offending_lines("shared" + "/reference") == []
    assert offending_lines(SHARED_JOIN) == []


def test_no_project_file_names_a_machine_path() -> None:
    # Third-party data keeps its bytes exactly (a public plan names an SSH key path, a public
    # manifest mounts a home folder): everything under tests/data has a SOURCES.md.
    assert offending_lines(MACHINE_PATH, skip=THIRD_PARTY) == []
    parent = str(REPO.parent) + os.sep
    assert offending_lines(parent, skip=THIRD_PARTY) == []


def test_the_guard_catches_what_it_is_for() -> None:
    folder = '"' + "shared" + '"'
    assert SHARED_JOIN.search(f"ADMISSION = REPO.parent / {folder} / 'reference'")
    assert SHARED_JOIN.search(f"Path(__file__).parents[2] / {folder}")
    assert not SHARED_JOIN.search('REPO / "tests" / "data"')
    home, work = "/" + "home/alice/", "/" + "work/"
    assert MACHINE_PATH.search(f"open('{work}shared/x')")
    assert MACHINE_PATH.search(f"see {home}plan.json")
    assert not MACHINE_PATH.search("gpuwarden scan -o /tmp/x.json ~/src/a ./home/b")


def test_every_reference_file_has_a_source_and_a_license() -> None:
    sources = (REFERENCE / "SOURCES.md").read_text(encoding="utf-8")
    licenses = {p.name for p in (REFERENCE / "LICENSES").iterdir()}
    for path in REFERENCE.rglob("*"):
        if path.is_file() and path.parent.name not in {"LICENSES"} and path.name != "SOURCES.md":
            relative = path.relative_to(REFERENCE).as_posix()
            assert f"`{relative}`" in sources, f"{relative} is not in SOURCES.md"
    for row in re.findall(r"`LICENSES/([^`]+)`", sources):
        assert row in licenses
