"""Hostile plans and snapshot bundles through the CLI: exit 2 with one clear line on stderr, or
a report every output format can print; never a traceback, never a hang.

The CLI runs in-process with stdout and stderr as strict UTF-8 streams (a lone surrogate that
reached an output would fail there as it fails on a terminal). Reading special files runs in a
subprocess, so a regression that blocks on a FIFO fails on its timeout instead of hanging.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml

from engine.cli import main
from engine.core.model import Resource
from engine.inputfiles import (
    MAX_DEPTH,
    MAX_IDENTIFIER,
    bounded_resource,
    identifier,
    max_input_bytes,
    tidy_document,
)

FORMATS = ("table", "json", "sarif", "junit", "markdown", "html", "policyreport")
SUBPROCESS_TIMEOUT_S = 60


@dataclass(frozen=True)
class CliRun:
    code: int
    out: str
    err: str
    seconds: float


def run_gpuwarden(*args: str, env: dict[str, str] | None = None,
                  stdin: bytes | None = None) -> CliRun:
    """`gpuwarden ARGS` in this process; stdout and stderr are strict UTF-8."""
    out_bytes, err_bytes = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(out_bytes, encoding="utf-8", write_through=True)
    err = io.TextIOWrapper(err_bytes, encoding="utf-8", write_through=True)
    stdin_stream = io.TextIOWrapper(io.BytesIO(stdin or b""), encoding="utf-8")
    started = time.perf_counter()
    with mock.patch.object(sys, "argv", ["gpuwarden", *args]), \
            mock.patch.dict(os.environ, env or {}), mock.patch.object(sys, "stdin", stdin_stream), \
            redirect_stdout(out), redirect_stderr(err):
        try:
            main()
            code: Any = 0
        except SystemExit as exited:
            code = exited.code
    seconds = time.perf_counter() - started
    return CliRun(code if isinstance(code, int) else 0 if code is None else 2,
                  out_bytes.getvalue().decode("utf-8"), err_bytes.getvalue().decode("utf-8"),
                  seconds)


def assert_input_error(run: CliRun, *fragments: str) -> None:
    """Exit 2, nothing on stdout, one line on stderr naming what is wrong (no crash report)."""
    assert run.code == 2, run
    assert "Traceback" not in run.err
    assert "internal error" not in run.err, run.err
    lines = run.err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("gpuwarden: error: ")
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def assert_report(run: CliRun) -> None:
    """A report (exit 0 or 1), and nothing but warnings on stderr."""
    assert run.code in (0, 1), run
    assert all(line.startswith("gpuwarden: warning: ") for line in run.err.splitlines()), run.err


# ------------------------------------------------------------------------------------ plans


def change(address: Any, type_: Any = "aws_instance", after: Any = None,
           **extra: Any) -> dict[str, Any]:
    return {
        "address": address, "mode": "managed", "type": type_, "name": "gpu",
        "change": {"actions": ["create"], "before": None,
                   "after": after if after is not None else {"instance_type": "p4d.24xlarge"},
                   "after_unknown": {}, "after_sensitive": {}},
        **extra,
    }


def plan_text(*changes: dict[str, Any]) -> str:
    return json.dumps({"format_version": "1.2", "resource_changes": list(changes)})


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, str):
        path.write_text(content, "utf-8")
    else:
        path.write_bytes(content)
    return path


def test_resource_type_that_is_a_list_is_an_input_error(tmp_path: Path) -> None:
    plan = write(tmp_path, "plan.json", plan_text(change("aws_instance.gpu", ["aws_instance"])))
    assert_input_error(run_gpuwarden("check-plan", str(plan)), str(plan),
                       "aws_instance.gpu: type must be a string, found a list")


def test_one_address_with_two_types_reads_the_first(tmp_path: Path) -> None:
    plan = write(tmp_path, "plan.json", plan_text(
        change("aws_instance.gpu", "aws_iam_role", {"name": "role"}),
        change("aws_instance.gpu", "aws_instance")))
    run = run_gpuwarden("check-plan", str(plan), "-f", "json")
    assert_report(run)
    assert json.loads(run.out)["summary"]["resources"] == 0


def test_a_deposed_object_beside_its_replacement_is_a_normal_plan(tmp_path: Path) -> None:
    deposed = change("aws_instance.gpu", deposed="00000001")
    deposed["change"].update(actions=["delete"], before={"instance_type": "g5.xlarge"},
                             after=None)
    plan = write(tmp_path, "plan.json", plan_text(deposed, change("aws_instance.gpu")))
    run = run_gpuwarden("check-plan", str(plan), "-f", "json")
    assert run.code == 1
    report = json.loads(run.out)
    assert report["summary"]["resources"] == 2  # the instance and its root volume
    assert {f["resource"]["id"] for f in report["findings"]} >= {"aws_instance.gpu"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_lone_surrogates_are_replaced_for_every_format(tmp_path: Path, fmt: str) -> None:
    after = {"instance_type": "p4d.24xlarge", "tags": {"team": "SURROGATE"}}
    text = plan_text(change('aws_instance.gpu["SURROGATE"]', after=after))
    plan = write(tmp_path, "plan.json", text.replace("SURROGATE", "\\ud800x\\udfff"))
    run = run_gpuwarden("check-plan", str(plan), "-f", fmt)
    assert_report(run)
    assert run.code == 1
    if fmt in ("table", "markdown", "json"):
        assert "\ufffdx\ufffd" in run.out


def test_a_lone_surrogate_key_is_replaced(tmp_path: Path) -> None:
    after = {"instance_type": "p4d.24xlarge", "tags": {"KEY": "a", "team": "t"}}
    plan = write(tmp_path, "plan.json",
                 plan_text(change("aws_instance.gpu", after=after)).replace("KEY", "\\udc80"))
    run = run_gpuwarden("check-plan", str(plan), "-f", "json")
    assert_report(run)


def test_a_newline_in_an_address_cannot_start_a_second_error_line(tmp_path: Path) -> None:
    broken = change("aws_instance.gpu\ngpuwarden: error: forged", after=None)
    broken["change"]["after"] = 7
    plan = write(tmp_path, "plan.json", plan_text(broken))
    assert_input_error(run_gpuwarden("check-plan", str(plan)), "change.after must be an object")


@pytest.mark.parametrize("fmt", ["json", "table", "markdown"])
def test_control_characters_in_an_address_never_reach_a_report(tmp_path: Path, fmt: str) -> None:
    plan = write(tmp_path, "plan.json",
                 plan_text(change("aws_instance.gpu\n\x1b[2Jforged\u202e")))
    run = run_gpuwarden("check-plan", str(plan), "-f", fmt)
    assert run.code == 1
    for hidden in ("\x1b", "\u202e", "gpu\nforged"):
        assert hidden not in run.out


def test_an_8_mb_address_is_cut_and_the_table_stays_quick(tmp_path: Path) -> None:
    address = "aws_instance." + "a" * 8 * 2**20
    plan = write(tmp_path, "plan.json", plan_text(change(address)))
    table = run_gpuwarden("check-plan", str(plan))
    assert table.code == 1
    assert table.seconds < 30, table.seconds  # 79 s before identifiers were capped
    assert len(table.out) < 50_000
    report = json.loads(run_gpuwarden("check-plan", str(plan), "-f", "json").out)
    ids = {finding["resource"]["id"] for finding in report["findings"]}
    assert ids and all(len(i) <= MAX_IDENTIFIER and i.startswith("aws_instance.aaa") for i in ids)


def test_an_echoed_value_is_cut(tmp_path: Path) -> None:
    plan = write(tmp_path, "plan.json", json.dumps(
        {"format_version": "9." + "9" * 10_000 + "\n", "resource_changes": []}))
    run = run_gpuwarden("check-plan", str(plan))
    assert_input_error(run, "unsupported plan format_version")
    assert len(run.err) < 1200


@pytest.mark.parametrize("depth", [MAX_DEPTH + 5, 2_000, 100_000])
def test_deep_plans_are_input_errors(tmp_path: Path, depth: int) -> None:
    nested = "[" * depth + "]" * depth
    plan = write(tmp_path, "plan.json",
                 '{"format_version": "1.2", "resource_changes": [], "x": ' + nested + "}")
    assert_input_error(run_gpuwarden("check-plan", str(plan)), "nested")


def test_a_number_too_long_to_convert_is_an_input_error(tmp_path: Path) -> None:
    plan = write(tmp_path, "plan.json", plan_text(change("aws_instance.gpu", after={
        "instance_type": "p4d.24xlarge", "ebs_optimized": "NUMBER"})).replace(
            '"NUMBER"', "9" * 5000))
    assert_input_error(run_gpuwarden("check-plan", str(plan)), "more than 4300 digits")


def test_integers_beyond_64_bits_read_as_floats(tmp_path: Path) -> None:
    plan = write(tmp_path, "plan.json", plan_text(change("aws_instance.gpu", after={
        "instance_type": "p4d.24xlarge", "tags": {"x": "y"}, "cpu_core_count": "NUMBER"}))
        .replace('"NUMBER"', "9" * 400).replace('"y"', '"\\ud800"'))  # \ud800: not orjson
    for fmt in ("json", "table"):
        assert_report(run_gpuwarden("check-plan", str(plan), "-f", fmt))


def test_the_size_cap_applies_to_files_and_stdin(tmp_path: Path) -> None:
    padding = {"instance_type": "p4d.24xlarge", "user_data": "x" * (2 * 2**20)}
    text = plan_text(change("aws_instance.gpu", after=padding))
    plan = write(tmp_path, "plan.json", text)
    capped = {"GPUWARDEN_MAX_INPUT_MB": "1"}
    assert_input_error(run_gpuwarden("check-plan", str(plan), env=capped),
                       "plan is larger than 1 MiB", "GPUWARDEN_MAX_INPUT_MB")
    assert_input_error(run_gpuwarden("check-plan", "-", env=capped, stdin=text.encode()),
                       "<stdin>: plan is larger than 1 MiB")
    assert run_gpuwarden("check-plan", str(plan), env={"GPUWARDEN_MAX_INPUT_MB": "3"}).code == 1
    assert run_gpuwarden("check-plan", "-", stdin=text.encode()).code == 1


@pytest.mark.parametrize("setting", ["0", "-1", "lots", "1.5", "99999999"])
def test_a_bad_size_cap_setting_is_an_input_error(tmp_path: Path, setting: str) -> None:
    plan = write(tmp_path, "plan.json", plan_text(change("aws_instance.gpu")))
    assert_input_error(run_gpuwarden("check-plan", str(plan),
                                     env={"GPUWARDEN_MAX_INPUT_MB": setting}),
                       "GPUWARDEN_MAX_INPUT_MB must be a whole number")


def test_default_size_cap() -> None:
    with mock.patch.dict(os.environ, {"GPUWARDEN_MAX_INPUT_MB": ""}):
        assert max_input_bytes() == 256 * 2**20


def run_subprocess(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True,
                          text=True, timeout=SUBPROCESS_TIMEOUT_S, check=False)


def assert_one_line_exit_2(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 2, result
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "plan.fifo"
    os.mkfifo(path)  # nobody ever writes: reading it would block forever
    return path


@pytest.mark.parametrize("command", [["check-plan"], ["scan", "--source"]])
def test_a_fifo_is_refused_without_blocking(fifo: Path, command: list[str]) -> None:
    spec = str(fifo) if command[0] == "check-plan" else f"snapshot:{fifo}"
    assert_one_line_exit_2(run_subprocess(*command, spec), "a FIFO, not a regular file")


@pytest.mark.parametrize("command", [["check-plan"], ["scan", "--source"]])
def test_dev_zero_is_refused(command: list[str]) -> None:
    spec = "/dev/zero" if command[0] == "check-plan" else "snapshot:/dev/zero"
    assert_one_line_exit_2(run_subprocess(*command, spec), "a character device")


def test_a_directory_is_still_named_as_one(tmp_path: Path) -> None:
    assert_input_error(run_gpuwarden("check-plan", str(tmp_path)), "this is a directory")
    assert_input_error(run_gpuwarden("scan", "--source", f"snapshot:{tmp_path}"),
                       "cannot read snapshot: Is a directory")


# -------------------------------------------------------------------------------- snapshots


def snapshot(tmp_path: Path, bundle: dict[str, Any] | str, name: str = "estate.json") -> str:
    text = bundle if isinstance(bundle, str) else json.dumps({"kind": "Snapshot", **bundle})
    return f"snapshot:{write(tmp_path, name, text)}"


def gcp_instance(**fields: Any) -> dict[str, Any]:
    return {"gcp": {"projects": [{"project": {"projectId": "ml"}, "instances": [
        {"name": "trainer", "zone": "us-central1-a", "machineType": "zones/x/machineTypes/"
         "a2-highgpu-1g", "status": "RUNNING", **fields}]}]}}


def azure_vm(**fields: Any) -> dict[str, Any]:
    return {"azure": {"subscriptions": [{"subscription": {"subscriptionId": "s"},
                                         "virtual_machines": [{"name": "vm", **fields}]}]}}


@pytest.mark.parametrize(("bundle", "fragment"), [
    (gcp_instance(scheduling="SPOT"), "gcp.projects[0].instances[0].scheduling: must be an object"),
    (gcp_instance(labels="team=ml"), "gcp.projects[0].instances[0].labels: must be an object"),
    (gcp_instance(guestAccelerators=[{"acceleratorCount": "2"}]),
     "instances[0].guestAccelerators[0].acceleratorCount"),
    (gcp_instance(status=["RUNNING"]), "instances[0].status: must be a string"),
    (azure_vm(tags="team=ml"),
     "azure.subscriptions[0].virtual_machines[0].tags: must be an object"),
    (azure_vm(properties={"hardwareProfile": "big"}),
     "virtual_machines[0].properties.hardwareProfile: must be an object"),
    (azure_vm(location=7), "virtual_machines[0].location: must be a string"),
    ({"azure": {"subscriptions": [{"subscription": {"tags": []}}]}},
     "azure.subscriptions[0].subscription.tags: must be an object"),
    ({"azure": {"subscriptions": [{"subscription": {}, "managed_clusters": [
        {"properties": {"agentPoolProfiles": [{"count": 10**12}]}}]}]}},
     "agentPoolProfiles[0].count"),
])
def test_mis_shaped_cloud_objects_are_input_errors(tmp_path: Path, bundle: dict[str, Any],
                                                   fragment: str) -> None:
    assert_input_error(run_gpuwarden("scan", "--source", snapshot(tmp_path, bundle)), fragment)


def test_well_shaped_cloud_objects_still_read(tmp_path: Path) -> None:
    bundle = gcp_instance(scheduling={"provisioningModel": "SPOT"}, labels={"team": "ml"})
    run = run_gpuwarden("scan", "--source", snapshot(tmp_path, bundle), "-f", "json")
    assert_report(run)
    assert json.loads(run.out)["summary"]["resources"] == 1


RESOURCE = {"provider": "aws", "kind": "aws_instance", "category": "instance", "id": "i-1",
            "name": "box"}


@pytest.mark.parametrize("name", ["estate.json", "estate.yaml"])
def test_a_5000_digit_integer_in_a_snapshot_is_an_input_error(tmp_path: Path, name: str) -> None:
    text = json.dumps({"kind": "Snapshot", "resources": [{**RESOURCE, "count": "N"}]})
    spec = snapshot(tmp_path, text.replace('"N"', "9" * 5000), name)
    assert_input_error(run_gpuwarden("scan", "--source", spec))


def test_a_huge_hex_integer_in_yaml_is_read_within_bounds(tmp_path: Path) -> None:
    text = f"kind: Snapshot\nresources:\n- {json.dumps(RESOURCE)}\n"
    text = text.replace('"box"', '"box", "hourly_usd": 0x' + "f" * 5000)
    run = run_gpuwarden("scan", "--source", snapshot(tmp_path, text, "estate.yaml"), "-f", "json")
    assert run.code in (0, 1, 2) and "internal error" not in run.err and "Traceback" not in run.err


@pytest.mark.parametrize(("name", "depth"), [
    ("estate.json", MAX_DEPTH + 5), ("estate.json", 100_000),
    ("estate.yaml", MAX_DEPTH + 5), ("estate.yaml", 100_000),
])
def test_deep_snapshots_are_input_errors(tmp_path: Path, name: str, depth: int) -> None:
    nested = "[" * depth + "]" * depth
    text = '{"kind": "Snapshot", "resources": [{"raw": ' + nested + "}]}"
    if name.endswith(".yaml"):  # not JSON that orjson reads: the YAML reader's turn
        text = "kind: Snapshot\nresources:\n- raw: " + nested + "\n"
    assert_input_error(run_gpuwarden("scan", "--source", snapshot(tmp_path, text, name)),
                       "nested")


def test_yaml_aliases_that_expand_past_the_file_are_input_errors(tmp_path: Path) -> None:
    lines = ["kind: Snapshot", "description: x", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    lines += ["resources: [{provider: aws, kind: k, category: instance, id: i, name: n, "
              "raw: {bomb: *a8}}]"]
    run = run_gpuwarden("scan", "--source", snapshot(tmp_path, "\n".join(lines), "bomb.yaml"))
    assert_input_error(run)
    assert run.seconds < 30


def test_control_characters_in_a_snapshot_stay_on_their_line(tmp_path: Path) -> None:
    spec = snapshot(tmp_path, {"bad\nsection\x1b[2J": 1})
    assert_input_error(run_gpuwarden("scan", "--source", spec), "unknown snapshot section")
    resource = {**RESOURCE, "id": "i-1\ngpuwarden: error: forged", "name": "box\x1b[31m",
                "region": "us-east-1\u2028x", "hourly_usd": 3.0, "capacity": "on-demand",
                "gpu": {"model": "NVIDIA A10G", "count": 1}, "state": "running"}
    for fmt in ("json", "table", "markdown", "sarif"):
        run = run_gpuwarden("scan", "--source", snapshot(tmp_path, {"resources": [resource]}),
                            "-f", fmt, "--now", "2026-06-17T14:30:00Z")  # on-hours: no stop
        assert run.code == 0 and "i-1" in run.out  # audit findings only
        for hidden in ("\x1b", "\u2028", "i-1\ngpuwarden"):
            assert hidden not in run.out


def test_binary_yaml_values_are_input_errors(tmp_path: Path) -> None:
    text = "kind: Snapshot\nresources:\n- {provider: aws, kind: k, category: instance, id: i, " \
           "name: n, raw: {blob: !!binary aGVsbG8=}}\n"
    assert_input_error(run_gpuwarden("scan", "--source", snapshot(tmp_path, text, "s.yaml")),
                       "unsupported value of type bytes")


def test_a_lone_surrogate_in_a_yaml_snapshot_is_replaced(tmp_path: Path) -> None:
    resource = {**RESOURCE, "name": "SURROGATE", "hourly_usd": 3.0, "state": "running",
                "gpu": {"model": "NVIDIA A10G", "count": 1}}
    text = yaml.safe_dump({"kind": "Snapshot", "resources": [resource]})
    spec = snapshot(tmp_path, text.replace("SURROGATE", '"\\ud800"'), "s.yaml")
    for fmt in FORMATS:
        assert_report(run_gpuwarden("scan", "--source", spec, "-f", fmt))


def test_the_size_cap_applies_to_snapshots(tmp_path: Path) -> None:
    spec = snapshot(tmp_path, {"description": "x" * (2 * 2**20), "resources": []})
    assert_input_error(run_gpuwarden("scan", "--source", spec,
                                     env={"GPUWARDEN_MAX_INPUT_MB": "1"}),
                       "snapshot is larger than 1 MiB")
    assert_report(run_gpuwarden("scan", "--source", spec))


# ------------------------------------------------------------- one reader for every input file

# Stands in for a FIFO swapped in between the reader's `stat` check and its `open`: `os.stat`
# reports a regular file, the path is a FIFO nobody writes to. A blocking open would hang.
SWAPPED_FOR_A_FIFO = """
import os, sys
from pathlib import Path
from engine.core.errors import InputError
fifo, reader = sys.argv[1], sys.argv[2]
regular = os.stat(sys.executable)
real_stat = os.stat
os.stat = lambda path, *a, **k: regular if str(path) == fifo else real_stat(path, *a, **k)
from engine import inputfiles
from engine.loading import files as yamlsource
from engine.sources.terraform import read_plan
readers = {
    "plan": lambda: read_plan(fifo),
    "snapshot": lambda: inputfiles.read_input_bytes(fifo, "snapshot"),
    "policy file": lambda: yamlsource.read_bounded_text(Path(fifo), fifo, "policy file"),
    "rego module": lambda: yamlsource.read_bounded_bytes(Path(fifo), 2**20),
}
try:
    readers[reader]()
except (InputError, OSError) as exc:
    print(exc)
"""


@pytest.mark.parametrize(("reader", "refusal"), [
    ("plan", "cannot read plan: this is a FIFO, not a regular file; pass - to read standard"),
    ("snapshot", "cannot read snapshot: this is a FIFO, not a regular file"),
    ("policy file", "cannot read policy file: not a regular file"),
    ("rego module", "not a regular file"),
])
def test_a_fifo_swapped_in_after_the_check_is_refused_without_blocking(
        fifo: Path, reader: str, refusal: str) -> None:
    result = subprocess.run([sys.executable, "-c", SWAPPED_FOR_A_FIFO, str(fifo), reader],
                            capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert refusal in result.stdout


def test_dev_stdin_as_a_pipe_is_refused_and_dash_reads_it(tmp_path: Path) -> None:
    text = plan_text(change("aws_instance.gpu"))
    refused = subprocess.run([sys.executable, "-m", "engine", "check-plan", "/dev/stdin"],
                             input=text, capture_output=True, text=True,
                             timeout=SUBPROCESS_TIMEOUT_S, check=False)
    assert_one_line_exit_2(refused, "/dev/stdin: cannot read plan: this is a FIFO",
                           "pass - to read standard input")
    read = subprocess.run([sys.executable, "-m", "engine", "check-plan", "-", "-f", "json"],
                          input=text, capture_output=True, text=True,
                          timeout=SUBPROCESS_TIMEOUT_S, check=False)
    assert read.returncode == 1, read.stderr
    assert json.loads(read.stdout)["summary"]["resources"] == 2  # the instance and its root disk


def test_a_closed_standard_input_is_an_input_error() -> None:
    script = f'exec "{sys.executable}" -m engine check-plan - <&-'
    result = subprocess.run(["sh", "-c", script], capture_output=True, text=True,
                            timeout=SUBPROCESS_TIMEOUT_S, check=False)
    assert_one_line_exit_2(result, "<stdin>: cannot read plan: standard input is closed")


def test_policy_files_keep_their_own_smaller_cap(tmp_path: Path) -> None:
    padding = " " * 1_500_000  # over the 1 MiB policy file cap, far under the input cap
    policy = write(tmp_path, "policy.yaml", "# a policy file\n" + padding)
    plan = write(tmp_path, "plan.json", plan_text(change("aws_instance.gpu")) + padding)
    roomy = {"GPUWARDEN_MAX_INPUT_MB": "256"}
    assert_input_error(run_gpuwarden("check-plan", str(plan), "--policies", str(policy),
                                     env=roomy),
                       "policy file is larger than 1024 KiB", "GPUWARDEN_MAX_POLICY_FILE_KB")
    assert run_gpuwarden("check-plan", str(plan), env=roomy).code == 1


# --------------------------------------------------------------------------- the helpers


def test_identifiers_are_one_bounded_line_and_stay_distinct() -> None:
    long_a, long_b = "x" * 10_000 + "a", "x" * 10_000 + "b"
    shown_a, shown_b = identifier(long_a), identifier(long_b)
    assert len(shown_a) <= MAX_IDENTIFIER and shown_a != shown_b
    assert identifier(shown_a) == shown_a
    assert identifier("aws_instance.gpu[0]") == "aws_instance.gpu[0]"
    assert "\n" not in identifier("a\nb") and identifier(identifier("a\nb")) == identifier("a\nb")


def test_bounded_resource_touches_only_what_needs_it() -> None:
    plain = Resource.model_validate(RESOURCE)
    assert bounded_resource(plain) is plain
    wild = Resource.model_validate({**RESOURCE, "name": "n\x00" + "y" * 1000, "region": "r\n"})
    bounded = bounded_resource(wild)
    assert "\x00" not in bounded.name and len(bounded.name) <= MAX_IDENTIFIER
    assert bounded.region == "r "


def test_tidy_document_fixes_what_outputs_cannot_hold() -> None:
    document = {"\ud800": ["\udfff", 2**70, -(2**70), 10**400, (1, 2)], "ok": 1}
    tidy = tidy_document(document, "f", 100)
    assert tidy == {"\ufffd": ["\ufffd", float(2**70), -float(2**70), float("inf"), [1, 2]],
                    "ok": 1}
