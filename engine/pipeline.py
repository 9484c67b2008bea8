"""The scan pipeline both `gpuwarden scan` and the Lambda run, and the wiring every entry point
shares: policies + catalog → engine, report → output, exit code.

A scan is one `ScanRequest` through `run_scan`: load the policies → collect the sources → join
GPU telemetry → evaluate (planning remediations) → enforce, in enforce mode. The entry point
renders or stores the result; `ScanHooks` lets it watch the stages (the CLI shows a spinner and
prints warnings, the Lambda logs one JSON line per stage) without owning any of them.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from engine import __version__
from engine.core.catalog import Catalog, builtin_catalog
from engine.core.errors import InputError, printable
from engine.core.evaluate import Engine
from engine.core.model import CostChange, Door, Report, Resource, Severity
from engine.core.policy import BUILTIN, CompiledPolicy
from engine.loading.policies import load_policies
from engine.loading.prices import read_price_overrides
from engine.outputs import PolicyMeta, RenderContext

if TYPE_CHECKING:
    from engine.notify.targets import Target
    from engine.sources.registry import Collected, ScanOptions
    from remediations.runner import Deadline

UnknownMode = Literal["warn", "fail", "pass"]
Mode = Literal["dry-run", "enforce"]
DOCS_URL = "https://github.com/gpuwarden/gpuwarden/blob/main/docs/policies.md"


COLLECTOR_THRESHOLD = 100_000  # allocations between first-generation collections (default 700)


def tune_collector() -> None:
    """Once per process, by the entry points (the CLI, the Lambda): evaluation allocates many
    small objects and makes no reference cycles, so with the default threshold the cyclic
    garbage collector scans the growing list of findings again and again, about a third of a
    large scan's CPU time (`python3 bench/bench_engine.py -n 20000`). The engine itself never
    touches it; the batch evaluations below pause it (`collector_paused`)."""
    gc.set_threshold(COLLECTOR_THRESHOLD, *gc.get_threshold()[1:])


@contextmanager
def collector_paused() -> Iterator[None]:
    """One batch evaluation with the cyclic collector paused, its objects frozen after.

    Evaluation makes no reference cycles (`tests/test_collector.py` holds it to that), so the
    collections it would trigger find nothing: about a tenth of a million young objects
    scanned per collection, 5% of a 100,000-resource evaluation. Once it is done, what it made
    is frozen (`gc.freeze`) instead of scanned once when the collector resumes; reference
    counting still frees all of it."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def parse_instant(text: str | None) -> datetime:
    """`--now`: an ISO 8601 instant (a naive one is UTC); default the current time."""
    if text is None:
        return datetime.now(UTC)
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InputError(f"--now: not an ISO 8601 instant: {printable(text)!r}") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def load_catalog(prices: Path | None, catalog_file: Path | None = None) -> Catalog:
    """The built-in catalog, with the types of `--catalog FILE`, then the prices of `--prices`."""
    catalog = builtin_catalog()
    if catalog_file:
        from engine.loading.catalog_files import read_catalog_file

        catalog = read_catalog_file(catalog, catalog_file)
    return read_price_overrides(catalog, prices) if prices else catalog


def build_engine(policy_paths: Sequence[str] | None, prices: Path | None = None,
                 catalog_file: Path | None = None, billing: str | None = None) -> Engine:
    catalog = load_catalog(prices, catalog_file)
    if billing:  # last: billed rates replace whatever list price a resource would get
        from engine.core.catalog import with_billed_rates
        from engine.loading.focus import read_billing

        catalog = with_billed_rates(catalog, *read_billing(billing))
    return Engine(load_policies(policy_paths or [BUILTIN]), catalog)


def policy_meta(policies: Sequence[CompiledPolicy]) -> dict[str, PolicyMeta]:
    return {
        p.id: PolicyMeta(
            id=p.id,
            title=p.spec.title,
            description=" ".join(p.spec.description.split()),
            severity=p.spec.severity.value,
            help=" ".join(p.spec.help.split()),
            help_uri=f"{DOCS_URL}#{p.id}",
        )
        for p in policies
    }


def render_context(report: Report, engine: Engine, source_file: str | None = None,
                   width: int | None = None, *, by_account: bool = False) -> RenderContext:
    return RenderContext(
        report=report,
        policies=policy_meta(engine.policies),
        source_file=source_file,
        tool_version=__version__,
        width=width,
        by_account=by_account,
    )


def render_report(
    report: Report, fmt: str, engine: Engine, source_file: str | None = None,
    width: int | None = None, *, by_account: bool = False,
) -> str:
    from engine.outputs.registry import render

    return render(fmt, render_context(report, engine, source_file, width,
                                      by_account=by_account))


@dataclass(frozen=True, slots=True)
class ScanRequest:
    """One scan, whoever asks for it.

    `options` holds what the sources and the telemetry read: regions, accounts (`role_arns`),
    projects, subscriptions, the cluster, and the telemetry settings (Prometheus, DCGM exporter,
    window). `deadline`: no remediation starts after it (`deadline reached`); `audit_log`: where
    enforce appends its records (required in enforce mode).
    """

    sources: tuple[str, ...]
    options: ScanOptions
    now: datetime
    policies: tuple[str, ...] = ()  # empty: the built-in pack
    prices: Path | None = None
    catalog_file: Path | None = None  # --catalog FILE: instance types to add or override
    billing: str | None = None  # --billing FILE|FOLDER|s3://: a FOCUS export's billed rates
    mode: Mode = "dry-run"
    door: Door | None = None  # None: each resource's own door (live state: runtime)
    show_passed: bool = False
    max_actions: int = 10
    deadline: Deadline | None = None
    audit_log: Path | None = None
    save_snapshot: Path | None = None
    notify: tuple[Target, ...] = ()  # --notify: a digest of the new failing findings
    notify_state: Path | None = None  # None: next to the audit log
    # --notify with --history: the keys already news (its last run's failing findings, from
    # engine.history.last_run); None: the state file decides
    notify_known: frozenset[str] | None = None
    # False: a dry run lets go of what it read as soon as it can (the sources' native objects
    # once collected and saved, each resource once judged): `ScanResult.collected` is then
    # empty. True for a caller that reads them after (history, the HTML report's charts).
    keep_natives: bool = True


@dataclass(frozen=True, slots=True)
class ScanResult:
    engine: Engine
    collected: Collected
    report: Report


class ScanHooks(Protocol):
    """What an entry point does around the stages.

    `stage` wraps each stage (`policies`, `scan`, `telemetry`, `evaluate`, `enforce`) and sees
    the counts the stage puts in `fields`; `reading` wraps the reading of the sources and the
    telemetry together; `warning` gets each partial failure of the reading, once it ended.
    """

    def stage(self, name: str, fields: dict[str, Any]
              ) -> AbstractContextManager[dict[str, Any]]: ...

    def reading(self, request: ScanRequest) -> AbstractContextManager[object]: ...

    def warning(self, message: str) -> None: ...


class QuietHooks:
    """Hooks that watch nothing."""

    def stage(self, name: str, fields: dict[str, Any]) -> AbstractContextManager[dict[str, Any]]:
        return nullcontext(fields)

    def reading(self, request: ScanRequest) -> AbstractContextManager[object]:
        return nullcontext()

    def warning(self, message: str) -> None:
        return None


def run_scan(request: ScanRequest, hooks: ScanHooks | None = None) -> ScanResult:
    """Policies → sources → telemetry → evaluate → enforce (in enforce mode)."""
    hooks = hooks or QuietHooks()
    with hooks.stage("policies", {}) as fields:
        engine = build_engine(request.policies, request.prices, request.catalog_file,
                              request.billing)
        fields["policies"] = len(engine.policies)
    collected = _collect(request, engine.catalog, hooks, _source_options(request, engine))
    if request.save_snapshot is not None:
        from engine.sources.registry import write_snapshot

        write_snapshot(collected, request.save_snapshot, request.now.isoformat())
    if request.mode == "dry-run" and not request.keep_natives:
        release_natives(collected, engine.policies)
    report = _evaluate(request, engine, collected, hooks)
    if request.mode == "enforce":
        report = _enforce(request, report, collected, hooks)
    if request.notify:
        _notify(request, report, hooks)
    return ScanResult(engine, collected, report)


def _notify(request: ScanRequest, report: Report, hooks: ScanHooks) -> None:
    """Never raises: a failed delivery is one warning, the scan's result stands."""
    from engine.notify import notify
    from engine.notify.state import default_state_path

    state = request.notify_state or default_state_path(request.audit_log)
    with hooks.stage("notify", {"targets": len(request.notify)}) as fields:
        fields["delivered"] = notify(report, request.notify, state, hooks.warning,
                                     known=request.notify_known)


def _collect(request: ScanRequest, catalog: Catalog, hooks: ScanHooks,
             options: ScanOptions | None = None) -> Collected:
    from engine.sources.registry import collect_sources

    with hooks.reading(request):
        with hooks.stage("scan", {"source": ",".join(request.sources)}) as fields:
            collected = collect_sources(list(request.sources), options or request.options,
                                        catalog)
            fields.update(resources=len(collected.resources), warnings=len(collected.warnings))
        if request.options.wants_telemetry or "telemetry" in collected.snapshot:
            collected = _join_telemetry(request, collected, catalog, hooks)
    for warning in collected.warnings:
        hooks.warning(warning)
    return collected


def _source_options(request: ScanRequest, engine: Engine) -> ScanOptions:
    """The request's source options, telling the sources whether anything will save, read
    or act on their native objects."""
    lean = request.mode == "dry-run" and not request.keep_natives \
        and request.save_snapshot is None
    if not lean:
        return request.options
    return replace(request.options, keep_natives=False,
                   keep_raw=_policies_read_raw(engine.policies))


def _policies_read_raw(policies: Sequence[CompiledPolicy]) -> bool:
    """Whether a policy may read a resource's `raw`: a Rego program, or `raw` named anywhere
    in the policy (a `raw.` path, a template)."""
    return any(policy.rego is not None or "raw" in repr(policy.raw) for policy in policies)


def _join_telemetry(request: ScanRequest, collected: Collected, catalog: Catalog,
                    hooks: ScanHooks) -> Collected:
    from engine.telemetry import attach_telemetry

    before = len(collected.warnings)
    with hooks.stage("telemetry", {}) as fields:
        collected = attach_telemetry(collected, request.options, request.now, catalog)
        fields.update(
            resources=len(collected.resources),
            with_telemetry=sum(1 for r in collected.resources if r.telemetry is not None),
            warnings=len(collected.warnings) - before)
    return collected


def release_natives(collected: Collected, policies: Sequence[CompiledPolicy]) -> None:
    """Let go of what a dry run no longer needs once the resources are collected, joined to
    their telemetry and saved: the sources' native objects, and each resource's `raw` copy of
    its object unless a policy may read it (a Rego program, or `raw` named anywhere in the
    policy: a `raw.` path or a template). Natives are about a third of a large snapshot
    scan's memory (docs/benchmarks.md)."""
    collected.snapshot.clear()
    if _policies_read_raw(policies):
        return
    for resource in collected.resources:
        if resource.raw:
            resource.raw = {}


def _evaluate(request: ScanRequest, engine: Engine, collected: Collected,
              hooks: ScanHooks) -> Report:
    with hooks.stage("evaluate", {}) as fields:
        if request.mode == "dry-run" and not request.keep_natives:
            report = evaluate_handing_over(engine, collected, request.now, door=request.door,
                                           show_passed=request.show_passed)
        else:
            report = evaluate_and_plan(engine, collected.resources, request.now,
                                       door=request.door, show_passed=request.show_passed,
                                       mode=request.mode)
        summary = report.summary
        fields.update(findings=summary.findings, failed=summary.failed, unknown=summary.unknown,
                      passed=summary.passed, exempted=summary.exempted,
                      remediations=remediation_counts(report))
    return report


def _enforce(request: ScanRequest, report: Report, collected: Collected,
             hooks: ScanHooks) -> Report:
    from remediations.enforce import enforce_report

    if request.audit_log is None:
        raise InputError("enforce mode needs an audit log")
    with hooks.stage("enforce", {"max_actions": request.max_actions}) as fields:
        report = enforce_report(report, collected, max_actions=request.max_actions,
                                audit_log=request.audit_log, deadline=request.deadline)
        fields["remediations"] = remediation_counts(report)
    return report


def evaluate_and_plan(engine: Engine, resources: Iterable[Resource], now: datetime, *,
                      door: Door | None = None, show_passed: bool = False, mode: Mode = "dry-run",
                      plans: Sequence[Mapping[str, Any]] = (),
                      cost_changes: Sequence[CostChange] | None = None) -> Report:
    """Evaluate, then plan each failing finding's remediation: the report every entry point
    gives. `plans`: the Terraform plan documents the resources came from, for Rego policies
    that read a whole plan; `cost_changes`: their changes, for the team budget's cost diff."""
    from engine.rego.inputs import plan_documents
    from remediations.planning import plan_remediations, plan_resumes

    resources = list(resources)
    with collector_paused():
        evaluation = engine.assess(resources, now, door=door, show_passed=show_passed,
                                   mode=mode, documents=plan_documents(plans),
                                   cost_changes=cost_changes)
        return plan_resumes(plan_remediations(evaluation, engine.policies), resources, now)


def evaluate_handing_over(engine: Engine, collected: Collected, now: datetime, *,
                          door: Door | None = None, show_passed: bool = False) -> Report:
    """`evaluate_and_plan` of the collected resources, for a dry run that keeps nothing after:
    each resource is handed over to the evaluation and let go once judged, each finding has
    its remediation planned as it is made (`collected.resources` is left empty). The same
    report, without every resource held beside every finding to the end."""
    from engine.core.evaluate import Judged
    from engine.sharedfields import share_fields_set
    from remediations.planning import (
        plan_resumes,
        planned_finding,
        remediation_actions,
        stop_mark,
    )

    pending: list[Resource | None] = list(collected.resources)
    collected.resources = []
    actions = remediation_actions(engine.policies)
    marked: list[Resource] = []  # what gpuwarden stopped itself, for `plan_resumes`

    def handed_over() -> Iterator[Resource]:
        for index, resource in enumerate(pending):
            pending[index] = None
            if resource is not None:
                if stop_mark(resource) is not None:
                    marked.append(resource)
                yield resource

    def settle(judged: Judged) -> Judged:
        finding = planned_finding(judged, actions)
        for model in (finding, finding.resource, finding.remediation):
            if model is not None:
                share_fields_set(model)
        return Judged(finding, None, judged.door)

    with collector_paused():
        evaluation = engine.assess(handed_over(), now, door=door, show_passed=show_passed,
                                   settle=settle)
        return plan_resumes(evaluation.report, marked, now)


def remediation_counts(report: Report) -> dict[str, int]:
    """How many findings' remediations are planned, applied, skipped, failed."""
    counts = {"planned": 0, "applied": 0, "skipped": 0, "failed": 0}
    for finding in report.findings:
        if finding.remediation is not None:
            counts[finding.remediation.status] += 1
    return counts


def apply_unknown_mode(report: Report, mode: UnknownMode) -> Report:
    """`--unknown pass` drops unknown verdicts; `warn` (default) lists them without gating."""
    if mode != "pass":
        return report
    from engine.core.evaluate import summarize

    kept = [f for f in report.findings if f.result != "unknown"]
    summary = summarize(kept, report.summary.resources, report.summary.passed,
                        report.summary.exempted, spend_usd=report.summary.monthly_spend_usd)
    return report.model_copy(update={"findings": kept, "summary": summary})


@dataclass(frozen=True, slots=True)
class Gate:
    fail_on: Severity = Severity.INFO
    unknown: UnknownMode = "warn"
    soft_fail: bool = False

    def exit_code(self, report: Report) -> int:
        """1 when a finding whose enforcement is `deny` fails at or above `fail_on`."""
        if self.soft_fail:
            return 0
        gating = ("fail", "unknown") if self.unknown == "fail" else ("fail",)
        for finding in report.findings:
            if (
                finding.result in gating
                and finding.enforcement == "deny"
                and finding.severity.rank >= self.fail_on.rank
            ):
                return 1
        return 0
