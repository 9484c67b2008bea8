"""The policy language: loading, validation errors with file:line, operators, logic, overrides."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest
import yaml

from engine.core.catalog import builtin_catalog
from engine.core.conditions import EvalContext, compile_condition
from engine.core.errors import InputError
from engine.core.model import Resource
from engine.core.policy import policy_file_schema
from engine.loading.policies import builtin_pack_dir, load_policies
from tests.conftest import OFF_HOURS

CTX = EvalContext(now=OFF_HOURS, catalog=builtin_catalog())

POLICY = """\
apiVersion: gpuwarden.io/v1
policies:
  - id: big-gpus
    title: No big GPU boxes
    severity: high
    resources: [instance]
    violation:
      field: gpu.count
      op: {op}
      value: {value}
    message: "{{{{ r.name }}}} has {{{{ r.gpu.count }}}} GPUs"
"""


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_unknown_operator_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, POLICY.format(op="inn", value="[1]"))
    with pytest.raises(InputError) as caught:
        load_policies([path])
    assert str(caught.value) == (
        f"{path}:8: policy big-gpus: unknown operator 'inn' (one of: eq, ne, in, not-in, gt, "
        "ge, lt, le, regex, glob, contains, present, absent, empty)"
    )


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("policies:\n  - id: x1\n    title: t\n    severity: huge\n", 4, "severity"),
        ("policies:\n  - id: Bad_Id\n    title: t\n", 2, "invalid policy id"),
        ("policies:\n  - {id: a1, title: t, severity: low, resources: [instance],\n"
         "     violation: {field: name, op: regex, value: '('}, message: m}\n", 3, "invalid regex"),
        ("policies:\n  - id: a1\n    title: t\n    severity: low\n    resources: [instance]\n"
         "    violation:\n      nope: 1\n    message: m\n", 7, "unknown condition 'nope'"),
        ("policies:\n  - id: a1\n    title: t\n    severity: low\n    resources: [instance]\n"
         "    violation: {field: name, op: eq, param: missing}\n    message: m\n", 6,
         "unknown parameter 'missing'"),
        ("policies:\n  - id: a1\n    title: t\n    severity: low\n    resources: [instance]\n"
         "    violation: {field: name}\n    message: m\n    colour: red\n", 8,
         "unknown key 'colour'"),
        ("policies:\n  - id: a1\n    title: t\n    severity: low\n    resources: [instance]\n"
         "    violation: {offhours: {}}\n    message: m\n    parameters:\n"
         "      default_schedule: 'off=(Q,19)'\n      schedule_tag: t\n", 6, "offhours"),
        ("policies: [\n", 2, "invalid YAML"),
        ("policies:\n  - id: a1\n    title: t\n    severity: low\n    resources: [gpu-box]\n"
         "    violation: {field: name}\n    message: m\n", 5, "resources"),
    ],
)
def test_invalid_policies_are_rejected_at_load_with_line(
    tmp_path: Path, text: str, line: int, fragment: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InputError) as caught:
        load_policies([path])
    assert caught.value.file == path
    assert caught.value.line == line
    assert fragment in str(caught.value)


def test_missing_policy_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such policy file"):
        load_policies([str(tmp_path / "nope.yaml")])


@pytest.mark.parametrize(
    ("op", "value", "expected"),
    [
        ("eq", "8", True),
        ("ne", "8", False),
        ("gt", "4", True),
        ("ge", "8", True),
        ("lt", "8", False),
        ("le", "8", True),
        ("in", "[4, 8]", True),
        ("not-in", "[4, 8]", False),
    ],
)
def test_numeric_operators(
    tmp_path: Path, make_resource: Callable[..., Resource], op: str, value: str, expected: bool
) -> None:
    [policy] = load_policies([write(tmp_path, POLICY.format(op=op, value=value))])
    resource = make_resource(instance_type="p4d.24xlarge")
    assert policy.violation.test(resource, CTX) is expected


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ({"field": "name", "op": "regex", "value": "train.*"}, True),
        ({"field": "name", "op": "regex", "value": "rain"}, False),  # full match, not search
        ({"field": "name", "op": "glob", "value": "tr*r"}, True),
        ({"field": "tags.team", "op": "present"}, True),
        ({"field": "tags.project", "op": "absent"}, True),
        ({"field": "tags.gpuwarden.io/owner", "op": "eq", "value": "ml"}, True),
        ({"field": "tags", "op": "empty"}, False),
        ({"field": "raw.Placement.Tenancy", "op": "eq", "value": "default"}, True),
        ({"field": "raw.Missing.Key", "op": "absent"}, True),
        ({"field": "raw.BlockDeviceMappings.0.DeviceName", "op": "eq", "value": "/dev/xvda"}, True),
        ({"field": "capacity", "op": "eq", "value": "on-demand"}, True),
        ({"field": "name", "op": "contains", "value": "rain"}, True),
        ({"not": {"field": "name", "op": "eq", "value": "trainer"}}, False),
        ({"any": [{"field": "name", "op": "eq", "value": "x"}, {"has-gpu": True}]}, True),
        ({"all": [{"field": "name", "op": "eq", "value": "x"}, {"has-gpu": True}]}, False),
    ],
)
def test_condition_forms(
    make_resource: Callable[..., Resource], condition: dict[str, object], expected: bool
) -> None:
    resource = make_resource(
        instance_type="p3.2xlarge",
        capacity="on-demand",
        tags={"team": "ml", "gpuwarden.io/owner": "ml"},
        raw={"Placement": {"Tenancy": "default"},
             "BlockDeviceMappings": [{"DeviceName": "/dev/xvda"}]},
    )
    assert compile_condition(condition, {}).test(resource, CTX) is expected


def test_unknown_values_propagate_through_kleene_logic(
    make_resource: Callable[..., Resource],
) -> None:
    resource = make_resource(instance_type=None, unknown=frozenset({"instance_type", "gpu"}))
    unknown = {"field": "instance_type", "op": "eq", "value": "p3.2xlarge"}
    false = {"field": "name", "op": "eq", "value": "nope"}
    true = {"field": "name", "op": "eq", "value": "trainer"}
    assert compile_condition(unknown, {}).test(resource, CTX) is None
    assert compile_condition({"all": [unknown, false]}, {}).test(resource, CTX) is False
    assert compile_condition({"all": [unknown, true]}, {}).test(resource, CTX) is None
    assert compile_condition({"any": [unknown, true]}, {}).test(resource, CTX) is True
    assert compile_condition({"not": unknown}, {}).test(resource, CTX) is None
    assert compile_condition({"has-gpu": True}, {}).test(resource, CTX) is None


def test_capacity_unknown_is_unknown_not_a_violation(
    make_resource: Callable[..., Resource],
) -> None:
    resource = make_resource(capacity="unknown")
    condition = compile_condition({"field": "capacity", "op": "ne", "value": "spot"}, {})
    assert condition.test(resource, CTX) is None


def test_overrides_change_parameters_enforcement_and_can_disable(tmp_path: Path) -> None:
    override = write(tmp_path, """\
overrides:
  required-cost-tags:
    parameters: {required_tags: [owner]}
    enforcement: {runtime: deny}
    severity: high
  gpu-underutilized: {disabled: true}
""")
    policies = {p.id: p for p in load_policies(["builtin", override])}
    tags = policies["required-cost-tags"]
    assert tags.spec.parameters["required_tags"] == ["owner"]
    assert tags.enforcement("runtime") == "deny"
    assert tags.enforcement("plan") == "deny"  # untouched doors keep their default
    assert tags.spec.severity.value == "high"
    assert "gpu-underutilized" not in policies


def test_override_of_unknown_parameter_is_rejected(tmp_path: Path) -> None:
    override = write(tmp_path, "overrides:\n  gpu-idle:\n    parameters: {treshold: 3}\n")
    with pytest.raises(InputError, match="unknown parameter 'treshold'"):
        load_policies(["builtin", override])


def test_builtin_pack_matches_the_published_schema() -> None:
    schema = policy_file_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    for path in builtin_pack_dir().glob("*.yaml"):
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)


def test_schema_rejects_what_the_loader_rejects() -> None:
    bad = {"policies": [{"id": "x1", "title": "t", "severity": "low", "resources": ["instance"],
                         "violation": {"feild": "name"}, "message": "m"}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, policy_file_schema())


def test_builtin_pack_has_exactly_the_contract_ids() -> None:
    ids = {p.id for p in load_policies(["builtin"])}
    assert ids == {
        "gpu-spot-required", "gpu-mig-for-small-jobs", "gpu-off-hours-shutdown",
        "required-cost-tags", "encryption-at-rest", "gpu-idle", "gpu-underutilized",
        "spot-checkpointing-required", "gpu-jobs-queued", "gpu-right-size", "team-gpu-budget",
        "untrusted-gpu-sandboxed", "shared-gpu-requires-mig", "gpu-namespace-network-policy",
    }


def test_default_enforcement_per_door_is_the_design_table() -> None:
    table = {p.id: tuple(p.enforcement(d) for d in ("plan", "admission", "runtime"))
             for p in load_policies(["builtin"])}
    assert table == {
        "gpu-spot-required": ("deny", "deny", "audit"),
        "gpu-mig-for-small-jobs": ("off", "warn", "audit"),
        "gpu-off-hours-shutdown": ("off", "warn", "deny"),
        "required-cost-tags": ("deny", "deny", "audit"),
        "encryption-at-rest": ("deny", "off", "audit"),
        "gpu-idle": ("off", "off", "deny"),
        "gpu-underutilized": ("off", "off", "audit"),
        "spot-checkpointing-required": ("warn", "warn", "audit"),
        "gpu-jobs-queued": ("off", "deny", "audit"),
        "gpu-right-size": ("off", "off", "audit"),
        "team-gpu-budget": ("deny", "off", "audit"),
        "untrusted-gpu-sandboxed": ("off", "deny", "audit"),
        "shared-gpu-requires-mig": ("off", "deny", "audit"),
        "gpu-namespace-network-policy": ("off", "off", "audit"),
    }
