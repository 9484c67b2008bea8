"""Per-resource Rego inputs reach the sandboxed worker in batches: one call (and one evaluation)
per batch instead of one per resource, bounded in inputs and bytes, each batch within the time
limit; the answers are those of one evaluation per input, errors and limits included."""

from __future__ import annotations

import textwrap
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from engine.core.evaluate import Engine
from engine.core.labels import is_production
from engine.core.model import Resource
from engine.loading.policies import load_policies
from engine.rego.common import RegoError, RegoModule
from engine.rego.inputs import resource_input
from engine.rego.policy import RegoProgram

pytest.importorskip("regorus")

from engine.rego import embedded, sandbox
from engine.rego.embedded import EmbeddedEvaluator

REPO = Path(__file__).resolve().parents[1]
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

POLICY = """\
apiVersion: gpuwarden.io/v1
policies:
  - id: batched
    title: Batched
    severity: high
    resources: [instance]
    enforcement: {plan: deny, admission: deny, runtime: deny}
    rego:
      module: batched.rego
      timeout_s: 1
"""

MODULE = """\
package batched

import rego.v1

deny contains msg if {
\tinput.name != "slow"
\tinput.gpu.count > 0
\tmsg := sprintf("%s holds %v GPUs", [input.id, input.gpu.count])
}

deny contains msg if {
\tinput.name == "slow"
\tcount([1 | some x in numbers.range(1, 20000); some y in numbers.range(1, 20000); x + y == 0]) > 0
\tmsg := "never"
}

warn contains msg if {
\tinput.tags.env == "dev"
\tmsg := sprintf("%s is dev", [input.id])
}
"""


@pytest.fixture()
def worker_ops(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """The requests the worker receives, by operation."""
    ops: Counter[str] = Counter()
    send = sandbox.WorkerProcess.send

    def counted(self: sandbox.WorkerProcess, header: dict[str, Any], *args: Any,
                **kwargs: Any) -> sandbox.Pending:
        ops[str(header.get("op"))] += 1
        return send(self, header, *args, **kwargs)

    monkeypatch.setattr(sandbox.WorkerProcess, "send", counted)
    return ops


def batched_engine(tmp_path: Path, module: str = MODULE) -> Engine:
    (tmp_path / "batched.rego").write_text(module, "utf-8")
    (tmp_path / "p.yaml").write_text(POLICY, "utf-8")
    return Engine(load_policies([str(tmp_path / "p.yaml")]))


def instances(make_resource: Callable[..., Resource], count: int,
              names: Callable[[int], str] = lambda n: f"i-{n}") -> list[Resource]:
    return [make_resource(id=f"i-{n}", name=names(n), instance_type="g5.xlarge",
                          tags={"env": "dev" if n % 2 else "test"}) for n in range(count)]


def test_resources_reach_the_worker_in_batches_not_one_call_each(
        tmp_path: Path, make_resource: Callable[..., Resource], worker_ops: Counter[str]) -> None:
    engine = batched_engine(tmp_path)
    worker_ops.clear()
    report = engine.evaluate(instances(make_resource, 2500), NOW, door="runtime")
    assert worker_ops == {"eval_batch": 3}  # 1,000 inputs a call
    results = Counter((f.result, f.enforcement) for f in report.findings)
    assert results == {("fail", "deny"): 2500, ("fail", "warn"): 1250}
    assert "i-7 holds 1 GPUs" in {f.message for f in report.findings}


def test_batches_are_bounded_in_inputs_and_bytes(
        tmp_path: Path, make_resource: Callable[..., Resource], worker_ops: Counter[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded, "MAX_BATCH_INPUTS", 2)
    engine = batched_engine(tmp_path)
    worker_ops.clear()
    expected = engine.evaluate(instances(make_resource, 5), NOW, door="runtime")
    assert worker_ops == {"eval_batch": 2, "eval": 1}  # 2 + 2 + a last one alone
    monkeypatch.setattr(embedded, "MAX_BATCH_BYTES", 10)
    worker_ops.clear()
    alone = engine.evaluate(instances(make_resource, 5), NOW, door="runtime")
    assert worker_ops == {"eval": 5}  # each input larger than a batch: one call each
    assert alone.to_json_dict()["findings"] == expected.to_json_dict()["findings"]


def test_a_batch_stopped_by_the_time_limit_takes_no_other_verdict_with_it(
        tmp_path: Path, make_resource: Callable[..., Resource], worker_ops: Counter[str]) -> None:
    engine = batched_engine(tmp_path)
    resources = instances(make_resource, 6, names=lambda n: "slow" if n == 2 else f"i-{n}")
    worker_ops.clear()
    report = engine.evaluate(resources, NOW, door="runtime")
    by_id = {(f.resource.id, f.result) for f in report.findings if f.enforcement == "deny"}
    assert ("i-2", "unknown") in by_id
    assert {(f"i-{n}", "fail") for n in (0, 1, 3, 4, 5)} <= by_id
    [slow] = [f for f in report.findings if f.resource.id == "i-2"]
    assert "time limit of 1 s" in slow.message
    # one batch call stopped, then one call per input, each within the limit
    assert worker_ops["eval_batch"] == 1 and worker_ops["eval"] == 6
    program = engine.policies[0].rego
    assert isinstance(program, RegoProgram)
    assert isinstance(program.evaluator, EmbeddedEvaluator)
    assert program.evaluator.batch_inputs == 1 and program.evaluator.aborts == 1


def evaluator_of(v0: bool) -> EmbeddedEvaluator:
    if v0:
        text = textwrap.dedent("""\
            package t

            violation[{"msg": msg}] {
              input.n > 1
              msg := sprintf("n is %v", [input.n])
            }

            warn[msg] {
              input.tags[_] == "dev"
              msg := "dev"
            }

            unknown = input.why { input.why }
            """)
    else:
        text = textwrap.dedent("""\
            package t

            import rego.v1

            violation contains {"msg": msg} if {
            \tinput.n > 1
            \tmsg := sprintf("n is %v", [input.n])
            }

            warn contains "dev" if "dev" in input.tags

            unknown := input.why if input.why
            """)
    return EmbeddedEvaluator([RegoModule("t.rego", text)], {},
                             entry_points=["data.t.violation", "data.t.warn"])


INPUTS: list[Any] = [{"n": 2, "tags": ["dev"]}, {"n": 0, "tags": []}, {"n": 5, "tags": ["x"]},
                     {"n": 1, "tags": ["dev"], "why": "later"}, {}]


@pytest.mark.parametrize("v0", [False, True], ids=["v1", "v0"])
def test_batched_answers_are_those_of_one_evaluation_per_input(v0: bool) -> None:
    evaluator = evaluator_of(v0)
    paths = ["data.t.violation", "data.t.warn", "data.t.unknown"]
    expected = [evaluator.evaluate(paths, input_doc, "runtime") for input_doc in INPUTS]
    assert evaluator.evaluate_many(paths, INPUTS, "runtime") == expected
    assert expected[0]["data.t.violation"] == [{"msg": "n is 2"}]
    assert "data.t.unknown" not in expected[0] and expected[3]["data.t.unknown"] == "later"


def test_an_error_for_one_input_of_a_batch_is_that_inputs_alone() -> None:
    text = 'package t\n\nimport rego.v1\n\ndeny contains x if {\n\tsome x in input.items\n}\n'
    evaluator = EmbeddedEvaluator([RegoModule("t.rego", text)], {},
                                  entry_points=["data.t.deny"])
    inputs = [{"items": ["a"]}, {"items": None}, {"items": ["b", "c"]}]
    first, second, third = evaluator.evaluate_many(["data.t.deny"], inputs, "plan")
    assert first == {"data.t.deny": ["a"]} and third == {"data.t.deny": ["b", "c"]}
    assert isinstance(second, RegoError)
    assert second.file == "t.rego" and second.line == 6 and "over null" in second.message


def test_a_resource_policy_is_handed_only_the_keys_it_names(
        make_resource: Callable[..., Resource]) -> None:
    [twin] = load_policies([str(REPO / "policies" / "rego" / "gpu_spot_required.yaml")])
    program = twin.rego
    assert isinstance(program, RegoProgram)
    assert program.input_keys == {"id", "gpu", "capacity", "production", "unknown"}
    resource = make_resource(instance_type="g5.xlarge", raw={"big": "x" * 1000},
                             unknown=frozenset({"tags", "capacity"}))
    document = program.input_for(resource, {})
    assert set(document) == set(program.input_keys)
    assert document["unknown"] == ["capacity", "tags"] and document["production"] is None
    whole = resource_input(resource)
    assert whole["raw"] == {"big": "x" * 1000} and "production" in whole


@pytest.mark.parametrize(("tags", "namespace_labels"), [
    ({"env": "prod-eu"}, {}), ({"Environment": "non-prod"}, {}), ({"team:stage": "PRD"}, {}),
    ({}, {"env": "production"}), ({"env": "dev"}, {"env": "prod"}), ({"e\u200bnv": "prod"}, {}),
    ({"owner": "prod-team"}, {}),
])
def test_the_production_fact_is_gpuwardens_own(
        make_resource: Callable[..., Resource], tags: dict[str, str],
        namespace_labels: dict[str, str]) -> None:
    resource = make_resource(tags=tags, namespace_labels=namespace_labels)
    assert resource_input(resource, frozenset({"production"})) == {
        "production": is_production(resource)}


def test_an_answer_past_the_integer_range_is_refused_for_its_input_alone() -> None:
    text = "package t\n\nimport rego.v1\n\ndeny contains x if x := input.n * input.n\n"
    evaluator = EmbeddedEvaluator([RegoModule("t.rego", text)], {},
                                  entry_points=["data.t.deny"])
    inputs = [{"n": 3}, {"n": 10_000_000_000}, {"n": 4}]
    first, second, third = evaluator.evaluate_many(["data.t.deny"], inputs, "runtime")
    assert (first, third) == ({"data.t.deny": [9]}, {"data.t.deny": [16]})
    assert isinstance(second, RegoError) and "integer range" in second.message


def test_an_input_that_is_not_json_stops_and_leaves_no_answer_behind() -> None:
    text = "package t\n\nimport rego.v1\n\ndeny contains input.n if input.n > 1\n"
    evaluator = EmbeddedEvaluator([RegoModule("t.rego", text)], {},
                                  entry_points=["data.t.deny"])

    def inputs() -> Iterator[Any]:
        yield from ({"n": n} for n in range(1500))
        yield {"n": 2**70}  # past what JSON carries here: found while the first batch runs

    with pytest.raises(RegoError, match="not JSON"):
        evaluator.evaluate_many(["data.t.deny"], inputs(), "plan")
    again = evaluator.evaluate_many(["data.t.deny"], [{"n": 5}, {"n": 0}], "plan")
    assert again == [{"data.t.deny": [5]}, {"data.t.deny": []}]
