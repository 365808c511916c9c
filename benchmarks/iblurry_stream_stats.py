"""i-Blurry stream statistics: rmconsole's CIFAR10 (and TinyImageNet) i-Blurry-50-10 streams beside
the follow-up's published split files (PROTOCOL §9.1).

    PYTHONPATH=. python benchmarks/iblurry_stream_stats.py [--ib-repo PATH] [--seeds 1 2 3]

CIFAR10 is not on this machine, so its stream is built from CIFAR10's label layout: 5,000
training samples per class (torchvision's order interleaves the classes; a seeded random
interleaving stands in for it, which only decides which samples of a class are pooled, not how
many). `--ib-repo` is a checkout or bare clone of naver-ai/i-Blurry (fetched with the fetch tool:
/work/.mirror/naver-ai+i-Blurry/repo); its `collections/*.json` files are read with `git show`
and summarised the same way. The class identities differ (another random draw); the statistics
are what must match: task sizes, classes per task, new classes per task and where the new
disjoint class arrives, majors and minors per task.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import torch

from rmconsole.cl import streams_iblurry as S

CIFAR10 = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def cifar10_layout_labels(seed: int = 0) -> torch.Tensor:
    labels = torch.arange(10).repeat_interleave(5000)
    return labels[torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))]


def published(repo: Path, dataset: str, seed: int, n_tasks: int = 5) -> list[dict]:
    """The follow-up's split files for a seed, summarised as `iblurry_statistics` does."""
    tasks, seen, out = [], set(), []
    for t in range(n_tasks):
        blob = subprocess.run(
            [
                "git",
                "--git-dir",
                str(repo),
                "show",
                f"HEAD:collections/{dataset}/{dataset}_split{n_tasks}_n50_m10_rand{seed}_task{t}.json",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        tasks.append([r["klass"] for r in json.loads(blob)])
    counts_all = [{c: ks.count(c) for c in set(ks)} for ks in tasks]
    for t, ks in enumerate(tasks):
        counts = counts_all[t]
        new = [(c, i) for i, c in enumerate(dict.fromkeys(ks)) if c not in seen]
        positions = {c: ks.index(c) for c, _ in new}
        seen |= set(counts)
        only_here = {c for c in counts if all(c not in counts_all[u] for u in range(n_tasks) if u != t)}
        disjoint = sorted((counts[c] for c in only_here), reverse=True)
        others = sorted((counts[c] for c in counts if c not in only_here), reverse=True)
        majors = [n for n in others if n > 0.5 * others[0]]  # a blurry class's own task holds most of it
        minors = others[len(majors) :]
        out.append(
            {
                "task": t,
                "size": len(ks),
                "classes": len(counts),
                "new": len(new),
                "first_new_position": min(positions.values()) if positions else None,
                "disjoint": sorted(disjoint, reverse=True),
                "majors": majors,
                "minors": minors,
            }
        )
    return out


def line(name: str, stats: list[dict]) -> str:
    parts = []
    for t in stats:
        minors = (
            f"{min(t['minors'])}-{max(t['minors'])} ({len(t['minors'])} cls, {sum(t['minors'])})"
            if t["minors"]
            else "-"
        )
        parts.append(
            f"T{t['task'] + 1}: {t['size']} | {t['classes']} cls, {t['new']} new @{t['first_new_position']} | "
            f"D {t['disjoint'][:3]}{'…' if len(t['disjoint']) > 3 else ''} | "
            f"maj {min(t['majors']) if t['majors'] else '-'}-{max(t['majors']) if t['majors'] else '-'} "
            f"({len(t['majors'])}) | min {minors}"
        )
    return f"{name}\n  " + "\n  ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--ib-repo", type=Path, default=Path("/work/.mirror/naver-ai+i-Blurry/repo"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--tiny-root", type=Path, default=None, help="RMCONSOLE_DATA with the Tiny-ImageNet subset")
    args = ap.parse_args()
    labels = cifar10_layout_labels()
    for seed in args.seeds:
        split = S.iblurry_split(labels, 5, 10, 50, 10, seed)
        ours = S.iblurry_statistics(labels, split, 10)
        for t in ours:
            t["new_names"] = [CIFAR10[c] for c in t["new_classes"]]
        print(line(f"rmconsole cifar10 i-Blurry-50-10 seed {seed} (new: {[t['new_names'] for t in ours]})", ours))
        if args.ib_repo.exists():
            print(line(f"follow-up's cifar10_split5_n50_m10_rand{seed}", published(args.ib_repo, "cifar10", seed)))
        print()
    if args.tiny_root is not None:
        from rmconsole.cl.data import load_dataset

        tiny = load_dataset("tiny_imagenet", root=args.tiny_root, pipeline="stream")
        tl = tiny.train.labels
        for seed in args.seeds[:1]:
            stats = S.iblurry_statistics(tl, S.iblurry_split(tl, 5, 200, 50, 10, seed), 200)
            print(line(f"rmconsole tiny_imagenet subset (100/class) i-Blurry-50-10 seed {seed}", stats))
        if args.ib_repo.exists():
            print(
                line(
                    "follow-up's tinyimagenet_split5_n50_m10_rand1 (500/class)",
                    published(args.ib_repo, "tinyimagenet", 1),
                )
            )


if __name__ == "__main__":
    main()
