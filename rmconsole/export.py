"""Export stored runs to where a team already looks: an MLflow tracking store or TensorBoard
event files. Input: runs as `store.run_detail` gives them (`show --json`); output: the
tracking store / event files. Optional extras: `pip install 'rmconsole[mlflow]'` or
`'rmconsole[tensorboard]'`. `view_hint` is what the CLI prints after an export: commands that work
with what the extra installs (the skinny MLflow client has no web UI; MLflow 3 reads a file store
only with MLFLOW_ALLOW_FILE_STORE=true).

What goes where, for each run:

    MLflow run (experiment EXPERIMENT)        TensorBoard (DIR/run-ID[-name]/)
    name: the run's name, else `run ID`       one folder per run
    tags: rmconsole.* (id, status, preset,    text: identity, config, overrides
          sweep, partial) and the run's tags
    params: the config, as --set writes it    hparams: the config + final metrics
    metrics: accuracy after each task         accuracy/after_task (step = task)
             (step = task), every metric of   final/A_last ... (step = last task)
             the catalogue the run has, at
             the last task
             train_loss, lr, samples_per_s,   epoch/train_loss, epoch/lr, ...
             test_accuracy per epoch          (step = epochs trained so far)
             (step = epochs trained so far)
    artifacts: memory/histograms.json (every  memory/classes: the classes in memory, one
               memory update), memory/*.png   histogram stepped by task (step = task)
               when matplotlib draws it

A partial run (not through all tasks) is exported with `rmconsole.partial=true` (MLflow tag /
text) and its final-only metrics named `partial_A_last` etc., so a dashboard never shows a partial
A_last as if it were final. Re-exporting a run replaces what an earlier export wrote for it. The
metrics are the catalogue's (rmconsole/metric_registry.py, plug-ins included).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from . import metric_registry
from .cl.results import task_figures
from .config import shorten
from .store.records import format_value

TARGETS = ("mlflow", "tensorboard")


class ExportError(ValueError):
    """An export that cannot be done (a missing extra, an unwritable place): one line."""


def _task_figures(task: dict[str, Any]) -> list[tuple[str, float]]:
    """A task's per-task figures (cl/results.py `figure`) that it measured, as (name, value)."""
    return [(name, float(task[name])) for name, _ in task_figures() if task.get(name) is not None]


def _finals(detail: dict[str, Any]) -> list[tuple[str, float]]:
    """(exported name, value) of every catalogue metric the run has: a final-only one of a
    partial run as `partial_NAME`."""
    m = detail.get("metrics") or {}
    partial = bool(m.get("partial"))
    return [
        (f"partial_{x.name}" if partial and x.final_only else x.name, float(m[x.name]))
        for x in metric_registry.catalogue()
        if isinstance(m.get(x.name), (int, float))
    ]


def _epoch_points(detail: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    return list(enumerate(detail.get("epochs") or []))


def _label(detail: dict[str, Any]) -> str:
    return detail.get("name") or f"run {detail['id']}"


MEMORY_TAG = "memory/classes"  # TensorBoard: the classes in memory after each task, step = task


def run_folder(detail: dict[str, Any]) -> str:
    """A run's TensorBoard folder: `run-ID`, then its name made safe for a file name (the runs of
    a sweep, each named by the sweep's template, are told apart in TensorBoard's run list)."""
    name = "".join(c if c.isalnum() or c in "._+=" else "-" for c in (detail.get("name") or "")).strip("-.")
    return f"run-{detail['id']}" + (f"-{name[:80]}" if name else "")


def view_hint(to: str, where: str, experiment: str = "rmconsole", experiment_id: str | None = None) -> list[str]:
    """How to look at what was exported, as commands that work with what the extra installs:
    `rmconsole[mlflow]` is mlflow-skinny, a client without the web UI (its `mlflow ui` fails on a
    missing flask), and MLflow 3 reads a file store only with MLFLOW_ALLOW_FILE_STORE=true."""
    if to == "tensorboard":
        return [f"see them with: tensorboard --logdir {where}"]
    if "://" in where and not where.startswith("file:"):
        return [f"see them in that tracking server's UI (experiment {experiment!r})"]
    uri = where if where.startswith("file:") else Path(where).expanduser().resolve().as_uri()
    listing = f"--experiment-id {experiment_id}" if experiment_id else "--experiment-id ID (mlflow experiments search)"
    return [
        f"list them: MLFLOW_ALLOW_FILE_STORE=true MLFLOW_TRACKING_URI={uri} mlflow runs list {listing}",
        f"browse them (the web UI needs the full package, not the extra's mlflow-skinny: pip install mlflow): "
        f"MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri {uri}",
        f"read them in Python: MLFLOW_ALLOW_FILE_STORE=true in the environment, then "
        f"MlflowClient(tracking_uri={uri!r})",
    ]


# ---------------------------------------------------------------------- MLflow


def shown_uri(where: str) -> str:
    """A tracking URI as it may be printed: its password masked (`http://me:***@host`)."""
    password = _password(where)
    if not password:
        return where
    parts = urlsplit(where)
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{password}@", ":***@", 1)))


def _password(where: str) -> str | None:
    try:
        return urlsplit(where).password if "://" in where else None
    except ValueError:
        return None


def _mlflow_error(err: Exception, where: str) -> ExportError:
    """MLflow's own words on one line, short, the URI's password masked wherever they quote it."""
    text = " ".join(str(getattr(err, "message", None) or err).split()) or type(err).__name__
    password = _password(where)
    if password:
        text = text.replace(password, "***")
    return ExportError(f"MLflow at {shorten(shown_uri(where))}: {shorten(text, 300)}")


def _check_server(where: str) -> None:
    """An http(s) tracking server that does not answer is said at once: MLflow's client retries a
    refused connection for about four minutes before it gives up."""
    parts = urlsplit(where)
    if parts.scheme not in ("http", "https"):
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ExportError(f"MLflow at {shorten(shown_uri(where))}: the port is not a number from 1 to 65535") from None
    if not parts.hostname:
        raise ExportError(f"MLflow at {shorten(shown_uri(where))}: the URI names no host (http://HOST:PORT)")
    try:
        socket.create_connection((parts.hostname, port), timeout=10).close()
    except OSError as err:
        reason = err.strerror or str(err) or type(err).__name__
        raise ExportError(
            f"cannot reach the MLflow tracking server at {shorten(shown_uri(where))}: {reason} (is it running?)"
        ) from None


def _mlflow_client(where: str) -> Any:
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise ExportError("--to mlflow needs MLflow: pip install 'rmconsole[mlflow]' (mlflow-skinny)") from None
    if "://" in where:  # a tracking server or a database URI
        _check_server(where)
        return MlflowClient(tracking_uri=where)
    path = Path(where).expanduser().resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ExportError(f"cannot create {path}: {err.strerror}") from None
    # MLflow 3 keeps its file store in maintenance mode behind this switch; it is still what
    # `mlflow ui --backend-store-uri DIR` and every MLflow client read
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return MlflowClient(tracking_uri=path.as_uri())


def experiment_id_of(where: str, experiment: str = "rmconsole") -> str | None:
    """The id of `experiment` in the tracking store at `where` (what `mlflow runs list` asks for)."""
    from mlflow.exceptions import MlflowException

    try:
        found = _mlflow_client(where).get_experiment_by_name(experiment)
    except MlflowException as err:
        raise _mlflow_error(err, where) from None
    return None if found is None else str(found.experiment_id)


def _epoch_ms(stamp: str | None) -> int | None:
    """`2026-11-27T17:11:50Z` (how show --json writes a time) as MLflow's milliseconds; None: now."""
    from datetime import datetime

    if not stamp:
        return None
    try:
        return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def _system_points(samples: Iterable[dict[str, Any]]) -> list[tuple[str, float, int, int]]:
    """(name, value, timestamp in ms, step = whole seconds since the first sample) of each measured
    figure of each system-load sample (`store.system_json`): system/cpu_percent, system/rss_bytes,
    system/load1, system/gpu_util, system/gpu_mem_bytes."""
    from datetime import datetime

    points = []
    for s in samples:
        stamp = int(datetime.fromisoformat(s["at"].replace("Z", "+00:00")).timestamp() * 1000)
        for key in ("cpu_percent", "rss_bytes", "load1", "gpu_util", "gpu_mem_bytes"):
            if s.get(key) is not None:
                points.append((f"system/{key}", float(s[key]), stamp, int(s["seconds"])))
    return points


def to_mlflow(
    details: Iterable[dict[str, Any]],
    where: str,
    experiment: str = "rmconsole",
    system: dict[int, list[dict[str, Any]]] | None = None,
) -> list[str]:
    """Write each run as an MLflow run in `experiment` of the tracking store at `where` (a
    folder: a file store; or a tracking URI). Returns the MLflow run ids. What MLflow refuses (a
    URI of no store it knows, a server's error, an experiment name it does not take) is an
    ExportError, one line, the URI's password masked. `system`: each run's system-load samples
    (`store.system_json`), logged as system/* metrics at the times they were taken."""
    try:
        from mlflow.exceptions import MlflowException
    except ImportError:
        raise ExportError("--to mlflow needs MLflow: pip install 'rmconsole[mlflow]' (mlflow-skinny)") from None
    try:
        return _to_mlflow(details, where, experiment, system or {})
    except MlflowException as err:
        raise _mlflow_error(err, where) from None


def _to_mlflow(
    details: Iterable[dict[str, Any]], where: str, experiment: str, system: dict[int, list[dict[str, Any]]]
) -> list[str]:
    from mlflow.entities import Metric, Param, RunTag

    client = _mlflow_client(where)
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found is not None else client.create_experiment(experiment)
    out = []
    for detail in details:
        for old in client.search_runs([experiment_id], filter_string=f"tags.`rmconsole.run_id` = '{detail['id']}'"):
            client.delete_run(old.info.run_id)  # re-export: replace
        m = detail.get("metrics") or {}
        tags = {
            "rmconsole.run_id": str(detail["id"]),
            "rmconsole.status": detail["status"],
            "rmconsole.preset": detail.get("preset") or "",
            "rmconsole.method": detail["method"],
            "rmconsole.dataset": detail["dataset"],
            "rmconsole.partial": str(bool(m.get("partial"))).lower(),
            "rmconsole.overrides": " ".join(
                f"{k}={format_value(v)}" for k, v in (detail.get("overrides") or {}).items()
            ),
        }
        if detail.get("sweep_id"):
            tags["rmconsole.sweep"] = detail["sweep_id"]
        if detail.get("note"):
            tags["mlflow.note.content"] = detail["note"]
        for tag in detail.get("tags") or []:
            tags[f"tag.{tag}"] = "true"
        # the run's own times (`show --json`), not the export's: MLflow's start and end are in ms
        started = _epoch_ms(detail.get("started_at") or detail.get("created_at"))
        run = client.create_run(experiment_id, start_time=started, run_name=_label(detail), tags=tags)
        run_id = run.info.run_id
        params = [Param(k, format_value(v)[:6000]) for k, v in (detail.get("config") or {}).items()]
        metrics = []
        for t in detail.get("tasks") or []:
            if t.get("accuracy") is not None:
                metrics.append(Metric("accuracy", float(t["accuracy"]), 0, t["task"] + 1))
            for name, value in _task_figures(t):
                metrics.append(Metric(f"task/{name}", value, 0, t["task"] + 1))
        last = max((t["task"] + 1 for t in detail.get("tasks") or [] if t.get("accuracy") is not None), default=0)
        for name, value in _finals(detail):
            metrics.append(Metric(name, value, 0, last))
        for step, e in _epoch_points(detail):
            for key, reading in (
                ("train_loss", e["loss"]),
                ("lr", e["lr"]),
                ("samples_per_s", e["samples_per_s"]),
                ("test_accuracy", e.get("test_accuracy")),
            ):
                if reading is not None:
                    metrics.append(Metric(key, float(reading), 0, step))
        for key, value, stamp, step in _system_points(system.get(detail["id"], ())):
            metrics.append(Metric(key, value, stamp, step))
        for i in range(0, max(len(params), len(metrics), 1), 900):  # MLflow takes at most 1000 metrics per batch
            client.log_batch(
                run_id,
                metrics=metrics[i : i + 900],
                params=params[i : i + 90] if i == 0 else [],
                tags=[RunTag("rmconsole.exported", "true")] if i == 0 else [],
            )
        for i in range(90, len(params), 90):
            client.log_batch(run_id, params=params[i : i + 90])
        if detail.get("memory"):
            client.log_text(run_id, json.dumps(detail["memory"], indent=1), "memory/histograms.json")
            _log_memory_plot(client, run_id, detail)
        client.log_text(run_id, json.dumps(detail, indent=1, default=str), "rmconsole/show.json")
        status = {"finished": "FINISHED", "failed": "FAILED", "stopped": "KILLED"}.get(detail["status"], "RUNNING")
        if status != "RUNNING":
            client.set_terminated(run_id, status, end_time=_epoch_ms(detail.get("finished_at")))
        out.append(run_id)
    return out


def _log_memory_plot(client: Any, run_id: str, detail: dict[str, Any]) -> None:
    try:
        from .report.figures import plot_memory
    except ImportError:  # (no matplotlib: the JSON is there)
        return
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = plot_memory(detail, Path(tmp) / "memory.png")
        except Exception:  # noqa: BLE001 - a figure is a convenience; the histograms are in the JSON
            return
        client.log_artifact(run_id, str(path), "memory")


# ---------------------------------------------------------------------- TensorBoard


def to_tensorboard(
    details: Iterable[dict[str, Any]], where: str, system: dict[int, list[dict[str, Any]]] | None = None
) -> list[Path]:
    """Write each run's event files into DIR/run-ID (one folder per run, so TensorBoard lists
    them as runs). Returns the folders. `system`: each run's system-load samples
    (`store.system_json`), written as system/* scalars stepped by seconds, at their wall time."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ExportError("--to tensorboard needs TensorBoard: pip install 'rmconsole[tensorboard]'") from None
    root = Path(where).expanduser()
    out = []
    for detail in details:
        folder = root / run_folder(detail)
        for old in [root / f"run-{detail['id']}", *root.glob(f"run-{detail['id']}-*")]:
            shutil.rmtree(old, ignore_errors=True)  # re-export: replace (under its old name too)
        try:
            writer = SummaryWriter(log_dir=str(folder))
        except OSError as err:
            raise ExportError(f"cannot write under {root}: {err.strerror}") from None
        m = detail.get("metrics") or {}
        identity = {
            "run": detail["id"],
            "name": detail.get("name"),
            "status": detail["status"],
            "preset": detail.get("preset"),
            "sweep": detail.get("sweep_id"),
            "tags": detail.get("tags"),
            "note": detail.get("note"),
            "partial": bool(m.get("partial")),
            "overrides": {k: format_value(v) for k, v in (detail.get("overrides") or {}).items()},
        }
        writer.add_text("rmconsole/run", "```\n" + json.dumps(identity, indent=1) + "\n```", 0)
        writer.add_text(
            "rmconsole/config",
            "\n".join(f"    {k} = {format_value(v)}" for k, v in (detail.get("config") or {}).items()),
            0,
        )
        last = 0
        for t in detail.get("tasks") or []:
            if t.get("accuracy") is not None:
                writer.add_scalar("accuracy/after_task", t["accuracy"], t["task"] + 1)
                last = t["task"] + 1
            for name, value in _task_figures(t):
                writer.add_scalar(f"task/{name}", value, t["task"] + 1)
        for name, value in _finals(detail):
            writer.add_scalar(f"final/{name}", value, last)
        for step, e in _epoch_points(detail):
            for key, reading in (
                ("train_loss", e["loss"]),
                ("lr", e["lr"]),
                ("samples_per_s", e["samples_per_s"]),
                ("test_accuracy", e.get("test_accuracy")),
            ):
                if reading is not None:
                    writer.add_scalar(f"epoch/{key}", reading, step)
        for key, value, stamp, step in _system_points((system or {}).get(detail["id"], ())):
            writer.add_scalar(key, value, step, walltime=stamp / 1000)
        for snap in detail.get("memory") or []:
            hist = snap["histogram"]
            if sum(hist):
                import numpy as np

                # one histogram stepped by task (TensorBoard's slider and offset view), not a tag per task
                classes = np.repeat(np.arange(len(hist)), hist)  # one value per sample in memory: its class
                writer.add_histogram(MEMORY_TAG, classes, snap["task"] + 1, bins=np.arange(len(hist) + 1) - 0.5)
        hparams = {
            k: (v if isinstance(v, (int, float, str, bool)) else format_value(v))
            for k, v in (detail.get("config") or {}).items()
            if v is not None
        }
        finals = {f"hparam/{name}": value for name, value in _finals(detail)}
        if finals:
            writer.add_hparams(hparams, finals, run_name=".")
        writer.close()
        out.append(folder)
    return out
