"""The dataset registry: the built-ins (`cl/datasets/`, one file each), any ImageFolder tree as
`folder:PATH`, and installed plug-ins (entry-point group `rmconsole.datasets`, each naming a
`DatasetSpec`). Torch-free: listing datasets imports no plug-in and no torch; a plug-in's spec is
imported when its name is first used, then registered with the science (`cl.datasets.register`)
so the loader, the streams and the file checks find it by name like a built-in.

A plug-in that cannot be imported, or names something that is not a DatasetSpec, is one line
(ValueError) naming it; every other dataset keeps working.
"""

from __future__ import annotations

from pathlib import Path

from . import plugins
from .cl import datasets as science
from .cl.datasets import FOLDER_PREFIX, DatasetSpec, UnknownDataset


def names() -> list[str]:
    """Every dataset a config may name: the built-ins, then the installed plug-ins (none imported;
    a plug-in may not take a built-in's name, the built-in wins)."""
    return plugins.names_with("dataset", science.builtins())


def listing() -> str:
    """The registered names as one clause, for help texts and errors."""
    return f"{', '.join(names())} (or {FOLDER_PREFIX}PATH for an ImageFolder tree)"


def get(name: str) -> DatasetSpec:
    """The spec of `name`: a built-in, `folder:PATH`, or a plug-in (imported and registered on
    first use). UnknownDataset / ValueError with one line otherwise."""
    if not isinstance(name, str) or not name.strip():
        raise UnknownDataset(f"no dataset named; registered: {listing()}")
    builtin = science.builtins()
    if name in builtin:
        return builtin[name]
    if name.startswith(FOLDER_PREFIX):
        return science.folder_spec(name)
    spec = plugins.declaration("dataset", name, DatasetSpec, "rmconsole.cl.datasets.DatasetSpec")
    if spec is None:
        raise UnknownDataset(f"unknown dataset {name!r}; registered: {listing()}")
    if spec.name != name:  # the entry point's name is what configs and stored runs call it
        spec = science.replace(spec, name=name)
    return science.register(spec)


def classes(name: str, root: Path | None = None) -> int:
    """The class count of `name` (a folder dataset: its tree's class folders, when it is there)."""
    return get(name).classes(root)


def orders(name: str, root: Path | None = None) -> dict[int, list[int]]:
    """seed -> class order of `name` (class_order=paper): the paper's, or a tree's class_orders.toml."""
    return get(name).orders(root)


def verify(name: str, root: Path | None = None) -> None:
    """A dataset's files present and not damaged (DatasetMissing / DatasetCorrupt, one line)."""
    get(name).verify_files(root)


def input_shape(name: str, image_size: int | None = None) -> tuple[int, int, int] | None:
    """The (C, H, W) a run's model is built for, when the spec fixes it without loading anything:
    its declared image_shape, or a folder or built-in dataset's RGB images at `image_size` (the
    run's key) else the spec's side. None when only loading would tell (a plug-in's own loader)."""
    spec = get(name)
    if spec.image_shape is not None:
        c, h, w = spec.image_shape
        return (c, h, w)
    side = image_size or spec.image_size
    if side and (spec.folder is not None or name in science.builtins()):
        return (3, side, side)
    return None


def builtin_names() -> list[str]:
    return list(science.builtins())


def downloadable() -> list[str]:
    """The built-ins `rmconsole data get` can fetch (a plug-in's are only imported when named)."""
    return [n for n, spec in science.builtins().items() if spec.downloadable]


__all__ = ["UnknownDataset", "builtin_names", "classes", "downloadable", "get", "listing", "names", "orders", "verify"]
