"""The evaluation core stands alone: it imports neither Rego nor remediations, evaluation returns
findings without remediations (planning comes after it), Rego registers itself when a policy
needs it, and the environment reaches the compiler only as a parameter."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.core.errors import InputError
from engine.core.evaluate import Engine
from engine.core.model import Resource, Telemetry
from engine.core.policy import REMEDIATION_ACTIONS, CompiledPolicy
from engine.loading.policies import load_policies
from engine.pipeline import evaluate_and_plan
from engine.rego.policy import RegoProgram
from engine.rego.remote import RemoteEvaluator
from remediations.planning import plan_remediations
from remediations.registry import ACTIONS, action
from tests.conftest import BUSINESS_HOURS, OFF_HOURS, REPO

Make = Callable[..., Resource]
TAGS = {"team": "ml", "project": "llm", "cost-center": "cc-1"}
NOT_CORE = ("engine.rego", "remediations", "engine.sources", "engine.telemetry",
            "engine.webhook", "engine.outputs", "engine.cli", "engine.lambda_handler",
            "engine.pipeline")


def fresh_interpreter(code: str) -> str:
    """Run `code` in a new interpreter (nothing imported by other tests) and return stdout."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.strip()


def test_the_builtin_pack_loads_and_evaluates_without_any_outer_layer() -> None:
    imported = fresh_interpreter(f"""
        import sys
        from datetime import datetime, UTC
        from engine.core.catalog import builtin_catalog
        from engine.core.enrich import enrich
        from engine.core.evaluate import Engine
        from engine.core.model import Resource
        from engine.loading.policies import load_policies

        engine = Engine(load_policies(["builtin"]))
        box = enrich(Resource(provider="aws", kind="aws_instance", category="instance",
                              id="i-1", name="box", instance_type="p4d.24xlarge",
                              state="running"), builtin_catalog())
        report = engine.evaluate([box], datetime(2026, 12, 1, 3, tzinfo=UTC))
        assert report.findings, "the built-in pack flags an untagged on-demand GPU"
        print(sorted(m for m in sys.modules if m.startswith({NOT_CORE!r})))
        """)
    assert imported == "[]"


def test_a_rego_block_imports_the_rego_kind_on_demand() -> None:
    imported = fresh_interpreter("""
        import sys
        from engine.loading.policies import load_policies

        [policy] = [p for p in load_policies(["policies/rego"])
                    if p.id == "required-cost-tags"]
        print(type(policy.rego).__module__, "engine.rego.kind" in sys.modules,
              any(m.startswith("remediations") for m in sys.modules))
        """)
    assert imported == "engine.rego.policy True False"


def off_hours_gpu(make_resource: Make) -> Resource:
    return make_resource(instance_type="g5.xlarge", capacity="spot",
                         tags={**TAGS, "env": "dev"})


def test_evaluation_returns_findings_and_planning_comes_after(builtin_engine: Engine,
                                                              make_resource: Make) -> None:
    box = off_hours_gpu(make_resource)
    evaluation = builtin_engine.assess([box], OFF_HOURS)
    assert [j.finding for j in evaluation.judged] == evaluation.report.findings
    [judged] = [j for j in evaluation.judged if j.finding.policy == "gpu-off-hours-shutdown"]
    assert judged.resource is box and judged.door == "runtime"
    assert all(f.remediation is None for f in evaluation.report.findings)

    planned = plan_remediations(evaluation, builtin_engine.policies)
    [stop] = [f for f in planned.findings if f.policy == "gpu-off-hours-shutdown"]
    assert stop.remediation is not None
    assert (stop.remediation.action, stop.remediation.status) == ("stop", "planned")
    assert planned.summary == evaluation.report.summary
    # Planning is the only difference between the two reports.
    cleared = [f.model_copy(update={"remediation": None}) for f in planned.findings]
    assert cleared == evaluation.report.findings


def test_planning_needs_the_policy_that_names_the_action(builtin_engine: Engine,
                                                        make_resource: Make) -> None:
    evaluation = builtin_engine.assess([off_hours_gpu(make_resource)], OFF_HOURS)
    unplanned = plan_remediations(evaluation, [])
    assert all(f.remediation is None for f in unplanned.findings)


def test_plan_findings_about_no_resource_get_no_remediation(tmp_path: Path) -> None:
    (tmp_path / "m.rego").write_text(
        'package m\n\nimport rego.v1\n\ndeny contains {"msg": "no", "resource": "nowhere"} '
        "if true\n", "utf-8")
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({"policies": [{
        "id": "whole-plan", "title": "t", "severity": "high", "resources": ["instance"],
        "enforcement": {"plan": "deny"}, "remediations": ["advise-tags"],
        "rego": {"module": "m.rego", "input": "plan"}}]}), "utf-8")
    engine = Engine(load_policies([str(path)]))
    report = evaluate_and_plan(engine, [], BUSINESS_HOURS, door="plan",
                               plans=[{"resource_changes": []}])
    [finding] = report.findings
    assert (finding.resource.id, finding.result, finding.remediation) == ("nowhere", "fail", None)


def test_documents_must_be_prepared_by_the_rego_layer(tmp_path: Path) -> None:
    (tmp_path / "m.rego").write_text('package m\n\ndeny contains "x" if true\n', "utf-8")
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({"policies": [{
        "id": "whole-plan", "title": "t", "severity": "high", "resources": ["instance"],
        "rego": {"module": "m.rego", "input": "plan"}}]}), "utf-8")
    engine = Engine(load_policies([str(path)]))
    with pytest.raises(TypeError, match="PlanDocument"):
        engine.evaluate([], BUSINESS_HOURS, door="plan", documents=[{"resource_changes": []}])


def test_the_action_names_of_the_language_are_the_registered_actions() -> None:
    assert set(ACTIONS) == REMEDIATION_ACTIONS


def test_an_action_outside_the_language_is_refused() -> None:
    with pytest.raises(ValueError, match="not in the policy language"):
        action("reboot", "Reboot it", mutating=True)
    assert "reboot" not in ACTIONS


def remote_policy(tmp_path: Path, **rego: Any) -> Path:
    (tmp_path / "m.rego").write_text('package m\n\ndeny contains "x" if true\n', "utf-8")
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({"policies": [{
        "id": "remote-one", "title": "t", "severity": "high", "resources": ["workload"],
        "rego": {"module": "m.rego", "evaluator": "remote", "opa_url": "http://127.0.0.1:9",
                 **rego}}]}), "utf-8")
    return path


def token_of(policy: CompiledPolicy) -> str | None:
    assert isinstance(policy.rego, RegoProgram)
    assert isinstance(policy.rego.evaluator, RemoteEvaluator)
    return policy.rego.evaluator.token


def test_token_env_is_read_from_the_environment_the_loader_is_given(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUWARDEN_TEST_CORE_TOKEN", raising=False)
    path = remote_policy(tmp_path, token_env="GPUWARDEN_TEST_CORE_TOKEN")
    [policy] = load_policies([str(path)], environ={"GPUWARDEN_TEST_CORE_TOKEN": "s3cret"})
    assert token_of(policy) == "s3cret"
    with pytest.raises(InputError, match="token_env GPUWARDEN_TEST_CORE_TOKEN is not set"):
        load_policies([str(path)], environ={})
    monkeypatch.setenv("GPUWARDEN_TEST_CORE_TOKEN", "from-the-process")
    [policy] = load_policies([str(path)])  # the default: this process's environment
    assert token_of(policy) == "from-the-process"


def test_evaluation_leaves_the_garbage_collector_alone(builtin_engine: Engine,
                                                      make_resource: Make) -> None:
    import gc

    threshold = gc.get_threshold()
    assert gc.isenabled()
    box = make_resource(instance_type="g5.xlarge",
                        telemetry=Telemetry(average_activity_pct=1, samples=60))
    builtin_engine.evaluate([box] * 50, BUSINESS_HOURS)
    assert gc.isenabled() and gc.get_threshold() == threshold
