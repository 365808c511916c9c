"""Backbones declared once: one `ModelSpec` per model (torch-free; the builder is named
"module:function" and imported only when a model is built), so the CLI validates `model = NAME`
and lists models without importing torch.

The contract every builder honours (the methods rely on it: iCaRL's nearest-mean classifier,
prototype and herding memories, SCR's projection read `features`; heads are reset, grown or
left out of the optimiser through `fc`):

    build(image_shape: tuple[int, int, int], n_classes: int) -> model, an nn.Module with
        model.features     nn.Module: float images (N, C, H, W), normalised -> (N, feature_dim)
        model.feature_dim  int, the width of those features
        model.fc           nn.Linear(feature_dim, n_classes), the classifier head
        model(x)           == model.fc(model.features(x)), the logits
    (`rmconsole.cl.models.Backbone(features, feature_dim, n_classes)` builds exactly that.)

Pretrained weights come from a LOCAL file only (the run's `model_weights` key, else the spec's
`weights`), read with torch.load(weights_only=True): a state dict of the model (`features.*`,
and `fc.*` used only when its shape is the run's) or of its `features` alone. Nothing is
downloaded. Plug-in packages add specs through the `rmconsole.models` entry-point group;
`rmconsole.models` (outside the science) resolves them and `register()`s them here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .datasets import resolve
from .targets import register_in


@dataclass(frozen=True)
class ModelSpec:
    """One backbone.

    name         what a config calls it (`model = NAME`)
    description  one line for listings and `rmconsole config-keys`
    build        "module:function" (or the function): build(image_shape, n_classes) -> a model
                 honouring the contract above (features, feature_dim, fc)
    weights      a local file of pretrained weights loaded into every fresh model, unless the
                 run's `model_weights` names another; None: random initialisation
    """

    name: str
    description: str
    build: str | Callable[[tuple[int, int, int], int], Any]
    weights: str | None = None

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise TypeError("ModelSpec: name must be a non-empty string")

    def builder(self) -> Callable[[tuple[int, int, int], int], Any]:
        return resolve(self.build, f"model {self.name!r}'s builder")


BUILTINS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec("mlp400", "MNIST's MLP: input -> 400 -> 400 with batch norm and ReLU", "rmconsole.cl.models:mlp400"),
        ModelSpec(
            "resnet18",
            "ResNet18 with the CIFAR stem (3x3 stride-1, no max-pool), 512 features",
            "rmconsole.cl.models:resnet18_cifar",
        ),
        ModelSpec(
            "resnet32",
            "the CIFAR ResNet-32 (three stages of 5 blocks, widths 16/32/64), 64 features",
            "rmconsole.cl.models:resnet32",
        ),
        ModelSpec(
            "resnet34",
            "torchvision's ResNet34 (7x7 stem) for ImageNet-scale images, 512 features",
            "rmconsole.cl.models:resnet34",
        ),
        ModelSpec(
            "vit_b16",
            "ViT-B/16 at 224 px in timm's layout (vit_base_patch16_224; load a timm state dict with model_weights), "
            "768 features",
            "rmconsole.cl.vit:vit_b16",
        ),
        ModelSpec(
            "vit_tiny",
            "a small ViT of the same layout for tests (32 px, patch 8, 2 layers, width 64), 64 features",
            "rmconsole.cl.vit:vit_tiny",
        ),
    )
}
_registered: dict[str, ModelSpec] = {}


class UnknownModel(ValueError):
    """A model name no built-in or installed plug-in declares (one line, listing them)."""


def register(spec: ModelSpec) -> ModelSpec:
    """Make a spec (a plug-in's, resolved by `rmconsole.models`) known to the science by its name."""
    return register_in(_registered, spec, ModelSpec)


def lookup(name: str) -> ModelSpec:
    """The spec of a built-in or registered model (UnknownModel otherwise)."""
    found = BUILTINS.get(name) or _registered.get(name)
    if found is None:
        raise UnknownModel(f"unknown model {name!r}; known: {', '.join([*BUILTINS, *_registered])}")
    return found


__all__ = ["BUILTINS", "ModelSpec", "UnknownModel", "lookup", "register"]
