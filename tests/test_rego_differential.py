"""gpuwarden's embedded Rego path (regorus in a worker, engine/rego/embedded.py) against OPA's own
evaluator (v1.20.2, in process through opa-golib-python-bindings, a test oracle only).

Each case is a module, an input and data; both engines evaluate it and the answers are compared
exactly (JSON with key order fixed, so `1` and `1.0` differ). An outcome is one of:

- `same`: the same value, or both undefined;
- `both refuse`: both stop with an error;
- `refused`: the embedded path stops with a clear error where OPA answers (documented);
- `differs`: different answers, a silent wrong answer: only allowed when listed in `KNOWN`
  (and in docs/rego.md), which pins it so that a fix shows up here.

The table in docs/rego.md ("What the embedded engine evaluates like OPA") is generated from these
outcomes: `GPUWARDEN_UPDATE_DOCS=1 python3 -m pytest tests/test_rego_differential.py` rewrites it,
and the test fails while it is out of date. Property-based cases (hypothesis) run the shipped
policies on generated inputs: GPUWARDEN_FUZZ_EXAMPLES (default 25) examples each.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.core.catalog import builtin_catalog
from engine.loading.policies import load_policies
from engine.rego.common import RegoError, RegoModule
from engine.sources.terraform import plan_resources, read_plan
from tests.opa_stub import OPA_ORACLE_MISSING, opa_bindings, rego_v1

pytest.importorskip("regorus")
OPA = opa_bindings()
pytestmark = pytest.mark.skipif(OPA is None, reason=OPA_ORACLE_MISSING)

from engine.rego.embedded import EmbeddedEvaluator  # noqa: E402
from engine.rego.policy import RegoProgram, catalog_document  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "rego.md"
TABLE_START = "<!-- differential-table:start -->"
TABLE_END = "<!-- differential-table:end -->"
EXAMPLES = int(os.environ.get("GPUWARDEN_FUZZ_EXAMPLES", "25"))
HEADER = "package t\n\nimport rego.v1\n\n"
CATALOG = builtin_catalog()


@dataclass(frozen=True, eq=False)
class Case:
    area: str
    name: str
    body: str
    input: Any = field(default_factory=dict)
    data: Any = field(default_factory=dict)


def cases(area: str, *rows: tuple[str, str] | tuple[str, str, Any]) -> list[Case]:
    return [Case(area, row[0], row[1], *row[2:]) for row in rows]


CASES: list[Case] = [
    *cases(
        "strings",
        ("sprintf", 'r := sprintf("%s has %d GPUs (%v)", ["p4d", 8, {"a": [1]}])'),
        ("sprintf floats", 'r := sprintf("%.2f %v %v", [3.14159, 2.5, 1e3])'),
        ("concat and split", 'r := [concat("-", ["a", "b"]), split("a,b,,c", ",")]'),
        ("trim family", 'r := [trim("  x ", " "), trim_prefix("p4d.24x", "p4d."), '
                        'trim_suffix("a.rego", ".rego"), trim_space("\\t y \\n"), '
                        'trim_left("xxa", "x"), trim_right("axx", "x")]'),
        ("case and replace", 'r := [upper("gpu"), lower("GPU"), replace("a-b-c", "-", "_")]'),
        ("contains/startswith/endswith", 'r := [contains("nvidia.com/gpu", "gpu"), '
                                         'startswith("p4d", "p"), endswith("x.rego", ".rego")]'),
        ("indexof and substring", 'r := [indexof("abcabc", "c"), substring("abcdef", 2, 3), '
                                  'substring("abc", 1, -1)]'),
        ("unicode count and indexof", 'r := [count("héllo"), indexof("héllo", "l")]'),
        ("format_int", 'r := [format_int(255, 16), format_int(-8, 2)]'),
        ("strings.replace_n", 'r := strings.replace_n({"a": "1", "b": "2"}, "a b a")'),
        ("strings.count", 'r := strings.count("banana", "an")'),
        ("sprintf of a set", 'r := sprintf("%v", [{"b", "a"}])'),
        ("to_number", 'r := [to_number("42"), to_number("4.5"), to_number(true)]'),
        ("to_number of a huge string", 'r := to_number("123456789012345678901234567890")'),
    ),
    *cases(
        "regex and glob",
        ("regex.match", r'r := [regex.match(`^p[0-9]d?\.`, "p4d.24xlarge"), '
                        r'regex.match(`^g`, "p4d")]'),
        ("regex.find_n", r'r := regex.find_n(`[0-9]+`, "a1b22c333", -1)'),
        ("regex.split", r'r := regex.split(`[,;]`, "a,b;c")'),
        ("regex.replace", r'r := regex.replace("a1b22", `[0-9]+`, "#")'),
        ("regex.find_all_string_submatch_n",
         r'r := regex.find_all_string_submatch_n(`(\w)=(\d)`, "a=1 b=2", -1)'),
        ("regex.is_valid", r'r := [regex.is_valid(`[a-z]+`), regex.is_valid(`(`)]'),
        ("invalid regex", r'r := regex.match(`(`, "x")'),
        ("glob.match with separator", 'r := [glob.match("*.example.com", ["."], "a.example.com"), '
                                      'glob.match("*.example.com", ["."], "a.b.example.com")]'),
        ("glob.match without separator",
         'r := glob.match("nvidia.com/*", [], "nvidia.com/mig-1g")'),
        ("glob.match character class", 'r := glob.match("p[34]d.*", [], "p4d.24xlarge")'),
        ("glob.quote_meta", 'r := glob.quote_meta("*.a?")'),
    ),
    *cases(
        "units",
        ("units.parse_bytes", 'r := [units.parse_bytes("1Gi"), units.parse_bytes("1G"), '
                              'units.parse_bytes("512Mi"), units.parse_bytes("10")]'),
        ("units.parse", 'r := [units.parse("500m"), units.parse("2k"), units.parse("1Ki")]'),
        ("units.parse fraction", 'r := units.parse_bytes("1.5Gi")'),
        ("units.parse_bytes invalid", 'r := units.parse_bytes("lots")'),
    ),
    *cases(
        "time",
        ("time.parse_rfc3339_ns", 'r := time.parse_rfc3339_ns("2026-12-01T03:00:00Z")'),
        ("time.parse_ns layout", 'r := time.parse_ns("2006-01-02", "2026-12-01")'),
        ("time.date and clock", 'r := [time.date(1796094000000000000), '
                                'time.clock(1796094000000000000)]'),
        ("time.weekday", 'r := time.weekday(1796094000000000000)'),
        ("time.add_date", 'r := time.add_date(1796094000000000000, 0, 1, 0)'),
        ("time.parse_duration_ns", 'r := [time.parse_duration_ns("1h30m"), '
                                   'time.parse_duration_ns("250ms")]'),
        ("time.diff", 'r := time.diff(1796094000000000000, 1764558000000000000)'),
        ("time.format", 'r := time.format(1796094000000000000)'),
        ("time.clock in a zone", 'r := time.clock([1796094000000000000, "America/New_York"])'),
    ),
    *cases(
        "net and CIDR",
        ("net.cidr_contains", 'r := [net.cidr_contains("10.0.0.0/8", "10.1.2.3"), '
                              'net.cidr_contains("10.0.0.0/8", "11.0.0.1"), '
                              'net.cidr_contains("10.0.0.0/8", "10.2.0.0/16")]'),
        ("net.cidr_intersects", 'r := [net.cidr_intersects("10.0.0.0/16", "10.0.255.0/24"), '
                                'net.cidr_intersects("10.0.0.0/16", "10.1.0.0/16"), '
                                'net.cidr_intersects("10.0.0.1/8", "10.0.0.0/8")]'),
        ("net.cidr_intersects of an address", 'r := net.cidr_intersects("10.0.0.1", "10.0.0.0/8")'),
        ("net.cidr_intersects IPv6 and IPv4", 'r := net.cidr_intersects("fd00::/8", "10.0.0.0/8")'),
        ("net.cidr_intersects invalid", 'r := net.cidr_intersects("nope", "10.0.0.0/8")'),
        ("net.cidr_is_valid", 'r := [net.cidr_is_valid("10.0.0.0/33"), '
                              'net.cidr_is_valid("fd00::/8")]'),
        ("net.cidr_expand", 'r := net.cidr_expand("192.168.1.0/30")'),
        ("net.cidr_merge", 'r := net.cidr_merge(["10.0.0.0/25", "10.0.0.128/25"])'),
        ("net.cidr_contains_matches", 'r := net.cidr_contains_matches(["10.0.0.0/8"], '
                                      '["10.1.1.1", "8.8.8.8"])'),
        ("IPv6 contains", 'r := net.cidr_contains("2001:db8::/32", "2001:db8::1")'),
    ),
    *cases(
        "JSON and YAML",
        ("json.marshal", 'r := json.marshal({"b": [1, 2.5, "x"], "a": null})'),
        ("json.unmarshal", 'r := json.unmarshal(`{"a": [1, 2.5, true, null]}`)'),
        ("json.unmarshal big integer", 'r := json.unmarshal("12345678901234567890123")'),
        ("json.is_valid", 'r := [json.is_valid("{}"), json.is_valid("{")]'),
        ("json.patch", 'r := json.patch({"a": 1}, [{"op": "add", "path": "/b", "value": 2}])'),
        ("json.filter", 'r := json.filter({"a": {"b": 1, "c": 2}}, ["a/b"])'),
        ("json.remove", 'r := json.remove({"a": {"b": 1, "c": 2}}, ["a/b"])'),
        ("yaml.unmarshal YAML 1.1 booleans",
         'r := yaml.unmarshal("a: y\\nb: yes\\nc: on\\nd: n\\ne: no\\nf: off\\ng: True\\n'
         'h: Y\\ni: NO\\nj: ON\\nk: \\"yes\\"")'),
        ("yaml.unmarshal numbers",
         'r := yaml.unmarshal("a: 017\\nb: 0o17\\nc: 0x1F\\nd: 0b101\\ne: 1_000\\nf: 1e3\\n'
         'g: 1.5\\nh: -42\\ni: +7\\nj: .5")'),
        ("yaml.unmarshal strings that look typed",
         'r := yaml.unmarshal("a: 2001-12-14\\nb: 1:20\\nc: ~\\nd: null\\ne: 09\\nf: 1.2.3")'),
        ("yaml.unmarshal nested", 'r := yaml.unmarshal("xs:\\n  - a: 1\\n  - [on, off]\\n'
                                  'm: {k: v}")'),
        ("yaml.unmarshal non-string keys", 'r := yaml.unmarshal("1: a\\ntrue: b\\n~: c")'),
        ("yaml.unmarshal anchors and merge", 'r := yaml.unmarshal("a: &x {k: 1}\\nb:\\n'
                                             '  <<: *x\\n  j: 2")'),
        ("yaml.unmarshal infinity", 'r := yaml.unmarshal("a: .inf")'),
        ("yaml.unmarshal invalid", 'r := yaml.unmarshal("a: [")'),
        ("yaml.is_valid", 'r := [yaml.is_valid("a: 1"), yaml.is_valid("a: [")]'),
        ("yaml.marshal", 'r := yaml.marshal({"a": "yes", "b": [1, "y"]})'),
        ("base64 and hex", 'r := [base64.encode("gpu"), base64.decode("Z3B1"), hex.encode("a"), '
                           'base64url.encode("??>")]'),
        ("urlquery", 'r := [urlquery.encode("a b&c"), urlquery.decode("a%20b")]'),
    ),
    *cases(
        "sets, objects and comprehensions",
        ("set operations", 'r := [{1, 2, 3} & {2, 3, 4}, {1, 2} | {3}, {1, 2, 3} - {2}]'),
        ("set comprehension", 'r := {x | some x in input.xs; x > 1}', {"xs": [3, 1, 2, 3]}),
        ("object comprehension", 'r := {k: count(v) | some k, v in input.g}',
         {"g": {"a": [1], "b": []}}),
        ("nested comprehension", 'r := [[y | some y in x] | some x in input.xs]',
         {"xs": [[1, 2], []]}),
        ("partial set rule", 'r contains x if { some x in input.xs; x != "b" }',
         {"xs": ["a", "b", "c", "a"]}),
        ("partial object rule", 'r[k] := v if { some k, v in input.o; v > 1 }',
         {"o": {"a": 1, "b": 2}}),
        ("object.union_n", 'r := object.union_n([{"a": 1}, {"a": 2, "b": {"c": 1}}, '
                           '{"b": {"d": 2}}])'),
        ("object.remove and filter", 'r := [object.remove({"a": 1, "b": 2}, ["a"]), '
                                     'object.filter({"a": 1, "b": 2}, {"a"})]'),
        ("object.subset", 'r := [object.subset({"a": {"b": 1, "c": 2}}, {"a": {"b": 1}}), '
                          'object.subset([1, 2, 3], [2, 3])]'),
        ("sort and mixed types", 'r := sort([3, "a", null, true, 1.5, [1], {"k": 1}])'),
        ("array.concat and slice", 'r := [array.concat([1], [2]), array.slice([1, 2, 3], 1, 9), '
                                   'array.reverse([1, 2])]'),
        ("union and intersection", 'r := [union({{1}, {2}}), intersection({{1, 2}, {2, 3}})]'),
        ("walk", 'r := [p | walk(input, [p, v]); v == 1]', {"a": {"b": 1}, "c": [1]}),
        ("set of objects", 'r := {{"b": 1, "a": 2}, {"a": 1}}'),
        ("equality across types", 'r := [1 == 1.0, [1] == [1.0], {"a": 1} == {"a": 1.0}]'),
        ("object.keys of empty", 'r := object.keys({})'),
    ),
    *cases(
        "every and some … in",
        ("every holds", 'r if every x in input.xs { x > 0 }', {"xs": [1, 2]}),
        ("every fails", 'r if every x in input.xs { x > 0 }', {"xs": [1, -1]}),
        ("every over empty", 'r if every x in input.xs { x > 0 }', {"xs": []}),
        ("every with key", 'r if every k, v in input.o { startswith(k, "a"); v > 0 }',
         {"o": {"ab": 1, "ac": 2}}),
        ("every over an undefined path", 'r if every x in input.none { x > 0 }'),
        ("some in with index", 'r := [i | some i, x in input.xs; x == "b"]', {"xs": ["a", "b"]}),
        ("some in over object", 'r := [k | some k, _ in input.o]', {"o": {"b": 1, "a": 2}}),
        ("some in over a set", 'r := [x | some x in {3, 1, 2}]'),
        ("some in over a string", 'r := [x | some x in input.s]', {"s": "abc"}),
        ("some in over null", 'r := [x | some x in input.n]', {"n": None}),
        ("membership", 'r := ["b" in {"a", "b"}, "c" in ["a"], 1 in {"k": 1}]'),
        ("not with some", 'r if not any_negative\n\nany_negative if { some x in input.xs; '
                          'x < 0 }', {"xs": [1]}),
        ("with keyword", 'f := input.x\n\nr := f with input.x as 5'),
        ("else chain", 'r := "gold" if input.n > 8\nelse := "silver" if input.n > 2\n'
                       'else := "bronze"', {"n": 5}),
        ("default and conflict-free function", 'default r := 0\n\nr := x if { x := input.n; '
                                               'x > 10 }', {"n": 3}),
        ("complete rule conflict", 'r := 1 if input.a\n\nr := 2 if input.b',
         {"a": True, "b": True}),
        ("function conflict", 'f(x) := 1 if x > 0\n\nf(x) := 2 if x > 1\n\nr := f(5)'),
    ),
    *cases(
        "numbers",
        ("int64 max", 'r := 9223372036854775807'),
        ("int64 max plus one", 'r := 9223372036854775807 + 1'),
        ("int64 min minus one", 'r := -9223372036854775808 - 1'),
        ("product past 2^64", 'r := 100000000000000000000 * 10'),
        ("input integer past int64", 'r := input.x * 10', {"x": 100000000000000000000}),
        ("input integer at int64 max", 'r := input.x - 1', {"x": 9223372036854775807}),
        ("huge literal", 'r := 123456789012345678901234567890'),
        ("2^53 plus one", 'r := 9007199254740992 + 1'),
        ("division", 'r := [7 / 2, 6 / 3, -7 / 2]'),
        ("division by zero", 'r := 1 / input.zero', {"zero": 0}),
        ("remainder", 'r := [7 % 3, -7 % 3]'),
        ("decimal sum", 'r := 0.1 + 0.2'),
        ("decimal comparison", 'r := 0.1 + 0.2 == 0.3'),
        ("decimal product", 'r := 1.1 * 3'),
        ("price arithmetic", 'r := input.price * 24 * 30', {"price": 32.7726}),
        ("rounding", 'r := [round(2.5), round(-2.5), ceil(1.2), floor(-1.2), abs(-3)]'),
        ("numbers.range", 'r := [numbers.range(1, 4), numbers.range(3, 1)]'),
        ("sum, product, max, min", 'r := [sum([1, 2.5]), product([2, 3]), max([1, 3]), '
                                   'min({4, 2})]'),
        ("float that is whole", 'r := [2.0, 1e3, 5.0 * 2]'),
        ("huge float literal", 'r := 1e400'),
        ("bits", 'r := [bits.and(12, 10), bits.or(12, 10), bits.lsh(1, 10)]'),
        ("integer from float division", 'r := [x | x := 9 / 3; is_number(x)]'),
    ),
    *cases(
        "data documents",
        ("base document read directly", "r := data.inventory.nodes", {},
         {"inventory": {"nodes": ["n1", "n2"]}}),
        ("base document beside rules", "r := data.t.limits.gpus", {},
         {"t": {"limits": {"gpus": 8}}}),
        ("missing base document", "r := data.inventory.none", {}, {"inventory": {}}),
        ("iterate data", 'r := [n | some n in data.inventory.nodes; startswith(n, "g")]', {},
         {"inventory": {"nodes": ["gpu-1", "cpu-1"]}}),
    ),
    *cases(
        "other built-ins",
        ("crypto.sha256", 'r := crypto.sha256("abc")'),
        ("crypto.md5", 'r := crypto.md5("abc")'),
        ("crypto.sha1 of unicode", 'r := crypto.sha1("héllo")'),
        ("crypto of a number", 'r := crypto.sha256(input.n)', {"n": 1}),
        ("crypto.hmac.sha256", 'r := crypto.hmac.sha256("message", "key")'),
        ("uuid.parse", 'r := uuid.parse("550e8400-e29b-41d4-a716-446655440000")'),
        ("semver.compare", 'r := [semver.compare("1.2.3", "1.10.0"), semver.is_valid("1.2")]'),
        ("type_name", 'r := [type_name(1), type_name("a"), type_name({1}), type_name(null)]'),
        ("is_* checks", 'r := [is_array([]), is_object({}), is_set(set()), is_string(""), '
                        'is_boolean(false), is_null(null), is_number(1.5)]'),
        ("count of collections", 'r := [count([1, 2]), count({"a": 1}), count(set())]'),
        ("any and all (deprecated)", 'r := [any([false, true]), all([true, false])]'),
        ("print does not change the answer", 'r := 1 if { print("hello"); true }'),
    ),
]

# Gatekeeper-style Rego v0 modules (written for this suite, in the style of the library's
# templates): the embedded engine reads them as v0, OPA 1.x as their mechanical v1 rewrite, so
# the v0-only built-ins (`any`, `all`, `re_match`) cannot be compared here (OPA 1.x refuses
# them); tests/test_rego_embedded.py checks `any` and `all` on their own.
V0_AREA = "Rego v0 (Gatekeeper style)"


def review(obj: dict[str, Any], **parameters: Any) -> dict[str, Any]:
    return {"review": {"object": obj, "kind": {"kind": obj.get("kind", "Pod")}},
            "parameters": parameters}


def pod(*containers: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": "p", **metadata},
            "spec": {"containers": list(containers)}}


ALLOWED_REPOS = """package t

violation[{"msg": msg}] {
  container := input.review.object.spec.containers[_]
  satisfied := [repo | repo = input.parameters.repos[_]; startswith(container.image, repo)]
  count(satisfied) == 0
  msg := sprintf("container <%v> has an invalid image repo <%v>", [container.name, container.image])
}
"""
PRIVILEGED = """package t

violation[{"msg": msg, "details": {}}] {
  c := input_containers[_]
  c.securityContext.privileged
  msg := sprintf("Privileged container is not allowed: %v", [c.name])
}

input_containers[c] {
  c := input.review.object.spec.containers[_]
}

input_containers[c] {
  c := input.review.object.spec.initContainers[_]
}
"""
LIMITS = """package t

missing(obj, field) = true {
  not obj[field]
}

missing(obj, field) = true {
  obj[field] == ""
}

canonify_mem(orig) = new {
  is_number(orig)
  new := orig
}

canonify_mem(orig) = new {
  not is_number(orig)
  new := units.parse_bytes(orig)
}

violation[{"msg": msg}] {
  container := input.review.object.spec.containers[_]
  missing(container.resources.limits, "memory")
  msg := sprintf("container <%v> has no memory limit", [container.name])
}

violation[{"msg": msg}] {
  container := input.review.object.spec.containers[_]
  mem := canonify_mem(container.resources.limits.memory)
  max := canonify_mem(input.parameters.memory)
  mem > max
  msg := sprintf("container <%v> memory limit <%v> is higher than <%v>", [container.name, mem, max])
}
"""
REQUIRED_ANNOTATIONS = """package t

violation[{"msg": msg, "details": {"missing": missing}}] {
  provided := {k | input.review.object.metadata.annotations[k]}
  required := {k | k := input.parameters.annotations[_].key}
  missing := required - provided
  count(missing) > 0
  msg := sprintf("you must provide annotation(s): %v", [missing])
}

violation[{"msg": msg}] {
  value := input.review.object.metadata.annotations[key]
  expected := input.parameters.annotations[_]
  expected.key == key
  expected.allowedRegex != ""
  not regex.match(expected.allowedRegex, value)
  msg := sprintf("annotation <%v: %v> does not satisfy <%v>", [key, value, expected.allowedRegex])
}
"""
HOST_NAMESPACES = """package t

violation[{"msg": msg}] {
  input_share_hostnamespace(input.review.object)
  name := input.review.object.metadata.name
  msg := sprintf("Sharing the host namespace is not allowed: %v", [name])
}

input_share_hostnamespace(o) {
  o.spec.hostPID
}

input_share_hostnamespace(o) {
  o.spec.hostIPC
}
"""
V0_CASES: list[Case] = cases(
    V0_AREA,
    ("allowed repos: one bad image", ALLOWED_REPOS,
     review(pod({"name": "a", "image": "docker.io/x"}, {"name": "b", "image": "gcr.io/ok/y"}),
            repos=["gcr.io/ok/"])),
    ("allowed repos: all good", ALLOWED_REPOS,
     review(pod({"name": "a", "image": "gcr.io/ok/y"}), repos=["gcr.io/ok/", "quay.io/"])),
    ("privileged: init and app containers", PRIVILEGED,
     review({"kind": "Pod", "metadata": {"name": "p"},
             "spec": {"containers": [{"name": "a", "securityContext": {"privileged": True}}],
                      "initContainers": [{"name": "i", "securityContext": {"privileged": True}},
                                         {"name": "j"}]}})),
    ("limits: missing and too high", LIMITS,
     review(pod({"name": "a", "resources": {"limits": {"memory": "2Gi"}}},
                {"name": "b", "resources": {"limits": {}}}), memory="1Gi")),
    ("limits: an empty limit", LIMITS,
     review(pod({"name": "c", "resources": {"limits": {"memory": ""}}}), memory="1Gi")),
    ("limits: within", LIMITS,
     review(pod({"name": "a", "resources": {"limits": {"memory": "512Mi"}}}), memory="1Gi")),
    ("required annotations", REQUIRED_ANNOTATIONS,
     review(pod(annotations={"owner": "Alice"}),
            annotations=[{"key": "owner", "allowedRegex": "^[a-z]+$"}, {"key": "team"}])),
    ("host namespaces", HOST_NAMESPACES,
     review({"kind": "Pod", "metadata": {"name": "h"}, "spec": {"hostPID": True,
                                                                "hostIPC": True}})),
    ("host namespaces: none", HOST_NAMESPACES, review(pod())),
)
CASES.extend(V0_CASES)


# Known differences, each pinned: the outcome the case must keep having, and why. A fix makes
# the case `same` and this test fail until the entry is removed (and docs/rego.md updated).
BIG = "integers past the 64-bit range: regorus computes them in floating point, OPA exactly"
MISSING = "a built-in regorus does not provide: a load error naming it"
DECIMAL = ("arithmetic on non-integers: regorus uses binary floating point, OPA decimal "
           "(big.Float), so the last digits of a sum or product, and an exact `==`, can differ")
KNOWN: dict[str, tuple[str, str]] = {
    "sprintf floats": ("differs", "`%v` of a number literal: OPA prints it as written (`1e3`), "
                                  "regorus as its value (`1000`)"),
    "float that is whole": ("differs", "a whole non-integer (`2.0`, `1e3`) comes back as `2`, "
                                       "`1000`; equal in Rego, only its JSON text differs"),
    "decimal sum": ("differs", DECIMAL),
    "decimal comparison": ("differs", DECIMAL),
    "decimal product": ("differs", DECIMAL),
    "price arithmetic": ("differs", DECIMAL),
    "to_number of a huge string": ("refused", BIG),
    "json.unmarshal big integer": ("refused", BIG),
    "int64 min minus one": ("refused", BIG),
    "product past 2^64": ("refused", BIG),
    "huge literal": ("refused", BIG),
    "input integer past int64": ("refused", "an input integer past the 64-bit range is not "
                                            "read (a clear error)"),
    "huge float literal": ("refused", "a number literal past float range (OPA: +Inf)"),
    "net.cidr_merge": ("refused", MISSING),
    "net.cidr_contains_matches": ("refused", MISSING),
    "crypto.hmac.sha256": ("refused", MISSING),
    "yaml.marshal": ("refused", "refused at load: regorus writes YAML 1.2 (`a: yes`) where OPA "
                                "quotes (`a: \"yes\"`)"),
    "some in over a string": ("refused", "`some x in` a non-collection: OPA reads it as "
                                         "undefined, the embedded engine stops with an error"),
    "some in over null": ("refused", "`some x in` a non-collection: OPA reads it as "
                                     "undefined, the embedded engine stops with an error"),
}


Answer = tuple[str, Any]  # ("value", v) | ("undefined", None) | ("error", message)


def opa_answer(modules: list[tuple[str, str]], data: Any, path: str, input_doc: Any) -> Answer:
    assert OPA is not None
    engine = OPA.OpaEngine()
    try:
        for name, text in modules:
            engine.add_policy(name, rego_v1(text))  # OPA 1.x: v0 modules written as v1
        if data:
            engine.add_data(data)
        return "value", engine.eval_document(path.removeprefix("data."), input_doc)
    except OPA.OpaUndefinedError:
        return "undefined", None
    except OPA.OpaError as exc:
        return "error", str(exc).splitlines()[0]
    finally:
        engine.close()


def embedded_answers(modules: list[tuple[str, str]], data: Any, paths: list[str],
                     input_doc: Any) -> dict[str, Answer]:
    try:
        evaluator = EmbeddedEvaluator([RegoModule(n, t) for n, t in modules], data,
                                      entry_points=paths)
        values = evaluator.evaluate(paths, input_doc)
    except RegoError as exc:
        return dict.fromkeys(paths, ("error", exc.message))
    return {path: ("value", values[path]) if path in values else ("undefined", None)
            for path in paths}


def canonical(answer: Answer) -> str:
    return json.dumps(answer[1], sort_keys=True) if answer[0] == "value" else answer[0]


def outcome(embedded: Answer, opa: Answer) -> str:
    if embedded[0] == "error":
        return "both refuse" if opa[0] == "error" else "refused"
    return "same" if canonical(embedded) == canonical(opa) else "differs"


def case_result(case: Case) -> tuple[str, Answer, Answer]:
    return _result_of(CASES.index(case))


@cache
def _result_of(index: int) -> tuple[str, Answer, Answer]:
    case = CASES[index]
    v0 = case.area == V0_AREA  # a whole v0 module, its answer at `violation`
    modules = [("t.rego", case.body if v0 else HEADER + case.body + "\n")]
    path = "data.t.violation" if v0 else "data.t.r"
    embedded = embedded_answers(modules, case.data, [path], case.input)[path]
    opa = opa_answer(modules, case.data, path, case.input)
    return outcome(embedded, opa), embedded, opa


def explain(case: Case, result: tuple[str, Answer, Answer]) -> str:
    return f"{case.name}: embedded {result[1]!r}, OPA {result[2]!r}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_embedded_answers_as_opa(case: Case) -> None:
    result = case_result(case)
    expected = KNOWN.get(case.name, (None, ""))[0]
    if expected is not None:
        assert result[0] == expected, "a known difference changed: " + explain(case, result)
    else:
        assert result[0] in ("same", "both refuse"), explain(case, result)


# ------------------------------------------------------------------ base documents as entry points

def test_base_documents_are_read_directly_as_opa_reads_them() -> None:
    """`data.x.y` that is not a rule, queried as an entry point (as a policy's paths are)."""
    modules = [("t.rego", HEADER + "r := 1\n")]
    data = {"inventory": {"nodes": ["n1"], "empty": {}}, "t": {"limits": {"gpus": 8}}}
    paths = ["data.inventory.nodes", "data.inventory.empty", "data.t.limits.gpus",
             "data.inventory.none", "data.t.r"]
    for path in paths:  # one path at a time takes the single-rule road
        alone = embedded_answers(modules, data, [path], {})[path]
        assert canonical(alone) == canonical(opa_answer(modules, data, path, {})), path
    together = embedded_answers(modules, data, paths, {})
    for path in paths:
        assert canonical(together[path]) == canonical(opa_answer(modules, data, path, {})), path


# ------------------------------------------------------------------ the shipped policies

POLICIES = ROOT / "policies" / "rego"
RULES = ("deny", "violation", "warn", "unknown")


@dataclass(frozen=True)
class Shipped:
    name: str
    modules: tuple[str, ...]
    package: str
    data: str = ""  # "catalog" for data.gpuwarden.catalog

    def sources(self) -> list[tuple[str, str]]:
        return [(name, (POLICIES / name).read_text()) for name in self.modules]

    def data_document(self) -> dict[str, Any]:
        return catalog_document() if self.data == "catalog" else {}

    def paths(self) -> list[str]:
        return [f"data.{self.package}.{rule}" for rule in RULES]


SPOT = Shipped("gpu-spot-required", ("gpu_spot_required.rego",), "gpuwarden.spot")
COST_TAGS = Shipped("required-cost-tags", ("required_cost_tags.rego",), "gpuwarden.cost_tags")
LABELS = Shipped("k8srequiredlabels", ("gatekeeper/k8srequiredlabels.rego",), "k8srequiredlabels")
TESTS = [
    Shipped("gpu_spot_required_test", ("gpu_spot_required.rego", "gpu_spot_required_test.rego"),
            "gpuwarden.spot_test"),
    Shipped("required_cost_tags_test", ("required_cost_tags.rego", "required_cost_tags_test.rego"),
            "gpuwarden.cost_tags_test"),
    Shipped("k8srequiredlabels_test", ("gatekeeper/k8srequiredlabels.rego",
                                       "gatekeeper/k8srequiredlabels_test.rego"),
            "k8srequiredlabels_test"),
]
REFERENCE = ROOT / "tests" / "data" / "reference"
COST_PARAMETERS = {"required_tags": ["team", "project", "cost-center"]}
LABEL_PARAMETERS = {"labels": [{"key": "owner"},
                               {"key": "team", "allowedRegex": "^[a-z][a-z0-9-]*$"}]}


def plan_files() -> list[Path]:
    files = [POLICIES / "testdata" / "small-plan.json",
             *sorted((REFERENCE / "terraform-plans").glob("*.json"))]
    return [f for f in files if isinstance(_json_or_none(f), dict)]


def resource_inputs(plan_file: Path) -> list[Any]:
    """The twin's inputs for a plan: its normalized resources of the twin's categories, as
    gpuwarden hands them over (only the keys the module reads)."""
    [policy] = load_policies([str(POLICIES / "gpu_spot_required.yaml")])
    program = policy.rego
    assert isinstance(program, RegoProgram)
    plan = read_plan(str(plan_file))
    return [program.input_for(r, {}) for r in plan_resources(plan, str(plan_file), CATALOG)
            if r.category in policy.categories]


def admission_inputs(parameters: dict[str, Any]) -> list[tuple[str, Any]]:
    files = [*sorted((POLICIES / "testdata").glob("*.json")),
             *sorted((REFERENCE / "admission").glob("*.json"))]
    found = []
    for file in files:
        document = _json_or_none(file)
        if isinstance(document, dict) and isinstance(document.get("request"), dict):
            request = document["request"]
            found.append((file.name, {"request": request, "review": request,
                                      "parameters": parameters}))
    return found


def _json_or_none(file: Path) -> Any:
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None  # a reference file in another encoding: not this suite's concern


def compare_policy(policy: Shipped, input_doc: Any,
                   paths: list[str] | None = None) -> list[tuple[str, str, Answer, Answer]]:
    sources, data = policy.sources(), policy.data_document()
    paths = paths or policy.paths()
    embedded = embedded_answers(sources, data, paths, input_doc)
    return [(path, outcome(embedded[path], opa), embedded[path], opa)
            for path in paths
            if (opa := opa_answer(sources, data, path, input_doc))]


SHIPPED_CASES = [
    *[(COST_TAGS, name, doc) for name, doc in admission_inputs(COST_PARAMETERS)],
    *[(LABELS, name, doc) for name, doc in admission_inputs(LABEL_PARAMETERS)],
]


@pytest.mark.parametrize(("policy", "name", "input_doc"), SHIPPED_CASES,
                         ids=[f"{p.name}:{n}" for p, n, _ in SHIPPED_CASES])
def test_shipped_policies_answer_as_opa(policy: Shipped, name: str, input_doc: Any) -> None:
    for path, result, embedded, opa in compare_policy(policy, input_doc):
        assert result == "same", f"{name} {path}: embedded {embedded!r}, OPA {opa!r}"


def compare_batch(policy: Shipped, inputs: list[Any]) -> list[tuple[int, str, Answer, Answer]]:
    """Each input evaluated in batches (`evaluate_many`, as the engine's loop does) beside OPA
    evaluating it alone."""
    sources, data = policy.sources(), policy.data_document()
    paths = policy.paths()
    evaluator = EmbeddedEvaluator([RegoModule(n, t) for n, t in sources], data,
                                  entry_points=paths)
    found = []
    for index, (input_doc, values) in enumerate(zip(inputs, evaluator.evaluate_many(
            paths, inputs, "plan"), strict=True)):
        assert isinstance(values, dict), values
        for path in paths:
            embedded: Answer = ("value", values[path]) if path in values else ("undefined", None)
            opa = opa_answer(sources, data, path, input_doc)
            found.append((index, path, embedded, opa))
    return found


PLAN_FILES = plan_files()


@pytest.mark.parametrize("plan_file", PLAN_FILES, ids=[f.name for f in PLAN_FILES])
def test_spot_twin_answers_as_opa_on_the_resources_of_plans(plan_file: Path) -> None:
    inputs = resource_inputs(plan_file)
    for index, path, embedded, opa in compare_batch(SPOT, inputs):
        assert outcome(embedded, opa) == "same", f"{plan_file.name}[{index}] {path}: " \
            f"embedded {embedded!r}, OPA {opa!r}"


def unit_test_paths(policy: Shipped) -> list[str]:
    return [f"data.{policy.package}.{found}" for found in re.findall(
        r"^(test_\w+)", "\n".join(text for _, text in policy.sources()), re.MULTILINE)]


@pytest.mark.parametrize("policy", TESTS, ids=[t.name for t in TESTS])
def test_shipped_rego_unit_tests_answer_as_opa(policy: Shipped) -> None:
    paths = unit_test_paths(policy)
    assert paths
    for path, result, embedded, opa in compare_policy(policy, {}, paths):
        assert result == "same" and opa == ("value", True), f"{path}: {embedded!r} / {opa!r}"


# ------------------------------------------------------------------ properties

labels = st.dictionaries(st.sampled_from(["team", "Team", "project", "cost_center", "cost-center",
                                          "owner", "app"]),
                         st.sampled_from(["", "ml", "Research", "a-b", "x_y", "1"]), max_size=5)
gpu_limits = st.dictionaries(st.sampled_from(["nvidia.com/gpu", "nvidia.com/mig-1g.10gb",
                                              "nvidia.com/mig-", "cpu", "memory"]),
                             st.one_of(st.integers(0, 8), st.sampled_from(["1", "2", "500m"])),
                             max_size=3)


@st.composite
def admission_objects(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["Pod", "Deployment", "Job", "CronJob", "Service"]))
    container = {"name": "c", "resources": {"limits": draw(gpu_limits)}}
    pod_spec = {"containers": [container]}
    metadata = {"name": "w", "namespace": "ns", "labels": draw(labels)}
    template = {"metadata": {"labels": draw(labels)}, "spec": pod_spec}
    if kind == "Pod":
        obj: dict[str, Any] = {"kind": kind, "metadata": metadata, "spec": pod_spec}
    elif kind == "CronJob":
        obj = {"kind": kind, "metadata": metadata,
               "spec": {"jobTemplate": {"spec": {"template": template}}}}
    else:
        obj = {"kind": kind, "metadata": metadata, "spec": {"template": template}}
    return {"kind": {"kind": kind}, "operation": "CREATE", "object": obj}


@st.composite
def spot_inputs(draw: st.DrawFn) -> dict[str, Any]:
    """Normalized resources as the spot twin reads them, in every combination of its facts."""
    gpu = draw(st.sampled_from([None, {"count": 8.0, "mig_count": 0},
                                {"count": None, "mig_count": 7}, {"count": 0.0, "mig_count": 0}]))
    return {"id": f"aws_instance.{draw(st.sampled_from(['a', 'b[0]', 'c']))}", "gpu": gpu,
            "capacity": draw(st.sampled_from(["on-demand", "spot", "reserved", "unknown"])),
            "production": draw(st.sampled_from([True, False, None])),
            "unknown": sorted(draw(st.sets(st.sampled_from(["gpu", "capacity", "tags"]))))}


FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(request=admission_objects(), tags=st.lists(st.sampled_from(
    ["team", "project", "cost-center", "Owner"]), max_size=3))
def test_cost_tags_answers_as_opa_on_generated_workloads(request: dict[str, Any],
                                                         tags: list[str]) -> None:
    input_doc = {"request": request, "review": request, "parameters": {"required_tags": tags}}
    for path, result, embedded, opa in compare_policy(COST_TAGS, input_doc):
        assert result == "same", f"{path}: embedded {embedded!r}, OPA {opa!r}"


@FUZZ
@given(request=admission_objects())
def test_required_labels_answers_as_opa_on_generated_workloads(request: dict[str, Any]) -> None:
    input_doc = {"request": request, "review": request, "parameters": LABEL_PARAMETERS}
    for path, result, embedded, opa in compare_policy(LABELS, input_doc):
        assert result == "same", f"{path}: embedded {embedded!r}, OPA {opa!r}"


@FUZZ
@given(inputs=st.lists(spot_inputs(), min_size=1, max_size=4))
def test_spot_twin_answers_as_opa_on_generated_resources(inputs: list[dict[str, Any]]) -> None:
    for index, path, embedded, opa in compare_batch(SPOT, inputs):
        assert outcome(embedded, opa) == "same", f"[{index}] {path}: embedded {embedded!r}, " \
            f"OPA {opa!r}"


# ------------------------------------------------------------------ the table in docs/rego.md

def differential_table() -> str:
    counts: dict[str, Counter[str]] = {}
    for case in CASES:
        counts.setdefault(case.area, Counter())[case_result(case)[0]] += 1
    lines = ["| Area | Cases | Same answer | Both refuse | Embedded refuses (OPA answers) "
             "| Differs (documented) |", "|---|---|---|---|---|---|"]
    total: Counter[str] = Counter()
    for area, count in counts.items():
        total.update(count)
        lines.append(_row(area, count))
    lines.append(_row("**all**", total))
    known = [f"- `{name}` ({outcome_}): {why}" for name, (outcome_, why) in KNOWN.items()]
    return "\n".join([*lines, "", "Every case that does not answer as OPA does:", "", *known])


def _row(area: str, count: Counter[str]) -> str:
    return (f"| {area} | {sum(count.values())} | {count['same']} | {count['both refuse']} "
            f"| {count['refused']} | {count['differs']} |")


def test_the_docs_table_is_generated_from_this_suite() -> None:
    text = DOC.read_text(encoding="utf-8")
    table = differential_table()
    start, end = text.find(TABLE_START), text.find(TABLE_END)
    assert 0 <= start < end, f"docs/rego.md lacks the {TABLE_START} … {TABLE_END} markers"
    current = text[start + len(TABLE_START):end].strip()
    if current != table and os.environ.get("GPUWARDEN_UPDATE_DOCS"):
        DOC.write_text(text[:start + len(TABLE_START)] + "\n" + table + "\n" + text[end:],
                       encoding="utf-8")
        return
    assert current == table, ("docs/rego.md's differential table is out of date: rerun with "
                              "GPUWARDEN_UPDATE_DOCS=1")


# ------------------------------------------------------------------ yaml.unmarshal's scalars

SCALAR_PARTS = ["0", "1", "7", "9", "0x", "0o", "0b", "_", ".", "-", "+", "e", "E", "inf", "nan",
                "y", "Y", "n", "yes", "No", "on", "OFF", "true", "False", "null", "~", ":", "a",
                "2001-12-14", "1:20", " ", "'", '"', "0.5", "1e3", ".5"]


@FUZZ
@given(parts=st.lists(st.sampled_from(SCALAR_PARTS), min_size=1, max_size=4))
def test_yaml_unmarshal_reads_scalars_as_opa_does(parts: list[str]) -> None:
    """The go-yaml v2 rules engine.rego.yaml_go reproduces, against OPA, on generated scalars
    as a value, a key and a list item."""
    scalar = "".join(parts)
    for document in (f"v: {scalar}", f"{scalar}: v", f"- {scalar}"):
        body = f"r := yaml.unmarshal({json.dumps(document)})"
        modules = [("t.rego", HEADER + body + "\n")]
        embedded = embedded_answers(modules, {}, ["data.t.r"], {})["data.t.r"]
        opa = opa_answer(modules, {}, "data.t.r", {})
        result = outcome(embedded, opa)
        # a whole float past 2^63 (`1e30`) is refused, as any such number in an answer is
        refused_big = result == "refused" and "integer range" in str(embedded[1])
        assert result in ("same", "both refuse") or refused_big, (document, embedded, opa)
