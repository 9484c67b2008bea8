"""AWS Lambda entry point for scheduled enforcement: `engine.lambda_handler.handler`.

Thin wiring, the same as `gpuwarden scan --source aws`: read the run's settings from the event
and the environment, scan AWS, evaluate at the runtime door, remediate in enforce mode, write the
JSON report (and the audit log) to S3, log one JSON line per phase, return the summary.

Cold starts matter: importing this module costs only the standard library. The engine, the AWS
adapter and boto3 are imported by the first invocation that needs them.

Event fields (all optional; anything else is rejected so a typo never runs with defaults):

- `mode`: "dry-run" | "enforce"          (env GPUWARDEN_MODE, default dry-run)
- `policies`: [path | "builtin", ...]     (env GPUWARDEN_POLICIES, comma-separated; default builtin)
- `regions`: ["us-east-1", ...]          (env GPUWARDEN_REGIONS; default the function's region)
- `role_arns`: [arn, ...] or `role_arn`   (env GPUWARDEN_ROLE_ARNS; default the function's account)
- `max_actions`: N                        (env GPUWARDEN_MAX_ACTIONS, default 10)
- `now`: ISO 8601 evaluation clock, for dry-run replays only: refused in enforce mode, so a
  replayed clock can never stop real machines in business hours.

Hostile events are expected: a bad field, a `detail` that is not an object, an instant out of
range, a policy path outside the package (`..`, an absolute path outside the built-in pack, a
URL such as `s3://...`: policies are not fetched) all return `{"error": ...}` and act on
nothing. Enforcement stops starting actions when the invocation's remaining time falls under a
margin (`deadline reached` in the report), so the report and audit log are still written.

The EventBridge envelope (`version`, `id`, `detail-type`, `source`, `account`, `time`,
`region`, `resources`, `detail`) and the EventBridge Scheduler context attributes the Terraform
module passes (`schedule_arn`, `scheduled_time`, `execution_id`, `attempt_number`) are accepted
and used only for the run id and the logs. A non-empty `detail` object may carry the fields
above too (a custom PutEvents event).
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal

from engine.errors import InputError

if TYPE_CHECKING:  # names for annotations only; imported for real inside the run
    from engine.evaluate import Engine
    from engine.model import Report
    from engine.sources.registry import Collected
    from remediations.runner import Deadline

Mode = Literal["dry-run", "enforce"]
MODES: tuple[Mode, ...] = ("dry-run", "enforce")

ENV_MODE = "GPUWARDEN_MODE"
ENV_ALLOW_ENFORCE = "GPUWARDEN_ALLOW_ENFORCE"
ENV_POLICIES = "GPUWARDEN_POLICIES"
ENV_REGIONS = "GPUWARDEN_REGIONS"
ENV_ROLE_ARNS = "GPUWARDEN_ROLE_ARNS"
ENV_MAX_ACTIONS = "GPUWARDEN_MAX_ACTIONS"
ENV_BUCKET = "GPUWARDEN_REPORT_BUCKET"
ENV_PREFIX = "GPUWARDEN_REPORT_PREFIX"
ENV_SSE = "GPUWARDEN_REPORT_SSE"
ENV_KMS_KEY = "GPUWARDEN_REPORT_KMS_KEY_ID"
SSE_ALGORITHMS = ("AES256", "aws:kms")

DEFAULT_MAX_ACTIONS = 10
DEFAULT_PREFIX = "gpuwarden"
MAX_LIST_ITEMS = 64
MAX_TEXT = 1024
EARLIEST, LATEST = datetime(1970, 1, 1, tzinfo=UTC), datetime(9000, 1, 1, tzinfo=UTC)
# Enforcement stops starting actions this long before the invocation's end (at most this share
# of the time left), which leaves time for the last call and the S3 writes.
DEADLINE_MARGIN_S = 60.0
DEADLINE_MARGIN_SHARE = 0.25

OVERRIDE_FIELDS = frozenset(
    {"mode", "policies", "regions", "role_arns", "role_arn", "max_actions", "now"})
ENVELOPE_FIELDS = frozenset(
    {"version", "id", "detail-type", "source", "account", "time", "region", "resources",
     "detail"})
SCHEDULER_FIELDS = frozenset({"schedule_arn", "scheduled_time", "execution_id", "attempt_number"})
KNOWN_FIELDS = OVERRIDE_FIELDS | ENVELOPE_FIELDS | SCHEDULER_FIELDS

_REGION = re.compile(r"^([a-z]{2}(-[a-z]+)+-\d{1,2}|all)$")
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}$")
_UNSAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9_-]+")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_SHOWN_CHARS = 80


@dataclass(frozen=True, slots=True)
class RunConfig:
    """One invocation's settings: the event's overrides on top of the environment's defaults."""

    mode: Mode = "dry-run"
    policies: tuple[str, ...] = ("builtin",)
    regions: tuple[str, ...] = ()
    role_arns: tuple[str, ...] = ()
    max_actions: int = DEFAULT_MAX_ACTIONS
    now: datetime | None = None
    bucket: str | None = None
    prefix: str = DEFAULT_PREFIX
    sse: str = "AES256"
    kms_key_id: str | None = None
    trigger_id: str | None = None  # scheduler execution id or EventBridge event id
    package_root: str = ""  # relative policy paths are read from here (LAMBDA_TASK_ROOT)


# ---------------------------------------------------------------------------------------------
# Event and environment validation (pure: no I/O, no clock)


def parse_run_config(event: object, environ: Mapping[str, str]) -> RunConfig:
    """Validate the event against the known fields and merge it over the environment defaults.

    Raises InputError with one line naming the bad field; never anything else.
    """
    if event is None:
        event = {}
    if not isinstance(event, dict):
        raise InputError(f"event must be a JSON object, not {_json_type(event)}")
    overrides = _overrides(event)
    defaults = _environment_defaults(environ)
    mode = defaults.mode
    if "mode" in overrides:
        mode = _mode(overrides["mode"], "event field 'mode'")
    if mode == "enforce" and not _flag(environ, ENV_ALLOW_ENFORCE, default=True):
        raise InputError(f"mode 'enforce' is not allowed here ({ENV_ALLOW_ENFORCE}=false: this "
                         "function was deployed for dry-run, with read-only permissions)")
    if mode == "enforce" and "now" in overrides:
        raise InputError("event field 'now' is refused in enforce mode: a replayed clock must "
                         "never stop real machines (use it with mode dry-run)")
    max_actions = defaults.max_actions
    if "max_actions" in overrides:
        max_actions = _max_actions(overrides["max_actions"], "event field 'max_actions'")
    return RunConfig(
        mode=mode,
        policies=_string_list(overrides, "policies", check=_policy_path) or defaults.policies,
        regions=_string_list(overrides, "regions", check=_region) or defaults.regions,
        role_arns=_role_arns(overrides) or defaults.role_arns,
        max_actions=max_actions,
        now=_instant(overrides["now"]) if "now" in overrides else None,
        bucket=defaults.bucket,
        prefix=defaults.prefix,
        sse=defaults.sse,
        kms_key_id=defaults.kms_key_id,
        trigger_id=_trigger_id(event),
        package_root=package_root(environ),
    )


def package_root(environ: Mapping[str, str]) -> str:
    """The deployment package's root: Lambda's LAMBDA_TASK_ROOT, else where `engine` lives."""
    return environ.get("LAMBDA_TASK_ROOT", "").strip() or str(Path(__file__).parent.parent)


def _overrides(event: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(str(key) for key in event if key not in KNOWN_FIELDS)
    if unknown:
        raise InputError(f"unknown event field {unknown[0]!r} (known: "
                         f"{', '.join(sorted(OVERRIDE_FIELDS))}, plus the EventBridge envelope)")
    overrides = {key: value for key, value in event.items() if key in OVERRIDE_FIELDS}
    detail = event.get("detail", {})
    if not isinstance(detail, dict):
        raise InputError(f"event field 'detail' must be an object, not {_json_type(detail)}")
    if detail:
        strange = sorted(str(key) for key in detail if key not in OVERRIDE_FIELDS)
        if strange:
            raise InputError(f"unknown field 'detail.{strange[0]}' (known: "
                             f"{', '.join(sorted(OVERRIDE_FIELDS))})")
        overrides = {**detail, **overrides}
    return overrides


def _environment_defaults(environ: Mapping[str, str]) -> RunConfig:
    def split(name: str) -> tuple[str, ...]:
        return tuple(part.strip() for part in environ.get(name, "").split(",") if part.strip())

    regions = split(ENV_REGIONS)
    for region in regions:
        _region(region, ENV_REGIONS)
    policies = split(ENV_POLICIES)
    for policy in policies:
        _policy_path(policy, ENV_POLICIES)
    role_arns = split(ENV_ROLE_ARNS)
    for arn in role_arns:
        _role_arn(arn, ENV_ROLE_ARNS)
    max_actions_text = environ.get(ENV_MAX_ACTIONS, "").strip()
    bucket = environ.get(ENV_BUCKET, "").strip() or None
    prefix = environ.get(ENV_PREFIX, DEFAULT_PREFIX).strip().strip("/")
    kms_key_id = environ.get(ENV_KMS_KEY, "").strip() or None
    sse = environ.get(ENV_SSE, "").strip() or ("aws:kms" if kms_key_id else "AES256")
    if sse not in SSE_ALGORITHMS:
        raise InputError(f"{ENV_SSE}: {sse!r} is not one of {', '.join(SSE_ALGORITHMS)}")
    return RunConfig(
        mode=_mode(environ.get(ENV_MODE, "dry-run").strip() or "dry-run", ENV_MODE),
        policies=policies or ("builtin",),
        regions=regions,
        role_arns=role_arns,
        max_actions=_max_actions(_int_text(max_actions_text, ENV_MAX_ACTIONS), ENV_MAX_ACTIONS)
        if max_actions_text else DEFAULT_MAX_ACTIONS,
        bucket=bucket,
        prefix=prefix,
        sse=sse,
        kms_key_id=kms_key_id,
    )


def _mode(value: object, where: str) -> Mode:
    for mode in MODES:
        if value == mode:
            return mode
    raise InputError(f"{where}: {_shown(value)} is not one of {', '.join(MODES)}")


def _flag(environ: Mapping[str, str], name: str, *, default: bool) -> bool:
    text = environ.get(name, "").strip().lower()
    if not text:
        return default
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise InputError(f"{name}: {text!r} is not true or false")


def _string_list(overrides: dict[str, Any], name: str,
                 check: Callable[[str, str], str] | None) -> tuple[str, ...]:
    if name not in overrides:
        return ()
    value = overrides[name]
    where = f"event field {name!r}"
    if not isinstance(value, list) or not value:
        raise InputError(f"{where} must be a non-empty list of strings, not {_json_type(value)}")
    if len(value) > MAX_LIST_ITEMS:
        raise InputError(f"{where}: {len(value)} items, at most {MAX_LIST_ITEMS}")
    for item in value:
        if not isinstance(item, str) or not item.strip() or len(item) > MAX_TEXT:
            raise InputError(f"{where}: {_shown(item)} is not a non-empty string "
                             f"(at most {MAX_TEXT} characters)")
        if check is not None:
            check(item, where)
    return tuple(item.strip() for item in value)


def _role_arns(overrides: dict[str, Any]) -> tuple[str, ...]:
    if "role_arn" in overrides and "role_arns" in overrides:
        raise InputError("event fields 'role_arn' and 'role_arns': give one of them")
    if "role_arn" in overrides:
        value = overrides["role_arn"]
        if not isinstance(value, str):
            raise InputError(f"event field 'role_arn' must be a string, not {_json_type(value)}")
        return (_role_arn(value, "event field 'role_arn'"),)
    return _string_list(overrides, "role_arns", check=_role_arn)


def _region(value: str, where: str) -> str:
    if not _REGION.match(value):
        raise InputError(f"{where}: {_shown(value)} is not an AWS region name (like us-east-1) "
                         "nor all")
    return value


def _role_arn(value: str, where: str) -> str:
    if not _ROLE_ARN.match(value):
        raise InputError(f"{where}: {_shown(value)} is not an IAM role ARN "
                         "(arn:aws:iam::123456789012:role/NAME)")
    return value


def _policy_path(value: str, where: str) -> str:
    """`builtin`, a path relative to the package without `..`, or an absolute path inside the
    built-in pack. Checked on the text only; `resolve_policies` checks links at run time."""
    text = value.strip()
    if text == "builtin":
        return value
    if any(ord(ch) < 0x20 or ch == "\x7f" for ch in text):
        raise InputError(f"{where}: {_shown(value)} holds control characters")
    if _URL.match(text):
        raise InputError(f"{where}: {_shown(value)} is refused: policies are read from the "
                         "function's package only, never fetched from a URL or bucket")
    if ".." in PurePosixPath(text).parts or "\\" in text:
        raise InputError(f"{where}: {_shown(value)} is refused: '..' may not leave the package")
    if text.startswith("/") and not _inside(text, _builtin_pack()):
        raise InputError(f"{where}: {_shown(value)} is refused: an absolute path must be inside "
                         "the built-in pack; give other policies relative to the package root")
    return value


def _builtin_pack() -> str:
    from engine.policy import builtin_pack_dir

    return str(builtin_pack_dir())


def _inside(path: str, directory: str) -> bool:
    path, directory = posixpath.normpath(path), posixpath.normpath(directory)
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def resolve_policies(policies: tuple[str, ...], root: str) -> list[str]:
    """Each policy path as the engine reads it: relative ones under the package root, links
    resolved; one whose target leaves the package (or the built-in pack) is refused."""
    resolved: list[str] = []
    base = Path(root).resolve()
    for policy in policies:
        text = policy.strip()
        if text == "builtin":
            resolved.append(text)
            continue
        allowed = Path(_builtin_pack()).resolve() if text.startswith("/") else base
        target = (base / text).resolve()
        if not _inside(str(target), str(allowed)):
            raise InputError(f"policy {_shown(policy)} is refused: it leads outside "
                             f"{'the built-in pack' if text.startswith('/') else 'the package'}")
        resolved.append(str(target))
    return resolved


def _shown(value: object) -> str:
    """A value for an error line: its repr, bounded (events are untrusted)."""
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS - 1] + "…"


def _int_text(text: str, where: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InputError(f"{where}: {text!r} is not a whole number") from None


def _max_actions(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10**6:
        raise InputError(f"{where} must be a whole number, 0 or more, not {_shown(value)}")
    return value


def _instant(value: object) -> datetime:
    if not isinstance(value, str):
        raise InputError(f"event field 'now' must be an ISO 8601 string, not {_json_type(value)}")
    try:
        instant = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        instant = instant if instant.tzinfo else instant.replace(tzinfo=UTC)
        in_range = EARLIEST <= instant.astimezone(UTC) < LATEST
    except ValueError:
        raise InputError(f"event field 'now': not an ISO 8601 instant: {_shown(value)}") from None
    except OverflowError:
        in_range = False
    if not in_range:
        raise InputError(f"event field 'now': {_shown(value)} is out of range "
                         f"({EARLIEST.year} to {LATEST.year - 1})")
    return instant


def _trigger_id(event: dict[str, Any]) -> str | None:
    for key in ("execution_id", "id"):
        value = event.get(key)
        # an unreplaced Scheduler placeholder (`<aws.scheduler.execution-id>`) is no id
        if isinstance(value, str) and value and not value.startswith("<"):
            return value
    return None


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


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


def utc_now() -> datetime:
    """The run's clock (tests replace it: an event's `now` cannot drive enforcement)."""
    return datetime.now(UTC)


def run(config: RunConfig, log: RunLog, started: float | None = None,
        deadline: Deadline | None = None) -> dict[str, Any]:
    """Scan → evaluate → (enforce) → store; the summary of what happened."""
    started = time.perf_counter() if started is None else started
    instant = config.now or utc_now()
    log.run_id = run_id_for(instant, config.trigger_id or log.request_id)
    log.info("start", mode=config.mode, now=instant.isoformat(), policies=list(config.policies),
             regions=list(config.regions), accounts=len(config.role_arns) or 1,
             max_actions=config.max_actions, report_bucket=config.bucket)
    engine = _load_engine(config, log)
    collected = _scan(config, engine, log)
    report = _evaluate(config, engine, collected, instant, log)
    import tempfile

    audit_path = Path(tempfile.gettempdir()) / f"gpuwarden-audit-{log.run_id}.jsonl"
    if config.mode == "enforce":
        report = _enforce(config, report, collected, audit_path, log, deadline)
    stored = _store(config, engine, report, audit_path, instant, log)
    summary = _summary(config, report, collected, instant, log, stored)
    summary["duration_ms"] = _ms_since(started)
    log.info("done", **{k: v for k, v in summary.items() if k not in ("warnings", "errors")})
    return summary


def _load_engine(config: RunConfig, log: RunLog) -> Engine:
    with log.timed("policies", {}) as fields:
        from engine.pipeline import build_engine

        engine = build_engine(resolve_policies(config.policies, config.package_root))
        fields["policies"] = len(engine.policies)
    return engine


def _scan(config: RunConfig, engine: Engine, log: RunLog) -> Collected:
    with log.timed("scan", {"source": "aws"}) as fields:
        from engine.sources.registry import ScanOptions, collect_sources

        options = ScanOptions(regions=config.regions, role_arns=config.role_arns)
        collected = collect_sources(["aws"], options, engine.catalog)
        fields["resources"] = len(collected.resources)
        fields["warnings"] = len(collected.warnings)
    for warning in collected.warnings:
        log.warning("scan", warning=warning)
    return collected


def _evaluate(config: RunConfig, engine: Engine, collected: Collected, instant: datetime,
              log: RunLog) -> Report:
    with log.timed("evaluate", {}) as fields:
        report = engine.evaluate(collected.resources, instant, door="runtime", mode=config.mode)
        fields.update(findings=report.summary.findings, failed=report.summary.failed,
                      unknown=report.summary.unknown, passed=report.summary.passed,
                      exempted=report.summary.exempted,
                      remediations=_remediation_counts(report))
    return report


def _enforce(config: RunConfig, report: Report, collected: Collected, audit_path: Path,
             log: RunLog, deadline: Deadline | None) -> Report:
    with log.timed("enforce", {"max_actions": config.max_actions}) as fields:
        from remediations.enforce import enforce_report
        from remediations.runner import DEADLINE_REACHED

        report = enforce_report(report, collected, max_actions=config.max_actions,
                                audit_log=audit_path, deadline=deadline)
        fields["remediations"] = _remediation_counts(report)
    late = sum(1 for f in report.findings
               if f.remediation is not None and f.remediation.detail == DEADLINE_REACHED)
    if late:
        log.warning("enforce", warning=f"deadline reached: {late} actions not started "
                    "(skipped; the next run picks them up)")
    # A second copy of the audit trail in CloudWatch, in case the S3 upload fails.
    for record in _audit_records(audit_path):
        log.info("audit", record=record)
    return report


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


def _remediation_counts(report: Report) -> dict[str, int]:
    counts = {"planned": 0, "applied": 0, "skipped": 0, "failed": 0}
    for finding in report.findings:
        if finding.remediation is not None:
            counts[finding.remediation.status] += 1
    return counts


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


def _summary(config: RunConfig, report: Report, collected: Collected, instant: datetime,
             log: RunLog, stored: Stored) -> dict[str, Any]:
    summary = report.summary
    return {
        "run_id": log.run_id,
        "mode": report.mode,
        "now": instant.isoformat(),
        "regions": list(config.regions),
        "regions_scanned": _regions_scanned(collected),
        "role_arns": list(config.role_arns),
        "resources": summary.resources,
        "findings": summary.findings,
        "failed": summary.failed,
        "unknown": summary.unknown,
        "passed": summary.passed,
        "exempted": summary.exempted,
        "by_policy": dict(summary.by_policy),
        "by_severity": dict(summary.by_severity),
        "estimated_monthly_usd": summary.estimated_monthly_usd,
        "remediations": _remediation_counts(report),
        "report": stored.report_uri,
        "audit_log": stored.audit_log_uri,
        "warnings": list(collected.warnings),
        "errors": list(log.errors),
    }
