"""ImageNet-R and CUB-200-2011 as registry entries, each on a synthetic tree of its exact on-disk
layout (tiny JPEGs): the split each uses (CUB: its train_test_split.txt; ImageNet-R: the
seeded 80/20 rule, or the imr_*.txt lists when present), labels, a damaged tree and an absent one
each refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from rmconsole import datasets
from rmconsole.cl.data import load_dataset
from rmconsole.cl.datasets import DatasetCorrupt, DatasetMissing
from rmconsole.cl.datasets.imagenet_r import SPLIT_SEED, WNIDS


def _jpeg(path: Path, value: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (4, 4), (value % 256, 0, 0)).save(path, "JPEG")


def write_cub(root: Path, per_class: int = 2) -> Path:
    """CUB_200_2011/ as distributed: images/<NNN.Name>/<file>.jpg and the four list files; image
    ids run class by class, every other image a test image."""
    base = root / "CUB_200_2011"
    rows: dict[str, list[str]] = {"images": [], "labels": [], "split": [], "classes": []}
    image_id = 0
    for c in range(1, 201):
        folder = f"{c:03d}.Bird_{c}"
        rows["classes"].append(f"{c} {folder}")
        for k in range(per_class):
            image_id += 1
            rel = f"{folder}/Bird_{c}_{k}.jpg"
            _jpeg(base / "images" / rel, c)
            rows["images"].append(f"{image_id} {rel}")
            rows["labels"].append(f"{image_id} {c}")
            rows["split"].append(f"{image_id} {1 if k % 2 == 0 else 0}")
    for key, name in (
        ("images", "images.txt"),
        ("labels", "image_class_labels.txt"),
        ("split", "train_test_split.txt"),
        ("classes", "classes.txt"),
    ):
        (base / name).write_text("\n".join(rows[key]) + "\n")
    return base


def write_imagenet_r(root: Path, per_class: int = 2) -> Path:
    """imagenet-r/<wnid>/*.jpg for the 200 wnids (no split in the archive)."""
    for label, wnid in enumerate(WNIDS):
        for k in range(per_class):
            _jpeg(root / "imagenet-r" / wnid / f"art_{k}.jpg", label)
    return root / "imagenet-r"


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    write_cub(root)
    write_imagenet_r(root)
    return root


def test_both_are_listed_builtins_with_200_classes() -> None:
    assert {"imagenet_r", "cub200"} <= set(datasets.builtin_names())
    assert datasets.classes("imagenet_r", Path("/nonexistent")) == 200 == datasets.classes("cub200", Path("/x"))


@pytest.mark.parametrize(
    ("name", "where", "source"),
    [
        ("cub200", "CUB_200_2011", "vision.caltech.edu/datasets/cub_200_2011"),
        ("imagenet_r", "imagenet-r", "hendrycks/imagenet-r.tar"),
    ],
)
def test_an_absent_dataset_is_refused_in_one_line_saying_how_to_get_it(tmp_path, name, where, source) -> None:
    with pytest.raises(DatasetMissing) as err:
        datasets.verify(name, tmp_path)
    message = str(err.value)
    assert "\n" not in message and where in message and source in message, message


def test_cub_uses_its_own_train_test_split_and_class_ids(trees: Path) -> None:
    datasets.verify("cub200", trees)
    data = load_dataset("cub200", trees, image_size=8, pipeline="stream")
    assert data.n_classes == 200 and data.class_names[0] == "001.Bird_1" and data.class_names[-1] == "200.Bird_200"
    assert len(data.train) == 200 and len(data.test) == 200  # k=0 train, k=1 test, in every class
    assert torch.equal(data.train.labels, torch.arange(200)) and torch.equal(data.test.labels, torch.arange(200))
    assert [Path(p).name for p in data.train.paths[:2]] == ["Bird_1_0.jpg", "Bird_2_0.jpg"]
    assert all(data.class_names[int(y)] == Path(p).parent.name for p, y in zip(data.test.paths, data.test.labels))


def test_cub_lists_that_disagree_are_one_line(tmp_path: Path) -> None:
    base = write_cub(tmp_path, per_class=1)
    lines = (base / "train_test_split.txt").read_text().splitlines()
    (base / "train_test_split.txt").write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(DatasetCorrupt, match=r"list different image ids") as err:
        datasets.verify("cub200", tmp_path)
    assert "\n" not in str(err.value)


def test_imagenet_r_is_split_80_20_by_the_seeded_rule(trees: Path) -> None:
    datasets.verify("imagenet_r", trees)
    data = load_dataset("imagenet_r", trees, image_size=8, pipeline="stream")
    assert data.class_names == list(WNIDS) and len(data.train) == 320 and len(data.test) == 80  # int(0.8 * 400)
    train, test = set(data.train.paths), set(data.test.paths)
    assert not train & test and len(train | test) == 400
    everything = sorted(str(p) for p in (trees / "imagenet-r").rglob("*.jpg"))  # ImageFolder's order
    order = torch.randperm(400, generator=torch.Generator().manual_seed(SPLIT_SEED)).tolist()
    assert data.train.paths == [everything[i] for i in order[:320]]
    assert all(WNIDS[int(y)] == Path(p).parent.name for p, y in zip(data.test.paths, data.test.labels))


def test_imagenet_r_uses_the_imr_split_files_when_present(tmp_path: Path) -> None:
    write_imagenet_r(tmp_path, per_class=2)
    (tmp_path / "imr_train.txt").write_text("".join(f"{w}/art_0.jpg\n" for w in WNIDS))
    (tmp_path / "imr_test.txt").write_text("".join(f"{w}/art_1.jpg\n" for w in WNIDS))
    data = load_dataset("imagenet_r", tmp_path, image_size=8, pipeline="stream")
    assert [Path(p).name for p in data.train.paths] == ["art_0.jpg"] * 200
    assert torch.equal(data.test.labels, torch.arange(200))


def test_imagenet_r_without_its_200_wnids_is_one_line(tmp_path: Path) -> None:
    _jpeg(tmp_path / "imagenet-r" / "n01443537" / "a.jpg", 0)
    with pytest.raises(DatasetCorrupt, match=r"lacks the class folder n01484850 \(expected the 200 ImageNet-R wnids\)"):
        datasets.verify("imagenet_r", tmp_path)
