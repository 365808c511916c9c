"""The declaration rmconsole reads (entry point `rmconsole.datasets`): no torch here, so
`rmconsole data`, config validation and the launch form never import torchvision for it."""

from __future__ import annotations

from rmconsole.cl.datasets import DatasetSpec

SPEC = DatasetSpec(
    name="mnist_fashion",
    description="MNIST digits then Fashion-MNIST garments as one 20-class dataset, 28x28 grey",
    load="rmconsole_mnist_fashion.data:load",
    n_classes=20,
    image_shape=(1, 28, 28),
    mean=(0.2084,),
    std=(0.3403,),
    crop_padding=4,
    required=(
        "MNIST/raw/train-images-idx3-ubyte",
        "MNIST/raw/t10k-images-idx3-ubyte",
        "FashionMNIST/raw/train-images-idx3-ubyte",
        "FashionMNIST/raw/t10k-images-idx3-ubyte",
    ),
    downloadable=True,
    how_to_get="get MNIST and Fashion-MNIST with `rmconsole data get mnist` and `rmconsole data get fashion_mnist`",
    # class_order=paper: one dataset after the other, as in Lesort's MNIST-Fellowship
    class_orders={seed: list(range(20)) for seed in (1, 2, 3)},
    cacheable=True,
    sources=("MNIST/raw", "FashionMNIST/raw"),
)
