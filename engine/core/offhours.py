"""Off-hours schedules in Cloud Custodian's tag grammar.

A tag value such as ``off=(M-F,19);on=(M-F,7);tz=pt`` is parsed once into a
`Schedule`, and the schedule answers "is this instant inside off-hours?".

Custodian acts on an *edge*: its hourly run stops a resource only during the
exact off hour. gpuwarden asks for the *state* instead: the latest on/off
transition at or before the instant decides, so a run that was missed (or a
resource started by hand at 03:00 on a Tuesday) is still caught.

Grammar (case-insensitive, see docs/offhours.md):

- ``off=SPEC``, ``on=SPEC``, ``tz=ZONE`` joined by ``;`` (order free, trailing ``;`` allowed);
- ``SPEC`` is ``(DAYS,HOUR)``, a list ``[(DAYS,HOUR),(DAYS,HOUR)...]`` or ``disabled``;
- ``DAYS`` is one of ``M T W H F S U`` or a range ``M-F``; ranges wrap (``F-M`` = Fri..Mon);
- ``HOUR`` is 0..23, a wall-clock hour in the schedule's time zone;
- ``ZONE`` is one of Custodian's aliases (``pt``, ``et``...) or an IANA name, any case;
- a whole value of ``''`` or ``on`` means the default schedule, ``off`` opts the resource out;
- Custodian's escapes for tag systems that forbid punctuation (GCP labels, EFS, Beanstalk):
  ``u28 u29 u5b u5d u2c u3b u3d u2f u2d`` for ``( ) [ ] , ; = / -``.

Pure: no clock, the instant is always passed in. Naive datetimes are taken as UTC.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

__all__ = [
    "DEFAULT_SCHEDULE",
    "TZ_ALIASES",
    "OffhoursError",
    "Rule",
    "Schedule",
    "explain",
    "parse_schedule",
]

DEFAULT_SCHEDULE = "off=(M-F,19);on=(M-F,7);tz=utc"

HOURS_PER_WEEK = 7 * 24

# Cloud Custodian's Time.TZ_ALIASES (c7n/filters/offhours.py), verbatim in meaning.
# Note Custodian's own choices: `ist` is Ireland, `it` is India, `gmt` is Etc/GMT (no DST).
_CUSTODIAN_TZ_ALIASES: dict[str, str] = {
    "pdt": "America/Los_Angeles",
    "pt": "America/Los_Angeles",
    "pst": "America/Los_Angeles",
    "ast": "America/Phoenix",
    "at": "America/Phoenix",
    "est": "America/New_York",
    "edt": "America/New_York",
    "et": "America/New_York",
    "cst": "America/Chicago",
    "cdt": "America/Chicago",
    "ct": "America/Chicago",
    "mst": "America/Denver",
    "mdt": "America/Denver",
    "mt": "America/Denver",
    "gmt": "Etc/GMT",
    "gt": "Etc/GMT",
    "bst": "Europe/London",
    "ist": "Europe/Dublin",
    "cet": "Europe/Berlin",
    "it": "Asia/Kolkata",
    "jst": "Asia/Tokyo",
    "kst": "Asia/Seoul",
    "sgt": "Asia/Singapore",
    "aet": "Australia/Sydney",
    "brt": "America/Sao_Paulo",
    "nzst": "Pacific/Auckland",
    "utc": "Etc/UTC",
}
# gpuwarden additions: unambiguous names Custodian lacks (it would reject these tags).
_EXTRA_TZ_ALIASES: dict[str, str] = {
    "aest": "Australia/Sydney",
    "aedt": "Australia/Sydney",
    "nzdt": "Pacific/Auckland",
}
TZ_ALIASES: dict[str, str] = {**_CUSTODIAN_TZ_ALIASES, **_EXTRA_TZ_ALIASES}

DAY_LETTERS = "mtwhfsu"  # index = datetime.weekday(): Monday 0 .. Sunday 6
_DAY_INDEX = {letter: index for index, letter in enumerate(DAY_LETTERS)}

# Custodian writes "u" + hex(ord(char)) for characters some tag systems forbid.
_ESCAPES = {
    "28": "(",
    "29": ")",
    "5b": "[",
    "5d": "]",
    "2c": ",",
    "3b": ";",
    "3d": "=",
    "2f": "/",
    "2d": "-",
}
_ESCAPE_RE = re.compile(r"u(28|29|5b|5d|2c|3b|3d|2f|2d)")
_SPEC_RE = re.compile(r"\(\s*([^(),\s]*)\s*,\s*([^(),\s]*)\s*\)")
_DISABLED = "disabled"
_KEYS = ("off", "on", "tz")


class OffhoursError(ValueError):
    """A schedule that cannot be parsed; the message names the bad part."""


@dataclass(frozen=True)
class Rule:
    """One `(days,hour)` item: a transition at `hour`:00 local time on each of `days`."""

    days: tuple[int, ...]  # datetime.weekday() numbers, Monday 0
    hour: int

    def __str__(self) -> str:
        first, last = DAY_LETTERS[self.days[0]], DAY_LETTERS[self.days[-1]]
        contiguous = all(day == (self.days[0] + offset) % 7 for offset, day in enumerate(self.days))
        if len(self.days) > 1 and contiguous:
            days = f"{first}-{last}"
        else:
            days = "".join(DAY_LETTERS[day] for day in self.days)
        return f"({days.upper()},{self.hour})"


@dataclass(frozen=True)
class Schedule:
    """A weekly on/off schedule at wall-clock hours in `tz`.

    State semantics: the latest transition at or before an instant decides. Where
    an `off` and an `on` rule fall on the same day and hour, `on` wins (a conflicting
    schedule never stops work). With `off` rules but no `on` rules (`on=disabled`),
    each off window lasts until the next local midnight; with no `off` rules the
    resource is never in off-hours.
    """

    off: tuple[Rule, ...]
    on: tuple[Rule, ...]
    tz: ZoneInfo
    tz_name: str
    text: str
    opted_out: bool = False
    _weekly_off: tuple[bool, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_weekly_off", _weekly_off_table(self.off, self.on))

    def is_off(self, at: datetime) -> bool:
        """Is `at` inside off-hours (by state: the latest transition at or before `at`)?"""
        local = _as_aware(at).astimezone(self.tz)
        return self._weekly_off[_hour_of_week(local)]

    def next_transitions(self, at: datetime, count: int = 4) -> list[tuple[datetime, str]]:
        """The next `count` state changes strictly after `at`, as (instant in `tz`, "on"|"off")."""
        found: list[tuple[datetime, str]] = []
        if count <= 0:
            return found
        for instant, off in self._iter_transitions(_as_aware(at)):
            found.append((instant, "off" if off else "on"))
            if len(found) == count:
                break
        return found

    def off_fraction(self, week_start: datetime | None = None) -> float:
        """Share of a week that is off-hours.

        Without `week_start`: the nominal week of 168 wall-clock hours. With it: the
        168 elapsed hours from `week_start`, so a week with a DST change counts the
        hour that the clock skipped or repeated.
        """
        if week_start is None:
            return sum(self._weekly_off) / HOURS_PER_WEEK
        start = _as_aware(week_start).astimezone(UTC)
        end = start + timedelta(hours=HOURS_PER_WEEK)
        off_seconds = 0.0
        cursor, off = start, self.is_off(start)
        for local_instant, new_off in self._iter_transitions(start):
            instant = local_instant.astimezone(UTC)
            if instant >= end:
                break
            if off:
                off_seconds += (instant - cursor).total_seconds()
            cursor, off = instant, new_off
        if off:
            off_seconds += (end - cursor).total_seconds()
        return off_seconds / (HOURS_PER_WEEK * 3600)

    def _iter_transitions(self, after: datetime) -> Iterator[tuple[datetime, bool]]:
        """State changes strictly after `after`, in order (endless when the state ever changes)."""
        change_hours = _change_hours_by_weekday(self._weekly_off)
        if not any(change_hours):
            return
        # Compare in UTC: Python compares datetimes sharing a tzinfo by wall time.
        after_utc = after.astimezone(UTC)
        state = self.is_off(after_utc)
        day = after_utc.astimezone(self.tz).date()
        while True:
            for hour in change_hours[day.weekday()]:
                # A wall time inside a DST gap (fold=0) maps to the instant the clock
                # jumps past it; a repeated one to its first occurrence.
                wall = datetime(day.year, day.month, day.day, hour, tzinfo=self.tz)
                instant = wall.astimezone(UTC)
                if instant <= after_utc:
                    continue
                new_state = self.is_off(instant)
                if new_state != state:
                    yield instant.astimezone(self.tz), new_state
                    state = new_state
            day += timedelta(days=1)


@lru_cache(maxsize=4096)  # the same tag value repeats across thousands of resources
def parse_schedule(
    text: str, default_tz: str = "utc", default: str | None = DEFAULT_SCHEDULE
) -> Schedule:
    """Parse a Cloud Custodian offhours tag value; raise OffhoursError naming the bad part.

    Missing `off` or `on` rules are taken from `default` (as Custodian takes them from
    the policy's offhour/onhour defaults); `default=None` leaves them empty. The time
    zone is the tag's `tz`, else `default_tz`.
    """
    try:
        return _parse(text, default_tz, default)
    except OffhoursError as error:
        raise OffhoursError(f"invalid offhours schedule {text!r}: {error}") from None


def _parse(text: str, default_tz: str, default: str | None) -> Schedule:
    value = _normalize(text)
    if value == "off":
        zone, name = _resolve_tz(default_tz)
        return Schedule(off=(), on=(), tz=zone, tz_name=name, text=text, opted_out=True)
    parts = _split_parts(value)
    rules: dict[str, tuple[Rule, ...]] = {}
    for key in ("off", "on"):
        if key in parts:
            rules[key] = _parse_spec(key, parts[key])
        elif default is not None:
            rules[key] = _default_rules(default, key)
        else:
            rules[key] = ()
    zone, name = _resolve_tz(parts.get("tz") or default_tz)
    return Schedule(off=rules["off"], on=rules["on"], tz=zone, tz_name=name, text=text)


def _default_rules(default: str, key: str) -> tuple[Rule, ...]:
    try:
        schedule = parse_schedule(default, "utc", None)
    except OffhoursError as error:
        raise OffhoursError(f"the default schedule is invalid: {error}") from None
    return schedule.off if key == "off" else schedule.on


def _normalize(text: str) -> str:
    """Lower-case, unescape Custodian's `uXX` forms, drop stray quotes and empty parts."""
    value = _ESCAPE_RE.sub(lambda match: _ESCAPES[match.group(1)], text.strip().lower())
    value = value.strip().strip("'\"").strip()
    return ";".join(part.strip() for part in value.split(";") if part.strip())


def _split_parts(value: str) -> dict[str, str]:
    """`off=..;on=..;tz=..` → {key: raw value}. An empty value or `on` gives {}."""
    if value in ("", "on"):
        return {}
    parts: dict[str, str] = {}
    for part in value.split(";"):
        key, sep, raw = part.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep:
            raise OffhoursError(f"{part!r} is not key=value (keys are off, on, tz)")
        if key not in _KEYS:
            raise OffhoursError(f"unknown key {key!r} in {part!r} (keys are off, on, tz)")
        if key in parts:
            raise OffhoursError(f"{key!r} is given more than once")
        if key != "tz" and not raw:
            raise OffhoursError(f"{key}= has no value; expected (days,hour), a list or disabled")
        parts[key] = raw
    return parts


def _parse_spec(key: str, raw: str) -> tuple[Rule, ...]:
    """`(M-F,19)`, `[(M-F,21),(U,18)]` or `disabled` → rules."""
    if raw == _DISABLED:
        return ()
    where = f"{key}={raw}"
    _check_balanced(raw, where)
    body = raw
    if raw.startswith("["):
        if not raw.endswith("]"):
            raise OffhoursError(f"text after ']' in {where!r}")
        body = raw[1:-1].strip()
    elif "[" in raw:
        raise OffhoursError(f"'[' must open the list in {where!r}")
    if not body:
        raise OffhoursError(f"empty list in {where!r}; expected (days,hour)")
    return tuple(_parse_items(body, where))


def _check_balanced(raw: str, where: str) -> None:
    for opening, closing in ("()", "[]"):
        depth = 0
        for char in raw:
            depth += (char == opening) - (char == closing)
            if depth < 0:
                break
            if depth > 1:
                raise OffhoursError(f"nested {opening!r} in {where!r}")
        if depth != 0:
            raise OffhoursError(f"unbalanced {opening}{closing} in {where!r}")


def _parse_items(body: str, where: str) -> Iterator[Rule]:
    position = 0
    while True:
        match = _SPEC_RE.match(body, position)
        if match is None:
            rest = body[position:]
            raise OffhoursError(f"expected (days,hour) at {rest!r} in {where!r}")
        yield Rule(days=_parse_days(match.group(1), where), hour=_parse_hour(match.group(2), where))
        position = _skip_spaces(body, match.end())
        if position == len(body):
            return
        if body[position] != ",":
            rest = body[position:]
            raise OffhoursError(f"unexpected {rest!r} in {where!r} (separate parts with ';')")
        position = _skip_spaces(body, position + 1)


def _skip_spaces(text: str, position: int) -> int:
    while position < len(text) and text[position].isspace():
        position += 1
    return position


def _parse_days(token: str, where: str) -> tuple[int, ...]:
    """`m` → (0,); `m-f` → (0..4); `f-m` wraps → (4, 5, 6, 0)."""
    ends = token.split("-")
    if len(ends) > 2 or not all(ends):
        raise OffhoursError(f"bad days {token!r} in {where!r}; use one day or a range like M-F")
    for letter in ends:
        if letter not in _DAY_INDEX:
            raise OffhoursError(
                f"unknown day {letter!r} in {where!r}; days are M T W H F S U (H is Thursday,"
                " U is Sunday)"
            )
    first, last = _DAY_INDEX[ends[0]], _DAY_INDEX[ends[-1]]
    span = (last - first) % 7
    return tuple((first + offset) % 7 for offset in range(span + 1))


def _parse_hour(token: str, where: str) -> int:
    if not token.isdigit() or not token.isascii():
        raise OffhoursError(f"hour {token!r} in {where!r} is not a whole number 0-23")
    hour = int(token)
    if hour > 23:
        raise OffhoursError(f"hour {hour} in {where!r} is out of range 0-23")
    return hour


@lru_cache(maxsize=1)
def _zones_by_lower_name() -> dict[str, str]:
    return {name.lower(): name for name in available_timezones()}


def _resolve_tz(name: str) -> tuple[ZoneInfo, str]:
    """An alias or IANA name (any case) → (zone, canonical IANA name)."""
    wanted = name.strip().lower()
    canonical = TZ_ALIASES.get(wanted) or _zones_by_lower_name().get(wanted)
    if canonical is None:
        raise OffhoursError(
            f"unknown time zone {name!r}; use an alias such as pt, et, utc or an IANA name"
            " such as Europe/Berlin"
        )
    try:
        return ZoneInfo(canonical), canonical
    except (ZoneInfoNotFoundError, ValueError):
        raise OffhoursError(f"time zone {name!r} is not in this system's tz database") from None


def _weekly_off_table(off: tuple[Rule, ...], on: tuple[Rule, ...]) -> tuple[bool, ...]:
    """For each wall-clock hour of the week (Monday 00:00 = 0), is it off-hours?"""
    events: dict[int, bool] = {}  # hour of week -> becomes off?
    for rule in off:
        for day in rule.days:
            events[day * 24 + rule.hour] = True
    if off and not on:
        # Stop-only schedule: each off window closes at the next local midnight
        # unless another off transition falls exactly there.
        for rule in off:
            for day in rule.days:
                events.setdefault((day + 1) % 7 * 24, False)
    for rule in on:
        for day in rule.days:
            events[day * 24 + rule.hour] = False  # on wins a tie
    if not off or not events:
        return (False,) * HOURS_PER_WEEK
    state = events[max(events)]  # the week wraps: last week's final transition holds at 0
    table: list[bool] = []
    for hour in range(HOURS_PER_WEEK):
        state = events.get(hour, state)
        table.append(state)
    return tuple(table)


def _change_hours_by_weekday(table: tuple[bool, ...]) -> tuple[tuple[int, ...], ...]:
    """Per weekday, the local hours at which the weekly state flips."""
    return tuple(
        tuple(hour for hour in range(24) if table[day * 24 + hour] != table[day * 24 + hour - 1])
        for day in range(7)
    )


def _hour_of_week(local: datetime) -> int:
    return local.weekday() * 24 + local.hour


def _as_aware(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def explain(text: str, at: datetime, default_tz: str = "utc") -> dict[str, Any]:
    """What `gpuwarden offhours TAG --at ISO8601` prints: validity, zone, state, next changes."""
    instant = _as_aware(at)
    result: dict[str, Any] = {
        "valid": False,
        "error": None,
        "schedule": text,
        "timezone": None,
        "at": instant.isoformat(),
        "local_time": None,
        "state": None,
        "opted_out": False,
        "weekly_off_fraction": None,
        "next_transitions": [],
    }
    try:
        schedule = parse_schedule(text, default_tz)
    except OffhoursError as error:
        result["error"] = str(error)
        return result
    result.update(
        valid=True,
        timezone=schedule.tz_name,
        local_time=instant.astimezone(schedule.tz).isoformat(),
        state="off" if schedule.is_off(instant) else "on",
        opted_out=schedule.opted_out,
        weekly_off_fraction=round(schedule.off_fraction(), 4),
        next_transitions=[
            {"at": when.isoformat(), "state": state}
            for when, state in schedule.next_transitions(instant)
        ],
    )
    return result
