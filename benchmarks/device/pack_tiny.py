"""The Tiny-ImageNet subset, small enough to travel to a GPU machine beside the repo and its wheels.

    python benchmarks/device/pack_tiny.py ../shared/data/tiny-imagenet-200 .tiny/tiny-imagenet-200

A device call carries at most 64 MiB (the repo, the wheels and the data together); the subset's
JPEGs are 57.2 MiB as they lie. `jpegtran -copy none -optimize` rewrites each file's Huffman
tables and drops its metadata without touching a DCT coefficient, so every image decodes to the
same pixels. `words.txt` keeps the tree's own classes only and `val_annotations.txt` is left out
(the subset's val/ is already sorted into class folders; rmconsole reads neither). This script checks that for every file (torchvision's decoder, the one the loader
uses, on the original and the packed bytes: tensors equal) and refuses to finish otherwise.
Needs `jpegtran` (Debian: libjpeg-turbo-progs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def pack_one(src: Path, dst: Path) -> tuple[int, int]:
    """Losslessly re-encode one JPEG; (bytes before, bytes after). Raises if the pixels differ."""
    import torch
    from torchvision.io import ImageReadMode, decode_image

    before = src.read_bytes()
    after = subprocess.run(
        ["jpegtran", "-copy", "none", "-optimize"], input=before, capture_output=True, check=True
    ).stdout
    if len(after) >= len(before):  # keep the original where the rewrite gains nothing
        after = before
    original = decode_image(torch.frombuffer(bytearray(before), dtype=torch.uint8), mode=ImageReadMode.RGB)
    packed = decode_image(torch.frombuffer(bytearray(after), dtype=torch.uint8), mode=ImageReadMode.RGB)
    if not torch.equal(original, packed):
        raise ValueError(f"{src}: the packed image decodes to different pixels")
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(after)
    return len(before), len(after)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("source", type=Path, help="an ImageFolder tree (train/ and val/)")
    ap.add_argument("dest", type=Path, help="where the packed tree goes (must not exist)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args(argv)
    if shutil.which("jpegtran") is None:
        print("error: jpegtran not found; install libjpeg-turbo-progs", file=sys.stderr)
        return 2
    if not (args.source / "train").is_dir():
        print(f"error: no train/ folder in {str(args.source)!r}", file=sys.stderr)
        return 2
    if args.dest.exists():
        print(f"error: {str(args.dest)!r} exists; give a new folder", file=sys.stderr)
        return 2
    images, others = [], []
    for path in sorted(args.source.rglob("*")):
        if path.is_file():
            (images if path.suffix.lower() in (".jpeg", ".jpg") else others).append(path)
    work = args.dest.with_name(args.dest.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    classes = {p.name for p in (args.source / "train").iterdir() if p.is_dir()}
    kept = []
    for path in others:
        target = work / path.relative_to(args.source)
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.name == "val_annotations.txt":
            continue
        if path.name == "words.txt":
            lines = path.read_text().splitlines(keepends=True)
            target.write_text("".join(line for line in lines if line.split("\t", 1)[0] in classes))
        else:
            shutil.copyfile(path, target)
        kept.append(target)
    with ThreadPoolExecutor(args.threads) as pool:
        sizes = list(pool.map(lambda p: pack_one(p, work / p.relative_to(args.source)), images))
    before = sum(b for b, _ in sizes) + sum(p.stat().st_size for p in others)
    after = sum(a for _, a in sizes) + sum(p.stat().st_size for p in kept)
    work.rename(args.dest)
    print(
        f"{len(images):,} images decode to the same pixels; {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB "
        f"({1 - after / before:.0%} smaller) in {args.dest}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
