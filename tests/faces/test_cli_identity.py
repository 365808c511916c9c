"""The CLI side of issue 18: run identity (name, tags, note, overrides), partial marks,
archive / rm / diff, stop --sweep, show last, 80-column listings, report --plot-epochs. In-process (support.cli):
nothing here is about processes."""

from __future__ import annotations

import json

from support import identity_store
from support.cli import in_process

from rmconsole import store

NARROW = {"COLUMNS": "80"}


def test_a_named_tagged_run_end_to_end(isolated_home) -> None:
    done = in_process(
        "run", "--name", "quick look", "--tag", "base", "-t", "k200", "--set", "epochs=2", "--set", "n_tasks=2"
    )
    assert done.returncode == 0, done.stderr
    assert "quick look" in done.stdout
    detail = json.loads(in_process("show", "last", "--json").stdout)
    assert detail["name"] == "quick look" and detail["tags"] == ["base", "k200"]
    assert detail["overrides"] == {"n_tasks": 2, "epochs": 2}  # what differs from the preset (not the seed)
    # inside a task: one row per epoch (the stream pass, then each memory epoch), each with loss/lr/speed
    assert [(e["task"], e["phase"], e["epoch"]) for e in detail["epochs"]] == [
        (t, p, e) for t in range(2) for p, n in (("stream", 1), ("memory", 2)) for e in range(n)
    ]
    assert all(e["loss"] > 0 and e["lr"] > 0 and e["samples_per_s"] > 0 for e in detail["epochs"])
    assert detail["class_indexing"]["major_classes"].startswith("positions in class_order")
    assert detail["tasks"][0]["major_labels"] == [detail["class_order"][c] for c in detail["tasks"][0]["major_classes"]]
    shown = in_process("show", "last", env=NARROW).stdout
    for fragment in (
        "“quick look”",
        "tags: base, k200",
        "overrides: n_tasks=2 epochs=2",
        "memory after each update",
        "T1 200/",
        "epochs inside each task",
        "T1 memory",
        "A_last",
    ):
        assert fragment in shown, (fragment, shown)


def test_runs_filters_by_identity_and_marks_partial_metrics(isolated_home) -> None:
    ids = identity_store.build()
    listed = lambda *args: [r["id"] for r in json.loads(in_process("runs", "--json", *args).stdout)]  # noqa: E731
    assert sorted(listed("tag:base")) == sorted([ids["base"], ids["k500"]])
    assert listed("override:augment=none") == [ids["noaug"]]
    assert sorted(listed("A_last>80", "partial:false")) == sorted([ids["base"], ids["k500"]])
    assert ids["old"] not in listed() and ids["old"] in listed("--all")  # archived: hidden unless asked
    assert listed("archived:true") == [ids["old"]]
    table = in_process("runs", env=NARROW).stdout
    assert max(len(line) for line in table.splitlines()) <= 80
    assert "@3/5 86.00" in table and "@k/T: partial" in table  # the partial run, marked
    assert "digits-blurry10-online" in table and "no augmentation" in table  # names and presets never cut
    record = json.loads(in_process("runs", "--json", f"id:{ids['partial']}").stdout)[0]
    assert record["metrics"]["partial"] is True and record["metrics"]["I_last"] is None
    # report's selection reads the same grammar; partial runs are never averaged into a cell
    report = json.loads(in_process("report", "tag:ablation", "--format", "json").stdout)
    used = [run for row in report["rows"] for cell in row["cells"] for run in cell["used_runs"]]
    unfinished = [run for row in report["rows"] for cell in row["cells"] for run in cell["unfinished_runs"]]
    assert used == [ids["noaug"]] and unfinished == [ids["partial"]]
    assert "†" in in_process("report", "tag:ablation", "--rows", "epochs", "--format", "md").stdout


def test_tag_note_rename_archive_and_rm(isolated_home) -> None:
    ids = identity_store.build()
    out = in_process("tag", str(ids["base"]), str(ids["k500"]), "+checked", "-base")
    assert out.returncode == 0, out.stderr
    assert store.run_record(ids["base"]).tags == ("checked",)
    assert store.run_record(ids["k500"]).tags == ("k500", "checked")
    assert in_process("note", str(ids["base"]), "lr too high?").returncode == 0
    assert store.run_record(ids["base"]).note == "lr too high?"
    assert in_process("rename", str(ids["base"]), "baseline v2").returncode == 0
    assert store.run_record(ids["base"]).name == "baseline v2"
    out = in_process("archive", "--where", "tag:ablation status:finished")
    assert out.returncode == 0 and "archived 1 run(s)" in out.stdout and store.run_record(ids["noaug"]).archived
    assert in_process("archive", "--undo", str(ids["noaug"])).returncode == 0
    assert not store.run_record(ids["noaug"]).archived
    # rm: a running run is refused; an ended one goes with every row, its log and checkpoint
    out = in_process("rm", str(ids["partial"]), "--yes")
    assert out.returncode == 2 and "is running: stop it first" in out.stderr
    log = isolated_home / "logs" / f"run-{ids['noaug']}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("x\n")
    checkpoint = isolated_home / "checkpoints" / f"run-{ids['noaug']}.pt"
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    checkpoint.write_bytes(b"x")
    out = in_process("rm", str(ids["noaug"]), "--yes")
    assert out.returncode == 0, out.stderr
    assert ids["noaug"] not in store.run_statuses() and not log.exists() and not checkpoint.exists()
    assert store.epoch_metrics(ids["noaug"]) == [] and store.task_results(ids["noaug"]) == []
    assert store.epoch_metrics(ids["base"])  # other runs keep theirs


def test_diff_prints_config_as_set_writes_it_and_metric_deltas(isolated_home) -> None:
    ids = identity_store.build()
    out = in_process("diff", str(ids["base"]), str(ids["noaug"]), env=NARROW)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    augment = next(line for line in lines if line.strip().startswith("augment"))
    assert "cutmix+autoaug" in augment and "none" in augment and "(" not in augment  # never a Python repr
    assert any(line.strip().startswith("A_last") and "-9.00" in line for line in lines)
    assert any("acc after T1" in line for line in lines)
    data = json.loads(in_process("diff", str(ids["base"]), str(ids["partial"]), "--json").stdout)
    assert all(delta == "" for _, _, _, delta in data["metrics"])  # partial vs final: no B − A
    assert data["notes"] and "partial" in data["notes"][0]


def test_stop_a_sweep_and_show_last(isolated_home) -> None:
    ids = identity_store.build()
    out = in_process("stop", "--sweep", "last")
    assert out.returncode == 0, out.stderr
    assert "2 stopped" in out.stdout
    assert store.get_run(ids["sweep1"]).status == store.get_run(ids["sweep2"]).status == "stopped"
    assert store.get_run(ids["partial"]).status == "running"  # not in the sweep: untouched
    assert json.loads(in_process("show", "last", "--json").stdout)["id"] == max(ids.values())


def test_presets_fit_80_columns_and_long_has_descriptions(isolated_home) -> None:
    short = in_process("presets", env=NARROW).stdout
    assert max(len(line) for line in short.splitlines()) <= 80
    names = [p["name"] for p in json.loads(in_process("presets", "--json").stdout)]
    assert all(
        any(line.lstrip().startswith(name + " ") or line.strip() == name for line in short.splitlines())
        for name in names
    )  # every name whole on one line
    assert "Paper" not in short and "Paper" in in_process("presets", "--long", env=NARROW).stdout


def test_report_plot_epochs(isolated_home, tmp_path) -> None:
    ids = identity_store.build()
    out = in_process("report", "--runs", f"{ids['base']},{ids['partial']}", "--plot-epochs", str(tmp_path / "e.png"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "e.png").stat().st_size > 10_000
    # a place that cannot be written is named by the option that asked for it (it said --plot)
    out = in_process("report", "--runs", str(ids["base"]), "--plot-epochs", "/proc/rmconsole-epochs.png")
    assert out.returncode == 2 and out.stderr.startswith("error: cannot write --plot-epochs /proc/"), out.stderr
