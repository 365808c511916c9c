"""The metrics rmconsole knows: the catalogue's built-ins (rmconsole/cl/metric_catalog.py) and the
metric plug-ins installed packages declare (rmconsole/plugins.py, group `rmconsole.metrics`:
each entry point names a `Metric` object).

Names are listed without importing a plug-in; a plug-in is loaded the first time a name is
used, or when a face lists every metric (`catalogue()`). One that cannot be loaded is one line
(`PluginError`) when it is asked for by name, and is left out of `catalogue()` (its line kept in
`problems()`), so every other metric keeps working. The store and every face read metrics here.
Plain Python: no torch, no store.
"""

from __future__ import annotations

from collections.abc import Iterable

from . import plugins
from .cl import metric_catalog as catalog
from .cl.metric_catalog import BUILTINS, Metric, RunRows
from .cl.protocols import Protocol
from .plugins import PluginError  # (re-exported: what metric() raises for a plug-in that cannot be used)


class UnknownMetric(ValueError):
    """A name no built-in or installed plug-in declares: one line listing the names."""


_problems: dict[str, str] = {}  # plug-in name -> the one line that says why it could not be loaded


def metric_names() -> list[str]:
    """Every metric's name: the built-ins in catalogue order, then installed plug-ins (none imported)."""
    return [*BUILTINS, *(n for n in plugins.available("metric") if n not in BUILTINS)]


def metric(name: str) -> Metric:
    """The metric `name`: a built-in, else an installed plug-in's declaration, loaded on first use
    (UnknownMetric for neither; PluginError, one line, for a plug-in that cannot be used)."""
    if name in BUILTINS:
        return BUILTINS[name]
    if name not in plugins.available("metric"):
        raise UnknownMetric(f"unknown metric {name!r}; metrics: {', '.join(metric_names())}")
    found = plugins.load("metric", name)
    what = plugins.available("metric")[name].describe()
    if not isinstance(found, Metric):
        raise PluginError(f"{what} names a {type(found).__name__}, not a rmconsole.cl.metric_catalog.Metric")
    if found.name != name:
        raise PluginError(
            f"{what} declares a Metric named {found.name!r}: the entry point and the Metric must have the same name"
        )
    if (found.compute is None) == (found.across is None):
        raise PluginError(f"{what}: its Metric needs either compute= or across= (not both)")
    return found


def catalogue() -> list[Metric]:
    """Every usable metric in order: the built-ins, then the plug-ins that load (each loaded once)."""
    out = list(catalog.METRICS)
    for name in metric_names()[len(BUILTINS) :]:
        try:
            out.append(metric(name))
            _problems.pop(name, None)
        except PluginError as err:
            _problems[name] = str(err)
    return out


def problems() -> list[str]:
    """One line per metric plug-in that could not be loaded or whose computation failed."""
    return [*_problems.values(), *catalog.failures()]


def summarize(rows: RunRows) -> dict[str, float | None]:
    """Every per-run metric that applies to the run (plug-ins included), by name."""
    return catalog.summarize(rows, catalogue())


def listed(protocols: Iterable[Protocol], measured: Iterable[str] = (), family: str | None = None) -> list[Metric]:
    """What a face lists for runs of these protocols (cl/metric_catalog.listed, plug-ins included)."""
    return catalog.listed(protocols, measured, catalogue(), family)


def report_default(protocol: Protocol, measured: Iterable[str]) -> list[str]:
    return catalog.report_default(protocol, measured, catalogue())


def columns() -> list[Metric]:
    """The runs tables' metric columns (cl/metric_catalog.columns), plug-ins included."""
    return catalog.columns(catalogue())


def cross_run_metrics() -> list[Metric]:
    return catalog.cross_run_metrics(catalogue())


def validation_metrics() -> list[Metric]:
    """The metrics measured on the validation stream, by the split each declares (plug-ins
    included): the one rule for what `tune --metric` and `report --select-by` may select on."""
    return catalog.validation_metrics(catalogue())


def filterable() -> list[Metric]:
    return [m for m in catalogue() if m.filterable]


def sortable() -> list[Metric]:
    return [m for m in catalogue() if m.sortable]


__all__ = [
    "Metric",
    "PluginError",
    "RunRows",
    "UnknownMetric",
    "catalogue",
    "columns",
    "cross_run_metrics",
    "filterable",
    "listed",
    "metric",
    "metric_names",
    "problems",
    "report_default",
    "sortable",
    "summarize",
    "validation_metrics",
]
