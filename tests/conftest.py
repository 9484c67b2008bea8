"""Shared fixtures: the built-in engine, a resource factory, fixed instants, reference data."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from engine.core.catalog import builtin_catalog
from engine.core.enrich import enrich
from engine.core.evaluate import Engine
from engine.core.model import Resource
from engine.loading.policies import load_policies

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "tests" / "data" / "reference"  # copies of public inputs; see its SOURCES.md

# `.ci/run` runs the suite a second time with the core compiled by mypyc (docs/compiled-core.md).
EXPECT_COMPILED = os.environ.get("GPUWARDEN_EXPECT_COMPILED") == "1"
# A test of how a memo works inside the core (a core function patched to count its calls, a
# remembered answer compared by identity): compiled code calls its functions directly and boxes
# each answer anew. What the memo answers is tested in both modes.
pure_python_only = pytest.mark.skipif(
    EXPECT_COMPILED, reason="looks inside the core, which runs compiled here")

# Skips that only mean "a tool is not installed here": CI installs every one of them and sets
# GPUWARDEN_REQUIRE_TOOLS=1, so a broken install fails the run instead of skipping quietly.
REQUIRED_TOOL_SKIPS = ("install-sarif-tools.sh", "apt-get install prometheus",
                       "pip install hatchling", "opa-golib-python-bindings==0.4.4",
                       "apt-get install chromium", "pip install -e '.[report]'")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and os.environ.get("GPUWARDEN_REQUIRE_TOOLS")):
        return
    reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else ""
    if any(hint in reason for hint in REQUIRED_TOOL_SKIPS):
        report.outcome = "failed"
        report.longrepr = f"GPUWARDEN_REQUIRE_TOOLS is set, but: {reason}"


# Tuesday 2026-12-01: 03:00 UTC is off-hours, 12:00 UTC is business hours.
OFF_HOURS = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
BUSINESS_HOURS = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str],
            monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    """`gpuwarden ARGS` in this process: (exit code, stdout, stderr)."""
    from engine.cli import main

    capsys.readouterr()  # only this command's output
    monkeypatch.setattr(sys, "argv", ["gpuwarden", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    out, err = capsys.readouterr()
    code = exited.value.code
    return (code if isinstance(code, int) else 0), out, err


@pytest.fixture(scope="session")
def builtin_engine() -> Engine:
    return Engine(load_policies(["builtin"]))


@pytest.fixture
def make_resource() -> Callable[..., Resource]:
    def build(**fields: Any) -> Resource:
        defaults: dict[str, Any] = {
            "provider": "aws",
            "kind": "aws_instance",
            "category": "instance",
            "id": "i-0abc",
            "name": "trainer",
            "state": "running",
        }
        defaults.update(fields)
        return enrich(Resource.model_validate(defaults), builtin_catalog())

    return build
