"""The cyclic garbage collector around batch evaluations (`engine.pipeline.collector_paused`).

The pause rests on one fact: evaluating makes no reference cycles, so there is nothing for the
collector to find. These tests hold every batch door to it (a scan of the demo, a dry-run scan
of a generated snapshot, Terraform plans with the Rego pack, manifests): each evaluation runs
with the collector off and a collection right after it must find no garbage.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from engine import pipeline
from tests.conftest import REFERENCE, run_cli

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from gen_snapshot import generate_snapshot, write_snapshot  # noqa: E402

NOW = "2026-06-17T23:30:00Z"  # off-hours: the schedule checks do their work


@pytest.fixture
def garbage_per_evaluation(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each batch evaluation's unreachable objects, counted by a collection right after it."""
    found: list[int] = []

    @contextmanager
    def counted() -> Iterator[None]:
        gc.collect()
        gc.disable()
        try:
            yield
        finally:
            found.append(gc.collect())
            gc.enable()

    monkeypatch.setattr(pipeline, "collector_paused", counted)
    return found


def _snapshot(tmp_path: Path) -> Path:
    path = tmp_path / "snapshot.json"
    write_snapshot(path, generate_snapshot(resources=400, seed=7))
    return path


def _batch_runs(tmp_path: Path) -> list[list[str]]:
    plans = sorted((REFERENCE / "terraform-plans").glob("*.json"))[:6]
    packs = ["--policies", "builtin", "--policies", str(REPO / "policies" / "rego")]
    return [
        ["scan", "--demo", "--format", "json", "--now", NOW],
        ["scan", "--source", f"snapshot:{_snapshot(tmp_path)}", "--format", "json", "--now", NOW],
        *(["check-plan", str(plan), *packs, "--format", "sarif", "--now", NOW]
          for plan in plans),
        ["check-manifests", str(REPO / "tests" / "data" / "manifests"), "--format", "json",
         "--now", NOW],
    ]


def test_batch_evaluations_make_no_reference_cycles(
        tmp_path: Path, garbage_per_evaluation: list[int], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _batch_runs(tmp_path)
    for args in runs:
        code, _, err = run_cli(args, capsys, monkeypatch)
        assert code in (0, 1), f"{args[0]}: {err}"
    assert len(garbage_per_evaluation) == len(runs), "a batch door evaluates without the pause"
    assert garbage_per_evaluation == [0] * len(runs)


def test_the_count_sees_a_cycle(garbage_per_evaluation: list[int]) -> None:
    with pipeline.collector_paused():  # the counting stand-in
        ring: list[object] = []
        ring.append(ring)
        del ring
    assert garbage_per_evaluation == [1]


def _among(made: list[list[int]], objects: list[object]) -> bool:
    ids = {id(item) for item in made}
    return any(id(item) in ids for item in objects)


def test_collector_paused_pauses_and_freezes_what_was_made() -> None:
    assert gc.isenabled()
    with pipeline.collector_paused():
        assert not gc.isenabled()
        made = [[index] for index in range(100)]  # lists: always tracked
        assert _among(made, gc.get_objects(generation=0))
    assert gc.isenabled()
    assert not _among(made, gc.get_objects())  # frozen: in no generation the collector scans


def test_collector_paused_leaves_a_disabled_collector_alone() -> None:
    gc.disable()
    try:
        with pipeline.collector_paused():
            assert not gc.isenabled()
            made = [[index] for index in range(100)]  # lists: always tracked
        assert not gc.isenabled()
        assert _among(made, gc.get_objects())  # not frozen
    finally:
        gc.enable()
