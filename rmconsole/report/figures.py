"""A `Report` or a run as a figure (matplotlib, imported only when drawing): accuracy after each
task, the epochs inside each task, the memory's composition."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..store.filters import format_value
from .files import write_output
from .tables import Report, ReportError, col_title, row_title


@dataclass
class Curve:
    """Accuracy after each task of one cell: mean and std over its finished seeds."""

    label: str
    mean: list[float]
    std: list[float]
    n: int


def accuracy_curves(report: Report, details: dict[int, dict[str, Any]]) -> dict[int, list[Curve]]:
    """Per column group, one curve per row from the runs' per-task accuracies (`show --json`'s
    tasks[].accuracy): mean over the cell's finished seeds and the sample std (0 with one seed)."""
    import numpy as np

    out: dict[int, list[Curve]] = {}
    for (i, j), cell in sorted(report.cells.items()):
        series = []
        for run_id in cell.used:
            accs = [t.get("accuracy") for t in details[run_id].get("tasks", [])]
            series.append([np.nan if a is None else float(a) for a in accs])
        if not series:
            continue
        width = max(len(s) for s in series)
        grid = np.full((len(series), width), np.nan)
        for k, s in enumerate(series):
            grid[k, : len(s)] = s
        counts = (~np.isnan(grid)).sum(axis=0)
        mean = np.where(counts > 0, np.nansum(grid, axis=0) / np.maximum(counts, 1), np.nan)
        centred = np.where(np.isnan(grid), 0.0, grid - mean)
        std = np.where(counts > 1, np.sqrt((centred**2).sum(axis=0) / np.maximum(counts - 1, 1)), 0.0)
        out.setdefault(j, []).append(Curve(row_title(report, i), mean.tolist(), std.tolist(), len(series)))
    return out


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path, option: str = "--plot") -> Path:
    fmt = Path(path).suffix.lower().lstrip(".") or "png"
    try:
        return write_output(path, lambda f: fig.savefig(f, format=fmt, dpi=150), option)
    finally:
        _pyplot().close(fig)


def plot_accuracy(report: Report, details: dict[int, dict[str, Any]], path: Path | str) -> Path:
    """Accuracy after each task per row (method), mean over seeds with a ±std band, one panel per
    column group: the paper's Figure 4. A single-task run (joint) is drawn as a dashed level."""
    curves = accuracy_curves(report, details)
    if not curves:
        raise ReportError("--plot: no finished run among the selected runs, nothing to draw")
    plt = _pyplot()
    panels = [j for j in range(len(report.cols)) if j in curves]
    ncols = min(len(panels), 3)
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(max(6.4, 5.2 * ncols), 4.4 * nrows), squeeze=False, sharey=True)
    colours = plt.get_cmap("tab10")
    labels_order = [row_title(report, i) for i in range(len(report.rows))]
    for ax, j in zip(axes.flat, panels):
        longest = max(len(c.mean) for c in curves[j])
        for curve in curves[j]:
            k = labels_order.index(curve.label)  # colour, marker and dash differ, so equal curves stay visible
            colour = colours(k % 10)
            label = f"{curve.label} (n={curve.n})"
            if len(curve.mean) == 1 and longest > 1:
                ax.axhline(curve.mean[0], color=colour, linestyle="--", label=f"{label}, one task")
                continue
            x = list(range(1, len(curve.mean) + 1))
            ax.plot(
                x,
                curve.mean,
                marker="osD^v<>ph*"[k % 10],
                linestyle=("-", "--", "-.", ":")[k % 4],
                color=colour,
                label=label,
            )
            low = [m - s for m, s in zip(curve.mean, curve.std)]
            high = [m + s for m, s in zip(curve.mean, curve.std)]
            ax.fill_between(x, low, high, color=colour, alpha=0.2, linewidth=0)
        ax.set_xticks(range(1, longest + 1))
        ax.set_xlabel("task")
        ax.set_title(col_title(report, report.cols[j]) if report.col_keys else "")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("accuracy after the task (%)")
    setting = ", ".join(f"{k}={format_value(v)}" for k, v in report.constants.items())
    lines = textwrap.wrap(setting, width=int(75 * fig.get_figwidth() / 6.4)) + ["mean over seeds, band = ±1 std"]
    fig.suptitle("\n".join(lines), fontsize=10)
    fig.tight_layout()
    out = _save(fig, Path(path))
    plt.close(fig)
    return out


def epoch_series(detail: dict[str, Any]) -> dict[str, Any]:
    """A run's epoch rows laid end to end: x = epochs trained so far in the run, with the
    loss, lr and test accuracy of each, and where each task starts (`show --json`'s epochs)."""
    xs, loss, lr, test = [], [], [], []
    starts: dict[int, int] = {}
    for i, e in enumerate(detail.get("epochs") or []):
        starts.setdefault(e["task"], i)
        xs.append(i)
        loss.append(math.nan if e["loss"] is None else e["loss"])
        lr.append(e["lr"])
        test.append(math.nan if e.get("test_accuracy") is None else e["test_accuracy"])
    return {"x": xs, "loss": loss, "lr": lr, "test": test, "task_starts": starts}


def plot_epochs(details: dict[int, dict[str, Any]], path: Path | str) -> Path:
    """Training loss and learning rate of every epoch of each run, tasks end to end (dotted
    lines where a task starts); test accuracy too when the runs recorded it per epoch."""
    series = {run_id: epoch_series(d) for run_id, d in details.items()}
    series = {run_id: s for run_id, s in series.items() if s["x"]}
    if not series:
        raise ReportError(
            "--plot-epochs: none of the selected runs has epoch rows (runs from before they were "
            "recorded, or not started)"
        )
    has_test = any(not all(math.isnan(v) for v in s["test"]) for s in series.values())
    plt = _pyplot()
    n_panels = 3 if has_test else 2
    fig, axes = plt.subplots(n_panels, 1, figsize=(9, 2.6 * n_panels + 0.6), sharex=True, squeeze=False)
    axes = axes[:, 0]
    colours = plt.get_cmap("tab10")
    for k, (run_id, s) in enumerate(series.items()):
        d = details[run_id]
        label = f"#{run_id} {d.get('name') or d.get('method')}"
        if (d.get("metrics") or {}).get("partial"):
            label += f" (partial {d['metrics']['tasks_done']}/{d['progress']['n_tasks']})"
        axes[0].plot(s["x"], s["loss"], color=colours(k % 10), linewidth=1, label=label)
        axes[1].plot(s["x"], s["lr"], color=colours(k % 10), linewidth=1)
        if has_test:
            axes[2].plot(s["x"], s["test"], color=colours(k % 10), linewidth=1, marker=".", markersize=2)
        if k == 0:
            for task, start in s["task_starts"].items():
                for ax in axes:
                    ax.axvline(start, color="grey", linestyle=":", linewidth=0.8)
                axes[0].annotate(
                    f"T{task + 1}",
                    (start, 1),
                    xycoords=("data", "axes fraction"),
                    fontsize=7,
                    va="top",
                    ha="left",
                    color="grey",
                )
    axes[0].set_ylabel("training loss")
    axes[0].set_yscale("log")
    axes[1].set_ylabel("learning rate")
    if has_test:
        axes[2].set_ylabel("test accuracy (%)\n(test-set, per epoch)")
    axes[-1].set_xlabel("epoch (tasks end to end: the stream pass and each memory epoch)")
    axes[0].legend(fontsize=8)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle("inside each task: mean training loss and learning rate per epoch", fontsize=10)
    fig.tight_layout()
    out = _save(fig, Path(path), "--plot-epochs")
    plt.close(fig)
    return out


def memory_by_task(detail: dict[str, Any]) -> list[dict[str, Any]]:
    """The last memory snapshot of each task, in task order."""
    last: dict[int, dict[str, Any]] = {}
    for snapshot in detail.get("memory", []):
        last[snapshot["task"]] = snapshot
    return [last[t] for t in sorted(last)]


def plot_memory(detail: dict[str, Any], path: Path | str) -> Path:
    """The memory's class histogram after each task of one run (`show --json`'s memory), classes in
    stream order and coloured by the task whose major classes they are."""
    snapshots = memory_by_task(detail)
    if not snapshots:
        raise ReportError(f"--memory-plot: run {detail['id']} has no memory snapshot yet")
    plt = _pyplot()
    n_classes = len(snapshots[0]["histogram"])
    order = detail.get("class_order") or list(range(n_classes))
    names = detail.get("class_names") or [str(c) for c in range(n_classes)]
    class_names = [
        str(names[order[c]]) if c < len(order) and order[c] < len(names) else str(c) for c in range(n_classes)
    ]
    owner = [0] * n_classes
    for task in detail.get("tasks", []):
        for c in task["major_classes"]:
            if c < n_classes:
                owner[c] = task["task"]
    colours = plt.get_cmap("tab10")
    cfg = detail.get("config") or {}
    title = (
        f"run {detail['id']}: memory composition after each task — {detail.get('method')} on "
        f"{detail.get('dataset')}, K={cfg.get('memory_size')}, seed {detail.get('seed')}"
    )
    if n_classes <= 20:
        ncols = min(len(snapshots), 5)
        nrows = math.ceil(len(snapshots) / ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(3.2 * ncols, 2.9 * nrows + 0.6), squeeze=False, sharey=True)
        for ax, snap in zip(axes.flat, snapshots):
            ax.bar(range(n_classes), snap["histogram"], color=[colours(owner[c] % 10) for c in range(n_classes)])
            if snap.get("slots_per_class"):
                ax.axhline(snap["slots_per_class"], color="grey", linestyle=":", linewidth=1)
            ax.set_title(f"after task {snap['task'] + 1}: {sum(snap['histogram'])} samples", fontsize=9)
            ax.set_xticks(range(n_classes))
            ax.set_xticklabels(class_names, rotation=90 if max(map(len, class_names)) > 2 else 0, fontsize=7)
        for ax in axes.flat[len(snapshots) :]:
            ax.set_visible(False)
        for ax in axes[:, 0]:
            ax.set_ylabel("samples in memory")
        handles = [plt.Rectangle((0, 0), 1, 1, color=colours(t % 10)) for t in sorted(set(owner))]
        fig.legend(
            handles,
            [f"classes of task {t + 1}" for t in sorted(set(owner))],
            loc="lower center",
            ncol=min(len(handles), 5),
            fontsize=8,
        )
        fig.suptitle(title + "\n(dotted: slots per class)", fontsize=10)
        fig.tight_layout(rect=(0, 0.06, 1, 1))
    else:
        import numpy as np

        grid = np.array([s["histogram"] for s in snapshots])
        fig, ax = plt.subplots(figsize=(10, 1.0 + 0.45 * len(snapshots)))
        image = ax.imshow(grid, aspect="auto", cmap="viridis", interpolation="nearest")
        ax.set_yticks(range(len(snapshots)))
        ax.set_yticklabels([f"after task {s['task'] + 1}" for s in snapshots])
        ax.set_xlabel("class (stream order)")
        fig.colorbar(image, ax=ax, label="samples in memory")
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
    out = _save(fig, Path(path), "--memory-plot")
    plt.close(fig)
    return out
