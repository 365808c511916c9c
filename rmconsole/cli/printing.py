"""How the CLI prints a run (`show`, the end of `run`) and the sweeps' queues (`runs`)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from rich.markup import escape
from rich.table import Table

from .. import metric_registry, plugins, runner, store
from .. import paper as papers
from .. import report as reports
from ..cl.protocols import protocol_of
from ..cl.results import task_figures
from ..config import config_view
from ..numbers import fmt
from ..recency import class_accuracy_by_age
from ..report import anytime as anytime_report
from ..report import budget as budget_report
from ..runner import sysmetrics
from ..sanitize import clean
from .common import console, err_console

SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], width: int = 24) -> str:
    """A curve in one line of block characters (resampled to at most `width` points)."""
    values = [v for v in values if v is not None]
    if not values:
        return ""
    if len(values) > width:
        step = len(values) / width
        values = [values[int(i * step)] for i in range(width - 1)] + [values[-1]]
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    return "".join(SPARK[min(int((v - low) / span * 7.999), 7)] for v in values)


def _metric(detail: dict[str, Any], key: str, letter: str) -> str:
    m = detail["metrics"]
    value = m.get(key)
    if value is None:
        return "—"
    if m.get("partial"):
        return f"{letter}@{m['tasks_done']}/{detail['progress']['n_tasks']} {fmt(value)}"
    return fmt(value)


def _show_metrics(detail: dict[str, Any]) -> tuple[list[Any], list[Any], list[Any]]:
    """What `show` prints of the catalogue: the main line (the RM paper's protocol's metrics,
    which every run's JSON carries), the other measured ones beside it (dim), and the top-k
    figures; a task-free run's own (A_auc, the online figures) are its anytime lines."""
    measured = {k for k, v in detail["metrics"].items() if v is not None}
    main = list(metric_registry.listed(["task"], (), family=""))
    own = [x for x in metric_registry.catalogue() if "task-free" in x.default_for and "task" not in x.default_for]
    extra = [x for x in metric_registry.listed(["task"], measured, family="") if x not in main and x not in own]
    return main, extra, metric_registry.listed(["task"], measured, family="topk")


def _cross_text(detail: dict[str, Any], metric: Any) -> str:
    """A cross-run metric (I_last) in `show`: its value and the run it was measured against, or why none."""
    m = detail["metrics"]
    protocol = protocol_of(detail["config"])
    if m.get(metric.name) is None and not metric.applies_to(protocol):  # the catalogue's reason (I_last: task-free)
        return f"— ({metric.why_none(protocol)})"
    if metric.name != "I_last":
        value = m.get(metric.name)
        return fmt(value) + (f" (vs run {m.get(metric.name + '_against')})" if value is not None else "")
    differs = m.get("I_last_joint_differs")
    if m["I_last"] is not None and differs:
        what = "; ".join(
            f"{k} {store.show_value(v['run'])} here, {store.show_value(v['joint'])} there" for k, v in differs.items()
        )
        return f"{fmt(m['I_last'])}* (* vs joint run {m.get('I_last_joint_run')}, which differs in {what})"
    if m["I_last"] is not None:
        return f"{fmt(m['I_last'])} (vs joint run {m.get('I_last_joint_run')})"
    if detail["method"] == "joint":
        return "— (a joint run is the upper bound itself)"
    if m.get("partial"):
        return "— (partial: not all tasks are done)"
    return "— (no matching joint run)"


def config_text(config: dict[str, Any]) -> str:
    """`config: dataset=digits ... epochs=32* ...`: the keys the run's method reads (another
    method's, task-free-only keys on a task run, runtime choices at their default and unset keys
    left out: config.config_view), a `*` on each that differs from its default."""
    shown = " ".join(f"{k}={v}{'*' if changed else ''}" for k, v, changed in config_view(config))
    return f"config (* not the default): {shown}"


def class_labels(detail: dict[str, Any]) -> list[str]:
    """The name of each class position (class_order) as `show` writes it: its name, else its label."""
    order, names = detail.get("class_order") or [], detail.get("class_names") or []
    if order and names:
        return [str(names[c]) if c < len(names) else str(c) for c in order]
    return [str(c) for c in order]


MAX_LISTED = 20  # classes listed one by one in a group; more: the group's summary


def class_accuracy_lines(detail: dict[str, Any], width: int = 80) -> list[str]:
    """Each class's accuracy after the latest task beside its memory slots, the classes seen
    before that task apart from those it introduced (recency.class_accuracy_by_age, the TUI's
    rule): `old (8, mean 84.9): 5 78/20  6 79/20 ...`. Nothing when no task stored per-class
    accuracy. A running run's latest task is partial: its line says so."""
    results = [SimpleNamespace(**t) for t in detail.get("tasks") or [] if t.get("class_accuracy")]
    if not results:
        return []
    task = results[-1].task
    same = next((m for m in reversed(detail.get("memory") or []) if m["task"] == task), None)
    split = class_accuracy_by_age(results, same["histogram"] if same else None, class_labels(detail))
    if split is None:
        return []
    n_tasks = (detail.get("progress") or {}).get("n_tasks") or len(detail.get("tasks") or [])
    partial = " (partial: the run is not through all its tasks)" if task + 1 < n_tasks else ""
    gap = f"; new − old {split.gap:+.1f}" if split.gap is not None else ""
    lines = [f"per class after task {task + 1}/{n_tasks} (accuracy %/memory slots){gap}{partial}:"]
    for name, group, mean in (("old", split.old, split.old_mean), ("new", split.new, split.new_mean)):
        if not group:
            continue
        head = f"  {name} ({len(group)}, mean {fmt(mean, 1)}):"

        def entry(c: Any) -> str:
            return f"{c.label} {fmt(c.accuracy, 0)}" + (f"/{c.slots}" if c.slots is not None else "")

        if len(group) > MAX_LISTED:
            worst = sorted((c for c in group if c.accuracy is not None), key=lambda c: c.accuracy or 0.0)[:5]
            lines.append(f"{head} lowest {'  '.join(entry(c) for c in worst)}")
            continue
        line = head
        for c in group:
            piece = f"  {entry(c)}"
            if len(line) + len(piece) > width:
                lines.append(line)
                line = " " * (len(head) - 1)
            line += piece
        lines.append(line)
    return lines


def paper_lines(detail: dict[str, Any]) -> list[str]:
    """The paper's figure beside the run's own, as every face shows it (paper.paper_comparison):
    a Δ only when the run follows the paper's protocol and is through all its tasks; otherwise
    the paper's value with the keys that differ, or the partial mark."""
    config = detail.get("config") or {}
    m = detail.get("metrics") or {}
    found = papers.paper_comparisons(config, ["A_last", "F_last"])
    if not found:
        return []
    any_figure = next(iter(found.values())).figure
    parts = []
    for metric, cmp in found.items():
        value = m.get(metric)
        text = f"{metric} {cmp.figure.text()}"
        if not cmp.matches:
            text += " (no Δ)"
        elif m.get("partial") and value is not None:
            text += f" (no Δ: this run's is partial, @{m['tasks_done']}/{detail['progress']['n_tasks']})"
        elif value is not None:
            text += f" (Δ {value - cmp.figure.mean:+.2f})"
        parts.append(text)
    head = f"paper (table {any_figure.tex_order}, row {any_figure.row!r}): "
    differs = next((c for c in found.values() if not c.matches), None)
    tail = f"; not this run's protocol: {differs.differs_text()}" if differs is not None else ""
    return [head + "  ".join(parts) + tail]


def epoch_lines(epochs: list[dict[str, Any]]) -> list[str]:
    """Per task and phase: epochs, the loss from first to last epoch with a sparkline, the lr
    range and the mean samples/s (and the last test accuracy when it was recorded)."""
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for e in epochs:
        groups.setdefault((e["task"], e["phase"]), []).append(e)
    lines = []
    for (task, phase), rows in groups.items():
        losses = [r["loss"] for r in rows if r["loss"] is not None]
        rates = [r["samples_per_s"] for r in rows if r["samples_per_s"]]
        text = f"  T{task + 1} {phase:<7}{len(rows):>4} ep"
        if len(losses) == 1:
            text += f"  loss {losses[0]:.3f}"
        elif losses:
            text += f"  loss {losses[0]:.3f}→{losses[-1]:.3f}"
            if len(losses) > 2:
                text += f" {sparkline(losses, 12)}"
        lrs = [r["lr"] for r in rows]
        text += f"  lr {min(lrs):.2g}–{max(lrs):.2g}" if len(set(lrs)) > 1 else f"  lr {lrs[0]:.2g}"
        if rates:
            text += f"  {sum(rates) / len(rates):,.0f}/s"
        tests = [r["test_accuracy"] for r in rows if r.get("test_accuracy") is not None]
        if tests:
            text += f"  test {tests[-1]:.1f}%"
        lines.append(text)
    return lines


def print_run(run_id: int, detail: dict[str, Any] | None = None, brief: bool = False) -> None:
    """What `show` promises: who the run is, its config (overrides first), the per-task accuracy,
    every memory update's histogram, per-class accuracy beside the memory, the epochs inside each
    task, and the metrics (beside the paper's when it has the figure). `brief` (the end of
    `run`, which showed the progress live): the memory's latest update only, no epoch lines."""
    detail = detail or store.run_detail(run_id)
    tasks = detail["tasks"]
    head = f"run [bold]{run_id}[/]"
    if detail.get("name"):
        head += f" “{escape(detail['name'])}”"
    head += f" · {escape(detail['preset'] or '—')} · {detail['status']}"
    if detail.get("sweep_id"):
        head += f" · sweep {detail['sweep_id']}"
    if detail.get("archived"):
        head += " · [dim]archived[/]"
    console.print(head, highlight=False)
    if detail.get("tags"):
        console.print(f"tags: {escape(', '.join(detail['tags']))}", highlight=False)
    if detail.get("note"):
        console.print(f"note: {escape(detail['note'])}", highlight=False)
    config = detail["config"]
    overrides = detail.get("overrides") or {}
    console.print(
        "overrides: "
        + (
            escape(" ".join(f"{k}={reports.format_value(v)}" for k, v in overrides.items()))
            or "none (the preset as it is)"
        ),
        highlight=False,
    )
    console.print(f"[dim]{escape(config_text(config))}[/]", highlight=False)
    table = Table(title=None, box=None, padding=(0, 1), header_style="bold")
    table.add_column("task", justify="right")
    table.add_column("samples", justify="right")
    table.add_column("major classes")
    table.add_column("acc %", justify="right")
    validated = any(t.get("val_accuracy") is not None for t in tasks)
    if validated:  # the held-out validation stream's figure beside the test one (val_fraction > 0)
        table.add_column("val %", justify="right")
    for j in range(len(tasks)):
        table.add_column(f"T{j + 1}", justify="right", style="dim")
    table.add_column("time s", justify="right")
    figures = [(n, f) for n, f in task_figures() if any(t.get(n) is not None for t in tasks)]  # (cl/results.py)
    for _, figure in figures:
        table.add_column(figure.label, justify="right")
    for t in tasks:
        majors = (
            ", ".join(t["major_names"] or map(str, t["major_classes"]))
            if t.get("major_names") is not None
            else ", ".join(map(str, t["major_classes"]))
        )
        row = t["accuracy_row"] or [None] * len(tasks)
        table.add_row(
            str(t["task"] + 1),
            f"{t['n_samples']:,}",
            majors,
            fmt(t["accuracy"]),
            *([fmt(t.get("val_accuracy"))] if validated else []),
            *[fmt(v, 1) for v in row],
            fmt(t["seconds"], 1),
            *[fmt(t.get(name), figure.digits) for name, figure in figures],
        )
    console.print(table)
    held = detail.get("validation")
    if held:
        console.print(
            f"validation: {held['samples']:,} training samples held out ({held['fraction']:g} of each "
            f"class; hash {held['hash']}), never trained on; val % = accuracy on them",
            highlight=False,
        )
    if detail["memory"] and not brief:
        policies = {(m.get("info") or {}).get("policy") for m in detail["memory"]} - {None}
        console.print(
            "memory after each update: size/slots per class, then samples per class in class_order"
            + (f" ({', '.join(sorted(map(str, policies)))})" if policies else ""),
            highlight=False,
        )
        for m in detail["memory"]:
            console.print(
                f"  T{m['task'] + 1} {m['size']}/{m['slots_per_class']}: {' '.join(map(str, m['histogram']))}",
                highlight=False,
            )
        notes = dict.fromkeys((m.get("info") or {}).get("note") for m in detail["memory"])
        for note in (n for n in notes if n):  # (why a memory is below K: a task-free ER's, docs/protocol.md §9.2)
            console.print(f"  [dim]{escape(clean(note))}[/]", highlight=False)
    for line in class_accuracy_lines(detail, console.width):
        console.print(escape(line), highlight=False)
    if detail.get("epochs") and not brief:
        console.print("epochs inside each task (mean training loss, learning rate, samples/s):", highlight=False)
        for line in epoch_lines(detail["epochs"]):
            console.print(line, highlight=False)
    m = detail["metrics"]
    main, extra, topk = _show_metrics(detail)
    parts = []
    for metric in main:
        text = _cross_text(detail, metric) if metric.across is not None else _metric(detail, metric.name, metric.letter)
        parts.append(f"{metric.name} {text}")
    console.print("  ".join(parts), highlight=False)
    if extra:  # measured beyond the protocol's own (e.g. the authors' test-selected figure), a line of their own
        console.print(
            "[dim]"
            + "  ".join(f"{metric.label} {_metric(detail, metric.name, metric.letter)}" for metric in extra)
            + "[/]",
            highlight=False,
        )
    for line in budget_report.compute_lines(detail):  # TFLOP, memory bytes, device-seconds (issue 40)
        console.print(escape(line), highlight=False)
    if system := sysmetrics.summary_text(detail.get("system")):  # sampled by its supervisor (issue 42)
        console.print(f"system: {system}", highlight=False)
    if m.get("partial"):
        console.print(
            f"[yellow]partial:[/] metrics after task {m['tasks_done']} of {detail['progress']['n_tasks']} "
            f"(A@k/T is the accuracy after task k, not a final A_last; symbols: docs/glossary.md)",
            highlight=False,
        )
    for line in paper_lines(detail):
        console.print(escape(line), highlight=False)
    if m.get("topk") and topk:
        shown = "  ".join(f"{t.label.removesuffix(' top-k')} {fmt(m.get(t.name), t.digits)}" for t in topk)
        console.print(f"top-{m['topk']}: {shown}  (the figures above are top-1)")
    if detail.get("job_id"):  # the scheduler's word is news only while the run is active
        active = detail["status"] in store.ACTIVE and detail.get("job_state")
        console.print(
            f"{(detail.get('executor') or '').split(':')[0]} job {detail['job_id']}"
            + (f": {detail['job_state']}" if active else ""),
            highlight=False,
        )
    for line in anytime_report.anytime_lines(detail):  # task-free runs: A_auc, first appearances, compute
        console.print(line, highlight=False)
    for entry in (detail.get("versions") or {}).get("plugins") or []:  # the plug-in packages that made it
        console.print(f"plug-in {escape(plugins.provenance_text(entry))}", highlight=False)
    if detail["error"]:
        err_console.print(f"[red]{detail['status']}:[/] {escape(detail['error'])}")
    if brief and (detail.get("memory") or detail.get("epochs")):
        console.print(
            f"[dim]every memory update and the epochs inside each task: rmconsole show {run_id}[/]", highlight=False
        )


def print_sweep_queues(sweep_ids: list[str]) -> None:
    """One line per sweep: its runs per status and who drives its queue."""
    for sweep_id in dict.fromkeys(sweep_ids):
        members = store.list_runs(sweep_id=sweep_id)
        counts = runner.status_counts(members)
        done = sum(counts.get(k, 0) for k in ("finished", "failed", "stopped"))
        pid = runner.driver_pid(sweep_id)
        held = sorted(
            {
                f"{(r.executor or '').split(':')[0]} job {r.job_id}"
                for r in members
                if r.job_id and r.status in store.ACTIVE
            }
        )
        if held:
            driver = f"; held by the scheduler: {', '.join(held[:5])}" + (" …" if len(held) > 5 else "")
        elif pid:
            driver = f"; queue driven by pid {pid}"
        elif counts.get("queued"):
            driver = f"; no queue runner: continue with `python -m rmconsole.runner.queue {sweep_id}`"
        else:
            driver = ""
        console.print(
            f"sweep {sweep_id} ({members[0].preset}): {done}/{len(members)} done — "
            + ", ".join(f"{v} {k}" for k, v in counts.items())
            + driver,
            highlight=False,
        )
