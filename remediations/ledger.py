"""The realized-savings ledger: what enforcement actually saved, read back from its audit log.

Each applied `stop` is matched with the next applied `resume` of the same resource (an instance,
a group, a Kubernetes workload scaled to zero and back); the hours between them (or, while it is
still stopped, until `until`) times the rate the stop line recorded are its savings. Totals by
policy, team, account and month (of the stop).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from engine.core.errors import InputError

MAX_LINES = 1_000_000  # an audit log is bounded: a bigger one is an error, not a slow report
MAX_LINE_CHARS = 1_000_000


@dataclass(frozen=True, slots=True)
class Stop:
    resource: str
    policy: str
    team: str
    account: str
    usd_per_h: float
    at: datetime


def read_audit(path: Path) -> list[dict[str, Any]]:
    """The audit log's lines; a line that is not a JSON object is an InputError naming it."""
    try:
        with path.open(encoding="utf-8") as handle:
            return _entries(handle, str(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read audit log: {exc}", file=str(path)) from None


def read_audit_at(location: str) -> list[dict[str, Any]]:
    """A local audit log, or `s3://bucket/key` (one log) or `s3://bucket/prefix/` (every
    `*.jsonl` under it, in key order: the Lambda's `<prefix>/<yyyy>/<mm>/<dd>/<run-id>.audit.jsonl`
    sort by time)."""
    if location.startswith("s3://"):
        from remediations.ledger_s3 import read_s3_lines

        return _entries(read_s3_lines(location, MAX_LINES), location)
    return read_audit(Path(location))


def _entries(lines: Iterable[str], where: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for number, text in enumerate(lines, 1):
        if number > MAX_LINES or len(text) > MAX_LINE_CHARS:
            raise InputError(f"audit log line {number} is past the ledger's limits", file=where)
        if not text.strip():
            continue
        try:
            entry = orjson.loads(text)
        except orjson.JSONDecodeError:
            entry = None
        if not isinstance(entry, dict):
            raise InputError(f"audit log line {number} is not a JSON object", file=where)
        entries.append(entry)
    return entries


def _instant(value: Any) -> datetime | None:
    try:
        at = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return at if at.tzinfo is not None else None


def _applied(entry: dict[str, Any], action: str) -> bool:
    return (entry.get("phase") == "after" and entry.get("result") == "applied"
            and entry.get("action") == action)


def _rate(entry: dict[str, Any]) -> dict[str, Any]:
    rate = entry.get("rate")
    return rate if isinstance(rate, dict) else {}


def _when(entry: dict[str, Any]) -> datetime | None:
    """The evaluation instant the line's rate records, else the line's own time (`ts` from the
    shared runner, `time` from the Kubernetes executor)."""
    return _instant(_rate(entry).get("at") or entry.get("ts") or entry.get("time"))


def _stop_of(entry: dict[str, Any]) -> Stop | None:
    rate = _rate(entry)
    usd, at = rate.get("usd_per_h"), _when(entry)
    if not isinstance(usd, int | float) or isinstance(usd, bool) or at is None:
        return None
    return Stop(str(entry.get("resource")), str(entry.get("policy")),
                str(rate.get("team") or "(no team)"), str(entry.get("account") or "(none)"),
                float(usd), at)


def savings(entries: list[dict[str, Any]], *, since: datetime | None, until: datetime
            ) -> dict[str, Any]:
    """The ledger: each stop's hours until its resume (or `until`) × its rate, and totals."""
    open_stops: dict[str, Stop] = {}
    closed: list[tuple[Stop, datetime]] = []
    for entry in entries:
        resource = str(entry.get("resource"))
        if _applied(entry, "stop") and (stop := _stop_of(entry)) is not None:
            open_stops.setdefault(resource, stop)
        elif _applied(entry, "resume") and resource in open_stops:
            closed.append((open_stops.pop(resource), _when(entry) or until))
    closed.extend((stop, until) for stop in open_stops.values())
    return _totals([(s, e) for s, e in closed if since is None or s.at >= since])


def _totals(spans: list[tuple[Stop, datetime]]) -> dict[str, Any]:
    groups: dict[str, defaultdict[str, float]] = {
        key: defaultdict(float) for key in ("by_policy", "by_team", "by_account", "by_month")}
    actions: list[dict[str, Any]] = []
    for stop, end in sorted(spans, key=lambda span: span[0].at):
        hours = max(0.0, (end - stop.at).total_seconds() / 3600)
        usd = round(hours * stop.usd_per_h, 2)
        for key, name in (("by_policy", stop.policy), ("by_team", stop.team),
                          ("by_account", stop.account), ("by_month", stop.at.strftime("%Y-%m"))):
            groups[key][name] = round(groups[key][name] + usd, 2)
        actions.append({"resource": stop.resource, "policy": stop.policy, "team": stop.team,
                        "account": stop.account, "stopped_at": stop.at.isoformat(),
                        "until": end.isoformat(), "hours": round(hours, 2),
                        "usd_per_h": stop.usd_per_h, "usd": usd})
    total = round(sum(a["usd"] for a in actions), 2)
    return {"total_usd": total, **{k: dict(v) for k, v in groups.items()}, "actions": actions}


def render(ledger: dict[str, Any], fmt: str) -> str:
    """table or markdown: one row per action, then the total (json is the dict itself)."""
    if fmt == "json":
        return orjson.dumps(ledger, option=orjson.OPT_INDENT_2).decode()
    header = ("resource", "policy", "team", "hours", "usd_per_h", "usd")
    rows = [[str(a[k]) for k in header] for a in ledger["actions"]]
    rows.append(["total", "", "", "", "", f"{ledger['total_usd']:.2f}"])
    if fmt == "markdown":
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
    widths = [max(len(r[i]) for r in [list(header), *rows]) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in [list(header), *rows])
