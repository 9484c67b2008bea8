"""Large snapshot scans stay lean without changing a result: the JSON report written a piece at
a time is the whole dump's text, and a dry run that lets go of the native objects (and of each
resource's `raw` when no policy can read it) reports exactly what a scan keeping them does.

The estate is `bench/gen_snapshot.py`'s (AWS/GCP/Azure natives, a Kubernetes cluster, DCGM
telemetry), small enough for the test run.
"""

from __future__ import annotations

import io
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from engine.cli import main
from engine.core.model import Report
from engine.outputs import RenderContext
from engine.outputs.json_report import render, write_report
from engine.pipeline import ScanRequest, ScanResult, build_engine, release_natives, run_scan
from engine.sources.collected import ScanOptions

REPO = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 6, 17, 14, 30, tzinfo=UTC)

sys.path.insert(0, str(REPO / "bench"))
from gen_snapshot import generate_snapshot, write_snapshot  # noqa: E402

RAW_POLICY = """\
apiVersion: gpuwarden.io/v1
policies:
  - id: ec2-default-tenancy
    title: EC2 instances run on shared tenancy
    severity: low
    resources: [instance]
    scope: {field: provider, op: eq, value: aws}
    violation: {field: raw.Placement.Tenancy, op: ne, value: default}
    message: "{{ r.name }} runs on {{ r.raw.Placement.Tenancy }} tenancy"
    enforcement: {plan: audit, admission: audit, runtime: audit}
"""


@pytest.fixture(scope="module")
def estate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("scale") / "estate.json"
    write_snapshot(path, generate_snapshot(resources=600, seed=3))
    return path


def scan(estate: Path, *, keep_natives: bool, policies: tuple[str, ...] = ()) -> ScanResult:
    request = ScanRequest(sources=(f"snapshot:{estate}",), options=ScanOptions(), now=NOW,
                          policies=policies, keep_natives=keep_natives)
    return run_scan(request)


def whole_dump(report: Report) -> str:
    data: bytes = orjson.dumps(report.to_json_dict(),
                               option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    return data.decode("utf-8") + "\n"


def comparable(report: Report) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(render(RenderContext(report=report)))
    payload.pop("generated_at")
    return payload


def test_the_json_report_in_pieces_is_the_whole_dump(estate: Path) -> None:
    report = scan(estate, keep_natives=True).report
    assert len(report.findings) > 100
    empty = report.model_copy(update={"findings": []})
    for case in (report, empty):
        context = RenderContext(report=case)
        stream = io.BytesIO()
        write_report(context, stream)
        assert render(context) == whole_dump(case)
        assert stream.getvalue().decode("utf-8") == whole_dump(case)


def test_a_report_written_to_a_file_is_what_stdout_shows(
        estate: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    args = ["scan", "--source", f"snapshot:{estate}", "--format", "json", "--now",
            NOW.isoformat()]
    outputs = []
    for extra in ([], ["-o", str(tmp_path / "report.json")]):
        monkeypatch.setattr(sys, "argv", ["gpuwarden", *args, *extra])
        with pytest.raises(SystemExit) as exited:
            main()
        assert exited.value.code == 1
        outputs.append(capsys.readouterr().out)
    written = (tmp_path / "report.json").read_text("utf-8")
    assert json.loads(written)["findings"]
    assert written == outputs[0]


def test_letting_go_of_what_was_read_changes_no_result(estate: Path) -> None:
    kept = scan(estate, keep_natives=True)
    released = scan(estate, keep_natives=False)
    assert comparable(released.report) == comparable(kept.report)
    assert kept.collected.snapshot and kept.collected.resources
    assert not released.collected.snapshot and not released.collected.resources


def test_natives_and_raw_are_released_unless_a_policy_reads_raw(estate: Path,
                                                                tmp_path: Path) -> None:
    policy = tmp_path / "tenancy.yaml"
    policy.write_text(RAW_POLICY, "utf-8")
    for policies, raw_kept in (((), False), ((str(policy),), True)):
        collected = scan(estate, keep_natives=True, policies=policies).collected
        engine = build_engine(list(policies) or None)
        release_natives(collected, engine.policies)
        assert not collected.snapshot
        assert any(r.raw for r in collected.resources) is raw_kept


def test_a_policy_reading_raw_judges_the_same_either_way(estate: Path, tmp_path: Path) -> None:
    policy = tmp_path / "tenancy.yaml"
    policy.write_text(RAW_POLICY, "utf-8")
    kept = scan(estate, keep_natives=True, policies=(str(policy),))
    released = scan(estate, keep_natives=False, policies=(str(policy),))
    assert comparable(released.report) == comparable(kept.report)
    assert kept.report.summary.passed > 0  # the policy read raw.Placement.Tenancy


def test_what_gpuwarden_stopped_is_resumed_either_way(tmp_path: Path) -> None:
    bundle = generate_snapshot(resources=200, seed=5)
    bundle["resources"].append({
        "provider": "aws", "kind": "aws_instance", "category": "instance",
        "id": "i-0stoppedbygpuwarden", "name": "stopped-trainer", "state": "stopped",
        "instance_type": "g5.xlarge", "gpu": {"model": "NVIDIA A10G", "count": 1},
        "tags": {"team": "vision", "gpuwarden:stopped-by":
                 "gpu-off-hours-shutdown@2026-06-16T19:00:00+00:00"}})
    path = tmp_path / "stopped.json"
    write_snapshot(path, bundle)
    kept, released = (scan(path, keep_natives=keep).report for keep in (True, False))
    resumes = [f for f in released.findings
               if f.remediation is not None and f.remediation.action == "resume"]
    assert [f.resource.id for f in resumes] == ["i-0stoppedbygpuwarden"]
    assert comparable(released) == comparable(kept)


def test_a_lean_scan_still_saves_every_section(estate: Path, tmp_path: Path) -> None:
    saved = tmp_path / "saved.json"
    request = ScanRequest(sources=(f"snapshot:{estate}",), options=ScanOptions(), now=NOW,
                          keep_natives=False, save_snapshot=saved)
    lean = run_scan(request)
    original = json.loads(estate.read_text("utf-8"))
    bundle = json.loads(saved.read_text("utf-8"))
    for section in ("aws", "gcp", "azure", "kubernetes", "resources"):
        assert bundle[section] == original[section]
    assert bundle["telemetry"]["gpus"] == original["telemetry"]["gpus"]
    assert comparable(lean.report) == comparable(scan(estate, keep_natives=True).report)


def test_nothing_reads_which_fields_a_model_was_given() -> None:
    """`engine.sharedfields` lets a scan's models share one field-names set per class, which
    is only sound while gpuwarden never asks which fields a model was given."""
    readers = ("exclude_unset", "model_fields_set", "__pydantic_fields_set__")
    allowed = {REPO / "engine" / "sharedfields.py", REPO / "engine" / "core" / "model.py"}
    found = [f"{path.relative_to(REPO)}: {name}"
             for folder in ("engine", "remediations") for path in (REPO / folder).rglob("*.py")
             if path not in allowed
             for name in readers if name in path.read_text("utf-8")]
    assert found == []
    model = (REPO / "engine" / "core" / "model.py").read_text("utf-8")
    assert "exclude_unset" not in model and "model_fields_set" not in model


def test_shared_field_sets_are_shared_and_change_no_value() -> None:
    from engine.core.model import Resource
    from engine.sharedfields import share_fields_set

    first = Resource(provider="aws", kind="aws_instance", category="instance", id="i-1", name="a")
    second = first.model_copy(update={"id": "i-2"})
    before = (first.model_dump(), second.model_dump())
    share_fields_set(first)
    share_fields_set(second)
    assert first.__pydantic_fields_set__ is second.__pydantic_fields_set__
    assert (first.model_dump(), second.model_dump()) == before
    first.raw = {"changed": True}  # pydantic adds the name to the (shared) set: still fine
    assert second.raw == {} and first.raw == {"changed": True}


def test_the_join_still_finds_instances_by_their_native_fields(tmp_path: Path) -> None:
    from engine.sources import snapshot
    from engine.telemetry import hosts

    assert snapshot._JOINED_BY_RAW == hosts._INSTANCE_CATEGORIES
    bundle = generate_snapshot(resources=200, seed=9)
    bundle["aws"][0]["instances"].append({
        "InstanceId": "i-0feedfacecafe0001", "InstanceType": "g5.xlarge",
        "State": {"Code": 16, "Name": "running"}, "PrivateDnsName": "ip-10-77-1-2.ec2.internal",
        "Tags": [{"Key": "Name", "Value": "idle-box"}, {"Key": "team", "Value": "vision"}]})
    bundle["telemetry"]["gpus"].append({
        "hostname": "ip-10-77-1-2.ec2.internal", "uuid": "GPU-77", "gpu": "0",
        "model": "NVIDIA A10G", "activity_pct": 0.4, "samples": 240, "window_seconds": 3600,
        "activity_metric": "DCGM_FI_PROF_GR_ENGINE_ACTIVE"})
    path = tmp_path / "joined.json"
    write_snapshot(path, bundle)
    kept, released = (scan(path, keep_natives=keep).report for keep in (True, False))
    idle = [f for f in released.findings
            if f.policy == "gpu-idle" and f.resource.id == "i-0feedfacecafe0001"]
    assert len(idle) == 1 and idle[0].result == "fail"
    assert comparable(released) == comparable(kept)


@pytest.mark.parametrize("raw", [
    {"InstanceId": "i-0abc12345678", "PrivateDnsName": "IP-10-0-0-1.ec2.internal",
     "PrivateIpAddress": "10.0.0.1", "Tags": [{"Key": "Name", "Value": "x"}], "State": {}},
    {"hostname": "VM-1.c.proj.internal", "labels": {"team": "a"}, "disks": [{"boot": True}]},
    {"properties": {"osProfile": {"computerName": "Trainer-01", "adminUsername": "a"},
                    "hardwareProfile": {"vmSize": "Standard_NC4as_T4_v3"}}},
    {"properties": {"osProfile": "not a mapping"}, "hostname": 7},
    {},
])
@pytest.mark.parametrize("provider", ["aws", "gcp", "azure"])
def test_the_join_finds_an_instance_by_its_join_fields_alone(provider: str,
                                                             raw: dict[str, Any]) -> None:
    from engine.core.model import Resource
    from engine.sources.snapshot import join_fields
    from engine.telemetry.hosts import instance_keys

    whole = Resource(provider=provider, kind="vm", category="instance", id="vm-1", name="VM-1",
                     raw=raw)
    slim = whole.model_copy(update={"raw": join_fields(raw)})
    assert instance_keys(slim) == instance_keys(whole)


@pytest.mark.parametrize("text", [
    b"{}", b' \n{ \t}\r\n', b'{"kind": "Snapshot"}',
    '{"a": [1, "é€😀", {"b": "}],"}], "c" : {"x": "\\"}"} ,"d":-1.5e3}\n'.encode(),
    b'{"a\\"b": "q", "n": null, "t": true}',
])
def test_members_parsed_one_at_a_time_are_the_whole_object(text: bytes) -> None:
    from engine.sources.members import member_spans, parse_member

    spans = member_spans(text, {"kind", "a", "c", "d", 'a"b', "n", "t"})
    assert spans is not None
    assert {key: parse_member(text, span) for key, span in spans.items()} == orjson.loads(text)
    assert list(spans) == list(orjson.loads(text))


@pytest.mark.parametrize("text", [
    b'{"a": 1, "a": 2}', b'{"a": 1,}', b'\xef\xbb\xbf{"a": 1}', b'{"a": 1} x', b"[1]",
    b'{"a": 1', b'{"a": [1}', b"kind: Snapshot\n", b'{"a": NaN}', b'{"a" 1}', b"{1: 2}",
    b'{"a": 1, "other": 2}',
])
def test_what_is_not_plainly_one_json_object_gets_no_members(text: bytes) -> None:
    from engine.sources.members import member_spans

    assert member_spans(text, {"a"}) is None


@pytest.fixture
def by_section(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lean scans parse even these small bundles a section at a time."""
    from engine.sources import snapshot

    monkeypatch.setattr(snapshot, "_WHOLE_PARSE_BYTES", 0)


@pytest.mark.usefixtures("by_section")
def test_a_bundle_read_section_by_section_reads_as_a_whole(estate: Path, tmp_path: Path
                                                           ) -> None:
    """The lean path parses a JSON bundle one section at a time; YAML, and JSON it cannot
    split, are parsed whole: each reports what the kept path does."""
    from engine.sources.snapshot import _Sections

    assert _Sections(estate)._whole is None  # parsed by section indeed
    whole = comparable(scan(estate, keep_natives=True).report)
    assert comparable(scan(estate, keep_natives=False).report) == whole
    bundle = json.loads(estate.read_text("utf-8"))
    variants = {
        "indented.json": json.dumps(bundle, indent=2, ensure_ascii=False).encode(),
        "repeated.json": estate.read_bytes()[:-1] + b', "kind": "Snapshot"}',
        "bom.json": b"\xef\xbb\xbf" + estate.read_bytes(),
        "estate.yaml": yaml.safe_dump(bundle).encode(),
    }
    for name, text in variants.items():
        path = tmp_path / name
        path.write_bytes(text)
        assert comparable(scan(path, keep_natives=False).report) == whole, name


@pytest.mark.parametrize(("text", "message"), [
    (b'{"kind": "Snapshot", "aws": [], "bogus": 1}', "unknown snapshot section 'bogus'"),
    (b'{"kind": "Other", "aws": []}', "not a gpuwarden snapshot"),
    (b'{"kind": "Snapshot", "aws": ' + b"[" * 200 + b"]" * 200 + b"}",
     "nested more than 128 levels deep"),
    (b'{"kind": "Snapshot", "aws": {"x": 1}, "resources": [' + b"[" * 127 + b"]" * 127 + b"]}",
     "nested more than 128 levels deep"),
    (b'{"kind": "Snapshot", "resources": 5, "aws": ' + b"[" * 200 + b"]" * 200 + b"}",
     "nested more than 128 levels deep"),
    (b'{"kind": "Snapshot", "resources": 5, "aws": []}', "resources must be a list"),
])
@pytest.mark.usefixtures("by_section")
def test_a_bundle_read_section_by_section_fails_as_a_whole(tmp_path: Path, text: bytes,
                                                           message: str) -> None:
    from engine.core.errors import InputError

    path = tmp_path / "bad.json"
    path.write_bytes(text)
    for keep_natives in (True, False):
        with pytest.raises(InputError, match=message):
            scan(path, keep_natives=keep_natives)


@pytest.mark.parametrize("whole_parse_bytes", [0, 2**40])
def test_workloads_join_their_readings_through_the_ownership_kept(
        estate: Path, whole_parse_bytes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lean scan keeps of the Kubernetes objects only Nodes and ownership
    (`snapshot.join_view`); readings still reach the workloads owning their pods."""
    from engine.sources import snapshot

    monkeypatch.setattr(snapshot, "_WHOLE_PARSE_BYTES", whole_parse_bytes)
    kept, released = (scan(estate, keep_natives=keep).report for keep in (True, False))
    judged = [f for f in released.findings if f.policy == "gpu-idle"
              and f.resource.provider == "kubernetes" and f.result != "unknown"]
    assert judged
    assert comparable(released) == comparable(kept)


def test_the_join_view_keeps_nodes_whole_and_ownership_of_the_rest() -> None:
    from engine.sources.snapshot import join_view

    node = {"kind": "Node", "metadata": {"name": "n1", "labels": {"a": "b"}},
            "status": {"addresses": [{"type": "Hostname", "address": "n1"}]}}
    pod = {"kind": "Pod", "metadata": {"name": "p", "namespace": "ml", "labels": {
        "pod-template-hash": "abc", "team": "x"}, "ownerReferences": [
            {"kind": "ReplicaSet", "name": "rs", "controller": True, "uid": "1"}]},
           "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}}
    section = {"cluster": "c1", "objects": [node, pod, "not an object"]}
    assert join_view("kubernetes", section) == {"cluster": "c1", "objects": [node, {
        "kind": "Pod", "metadata": {"name": "p", "namespace": "ml",
                                    "labels": {"pod-template-hash": "abc"},
                                    "ownerReferences": [{"kind": "ReplicaSet", "name": "rs",
                                                         "controller": True}]},
        "spec": {"nodeName": "n1"}}]}
    assert join_view("telemetry", section) is section
    assert join_view("kubernetes", {"objects": "odd"}) == {"objects": "odd"}
