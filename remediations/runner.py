"""The enforcement runner: the guard rails every provider executor shares.

An executor supplies, per action name, a *check*: a function that reads the resource's current
state and returns either `NoChange` (already done, gone, or not supported: nothing to call) or a
`Change` (the state before, the request, and a function that makes the mutating call(s)). The
runner does the rest, the same way for every provider:

- it acts only on findings whose remediation the planner marked `planned` (runtime, deny,
  non-production, not exempt) for its provider;
- at most `max_actions` mutations per run (the blast radius); a resource is changed once per
  action even when several findings ask for it (`stop` for both off-hours and idle), except for
  actions applied once per policy (`mark-violation`: each policy adds its own mark);
- idempotence comes from the check: re-running finds nothing left to do;
- every attempt is written to an append-only JSONL audit log: a `before` line, flushed to disk
  before the mutating call, then an `after` line with the result. A check that finds nothing to
  do, or fails, writes one `check` line. If the log cannot be written nothing is changed;
- a failed call is recorded on the finding (`failed`, with the error) and the run goes on;
- past the run's deadline (e.g. the Lambda's remaining time less a margin) nothing more is
  started: each action left is `skipped` with detail `deadline reached` and a `check` line.

Every audit line has the same keys: ts, run_id, actor, mode, phase, provider, account, region,
resource, kind, policy, action, before, request, after, result, reason, error, and rate: the
on-demand $/h of one instance/replica the action stops or resumes (usd_per_h, price source,
capacity, team, and the evaluation instant `at`), which `remediations.ledger` totals.
"""

from __future__ import annotations

import getpass
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal

import orjson

from engine import __version__
from engine.core.errors import InputError
from engine.core.model import Finding, Remediation, Report, Resource

Status = Literal["applied", "skipped", "failed"]
Clock = Callable[[], datetime]


@dataclass(frozen=True, slots=True)
class Change:
    """A mutation ready to be made."""

    before: dict[str, Any]  # the state it changes, as read just now
    request: dict[str, Any]  # what will be sent (operation → parameters), for the audit log
    apply: Callable[[], dict[str, Any]]  # makes the call(s); returns the state after
    done: str  # the finding's detail once applied, e.g. "stopped i-0abc (was running)"


@dataclass(frozen=True, slots=True)
class NoChange:
    """Nothing to call: already in the wanted state, gone, or not supported."""

    reason: str
    before: dict[str, Any] = field(default_factory=dict)


Check = Callable[[Finding, Resource], Change | NoChange]
PER_POLICY_ACTIONS = frozenset({"mark-violation"})
DEADLINE_REACHED = "deadline reached"


@dataclass(frozen=True, slots=True)
class Deadline:
    """When a run must stop starting actions, on a monotonic clock."""

    at: float
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def after(cls, seconds: float, clock: Callable[[], float] = time.monotonic) -> Deadline:
        return cls(clock() + seconds, clock)

    def reached(self) -> bool:
        return self.clock() >= self.at

    def remaining(self) -> float:
        return max(0.0, self.at - self.clock())


def utc_now() -> datetime:
    return datetime.now(UTC)


def default_actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"gpuwarden/{__version__} {user}@{socket.gethostname()}"


def error_text(exc: BaseException) -> str:
    """One line for a failed call: botocore's code and message, an HTTP status, or the text."""
    response = getattr(exc, "response", None)
    if isinstance(response, Mapping) and isinstance(response.get("Error"), Mapping):
        error = response["Error"]
        return f"{error.get('Code', 'Error')}: {' '.join(str(error.get('Message', '')).split())}"
    status = getattr(exc, "status", None)
    if isinstance(status, int):
        return f"HTTP {status} {getattr(exc, 'reason', '') or ''}".rstrip()
    return " ".join(str(exc).split()) or type(exc).__name__


class AuditLog:
    """Append-only JSONL; each line is flushed before the call it announces is made."""

    def __init__(self, path: Path, *, run_id: str, actor: str, mode: str, clock: Clock,
                 evaluated_at: datetime | None = None) -> None:
        self.path = path
        self.evaluated_at = evaluated_at
        self.run_id = run_id
        self.actor = actor
        self.mode = mode
        self.clock = clock
        self._file: IO[str] | None = None

    def __enter__(self) -> AuditLog:
        try:
            self._file = self.path.open("a", encoding="utf-8")
        except OSError as exc:
            raise _log_error(self.path, exc) from None
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def rate_of(self, resource: Resource) -> dict[str, Any]:
        from engine.core.budget import team_of
        from engine.core.catalog import builtin_catalog
        from engine.core.costs import hourly_price

        catalog = builtin_catalog()
        quote = catalog.hourly_price(resource.instance_type, resource.region)
        usd, source = ((quote.usd_per_h, f"{quote.instance_type} on-demand in {quote.region}")
                       if quote is not None else hourly_price(resource, catalog))
        at = self.evaluated_at or self.clock()
        return {"usd_per_h": usd, "source": source, "capacity": str(resource.capacity),
                "team": team_of(resource), "at": at.isoformat()}

    def write(self, phase: str, finding: Finding, resource: Resource, action: str,
              **fields: Any) -> None:
        entry = {
            "ts": self.clock().isoformat(), "run_id": self.run_id, "actor": self.actor,
            "mode": self.mode, "phase": phase, "provider": resource.provider,
            "account": resource.account, "region": resource.region, "resource": resource.id,
            "kind": resource.kind, "policy": finding.policy, "action": action,
            "before": None, "request": None, "after": None, "result": None, "reason": None,
            "error": None, "rate": self.rate_of(resource),
        }
        entry.update(fields)
        assert self._file is not None, "AuditLog used outside its with-block"
        try:
            self._file.write(orjson.dumps(entry, default=str).decode() + "\n")
            self._file.flush()
        except OSError as exc:
            raise _log_error(self.path, exc) from None


def _log_error(path: Path, exc: OSError) -> InputError:
    return InputError(f"cannot write audit log: {exc.strerror or exc}", file=str(path))


class EnforcementRunner:
    """Applies one provider's planned actions through its checks, within a blast radius."""

    def __init__(self, provider: str, checks: Mapping[str, Check], *, max_actions: int,
                 log: AuditLog, per_policy: frozenset[str] = PER_POLICY_ACTIONS,
                 deadline: Deadline | None = None) -> None:
        if max_actions < 0:
            raise InputError("--max-actions must be 0 or more")
        self.provider = provider
        self.checks = checks
        self.max_actions = max_actions
        self.log = log
        self.per_policy = per_policy
        self.deadline = deadline
        self.attempts = 0
        self._done: set[tuple[str, str, str]] = set()

    def handle(self, finding: Finding, resource: Resource | None) -> Finding:
        remediation = finding.remediation
        if (remediation is None or remediation.status != "planned"
                or finding.resource.provider != self.provider):
            return finding
        if resource is None:
            status, detail = "skipped", "the resource is not in this scan"
        else:
            status, detail = self._attempt(finding, resource, remediation.action)
        updated = Remediation(action=remediation.action, status=status, detail=detail)
        return finding.model_copy(update={"remediation": updated})

    def _attempt(self, finding: Finding, resource: Resource, action: str
                 ) -> tuple[Status, str]:
        check = self.checks.get(action)
        if check is None:
            return "skipped", f"no {action} action for {self.provider} resources"
        key = (resource.id, action, finding.policy if action in self.per_policy else "")
        if key in self._done:
            return "skipped", f"{resource.id}: {action} already handled in this run"
        if self.attempts >= self.max_actions:
            return "skipped", f"blast radius: --max-actions {self.max_actions} reached"
        if self.deadline is not None and self.deadline.reached():
            self.log.write("check", finding, resource, action, result="skipped",
                           reason=DEADLINE_REACHED)
            return "skipped", DEADLINE_REACHED
        self._done.add(key)
        try:
            outcome = check(finding, resource)
        except Exception as exc:  # a failed read must not stop the run
            self.log.write("check", finding, resource, action, result="failed",
                           error=error_text(exc))
            return "failed", f"cannot read {resource.id}: {error_text(exc)}"
        if isinstance(outcome, NoChange):
            self.log.write("check", finding, resource, action, before=outcome.before or None,
                           result="skipped", reason=outcome.reason)
            return "skipped", outcome.reason
        return self._mutate(finding, resource, action, outcome)

    def _mutate(self, finding: Finding, resource: Resource, action: str, change: Change
                ) -> tuple[Status, str]:
        self.attempts += 1
        self.log.write("before", finding, resource, action, before=change.before,
                       request=change.request)
        try:
            after = change.apply()
        except Exception as exc:  # recorded; the next resource is still handled
            self.log.write("after", finding, resource, action, before=change.before,
                           request=change.request, result="failed", error=error_text(exc))
            return "failed", f"{action} {resource.id} failed: {error_text(exc)}"
        self.log.write("after", finding, resource, action, before=change.before,
                       request=change.request, after=after, result="applied")
        return "applied", change.done


def run_enforcement(
    report: Report,
    resources: list[Resource],
    *,
    provider: str,
    checks: Mapping[str, Check],
    max_actions: int,
    audit_log: Path,
    actor: str | None = None,
    clock: Clock = utc_now,
    run_id: str | None = None,
    deadline: Deadline | None = None,
) -> Report:
    """The report with `provider`'s planned actions applied, skipped or failed; mode enforce."""
    by_id = {(r.provider, r.id): r for r in resources}
    findings: list[Finding] = []
    with AuditLog(audit_log, run_id=run_id or uuid.uuid4().hex, actor=actor or default_actor(),
                  mode="enforce", clock=clock, evaluated_at=report.generated_at) as log:
        runner = EnforcementRunner(provider, checks, max_actions=max_actions, log=log,
                                   deadline=deadline)
        for finding in report.findings:
            resource = by_id.get((finding.resource.provider, finding.resource.id))
            findings.append(runner.handle(finding, resource))
    return report.model_copy(update={"findings": findings, "mode": "enforce"})
