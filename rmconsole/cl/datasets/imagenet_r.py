"""imagenet_r: ImageNet-R(endition) (Hendrycks et al. 2021), 30,000 renditions (art, cartoons,
sketches, toys, ...) of 200 ImageNet classes, as distributed: DATA_ROOT/imagenet-r/<wnid>/*.jpg,
one folder per WordNet id (the 200 below). The archive has no train/test split.

The split, as the L2P/DualPrompt/CODA-Prompt line uses it:

* when DATA_ROOT/imr_train.txt and DATA_ROOT/imr_test.txt exist (the fixed lists that the CODA-Prompt
  and Si-Blurry/MVP code read; lines `<wnid>/<file>`), those lists;
* otherwise the rule of the PyTorch L2P/DualPrompt reimplementation: a random 80/20 split of the
  whole set (not per class), the first int(0.8 * N) images of a permutation train, the rest test.
  The images are ordered as torchvision's ImageFolder orders them (sorted wnid folders, sorted
  files) and permuted by torch.randperm(N) from a generator seeded with SPLIT_SEED = 0. The
  reference draws its permutation from the global RNG after seeding it with the run seed, so its
  exact partition is not reproducible elsewhere; this one is fixed, whatever the run's seed.

Labels are the index of the wnid in the sorted list (ImageFolder's). No paper fixes a class
order: the run's seed shuffles it (10 tasks of 20 classes in the task-incremental papers; the
Si-Blurry stream in MVP). 224 px by default. Not downloadable from here."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from . import IMAGENET_STATS, DatasetCorrupt, DatasetSpec, LoadOptions

if TYPE_CHECKING:
    from ..images import Dataset

FOLDER = "imagenet-r"
SPLIT_FILES = ("imr_train.txt", "imr_test.txt")
SPLIT_SEED = 0
TRAIN_FRACTION = 0.8
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")

# The 200 ImageNet classes of ImageNet-R (WordNet ids, sorted: label = index).
_WNID_TEXT = """
n01443537 n01484850 n01494475 n01498041 n01514859 n01518878 n01531178 n01534433 n01614925 n01616318
n01630670 n01632777 n01644373 n01677366 n01694178 n01748264 n01770393 n01774750 n01784675 n01806143
n01820546 n01833805 n01843383 n01847000 n01855672 n01860187 n01882714 n01910747 n01944390 n01983481
n01986214 n02007558 n02009912 n02051845 n02056570 n02066245 n02071294 n02077923 n02085620 n02086240
n02088094 n02088238 n02088364 n02088466 n02091032 n02091134 n02092339 n02094433 n02096585 n02097298
n02098286 n02099601 n02099712 n02102318 n02106030 n02106166 n02106550 n02106662 n02108089 n02108915
n02109525 n02110185 n02110341 n02110958 n02112018 n02112137 n02113023 n02113624 n02113799 n02114367
n02117135 n02119022 n02123045 n02128385 n02128757 n02129165 n02129604 n02130308 n02134084 n02138441
n02165456 n02190166 n02206856 n02219486 n02226429 n02233338 n02236044 n02268443 n02279972 n02317335
n02325366 n02346627 n02356798 n02363005 n02364673 n02391049 n02395406 n02398521 n02410509 n02423022
n02437616 n02445715 n02447366 n02480495 n02480855 n02481823 n02483362 n02486410 n02510455 n02526121
n02607072 n02655020 n02672831 n02701002 n02749479 n02769748 n02793495 n02797295 n02802426 n02808440
n02814860 n02823750 n02841315 n02843684 n02883205 n02906734 n02909870 n02939185 n02948072 n02950826
n02951358 n02966193 n02980441 n02992529 n03124170 n03272010 n03345487 n03372029 n03424325 n03452741
n03467068 n03481172 n03494278 n03495258 n03498962 n03594945 n03602883 n03630383 n03649909 n03676483
n03710193 n03773504 n03775071 n03888257 n03930630 n03947888 n04086273 n04118538 n04133789 n04141076
n04146614 n04147183 n04192698 n04254680 n04266014 n04275548 n04310018 n04325704 n04347754 n04389033
n04409515 n04465501 n04487394 n04522168 n04536866 n04552348 n04591713 n07614500 n07693725 n07695742
n07697313 n07697537 n07714571 n07714990 n07718472 n07720875 n07734744 n07742313 n07745940 n07749582
n07753275 n07753592 n07768694 n07873807 n07880968 n07920052 n09472597 n09835506 n10565667 n12267677
"""
WNIDS = tuple(_WNID_TEXT.split())


def _files(spec: DatasetSpec, root: Path) -> list[tuple[str, int]]:
    """(path, label) of every image, in ImageFolder's order; DatasetCorrupt (one line) unless the
    class folders are exactly the 200 wnids, none empty."""
    base = root / FOLDER
    with os.scandir(base) as entries:
        found = sorted(e.name for e in entries if e.is_dir() and not e.name.startswith("."))
    if found != list(WNIDS):
        missing = next((w for w in WNIDS if w not in found), None)
        what = (
            f"lacks the class folder {missing}" if missing else f"has a folder {sorted(set(found) - set(WNIDS))[0]!r}"
        )
        raise DatasetCorrupt(
            f"dataset {spec.name!r} is corrupt: {base} {what} (expected the 200 ImageNet-R wnids); {spec.fix_hint()}"
        )
    out: list[tuple[str, int]] = []
    for label, wnid in enumerate(WNIDS):
        with os.scandir(base / wnid) as entries:
            names = sorted(e.name for e in entries if e.name.lower().endswith(IMAGE_SUFFIXES))
        if not names:
            raise DatasetCorrupt(f"dataset {spec.name!r} is corrupt: {base / wnid} has no images; {spec.fix_hint()}")
        out.extend((str(base / wnid / name), label) for name in names)
    return out


def split(spec: DatasetSpec, root: Path) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(train, test) lists of (path, label): the split files when present, else the seeded 80/20 rule."""
    files = _files(spec, root)
    lists = [root / name for name in SPLIT_FILES]
    if all(p.is_file() for p in lists):
        by_rel = {f"{Path(p).parent.name}/{Path(p).name}": (p, y) for p, y in files}
        out = []
        for path in lists:
            rows = [line.strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines()]
            unknown = next((r for r in rows if r and r not in by_rel), None)
            if unknown is not None:
                raise DatasetCorrupt(
                    f"dataset {spec.name!r} is corrupt: {path} names {unknown!r}, not an image of {root / FOLDER}"
                )
            out.append([by_rel[r] for r in rows if r])
        return out[0], out[1]
    import torch

    order = torch.randperm(len(files), generator=torch.Generator().manual_seed(SPLIT_SEED)).tolist()
    n_train = int(TRAIN_FRACTION * len(files))
    return [files[i] for i in order[:n_train]], [files[i] for i in order[n_train:]]


def verify(spec: DatasetSpec, root: Path) -> None:
    """The 200 wnid folders, none empty (and the split files, when present, name its images)."""
    train, test = split(spec, root)
    if not train or not test:
        raise DatasetCorrupt(f"dataset {spec.name!r} is corrupt: its split leaves the train or test set empty")


def load(spec: DatasetSpec, root: Path, options: LoadOptions) -> Dataset:
    import torch

    from .folder import load_lists

    train, test = split(spec, root)

    def as_split(rows: list[tuple[str, int]]) -> tuple[list[str], torch.Tensor]:
        return [p for p, _ in rows], torch.tensor([y for _, y in rows], dtype=torch.int64)

    return load_lists(spec, options, as_split(train), as_split(test), list(WNIDS))


SPEC = DatasetSpec(
    name="imagenet_r",
    description="ImageNet-R renditions (200 ImageNet classes, 30,000 images; 80/20 split, see docs/datasets.md), 224 px",
    load="rmconsole.cl.datasets.imagenet_r:load",
    verify="rmconsole.cl.datasets.imagenet_r:verify",
    n_classes=len(WNIDS),
    image_size=224,
    mean=IMAGENET_STATS[0],
    std=IMAGENET_STATS[1],
    crop_padding=4,
    required=(FOLDER,),
    how_to_get=(
        "download imagenet-r.tar from https://people.eecs.berkeley.edu/~hendrycks/imagenet-r.tar and unpack it under "
        "RMCONSOLE_DATA (imagenet-r/<wnid>/*.jpg)"
    ),
)
