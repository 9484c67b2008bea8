"""Fuzzing the plan adapter: whatever the input, only `InputError` may escape.

Three kinds of input: arbitrary bytes as a plan file, plans generated from plausible pieces
(real resource types and attribute names with arbitrary values), and real plans with parts
replaced by arbitrary JSON. Then the whole `check-plan` command over hostile plans (lone
surrogates, control characters, long strings, huge numbers, deep nesting) in every output
format: exit 0, 1 or 2, one line on stderr for 2, in bounded time; and plans with values marked
sensitive, whose secret no report may show.

`GPUWARDEN_FUZZ_EXAMPLES=N` runs N examples per test (a nightly run); the default is small.
"""

from __future__ import annotations

import copy
import json
import os
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.core.errors import InputError
from engine.core.model import Resource
from engine.inputfiles import MAX_DEPTH
from engine.sources.terraform import SUPPORTED_TYPES, plan_resources, read_plan
from tests.conftest import REFERENCE
from tests.test_input_robustness import FORMATS, CliRun, run_gpuwarden

FIXTURES = Path(__file__).parent / "fixtures" / "plans"
NIGHTLY_EXAMPLES = int(os.environ.get("GPUWARDEN_FUZZ_EXAMPLES", "0") or 0)
# one CLI run over a hostile input; generous for a loaded 2-core machine (typical: under 1 s)
CLI_SECONDS = 30


def fuzz_settings(examples: int) -> Any:
    return settings(
        max_examples=NIGHTLY_EXAMPLES or examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


FUZZ = fuzz_settings(250)
CLI_FUZZ = fuzz_settings(30)

# Attribute names the adapter reads, so generated objects reach its branches.
KEYS = [
    "instance_type",
    "tags",
    "tags_all",
    "instance_market_options",
    "market_type",
    "root_block_device",
    "ebs_block_device",
    "encrypted",
    "kms_key_id",
    "launch_template",
    "id",
    "name",
    "version",
    "mixed_instances_policy",
    "instances_distribution",
    "on_demand_base_capacity",
    "on_demand_percentage_above_base_capacity",
    "launch_template_specification",
    "launch_template_name",
    "override",
    "tag",
    "key",
    "value",
    "propagate_at_launch",
    "desired_capacity",
    "min_size",
    "launch_configuration",
    "spot_price",
    "capacity_type",
    "instance_types",
    "scaling_config",
    "desired_size",
    "labels",
    "cluster_name",
    "block_device_mappings",
    "ebs",
    "tag_specifications",
    "resource_type",
    "bucket",
    "server_side_encryption_configuration",
    "rule",
    "apply_server_side_encryption_by_default",
    "sse_algorithm",
    "kms_master_key_id",
    "production_variants",
    "shadow_production_variants",
    "initial_instance_count",
    "serverless_config",
    "kms_key_arn",
    "resource_config",
    "instance_count",
    "enable_managed_spot_training",
    "volume_kms_key_id",
    "machine_type",
    "guest_accelerator",
    "type",
    "count",
    "scheduling",
    "preemptible",
    "provisioning_model",
    "spot",
    "boot_disk",
    "attached_disk",
    "kms_key_self_link",
    "disk_encryption_key_raw",
    "disk_encryption_key",
    "terraform_labels",
    "effective_labels",
    "zone",
    "region",
    "location",
    "availability_zone",
    "node_config",
    "node_count",
    "node_locations",
    "autoscaling",
    "min_node_count",
    "total_min_node_count",
    "resource_labels",
    "cluster",
    "priority",
    "size",
    "sku",
    "vm_size",
    "os_disk",
    "disk_encryption_set_id",
    "storage_os_disk",
    "storage_data_disk",
    "node_labels",
    "enable_auto_scaling",
    "min_count",
    "instances",
    "admin_password",
    "volume_tags",
    "references",
    "constant_value",
    "expressions",
    "default_tags",
    "provider_config_key",
]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(
        [
            "",
            "true",
            "false",
            "spot",
            "SPOT",
            "Spot",
            "aws:kms",
            "p4d.24xlarge",
            "ml.p3.2xlarge",
            "nvidia-tesla-t4",
            "a2-highgpu-1g",
            "aws_launch_template.x",
            "aws_s3_bucket.b.id",
            "1e400",
            "-3",
            "us-east-1a",
        ]
    )
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), children, max_size=6)
    ),
    max_leaves=25,
)
objects = st.dictionaries(st.sampled_from(KEYS), json_values, max_size=8)
addresses = st.one_of(
    st.builds(
        lambda modules, type_, name, key: (
            "".join(f"module.{m}." for m in modules) + f"{type_}.{name}{key}"
        ),
        st.lists(st.sampled_from(["a", "b", 'c["x.y"]', "d[0]"]), max_size=3),
        st.sampled_from([*sorted(SUPPORTED_TYPES), "aws_iam_role"]),
        st.sampled_from(["x", "y", "gpu"]),
        st.sampled_from(["", "[0]", '["k"]', "[", '["a.b"]']),
    ),
    st.text(max_size=20),
)


def mostly(
    usual: st.SearchStrategy[Any], rare: st.SearchStrategy[Any], odds: int = 10
) -> st.SearchStrategy[Any]:
    """`rare` once in `odds`, so most examples get past validation into the normalizers."""
    rolls = st.sampled_from([*([usual] * (odds - 1)), rare])
    return rolls.flatmap(lambda chosen: chosen)


actions = mostly(
    st.sampled_from(
        [
            ["create"],
            ["update"],
            ["delete", "create"],
            ["create", "delete"],
            ["delete"],
            ["read"],
            ["no-op"],
            ["forget"],
        ]
    ),
    st.lists(st.text(max_size=6), max_size=3) | json_values,
)


@st.composite
def resource_changes(draw: st.DrawFn) -> dict[str, Any]:
    address = draw(mostly(addresses, json_values, odds=40))
    type_ = draw(mostly(st.sampled_from(sorted(SUPPORTED_TYPES)), json_values))
    body: dict[str, Any] = {"actions": draw(actions), "after": draw(mostly(objects, json_values))}
    for key in ("after_unknown", "after_sensitive"):
        body[key] = draw(st.just(True) | st.just(False) | objects | json_values)
    change: dict[str, Any] = {"address": address, "type": type_, "change": body}
    optional = (
        ("mode", st.sampled_from(["managed", "data"]) | json_values),
        ("name", st.sampled_from(["x", "y", "gpu"]) | json_values),
        ("module_address", st.sampled_from(["module.a", "module.a.module.b", ""]) | json_values),
    )
    for key, values in optional:
        if draw(st.booleans()):
            change[key] = draw(values)
    return draw(mostly(st.just(change), json_values, odds=40))


@st.composite
def configurations(draw: st.DrawFn) -> Any:
    names = [f"{t}.{n}" for t in sorted(SUPPORTED_TYPES) for n in ("x", "y", "gpu")]
    resource = st.fixed_dictionaries(
        {
            "address": mostly(st.sampled_from(names), json_values),
            "mode": mostly(st.just("managed"), json_values),
            "provider_config_key": st.sampled_from(["aws", "google", "a:aws"]) | json_values,
            "expressions": mostly(objects, json_values),
        }
    )
    resources = draw(st.lists(resource, max_size=4))
    module_call = {"a": {"module": {"resources": resources, "module_calls": draw(json_values)}}}
    providers = {"aws": {"expressions": draw(objects)}, "google": {"expressions": draw(objects)}}
    usual = {
        "root_module": {"resources": resources, "module_calls": module_call},
        "provider_config": draw(mostly(st.just(providers), json_values)),
    }
    return draw(mostly(st.just(usual), json_values))


@st.composite
def plans(draw: st.DrawFn) -> dict[str, Any]:
    plan: dict[str, Any] = {
        "format_version": draw(mostly(st.sampled_from(["0.1", "1.2", "1.10"]), json_values)),
        "resource_changes": draw(
            mostly(st.lists(resource_changes(), min_size=1, max_size=6), json_values)
        ),
    }
    if draw(st.booleans()):
        plan["configuration"] = draw(configurations())
    if draw(st.booleans()):
        plan["planned_values"] = draw(json_values)
    return plan


def evaluate(plan: Any) -> None:
    """Run the adapter; InputError is an answer, any other exception fails the test."""
    try:
        found = plan_resources(plan, "fuzz.json")
    except InputError as error:
        assert str(error).startswith("fuzz.json: ")
        return
    for resource in found:
        assert isinstance(resource, Resource)
        resource.model_dump_json()


@FUZZ
@given(plans())
def test_generated_plans_never_crash_the_adapter(plan: dict[str, Any]) -> None:
    evaluate(plan)


@FUZZ
@given(json_values)
def test_arbitrary_json_never_crashes_the_adapter(document: Any) -> None:
    evaluate(document)


@cache
def real_plans() -> tuple[dict[str, Any], ...]:
    paths = sorted((REFERENCE / "terraform-plans").glob("*.json"))
    paths += sorted(FIXTURES.glob("*.json"))
    assert paths, "no plans to mutate"
    return tuple(read_plan(str(path)) for path in paths)


def replaced(node: Any, path: list[Any], value: Any) -> Any:
    """A copy of `node` with the value at `path` replaced (containers copied along the path)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(node, dict):
        return {**node, head: replaced(node[head], rest, value)}
    copy = list(node)
    copy[head] = replaced(node[head], rest, value)
    return copy


def mutated(draw: st.DrawFn, document: Any, values: st.SearchStrategy[Any]) -> Any:
    """`document` with one to four of its nodes (any depth) replaced by drawn `values`."""
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        path: list[Any] = []
        node = document
        while isinstance(node, dict | list) and node and draw(st.integers(0, 9)) > 0:
            step = draw(
                st.sampled_from(sorted(node) if isinstance(node, dict) else list(range(len(node))))
            )
            path.append(step)
            node = node[step]
        document = replaced(document, path, draw(values))
    return document


@st.composite
def mutated_real_plans(draw: st.DrawFn) -> Any:
    return mutated(draw, draw(st.sampled_from(real_plans())), json_values)


@FUZZ
@given(mutated_real_plans())
def test_mutated_real_plans_never_crash_the_adapter(plan: Any) -> None:
    evaluate(plan)


@st.composite
def damaged_plan_bytes(draw: st.DrawFn) -> bytes:
    source = draw(
        st.sampled_from(
            sorted(FIXTURES.glob("*.json"))
            + sorted((REFERENCE / "terraform-plans").glob("*.json"))
        )
    )
    data = bytearray(Path(source).read_bytes())
    how = draw(st.sampled_from(["truncate", "flip", "insert", "encode"]))
    position = draw(st.integers(0, len(data)))
    if how == "truncate":
        return bytes(data[:position])
    if how == "flip" and data:
        index = min(position, len(data) - 1)
        data[index] = draw(st.integers(0, 255))
        return bytes(data)
    if how == "insert":
        return bytes(data[:position]) + draw(st.binary(max_size=8)) + bytes(data[position:])
    codec = draw(st.sampled_from(["utf-16", "utf-16-be", "utf-32", "utf-8-sig"]))
    try:
        return json.dumps(json.loads(bytes(data).decode("utf-8"))).encode(codec)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return bytes(data)


def read_and_evaluate(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "fuzz-plan.json"
    path.write_bytes(data)
    try:
        plan = read_plan(str(path))
    except InputError as error:
        assert str(error).startswith(str(path))
        return
    evaluate(plan)


@FUZZ
@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_crash_read_plan(tmp_path_factory: Any, data: bytes) -> None:
    read_and_evaluate(tmp_path_factory.mktemp("bytes"), data)


@FUZZ
@given(damaged_plan_bytes())
def test_damaged_plan_files_never_crash_read_plan(tmp_path_factory: Any, data: bytes) -> None:
    read_and_evaluate(tmp_path_factory.mktemp("damaged"), data)


# --------------------------------------------------------------------------------------------
# The whole command over hostile plans
# --------------------------------------------------------------------------------------------

# JSON that json.dumps cannot write, spliced into the text in place of these strings
RAW_JSON = {
    "@@5000-digits@@": "9" * 5000,
    "@@400-digits@@": "1" + "0" * 400,
    "@@nan@@": "NaN",
    "@@-infinity@@": "-Infinity",
    "@@too-deep@@": "[" * (MAX_DEPTH + 2) + "]" * (MAX_DEPTH + 2),
    "@@just-deep-enough@@": "[" * (MAX_DEPTH - 8) + "]" * (MAX_DEPTH - 8),
}
hostile_text = (
    st.sampled_from([
        "\ud800", "a\udfffb", "\udc80\ud800", "line\ngpuwarden: error: forged", "\x1b[2J\x1b[31m",
        "\u202eevil", "nul\x00", "tab\tcr\r", "\u2028\u2029\x85", "x" * 70_000,
        "aws_instance.gpu\n", *RAW_JSON,
    ])
    | st.text(st.characters(categories=["Cs", "Cc", "Cf", "Zl", "Zp", "Lu"]), max_size=10)
)
hostile_values = st.recursive(
    scalars | hostile_text,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | hostile_text, children, max_size=6)
    ),
    max_leaves=25,
)


def plan_bytes(document: Any) -> bytes:
    """JSON text of `document` (lone surrogates as `\\ud800` escapes), RAW_JSON spliced in."""
    text = json.dumps(document, ensure_ascii=True)
    for marker, raw in RAW_JSON.items():
        text = text.replace(json.dumps(marker), raw)
    return text.encode()


def assert_cli_contract(run: CliRun) -> None:
    """Exit 0/1 with a report, or 2 with one clear line; never a crash; in bounded time."""
    assert run.code in (0, 1, 2), run
    assert "Traceback" not in run.err and "internal error" not in run.err, run.err
    if run.code == 2:
        assert len(run.err.splitlines()) == 1, run.err
        assert run.err.startswith("gpuwarden: error: ")
    assert run.seconds < CLI_SECONDS, run.seconds


@st.composite
def hostile_plans(draw: st.DrawFn) -> Any:
    plan: Any = draw(st.sampled_from(real_plans()) | plans())
    if draw(st.booleans()):
        plan = with_hostile_addresses(draw, plan)
    return mutated(draw, plan, hostile_values) if draw(st.booleans()) else plan


def with_hostile_addresses(draw: st.DrawFn, plan: Any) -> Any:
    """`plan` with hostile text in some change addresses: addresses are in every report."""
    changes = plan.get("resource_changes") if isinstance(plan, dict) else None
    if not isinstance(changes, list):
        return plan
    changed = [
        {**change, "address": change["address"] + draw(hostile_text)}
        if isinstance(change, dict) and isinstance(change.get("address"), str)
        and draw(st.booleans()) else change
        for change in changes
    ]
    return {**plan, "resource_changes": changed}


@CLI_FUZZ
@given(hostile_plans(), st.sampled_from(FORMATS), st.booleans())
def test_hostile_plans_through_check_plan(tmp_path_factory: Any, plan: Any, fmt: str,
                                          show_passed: bool) -> None:
    path = tmp_path_factory.mktemp("hostile") / "plan.json"
    path.write_bytes(plan_bytes(plan))
    passed = ["--show-passed"] if show_passed else []
    assert_cli_contract(run_gpuwarden("check-plan", str(path), "-f", fmt, *passed))


SECRET_PREFIX = "hunter2-"
# attributes whose values reports show (region in every resource reference, tags and names in
# messages), so a secret there is one a broken redaction would print
SHOWN_KEYS = ["region", "availability_zone", "zone", "location", "tags", "tags_all", "labels",
              "name", "instance_type", "machine_type", "vm_size"]


@st.composite
def plans_with_secrets(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """A real plan whose changes carry a secret in attributes, tags or blocks, each marked in
    `after_sensitive` (or the whole object marked), as Terraform prints sensitive values."""
    plan = copy.deepcopy(draw(st.sampled_from(real_plans())))
    secret = SECRET_PREFIX + draw(st.text("0123456789abcdef", min_size=12, max_size=12))
    for change in plan.get("resource_changes") or []:
        body = change.get("change") or {}
        if isinstance(body.get("after"), dict):
            marks = body.get("after_sensitive")
            marks = marks if isinstance(marks, dict) else {}
            for _ in range(draw(st.integers(1, 3))):
                marks = hide_secret(draw, body["after"], marks, secret)
            body["after_sensitive"] = marks
    return plan, secret


def hide_secret(draw: st.DrawFn, after: dict[str, Any], marks: Any, secret: str) -> Any:
    """Put `secret` somewhere in `after`, marked sensitive; the marks after that."""
    key = draw(mostly(st.sampled_from(SHOWN_KEYS), st.sampled_from(sorted({*after, *KEYS})),
                      odds=3))
    where = draw(st.sampled_from(["attribute", "attribute", "tag", "block", "whole object"]))
    if where == "whole object" or marks is True:
        after[key] = secret
        return True
    if where == "attribute":
        after[key], marks[key] = secret, True
    elif where == "tag":
        tags = after.get(key) if isinstance(after.get(key), dict) else {}
        after[key] = {**tags, "owner": secret}
        tag_marks = marks.get(key) if isinstance(marks.get(key), dict) else {}
        marks[key] = {**tag_marks, "owner": True}
    else:
        after[key] = [{"name": secret, "value": secret}]
        marks[key] = [{"name": True, "value": True}]
    return marks


@CLI_FUZZ
@given(plans_with_secrets(), st.sampled_from(["json", "sarif", "markdown", "table", "junit",
                                               "html"]))
def test_sensitive_values_never_reach_a_report(tmp_path_factory: Any,
                                               plan_and_secret: tuple[dict[str, Any], str],
                                               fmt: str) -> None:
    plan, secret = plan_and_secret
    path = tmp_path_factory.mktemp("secret") / "plan.json"
    path.write_bytes(plan_bytes(plan))
    run = run_gpuwarden("check-plan", str(path), "-f", fmt, "--show-passed")
    assert_cli_contract(run)
    assert secret not in run.out and secret not in run.err
