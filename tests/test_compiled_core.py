"""The compiled core runs exactly when it is expected to, every module that should be compiled
is, and a stale build never shadows the sources.

`.ci/run` runs the suite twice: pure Python, then with the core compiled by mypyc
(`GPUWARDEN_EXPECT_COMPILED=1`). Everything else in the suite holds in both modes; the golden
outputs are the same bytes in both.
"""

from __future__ import annotations

import importlib
import tomllib

from engine.core.compiled import compiled_modules, core_is_compiled
from tests.conftest import EXPECT_COMPILED, REPO


def _meant_to_compile() -> set[str]:
    """The core modules the wheel's mypyc hook compiles (pyproject.toml)."""
    hook = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))[
        "tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"]["mypyc"]
    assert hook["include"] == ["/engine/core"]
    excluded = {entry for entry in hook["exclude"] if entry.startswith("/")}
    modules = set()
    for path in (REPO / "engine" / "core").rglob("*.py"):
        relative = "/" + path.relative_to(REPO).as_posix()
        if path.name != "__init__.py" and relative not in excluded:
            modules.add(relative[1:-3].replace("/", "."))
    return modules


def test_the_core_runs_compiled_exactly_when_expected() -> None:
    assert core_is_compiled() is EXPECT_COMPILED, (
        "compiled modules shadow the sources: a stale build? delete engine/**/*.so and "
        "*__mypyc*.so, or set GPUWARDEN_EXPECT_COMPILED=1" if core_is_compiled() else
        "the core was expected compiled (GPUWARDEN_EXPECT_COMPILED=1) but runs pure Python")


def test_every_module_meant_to_compile_is_compiled_or_none_is() -> None:
    meant = _meant_to_compile()
    assert "engine.core.evaluate" in meant and "engine.core.model" not in meant
    for name in sorted(meant):
        importlib.import_module(name)
    assert set(compiled_modules()) == (meant if EXPECT_COMPILED else set())
