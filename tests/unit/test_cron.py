"""agentrun_core.cron: the 5-field cron of Kubernetes CronJobs, in an IANA zone, with its DST rules."""

from __future__ import annotations

import datetime

import pytest

from agentrun_core import cron

UTC = datetime.UTC


def at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text).astimezone(UTC)


def ticks(expr: str, start: str, n: int, zone: str = "") -> list[str]:
    sched = cron.parse(expr, zone)
    out, t = [], at(start)
    for _ in range(n):
        nxt = sched.next_after(t)
        assert nxt is not None
        out.append(nxt.astimezone(sched.zone).isoformat())
        t = nxt
    return out


def test_every_minute_is_strictly_after() -> None:
    assert ticks("* * * * *", "2026-01-01T00:00:00+00:00", 2) == [
        "2026-01-01T00:01:00+00:00",
        "2026-01-01T00:02:00+00:00",
    ]
    assert ticks("* * * * *", "2026-01-01T00:00:30+00:00", 1) == ["2026-01-01T00:01:00+00:00"]


@pytest.mark.parametrize(
    ("expr", "start", "expected"),
    [
        (
            "*/15 * * * *",
            "2026-01-01T00:50:00+00:00",
            ["2026-01-01T01:00:00+00:00", "2026-01-01T01:15:00+00:00"],
        ),
        (
            "5-10/2 * * * *",
            "2026-01-01T00:00:00+00:00",
            ["2026-01-01T00:05:00+00:00", "2026-01-01T00:07:00+00:00"],
        ),
        (
            "50/5 * * * *",
            "2026-01-01T00:00:00+00:00",
            ["2026-01-01T00:50:00+00:00", "2026-01-01T00:55:00+00:00"],
        ),
        (
            "0 9-17/4 * * *",
            "2026-01-01T10:00:00+00:00",
            ["2026-01-01T13:00:00+00:00", "2026-01-01T17:00:00+00:00"],
        ),
        (
            "0,30 12 * * *",
            "2026-01-01T12:00:00+00:00",
            ["2026-01-01T12:30:00+00:00", "2026-01-02T12:00:00+00:00"],
        ),
        # 2026-01-01 is a Thursday
        (
            "0 9 * * MON-FRI",
            "2026-01-02T10:00:00+00:00",
            ["2026-01-05T09:00:00+00:00", "2026-01-06T09:00:00+00:00"],
        ),
        (
            "0 0 * * 7",
            "2026-01-01T00:00:00+00:00",
            ["2026-01-04T00:00:00+00:00", "2026-01-11T00:00:00+00:00"],
        ),
        (
            "0 0 * * sun",
            "2026-01-01T00:00:00+00:00",
            ["2026-01-04T00:00:00+00:00", "2026-01-11T00:00:00+00:00"],
        ),
        (
            "0 0 1 jan,Jul *",
            "2026-01-01T00:00:00+00:00",
            ["2026-07-01T00:00:00+00:00", "2027-01-01T00:00:00+00:00"],
        ),
        (
            "0 0 31 * *",
            "2026-01-31T00:00:00+00:00",
            ["2026-03-31T00:00:00+00:00", "2026-05-31T00:00:00+00:00"],
        ),
        (
            "0 0 29 2 *",
            "2026-01-01T00:00:00+00:00",
            ["2028-02-29T00:00:00+00:00", "2032-02-29T00:00:00+00:00"],
        ),
        # both day fields restricted: either matches (the 13th, or a Friday)
        (
            "0 0 13 * FRI",
            "2026-02-01T00:00:00+00:00",
            ["2026-02-06T00:00:00+00:00", "2026-02-13T00:00:00+00:00"],
        ),
        # day-of-week starting with * (*/7 = 0 and 7, Sunday): both must match - a Sunday the 13th
        (
            "0 0 13 * */7",
            "2026-02-01T00:00:00+00:00",
            ["2026-09-13T00:00:00+00:00", "2026-12-13T00:00:00+00:00"],
        ),
        (
            "0 0 ? * 1",
            "2026-01-01T00:00:00+00:00",
            ["2026-01-05T00:00:00+00:00", "2026-01-12T00:00:00+00:00"],
        ),
        ("@hourly", "2026-01-01T00:30:00+00:00", ["2026-01-01T01:00:00+00:00", "2026-01-01T02:00:00+00:00"]),
        ("@daily", "2026-01-01T00:30:00+00:00", ["2026-01-02T00:00:00+00:00", "2026-01-03T00:00:00+00:00"]),
        (
            "@midnight",
            "2026-01-01T00:30:00+00:00",
            ["2026-01-02T00:00:00+00:00", "2026-01-03T00:00:00+00:00"],
        ),
        ("@weekly", "2026-01-01T00:00:00+00:00", ["2026-01-04T00:00:00+00:00", "2026-01-11T00:00:00+00:00"]),
        ("@monthly", "2026-01-01T00:00:00+00:00", ["2026-02-01T00:00:00+00:00", "2026-03-01T00:00:00+00:00"]),
        ("@yearly", "2026-01-01T00:00:00+00:00", ["2027-01-01T00:00:00+00:00", "2028-01-01T00:00:00+00:00"]),
        (
            "@ANNUALLY",
            "2026-01-01T00:00:00+00:00",
            ["2027-01-01T00:00:00+00:00", "2028-01-01T00:00:00+00:00"],
        ),
        (
            "59 23 31 12 *",
            "2026-12-31T23:59:00+00:00",
            ["2027-12-31T23:59:00+00:00", "2028-12-31T23:59:00+00:00"],
        ),
    ],
)
def test_fields(expr: str, start: str, expected: list[str]) -> None:
    assert ticks(expr, start, len(expected)) == expected


def test_time_zone_fields_are_wall_clock() -> None:
    assert ticks("0 9 * * *", "2026-01-01T00:00:00+00:00", 1, "Europe/Berlin") == [
        "2026-01-01T09:00:00+01:00"
    ]
    assert ticks("0 9 * * *", "2026-07-01T00:00:00+00:00", 1, "Europe/Berlin") == [
        "2026-07-01T09:00:00+02:00"
    ]


def test_dst_gap_fires_once_at_the_jump() -> None:
    # New York 2026-03-08: 02:00 EST jumps to 03:00 EDT; 02:30 does not exist that day.
    assert ticks("30 2 * * *", "2026-03-07T12:00:00+00:00", 3, "America/New_York") == [
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
        "2026-03-10T02:30:00-04:00",
    ]
    # every tick inside the gap collapses onto the jump: one run, not four
    assert ticks("*/15 2 * * *", "2026-03-08T05:00:00+00:00", 2, "America/New_York") == [
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:00:00-04:00",
    ]
    # a tick at the jump's own wall time (03:00) is the same instant as the collapsed gap ticks
    assert ticks("0 2,3 * * *", "2026-03-08T05:00:00+00:00", 2, "America/New_York") == [
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:00:00-04:00",
    ]


def test_dst_overlap_fires_once_at_the_first_occurrence() -> None:
    # New York 2026-11-01: 02:00 EDT goes back to 01:00 EST; 01:30 occurs twice.
    assert ticks("30 1 * * *", "2026-10-31T12:00:00+00:00", 2, "America/New_York") == [
        "2026-11-01T01:30:00-04:00",
        "2026-11-02T01:30:00-05:00",
    ]
    # looking from inside the second 01:xx hour: the next is tomorrow's, not a repeat
    assert ticks("*/15 1 * * *", "2026-11-01T06:20:00+00:00", 1, "America/New_York") == [
        "2026-11-02T01:00:00-05:00"
    ]
    # an hourly schedule keeps ticking each real hour across the change (minute 0 of 01:00 once)
    assert ticks("0 * * * *", "2026-11-01T04:30:00+00:00", 3, "America/New_York") == [
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T02:00:00-05:00",
        "2026-11-01T03:00:00-05:00",
    ]


def test_latest_in_and_count_in() -> None:
    sched = cron.parse("*/10 * * * *")
    since, until = at("2026-01-01T00:00:00+00:00"), at("2026-01-01T00:35:00+00:00")
    assert sched.latest_in(since, until) == at("2026-01-01T00:30:00+00:00")
    assert sched.count_in(since, until) == 3
    assert sched.latest_in(until, until) is None
    assert sched.latest_in(at("2026-01-01T00:30:00+00:00"), until) is None  # since is exclusive
    assert sched.latest_in(since, at("2026-01-01T00:30:00+00:00")) == at("2026-01-01T00:30:00+00:00")
    assert sched.count_in(since, at("2027-01-01T00:00:00+00:00"), cap=100) == 100
    gap = cron.parse("30 2 * * *", "America/New_York")
    assert gap.latest_in(at("2026-03-08T00:00:00+00:00"), at("2026-03-08T12:00:00+00:00")) == at(
        "2026-03-08T07:00:00+00:00"
    )
    yearly = cron.parse("0 0 1 1 *")
    assert yearly.latest_in(at("2020-06-01T00:00:00+00:00"), at("2026-06-01T00:00:00+00:00")) == at(
        "2026-01-01T00:00:00+00:00"
    )


@pytest.mark.parametrize(
    ("expr", "zone", "says"),
    [
        ("", "", "empty"),
        ("* * * *", "", "5 fields"),
        ("* * * * * *", "", "5 fields"),
        ("60 * * * *", "", "minute field: 60 is out of range 0-59"),
        ("* 24 * * *", "", "hour field: 24"),
        ("* * 0 * *", "", "day-of-month field: 0"),
        ("* * * 13 *", "", "month field: 13"),
        ("* * * * 8", "", "day-of-week field: 8"),
        ("* * * FOO *", "", "month field: 'FOO' is not a number or a name"),
        ("*/0 * * * *", "", "step '0'"),
        ("*/x * * * *", "", "step 'x'"),
        ("10-5 * * * *", "", "runs backwards"),
        ("1,,2 * * * *", "", "empty list item"),
        ("? * * * *", "", "'?' is allowed only"),
        ("@every 5m", "", "unknown macro"),
        ("TZ=UTC * * * * *", "", "put the time zone in timeZone"),
        ("0 0 30 2 *", "", "never fires"),
        ("0 0 * * *", "Mars/Olympus", "not an IANA time zone"),
        ("0 0 * * *", "../etc/passwd", "not an IANA time zone"),
    ],
)
def test_bad_input_says_what_is_wrong(expr: str, zone: str, says: str) -> None:
    with pytest.raises(cron.CronError, match=None) as info:
        cron.parse(expr, zone)
    assert says in str(info.value)


def test_feb_30_with_a_weekday_still_fires_on_the_weekday() -> None:
    # both restricted: either matches, so Mondays in February fire
    assert ticks("0 0 30 2 MON", "2026-01-01T00:00:00+00:00", 1) == ["2026-02-02T00:00:00+00:00"]
