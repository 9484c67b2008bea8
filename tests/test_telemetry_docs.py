"""docs/telemetry.md is executable too: its console transcripts print what the page shows, its
links resolve, and its tables name the real metrics, labels and snapshot fields."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.telemetry.prometheus import METRIC_STATS
from engine.telemetry.series import HOST_LABELS, GpuSeries
from tests.test_docs_examples import DOCS, Transcripts, anchors, console_sessions

DOC = "telemetry.md"


def test_transcripts_print_what_the_page_shows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    replayer = Transcripts(tmp_path, capsys, monkeypatch)
    problems = [problem for session in console_sessions(DOC)
                for problem in replayer.replay(DOC, session)]
    assert not problems, "\n".join(problems)
    assert replayer.ran >= 1


def test_links_resolve() -> None:
    text = re.sub(r"^```.*?^```$", "", (DOCS / DOC).read_text("utf-8"), flags=re.M | re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        file, _, anchor = target.partition("#")
        path = DOCS / DOC if not file else (DOCS / file).resolve()
        assert path.exists(), target
        if anchor:
            assert anchor in anchors(path), target


def test_the_page_names_every_metric_label_and_field() -> None:
    text = (DOCS / DOC).read_text("utf-8")
    for name in [*METRIC_STATS, *HOST_LABELS, "GPU_I_PROFILE", "GPU_I_ID", "exported_pod",
                 "exported_namespace", "modelName"]:
        assert f"`{name}`" in text or name in text, name
    snapshot_example = text[text.index("## Snapshots"):text.index("## NVML")]
    for field in GpuSeries.model_fields:
        assert re.search(rf"^ +(- )?{field}:", snapshot_example, re.M), field
    assert "BENCH_TABLE" not in text
