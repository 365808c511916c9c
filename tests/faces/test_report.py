"""The report package on hand-made runs: aggregation (mean, std, count), incomplete cells, every format,
and the figures."""

from __future__ import annotations

import csv
import io
import json
import statistics

import pytest

from rmconsole import report as R


def make_run(
    run_id: int,
    method: str,
    seed: int,
    a_last: float | None,
    status: str = "finished",
    f_last: float | None = 5.0,
    best: float | None = None,
    tasks: list[float] | None = None,
    **config,
) -> dict:
    cfg = {
        "dataset": "digits",
        "model": "mlp400",
        "method": method,
        "memory_size": 200,
        "n_tasks": 5,
        "augment": ["cutmix", "autoaug"],
        "memory_policy": None,
        "seed": seed,
        "device": "auto",
        "threads": None,
        "lr": 0.05,
        **config,
    }
    metrics = {"A_last": a_last, "A_avg": None if a_last is None else a_last - 10, "F_last": f_last, "I_last": None}
    if best is not None:
        metrics["A_last_best_epoch"] = best
    run = {
        "id": run_id,
        "status": status,
        "preset": "digits-blurry10-online",
        "method": method,
        "dataset": "digits",
        "seed": seed,
        "sweep_id": "s1",
        "config": cfg,
        "metrics": metrics,
    }
    if tasks is not None:
        run["tasks"] = [{"task": t, "accuracy": a, "major_classes": [2 * t, 2 * t + 1]} for t, a in enumerate(tasks)]
    return run


@pytest.fixture
def grid() -> list[dict]:
    """rm × 3 seeds, finetune × 3 seeds (its seed 3 still running), ewc with seeds 1-2 only."""
    return [
        make_run(1, "rm", 1, 90.0),
        make_run(2, "finetune", 1, 50.0),
        make_run(3, "ewc", 1, 70.0),
        make_run(4, "rm", 2, 92.0),
        make_run(5, "finetune", 2, 54.0),
        make_run(6, "ewc", 2, 72.0),
        make_run(7, "rm", 3, 94.0),
        make_run(8, "finetune", 3, 12.0, status="running"),
    ]


def test_mean_std_count_per_cell(grid) -> None:
    rep = R.build_report(grid)
    assert rep.row_keys == ["method"] and rep.auto_keys == [] and rep.seeds == [1, 2, 3]
    assert [r[0] for r in rep.rows] == ["rm", "finetune", "ewc"]  # the order runs were made in
    rm = rep.cell(0, 0)
    assert rm.complete and rm.used == [1, 4, 7]
    assert rm.stats["A_last"].mean == pytest.approx(92.0)
    assert rm.stats["A_last"].std == pytest.approx(statistics.stdev([90.0, 92.0, 94.0]))  # sample std = 2
    assert R.cell_text(rep, rm, "A_last") == "92.00 ± 2.00"


def test_unfinished_runs_are_not_averaged_and_cells_are_marked(grid) -> None:
    rep = R.build_report(grid)
    finetune, ewc = rep.cell(1, 0), rep.cell(2, 0)
    assert not finetune.complete and finetune.unfinished == [8] and finetune.used == [2, 5]
    assert finetune.stats["A_last"].mean == pytest.approx(52.0)  # the running run's 12.0 is left out
    assert R.cell_text(rep, finetune, "A_last") == "52.00 ± 2.83 (n=2)†"
    assert not ewc.complete and ewc.unfinished == [] and ewc.seeds == [1, 2]  # seed 3 missing
    assert "† incomplete" in R.caption(rep)
    assert R.cell_text(rep, finetune, "I_last") == "—†"


def test_a_rerun_seed_counts_once_newest_finished(grid) -> None:
    grid.append(make_run(9, "rm", 1, 80.0))
    grid.append(make_run(10, "rm", 2, 10.0, status="failed"))
    rm = R.build_report(grid).cell(0, 0)
    assert rm.used == [9, 4, 7] and rm.complete  # the failed retry of seed 2 does not spoil it
    assert rm.stats["A_last"].n == 3 and rm.stats["A_last"].mean == pytest.approx((80 + 92 + 94) / 3)


def test_recording_only_keys_do_not_split_rows(grid) -> None:
    """eval_every_epoch=true records best-over-epochs figures beside the same training: its runs
    share a row with the others (test_rm_variants checks the trajectory is identical)."""
    grid[0]["config"]["eval_every_epoch"] = True
    grid[0]["config"]["threads"] = 1
    rep = R.build_report(grid)
    assert rep.auto_keys == [] and rep.cell(0, 0).used == [1, 4, 7]


def test_a_key_newer_than_a_run_reads_as_its_default(grid) -> None:
    """Runs stored before a config key existed ran as its default does: no split on it."""
    for run in grid[:3]:
        run["config"]["reset_head"] = False  # the newer runs carry the key, the older ones do not
    rep = R.build_report(grid)
    assert rep.auto_keys == [] and rep.cell(0, 0).used == [1, 4, 7]
    grid[0]["config"]["reset_head"] = True
    assert R.build_report(grid).auto_keys == ["reset_head"]


def test_columns_sort_numerically_and_differing_keys_split_rows() -> None:
    runs = [
        make_run(i, m, s, 60.0 + i, memory_size=k)
        for i, (m, k, s) in enumerate(
            [(m, k, s) for m in ("rm", "finetune") for k in (1000, 200, 500) for s in (1, 2)], 1
        )
    ]
    runs.append(make_run(50, "rm", 1, 99.0, memory_size=200, memory_policy="random"))
    rep = R.build_report(runs, rows=["method"], cols=["memory_size"])
    assert rep.cols == [(200,), (500,), (1000,)]
    assert rep.auto_keys == ["memory_policy"]  # never mixed into the rm cells
    assert [(r[0], r[1]) for r in rep.rows] == [("rm", None), ("finetune", None), ("rm", "random")]
    assert rep.cell(2, 1) is None and rep.cell(2, 0).stats["A_last"].n == 1
    assert rep.label_keys == ["method", "memory_policy"]
    wide = R.build_report(runs, rows=["method"], cols=["memory_size"], only_changed=False)
    assert {"dataset", "model", "lr", "device"} <= set(wide.label_keys) and "memory_size" not in wide.label_keys
    assert "seed" not in wide.label_keys


def test_keys_fixed_by_the_column_or_the_row_do_not_split_rows() -> None:
    """The paper's layout: columns MNIST (K=500) | CIFAR10 (K=200); a method-specific lr is a label."""
    runs = []
    for i, (m, d, s) in enumerate([(m, d, s) for m in ("rm", "gdumb") for d in ("mnist", "cifar10") for s in (1, 2)]):
        runs.append(
            make_run(
                i + 1,
                m,
                s,
                80.0 + i,
                dataset=d,
                memory_size=500 if d == "mnist" else 200,
                model="mlp400" if d == "mnist" else "resnet18",
                lr=0.1 if m == "gdumb" else 0.05,
            )
        )
    rep = R.build_report(runs, cols=["dataset"], metrics=["A_last"])
    assert rep.auto_keys == [] and rep.col_info_keys == ["model", "memory_size"] and rep.label_keys == ["method", "lr"]
    assert [R.col_title(rep, c) for c in rep.cols] == [
        "dataset=cifar10 (model=resnet18, memory_size=200)",
        "dataset=mnist (model=mlp400, memory_size=500)",
    ]
    assert all(c.complete and c.stats["A_last"].n == 2 for c in rep.cells.values())
    assert R.to_markdown(rep).splitlines()[2].startswith("| rm | 0.05 | ")
    cell = json.loads(R.to_json(rep))["rows"][0]["cells"][1]
    assert cell["col"] == {"dataset": "mnist"} and cell["col_setting"] == {"model": "mlp400", "memory_size": 500}


def test_seed_as_a_column_makes_single_run_cells_complete(grid) -> None:
    rep = R.build_report([r for r in grid if r["method"] == "rm"], cols=["seed"])
    assert all(c.complete and c.expected == [c.seeds[0]] for c in rep.cells.values())
    assert R.cell_text(rep, rep.cell(0, 0), "A_last") == "90.00"


def test_best_over_epochs_is_reported_only_when_recorded_and_labelled(grid) -> None:
    assert "A_last_best_epoch" not in R.build_report(grid).metrics
    grid[0]["metrics"]["A_last_best_epoch"] = 95.0
    rep = R.build_report(grid)
    assert rep.metrics[-1] == "A_last_best_epoch"
    assert "test-set selected" in R.to_markdown(rep).splitlines()[0]
    assert rep.cell(0, 0).stats["A_last_best_epoch"].n == 1


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"rows": ["colour"]}, "--rows 'colour'"),
        ({"rows": ["method"], "cols": ["method"]}, "both a row and a column"),
        ({"metrics": ["A5"]}, "--metrics 'A5'"),
    ],
)
def test_bad_requests_are_one_line(grid, kwargs, fragment) -> None:
    with pytest.raises(R.ReportError, match=fragment):
        R.build_report(grid, **kwargs)
    with pytest.raises(R.ReportError, match="no runs"):
        R.build_report([])


def test_markdown_reproduces_the_paper_table_layout(grid) -> None:
    rep = R.build_report([r for r in grid if r["method"] != "ewc"], metrics=["A_last", "F_last", "I_last"])
    lines = R.to_markdown(rep).splitlines()
    assert lines[0] == "| method | A_last ↑ | F_last ↓ | I_last ↓ |"
    assert lines[1] == "|:--|--:|--:|--:|"
    assert lines[2] == "| rm | 92.00 ± 2.00 | 5.00 ± 0.00 | — |"
    assert lines[3].startswith("| finetune | 52.00 ± 2.83 (n=2)† |")
    assert lines[5].startswith("Table: dataset=digits, model=mlp400, memory_size=200, n_tasks=5")


def test_csv_parses_back_to_the_numbers(grid) -> None:
    rep = R.build_report(grid, cols=["dataset"])
    rows = list(csv.DictReader(io.StringIO(R.to_csv(rep))))
    assert [r["method"] for r in rows] == ["rm", "finetune", "ewc"]
    assert float(rows[0]["dataset=digits A_last mean"]) == statistics.mean([90.0, 92.0, 94.0])
    assert float(rows[0]["dataset=digits A_last std"]) == pytest.approx(statistics.stdev([90.0, 92.0, 94.0]), abs=0)
    assert rows[1]["dataset=digits A_last n"] == "2" and rows[1]["dataset=digits A_last complete"] == "false"
    assert rows[0]["dataset=digits I_last mean"] == "" and rows[0]["dataset=digits I_last n"] == "0"


def test_json_traces_every_number_to_its_runs(grid) -> None:
    data = json.loads(R.to_json(R.build_report(grid)))
    assert data["rows_by"] == ["method"] and data["seeds"] == [1, 2, 3]
    finetune = data["rows"][1]
    assert finetune["row"] == {"method": "finetune"}
    cell = finetune["cells"][0]
    assert cell["unfinished_runs"] == [8] and cell["complete"] is False
    a_last = cell["metrics"]["A_last"]
    assert a_last["values"] == [{"run": 2, "seed": 1, "value": 50.0}, {"run": 5, "seed": 2, "value": 54.0}]
    assert a_last["mean"] == 52.0 and a_last["n"] == 2


def test_a_run_stored_without_a_key_that_has_no_default_reports_it_as_missing(grid) -> None:
    """A config without `model` (a key with no default: presets give it) reads as missing in every
    format: --format json printed PydanticUndefined's TypeError."""
    runs = [dict(r, config={k: v for k, v in r["config"].items() if k != "model"}) for r in grid]
    rep = R.build_report(runs, paper=True)
    data = json.loads(R.to_json(rep), parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}"))
    assert data["setting"].get("model") is None and data["rows"][0]["cells"][0]["metrics"]["A_last"]["mean"] == 92.0
    assert "Undefined" not in R.to_markdown(rep) + R.to_csv(rep) + R.to_latex(rep)


def test_latex_uses_booktabs_and_pm(grid) -> None:
    runs = [dict(r, config={**r["config"], "memory_size": k}) for r in grid for k in (200,)]
    runs += [
        dict(
            make_run(r["id"] + 100, r["method"], r["seed"], 40.0 + r["seed"], status=r["status"]),
            config={**r["config"], "memory_size": 500},
        )
        for r in grid
    ]
    text = R.to_latex(R.build_report(runs, cols=["memory_size"], metrics=["A_last", "F_last"]))
    assert "\\toprule" in text and "\\midrule" in text and "\\bottomrule" in text
    assert "92.00 $\\pm$ 2.00" in text and "$^\\dagger$" in text
    assert "\\multicolumn{2}{c}{memory\\_size=200}" in text and "\\cmidrule(lr){2-3} \\cmidrule(lr){4-5}" in text
    assert "A\\_last ($\\uparrow$) & F\\_last ($\\downarrow$)" in text
    assert "±" not in text.split("\\begin{tabular}")[1]


def test_rich_table_renders(grid) -> None:
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(R.rich_table(R.build_report(grid)))
    text = console.export_text()
    assert "92.00 ± 2.00" in text and "finetune" in text and "mean ± std" in text


def test_select_compares_values_as_written() -> None:
    runs = [make_run(1, "rm", 1, 50.0, augment=[]), make_run(2, "rm", 1, 50.0), make_run(3, "rm", 1, 5.0, lr=0.1)]
    assert [r["id"] for r in R.select(runs, {"augment": ["none"]})] == [1]
    assert [r["id"] for r in R.select(runs, {"augment": ["cutmix+autoaug"], "lr": ["0.05"]})] == [2]
    assert [r["id"] for r in R.select(runs, {"lr": ["0.1", "0.05"]})] == [1, 2, 3]


def test_accuracy_curves_are_mean_and_std_over_seeds() -> None:
    runs = [
        make_run(1, "rm", 1, 60.0, tasks=[20, 40, 60]),
        make_run(2, "rm", 2, 64.0, tasks=[22, 44, 64]),
        make_run(3, "finetune", 1, 30.0, tasks=[20, 25, 30]),
    ]
    rep = R.build_report(runs)
    curves = R.accuracy_curves(rep, {r["id"]: r for r in runs})[0]
    assert curves[0].label == "rm" and curves[0].mean == [21.0, 42.0, 62.0] and curves[0].n == 2
    assert curves[0].std == pytest.approx(
        [statistics.stdev([20, 22]), statistics.stdev([40, 44]), statistics.stdev([60, 64])]
    )
    assert curves[1].std == [0.0, 0.0, 0.0]


def _png(path):
    import matplotlib.image

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = matplotlib.image.imread(path)
    assert pixels.std() > 0.05  # not a blank canvas
    return pixels


def test_plots_are_written(tmp_path) -> None:
    runs = [
        make_run(i, m, s, 50.0, tasks=[20 + s, 40, 50 + (m == "rm") * 20], memory_size=k)
        for i, (m, s, k) in enumerate([(m, s, k) for m in ("rm", "finetune") for s in (1, 2) for k in (200, 500)], 1)
    ]
    runs.append(make_run(99, "joint", 1, 95.0, tasks=[95.0], memory_size=200))
    rep = R.build_report(runs, cols=["memory_size"])
    pixels = _png(R.plot_accuracy(rep, {r["id"]: r for r in runs}, tmp_path / "acc.png"))
    assert pixels.shape[1] > pixels.shape[0]  # two panels side by side
    detail = dict(
        runs[0],
        class_order=[3, 1, 2, 0, 4, 5, 6, 7, 8, 9],
        class_names=[f"c{i}" for i in range(10)],
        memory=[
            {"task": t, "histogram": [20] * 2 * (t + 1) + [0] * (8 - 2 * t), "slots_per_class": 20} for t in range(3)
        ],
    )
    _png(R.plot_memory(detail, tmp_path / "mem.png"))
    many = dict(detail, memory=[{"task": t, "histogram": [t] * 100, "slots_per_class": 1} for t in range(3)])
    _png(R.plot_memory(many, tmp_path / "heat.png"))
    with pytest.raises(R.ReportError, match="no memory snapshot"):
        R.plot_memory(dict(detail, memory=[]), tmp_path / "none.png")


# ---------------------------------------------------------------------- --paper, top-k, I_last marks


def _mnist_run(run_id: int, method: str, seed: int, a_last: float, augment: list[str], **extra) -> dict:
    run = make_run(
        run_id,
        method,
        seed,
        a_last,
        f_last=1.0,
        dataset="mnist",
        memory_size=500,
        blurry=10,
        stream="online",
        augment=augment,
        uncertainty="randaug",
        **{"epochs": 256, **extra},
    )
    run["dataset"] = "mnist"
    return run


def test_paper_figures_sit_beside_matching_cells_with_the_difference() -> None:
    runs = [_mnist_run(i, "rm", s, a, ["cutmix", "autoaug"]) for i, s, a in ((1, 1, 90.0), (2, 2, 91.0), (3, 3, 92.0))]
    runs += [_mnist_run(4 + s, "rm", s, 89.0 + s, []) for s in (1, 2, 3)]  # RM w/o DA
    runs += [_mnist_run(8, "ewc", 1, 88.0, ["cutmix"])]  # the paper's EWC ran without augmentation
    runs += [_mnist_run(9 + s, "rm", s, 75.0, ["cutmix", "autoaug"], epochs=8) for s in (1, 2, 3)]  # a short try
    rep = R.build_report(runs, rows=["method", "augment", "epochs"], metrics=["A_last", "F_last"], paper=True)

    def row(method: str, augment: list[str], epochs: int) -> int:
        return rep.row_labels.index({"method": method, "augment": tuple(augment), "epochs": epochs})

    rm, rm_noda = rep.cell(row("rm", ["cutmix", "autoaug"], 256), 0), rep.cell(row("rm", [], 256), 0)
    ewc, short = rep.cell(row("ewc", ["cutmix"], 256), 0), rep.cell(row("rm", ["cutmix", "autoaug"], 8), 0)
    assert rm.paper["A_last"].mean == 91.80 and rm.paper["A_last"].std == 0.69
    assert rm.paper["A_last"].label == "tab:various-dataset-blurry10-online" and rm.paper["A_last"].row == "RM"
    assert rm_noda.paper["A_last"].mean == 92.65 and rm_noda.paper["F_last"].mean == 0.58
    assert R.cell_text(rep, rm, "paper:A_last") == "91.80 ± 0.69"
    assert R.cell_text(rep, rm, "diff:A_last") == "-0.80"  # 91.00 - 91.80: the paper's protocol
    # not the paper's protocol: its value, and no Δ but the keys that differ (issue 27: −15.96 beside 8 epochs)
    assert R.cell_text(rep, short, "paper:A_last") == "91.80 ± 0.69"
    assert R.cell_text(rep, short, "diff:A_last") == "≠ epochs 8≠256"
    assert R.cell_text(rep, ewc, "diff:A_last") == "≠ augment cutmix≠none"
    assert "only where the runs follow the paper's protocol" in R.caption(rep)
    md = R.to_markdown(rep)
    assert "| paper A_last ↑ | Δ A_last ↑ |" in md.splitlines()[0] + " |" or "paper A_last" in md
    assert "-0.80" in md and "91.80 ± 0.69" in md and "tab:various-dataset-blurry10-online" in md
    assert "≠ epochs 8≠256" in md and "-15.96" not in md
    rows = list(csv.reader(io.StringIO(R.to_csv(rep))))
    first, last = 1 + row("rm", ["cutmix", "autoaug"], 256), 1 + row("rm", ["cutmix", "autoaug"], 8)
    assert "A_last paper mean" in rows[0] and "91.8" in rows[first]
    protocol = rows[0].index("A_last paper protocol")
    assert rows[last][protocol] == "epochs 8≠256" and rows[first][protocol] == "same"
    data = json.loads(R.to_json(rep))
    assert data["rows"][first - 1]["cells"][0]["paper"]["A_last"]["mean"] == 91.80
    assert data["rows"][last - 1]["cells"][0]["paper"]["A_last"]["protocol_differs"] == ["epochs 8≠256"]
    assert "$\\neq$" in R.to_latex(rep)
    assert "\\Delta" in R.to_latex(rep)
    no_paper = R.build_report(runs, rows=["method", "augment"], metrics=["A_last"])
    assert "paper" not in R.to_markdown(no_paper).splitlines()[0]


def test_paper_imagenet_figures_are_top5_and_match_only_top5_metrics() -> None:
    from rmconsole import paper

    cfg = {
        "dataset": "imagenet",
        "method": "rm",
        "memory_size": 20000,
        "n_tasks": 10,
        "blurry": 10,
        "stream": "online",
        "augment": ["cutmix", "autoaug"],
        "uncertainty": "randaug",
        "topk": 5,
    }
    assert paper.paper_figure(cfg, "A_last_topk").mean == 50.11
    assert paper.paper_figure(cfg, "A_last") is None  # never compared with a top-1 figure
    assert paper.paper_figure({**cfg, "topk": 1}, "A_last_topk") is None
    star = {**cfg, "method": "bic_star", "augment": []}
    assert paper.paper_figure(star, "A_last_topk").mean == 37.20
    # every printed number is in the data: 7 rows x 9 (Table 1), 7 x 9 (2), 7 x 6 (3), 6 x 10 (4),
    # 3 (5), 4 x 6 (6) and the supplement's 6 x 5
    assert len(paper.figures()) == 63 + 63 + 42 + 60 + 3 + 24 + 30


def test_topk_metrics_are_reported_and_labelled() -> None:
    runs = [make_run(i, "rm", s, 30.0 + s) for i, s in ((1, 1), (2, 2))]
    for r in runs:
        r["metrics"].update(topk=5, A_last_topk=r["metrics"]["A_last"] + 20, F_last_topk=2.0, A_avg_topk=None)
    rep = R.build_report(runs)
    assert "A_last_topk" in rep.metrics and rep.cell(0, 0).stats["A_last_topk"].mean == pytest.approx(51.5)
    assert "top-k: k=5" in R.caption(rep)
    assert R.build_report(runs, metrics=["A_last_topk"]).metrics == ["A_last_topk"]


def test_i_last_against_a_differing_joint_run_is_marked() -> None:
    runs = [make_run(1, "rm", 1, 90.0), make_run(2, "rm", 2, 92.0)]
    for r in runs:
        r["metrics"].update(
            I_last=5.0,
            I_last_joint_run=9,
            I_last_joint_differs={"augment": {"run": ["cutmix", "autoaug"], "joint": []}},
        )
    rep = R.build_report(runs)
    assert R.cell_text(rep, rep.cell(0, 0), "I_last") == "5.00 ± 0.00*"
    assert (
        "* I_last against a joint run that differs beyond its own training recipe: augment cutmix+autoaug here vs none"
        in R.caption(rep)
    )
    for r in runs:
        del r["metrics"]["I_last_joint_differs"]
    assert "*" not in R.cell_text(R.build_report(runs), R.build_report(runs).cell(0, 0), "I_last")


def test_a_baseline_run_naming_its_own_memory_policy_is_the_papers_row() -> None:
    """The baseline presets name each method's own policy (EWC: reservoir, iCaRL: prototype...):
    such a run is the paper's row; another policy is not. PAPER_POLICY is each class's default."""
    from rmconsole import paper
    from rmconsole.cl.methods import method_class

    mnist = {"dataset": "mnist", "memory_size": 500, "n_tasks": 5, "blurry": 10, "stream": "online", "augment": []}
    assert paper.paper_figure({**mnist, "method": "ewc", "memory_policy": "reservoir"}, "A_last").mean == 90.98
    assert paper.paper_figure({**mnist, "method": "icarl", "memory_policy": "prototype"}, "A_last").mean == 78.09
    assert paper.paper_figure({**mnist, "method": "ewc", "memory_policy": "prototype"}, "A_last") is None
    for name, policy in paper.PAPER_POLICY.items():
        assert method_class(name).default_memory_policy == policy, name


def test_a_methods_own_parameter_shows_only_on_its_methods_rows() -> None:
    """`rm_variant` is RM's key: ER's runs carry its default in their config but never read it,
    so ER's row shows "—" (not RM's "paper"), and a parameter no row's method reads (EWC's
    reg_weight differing between two RM runs' stored configs) neither splits rows nor adds a label."""
    runs = [
        make_run(1, "er", 1, 60.0, rm_variant="paper"),
        make_run(2, "rm", 1, 70.0, rm_variant="paper"),
        make_run(3, "rm", 1, 30.0, rm_variant="iblurry"),
        make_run(4, "er", 2, 61.0, rm_variant="paper", reg_weight=5.0),
    ]
    rep = R.build_report(runs, rows=["method", "rm_variant"], metrics=["A_last"])
    assert rep.rows == [("er", None), ("rm", "paper"), ("rm", "iblurry")]
    assert rep.auto_keys == [] and "reg_weight" not in rep.label_keys
    assert rep.cell(0, 0).stats["A_last"].n == 2  # both ER seeds in one cell
    assert R.to_markdown(rep).splitlines()[2].startswith("| er | — | ")
    plain = R.build_report(runs[:2] + runs[3:], metrics=["A_last"])  # one RM variant: nothing to tell apart
    assert plain.label_keys == ["method"] and plain.rows == [("er",), ("rm",)]


def test_the_caption_names_no_task_free_key_for_runs_of_the_task_protocol(grid) -> None:
    """A task run's config holds disjoint_classes, online_iter and eval_period (at their defaults)
    but never reads them; `show` leaves them out, and the caption (and the figures' title) said
    `disjoint_classes=50, online_iter=1, eval_period=100` under every RM-protocol table."""
    for run in grid:
        run["config"].update(stream="online", blurry=10, disjoint_classes=50, online_iter=1.0, eval_period=100)
    text = R.caption(R.build_report(grid))
    assert "blurry=10" in text and "stream=online" in text
    assert not any(key in text for key in ("disjoint_classes", "online_iter", "eval_period")), text
    grid[0]["config"]["stream"] = "iblurry"  # one task-free run among task runs: still not theirs
    assert "disjoint_classes" not in R.caption(R.build_report(grid))
    for run in grid:
        run["config"]["stream"] = "iblurry"  # the keys of the follow-up's protocol: its setting
    assert "disjoint_classes=50, online_iter=1, eval_period=100" in R.caption(R.build_report(grid))


def test_a_task_free_caption_names_epochs_only_when_a_method_reads_them(grid) -> None:
    """Issue 42: ER and CLIB never read `epochs` on a task-free stream (only RM's and GDumb's memory
    epochs do); the caption said `epochs=32` under their table."""
    for run in grid:
        run["config"].update(stream="iblurry", blurry=10, disjoint_classes=50, epochs=32)
    er = [r for r in grid if r["method"] != "rm"]
    for run in er:
        run["method"] = run["config"]["method"] = "er"
    assert "epochs" not in R.caption(R.build_report(er))
    assert "epochs=32" in R.caption(R.build_report(grid))  # RM's runs among them read it


def test_show_names_the_validation_auc_only_for_a_run_with_validation() -> None:
    """`show` of a task-free run printed `A_auc 82.43  val_A_auc —` and the validation note for a
    run with no validation stream; reports.md: validation metrics are listed when a run has them."""
    from rmconsole.report import anytime

    run = {"config": {"stream": "iblurry", "eval_period": 100}, "anytime": [], "metrics": {"A_auc": 82.43}}
    first = anytime.anytime_lines(run)[0]
    assert first.startswith("A_auc 82.43 over 0 anytime evaluations") and "validation" not in first, first
    run["metrics"]["val_A_auc"] = 80.0
    assert anytime.anytime_lines(run)[0].startswith("A_auc 82.43  val_A_auc 80.00 over"), anytime.anytime_lines(run)


def test_a_table_cut_to_the_terminal_says_so_and_names_the_whole_form(grid) -> None:
    """At 80 columns a task-free sweep's table (13 columns) printed `56…`, `0.…`: figures cut with
    nothing saying where to read them whole (`report --sweep last --plot anytime.png`)."""
    from rich.console import Console

    def printed(width: int) -> str:
        console = Console(record=True, width=width)
        console.print(R.rich_table(R.build_report(grid), width=width))
        return console.export_text()

    narrow = printed(36)
    assert "…" in narrow and "cells ending in … are cut to fit 36 columns: --format md" in " ".join(narrow.split())
    wide = printed(200)
    assert "92.00 ± 2.00" in wide and "are cut" not in wide
