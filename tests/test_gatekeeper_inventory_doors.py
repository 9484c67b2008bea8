"""A policy that declares `rego.inventory` is never judged on an inventory that is not there:
outside the webhook (check-manifests, the runtime audit) nothing replicates cluster objects, so
its finding is `unknown`, naming why, instead of a pass on an empty data.inventory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.core.evaluate import Engine
from engine.core.model import State
from engine.loading.policies import load_policies
from engine.sources.kubernetes import workload_resource
from tests.conftest import BUSINESS_HOURS

pytest.importorskip("regorus")
REPO = Path(__file__).resolve().parents[1]

MODULE = '''package pods

violation contains {"msg": "same name as a pod in the cluster"} if {
	some other in data.inventory.namespace[_].v1.Pod
	other.metadata.name == input.review.object.metadata.name
}
'''


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from engine.cli import main; sys.argv[0] = 'gpuwarden'; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO)


@pytest.fixture
def pod_policy(tmp_path: Path) -> Any:
    (tmp_path / "pods.rego").write_text(MODULE)
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump({"apiVersion": "gpuwarden.io/v1",
                                                        "policies": [{
        "id": "unique-pod-names", "title": "unique pod names", "severity": "low",
        "resources": ["workload"],
        "rego": {"module": "pods.rego", "input": "admission",
                 "inventory": [{"group": "", "version": "v1", "kind": "Pod"}]},
        "enforcement": {"plan": "off", "admission": "deny", "runtime": "audit"}}]}))
    [policy] = load_policies([str(tmp_path / "pods.yaml")])
    return policy


def test_check_manifests_gives_unknown_for_an_inventory_policy(pod_policy: Any,
                                                              tmp_path: Path) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(_pod().raw))
    done = _cli("check-manifests", "--policies", str(tmp_path / "pods.yaml"), "--format",
                "json", str(manifest))
    [finding] = json.loads(done.stdout)["findings"]
    assert (finding["policy"], finding["result"]) == ("unique-pod-names", "unknown")
    assert "data.inventory is incomplete: only the webhook replicates" in finding["message"]


def _pod() -> Any:
    return workload_resource({"apiVersion": "v1", "kind": "Pod",
                              "metadata": {"name": "trainer", "namespace": "ml"},
                              "spec": {"containers": [{"name": "c", "image": "x"}]}},
                             state=State.RUNNING)


def test_the_runtime_audit_gives_unknown_not_a_pass(pod_policy: Any) -> None:
    findings = Engine([pod_policy]).evaluate([_pod()], BUSINESS_HOURS, door="runtime").findings
    assert [(f.policy, f.result) for f in findings] == [("unique-pod-names", "unknown")]
    assert "data.inventory is incomplete" in findings[0].message


def test_once_replicated_the_policy_is_judged(pod_policy: Any) -> None:
    inventory = {"cluster": {}, "namespace": {"ml": {"v1": {"Pod": {"trainer": {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer", "namespace": "ml"}}}}}}}
    pod_policy.rego.use_inventory(inventory, None)
    findings = Engine([pod_policy]).evaluate([_pod()], BUSINESS_HOURS, door="runtime").findings
    assert [(f.policy, f.result) for f in findings] == [("unique-pod-names", "fail")]
    pod_policy.rego.use_inventory({"cluster": {}, "namespace": {}}, None)
    assert Engine([pod_policy]).evaluate([_pod()], BUSINESS_HOURS, door="runtime").findings == []
