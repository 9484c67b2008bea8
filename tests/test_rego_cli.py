"""Rego findings flow through the same doors as YAML ones: check-plan (exit code, JSON, SARIF),
`policies list`, and the admission webhook's AdmissionReview responses."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from engine.core.evaluate import Engine
from engine.loading.policies import load_policies

pytest.importorskip("regorus")

from engine.webhook.app import create_app
from tests.conftest import run_cli
from tests.opa_stub import serve

REPO = Path(__file__).resolve().parents[1]
REGO_PACK = REPO / "policies" / "rego"
AWS_PLAN = REPO / "tests" / "fixtures" / "plans" / "aws-gpu-plan.json"



def test_check_plan_gates_on_rego_findings(capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    spot = str(REGO_PACK / "gpu_spot_required.yaml")
    code, out, err = run_cli(["check-plan", str(AWS_PLAN), "--policies", spot, "--format", "json",
                          "--now", "2026-12-01T12:00:00Z"], capsys, monkeypatch)
    assert code == 1, err
    report = json.loads(out)
    results = {(f["resource"]["id"], f["result"]) for f in report["findings"]}
    assert results == {("aws_eks_node_group.ondemand_gpu", "fail"),
                       ("aws_autoscaling_group.from_template", "fail"),
                       ("aws_instance.mystery", "unknown")}
    assert report["summary"]["by_policy"] == {"gpu-spot-required": 3}
    assert all(f["remediation"]["action"] == "advise-spot" for f in report["findings"]
               if f["result"] == "fail")


def test_builtin_then_twin_replaces_the_yaml_policy(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    spot = str(REGO_PACK / "gpu_spot_required.yaml")
    args = ["check-plan", str(AWS_PLAN), "--format", "json", "--now", "2026-12-01T12:00:00Z"]
    _, builtin_out, _ = run_cli(args, capsys, monkeypatch)
    _, both_out, _ = run_cli([*args, "--policies", "builtin", "--policies", spot], capsys,
                         monkeypatch)

    def strip(out: str) -> list[Any]:
        return sorted((f["policy"], f["resource"]["id"], f["result"], f["estimated_monthly_usd"])
                      for f in json.loads(out)["findings"])

    assert strip(both_out) == strip(builtin_out)


def test_sarif_and_list_show_rego_policies(capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    spot = str(REGO_PACK / "gpu_spot_required.yaml")
    _, out, _ = run_cli(["check-plan", str(AWS_PLAN), "--policies", spot, "--format", "sarif"],
                    capsys, monkeypatch)
    sarif = json.loads(out)
    rules = sarif["runs"][0]["tool"]["driver"]["rules"]
    assert [rule["id"] for rule in rules] == ["gpu-spot-required"]
    assert len(sarif["runs"][0]["results"]) >= 2
    code, out, _ = run_cli(["policies", "list", "--policies", str(REGO_PACK)], capsys, monkeypatch)
    assert code == 0
    listed = {line.split()[0] for line in out.splitlines()}
    assert listed == {"gpu-spot-required", "required-cost-tags", "gpu-workload-required-labels"}


# ---------------------------------------------------------------------------- webhook


def gpu_review(labels: dict[str, str]) -> dict[str, Any]:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "trainer", "namespace": "ml", "labels": labels},
           "spec": {"containers": [{"name": "c", "image": "cuda",
                                    "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "0b1e5e7c-2f0b-4c53-8f0a-5a1f3e1b9c11",
                        "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "name": "trainer", "namespace": "ml", "operation": "CREATE",
                        "userInfo": {"username": "alice"}, "object": pod, "dryRun": False}}


def validate(engine: Engine, body: dict[str, Any]) -> dict[str, Any]:
    app = create_app(engine, clock=lambda: datetime(2026, 12, 1, 12, tzinfo=UTC))

    async def call() -> dict[str, Any]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as http:
            reply = await http.post("/validate", content=json.dumps(body).encode())
        return reply.json()["response"]  # type: ignore[no-any-return]

    return asyncio.run(call())


def policy_files(url: str | None, tmp_path: Path) -> list[str]:
    if url is None:
        return [str(REGO_PACK / "required_cost_tags.yaml"),
                str(REGO_PACK / "gatekeeper" / "required_labels.yaml")]
    files = []
    for wrapper in (REGO_PACK / "required_cost_tags.yaml",
                    REGO_PACK / "gatekeeper" / "required_labels.yaml"):
        document = yaml.safe_load(wrapper.read_text("utf-8"))
        for policy in document["policies"]:
            policy["rego"].update({"module": str(wrapper.parent / policy["rego"]["module"]),
                                   "evaluator": "remote", "opa_url": url})
        path = tmp_path / wrapper.name
        path.write_text(yaml.safe_dump(document), "utf-8")
        files.append(str(path))
    return files


@pytest.mark.parametrize("evaluator", ["embedded", "remote"])
def test_webhook_denies_and_warns_from_rego_policies(tmp_path: Path, evaluator: str) -> None:
    # The Gatekeeper module is Rego v0: an OPA 1.x server takes it with --v0-compatible.
    with serve(v0_compatible=True) as (url, _):
        engine = Engine(load_policies(policy_files(url if evaluator == "remote" else None,
                                                   tmp_path)))
        denied = validate(engine, gpu_review({"team": "ML"}))
        allowed = validate(engine, gpu_review({"team": "ml", "project": "p", "cost-center": "c",
                                               "owner": "alice"}))
    assert denied["allowed"] is False and denied["status"]["code"] == 403
    message = denied["status"]["message"]
    assert "[required-cost-tags] Pod trainer requests GPUs without cost-allocation labels: " \
           "project, cost-center" in message
    assert denied["auditAnnotations"] == {"required-cost-tags": "fail",
                                          "gpu-workload-required-labels": "fail"}
    [warning] = denied["warnings"]
    assert warning.startswith("[gpu-workload-required-labels] ")
    assert allowed == {"uid": allowed["uid"], "allowed": True}
