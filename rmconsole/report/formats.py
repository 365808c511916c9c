"""A `Report` as text: markdown, CSV, LaTeX, JSON, and the Rich table of the terminal."""

from __future__ import annotations

import csv
import io
from typing import Any

from .. import metric_registry
from ..sanitize import json_text
from ..store.filters import format_value
from .tables import (
    Report,
    ReportError,
    _header,
    _metric_columns,
    _paper,
    caption,
    cell_text,
    col_title,
    metric_title,
)

FORMATS = ("table", "md", "csv", "latex", "json")


def to_markdown(report: Report, digits: int = 2) -> str:
    heads = list(report.label_keys)
    for col, metric in _header(report):
        title = metric_title(metric)
        heads.append(f"{col_title(report, col)} {title}".strip() if report.col_keys else title)
    lines = [
        "| " + " | ".join(heads) + " |",
        "|" + "|".join([":--"] * len(report.label_keys) + ["--:"] * (len(heads) - len(report.label_keys))) + "|",
    ]
    for i, labels in enumerate(report.row_labels):
        values = [format_value(labels[k]) for k in report.label_keys]
        for j in range(len(report.cols)):
            values += [cell_text(report, report.cell(i, j), m, digits) for m in _metric_columns(report)]
        lines.append("| " + " | ".join(v.replace("|", "\\|") for v in values) + " |")
    return "\n".join(lines) + f"\n\nTable: {caption(report)}\n"


def _csv_value(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def to_csv(report: Report) -> str:
    """One line per table row; per cell: mean, std, n (seeds with a value) and complete."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    heads = list(report.label_keys)
    for col in report.cols:
        for metric in report.metrics:
            prefix = f"{col_title(report, col)} {metric}".strip() if report.col_keys else metric
            heads += [f"{prefix} mean", f"{prefix} std", f"{prefix} n", f"{prefix} complete"]
            if report.with_paper and _paper(metric):
                heads += [
                    f"{prefix} paper mean",
                    f"{prefix} paper std",
                    f"{prefix} paper source",
                    f"{prefix} paper protocol",
                ]
    writer.writerow(heads)
    for i, labels in enumerate(report.row_labels):
        values = [format_value(labels[k]) for k in report.label_keys]
        for j in range(len(report.cols)):
            cell = report.cell(i, j)
            for metric in report.metrics:
                with_paper = report.with_paper and _paper(metric)
                if cell is None:
                    values += ["", "", "0", "false"] + (["", "", "", ""] if with_paper else [])
                    continue
                stat = cell.stats[metric]
                values += [_csv_value(stat.mean), _csv_value(stat.std), str(stat.n), str(cell.complete).lower()]
                if with_paper:
                    figure = cell.paper.get(metric)
                    differs = cell.paper_differs.get(metric)
                    values += (
                        ["", "", "", ""]
                        if figure is None
                        else [
                            _csv_value(figure.mean),
                            _csv_value(figure.std),
                            figure.source,
                            "same" if differs is None else differs.differs_text(),
                        ]
                    )
        writer.writerow(values)
    return out.getvalue()


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def to_dict(report: Report) -> dict[str, Any]:
    """The JSON shape: every cell with its per-run values, so numbers can be traced to runs."""
    rows = []
    for i, labels in enumerate(report.row_labels):
        cells = []
        for j, col in enumerate(report.cols):
            cell = report.cell(i, j)
            if cell is None:
                continue
            cells.append(
                {
                    "col": {k: _jsonable(v) for k, v in zip(report.col_keys, col)},
                    "col_setting": {k: _jsonable(v) for k, v in report.col_info[j].items()},
                    "runs": cell.runs,
                    "used_runs": cell.used,
                    "seeds": cell.seeds,
                    "unfinished_runs": cell.unfinished,
                    "complete": cell.complete,
                    "expected_seeds": cell.expected,
                    "metrics": {
                        m: {
                            "mean": s.mean,
                            "std": s.std,
                            "n": s.n,
                            "values": [{"run": r, "seed": seed, "value": v} for r, seed, v in s.values],
                        }
                        for m, s in cell.stats.items()
                    },
                    "i_last_joint_differs": {k: sorted(v) for k, v in cell.i_last_differs.items()},
                    "paper": {
                        m: {
                            "mean": f.mean,
                            "std": f.std,
                            "topk": f.topk,
                            "source": f.source,
                            "note": f.note,
                            "protocol_matches": m not in cell.paper_differs,
                            "protocol_differs": [d.text() for d in cell.paper_differs[m].differences]
                            if m in cell.paper_differs
                            else [],
                        }
                        for m, f in cell.paper.items()
                    },
                }
            )
        rows.append({"row": {k: _jsonable(labels[k]) for k in report.label_keys}, "cells": cells})
    return {
        "rows_by": report.row_keys,
        "rows_also_by": report.auto_keys,
        "cols_by": report.col_keys,
        "cols_also_differ_in": report.col_info_keys,
        "metrics": report.metrics,
        "seeds": report.seeds,
        "n_runs": report.n_runs,
        "setting": {k: _jsonable(v) for k, v in report.constants.items()},
        "std": "sample (ddof=1) over seeds; finished runs only",
        "caption": caption(report),
        "rows": rows,
    }


def to_json(report: Report) -> str:
    return json_text(to_dict(report), indent=2) + "\n"


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "—": "--",
    "≠": r"$\neq$",
}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def to_latex(report: Report, digits: int = 2) -> str:
    """A booktabs tabular, cells as `mean $\\pm$ std`, column groups under \\cmidrule'd headers."""
    n_labels = len(report.label_keys)
    n_metrics = len(_metric_columns(report))
    spec = "@{}" + "l" * n_labels + "r" * (n_metrics * len(report.cols)) + "@{}"
    note = latex_escape(caption(report)).replace("±", "$\\pm$")
    lines = [
        f"% rmconsole report: {note}",
        "% needs \\usepackage{booktabs}",
        f"\\begin{{tabular}}{{{spec}}}",
        "\\toprule",
    ]
    if report.col_keys:
        groups = [f"\\multicolumn{{{n_metrics}}}{{c}}{{{latex_escape(col_title(report, c))}}}" for c in report.cols]
        lines.append(" & ".join([""] * n_labels + groups) + " \\\\")
        rules = []
        for j in range(len(report.cols)):
            first = n_labels + j * n_metrics + 1
            rules.append(f"\\cmidrule(lr){{{first}-{first + n_metrics - 1}}}")
        lines.append(" ".join(rules))
    heads = [latex_escape(k) for k in report.label_keys]
    for _, metric in _header(report):
        heads.append(
            latex_escape(metric_title(metric, arrows=False)).replace("Δ", "$\\Delta$")
            + (
                ""
                if ":" in metric
                else " ($\\downarrow$)"
                if metric_registry.metric(metric).lower_is_better
                else " ($\\uparrow$)"
            )
        )
    lines.append(" & ".join(heads) + " \\\\")
    lines.append("\\midrule")
    for i, labels in enumerate(report.row_labels):
        values = [latex_escape(format_value(labels[k])) for k in report.label_keys]
        for j, _ in enumerate(report.cols):
            for metric in _metric_columns(report):
                text = cell_text(report, report.cell(i, j), metric, digits, pm="$\\pm$", mark="$^\\dagger$")
                values.append(text.replace("—", "--"))
        lines.append(" & ".join(values) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(lines) + "\n"


def rich_table(report: Report, digits: int = 2, width: int | None = None) -> Any:
    """The terminal form: a Rich table with the caption underneath (as wide as the terminal).
    Given the terminal's `width`, a table wider than that (its cells then shown cut, `56…`) says
    so under the caption and names the form that prints every figure whole."""
    import io

    from rich.console import Console, Group
    from rich.table import Table
    from rich.text import Text

    table = Table()
    for key in report.label_keys:
        table.add_column(key)
    for col, metric in _header(report):
        title = metric_title(metric)
        table.add_column(f"{col_title(report, col)}\n{title}" if report.col_keys else title, justify="right")
    written = [str(column.header) for column in table.columns]  # what the table holds, before any cut
    for i, labels in enumerate(report.row_labels):
        values = [format_value(labels[k]) for k in report.label_keys]
        for j, _ in enumerate(report.cols):
            for metric in _metric_columns(report):
                text = cell_text(report, report.cell(i, j), metric, digits)
                cell = report.cell(i, j)
                values.append(f"[yellow]{text}[/]" if cell is not None and not cell.complete else text)
        table.add_row(*values)
        written.extend(values)
    parts: list[Any] = [table, Text(caption(report), style="dim")]
    if width is not None:  # render it as the terminal will: a `…` no cell holds is a cut one
        rendered = Console(file=io.StringIO(), width=width, record=True)
        rendered.print(table)
        if rendered.export_text().count("…") > "".join(written).count("…"):
            parts.append(
                Text(
                    f"cells ending in … are cut to fit {width} columns: --format md (or csv, latex, "
                    "json) prints every figure whole",
                    style="yellow",
                )
            )
    return Group(*parts)


def render(report: Report, fmt: str, digits: int = 2) -> str:
    """Text in one of the file formats (md, csv, latex, json)."""
    if fmt == "md":
        return to_markdown(report, digits)
    if fmt == "csv":
        return to_csv(report)
    if fmt == "latex":
        return to_latex(report, digits)
    if fmt == "json":
        return to_json(report)
    raise ReportError(f"--format {fmt!r}: allowed: {', '.join(FORMATS)}")
