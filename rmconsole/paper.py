"""The paper's result tables as data (paper_tables.csv beside this file) and the rule that puts
a paper figure beside a stored cell: `rmconsole report --paper` and the TUI's run page.

Each CSV line is one printed number of Rainbow Memory's result tables (Bang et al., CVPR 2021),
with where it was printed (the .tex table's \\label and order, the row and the column as
printed) and the rmconsole setting it belongs to. `tools/paper_tables.py` regenerates it from
the paper's LaTeX source. Plain Python: no torch, no store.

A figure matches a run when dataset, method, memory size, tasks, blurriness, online/offline and
augmentation agree, and, where the paper names them, the memory policy and the uncertainty
measure. The paper's baseline rows ran without augmentation (the authors' issue #14), so they
match runs with `augment=none` only; RM's row matches CutMix+AutoAugment, RM w/o DA `none`.
ImageNet figures are top-5 (the authors' code): they are compared with a run's top-k figures
when it measured top-5, and never with its top-1.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

# paper metric -> (run metric for top-1, run metric when the paper's figure is top-k)
RUN_METRIC = {"A_last": ("A_last", "A_last_topk"), "F_last": ("F_last", "F_last_topk"), "I_last": ("I_last", None)}
# A method's paper-default memory policy, as the authors ran it (a run with memory_policy unset uses it)
# each paper method's own memory policy (its class's default_memory_policy; tests/test_paper.py
# checks they agree): a run that names it explicitly, as the baseline presets do, is the paper's row
PAPER_POLICY = {
    "rm": "uncertainty",
    "ewc": "reservoir",
    "rwalk": "reservoir",
    "icarl": "prototype",
    "bic": "prototype",
    "bic_star": "prototype",
    "gdumb": "greedy_balanced",
    "finetune": "random",
}


@dataclass(frozen=True)
class PaperFigure:
    """One number of the paper's tables, and where it was printed."""

    tex_order: str
    label: str
    caption: str
    row: str
    column: str
    setting: Mapping[str, Any]  # dataset, method, memory_size, n_tasks, blurry, stream, augment, ...
    metric: str
    topk: int
    mean: float
    std: float | None
    note: str

    @property
    def source(self) -> str:
        """`Table 1 (tab:various-dataset-blurry10-online), row EWC, column mnist (K=500) A5`."""
        return f"paper table {self.tex_order} ({self.label}), row {self.row!r}, column {self.column!r}"

    def text(self, digits: int = 2) -> str:
        value = f"{self.mean:.{digits}f}" + ("" if self.std is None else f" ± {self.std:.{digits}f}")
        return value + (f" (top-{self.topk})" if self.topk > 1 else "")


def _augment(value: Any) -> tuple[str, ...] | None:
    if value in (None, "?"):
        return None
    if isinstance(value, str):
        return tuple(p for p in value.split("+") if p and p != "none")
    return tuple(v for v in value if v != "none")


@lru_cache(maxsize=1)
def figures() -> tuple[PaperFigure, ...]:
    """Every figure of paper_tables.csv, in the file's order (main tables first)."""
    text = resources.files("rmconsole").joinpath("paper_tables.csv").read_text(encoding="utf-8")
    out = []
    for row in csv.DictReader(text.splitlines()):
        setting = {
            "dataset": row["dataset"],
            "method": row["method"],
            "memory_size": int(row["memory_size"]),
            "n_tasks": int(row["n_tasks"]),
            "blurry": int(row["blurry"]),
            "stream": row["stream"],
            "augment": _augment(row["augment"]),
            "memory_policy": row["memory_policy"] or None,
            "uncertainty": row["uncertainty"] or None,
        }
        out.append(
            PaperFigure(
                row["tex_order"],
                row["label"],
                row["caption"],
                row["row"],
                row["column"],
                setting,
                row["metric"],
                int(row["topk"]),
                float(row["mean"]),
                float(row["std"]) if row["std"] else None,
                row["note"],
            )
        )
    return tuple(out)


def _matches(figure: PaperFigure, config: Mapping[str, Any]) -> bool:
    s = figure.setting
    for key in ("dataset", "method", "memory_size", "n_tasks", "blurry", "stream"):
        if config.get(key) != s[key]:
            return False
    if s["augment"] is not None and _augment(config.get("augment") or ()) != s["augment"]:
        return False
    policy = config.get("memory_policy") or PAPER_POLICY.get(str(config.get("method")))
    if s["memory_policy"] is not None and policy != s["memory_policy"]:
        return False
    if s["memory_policy"] is None and config.get("memory_policy") not in (None, PAPER_POLICY.get(s["method"])):
        return False  # a run with another memory policy than the method's is not the paper's row
    if s["uncertainty"] is not None and config.get("uncertainty", "randaug") != s["uncertainty"]:
        return False
    if s["uncertainty"] is None and s["method"] == "rm" and config.get("uncertainty", "randaug") != "randaug":
        return False  # RM's rows use RandAug_MC
    return True


def paper_figure(config: Mapping[str, Any], metric: str) -> PaperFigure | None:
    """The paper's figure for a run's setting and one of its metrics (`A_last`, `F_last`,
    `I_last`, or `A_last_topk` / `F_last_topk` for a run's top-k figures), first in table order.
    A top-5 paper figure is only ever matched with a top-5 run metric, and a top-1 one with top-1."""
    for figure in figures():
        top1, topk_metric = RUN_METRIC[figure.metric]
        wanted = top1 if figure.topk == 1 else topk_metric
        if wanted != metric or not _matches(figure, config):
            continue
        if figure.topk > 1 and int(config.get("topk") or 1) != figure.topk:
            continue
        return figure
    return None


# The protocol the paper's tables fix beyond what each CSV line names: the backbone and the
# memory epochs per dataset (PROTOCOL.md's table; MNIST follows the paper's text, 256, not the
# authors' script's 5). A run that differs in any of them is not the paper's experiment.
PAPER_PROTOCOL: Mapping[str, Mapping[str, Any]] = {
    "mnist": {"model": "mlp400", "epochs": 256},
    "cifar10": {"model": "resnet18", "epochs": 256},
    "cifar100": {"model": "resnet32", "epochs": 256},
    "imagenet": {"model": "resnet34", "epochs": 100},
}
# The keys the paper's table fixes, in the order a difference is named.
PROTOCOL_KEYS = ("dataset", "model", "memory_size", "n_tasks", "stream", "blurry", "epochs", "augment")
_SHORT = {"memory_size": "K", "n_tasks": "tasks"}


@dataclass(frozen=True)
class KeyDifference:
    """One protocol key where a run and the paper's row disagree."""

    key: str
    run: Any
    paper: Any

    def text(self) -> str:
        """`epochs 8≠256`, `augment none≠cutmix+autoaug`, `K 200≠500`."""
        return f"{_SHORT.get(self.key, self.key)} {_value_text(self.run)}≠{_value_text(self.paper)}"


def _value_text(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, (tuple, list)):
        return "+".join(str(v) for v in value) or "none"
    return str(value)


@dataclass(frozen=True)
class PaperComparison:
    """The paper's figure nearest to a run's setting, and the protocol keys that differ. Only
    when `matches` may a face print a Δ against it; otherwise it prints the paper's value with
    `differs_text()` beside it, so a number is never compared with what it does not match."""

    figure: PaperFigure
    differences: tuple[KeyDifference, ...]

    @property
    def matches(self) -> bool:
        return not self.differences

    def differs_text(self, limit: int = 0) -> str:
        """`epochs 8≠256, augment none≠cutmix+autoaug` (the first `limit` when > 0, then `+N`)."""
        parts = [d.text() for d in self.differences]
        if limit and len(parts) > limit:
            parts = parts[:limit] + [f"+{len(parts) - limit}"]
        return ", ".join(parts)


def protocol_differences(config: Mapping[str, Any], figure: PaperFigure) -> tuple[KeyDifference, ...]:
    """Which of the keys the paper's table fixes (PROTOCOL_KEYS: dataset, model, K, tasks, stream
    and blurry level, epochs, augmentation) differ between a run's config and the paper's row of
    `figure`. Empty: the run is the paper's experiment and a Δ means something. A key the run's
    config lacks differs (a match is never assumed)."""
    s = figure.setting
    fixed = {**PAPER_PROTOCOL.get(str(s["dataset"]), {}), **{k: s[k] for k in PROTOCOL_KEYS if k in s}}
    out = []
    for key in PROTOCOL_KEYS:
        if key not in fixed:
            continue
        paper_value = fixed[key]
        run_value = config.get(key)
        if key == "augment":
            if paper_value is None:
                continue  # the paper does not say
            run_aug = _augment(run_value or ())
            if run_aug != paper_value:
                out.append(KeyDifference(key, run_aug, paper_value))
        elif run_value != paper_value:
            out.append(KeyDifference(key, run_value, paper_value))
    return tuple(out)


def _same_method_row(figure: PaperFigure, config: Mapping[str, Any]) -> bool:
    """Whether the figure's row is the run's method as the paper ran it (method, memory policy,
    uncertainty measure): the row a run's numbers belong beside, whatever the protocol keys."""
    s = figure.setting
    if config.get("method") != s["method"]:
        return False
    policy = config.get("memory_policy") or PAPER_POLICY.get(str(config.get("method")))
    if s["memory_policy"] is not None and policy != s["memory_policy"]:
        return False
    if s["memory_policy"] is None and config.get("memory_policy") not in (None, PAPER_POLICY.get(s["method"])):
        return False
    if s["uncertainty"] is not None and config.get("uncertainty", "randaug") != s["uncertainty"]:
        return False
    if s["uncertainty"] is None and s["method"] == "rm" and config.get("uncertainty", "randaug") != "randaug":
        return False
    return True


def paper_comparison(config: Mapping[str, Any], metric: str) -> PaperComparison | None:
    """The paper's figure for a run's method, dataset and metric whose protocol is nearest the
    run's (fewest differing keys, then table order), with the keys that differ: the one rule
    every face (run page, compare, `show`, `report --paper`) uses to decide between a Δ and a
    "paper's value, differs in ..." note. None: the paper prints no such figure for this
    method and dataset (or only a top-k one the run did not measure)."""
    best: PaperComparison | None = None
    for figure in figures():
        top1, topk_metric = RUN_METRIC[figure.metric]
        wanted = top1 if figure.topk == 1 else topk_metric
        if wanted != metric or figure.setting["dataset"] != config.get("dataset"):
            continue
        if figure.topk > 1 and int(config.get("topk") or 1) != figure.topk:
            continue
        if not _same_method_row(figure, config):
            continue
        found = PaperComparison(figure, protocol_differences(config, figure))
        if best is None or len(found.differences) < len(best.differences):
            best = found
            if found.matches:
                break
    return best


def paper_comparisons(config: Mapping[str, Any], metrics: Sequence[str]) -> dict[str, PaperComparison]:
    """`paper_comparison` for each metric that has one."""
    out = {}
    for metric in metrics:
        found = paper_comparison(config, metric)
        if found is not None:
            out[metric] = found
    return out
