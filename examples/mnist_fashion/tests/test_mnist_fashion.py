"""mnist_fashion loads MNIST's and Fashion-MNIST's files as one 20-class dataset, with the
normalisation it declares. Needs both under RMCONSOLE_DATA (skipped with the reason otherwise)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from rmconsole_mnist_fashion.data import MEAN, STD, MissingPart, load_parts

ROOT = Path(os.environ.get("RMCONSOLE_DATA", "data")).expanduser()
HAVE = all((ROOT / part / "raw" / "train-images-idx3-ubyte").exists() for part in ("MNIST", "FashionMNIST"))
needs_data = pytest.mark.skipif(not HAVE, reason=f"MNIST and FashionMNIST not both under {ROOT} (RMCONSOLE_DATA)")


@pytest.fixture(scope="module")
def data():
    return load_parts(ROOT)


@needs_data
def test_twenty_classes_mnist_first_then_fashion(data) -> None:
    from torchvision import datasets

    assert data.n_classes == 20 and data.image_shape == (1, 28, 28)
    assert (len(data.train), len(data.test)) == (120_000, 20_000)
    assert set(data.train.labels.tolist()) == set(range(20)) and set(data.test.labels.tolist()) == set(range(20))
    mnist, fashion = datasets.MNIST(str(ROOT), train=True), datasets.FashionMNIST(str(ROOT), train=True)
    assert torch.equal(data.train.images[0, 0], mnist.data[0]) and int(data.train.labels[0]) == int(mnist.targets[0])
    assert torch.equal(data.train.images[60_000, 0], fashion.data[0])
    assert int(data.train.labels[60_000]) == int(fashion.targets[0]) + 10
    assert data.class_names[0] == "digit 0 - zero" and data.class_names[10] == "fashion T-shirt/top"


@needs_data
def test_declared_normalisation_is_the_train_splits(data) -> None:
    pixels = data.train.images.float() / 255
    assert float(pixels.mean()) == pytest.approx(MEAN[0], abs=5e-4)
    assert float(pixels.std()) == pytest.approx(STD[0], abs=5e-4)


def test_a_missing_part_is_one_line_naming_it(tmp_path) -> None:
    with pytest.raises(MissingPart) as err:
        load_parts(tmp_path)
    message = str(err.value)
    assert "\n" not in message and "MNIST" in message and "rmconsole data get mnist" in message


def test_the_declaration_matches_what_loads(tmp_path) -> None:
    """The torch-free spec rmconsole validates configs with says what the loader gives."""
    from rmconsole_mnist_fashion.declare import SPEC

    assert SPEC.name == "mnist_fashion" and SPEC.n_classes == 20 and SPEC.image_shape == (1, 28, 28)
    assert (SPEC.mean, SPEC.std) == (MEAN, STD)
    assert all(sorted(order) == list(range(20)) for order in SPEC.class_orders.values())
    if HAVE:
        from rmconsole_mnist_fashion.data import load

        class Options:
            download = False

        loaded = load(SPEC, ROOT, Options())
        assert (loaded.n_classes, loaded.image_shape) == (SPEC.n_classes, SPEC.image_shape)
