"""Which runs a command means: `3 4 7`, `3-9`, `last`, `--runs`, `--where`, run filters; and the
quiet reaping of dead runs that a read-only command does first."""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from .. import runner, store
from ..config import ConfigError, shorten
from ..store.filters import RunFilter, run_id_spans, where, within
from .common import check_run_id, err_console


def _run_id(text: str) -> int:
    """A run as typed: its id, or `last` (the newest run)."""
    text = text.strip()
    if text == "last":
        return _newest()
    if not text.lstrip("-").isdigit() or text.count("-") > 1 or text.startswith("--"):
        raise ConfigError(f"run {shorten(text)!r}: expected a run id (see `rmconsole runs`) or 'last'")
    return check_run_id(int(text))


def _newest() -> int:
    try:
        return store.newest_run_id()
    except store.UnknownRun:
        raise ConfigError("last: there is no run in the store yet") from None


def _spans(text: str, option: str) -> list[tuple[int, int]]:
    """`3,4`, `3-9`, `last` read by the one run-id grammar (store.filters.run_id_spans), `last` made an id."""
    return [span if span is not None else (_newest(),) * 2 for span in run_id_spans(text, option)]


def _chosen_runs(items: list[str], where_: str | None = None, option: str = "RUN") -> list[int]:
    """Run ids from `3 4 7`, `3-9`, `3,4`, `last`, and/or a `--where` run filter; every id must exist.

    The ids are read by the grammar every command shares (store.filters.run_id_spans: `9-3`,
    `1,,2` are refused). A range is checked before it is spelled out: `1-99999999999` costs what
    the store holds, not a list of 10^11 ids (its first id that is not stored is the error)."""
    chosen: list[int | range] = []
    for item in items:
        if item.strip():
            chosen.extend(range(low, high + 1) for low, high in _spans(item, option))
    if where_ is not None:
        if not where_.strip():  # (an unset shell variable: `--where "$F"` would mean every run)
            raise ConfigError(
                "--where '': give a run filter, e.g. method:rm tag:draft; an empty one would match every run"
            )
        chosen.extend(r.id for r in store.find_runs(where_, archived=True))
    if not chosen:
        raise ConfigError(
            f"give the runs ({option}: ids like 3 4 7, 3-9 or last"
            + (", or --where FILTER)" if where_ is None else "); --where matched none")
        )
    known = set(store.run_statuses())
    for ids in chosen:
        # (a range longer than the store has runs holds a missing id within its first len(known) + 1)
        missing = next((i for i in ([ids] if isinstance(ids, int) else ids) if i not in known), None)
        if missing is not None:
            raise store.UnknownRun(missing)
    return list(dict.fromkeys(i for ids in chosen for i in ([ids] if isinstance(ids, int) else ids)))


def _listed(option: str, text: str | None) -> list[str] | None:
    """A comma list option (`--status`, `--preset`, `report --rows/--cols/--metrics`): its values
    in order, each once (`--metrics A_last,A_last` is one column, as `tag 3 3` is one run)."""
    if text is None:
        return None
    values = list(dict.fromkeys(v.strip() for v in text.split(",") if v.strip()))
    if not values:
        raise ConfigError(f"{option} {text!r}: expected one or more comma-separated values")
    return values


def _run_id_ranges(text: str) -> list[tuple[int, int]]:
    """`--runs 3,4,7` or `3-9` (or both, or last) -> [(3, 3), (4, 4), (7, 7)] / [(3, 9)]: ranges
    stay ranges, so `1-99999999999` costs nothing. The same grammar as `tag 3-9` (run_id_spans)."""
    return _spans(text, "--runs")


def status_filter(text: str | None) -> RunFilter:
    """`--status finished` or `--status running,queued` (any of them), read alike by `runs`,
    `report` and `export`; an unknown status names the allowed ones. None: no condition."""
    statuses = _listed("--status", text)
    for value in statuses or []:
        if value not in store.STATUSES:
            raise ConfigError(f"--status {shorten(value)!r}: allowed: {', '.join(store.STATUSES)}")
    return where("status", statuses) if statuses else RunFilter()


def select_runs(
    sweep_: str | None = None,
    preset: str | None = None,
    dataset: str | None = None,
    method: str | None = None,
    status: str | None = None,
    run_ids: str | None = None,
    where_: list[str] | None = None,
    filters: list[str] | None = None,
    archived: bool = False,
) -> list[store.RunRecord]:
    """The stored runs that pass every option and filter term (comma-separated values mean any of them)."""
    run_filter = store.parse_run_filter(filters) & status_filter(status)
    listed = {
        "preset": _listed("--preset", preset),
        "dataset": _listed("--dataset", dataset),
        "method": _listed("--method", method),
    }
    for key, values in listed.items():
        if values is not None:
            run_filter &= where(key, values)
    if run_ids is not None:
        run_filter &= within("id", _run_id_ranges(run_ids))
    for pair in where_ or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--where {shorten(pair)!r}: expected KEY=VALUE or KEY=V1,V2")
        run_filter &= where(key.strip(), runner.split_values(raw.strip()))
    reap_quietly()
    if sweep_ is not None:
        run_filter &= where("sweep", [runner.resolve_sweep_id(sweep_)])
    return store.find_runs(run_filter, archived=True if archived or run_ids is not None else None)


def reap_quietly(runs: list[Any] | None = None) -> list[int]:
    """Mark dead runs failed (runner.reap_dead) for a command that only reads: each one it marks
    is said on stderr; if the store's write lock is busy, the look is skipped with a note
    (a read never waits on a writer)."""
    try:
        dead = runner.reap_dead(runs, busy_s=2.0)
    except store.StoreLocked as err:
        err_console.print(
            f"note: dead runs were not checked this time: {escape(str(err))}", highlight=False, soft_wrap=True
        )
        return []
    for run_id in dead:
        run = store.get_run(run_id)
        err_console.print(
            f"run {run_id} marked failed: {escape(shorten(run.error or '', 300))}", highlight=False, soft_wrap=True
        )
    return dead
