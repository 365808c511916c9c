"""The run filter grammar shared by `rmconsole runs`, `rmconsole report` and the TUI's `/` filter.

    method:rm,ewc memory_size:500 status:finished A_last>85 cifar

Space-separated terms must all hold (AND). A term is `KEY OP VALUES` or free text:

- KEY is a run column (id, status, preset, method, dataset, seed, sweep, name, note,
  archived), a run's `tag` (any of its tags), `study` (the `rmconsole tune` study whose trial it
  is: `study:NAME`, its tag study:NAME) or `override` (a key it overrides: `override:epochs`,
  or with its value: `override:epochs=64`), a filterable metric of the catalogue
  (rmconsole/metric_registry.py: the built-ins and installed plug-ins), tasks_done, partial, or
  any config key (`k` is memory_size); case does not matter. An unknown key is an error that
  lists the known ones.
- `:` and `=` are equality, `!=` its negation; a comma lists alternatives (OR). Values are read
  as on the command line and compared as tables write them: numbers by value (`id:1` is run 1,
  not 10-19; `k:20` is not 200), lists joined with '+' (`augment:cutmix+autoaug`, `augment:none`),
  text without regard to case.
- `>`, `>=`, `<`, `<=` compare numbers; a run without the value (a metric not measured yet)
  never passes.
- free text (no operator) must occur in the run's id, status, preset, method, dataset, K, seed,
  sweep, name, tags, note or overrides; a number matches as a whole word (`12` is run 12 or
  seed=12, never the digits inside sweep id 20261124-221233-9ae0 or run 112).
- run ids in the grammar every command reads (`run_id_spans`): `48-53`, `3,4,7`, `3-9,12` are
  those runs (a lone `12` stays a word; so do a sweep id's words, `20260115-090000`).
- a value of a closed set (`status`, `archived`, a choice config key such as `stream`) that is
  not one of its values is an error naming them; open-ended keys (method, dataset, tag: plug-ins
  and users add values) may match nothing.
- archived runs are left out unless the filter names `archived` (`archived:true` shows only them).

Pure: parsing and matching only; `queries.find_runs` applies a filter to the stored runs.
To add a key, give it a line in RUN_KEYS (or SET_KEYS) and a value in `record_value`; a value
that is a set matches when any of its members does. A metric needs nothing here: its catalogue
row says whether it is filterable.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

from .. import metric_registry
from .records import RunRecord, _config_defaults, config_value, format_value

RUN_KEYS = {  # name -> the RunRecord attribute it reads
    "id": "id",
    "status": "status",
    "preset": "preset",
    "method": "method",
    "dataset": "dataset",
    "seed": "seed",
    "sweep": "sweep_id",
    "name": "name",
    "note": "note",
    "archived": "archived",
}
SET_KEYS = ("tag", "override", "study")  # a run has several: the term matches when any member does
STUDY_TAG = "study:"  # `rmconsole tune` tags a trial's run study:NAME; the filter `study:NAME` reads it
PROGRESS_KEYS = ("tasks_done", "partial")  # how far a run's metrics go (RunRecord attributes)
ALIASES = {"k": "memory_size", "sweep_id": "sweep", "tags": "tag", "overrides": "override"}
EQUALITY = ("=", "!=")
ORDERING = {">": float.__gt__, ">=": float.__ge__, "<": float.__lt__, "<=": float.__le__}
NONE_WORDS = ("none", "null", "—")  # how a missing value is written

_TERM = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_]*)(?P<op>>=|<=|!=|=|:|>|<)(?P<value>.*)", re.DOTALL)
_VALUE = re.compile(r"""(?:\[[^\]]*\]|\{[^}]*\}|"[^"]*"|'[^']*'|[^,])+""")  # commas in [] {} or quotes stay


class FilterError(ValueError):
    """A filter that cannot be read: one line for the terminal or the TUI's status line."""


# ---------------------------------------------------------------------- values


def config_keys() -> tuple[str, ...]:
    """Every config key a run can have (RunConfig's fields)."""
    return tuple(_config_defaults())


def metric_keys() -> tuple[str, ...]:
    """The filterable metrics (the catalogue's, plug-ins included), then the progress keys."""
    return (*(m.name for m in metric_registry.filterable()), *PROGRESS_KEYS)


def record_value(record: RunRecord, key: str) -> Any:
    """A run's value for a (canonical) filter key."""
    if key in RUN_KEYS:
        return getattr(record, RUN_KEYS[key])
    if key == "tag":
        return frozenset(record.tags)
    if key == "study":
        return frozenset(tag[len(STUDY_TAG) :] for tag in record.tags if tag.startswith(STUDY_TAG))
    if key == "override":
        return frozenset([*record.overrides, *(f"{k}={format_value(v)}" for k, v in record.overrides.items())])
    if key in PROGRESS_KEYS:
        return getattr(record, key)
    if key in record.config or key in _config_defaults():
        return config_value(record.config, key)
    return record.value(key)  # a metric (canonical_key let only known keys through)


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _parse(raw: str) -> Any:
    from ..config import parse_value

    return parse_value(raw)


# ---------------------------------------------------------------------- keys


def closed_values(key: str) -> tuple[str, ...] | None:
    """The values a (canonical) key can take when they are a closed set (a run's status, a
    choice or boolean config key), as a term is compared (lower case); None when open-ended (a
    method, a dataset, a tag: plug-ins and users add them, and a name that matches no run is an
    answer, not an error). `status:nope` is refused with these, never "no runs match"."""
    from ..config import choices_of
    from .tables import STATUSES

    if key == "status":
        return STATUSES
    if key in ("archived", "partial"):
        return ("true", "false")
    if key in RUN_KEYS or key in SET_KEYS or key in PROGRESS_KEYS:
        return None
    choices = choices_of(key)
    return None if choices is None else tuple(c.casefold() for c in choices)


def known_keys() -> list[str]:
    return list(dict.fromkeys([*RUN_KEYS, *SET_KEYS, "k", *metric_keys(), *config_keys()]))


def canonical_key(key: str) -> str:
    """The key's own spelling (keys are matched without regard to case), or FilterError."""
    names = {name.lower(): name for name in [*RUN_KEYS, *SET_KEYS, *metric_keys(), *config_keys()]}
    names.update((alias, target) for alias, target in ALIASES.items())
    if key.lower() in names:
        return names[key.lower()]
    broken = [line for line in metric_registry.problems() if f"{key!r}" in line]
    if broken:  # an installed metric plug-in that cannot be loaded: say so, in its one line
        raise FilterError(broken[0])
    close = difflib.get_close_matches(key.lower(), list(names), n=1)
    hint = f" (did you mean {names[close[0]]}?)" if close else ""
    raise FilterError(f"unknown filter key {key!r}{hint}; known keys: {', '.join(known_keys())}")


# ---------------------------------------------------------------------- terms


@dataclass(frozen=True)
class Wanted:
    """One value a term names, read once: its number (if it is one) and how it is written."""

    number: float | None
    written: str

    @classmethod
    def of(cls, raw: str) -> Wanted:
        value = _parse(raw)
        written = raw.strip().lower() if raw.strip().lower() in NONE_WORDS else format_value(value).casefold()
        return cls(_number(value), written)

    def equals(self, actual: Any) -> bool:
        if isinstance(actual, (set, frozenset)):
            return any(self.equals(member) for member in actual)
        if actual is None:
            return self.written in NONE_WORDS
        number = _number(actual)
        if number is not None and self.number is not None:
            return number == self.number
        return format_value(actual).casefold() == self.written


@dataclass(frozen=True)
class Term:
    """`key op value[,value...]`, or free text when key is None."""

    key: str | None
    op: str
    wanted: tuple[Wanted, ...] = ()
    text: str = ""
    ranges: tuple[tuple[float, float], ...] = ()  # op "in": inclusive number ranges (`--runs 3-9`)

    def matches(self, value_of: Callable[[str], Any], search_text: str = "") -> bool:
        if self.key is None:
            if self.text.isdigit():  # `runs 12`: the number 12 (run 12, seed=12), not digits of a sweep id
                return re.search(rf"(?<![0-9a-z]){self.text}(?![0-9a-z])", search_text) is not None
            return self.text in search_text
        actual = value_of(self.key)
        if self.op == "in":
            number = _number(actual)
            return number is not None and any(low <= number <= high for low, high in self.ranges)
        if self.op in ORDERING:
            number = _number(actual)
            return number is not None and ORDERING[self.op](number, cast(float, self.wanted[0].number))
        hit = any(w.equals(actual) for w in self.wanted)
        return hit if self.op == "=" else not hit


def make_term(key: str, op: str, values: Iterable[str], shown: str | None = None) -> Term:
    """A term from a key, an operator and the raw values (already split on commas)."""
    values = [v.strip() for v in values]
    shown = shown or f"{key}{op}{','.join(values)}"
    given, op = op, "=" if op == ":" else op
    if op not in EQUALITY and op not in ORDERING:
        raise FilterError(f"{shown!r}: unknown operator {op!r} (use : = != > >= < <=)")
    key = canonical_key(key)
    if not values or any(not v for v in values):
        raise FilterError(f"{shown!r}: give a value after {given!r}, e.g. {key}{given}VALUE")
    wanted = tuple(Wanted.of(v) for v in values)
    allowed = closed_values(key) if op in EQUALITY else None
    for value, w in zip(values, wanted):
        if allowed is not None and w.written not in allowed:
            raise FilterError(f"{shown!r}: unknown {key} {value.strip()!r}; allowed: {', '.join(allowed)}")
    if op in ORDERING:
        if len(wanted) > 1:
            raise FilterError(f"{shown!r}: a comma list goes with ':', '=' or '!=', not {op!r}")
        if wanted[0].number is None:
            raise FilterError(f"{shown!r}: {op!r} compares numbers, and {values[0]!r} is not one")
    return Term(key, op, wanted)


RUN_IDS_HELP = "run ids like 3,4,7, 3-9 or last"
_ID_LIST = re.compile(r"[0-9,-]*[0-9][0-9,-]*")  # digits, commas and dashes only
_SWEEP_PREFIX = re.compile(r"[0-9]{8}-[0-9]{6}")  # `runs 20260115-090000`: words of a sweep id, not a range


def run_id_spans(text: str, option: str = "") -> list[tuple[int, int] | None]:
    """The one run-id grammar of every command that takes run ids (`tag`, `archive`, `rm`,
    `report RUN...`, `report --runs`, a `runs` term such as 48-53): comma-separated parts, each an
    id `7`, a range `3-9` (inclusive) or `last` (None here: the caller that reads the store knows
    which run is the newest). Ranges stay ranges (`1-99999999999` is two numbers). A part that is
    empty (`1,,2`, `3,`), reversed (`9-3`) or beyond the store's integers is refused, in the same
    words whichever command reads it; `option` (`--runs`, `RUN`) starts the message."""
    from ..config import MAX_INT

    said = f"{option} {text.strip()!r}" if option else repr(text.strip())
    spans: list[tuple[int, int] | None] = []
    for part in text.split(","):
        part = part.strip()
        if part == "last":
            spans.append(None)
            continue
        if not part:
            raise FilterError(f"{said}: an empty run id between commas; expected {RUN_IDS_HELP}")
        if re.fullmatch(r"-?[0-9]+", part):  # (`-7`, `0`: numbers, refused below as run ids)
            low = high = int(part)
        elif re.fullmatch(r"[0-9]+-[0-9]+", part):
            low, high = (int(n) for n in part.split("-"))
        else:
            raise FilterError(f"{said}: {part!r} is not a run id; expected {RUN_IDS_HELP}")
        if low > high:
            raise FilterError(
                f"{said}: {low}-{high} is empty (the first id is larger than the last; write {high}-{low})"
            )
        for number in (low, high):
            if not 1 <= number <= MAX_INT:
                raise FilterError(f"{said}: run ids are whole numbers from 1 to {MAX_INT} (see `rmconsole runs`)")
        spans.append((low, high))
    return spans


def _id_term(text: str) -> Term | None:
    """A bare term written in the run-id grammar (`48-53`, `3,4,7`, `1,,2`): the runs with those
    ids. A lone number stays a word (`12` is run 12 or seed=12); so do a sweep id's words."""
    if ("-" not in text and "," not in text) or not _ID_LIST.fullmatch(text) or _SWEEP_PREFIX.match(text):
        return None
    spans = [span for span in run_id_spans(text) if span is not None]
    return Term("id", "in", ranges=tuple((float(lo), float(hi)) for lo, hi in spans))


def parse_term(text: str) -> Term:
    """One term: `KEY:V1,V2`, `KEY>NUMBER`..., run ids (`48-53`), or free text (no operator characters)."""
    text = text.strip()
    found = _TERM.fullmatch(text)
    ids = _id_term(text) if found is None else None
    if ids is not None:
        return ids
    if found is None:
        if any(c in text for c in ":=<>!"):
            raise FilterError(f"cannot read the filter term {text!r}: expected KEY:VALUE, KEY>NUMBER or plain words")
        return Term(None, "~", text=text.lower())
    return make_term(found["key"], found["op"], _VALUE.findall(found["value"]) or [""], shown=text)


@dataclass(frozen=True)
class RunFilter:
    """Terms that must all hold. Empty: every run passes."""

    terms: tuple[Term, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.terms)

    def __and__(self, other: RunFilter) -> RunFilter:
        return RunFilter(self.terms + other.terms)

    def names(self, key: str) -> bool:
        """Whether a term of the filter is about `key` (canonical spelling)."""
        return any(t.key == key for t in self.terms)

    def matches(self, value_of: Callable[[str], Any], search_text: str = "") -> bool:
        """Whether a run passes, its values given by `value_of(key)` (keys as canonical_key spells them)."""
        return all(t.matches(value_of, search_text) for t in self.terms)

    def accepts(self, record: RunRecord) -> bool:
        text = record.search_text() if any(t.key is None for t in self.terms) else ""
        return self.matches(lambda key: record_value(record, key), text)

    def select(self, records: Iterable[RunRecord]) -> list[RunRecord]:
        return [r for r in records if self.accepts(r)] if self.terms else list(records)


def parse_run_filter(text: str | Iterable[str] | None) -> RunFilter:
    """The filter a user typed (a string, or the words of a command line), or FilterError."""
    if text is None:
        return RunFilter()
    words = text.split() if isinstance(text, str) else [w for part in text for w in part.split()]
    return RunFilter(tuple(parse_term(w) for w in words))


def within(key: str, ranges: Iterable[tuple[float, float]]) -> RunFilter:
    """A one-term filter: the run's number for `key` lies in one of the inclusive ranges. The
    ranges stay ranges (`--runs 1-99999999999` is two numbers, not a set of ids)."""
    return RunFilter((Term(canonical_key(key), "in", ranges=tuple((float(lo), float(hi)) for lo, hi in ranges)),))


def where(key: str, values: Iterable[str], op: str = "=") -> RunFilter:
    """A one-term filter built from a command-line option (`--status failed,stopped`)."""
    return RunFilter((make_term(key, op, list(values)),))
