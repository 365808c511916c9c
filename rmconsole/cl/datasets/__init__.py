"""Datasets declared once: one `DatasetSpec` per dataset, one file per built-in one.

A spec is plain Python (no torch): its name, class count, image shape, normalisation, how to
load it ("module:function", imported only when the dataset is loaded), how to get it, how to
check its files, the paper's class orders and whether its decoded tensors may be cached. The
CLI validates a config, lists datasets and checks files from specs alone; `cl.data.load_dataset`
calls a spec's loader.

Built-ins: digits, mnist, fashion_mnist, cifar10, cifar100, tiny_imagenet, imagenet, imagenet_r,
cub200 (one module each beside this one). Any ImageFolder tree is a dataset too, by path: `folder:PATH` (absolute,
`~/...`, or relative to the data root), its classes the class folders of `PATH/train`. Plug-in
packages add specs through the `rmconsole.datasets` entry-point group; `rmconsole.datasets`
(outside the science) resolves those and `register()`s them here, so that the science finds
every dataset by name without knowing where it came from.

Folder datasets (`folder=` set: tiny_imagenet, imagenet, `folder:PATH`, a plug-in's tree) take
their classes from the tree: `PATH/train/<class>/...` and `PATH/val/<class>/...`, the same class
folders in both. A 100-class tree under `imagenet/` is ImageNet-100 (100 classes, a 100-way head).
Their own class orders (class_order=paper) come from `PATH/class_orders.toml`:

    # seed = the classes in order, by folder name (or by index into the sorted folder names)
    1 = ["n01440764", "n01443537", ...]
    2 = [17, 3, 54, ...]
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..targets import failure, import_target, register_in

if TYPE_CHECKING:
    from ..images import Dataset

ORDERS_FILE = "class_orders.toml"
FOLDER_PREFIX = "folder:"
IMAGENET_STATS = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


class DatasetMissing(Exception):
    """A dataset is not under the data root; the message says where we looked and what to do."""


class DatasetCorrupt(DatasetMissing):
    """A dataset's files are there but damaged (wrong size, bad header, checksum mismatch)."""


class UnknownDataset(ValueError):
    """A dataset name that no built-in, folder or installed plug-in declares (one line, listing them)."""


def data_root() -> Path:
    """RMCONSOLE_DATA, or ./data: where datasets are looked for (and downloaded, if asked)."""
    return Path(os.environ.get("RMCONSOLE_DATA", "data")).expanduser()


@dataclass(frozen=True)
class LoadOptions:
    """How a run wants its dataset loaded (the input-pipeline keys of its config)."""

    download: bool = False  # fetch a downloadable dataset that is missing
    image_size: int | None = None  # folder datasets: image side (None: the spec's image_size)
    pipeline: str = "auto"  # folder datasets: "memory", "stream" or "auto" (by decoded size)
    loader_workers: int | None = None  # folder datasets: DataLoader decode processes
    gpu_decode: bool | None = None  # folder datasets: nvJPEG on CUDA (None: when available)


Loader = Callable[["DatasetSpec", Path, LoadOptions], "Dataset"]
Verifier = Callable[["DatasetSpec", Path], None]


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset, declared once (torch-free; everything heavy is named, imported on first use).

    name          what a config calls it (`dataset = NAME`)
    description   one line for listings and `rmconsole data get --help`
    load          "module:function" (or the function): load(spec, root, options) -> cl.data.Dataset,
                  root the data root, options a LoadOptions. None for a folder dataset: the
                  ImageFolder loader (streamed or decoded into memory, `data_pipeline`).
    n_classes     the class count; for a folder dataset, the count assumed while its tree is
                  absent (its tree's class folders win when it is there); None: the tree only
    folder        an ImageFolder tree: relative to the data root, or absolute; its `train/` and
                  `val/` splits hold one folder of images per class
    image_shape   (C, H, W) when fixed; None for a folder dataset (resized to image_size)
    image_size    a folder dataset's default side (the `image_size` key overrides it)
    mean, std     per-channel normalisation; None: the loader computes them (digits)
    crop_padding  the train-time random crop's padding
    required      files (or folders) under the data root that must exist, a `.gz` twin counting;
                  a folder dataset's are its train/ and val/ splits
    verify        "module:function"(spec, root) -> None: checks the files without loading them,
                  raising DatasetCorrupt (one line); None for a folder dataset: the same class
                  folders, none empty, in both splits
    downloadable  `rmconsole data get NAME` / download=true fetch it (the loader's options.download)
    how_to_get    one line saying where to get it (default: from downloadable / folder)
    class_orders  seed -> the paper's class order, by original label (class_order=paper); a
                  folder dataset adds its tree's class_orders.toml
    cacheable     decoded whole into tensors, so a run keeps a tensor copy (`store home/cache`)
    sources       files or folders under the data root a cached copy is made from (their
                  paths, sizes and mtimes key it); source_files, "module:function"(root) ->
                  list of paths, when they are elsewhere (digits: scikit-learn's file)
    """

    name: str
    description: str = ""
    load: str | Loader | None = None
    n_classes: int | None = None
    folder: str | None = None
    image_shape: tuple[int, int, int] | None = None
    image_size: int | None = None
    mean: tuple[float, ...] | None = IMAGENET_STATS[0]
    std: tuple[float, ...] | None = IMAGENET_STATS[1]
    crop_padding: int = 4
    required: tuple[str, ...] = ()
    verify: str | Verifier | None = None
    downloadable: bool = False
    how_to_get: str = ""
    class_orders: Mapping[int, Sequence[int]] = field(default_factory=dict)
    cacheable: bool = False
    sources: tuple[str, ...] = ()
    source_files: str | Callable[[Path], list[Path]] | None = None

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise TypeError("DatasetSpec: name must be a non-empty string")
        if self.folder is None and self.load is None:
            raise TypeError(f'DatasetSpec {self.name!r}: give load= ("module:function") or folder=')
        if self.folder is None and self.n_classes is None:
            raise TypeError(f"DatasetSpec {self.name!r}: give n_classes= (or folder=, whose classes are counted)")

    # ------------------------------------------------------------------ where, how many

    def base(self, root: Path | None = None) -> Path:
        """A folder dataset's tree (absolute, or under the data root)."""
        if self.folder is None:
            raise TypeError(f"dataset {self.name!r} is not a folder dataset")
        path = Path(self.folder).expanduser()
        return path if path.is_absolute() else (data_root() if root is None else Path(root)) / path

    def class_folders(self, root: Path | None = None) -> list[str] | None:
        """A folder dataset's class folder names (its train split, sorted as ImageFolder sorts
        them), or None when the tree is absent. One os.scandir: no image is opened."""
        train = self.base(root) / "train"
        try:
            return _class_folders(str(train), train.stat().st_mtime_ns)
        except OSError:
            return None

    def classes(self, root: Path | None = None) -> int:
        """The class count: a folder dataset's class folders when its tree is there, else the
        declared count (DatasetMissing when there is neither)."""
        if self.folder is not None:
            found = self.class_folders(root)
            if found:
                return len(found)
            if self.n_classes is None:
                raise DatasetMissing(
                    f"dataset {self.name!r} not found: {self.base(root) / 'train'} holds no class "
                    f"folders; {self.get_hint(root)}"
                )
        assert self.n_classes is not None
        return self.n_classes

    def orders(self, root: Path | None = None) -> dict[int, list[int]]:
        """seed -> class order (original labels): the declared ones, and a folder dataset's
        class_orders.toml (which wins for the seeds it names)."""
        out = {int(seed): [int(c) for c in order] for seed, order in self.class_orders.items()}
        if self.folder is not None:
            out.update(_folder_orders(self, root))
        return out

    def get_hint(self, root: Path | None = None) -> str:
        """What to do when the dataset is missing (one clause)."""
        if self.how_to_get:
            return self.how_to_get
        if self.downloadable:
            return (
                f"get it with `rmconsole data get {self.name}` (needs internet), or point RMCONSOLE_DATA at a "
                f"folder that has it"
            )
        if self.folder is not None and Path(self.folder).expanduser().is_absolute():
            return "put an ImageFolder tree there (train/ and val/, one folder per class)"
        if self.folder is not None:
            return "point RMCONSOLE_DATA at the folder that holds it"
        return "point RMCONSOLE_DATA at a folder that has it"

    def fix_hint(self) -> str:
        """What to do when its files are damaged (one clause)."""
        if self.downloadable:
            return (
                f"fetch it again (`rmconsole data get {self.name}`, needs internet) or point RMCONSOLE_DATA at a "
                f"good copy"
            )
        return "point RMCONSOLE_DATA at a good copy"

    # ------------------------------------------------------------------ files

    def required_paths(self, root: Path | None = None) -> list[Path]:
        root = data_root() if root is None else Path(root)
        if self.folder is not None and not self.required:
            return [self.base(root) / "train", self.base(root) / "val"]
        return [root / rel for rel in self.required]

    def check_available(self, root: Path | None = None) -> None:
        """Raise DatasetMissing, without loading anything, when the dataset's files are absent."""
        for path in self.required_paths(root):
            if not (path.exists() or path.with_name(path.name + ".gz").exists()):
                how = self.get_hint(root) + (", or set download=true" if self.downloadable else "")
                raise DatasetMissing(f"dataset {self.name!r} not found: {path} does not exist; {how}")

    def verify_files(self, root: Path | None = None) -> None:
        """Present (check_available) and not damaged (the spec's verify, or the folder check)."""
        root = data_root() if root is None else Path(root)
        self.check_available(root)
        if self.verify is not None:
            resolve(self.verify, f"dataset {self.name!r}'s verify")(self, root)
        elif self.folder is not None:
            from .folder import verify_tree

            verify_tree(self, root)

    def loader(self) -> Loader:
        if self.load is None:
            from .folder import load_tree

            return load_tree
        return resolve(self.load, f"dataset {self.name!r}'s loader")

    def source_paths(self, root: Path) -> list[Path]:
        """The files a cached tensor copy is made from (empty: nothing to key a copy on)."""
        if self.source_files is not None:
            return list(resolve(self.source_files, f"dataset {self.name!r}'s source_files")(root))
        return sorted(
            p
            for sub in self.sources
            for p in ((root / sub).glob("*") if (root / sub).is_dir() else [root / sub])
            if p.is_file()
        )


def resolve(target: Any, what: str) -> Any:
    """A "module:function" string imported (ValueError, one line, when it cannot be), or the object."""
    if not isinstance(target, str):
        return target
    try:
        return import_target(target)
    except Exception as err:  # noqa: BLE001 - whatever a declaration's target raises is said in one line
        raise ValueError(f"{what} {target!r} cannot be imported: {failure(err)}") from None


def _class_folders(train: str, _mtime: int) -> list[str]:
    """The class folders of a split (cached per path and modification time)."""
    key = (train, _mtime)
    if key not in _FOLDERS:
        with os.scandir(train) as entries:
            _FOLDERS[key] = sorted(e.name for e in entries if e.is_dir() and not e.name.startswith("."))
    return _FOLDERS[key]


_FOLDERS: dict[tuple[str, int], list[str]] = {}


def _folder_orders(spec: DatasetSpec, root: Path | None) -> dict[int, list[int]]:
    """A tree's class_orders.toml: seed = [class folder names or indices] (ValueError, one line,
    when it is malformed or does not name each class once)."""
    path = spec.base(root) / ORDERS_FILE
    if not path.is_file():
        return {}
    try:
        table = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ValueError(f"{path}: not a readable TOML file ({' '.join(str(err).split())[:160]})") from None
    names = spec.class_folders(root) or []
    out: dict[int, list[int]] = {}
    for seed, order in table.items():
        if not seed.isdigit() or not isinstance(order, list):
            raise ValueError(
                f"{path}: {seed!r}: expected `SEED = [class, ...]` (a whole-number seed, a list of "
                f"class folder names or indices)"
            )
        try:
            labels = [names.index(c) if isinstance(c, str) else int(c) for c in order]
        except ValueError:
            unknown = next(c for c in order if isinstance(c, str) and c not in names)
            raise ValueError(f"{path}: seed {seed} names {unknown!r}, not a class folder of its train split") from None
        if sorted(labels) != list(range(len(names))):
            raise ValueError(f"{path}: seed {seed}'s order must name each of the {len(names)} classes once")
        out[int(seed)] = labels
    return out


# --------------------------------------------------------------------------- the registry (science side)

BUILTIN_MODULES = (
    "digits",
    "mnist",
    "fashion_mnist",
    "cifar10",
    "cifar100",
    "tiny_imagenet",
    "imagenet",
    "imagenet_r",
    "cub200",
)
_registered: dict[str, DatasetSpec] = {}


def builtins() -> dict[str, DatasetSpec]:
    """The built-in specs by name (each module's SPEC; importing them imports no torch)."""
    if not _BUILTINS:
        from importlib import import_module

        for module in BUILTIN_MODULES:
            spec = import_module(f"{__name__}.{module}").SPEC
            _BUILTINS[spec.name] = spec
    return dict(_BUILTINS)


_BUILTINS: dict[str, DatasetSpec] = {}


def folder_spec(name: str) -> DatasetSpec:
    """`folder:PATH` as a spec: an ImageFolder tree with ImageNet's normalisation, 224 px by default."""
    path = name[len(FOLDER_PREFIX) :].strip()
    if not path:
        raise UnknownDataset(f"dataset {name!r}: give the tree's path after 'folder:' (e.g. folder:/data/my-tree)")
    return DatasetSpec(name=name, description=f"the ImageFolder tree {path}", folder=path, image_size=224)


def register(spec: DatasetSpec) -> DatasetSpec:
    """Make a spec (a plug-in's, resolved by `rmconsole.datasets`) known to the science by its name."""
    return register_in(_registered, spec, DatasetSpec)


def lookup(name: str) -> DatasetSpec:
    """The spec of a built-in, a `folder:PATH` or a registered dataset (UnknownDataset otherwise)."""
    found = builtins().get(name) or _registered.get(name)
    if found is not None:
        return found
    if name.startswith(FOLDER_PREFIX):
        return folder_spec(name)
    known = [*builtins(), *_registered]
    raise UnknownDataset(
        f"unknown dataset {name!r}; registered: {', '.join(known)} (or folder:PATH for an ImageFolder tree)"
    )


def check_available(name: str, root: Path | None = None) -> None:
    """Raise DatasetMissing, without loading anything, when a dataset's files are absent.

    Called before a run is stored, so a missing dataset costs the user one line and leaves
    nothing behind."""
    lookup(name).check_available(root)


def verify_dataset(name: str, root: Path | None = None) -> None:
    """Check a dataset's files without loading it: present (check_available), and not damaged
    (its spec's verify: MNIST-style idx headers against file sizes, CIFAR's MD5 sums, an
    ImageFolder tree's class folders). Raises DatasetMissing / DatasetCorrupt with one line; the
    CLI calls it before storing a run."""
    lookup(name).verify_files(root)


def replace(spec: DatasetSpec, **changes: Any) -> DatasetSpec:
    """A copy of a spec with some fields changed (a plug-in renamed by its entry point)."""
    return dataclasses.replace(spec, **changes)


__all__ = [
    "FOLDER_PREFIX",
    "ORDERS_FILE",
    "DatasetCorrupt",
    "DatasetMissing",
    "DatasetSpec",
    "LoadOptions",
    "UnknownDataset",
    "builtins",
    "check_available",
    "data_root",
    "folder_spec",
    "lookup",
    "register",
    "resolve",
    "verify_dataset",
]
