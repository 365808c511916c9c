"""`rmconsole export`: runs written into a real MLflow file store and real TensorBoard event
files, read back with the libraries themselves."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from support import identity_store
from support.cli import in_process

from rmconsole import store

T0 = datetime(2026, 11, 27, 12, 0, 0, tzinfo=UTC)


def _sampled(run_id: int) -> None:
    """Three system-load samples 5 s apart, as a supervisor would write them (the GPU unmeasured)."""
    store.record_system(
        run_id,
        [
            {"at": T0.replace(second=5 * i), "cpu_percent": c, "rss_bytes": 2**30 + i, "load1": 1.5}
            for i, c in enumerate((None, 180.0, 95.5))
        ],
    )


TRAINED = (datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), datetime(2026, 1, 2, 3, 9, 7, tzinfo=UTC))


def test_export_to_mlflow_reads_back(tmp_path, monkeypatch) -> None:
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # (MLflow 3 reads its file store behind this switch)
    from mlflow.tracking import MlflowClient

    ids = identity_store.build()
    _sampled(ids["base"])
    store.update_run(ids["base"], started_at=TRAINED[0], finished_at=TRAINED[1])
    target = tmp_path / "mlruns"
    out = in_process("export", str(ids["base"]), str(ids["partial"]), "--to", "mlflow", str(target))
    assert out.returncode == 0, out.stderr
    client = MlflowClient(tracking_uri=target.resolve().as_uri())
    experiment = client.get_experiment_by_name("rmconsole")
    runs = {r.data.tags["rmconsole.run_id"]: r for r in client.search_runs([experiment.experiment_id])}
    assert set(runs) == {str(ids["base"]), str(ids["partial"])}
    base = runs[str(ids["base"])]
    assert base.info.run_name == "baseline" and base.info.status == "FINISHED"
    # when it trained (set below, before the export), not when it was exported (issue 42)
    assert (base.info.start_time, base.info.end_time) == (TRAINED[0].timestamp() * 1000, TRAINED[1].timestamp() * 1000)
    assert base.data.params["epochs"] == "16" and base.data.params["augment"] == "cutmix+autoaug"
    assert base.data.tags["tag.base"] == "true" and base.data.tags["rmconsole.overrides"] == "epochs=16"
    assert base.data.metrics["A_last"] == 86.0
    history = client.get_metric_history(base.info.run_id, "accuracy")
    assert [(h.step, h.value) for h in history] == [(1, 27.5), (2, 53.0), (3, 71.0), (4, 81.5), (5, 86.0)]
    loss = client.get_metric_history(base.info.run_id, "train_loss")
    assert len(loss) == 5 * 17 and loss[1].value > loss[16].value  # each epoch, falling within a task
    cpu = client.get_metric_history(base.info.run_id, "system/cpu_percent")  # at the times they were taken
    ms = int(T0.timestamp() * 1000)
    assert [(h.timestamp, h.step, h.value) for h in cpu] == [(ms + 5000, 5, 180.0), (ms + 10000, 10, 95.5)]
    assert [h.value for h in client.get_metric_history(base.info.run_id, "system/rss_bytes")] == [
        2**30,
        2**30 + 1,
        2**30 + 2,
    ]
    assert "system/gpu_util" not in base.data.metrics  # not measured: absent
    assert {a.path for a in client.list_artifacts(base.info.run_id, "memory")} >= {"memory/histograms.json"}
    partial = runs[str(ids["partial"])]
    assert partial.data.tags["rmconsole.partial"] == "true"
    assert "A_last" not in partial.data.metrics  # a partial A_last is never exported as a final one
    assert partial.data.metrics["partial_A_last"] == pytest.approx(71.0 + 15.0)  # after task 3 of 5
    again = in_process("export", str(ids["base"]), "--to", "mlflow", str(target))  # re-export replaces
    assert again.returncode == 0, again.stderr
    active = client.search_runs([experiment.experiment_id], filter_string=f"tags.`rmconsole.run_id` = '{ids['base']}'")
    assert len(active) == 1


def test_export_to_tensorboard_reads_back(tmp_path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ids = identity_store.build()
    _sampled(ids["noaug"])
    out = in_process("export", "--sweep", "last", "--to", "tensorboard", "--dir", str(tmp_path / "tb"))
    assert out.returncode == 0 and "exported 2 run(s)" in out.stdout, out.stderr
    out = in_process("export", str(ids["noaug"]), "--to", "tensorboard", str(tmp_path / "tb"))
    assert out.returncode == 0, out.stderr
    folders = sorted(f.name for f in (tmp_path / "tb").iterdir())
    assert folders == sorted([f"run-{ids['sweep1']}", f"run-{ids['sweep2']}", f"run-{ids['noaug']}-no-augmentation"])
    events = EventAccumulator(
        str(tmp_path / "tb" / f"run-{ids['noaug']}-no-augmentation"), size_guidance={"scalars": 0, "histograms": 0}
    ).Reload()
    tags = events.Tags()
    assert {"accuracy/after_task", "final/A_last", "epoch/train_loss", "epoch/lr"} <= set(tags["scalars"])
    accuracy = [(e.step, e.value) for e in events.Scalars("accuracy/after_task")]
    assert [s for s, _ in accuracy] == [1, 2, 3, 4, 5] and accuracy[-1][1] == pytest.approx(77.0)
    assert len(events.Scalars("epoch/lr")) == 5 * 17
    cpu = events.Scalars("system/cpu_percent")
    assert [(e.step, e.value, e.wall_time) for e in cpu] == [
        (5, 180.0, T0.timestamp() + 5),
        (10, 95.5, T0.timestamp() + 10),
    ]
    assert tags["histograms"] == ["memory/classes"]  # one histogram, stepped by task, not a tag per task
    memory = events.Histograms("memory/classes")
    assert [h.step for h in memory] == [1, 2, 3, 4, 5]
    assert memory[-1].histogram_value.num == 200  # the memory's 200 samples


def test_export_refuses_bad_input_in_one_line(tmp_path) -> None:
    identity_store.build()
    out = in_process("export", "1", "--to", "wandb", str(tmp_path))
    assert out.returncode == 2 and "--to 'wandb': allowed: mlflow, tensorboard" in out.stderr
    out = in_process("export", "1", "--to", "mlflow")
    assert out.returncode == 2 and "say where" in out.stderr
    out = in_process("export", "99", "--to", "mlflow", str(tmp_path))
    assert out.returncode == 2 and "no run with id 99" in out.stderr and "Traceback" not in out.stderr


def test_the_view_hint_works_with_what_the_extra_installs(tmp_path) -> None:
    """The skinny MLflow client of `rmconsole[mlflow]` has no web UI: the hint says so, names the
    file store switch MLflow 3 needs, and gives a command the skinny client does run."""
    from rmconsole import export

    hint = export.view_hint("mlflow", str(tmp_path / "mlruns"), "rmconsole", "7")
    uri = (tmp_path / "mlruns").resolve().as_uri()
    assert hint[0] == (
        f"list them: MLFLOW_ALLOW_FILE_STORE=true MLFLOW_TRACKING_URI={uri} mlflow runs list --experiment-id 7"
    )
    assert (
        "pip install mlflow" in hint[1]
        and f"MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri {uri}" in hint[1]
    )
    assert "MLFLOW_ALLOW_FILE_STORE=true" in hint[2]
    assert export.view_hint("tensorboard", "tb") == ["see them with: tensorboard --logdir tb"]
    assert export.run_folder({"id": 4, "name": "study·rm·s1"}) == "run-4-study-rm-s1"
    assert export.run_folder({"id": 4, "name": None}) == "run-4"


def test_an_mlflow_server_that_does_not_answer_is_one_line_at_once_without_its_password(tmp_path) -> None:
    """MLflow's client retried a refused connection for about four minutes, then the CLI said
    "internal error: MlflowException: ... http://rm:secret@..." with the password in it; a URI of
    no store MLflow knows and an empty experiment name were internal errors too."""
    pytest.importorskip("mlflow")
    import time

    identity_store.build()
    started = time.monotonic()
    out = in_process("export", "1", "--to", "mlflow", "http://rm:secret@127.0.0.1:1")
    assert time.monotonic() - started < 30
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "cannot reach the MLflow tracking server at http://rm:***@127.0.0.1:1" in out.stderr
    assert "secret" not in out.stderr + out.stdout and "internal error" not in out.stderr
    out = in_process("export", "1", "--to", "mlflow", "nosuchstore://x")
    assert (
        out.returncode == 2
        and out.stderr.startswith("error: MLflow at nosuchstore://x: ")
        and "internal" not in out.stderr
    )
    out = in_process("export", "1", "--to", "mlflow", str(tmp_path / "mlruns"), "--experiment", " ")
    assert out.returncode == 2 and "--experiment ' ': give the MLflow experiment a name" in out.stderr
    assert not (tmp_path / "mlruns").exists()  # refused before the store folder was made
