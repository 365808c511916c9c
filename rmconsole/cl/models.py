"""The paper's backbones, each split into `features` and a linear head `fc` (declared in
cl/modelspec.py, which states the contract; `build_model` builds any registered one).

The split lets prototype/herding memories and iCaRL's nearest-mean classifier use the
feature extractor without knowing the architecture.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import torch
from torch import Tensor, nn

from .modelspec import BUILTINS, lookup


class Backbone(nn.Module):
    """features(x) -> (N, feature_dim); fc maps features to class logits."""

    feature_dim: int

    def __init__(self, features: nn.Module, feature_dim: int, n_classes: int) -> None:
        super().__init__()
        self.features = features
        self.feature_dim = feature_dim
        self.fc = nn.Linear(feature_dim, n_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.features(x))


def mlp400(in_shape: tuple[int, int, int], n_classes: int) -> Backbone:
    """MNIST's MLP: input -> 400 -> 400 -> classes with batch norm and ReLU."""
    c, h, w = in_shape
    features = nn.Sequential(
        nn.Flatten(),
        nn.Linear(c * h * w, 400),
        nn.BatchNorm1d(400),
        nn.ReLU(inplace=True),
        nn.Linear(400, 400),
        nn.BatchNorm1d(400),
        nn.ReLU(inplace=True),
    )
    return Backbone(features, 400, n_classes)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x: Tensor) -> Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


def _stages(in_planes: int, widths: list[int], blocks: list[int]) -> tuple[nn.Sequential, int]:
    layers: list[nn.Module] = []
    for i, (width, n) in enumerate(zip(widths, blocks)):
        for j in range(n):
            layers.append(BasicBlock(in_planes, width, 2 if (j == 0 and i > 0) else 1))
            in_planes = width
    return nn.Sequential(*layers), in_planes


def resnet18_cifar(in_shape: tuple[int, int, int], n_classes: int) -> Backbone:
    """ResNet18 with the CIFAR stem: 3x3 stride-1 convolution, no max-pool."""
    stem = nn.Sequential(nn.Conv2d(in_shape[0], 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True))
    body, dim = _stages(64, [64, 128, 256, 512], [2, 2, 2, 2])
    return Backbone(nn.Sequential(stem, body, nn.AdaptiveAvgPool2d(1), nn.Flatten()), dim, n_classes)


def resnet32(in_shape: tuple[int, int, int], n_classes: int) -> Backbone:
    """The CIFAR ResNet-32 (He et al. 2016): three stages of 5 blocks, widths 16/32/64."""
    stem = nn.Sequential(nn.Conv2d(in_shape[0], 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True))
    body, dim = _stages(16, [16, 32, 64], [5, 5, 5])
    return Backbone(nn.Sequential(stem, body, nn.AdaptiveAvgPool2d(1), nn.Flatten()), dim, n_classes)


def resnet34(in_shape: tuple[int, int, int], n_classes: int) -> Backbone:
    """torchvision's ResNet34 (standard 7x7 stem) for ImageNet-scale images."""
    from torchvision.models import resnet34 as tv_resnet34

    net = tv_resnet34(num_classes=n_classes)
    if in_shape[0] != 3:
        net.conv1 = nn.Conv2d(in_shape[0], 64, 7, 2, 3, bias=False)
    dim = net.fc.in_features
    net.fc = nn.Identity()
    return Backbone(net, dim, n_classes)


MODELS = {name: spec.build for name, spec in BUILTINS.items()}  # name -> "module:function" (cl/modelspec.py)


def build_model(name: str, in_shape: tuple[int, int, int], n_classes: int, weights: str | None = None) -> Backbone:
    """A fresh model of the registered backbone `name` (cl/modelspec.py: a built-in, or a plug-in
    registered by `rmconsole.models`), checked against the contract the methods rely on, with
    pretrained weights from a local file when `weights` (the run's model_weights) or the spec names one."""
    spec = lookup(name)
    model = spec.builder()(cast("tuple[int, int, int]", tuple(in_shape)), n_classes)
    check_contract(name, model, n_classes)
    path = weights or spec.weights
    if path:
        load_weights(model, path, name)
    return cast(Backbone, model)  # a Backbone, or a module honouring its contract


def check_contract(name: str, model: object, n_classes: int) -> None:
    """features (a module), feature_dim (its width) and fc (Linear feature_dim -> n_classes): one
    line naming the model and what is wrong when a builder breaks it."""
    problem = None
    fc = getattr(model, "fc", None)
    if not isinstance(model, nn.Module):
        problem = f"it built a {type(model).__name__}, not a torch.nn.Module"
    elif not isinstance(getattr(model, "features", None), nn.Module):
        problem = "it has no `features` module"
    elif not isinstance(fc, nn.Linear):
        problem = "its `fc` is not a torch.nn.Linear head"
    elif getattr(model, "feature_dim", None) != fc.in_features:
        problem = f"its feature_dim {getattr(model, 'feature_dim', None)!r} is not fc's in_features {fc.in_features}"
    elif fc.out_features != n_classes:
        problem = f"its fc has {fc.out_features} outputs, not the run's {n_classes} classes"
    if problem:
        raise TypeError(
            f"model {name!r} breaks the backbone contract (features, feature_dim, fc: see "
            f"rmconsole/cl/modelspec.py): {problem}"
        )


class WeightsError(ValueError):
    """A model_weights file that cannot be used: missing, not a state dict, or not this model's."""


def read_weights(path: str | Path) -> dict[str, Tensor]:
    """A local state dict, read safely (torch.load weights_only=True): WeightsError, one line, when
    the file is missing, unreadable or holds something else."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise WeightsError(f"model_weights={str(path)!r}: no such file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - a damaged or unsafe file, whatever torch says, in one line
        detail = " ".join(str(err).split())[:160]
        raise WeightsError(
            f"model_weights={str(path)!r}: cannot be loaded as weights ({type(err).__name__}: {detail})"
        ) from None
    if not isinstance(state, dict) or not state or not all(isinstance(v, Tensor) for v in state.values()):
        raise WeightsError(f"model_weights={str(path)!r}: not a state dict (a mapping of parameter names to tensors)")
    return state


def check_weights(name: str, path: str | Path, in_shape: tuple[int, int, int], n_classes: int) -> None:
    """Before a run is stored: the model `name` built as the run will build it and the file loaded
    into it (load_weights's checks: file, keys, shapes), then dropped. WeightsError, one line, when
    the file is not this model's. (The model is built on the CPU: on PyTorch's meta device the first
    factory op imports its Python decompositions, seconds more than building a ViT-B/16.) A builder
    that fails leaves its own error to the run; the file itself is still read."""
    try:
        model = lookup(name).builder()(in_shape, n_classes)
    except Exception:  # noqa: BLE001 - the run reports a builder's failure (check_contract's line)
        read_weights(path)  # missing, damaged, not a state dict: refused whatever the model
        return
    load_weights(model, path, name)


def load_weights(model: Backbone, path: str | Path, name: str) -> None:
    """Pretrained weights into a fresh model: a state dict of the whole model (`features.*`; `fc.*`
    only when its shape is the run's head) or of its features alone. Every feature parameter must be
    there with its shape (WeightsError, one line, otherwise)."""
    state = read_weights(path)
    adapt = getattr(model, "adapt_state", None)  # a model that reads another layout (cl/vit.py: timm's)
    if adapt is not None:
        state = adapt(state, path)
    features, fc = model.features, model.fc
    whole = any(k.startswith("features.") for k in state)
    feats = (
        {k.removeprefix("features."): v for k, v in state.items() if k.startswith("features.")}
        if whole
        else dict(state)
    )
    head = {k.removeprefix("fc."): v for k, v in state.items() if k.startswith("fc.")} if whole else {}
    try:
        features.load_state_dict(feats, strict=True)
    except RuntimeError as err:
        first = next((line.strip() for line in str(err).splitlines()[1:] if line.strip()), str(err))
        raise WeightsError(f"model_weights={str(path)!r}: not weights of model {name!r} ({first[:200]})") from None
    if head and all(head.get(k) is not None and head[k].shape == v.shape for k, v in fc.state_dict().items()):
        fc.load_state_dict(head)
