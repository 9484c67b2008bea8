"""Rego policies in the policy pack: loading (errors with file:line), and the findings they give
(same shape as YAML ones, enforcement per door, warn rules, exemptions, scope, costs)."""

from __future__ import annotations

import json
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from engine.core.errors import InputError
from engine.core.evaluate import Engine
from engine.core.model import Resource
from engine.core.policy import policy_file_schema
from engine.loading.policies import builtin_pack_dir, load_policies
from engine.rego.common import RegoModule
from engine.rego.inputs import plan_documents
from engine.rego.policy import input_keys

pytest.importorskip("regorus")

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[1]
REGO_PACK = REPO / "policies" / "rego"

RESOURCE_MODULE = """\
package acme.gpus

import rego.v1

deny contains msg if {
	input.gpu.count > 4
	msg := sprintf("%s holds %d GPUs", [input.name, input.gpu.count])
}

warn contains {"msg": "no owner tag", "severity": "low", "details": {"tag": "owner"}} if {
	not input.tags.owner
}

unknown contains "instance type known after apply" if "instance_type" in input.unknown
"""


def write_policy(tmp_path: Path, rego: dict[str, Any], *, module: str = RESOURCE_MODULE,
                 extra: dict[str, Any] | None = None, name: str = "p.yaml") -> Path:
    (tmp_path / "acme.rego").write_text(module, "utf-8")
    policy = {
        "id": "acme-gpus",
        "title": "ACME GPU rules",
        "severity": "high",
        "resources": ["instance", "workload"],
        "rego": {"module": "acme.rego", **rego},
        "enforcement": {"plan": "deny", "admission": "warn", "runtime": "audit"},
        "cost": "full",
        **(extra or {}),
    }
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"policies": [policy]}, sort_keys=False), "utf-8")
    return path


def instance(make_resource: Any, **fields: Any) -> Resource:
    defaults: dict[str, Any] = {"id": "aws_instance.big", "name": "aws_instance.big",
                                "instance_type": "p4d.24xlarge", "state": "planned",
                                "tags": {"team": "ml"}}
    return make_resource(**{**defaults, **fields})  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------- findings


def test_deny_finding_has_the_yaml_shape(tmp_path: Path, make_resource: Any) -> None:
    engine = Engine(load_policies([str(write_policy(tmp_path, {}))]))
    report = engine.evaluate([instance(make_resource, tags={"owner": "a"})], NOW, door="plan")
    [finding] = report.findings
    assert finding.policy == "acme-gpus" and finding.title == "ACME GPU rules"
    assert (finding.result, finding.enforcement, finding.severity.value) == ("fail", "deny", "high")
    assert finding.message == "aws_instance.big holds 8 GPUs"
    assert finding.resource.id == "aws_instance.big"
    assert finding.estimated_monthly_usd == pytest.approx(21.957642 * 730)  # cost: full
    assert finding.details["rule"] == "deny"
    assert report.summary.failed == 1 and report.summary.by_policy == {"acme-gpus": 1}


def test_warn_rule_warns_at_a_deny_door_and_keeps_its_own_severity(
    tmp_path: Path, make_resource: Any
) -> None:
    engine = Engine(load_policies([str(write_policy(tmp_path, {}))]))
    small = instance(make_resource, instance_type="g5.xlarge", tags={})
    [finding] = engine.evaluate([small], NOW, door="plan").findings
    assert (finding.enforcement, finding.severity.value, finding.message) == (
        "warn", "low", "no owner tag")
    assert finding.details == {"rule": "warn", "tag": "owner"}
    [runtime] = engine.evaluate([small], NOW, door="runtime").findings
    assert runtime.enforcement == "audit"  # warn never raises an audit door


def test_unknown_rule_gives_an_undecided_finding(tmp_path: Path, make_resource: Any) -> None:
    engine = Engine(load_policies([str(write_policy(tmp_path, {}))]))
    pending = instance(make_resource, instance_type=None, unknown=frozenset({"instance_type"}),
                       tags={"owner": "a"})
    [finding] = engine.evaluate([pending], NOW, door="plan").findings
    assert (finding.result, finding.estimated_monthly_usd) == ("unknown", 0.0)
    assert finding.message == "instance type known after apply"


def test_no_message_is_a_pass(tmp_path: Path, make_resource: Any) -> None:
    engine = Engine(load_policies([str(write_policy(tmp_path, {}))]))
    fine = instance(make_resource, instance_type="g5.xlarge", tags={"owner": "a"})
    report = engine.evaluate([fine], NOW, door="plan", show_passed=True)
    assert [f.result for f in report.findings] == ["pass"]
    assert report.summary.passed == 1 and report.summary.findings == 0


def test_exemptions_apply_to_rego_policies(tmp_path: Path, make_resource: Any) -> None:
    path = write_policy(tmp_path, {}, extra={"exempt": ["aws_instance.sandbox*"]})
    engine = Engine(load_policies([str(path)]))
    tagged = instance(make_resource, tags={"gpuwarden-exempt": "acme-gpus"})
    globbed = instance(make_resource, id="aws_instance.sandbox[0]", tags={"owner": "a"})
    report = engine.evaluate([tagged, globbed], NOW, door="plan")
    assert report.findings == [] and report.summary.exempted == 2


def test_off_door_and_categories_are_honoured(tmp_path: Path, make_resource: Any) -> None:
    path = write_policy(tmp_path, {}, extra={"enforcement": {"plan": "off"},
                                             "resources": ["workload"]})
    engine = Engine(load_policies([str(path)]))
    assert engine.evaluate([instance(make_resource)], NOW, door="plan").findings == []
    assert engine.evaluate([instance(make_resource)], NOW, door="runtime").findings == []


def test_scope_condition_narrows_a_rego_policy(tmp_path: Path, make_resource: Any) -> None:
    path = write_policy(tmp_path, {}, extra={"scope": {"production": False}})
    engine = Engine(load_policies([str(path)]))
    prod = instance(make_resource, tags={"env": "prod", "owner": "a"})
    dev = instance(make_resource, tags={"env": "dev", "owner": "a"})
    assert [f.resource.id for f in engine.evaluate([prod, dev], NOW, door="plan").findings] == [
        dev.id]


def test_message_template_can_wrap_the_rego_message(tmp_path: Path, make_resource: Any) -> None:
    path = write_policy(tmp_path, {}, extra={"message": "{{ msg }} ({{ cost | usd }}/month)"})
    engine = Engine(load_policies([str(path)]))
    [finding] = engine.evaluate([instance(make_resource, tags={"owner": "a"})], NOW,
                                door="plan").findings
    assert finding.message == "aws_instance.big holds 8 GPUs ($16,029/month)"


def test_message_objects_can_name_severity_and_details(tmp_path: Path,
                                                       make_resource: Any) -> None:
    module = ('package m\n\nimport rego.v1\n\nviolation contains {"msg": "x", "severity": '
              '"critical", "details": {"why": [1]}} if input.gpu.count > 0\n')
    engine = Engine(load_policies([str(write_policy(tmp_path, {}, module=module))]))
    [finding] = engine.evaluate([instance(make_resource)], NOW, door="plan").findings
    assert finding.severity.value == "critical" and finding.details == {"rule": "violation",
                                                                        "why": [1]}


@pytest.mark.parametrize("value", ['{"no_msg": 1}', "42", '{"msg": 3}'])
def test_malformed_rule_values_are_clear_errors(tmp_path: Path, make_resource: Any,
                                                value: str) -> None:
    module = f"package m\n\nimport rego.v1\n\ndeny contains {value} if true\n"
    engine = Engine(load_policies([str(write_policy(tmp_path, {}, module=module))]))
    with pytest.raises(InputError, match=r"m\.deny must yield strings or objects"):
        engine.evaluate([instance(make_resource)], NOW, door="plan")


def test_invalid_severity_from_rego_is_an_error(tmp_path: Path, make_resource: Any) -> None:
    module = ('package m\n\nimport rego.v1\n\ndeny contains {"msg": "x", "severity": "dire"} '
              "if true\n")
    engine = Engine(load_policies([str(write_policy(tmp_path, {}, module=module))]))
    with pytest.raises(InputError, match="severity 'dire'"):
        engine.evaluate([instance(make_resource)], NOW, door="plan")


# ---------------------------------------------------------------------------- loading


@pytest.mark.parametrize(
    ("rego", "fragment"),
    [
        ({"evaluator": "remote"}, "needs opa_url"),
        ({"opa_url": "http://opa:8181"}, "opa_url and token_env are for evaluator: remote"),
        ({"input": "pod"}, "input"),
        ({"package": "9bad"}, "invalid package"),
        ({"module": "missing.rego"}, "cannot read rego module .*missing.rego"),
        ({"module": "acme.txt"}, "is not a .rego file"),
        ({"package": "other.pkg"}, "no module declares package other.pkg"),
        ({"data": ["nothere.json"]}, "cannot read data document .*nothere.json"),
    ],
)
def test_bad_rego_specs_name_file_and_line(tmp_path: Path, rego: dict[str, Any],
                                           fragment: str) -> None:
    path = write_policy(tmp_path, rego)
    with pytest.raises(InputError, match=fragment) as caught:
        load_policies([str(path)])
    assert caught.value.file == str(path) and caught.value.line is not None


def test_violation_and_rego_together_are_refused(tmp_path: Path) -> None:
    path = write_policy(tmp_path, {}, extra={"violation": {"has-gpu": True}})
    with pytest.raises(InputError, match="either 'violation' or 'rego'"):
        load_policies([str(path)])


def test_package_without_convention_rules_is_refused(tmp_path: Path) -> None:
    path = write_policy(tmp_path, {}, module="package m\n\nimport rego.v1\n\nhelper := 1\n")
    with pytest.raises(InputError, match="defines none of the rules deny, violation, warn"):
        load_policies([str(path)])


def test_parse_error_in_the_module_names_the_module_and_line(tmp_path: Path) -> None:
    path = write_policy(tmp_path, {}, module="package m\n\nimport rego.v1\n\ndeny contains x if {\n"
                        "  x := [1,\n}\n")
    with pytest.raises(InputError) as caught:
        load_policies([str(path)])
    assert caught.value.file == str(tmp_path / "acme.rego") and caught.value.line in (6, 7)


def test_data_documents_merge_and_conflicts_are_refused(tmp_path: Path,
                                                        make_resource: Any) -> None:
    (tmp_path / "a.json").write_text(json.dumps({"acme": {"max": 4}}))
    (tmp_path / "b.yaml").write_text("acme:\n  label: big\n")
    module = ('package m\n\nimport rego.v1\n\ndeny contains data.acme.label if '
              'input.gpu.count > data.acme.max\n')
    path = write_policy(tmp_path, {"data": ["a.json", "b.yaml"]}, module=module)
    [finding] = Engine(load_policies([str(path)])).evaluate([instance(make_resource)], NOW,
                                                              door="plan").findings
    assert finding.message == "big"
    (tmp_path / "c.json").write_text(json.dumps({"acme": {"max": 8}}))
    clash = write_policy(tmp_path, {"data": ["a.json", "c.json"]}, module=module)
    with pytest.raises(InputError, match=r"acme\.max is already set"):
        load_policies([str(clash)])


def test_builtin_catalog_data_document(tmp_path: Path, make_resource: Any) -> None:
    module = ('package m\n\nimport rego.v1\n\ndeny contains sprintf("%d", [n]) if {\n'
              "  n := data.gpuwarden.catalog.instance_types[input.instance_type].gpu_count\n}\n")
    path = write_policy(tmp_path, {"data": ["builtin:catalog"]}, module=module)
    [finding] = Engine(load_policies([str(path)])).evaluate([instance(make_resource)], NOW,
                                                              door="plan").findings
    assert finding.message == "8"


def test_overrides_apply_to_rego_policies(tmp_path: Path, make_resource: Any) -> None:
    path = write_policy(tmp_path, {})
    override = tmp_path / "o.yaml"
    override.write_text("overrides:\n  acme-gpus:\n    severity: low\n"
                        "    enforcement: {plan: warn}\n", "utf-8")
    [policy] = load_policies([str(path), str(override)])
    assert policy.rego is not None and policy.spec.severity.value == "low"
    [finding] = Engine([policy]).evaluate([instance(make_resource, tags={"owner": "a"})], NOW,
                                          door="plan").findings
    assert (finding.enforcement, finding.severity.value) == ("warn", "low")


def test_builtin_pack_leaves_the_rego_examples_out() -> None:
    assert all(p.rego is None for p in load_policies(["builtin"]))
    assert (builtin_pack_dir() / "rego").is_dir()


def test_rego_wrappers_match_the_published_schema() -> None:
    schema = policy_file_schema()
    for path in REGO_PACK.rglob("*.yaml"):
        if not path.stem.endswith("_test"):
            jsonschema.validate(yaml.safe_load(path.read_text("utf-8")), schema)


def test_test_case_files_are_not_policy_files(tmp_path: Path) -> None:
    write_policy(tmp_path, {})
    (tmp_path / "cases_test.yaml").write_text("cases: []\n", "utf-8")
    assert [p.id for p in load_policies([str(tmp_path)])] == ["acme-gpus"]


# ---------------------------------------------------------------------------- input pruning


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("r if input.resource_changes[0]\nq if input.configuration.x", {"resource_changes",
                                                                        "configuration"}),
        ('r if input["planned_values"]', {"planned_values"}),
        ("r if walk(input, x)", None),
        ("r if input[k]", None),
        ("# input.whatever in a comment\nr if input.a", {"a"}),
    ],
)
def test_input_keys_of_plan_policies(text: str, expected: set[str] | None) -> None:
    keys = input_keys([RegoModule("m.rego", "package m\n" + text)])
    assert keys == (frozenset(expected) if expected is not None else None)


def test_plan_policy_sees_only_the_keys_it_reads(tmp_path: Path) -> None:
    module = textwrap.dedent("""\
        package m

        import rego.v1

        deny contains rc.address if some rc in input.resource_changes
        """)
    path = write_policy(tmp_path, {"input": "plan"}, module=module)
    [policy] = load_policies([str(path)])
    assert policy.rego is not None
    plan = {"resource_changes": [{"address": "a"}], "planned_values": {"root_module": {}},
            "prior_state": {}}
    assert list(policy.rego.plan_input(plan)) == ["resource_changes"]
    report = Engine([policy]).evaluate([], NOW, door="plan", documents=plan_documents([plan]))
    assert [(f.message, f.resource.kind, f.resource.id) for f in report.findings] == [
        ("a", "plan", "plan")]
