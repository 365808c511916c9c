"""cub200: Caltech-UCSD Birds-200-2011 (Wah et al. 2011), 200 bird species, 5,994 train / 5,794
test images, as distributed: DATA_ROOT/CUB_200_2011/ with

    images/<class folder>/<file>.jpg   the images
    images.txt                         "<image id> <path under images/>"
    image_class_labels.txt             "<image id> <class id, 1..200>"
    train_test_split.txt               "<image id> <1: train, 0: test>"
    classes.txt                        "<class id> <class folder name>"

The split is the dataset's own train_test_split.txt (what the L2P/DualPrompt/CODA-Prompt line and
its PyTorch reimplementations use); labels are the class ids minus one (the sorted class folder
order, `001.Black_footed_Albatross` first). No paper of that line fixes a class order: the run's
seed shuffles it. 224 px by default (the ViT-B/16 input). Not downloadable from here."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from . import IMAGENET_STATS, DatasetCorrupt, DatasetSpec, LoadOptions

if TYPE_CHECKING:
    from ..images import Dataset

FOLDER = "CUB_200_2011"
LISTS = ("images.txt", "image_class_labels.txt", "train_test_split.txt", "classes.txt")
N_CLASSES = 200


def _table(path: Path, spec: DatasetSpec) -> dict[int, str]:
    """A `<id> <value>` list file as id -> value (DatasetCorrupt, one line, on a malformed row)."""
    out: dict[int, str] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        first, _, rest = line.strip().partition(" ")
        if not first.isdigit() or not rest.strip():
            raise DatasetCorrupt(
                f"dataset {spec.name!r} is corrupt: {path} line {n} is not '<id> <value>'; {spec.fix_hint()}"
            )
        out[int(first)] = rest.strip()
    return out


def read_split(spec: DatasetSpec, root: Path) -> tuple[list[str], list[str], list[int], list[bool]]:
    """(class names, image paths, labels 0..199, is_train) from the list files, checked against
    each other (DatasetCorrupt, one line, when they disagree)."""
    base = root / FOLDER
    images, labels, split, names = (_table(base / name, spec) for name in LISTS)
    fix = spec.fix_hint()
    if set(images) != set(labels) or set(images) != set(split):
        raise DatasetCorrupt(
            f"dataset {spec.name!r} is corrupt: images.txt, image_class_labels.txt and train_test_split.txt "
            f"list different image ids; {fix}"
        )
    if sorted(names) != list(range(1, N_CLASSES + 1)):
        raise DatasetCorrupt(
            f"dataset {spec.name!r} is corrupt: classes.txt must number its {N_CLASSES} classes 1..{N_CLASSES} "
            f"(it has {len(names)}); {fix}"
        )
    bad = next((i for i in sorted(images) if labels[i] not in {str(c) for c in names}), None)
    if bad is not None:
        raise DatasetCorrupt(
            f"dataset {spec.name!r} is corrupt: image {bad}'s class {labels[bad]!r} is not in classes.txt; {fix}"
        )
    bad = next((i for i in sorted(images) if split[i] not in ("0", "1")), None)
    if bad is not None:
        raise DatasetCorrupt(
            f"dataset {spec.name!r} is corrupt: train_test_split.txt gives image {bad} {split[bad]!r} (allowed: 1 "
            f"train, 0 test); {fix}"
        )
    ids = sorted(images)
    return (
        [names[c] for c in sorted(names)],
        [str(base / "images" / images[i]) for i in ids],
        [int(labels[i]) - 1 for i in ids],
        [split[i] == "1" for i in ids],
    )


def verify(spec: DatasetSpec, root: Path) -> None:
    """The list files agree, and the first and last images they name are there."""
    _, paths, _, is_train = read_split(spec, root)
    if not any(is_train) or all(is_train):
        raise DatasetCorrupt(f"dataset {spec.name!r} is corrupt: train_test_split.txt leaves a split empty")
    for path in (paths[0], paths[-1]):
        if not Path(path).is_file():
            raise DatasetCorrupt(f"dataset {spec.name!r} is corrupt: {path} is missing; {spec.fix_hint()}")


def load(spec: DatasetSpec, root: Path, options: LoadOptions) -> Dataset:
    import torch

    from .folder import load_lists

    classes, paths, labels, is_train = read_split(spec, root)
    train = [i for i, t in enumerate(is_train) if t]
    test = [i for i, t in enumerate(is_train) if not t]
    label_t = torch.tensor(labels, dtype=torch.int64)
    return load_lists(
        spec,
        options,
        ([paths[i] for i in train], label_t[train]),
        ([paths[i] for i in test], label_t[test]),
        classes,
    )


SPEC = DatasetSpec(
    name="cub200",
    description="CUB-200-2011 birds (200 classes, its own train_test_split.txt: 5,994 train / 5,794 test), 224 px",
    load="rmconsole.cl.datasets.cub200:load",
    verify="rmconsole.cl.datasets.cub200:verify",
    n_classes=N_CLASSES,
    image_size=224,
    mean=IMAGENET_STATS[0],
    std=IMAGENET_STATS[1],
    crop_padding=4,
    required=tuple(f"{FOLDER}/{name}" for name in ("images", *LISTS)),
    how_to_get=(
        "download CUB_200_2011.tgz from https://www.vision.caltech.edu/datasets/cub_200_2011/ and unpack it under "
        "RMCONSOLE_DATA (CUB_200_2011/images/, images.txt, train_test_split.txt, image_class_labels.txt, classes.txt)"
    ),
)
