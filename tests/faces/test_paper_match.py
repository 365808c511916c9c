"""paper.paper_comparison: a Δ only beside a run of the paper's protocol, otherwise the paper's
value with the keys that differ named (issue 27, item 1)."""

from rmconsole import paper

RM_PAPER = {
    "dataset": "mnist",
    "model": "mlp400",
    "method": "rm",
    "memory_size": 500,
    "n_tasks": 5,
    "blurry": 10,
    "stream": "online",
    "augment": ["cutmix", "autoaug"],
    "epochs": 256,
    "uncertainty": "randaug",
}


def test_a_run_of_the_papers_protocol_matches() -> None:
    found = paper.paper_comparison(RM_PAPER, "A_last")
    assert found is not None and found.matches and found.figure.mean == 91.80 and found.differs_text() == ""


def test_a_short_run_without_augmentation_names_what_differs() -> None:
    run = {**RM_PAPER, "epochs": 8, "augment": ["none"], "model": "resnet18", "memory_size": 200}
    found = paper.paper_comparison(run, "A_last")
    assert found is not None and not found.matches
    assert found.figure.row == "RM w/o DA"  # the nearest row: augmentation agrees
    assert found.differs_text() == "model resnet18≠mlp400, K 200≠500, epochs 8≠256"
    assert found.differs_text(limit=1) == "model resnet18≠mlp400, +2"
    assert [d.key for d in paper.protocol_differences(run, found.figure)] == ["model", "memory_size", "epochs"]


def test_a_missing_key_is_never_taken_for_a_match() -> None:
    run = {k: v for k, v in RM_PAPER.items() if k != "epochs"}
    found = paper.paper_comparison(run, "A_last")
    assert found is not None and found.differs_text() == "epochs unset≠256"


def test_no_figure_for_a_dataset_or_method_the_paper_does_not_print() -> None:
    assert paper.paper_comparison({**RM_PAPER, "dataset": "digits"}, "A_last") is None
    assert paper.paper_comparison({**RM_PAPER, "method": "er"}, "A_last") is None
    assert set(paper.paper_comparisons(RM_PAPER, ["A_last", "F_last", "A_auc"])) == {"A_last", "F_last"}
