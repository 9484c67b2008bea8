"""Terraform plan adapter: reading plan files, normalizing each resource type, locations."""

from __future__ import annotations

import io
import json
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from engine.core.catalog import builtin_catalog
from engine.core.errors import InputError
from engine.core.model import Capacity, Category, Resource, SourceLocation, State
from engine.sources.terraform import (
    SUPPORTED_TYPES,
    check_plan_document,
    module_names,
    plan_resources,
    read_plan,
)
from engine.sources.terraform.locations import apply_locations, locate_resources, location_for

FIXTURES = Path(__file__).parent / "fixtures" / "plans"
TYPE_UNKNOWN = {"instance_type", "gpu", "hourly_usd"}


# --------------------------------------------------------------------------------------------
# Builders: a plan the way `terraform show -json` writes it, one change at a time
# --------------------------------------------------------------------------------------------


def change(
    address: str,
    after: dict[str, Any] | None,
    *,
    actions: tuple[str, ...] = ("create",),
    unknown: Any = None,
    sensitive: Any = None,
    mode: str = "managed",
) -> dict[str, Any]:
    steps = re.sub(r'\[(?:"[^"]*"|[0-9]+)\]', "", address).split(".")
    while steps[0] == "module":
        steps = steps[2:]
    if steps[0] == "data":
        steps = steps[1:]
    return {
        "address": address,
        "mode": mode,
        "type": steps[0],
        "name": steps[1].split("[", 1)[0],
        "provider_name": "registry.terraform.io/hashicorp/aws",
        "change": {
            "actions": list(actions),
            "before": None,
            "after": after,
            "after_unknown": unknown if unknown is not None else {},
            "before_sensitive": False,
            "after_sensitive": sensitive if sensitive is not None else {},
        },
    }


def configured(address: str, expressions: dict[str, Any], **provider: Any) -> dict[str, Any]:
    """A configuration block for a root-module resource (and optionally its provider)."""
    type_, name = address.split(".")[:2]
    provider_name = {"google": "google", "azurerm": "azurerm"}.get(type_.split("_")[0], "aws")
    config: dict[str, Any] = {
        "root_module": {
            "resources": [
                {
                    "address": address,
                    "mode": "managed",
                    "type": type_,
                    "name": name,
                    "provider_config_key": provider_name,
                    "expressions": expressions,
                }
            ]
        }
    }
    if provider:
        config["provider_config"] = {
            provider_name: {"name": provider_name, "expressions": provider}
        }
    return config


def const(value: Any) -> dict[str, Any]:
    return {"constant_value": value}


def plan(*changes: dict[str, Any], configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    document: dict[str, Any] = {
        "format_version": "1.2",
        "terraform_version": "1.9.5",
        "planned_values": {"root_module": {}},
        "resource_changes": list(changes),
    }
    if configuration is not None:
        document["configuration"] = configuration
    return document


def normalized(
    *changes: dict[str, Any], configuration: dict[str, Any] | None = None
) -> dict[str, Resource]:
    found = plan_resources(plan(*changes, configuration=configuration), "plan.json")
    return {resource.id: resource for resource in found}


def only(*changes: dict[str, Any], configuration: dict[str, Any] | None = None) -> Resource:
    """The one non-volume resource the changes produce."""
    found = [
        r
        for r in normalized(*changes, configuration=configuration).values()
        if r.category != Category.VOLUME or r.kind == changes[0]["type"]
    ]
    assert len(found) == 1, [r.id for r in found]
    return found[0]


def write(tmp_path: Path, data: bytes, name: str = "plan.json") -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


MINIMAL_PLAN = {"format_version": "1.2", "resource_changes": []}


# --------------------------------------------------------------------------------------------
# read_plan: encodings and bad input
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoded", "label"),
    [
        (json.dumps(MINIMAL_PLAN).encode("utf-8"), "utf-8"),
        (b"\xef\xbb\xbf" + json.dumps(MINIMAL_PLAN).encode("utf-8"), "utf-8 BOM"),
        (b"\xff\xfe" + json.dumps(MINIMAL_PLAN).encode("utf-16-le"), "utf-16-le BOM"),
        (b"\xfe\xff" + json.dumps(MINIMAL_PLAN).encode("utf-16-be"), "utf-16-be BOM"),
        (json.dumps(MINIMAL_PLAN).encode("utf-16-le"), "utf-16-le no BOM"),
        (json.dumps(MINIMAL_PLAN).encode("utf-16-be"), "utf-16-be no BOM"),
        (json.dumps(MINIMAL_PLAN).encode("utf-32"), "utf-32 BOM"),
        (json.dumps(MINIMAL_PLAN, indent=2).replace("\n", "\r\n").encode(), "CRLF"),
    ],
)
def test_read_plan_decodes_every_encoding(tmp_path: Path, encoded: bytes, label: str) -> None:
    assert read_plan(write(tmp_path, encoded)) == MINIMAL_PLAN, label


def test_read_plan_keeps_non_ascii_text_through_utf16(tmp_path: Path) -> None:
    document = {**MINIMAL_PLAN, "variables": {"owner": {"value": "Zoë — équipe ML"}}}
    encoded = b"\xff\xfe" + json.dumps(document, ensure_ascii=False).encode("utf-16-le")
    assert read_plan(write(tmp_path, encoded))["variables"]["owner"]["value"] == "Zoë — équipe ML"


def test_read_plan_reads_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    stdin = io.TextIOWrapper(io.BytesIO(json.dumps(MINIMAL_PLAN).encode()))
    monkeypatch.setattr(sys, "stdin", stdin)
    assert read_plan("-") == MINIMAL_PLAN


def test_read_plan_names_stdin_in_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    with pytest.raises(InputError, match=r"^<stdin>: empty file"):
        read_plan("-")


def test_read_plan_accepts_integers_beyond_64_bits(tmp_path: Path) -> None:
    document = {**MINIMAL_PLAN, "variables": {"n": {"value": 2**70}}}
    assert read_plan(write(tmp_path, json.dumps(document).encode()))["variables"]["n"]["value"] == (
        2**70
    )


BAD_INPUTS: list[tuple[str, bytes, str]] = [
    ("empty", b"", "empty file"),
    ("whitespace", b"  \n\t\r\n", "empty file"),
    ("zip plan", b"PK\x03\x04\x14\x00\x00\x00\x08\x00tfplan", "binary plan; run `terraform show"),
    ("gzip", b"\x1f\x8b\x08\x00\x00\x00\x00\x00", "gzip"),
    ("binary", b"\x00\x00\x01\x02\x03\x04\x00\x05", "binary file"),
    ("not json", b'resource "aws_instance" "x" {\n}\n', "invalid JSON"),
    (
        "truncated",
        json.dumps({"format_version": "1.2", "resource_changes": [{"a": 1}]}, indent=2).encode()[
            :-9
        ],
        "truncated",
    ),
    ("list", b"[1, 2, 3]", "expected a JSON object, found a list"),
    ("string", b'"plan"', "expected a JSON object, found a string"),
    (
        "state via show",
        json.dumps({"format_version": "1.0", "values": {"root_module": {}}}).encode(),
        "state file, not a plan",
    ),
    (
        "raw tfstate",
        json.dumps({"version": 4, "serial": 3, "lineage": "x", "resources": []}).encode(),
        "state file, not a plan",
    ),
    ("other json", b'{"hello": "world"}', "not a Terraform plan"),
    (
        "format 2.0",
        json.dumps({"format_version": "2.0", "resource_changes": []}).encode(),
        "unsupported plan format_version '2.0'",
    ),
    (
        "format garbage",
        json.dumps({"format_version": "v1", "resource_changes": []}).encode(),
        "unsupported plan format_version",
    ),
    (
        "format number",
        json.dumps({"format_version": 1.0, "resource_changes": []}).encode(),
        "unsupported plan format_version",
    ),
    (
        "changes not a list",
        json.dumps({"format_version": "1.0", "resource_changes": {}}).encode(),
        "resource_changes must be a list",
    ),
    ("bad utf-8", b'{"format_version": "1.2",\n"x": "\xff\xfe\xfa"}', "not valid UTF-8"),
    ("deep nesting", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (
        "plan -json log",
        b'{"@level":"info","@message":"Terraform 1.9.5","type":"version"}\n'
        b'{"@level":"info","@message":"Plan: 1 to add","type":"change_summary"}\n',
        "streamed log of `terraform plan -json`",
    ),
]


@pytest.mark.parametrize(("label", "data", "message"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_plan_files_raise_one_line_naming_the_file(
    tmp_path: Path, label: str, data: bytes, message: str
) -> None:
    path = write(tmp_path, data, name="bad-plan.json")
    with pytest.raises(InputError) as caught:
        read_plan(path)
    text = str(caught.value)
    assert text.startswith(path), text
    assert message in text, text
    assert "\n" not in text


def test_invalid_json_error_carries_the_line_number(tmp_path: Path) -> None:
    path = write(tmp_path, b'{\n  "format_version": "1.2",\n  "resource_changes": [,]\n}\n')
    with pytest.raises(InputError) as caught:
        read_plan(path)
    assert caught.value.line == 3
    assert str(caught.value).startswith(f"{path}:3: invalid JSON")


def test_truncated_plan_reports_the_last_line(tmp_path: Path) -> None:
    text = json.dumps(json.load((FIXTURES / "aws-gpu-plan.json").open()), indent=2)
    cut = text[: len(text) // 2]
    path = write(tmp_path, cut.encode())
    with pytest.raises(InputError, match="truncated") as caught:
        read_plan(path)
    assert caught.value.line == cut.count("\n") + 1


def test_missing_file_and_directory_are_input_errors(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.json")
    with pytest.raises(InputError, match=r"nope\.json: cannot read plan: no such file"):
        read_plan(missing)
    with pytest.raises(InputError, match="is a directory"):
        read_plan(str(tmp_path))


@pytest.mark.parametrize("version", ["0.1", "0.2", "1.0", "1.2", "1.10"])
def test_supported_format_versions(version: str) -> None:
    check_plan_document({"format_version": version, "resource_changes": []}, "p.json")


def test_plan_without_changes_but_planned_values_is_a_plan() -> None:
    assert plan_resources({"format_version": "1.2", "planned_values": {}}, "p.json") == []


def test_plan_resources_validates_a_document_it_did_not_read() -> None:
    with pytest.raises(InputError, match=r"^snapshot\.yaml#plan: this is a Terraform state"):
        plan_resources({"values": {}}, "snapshot.yaml#plan")


# --------------------------------------------------------------------------------------------
# Plan structure: which changes count, broken envelopes
# --------------------------------------------------------------------------------------------

P3 = {"instance_type": "p3.2xlarge", "tags": {"team": "a"}}


@pytest.mark.parametrize(
    "actions", [("create",), ("update",), ("delete", "create"), ("create", "delete")]
)
def test_creates_updates_and_both_replace_orders_are_evaluated(actions: tuple[str, ...]) -> None:
    resource = only(change("aws_instance.gpu", P3, actions=actions))
    assert resource.state == State.PLANNED
    assert resource.instance_type == "p3.2xlarge"


@pytest.mark.parametrize("actions", [("delete",), ("read",), ("no-op",), ("forget",)])
def test_deletes_reads_noops_and_forgets_are_skipped(actions: tuple[str, ...]) -> None:
    after = None if actions == ("delete",) else P3
    assert normalized(change("aws_instance.gpu", after, actions=actions)) == {}


def test_data_sources_and_unmapped_types_are_skipped() -> None:
    found = normalized(
        change("data.aws_instance.gpu", P3, actions=("read",), mode="data"),
        change("data.aws_instance.also", P3, mode="data"),
        change("aws_iam_role.role", {"name": "r"}),
    )
    assert found == {}
    assert "aws_iam_role" not in SUPPORTED_TYPES
    assert {"aws_instance", "google_compute_instance", "azurerm_kubernetes_cluster_node_pool"} <= (
        SUPPORTED_TYPES
    )


def test_addresses_keep_modules_count_and_for_each_keys() -> None:
    addresses = [
        "module.train.aws_instance.gpu[0]",
        'module.a["x.y"].module.b[2].aws_instance.gpu["k.1"]',
        "aws_instance.plain",
    ]
    found = normalized(*(change(a, P3) for a in addresses))
    instances = {r.id for r in found.values() if r.category == Category.INSTANCE}
    assert instances == set(addresses)
    assert {r.name for r in found.values() if r.category == Category.INSTANCE} == set(addresses)


def test_module_names_parse_keys_with_dots_and_quotes() -> None:
    assert module_names('module.a["x.y"].module.b[2]') == ["a", "b"]
    assert module_names("module.a") == ["a"]
    assert module_names("aws_instance.x") is None


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (["not an object"], r"resource_changes\[0\] must be an object"),
        ([{"type": "aws_instance"}], r"resource_changes\[0\] has no address"),
        ([{"address": "aws_instance.x", "change": []}], r"aws_instance\.x: 'change' must be"),
        ([{"address": "aws_instance.x", "change": {"actions": "create"}}], "list of strings"),
        (
            [
                {
                    "address": "aws_instance.x",
                    "type": "aws_instance",
                    "change": {"actions": ["create"], "after": [1]},
                }
            ],
            r"aws_instance\.x: change\.after must be an object",
        ),
    ],
)
def test_broken_change_envelopes_name_the_change(changes: list[Any], message: str) -> None:
    with pytest.raises(InputError, match=message) as caught:
        plan_resources({"format_version": "1.0", "resource_changes": changes}, "plan.json")
    assert str(caught.value).startswith("plan.json: ")


# --------------------------------------------------------------------------------------------
# aws_instance, aws_spot_instance_request: capacity, type, tags, disks
# --------------------------------------------------------------------------------------------

SPOT_MARKET = [{"market_type": "spot", "spot_options": []}]


def test_aws_instance_spot_market_options_is_spot() -> None:
    resource = only(change("aws_instance.gpu", {**P3, "instance_market_options": SPOT_MARKET}))
    assert resource.capacity == Capacity.SPOT
    assert resource.provider == "aws" and resource.category == Category.INSTANCE


def test_aws_instance_without_market_options_is_on_demand() -> None:
    resource = only(change("aws_instance.gpu", {**P3, "instance_market_options": []}))
    assert resource.capacity == Capacity.ON_DEMAND
    assert "capacity" not in resource.unknown


def test_aws_instance_capacity_block_is_reserved_not_spot() -> None:
    market = [{"market_type": "capacity-block", "spot_options": []}]
    resource = only(change("aws_instance.gpu", {**P3, "instance_market_options": market}))
    assert resource.capacity == Capacity.RESERVED


def test_aws_instance_market_options_left_to_provider_is_on_demand() -> None:
    resource = only(
        change("aws_instance.gpu", P3, unknown={"instance_market_options": True}),
        configuration=configured("aws_instance.gpu", {"instance_type": const("p3.2xlarge")}),
    )
    assert resource.capacity == Capacity.ON_DEMAND


def test_aws_instance_market_type_not_known_yet_is_unknown() -> None:
    resource = only(
        change(
            "aws_instance.gpu",
            {**P3, "instance_market_options": [{"spot_options": []}]},
            unknown={"instance_market_options": [{"market_type": True}]},
        )
    )
    assert resource.capacity == Capacity.UNKNOWN
    assert "capacity" in resource.unknown


def test_aws_instance_market_options_unknown_without_configuration_is_unknown() -> None:
    resource = only(change("aws_instance.gpu", P3, unknown={"instance_market_options": True}))
    assert resource.capacity == Capacity.UNKNOWN
    assert resource.is_unknown("capacity")


def test_aws_instance_gpu_and_price_come_from_the_catalog() -> None:
    resource = only(change("aws_instance.gpu", {"instance_type": "p4d.24xlarge"}))
    spec = builtin_catalog().instance("p4d.24xlarge")
    assert spec is not None and resource.gpu is not None
    assert resource.gpu.model == spec.gpu_model and resource.gpu.count == spec.gpu_count
    assert resource.hourly_usd == spec.on_demand_usd_hr
    assert resource.has_gpu


def test_aws_instance_non_gpu_type_has_no_gpu() -> None:
    resource = only(change("aws_instance.web", {"instance_type": "t3.micro"}))
    assert resource.gpu is None and not resource.has_gpu and resource.unknown == frozenset()


def test_aws_instance_type_unknown_marks_type_gpu_and_price() -> None:
    resource = only(
        change("aws_instance.gpu", {"instance_type": None}, unknown={"instance_type": True})
    )
    assert resource.instance_type is None and resource.gpu is None
    assert resource.unknown >= TYPE_UNKNOWN


def test_aws_instance_type_from_a_launch_template_in_the_plan() -> None:
    configuration = configured(
        "aws_instance.gpu",
        {"launch_template": [{"id": {"references": ["aws_launch_template.lt.id"]}}]},
    )
    configuration["root_module"]["resources"].append(
        {
            "address": "aws_launch_template.lt",
            "mode": "managed",
            "type": "aws_launch_template",
            "name": "lt",
            "provider_config_key": "aws",
            "expressions": {},
        }
    )
    found = normalized(
        change(
            "aws_instance.gpu",
            {"instance_type": None, "launch_template": [{"version": "$Latest"}]},
            unknown={
                "instance_type": True,
                "instance_market_options": True,
                "launch_template": [{"id": True}],
            },
        ),
        change(
            "aws_launch_template.lt",
            {"instance_type": "g5.xlarge", "instance_market_options": SPOT_MARKET},
            actions=("no-op",),
        ),
        configuration=configuration,
    )
    instance = found["aws_instance.gpu"]
    assert instance.instance_type == "g5.xlarge" and instance.capacity == Capacity.SPOT
    assert not (TYPE_UNKNOWN & instance.unknown)


def test_aws_spot_instance_request_is_always_spot() -> None:
    resource = only(change("aws_spot_instance_request.batch", {"instance_type": "g4dn.xlarge"}))
    assert resource.capacity == Capacity.SPOT and resource.category == Category.INSTANCE


def test_tags_all_is_preferred_over_tags() -> None:
    after = {**P3, "tags": {"team": "a"}, "tags_all": {"team": "a", "cost-center": "cc-1"}}
    assert only(change("aws_instance.gpu", after)).tags == {"team": "a", "cost-center": "cc-1"}


def test_tags_without_tags_all_on_old_providers() -> None:
    assert only(change("aws_instance.gpu", {**P3, "tags": {"team": 7}})).tags == {"team": "7"}


def test_unknown_tags_all_merges_constant_provider_default_tags() -> None:
    after = {**P3, "tags": {"team": "a"}}
    configuration = configured(
        "aws_instance.gpu", {}, default_tags=[{"tags": const({"project": "p", "team": "z"})}]
    )
    resource = only(
        change("aws_instance.gpu", after, unknown={"tags_all": True}), configuration=configuration
    )
    assert resource.tags == {"project": "p", "team": "a"}
    assert "tags" not in resource.unknown


def test_unknown_tags_all_without_default_tags_is_just_tags() -> None:
    after = {**P3, "tags": {"team": "a"}}
    resource = only(
        change("aws_instance.gpu", after, unknown={"tags_all": True}),
        configuration=configured("aws_instance.gpu", {}, region=const("eu-west-1")),
    )
    assert resource.tags == {"team": "a"} and resource.unknown == frozenset()
    assert resource.region == "eu-west-1"


def test_unknown_tags_all_with_computed_default_tags_is_unknown() -> None:
    configuration = configured(
        "aws_instance.gpu", {}, default_tags=[{"tags": {"references": ["local.tags"]}}]
    )
    resource = only(
        change("aws_instance.gpu", {**P3, "tags": None}, unknown={"tags_all": True}),
        configuration=configuration,
    )
    assert "tags" in resource.unknown


def test_unknown_tags_all_without_configuration_is_unknown() -> None:
    resource = only(change("aws_instance.gpu", {**P3, "tags": None}, unknown={"tags_all": True}))
    assert "tags" in resource.unknown


def test_one_unknown_tag_value_is_marked_by_key() -> None:
    after = {**P3, "tags": {"team": "a", "owner": None}, "tags_all": {"team": "a", "owner": None}}
    resource = only(
        change(
            "aws_instance.gpu",
            after,
            unknown={"tags": {"owner": True}, "tags_all": {"owner": True}},
        )
    )
    assert resource.tags["team"] == "a" and "owner" in resource.tags
    assert resource.is_unknown("tags.owner") and not resource.is_unknown("tags.team")


def test_aws_instance_region_from_availability_zone() -> None:
    after = {**P3, "availability_zone": "us-gov-west-1b"}
    assert only(change("aws_instance.gpu", after)).region == "us-gov-west-1"


def test_root_volume_encryption_true_false_and_unset() -> None:
    found = normalized(
        change(
            "aws_instance.a",
            {**P3, "root_block_device": [{"encrypted": True, "kms_key_id": "arn:key"}]},
        ),
        change("aws_instance.b", {**P3, "root_block_device": [{"encrypted": False}]}),
        change(
            "aws_instance.c",
            {**P3, "root_block_device": [{"volume_size": 8}]},
            unknown={"root_block_device": [{"encrypted": True, "kms_key_id": True}]},
        ),
        change("aws_instance.d", P3, unknown={"root_block_device": True}),
    )
    a, b = (
        found["aws_instance.a.root_block_device[0]"],
        found["aws_instance.b.root_block_device[0]"],
    )
    c, d = (
        found["aws_instance.c.root_block_device[0]"],
        found["aws_instance.d.root_block_device[0]"],
    )
    assert (a.encrypted, a.customer_key, a.category) == (True, True, Category.VOLUME)
    assert (b.encrypted, b.customer_key) == (False, False) and "encrypted" not in b.unknown
    for volume in (c, d):
        assert volume.encrypted is None and {"encrypted", "customer_key"} <= volume.unknown
    assert a.kind == "aws_instance.root_block_device"
    assert a.tags == {"team": "a"}


def test_kms_key_reference_to_a_new_key_counts_as_a_customer_key() -> None:
    expressions = {
        "root_block_device": [
            {"encrypted": const(True), "kms_key_id": {"references": ["aws_kms_key.k.arn"]}}
        ]
    }
    found = normalized(
        change(
            "aws_instance.a",
            {**P3, "root_block_device": [{"encrypted": True}]},
            unknown={"root_block_device": [{"kms_key_id": True}]},
        ),
        configuration=configured("aws_instance.a", expressions),
    )
    volume = found["aws_instance.a.root_block_device[0]"]
    assert volume.customer_key is True and volume.unknown == frozenset()


def test_kms_key_left_to_the_provider_is_the_default_key() -> None:
    found = normalized(
        change(
            "aws_instance.a",
            {**P3, "root_block_device": [{"encrypted": True}]},
            unknown={"root_block_device": [{"kms_key_id": True}]},
        ),
        configuration=configured(
            "aws_instance.a", {"root_block_device": [{"encrypted": const(True)}]}
        ),
    )
    assert found["aws_instance.a.root_block_device[0]"].customer_key is False


def test_ebs_block_devices_become_volumes() -> None:
    after = {
        **P3,
        "root_block_device": [{"encrypted": True}],
        "ebs_block_device": [
            {"device_name": "/dev/sdf", "encrypted": False},
            {"device_name": "/dev/sdg", "encrypted": True},
        ],
    }
    found = normalized(change("aws_instance.a", after))
    assert found["aws_instance.a.ebs_block_device[0]"].encrypted is False
    assert found["aws_instance.a.ebs_block_device[1]"].encrypted is True
    assert len(found) == 4


# --------------------------------------------------------------------------------------------
# Sensitive values never leave the adapter
# --------------------------------------------------------------------------------------------

SECRET = "hunter2-TOP-SECRET-9f8e7d"


def assert_never_leaks(resources: list[Resource] | dict[str, Resource], secret: str) -> None:
    values = resources.values() if isinstance(resources, dict) else resources
    for resource in values:
        assert secret not in repr(resource)
        assert secret not in resource.model_dump_json()
        assert secret not in str(resource.raw)


def test_sensitive_tag_value_is_blanked_and_unknown() -> None:
    after = {**P3, "tags": {"owner": SECRET}, "tags_all": {"owner": SECRET, "team": "a"}}
    found = normalized(
        change(
            "aws_instance.gpu",
            after,
            sensitive={"tags": {"owner": True}, "tags_all": {"owner": True}},
        )
    )
    resource = found["aws_instance.gpu"]
    assert resource.tags["owner"] == "(sensitive)" and resource.is_unknown("tags.owner")
    assert resource.raw["tags"]["owner"] == "(sensitive)"
    assert_never_leaks(found, SECRET)


def test_sensitive_instance_type_is_treated_as_unknown() -> None:
    found = normalized(
        change("aws_instance.gpu", {"instance_type": SECRET}, sensitive={"instance_type": True})
    )
    assert found["aws_instance.gpu"].unknown >= TYPE_UNKNOWN
    assert_never_leaks(found, SECRET)


def test_whole_object_sensitive_does_not_crash_or_leak() -> None:
    found = normalized(change("aws_instance.gpu", {"instance_type": SECRET}, sensitive=True))
    assert found["aws_instance.gpu"].unknown >= TYPE_UNKNOWN
    assert_never_leaks(found, SECRET)


def test_secret_attributes_are_blanked_in_old_plans_without_sensitivity() -> None:
    after = {
        "vm_size": "Standard_NC24s_v3",
        "os_profile": [{"admin_password": SECRET, "admin_username": "me"}],
        "storage_os_disk": [{"name": "os"}],
    }
    found = normalized(change("azurerm_virtual_machine.vm", after))
    assert found["azurerm_virtual_machine.vm"].raw["os_profile"][0]["admin_password"] == (
        "(sensitive)"
    )
    assert_never_leaks(found, SECRET)


def test_sensitive_disk_key_counts_as_a_customer_key_without_leaking() -> None:
    after = {
        "machine_type": "n1-standard-4",
        "boot_disk": [{"disk_encryption_key_raw": SECRET, "kms_key_self_link": None}],
    }
    found = normalized(
        change(
            "google_compute_instance.vm",
            after,
            sensitive={"boot_disk": [{"disk_encryption_key_raw": True}]},
        )
    )
    assert found["google_compute_instance.vm.boot_disk[0]"].customer_key is True
    assert_never_leaks(found, SECRET)


@pytest.mark.parametrize("name", ["aws-gpu-plan.json", "azure-gpu-plan.json"])
def test_fixture_secrets_stay_in_the_plan(name: str) -> None:
    path = FIXTURES / name
    text = path.read_text()
    secret = "s3cr3t-owner-token-77" if name.startswith("aws") else "Sup3r-S3cret-Admin-Passw0rd!"
    assert secret in text  # the plan itself holds it, as real plans do
    assert_never_leaks(plan_resources(read_plan(str(path)), name), secret)


# --------------------------------------------------------------------------------------------
# Launch templates and configurations, autoscaling groups
# --------------------------------------------------------------------------------------------


def test_launch_template_capacity_type_disks_and_instance_tags() -> None:
    after = {
        "instance_type": "p5.48xlarge",
        "instance_market_options": SPOT_MARKET,
        "tags": {"component": "lt"},
        "tag_specifications": [
            {"resource_type": "instance", "tags": {"team": "r", "project": "v"}},
            {"resource_type": "volume", "tags": {"backup": "daily"}},
        ],
        "block_device_mappings": [
            {"device_name": "/dev/xvda", "ebs": [{"encrypted": "true", "kms_key_id": "arn:k"}]},
            {"device_name": "/dev/xvdb", "ebs": [{"encrypted": "false"}]},
            {"device_name": "/dev/xvdc", "ebs": [{"encrypted": ""}]},
            {"device_name": "/dev/xvdd", "virtual_name": "ephemeral0", "ebs": []},
        ],
    }
    found = normalized(change("aws_launch_template.gpu", after))
    template = found["aws_launch_template.gpu"]
    assert template.category == Category.LAUNCH_TEMPLATE and template.capacity == Capacity.SPOT
    assert template.tags == {"component": "lt", "team": "r", "project": "v"}
    assert template.gpu is not None and template.gpu.count == 8
    disks = [found[f"aws_launch_template.gpu.block_device_mappings[{i}]"] for i in range(3)]
    assert [(d.encrypted, d.customer_key) for d in disks] == [
        (True, True),
        (False, False),
        (None, None),
    ]
    assert "aws_launch_template.gpu.block_device_mappings[3]" not in found


def test_launch_template_without_market_options_is_on_demand() -> None:
    template = only(
        change(
            "aws_launch_template.lt", {"instance_type": "g5.xlarge", "instance_market_options": []}
        )
    )
    assert template.capacity == Capacity.ON_DEMAND


def test_launch_configuration_spot_price_means_spot() -> None:
    found = normalized(
        change(
            "aws_launch_configuration.spot", {"instance_type": "g5.xlarge", "spot_price": "0.50"}
        ),
        change("aws_launch_configuration.od", {"instance_type": "g5.xlarge", "spot_price": None}),
    )
    assert found["aws_launch_configuration.spot"].capacity == Capacity.SPOT
    assert found["aws_launch_configuration.od"].capacity == Capacity.ON_DEMAND


def mixed_policy(base: Any = 0, percentage: Any = 0, override: str = "g5.12xlarge") -> list[Any]:
    distribution = [
        {"on_demand_base_capacity": base, "on_demand_percentage_above_base_capacity": percentage}
    ]
    return [
        {
            "instances_distribution": distribution,
            "launch_template": [
                {
                    "launch_template_specification": [{"launch_template_name": "x"}],
                    "override": [{"instance_type": override}],
                }
            ],
        }
    ]


@pytest.mark.parametrize(
    ("base", "percentage", "expected"),
    [
        (0, 0, Capacity.SPOT),
        (1, 0, Capacity.ON_DEMAND),
        (0, 50, Capacity.ON_DEMAND),
        (None, 0, Capacity.SPOT),
        (0, None, Capacity.ON_DEMAND),
    ],
)
def test_asg_mixed_instances_distribution(base: Any, percentage: Any, expected: Capacity) -> None:
    group = only(
        change(
            "aws_autoscaling_group.g",
            {
                "min_size": 1,
                "desired_capacity": 2,
                "mixed_instances_policy": mixed_policy(base, percentage),
            },
        )
    )
    assert group.capacity == expected
    assert group.instance_type == "g5.12xlarge" and group.count == 2
    assert group.category == Category.AUTOSCALING_GROUP


def test_asg_mixed_instances_without_distribution_is_on_demand() -> None:
    policy = mixed_policy()
    del policy[0]["instances_distribution"]
    group = only(
        change("aws_autoscaling_group.g", {"min_size": 1, "mixed_instances_policy": policy})
    )
    assert group.capacity == Capacity.ON_DEMAND


def test_asg_distribution_not_known_yet_is_unknown() -> None:
    policy = mixed_policy(percentage=None)
    resource = only(
        change(
            "aws_autoscaling_group.g",
            {"min_size": 1, "mixed_instances_policy": policy},
            unknown={
                "mixed_instances_policy": [
                    {"instances_distribution": [{"on_demand_percentage_above_base_capacity": True}]}
                ]
            },
        )
    )
    assert resource.capacity == Capacity.UNKNOWN and "capacity" in resource.unknown


def test_asg_launch_template_found_by_literal_name() -> None:
    found = normalized(
        change("aws_autoscaling_group.g", {"min_size": 3, "launch_template": [{"name": "gpu-lt"}]}),
        change(
            "aws_launch_template.t",
            {
                "name": "gpu-lt",
                "instance_type": "p5.48xlarge",
                "instance_market_options": SPOT_MARKET,
                "tag_specifications": [{"resource_type": "instance", "tags": {"team": "t"}}],
            },
        ),
    )
    group = found["aws_autoscaling_group.g"]
    assert (group.instance_type, group.capacity, group.count) == ("p5.48xlarge", Capacity.SPOT, 3)
    assert group.tags == {"team": "t"}


def test_asg_launch_configuration_found_by_name() -> None:
    found = normalized(
        change("aws_autoscaling_group.g", {"min_size": 1, "launch_configuration": "lc-1"}),
        change(
            "aws_launch_configuration.lc",
            {"name": "lc-1", "instance_type": "g4dn.xlarge", "spot_price": "0.2"},
        ),
    )
    group = found["aws_autoscaling_group.g"]
    assert (group.instance_type, group.capacity) == ("g4dn.xlarge", Capacity.SPOT)


def test_asg_without_a_launch_source_in_the_plan_is_unknown() -> None:
    group = only(change("aws_autoscaling_group.g", {"min_size": 1, "launch_configuration": "ext"}))
    assert group.capacity == Capacity.UNKNOWN
    assert TYPE_UNKNOWN | {"capacity"} <= group.unknown


def test_asg_tags_both_shapes_and_propagation() -> None:
    tag_blocks = [
        {"key": "team", "value": "a", "propagate_at_launch": True},
        {"key": "hidden", "value": "x", "propagate_at_launch": False},
        {"key": "gpuwarden-exempt", "value": "all", "propagate_at_launch": False},
    ]
    tag_maps = [
        {"key": "project", "value": "p", "propagate_at_launch": "true"},
        {"key": "cost-center", "value": "c", "propagate_at_launch": "false"},
    ]
    group = only(
        change(
            "aws_autoscaling_group.g",
            {
                "min_size": 1,
                "tag": tag_blocks,
                "tags": tag_maps,
                "mixed_instances_policy": mixed_policy(),
            },
        )
    )
    assert group.tags == {"team": "a", "gpuwarden-exempt": "all", "project": "p"}


def test_asg_desired_capacity_left_to_aws_falls_back_to_min_size() -> None:
    group = only(
        change(
            "aws_autoscaling_group.g",
            {"min_size": 2, "mixed_instances_policy": mixed_policy()},
            unknown={"desired_capacity": True},
        ),
        configuration=configured("aws_autoscaling_group.g", {"min_size": const(2)}),
    )
    assert group.count == 2 and "count" not in group.unknown


def test_asg_desired_capacity_computed_is_unknown_count() -> None:
    group = only(
        change(
            "aws_autoscaling_group.g",
            {"min_size": 2, "mixed_instances_policy": mixed_policy()},
            unknown={"desired_capacity": True},
        ),
        configuration=configured(
            "aws_autoscaling_group.g",
            {"desired_capacity": {"references": ["terraform_data.n.output"]}},
        ),
    )
    assert group.count == 2 and "count" in group.unknown


# --------------------------------------------------------------------------------------------
# EKS node groups
# --------------------------------------------------------------------------------------------

NODE_GROUP = {
    "cluster_name": "ml",
    "instance_types": ["g5.xlarge"],
    "labels": {"gpu": "yes"},
    "scaling_config": [{"desired_size": 3, "min_size": 1, "max_size": 5}],
    "tags": {"team": "t"},
}


@pytest.mark.parametrize(
    ("value", "expected"),
    [("SPOT", Capacity.SPOT), ("ON_DEMAND", Capacity.ON_DEMAND), (None, Capacity.ON_DEMAND)],
)
def test_eks_capacity_type(value: str | None, expected: Capacity) -> None:
    group = only(change("aws_eks_node_group.ng", {**NODE_GROUP, "capacity_type": value}))
    assert group.capacity == expected and group.category == Category.NODE_GROUP
    assert (group.count, group.cluster, group.instance_type) == (3, "ml", "g5.xlarge")
    assert group.tags == {"gpu": "yes", "team": "t"}


def test_eks_capacity_type_left_to_aws_is_on_demand_but_computed_is_unknown() -> None:
    unknown = {"capacity_type": True}
    left = only(
        change("aws_eks_node_group.ng", NODE_GROUP, unknown=unknown),
        configuration=configured("aws_eks_node_group.ng", {}),
    )
    computed = only(
        change("aws_eks_node_group.ng", NODE_GROUP, unknown=unknown),
        configuration=configured(
            "aws_eks_node_group.ng", {"capacity_type": {"references": ["var.capacity"]}}
        ),
    )
    assert left.capacity == Capacity.ON_DEMAND
    assert computed.capacity == Capacity.UNKNOWN and "capacity" in computed.unknown


def test_eks_default_instance_type_and_unknown_desired_size() -> None:
    after = {
        **NODE_GROUP,
        "instance_types": None,
        "capacity_type": "SPOT",
        "scaling_config": [{"min_size": 2, "max_size": 4}],
        "launch_template": [],
    }
    group = only(
        change(
            "aws_eks_node_group.ng",
            after,
            unknown={"instance_types": True, "scaling_config": [{"desired_size": True}]},
        ),
        configuration=configured(
            "aws_eks_node_group.ng",
            {"scaling_config": [{"desired_size": {"references": ["var.size"]}}]},
        ),
    )
    assert group.instance_type == "t3.medium" and not group.has_gpu
    assert group.count == 2 and "count" in group.unknown


# --------------------------------------------------------------------------------------------
# Volumes and buckets
# --------------------------------------------------------------------------------------------


def test_ebs_volume_encryption_states() -> None:
    found = normalized(
        change("aws_ebs_volume.cmk", {"encrypted": True, "kms_key_id": "arn:aws:kms:k"}),
        change("aws_ebs_volume.aws_key", {"encrypted": True}, unknown={"kms_key_id": True}),
        change("aws_ebs_volume.plain", {"encrypted": False}),
        change("aws_ebs_volume.unset", {"size": 1}, unknown={"encrypted": True}),
    )
    assert (found["aws_ebs_volume.cmk"].encrypted, found["aws_ebs_volume.cmk"].customer_key) == (
        True,
        True,
    )
    assert found["aws_ebs_volume.plain"].encrypted is False
    assert found["aws_ebs_volume.unset"].encrypted is None
    assert found["aws_ebs_volume.unset"].is_unknown("encrypted")
    # no configuration in this plan: whether kms_key_id is given cannot be told
    assert found["aws_ebs_volume.aws_key"].is_unknown("customer_key")


def bucket_encryption(algorithm: str, key: str | None) -> dict[str, Any]:
    return {
        "rule": [
            {
                "apply_server_side_encryption_by_default": [
                    {"sse_algorithm": algorithm, "kms_master_key_id": key}
                ]
            }
        ]
    }


def test_s3_bucket_without_configuration_is_sse_s3() -> None:
    bucket = only(change("aws_s3_bucket.b", {"bucket": "b"}))
    assert (bucket.encrypted, bucket.customer_key, bucket.category) == (
        True,
        False,
        Category.BUCKET,
    )


def test_s3_encryption_resource_joined_by_reference_and_by_name() -> None:
    configuration = configured(
        "aws_s3_bucket_server_side_encryption_configuration.by_ref",
        {"bucket": {"references": ["aws_s3_bucket.a.id", "aws_s3_bucket.a"]}},
    )
    found = normalized(
        change("aws_s3_bucket.a", {"bucket": "bucket-a"}),
        change("aws_s3_bucket.b", {"bucket": "bucket-b"}),
        change("aws_s3_bucket.c", {"bucket": "bucket-c"}),
        change(
            "aws_s3_bucket_server_side_encryption_configuration.by_ref",
            {"bucket": None, **bucket_encryption("aws:kms", "arn:k")},
            unknown={"bucket": True},
        ),
        change(
            "aws_s3_bucket_server_side_encryption_configuration.by_name",
            {"bucket": "bucket-b", **bucket_encryption("AES256", None)},
        ),
        configuration=configuration,
    )
    assert found["aws_s3_bucket.a"].customer_key is True
    assert found["aws_s3_bucket.b"].customer_key is False
    assert found["aws_s3_bucket.c"].customer_key is False
    assert {r.id for r in found.values()} == {
        "aws_s3_bucket.a",
        "aws_s3_bucket.b",
        "aws_s3_bucket.c",
    }


def test_s3_inline_encryption_aws_managed_kms_key_is_not_a_customer_key() -> None:
    inline = [bucket_encryption("aws:kms", None)]
    bucket = only(change("aws_s3_bucket.b", {"server_side_encryption_configuration": inline}))
    assert bucket.customer_key is False and bucket.encrypted is True


def test_s3_inline_encryption_not_known_yet() -> None:
    bucket = only(
        change(
            "aws_s3_bucket.b",
            {"bucket": "b"},
            unknown={"server_side_encryption_configuration": True},
        ),
        configuration=configured(
            "aws_s3_bucket.b", {"server_side_encryption_configuration": [{"rule": [{}]}]}
        ),
    )
    assert bucket.customer_key is None and bucket.is_unknown("customer_key")


# --------------------------------------------------------------------------------------------
# SageMaker
# --------------------------------------------------------------------------------------------


def test_sagemaker_notebook_uses_the_ec2_type_for_gpu_and_price() -> None:
    notebook = only(
        change(
            "aws_sagemaker_notebook_instance.nb",
            {"instance_type": "ml.p3.2xlarge", "kms_key_id": "arn:k"},
        )
    )
    spec = builtin_catalog().instance("p3.2xlarge")
    assert spec is not None and notebook.gpu is not None
    assert notebook.instance_type == "ml.p3.2xlarge" and notebook.gpu.model == spec.gpu_model
    assert notebook.hourly_usd == spec.on_demand_usd_hr
    assert (notebook.category, notebook.encrypted, notebook.customer_key) == (
        Category.NOTEBOOK,
        True,
        True,
    )


def test_sagemaker_endpoint_configuration_one_resource_per_instance_variant() -> None:
    after = {
        "kms_key_arn": None,
        "production_variants": [
            {"variant_name": "a", "instance_type": "ml.g5.xlarge", "initial_instance_count": 3},
            {
                "variant_name": "s",
                "instance_type": None,
                "serverless_config": [{"max_concurrency": 1}],
            },
            {"variant_name": "b", "instance_type": "ml.p3.2xlarge", "initial_instance_count": 1},
        ],
        "shadow_production_variants": [
            {"instance_type": "ml.g5.xlarge", "initial_instance_count": 1}
        ],
    }
    found = normalized(change("aws_sagemaker_endpoint_configuration.ep", after))
    assert set(found) == {
        "aws_sagemaker_endpoint_configuration.ep.production_variants[0]",
        "aws_sagemaker_endpoint_configuration.ep.production_variants[2]",
        "aws_sagemaker_endpoint_configuration.ep.shadow_production_variants[0]",
    }
    first = found["aws_sagemaker_endpoint_configuration.ep.production_variants[0]"]
    assert (first.count, first.category, first.customer_key) == (3, Category.ENDPOINT, False)
    assert first.raw["production_variants"] == [after["production_variants"][0]]


@pytest.mark.parametrize(
    ("flag", "expected"),
    [(True, Capacity.SPOT), (False, Capacity.ON_DEMAND), (None, Capacity.ON_DEMAND)],
)
def test_sagemaker_training_job_managed_spot(flag: bool | None, expected: Capacity) -> None:
    after = {
        "enable_managed_spot_training": flag,
        "resource_config": [
            {"instance_type": "ml.p4d.24xlarge", "instance_count": 4, "volume_kms_key_id": None}
        ],
    }
    job = only(change("aws_sagemaker_training_job.job", after))
    assert job.capacity == expected and job.count == 4 and job.category == Category.TRAINING_JOB
    assert job.gpu is not None and job.gpu.count == 8 and job.customer_key is False


# --------------------------------------------------------------------------------------------
# Google Cloud
# --------------------------------------------------------------------------------------------


def gce(machine: str, **fields: Any) -> dict[str, Any]:
    return {"machine_type": machine, "zone": "us-central1-a", "boot_disk": [{}], **fields}


def test_gce_machine_type_with_built_in_gpus() -> None:
    vm = only(change("google_compute_instance.vm", gce("a2-highgpu-1g")))
    assert vm.provider == "gcp" and vm.gpu is not None and vm.gpu.count == 1
    assert vm.region == "us-central1"


def test_gce_attached_accelerators_use_the_accelerator_catalog() -> None:
    accelerators = [{"type": "projects/p/zones/z/acceleratorTypes/nvidia-tesla-t4", "count": 2}]
    vm = only(
        change("google_compute_instance.vm", gce("n1-standard-8", guest_accelerator=accelerators))
    )
    t4 = builtin_catalog().accelerator("nvidia-tesla-t4")
    assert t4 is not None and t4.usd_hr_per_gpu is not None and vm.gpu is not None
    assert (vm.gpu.model, vm.gpu.count) == (t4.gpu_model, 2.0)
    assert vm.hourly_usd == pytest.approx(2 * t4.usd_hr_per_gpu)


def test_gce_unknown_accelerator_type_still_counts_gpus() -> None:
    vm = only(
        change(
            "google_compute_instance.vm",
            gce("n1-standard-8", guest_accelerator=[{"type": "x-new", "count": 4}]),
        )
    )
    assert vm.gpu is not None and vm.gpu.count == 4 and vm.gpu.model is None
    assert vm.hourly_usd is None and vm.has_gpu


@pytest.mark.parametrize(
    ("scheduling", "expected"),
    [
        ([{"provisioning_model": "SPOT", "preemptible": True}], Capacity.SPOT),
        ([{"provisioning_model": "STANDARD", "preemptible": True}], Capacity.SPOT),
        ([{"provisioning_model": "STANDARD", "preemptible": False}], Capacity.ON_DEMAND),
        ([], Capacity.ON_DEMAND),
    ],
)
def test_gce_scheduling(scheduling: list[Any], expected: Capacity) -> None:
    vm = only(change("google_compute_instance.vm", gce("g2-standard-4", scheduling=scheduling)))
    assert vm.capacity == expected


def test_gce_computed_defaults_do_not_become_unknowns() -> None:
    vm = only(
        change(
            "google_compute_instance.vm",
            gce("n1-standard-4"),
            unknown={"scheduling": True, "guest_accelerator": True},
        ),
        configuration=configured(
            "google_compute_instance.vm", {"machine_type": const("n1-standard-4")}
        ),
    )
    assert vm.capacity == Capacity.ON_DEMAND and vm.gpu is None and vm.unknown == frozenset()


def test_gce_configured_accelerators_not_known_yet_are_unknown() -> None:
    vm = only(
        change(
            "google_compute_instance.vm",
            gce("n1-standard-4", guest_accelerator=[{"type": "t"}]),
            unknown={"guest_accelerator": [{"count": True}]},
        ),
        configuration=configured(
            "google_compute_instance.vm",
            {
                "guest_accelerator": [
                    {"count": {"references": ["terraform_data.n.output"]}, "type": const("t")}
                ]
            },
        ),
    )
    assert {"gpu", "hourly_usd"} <= vm.unknown and vm.gpu is None


def test_gce_labels_prefer_terraform_labels() -> None:
    labels = {
        "labels": {"team": "a"},
        "terraform_labels": {"team": "a", "managed": "tf"},
        "effective_labels": {"team": "a", "managed": "tf", "goog-x": "1"},
    }
    assert only(change("google_compute_instance.vm", gce("n1-standard-1", **labels))).tags == {
        "team": "a",
        "managed": "tf",
    }
    no_terraform = {**labels, "terraform_labels": None}
    vm = only(
        change(
            "google_compute_instance.vm",
            gce("n1-standard-1", **no_terraform),
            unknown={"terraform_labels": True},
        )
    )
    assert vm.tags == {"team": "a", "managed": "tf", "goog-x": "1"}


def test_gce_disks_are_platform_encrypted_with_optional_cmek() -> None:
    after = gce(
        "n1-standard-1",
        boot_disk=[{"kms_key_self_link": "projects/p/cryptoKeys/k"}],
        attached_disk=[{"source": "d", "kms_key_self_link": None}],
    )
    found = normalized(change("google_compute_instance.vm", after))
    boot = found["google_compute_instance.vm.boot_disk[0]"]
    attached = found["google_compute_instance.vm.attached_disk[0]"]
    assert (boot.encrypted, boot.customer_key) == (True, True)
    assert (attached.encrypted, attached.customer_key) == (True, False)


def test_gce_disk_resource() -> None:
    disk = only(
        change(
            "google_compute_disk.d",
            {
                "zone": "europe-west4-a",
                "disk_encryption_key": [{"kms_key_self_link": "projects/p/k", "raw_key": None}],
            },
        )
    )
    assert (disk.encrypted, disk.customer_key, disk.region) == (True, True, "europe-west4")


def node_pool(node_config: list[Any] | None, **fields: Any) -> dict[str, Any]:
    return {"cluster": "c", "location": "us-central1-a", "node_config": node_config, **fields}


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        ({"spot": True}, Capacity.SPOT),
        ({"preemptible": True}, Capacity.SPOT),
        ({"spot": False, "preemptible": False}, Capacity.ON_DEMAND),
        ({}, Capacity.ON_DEMAND),
    ],
)
def test_gke_node_pool_capacity(node: dict[str, Any], expected: Capacity) -> None:
    config = [{"machine_type": "a2-highgpu-8g", **node}]
    pool = only(change("google_container_node_pool.p", node_pool(config, node_count=2)))
    assert pool.capacity == expected and pool.category == Category.NODE_GROUP
    assert pool.count == 2 and pool.cluster == "c" and pool.gpu is not None


def test_gke_node_pool_accelerators_labels_and_zones() -> None:
    config = [
        {
            "machine_type": "n1-standard-8",
            "spot": True,
            "guest_accelerator": [{"type": "nvidia-tesla-t4", "count": 1}],
            "labels": {"workload": "x", "team": "k8s"},
            "resource_labels": {"team": "gcp"},
        }
    ]
    pool = only(
        change(
            "google_container_node_pool.p",
            node_pool(config, node_count=3, node_locations=["us-central1-a", "us-central1-b"]),
        )
    )
    assert pool.gpu is not None and pool.gpu.count == 1 and pool.count == 6
    assert pool.tags == {"workload": "x", "team": "gcp"}


def test_gke_node_pool_autoscaling_minimum_when_node_count_is_computed() -> None:
    pool = only(
        change(
            "google_container_node_pool.p",
            node_pool(
                [{"machine_type": "g2-standard-4"}],
                autoscaling=[{"min_node_count": 2, "max_node_count": 9}],
            ),
            unknown={"node_count": True},
        ),
        configuration=configured(
            "google_container_node_pool.p", {"autoscaling": [{"min_node_count": const(2)}]}
        ),
    )
    assert pool.count == 2 and "count" not in pool.unknown


def test_gke_node_pool_default_node_config() -> None:
    pool = only(
        change(
            "google_container_node_pool.p",
            node_pool(None, node_count=1),
            unknown={"node_config": True},
        ),
        configuration=configured("google_container_node_pool.p", {}),
    )
    assert pool.instance_type == "e2-medium" and pool.capacity == Capacity.ON_DEMAND
    assert not pool.has_gpu and pool.unknown == frozenset()


def test_gke_node_config_not_known_yet() -> None:
    pool = only(
        change(
            "google_container_node_pool.p",
            node_pool(None, node_count=1),
            unknown={"node_config": True},
        ),
        configuration=configured(
            "google_container_node_pool.p",
            {"node_config": [{"machine_type": {"references": ["terraform_data.x.output"]}}]},
        ),
    )
    assert TYPE_UNKNOWN | {"tags"} <= pool.unknown
    # the configured block sets neither `spot` nor `preemptible`: standard provisioning
    assert pool.capacity == Capacity.ON_DEMAND


# --------------------------------------------------------------------------------------------
# Azure
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("vm_type", "priority", "expected"),
    [
        ("azurerm_linux_virtual_machine", "Spot", Capacity.SPOT),
        ("azurerm_windows_virtual_machine", "Regular", Capacity.ON_DEMAND),
        ("azurerm_linux_virtual_machine", None, Capacity.ON_DEMAND),
    ],
)
def test_azure_vm_priority(vm_type: str, priority: str | None, expected: Capacity) -> None:
    after = {
        "size": "Standard_NC24ads_A100_v4",
        "priority": priority,
        "location": "westeurope",
        "tags": {"team": "t"},
        "os_disk": [{"disk_encryption_set_id": None}],
    }
    found = normalized(change(f"{vm_type}.vm", after))
    vm, disk = found[f"{vm_type}.vm"], found[f"{vm_type}.vm.os_disk[0]"]
    assert vm.capacity == expected and vm.provider == "azure" and vm.region == "westeurope"
    assert vm.gpu is not None and vm.gpu.count == 1
    assert (disk.encrypted, disk.customer_key) == (True, False)


def test_azure_os_disk_with_encryption_set_is_a_customer_key() -> None:
    after = {"size": "Standard_NC4as_T4_v3", "os_disk": [{"disk_encryption_set_id": "/sub/des"}]}
    found = normalized(change("azurerm_linux_virtual_machine.vm", after))
    assert found["azurerm_linux_virtual_machine.vm.os_disk[0]"].customer_key is True


def test_aks_node_pool_priority_autoscaling_and_labels() -> None:
    after = {
        "vm_size": "Standard_NC4as_T4_v3",
        "priority": "Spot",
        "enable_auto_scaling": True,
        "min_count": 2,
        "max_count": 5,
        "node_count": None,
        "node_labels": {"pool": "gpu"},
        "tags": {"team": "t"},
        "kubernetes_cluster_id": "/sub/aks",
    }
    pool = only(
        change("azurerm_kubernetes_cluster_node_pool.gpu", after, unknown={"node_count": True}),
        configuration=configured("azurerm_kubernetes_cluster_node_pool.gpu", {}),
    )
    assert (pool.capacity, pool.count, pool.cluster) == (Capacity.SPOT, 2, "/sub/aks")
    assert pool.tags == {"pool": "gpu", "team": "t"} and pool.category == Category.NODE_GROUP


def test_aks_node_pool_regular_fixed_count() -> None:
    pool = only(
        change(
            "azurerm_kubernetes_cluster_node_pool.gpu",
            {"vm_size": "Standard_NC24s_v3", "priority": "Regular", "node_count": 3},
        )
    )
    assert (pool.capacity, pool.count) == (Capacity.ON_DEMAND, 3)
    assert pool.gpu is not None and pool.gpu.count == 4


def test_legacy_azure_vm_and_managed_disk() -> None:
    found = normalized(
        change(
            "azurerm_virtual_machine.vm",
            {
                "vm_size": "Standard_NC24s_v3",
                "storage_os_disk": [{"name": "os"}],
                "storage_data_disk": [{"name": "d"}],
            },
        ),
        change("azurerm_managed_disk.d", {"disk_encryption_set_id": "/sub/des"}),
    )
    assert found["azurerm_virtual_machine.vm"].capacity == Capacity.ON_DEMAND
    assert found["azurerm_virtual_machine.vm.storage_data_disk[0]"].encrypted is True
    assert found["azurerm_managed_disk.d"].customer_key is True


# --------------------------------------------------------------------------------------------
# The crafted GPU plans end to end
# --------------------------------------------------------------------------------------------


def fixture_resources(name: str) -> dict[str, Resource]:
    path = str(FIXTURES / name)
    return {r.id: r for r in plan_resources(read_plan(path), path)}


def test_aws_fixture_plan() -> None:
    found = fixture_resources("aws-gpu-plan.json")
    trainer = found["module.train.aws_instance.gpu[1]"]
    assert trainer.capacity == Capacity.SPOT and trainer.tags["cost-center"] == "cc-1234"
    assert found["module.train.aws_instance.gpu[1].root_block_device[0]"].customer_key is True
    inference = found["aws_instance.inference"]
    assert inference.capacity == Capacity.ON_DEMAND and inference.tags["env"] == "prod"
    assert found["aws_instance.inference.root_block_device[0]"].encrypted is False
    assert found["aws_instance.inference.ebs_block_device[0]"].encrypted is None
    assert found["aws_instance.mystery"].unknown >= TYPE_UNKNOWN
    assert found["aws_spot_instance_request.batch"].capacity == Capacity.SPOT
    mixed = found["aws_autoscaling_group.mixed"]
    assert (mixed.capacity, mixed.instance_type, mixed.count) == (Capacity.SPOT, "g5.12xlarge", 3)
    assert "internal-note" not in mixed.tags and mixed.tags["project"] == "vision"
    pool = found["aws_autoscaling_group.from_template"]
    assert (pool.instance_type, pool.capacity, pool.count) == ("g6.xlarge", Capacity.ON_DEMAND, 2)
    assert found["aws_eks_node_group.ondemand_gpu"].capacity == Capacity.ON_DEMAND
    assert found["aws_eks_node_group.spot_gpu"].count == 4
    assert found['module.train.module.storage.aws_ebs_volume.checkpoint["shard-a"]'].encrypted
    assert found["aws_s3_bucket.datasets"].customer_key is True
    assert found["aws_s3_bucket.logs"].customer_key is False
    assert found["aws_sagemaker_training_job.finetune"].capacity == Capacity.SPOT
    skipped = {
        "aws_instance.retired",
        "aws_instance.unchanged",
        "aws_iam_role.sagemaker",
        "aws_launch_template.ondemand",
        "data.aws_ec2_instance_type_offering.best",
    }
    assert not skipped & set(found)
    assert all(r.region == "us-east-1" for r in found.values())


def test_gcp_fixture_plan() -> None:
    found = fixture_resources("gcp-gpu-plan.json")
    assert found["google_compute_instance.a100"].capacity == Capacity.SPOT
    assert found["google_compute_instance.a100.boot_disk[0]"].customer_key is True
    t4 = found["google_compute_instance.t4_box"]
    assert t4.gpu is not None and t4.gpu.count == 2 and t4.region == "europe-west4"
    assert t4.tags["managed-by"] == "terraform"
    assert {"gpu", "hourly_usd"} <= found["google_compute_instance.pending"].unknown
    l4 = found["google_container_node_pool.l4_spot"]
    assert (l4.capacity, l4.count, l4.tags["cost-center"]) == (Capacity.SPOT, 2, "cc-3")
    assert found["google_container_node_pool.a100_ondemand"].capacity == Capacity.ON_DEMAND
    assert "google_compute_instance.old" not in found


def test_azure_fixture_plan() -> None:
    found = fixture_resources("azure-gpu-plan.json")
    assert found["azurerm_linux_virtual_machine.trainer"].capacity == Capacity.SPOT
    assert found["azurerm_linux_virtual_machine.trainer.os_disk[0]"].customer_key is True
    assert found["azurerm_windows_virtual_machine.viz"].capacity == Capacity.ON_DEMAND
    assert found["azurerm_kubernetes_cluster_node_pool.t4_spot"].count == 1
    assert found["azurerm_kubernetes_cluster_node_pool.v100"].tags == {"env": "production"}
    assert found["azurerm_managed_disk.datasets"].customer_key is False


def test_a_plan_with_5000_changes_is_read_and_normalized(tmp_path: Path) -> None:
    """Size, not speed: timing lives in bench/bench_check_plan.py."""
    base = json.loads((FIXTURES / "aws-gpu-plan.json").read_text())
    changes = []
    while len(changes) < 5000:
        for item in base["resource_changes"]:
            copy = json.loads(json.dumps(item))
            copy["address"] = f"module.m{len(changes)}.{item['address']}"
            copy["module_address"] = f"module.m{len(changes)}"
            if copy["change"]["after"]:
                copy["change"]["after"]["user_data"] = "#!/bin/bash\n" + "x" * 3000
            changes.append(copy)
    big = {**base, "resource_changes": changes[:5000]}
    path = write(tmp_path, json.dumps(big).encode())
    assert Path(path).stat().st_size > 15_000_000
    resources = plan_resources(read_plan(path), path)
    assert len(resources) > 5000
    ids = {r.id for r in resources}
    assert "module.m0.module.train.aws_instance.gpu[0]" in ids
    assert "module.m0.aws_instance.retired" not in ids  # deletes stay skipped at scale


# --------------------------------------------------------------------------------------------
# Source locations (--tf-dir)
# --------------------------------------------------------------------------------------------


def write_tf(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def tf_dir(tmp_path: Path) -> Path:
    root = tmp_path / "infra"
    write_tf(
        root,
        "main.tf",
        """terraform {
  required_version = ">= 1.5"
}

resource "aws_instance" "inference" {
  instance_type = "g5.xlarge"
}

module "train" {
  source = "./modules/train"
  ami_id = "ami-1"
}

module "registry" {
  source  = "terraform-aws-modules/ec2-instance/aws"
  version = "5.6.0"
}
""",
    )
    write_tf(
        root,
        "modules/train/main.tf",
        """# resource "aws_instance" "commented" {
resource "aws_instance" "gpu" {
  count         = 2
  instance_type = "p4d.24xlarge"
}

module "storage" {
  source = "../storage"
}
""",
    )
    write_tf(
        root, "modules/storage/volumes.tf", '\n\n  resource  "aws_ebs_volume"  "checkpoint"  {\n}\n'
    )
    write_tf(
        root,
        "other-stack/gpu.tf",
        'resource "aws_launch_template" "gpu" {\n}\nresource "aws_instance" "inference" {\n}\n',
    )
    write_tf(root, ".terraform/modules/registry/main.tf", 'resource "aws_instance" "this" {\n}\n')
    return root


def test_locate_resources_follows_local_modules(tf_dir: Path) -> None:
    locations = locate_resources(tf_dir)
    root = tf_dir.as_posix()
    assert locations["aws_instance.inference"] == SourceLocation(file=f"{root}/main.tf", line=5)
    assert locations["module.train.aws_instance.gpu"] == SourceLocation(
        file=f"{root}/modules/train/main.tf", line=2
    )
    assert locations["module.train.module.storage.aws_ebs_volume.checkpoint"] == SourceLocation(
        file=f"{root}/modules/storage/volumes.tf", line=3
    )
    assert "**.aws_launch_template.gpu" in locations
    assert "**.aws_instance.inference" not in locations  # in two places: ambiguous
    assert not any("this" in key for key in locations)  # .terraform is not scanned


def test_apply_locations_to_plan_resources(tf_dir: Path) -> None:
    resources = list(fixture_resources("aws-gpu-plan.json").values())
    located = {r.id: r for r in apply_locations(resources, locate_resources(tf_dir))}
    root = tf_dir.as_posix()
    gpu = located["module.train.aws_instance.gpu[1]"]
    # at the module call in the caller's file; the block in the module is the definition
    assert gpu.location == SourceLocation(
        file=f"{root}/main.tf",
        line=9,
        definition=SourceLocation(file=f"{root}/modules/train/main.tf", line=2),
    )
    disk = located["module.train.aws_instance.gpu[1].root_block_device[0]"]
    assert disk.location == gpu.location
    assert located["aws_launch_template.gpu"].location is not None
    nested = located['module.train.module.storage.aws_ebs_volume.checkpoint["shard-a"]'].location
    assert nested == SourceLocation(
        file=f"{root}/main.tf",
        line=9,
        definition=SourceLocation(file=f"{root}/modules/storage/volumes.tf", line=3),
    )
    assert located["aws_eks_node_group.spot_gpu"].location is None


def test_location_for_relative_directory(tf_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tf_dir.parent)
    locations = locate_resources(Path("infra"))
    found = location_for('module.train.aws_instance.gpu["a.b"]', locations)
    assert found == SourceLocation(
        file="infra/main.tf",
        line=9,
        definition=SourceLocation(file="infra/modules/train/main.tf", line=2),
    )
    registry = location_for("module.registry.aws_instance.this[0]", locations)
    assert registry == SourceLocation(file="infra/main.tf", line=14)  # its block is not here
    assert location_for("data.aws_ami.x", locations) is None
    assert location_for("nonsense", locations) is None


def test_locate_resources_counts_lines_of_any_line_ending(tmp_path: Path) -> None:
    write_tf(tmp_path, "crlf.tf", '# windows\r\n\r\nresource "aws_ebs_volume" "crlf" {\r\n}\r\n')
    write_tf(tmp_path, "cr.tf", '# classic mac\r\rresource "aws_ebs_volume" "cr" {\r}\r')
    locations = locate_resources(tmp_path)
    assert locations["aws_ebs_volume.crlf"].line == 3
    assert locations["aws_ebs_volume.cr"].line == 3


def test_locate_resources_skips_a_fifo_without_blocking(tf_dir: Path) -> None:
    fifo = tf_dir / "modules" / "train" / "zz.tf"
    os.mkfifo(fifo)  # nobody writes: a blocking read would wait forever
    found: dict[str, Any] = {}
    scan = threading.Thread(target=lambda: found.update(locate_resources(tf_dir)), daemon=True)
    scan.start()
    scan.join(timeout=20)
    if scan.is_alive():  # unblock the reader, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        scan.join(timeout=20)
        pytest.fail("locate_resources blocked on a FIFO")
    assert found["module.train.aws_instance.gpu"].line == 2


def test_locate_resources_needs_a_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a directory"):
        locate_resources(tmp_path / "missing")


def test_plan_from_yaml_with_non_string_tag_keys() -> None:
    resource = only(change("aws_instance.gpu", {"instance_type": "p3.2xlarge", "tags": {1: 2.5}}))
    assert resource.tags == {"1": "2.5"}
