"""Tests that pin the science: each names the deliberate bug it catches (issue 13), so a
change that reintroduces one fails here even where every other test would pass.

- the clean image voting as view 0 of the uncertainty votes;
- the model in train mode (batch-norm batch statistics) while uncertainty is scored;
- herding replaced by random picks after the first (tests/cl/test_memory.py, whole pick order);
- F_last as max over k >= j clamped at 0;
- per-sample instead of per-class averaging in a task's accuracy (unequal class counts);
- top-k accuracy (the label among the k best-scored classes), stored beside top-1.
"""

from __future__ import annotations

import pytest
import torch

from rmconsole.cl import metrics
from rmconsole.cl.uncertainty import vote_uncertainty

CPU = torch.device("cpu")


# ---------------------------------------------------------------------- the votes


def _no_zero_images(n: int = 30) -> torch.Tensor:
    """32x32 images without a zero pixel: every cutout view (zero fill) differs from the clean image."""
    return torch.randint(1, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(3))


def test_the_clean_image_never_votes() -> None:
    """With the 4 cutout views of the `vr` list every view differs from the clean image, so a
    model that answers class 0 only for the exact clean image and class 1 otherwise must get 4
    votes for class 1 from every candidate (u = 0), and must never be shown a clean image or
    more than 4 views per candidate. A clean vote as view 0 gives 3 votes (u = 0.25)."""
    images = _no_zero_images()
    clean = {bytes(im.numpy().tobytes()) for im in images}
    seen = {"images": 0, "clean": 0}

    def predict(x: torch.Tensor) -> torch.Tensor:
        raw = (x * 255).round().to(torch.uint8)
        is_clean = torch.tensor([bytes(im.numpy().tobytes()) in clean for im in raw])
        seen["images"] += len(x)
        seen["clean"] += int(is_clean.sum())
        logits = torch.zeros(len(x), 3)
        logits[is_clean, 0] = 1.0
        logits[~is_clean, 1] = 1.0
        return logits

    u, votes = vote_uncertainty(
        predict,
        lambda idx: images[idx],
        torch.arange(len(images)),
        "vr",
        4,
        torch.Generator().manual_seed(4),
        lambda x: x.float() / 255,
        chunk_images=40,
    )
    assert seen == {"images": 4 * len(images), "clean": 0}
    assert torch.equal(votes, torch.full((len(images),), 4)) and torch.equal(u, torch.zeros(len(images)))


def test_uncertainty_is_scored_in_eval_mode() -> None:
    """Scoring must not use batch statistics: batch norm's running statistics stay as they were,
    and a candidate's uncertainty does not depend on which other candidates share its batch."""
    from rmconsole.cl.data import load_digits
    from rmconsole.cl.loop import build_protocol, make_augmenter
    from rmconsole.cl.methods import Setup, method_class
    from rmconsole.config import load_config

    _, cfg = load_config(None, {"method": "rm", "epochs": 1, "uncertainty_views": 4})
    data = load_digits()
    proto = build_protocol(cfg, data)
    setup = Setup(cfg, data, proto.train_labels, proto.test_labels, proto.groups, CPU, make_augmenter(cfg, data, CPU))
    torch.manual_seed(0)
    rm = method_class("rm")(setup)
    with torch.no_grad():  # informative running statistics, far from a batch's
        for m in rm.model.modules():
            if isinstance(m, torch.nn.BatchNorm1d):
                m.running_mean.uniform_(-3, 3)
                m.running_var.uniform_(0.1, 5)
    before = {k: v.clone() for k, v in rm.model.state_dict().items()}
    idx = proto.tasks[0][:64]
    rm.model.train()
    rm.uncertainty_of(idx)
    after = rm.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before), "uncertainty scoring changed batch-norm statistics"
    logits_eval = rm.logits(setup.augmenter.test(rm.images_of(idx)))
    rm.model.eval()
    assert torch.allclose(
        logits_eval,
        rm.model(setup.augmenter.test(rm.images_of(idx))).masked_fill(~rm.seen, torch.finfo(logits_eval.dtype).min),
    )


# ---------------------------------------------------------------------- the metrics


def test_forgetting_is_max_over_earlier_tasks_and_may_be_negative() -> None:
    """F_last = mean over j < T-1 of (max over k < T-1 of acc[k][j]) - acc[T-1][j], unclamped:
    task 0: max(50, 60) - 70 = -10; task 1: max(90, 80) - 85 = 5; mean -2.5 (the paper prints
    negative F5 values too). Max over k >= j, or clamping at 0, gives something else."""
    assert metrics.forgetting([[50, 90, 0], [60, 80, 0], [70, 85, 95]]) == pytest.approx(-2.5)
    assert metrics.forgetting([[50, 90, 0], [60, 80, 0], [40, 95, 95]]) == pytest.approx(7.5)  # (60-40 + 90-95)/2
    assert metrics.forgetting([[80.0, None], [70.0, 60.0]]) == pytest.approx(10.0)
    assert metrics.forgetting([[80.0]]) is None


def test_a_tasks_accuracy_averages_its_classes_not_its_samples() -> None:
    """Task 0 = classes 0, 1 with 10 and 2 test samples: class 0 all right (100%), class 1 all
    wrong (0%): acc = 50 (per class, as the authors compute it), not 10/12 = 83.3 (per sample)."""
    labels = torch.tensor([0] * 10 + [1] * 2 + [2] * 3 + [3] * 5)
    preds = torch.tensor([0] * 10 + [0] * 2 + [2] * 3 + [2] * 5)
    class_acc = metrics.per_class_accuracy(preds, labels, 4)
    assert class_acc == [100.0, 0.0, 100.0, 0.0]
    assert metrics.task_accuracy_row(class_acc, [[0, 1], [2, 3]]) == [50.0, 50.0]
    assert metrics.accuracy(preds, labels) == pytest.approx(65.0)  # the whole test set: per sample


def test_the_loops_accuracy_row_is_the_per_class_mean(tmp_path) -> None:
    """End to end on digits (its test classes have 33-38 samples): every acc[k][j] the loop
    reports is the mean of its task's per-class accuracies."""
    from rmconsole.cl.data import load_digits
    from rmconsole.cl.loop import run_protocol
    from rmconsole.config import load_config

    _, cfg = load_config(None, {"method": "finetune", "epochs": 1, "augment": "none"})
    outcomes = run_protocol(cfg, load_digits(), CPU)
    groups = [[2 * t, 2 * t + 1] for t in range(5)]
    for outcome in outcomes:
        for j, classes in enumerate(groups):
            vals = [outcome.class_accuracy[c] for c in classes]
            assert outcome.accuracy_row[j] == pytest.approx(sum(vals) / len(vals))


def test_topk_hits_and_rates() -> None:
    ranked = torch.tensor([[3, 1, 0], [2, 0, 1], [0, 1, 2], [1, 2, 3]])
    labels = torch.tensor([1, 1, 3, 1])
    hits = metrics.topk_hits(ranked, labels)
    assert hits.tolist() == [True, True, False, True]
    assert metrics.hit_rate(hits) == pytest.approx(75.0)
    assert metrics.per_class_hit_rate(hits, labels, 4) == [None, 100.0, None, 0.0]


def test_evaluation_stores_top1_beside_topk() -> None:
    """On digits: top-1 of a top-k evaluation is the plain evaluation's; top-10 of 10 classes is
    100%; top-k grows with k; the per-class top-k rows are stored through the loop."""
    from rmconsole.cl.data import load_digits
    from rmconsole.cl.inference import evaluate, evaluation
    from rmconsole.cl.loop import build_protocol, make_augmenter, run_protocol
    from rmconsole.cl.methods import Setup, Task, method_class
    from rmconsole.config import load_config

    _, cfg = load_config(None, {"method": "finetune", "epochs": 1, "augment": "none", "topk": 3})
    data = load_digits()
    proto = build_protocol(cfg, data)
    setup = Setup(cfg, data, proto.train_labels, proto.test_labels, proto.groups, CPU, make_augmenter(cfg, data, CPU))
    method = method_class("finetune")(setup)
    task = Task(0, proto.tasks[0], 5)
    method.before_task(task)
    method.learn_task(task)
    classes = list(range(10))
    top1, class_top1 = evaluate(method, data, setup.test_labels, classes, setup.augmenter)
    results = [evaluation(method, data, setup.test_labels, classes, setup.augmenter, topk=k) for k in (2, 3, 10)]
    assert all(r.accuracy == top1 and r.class_accuracy == class_top1 for r in results)
    assert results[2].topk_accuracy == 100.0 and all(v == 100.0 for v in results[2].topk_class_accuracy)
    assert top1 <= results[0].topk_accuracy <= results[1].topk_accuracy
    outcome = run_protocol(cfg, data, CPU)[-1]
    assert outcome.topk == 3 and outcome.topk_accuracy >= outcome.accuracy
    assert len(outcome.topk_accuracy_row) == 5


def test_icarl_top_k_is_the_k_nearest_class_means() -> None:
    from rmconsole.cl.methods.icarl import ICaRL

    class Stub:
        memory = [1]
        class_means = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]), dim=1)
        means_valid = torch.tensor([True, True, True])

        class model:
            @staticmethod
            def eval() -> None: ...

            @staticmethod
            def features(x: torch.Tensor) -> torch.Tensor:
                return x

    # (1, .2): distances .20, 1.25, 1.98 to the means; (-.1, -1): 1.48, 2.00, 1.34
    scores = ICaRL.class_scores(Stub, torch.tensor([[1.0, 0.2], [-0.1, -1.0]]))
    assert scores.topk(2).indices.tolist() == [[0, 1], [2, 0]]
    assert scores.argmax(1).tolist() == [0, 2]


def test_store_keeps_topk_beside_top1(isolated_home) -> None:
    from rmconsole import store
    from rmconsole.cl.events import TaskOutcome
    from rmconsole.config import load_config

    _, cfg = load_config(None, {"topk": 5})
    run_id = store.create_run(cfg.to_dict(), "p")
    for t, (a, ak) in enumerate([(30.0, 50.0), (40.0, 60.0)]):
        store.record_task(
            run_id,
            TaskOutcome(
                t,
                a,
                [a, a],
                [a] * 10,
                list(range(10)),
                1.0,
                topk=5,
                topk_accuracy=ak,
                topk_accuracy_row=[ak, ak - 10 * t],
            ),
        )
    record = store.run_record(run_id)
    assert (record.value("A_last"), record.value("A_avg")) == (40.0, 35.0)  # top-1 stays top-1
    assert (record.topk, record.value("A_last_topk"), record.value("A_avg_topk"), record.value("F_last_topk")) == (
        5,
        60.0,
        55.0,
        -10.0,
    )
    detail = store.run_detail(run_id)
    assert detail["metrics"]["A_last_topk"] == 60.0 and detail["metrics"]["topk"] == 5
    rows = store.task_results(run_id)
    assert [(r.topk, r.topk_accuracy) for r in rows] == [(5, 50.0), (5, 60.0)]
    plain = store.create_run(load_config(None, {})[1].to_dict(), "p")
    store.record_task(plain, TaskOutcome(0, 30.0, [30.0], [30.0] * 10, list(range(10)), 1.0))
    assert store.task_results(plain)[0].topk is None and store.run_record(plain).topk is None
