"""Dates in text, normalised to day ranges: what a memory is about in time, and what a query asks.

A memory's *time* is the span of the dates it mentions ("on 8 May, 2023", "in 2022", "yesterday",
"two weeks ago"), each read as a range of days. Relative words are read from a reference day: the
first full date the text itself carries when it has one (a dated log line or note, a conversation
saved with its session date: "Caroline (8 May, 2023): ... yesterday" is 7 May 2023), else the day
it was saved. A text that mentions no date has no time of its own; search then uses the day it
was saved (``search.search_memories``, ``since``/``until``).

A query's dates become a time condition rather than words to match: "What did she paint in May
2023?" asks for memories of May 2023, and "may" and "2023" are dropped from its full-text words
(``query_time``). English, German and Italian month and relative words; anything else is left
as words.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from dataclasses import dataclass

_MONTHS = {
    # English, German, Italian names and their usual abbreviations.
    **dict.fromkeys(("january", "jan", "januar", "jänner", "gennaio"), 1),
    **dict.fromkeys(("february", "feb", "februar", "febbraio"), 2),
    **dict.fromkeys(("march", "mar", "märz", "marzo"), 3),
    **dict.fromkeys(("april", "apr", "aprile"), 4),
    **dict.fromkeys(("may", "mai", "maggio"), 5),
    **dict.fromkeys(("june", "jun", "juni", "giugno"), 6),
    **dict.fromkeys(("july", "jul", "juli", "luglio"), 7),
    **dict.fromkeys(("august", "aug", "agosto"), 8),
    **dict.fromkeys(("september", "sep", "sept", "settembre"), 9),
    **dict.fromkeys(("october", "oct", "oktober", "ottobre"), 10),
    **dict.fromkeys(("november", "nov", "novembre"), 11),
    **dict.fromkeys(("december", "dec", "dezember", "dicembre"), 12),
}
_WEEKDAYS = {
    **dict.fromkeys(("monday", "montag", "lunedì"), 0),
    **dict.fromkeys(("tuesday", "dienstag", "martedì"), 1),
    **dict.fromkeys(("wednesday", "mittwoch", "mercoledì"), 2),
    **dict.fromkeys(("thursday", "donnerstag", "giovedì"), 3),
    **dict.fromkeys(("friday", "freitag", "venerdì"), 4),
    **dict.fromkeys(("saturday", "samstag", "sabato"), 5),
    **dict.fromkeys(("sunday", "sonntag", "domenica"), 6),
}
# Long names before their abbreviations, so "march" is not read as "mar" + "ch".
_MONTH = "(?P<{}>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<{}>[0-3]?\d)(?:st|nd|rd|th|\.)?"
_YEAR = r"(?P<{}>(?:19|20)\d\d)"
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}
_NUMBERS.update({"eight": 8, "nine": 9, "ten": 10, "a couple of": 2, "a few": 3, "few": 3, "several": 3})
_COUNT = r"(?P<n>\d{1,3}|" + "|".join(sorted(_NUMBERS, key=len, reverse=True)) + ")"
_UNIT = r"(?P<unit>day|week|month|year)s?"

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (
        kind,
        re.compile(r"(?<![\w-])" + pattern + r"(?![\w-])", re.IGNORECASE),
    )
    for kind, pattern in (
        ("iso", r"(?P<y>(?:19|20)\d\d)-(?P<m>[01]?\d)-(?P<d>[0-3]?\d)"),
        ("dmy", _DAY.format("d") + r"\s+(?:of\s+)?" + _MONTH.format("mn") + r",?\s+" + _YEAR.format("y")),
        ("mdy", _MONTH.format("mn") + r"\s+" + _DAY.format("d") + r",?\s+" + _YEAR.format("y")),
        ("my", _MONTH.format("mn") + r",?\s+(?:of\s+)?" + _YEAR.format("y")),
        ("dm", _DAY.format("d") + r"\s+(?:of\s+)?" + _MONTH.format("mn")),
        ("md", _MONTH.format("mn") + r"\s+" + _DAY.format("d")),
        ("ago", _COUNT + r"\s+" + _UNIT + r"\s+ago"),
        ("rel", r"(?P<which>last|this|next|past)\s+(?P<unit>week(?:end)?|month|year)"),
        ("wday", r"(?P<which>last|this|next|on)\s+(?P<wd>" + "|".join(_WEEKDAYS) + ")"),
        (
            "word",
            r"(?P<word>the\s+day\s+before\s+yesterday|yesterday|today|tonight|tomorrow|gestern|heute|morgen|ieri|oggi|domani)",
        ),
        ("in_month", r"(?:in|during|since|im|a|di|nel)\s+" + _MONTH.format("mn")),
        ("year", r"(?:in|during|since|of|im|nel)\s+" + _YEAR.format("y")),
    )
]
# "may" is also a verb: on its own it is a month only after "in"/"during" (the ``in_month`` form),
# or beside a day written as an ordinal ("May 4th").
_ORDINAL = re.compile(r"\d(?:st|nd|rd|th)\b", re.IGNORECASE)
_AMBIGUOUS_MONTHS = frozenset({"may", "mar", "jun", "jan", "dec", "aug", "sept", "sep", "mai"})


@dataclass(frozen=True)
class Span:
    """Days from ``start`` to ``end``, both included."""

    start: dt.date
    end: dt.date

    def cover(self, other: Span) -> Span:
        return Span(min(self.start, other.start), max(self.end, other.end))


@dataclass(frozen=True)
class Found:
    span: Span
    at: tuple[int, int]  # the characters of the text it was read from
    absolute: bool  # a full date (day, month and year) written out


def _day(year: int, month: int, day: int) -> dt.date | None:
    try:
        return dt.date(year, month, day)
    except ValueError:
        return None


def _month_span(year: int, month: int) -> Span:
    return Span(dt.date(year, month, 1), dt.date(year, month, calendar.monthrange(year, month)[1]))


def _latest(ref: dt.date, month: int, day: int | None = None, past: bool = False) -> Span | None:
    """A month or a day of it without a year: the most recent such month not after ``ref`` ("in
    May" said in June 2023 is May 2023), the nearest such day ("on March 7" in a note of 5 March
    2024 is two days later, said in December it is the last one); with ``past`` (a question, asked
    about what happened), the most recent such day not after ``ref`` too."""
    if day is None:
        return _month_span(ref.year if month <= ref.month else ref.year - 1, month)
    days = [d for year in (ref.year - 1, ref.year, ref.year + 1) if (d := _day(year, month, day))]
    if past:
        days = [d for d in days if d <= ref]
    nearest = min(days, key=lambda d: abs((d - ref).days), default=None)
    return Span(nearest, nearest) if nearest else None


def _shift_months(day: dt.date, months: int) -> dt.date:
    month = day.month - 1 + months
    year, month = day.year + month // 12, month % 12 + 1
    return dt.date(year, month, min(day.day, calendar.monthrange(year, month)[1]))


def _relative(match: re.Match[str], kind: str, ref: dt.date) -> Span | None:
    g = match.groupdict()
    if kind == "word":
        word = " ".join(g["word"].lower().split())
        offset = {"the day before yesterday": -2, "yesterday": -1, "gestern": -1, "ieri": -1}.get(word, 0)
        offset = 1 if word in ("tomorrow", "morgen", "domani") else offset
        day = ref + dt.timedelta(days=offset)
        return Span(day, day)
    if kind == "ago":
        count = g["n"].lower()
        n = int(count) if count.isdigit() else _NUMBERS[" ".join(count.split())]
        unit = g["unit"].lower()
        if unit == "day":
            day = ref - dt.timedelta(days=n)
            return Span(day, day)
        if unit == "week":
            end = ref - dt.timedelta(weeks=n)
            return Span(end - dt.timedelta(days=6), end + dt.timedelta(days=6))
        start = _shift_months(ref, -n * (12 if unit == "year" else 1))
        return Span(
            _shift_months(start, -1 if unit == "month" else -6),
            _shift_months(start, 1 if unit == "month" else 6),
        )
    if kind == "rel":
        step = {"last": -1, "past": -1, "this": 0, "next": 1}[g["which"].lower()]
        unit = g["unit"].lower()
        if unit in ("week", "weekend"):
            monday = ref - dt.timedelta(days=ref.weekday()) + dt.timedelta(weeks=step)
            if unit == "weekend":
                return Span(monday + dt.timedelta(days=5), monday + dt.timedelta(days=6))
            return Span(monday, monday + dt.timedelta(days=6))
        if unit == "month":
            first = _shift_months(ref.replace(day=1), step)
            return _month_span(first.year, first.month)
        return Span(dt.date(ref.year + step, 1, 1), dt.date(ref.year + step, 12, 31))
    if kind == "wday":
        weekday = _WEEKDAYS[g["wd"].lower()]
        which = g["which"].lower()
        back = (ref.weekday() - weekday) % 7 or (7 if which == "last" else 0)
        day = (
            ref + dt.timedelta(days=(weekday - ref.weekday()) % 7 or 7)
            if which == "next"
            else ref - dt.timedelta(days=back)
        )
        return Span(day, day)
    return None


def find(text: str, saved: dt.date, past: bool = False) -> list[Found]:
    """Every date expression of ``text`` as a span of days, relative ones read from the text's own
    first full date when it has one (else from ``saved``), in the order they appear; with ``past``,
    a day without a year is the last one not after that date (see ``_latest``)."""
    found: list[tuple[int, int, str, re.Match[str]]] = []
    taken: list[tuple[int, int]] = []
    for kind, pattern in _PATTERNS:  # longer forms first: "8 May, 2023" is not also "May 2023"
        for match in pattern.finditer(text):
            start, end = match.span()
            if any(start < e and s < end for s, e in taken):
                continue
            month = (match.groupdict().get("mn") or "").lower().rstrip(".")
            if kind in ("md", "dm") and month in _AMBIGUOUS_MONTHS and not _ORDINAL.search(match.group(0)):
                continue  # "may 5 of them": not a date; "May 4th" is
            taken.append((start, end))
            found.append((start, end, kind, match))
    found.sort()
    absolute: list[Found] = []
    for start, end, kind, match in found:
        g = match.groupdict()
        if kind in ("iso", "dmy", "mdy"):
            month = int(g["m"]) if kind == "iso" else _MONTHS[g["mn"].lower().rstrip(".")]
            day = _day(int(g["y"]), month, int(g["d"]))
            if day:
                absolute.append(Found(Span(day, day), (start, end), True))
    ref = absolute[0].span.start if absolute else saved
    out: list[Found] = []
    for start, end, kind, match in found:
        g = match.groupdict()
        span: Span | None
        if kind in ("iso", "dmy", "mdy"):
            span = next((f.span for f in absolute if f.at == (start, end)), None)
        elif kind == "my":
            span = _month_span(int(g["y"]), _MONTHS[g["mn"].lower().rstrip(".")])
        elif kind in ("dm", "md"):
            span = _latest(ref, _MONTHS[g["mn"].lower().rstrip(".")], int(g["d"]), past)
        elif kind == "in_month":
            span = _latest(ref, _MONTHS[g["mn"].lower().rstrip(".")])
        elif kind == "year":
            year = int(g["y"])
            span = Span(dt.date(year, 1, 1), dt.date(year, 12, 31))
        else:
            span = _relative(match, kind, ref)
        if span is not None:
            out.append(Found(span, (start, end), kind in ("iso", "dmy", "mdy")))
    return out


def memory_time(text: str, saved: dt.date) -> Span | None:
    """What ``text`` is about in time: the span of every date it mentions; None if it mentions none.

    A text that only carries its own date (a dated line saying nothing else about time) is about
    that day."""
    spans = [f.span for f in find(text, saved)]
    if not spans:
        return None
    out = spans[0]
    for span in spans[1:]:
        out = out.cover(span)
    return out


def query_time(query: str, today: dt.date) -> tuple[Span | None, str]:
    """The time a query asks about (relative words read from ``today``; a day without a year is the
    last one that has been), and the query without its date expressions; (None, query) when it
    names none."""
    found = find(query, today, past=True)
    if not found:
        return None, query
    span = found[0].span
    for f in found[1:]:
        span = span.cover(f.span)
    rest, last = [], 0
    for f in found:
        rest.append(query[last : f.at[0]])
        last = f.at[1]
    rest.append(query[last:])
    return span, " ".join("".join(rest).split())


def columns(text: str, saved: dt.date | None = None) -> dict[str, dt.date | None]:
    """The memory columns ``happened_from`` and ``happened_to`` (bound as ``hf`` and ``ht``) of a
    text saved on ``saved`` (today, UTC, by default)."""
    span = memory_time(text, saved or dt.datetime.now(dt.UTC).date())
    return {"hf": span.start if span else None, "ht": span.end if span else None}
