"""The Terraform deployment of the admission webhook, checked by parsing its HCL.

No provider can be downloaded here, so `terraform validate` is out of reach; these tests parse
every .tf file with python-hcl2 and assert the properties the deployment promises.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

hcl2 = pytest.importorskip("hcl2")

TERRAFORM = Path(__file__).resolve().parents[1] / "terraform"
MODULE = TERRAFORM / "modules" / "admission-webhook"
EXAMPLE = TERRAFORM / "examples" / "admission-webhook"
SYSTEM_NAMESPACES = {"kube-system", "kube-node-lease", "kube-public"}
SPOT_LABELS = {
    "karpenter.sh/capacity-type": "spot",
    "eks.amazonaws.com/capacityType": "SPOT",
    "cloud.google.com/gke-spot": "true",
    "cloud.google.com/gke-preemptible": "true",
    "kubernetes.azure.com/scalesetpriority": "spot",
}
POLICED = {
    "": {"pods"},
    "apps": {"deployments", "statefulsets", "daemonsets", "replicasets"},
    "batch": {"jobs", "cronjobs"},
}


def plain(value: Any) -> Any:
    """Parsed HCL with the quotes newer python-hcl2 versions keep around strings removed."""
    if isinstance(value, dict):
        return {plain(key): plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def parse(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as handle:
        return dict(plain(hcl2.load(handle)))


@pytest.fixture(scope="module")
def module() -> dict[str, Any]:
    merged: dict[str, list[Any]] = {}
    for path in sorted(MODULE.glob("*.tf")):
        for key, blocks in parse(path).items():
            merged.setdefault(key, []).extend(blocks)
    return merged


def resources(module: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    found = [body for block in module["resource"] for name, body in block.items() if name == kind]
    return [item for body in found for item in body.values()]


def one(module: dict[str, Any], kind: str) -> dict[str, Any]:
    found = resources(module, kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def variable(module: dict[str, Any], name: str) -> dict[str, Any]:
    for block in module["variable"]:
        if name in block:
            return dict(block[name])
    raise AssertionError(f"no variable {name}")


def local(module: dict[str, Any], name: str) -> Any:
    for block in module["locals"]:
        if name in block:
            return block[name]
    raise AssertionError(f"no local {name}")


def webhooks(module: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return list(one(module, kind)["webhook"])


WEBHOOK_KINDS = ("kubernetes_validating_webhook_configuration_v1",
                 "kubernetes_mutating_webhook_configuration_v1")


def test_every_tf_file_parses() -> None:
    files = sorted(TERRAFORM.rglob("*.tf"))
    assert {p.name for p in files} >= {"main.tf", "variables.tf", "outputs.tf", "versions.tf"}
    for path in files:
        assert parse(path), path


def test_module_declares_the_kubernetes_provider(module: dict[str, Any]) -> None:
    providers = module["terraform"][0]["required_providers"][0]
    assert providers["kubernetes"]["source"] == "hashicorp/kubernetes"


def test_at_least_three_replicas(module: dict[str, Any]) -> None:
    replicas = variable(module, "replicas")
    assert replicas["default"] >= 3
    assert "var.replicas >= 3" in replicas["validation"][0]["condition"]
    spec = one(module, "kubernetes_deployment_v1")["spec"][0]
    assert spec["replicas"] == "${var.replicas}"


def test_pinned_to_on_demand_nodes_and_spread(module: dict[str, Any]) -> None:
    pod = one(module, "kubernetes_deployment_v1")["spec"][0]["template"][0]["spec"][0]
    required = pod["affinity"][0]["node_affinity"][0][
        "required_during_scheduling_ignored_during_execution"][0]
    expressions = required["node_selector_term"][0]["match_expressions"]
    labels = local(module, "spot_node_labels")
    excluded = {e["key"]: e for e in expressions}
    assert set(excluded) == set(SPOT_LABELS)
    for key, spot_value in SPOT_LABELS.items():
        assert excluded[key]["operator"] == "NotIn"
        assert labels[key] == [spot_value]
    keys = {c["topology_key"] for c in pod["topology_spread_constraint"]}
    assert keys == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}


def test_probes_resources_and_security_context(module: dict[str, Any]) -> None:
    pod = one(module, "kubernetes_deployment_v1")["spec"][0]["template"][0]["spec"][0]
    container = pod["container"][0]
    assert container["readiness_probe"][0]["http_get"][0]["path"] == "/readyz"
    assert container["liveness_probe"][0]["http_get"][0]["path"] == "/healthz"
    assert container["resources"][0]["requests"] and container["resources"][0]["limits"]
    security = container["security_context"][0]
    assert security["run_as_non_root"] is True
    assert security["read_only_root_filesystem"] is True
    assert security["allow_privilege_escalation"] is False
    assert security["capabilities"][0]["drop"] == ["ALL"]
    assert pod["security_context"][0]["run_as_non_root"] is True


def test_pdb_and_service(module: dict[str, Any]) -> None:
    pdb = one(module, "kubernetes_pod_disruption_budget_v1")["spec"][0]
    assert pdb["max_unavailable"] == "1"
    port = one(module, "kubernetes_service_v1")["spec"][0]["port"][0]
    assert port["port"] == 443 and port["target_port"] == "${local.container_port}"
    assert local(module, "container_port") == 8443


def test_cert_manager_certificate_and_ca_injection(module: dict[str, Any]) -> None:
    manifests = [m["manifest"] for m in resources(module, "kubernetes_manifest")]
    kinds = {m["kind"] for m in manifests}
    assert kinds == {"Issuer", "Certificate"}
    certificate = next(m for m in manifests if m["kind"] == "Certificate")
    assert certificate["apiVersion"] == "cert-manager.io/v1"
    assert certificate["spec"]["secretName"] == "${local.tls_secret}"
    for kind in WEBHOOK_KINDS:
        annotations = one(module, kind)["metadata"][0]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == "${local.inject_ca_from}"


@pytest.mark.parametrize(("kind", "timeout", "path"), [
    (WEBHOOK_KINDS[0], 3, "/validate"), (WEBHOOK_KINDS[1], 2, "/mutate"),
])
def test_webhook_entries(module: dict[str, Any], kind: str, timeout: int, path: str) -> None:
    entries = webhooks(module, kind)
    assert len(entries) == 2
    default, fail_closed = entries
    assert default["failure_policy"] == "${var.failure_policy}"
    assert variable(module, "failure_policy")["default"] == "Ignore"
    assert fail_closed["failure_policy"] == "Fail"
    for entry in entries:
        assert entry["timeout_seconds"] == timeout
        assert entry["side_effects"] == "NoneOnDryRun"
        assert entry["admission_review_versions"] == ["v1"]
        assert entry["match_policy"] == "Equivalent"
    paths = [entry["client_config"][0]["service"][0]["path"] for entry in entries]
    assert paths == [path, f"{path}/fail-closed"]  # the webhook denies what it cannot judge
    # exactly one entry matches any namespace: NotIn the opt-in label, or In it
    operators = [{e["key"]: e["operator"] for e in entry["namespace_selector"][0][
        "match_expressions"]}["${var.fail_closed_label}"] for entry in entries]
    assert operators == ["NotIn", "In"]


@pytest.mark.parametrize("kind", WEBHOOK_KINDS)
def test_namespace_exclusions(module: dict[str, Any], kind: str) -> None:
    expression = local(module, "excluded_namespaces")
    # distinct(concat([<always excluded>], var.excluded_namespaces))
    always = re.search(r"concat\(\[([^\]]*)\]", expression)
    assert always is not None, expression
    names = {name.strip().strip('"') for name in always.group(1).split(",")}
    assert names == SYSTEM_NAMESPACES | {"var.namespace"}  # and its own namespace
    for entry in webhooks(module, kind):
        expressions = entry["namespace_selector"][0]["match_expressions"]
        by_name = next(e for e in expressions if e["key"] == "kubernetes.io/metadata.name")
        assert by_name["operator"] == "NotIn"
        assert by_name["values"] == "${local.excluded_namespaces}"


@pytest.mark.parametrize("kind", WEBHOOK_KINDS)
def test_rules_cover_only_the_policed_kinds(module: dict[str, Any], kind: str) -> None:
    for entry in webhooks(module, kind):
        covered: dict[str, set[str]] = {}
        for rule in entry["rule"]:
            assert set(rule["operations"]) <= {"CREATE", "UPDATE"}
            assert "*" not in rule["resources"] and "*" not in rule["api_groups"]
            for group in rule["api_groups"]:
                covered.setdefault(group, set()).update(rule["resources"])
        assert covered == POLICED


def test_pods_are_mutated_on_create_only(module: dict[str, Any]) -> None:
    for entry in webhooks(module, WEBHOOK_KINDS[1]):
        pods = next(rule for rule in entry["rule"] if "pods" in rule["resources"])
        assert pods["operations"] == ["CREATE"]


def test_rbac_is_list_watch_on_namespaces_nodes_and_dra_claims(module: dict[str, Any]) -> None:
    role = one(module, "kubernetes_cluster_role_v1")
    rules = role["rule"]
    granted = {(resource, verb) for rule in rules for resource in rule["resources"]
               for verb in rule["verbs"]}
    assert granted == {(r, v) for r in ("namespaces", "nodes", "resourceclaims",
                                        "resourceclaimtemplates") for v in ("list", "watch")}
    # The kinds policies declare for data.inventory (var.inventory_kinds), list/watch only.
    [inventory] = [block["rule"] for block in role["dynamic"]]
    assert inventory["for_each"] == "${var.inventory_kinds}"
    assert inventory["content"][0]["verbs"] == ["list", "watch"]
    for rule in rules:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["api_groups"]
    assert not resources(module, "kubernetes_role_v1")


def test_example_uses_the_module() -> None:
    example = parse(EXAMPLE / "main.tf")
    call = example["module"][0]["gpuwarden_webhook"]
    assert call["source"] == "../../modules/admission-webhook"
    assert call["replicas"] >= 3
