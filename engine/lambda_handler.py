"""AWS Lambda entry point for scheduled enforcement: `engine.lambda_handler.handler`.

Thin: read the run's settings (`engine.lambda_config`: the event's fields over the environment's
defaults, validated), run the scan pipeline that `gpuwarden scan --source aws` runs
(`engine.pipeline`: policies → AWS → GPU telemetry when configured → evaluate at the runtime
door → remediate in enforce mode), write the JSON report (and the audit log) to S3, log one JSON
line per stage, return the summary.

Cold starts matter: importing this module costs only the standard library. The engine, the AWS
adapter and boto3 are imported by the first invocation that needs them.

A bad event or setting returns `{"error": ...}` and acts on nothing (see `engine.lambda_config`
for what is refused). Enforcement stops starting actions when the invocation's remaining time
falls under a margin (`deadline reached` in the report), so the report and audit log are still
written.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.core.errors import InputError
from engine.lambda_config import (
    ENV_BUCKET,
    KNOWN_FIELDS,
    OVERRIDE_FIELDS,
    SCHEDULER_FIELDS,
    RunConfig,
    parse_run_config,
    resolve_policies,
)

if TYPE_CHECKING:  # names for annotations only; imported for real inside the run
    from engine.core.evaluate import Engine
    from engine.core.model import Report
    from engine.pipeline import ScanRequest, ScanResult
    from engine.sources.registry import Collected
    from remediations.runner import Deadline

__all__ = ["KNOWN_FIELDS", "OVERRIDE_FIELDS", "SCHEDULER_FIELDS", "RunConfig", "handler",
           "parse_run_config", "report_key", "run", "run_id_for", "utc_now"]

# Enforcement stops starting actions this long before the invocation's end (at most this share
# of the time left), which leaves time for the last call and the S3 writes.
DEADLINE_MARGIN_S = 60.0
DEADLINE_MARGIN_SHARE = 0.25
_UNSAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9_-]+")


# ---------------------------------------------------------------------------------------------
# Run ids and S3 keys


def run_id_for(instant: datetime, hint: str | None) -> str:
    """`20261201T030000Z-<id>`: sorts by time within a day; the id is the trigger's or random."""
    cleaned = _UNSAFE_ID_CHARS.sub("-", hint or "").strip("-")[:64]
    if not cleaned:
        import uuid

        cleaned = uuid.uuid4().hex[:16]
    return f"{instant.astimezone(UTC):%Y%m%dT%H%M%SZ}-{cleaned}"


def report_key(prefix: str, instant: datetime, run_id: str, suffix: str = ".json") -> str:
    """`<prefix>/<yyyy>/<mm>/<dd>/<run-id><suffix>`, dated by the evaluation instant (UTC)."""
    day = instant.astimezone(UTC).strftime("%Y/%m/%d")
    return f"{prefix}/{day}/{run_id}{suffix}" if prefix else f"{day}/{run_id}{suffix}"


# ---------------------------------------------------------------------------------------------
# Structured logs: one JSON object per line on stdout (one CloudWatch event each)


@dataclass(slots=True)
class RunLog:
    request_id: str | None = None
    run_id: str | None = None
    errors: list[str] = field(default_factory=list)

    def info(self, phase: str, **fields: Any) -> None:
        self._write("info", phase, fields)

    def warning(self, phase: str, **fields: Any) -> None:
        self._write("warning", phase, fields)

    def error(self, phase: str, **fields: Any) -> None:
        self.errors.append(f"{phase}: {fields.get('error', '')}")
        self._write("error", phase, fields)

    @contextmanager
    def timed(self, phase: str, fields: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Log `phase` once it ends, with its duration and the counts the body put in `fields`."""
        started = time.perf_counter()
        yield fields
        self.info(phase, duration_ms=_ms_since(started), **fields)

    def _write(self, level: str, phase: str, fields: dict[str, Any]) -> None:
        record = {"ts": datetime.now(UTC).isoformat(timespec="milliseconds"), "level": level,
                  "logger": "gpuwarden.lambda", "phase": phase,
                  "request_id": self.request_id, "run_id": self.run_id, **fields}
        sys.stdout.write(json.dumps(record, default=str, separators=(",", ":")) + "\n")
        sys.stdout.flush()


def _ms_since(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)


# ---------------------------------------------------------------------------------------------
# The handler


def handler(event: object, context: object) -> dict[str, Any]:
    """Lambda entry point. Bad events and settings return `{"error": ...}` after an error log;
    an unexpected failure is logged and re-raised, so Lambda counts the invocation as failed."""
    started = time.perf_counter()
    log = RunLog(request_id=_request_id(context))
    try:
        config = parse_run_config(event, os.environ)
    except InputError as exc:
        log.error("config", error=str(exc))
        return {"error": str(exc)}
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:  # never a traceback
        message = f"cannot read the event ({type(exc).__name__})"
        log.error("config", error=message)
        return {"error": message}
    try:
        if config.discover:
            return discover_targets(config, log)
        return run(config, log, started, deadline=_deadline(context))
    except InputError as exc:
        log.error("run", error=str(exc))
        return {"error": str(exc), "run_id": log.run_id}
    except Exception as exc:
        log.error("run", error=f"{type(exc).__name__}: {exc}", error_type=type(exc).__name__)
        raise


def _request_id(context: object) -> str | None:
    value = getattr(context, "aws_request_id", None)
    return value if isinstance(value, str) else None


def _deadline(context: object) -> Deadline | None:
    """The invocation's end less a margin; None without a Lambda context (tests, scripts)."""
    remaining_ms = getattr(context, "get_remaining_time_in_millis", None)
    if not callable(remaining_ms):
        return None
    from remediations.runner import Deadline

    remaining = max(0.0, float(remaining_ms()) / 1000)
    return Deadline.after(remaining - min(DEADLINE_MARGIN_S, remaining * DEADLINE_MARGIN_SHARE))


def discover_targets(config: RunConfig, log: RunLog) -> dict[str, Any]:
    """`{"discover": "organization"}`: the fan-out's events, one per active account of the
    organization and region (docs/runtime.md); nothing is scanned."""
    from engine.sources.aws.failures import Tally
    from engine.sources.aws.organization import fan_out_targets
    from engine.sources.registry import ScanOptions

    warnings: list[str] = []
    with log.timed("discover", {}) as fields:
        targets = fan_out_targets(ScanOptions(regions=config.regions,
                                              role_name=config.organization_role),
                                  Tally(), warnings)
        fields.update(targets=len(targets), accounts=len({t["account"] for t in targets}),
                      warnings=len(warnings))
    for warning in warnings:
        log.warning("discover", message=warning)
    return {"targets": targets, "warnings": warnings}


def utc_now() -> datetime:
    """The run's clock (tests replace it: an event's `now` cannot drive enforcement)."""
    return datetime.now(UTC)


def run(config: RunConfig, log: RunLog, started: float | None = None,
        deadline: Deadline | None = None) -> dict[str, Any]:
    """The scan pipeline, then store; the summary of what happened."""
    import tempfile

    from engine.pipeline import run_scan, tune_collector

    tune_collector()  # as the CLI's entry point does; a warm container keeps the setting
    started = time.perf_counter() if started is None else started
    instant = config.now or utc_now()
    log.run_id = run_id_for(instant, config.trigger_id or log.request_id)
    log.info("start", mode=config.mode, now=instant.isoformat(), policies=list(config.policies),
             regions=list(config.regions),
             accounts="organization" if config.organization_role else len(config.role_arns) or 1,
             max_actions=config.max_actions, report_bucket=config.bucket,
             history=config.history,
             telemetry=_telemetry_sources(config))
    audit_path = Path(tempfile.gettempdir()) / f"gpuwarden-audit-{log.run_id}.jsonl"
    request = scan_request(config, instant, audit_path, deadline,
                           notify_known=_notify_known(config, instant, log))
    result = run_scan(request, _StageLog(log))
    if config.mode == "enforce":
        _log_enforcement(result.report, audit_path, log)
    stored = _store(config, result.engine, result.report, audit_path, instant, log)
    history = _record_history(config, request, result, log)
    summary = _summary(config, result, instant, log, stored)
    summary["history"] = history
    summary["duration_ms"] = _ms_since(started)
    log.info("done", **{k: v for k, v in summary.items() if k not in ("warnings", "errors")})
    return summary


def scan_request(config: RunConfig, instant: datetime, audit_path: Path,
                 deadline: Deadline | None, notify_known: frozenset[str] | None = None
                 ) -> ScanRequest:
    """The pipeline's request for this run: AWS, at the runtime door."""
    from engine.notify.targets import parse_targets
    from engine.pipeline import ScanRequest
    from engine.sources.registry import ScanOptions

    telemetry = config.telemetry
    options = ScanOptions(
        regions=config.regions, role_arns=config.role_arns,
        organization=config.organization_role is not None, role_name=config.organization_role,
        prometheus_url=telemetry.prometheus_url, prometheus_token=telemetry.prometheus_token,
        prometheus_basic_auth=telemetry.prometheus_basic_auth,
        prometheus_ca=telemetry.prometheus_ca, dcgm_url=telemetry.dcgm_url,
        telemetry_window_s=telemetry.window_s)
    return ScanRequest(
        sources=("aws",), options=options, now=instant,
        policies=tuple(resolve_policies(config.policies, config.package_root)),
        mode=config.mode, door="runtime", max_actions=config.max_actions, deadline=deadline,
        audit_log=audit_path, notify=parse_targets(config.notify), notify_known=notify_known)


def _notify_known(config: RunConfig, instant: datetime, log: RunLog) -> frozenset[str] | None:
    """With notify targets, "new" is new since the last run in the history (when it has one)."""
    if config.history is None or not config.notify:
        return None
    from engine.history.last_run import known_from_history

    return known_from_history(config.history, instant,
                              lambda message: log.warning("notify", warning=message))


def _telemetry_sources(config: RunConfig) -> list[str]:
    telemetry = config.telemetry
    return [name for name, url in (("prometheus", telemetry.prometheus_url),
                                   ("dcgm", telemetry.dcgm_url)) if url]


@dataclass(slots=True)
class _StageLog:
    """The pipeline's hooks: one log line per stage, one warning line per partial failure."""

    log: RunLog

    def stage(self, name: str, fields: dict[str, Any]) -> AbstractContextManager[dict[str, Any]]:
        return self.log.timed(name, fields)

    def reading(self, request: ScanRequest) -> AbstractContextManager[object]:
        return nullcontext()

    def warning(self, message: str) -> None:
        self.log.warning("scan", warning=message)


def _log_enforcement(report: Report, audit_path: Path, log: RunLog) -> None:
    from remediations.runner import DEADLINE_REACHED

    late = sum(1 for f in report.findings
               if f.remediation is not None and f.remediation.detail == DEADLINE_REACHED)
    if late:
        log.warning("enforce", warning=f"deadline reached: {late} actions not started "
                    "(skipped; the next run picks them up)")
    # A second copy of the audit trail in CloudWatch, in case the S3 upload fails.
    for record in _audit_records(audit_path):
        log.info("audit", record=record)


def _audit_records(path: Path) -> list[Any]:
    try:
        lines = path.read_text("utf-8").splitlines()
    except FileNotFoundError:
        return []
    records: list[Any] = []
    for line in lines:
        if line.strip():
            try:
                records.append(json.loads(line))
            except ValueError:
                records.append(line)
    return records


# ---------------------------------------------------------------------------------------------
# S3


@dataclass(frozen=True, slots=True)
class Stored:
    report_uri: str | None = None
    audit_log_uri: str | None = None


def _store(config: RunConfig, engine: Engine, report: Report, audit_path: Path,
           instant: datetime, log: RunLog) -> Stored:
    from engine.pipeline import render_report

    body = render_report(report, "json", engine).encode("utf-8")
    assert log.run_id is not None
    if config.bucket is None:
        log.warning("store", warning=f"{ENV_BUCKET} is not set: the report is not written "
                    "anywhere (the summary is still returned)", report_bytes=len(body))
        return Stored()
    audit = audit_path.read_bytes() if audit_path.is_file() else b""
    with log.timed("store", {"bucket": config.bucket}) as fields:
        client = _s3_client()
        report_uri = _put(client, config, report_key(config.prefix, instant, log.run_id),
                          body, "application/json", log)
        audit_uri = None
        if audit:
            audit_uri = _put(client, config,
                             report_key(config.prefix, instant, log.run_id, ".audit.jsonl"),
                             audit, "application/x-ndjson", log)
        fields.update(report=report_uri, report_bytes=len(body), audit_log=audit_uri,
                      audit_bytes=len(audit))
    if audit_uri is not None or not audit:
        audit_path.unlink(missing_ok=True)  # /tmp outlives the invocation in a warm sandbox
    return Stored(report_uri, audit_uri)


def _record_history(config: RunConfig, request: ScanRequest, result: ScanResult,
                    log: RunLog) -> str | None:
    """The run in the history (`gpuwarden history` / `what-if` read it), as `scan --history`
    records it: a date-partitioned JSON object under the history URL. A failed write is an
    error line; the report is already stored."""
    if config.history is None:
        return None
    from engine.history.record import collected_snapshot, record_run
    from engine.pipeline import render_report

    with log.timed("history", {"history": config.history}) as fields:
        try:
            record_run(config.history, at=request.now, command="scan", source="aws",
                       report_json=render_report(result.report, "json", result.engine),
                       snapshot=collected_snapshot(result.collected, request.now))
        except InputError as exc:
            fields["written"] = False
            log.error("history", error=str(exc))
            return None
        fields["written"] = True
    return config.history


def _s3_client() -> Any:
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        "s3", config=Config(retries={"mode": "adaptive", "max_attempts": 5}))


def _put(client: Any, config: RunConfig, key: str, body: bytes, content_type: str,
         log: RunLog) -> str | None:
    from botocore.exceptions import BotoCoreError, ClientError

    extra = {"ServerSideEncryption": config.sse}
    if config.sse == "aws:kms" and config.kms_key_id:
        extra["SSEKMSKeyId"] = config.kms_key_id
    try:
        client.put_object(Bucket=config.bucket, Key=key, Body=body, ContentType=content_type,
                          **extra)
    except (BotoCoreError, ClientError) as exc:
        log.error("store", error=f"cannot write s3://{config.bucket}/{key}: {exc}")
        return None
    return f"s3://{config.bucket}/{key}"


# ---------------------------------------------------------------------------------------------
# Summary


def _regions_scanned(collected: Collected) -> list[str]:
    """The (account, region) pairs the adapter read, from its snapshot section."""
    scans = collected.snapshot.get("aws")
    if not isinstance(scans, list):
        return []
    return sorted({f"{scan.get('account') or '-'}/{scan.get('region')}" for scan in scans
                   if isinstance(scan, dict) and scan.get("region")})


def _summary(config: RunConfig, result: ScanResult, instant: datetime, log: RunLog,
             stored: Stored) -> dict[str, Any]:
    from engine.pipeline import remediation_counts

    report, summary = result.report, result.report.summary
    return {
        "run_id": log.run_id,
        "mode": report.mode,
        "now": instant.isoformat(),
        "regions": list(config.regions),
        "regions_scanned": _regions_scanned(result.collected),
        "role_arns": list(config.role_arns),
        "resources": summary.resources,
        "findings": summary.findings,
        "failed": summary.failed,
        "unknown": summary.unknown,
        "passed": summary.passed,
        "exempted": summary.exempted,
        "by_policy": dict(summary.by_policy),
        "by_severity": dict(summary.by_severity),
        "by_account": dict(summary.by_account),
        "estimated_monthly_usd": summary.estimated_monthly_usd,
        "remediations": remediation_counts(report),
        "report": stored.report_uri,
        "audit_log": stored.audit_log_uri,
        "warnings": list(result.collected.warnings),
        "errors": list(log.errors),
    }
