"""The paper's backbones, each split into `features` and a linear head `fc`.

The split lets prototype/herding memories and iCaRL's nearest-mean classifier use the
feature extractor without knowing the architecture.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


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
        nn.Linear(c * h * w, 400), nn.BatchNorm1d(400), nn.ReLU(inplace=True),
        nn.Linear(400, 400), nn.BatchNorm1d(400), nn.ReLU(inplace=True),
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
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes)
            )

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


MODELS = {
    "mlp400": mlp400,
    "resnet18": resnet18_cifar,
    "resnet32": resnet32,
    "resnet34": resnet34,
}


def build_model(name: str, in_shape: tuple[int, int, int], n_classes: int) -> Backbone:
    try:
        factory = MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}") from None
    return factory(in_shape, n_classes)
