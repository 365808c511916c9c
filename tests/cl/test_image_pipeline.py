"""The streaming ImageFolder pipeline: decoding, resizing, labels, prefetching, and the same
batches (and the same run) as the in-memory path. Trees are written by the tests with PIL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import rmconsole
from PIL import Image
from support.cli import in_process

from rmconsole.cl import pipeline
from rmconsole.cl.data import TensorImages, load_dataset
from rmconsole.cl.pipeline import Prefetched, StreamingFolder, choose_in_memory, decode_resized, iter_batches

N_CLASSES = 10


def _write_image(path: Path, width: int, height: int, seed: int, fmt: str = "JPEG", mode: str = "RGB") -> None:
    gen = torch.Generator().manual_seed(seed)
    channels = 1 if mode == "L" else 3
    pixels = torch.randint(0, 256, (height, width, channels), generator=gen, dtype=torch.uint8)
    img = Image.fromarray(pixels.squeeze(-1).numpy() if mode == "L" else pixels.numpy(), mode)
    img.save(path, format=fmt)


def write_tree(root: Path, name: str = "tiny-imagenet-200", train_per_class: int = 30, val_per_class: int = 5) -> Path:
    """An ImageFolder tree like Tiny-ImageNet's: odd sizes, some PNG bytes behind a .JPEG name,
    some grayscale images (decoded to RGB)."""
    base = root / name
    seed = 0
    for split, per_class in (("train", train_per_class), ("val", val_per_class)):
        for c in range(N_CLASSES):
            folder = base / split / f"n{c:08d}"
            folder.mkdir(parents=True)
            for i in range(per_class):
                seed += 1
                fmt = "PNG" if i % 7 == 3 else "JPEG"
                mode = "L" if i % 5 == 2 else "RGB"
                _write_image(folder / f"n{c:08d}_{i}.JPEG", 10 + (i * 3) % 13, 8 + (i * 5) % 11, seed, fmt, mode)
    return base


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    write_tree(root)
    return root


def _pil_expected(path: str, size: int) -> torch.Tensor:
    from torchvision.transforms.v2 import functional as F

    img = F.pil_to_tensor(Image.open(path).convert("RGB"))
    return F.center_crop(F.resize(img, [size], antialias=True), [size, size])


def test_decode_resize_and_labels(tree: Path) -> None:
    from torchvision.datasets import ImageFolder

    data = load_dataset("tiny_imagenet", tree, image_size=8, pipeline="stream", loader_workers=0)
    assert isinstance(data.train, StreamingFolder) and isinstance(data.test, StreamingFolder)
    folder = ImageFolder(str(tree / "tiny-imagenet-200" / "train"))
    assert data.train.labels.tolist() == [t for _, t in folder.samples]
    assert data.class_names == folder.classes and data.n_classes == N_CLASSES
    assert len(data.train) == 300 and len(data.test) == 50 and data.image_shape == (3, 8, 8)
    batch = data.train.take(torch.arange(len(data.train)))
    assert batch.shape == (300, 3, 8, 8) and batch.dtype == torch.uint8
    for i in range(40):  # the same image PIL + torchvision's resize give (PNG: lossless, so exact)
        path = data.train.paths[i]
        expected = _pil_expected(path, 8)
        with open(path, "rb") as f:
            is_png = f.read(4) == b"\x89PNG"
        diff = (batch[i].int() - expected.int()).abs().max().item()
        assert diff == 0 if is_png else diff <= 2, (path, diff)


def test_grayscale_becomes_rgb_and_non_square_is_centre_cropped(tmp_path: Path) -> None:
    _write_image(tmp_path / "g.jpg", 30, 10, 1, "PNG", "L")
    img = decode_resized(str(tmp_path / "g.jpg"), 6)
    assert img.shape == (3, 6, 6)
    assert torch.equal(img[0], img[1]) and torch.equal(img[1], img[2])
    assert torch.equal(img, _pil_expected(str(tmp_path / "g.jpg"), 6))


@pytest.mark.parametrize("workers", [0, 2])
def test_streamed_batches_equal_in_memory_batches(tree: Path, workers: int) -> None:
    streamed = load_dataset("tiny_imagenet", tree, image_size=8, pipeline="stream", loader_workers=workers)
    in_memory = load_dataset("tiny_imagenet", tree, image_size=8, pipeline="memory", loader_workers=workers)
    assert isinstance(in_memory.train, TensorImages)
    gen = torch.Generator().manual_seed(0)
    plan = list(torch.randperm(len(streamed.train), generator=gen).split(32))  # shuffled, uneven last batch
    got = list(streamed.train.batches(plan))
    assert [len(b) for b in got] == [len(b) for b in plan]
    for idx, images in zip(plan, got):
        assert torch.equal(images, in_memory.train.take(idx))
        assert torch.equal(images, streamed.train.take(idx))
    again = list(iter_batches(streamed.train, plan[:3]))  # the persistent loader serves a new plan
    assert all(torch.equal(a, b) for a, b in zip(again, got[:3]))
    test_plan = list(torch.arange(len(streamed.test)).split(16))
    assert torch.equal(torch.cat(list(iter_batches(streamed.test, test_plan))), in_memory.test.images)
    streamed.train.close()


def test_prefetched_serves_the_plan_and_falls_back(tree: Path) -> None:
    data = load_dataset("tiny_imagenet", tree, image_size=8, pipeline="stream", loader_workers=0)
    plan = list(torch.arange(60).split(20))
    images_of = Prefetched(data.train, plan)
    assert torch.equal(images_of(plan[0]), data.train.take(plan[0]))  # from the prefetching stream
    odd = torch.tensor([5, 250, 3])
    assert torch.equal(images_of(odd), data.train.take(odd))  # off the plan: a plain take
    assert torch.equal(images_of(plan[1]), data.train.take(plan[1]))
    images_of.close()
    tensors = TensorImages(torch.zeros(4, 1, 2, 2, dtype=torch.uint8), torch.zeros(4, dtype=torch.long))
    assert pipeline.prefetching(tensors, [torch.arange(2)]) == tensors.take  # in memory: nothing to prefetch


@pytest.mark.parametrize("workers", [0, 1])
def test_the_memory_cache_serves_cached_samples_without_the_files(tmp_path: Path, workers: int) -> None:
    write_tree(tmp_path, train_per_class=6, val_per_class=1)
    data = load_dataset("tiny_imagenet", tmp_path, image_size=8, pipeline="stream", loader_workers=workers)
    source = data.train
    everything = source.take(torch.arange(len(source)))
    memory = torch.tensor([3, 17, 42, 8, 55])
    assert source.cache(memory)
    for i in memory.tolist():
        Path(source.paths[i]).unlink()  # cached samples are never read again
    assert torch.equal(source.take(memory.flip(0)), everything[memory.flip(0)])
    plan = [torch.tensor([42, 3]), torch.tensor([0, 17, 1]), torch.tensor([], dtype=torch.long), torch.tensor([2, 4])]
    got = list(source.batches(plan))  # cached, mixed (the RM stream batch), empty, not cached
    assert [len(g) for g in got] == [2, 3, 0, 2]
    for idx, images in zip(plan, got):
        assert torch.equal(images, everything[idx])
    assert source.cache(torch.tensor([3, 0]))  # a new memory: 3 from the old cache, 0 decoded
    assert torch.equal(source.take(torch.tensor([0, 3])), everything[[0, 3]])
    with pytest.raises(RuntimeError):
        source.take(torch.tensor([17]))  # dropped from the cache, file deleted: really read from disk
    assert not source.cache(torch.arange(10), budget=10)  # too big: no cache
    assert torch.equal(source.take(torch.tensor([1, 2])), everything[[1, 2]])
    source.close()


def test_choice_is_automatic_by_size_and_overridable(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert choose_in_memory("auto", 20000 + 10000, (3, 64, 64))  # Tiny-ImageNet: 369 MB
    assert not choose_in_memory("auto", 1_281_167 + 50_000, (3, 224, 224))  # ImageNet: 200 GB
    assert choose_in_memory("memory", 10**9, (3, 224, 224)) and not choose_in_memory("stream", 1, (1, 1, 1))
    with pytest.raises(ValueError, match="data_pipeline"):
        choose_in_memory("disk", 1, (1, 1, 1))
    assert isinstance(load_dataset("tiny_imagenet", tree, image_size=8).train, TensorImages)
    monkeypatch.setattr(pipeline, "MEMORY_BUDGET_BYTES", 1000)
    assert isinstance(load_dataset("tiny_imagenet", tree, image_size=8).train, StreamingFolder)
    assert isinstance(load_dataset("tiny_imagenet", tree, image_size=8, in_memory=True).train, TensorImages)


def _run(cfg_overrides: dict, data) -> list:
    from rmconsole.cl.loop import run_protocol
    from rmconsole.config import build_config

    cfg = build_config(
        {
            "dataset": "tiny_imagenet",
            "model": "mlp400",
            "memory_size": 200,
            "n_tasks": 5,
            "epochs": 2,
            "batch_size": 16,
            "uncertainty_views": 4,
            "image_size": 8,
            **cfg_overrides,
        }
    )
    torch.set_num_threads(1)
    return run_protocol(cfg, data, torch.device("cpu"))


def test_a_run_through_the_stream_equals_the_in_memory_run(tree: Path) -> None:
    """Same pixels, same draws: the streamed run and the in-memory run give the same accuracies,
    through training, RM's uncertainty scoring (task 1+) and evaluation."""
    streamed = _run({}, load_dataset("tiny_imagenet", tree, image_size=8, pipeline="stream", loader_workers=1))
    in_memory = _run({}, load_dataset("tiny_imagenet", tree, image_size=8, pipeline="memory"))
    assert len(streamed) == 5
    assert all(o.extra["memory"]["memory_cached"] for o in streamed)  # the memory read from its cache
    assert "memory_cached" not in in_memory[0].extra["memory"]
    assert [o.accuracy for o in streamed] == [o.accuracy for o in in_memory]
    scored = [o.extra["memory"].get("candidates_uncertainty") for o in streamed]
    assert scored[3] is not None and scored == [o.extra["memory"].get("candidates_uncertainty") for o in in_memory]


def test_cli_run_streams_an_imagefolder_dataset(tree: Path, isolated_home: Path) -> None:
    out = rmconsole(
        "run",
        "--preset",
        "tiny-imagenet-blurry10",
        "--set",
        "model=mlp400",
        "--set",
        "image_size=8",
        "--set",
        "n_tasks=5",
        "--set",
        "memory_size=200",
        "--set",
        "epochs=1",
        "--set",
        "batch_size=16",
        "--set",
        "uncertainty_views=2",
        "--set",
        "data_pipeline=stream",
        "--set",
        "loader_workers=1",
        "--set",
        "threads=1",
        env={"RMCONSOLE_DATA": str(tree)},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    detail = json.loads(in_process("show", "1", "--json").stdout)
    assert detail["status"] == "finished" and len(detail["tasks"]) == 5
    assert detail["config"]["data_pipeline"] == "stream"
    log = (isolated_home / "logs" / "run-1.log").read_text()
    assert "compute on cpu: amp=off, channels_last=False, compile=False" in log


BYTES_PROBE = """
import resource, sys, torch
resource.setrlimit(resource.RLIMIT_NOFILE, (96, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from rmconsole.cl import pipeline
from rmconsole.cl.data import load_dataset
root, size = sys.argv[1], 8
# the byte-sending path of a GPU run, decoded on the CPU here (nvJPEG needs a GPU)
pipeline.StreamingFolder.decodes_on_gpu = property(lambda self: True)
pipeline.StreamingFolder._gpu_decode = lambda self, raw: torch.stack([pipeline.decode_resized(d, size) for d in raw])
streamed = load_dataset("tiny_imagenet", root, image_size=size, pipeline="stream", loader_workers=2)
in_memory = load_dataset("tiny_imagenet", root, image_size=size, pipeline="memory", loader_workers=0)
plan = list(torch.arange(len(streamed.train)).split(150))
got = list(streamed.train.batches(plan))
assert all(torch.equal(g, in_memory.train.take(i)) for g, i in zip(got, plan))
streamed.train.close()
print("ok", len(got))
"""


def test_workers_send_a_batch_of_file_bytes_as_one_tensor(tree: Path) -> None:
    """With GPU decoding the workers send encoded files; a per-file tensor costs a file
    descriptor each and ran an H100 machine out of them (then hung). Under a 96-descriptor limit,
    batches of 150 files still arrive whole and decode to the in-memory images."""
    import subprocess
    import sys

    packed = pipeline.pack_bytes([torch.tensor([1, 2], dtype=torch.uint8), torch.tensor([3], dtype=torch.uint8)])
    assert [f.tolist() for f in packed.files()] == [[1, 2], [3]]
    try:
        out = subprocess.run([sys.executable, "-c", BYTES_PROBE, str(tree)], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the byte-sending workers hung (descriptors exhausted?)")
    assert out.returncode == 0 and out.stdout.startswith("ok 2"), out.stderr[-2000:]
