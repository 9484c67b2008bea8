"""Fuzzing `scan --source snapshot:FILE`: real bundles (the demo estate with every section, the
GCP and Azure fixtures) with parts replaced by hostile values (wrong shapes, lone surrogates,
control characters, long strings, huge numbers, deep nesting), written as JSON or YAML, in
every output format. Whatever the bundle: exit 0, 1 or 2, one line on stderr for 2, no crash,
bounded time.

`GPUWARDEN_FUZZ_EXAMPLES=N` runs N examples per test (a nightly run); the default is small.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from engine.demo import demo_snapshot_path
from tests.test_input_robustness import FORMATS, run_gpuwarden
from tests.test_terraform_fuzz import (
    CLI_FUZZ,
    RAW_JSON,
    assert_cli_contract,
    hostile_text,
    hostile_values,
    mutated,
    plan_bytes,
)

FIXTURES = Path(__file__).parent / "fixtures"
NOW = "2026-12-01T12:00:00Z"
# Attribute names the GCP and Azure readers look at, so replacements land where they read.
CLOUD_KEYS = [
    "scheduling", "labels", "tags", "guestAccelerators", "acceleratorCount", "acceleratorType",
    "machineType", "zone", "region", "status", "selfLink", "users", "diskEncryptionKey",
    "properties", "hardwareProfile", "vmSize", "storageProfile", "osDisk", "instanceView",
    "statuses", "agentPoolProfiles", "count", "powerState", "nodeLabels", "location", "id",
    "name", "managedBy", "encryption", "subscriptionId", "projectId",
]


@cache
def base_bundles() -> tuple[dict[str, Any], ...]:
    """The demo estate (every section) and the cloud fixtures, as plain JSON values."""
    demo = yaml.safe_load(demo_snapshot_path().read_text("utf-8"))
    bundles = [json.loads(json.dumps(demo, default=str))]
    for cloud in ("gcp", "azure"):
        bundles.append(json.loads((FIXTURES / cloud / "snapshot.json").read_text("utf-8")))
    return tuple(bundles)


def yaml_bytes(document: Any) -> bytes:
    text = yaml.safe_dump(document, sort_keys=False)
    for marker, raw in RAW_JSON.items():
        text = text.replace(f"'{marker}'", raw).replace(json.dumps(marker), raw)
    return text.encode("utf-8")


misplaced_values = st.one_of(
    hostile_values,
    st.dictionaries(st.sampled_from(CLOUD_KEYS) | hostile_text, hostile_values, max_size=4),
)


@st.composite
def hostile_bundles(draw: st.DrawFn) -> Any:
    bundle = copy.deepcopy(draw(st.sampled_from(base_bundles())))
    return mutated(draw, bundle, misplaced_values)


@CLI_FUZZ
@given(hostile_bundles(), st.sampled_from(["json", "yaml"]), st.sampled_from(FORMATS),
       st.booleans())
def test_hostile_snapshots_through_scan(tmp_path_factory: Any, bundle: Any, encoding: str,
                                        fmt: str, show_passed: bool) -> None:
    path = tmp_path_factory.mktemp("snapshot") / f"estate.{encoding}"
    path.write_bytes(plan_bytes(bundle) if encoding == "json" else yaml_bytes(bundle))
    passed = ["--show-passed"] if show_passed else []
    run = run_gpuwarden("scan", "--source", f"snapshot:{path}", "--now", NOW, "-f", fmt, *passed)
    assert_cli_contract(run)


def test_the_base_bundles_scan_cleanly(tmp_path: Path) -> None:
    """The fuzzer's starting points are valid, so its mutations probe past the header."""
    for position, bundle in enumerate(base_bundles()):
        path = tmp_path / f"base-{position}.json"
        path.write_bytes(plan_bytes(bundle))
        run = run_gpuwarden("scan", "--source", f"snapshot:{path}", "--now", NOW, "-f", "json")
        assert run.code in (0, 1), run.err
        assert json.loads(run.out)["summary"]["resources"] > 0
