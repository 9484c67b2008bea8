"""Rego messages → findings, with the same shape, enforcement, exemptions and costs as YAML ones.

- **Per resource** (`input: resource | admission`): the engine's loop has already applied the
  categories and exemptions and hands over every resource it selected at once; a scope
  condition, when the policy has one, is tested first, and the rest are evaluated together
  (`RegoProgram.messages_many`: a few batches, not one evaluator call per resource). No message
  is a pass.
- **Per plan** (`input: plan`): one evaluation per plan document (`PlanDocument`), without its
  secrets (`engine.rego.inputs.redacted_plan`). A message's `resource` names
  a resource address; the finding is about the normalized resource with that id (its tags for
  exemptions, its price for the dollar estimate, the remediation planned for it), else about the
  plan's change at that address, else about the plan itself.
- **Rules.** `deny` / `violation` fail with the policy's enforcement at the door; `warn` fails
  with at most `warn` (a `deny` door warns, `audit` stays `audit`); `unknown` is an undecidable
  (`unknown`) result. Messages of one resource with the same rule kind and severity make one
  finding (joined with "; ", all of them in `details.messages`).
- **Failures at admission.** When the evaluator cannot answer (OPA down, an error at
  evaluation), `failure_policy: Ignore` gives an `unknown` finding (the webhook warns) and
  `Fail` a failing one (the webhook denies); at the other doors the error stops the run (exit 2).
- **Limits.** An evaluation stopped by a time or memory limit, or by a crash of the embedded
  engine (`RegoAborted`), is an `unknown` finding naming the policy and the cause at the plan
  and runtime doors (it says nothing about the resource, so it must not stop a scan of the
  others); at admission it follows `failure_policy` like any failure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from engine.core.conditions import EvalContext
from engine.core.costs import Estimate, estimate
from engine.core.errors import InputError
from engine.core.evaluate import Judged, ProgramOutcome
from engine.core.labels import is_exempt
from engine.core.model import Door, Enforcement, Finding, Resource, ResourceRef
from engine.core.policy import CompiledPolicy
from engine.core.tristate import Tri
from engine.rego.common import RegoAborted, RegoError, RegoUnavailable
from engine.rego.inputs import PlanDocument
from engine.rego.policy import RegoMessage, RegoProgram

_PROVIDERS = {"google": "gcp", "google-beta": "gcp", "azurerm": "azure", "azapi": "azure"}


def program_of(policy: CompiledPolicy) -> RegoProgram:
    program = policy.rego
    assert isinstance(program, RegoProgram), f"{policy.id} is not a Rego policy"
    return program


class RegoFindings:
    """The engine's evaluator of Rego policies (`engine.core.evaluate.ProgramEvaluator`)."""

    def resources_outcome(self, policy: CompiledPolicy,
                          selected: Sequence[tuple[Resource, Door]], ctx: EvalContext,
                          show_passed: bool) -> ProgramOutcome:
        return resources_outcome(policy, selected, ctx, show_passed)

    def documents_outcome(self, policy: CompiledPolicy, documents: Sequence[object],
                          resources: Mapping[str, Resource], ctx: EvalContext
                          ) -> ProgramOutcome:
        return plan_outcome(policy, documents, resources, ctx)


# ---------------------------------------------------------------------------- per resource


def resources_outcome(policy: CompiledPolicy, selected: Sequence[tuple[Resource, Door]],
                      ctx: EvalContext, show_passed: bool) -> ProgramOutcome:
    """The resources the engine's loop selected, evaluated together, door by door."""
    program = program_of(policy)
    outcome = ProgramOutcome()
    for door, judged in _in_scope(policy, program, selected, ctx).items():
        inputs = (program.input_for(resource, policy.spec.parameters) for resource, _ in judged)
        answers = program.messages_many(inputs, door)
        for (resource, scope), answer in zip(judged, answers, strict=True):
            messages = _messages_or_failure(program, answer, door)
            _add_resource_outcome(outcome, policy, resource, scope, messages, door, ctx,
                                  show_passed)
    return outcome


def _in_scope(policy: CompiledPolicy, program: RegoProgram,
              selected: Sequence[tuple[Resource, Door]],
              ctx: EvalContext) -> dict[Door, list[tuple[Resource, Tri]]]:
    """Per door, the resources with an input there and not outside the policy's scope, with
    the scope's answer (None: undecided)."""
    by_door: dict[Door, list[tuple[Resource, Tri]]] = {}
    for resource, door in selected:
        if not program.applies(door, resource):
            continue
        scope = True if policy.scope is None else policy.scope.test(resource, ctx)
        if scope is not False:
            by_door.setdefault(door, []).append((resource, scope))
    return by_door


def _add_resource_outcome(outcome: ProgramOutcome, policy: CompiledPolicy, resource: Resource,
                          scope: Tri, messages: list[RegoMessage], door: Door, ctx: EvalContext,
                          show_passed: bool) -> None:
    if scope is None:  # the scope is undecided: a violation is only as sure as the scope
        messages = [RegoMessage("unknown", m.msg, m.severity, m.resource, m.details)
                    if m.rule != "warn" else m for m in messages]
    if not messages:
        outcome.passed += 1
        if show_passed:
            outcome.judged.append(Judged(pass_finding(policy, resource, door), resource, door))
        return
    outcome.judged.extend(build_findings(policy, resource, ResourceRef.of(resource), messages,
                                         door, ctx))


def _messages_or_failure(program: RegoProgram, answer: list[RegoMessage] | InputError,
                         door: Door) -> list[RegoMessage]:
    """A resource's messages; for an error, at admission the failure policy's message, at the
    other doors an `unknown` message when a limit stopped it, else the error stops the run."""
    if not isinstance(answer, InputError):
        return answer
    if door == "admission" and isinstance(answer, RegoUnavailable | RegoError):
        return [failure_message(program, answer)]
    if isinstance(answer, RegoAborted):
        return [aborted_message(program, answer)]
    raise answer


def aborted_message(program: RegoProgram, exc: RegoAborted) -> RegoMessage:
    return RegoMessage("unknown", f"policy {program.policy_id} not evaluated: {exc.message}")


def failure_message(program: RegoProgram, exc: Exception) -> RegoMessage:
    if program.spec.failure_policy == "Fail":
        return RegoMessage("deny", f"policy not evaluated, denied by failure_policy Fail: {exc}")
    return RegoMessage("unknown", f"policy not evaluated (failure_policy Ignore): {exc}")


# ---------------------------------------------------------------------------- per plan


def plan_outcome(policy: CompiledPolicy, documents: Sequence[object],
                 resources: Mapping[str, Resource], ctx: EvalContext) -> ProgramOutcome:
    """One evaluation per plan document (`engine.rego.inputs.plan_documents`)."""
    outcome = ProgramOutcome()
    program = program_of(policy)
    for index, document in enumerate(documents):
        if not isinstance(document, PlanDocument):
            raise TypeError("input: plan policies read engine.rego.inputs.PlanDocument "
                            f"documents, not {type(document).__name__}")
        _plan_document_outcome(outcome, policy, program, document.redacted, resources, ctx,
                               (index, len(documents)))
    return outcome


def _plan_document_outcome(outcome: ProgramOutcome, policy: CompiledPolicy,
                           program: RegoProgram, plan: Mapping[str, Any],
                           resources: Mapping[str, Resource], ctx: EvalContext,
                           position: tuple[int, int]) -> None:
    try:
        messages = program.messages(program.plan_input(plan), "plan")
    except RegoAborted as exc:
        messages = [aborted_message(program, exc)]
    changes: dict[str, Mapping[str, Any]] | None = None
    for target, grouped in _by_target(messages).items():
        resource = resources.get(target) if target else None
        if resource is None and target and changes is None:
            changes = _changes_by_address(plan)
        ref = ResourceRef.of(resource) if resource else _plan_ref(target, changes or {},
                                                                  *position)
        if _exempt(policy, resource, ref):
            outcome.exempted += 1
            continue
        outcome.judged.extend(build_findings(policy, resource, ref, grouped, "plan", ctx))


def _by_target(messages: Iterable[RegoMessage]) -> dict[str | None, list[RegoMessage]]:
    grouped: dict[str | None, list[RegoMessage]] = {}
    for message in messages:
        grouped.setdefault(message.resource, []).append(message)
    return grouped


def _exempt(policy: CompiledPolicy, resource: Resource | None, ref: ResourceRef) -> bool:
    if resource is not None and is_exempt(resource, policy.id):
        return True
    return any(pattern.match(ref.id) for pattern in policy.exempt)


def _changes_by_address(plan: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    changes = plan.get("resource_changes")
    return {change["address"]: change for change in changes if isinstance(change, dict)
            and isinstance(change.get("address"), str)} if isinstance(changes, list) else {}


def _plan_ref(target: str | None, changes: Mapping[str, Mapping[str, Any]], index: int,
              count: int) -> ResourceRef:
    change = changes.get(target or "")
    if change is not None and target:
        provider = str(change.get("provider_name") or "terraform").rsplit("/", 1)[-1]
        return ResourceRef(provider=_PROVIDERS.get(provider, provider),
                           kind=str(change.get("type") or "resource"), id=target, name=target)
    name = target or ("plan" if count == 1 else f"plan[{index}]")
    return ResourceRef(provider="terraform", kind="plan", id=name, name=name)


# ---------------------------------------------------------------------------- findings


def _enforcement(policy: CompiledPolicy, rule: str, door: Door) -> Enforcement:
    at_door = policy.enforcement(door)
    if rule == "warn" and at_door == "deny":
        return "warn"
    return at_door


def build_findings(policy: CompiledPolicy, resource: Resource | None, ref: ResourceRef,
                   messages: Sequence[RegoMessage], door: Door, ctx: EvalContext,
                   ) -> list[Judged]:
    groups: dict[tuple[str, Enforcement, str], list[RegoMessage]] = {}
    for message in messages:
        severity = (message.severity or policy.spec.severity).value
        key = (message.result, _enforcement(policy, message.rule, door), severity)
        groups.setdefault(key, []).append(message)
    return [Judged(_finding(policy, resource, ref, grouped, enforcement, ctx), resource, door)
            for (_, enforcement, _), grouped in groups.items()]


def _finding(policy: CompiledPolicy, resource: Resource | None, ref: ResourceRef,
             messages: list[RegoMessage], enforcement: Enforcement,
             ctx: EvalContext) -> Finding:
    first = messages[0]
    result = first.result
    details: dict[str, Any] = {"rule": first.rule}
    for message in messages:
        for key, value in message.details.items():
            details.setdefault(key, value)
    if len(messages) > 1:
        details["messages"] = [m.msg for m in messages]
    cost = (estimate(policy.spec.cost, resource, ctx.catalog, details) if resource
            else Estimate(0.0, "not priced: not a resource gpuwarden normalizes"))
    text = "; ".join(dict.fromkeys(m.msg for m in messages))
    if policy.spec.message:
        text = policy.render_message(
            msg=text, messages=[m.msg for m in messages], resource=resource, r=resource,
            params=policy.spec.parameters, details=details, cost=cost.monthly_usd,
            verdict=result,
        )
    return Finding(
        policy=policy.id, title=policy.spec.title, severity=first.severity or policy.spec.severity,
        result=result, resource=ref, message=text, enforcement=enforcement,
        estimated_monthly_usd=cost.monthly_usd if result == "fail" else 0.0,
        cost_kind=cost.kind,
        cost_basis=cost.basis, location=resource.location if resource else None,
        details=details,
    )


def pass_finding(policy: CompiledPolicy, resource: Resource, door: Door) -> Finding:
    return Finding(
        policy=policy.id, title=policy.spec.title, severity=policy.spec.severity, result="pass",
        resource=ResourceRef.of(resource), message=f"{resource.name}: {policy.spec.title}",
        enforcement=policy.enforcement(door), estimated_monthly_usd=0.0,
        cost_basis="no violation", location=resource.location,
    )
