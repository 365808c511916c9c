"""What exists: augmentation, memory-policy and uncertainty names. Plain Python (no torch, no
import of the package), so the CLI can validate a config and list runs without paying for
importing torch. Methods are declared in the method registry (`rmconsole.methods`: the built-ins'
`cl/methods` REGISTRY and plug-ins'), datasets one file each in `cl/datasets/`, backbones in
`cl/modelspec.py`."""

from __future__ import annotations

MEMORY_POLICIES = ("uncertainty", "random", "reservoir", "prototype", "class_balanced", "greedy_balanced")
MEASURES = ("randaug", "autoaug", "vr", "none")
AUGMENTATIONS = ("none", "cutmix", "randaug", "autoaug")


def parse_augment(spec: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """`"cutmix+autoaug"` or ["cutmix", "autoaug"] -> ("cutmix", "autoaug"); rejects unknown names
    instead of silently dropping them (the authors' issue #11)."""
    parts = spec.replace(",", "+").split("+") if isinstance(spec, str) else list(spec)
    names: list[str] = []
    for part in parts:
        name = str(part).strip().lower()
        if not name:
            continue
        if name not in AUGMENTATIONS:
            raise ValueError(f"unknown augmentation {part!r}; allowed: {', '.join(AUGMENTATIONS)} (join with '+')")
        if name != "none" and name not in names:
            names.append(name)
    if "randaug" in names and "autoaug" in names:
        raise ValueError("choose one of randaug and autoaug, not both")
    return tuple(names)
