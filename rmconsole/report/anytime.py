"""Reports of task-free runs (the follow-up's protocol): the anytime lines of `rmconsole show`
and the follow-up's figure, accuracy against samples seen (`rmconsole report --plot`).

Pure, like the rest of the report package: runs come in as `show --json` / `runs --json` dicts and anytime rows as
(samples, accuracy) pairs; out come text lines or a PNG.
"""

from __future__ import annotations

import csv
import math
import textwrap
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from .. import metric_registry
from ..cl import protocols
from ..numbers import fmt
from ..store.filters import format_value
from .figures import _pyplot, _save
from .tables import Report, ReportError, col_title, row_title


def is_task_free(run: dict[str, Any]) -> bool:
    return protocols.is_task_free(run.get("config") or {})


def anytime_lines(detail: dict[str, Any]) -> list[str]:
    """What `show` prints for a task-free run under its metrics line: A_auc, where classes first
    appeared, and the compute-aware numbers. Nothing for a run of the RM paper's protocol."""
    if not is_task_free(detail):
        return []
    cfg, m = detail.get("config") or {}, detail.get("metrics") or {}
    points = detail.get("anytime") or []
    # the protocol's own metrics (A_auc: the catalogue's defaults of task-free runs only) and their note
    # (val_A_auc, listed only when measured, is left out of a run without validation, its note with it)
    own = [
        x
        for x in metric_registry.catalogue()
        if x.default_for == ("task-free",) and x.family == "" and not (x.when_measured and m.get(x.name) is None)
    ]
    figures = "  ".join(f"{x.name} {x.text(m.get(x.name))}" for x in own)
    lines = [
        f"{figures} over {len(points)} anytime evaluations (every {cfg.get('eval_period')} streamed samples)"
        + "".join(f"; {x.note}" for x in own if x.note)
    ]
    names, order = detail.get("class_names") or [], detail.get("class_order") or []

    def name(label: int) -> str:
        return str(names[order[label]]) if order and names and label < len(order) else str(label)

    arrivals = []
    for task in detail.get("tasks") or []:
        first = task.get("first_appearances") or []
        if first:
            shown = ", ".join(f"{name(label)}@{pos + 1}" for label, pos in first[:4])
            more = f" +{len(first) - 4}" if len(first) > 4 else ""
            arrivals.append(f"T{task['task'] + 1}: {len(first)} new ({shown}{more})")
    if arrivals:
        lines.append("first appearances (class@position in its task): " + "; ".join(arrivals))
    fig = follow_up_figure(cfg)
    if fig is not None:
        published = f"{fig['mean']:.2f}" + (f" ± {fig['std']:.2f}" if fig["std"] is not None else "")
        diff = f", this run {m['A_auc'] - fig['mean']:+.2f}" if m.get("A_auc") is not None else ""
        lines.append(
            f"the follow-up's A_auc for this setting: {published} ({fig['row']}, {fig['column']}; "
            f"{fig['source']}){diff}"
        )
    train, evaluation = m.get("train_seconds"), m.get("eval_seconds")
    if train is not None or evaluation is not None:
        share = (100 * evaluation / (train + evaluation)) if train and evaluation is not None else None
        budget = cfg.get("compute_budget")
        skipped = m.get("samples_skipped")
        lines.append(
            f"compute: train {fmt(train, 1)} s ({fmt(m.get('train_samples_per_s'), 1)} samples/s, "
            f"{fmt(m.get('image_passes'), 0)} image passes), evaluation {fmt(evaluation, 1)} s "
            f"({fmt(m.get('evaluations_per_s'), 1)} evaluations/s, {fmt(share, 1)}% of the two)"
            + (f"; compute_budget {budget:g} passes/sample: {skipped} samples skipped" if budget else "")
        )
    return lines


@lru_cache(maxsize=1)
def follow_up_figures() -> tuple[dict[str, Any], ...]:
    """The follow-up's published A_auc (i-Blurry README, PROTOCOL §9.7) as data: paper_followup.csv,
    one line per printed number with the rmconsole setting it belongs to."""
    text = resources.files("rmconsole").joinpath("paper_followup.csv").read_text(encoding="utf-8")
    out = []
    for row in csv.DictReader(text.splitlines()):
        out.append(
            {
                **row,
                "memory_size": int(row["memory_size"]),
                "n_tasks": int(row["n_tasks"]),
                "disjoint_classes": int(row["disjoint_classes"]),
                "blurry": int(row["blurry"]),
                "topk": int(row["topk"]),
                "mean": float(row["mean"]),
                "std": float(row["std"]) if row["std"] else None,
                "augment": tuple(a for a in row["augment"].split("+") if a),
            }
        )
    return tuple(out)


def follow_up_figure(config: dict[str, Any], metric: str = "A_auc") -> dict[str, Any] | None:
    """The follow-up's published figure for a run's setting (dataset, method, K, tasks, N, M,
    augmentation; for RM its port), or None. A run on our smaller images or other K has none."""
    for fig in follow_up_figures():
        if fig["metric"] != metric or fig["stream"] != config.get("stream"):
            continue
        same = all(
            config.get(k) == fig[k]
            for k in ("dataset", "method", "memory_size", "n_tasks", "disjoint_classes", "blurry")
        )
        same = same and tuple(config.get("augment") or ()) == fig["augment"]
        if fig["method"] == "rm":
            same = same and config.get("rm_variant") == fig["rm_variant"]
        if same:
            return fig
    return None


def has_anytime(runs: Sequence[dict[str, Any]]) -> bool:
    return any(is_task_free(r) for r in runs)


def mean_curve(series: list[list[tuple[int, float]]]) -> tuple[list[int], list[float], list[float]]:
    """Mean and sample std over seeds at the sample counts every seed was evaluated at."""
    if not series:
        return [], [], []
    common = sorted(set.intersection(*[{s for s, _ in curve} for curve in series]))
    by = [dict(curve) for curve in series]
    means, stds = [], []
    for x in common:
        values = [b[x] for b in by]
        mu = sum(values) / len(values)
        means.append(mu)
        stds.append(math.sqrt(sum((v - mu) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0)
    return common, means, stds


def plot_anytime(report: Report, curves: dict[int, list[tuple[int, float]]], path: Path | str) -> Path:
    """The follow-up's figure: accuracy on the classes seen so far against samples seen, one line
    per row (method) with a ±std band over seeds, one panel per column group; A_auc in the legend."""
    plt = _pyplot()
    panels: dict[int, list[tuple[int, list[int], list[float], list[float], int, float | None]]] = {}
    for (i, j), cell in sorted(report.cells.items()):
        series = [curves[r] for r in cell.used if curves.get(r)]
        if not series:
            continue
        xs, mean, std = mean_curve(series)
        auc = cell.stats["A_auc"].mean if "A_auc" in cell.stats else None
        panels.setdefault(j, []).append((i, xs, mean, std, len(series), auc))
    if not panels:
        raise ReportError("--plot: no finished task-free run with anytime evaluations among the selected runs")
    ncols = min(len(panels), 2)
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(max(6.4, 6.0 * ncols), 4.4 * nrows), squeeze=False, sharey=True)
    colours = plt.get_cmap("tab10")
    for ax, j in zip(axes.flat, sorted(panels)):
        for i, xs, mean, std, n, auc in panels[j]:
            colour = colours(i % 10)
            label = f"{row_title(report, i)} (A_auc {auc:.1f}, n={n})" if auc is not None else row_title(report, i)
            ax.plot(xs, mean, color=colour, linestyle=("-", "--", "-.", ":")[i % 4], linewidth=1.2, label=label)
            ax.fill_between(
                xs,
                [m - s for m, s in zip(mean, std)],
                [m + s for m, s in zip(mean, std)],
                color=colour,
                alpha=0.15,
                linewidth=0,
            )
        ax.set_xlabel("samples seen")
        ax.set_title(col_title(report, report.cols[j]) if report.col_keys else "")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("accuracy on seen classes (%)")
    setting = ", ".join(f"{k}={format_value(v)}" for k, v in report.constants.items())
    lines = textwrap.wrap(setting, width=int(75 * fig.get_figwidth() / 6.4)) + [
        "anytime accuracy, mean over seeds, band = ±1 std"
    ]
    fig.suptitle("\n".join(lines), fontsize=10)
    fig.tight_layout()
    out = _save(fig, Path(path))
    plt.close(fig)
    return out
