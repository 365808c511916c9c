"""Backbones declared once (cl/modelspec.py) and registered by name: built-ins listed without
torch and honouring the contract the methods rely on, a plug-in backbone through an entry point
trained on digits, pretrained weights from a local file, a bad file or plug-in in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO, install_fake_plugins
from support.cli import in_process

from rmconsole import models as registry
from rmconsole import plugins
from rmconsole.cl import modelspec
from rmconsole.cl.data import load_digits
from rmconsole.cl.models import Backbone, WeightsError, build_model
from rmconsole.config import ConfigError, load_config

BUILTINS = ["mlp400", "resnet18", "resnet32", "resnet34", "vit_b16", "vit_tiny"]


def test_the_registry_lists_the_builtins_without_importing_torch() -> None:
    code = (
        "import sys; from rmconsole import models; import rmconsole.config; "
        "print(models.names(), 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == f"{BUILTINS} False", out.stdout + out.stderr


@pytest.mark.parametrize("name", BUILTINS)
def test_every_builtin_honours_the_contract(name: str) -> None:
    model = build_model(name, (3, 16, 16), 7)
    x = torch.randn(2, 3, 16, 16)
    model.eval()
    feats = model.features(x)
    assert feats.shape == (2, model.feature_dim) and model.fc.in_features == model.feature_dim
    assert torch.equal(model(x), model.fc(feats)) and model.fc.out_features == 7


PLUGIN = """
from torch import nn
from rmconsole.cl.modelspec import ModelSpec
from rmconsole.cl.models import Backbone


def build(image_shape, n_classes):
    c, h, w = image_shape
    features = nn.Sequential(nn.Conv2d(c, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    return Backbone(features, 8, n_classes)


class Headless(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Flatten()


SPEC = ModelSpec("tiny_cnn", "one convolution, 8 features", "toy_model:build")
HEADLESS = ModelSpec("headless", "no fc", lambda shape, n: Headless())
"""


@pytest.fixture
def fake_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    yield install_fake_plugins(
        monkeypatch,
        tmp_path,
        "model",
        "toy_model",
        PLUGIN,
        "toy-models",
        {"tiny_cnn": "toy_model:SPEC", "broken": "toy_model_missing:SPEC", "headless": "toy_model:HEADLESS"},
        version="0.2",
    )
    plugins.forget()
    modelspec._registered.clear()


def test_a_plugin_backbone_trains_a_digits_run(fake_plugins, monkeypatch: pytest.MonkeyPatch) -> None:
    from rmconsole.cl.loop import run_protocol
    from rmconsole.cl.methods import base

    assert registry.names() == [*BUILTINS, "broken", "headless", "tiny_cnn"]
    assert "toy_model" not in sys.modules  # listed, not imported
    _, cfg = load_config(None, {"model": "tiny_cnn", "epochs": 1, "n_tasks": 2, "device": "cpu"})
    built: list = []
    original = base.build_model
    monkeypatch.setattr(base, "build_model", lambda *a, **k: built.append(original(*a, **k)) or built[-1])
    outcomes = run_protocol(cfg, load_digits(), torch.device("cpu"))
    assert len(outcomes) == 2 and built and all(m.feature_dim == 8 for m in built)
    assert type(built[0].features[0]).__name__ == "Conv2d"


def test_a_broken_or_contract_breaking_plugin_is_one_line(fake_plugins) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, {"model": "broken"})
    assert str(err.value).startswith(
        "model='broken': model plug-in 'broken' (package toy-models 0.2) failed to "
        "load 'toy_model_missing:SPEC': ModuleNotFoundError"
    ) and "\n" not in str(err.value)
    assert load_config(None, {"model": "tiny_cnn"})[1].model == "tiny_cnn"  # the others keep working
    load_config(None, {"model": "headless"})  # (a builder is only run when a model is built)
    with pytest.raises(TypeError, match=r"^model 'headless' breaks the backbone contract .*: its `fc` is not"):
        build_model("headless", (1, 8, 8), 10)


def _saved(tmp_path: Path, state: dict, name: str = "w.pt") -> Path:
    path = tmp_path / name
    torch.save(state, path)
    return path


def test_weights_from_a_local_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(3)
    source = build_model("mlp400", (1, 8, 8), 5)  # another head: only the features carry over
    whole = _saved(tmp_path, source.state_dict())
    features_only = _saved(tmp_path, source.features.state_dict(), "f.pt")
    for path in (whole, features_only):
        model = build_model("mlp400", (1, 8, 8), 10, weights=str(path))
        for key, value in source.features.state_dict().items():
            assert torch.equal(model.features.state_dict()[key], value), key
        assert model.fc.out_features == 10
    same_head = build_model("mlp400", (1, 8, 8), 5, weights=str(whole))
    assert torch.equal(same_head.fc.weight, source.fc.weight)  # the head too, when its shape is the run's

    from rmconsole.cl import models

    loaded: list = []
    original = models.load_weights
    monkeypatch.setattr(models, "load_weights", lambda m, p, n: loaded.append((p, n)) or original(m, p, n))
    monkeypatch.chdir(tmp_path)
    _, cfg = load_config(None, {"model_weights": "w.pt", "epochs": 1, "n_tasks": 2, "device": "cpu"})
    assert cfg.model_weights == str(whole.resolve())  # stored absolute: the worker may start elsewhere
    from rmconsole.cl.loop import run_protocol

    run_protocol(cfg, load_digits(), torch.device("cpu"))
    assert loaded and loaded[0] == (str(whole.resolve()), "mlp400")


def test_a_bad_weights_file_is_refused_in_one_line(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint at all")
    with pytest.raises(WeightsError, match=r"^model_weights='.*garbage.pt': cannot be loaded as weights"):
        build_model("mlp400", (1, 8, 8), 10, weights=str(garbage))
    other = _saved(tmp_path, build_model("resnet32", (1, 8, 8), 10).state_dict(), "other.pt")
    with pytest.raises(WeightsError, match=r"not weights of model 'mlp400' \(Missing key"):
        build_model("mlp400", (1, 8, 8), 10, weights=str(other))
    with pytest.raises(ConfigError, match=r"^model_weights='.*nowhere.pt': no such file"):
        load_config(None, {"model_weights": str(tmp_path / "nowhere.pt")})
    done = in_process("run", "--set", f"model_weights={garbage}")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: model_weights=") and "cannot be loaded as weights" in done.stderr
    done = in_process("run", "--set", f"model_weights={other}")  # another model's: refused before the run is stored
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: model_weights=") and "not weights of model 'mlp400'" in done.stderr
    assert "no runs" in in_process("runs").stderr
    assert isinstance(build_model("mlp400", (1, 8, 8), 10), Backbone)
