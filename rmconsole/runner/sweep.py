"""Sweeps: a grid of runs from one command.

`--set KEY=a,b` makes KEY an axis of the grid and `--seeds 1,2,3` adds the seed axis. A
method's own key applies to the grid points whose method reads it (`--set method=rm,bic --set
bic_temperature=3`: the BiC runs get T=3, the RM runs are RM's own), and is refused only when no
point of the grid reads it; points that become the same run once such a key is set aside (RM
under bic_temperature=2,3) are one run. Every grid point is validated (the same RunConfig check a
single run gets) before anything is stored; then the whole grid is stored as queued runs sharing one sweep id, in one write
transaction, so a refused or interrupted submission leaves nothing half-written. Running the
queue is `queue.py`'s job.

Commas split values only outside brackets and quotes, so a TOML list such as
`augment=["cutmix","autoaug"]` stays one value (lists of names can also be joined with '+').
"""

from __future__ import annotations

import itertools
import secrets
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional

from .. import store
from ..config import (
    COMMON_KEYS, DEFAULT_PRESET, ConfigError, RunConfig, load_config, method_of, not_read, parse_value, read_preset,
    split_override,
)
from ..methods import UnknownMethod, method_spec, readers_of
from ..plugins import PluginError


def split_values(raw: str) -> list[str]:
    """`"rm,finetune"` -> ["rm", "finetune"]; commas inside [] {} or quotes do not split."""
    parts: list[str] = []
    current: list[str] = []
    depth, quote = 0, ""
    for ch in raw:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    parts.append("".join(current).strip())
    return parts


def parse_seeds(text: str) -> list[int]:
    """`--seeds 1,2,3` -> [1, 2, 3]; refuses anything but distinct non-negative integers."""
    seeds = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise ConfigError(f"--seeds {text!r}: expected comma-separated non-negative integers, e.g. 1,2,3")
        if int(part) in seeds:
            raise ConfigError(f"--seeds {text!r}: seed {int(part)} is given twice")
        seeds.append(int(part))
    return seeds


def sweep_axes(pairs: list[str]) -> dict[str, list[Any]]:
    """The `--set` pairs as key -> list of values (a single value is a one-point axis)."""
    axes: dict[str, list[Any]] = {}
    for pair in pairs:
        key, raw = split_override(pair, "KEY=VALUE or KEY=V1,V2,...")
        parts = split_values(raw)
        if len(parts) > 1 and any(not p for p in parts):
            raise ConfigError(f"--set {pair!r}: empty value in a comma-separated list")
        values = [parse_value(p) for p in parts]
        for i, value in enumerate(values):
            if value in values[:i]:
                raise ConfigError(f"--set {pair!r}: value {parts[i]!r} is given twice")
        axes[key] = values  # a repeated key: the later one wins, as for a single run
    return axes


def is_sweep(pairs: list[str], seeds: Optional[str] = None) -> bool:
    """True when the command asks for more than one point (or names its seeds as a list)."""
    return seeds is not None or any(len(split_values(p.partition("=")[2].strip())) > 1 for p in pairs)


def expand_grid(axes: dict[str, list[Any]], seeds: list[int] | None = None) -> list[dict[str, Any]]:
    """Every combination of the axes' values, seed-major: all grid cells for the first seed come
    first, so a half-done sweep already has one seed of every cell."""
    keys = list(axes)
    points = [dict(zip(keys, combo)) for combo in itertools.product(*(axes[k] for k in keys))]
    if not seeds:
        return points
    return [{**point, "seed": seed} for seed in seeds for point in points]


def describe_point(point: dict[str, Any], axes: dict[str, list[Any]]) -> str:
    """The values that vary, as `method=rm, seed=2` (what a grid point is called in messages)."""
    shown = [f"{k}={v}" for k, v in point.items() if k == "seed" or len(axes.get(k, [])) > 1]
    return ", ".join(shown) or ", ".join(f"{k}={v}" for k, v in point.items())


@dataclass
class SweepPlan:
    """A validated grid: one RunConfig per point, in launch order."""

    preset: str
    configs: list[RunConfig]
    axes: dict[str, list[Any]] = field(default_factory=dict)
    source: Optional[str] = None  # the preset as given (a name or a TOML file path)

    def shape(self) -> str:
        """`method × seed = 3 × 3` for the varying axes."""
        varying = {k: v for k, v in self.axes.items() if len(v) > 1}
        if not varying:
            return f"{len(self.configs)} run"
        return f"{' × '.join(varying)} = {' × '.join(str(len(v)) for v in varying.values())}"


def plan_sweep(preset: Optional[str], pairs: list[str], seeds: Optional[str] = None, seed: Optional[int] = None,
               device: Optional[str] = None) -> SweepPlan:
    """Validate every grid point; one bad point refuses the whole sweep with one line."""
    name, table = read_preset(preset or DEFAULT_PRESET)  # a bad preset is named once, not per point
    axes = sweep_axes(pairs)
    seed_list = parse_seeds(seeds) if seeds is not None else None
    if seed_list is not None:
        if seed is not None:
            raise ConfigError("give either --seed or --seeds, not both")
        if "seed" in axes:
            raise ConfigError("give the seeds either with --seeds or with --set seed=..., not both")
        axes["seed"] = seed_list
    points = expand_grid({k: v for k, v in axes.items() if k != "seed"}, axes.get("seed"))
    kept = _for_their_methods(points, axes, table)
    configs, seen = [], dict[str, int]()
    for i, (point, own) in enumerate(zip(points, kept), 1):
        explicit = {"seed": seed, "device": device}
        try:
            _, cfg = load_config(preset, own, **explicit)
        except ConfigError as err:
            raise ConfigError(f"grid point {i}/{len(points)} ({describe_point(point, axes)}): {err}") from None
        key = repr(sorted(cfg.to_dict().items()))
        if key in seen and own != point:  # the same run once another method's key is set aside: one run
            continue
        if key in seen:
            raise ConfigError(f"grid points {seen[key]} and {i} are the same run "
                              f"({describe_point(point, axes)}); drop the repeated value")
        seen[key] = i
        configs.append(cfg)
    return SweepPlan(name, configs, axes, preset)


def _for_their_methods(points: list[dict[str, Any]], axes: dict[str, list[Any]],
                       table: dict[str, Any]) -> list[dict[str, Any]]:
    """Each point less the method keys its method does not read; a method key that no point's
    method reads is refused in one line naming the methods that do."""
    read: dict[str, bool] = {}
    methods: list[str] = []
    kept = []
    for point in points:
        method = method_of(table, point)
        try:
            own = set(method_spec(method).keys) if isinstance(method, str) else None
        except (UnknownMethod, ValueError, PluginError):
            own = None  # not a method: its grid point is refused by validation, in one line
        if own is not None and method not in methods:
            methods.append(method)
        drop = {k for k in point if own is not None and k not in COMMON_KEYS and k not in own and readers_of(k)}
        for key in point:
            read[key] = read.get(key, False) or key not in drop
        kept.append({k: v for k, v in point.items() if k not in drop})
    for key, anyone in read.items():
        if not anyone:
            values = axes.get(key, [points[0][key]])
            shown = ",".join(map(str, values)) if len(values) > 1 else values[0]
            raise ConfigError(not_read(key, shown, methods) + " (no run of this sweep reads it)")
    return kept


def new_sweep_id() -> str:
    """Sortable and short enough to type: `20250301-142233-7f3a`."""
    return f"{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def store_sweep(plan: SweepPlan, sweep_id: str | None = None, name: str | None = None,
                tags: list[str] | None = None) -> tuple[str, list[int]]:
    """Store every grid point as a queued run sharing one sweep id, all in one transaction
    (each with its overrides of the preset; `name` and `tags` on every one)."""
    from ..config import overrides_of

    sweep_id = sweep_id or new_sweep_id()
    configs = [cfg.to_dict() for cfg in plan.configs]
    preset = plan.source or plan.preset
    return sweep_id, store.create_runs(configs, plan.preset, sweep_id, name=name, tags=tags,
                                       overrides=[overrides_of(preset, c) for c in configs])


def resolve_sweep_id(name: str) -> str:
    """`last` is the newest sweep; anything else must be a stored sweep id."""
    sweeps = sweep_ids()
    if name == "last":
        if not sweeps:
            raise ConfigError("--sweep last: there is no sweep in the store")
        return sweeps[-1]
    if name not in sweeps:
        shown = ", ".join(sweeps[-5:]) or "none yet"
        raise ConfigError(f"--sweep {name!r}: no such sweep (newest: {shown}; or use 'last')")
    return name


def sweep_ids() -> list[str]:
    """Every sweep id in the store, oldest first (by its first run)."""
    return store.sweep_ids()


def status_counts(runs: list[store.Run]) -> dict[str, int]:
    """Runs per status, in lifecycle order, zeros left out."""
    counts = {status: sum(r.status == status for r in runs) for status in store.STATUSES}
    return {k: v for k, v in counts.items() if v}
