"""Gatekeeper shapes are checked when they load: a malformed `spec.match` (a wrong type, an
unknown key), non-list `libs`, an unreadable `requires-sync-data` annotation and an `inventory`
where it cannot be filled are one clear error line, never read as absent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.core.errors import InputError
from engine.core.model import Category, Resource
from engine.loading.policies import load_policies
from engine.rego.gatekeeper import judged_resource, matches, read_template, sync_kinds

pytest.importorskip("regorus")
REPO = Path(__file__).resolve().parents[1]
LIBRARY = REPO / "tests" / "data" / "gatekeeper"
MODULE = 'package t\n\nviolation contains {"msg": "x"} if { input.review.object.kind == "Pod" }\n'


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from engine.cli import main; sys.argv[0] = 'gpuwarden'; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO)


def _policy_file(tmp_path: Path, **rego: Any) -> Path:
    (tmp_path / "t.rego").write_text(MODULE)
    block = {"module": "t.rego", "input": "admission", **rego}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "gpuwarden.io/v1", "policies": [{
        "id": "strict", "title": "strict", "severity": "low", "resources": ["workload"],
        "rego": block}]}))
    return path


@pytest.mark.parametrize(("match", "said"), [
    ({"kinds": [{"apiGroups": [""], "kinds": "Pod"}]},
     "kinds[0].kinds: Input should be a valid list"),
    ({"kinds": {"apiGroups": [""]}}, "kinds: Input should be a valid list"),
    ({"namespace": ["ml"]}, "namespace: unknown key"),
    ({"kinds": [{"apiGroup": [""], "kinds": ["Pod"]}]}, "kinds[0].apiGroup: unknown key"),
    ({"labelSelector": {"matchLabels": {"tier": 1}}}, "labelSelector.matchLabels.tier"),
    ({"labelSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
     "operator In needs values"),
    ({"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Exists",
                                              "values": ["x"]}]}}, "takes no values"),
    ({"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Gt",
                                              "values": ["1"]}]}}, "operator"),
    ({"scope": "Namespace"}, "scope"),
    ({"excludedNamespaces": "kube-system"}, "excludedNamespaces"),
    ({"source": "Expanded"}, "source"),
])
def test_a_malformed_match_is_refused_at_load(tmp_path: Path, match: dict[str, Any],
                                              said: str) -> None:
    path = _policy_file(tmp_path, match=match)
    with pytest.raises(InputError) as raised:
        load_policies([str(path)])
    assert said in str(raised.value) and "spec.match" in str(raised.value)
    assert "\n" not in str(raised.value)


def test_the_cli_says_it_in_one_line(tmp_path: Path) -> None:
    path = _policy_file(tmp_path, match={"namespace": ["ml"]})
    manifest = tmp_path / "pod.yaml"
    manifest.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n")
    done = _cli("check-manifests", "--policies", str(path), str(manifest))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "p.yaml:" in done.stderr and "spec.match namespace: unknown key" in done.stderr


def test_a_well_formed_match_loads(tmp_path: Path) -> None:
    match = {"kinds": [{"apiGroups": ["", "apps"], "kinds": ["Pod", "Deployment"]}],
             "scope": "Namespaced", "namespaces": ["ml-*"], "excludedNamespaces": ["kube-*"],
             "labelSelector": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
             "namespaceSelector": {"matchLabels": {"env": "dev"}}, "name": "train*",
             "source": "All"}
    [policy] = load_policies([str(_policy_file(tmp_path, match=match))])
    assert policy.rego is not None


def _constraint(tmp_path: Path, spec: dict[str, Any]) -> Path:
    path = tmp_path / "constraint.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "constraints.gatekeeper.sh/v1beta1",
                                    "kind": "K8sRequiredLabels", "metadata": {"name": "c"},
                                    "spec": spec}))
    return path


def test_import_refuses_a_constraint_with_a_malformed_match(tmp_path: Path) -> None:
    constraint = _constraint(tmp_path, {"match": {"kinds": [{"kinds": "Namespace"}]},
                                        "parameters": {"labels": [{"key": "owner"}]}})
    done = _cli("policies", "import-gatekeeper", str(LIBRARY / "requiredlabels/template.yaml"),
                str(constraint), "-o", str(tmp_path / "out"))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "Constraint c: spec.match kinds[0].kinds" in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("name", "where"), [
    ("allowedrepos", ("spec", "targets", 0)),  # inline rego
    ("requiredlabels", ("spec", "targets", 0, "code", 1, "source")),  # code: [{engine: Rego}]
])
def test_libs_that_are_not_a_list_are_refused(tmp_path: Path, name: str,
                                              where: tuple[Any, ...]) -> None:
    template = yaml.safe_load((LIBRARY / name / "template.yaml").read_text())
    target = template
    for key in where:
        target = target[key]
    target["libs"] = "package lib\n"
    path = tmp_path / "template.yaml"
    path.write_text(yaml.safe_dump(template))
    with pytest.raises(InputError, match="libs must be a list of Rego texts, got str"):
        read_template(path)
    target["libs"] = ["package lib.x\n"]
    path.write_text(yaml.safe_dump(template))
    assert read_template(path).libs == ("package lib.x\n",)


def test_requires_sync_data_becomes_the_inventory_kinds() -> None:
    template = read_template(LIBRARY / "uniqueingresshost/template.yaml")
    assert template.sync == (
        {"group": "extensions", "version": "v1beta1", "kind": "Ingress"},
        {"group": "networking.k8s.io", "version": "v1", "kind": "Ingress"},
        {"group": "networking.k8s.io", "version": "v1beta1", "kind": "Ingress"},
    )
    assert read_template(LIBRARY / "requiredlabels/template.yaml").sync == ()
    for bad in ('"[{"groups": [""]}]"', "not json", '[[{"groups": "", "versions": ["v1"], '
                '"kinds": ["Service"]}]]'):
        with pytest.raises(InputError, match="requires-sync-data"):
            sync_kinds(bad, "t.yaml")


@pytest.mark.parametrize(("rego", "said"), [
    ({"inventory": [{"group": "", "version": "v1", "kind": "Service"}], "evaluator": "remote",
      "opa_url": "http://127.0.0.1:1"}, "inventory (data.inventory"),
    ({"inventory": [{"group": "", "version": "v1"}]}, "kind"),
    ({"inventory": [{"group": "", "version": "v1", "kind": "Service", "name": "x"}]},
     "unknown key 'name'"),
])
def test_an_inventory_that_cannot_be_filled_is_refused(tmp_path: Path, rego: dict[str, Any],
                                                       said: str) -> None:
    with pytest.raises(InputError, match=said.replace("(", r"\(")):
        load_policies([str(_policy_file(tmp_path, **rego))])


def test_data_documents_cannot_set_the_inventory(tmp_path: Path) -> None:
    (tmp_path / "d.json").write_text('{"inventory": {"cluster": {}}}')
    path = _policy_file(tmp_path, data=["d.json"],
                        inventory=[{"group": "", "version": "v1", "kind": "Service"}])
    with pytest.raises(InputError, match="data documents set `inventory`"):
        load_policies([str(path)])


# ---------------------------------------------------------------------------- name, source


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer-1", "namespace": "ml"}}


@pytest.mark.parametrize(("name", "selected"), [
    ("trainer-1", True), ("trainer-*", True), ("*-1", True), ("trainer", False), ("*-2", False)])
def test_match_name(name: str, selected: bool) -> None:
    assert matches({"name": name}, POD, "ml") is selected


def _deployment() -> Resource:
    raw = {"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "namespace": "ml"},
           "spec": {"template": {"metadata": {"labels": {"app": "web"}},
                                 "spec": {"containers": [{"name": "c", "image": "x"}]}}}}
    return Resource(id="Deployment/ml/web", provider="kubernetes", category=Category.OTHER,
                    kind="Deployment", name="web", namespace="ml", raw=raw)


@pytest.mark.parametrize(("source", "pod_kinds", "deployment_kinds"), [
    ("All", "Pod", "Deployment"), ("Original", None, "Deployment"),
    ("Generated", "Pod", None)])
def test_match_source_selects_originals_or_expanded_pods(
        source: str, pod_kinds: str | None, deployment_kinds: str | None) -> None:
    for kind, expected in (("Pod", pod_kinds), ("Deployment", deployment_kinds)):
        judged = judged_resource({"kinds": [{"apiGroups": ["*"], "kinds": [kind]}],
                                  "source": source}, _deployment())
        assert (judged.kind if judged else None) == expected, (source, kind)


# ---------------------------------------------------------------------------- known differences


DECIMAL_MODULE = '''package t

# 0.1 + 0.2 in a comment is not code
violation contains {"msg": "over"} if {
	input.review.object.spec.cost * 1.1 > 10
}

violation contains {"msg": "exact"} if {
	input.review.object.spec.share == 0.3
}

violation contains {"msg": "label 0.1 + 0.2"} if {
	input.review.object.spec.gpus > 0.5
}
'''


def test_decimal_arithmetic_warns_at_load_naming_the_lines(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _policy_file(tmp_path)
    (tmp_path / "t.rego").write_text(DECIMAL_MODULE)
    with caplog.at_level("WARNING", logger="gpuwarden.rego"):
        load_policies([str(path)])
    warned = [r.getMessage() for r in caplog.records if r.name == "gpuwarden.rego"]
    assert [w.split(": warning:")[0].rsplit(":", 1)[1] for w in warned] == ["5", "9"]
    assert all("policy strict: decimal arithmetic" in w for w in warned)


def test_integer_arithmetic_and_margins_do_not_warn(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _policy_file(tmp_path)
    (tmp_path / "t.rego").write_text(MODULE.replace('"Pod" }', '"Pod"; 2 * 3 == 6; 1.5 > 1 }'))
    with caplog.at_level("WARNING", logger="gpuwarden.rego"):
        load_policies([str(path)])
    assert not [r for r in caplog.records if r.name == "gpuwarden.rego"]


def test_the_cli_shows_the_warning_and_goes_on(tmp_path: Path) -> None:
    path = _policy_file(tmp_path)
    (tmp_path / "t.rego").write_text(DECIMAL_MODULE)
    manifest = tmp_path / "pod.yaml"
    manifest.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n")
    done = _cli("check-manifests", "--policies", str(path), str(manifest))
    assert done.returncode == 0, done.stderr
    assert "t.rego:9: warning: policy strict: decimal arithmetic" in done.stderr


def test_an_integer_past_64_bits_warns(tmp_path: Path,
                                       caplog: pytest.LogCaptureFixture) -> None:
    path = _policy_file(tmp_path)
    body = MODULE.replace('"Pod" }', '"Pod"\n  input.review.object.spec.n > 18446744073709551616\n'
                          '  input.review.object.spec.m < 9223372036854775807 }')
    (tmp_path / "t.rego").write_text(body)
    with caplog.at_level("WARNING", logger="gpuwarden.rego"):
        load_policies([str(path)])
    warned = [r.getMessage() for r in caplog.records if r.name == "gpuwarden.rego"]
    assert len(warned) == 1 and "t.rego:4: warning" in warned[0]
    assert "past the 64-bit range" in warned[0]
