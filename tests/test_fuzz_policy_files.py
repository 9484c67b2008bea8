"""Fuzz `gpuwarden policies validate` (in-process, hypothesis) with generated policy files,
valid-ish and hostile: mutated policies, message templates from safe and hostile fragments,
deep nesting, huge integers, alias bombs, control characters, broken YAML.

Properties: exit 0 or 2, never a traceback nor an internal error; on 2 exactly one line on
stderr; each file judged within a time bound; a policy that validates renders its message for
a resource within the output cap and the time bound, whatever the template says.

Examples per test: GPUWARDEN_FUZZ_EXAMPLES (default 50; e.g. 2000 for a nightly run).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.cli import main
from engine.core import templates
from engine.core.catalog import builtin_catalog
from engine.core.enrich import enrich
from engine.core.model import Resource
from engine.loading.policies import load_policies

EXAMPLES = int(os.environ.get("GPUWARDEN_FUZZ_EXAMPLES", "50"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
TIME_BOUND_S = 10.0

TEMPLATE_FRAGMENTS = [
    "{{ r.name }}", "{{ r.gpu.count|int }}", "{{ cost|usd }}",
    "{{ details.missing_tags|join(', ') }}",
    "{% if r.gpu %}gpu{% else %}none{% endif %}", "{{ params.get('x', 1) }}",
    "{% for k in params %}{{ k }}{% endfor %}", "{{ r.__class__ }}", "{{ r['__dict__'] }}",
    "{{ cycler.__init__.__globals__ }}", "{{ range(10**9) }}", "{{ 'a' * 10**9 }}",
    "{{ 2 ** (10**8) }}", "{{ '%099999999d' % 1 }}", "{{ 1/0 }}", "{{ lipsum(9) }}",
    "{% for i in range(1000) %}{% for j in range(1000) %}x{% endfor %}{% endfor %}",
    "{% macro m() %}{{ m() }}{% endmacro %}", "{% include 'a' %}", "{% raw %}{{{% endraw %}",
    "{{", "{% if %}", "}}", "{{ r.name.format(r) }}", "{{ r|attr('x') }}", "{# c #}",
    "{{ (((((((((1))))))))) }}", "{{ " + "(" * 60 + "1" + ")" * 60 + " }}", "\x00", "\u202e",
]
FIELDS = ["gpu.count", "gpu.model", "capacity", "tags.team", "region", "name", "nope.field", ""]
OPS = ["eq", "ne", "gt", "lt", "in", "contains", "matches", "exists", "bogus"]
CATEGORIES = ["instance", "workload", "volume", "bucket", "node_group", "unicorn"]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
    st.text(max_size=20), st.sampled_from(["\x00", "\x1b[31m", "\u2028", "é", "🙂"]),
)
templates_st = st.lists(st.one_of(st.sampled_from(TEMPLATE_FRAGMENTS), st.text(max_size=10)),
                        max_size=5).map("".join)
conditions: st.SearchStrategy[Any] = st.recursive(
    st.builds(lambda f, o, v: {"field": f, "op": o, "value": v}, st.sampled_from(FIELDS),
              st.sampled_from(OPS), scalars),
    lambda inner: st.one_of(
        st.builds(lambda xs: {"all": xs}, st.lists(inner, max_size=3)),
        st.builds(lambda xs: {"any": xs}, st.lists(inner, max_size=3)),
        st.builds(lambda x: {"not": x}, inner),
    ),
    max_leaves=8,
)
policies_st = st.fixed_dictionaries(
    {"id": st.one_of(st.sampled_from(["gpu-x", "a", "Bad_Id", "ok-policy"]), st.text(max_size=8)),
     "title": st.text(max_size=20), "severity": st.sampled_from(["low", "high", "nope"]),
     "resources": st.lists(st.sampled_from(CATEGORIES), max_size=2),
     "violation": conditions, "message": templates_st},
    optional={"parameters": st.dictionaries(st.text(max_size=5), scalars, max_size=3),
              "scope": conditions, "cost": st.sampled_from(["none", "full", "bogus"]),
              "extra_key": scalars},
)
structured = st.builds(lambda ps: yaml.safe_dump({"apiVersion": "gpuwarden.io/v1",
                                                  "policies": ps}, allow_unicode=True),
                       st.lists(policies_st, max_size=3))


@st.composite
def alias_bombs(draw: st.DrawFn) -> str:
    fanout, depth = draw(st.integers(2, 12)), draw(st.integers(1, 12))
    lines = ["policies:", "  - id: bomb", "    title: t", "    severity: low",
             "    resources: [instance]", "    violation: {field: gpu.count, op: gt, value: 0}",
             "    message: x", "    parameters:", "      l0: &l0 [lol]"]
    for level in range(1, depth + 1):
        refs = ", ".join([f"*l{level - 1}"] * fanout)
        lines.append(f"      l{level}: &l{level} [{refs}]")
    return "\n".join(lines) + "\n"


hostile = st.one_of(
    st.integers(1, 3000).map(lambda n: "policies: " + "[" * n + "]" * n + "\n"),
    st.integers(1, 400).map(lambda n: "policies: " + "{a: " * n + "1" + "}" * n + "\n"),
    st.integers(1, 200).map(
        lambda n: "policies:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, n))),
    st.integers(1, 6000).map(lambda n: "policies: [" + "9" * n + "]\n"),
    alias_bombs(),
    st.just("policies: &a\n  - *a\n"),
    st.text(max_size=200),
    st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
)


def mutate(text: str, cut: int, noise: str) -> str:
    """Splice `noise` (control characters, YAML syntax) into `text` at a point."""
    at = cut % (len(text) + 1)
    return text[:at] + noise + text[at:]


documents = st.one_of(
    structured,
    hostile,
    st.builds(mutate, structured, st.integers(0, 10_000),
              st.sampled_from(["\x00", "\t", "\x1b", ": :", "&x ", "*x", "{{", "\ufeff", "- ",
                               "!!python/object/apply:os.system ['id']", "]", "\n  bad: [",
                               "<<: *nope"])),
)


def validate(path: str, capsys: pytest.CaptureFixture[str],
             monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["gpuwarden", "policies", "validate", path])
    with pytest.raises(SystemExit) as caught:
        main()
    out, err = capsys.readouterr()
    return int(caught.value.code or 0), out, err


def a_resource() -> Resource:
    return enrich(Resource.model_validate({
        "provider": "aws", "kind": "aws_instance", "category": "instance", "id": "i-1",
        "name": "trainer", "state": "running", "instance_type": "p4d.24xlarge",
        "tags": {"team": "ml"}}), builtin_catalog())


@FUZZ
@given(document=documents)
def test_validate_exits_cleanly_on_any_policy_file(
        document: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "fuzz.yaml"
        path.write_text(document, "utf-8", errors="surrogatepass")
        started = time.monotonic()
        code, out, err = validate(str(path), capsys, monkeypatch)
        assert time.monotonic() - started < TIME_BOUND_S
        assert code in (0, 2), (code, err)
        assert "Traceback" not in out + err and "internal error" not in err, err
        if code == 2:
            assert err.count("\n") == 1 and err.startswith("gpuwarden: error: "), err
            return
        assert out.startswith("ok: ")
        for policy in load_policies([str(path)]):
            started = time.monotonic()
            message = policy.render_message(r=a_resource(), resource=a_resource(), details={},
                                            params=policy.spec.parameters, cost=1.0)
            assert time.monotonic() - started < 2 * templates.RENDER_BUDGET_S + 1
            assert len(message) <= templates.MAX_OUTPUT + len(policy.spec.title) + 300
