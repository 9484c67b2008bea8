"""The Lambda's run configuration: the event's overrides validated and merged over the
environment's defaults, into a `RunConfig`. Pure: no I/O, no clock; standard library only, so
importing the handler stays cheap (cold starts).

Events are untrusted. A bad field, a `detail` that is not an object, an instant out of range,
a policy path outside the package (`..`, an absolute path outside the built-in pack, a URL such
as `s3://...`: policies are not fetched), a replayed clock in enforce mode, a Prometheus URL that
is not http(s): each raises InputError with one line naming the field, and nothing else is ever
raised for them.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

from engine.core.errors import InputError

Mode = Literal["dry-run", "enforce"]
MODES: tuple[Mode, ...] = ("dry-run", "enforce")

ENV_MODE = "GPUWARDEN_MODE"
ENV_ALLOW_ENFORCE = "GPUWARDEN_ALLOW_ENFORCE"
ENV_POLICIES = "GPUWARDEN_POLICIES"
ENV_REGIONS = "GPUWARDEN_REGIONS"
ENV_ROLE_ARNS = "GPUWARDEN_ROLE_ARNS"
# Every ACTIVE account of the organization, through this role name (`scan --organization`).
ENV_ORGANIZATION_ROLE = "GPUWARDEN_ORGANIZATION_ROLE"
ENV_MAX_ACTIONS = "GPUWARDEN_MAX_ACTIONS"
ENV_BUCKET = "GPUWARDEN_REPORT_BUCKET"
ENV_PREFIX = "GPUWARDEN_REPORT_PREFIX"
ENV_SSE = "GPUWARDEN_REPORT_SSE"
ENV_KMS_KEY = "GPUWARDEN_REPORT_KMS_KEY_ID"
ENV_PROMETHEUS_URL = "GPUWARDEN_PROMETHEUS_URL"
ENV_PROMETHEUS_TOKEN = "GPUWARDEN_PROMETHEUS_TOKEN"  # the CLI's --prometheus-token reads it too
ENV_PROMETHEUS_BASIC_AUTH = "GPUWARDEN_PROMETHEUS_BASIC_AUTH"  # as --prometheus-basic-auth
ENV_PROMETHEUS_CA = "GPUWARDEN_PROMETHEUS_CA"
ENV_DCGM_URL = "GPUWARDEN_DCGM_URL"
ENV_TELEMETRY_WINDOW = "GPUWARDEN_TELEMETRY_WINDOW"
ENV_NOTIFY = "GPUWARDEN_NOTIFY"  # comma-separated --notify targets
ENV_HISTORY = "GPUWARDEN_HISTORY"  # s3://bucket/prefix/, or "off"; default: under the reports
HISTORY_OFF = frozenset({"off", "none", "false", "0"})
HISTORY_FOLDER = "history"
SSE_ALGORITHMS = ("AES256", "aws:kms")

DEFAULT_MAX_ACTIONS = 10
DEFAULT_PREFIX = "gpuwarden"
DEFAULT_TELEMETRY_WINDOW_S = 3600
MIN_TELEMETRY_WINDOW_S = 60  # as the CLI's --telemetry-window
MAX_TELEMETRY_WINDOW_S = 31 * 24 * 3600
MAX_LIST_ITEMS = 64
MAX_TEXT = 1024
EARLIEST, LATEST = datetime(1970, 1, 1, tzinfo=UTC), datetime(9000, 1, 1, tzinfo=UTC)

OVERRIDE_FIELDS = frozenset(
    {"mode", "policies", "regions", "role_arns", "role_arn", "organization", "discover",
     "max_actions", "now",
     "prometheus_url", "dcgm_url", "telemetry_window", "notify"})
ENVELOPE_FIELDS = frozenset(
    {"version", "id", "detail-type", "source", "account", "time", "region", "resources",
     "detail"})
SCHEDULER_FIELDS = frozenset({"schedule_arn", "scheduled_time", "execution_id", "attempt_number"})
KNOWN_FIELDS = OVERRIDE_FIELDS | ENVELOPE_FIELDS | SCHEDULER_FIELDS

_REGION = re.compile(r"^([a-z]{2}(-[a-z]+)+-\d{1,2}|all)$")
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}$")
_ROLE_NAME = re.compile(r"^(?:[\w+=,.@-]{1,64}/){0,8}[\w+=,.@-]{1,64}$")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_SHOWN_CHARS = 80

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TelemetryConfig:
    """GPU telemetry for the scan, as the CLI's --prometheus-* / --dcgm-url options give it.
    Credentials come from the environment only and go only to the environment's URL."""

    prometheus_url: str | None = None
    prometheus_token: str | None = None
    prometheus_basic_auth: str | None = None  # "user:password"
    prometheus_ca: str | None = None  # a CA bundle file inside the function
    dcgm_url: str | None = None
    window_s: int = DEFAULT_TELEMETRY_WINDOW_S


@dataclass(frozen=True, slots=True)
class RunConfig:
    """One invocation's settings: the event's overrides on top of the environment's defaults."""

    mode: Mode = "dry-run"
    policies: tuple[str, ...] = ("builtin",)
    regions: tuple[str, ...] = ()
    role_arns: tuple[str, ...] = ()
    organization_role: str | None = None  # scan every account of the organization through it
    discover: bool = False  # list the fan-out's (account, region) events; scan nothing
    max_actions: int = DEFAULT_MAX_ACTIONS
    now: datetime | None = None
    telemetry: TelemetryConfig = TelemetryConfig()
    bucket: str | None = None
    prefix: str = DEFAULT_PREFIX
    sse: str = "AES256"
    kms_key_id: str | None = None
    trigger_id: str | None = None  # scheduler execution id or EventBridge event id
    package_root: str = ""  # relative policy paths are read from here (LAMBDA_TASK_ROOT)
    notify: tuple[str, ...] = ()  # --notify targets: Slack / JSON webhook URLs, sns:ARN
    history: str | None = None  # the run history (`--history`): an s3:// URL, or None


# ---------------------------------------------------------------------------------------------
# The event over the environment


def parse_run_config(event: object, environ: Mapping[str, str]) -> RunConfig:
    """Validate the event against the known fields and merge it over the environment defaults.

    Raises InputError with one line naming the bad field; never anything else.
    """
    if event is None:
        event = {}
    if not isinstance(event, dict):
        raise InputError(f"event must be a JSON object, not {_json_type(event)}")
    overrides = _overrides(event)
    defaults = environment_defaults(environ)
    return dataclasses.replace(
        defaults,
        mode=_run_mode(overrides, defaults.mode, environ),
        policies=_string_list(overrides, "policies", check=_policy_path) or defaults.policies,
        regions=_string_list(overrides, "regions", check=_region) or defaults.regions,
        role_arns=_role_arns(overrides) or defaults.role_arns,
        organization_role=_organization_role(overrides, defaults.organization_role),
        discover=_discover(overrides, defaults.organization_role),
        max_actions=_override(overrides, "max_actions", _max_actions, defaults.max_actions),
        now=_override(overrides, "now", _instant, None),
        telemetry=_telemetry_overrides(overrides, defaults.telemetry),
        notify=_string_list(overrides, "notify", check=_notify_target) or defaults.notify,
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


def _override(overrides: dict[str, Any], name: str, parse: Callable[[object, str], T],
              default: T) -> T:
    if name not in overrides:
        return default
    return parse(overrides[name], f"event field {name!r}")


def _run_mode(overrides: dict[str, Any], default: Mode, environ: Mapping[str, str]) -> Mode:
    mode = _override(overrides, "mode", _mode, default)
    if mode == "enforce" and not _flag(environ, ENV_ALLOW_ENFORCE, default=True):
        raise InputError(f"mode 'enforce' is not allowed here ({ENV_ALLOW_ENFORCE}=false: this "
                         "function was deployed for dry-run, with read-only permissions)")
    if mode == "enforce" and "now" in overrides:
        raise InputError("event field 'now' is refused in enforce mode: a replayed clock must "
                         "never stop real machines (use it with mode dry-run)")
    return mode


def _telemetry_overrides(overrides: dict[str, Any], defaults: TelemetryConfig
                         ) -> TelemetryConfig:
    prometheus_url = _override(overrides, "prometheus_url", _http_url, defaults.prometheus_url)
    credentials: dict[str, None] = {}
    if prometheus_url != defaults.prometheus_url:
        # the environment's secrets never follow an event to another server
        credentials = {"prometheus_token": None, "prometheus_basic_auth": None}
    return dataclasses.replace(
        defaults,
        prometheus_url=prometheus_url,
        dcgm_url=_override(overrides, "dcgm_url", _http_url, defaults.dcgm_url),
        window_s=_override(overrides, "telemetry_window", _window, defaults.window_s),
        **credentials,
    )


# ---------------------------------------------------------------------------------------------
# The environment


def environment_defaults(environ: Mapping[str, str]) -> RunConfig:
    """The settings of the function's environment alone (the event not applied)."""
    kms_key_id = _text(environ, ENV_KMS_KEY)
    sse = _text(environ, ENV_SSE) or ("aws:kms" if kms_key_id else "AES256")
    if sse not in SSE_ALGORITHMS:
        raise InputError(f"{ENV_SSE}: {sse!r} is not one of {', '.join(SSE_ALGORITHMS)}")
    max_actions = _text(environ, ENV_MAX_ACTIONS)
    bucket = _text(environ, ENV_BUCKET)
    prefix = environ.get(ENV_PREFIX, DEFAULT_PREFIX).strip().strip("/")
    return RunConfig(
        mode=_mode(_text(environ, ENV_MODE) or "dry-run", ENV_MODE),
        policies=_split(environ, ENV_POLICIES, _policy_path) or ("builtin",),
        regions=_split(environ, ENV_REGIONS, _region),
        role_arns=_split(environ, ENV_ROLE_ARNS, _role_arn),
        organization_role=_environment_organization_role(environ),
        max_actions=_max_actions(_int_text(max_actions, ENV_MAX_ACTIONS), ENV_MAX_ACTIONS)
        if max_actions else DEFAULT_MAX_ACTIONS,
        telemetry=_environment_telemetry(environ),
        bucket=bucket,
        prefix=prefix,
        sse=sse,
        kms_key_id=kms_key_id,
        notify=_split(environ, ENV_NOTIFY, _notify_target),
        history=_history(_text(environ, ENV_HISTORY), bucket, prefix),
    )


def _history(value: str | None, bucket: str | None, prefix: str) -> str | None:
    """The history URL: the environment's, none when it says off, else `history/` under the
    reports (inside the prefix the function may write), or none without a report bucket."""
    if value is None:
        if bucket is None:
            return None
        return f"s3://{bucket}/{prefix}/{HISTORY_FOLDER}/" if prefix \
            else f"s3://{bucket}/{HISTORY_FOLDER}/"
    if value.lower() in HISTORY_OFF:
        return None
    bucket_name = value.removeprefix("s3://").partition("/")[0]
    if not value.startswith("s3://") or not bucket_name or len(value) > MAX_TEXT \
            or not value.isprintable():
        raise InputError(f"{ENV_HISTORY}: {_shown(value)} is not an s3://bucket/prefix/ URL "
                         "or off")
    return value


def _environment_telemetry(environ: Mapping[str, str]) -> TelemetryConfig:
    prometheus_url, dcgm_url = _text(environ, ENV_PROMETHEUS_URL), _text(environ, ENV_DCGM_URL)
    window = _text(environ, ENV_TELEMETRY_WINDOW)
    return TelemetryConfig(
        prometheus_url=_http_url(prometheus_url, ENV_PROMETHEUS_URL) if prometheus_url else None,
        prometheus_token=_text(environ, ENV_PROMETHEUS_TOKEN),
        prometheus_basic_auth=_text(environ, ENV_PROMETHEUS_BASIC_AUTH),
        prometheus_ca=_text(environ, ENV_PROMETHEUS_CA),
        dcgm_url=_http_url(dcgm_url, ENV_DCGM_URL) if dcgm_url else None,
        window_s=_window(_int_text(window, ENV_TELEMETRY_WINDOW), ENV_TELEMETRY_WINDOW)
        if window else DEFAULT_TELEMETRY_WINDOW_S,
    )


def _text(environ: Mapping[str, str], name: str) -> str | None:
    return environ.get(name, "").strip() or None


def _split(environ: Mapping[str, str], name: str, check: Callable[[str, str], str]
           ) -> tuple[str, ...]:
    parts = tuple(part.strip() for part in environ.get(name, "").split(",") if part.strip())
    for part in parts:
        check(part, name)
    return parts


def _flag(environ: Mapping[str, str], name: str, *, default: bool) -> bool:
    text = environ.get(name, "").strip().lower()
    if not text:
        return default
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise InputError(f"{name}: {text!r} is not true or false")


# ---------------------------------------------------------------------------------------------
# Values


def _mode(value: object, where: str) -> Mode:
    for mode in MODES:
        if value == mode:
            return mode
    raise InputError(f"{where}: {_shown(value)} is not one of {', '.join(MODES)}")


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


def _environment_organization_role(environ: Mapping[str, str]) -> str | None:
    name = _text(environ, ENV_ORGANIZATION_ROLE)
    if name is None:
        return None
    if _text(environ, ENV_ROLE_ARNS):
        raise InputError(f"{ENV_ORGANIZATION_ROLE} and {ENV_ROLE_ARNS}: give one of them")
    if not _ROLE_NAME.match(name):
        raise InputError(f"{ENV_ORGANIZATION_ROLE}: {_shown(name)} is not an IAM role name")
    return name


def _organization_role(overrides: dict[str, Any], default: str | None) -> str | None:
    """The environment's organization role, unless the event names its accounts (`role_arn`,
    the fan-out's) or says `"organization": false` (the fan-out's event for its own account)."""
    value = overrides.get("organization", True)
    if not isinstance(value, bool):
        raise InputError(f"event field 'organization' must be true or false, not "
                         f"{_json_type(value)}")
    if value and default is None and "organization" in overrides:
        raise InputError(f"event field 'organization': the function has no "
                         f"{ENV_ORGANIZATION_ROLE}")
    if not value or "role_arn" in overrides or "role_arns" in overrides:
        return None
    return default


def _discover(overrides: dict[str, Any], organization_role: str | None) -> bool:
    if "discover" not in overrides:
        return False
    if overrides["discover"] != "organization":
        raise InputError(f"event field 'discover': {_shown(overrides['discover'])} is not "
                         "organization")
    if organization_role is None:
        raise InputError(f"event field 'discover': the function has no {ENV_ORGANIZATION_ROLE}")
    return True


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


def _http_url(value: object, where: str) -> str:
    """An http(s) URL with a host, one line, bounded."""
    if not isinstance(value, str):
        raise InputError(f"{where} must be a string, not {_json_type(value)}")
    text = value.strip()
    try:
        parts = urlsplit(text)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        valid = False
    if not valid or len(text) > MAX_TEXT or any(ch.isspace() or ord(ch) < 0x20 for ch in text):
        raise InputError(f"{where}: {_shown(value)} is not an http(s) URL")
    return text


def _notify_target(value: str, where: str) -> str:
    from engine.notify.targets import parse_target

    try:
        parse_target(value.strip())
    except InputError as error:
        raise InputError(f"{where}: {error.message.removeprefix('--notify: ')}") from None
    return value


def _window(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not (
            MIN_TELEMETRY_WINDOW_S <= value <= MAX_TELEMETRY_WINDOW_S):
        raise InputError(f"{where} must be a whole number of seconds from "
                         f"{MIN_TELEMETRY_WINDOW_S} to {MAX_TELEMETRY_WINDOW_S}, "
                         f"not {_shown(value)}")
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
    from engine.loading.policies import builtin_pack_dir

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


def _instant(value: object, where: str = "event field 'now'") -> datetime:
    if not isinstance(value, str):
        raise InputError(f"{where} must be an ISO 8601 string, not {_json_type(value)}")
    try:
        instant = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        instant = instant if instant.tzinfo else instant.replace(tzinfo=UTC)
        in_range = EARLIEST <= instant.astimezone(UTC) < LATEST
    except ValueError:
        raise InputError(f"{where}: not an ISO 8601 instant: {_shown(value)}") from None
    except OverflowError:
        in_range = False
    if not in_range:
        raise InputError(f"{where}: {_shown(value)} is out of range "
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
