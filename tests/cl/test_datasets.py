"""Datasets declared once (cl/datasets/, one file each) and registered by name: built-ins listed
without torch, ImageFolder trees by path with their own classes and class orders, ImageNet-100
under imagenet/, plug-in specs through entry points, a broken plug-in in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO, install_fake_plugins
from PIL import Image

from rmconsole import datasets, plugins
from rmconsole.cl import datasets as science
from rmconsole.cl import streams
from rmconsole.cl.data import load_run_dataset
from rmconsole.config import ConfigError, load_config

BUILTINS = [
    "digits",
    "mnist",
    "fashion_mnist",
    "cifar10",
    "cifar100",
    "tiny_imagenet",
    "imagenet",
    "imagenet_r",
    "cub200",
]


def write_tree(base: Path, classes: list[str], train: int = 2, val: int = 1, side: int = 6) -> Path:
    """An ImageFolder tree: base/{train,val}/<class>/<i>.png, small random RGB images."""
    gen = torch.Generator().manual_seed(0)
    for split, per_class in (("train", train), ("val", val)):
        for c in classes:
            folder = base / split / c
            folder.mkdir(parents=True)
            for i in range(per_class):
                pixels = torch.randint(0, 256, (side, side, 3), generator=gen, dtype=torch.uint8)
                Image.fromarray(pixels.numpy(), "RGB").save(folder / f"{i}.png")
    return base


def test_the_registry_lists_the_builtins_without_importing_torch() -> None:
    code = (
        "import sys; from rmconsole import datasets; import rmconsole.config as c; "
        "print(datasets.names()[:9], datasets.classes('cifar100'), datasets.orders('mnist')[2][:2], "
        "'torch' in sys.modules, 'torchvision' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == f"{BUILTINS} 100 [4, 1] False False", out.stdout + out.stderr


def test_every_builtin_is_one_spec_with_its_facts() -> None:
    specs = science.builtins()
    assert list(specs) == BUILTINS
    assert {n: specs[n].classes(Path("/nonexistent")) for n in BUILTINS} == {
        "digits": 10,
        "mnist": 10,
        "fashion_mnist": 10,
        "cifar10": 10,
        "cifar100": 100,
        "tiny_imagenet": 200,
        "imagenet": 1000,
        "imagenet_r": 200,
        "cub200": 200,
    }  # a folder dataset whose tree is absent: its declared count
    assert [n for n in BUILTINS if specs[n].downloadable] == ["mnist", "fashion_mnist", "cifar10", "cifar100"]
    assert [n for n in BUILTINS if specs[n].cacheable] == ["digits", "mnist", "fashion_mnist", "cifar10", "cifar100"]
    assert sorted(n for n in BUILTINS if specs[n].class_orders) == ["cifar10", "mnist"]
    assert specs["cifar10"].orders()[1] == [9, 1, 6, 0, 3, 2, 5, 7, 4, 8]  # truck automobile frog ...


def test_a_folder_tree_by_path_is_counted_and_loaded_with_its_classes(tmp_path: Path) -> None:
    tree = write_tree(tmp_path / "pets", ["cat", "dog", "emu"])
    name = f"folder:{tree}"
    assert datasets.classes(name) == 3
    _, cfg = load_config(None, {"dataset": name, "n_tasks": 3, "memory_size": 6, "image_size": 8})
    data = load_run_dataset(cfg)
    assert data.name == name and data.class_names == ["cat", "dog", "emu"] and data.n_classes == 3
    assert len(data.train) == 6 and len(data.test) == 3 and data.image_shape == (3, 8, 8)
    assert sorted(data.train.labels.tolist()) == [0, 0, 1, 1, 2, 2]
    with pytest.raises(ConfigError, match=r"n_tasks=2: folder:.* has 3 classes"):
        load_config(None, {"dataset": name, "n_tasks": 2, "memory_size": 6})
    with pytest.raises(ConfigError, match=r"^dataset='folder:.*nowhere'.*nowhere/train holds no class folders"):
        load_config(None, {"dataset": f"folder:{tmp_path / 'nowhere'}"})


def test_a_relative_folder_is_under_the_data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path / "data" / "birds", ["a", "b"])
    monkeypatch.setenv("RMCONSOLE_DATA", str(tmp_path / "data"))
    assert datasets.classes("folder:birds") == 2
    datasets.verify("folder:birds")
    (tmp_path / "data" / "birds" / "val" / "c").mkdir()
    with pytest.raises(science.DatasetCorrupt, match="has no images"):
        datasets.verify("folder:birds")


def test_a_trees_own_class_orders_serve_class_order_paper(tmp_path: Path) -> None:
    tree = write_tree(tmp_path / "pets", ["cat", "dog", "emu"])
    (tree / science.ORDERS_FILE).write_text('1 = ["emu", "cat", "dog"]\n2 = [1, 2, 0]\n')
    name = f"folder:{tree}"
    _, cfg = load_config(None, {"dataset": name, "n_tasks": 3, "memory_size": 6, "class_order": "paper"})
    assert streams.class_order(cfg.dataset, 3, 1, "paper") == [2, 0, 1]
    assert streams.class_order(cfg.dataset, 3, 2, "paper") == [1, 2, 0]
    with pytest.raises(
        ConfigError,
        match=r"class_order=paper: folder:.* has orders for seeds 1, 2 only, not "
        r"folder:.* seed 3",
    ):
        load_config(None, {"dataset": name, "n_tasks": 3, "memory_size": 6, "class_order": "paper", "seed": 3})
    (tree / science.ORDERS_FILE).write_text('1 = ["emu", "cat", "cat"]\n')
    with pytest.raises(ConfigError, match="seed 1's order must name each of the 3 classes once"):
        load_config(None, {"dataset": name, "n_tasks": 3, "memory_size": 6, "class_order": "paper"})


def test_imagenet_100_under_imagenet_runs_the_preset_with_k_500(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ImageNet preset on a 100-class tree: K=500 accepted (it was refused as smaller than
    1,000 classes), 100 classes loaded, a 100-way head trained for a very short run."""
    from rmconsole.cl.loop import run_protocol

    monkeypatch.setenv("RMCONSOLE_DATA", str(tmp_path / "data"))
    with pytest.raises(ConfigError, match="memory_size=500: smaller than the 1000 classes of imagenet"):
        load_config("imagenet-blurry10", {"memory_size": 500})  # no tree: ImageNet's 1,000 assumed
    write_tree(tmp_path / "data" / "imagenet", [f"n{c:08d}" for c in range(100)], train=2, val=1, side=4)
    _, cfg = load_config("imagenet-blurry10", {"memory_size": 500})
    assert cfg.dataset_classes() == 100 and cfg.memory_size == 500 and cfg.n_tasks == 10
    datasets.verify("imagenet")
    _, cfg = load_config(
        "imagenet-blurry10",
        {
            "memory_size": 500,
            "image_size": 8,
            "model": "mlp400",
            "epochs": 1,
            "augment": "none",
            "uncertainty_views": 1,
            "batch_size": 16,
            "device": "cpu",
            "topk": 5,
        },
    )
    data = load_run_dataset(cfg)
    assert data.n_classes == 100 and len(data.train) == 200
    heads = []
    from rmconsole.cl.methods import base

    monkeypatch.setattr(base, "build_model", _spy(heads, base.build_model))
    outcomes = run_protocol(cfg, data, torch.device("cpu"))
    assert len(outcomes) == 10 and heads and {h.fc.out_features for h in heads} == {100}


def _spy(found: list, build):
    def wrapped(*args, **kwargs):
        model = build(*args, **kwargs)
        found.append(model)
        return model

    return wrapped


# --------------------------------------------------------------------------- plug-ins


PLUGIN = """
from pathlib import Path
from rmconsole.cl.datasets import DatasetSpec

SPEC = DatasetSpec(name="toy", description="four classes of noise", load="toy_dataset:load", n_classes=4,
                   image_shape=(1, 8, 8), mean=(0.5,), std=(0.25,), crop_padding=1, class_orders={1: (3, 2, 1, 0)})
NOT_A_SPEC = {"name": "toy"}


def load(spec, root, options):
    import torch
    from rmconsole.cl.data import Dataset, TensorImages

    gen = torch.Generator().manual_seed(0)
    def split(n):
        labels = torch.arange(4).repeat(n)
        images = (labels.view(-1, 1, 1, 1) * 60 + torch.randint(0, 20, (4 * n, 1, 8, 8), generator=gen)).to(torch.uint8)
        return TensorImages(images, labels)
    return Dataset(spec.name, split(30), split(5), ["a", "b", "c", "d"], spec.mean, spec.std, spec.crop_padding)
"""


@pytest.fixture
def fake_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Installed dataset plug-ins, as entry points would list them: toy (good), broken (its module
    does not import), wrong (names a dict), shadow (takes a built-in's name)."""
    yield install_fake_plugins(
        monkeypatch,
        tmp_path,
        "dataset",
        "toy_dataset",
        PLUGIN,
        "toy-datasets",
        {
            "toy": "toy_dataset:SPEC",
            "broken": "no_such_module_here:SPEC",
            "wrong": "toy_dataset:NOT_A_SPEC",
            "mnist": "toy_dataset:SPEC",
        },
    )
    plugins.forget()
    science._registered.clear()


def test_a_plugin_dataset_is_listed_validated_and_loaded(fake_plugins) -> None:
    from rmconsole.cl.loop import run_protocol

    assert datasets.names() == [*BUILTINS, "broken", "toy", "wrong"]  # a plug-in may not take mnist's name
    assert "toy_dataset" not in sys.modules  # listed, not imported
    _, cfg = load_config(None, {"dataset": "toy", "n_tasks": 2, "memory_size": 8, "epochs": 1, "class_order": "paper"})
    assert cfg.dataset_classes() == 4 and "toy_dataset" in sys.modules
    with pytest.raises(ConfigError, match="memory_size=3: smaller than the 4 classes of toy"):
        load_config(None, {"dataset": "toy", "n_tasks": 2, "memory_size": 3})
    data = load_run_dataset(cfg)
    assert data.name == "toy" and data.n_classes == 4 and data.image_shape == (1, 8, 8)
    assert streams.class_order("toy", 4, 1, "paper") == [3, 2, 1, 0]
    outcomes = run_protocol(cfg, data, torch.device("cpu"))
    assert len(outcomes) == 2


@pytest.mark.parametrize(
    "name, expected",
    [
        (
            "broken",
            "dataset plug-in 'broken' (package toy-datasets 0.1) failed to load 'no_such_module_here:SPEC': "
            "ModuleNotFoundError",
        ),
        (
            "wrong",
            "dataset plug-in 'wrong' (package toy-datasets 0.1): 'toy_dataset:NOT_A_SPEC' is a dict, not a "
            "rmconsole.cl.datasets.DatasetSpec",
        ),
    ],
)
def test_a_broken_plugin_is_one_line_and_the_others_keep_working(fake_plugins, name, expected) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, {"dataset": name})
    assert str(err.value).startswith(f"dataset={name!r}: {expected}") and "\n" not in str(err.value), str(err.value)
    assert load_config(None, {"dataset": "toy", "n_tasks": 2, "memory_size": 8})[1].dataset == "toy"
    assert load_config(None)[1].dataset == "digits"


def test_the_cli_lists_what_is_registered(tmp_path: Path) -> None:
    from support.cli import in_process as run  # arguments and messages: the CLI in this process

    helped = run("data", "get", "--help")
    assert "mnist | fashion_mnist | cifar10 | cifar100" in helped.stdout, helped.stdout + helped.stderr
    listed = run("data", "list")
    assert all(name in listed.stdout for name in BUILTINS) and "folder:PATH" in listed.stdout
    refused = run("run", "--set", "dataset=svhn")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert (
        "registered: digits, mnist, fashion_mnist, cifar10, cifar100, tiny_imagenet, imagenet, imagenet_r, cub200"
        in refused.stderr
    )
