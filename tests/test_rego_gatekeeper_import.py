"""`gpuwarden policies import-gatekeeper`: Gatekeeper library templates, imported unmodified,
answer the library's own suite.yaml cases; spec.match selects the objects evaluated."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.core.model import Category, Resource
from engine.loading.policies import load_policies
from engine.rego.gatekeeper import matches, selector_matches
from engine.rego.inputs import admission_request, request_for_manifest
from engine.rego.policy import RegoProgram
from engine.webhook.caches import StaticLister
from engine.webhook.inventory import Gvk, read_inventory

LIBRARY = Path(__file__).parent / "data" / "gatekeeper"
TEMPLATES = ["requiredlabels", "allowedrepos", "containerlimits", "uniqueingresshost",
             "uniqueserviceselector"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from engine.cli import main; sys.argv[0] = 'gpuwarden'; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).parent.parent)


def _suite_cases() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    cases = []
    for name in TEMPLATES:
        suite = yaml.safe_load((LIBRARY / name / "suite.yaml").read_text())
        for test in suite["tests"]:
            for case in test["cases"]:
                cases.append((name, test, case))
    return cases


def _resource(obj: dict[str, Any]) -> Resource:
    metadata = obj.get("metadata") or {}
    return Resource(id=f"{obj['kind']}/{metadata.get('name')}", provider="kubernetes",
                    category=Category.OTHER, kind=obj["kind"], name=str(metadata.get("name")),
                    namespace=metadata.get("namespace") or ("default" if obj["kind"] != "Namespace"
                                                            else None),
                    raw=obj)


def _use_inventory(program: RegoProgram, objects: list[dict[str, Any]]) -> None:
    """The suite case's `inventory:` objects as data.inventory, built as the webhook builds it
    from listed objects (for the kinds the imported policy declares)."""
    kinds = [Gvk(k.group, k.version, k.kind) for k in program.spec.inventory]
    listed: dict[Gvk, tuple[bool, list[dict[str, Any]]]] = {}
    for obj in objects:
        group, _, version = obj["apiVersion"].rpartition("/")
        listed.setdefault(Gvk(group, version, obj["kind"]), (True, []))[1].append(obj)
    inventory = read_inventory(StaticLister(objects=listed), kinds, dra_claims=False)
    program.use_inventory(inventory.document(kinds), inventory.gap(kinds))


def _violations(program: RegoProgram, parameters: dict[str, Any], obj: dict[str, Any]
                ) -> list[str]:
    resource = _resource(obj)
    if not program.applies("admission", resource):
        return []
    with admission_request(request_for_manifest(obj)):
        messages = program.messages(program.input_for(resource, parameters), "admission")
    return [m.msg for m in messages if m.result == "fail"]


@pytest.mark.parametrize(("name", "test", "case"), _suite_cases(),
                         ids=lambda v: v["name"] if isinstance(v, dict) else v)
def test_library_suite_case(tmp_path: Path, name: str, test: dict[str, Any],
                            case: dict[str, Any]) -> None:
    base = LIBRARY / name
    done = _cli("policies", "import-gatekeeper", str(base / test["template"]),
                str(base / test["constraint"]), "-o", str(tmp_path))
    assert done.returncode == 0, done.stderr
    [policy] = load_policies([str(tmp_path)])
    assert isinstance(policy.rego, RegoProgram)
    obj = yaml.safe_load((base / case["object"]).read_text())
    inventory = [yaml.safe_load((base / path).read_text()) for path in case.get("inventory", [])]
    if policy.rego.spec.inventory:
        _use_inventory(policy.rego, inventory)
    else:
        assert not inventory, "a case with inventory objects for a template without sync data"
    found = _violations(policy.rego, policy.spec.parameters, obj)
    for assertion in case["assertions"]:
        wanted = assertion.get("violations")
        selected = [m for m in found if assertion.get("message", "") in m]
        if wanted in ("yes", True):
            assert selected, (case["name"], found)
        elif wanted in ("no", False):
            assert not selected, (case["name"], found)
        else:
            assert len(selected) == int(wanted), (case["name"], found)


def test_imported_rego_is_the_template_s_own(tmp_path: Path) -> None:
    template = LIBRARY / "allowedrepos" / "template.yaml"
    done = _cli("policies", "import-gatekeeper", str(template),
                str(next((LIBRARY / "allowedrepos" / "samples").rglob("constraint.yaml"))),
                "-o", str(tmp_path))
    assert done.returncode == 0, done.stderr
    rego = yaml.safe_load(template.read_text())["spec"]["targets"][0]["rego"]
    assert (tmp_path / "k8sallowedrepos.rego").read_text() == rego


def test_a_constraint_of_another_kind_is_one_error_line(tmp_path: Path) -> None:
    done = _cli("policies", "import-gatekeeper", str(LIBRARY / "allowedrepos" / "template.yaml"),
                str(next((LIBRARY / "requiredlabels" / "samples").rglob("constraint.yaml"))),
                "-o", str(tmp_path))
    assert done.returncode == 2
    assert "expected a K8sAllowedRepos Constraint" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_a_template_that_is_not_yaml_is_one_error_line(tmp_path: Path) -> None:
    bad = tmp_path / "t.yaml"
    bad.write_text("kind: [unclosed\n")
    done = _cli("policies", "import-gatekeeper", str(bad), str(bad), "-o", str(tmp_path))
    assert done.returncode == 2 and "Traceback" not in done.stderr


def test_a_template_name_cannot_leave_the_output_directory(tmp_path: Path) -> None:
    template = yaml.safe_load((LIBRARY / "allowedrepos" / "template.yaml").read_text())
    template["metadata"]["name"] = "../escaped"
    path = tmp_path / "template.yaml"
    path.write_text(yaml.safe_dump(template))
    constraint = next((LIBRARY / "allowedrepos" / "samples").rglob("constraint.yaml"))
    done = _cli("policies", "import-gatekeeper", str(path), str(constraint),
                "-o", str(tmp_path / "out"))
    assert done.returncode == 2 and "is not a lowercase DNS name" in done.stderr
    assert not (tmp_path / "escaped.rego").exists()


POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "p", "namespace": "team-a", "labels": {"app": "web", "tier": "1"}}}


@pytest.mark.parametrize(("match", "selected"), [
    ({}, True),
    ({"kinds": [{"apiGroups": [""], "kinds": ["Pod"]}]}, True),
    ({"kinds": [{"apiGroups": ["apps"], "kinds": ["Pod"]}]}, False),
    ({"kinds": [{"apiGroups": ["*"], "kinds": ["Deployment"]}]}, False),
    ({"namespaces": ["team-*"]}, True),
    ({"namespaces": ["default"]}, False),
    ({"excludedNamespaces": ["team-a"]}, False),
    ({"labelSelector": {"matchLabels": {"app": "web"}}}, True),
    ({"labelSelector": {"matchLabels": {"app": "db"}}}, False),
    ({"labelSelector": {"matchExpressions": [{"key": "tier", "operator": "In",
                                              "values": ["1", "2"]}]}}, True),
    ({"labelSelector": {"matchExpressions": [{"key": "tier", "operator": "NotIn",
                                              "values": ["1"]}]}}, False),
    ({"labelSelector": {"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}},
     True),
    ({"namespaceSelector": {"matchLabels": {"env": "prod"}}}, False),
])
def test_spec_match(match: dict[str, Any], selected: bool) -> None:
    assert matches(match, POD, "team-a") is selected


def test_namespace_selector_reads_the_namespace_s_labels() -> None:
    selector = {"matchLabels": {"env": "prod"}}
    assert matches({"namespaceSelector": selector}, POD, "team-a", {"env": "prod"})
    assert not matches({"namespaceSelector": selector}, POD, "team-a", {"env": "dev"})
    assert selector_matches({}, {})


# ---------------------------------------------------------------------------- at the webhook


PROD_REPOS = """\
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sAllowedRepos
metadata: {name: prod-repos}
spec:
  enforcementAction: deny
  match:
    kinds: [{apiGroups: [""], kinds: [Pod]}]
    namespaceSelector: {matchLabels: {env: prod}}
  parameters: {repos: ["registry.prod/"]}
"""


@pytest.fixture(scope="module")
def gatekeeper_webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The webhook (plain HTTP on loopback) with two imported library Constraints: owner labels
    on Namespaces, image repositories of Pods in `default`."""
    from engine.core.evaluate import Engine
    from engine.webhook.app import create_app
    from engine.webhook.caches import ClusterCache, StaticLister
    from tests.test_webhook import NAMESPACES, NODES, start_server, wait_until

    out = tmp_path_factory.mktemp("gatekeeper")
    prod = tmp_path_factory.mktemp("constraints") / "prod-constraint.yaml"
    prod.write_text(PROD_REPOS)
    for name, sample, *more in (("requiredlabels", "all-must-have-owner"),
                                ("allowedrepos", "repo-must-be-openpolicyagent", str(prod))):
        base = LIBRARY / name
        done = _cli("policies", "import-gatekeeper", str(base / "template.yaml"),
                    str(base / "samples" / sample / "constraint.yaml"), *more, "-o", str(out))
        assert done.returncode == 0, done.stderr
    engine = Engine(load_policies([str(out), "builtin"]))
    caches = ClusterCache(StaticLister(NAMESPACES, NODES), resync_seconds=3600)
    running = start_server(create_app(engine, caches=caches), None)
    with running.client() as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
        yield client
    running.stop()


def _admit(client: Any, obj: dict[str, Any]) -> dict[str, Any]:
    from tests.test_webhook import post, review

    return post(client, "validate", review(obj))


def _deployment(image: str, namespace: str = "default") -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": image}]}}}}


def test_a_namespace_without_its_owner_label_is_denied(gatekeeper_webhook: Any) -> None:
    bare = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-x"}}
    owned = {"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": "team-x", "labels": {"owner": "alice.agilebank.demo"}}}
    denied = _admit(gatekeeper_webhook, bare)
    assert denied["allowed"] is False
    assert "All namespaces must have an `owner` label" in denied["status"]["message"]
    assert _admit(gatekeeper_webhook, owned)["allowed"] is True


def test_a_deployment_wrapping_a_disallowed_pod_is_denied(gatekeeper_webhook: Any) -> None:
    denied = _admit(gatekeeper_webhook, _deployment("nginx"))
    assert denied["allowed"] is False
    assert "container <web> has an invalid image repo <nginx>" in denied["status"]["message"]
    assert _admit(gatekeeper_webhook, _deployment("openpolicyagent/opa:1.0"))["allowed"] is True


def test_spec_match_namespaces_leave_other_namespaces_alone(gatekeeper_webhook: Any) -> None:
    assert _admit(gatekeeper_webhook, _deployment("nginx", namespace="ml"))["allowed"] is True


def test_a_service_passes_the_pod_constraint(gatekeeper_webhook: Any) -> None:
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "web", "namespace": "default"},
               "spec": {"ports": [{"port": 80}]}}
    assert _admit(gatekeeper_webhook, service)["allowed"] is True


def test_namespace_selector_reads_the_cluster_cache_s_namespace_labels(
        gatekeeper_webhook: Any) -> None:
    denied = _admit(gatekeeper_webhook, _deployment("nginx", namespace="prod-ml"))
    assert denied["allowed"] is False and "[prod-repos]" in denied["status"]["message"]
    allowed = _admit(gatekeeper_webhook, _deployment("registry.prod/web:1", namespace="prod-ml"))
    assert allowed["allowed"] is True
