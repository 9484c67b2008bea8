"""`gpuwarden check-manifests`: Kubernetes manifests judged as the admission webhook would, with
check-plan's options, outputs and exit codes (issue 13, part 10)."""

from __future__ import annotations

import io
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.core.model import State
from engine.pipeline import build_engine
from engine.webhook.admission import AdmissionSettings, Judge, PolicyEvaluator
from engine.webhook.caches import ClusterCache
from engine.webhook.review import AdmissionRequest
from tests import conftest
from tests.conftest import REFERENCE
from tests.test_sarif_validation import sarif_schema, schema_errors  # noqa: F401 (fixture)

REPO = Path(__file__).resolve().parents[1]
MANIFESTS = REPO / "tests" / "data" / "manifests"
ADMISSION = REFERENCE / "admission"
BAD_PODS = ADMISSION / "kyverno-gpu-pods-bad.yaml"
GOOD_PODS = ADMISSION / "kyverno-gpu-pods-good.yaml"
NOW = "2026-06-01T12:00:00Z"


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str],
            monkeypatch: pytest.MonkeyPatch, stdin: str | None = None) -> tuple[int, str, str]:
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    return conftest.run_cli(["check-manifests", "--now", NOW, *args], capsys, monkeypatch)


def report_of(args: list[str], capsys: pytest.CaptureFixture[str],
              monkeypatch: pytest.MonkeyPatch, **kw: Any) -> tuple[int, dict[str, Any]]:
    code, out, err = run_cli([*args, "-f", "json"], capsys, monkeypatch, **kw)
    assert code in (0, 1), err
    return code, json.loads(out)


def verdicts(report: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(f["policy"], f["resource"]["id"], f["result"]) for f in report["findings"]}


def gpu_pod(name: str, namespace: str = "ml", labels: dict[str, str] | None = None) -> str:
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "cuda",
                                 "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
    }
    return yaml.safe_dump(pod)


# ------------------------------------------------------------------------------ verdicts


def test_known_bad_gpu_pods_are_denied(capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    code, report = report_of([str(BAD_PODS)], capsys, monkeypatch)
    assert code == 1
    denied = {(f["policy"], f["resource"]["id"]) for f in report["findings"]
              if f["result"] == "fail" and f["enforcement"] == "deny"}
    assert ("gpu-spot-required", "Pod/nvidia-gpu-ns/badpod01") in denied
    assert ("gpu-spot-required", "Pod/nvidia-gpu-ns/badpod02") in denied


def test_soft_fail_and_fail_on_gate_like_check_plan(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_cli([str(BAD_PODS), "--soft-fail"], capsys, monkeypatch)[0] == 0
    assert run_cli([str(BAD_PODS), "--fail-on", "critical"], capsys, monkeypatch)[0] == 0
    assert run_cli([str(BAD_PODS), "--fail-on", "high"], capsys, monkeypatch)[0] == 1


def test_findings_are_those_the_webhook_gives(capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Each reference object through the webhook's own Judge (CREATE, no cluster) gives the
    findings check-manifests lists for it."""
    engine = build_engine(None)
    judge = Judge(PolicyEvaluator(engine), ClusterCache(None), AdmissionSettings(),
                  help_by_policy={}, catalog=engine.catalog)
    now = datetime(2026, 6, 1, 12, tzinfo=UTC)
    files = sorted(ADMISSION.glob("*.yaml"))
    expected: set[tuple[str, str, str]] = set()
    for path in files:
        for obj in yaml.safe_load_all(path.read_text()):
            metadata = obj.get("metadata", {})
            request = AdmissionRequest(uid="u", operation="CREATE", kind=obj["kind"],
                                       namespace=metadata.get("namespace"),
                                       name=metadata.get("name"), dry_run=False, object=obj,
                                       old_object=None)
            outcome = judge.validate(request, now)
            findings = outcome.evaluation.findings if outcome.evaluation else []
            expected |= {(f.policy, f.resource.id, f.result) for f in findings
                         if f.result != "pass"}
    _, report = report_of([str(p) for p in files], capsys, monkeypatch)
    assert expected and verdicts(report) == expected


def test_good_pods_with_owner_labels_pass_where_the_bad_ones_fail(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    _, bad = report_of([str(BAD_PODS)], capsys, monkeypatch)
    _, good = report_of([str(GOOD_PODS)], capsys, monkeypatch)
    assert verdicts(bad) != verdicts(good)


# ------------------------------------------------------------------------------ inputs


def test_a_directory_is_read_recursively_and_every_gpu_kind_is_reported(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, report = report_of([str(MANIFESTS)], capsys, monkeypatch)
    assert code == 1
    kinds = {f["resource"]["kind"] for f in report["findings"]}
    # read by the adapter today, and kinds it does not read yet (reported, never silent)
    assert {"PyTorchJob", "MPIJob", "Deployment", "Pod"} <= kinds
    assert {"InferenceService", "RayCluster", "LeaderWorkerSet", "TFJob"} <= kinds
    expected = yaml.safe_load((MANIFESTS / "expected.yaml").read_text())
    gpu_objects = {(o["kind"], o["name"].removesuffix(" (generateName)"))
                   for entry in expected["files"] for o in entry.get("objects", [])}
    reported = {(f["resource"]["kind"], f["resource"]["name"]) for f in report["findings"]}
    assert gpu_objects - reported == set()


def test_unread_kinds_that_request_gpus_are_unknown_not_passed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = tmp_path / "odd.yaml"
    manifest.write_text(yaml.safe_dump({
        "apiVersion": "example.com/v1", "kind": "FancyTrainer",
        "metadata": {"name": "ft", "namespace": "ml"},
        "spec": {"deep": {"workers": [{"resources": {"limits": {"nvidia.com/gpu": 8}}}]}},
    }))
    _, report = report_of([str(manifest)], capsys, monkeypatch)
    spot = [f for f in report["findings"] if f["policy"] == "gpu-spot-required"]
    assert [(f["resource"]["id"], f["result"]) for f in spot] == [("FancyTrainer/ml/ft",
                                                                    "unknown")]
    code, _, _ = run_cli([str(manifest), "--unknown", "fail"], capsys, monkeypatch)
    assert code == 1


def test_stdin_multi_document_and_json(capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    text = gpu_pod("a") + "---\n" + json.dumps(yaml.safe_load(gpu_pod("b"))) + "\n"
    code, report = report_of(["-"], capsys, monkeypatch, stdin=text)
    assert code == 1
    ids = {f["resource"]["id"] for f in report["findings"]}
    assert ids == {"Pod/ml/a", "Pod/ml/b"}
    code, out, _ = run_cli(["-", "-f", "sarif"], capsys, monkeypatch, stdin=text)
    locations = [loc for result in json.loads(out)["runs"][0]["results"]
                 for loc in result["locations"]]
    # standard input is no file code scanning could open: the object is named, not placed
    assert locations and all("physicalLocation" not in loc for loc in locations)


def test_kind_list_items_are_judged(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    items = [yaml.safe_load(gpu_pod(n)) for n in ("x", "y")]
    for item in items:
        del item["kind"]  # as `kubectl get -o json` lists leave them out in PodList
    path = tmp_path / "list.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "PodList", "items": items},
                               indent=2))
    _, report = report_of([str(path)], capsys, monkeypatch)
    assert {f["resource"]["id"] for f in report["findings"]} == {"Pod/ml/x", "Pod/ml/y"}


def test_sarif_points_at_each_objects_file_and_line(
        sarif_schema: dict[str, Any],  # noqa: F811
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = run_cli([str(BAD_PODS), str(GOOD_PODS), "-f", "sarif"], capsys,
                           monkeypatch)
    assert code == 1
    log = json.loads(out)
    assert schema_errors(sarif_schema, log) == []
    starts = {line for line, text in enumerate(BAD_PODS.read_text().splitlines(), 1)
              if text.startswith("apiVersion:")}
    locations = {(loc["physicalLocation"]["artifactLocation"]["uri"],
                  loc["physicalLocation"]["region"]["startLine"])
                 for result in log["runs"][0]["results"] for loc in result["locations"]}
    bad_uri = BAD_PODS.relative_to(REPO).as_posix() if Path.cwd() == REPO else str(BAD_PODS)
    assert {line for uri, line in locations if uri.endswith("kyverno-gpu-pods-bad.yaml")
            } == starts
    assert any(uri == bad_uri or uri.endswith(bad_uri) for uri, _ in locations)


@pytest.mark.parametrize("fmt", ["table", "json", "sarif", "junit", "markdown", "html",
                                 "policyreport"])
def test_every_format_renders(fmt: str, capsys: pytest.CaptureFixture[str],
                              monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = run_cli([str(BAD_PODS), "-f", fmt], capsys, monkeypatch)
    assert code == 1 and out.strip() and not err


def test_output_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                     monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "r.json"
    code, out, _ = run_cli([str(BAD_PODS), "-f", "json", "-o", str(target), "--quiet"], capsys,
                           monkeypatch)
    assert code == 1 and out == ""
    assert json.loads(target.read_text())["findings"]


# ------------------------------------------------------------------------------ production


def test_namespace_object_labels_make_the_workload_production(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(gpu_pod("serve"))
    _, plain = report_of([str(pod)], capsys, monkeypatch)
    assert ("gpu-spot-required", "Pod/ml/serve", "fail") in verdicts(plain)
    namespace = tmp_path / "ns.yaml"
    namespace.write_text("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ml\n"
                         "  labels: {env: production}\n")
    _, prod = report_of([str(namespace), str(pod)], capsys, monkeypatch)
    assert ("gpu-spot-required", "Pod/ml/serve", "fail") not in verdicts(prod)


def test_namespace_labels_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(gpu_pod("serve"))
    labels = tmp_path / "labels.yaml"
    labels.write_text("ml: {environment: Prod}\nother: {}\n")
    _, prod = report_of([str(pod), "--namespace-labels", str(labels)], capsys, monkeypatch)
    assert ("gpu-spot-required", "Pod/ml/serve", "fail") not in verdicts(prod)
    labels.write_text("ml: [not, a, mapping]\n")
    code, out, err = run_cli([str(pod), "--namespace-labels", str(labels)], capsys, monkeypatch)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------------------ bad input


HOSTILE = {
    "deep.yaml": "a: " + "[" * 300 + "]" * 300 + "\n",
    "bomb.yaml": "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n"
        for p, c in zip("abcdefg", "bcdefgh", strict=True)),
    "scalar.yaml": "just a string\n",
    "broken.yaml": "kind: Pod\nmetadata: {name: [\n",
    "binary.yaml": "kind: Pod\ndata: !!binary aGVsbG8=\n",
    "bigint.yaml": "kind: Pod\nspec: {replicas: " + "9" * 500 + "}\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_files_exit_2_with_one_line(name: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / name
    path.write_text(HOSTILE[name])
    code, out, err = run_cli([str(path)], capsys, monkeypatch)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("gpuwarden: error:"), err
    assert name in err and "Traceback" not in err


def test_a_document_that_is_no_object_is_named_plainly(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("kind: Pod\n---\n- a\n- b\n")
    code, _, err = run_cli([str(path)], capsys, monkeypatch)
    assert code == 2 and err.strip().endswith("list.yaml:3: expected a Kubernetes object (a "
                                              "mapping with kind), got a list")


def test_missing_file_and_fifo_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    for path in (tmp_path / "absent.yaml", fifo):
        code, _, err = run_cli([str(path)], capsys, monkeypatch)
        assert code == 2 and len(err.strip().splitlines()) == 1, err


def test_size_cap_holds(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUWARDEN_MAX_INPUT_MB", "1")
    path = tmp_path / "big.yaml"
    path.write_text(gpu_pod("p") + "# " + "x" * 2**20 + "\n")
    code, _, err = run_cli([str(path)], capsys, monkeypatch)
    assert code == 2 and "larger than" in err


def test_objects_remember_their_line(tmp_path: Path) -> None:
    from engine.manifests import admission_resources, read_manifests

    path = tmp_path / "two.yaml"
    path.write_text("# comment\n" + gpu_pod("a") + "---\n" + gpu_pod("b"))
    engine = build_engine(None)
    resources = admission_resources(read_manifests([str(tmp_path)]), engine.catalog, {})
    lines = [r.location.line for r in resources if r.location]
    second = 2 + len(gpu_pod("a").splitlines()) + 1
    assert lines == [2, second]
    assert all(r.state == State.PLANNED for r in resources)


# ------------------------------------------------------------------------------ the Action


def test_the_action_checks_manifests(tmp_path: Path) -> None:
    from tests.test_action import PR_COMMENT_MARKER, ActionRunner, run_check

    workspace = tmp_path / "workspace"
    (workspace / "k8s").mkdir(parents=True)
    (workspace / "k8s" / "pods.yaml").write_text(BAD_PODS.read_text())
    runner = ActionRunner(workspace, {"manifests": "k8s"})
    gate = run_check(runner)
    assert runner.outputs["exit-code"] == "1" and gate.returncode == 1
    sarif = json.loads((workspace / "gpuwarden.sarif").read_text())
    uris = {loc["physicalLocation"]["artifactLocation"]["uri"]
            for result in sarif["runs"][0]["results"] for loc in result["locations"]}
    assert uris == {"k8s/pods.yaml"}
    assert runner.summary.read_text().startswith(PR_COMMENT_MARKER)


def test_the_action_wants_one_of_plan_and_manifests(tmp_path: Path) -> None:
    from tests.test_action import ActionRunner, run_check

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    for inputs in ({"plan": "plan.json", "manifests": "k8s"}, {}):
        runner = ActionRunner(workspace, inputs)
        gate = run_check(runner)
        assert runner.outputs["exit-code"] == "2" and gate.returncode == 2


def test_dra_claim_templates_among_the_inputs_count_the_gpus_they_claim(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # The JobSet's pods name a ResourceClaimTemplate shipped beside it (2 replicated jobs of
    # 3 pods, one GPU each): judged with the template, not as an unknown GPU count.
    _, report = report_of([str(MANIFESTS / "jobset")], capsys, monkeypatch)
    spot = [f for f in report["findings"] if f["policy"] == "gpu-spot-required"]
    assert [(f["resource"]["id"], f["result"]) for f in spot] == [
        ("JobSet/default/training-job", "fail")]
    assert "runs 6 GPU" in spot[0]["message"]
