"""Evaluation: compiled policies × normalized resources → findings and a report.

Pure: no I/O, no environment, no process-wide switches; the clock is an argument. Evaluation
stops at findings: `Engine.assess` also says what each finding judged (`Judged`), so that the
steps after it (remediation planning: `remediations.planning`) need nothing from here.

Policies whose violations a program decides (a `rego:` block, see `engine.core.programs`) are
evaluated through the `ProgramEvaluator` their package registered (`register_evaluator`): per
resource inside the loop, or once per input document after it. Plan-level inputs arrive as core
types: `CostChange`s for the cost diff, and input documents as the program's package prepared
them (opaque here).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from operator import itemgetter
from typing import Any, Final, Literal, NamedTuple, Protocol

from engine.core.aggregates import Aggregation
from engine.core.bounded import remember
from engine.core.catalog import Catalog, builtin_catalog
from engine.core.checks.has_gpu import GpuState, gpu_state, scope_at
from engine.core.conditions import Condition, EvalContext, quiet_when_held, walk
from engine.core.costs import estimate, price_date, remembered_spend, resource_spend
from engine.core.labels import exempt_policies
from engine.core.model import (
    Category,
    CostChange,
    Door,
    Finding,
    Prices,
    Report,
    Resource,
    ResourceRef,
    Severity,
    State,
    Summary,
    trusted_whole,
)
from engine.core.policy import CompiledPolicy

Verdict = Literal["fail", "unknown", "pass"]
Outcome = Literal["fail", "unknown", "pass", "n/a"]
# `_verdict`'s outcomes: "unknown" split by whether the scope held (True) or was unknown too.
UNKNOWN_IN_SCOPE: Final = "unknown, in scope"
_Judgement = Literal["fail", "unknown", "unknown, in scope", "pass", "n/a"]
_Reported = Literal["fail", "unknown", "unknown, in scope", "pass"]  # those with a finding
Mode = Literal["dry-run", "enforce"]


def door_of(resource: Resource) -> Door:
    """Planned resources meet the plan door's enforcement; everything live the runtime door's."""
    return "plan" if resource.state is State.PLANNED else "runtime"


# ---------------------------------------------------------------------------- results


class Judged(NamedTuple):
    """A finding with what it judged: the resource or group (None for a message about a plan
    change gpuwarden does not normalize) and the door it was judged at. A tuple: one is made
    per finding, and a frozen dataclass costs twice as much to make."""

    finding: Finding
    resource: Resource | None
    door: Door


@dataclass
class ProgramOutcome:
    """What a program's evaluator found for one resource or one set of input documents."""

    judged: list[Judged] = field(default_factory=list)
    passed: int = 0
    exempted: int = 0


@dataclass(frozen=True)
class Evaluation:
    """The report, and each of its findings with what it judged (`judged[i].finding` is
    `report.findings[i]`)."""

    report: Report
    judged: tuple[Judged, ...]


# ---------------------------------------------------------------------------- program evaluators


class ProgramEvaluator(Protocol):
    """Evaluates the policies of one program type (registered by the program's package)."""

    def resources_outcome(self, policy: CompiledPolicy, selected: Sequence[tuple[Resource, Door]],
                          ctx: EvalContext, show_passed: bool) -> ProgramOutcome:
        """The resources the loop selected for the policy (category, door, exemptions already
        applied), each with its door, in the loop's order: all at once, so that the evaluator
        can judge them in a few batches instead of one call per resource."""
        ...

    def documents_outcome(self, policy: CompiledPolicy, documents: Sequence[object],
                          resources: Mapping[str, Resource], ctx: EvalContext
                          ) -> ProgramOutcome:
        """The whole input documents, for a program that `reads_documents`; `resources`: the
        evaluated resources by id, for findings about them."""
        ...


_EVALUATORS: dict[type, ProgramEvaluator] = {}


def register_evaluator(program_type: type, evaluator: ProgramEvaluator) -> None:
    _EVALUATORS[program_type] = evaluator


def _evaluator_of(policy: CompiledPolicy) -> ProgramEvaluator:
    return _EVALUATORS[type(policy.rego)]


# ---------------------------------------------------------------------------- the engine


@dataclass(frozen=True, slots=True)
class _Step:
    """A policy as the loop applies it to resources of one category, door and GPU state."""

    policy: CompiledPolicy
    scope: Condition | None  # its scope, less the `has-gpu` test that state already answers
    out_of_scope: bool  # no verdict (n/a): scoped to GPUs and the resource holds none
    # The conditions whose evidence a failing finding shows: its scope and violation held, so
    # either one made of conditions that speak only of unknowns has nothing to add.
    fail_evidence: tuple[Condition, ...]
    # Those an unknown finding whose scope held shows: the scope's only where it speaks when
    # held, the violation's always (unknown, it speaks).
    unknown_evidence: tuple[Condition, ...]


def _step(policy: CompiledPolicy, gpus: GpuState) -> _Step:
    evidence = _fail_evidence(policy), _unknown_evidence(policy)
    if policy.rego is not None:  # a program reads the resource whole: its scope stays whole
        return _Step(policy, policy.scope, False, *evidence)
    return _Step(policy, *scope_at(policy.scope, gpus), *evidence)


def _fail_evidence(policy: CompiledPolicy) -> tuple[Condition, ...]:
    if quiet_when_held(policy.violation) and not _scope_speaks_when_held(policy):
        return ()  # both held: nothing of either to show
    return _unknown_evidence(policy)


def _unknown_evidence(policy: CompiledPolicy) -> tuple[Condition, ...]:
    if _scope_speaks_when_held(policy):
        return policy.evidence_nodes
    return tuple(node for node in walk(policy.violation)
                 if type(node).evidence is not Condition.evidence)


def _scope_speaks_when_held(policy: CompiledPolicy) -> bool:
    return policy.scope is not None and not quiet_when_held(policy.scope)


class Engine:
    """Compiled policies, ready to evaluate any number of resources."""

    def __init__(self, policies: Sequence[CompiledPolicy], catalog: Catalog | None = None):
        self.policies = list(policies)
        self.catalog = catalog or builtin_catalog()
        self._by_category: dict[Category, list[CompiledPolicy]] = {c: [] for c in Category}
        # Programs over whole input documents (a plan) run once per document, not per resource.
        self._document_policies = [p for p in self.policies
                                   if p.rego is not None and p.rego.reads_documents]
        # Aggregate policies judge groups of resources after the per-resource pass.
        self._aggregate_policies = [p for p in self.policies if p.spec.aggregate]
        for policy in self.policies:
            if (policy.rego is not None and policy.rego.reads_documents) or policy.spec.aggregate:
                continue
            for category in policy.categories:
                self._by_category[category].append(policy)
        self._steps: dict[tuple[Category, Door, GpuState, bool], tuple[_Step, ...]] = {}

    def steps(self, category: Category, door: Door, gpus: GpuState,
              exempt_by_tags: bool) -> tuple[_Step, ...]:
        """The policies the loop applies to a resource of this category, door and GPU state,
        in order: those off at the door left out, and those out of scope for its GPU state
        too unless an exemption of it must still be counted."""
        key = (category, door, gpus, exempt_by_tags)
        steps = self._steps.get(key)
        if steps is None:
            made = (_step(policy, gpus) for policy in self._by_category[category]
                    if policy.doors[door] != "off")
            steps = self._steps[key] = tuple(
                step for step in made
                if not step.out_of_scope or exempt_by_tags or step.policy.exempt)
        return steps

    def verdict(self, policy: CompiledPolicy, resource: Resource, ctx: EvalContext) -> Outcome:
        """`n/a` when the resource is outside the policy's scope (not counted as a pass)."""
        outcome = _verdict(policy.scope, policy.violation, resource, ctx)
        return "unknown" if outcome == UNKNOWN_IN_SCOPE else outcome

    def evaluate(
        self,
        resources: Iterable[Resource],
        now: datetime,
        *,
        door: Door | None = None,
        show_passed: bool = False,
        mode: Mode = "dry-run",
        generated_at: datetime | None = None,
        documents: Sequence[object] = (),
        cost_changes: Sequence[CostChange] | None = None,
    ) -> Report:
        """The report of `assess` (findings without remediations)."""
        return self.assess(resources, now, door=door, show_passed=show_passed, mode=mode,
                           generated_at=generated_at, documents=documents,
                           cost_changes=cost_changes).report

    @remembered_spend()  # each resource priced once, however many policies ask
    def assess(
        self,
        resources: Iterable[Resource],
        now: datetime,
        *,
        door: Door | None = None,
        show_passed: bool = False,
        mode: Mode = "dry-run",
        generated_at: datetime | None = None,
        documents: Sequence[object] = (),
        cost_changes: Sequence[CostChange] | None = None,
        settle: Callable[[Judged], Judged] | None = None,
    ) -> Evaluation:
        """`door`: the door every resource is judged at (default: each one's own, `door_of`).
        `documents`: whole input documents as a program's package prepares them (Terraform
        plans: `engine.rego.inputs.plan_documents`), for programs that read them (`input:
        plan`); without them those policies do not run. `cost_changes`: the plan's changes
        before and after, for the team budget's cost diff. `settle`: applied to each finding as
        it is made, what it returns is kept (the scan pipeline plans the remediation there and
        lets go of the resource, so a large scan does not hold every resource to the end)."""
        ctx = EvalContext(now=now, catalog=self.catalog)
        reads_documents = bool(documents) and bool(self._document_policies) \
            and door in (None, "plan")
        run = _Run(self, ctx, door, show_passed, cost_changes, keep_ids=reads_documents,
                   settle=settle)
        for resource in resources:
            run.add(resource)
        run.add_programs()
        if reads_documents:
            run.add_documents(documents)
        run.add_groups()
        return run.evaluation(mode, generated_at or now)

    def finding(
        self,
        policy: CompiledPolicy,
        resource: Resource,
        ctx: EvalContext,
        verdict: Verdict,
        door: Door,
        ref: ResourceRef | None = None,
        evidence: tuple[Condition, ...] | None = None,
    ) -> Finding:
        """`ref`: the resource's reference, when its other findings already made one.
        `evidence`: the conditions whose evidence it shows (default: all the policy's)."""
        details = _evidence(policy.evidence_nodes if evidence is None else evidence,
                            resource, ctx)
        cost = estimate(policy.spec.cost, resource, self.catalog, details)
        if cost.kind == "savings" and verdict == "fail":
            # combining savings per resource as rates needs what the resource costs
            spend = resource_spend(resource, self.catalog).monthly_usd
            if spend is not None:
                details[SPEND_DETAIL] = round(spend, 2)
        if verdict == "unknown":
            message = _unknown_message(policy, resource, details)
        else:
            # `policy.render_message`, its values made as a dict at once
            message = policy.message.render({
                "resource": resource, "r": resource, "params": policy.spec.parameters,
                "details": details, "cost": cost.monthly_usd, "verdict": verdict,
            }, fallback=policy.spec.title)
        return trusted_whole(Finding, {
            "policy": policy.id,
            "title": policy.spec.title,
            "severity": _severity(policy, details) if "severity" in details
            else policy.spec.severity,
            "result": verdict,
            "resource": ref or _ref_of(resource),
            "message": message,
            "enforcement": policy.doors[door],
            "estimated_monthly_usd": cost.monthly_usd if verdict == "fail" else 0.0,
            "cost_kind": cost.kind,
            "cost_basis": cost.basis,
            "remediation": None,
            "location": resource.location,
            "details": details,
        })


def _verdict(scope: Condition | None, violation: Condition, resource: Resource,
             ctx: EvalContext) -> _Judgement:
    in_scope = True if scope is None else scope.test(resource, ctx)
    if in_scope is False:
        return "n/a"
    result = violation.test(resource, ctx)
    if result is False:
        return "pass"
    if not in_scope:
        return "unknown"
    return "fail" if result else UNKNOWN_IN_SCOPE


def _ref_of(resource: Resource) -> ResourceRef:
    """`ResourceRef.of`, without validating again what a validated resource holds."""
    return trusted_whole(ResourceRef, {
        "provider": resource.provider, "kind": resource.kind, "id": resource.id,
        "name": resource.name, "region": resource.region, "account": resource.account,
        "namespace": resource.namespace,
    })


class _Run:
    """One evaluation's state: the findings so far, the counts, the aggregation."""

    def __init__(self, engine: Engine, ctx: EvalContext, door: Door | None, show_passed: bool,
                 cost_changes: Sequence[CostChange] | None, *, keep_ids: bool,
                 settle: Callable[[Judged], Judged] | None = None):
        self.engine = engine
        self.ctx = ctx
        self.door = door
        self.show_passed = show_passed
        # The verdicts that make a finding.
        self.reported: frozenset[_Reported] = frozenset(
            ("fail", "unknown", UNKNOWN_IN_SCOPE, *(("pass",) if show_passed else ())))
        self.judged: list[Judged] = []
        self.places: list[_Place] = []  # each kept finding's place in the report
        self.tally = _Tally()
        self.settle = settle
        self.count = self.passed = self.exempted = 0
        self.aggregation = Aggregation(engine._aggregate_policies, ctx, cost_changes) \
            if engine._aggregate_policies else None
        self.by_id: dict[str, Resource] | None = {} if keep_ids else None
        # What the loop selected for each program policy, judged together after the loop.
        self.program_batches: dict[int, tuple[CompiledPolicy, list[tuple[Resource, Door]]]] = {}
        self.spend: dict[tuple[str, str], float] = {}
        self.price_dates: set[str] = set()

    def add(self, resource: Resource) -> None:
        """Judge one resource against the policies of its category (the hot loop)."""
        self.count += 1
        gpus = gpu_state(resource)
        if gpus == "gpus":
            self._add_spend(resource)
        if self.by_id is not None:
            self.by_id.setdefault(resource.id, resource)
        door = self.door or door_of(resource)
        exempt_ids = exempt_policies(resource) if resource.tags or resource.annotations \
            else frozenset()
        if self.aggregation is not None:
            self.aggregation.offer(resource, door, exempt_ids, gpus)
        ref: ResourceRef | None = None  # made by its first finding, shared by the others
        for step in self.engine.steps(resource.category, door, gpus, bool(exempt_ids)):
            policy = step.policy
            if (exempt_ids or policy.exempt) and _exempt(policy, resource, exempt_ids):
                self.exempted += 1
            elif policy.rego is not None:
                self._add_program(policy, resource, door)
            elif not step.out_of_scope:
                verdict = _verdict(step.scope, policy.violation, resource, self.ctx)
                if verdict == "pass":
                    self.passed += 1
                if verdict in self.reported:
                    ref = self._add_finding(step, resource, door, verdict, ref)

    def _add_spend(self, resource: Resource) -> None:
        """The resource's monthly spend, counted once however often it appears."""
        key = (resource.provider, resource.id)
        if key not in self.spend:
            spend = resource_spend(resource, self.engine.catalog).monthly_usd
            self.spend[key] = spend or 0.0
            dated = price_date(resource, self.engine.catalog)
            if dated:
                self.price_dates.add(dated)

    def _add_finding(self, step: _Step, resource: Resource, door: Door, verdict: _Reported,
                     ref: ResourceRef | None) -> ResourceRef:
        """The finding of a verdict; the resource's reference it made or was given."""
        policy = step.policy
        if verdict == UNKNOWN_IN_SCOPE:
            judged: Verdict = "unknown"
            evidence: tuple[Condition, ...] | None = step.unknown_evidence
        else:
            judged = verdict
            evidence = step.fail_evidence if verdict == "fail" else None
        finding = self.engine.finding(policy, resource, self.ctx, judged, door, ref, evidence)
        self._keep(Judged(finding, resource, door))
        return finding.resource

    def _add_program(self, policy: CompiledPolicy, resource: Resource, door: Door) -> None:
        self.program_batches.setdefault(id(policy), (policy, []))[1].append((resource, door))

    def add_programs(self) -> None:
        """Program policies over the resources the loop selected for them (`_add_program`)."""
        for policy, selected in self.program_batches.values():
            self._add_outcome(_evaluator_of(policy).resources_outcome(
                policy, selected, self.ctx, self.show_passed))

    def _add_outcome(self, outcome: ProgramOutcome) -> None:
        for judged in outcome.judged:
            self._keep(judged)
        self.passed += outcome.passed
        self.exempted += outcome.exempted

    def add_documents(self, documents: Sequence[object]) -> None:
        """Programs over whole input documents, each once per document set."""
        for policy in self.engine._document_policies:
            if policy.enforcement("plan") != "off":
                self._add_outcome(_evaluator_of(policy).documents_outcome(
                    policy, documents, self.by_id or {}, self.ctx))

    def add_groups(self) -> None:
        """Aggregate policies, judged on the groups their members make."""
        if self.aggregation is None:
            return
        for policy, group, group_door in self.aggregation.groups(self.door):
            verdict = _group_verdict(policy, group, self.ctx)
            self.passed += verdict == "pass"
            if verdict != "pass" or self.show_passed:
                finding = self.engine.finding(policy, group, self.ctx, verdict, group_door)
                self._keep(Judged(finding, group, group_door))
        self.exempted += self.aggregation.exempted

    def _keep(self, judged: Judged) -> None:
        """Keep a finding, counted and given its place in the report while it is at hand: a
        pass over every finding afterwards waits on memory more than it computes."""
        if self.settle is not None:
            judged = self.settle(judged)
        place = _place(judged.finding, len(self.places))
        self.judged.append(judged)
        self.places.append(place)
        self.tally.add(judged.finding, place)

    def evaluation(self, mode: Mode, generated_at: datetime) -> Evaluation:
        kept = self.judged
        judged = [kept[place[-1]] for place in sorted(self.places)]
        findings = [j.finding for j in judged]
        report = Report(
            generated_at=generated_at,
            mode=mode,
            findings=findings,
            summary=_summary(self.tally, self.count, self.passed, self.exempted,
                             spend_usd=sum(self.spend.values())),
            cost_diff=self.aggregation.cost_diff if self.aggregation is not None else None,
            prices=prices_of(self.engine.catalog, self.price_dates),
        )
        return Evaluation(report, tuple(judged))


_DESCENDING_RANK = {severity.value: -severity.rank for severity in Severity}
# A finding's place in the report: by money (most first), severity (highest first), policy,
# resource id, then the order findings were made in (its number).
_Place = tuple[float, int, str, str, int]


def _place(finding: Finding, number: int) -> _Place:
    return (-finding.estimated_monthly_usd, _DESCENDING_RANK[finding.severity._value_],
            finding.policy, finding.resource.id, number)


def _exempt(policy: CompiledPolicy, resource: Resource, exempt_ids: frozenset[str]) -> bool:
    """Exempt by a tag/label/annotation naming the policy (or `all`), or by the policy's own
    `exempt:` id globs."""
    if exempt_ids and (policy.id in exempt_ids or "all" in exempt_ids):
        return True
    return bool(policy.exempt) and any(pattern.match(resource.id) for pattern in policy.exempt)


def _evidence(nodes: tuple[Condition, ...], resource: Resource,
              ctx: EvalContext) -> dict[str, Any]:
    details: dict[str, Any] = {}
    for node in nodes:
        evidence = node.evidence(resource, ctx)
        if not details:  # the first evidence, as the loop below would copy it, at once
            details = dict(evidence)
            if "unknown" in details:
                details["unknown"] = list(details["unknown"])
            continue
        for key, value in evidence.items():
            if key == "unknown":
                details.setdefault("unknown", []).extend(value)
            else:
                details.setdefault(key, value)  # the violation's evidence comes first
    return details


def _group_verdict(policy: CompiledPolicy, group: Resource, ctx: EvalContext) -> Verdict:
    """An aggregate policy's violation tested on a group (its scope chose the members)."""
    result = policy.violation.test(group, ctx)
    return "pass" if result is False else "fail" if result else "unknown"


_SEVERITIES = frozenset(s.value for s in Severity)


def _severity(policy: CompiledPolicy, details: Mapping[str, Any]) -> Severity:
    """The policy's severity, or a lower one a check's evidence asks for (`severity`: an
    advisory case of the policy, such as a legacy GPU generation in gpu-right-size)."""
    lowered = details.get("severity")
    if isinstance(lowered, str) and lowered in _SEVERITIES:
        return min(policy.spec.severity, Severity(lowered), key=lambda s: s.rank)
    return policy.spec.severity


_UNKNOWN_REASONS = {
    "telemetry": "no GPU telemetry for it",
    "gpu": "its GPU configuration is not known yet",
    "gpu.declared_memory_gib": "no declared (gpuwarden.io/gpu-memory) or observed GPU memory",
    "workload": "its Kubernetes workload facts are missing",
    "workload.shared_gpu": "whether its GPUs are shared is not known (it selects a device-plugin "
    "configuration or time-sliced nodes only in part)",
    "workload.namespace_network_policies": "its namespace's NetworkPolicies were not listed",
    "members.hourly_usd": "the price of some of its GPU resources is not known",
}


# Marked unknown by the Kubernetes adapter on an object of a kind it does not read that asks for
# accelerators (with "gpu"); the message names the kind and how to teach it.
UNREAD_KIND = "kind"


def _unknown_message(policy: CompiledPolicy, resource: Resource, details: dict[str, Any]) -> str:
    # Keyed by the unknown paths as the evidence lists them (repeats and order included): the
    # same few lists recur, and sorting them is left to the first of each.
    unknown = tuple(details.get("unknown", ()))
    unread = "gpu" in unknown and UNREAD_KIND in resource.unknown
    reasons = _reasons(details) if not details.keys().isdisjoint(_REASON_DETAILS) else _NO_REASONS
    key = (unknown, reasons, resource.kind if unread else None)
    why = _UNKNOWN_WHY.get(key)
    if why is None:
        why = remember(_UNKNOWN_WHY, key, _why_unknown(tuple(sorted(set(unknown))), reasons,
                                                       resource.kind if unread else None),
                       _MAX_UNKNOWN_WHY)
    return f"{resource.name}: cannot decide '{policy.spec.title}': {why}"


def _reasons(details: Mapping[str, Any]) -> tuple[str | None, ...]:
    """The evidence that says why, as the message prints it (None: none given)."""
    return tuple([str(value) if value else None for value in map(details.get, _REASON_DETAILS)])


# Evidence that says why a value is unknown, in the order the message gives it.
_REASON_DETAILS = ("schedule_error", "telemetry_reason", "unknown_reason")
_NO_REASONS: tuple[str | None, ...] = (None,) * len(_REASON_DETAILS)
# Why, by what it is made of: a few combinations cover a whole estate.
_UNKNOWN_WHY: dict[tuple[Any, ...], str] = {}
_MAX_UNKNOWN_WHY = 1024


def _why_unknown(unknown: tuple[str, ...], reasons: tuple[str | None, ...],
                 unread_kind: str | None) -> str:
    """`unread_kind`: the kind of an object asking for accelerators that gpuwarden does not
    read (None for every other)."""
    why = [_UNKNOWN_REASONS[path] for path in unknown if path in _UNKNOWN_REASONS]
    why.extend(reason for reason in reasons if reason is not None)
    if unread_kind is not None:
        why.append(f"it asks for accelerators but gpuwarden does not read kind "
                   f"{unread_kind}: teach it with a KindEntry in "
                   "engine/sources/kubernetes/crd_kinds.py (docs/kubernetes-kinds.md)")
    # An unread kind's other unknowns (capacity, ...) follow from not reading it, not from apply.
    plain = [] if unread_kind is not None else [path for path in unknown
                                                if path not in _UNKNOWN_REASONS]
    if plain:
        why.append("value(s) known only after apply: " + ", ".join(plain))
    return "; ".join(why) or "a value it depends on is not known yet"


SPEND_DETAIL = "resource_monthly_spend_usd"


def prices_of(catalog: Catalog, dates: Iterable[str] = ()) -> Prices:
    """Which prices the figures used: the catalog's source, the oldest date among the catalog
    prices of the scanned resources, and the `--prices` file when one was given."""
    override = catalog.source_note.partition("prices overridden from ")[2].split(";")[0] \
        or None
    return Prices(source=catalog.source_note, as_of=min(dates, default=None), currency="USD",
                  override_file=override)


# A failing finding as the money totals read it: its figure, and the spend of its resource
# (`SPEND_DETAIL`; None when not known).
Saving = tuple[float, Any]
_FIGURE: Callable[[Saving], float] = itemgetter(0)


def combined_savings(findings: list[Finding]) -> float:
    """One resource's savings: rates combine (spot 60% off and off half the hours saves
    1 − 0.4 × 0.5 = 80%), never above its spend. Without a known spend, the largest figure."""
    return _combined([_saving(finding) for finding in findings])


def _saving(finding: Finding) -> Saving:
    return finding.estimated_monthly_usd, finding.details.get(SPEND_DETAIL)


def _combined(savings: list[Saving]) -> float:
    known = None  # the resource's spend: the largest its findings know (a loop: once per
    for _, spend in savings:  # resource, where a comprehension would be a call more)
        if spend is not None and (known is None or spend > known):
            known = spend
    spend = 0.0 if known is None else float(known)
    if spend <= 0:
        return max(map(_FIGURE, savings), default=0.0)
    kept = 1.0
    for usd, _ in savings:
        kept *= 1.0 - min(1.0, usd / spend)
    return spend * (1.0 - kept)


def _combined_total(by_resource: dict[tuple[str, str], list[Saving]]) -> float:
    return round(sum(_combined(group) for group in by_resource.values()), 2)


def _largest_total(by_resource: dict[tuple[str, str], list[Saving]]) -> float:
    return round(sum(max(map(_FIGURE, group)) for group in by_resource.values()), 2)


def savings_total(findings: Iterable[Finding]) -> float:
    """Every resource's combined savings (`combined_savings`), added up."""
    return _combined_total(_tally(findings).by_kind.get("savings", {}))


def largest_per_resource(findings: Iterable[Finding], kind: str) -> float:
    """Per resource, the largest figure of one kind (two tag policies on one resource are the
    same spend with no owner), added up."""
    return _largest_total(_tally(findings).by_kind.get(kind, {}))


def summarize(findings: list[Finding], resources: int, passed: int, exempted: int = 0,
              *, spend_usd: float = 0.0) -> Summary:
    """The counts and the money, each kind apart: `spend_usd` is the scanned GPU spend (the
    evaluation's; a recount after dropping findings keeps the report's)."""
    return _summary(_tally(findings), resources, passed, exempted, spend_usd=spend_usd)


def _summary(tally: _Tally, resources: int, passed: int, exempted: int,
             *, spend_usd: float) -> Summary:
    savings = _combined_total(tally.by_kind.get("savings", {}))
    by_policy, by_severity, by_account = tally.by()
    return Summary(
        resources=resources,
        findings=tally.failed + tally.unknown,
        failed=tally.failed,
        unknown=tally.unknown,
        passed=passed,
        exempted=exempted,
        by_policy=by_policy,
        by_severity=by_severity,
        by_account=by_account,
        estimated_monthly_usd=savings,
        monthly_spend_usd=round(spend_usd, 2),
        savings_usd=savings,
        unallocated_usd=_largest_total(tally.by_kind.get("unallocated", {})),
        over_budget_usd=_largest_total(tally.by_kind.get("over_budget", {})),
    )


_Counted = tuple[str, str, str | None]  # a finding's policy, severity and account
_FIRST_PLACE: Callable[[tuple[_Counted, list[Any]]], Any] = lambda item: item[1][1]  # noqa: E731


@dataclass
class _Tally:
    """Failing and unknown findings counted per policy, severity and account at once, with
    the first place in the report of each of those; the failing ones' savings grouped per
    cost kind and resource."""

    failed: int = 0
    unknown: int = 0
    # each (policy, severity, account): [its count, its first place (compared, never read)]
    counted: dict[_Counted, list[Any]] = field(default_factory=dict)
    by_kind: dict[str, dict[tuple[str, str], list[Saving]]] = field(default_factory=dict)

    def add(self, finding: Finding, place: Any) -> None:
        """Count a finding; `place`: where it stands in the report (`_Place`, or a number for
        findings listed in report order)."""
        result = finding.result
        if result == "pass":
            return
        ref = finding.resource
        counted = (finding.policy, finding.severity._value_, ref.account)
        entry = self.counted.get(counted)
        if entry is None:
            self.counted[counted] = [1, place]
        else:
            entry[0] += 1
            if place < entry[1]:
                entry[1] = place
        if result == "fail":
            self.failed += 1
            groups = self.by_kind.get(finding.cost_kind)
            if groups is None:
                groups = self.by_kind[finding.cost_kind] = {}
            key = (ref.provider, ref.id)
            group = groups.get(key)
            if group is None:
                groups[key] = [_saving(finding)]
            else:
                group.append(_saving(finding))
        elif result == "unknown":
            self.unknown += 1

    def by(self) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        """The counts per policy, per severity and per account, each listed in the order the
        report first shows it."""
        by_policy: dict[str, int] = {}
        by_severity: dict[str, int] = {}
        by_account: dict[str, int] = {}
        for (policy, severity, account), (count, _) in sorted(self.counted.items(),
                                                             key=_FIRST_PLACE):
            by_policy[policy] = by_policy.get(policy, 0) + count
            by_severity[severity] = by_severity.get(severity, 0) + count
            if account:
                by_account[account] = by_account.get(account, 0) + count
        return by_policy, by_severity, by_account


def _tally(findings: Iterable[Finding]) -> _Tally:
    tally = _Tally()
    for number, finding in enumerate(findings):
        tally.add(finding, number)
    return tally
