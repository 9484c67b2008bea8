"""Cloud Custodian's offhours tag grammar, parsed into state-based schedules."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.offhours import (
    DEFAULT_SCHEDULE,
    TZ_ALIASES,
    OffhoursError,
    Rule,
    Schedule,
    explain,
    parse_schedule,
)

WEEKDAYS = (0, 1, 2, 3, 4)
MONDAY = datetime(2026, 6, 1, tzinfo=UTC)  # a Monday, far from any DST change
PACIFIC = ZoneInfo("America/Los_Angeles")


def at_utc(day_offset: int, hour: int, minute: int = 0, second: int = 0) -> datetime:
    """An instant in the reference week: day_offset 0 is Monday 2026-06-01 (UTC)."""
    return MONDAY + timedelta(days=day_offset, hours=hour, minutes=minute, seconds=second)


def test_reference_week_starts_on_monday() -> None:
    assert MONDAY.weekday() == 0


# --- grammar -------------------------------------------------------------------------------


def test_single_rules_with_a_day_range() -> None:
    schedule = parse_schedule("off=(M-F,19);on=(M-F,7);tz=pt")
    assert schedule.off == (Rule(days=WEEKDAYS, hour=19),)
    assert schedule.on == (Rule(days=WEEKDAYS, hour=7),)
    assert schedule.tz == PACIFIC
    assert schedule.tz_name == "America/Los_Angeles"
    assert schedule.text == "off=(M-F,19);on=(M-F,7);tz=pt"
    assert not schedule.opted_out


def test_lists_of_rules() -> None:
    schedule = parse_schedule("off=[(M-F,21),(U,18)];on=[(M-F,6),(U,10)];tz=pt")
    assert schedule.off == (Rule(WEEKDAYS, 21), Rule((6,), 18))
    assert schedule.on == (Rule(WEEKDAYS, 6), Rule((6,), 10))


def test_list_without_brackets_as_custodian_accepts() -> None:
    schedule = parse_schedule("off=(M-F,21),(U,18);on=(M-F,6)")
    assert schedule.off == (Rule(WEEKDAYS, 21), Rule((6,), 18))


@pytest.mark.parametrize(
    ("days", "expected"),
    [
        ("M", (0,)),
        ("T", (1,)),
        ("W", (2,)),
        ("H", (3,)),
        ("F", (4,)),
        ("S", (5,)),
        ("U", (6,)),
        ("M-F", (0, 1, 2, 3, 4)),
        ("T-H", (1, 2, 3)),
        ("S-U", (5, 6)),
        ("M-U", (0, 1, 2, 3, 4, 5, 6)),
        ("W-W", (2,)),
        ("F-M", (4, 5, 6, 0)),  # wrap-around
        ("U-T", (6, 0, 1)),
        ("S-F", (5, 6, 0, 1, 2, 3, 4)),
    ],
)
def test_days_and_ranges(days: str, expected: tuple[int, ...]) -> None:
    assert parse_schedule(f"off=({days},20)").off == (Rule(expected, 20),)


@pytest.mark.parametrize("hour", [0, 7, 9, 23])
def test_hours_zero_to_twenty_three(hour: int) -> None:
    assert parse_schedule(f"off=(M,{hour})").off[0].hour == hour
    assert parse_schedule(f"off=(M,{hour:02d})").off[0].hour == hour


@pytest.mark.parametrize(("alias", "zone"), sorted(TZ_ALIASES.items()))
def test_every_time_zone_alias(alias: str, zone: str) -> None:
    schedule = parse_schedule(f"off=(M-F,19);tz={alias}")
    assert schedule.tz_name == zone
    assert schedule.tz == ZoneInfo(zone)


@pytest.mark.parametrize(
    ("alias", "zone"),
    [
        ("pt", "America/Los_Angeles"),
        ("et", "America/New_York"),
        ("ct", "America/Chicago"),
        ("mt", "America/Denver"),
        ("gmt", "Etc/GMT"),
        ("utc", "Etc/UTC"),
        ("ist", "Europe/Dublin"),  # Custodian's choice; `it` is India
        ("it", "Asia/Kolkata"),
        ("aet", "Australia/Sydney"),
        ("aest", "Australia/Sydney"),
        ("nzst", "Pacific/Auckland"),
    ],
)
def test_custodian_alias_meanings(alias: str, zone: str) -> None:
    assert parse_schedule(f"tz={alias}").tz_name == zone


@pytest.mark.parametrize(
    ("written", "zone"),
    [
        ("Europe/Berlin", "Europe/Berlin"),
        ("europe/berlin", "Europe/Berlin"),
        ("AMERICA/LOS_ANGELES", "America/Los_Angeles"),
        ("america/argentina/buenos_aires", "America/Argentina/Buenos_Aires"),
        ("america/port-au-prince", "America/Port-au-Prince"),
        ("asia/kolkata", "Asia/Kolkata"),
        ("etc/gmt+5", "Etc/GMT+5"),
        ("UTC", "Etc/UTC"),
    ],
)
def test_iana_names_in_any_case(written: str, zone: str) -> None:
    assert parse_schedule(f"off=(M-F,19);tz={written}").tz_name == zone


@pytest.mark.parametrize(
    ("escaped", "plain"),
    [
        # the two examples in Custodian's offhours documentation
        ("offu3du28M-Fu2c18u29u3btzu3dAustraliau2fSydney", "off=(M-F,18);tz=Australia/Sydney"),
        ("off=u5bu28M-Fu2c18u29u2cu28Su2c13u29u5d", "off=[(M-F,18),(S,13)]"),
        # a GCP label value: lower case, only [a-z0-9_-]
        (
            "offu3du28mu2dfu2c19u29u3bonu3du28mu2dfu2c7u29u3btzu3damericau2flos_angeles",
            "off=(M-F,19);on=(M-F,7);tz=America/Los_Angeles",
        ),
        # Sunday's letter is `u`; it must not be mistaken for an escape
        ("offu3du28uu2c18u29u3bonu3du28uu2c10u29", "off=(U,18);on=(U,10)"),
        ("OFFU3DU28S-UU2C18U29", "off=(S-U,18)"),
    ],
)
def test_custodian_escaped_forms(escaped: str, plain: str) -> None:
    parsed, expected = parse_schedule(escaped), parse_schedule(plain)
    assert (parsed.off, parsed.on, parsed.tz_name) == (expected.off, expected.on, expected.tz_name)


@pytest.mark.parametrize(
    "variant",
    [
        "OFF=(M-F,19);ON=(M-F,7);TZ=PT",
        "Off=(m-f,19);On=(m-F,7);Tz=Pt",
        "off=(m-f,19);on=(m-f,7);tz=pt;",  # trailing semicolon
        ";;off=(M-F,19);;on=(M-F,7);tz=pt",  # empty parts
        " off = ( M-F , 19 ) ; on=(M-F, 7) ; tz = pt ",  # spaces
        "'off=(M-F,19);on=(M-F,7);tz=pt'",  # quotes copied from the docs
        '"off=(M-F,19);on=(M-F,7);tz=pt"',
        "tz=pt;on=(M-F,7);off=(M-F,19)",  # any order
        "off=[(M-F,19)];on=[(M-F,7)];tz=pt",  # one-item lists
    ],
)
def test_case_spacing_quotes_and_order_do_not_matter(variant: str) -> None:
    schedule = parse_schedule(variant)
    assert schedule.off == (Rule(WEEKDAYS, 19),)
    assert schedule.on == (Rule(WEEKDAYS, 7),)
    assert schedule.tz_name == "America/Los_Angeles"


def test_only_off_takes_on_rules_from_the_default() -> None:
    schedule = parse_schedule("off=(M-F,21);tz=et")
    assert schedule.off == (Rule(WEEKDAYS, 21),)
    assert schedule.on == (Rule(WEEKDAYS, 7),)
    assert schedule.tz_name == "America/New_York"


def test_only_on_takes_off_rules_from_the_default() -> None:
    schedule = parse_schedule("on=(M-F,9)")
    assert schedule.on == (Rule(WEEKDAYS, 9),)
    assert schedule.off == (Rule(WEEKDAYS, 19),)


def test_policy_default_schedule_fills_missing_rules() -> None:
    schedule = parse_schedule("off=(F,18)", default="off=(M-U,22);on=(M-U,8)")
    assert schedule.off == (Rule((4,), 18),)
    assert schedule.on == (Rule((0, 1, 2, 3, 4, 5, 6), 8),)


def test_no_default_leaves_missing_rules_empty() -> None:
    schedule = parse_schedule("off=(M-F,19)", default=None)
    assert schedule.on == ()


def test_disabled_rules() -> None:
    schedule = parse_schedule("off=(M-F,19);on=disabled")
    assert schedule.off == (Rule(WEEKDAYS, 19),)
    assert schedule.on == ()
    assert parse_schedule("off=disabled").off == ()


@pytest.mark.parametrize("value", ["", "   ", "on", "ON", ";", "'on'"])
def test_empty_or_on_means_the_default_schedule(value: str) -> None:
    schedule = parse_schedule(value, default_tz="pt")
    default = parse_schedule(DEFAULT_SCHEDULE)
    assert (schedule.off, schedule.on) == (default.off, default.on)
    assert schedule.tz_name == "America/Los_Angeles"


def test_tz_alone_keeps_default_rules_in_that_zone() -> None:
    schedule = parse_schedule("tz=Asia/Tokyo")
    assert schedule.off == (Rule(WEEKDAYS, 19),)
    assert schedule.tz_name == "Asia/Tokyo"


def test_empty_tz_falls_back_to_the_default_tz() -> None:
    assert parse_schedule("off=(M-F,19);tz=", default_tz="et").tz_name == "America/New_York"


def test_default_tz_is_used_without_tz_and_ignored_with_one() -> None:
    assert parse_schedule("off=(M-F,19)", default_tz="ct").tz_name == "America/Chicago"
    assert parse_schedule("off=(M-F,19);tz=mt", default_tz="ct").tz_name == "America/Denver"
    assert parse_schedule("off=(M-F,19)").tz_name == "Etc/UTC"


def test_off_alone_opts_the_resource_out() -> None:
    schedule = parse_schedule("OFF")
    assert schedule.opted_out
    assert (schedule.off, schedule.on) == ((), ())
    assert not any(schedule.is_off(at_utc(0, 0) + timedelta(hours=h)) for h in range(168))
    assert schedule.next_transitions(at_utc(0, 0)) == []
    assert schedule.off_fraction() == 0.0


def test_parse_is_cached() -> None:
    first = parse_schedule("off=(M-F,20);on=(M-F,8);tz=cet")
    assert parse_schedule("off=(M-F,20);on=(M-F,8);tz=cet") is first


def test_rule_renders_back_to_the_grammar() -> None:
    schedule = parse_schedule("off=[(M-F,21),(U,18),(F-M,3)]")
    assert [str(rule) for rule in schedule.off] == ["(M-F,21)", "(U,18)", "(F-M,3)"]


# --- invalid input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("off=(M-X,19)", ["unknown day 'x'", "M T W H F S U"]),
        ("off=(Q,19)", ["unknown day 'q'"]),
        ("off=(MON,19)", ["unknown day 'mon'"]),
        ("off=(M-T-W,19)", ["bad days 'm-t-w'"]),
        ("off=(M-,19)", ["bad days 'm-'"]),
        ("off=(M-F,25)", ["hour 25", "0-23"]),
        ("off=(M-F,24)", ["hour 24", "0-23"]),
        ("off=(M-F,-1)", ["hour '-1'"]),
        ("off=(M-F,7pm)", ["hour '7pm'", "whole number"]),
        ("off=(M-F,19", ["unbalanced ()", "off=(m-f,19"]),
        ("off=M-F,19)", ["unbalanced ()"]),
        ("off=((M-F,19))", ["nested '('"]),
        ("off=[(M-F,19)", ["unbalanced []"]),
        ("off=(M-F,19)]", ["unbalanced []"]),
        ("off=(M-F)", ["expected (days,hour)", "(m-f)"]),
        ("off=(M-F,19,20)", ["expected (days,hour)"]),
        ("off=M-F", ["expected (days,hour)"]),
        ("off=()", ["expected (days,hour)"]),
        ("off=[]", ["empty list"]),
        ("off=", ["off= has no value"]),
        ("on=", ["on= has no value"]),
        ("tz=mars", ["unknown time zone 'mars'"]),
        ("off=(M-F,19);tz=Americas/Los_Angeles", ["unknown time zone 'americas/los_angeles'"]),
        ("nights=(M-F,19)", ["unknown key 'nights'"]),
        ("off=(M-F,19);off=(S,1)", ["'off' is given more than once"]),
        ("off(M-F,19)", ["is not key=value"]),
        ("weekends", ["'weekends' is not key=value"]),
        ("off=(M-F,19) on=(M-F,7)", ["unexpected 'on=(m-f,7)'", "';'"]),
        ("off=(M-F,19)(S,1)", ["unexpected '(s,1)'"]),
    ],
)
def test_invalid_schedules_name_the_bad_part(value: str, names: list[str]) -> None:
    with pytest.raises(OffhoursError) as caught:
        parse_schedule(value)
    message = str(caught.value)
    assert message.startswith(f"invalid offhours schedule {value!r}: ")
    for part in names:
        assert part in message
    assert "\n" not in message


def test_offhours_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="hour 99"):
        parse_schedule("on=(M,99)")


def test_unknown_default_tz_is_an_error() -> None:
    with pytest.raises(OffhoursError, match="unknown time zone 'nowhere'"):
        parse_schedule("off=(M-F,19)", default_tz="nowhere")


def test_invalid_policy_default_is_reported() -> None:
    with pytest.raises(OffhoursError, match="default schedule is invalid"):
        parse_schedule("tz=pt", default="off=(M-F,30)")


# --- state: is_off -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("day", "hour", "minute", "second", "off"),
    [
        (0, 12, 0, 0, False),  # Monday noon: business hours
        (0, 7, 0, 0, False),  # 07:00 exactly: on
        (0, 6, 59, 59, True),  # a second before: still off since Friday 19:00
        (0, 18, 59, 59, False),
        (0, 19, 0, 0, True),  # 19:00 exactly is off
        (1, 3, 0, 0, True),  # Tuesday 03:00: a missed 19:00 run still catches it
        (2, 23, 30, 0, True),
        (4, 18, 0, 0, False),  # Friday afternoon
        (4, 19, 0, 0, True),
        (5, 12, 0, 0, True),  # Saturday: off all day (last transition Friday 19:00)
        (6, 23, 59, 59, True),  # Sunday night
        (0, 0, 0, 0, True),  # Monday midnight
    ],
)
def test_default_schedule_state(day: int, hour: int, minute: int, second: int, off: bool) -> None:
    schedule = parse_schedule(DEFAULT_SCHEDULE)
    assert schedule.is_off(at_utc(day, hour, minute, second)) is off


def test_state_follows_the_schedule_time_zone() -> None:
    schedule = parse_schedule("off=(M-F,19);on=(M-F,7);tz=pt")  # June: PDT, UTC-7
    assert schedule.is_off(at_utc(0, 13, 59)) is True  # 06:59 PDT
    assert schedule.is_off(at_utc(0, 14, 0)) is False  # 07:00 PDT
    assert schedule.is_off(at_utc(1, 1, 59)) is False  # Monday 18:59 PDT
    assert schedule.is_off(at_utc(1, 2, 0)) is True  # Monday 19:00 PDT
    assert schedule.is_off(datetime(2026, 6, 1, 12, tzinfo=PACIFIC)) is False


def test_naive_instants_are_utc() -> None:
    schedule = parse_schedule(DEFAULT_SCHEDULE)
    naive = datetime(2026, 6, 1, 19, 0)
    assert schedule.is_off(naive) is schedule.is_off(naive.replace(tzinfo=UTC)) is True


def test_list_schedule_with_a_sunday_window() -> None:
    schedule = parse_schedule("off=[(M-F,21),(U,18)];on=[(M-F,6),(U,10)];tz=utc")
    assert schedule.is_off(at_utc(5, 12)) is True  # Saturday: off since Friday 21:00
    assert schedule.is_off(at_utc(6, 9, 59)) is True
    assert schedule.is_off(at_utc(6, 10)) is False  # Sunday 10:00 on
    assert schedule.is_off(at_utc(6, 18)) is True  # Sunday 18:00 off
    assert schedule.is_off(at_utc(0, 5)) is True
    assert schedule.is_off(at_utc(0, 20, 59)) is False


def test_wrap_around_range_schedule() -> None:
    # A weekend crew: on 09:00-17:00 Friday through Monday.
    schedule = parse_schedule("off=(F-M,17);on=(F-M,9)")
    assert schedule.is_off(at_utc(5, 12)) is False  # Saturday noon
    assert schedule.is_off(at_utc(6, 12)) is False  # Sunday noon
    assert schedule.is_off(at_utc(0, 16)) is False  # Monday afternoon
    assert schedule.is_off(at_utc(1, 12)) is True  # Tuesday: off since Monday 17:00
    assert schedule.is_off(at_utc(3, 12)) is True  # Thursday


def test_weekend_only_schedule() -> None:
    schedule = parse_schedule("off=(F,18);on=(M,8)")
    assert schedule.is_off(at_utc(4, 17)) is False
    assert schedule.is_off(at_utc(5, 3)) is True
    assert schedule.is_off(at_utc(0, 7, 59)) is True
    assert schedule.is_off(at_utc(2, 3)) is False  # Wednesday night: no weekday off-hours


def test_on_wins_a_tie_with_off() -> None:
    schedule = parse_schedule("off=(M-F,7);on=(M-F,7)")
    assert not any(schedule.is_off(at_utc(0, 0) + timedelta(hours=h)) for h in range(168))


def test_stop_only_schedule_is_off_until_local_midnight() -> None:
    schedule = parse_schedule("off=(M-F,19);on=disabled;tz=pt")
    assert schedule.is_off(datetime(2026, 6, 2, 18, 59, tzinfo=PACIFIC)) is False
    assert schedule.is_off(datetime(2026, 6, 2, 19, 0, tzinfo=PACIFIC)) is True
    assert schedule.is_off(datetime(2026, 6, 2, 23, 59, tzinfo=PACIFIC)) is True
    assert schedule.is_off(datetime(2026, 6, 3, 0, 0, tzinfo=PACIFIC)) is False
    assert schedule.is_off(datetime(2026, 6, 6, 20, 0, tzinfo=PACIFIC)) is False  # Saturday
    assert schedule.off_fraction() == pytest.approx(5 * 5 / 168)


def test_stop_only_with_an_off_at_midnight_stays_off() -> None:
    schedule = parse_schedule("off=[(F,19),(S,0)];on=disabled")
    assert schedule.is_off(at_utc(5, 12)) is True  # Saturday: off since Sat 00:00
    assert schedule.is_off(at_utc(6, 0)) is False  # Sunday midnight closes it


def test_start_only_schedule_is_never_off() -> None:
    schedule = parse_schedule("off=disabled;on=(M-F,7)")
    assert not any(schedule.is_off(at_utc(0, 0) + timedelta(hours=h)) for h in range(168))
    assert schedule.next_transitions(at_utc(0, 0)) == []


# --- DST -----------------------------------------------------------------------------------


def test_business_hours_follow_the_wall_clock_across_spring_forward() -> None:
    schedule = parse_schedule("off=(M-F,19);on=(M-F,7);tz=pt")
    # Friday 2026-03-06 is PST (UTC-8); Monday 2026-03-09 is PDT (UTC-7).
    assert schedule.is_off(datetime(2026, 3, 6, 14, 30, tzinfo=UTC)) is True  # 06:30 PST
    assert schedule.is_off(datetime(2026, 3, 9, 14, 30, tzinfo=UTC)) is False  # 07:30 PDT
    after_friday = datetime(2026, 3, 6, 20, tzinfo=PACIFIC)
    (first_on, state), (first_off, _) = schedule.next_transitions(after_friday, count=2)
    assert state == "on"
    assert first_on.astimezone(UTC) == datetime(2026, 3, 9, 14, tzinfo=UTC)
    assert (first_on.hour, first_on.utcoffset()) == (7, timedelta(hours=-7))
    assert first_off.astimezone(UTC) == datetime(2026, 3, 10, 2, tzinfo=UTC)


def test_transition_inside_the_spring_gap_happens_when_the_clock_jumps() -> None:
    schedule = parse_schedule("off=(U,2);on=(U,12);tz=pt")
    (off_at, state), _ = schedule.next_transitions(datetime(2026, 3, 7, tzinfo=PACIFIC), 2)
    assert state == "off"
    assert off_at.astimezone(UTC) == datetime(2026, 3, 8, 10, tzinfo=UTC)  # 03:00 PDT
    assert schedule.is_off(datetime(2026, 3, 8, 9, 59, tzinfo=UTC)) is False  # 01:59 PST
    assert schedule.is_off(datetime(2026, 3, 8, 10, 0, tzinfo=UTC)) is True


def test_transitions_swallowed_by_the_gap_are_not_reported() -> None:
    schedule = parse_schedule("off=(U,2);on=(U,3);tz=pt")
    transitions = schedule.next_transitions(datetime(2026, 3, 7, tzinfo=PACIFIC), 2)
    assert [when.date().isoformat() for when, _ in transitions] == ["2026-03-15", "2026-03-15"]


def test_repeated_hour_at_fall_back_does_not_flip_twice() -> None:
    schedule = parse_schedule("off=(U,1);on=(U,3);tz=pt")
    transitions = schedule.next_transitions(datetime(2026, 10, 31, tzinfo=PACIFIC), 2)
    assert [state for _, state in transitions] == ["off", "on"]
    off_at, on_at = (when.astimezone(UTC) for when, _ in transitions)
    assert off_at == datetime(2026, 11, 1, 8, tzinfo=UTC)  # 01:00 PDT, the first one
    assert on_at - off_at == timedelta(hours=3)
    assert schedule.is_off(datetime(2026, 11, 1, 9, 30, tzinfo=UTC)) is True  # 01:30 PST


def test_off_fraction_counts_elapsed_hours_in_dst_weeks() -> None:
    schedule = parse_schedule("off=(U,1);on=(U,3);tz=pt")
    assert schedule.off_fraction() == pytest.approx(2 / 168)
    spring = schedule.off_fraction(datetime(2026, 3, 2, tzinfo=PACIFIC))
    autumn = schedule.off_fraction(datetime(2026, 10, 26, tzinfo=PACIFIC))
    assert spring == pytest.approx(1 / 168)
    assert autumn == pytest.approx(3 / 168)


# --- transitions and off_fraction ----------------------------------------------------------


def test_next_transitions_of_the_default_schedule() -> None:
    schedule = parse_schedule(DEFAULT_SCHEDULE)
    transitions = schedule.next_transitions(at_utc(4, 20), count=3)  # Friday 20:00
    assert transitions == [
        (at_utc(7, 7), "on"),
        (at_utc(7, 19), "off"),
        (at_utc(8, 7), "on"),
    ]
    assert all(when.tzinfo is not None for when, _ in transitions)


def test_next_transitions_are_strictly_after_the_instant() -> None:
    schedule = parse_schedule(DEFAULT_SCHEDULE)
    assert schedule.next_transitions(at_utc(0, 7), count=1) == [(at_utc(0, 19), "off")]
    assert schedule.next_transitions(at_utc(0, 7), count=0) == []


def test_next_transitions_skip_rules_that_do_not_change_state() -> None:
    schedule = parse_schedule("off=[(M-F,19),(M-F,21)];on=(M-F,7)")
    transitions = schedule.next_transitions(at_utc(0, 12), count=2)
    assert transitions == [(at_utc(0, 19), "off"), (at_utc(1, 7), "on")]


def test_next_transitions_are_in_the_schedule_time_zone() -> None:
    schedule = parse_schedule("off=(M-F,19);on=(M-F,7);tz=Asia/Kolkata")
    ((when, state),) = schedule.next_transitions(at_utc(0, 0), count=1)
    assert (when.hour, when.minute, state) == (7, 0, "on")
    assert when.utcoffset() == timedelta(hours=5, minutes=30)
    assert when.astimezone(UTC) == at_utc(0, 1, 30)


def test_default_off_fraction() -> None:
    assert parse_schedule(DEFAULT_SCHEDULE).off_fraction() == pytest.approx(
        (7 * 24 - 5 * 12) / (7 * 24)
    )


def test_off_fraction_of_a_real_week_matches_the_nominal_week_without_dst() -> None:
    schedule = parse_schedule("off=[(M-F,21),(U,18)];on=[(M-F,6),(U,10)];tz=pt")
    on_hours = 5 * 15 + 8
    assert schedule.off_fraction() == pytest.approx((168 - on_hours) / 168)
    for offset in (0, 3, 5):  # any start in a DST-free week gives the same share
        start = datetime(2026, 6, 1 + offset, 11, tzinfo=PACIFIC)
        assert schedule.off_fraction(start) == pytest.approx(schedule.off_fraction())


# --- explain -------------------------------------------------------------------------------


def test_explain_a_valid_schedule() -> None:
    result = explain("off=(M-F,19);on=(M-F,7);tz=pt", datetime(2026, 12, 1, 3, tzinfo=UTC))
    assert result["valid"] is True
    assert result["error"] is None
    assert result["timezone"] == "America/Los_Angeles"
    assert result["at"] == "2026-12-01T03:00:00+00:00"
    assert result["local_time"] == "2026-11-30T19:00:00-08:00"
    assert result["state"] == "off"
    assert result["next_transitions"][:2] == [
        {"at": "2026-12-01T07:00:00-08:00", "state": "on"},
        {"at": "2026-12-01T19:00:00-08:00", "state": "off"},
    ]
    assert len(result["next_transitions"]) == 4
    assert result["weekly_off_fraction"] == pytest.approx(108 / 168, abs=1e-4)
    json.dumps(result)  # the CLI prints it as JSON


def test_explain_an_invalid_schedule() -> None:
    result = explain("off=(M-F,25)", datetime(2026, 12, 1, 3, tzinfo=UTC))
    assert result["valid"] is False
    assert "hour 25" in result["error"]
    assert result["state"] is None
    assert result["next_transitions"] == []
    assert result["schedule"] == "off=(M-F,25)"
    json.dumps(result)


def test_explain_an_opted_out_resource() -> None:
    result = explain("off", datetime(2026, 12, 1, 3, tzinfo=UTC))
    assert (result["valid"], result["opted_out"], result["state"]) == (True, True, "on")


# --- properties ----------------------------------------------------------------------------

DAY_LETTERS = "MTWHFSU"
ZONES = ["utc", "pt", "et", "Europe/London", "Asia/Kolkata", "Australia/Sydney", "nzst"]

day_specs = st.one_of(
    st.sampled_from(DAY_LETTERS),
    st.tuples(st.sampled_from(DAY_LETTERS), st.sampled_from(DAY_LETTERS)).map("-".join),
)
rule_lists = st.lists(
    st.tuples(day_specs, st.integers(0, 23)).map(lambda rule: f"({rule[0]},{rule[1]})"),
    min_size=1,
    max_size=4,
)
instants = st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2035, 12, 31), timezones=st.just(UTC)
)


@st.composite
def schedule_texts(draw: st.DrawFn) -> str:
    def spec(rules: list[str]) -> str:
        return rules[0] if len(rules) == 1 else "[" + ",".join(rules) + "]"

    off, on = draw(rule_lists), draw(rule_lists)
    return f"off={spec(off)};on={spec(on)};tz={draw(st.sampled_from(ZONES))}"


def reference_is_off(schedule: Schedule, at: datetime) -> bool:
    """Walk back wall-clock hours (up to 8 days) to the latest rule; `on` wins a tie."""
    local = at.astimezone(schedule.tz)
    weekday, hour = local.weekday(), local.hour
    for _ in range(8 * 24):
        if any(weekday in rule.days and hour == rule.hour for rule in schedule.on):
            return False
        if any(weekday in rule.days and hour == rule.hour for rule in schedule.off):
            return True
        weekday, hour = (weekday, hour - 1) if hour else ((weekday - 1) % 7, 23)
    return False


@settings(max_examples=300, deadline=None)
@given(text=schedule_texts(), at=instants)
def test_is_off_agrees_with_a_walk_back_over_eight_days(text: str, at: datetime) -> None:
    schedule = parse_schedule(text)
    assert schedule.is_off(at) is reference_is_off(schedule, at)


@settings(max_examples=300, deadline=None)
@given(text=schedule_texts(), at=instants)
def test_state_after_each_transition_is_that_transition(text: str, at: datetime) -> None:
    schedule = parse_schedule(text)
    transitions = schedule.next_transitions(at, count=4)
    previous_instant, previous_off = at.astimezone(UTC), schedule.is_off(at)
    for local_when, state in transitions:
        # Arithmetic on aware datetimes is wall-clock arithmetic in their zone (and lands on
        # non-existent times across DST): step in UTC.
        when = local_when.astimezone(UTC)
        assert when > previous_instant
        assert state in ("on", "off")
        assert schedule.is_off(when) is (state == "off")
        # the state just before a transition is the one it leaves
        assert schedule.is_off(when - timedelta(seconds=1)) is previous_off
        assert (state == "off") is not previous_off
        # and nothing changes between two reported transitions
        middle = previous_instant + (when - previous_instant) / 2
        assert schedule.is_off(middle) is previous_off
        previous_instant, previous_off = when, state == "off"


@settings(max_examples=200, deadline=None)
@given(text=schedule_texts(), at=instants)
def test_escaped_form_parses_to_the_same_schedule(text: str, at: datetime) -> None:
    escapes = {
        "(": "u28",
        ")": "u29",
        "[": "u5b",
        "]": "u5d",
        ",": "u2c",
        ";": "u3b",
        "=": "u3d",
        "/": "u2f",
        "-": "u2d",
    }
    escaped = "".join(escapes.get(char, char) for char in text).lower()
    plain, gcp = parse_schedule(text), parse_schedule(escaped)
    assert (gcp.off, gcp.on, gcp.tz_name) == (plain.off, plain.on, plain.tz_name)
    assert gcp.is_off(at) is plain.is_off(at)
