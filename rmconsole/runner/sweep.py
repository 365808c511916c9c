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
import re
import secrets
import string
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .. import store
from ..config import (
    COMMON_KEYS,
    DEFAULT_PRESET,
    ConfigError,
    RunConfig,
    checked_value,
    load_config,
    method_of,
    not_read,
    read_preset,
    shorten,
    show_value,
    split_override,
    twice,
)
from ..methods import UnknownMethod, method_spec, readers_of
from ..plugins import PluginError
from .request import MAX_NAME, check_sweep_name_form


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
    raws: dict[str, str] = {}
    for pair in pairs:
        key, raw = split_override(pair, "KEY=VALUE or KEY=V1,V2,...")
        parts = split_values(raw)
        if len(parts) > 1 and any(not p for p in parts):
            raise ConfigError(f"--set {pair!r}: empty value in a comma-separated list")
        values = [checked_value(key, p) for p in parts]
        for i, value in enumerate(values):
            if value in values[:i]:
                raise ConfigError(f"--set {pair!r}: value {parts[i]!r} is given twice")
        if key in axes and axes[key] != values:  # a repeated key is refused, as for a single run
            raise ConfigError(twice(key, f"--set {key}={raws[key]}", f"--set {key}={raw}"))
        axes[key], raws[key] = values, raw
    return axes


def is_sweep(pairs: list[str], seeds: str | None = None) -> bool:
    """True when the command asks for more than one point. One seed (`--seeds 3`, the TUI's
    seeds field holding one) is one run, not a sweep: it must not take over `--sweep last`."""
    many_seeds = seeds is not None and len([s for s in seeds.split(",") if s.strip()]) != 1
    return many_seeds or any(len(split_values(p.partition("=")[2].strip())) > 1 for p in pairs)


def fold_seed(pairs: list[str], seeds: str | None) -> tuple[list[str], str | None]:
    """(pairs, seeds) with a single seed folded into the pairs as `seed=N` (one run, not a
    sweep); anything else unchanged. A bad seed is refused as `--seeds` refuses it."""
    if seeds is None or is_sweep([], seeds):
        return pairs, seeds
    (seed,) = parse_seeds(seeds)
    return [*pairs, f"seed={seed}"], None


LISTED = 6  # grid points named in full by the expansion notice


def expansion_notice(plan: SweepPlan) -> str | None:
    """`this expands to 2 runs: augment=cutmix | augment=autoaug`, when a `--set` list made more
    than one run (seeds alone are asked for by name: no notice), with a hint when the list looks
    like a slip for '+' (`augment=cutmix,autoaug` is two runs; `cutmix+autoaug` is one)."""
    lists = {k: v for k, v in plan.axes.items() if len(v) > 1 and k != "seed"}
    if not lists or len(plan.configs) < 2:
        return None
    varying = {k: v for k, v in plan.axes.items() if len(v) > 1}
    points = [", ".join(f"{k}={show_value(getattr(cfg, k))}" for k in varying) for cfg in plan.configs]
    shown = " | ".join(points[:LISTED]) + (f" | … ({len(points) - LISTED} more)" if len(points) > LISTED else "")
    line = f"this expands to {len(plan.configs)} runs ({plan.shape()}): {shown}"
    joined = [k for k in lists if k in PLUS_JOINED]
    if joined:
        key = joined[0]
        line += (
            f" — to combine them in one run, join with '+': --set {key}={'+'.join(show_value(v) for v in lists[key])}"
        )
    return line


PLUS_JOINED = ("augment",)  # keys whose value is a '+'-joined list: a comma there is likely a slip


NAME_FIELDS = ("name", "method", "seed", "sweep", "n")


def default_name_template(plan: SweepPlan) -> str:
    """`{name}·{method}·s{seed}` for a method × seed sweep: the name, then each varying axis
    (the method bare, the seed as sN, any other key as key=value), so no two runs share a name."""
    parts = ["{name}"]
    for key, values in plan.axes.items():
        if len(values) < 2:
            continue
        parts.append("{method}" if key == "method" else "s{seed}" if key == "seed" else f"{key}={{{key}}}")
    return "·".join(parts)


def run_names(
    plan: SweepPlan, name: str | None, template: str | None = None, sweep_id: str = "", named: bool = False
) -> list[str | None]:
    """Each run's name: `name` alone for a one-run plan; for several, `template` (default:
    `default_name_template`) filled per run with {name} (the name, else a named sweep's name),
    {method}, {seed}, {sweep}, {n} (1..N) or any config key. Without a name, a named sweep
    (`named`: its id is the user's name) or a template the runs stay unnamed, as before. Names
    that would repeat are refused in one line."""
    count = len(plan.configs)
    base = name or (sweep_id if named else None)
    if template is None and (base is None or count < 2):
        return [name] * count
    template = template or default_name_template(plan)
    _check_template(template)
    base = base or plan.preset
    names: list[str | None] = []
    for i, cfg in enumerate(plan.configs, 1):
        values = {**{k: show_value(v) for k, v in cfg.to_dict().items()}, "name": base, "sweep": sweep_id, "n": str(i)}
        try:
            names.append(template.format_map(values))
        except KeyError as err:
            raise ConfigError(
                f"--name-template {template!r}: unknown field {{{err.args[0]}}}; allowed: "
                f"{', '.join('{' + f + '}' for f in NAME_FIELDS)} or a config key"
            ) from None
        except (ValueError, IndexError, AttributeError) as err:
            raise ConfigError(f"--name-template {template!r}: {err} (fields are written {{method}})") from None
    bad = next((n for n in names if n is not None and (not n.strip() or not n.isprintable())), None)
    if bad is not None:  # the rule of `--name` (launch.check_identity): one line of printable text
        raise ConfigError(
            f"--name-template {shorten(template)!r}: makes the name {shorten(bad)!r}; a run's name is one "
            f"line of printable text"
        )
    repeated = sorted({n for n in names if n is not None and names.count(n) > 1})
    if repeated:
        raise ConfigError(
            f"--name-template {template!r}: {count} runs would share names ({repeated[0]!r} "
            f"{names.count(repeated[0])} times); add a varying field such as {{seed}} or {{method}}"
        )
    return names


_WIDTH = re.compile(r"\d+")


def _check_template(template: str) -> None:
    """A name template's fields are plain names ({method}, not {method.__class__} or
    {seed[0]}) and its format specs fit a name ({seed:>5}, not {seed:>99999999999}, which
    would ask for 100 GB): refused in one line before any name is made."""
    try:
        fields = [(f, spec or "") for _, f, spec, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as err:
        raise ConfigError(f"--name-template {shorten(template)!r}: {err} (fields are written {{method}})") from None
    for field_name, spec in fields:
        if not field_name.isidentifier():
            raise ConfigError(
                f"--name-template {shorten(template)!r}: {{{shorten(field_name, 40)}}} is not a field; fields are "
                f"plain names: {', '.join('{' + f + '}' for f in NAME_FIELDS)} or a config key"
            )
        if "{" in spec or any(int(n) > MAX_NAME for n in _WIDTH.findall(spec)):
            raise ConfigError(
                f"--name-template {shorten(template)!r}: the format {{{field_name}:{shorten(spec, 40)}}} does not "
                f"fit a name (widths up to {MAX_NAME}, no nested fields)"
            )


def check_sweep_name(name: str) -> str:
    """A sweep's name (`--sweep-name study`) becomes its id: its form (request.py), and not a sweep
    id already in the store (then `--sweep study` is unambiguous)."""
    check_sweep_name_form(name)
    if name in sweep_ids():
        raise ConfigError(
            f"--sweep-name {name!r}: a sweep of that name is already in the store; choose another "
            f"(`rmconsole runs --sweep {name}` lists it)"
        )
    return name


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
    source: str | None = None  # the preset as given (a name or a TOML file path)

    def shape(self) -> str:
        """`method × seed = 3 × 3` for the varying axes."""
        varying = {k: v for k, v in self.axes.items() if len(v) > 1}
        if not varying:
            return f"{len(self.configs)} run"
        return f"{' × '.join(varying)} = {' × '.join(str(len(v)) for v in varying.values())}"


def plan_sweep(
    preset: str | None, pairs: list[str], seeds: str | None = None, seed: int | None = None, device: str | None = None
) -> SweepPlan:
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
            raise ConfigError(
                f"grid points {seen[key]} and {i} are the same run "
                f"({describe_point(point, axes)}); drop the repeated value"
            )
        seen[key] = i
        configs.append(cfg)
    return SweepPlan(name, configs, axes, preset)


def _for_their_methods(
    points: list[dict[str, Any]], axes: dict[str, list[Any]], table: dict[str, Any]
) -> list[dict[str, Any]]:
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


def store_sweep(
    plan: SweepPlan,
    sweep_id: str | None = None,
    name: str | None = None,
    tags: list[str] | None = None,
    name_template: str | None = None,
    **shared: Any,
) -> tuple[str, list[int]]:
    """Store every grid point as a queued run sharing one sweep id, all in one transaction
    (each with its overrides of the preset, its name from `run_names`, `tags` and the launch's
    other `shared` options on every one)."""
    from ..config import overrides_of

    named = sweep_id is not None  # the caller's sweep id is a user's name (`--sweep-name`)
    sweep_id = sweep_id or new_sweep_id()
    configs = [cfg.to_dict() for cfg in plan.configs]
    preset = plan.source or plan.preset
    names = run_names(plan, name, name_template, sweep_id, named)
    return sweep_id, store.create_runs(
        configs,
        plan.preset,
        sweep_id,
        names=names,
        overrides=[overrides_of(preset, c) for c in configs],
        **{**shared, "tags": tags},
    )


def resolve_sweep_id(name: str) -> str:
    """`last` is the newest sweep; anything else must be a stored sweep id (a named sweep's
    id is its name)."""
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
