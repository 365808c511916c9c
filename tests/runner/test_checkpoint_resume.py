"""Task checkpoints: a run resumed from any task's checkpoint ends exactly as the uninterrupted
run, for every registered method and memory policy; bad checkpoints are refused with one line."""

from __future__ import annotations

import io
from contextlib import contextmanager

import pytest
import torch
from support.online_helpers import VIT_METHODS, method_model

from rmconsole import store
from rmconsole.cl.data import load_digits
from rmconsole.cl.events import Reporter
from rmconsole.cl.loop import CheckpointMismatch, run_protocol
from rmconsole.cl.methods import METHODS, REGISTRY
from rmconsole.config import load_config
from rmconsole.runner.checkpoints import (
    CheckpointError,
    check_checkpoint,
    checkpoint_path,
    load_checkpoint,
    save_checkpoint,
)


class Recorder(Reporter):
    """Keeps every outcome and every checkpoint, the latter as the bytes a worker would write."""

    def __init__(self) -> None:
        self.outcomes, self.checkpoints = [], []

    def task_finished(self, outcome, checkpoint):
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        self.outcomes.append(outcome)
        self.checkpoints.append(buffer.getvalue())


@contextmanager
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _facts(outcomes):
    return [(o.task, o.accuracy, o.accuracy_row, o.class_accuracy, o.best_epoch_accuracy) for o in outcomes]


def _resumed_equals_uninterrupted(overrides: dict, after_tasks: tuple[int, ...]) -> None:
    _, cfg = load_config(None, {"epochs": 2, "uncertainty_views": 6, **overrides})
    with one_thread():
        full = Recorder()
        run_protocol(cfg, load_digits(), torch.device("cpu"), full)
        n = len(full.outcomes)
        for k in after_tasks:
            if k >= n:
                continue
            state = torch.load(io.BytesIO(full.checkpoints[k]), weights_only=True)  # what resume loads
            resumed = Recorder()
            run_protocol(cfg, load_digits(), torch.device("cpu"), resumed, resume=state)
            assert _facts(resumed.outcomes) == _facts(full.outcomes[k + 1 :]), (overrides, k)
            # and the resumed run's own checkpoints continue the same trajectory
            for mine, theirs in zip(resumed.checkpoints, full.checkpoints[k + 1 :]):
                a = torch.load(io.BytesIO(mine), weights_only=True)
                b = torch.load(io.BytesIO(theirs), weights_only=True)
                assert torch.equal(a["torch_rng"], b["torch_rng"]) and torch.equal(
                    a["method"]["gen"], b["method"]["gen"]
                )
                assert torch.equal(a["method"]["memory"]["indices"], b["method"]["memory"]["indices"])


@pytest.mark.parametrize("method", sorted(m for m in METHODS if "task" in REGISTRY[m].protocols))
def test_every_method_resumes_exactly(method: str) -> None:
    """Any state a method keeps outside its checkpoint (a new method's Fisher matrix, bias
    layer, exemplar means, a generator) shows up here as different accuracies."""
    _resumed_equals_uninterrupted({"method": method, "epochs": 1}, after_tasks=(1,))


# methods whose task-free state is a variant of one kept here (BiC's bias layer and snapshot, GSA's
# gradient ratios, SCR's and PCR's heads, ER-ACE's mask): `full` (4-6 s each); the conformance kit's
# resume-exact rule checks every method in CI's slow leg (tests/platform/test_conformance.py)
KIT_RESUMES_IN_CI = ("bic", "bic_star", "gsa", "scr", "pcr", "er_ace")


@pytest.mark.parametrize(
    "method",
    # a ViT method's, OCM's and OnPro's (2 x 16 copies per sample) resume is 12-25 s of CPU here: the
    # conformance kit's resume-exact rule checks theirs (tests/platform/test_conformance.py, -m slow)
    [
        pytest.param(m, marks=pytest.mark.full) if m in KIT_RESUMES_IN_CI else m
        for m in sorted(
            m for m in METHODS if "task-free" in REGISTRY[m].protocols and m not in (*VIT_METHODS, "ocm", "onpro")
        )
    ],
)
def test_every_task_free_method_resumes_exactly(method: str) -> None:
    """The task-free protocol checkpoints at task boundaries: the method's online state (temp
    batch, update budget, per-sample generator, CLIB's importances and lr phases, EWC++'s Fisher)
    survives the bytes a worker writes."""
    over = (
        {"optimizer": "sgd", "lr": 0.05, "schedule": "constant"}
        if method in ("rm", "gdumb")
        else {"optimizer": "adam", "lr": 3e-4, "schedule": "exp_reset", "weight_decay": 0.0}
    )
    _resumed_equals_uninterrupted(
        {
            "method": method,
            "stream": "iblurry",
            "epochs": 1,
            "eval_period": 300,
            "online_iter": 0.25,
            "augment": "cutmix",
            "batch_size": 8,
            **over,
            **method_model(method),
        },
        after_tasks=(2,),
    )


@pytest.mark.parametrize(
    "overrides",
    [
        {"memory_policy": "reservoir"},  # the reservoir's `seen` count
        {"memory_policy": "prototype"},
        {"memory_policy": "class_balanced", "augment": "randaug"},
        {"uncertainty": "vr", "augment": "cutmix+randaug"},  # the uncertainty views' generator
        {"uncertainty": "autoaug", "stream": "offline"},
        {"eval_every_epoch": True, "uncertainty": "none"},
        {"blurry": 0, "memory_policy": "random"},
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()),
)
def test_policies_and_settings_resume_exactly(overrides: dict) -> None:
    _resumed_equals_uninterrupted(overrides, after_tasks=(1,))


def test_checkpoint_holds_every_source_of_state() -> None:
    _, cfg = load_config(None, {"epochs": 1})
    rec = Recorder()
    with one_thread():
        run_protocol(cfg, load_digits(), torch.device("cpu"), rec)
    state = torch.load(io.BytesIO(rec.checkpoints[1]), weights_only=True)
    assert state["task"] == 1 and state["method_name"] == "rm" and len(state["stream_hashes"]) == 5
    method = state["method"]
    assert {"model", "optimizer", "memory", "seen", "gen"} <= set(method)
    assert any("running_mean" in k for k in method["model"])  # batch-norm statistics
    assert method["optimizer"]["state"]  # momentum buffers
    assert len(method["memory"]["indices"]) == 200 and "seen" in method["memory"]
    assert method["seen"].dtype == torch.bool
    assert {"gen", "rng"} <= set(state["augmenter"])  # torch generator and Python Random (CutMix)
    assert state["torch_rng"].dtype == torch.uint8


def _stored_run(**overrides) -> tuple[int, dict]:
    _, cfg = load_config(None, {"epochs": 1, **overrides})
    config = cfg.to_dict()
    return store.create_run(config, "digits-blurry10-online"), config


def _real_checkpoint(config: dict, run_id: int) -> dict:
    _, cfg = load_config(None, config)
    rec = Recorder()
    with one_thread():
        run_protocol(cfg, load_digits(), torch.device("cpu"), rec)
    state = torch.load(io.BytesIO(rec.checkpoints[1]), weights_only=True)
    save_checkpoint(run_id, state, config)
    return load_checkpoint(run_id)


def test_saved_checkpoint_is_atomic_and_checked(isolated_home) -> None:
    run_id, config = _stored_run()
    state = _real_checkpoint(config, run_id)
    assert state["run_id"] == run_id and state["config"] == config and state["format"] == 1
    check_checkpoint(state, run_id, config)  # fits: no error
    assert [p.name for p in checkpoint_path(run_id).parent.iterdir()] == [f"run-{run_id}.pt"]  # no temp left

    other = {**config, "memory_size": 300}
    with pytest.raises(CheckpointError, match=r"another config \(memory_size=200, run 1 has memory_size=300\)"):
        check_checkpoint(state, run_id, other)
    with pytest.raises(CheckpointError, match="holds method 'rm' but run 1 is method 'finetune'"):
        check_checkpoint(state, run_id, {**config, "method": "finetune"})
    with pytest.raises(CheckpointError, match="written by run 1, not run 7"):
        check_checkpoint(state, 7, config)


class NotAWeight:
    pass


def test_corrupt_checkpoint_is_one_line(isolated_home) -> None:
    run_id, config = _stored_run()
    path = checkpoint_path(run_id)
    path.parent.mkdir(parents=True)
    for garbage in (b"", b"not a checkpoint at all", b"PK\x03\x04" + bytes(100)):
        path.write_bytes(garbage)
        with pytest.raises(CheckpointError) as err:
            load_checkpoint(run_id)
        assert "cannot be loaded: corrupt" in str(err.value) and "\n" not in str(err.value)
    torch.save({"something": torch.zeros(2)}, path)  # loadable, but not ours
    with pytest.raises(CheckpointError, match="not an rmconsole task checkpoint"):
        load_checkpoint(run_id)
    # a checkpoint that would run code to load (a pickled object of some class) is refused
    torch.save({"task": 1, "method": NotAWeight()}, path)
    with pytest.raises(CheckpointError, match="not a weights-only file"):
        load_checkpoint(run_id)


def test_checkpoint_of_another_method_or_stream_does_not_load() -> None:
    _, rm_cfg = load_config(None, {"epochs": 1})
    rec = Recorder()
    with one_thread():
        run_protocol(rm_cfg, load_digits(), torch.device("cpu"), rec)
    state = torch.load(io.BytesIO(rec.checkpoints[0]), weights_only=True)
    _, ft_cfg = load_config(None, {"epochs": 1, "method": "finetune"})
    with pytest.raises(CheckpointMismatch, match="holds method 'rm'"):
        run_protocol(ft_cfg, load_digits(), torch.device("cpu"), resume=state)
    _, other_seed = load_config(None, {"epochs": 1, "seed": 2})
    with pytest.raises(CheckpointMismatch, match="another task stream"):
        run_protocol(other_seed, load_digits(), torch.device("cpu"), resume=state)
    broken = {**state, "method": {**state["method"], "model": {"fc.weight": torch.zeros(3, 3)}}}
    with pytest.raises(CheckpointMismatch, match="does not fit method 'rm'") as err:
        run_protocol(rm_cfg, load_digits(), torch.device("cpu"), resume=broken)
    assert "\n" not in str(err.value)
