"""Reports: stored runs -> tables (mean ± std over seeds), figures and two-run differences.

Pure: the input is runs as `RunRecord.to_json()` / `store.run_detail` give them (dicts), the
output is text, a Rich table or a figure file; the CLI chooses the runs. The parts:
tables.py (building a `Report`: rows, column groups, cells; titles, cell text, caption),
formats.py (markdown, CSV, LaTeX, JSON, Rich), figures.py (matplotlib), files.py (where a
report file may be written, and writing it), diff.py (two runs side by side), anytime.py
(task-free runs: `show`'s anytime lines, accuracy against samples seen).
This face re-exports what the CLI, the exporters and the tests use.
"""

from __future__ import annotations

from ..store.filters import format_value
from .diff import run_diff
from .figures import (
    Curve,
    accuracy_curves,
    epoch_series,
    memory_by_task,
    plot_accuracy,
    plot_epochs,
    plot_memory,
)
from .files import OutputError, check_output, write_output
from .formats import (
    FORMATS,
    latex_escape,
    render,
    rich_table,
    to_csv,
    to_dict,
    to_json,
    to_latex,
    to_markdown,
)
from .tables import (
    INCOMPLETE,
    RUN_FIELDS,
    RUNTIME_KEYS,
    SETTING_KEYS,
    Cell,
    Report,
    ReportError,
    Stat,
    build_report,
    caption,
    cell_text,
    col_title,
    key_value,
    metric_title,
    row_title,
    select,
)

__all__ = [
    "FORMATS",
    "INCOMPLETE",
    "RUNTIME_KEYS",
    "RUN_FIELDS",
    "SETTING_KEYS",
    "Cell",
    "Curve",
    "OutputError",
    "Report",
    "ReportError",
    "Stat",
    "accuracy_curves",
    "build_report",
    "caption",
    "cell_text",
    "check_output",
    "col_title",
    "epoch_series",
    "format_value",
    "key_value",
    "latex_escape",
    "memory_by_task",
    "metric_title",
    "plot_accuracy",
    "plot_epochs",
    "plot_memory",
    "render",
    "rich_table",
    "row_title",
    "run_diff",
    "select",
    "to_csv",
    "to_dict",
    "to_json",
    "to_latex",
    "to_markdown",
    "write_output",
]
