"""Scan sources and snapshot sections are found by name and imported only when used: every
listed source has a `collect`, every listed section a registered reader, and a bundle imports
the adapters of the sections it holds and no others."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engine.demo import demo_snapshot_path
from engine.sources.registry import SOURCES
from engine.sources.sections import SECTIONS, section, section_reader

REPO = Path(__file__).resolve().parents[1]
ADAPTERS = ("engine.sources.kubernetes", "engine.sources.gcp", "engine.sources.azure",
            "engine.sources.aws", "engine.sources.terraform")


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_every_source_module_exposes_collect(name: str) -> None:
    assert callable(importlib.import_module(SOURCES[name]).collect)


@pytest.mark.parametrize("name", list(SECTIONS))
def test_every_listed_section_has_a_reader_once_its_module_is_imported(name: str) -> None:
    assert callable(section_reader(name))


@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure"])
def test_a_cloud_section_is_read_by_its_adapter(cloud: str) -> None:
    adapter = importlib.import_module(f"engine.sources.{cloud}")
    assert section_reader(cloud) is adapter.read_snapshot_section


def test_a_reader_for_an_unlisted_section_is_refused() -> None:
    with pytest.raises(ValueError, match="not listed"):
        section("gpus")


def modules_after_scan(bundle: Path, tmp_path: Path) -> set[str]:
    """The modules a real `gpuwarden scan --source snapshot:BUNDLE` process imported."""
    program = ("import sys\nfrom engine.cli import main\ntry:\n    main()\nfinally:\n"
               "    print('\\n'.join(sorted(sys.modules)), file=sys.stderr)\n")
    command = [sys.executable, "-c", program, "scan", "--format", "json",
               "--source", f"snapshot:{bundle}", "--now", "2026-12-01T12:00:00Z",
               "-o", str(tmp_path / "report.json")]
    result = subprocess.run(command, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode in (0, 1), result.stderr[-2000:]
    return set(result.stderr.split())


def test_a_bundle_imports_the_adapters_of_its_sections_only(tmp_path: Path) -> None:
    estate = yaml.safe_load(demo_snapshot_path().read_text("utf-8"))
    assert estate.get("kubernetes"), "the demo estate has a kubernetes section"
    bundle = tmp_path / "k8s-only.json"
    bundle.write_text(json.dumps({"apiVersion": "gpuwarden.io/v1", "kind": "Snapshot",
                                  "kubernetes": estate["kubernetes"]}), "utf-8")

    loaded = modules_after_scan(bundle, tmp_path)

    report = json.loads((tmp_path / "report.json").read_text("utf-8"))
    assert {f["resource"]["provider"] for f in report["findings"]} == {"kubernetes"}
    assert "engine.sources.kubernetes.snapshot" in loaded
    assert not [m for m in loaded
                if m.startswith(tuple(a for a in ADAPTERS if a != "engine.sources.kubernetes"))]
    assert "engine.sources.kubernetes.live" not in loaded
