"""Hostile policy files: no code execution and no resource exhaustion from what a policy file
(or the Rego it names) says, and no secrets of a plan handed to Rego policies.

Each test is a finding of the hostile review, written as the attack it describes: message
templates that reach Python internals or render forever, YAML that expands or nests without
bound, Rego that loops or allocates without bound, and plan policies that read sensitive values.
"""

from __future__ import annotations

import json
import os
import textwrap
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.core import templates
from engine.core.evaluate import Engine
from engine.core.model import Resource
from engine.core.yamltext import MAX_INT_CHARS
from engine.loading.policies import load_policies
from engine.rego.inputs import fitted_marks, plan_documents, redacted_plan
from tests.conftest import run_cli

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

POLICY = """\
apiVersion: gpuwarden.io/v1
policies:
  - id: hostile
    title: Hostile policy
    severity: low
    resources: [instance]
    violation: {{field: gpu.count, op: gt, value: 0}}
    message: {message}
"""


def policy_file(tmp_path: Path, message: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(POLICY.format(message=json.dumps(message)), "utf-8")
    return path


def refused(code: int, err: str, path: Path, line: int | None = None) -> str:
    """Exit 2 with one line on stderr naming the file (and line), no traceback."""
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    where = f"{path}:{line}:" if line is not None else f"{path}"
    assert where in err, err
    return err


def gpu_instance(make_resource: Callable[..., Resource], **fields: Any) -> Resource:
    return make_resource(**{"instance_type": "p4d.24xlarge", "tags": {"team": "ml"}, **fields})


# ---------------------------------------------------------------------------- message templates


def test_template_reaching_python_internals_is_refused_at_load(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "pwned"
    path = policy_file(tmp_path, "{{ cycler.__init__.__globals__.os.popen('touch "
                       + str(marker) + "').read() }}")
    code, _, err = run_cli(["policies", "validate", str(path)], capsys, monkeypatch)
    refused(code, err, path, 8)
    assert "not allowed" in err
    assert not marker.exists()


@pytest.mark.parametrize("message", [
    "{{ r.__class__.__mro__ }}",
    "{{ r['__class__'] }}",
    "{{ r.name.mro }}",
    "{{ details|map(attribute='__class__')|list }}",
    "{{ r.name|attr('upper') }}",
    "{{ '{0.__class__}'.format(r) }}",
    "{{ r.model_dump() }}",
    "{{ lipsum(100000) }}",
    "{{ namespace(x=1) }}",
    "{% macro boom() %}{{ boom() }}{% endmacro %}{{ boom() }}",
    "{% include 'x' %}",
    "{% for x in details recursive %}{{ loop(x) }}{% endfor %}",
    "{{ 'x'|center(1000000000) }}",
    "{{ '%s'|format(r) }}",
    "{{ range(*details) }}",
    "{{ (" * 100 + "1" + ")" * 100 + " }}",
    "{{ 1" + "0" * 5000 + " }}",
    "x" * (templates.MAX_SOURCE + 1),
])
def test_forbidden_template_constructs_are_refused_at_load(
        message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = policy_file(tmp_path, message)
    code, _, err = run_cli(["policies", "validate", str(path)], capsys, monkeypatch)
    assert "message template" in refused(code, err, path, 8)


def test_template_error_in_a_block_scalar_names_its_own_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(POLICY.format(message="|\n      {{ r.name }} is big\n"
                                  "      {{ r.__class__ }}\n"), "utf-8")
    code, _, err = run_cli(["policies", "validate", str(path)], capsys, monkeypatch)
    refused(code, err, path, 10)


@pytest.mark.parametrize(("message", "why"), [
    ("{{ range(10**9) }}", "range() of more than"),
    ("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
     "iterations"),
    ("{% for a in details.many %}{% for b in details.many %}{% endfor %}{% endfor %}",
     "iterations"),
    ("{{ 'a' * 10**9 }}", "'*' would build"),
    ("{{ details.many * 100000 }}", "'*' would build"),
    ("{{ 2 ** (10**9) }}", "'**' would build"),
    ("{{ '%0999999999d' % 1 }}", "'%' formatting"),
    ("{{ 1 / 0 }}", "division by zero"),
])
def test_expensive_templates_fail_fast_at_render(
        message: str, why: str, make_resource: Callable[..., Resource], tmp_path: Path) -> None:
    [policy] = load_policies([str(policy_file(tmp_path, message))])
    started = time.monotonic()
    text = policy.render_message(r=gpu_instance(make_resource), details={"many": list(range(5000))})
    assert time.monotonic() - started < 2
    assert text.startswith("Hostile policy (message template failed: ")
    assert why in text


def test_long_output_is_cut_and_the_evaluation_goes_on(
        make_resource: Callable[..., Resource], tmp_path: Path) -> None:
    message = "{% for i in range(1000) %}{{ r.name }} {% endfor %}"
    [policy] = load_policies([str(policy_file(tmp_path, message))])
    report = Engine([policy]).evaluate([gpu_instance(make_resource)], NOW, door="runtime")
    [finding] = report.findings
    assert len(finding.message) == templates.MAX_OUTPUT
    assert finding.message.startswith("trainer trainer") and finding.message.endswith("…")


def test_ordinary_templates_keep_working(make_resource: Callable[..., Resource],
                                         tmp_path: Path) -> None:
    message = ("{{ r.name|upper }} {{ r.name.title() }} has {{ r.gpu.count|int }} GPUs; "
               "{{ details.get('x', 'no x') }}; {% for k, v in params.items() %}{{ k }}={{ v }}"
               "{% endfor %}; {{ cost|usd }}; {{ [1, 2, 3]|join('+') }}; {{ range(3)|sum }}")
    [policy] = load_policies([str(policy_file(tmp_path, message))])
    text = policy.render_message(r=gpu_instance(make_resource), details={}, cost=1234.5,
                                 params={"a": 1})
    assert text == "TRAINER Trainer has 8 GPUs; no x; a=1; $1,234; 1+2+3; 3"


# ---------------------------------------------------------------------------- YAML bounds


ALIAS_BOMB = """\
apiVersion: gpuwarden.io/v1
policies:
  - id: bomb
    title: Bomb
    severity: low
    resources: [instance]
    violation: {field: gpu.count, op: gt, value: 0}
    message: "{{ r.name }}"
    parameters:
      a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
      b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
      c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
      d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
      e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
      f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
      g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
      h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
      i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


@pytest.mark.parametrize("command", [["validate"], ["show", "bomb", "--policies"]])
def test_alias_bomb_is_refused_before_anything_walks_it(
        command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(ALIAS_BOMB, "utf-8")
    started = time.monotonic()
    code, _, err = run_cli(["policies", *command, str(path)], capsys, monkeypatch)
    assert time.monotonic() - started < 5
    assert "aliases expand" in refused(code, err, path, 14)  # where it passes the limit


def test_a_few_aliases_and_merge_keys_still_load(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(POLICY.format(message='"{{ r.name }}"') + textwrap.indent(textwrap.dedent("""\
        parameters:
          base: &base {team: ml, project: x}
          copy: *base
          merged: {<<: *base, project: y}
        """), "    "), "utf-8")
    [policy] = load_policies([str(path)])
    assert policy.spec.parameters["copy"] == {"team": "ml", "project": "x"}
    assert policy.spec.parameters["merged"] == {"team": "ml", "project": "y"}


def test_recursive_alias_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("policies: &loop\n  - *loop\n", "utf-8")
    code, _, err = run_cli(["policies", "validate", str(path)], capsys, monkeypatch)
    assert "contains it" in refused(code, err, path, 2)


@pytest.mark.parametrize(("text", "line"), [
    ("policies: " + "[" * 5000 + "]" * 5000 + "\n", 1),
    ("policies:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 200)) + "\n", 64),
    ("policies: " + "{a: " * 300 + "1" + "}" * 300 + "\n", 1),
], ids=["flow lists", "block mappings", "flow mappings"])
def test_deep_nesting_is_refused_with_its_line(
        text: str, line: int, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(text, "utf-8")
    code, _, err = run_cli(["policies", "validate", str(path)], capsys, monkeypatch)
    assert "nested more than" in refused(code, err, path, line)


def test_huge_integer_is_refused_with_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = policy_file(tmp_path, "{{ r.name }}")
    path.write_text(path.read_text() + "    parameters: {n: " + "9" * 5000 + "}\n")
    code, _, err = run_cli(["policies", "validate", str(path)], capsys, monkeypatch)
    assert f"more than {MAX_INT_CHARS} characters" in refused(code, err, path, 9)


def test_oversized_policy_file_is_refused_unless_the_limit_is_raised(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = policy_file(tmp_path, "{{ r.name }}")
    path.write_text(path.read_text() + "#" + "x" * 2**20 + "\n")
    code, _, err = run_cli(["policies", "validate", str(path)], capsys, monkeypatch)
    assert "larger than 1024 KiB" in refused(code, err, path)
    monkeypatch.setenv("GPUWARDEN_MAX_POLICY_FILE_KB", "2048")
    code, out, err = run_cli(["policies", "validate", str(path)], capsys, monkeypatch)
    assert (code, out.strip()) == (0, "ok: 1 policies valid"), err


def test_a_fifo_is_refused_rather_than_read_forever(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "fifo.yaml"
    os.mkfifo(path)
    code, _, err = run_cli(["policies", "validate", str(path)], capsys, monkeypatch)
    assert "not a regular file" in refused(code, err, path)


def test_any_command_loading_policies_refuses_them_the_same_way(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(ALIAS_BOMB, "utf-8")
    plan = Path(__file__).parent / "fixtures" / "plans" / "aws-gpu-plan.json"
    code, _, err = run_cli(["check-plan", str(plan), "--policies", str(path)], capsys, monkeypatch)
    refused(code, err, path, 14)


# ---------------------------------------------------------------------------- Rego limits


REGO_POLICY = """\
apiVersion: gpuwarden.io/v1
policies:
  - id: heavy-rego
    title: Heavy Rego
    severity: high
    resources: [instance]
    enforcement: {{plan: deny, admission: deny, runtime: deny}}
    rego:
      module: heavy.rego
      input: {input}
      timeout_s: 1
      admission_timeout_s: 1
"""

HEAVY_MODULE = """\
package heavy

import rego.v1

deny contains msg if {
\tinput.name == "slow"
\tcount([1 | some x in numbers.range(1, 20000); some y in numbers.range(1, 20000); x + y == 0]) > 0
\tmsg := "never"
}

deny contains msg if {
\tinput.name == "huge"
\tcount([x | some x in numbers.range(1, 300000000)]) > 0
\tmsg := "never"
}

deny contains msg if {
\tinput.name == "fine"
\tmsg := sprintf("%s is big", [input.name])
}
"""


def rego_policy(tmp_path: Path, module: str = HEAVY_MODULE, input_kind: str = "resource",
                ) -> Path:
    pytest.importorskip("regorus")
    (tmp_path / "heavy.rego").write_text(module, "utf-8")
    path = tmp_path / "p.yaml"
    path.write_text(REGO_POLICY.format(input=input_kind), "utf-8")
    return path


def test_rego_that_loops_or_allocates_without_bound_gives_unknown_findings(
        tmp_path: Path, make_resource: Callable[..., Resource]) -> None:
    engine = Engine(load_policies([str(rego_policy(tmp_path))]))
    resources = [gpu_instance(make_resource, id=name, name=name)
                 for name in ("slow", "huge", "fine")]
    started = time.monotonic()
    report = engine.evaluate(resources, NOW, door="runtime")
    assert time.monotonic() - started < 30
    by_name = {f.resource.name: f for f in report.findings}
    assert (by_name["slow"].result, by_name["huge"].result) == ("unknown", "unknown")
    assert "policy heavy-rego not evaluated" in by_name["slow"].message
    assert "time limit of 1 s" in by_name["slow"].message
    assert "out of memory" in by_name["huge"].message
    # the worker that was killed or died is replaced: the next resource is judged
    assert (by_name["fine"].result, by_name["fine"].message) == ("fail", "fine is big")


def test_a_policy_stopped_by_limits_three_times_is_not_run_again(
        tmp_path: Path, make_resource: Callable[..., Resource]) -> None:
    engine = Engine(load_policies([str(rego_policy(tmp_path))]))
    resources = [gpu_instance(make_resource, id=f"slow-{n}", name="slow") for n in range(6)]
    started = time.monotonic()
    report = engine.evaluate(resources, NOW, door="runtime")
    assert time.monotonic() - started < 3 * 1 + 10  # three time limits, not six
    assert [f.result for f in report.findings] == ["unknown"] * 6
    assert "3 times already" in report.findings[-1].message


def test_at_admission_a_runaway_policy_follows_its_failure_policy(
        tmp_path: Path, make_resource: Callable[..., Resource]) -> None:
    path = rego_policy(tmp_path)
    path.write_text(path.read_text() + "      failure_policy: Fail\n")
    engine = Engine(load_policies([str(path)]))
    report = engine.evaluate([gpu_instance(make_resource, name="slow")], NOW, door="admission")
    [finding] = report.findings
    assert (finding.result, finding.enforcement) == ("fail", "deny")
    assert "denied by failure_policy Fail" in finding.message
    assert "time limit of 1 s" in finding.message


def test_at_admission_slow_pods_never_switch_a_policy_off_for_the_pods_after_them(
        tmp_path: Path, make_resource: Callable[..., Resource]) -> None:
    engine = Engine(load_policies([str(rego_policy(tmp_path))]))
    slow = [gpu_instance(make_resource, id=f"slow-{n}", name="slow") for n in range(4)]
    engine.evaluate(slow, NOW, door="admission")
    report = engine.evaluate([gpu_instance(make_resource, name="fine")], NOW, door="admission")
    [finding] = report.findings
    assert (finding.result, finding.message) == ("fail", "fine is big")


def test_alias_bomb_in_a_rego_data_document_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = rego_policy(tmp_path)
    path.write_text(path.read_text() + "      data: [bomb.yaml]\n")
    (tmp_path / "bomb.yaml").write_text(ALIAS_BOMB, "utf-8")
    code, _, err = run_cli(["policies", "validate", str(path)], capsys, monkeypatch)
    assert "bomb.yaml does not parse" in refused(code, err, path, 8)  # the rego: line
    assert "aliases expand" in err


def test_check_plan_with_a_runaway_plan_policy_reports_unknown_not_a_crash(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    module = ("package heavy\n\nimport rego.v1\n\ndeny contains \"x\" if {\n"
              "\tcount([x | some x in numbers.range(1, 300000000)]) > count(input.resource_changes)"
              "\n}\n")
    path = rego_policy(tmp_path, module, input_kind="plan")
    plan = Path(__file__).parent / "fixtures" / "plans" / "aws-gpu-plan.json"
    code, out, err = run_cli(["check-plan", str(plan), "--policies", str(path), "-f", "json"],
                         capsys, monkeypatch)
    assert code == 0, err
    [finding] = json.loads(out)["findings"]
    assert (finding["policy"], finding["result"]) == ("heavy-rego", "unknown")
    assert "policy heavy-rego not evaluated" in finding["message"]


def test_rego_nesting_that_would_stall_the_parser_is_refused_at_load(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    module = ("package heavy\n\nimport rego.v1\n\ndeny contains x if {\n\tx := "
              + "[" * 20 + "1" + "]" * 20 + "\n}\n")
    path = rego_policy(tmp_path, module)
    started = time.monotonic()
    code, _, err = run_cli(["policies", "validate", str(path)], capsys, monkeypatch)
    assert time.monotonic() - started < 5
    assert "brackets nested more than" in refused(code, err, tmp_path / "heavy.rego", 6)


# ---------------------------------------------------------------------------- plan secrets


SECRET_SCANNER = """\
package heavy

import rego.v1

deny contains s if {
\twalk(input, [_, s])
\tis_string(s)
\tcontains(s, "TOKEN")
}
"""


def secret_plan() -> dict[str, Any]:
    """A plan whose secrets all contain SECRET-TOKEN; SEEN-TOKEN is not secret."""
    return {
        "format_version": "1.2",
        "variables": {"db_password": {"value": "SECRET-TOKEN-var"},
                      "region": {"value": "SEEN-TOKEN-region"}},
        "resource_changes": [
            {"address": "aws_db_instance.db", "type": "aws_db_instance", "mode": "managed",
             "change": {"actions": ["create"],
                        "before": None,
                        "after": {"name": "SEEN-TOKEN-name", "password": "SECRET-TOKEN-a",
                                  "settings": {"key": "SECRET-TOKEN-b"},
                                  "blocks": {"k": "SECRET-TOKEN-c"},
                                  "whole": {"k": "SECRET-TOKEN-d"}},
                        "after_sensitive": {"settings": {"key": True},
                                            "blocks": [True],
                                            "whole": True}}},
            {"address": "aws_instance.x", "type": "aws_instance", "mode": "managed",
             "change": {"actions": ["update"],
                        "before": {"user_data": "SECRET-TOKEN-e"},
                        "after": {"user_data": "SECRET-TOKEN-f"},
                        "before_sensitive": True, "after_sensitive": "yes"}},
        ],
        "resource_drift": [
            {"address": "aws_instance.x", "change": {"before": {"t": "SECRET-TOKEN-g"},
                                                     "before_sensitive": {"t": True}}},
        ],
        "output_changes": {"conn": {"after": "SECRET-TOKEN-h", "after_sensitive": True}},
        "planned_values": {
            "outputs": {"conn": {"sensitive": True, "value": "SECRET-TOKEN-i"}},
            "root_module": {"child_modules": [{"resources": [
                {"values": {"k": "SECRET-TOKEN-j", "n": "SEEN-TOKEN-n"},
                 "sensitive_values": {"k": True}}]}]},
        },
        "prior_state": {"values": {"root_module": {"resources": [
            {"values": {"admin_password": "SECRET-TOKEN-k"}, "sensitive_values": {}}]}}},
        "configuration": {"root_module": {
            "variables": {"db_password": {"sensitive": True, "default": "SECRET-TOKEN-l"},
                          "region": {"default": "SEEN-TOKEN-default"}},
            "resources": [{"address": "aws_db_instance.db", "expressions": {
                "password": {"constant_value": "SECRET-TOKEN-m"}}}],
        }},
    }


def test_plan_policies_never_see_sensitive_values(tmp_path: Path) -> None:
    [policy] = load_policies([str(rego_policy(tmp_path, SECRET_SCANNER, input_kind="plan"))])
    report = Engine([policy]).evaluate([], NOW, door="plan",
                                       documents=plan_documents([secret_plan()]))
    seen = sorted(message for finding in report.findings
                  for message in finding.details.get("messages", [finding.message]))
    assert seen == ["SEEN-TOKEN-default", "SEEN-TOKEN-n", "SEEN-TOKEN-name",
                    "SEEN-TOKEN-region"]


def test_redaction_leaves_the_plan_it_was_given_alone() -> None:
    plan = secret_plan()
    before = json.dumps(plan, sort_keys=True)
    redacted = redacted_plan(plan)
    assert json.dumps(plan, sort_keys=True) == before
    assert "SECRET" not in json.dumps(redacted)


@pytest.mark.parametrize(("value", "marks", "fitted"), [
    ({"a": 1}, True, True),
    ({"a": 1}, [True], True),
    ({"a": 1}, "yes", True),
    ([1, 2], {"0": True}, True),
    ("text", {}, True),
    ({"a": 1}, {}, {}),
    ({"a": [1, 2]}, {"a": [False, True]}, {"a": [None, True]}),
    (None, [], None),
    ({"a": 1}, False, None),
    ({"a": 1}, None, None),
])
def test_marks_of_the_wrong_shape_count_as_sensitive(value: Any, marks: Any,
                                                     fitted: Any) -> None:
    assert fitted_marks(value, marks) == fitted


def test_policy_file_yaml_dump_of_parameters_stays_small(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`policies show` prints what loaded, and what loads is bounded (no alias expansion)."""
    path = policy_file(tmp_path, "{{ r.name }}")
    path.write_text(path.read_text() + "    parameters:\n      a: &a [1, 2]\n      b: *a\n")
    code, out, err = run_cli(["policies", "show", "hostile", "--policies", str(path)], capsys,
                         monkeypatch)
    assert code == 0, err
    assert yaml.safe_load(out)["parameters"] == {"a": [1, 2], "b": [1, 2]}
