"""Regenerate rmconsole/paper_tables.csv from the paper's LaTeX source (every number of the
result tables that has an rmconsole setting, with its table, row and column as printed).

    python tools/paper_tables.py ../shared/paper/rainbow-memory.tex > rmconsole/paper_tables.csv

Table numbers: `tex_order` is the table's position among the result tables of the .tex file
(the supplement's K=1,000 augmentation table is `S`); `label` is its \\label, which names it
unambiguously.
"""

from __future__ import annotations

import csv
import re
import sys

NUMBER = r"(-?\d+(?:\.\d+)?)"
CELL = re.compile(NUMBER + r"(?:\s*\$\\pm\$\s*" + NUMBER + r")?(\$\^\*\$)?")
METHODS = {
    "EWC": "ewc",
    "Rwalk": "rwalk",
    "iCaRL": "icarl",
    "GDumb": "gdumb",
    "BiC": "bic",
    "RM w/o DA": "rm",
    "RM": "rm",
    "Random": "rm",
    "Reservoir": "rm",
    "Prototype": "rm",
    "Uncertainty (RM)": "rm",
    "RM (Ours)": "rm",
}
POLICIES = {"Random": "random", "Reservoir": "reservoir", "Prototype": "prototype", "Uncertainty (RM)": "uncertainty"}
AUG = {"None": "none", "CutMix": "cutmix", "RandAug": "randaug", "AutoAug": "autoaug", "CM+AA": "cutmix+autoaug"}
FIELDS = (
    "tex_order",
    "label",
    "caption",
    "row",
    "column",
    "dataset",
    "method",
    "memory_size",
    "n_tasks",
    "blurry",
    "stream",
    "augment",
    "memory_policy",
    "uncertainty",
    "metric",
    "topk",
    "mean",
    "std",
    "note",
)


def table_body(tex: str, label: str) -> list[str]:
    """The data rows (method name first) of the tabular after `label`."""
    start = tex.index("\\label{" + label + "}")
    body = tex[start : tex.index("\\end{table", start)]
    return [line for line in re.split(r"\\\\", body) if row_name(line) in METHODS]


def row_name(raw: str) -> str:
    raw = re.sub(r"\\cmidrule\([a-z]*\)\{[\d-]+\}\s*", "", raw).strip()
    name = raw.split("&")[0]
    name = name.replace("\\textbf{", "").replace("}", "").replace("\\memname", "RM").replace("\\our", "RM").strip()
    return re.sub(r"\s+", " ", name)


def cells(raw: str) -> list[tuple[float, float | None, bool]]:
    out = []
    for part in raw.split("&")[1:]:
        m = CELL.search(part.replace("\\textbf{", ""))
        if m:
            out.append((float(m.group(1)), float(m.group(2)) if m.group(2) else None, bool(m.group(3))))
    return out


def main(path: str) -> None:
    with open(path, encoding="utf-8") as f:
        tex = f.read()
    writer = csv.DictWriter(sys.stdout, FIELDS, lineterminator="\n")
    writer.writeheader()

    def emit(order: str, label: str, caption: str, row: str, column: str, **values: object) -> None:
        base = dict(
            tex_order=order,
            label=label,
            caption=caption,
            row=row,
            column=column,
            n_tasks=5,
            blurry=10,
            stream="online",
            memory_policy="",
            uncertainty="",
            topk=1,
            note="",
        )
        base.update(values)
        method = base["method"]
        if not values.get("augment"):
            base["augment"] = "cutmix+autoaug" if row == "RM" else "none"  # baselines ran without DA (issue #14)
        if method == "bic" and str(base.get("note", "")).startswith("BiC*"):
            base["method"] = "bic_star"
        writer.writerow(base)

    # 1: MNIST / CIFAR100 / ImageNet, Blurry10-Online
    label = "tab:various-dataset-blurry10-online"
    groups = [
        ("mnist", 500, 5, "A5 F5 I5", 1),
        ("cifar100", 2000, 5, "A5 F5 I5", 1),
        ("imagenet", 20000, 10, "A10 F10 I10", 5),
    ]
    for raw in table_body(tex, label):
        name = row_name(raw)
        values = cells(raw)
        for g, (dataset, k, tasks, heads, topk) in enumerate(groups):
            for m, head in enumerate(heads.split()):
                mean, std, star = values[3 * g + m]
                emit(
                    "1",
                    label,
                    "A/F/I on MNIST, CIFAR100, ImageNet Blurry10-Online",
                    name,
                    f"{dataset} (K={k}) {head}",
                    dataset=dataset,
                    method=METHODS[name],
                    memory_size=k,
                    n_tasks=tasks,
                    metric=("A_last", "F_last", "I_last")[m],
                    topk=topk,
                    mean=mean,
                    std=std if std is not None else "",
                    note="; ".join(
                        n
                        for n in ("BiC*: no distillation" if star else "", "top-5 (authors' code)" if topk == 5 else "")
                        if n
                    ),
                )
    # 2: CIFAR10 Blurry10-Online, K = 200 / 500 / 1000
    label = "tab:cifar10-blurry10-online"
    for raw in table_body(tex, label):
        name = row_name(raw)
        values = cells(raw)
        for g, k in enumerate((200, 500, 1000)):
            for m, head in enumerate(("A5", "F5", "I5")):
                mean, std, _ = values[3 * g + m]
                emit(
                    "2",
                    label,
                    "A/F/I on CIFAR10 Blurry10-Online for three K",
                    name,
                    f"K={k} {head}",
                    dataset="cifar10",
                    method=METHODS[name],
                    memory_size=k,
                    metric=("A_last", "F_last", "I_last")[m],
                    mean=mean,
                    std=std,
                )
    # 3: CIFAR10 K=500, Disjoint / Blurry10 / Blurry30 x Online / Offline (A5)
    label = "tab:cifar10-blurry-disjoint"
    for raw in table_body(tex, label):
        name = row_name(raw)
        values = cells(raw)
        for g, blurry in enumerate((0, 10, 30)):
            for s, stream in enumerate(("online", "offline")):
                mean, std, _ = values[2 * g + s]
                emit(
                    "3",
                    label,
                    "A5 on CIFAR10 (K=500) by blurriness and setup",
                    name,
                    f"Blurry{blurry} {stream.capitalize()}",
                    dataset="cifar10",
                    method=METHODS[name],
                    memory_size=500,
                    blurry=blurry,
                    stream=stream,
                    metric="A_last",
                    mean=mean,
                    std=std,
                )
    # 4: CIFAR10 Blurry10-Online, augmentations, K = 200 / 500 (A5)
    label = "tab:abl-data-augmentation"
    first = tex.index("\\label{" + label + "}")
    for raw in table_body(tex[: first + 10_000], label):
        name = row_name(raw)
        values = cells(raw)
        for g, k in enumerate((200, 500)):
            for a, aug in enumerate(AUG):
                mean, std, _ = values[5 * g + a]
                emit(
                    "4",
                    label,
                    "A5 on CIFAR10 Blurry10-Online by augmentation",
                    name,
                    f"K={k} {aug}",
                    dataset="cifar10",
                    method=METHODS[name],
                    memory_size=k,
                    augment=AUG[aug],
                    metric="A_last",
                    mean=mean,
                    std=std,
                )
    # 5: uncertainty measures, RM, CIFAR10 Blurry10-Online K=500 (A5; augmentation not stated)
    label = "tab:unceratinty_measure"
    body = tex[tex.index("\\label{" + label + "}") :]
    row = re.search(r"A5 \(\\%\) & ([^\\]+)\\\\", body).group(1)
    for measure, value in zip(("none", "randaug", "autoaug"), row.split("&")):
        emit(
            "5",
            label,
            "A5 of RM by uncertainty measure, CIFAR10 Blurry10-Online K=500",
            "A5",
            {"none": "No_MC", "randaug": "RandAug_MC", "autoaug": "AutoAug_MC"}[measure],
            dataset="cifar10",
            method="rm",
            memory_size=500,
            augment="?",
            uncertainty=measure,
            metric="A_last",
            mean=float(value),
            std="",
            note="the paper does not say which training augmentation",
        )
    # 6: memory update rules, CIFAR10 Blurry10-Online, K = 200 / 1000 (A5)
    label = "tab:memory_update_rule"
    for raw in table_body(tex, label):
        name = row_name(raw)
        values = cells(raw)
        for g, k in enumerate((200, 1000)):
            for a, aug in enumerate(("None", "CutMix", "CM+AA")):
                mean, std, _ = values[3 * g + a]
                emit(
                    "6",
                    label,
                    "A5 of RM by memory update rule, CIFAR10 Blurry10-Online",
                    name,
                    f"K={k} {aug}",
                    dataset="cifar10",
                    method="rm",
                    memory_size=k,
                    augment=AUG[aug],
                    memory_policy=POLICIES[name],
                    metric="A_last",
                    mean=mean,
                    std=std,
                )
    # S: supplement, augmentations at K = 1000 (A5)
    second = tex.index("\\label{" + label + "}")
    body = tex[tex.index("\\label{tab:abl-data-augmentation}", second) :]
    for raw in table_body(body, "tab:abl-data-augmentation"):
        name = row_name(raw)
        values = cells(raw)
        for a, aug in enumerate(AUG):
            mean, std, _ = values[a]
            emit(
                "S",
                "tab:abl-data-augmentation",
                "A5 on CIFAR10 Blurry10-Online by augmentation, K=1000 (supplement)",
                name,
                f"K=1000 {aug}",
                dataset="cifar10",
                method=METHODS[name],
                memory_size=1000,
                augment=AUG[aug],
                metric="A_last",
                mean=mean,
                std=std,
            )


if __name__ == "__main__":
    main(sys.argv[1])
