"""The embedded Rego engine (regorus) against a conformance suite of our own: each case is a
module, an input (and data), and the value OPA gives for the rule. Then what the engine must
refuse or explain: parse errors, unknown functions, errors at evaluation, known gaps."""

from __future__ import annotations

import textwrap
import threading
from typing import Any

import orjson
import pytest

from engine.core.errors import InputError
from engine.rego.common import UNDEFINED, RegoError, RegoModule

pytest.importorskip("regorus")

from engine.rego.embedded import EmbeddedEvaluator


def evaluate(body: str, input_doc: Any = None, rule: str = "r", *, data: Any = None,
             header: str = "package t\n\nimport rego.v1\n\n") -> Any:
    module = RegoModule("conformance.rego", header + body)
    evaluator = EmbeddedEvaluator([module], data or {}, entry_points=[f"data.t.{rule}"])
    values = evaluator.evaluate([f"data.t.{rule}"], input_doc if input_doc is not None else {})
    return values.get(f"data.t.{rule}", UNDEFINED)


def as_set(value: Any) -> list[bytes]:
    """A set rule comes back as a JSON array; compare it without order."""
    assert isinstance(value, list), value
    return sorted(orjson.dumps(item, option=orjson.OPT_SORT_KEYS) for item in value)


# (name, module body, input, expected value as OPA gives it)
CASES: list[tuple[str, str, Any, Any]] = [
    ("array comprehension", "r := [y | some x in input.xs; x > 1; y := x * 2]", {"xs": [1, 2, 3]},
     [4, 6]),
    ("object comprehension", "r := {k: count(v) | some k, v in input.groups}",
     {"groups": {"a": [1, 2], "b": []}}, {"a": 2, "b": 0}),
    ("some with index", 'r := [i | some i, x in input.xs; x == "b"]', {"xs": ["a", "b"]}, [1]),
    ("some over object values", "r := [v | some v in input.o]", {"o": {"x": 1, "y": 2}}, [1, 2]),
    ("every holds", "r if every x in input.xs { x > 0 }", {"xs": [1, 2]}, True),
    ("every fails", "r if every x in input.xs { x > 0 }", {"xs": [1, -1]}, UNDEFINED),
    ("every over empty", "r if every x in input.xs { x > 0 }", {"xs": []}, True),
    ("default", "default r := false\n\nr if input.ok", {"ok": False}, False),
    ("else chain", 'r := "gold" if input.n > 8\nelse := "silver" if input.n > 2\nelse := "bronze"',
     {"n": 5}, "silver"),
    ("function", "double(x) := x * 2\n\nr := double(21)", {}, 42),
    ("negation of undefined", "r if not input.missing", {}, True),
    ("undefined path", "r := input.nope.deeper", {}, UNDEFINED),
    ("destructuring", "r := a if [a, _] := input.pair", {"pair": [1, 2]}, 1),
    ("membership", 'r := ["b" in {"a", "b"}, "c" in ["a"]]', {}, [True, False]),
    ("object.get default", 'r := [object.get(input, "a", 0), object.get(input, "z", 0)]',
     {"a": 1}, [1, 0]),
    ("object.get path", 'r := object.get(input, ["a", "b"], "none")', {"a": {"b": 7}}, 7),
    ("object.union and keys", 'r := object.keys(object.union({"a": 1}, {"b": 2}))', {},
     ["a", "b"]),
    ("regex.match", r'r := [s | some s in input.types; regex.match(`^p[0-9]d?\.`, s)]',
     {"types": ["p4d.24xlarge", "g5.xlarge", "p3.2xlarge"]}, ["p4d.24xlarge", "p3.2xlarge"]),
    ("sprintf", 'r := sprintf("%s has %d GPUs (%.1f%%) %v", ["x", 8, 12.5, ["a"]])', {},
     'x has 8 GPUs (12.5%) ["a"]'),
    ("json.marshal sorts keys", 'r := json.marshal({"b": 1, "a": [1, 2]})', {},
     '{"a":[1,2],"b":1}'),
    ("json.unmarshal", 'r := json.unmarshal(input.doc).a[1]', {"doc": '{"a": [1, 2]}'}, 2),
    # OPA reads YAML as go-yaml v2: a plain `y` is true (tests/test_rego_differential.py)
    ("yaml.unmarshal", r'r := yaml.unmarshal("a: 1\nb: [x, y, \"y\"]")', {},
     {"a": 1, "b": ["x", True, "y"]}),
    ("strings", 'r := concat("/", [upper("a"), trim_space(" b "), split("c.d", ".")[1]])', {},
     "A/b/d"),
    ("arithmetic", "r := [sum([1, 2, 3]) / 2, 7 / 2, count([1, 2])]", {}, [3, 3.5, 2]),
    ("units and time",
     'r := [units.parse_bytes("2Gi"), time.parse_rfc3339_ns("1970-01-01T00:00:01Z")]',
     {}, [2147483648, 1_000_000_000]),
    ("walk", "r := [p | walk(input, [p, v]); v == 1]", {"a": {"b": 1}}, [["a", "b"]]),
    ("with replaces input", 'r := x if x := input.v with input as {"v": 3}', {"v": 1}, 3),
]

SET_CASES: list[tuple[str, str, Any, list[Any]]] = [
    ("set comprehension", "r := {lower(s) | some s in input.names}", {"names": ["A", "a", "B"]},
     ["a", "b"]),
    ("contains / if partial set", 'r contains msg if {\n\tsome c in input.cs\n\tnot c.ok\n'
     '\tmsg := sprintf("%s is bad", [c.name])\n}', {"cs": [{"name": "a", "ok": True},
                                                          {"name": "b", "ok": False}]},
     ["b is bad"]),
    ("set of objects", 'r contains {"msg": m, "resource": c} if {\n\tsome c in input.cs\n'
     '\tm := concat(" ", [c, "fails"])\n}', {"cs": ["x", "y"]},
     [{"msg": "x fails", "resource": "x"}, {"msg": "y fails", "resource": "y"}]),
]


@pytest.mark.parametrize(("name", "body", "input_doc", "expected"), CASES,
                         ids=[case[0] for case in CASES])
def test_conformance(name: str, body: str, input_doc: Any, expected: Any) -> None:
    assert evaluate(body, input_doc) == expected


@pytest.mark.parametrize(("name", "body", "input_doc", "expected"), SET_CASES,
                         ids=[case[0] for case in SET_CASES])
def test_conformance_sets(name: str, body: str, input_doc: Any, expected: list[Any]) -> None:
    assert as_set(evaluate(body, input_doc)) == as_set(expected)


def test_data_documents_are_visible_under_data() -> None:
    assert evaluate("r := data.limits[input.team]", {"team": "ml"},
                    data={"limits": {"ml": 8, "web": 0}}) == 8


def test_rego_v1_import_and_plain_v1_behave_alike() -> None:
    body = 'r contains x if { some x in ["a"] }'
    assert evaluate(body) == evaluate(body, header="package t\n\n") == ["a"]


def test_v0_module_is_accepted_as_written() -> None:
    module = RegoModule("gk.rego", 'package gk\n\nviolation[{"msg": msg}] {\n'
                        '  not input.labels.owner\n  msg := "no owner"\n}\n')
    evaluator = EmbeddedEvaluator([module], {})
    found = evaluator.evaluate(["data.gk.violation"], {"labels": {}})
    assert found == {"data.gk.violation": [{"msg": "no owner"}]}


def test_v1_module_beside_a_v0_one_is_rewritten_and_keeps_its_line_numbers() -> None:
    v0 = RegoModule("old.rego", "package old\n\nallow { input.ok }\n")
    v1 = RegoModule("new.rego", "package new\n\nr if {\n  data.old.allow\n  1 / 0\n}\n")
    evaluator = EmbeddedEvaluator([v0, v1], {})
    assert evaluator.evaluate(["data.old.allow"], {"ok": True}) == {"data.old.allow": True}
    with pytest.raises(RegoError) as caught:
        evaluator.evaluate(["data.new.r"], {"ok": True})
    assert caught.value.file == "new.rego" and caught.value.line == 5


def test_several_rules_in_one_query_leave_undefined_ones_out() -> None:
    module = RegoModule("m.rego", "package m\n\nimport rego.v1\n\ndeny contains 1 if input.x\n"
                        "warn contains 2 if input.y\n")
    evaluator = EmbeddedEvaluator([module], {})
    assert evaluator.evaluate(["data.m.deny", "data.m.warn"], {"x": True, "y": False}) == {
        "data.m.deny": [1], "data.m.warn": []}
    assert evaluator.evaluate(["data.m.deny", "data.m.missing"], {"x": True}) == {
        "data.m.deny": [1]}


def test_engines_are_per_thread() -> None:
    module = RegoModule("m.rego", "package m\n\nimport rego.v1\n\nr := input.n * 2\n")
    evaluator = EmbeddedEvaluator([module], {})
    answers: dict[int, Any] = {}

    def run(n: int) -> None:
        for _ in range(50):
            answers[n] = evaluator.evaluate(["data.m.r"], {"n": n})["data.m.r"]

    threads = [threading.Thread(target=run, args=(n,)) for n in range(1, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == {1: 2, 2: 4, 3: 6, 4: 8}


# ---------------------------------------------------------------------------- refusals


def load(text: str, name: str = "bad.rego") -> EmbeddedEvaluator:
    return EmbeddedEvaluator([RegoModule(name, text)], {}, entry_points=["data.t.deny"])


def test_parse_error_names_file_and_line() -> None:
    with pytest.raises(InputError) as caught:
        load("package t\n\nimport rego.v1\n\ndeny contains x if {\n  x := 1 +\n}\n")
    assert caught.value.file == "bad.rego" and caught.value.line == 6
    assert str(caught.value).startswith("bad.rego:6: rego: ")


def test_unknown_function_is_refused_at_load_even_when_unreached() -> None:
    with pytest.raises(RegoError) as caught:
        load("package t\n\nimport rego.v1\n\ndeny contains x if {\n  false\n"
             "  x := io.jwt.decode(input.s)\n}\n")
    assert caught.value.line == 7
    assert "unknown function 'io.jwt.decode'" in caught.value.message
    assert "evaluator: remote" in caught.value.message


def test_built_ins_gpuwarden_provides_do_not_hide_an_unknown_one_after_them() -> None:
    """The compile check renames crypto.sha256 (provided by engine.rego.builtins) to go on."""
    text = ("package t\n\nimport rego.v1\n\ndeny contains x if {\n  false\n"
            "  h := crypto.sha256(input.s)\n  net.cidr_intersects(h, h)\n"
            "  x := io.jwt.decode(h)\n}\n\nr := crypto.sha1(\"abc\")\n")
    with pytest.raises(RegoError) as caught:
        load(text)
    assert caught.value.line == 9 and "io.jwt.decode" in caught.value.message
    evaluator = load(text.replace("io.jwt.decode(h)", "h"))
    assert evaluator.evaluate(["data.t.r"], {}) == {
        "data.t.r": "a9993e364706816aba3e25717850c26c9cd0d89d"}


def test_http_send_is_refused_rather_than_read_as_undefined() -> None:
    with pytest.raises(RegoError, match=r"http\.send") as caught:
        load('package t\n\nimport rego.v1\n\ndeny contains x if {\n'
             '  x := http.send({"method": "get", "url": input.url})\n}\n')
    assert caught.value.line == 6


def test_v0_modules_have_the_deprecated_any_and_all() -> None:
    """Gatekeeper templates (k8sallowedrepos) call `any(satisfied)`; OPA 1.x keeps it for v0."""
    module = RegoModule("repos.rego", textwrap.dedent("""\
        package t

        deny[msg] {
          image := input.images[_]
          satisfied := [good | repo = input.repos[_]; good = startswith(image, repo)]
          not any(satisfied)
          msg := image
        }

        every_one_good { all([startswith(i, "gcr.io/") | i := input.images[_]]) }
        """))
    evaluator = EmbeddedEvaluator([module], {}, entry_points=["data.t.deny"])
    images = {"images": ["gcr.io/a", "docker.io/b"], "repos": ["gcr.io/"]}
    assert evaluator.evaluate(["data.t.deny"], images) == {"data.t.deny": ["docker.io/b"]}
    assert evaluator.evaluate(["data.t.every_one_good"], images) == {}
    good = {"images": ["gcr.io/a"], "repos": ["gcr.io/"]}
    assert evaluator.evaluate(["data.t.deny", "data.t.every_one_good"], good) == {
        "data.t.deny": [], "data.t.every_one_good": True}
    assert evaluator.evaluate(["data.t.every_one_good"], {"images": []}) == {
        "data.t.every_one_good": True}


def test_v0_re_match_is_regex_match_outside_strings_and_comments() -> None:
    module = RegoModule("labels.rego", textwrap.dedent("""\
        package t

        # re_match(x, y) in a comment stays as written
        deny[msg] {
          value := input.labels[key]
          not re_match("^[a-z]+$", value)
          msg := sprintf("re_match(%v)", [key])
        }
        """))
    evaluator = EmbeddedEvaluator([module], {}, entry_points=["data.t.deny"])
    answer = evaluator.evaluate(["data.t.deny"], {"labels": {"team": "ML", "app": "web"}})
    assert answer == {"data.t.deny": ["re_match(team)"]}


def test_yaml_marshal_is_refused_rather_than_written_differently() -> None:
    with pytest.raises(RegoError, match=r"yaml\.marshal") as caught:
        load('package t\n\nimport rego.v1\n\nr := yaml.marshal({"a": "yes"})\n')
    assert caught.value.line == 5 and "evaluator: remote" in caught.value.message


def test_an_integer_past_the_64_bit_range_is_refused_not_answered_in_floating_point() -> None:
    evaluator = load("package t\n\nimport rego.v1\n\nr := input.n * 1000\n")
    assert evaluator.evaluate(["data.t.r"], {"n": 2**40}) == {"data.t.r": 2**40 * 1000}
    with pytest.raises(RegoError, match="integer range"):
        evaluator.evaluate(["data.t.r"], {"n": 10**18})  # 1e21: floating point in regorus


def test_error_at_evaluation_names_file_and_line() -> None:
    evaluator = load("package t\n\nimport rego.v1\n\nlimit := input.a\n\nlimit := input.b\n\n"
                     "deny contains 1 if limit\n")
    with pytest.raises(RegoError) as caught:
        evaluator.evaluate(["data.t.deny"], {"a": 1, "b": 2})
    assert caught.value.file == "bad.rego" and caught.value.line in (5, 7)


def test_iterating_a_terraform_null_is_explained_not_answered() -> None:
    evaluator = load("package t\n\nimport rego.v1\n\ndeny contains b if {\n"
                     "  some b in input.after.ebs_block_device\n}\n")
    with pytest.raises(RegoError) as caught:
        evaluator.evaluate(["data.t.deny"], {"after": {"ebs_block_device": None}})
    assert caught.value.line == 6
    assert "OPA treats iterating a non-collection as undefined" in caught.value.message
    assert "object.get" in caught.value.message


def test_guarded_iteration_over_null_is_fine() -> None:
    evaluator = load("package t\n\nimport rego.v1\n\ndeny contains b if {\n"
                     "  blocks := object.get(input.after, \"ebs_block_device\", [])\n"
                     "  is_array(blocks)\n  some b in blocks\n}\n")
    assert evaluator.evaluate(["data.t.deny"], {"after": {"ebs_block_device": None}}) == {
        "data.t.deny": []}


def test_missing_bindings_say_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from engine.rego import embedded

    real = importlib.import_module

    def no_regorus(name: str, *args: Any) -> Any:
        if name == "regorus":
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(embedded.importlib, "import_module", no_regorus)
    with pytest.raises(RegoError, match=r"gpuwarden\[rego\] @ git\+https://.*gordon-to-regorus==0"):
        embedded.import_regorus()
