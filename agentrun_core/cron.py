"""Cron expressions as Kubernetes CronJobs read them (5 fields, in an IANA time zone). Pure; no I/O.

    minute hour day-of-month month day-of-week       e.g.  */15 9-17 * * MON-FRI

* each field: ``*``, a value, a range ``a-b``, a step ``*/n`` / ``a-b/n`` / ``a/n`` (from a to the field's
  maximum), and comma lists of those; months ``JAN``-``DEC`` and weekdays ``SUN``-``SAT`` by name (any case);
  weekday 0 and 7 are both Sunday; ``?`` means ``*`` in the two day fields;
* macros ``@yearly`` (``@annually``), ``@monthly``, ``@weekly``, ``@daily`` (``@midnight``), ``@hourly``;
* day-of-month and day-of-week: when both are restricted (neither starts with ``*`` or ``?``) a day matches if
  either matches, as in every cron since Vixie's; otherwise both must;
* time zone: the fields are wall-clock time in ``zone``. A wall-clock time skipped by a daylight-saving jump
  forward fires once, at the first instant after the jump (a daily 02:30 job runs at 03:00 that day, never not
  at all); a wall-clock time that occurs twice when the clock goes back fires once, at its first occurrence.

``CronError`` says which field is wrong and why. ``Schedule.next_after`` / ``latest_in`` give tick instants
(aware datetimes in UTC).
"""

from __future__ import annotations

import dataclasses
import datetime
import zoneinfo
from collections.abc import Iterator

UTC = datetime.UTC
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
# (name, low, high, names -> value)
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day-of-month", 1, 31, {}),
    ("month", 1, 12, {m: i + 1 for i, m in enumerate(_MONTHS)}),
    ("day-of-week", 0, 7, {d: i for i, d in enumerate(_DAYS)}),
)
_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # Feb 29 exists in some year
# A schedule that fires at all fires within 8 years (Feb 29 skips 2100 at most once), so a search stops there.
_HORIZON_DAYS = 8 * 366


class CronError(ValueError):
    """The expression or the time zone is not valid; the message names the field."""


@dataclasses.dataclass(frozen=True)
class Schedule:
    expression: str
    zone: zoneinfo.ZoneInfo
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    days_star: bool
    weekdays_star: bool

    def _day_matches(self, day: datetime.date) -> bool:
        if day.month not in self.months:
            return False
        dom = day.day in self.days
        dow = (day.isoweekday() % 7) in self.weekdays
        if self.days_star or self.weekdays_star:
            return dom and dow
        return dom or dow

    def _instant(self, day: datetime.date, hour: int, minute: int) -> datetime.datetime:
        """The instant wall-clock ``day hour:minute`` in the zone fires at (see the module doc on DST)."""
        wall = datetime.datetime(day.year, day.month, day.day, hour, minute, tzinfo=self.zone)  # fold=0
        at = wall.astimezone(UTC)
        if at.astimezone(self.zone).replace(tzinfo=None) == wall.replace(tzinfo=None):
            return at
        # Skipped by a jump forward. fold=0 read it with the offset before the jump (``at``: past the jump),
        # fold=1 with the offset after it (before the jump): the jump lies between, on a minute boundary.
        early = wall.replace(fold=1).astimezone(UTC)
        after = at.astimezone(self.zone).utcoffset()
        while early < at and early.astimezone(self.zone).utcoffset() != after:
            early += datetime.timedelta(minutes=1)
        return early

    def _times(
        self, day: datetime.date, reverse: bool, bound: int | None = None
    ) -> Iterator[datetime.datetime]:
        """The day's ticks in wall-clock order (reversed: backwards), lazily, from the hour ``bound`` on (back
        from it). The instants follow the same order (ticks in a gap collapse onto the jump; a repeated hour
        is read once), so a search stops at the first that fits and skips the hours before ``bound``."""
        if reverse:
            hours = [h for h in reversed(self.hours) if bound is None or h <= bound]
        else:
            hours = [h for h in self.hours if bound is None or h >= bound]
        for h in hours:
            for m in reversed(self.minutes) if reverse else self.minutes:
                yield self._instant(day, h, m)

    def next_after(self, after: datetime.datetime) -> datetime.datetime | None:
        """The first tick strictly after ``after``; None when the expression never fires (e.g. 30 Feb)."""
        local = after.astimezone(self.zone)
        for offset in range(_HORIZON_DAYS):
            day = local.date() + datetime.timedelta(days=offset)
            if self._day_matches(day):
                for at in self._times(day, reverse=False, bound=None if offset else local.hour):
                    if at > after:
                        return at
        return None

    def latest_in(self, since: datetime.datetime, until: datetime.datetime) -> datetime.datetime | None:
        """The last tick in ``(since, until]``; None when there is none."""
        local = until.astimezone(self.zone)
        last = since.astimezone(self.zone).date()
        for offset in range(_HORIZON_DAYS):
            day = local.date() - datetime.timedelta(days=offset)
            if day < last:
                break
            if self._day_matches(day):
                for at in self._times(day, reverse=True, bound=None if offset else local.hour):
                    if at <= since:
                        return None
                    if at <= until:
                        return at
        return None

    def count_in(self, since: datetime.datetime, until: datetime.datetime, cap: int = 100) -> int:
        """How many ticks fall in ``(since, until]``, counting up to ``cap``."""
        n, at = 0, since
        while n < cap:
            nxt = self.next_after(at)
            if nxt is None or nxt > until:
                break
            n, at = n + 1, nxt
        return n


def zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA zone ``name`` (``UTC`` when empty)."""
    if not name:
        return zoneinfo.ZoneInfo("UTC")
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise CronError(
            f"timeZone {name!r} is not an IANA time zone (e.g. Europe/Berlin, America/New_York, UTC)"
        ) from exc


def _value(text: str, field: str, low: int, high: int, names: dict[str, int]) -> int:
    upper = text.upper()
    if upper in names:
        return names[upper]
    if not text.isdigit():
        raise CronError(f"{field} field: {text!r} is not a number" + (" or a name" if names else ""))
    value = int(text)
    if not low <= value <= high:
        raise CronError(f"{field} field: {value} is out of range {low}-{high}")
    return value


def _field(text: str, index: int) -> tuple[frozenset[int], bool]:
    """The values of one field, and whether it starts with ``*`` (or ``?``)."""
    field, low, high, names = _FIELDS[index]
    values: set[int] = set()
    for part in text.split(","):
        if not part:
            raise CronError(f"{field} field: empty list item in {text!r}")
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) == 0:
                raise CronError(f"{field} field: step {step_text!r} must be a positive number")
            step = int(step_text)
        if base in ("*", "?"):
            if base == "?" and index not in (2, 4):
                raise CronError(f"{field} field: '?' is allowed only in the day fields")
            first, last = low, high
        elif "-" in base:
            a, _, b = base.partition("-")
            first, last = _value(a, field, low, high, names), _value(b, field, low, high, names)
            if first > last:
                raise CronError(f"{field} field: range {base!r} runs backwards")
        else:
            first = _value(base, field, low, high, names)
            last = high if slash else first  # a/n: from a to the maximum, every n
        values.update(range(first, last + 1, step))
    star = text.startswith(("*", "?"))
    if index == 4 and 7 in values:
        values = (values - {7}) | {0}
    return frozenset(values), star


def parse(expression: str, time_zone: str = "") -> Schedule:
    """The schedule of ``expression`` in ``time_zone`` (IANA name; UTC when empty), or ``CronError``."""
    text = " ".join(expression.split())
    if not text:
        raise CronError("the schedule is empty")
    if text.startswith("@"):
        if text.lower() not in MACROS:
            raise CronError(f"unknown macro {text!r}; known: {', '.join(MACROS)}")
        fields_text = MACROS[text.lower()].split()
    else:
        fields_text = text.split()
        if text.upper().startswith("TZ=") or text.upper().startswith("CRON_TZ="):
            raise CronError("put the time zone in timeZone, not in the schedule (TZ=... is not accepted)")
        if len(fields_text) != 5:
            raise CronError(
                f"a schedule has 5 fields (minute hour day-of-month month day-of-week), "
                f"not {len(fields_text)}"
            )
    parsed = [_field(f, i) for i, f in enumerate(fields_text)]
    schedule = Schedule(
        expression=text,
        zone=zone(time_zone),
        minutes=tuple(sorted(parsed[0][0])),
        hours=tuple(sorted(parsed[1][0])),
        days=parsed[2][0],
        months=parsed[3][0],
        weekdays=parsed[4][0],
        days_star=parsed[2][1],
        weekdays_star=parsed[4][1],
    )
    if schedule.weekdays_star and not any(
        d <= _DAYS_IN_MONTH[m - 1] for m in schedule.months for d in schedule.days
    ):
        raise CronError(f"{text!r} never fires: no chosen month has the chosen day of the month")
    return schedule
