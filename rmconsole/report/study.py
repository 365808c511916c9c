"""A `rmconsole tune` study as figures (matplotlib, as the other report figures): the optimisation
history (each finished trial's value and the best so far), the parameters' importance (Optuna's
own estimate, fANOVA), and parallel coordinates (each trial a line through its parameter values,
coloured by its value). `rmconsole tune --study NAME --show --plot DIR` writes them; the TUI's
study page draws the same data (`history`, `importance`, `parallel`: plain values, no matplotlib)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIGURES = ("history.png", "importance.png", "parallel.png")


@dataclass(frozen=True)
class HistoryPoint:
    """A trial on the optimisation history: a finished one's value and the best so far after it,
    or a pruned one's last validation value and the task (step) it was pruned after."""

    number: int
    value: float
    best: float | None  # the best finished value so far (None: a pruned trial's point)
    pruned_at: int | None = None  # a pruned trial: the step (task index) of its last value


@dataclass(frozen=True)
class Axis:
    """One parameter of the parallel coordinates: its range over the finished trials, on a log
    scale where the range spans 100x, or its levels for a categorical one."""

    key: str
    low: float
    high: float
    log: bool = False
    levels: tuple[str, ...] = ()


@dataclass(frozen=True)
class Line:
    """A finished trial through the axes: its value, each parameter's raw value and its position
    on the axis (0 low .. 1 high; 0.5 where the range is one value, None where it has none)."""

    number: int
    value: float
    raw: tuple[Any, ...]
    positions: tuple[float | None, ...]


def _finished(study: Any) -> list[Any]:
    from optuna.trial import TrialState

    return [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE and t.value is not None]


def importance(study: Any) -> dict[str, float]:
    """Optuna's parameter importances (they sum to 1); empty below two finished trials or with one parameter."""
    import optuna

    trials = _finished(study)
    if len(trials) < 2 or len({k for t in trials for k in t.params}) < 2:
        return {}
    try:
        return dict(optuna.importance.get_param_importances(study))
    except (RuntimeError, ValueError):  # (every finished trial with one value: nothing to attribute)
        return {}


def history(study: Any, maximize: bool) -> list[HistoryPoint]:
    """The finished trials in order with the best so far, then the pruned ones at their last value."""
    points, running = [], -math.inf if maximize else math.inf
    for t in _finished(study):
        running = max(running, float(t.value)) if maximize else min(running, float(t.value))
        points.append(HistoryPoint(t.number, float(t.value), running))
    for t in study.get_trials(deepcopy=False):
        if t.state.name == "PRUNED" and t.intermediate_values:
            step, value = max(t.intermediate_values.items())
            points.append(HistoryPoint(t.number, float(value), None, step))
    return points


def parallel(study: Any) -> tuple[list[Axis], list[Line]]:
    """The parallel coordinates of the finished trials: one axis per parameter (sorted by name),
    one line per trial."""
    trials = _finished(study)
    keys = sorted({k for t in trials for k in t.params})
    axes, columns = [], []
    for key in keys:
        raw = [t.params.get(key) for t in trials]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in raw if v is not None)
        levels: tuple[str, ...] = ()
        log = False
        if numeric:
            nums = [float(v) for v in raw if v is not None]
            log = bool(nums) and min(nums) > 0 and max(nums) / min(nums) > 100
            scaled = [None if v is None else (math.log10(float(v)) if log else float(v)) for v in raw]
        else:
            levels = tuple(sorted({str(v) for v in raw if v is not None}))
            scaled = [None if v is None else float(levels.index(str(v))) for v in raw]
        real = [v for v in scaled if v is not None]
        low, high = (min(real), max(real)) if real else (0.0, 1.0)
        axes.append(Axis(key, 10**low if log else low, 10**high if log else high, log, levels))
        columns.append([None if v is None else (v - low) / (high - low) if high > low else 0.5 for v in scaled])
    lines = [
        Line(t.number, float(t.value), tuple(t.params.get(k) for k in keys), tuple(c[i] for c in columns))
        for i, t in enumerate(trials)
    ]
    return axes, lines


def write_figures(study: Any, metric: str, maximize: bool, folder: Path | str) -> list[Path]:
    """The three figures of `study` in `folder` (made if missing); the paths written. A figure
    with nothing to draw yet (no finished trial; importance needs two and two parameters) says so
    in its own image rather than being left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    trials = _finished(study)
    written = []

    fig, ax = plt.subplots(figsize=(7, 4))
    if trials:
        points = history(study, maximize)
        done = [p for p in points if p.best is not None]
        ax.scatter(
            [p.number for p in done], [p.value for p in done], label=f"{metric} of a finished trial", color="tab:blue"
        )
        best = [p.best for p in done if p.best is not None]  # (every one of them: for the type checker)
        ax.step([p.number for p in done], best, where="post", label="best so far", color="tab:red")
        pruned = [p for p in points if p.best is None]
        if pruned:
            ax.scatter(
                [p.number for p in pruned],
                [p.value for p in pruned],
                marker="x",
                color="grey",
                label="pruned (its last validation value)",
            )
        ax.legend(loc="best", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no finished trial yet", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("trial")
    ax.set_ylabel(metric)
    ax.set_title(f"optimisation history ({'maximize' if maximize else 'minimize'} {metric})")
    written.append(_save(fig, out / FIGURES[0]))

    fig, ax = plt.subplots(figsize=(7, 3))
    found = importance(study)
    if found:
        names = list(found)[::-1]
        ax.barh(names, [found[n] for n in names], color="tab:green")
        ax.set_xlabel("importance (Optuna fANOVA; sums to 1)")
    else:
        ax.text(0.5, 0.5, "importance needs 2 finished trials and 2 parameters", ha="center", va="center")
        ax.set_axis_off()
    ax.set_title("parameter importance")
    written.append(_save(fig, out / FIGURES[1]))

    fig, ax = plt.subplots(figsize=(8, 4))
    axes, lines = parallel(study)
    keys = [a.key for a in axes]
    if lines and keys:
        values = [line.value for line in lines]
        low, high = min(values), max(values)
        colours = plt.get_cmap("viridis")
        for i, v in enumerate(values):
            share = (v - low) / (high - low) if high > low else 1.0
            shown = [0.5 if p is None else p for p in lines[i].positions]
            ax.plot(range(len(keys)), shown, color=colours(share), alpha=0.8)
        ax.set_xticks(range(len(keys)), keys)
        ax.set_yticks([0, 1], ["low", "high"])
        mappable = plt.cm.ScalarMappable(cmap=colours, norm=matplotlib.colors.Normalize(low, high))
        fig.colorbar(mappable, ax=ax, label=metric)
    else:
        ax.text(0.5, 0.5, "no finished trial yet", ha="center", va="center", transform=ax.transAxes)
    ax.set_title("parallel coordinates (each finished trial; log scale where a range spans 100x)")
    written.append(_save(fig, out / FIGURES[2]))
    return written


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
