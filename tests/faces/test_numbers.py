"""One way of showing a number in every face: rmconsole/numbers.py, used by the CLI, the TUI and
the reports, so that a value not measured (None) or not a number (NaN) reads "—" everywhere."""

from __future__ import annotations

import math

from rmconsole import numbers


def test_fmt_and_duration() -> None:
    assert numbers.fmt(86.0) == "86.00" and numbers.fmt(86.04, 1) == "86.0" and numbers.fmt(3, 0) == "3"
    assert numbers.fmt(None) == numbers.fmt(math.nan) == numbers.fmt(float("nan"), 1) == "—"
    assert numbers.fmt(math.inf) == "inf" and numbers.fmt(-math.inf, 1) == "-inf"  # seen, not hidden
    assert numbers.duration(3723.9) == "1:02:03" and numbers.duration(0) == "0:00:00"
    assert numbers.duration(None) == numbers.duration(math.nan) == numbers.duration(math.inf) == "—"


def test_every_face_shows_nan_as_not_measured() -> None:
    """The CLI's `show` metric line, the TUI's accuracy cells, the report's diff rows and the
    task-free anytime lines: NaN is "—" in each (the CLI printed "nan" before they shared one rule)."""
    from rmconsole.cli import printing
    from rmconsole.report import anytime, run_diff
    from rmconsole.tui import render

    detail = {"metrics": {"A_last": math.nan, "partial": False}, "progress": {"n_tasks": 5}}
    assert printing._metric(detail, "A_last", "A") == "—"
    assert render.fmt(math.nan, 1) == "—"
    run = {"id": 1, "config": {}, "metrics": {}, "tasks": [{"task": 0, "accuracy": math.nan}]}
    assert run_diff(run, {**run, "id": 2})["tasks"][0][1:3] == ("—", "—")
    lines = anytime.anytime_lines(
        {
            "config": {"stream": "iblurry", "eval_period": 100},
            "anytime": [],
            "metrics": {"train_seconds": math.nan, "eval_seconds": 1.0},
        }
    )
    assert any(line.startswith("compute: train — s") for line in lines), lines
