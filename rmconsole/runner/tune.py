"""Searches: `rmconsole tune`, an Optuna study over config keys whose trials are ordinary runs.

Why a study lives here and not in Optuna's own loop: every trial must be a run like any other
(stored, named `{study}·t{n}`, tagged `study:NAME`, shown, stopped and resumed with the usual
commands, on this machine or through `--executor slurm`), so the driver uses Optuna's
ask-and-tell interface and starts each trial through `launch.launch_run`, the path `rmconsole
run` takes. Optuna only chooses values and keeps the study's bookkeeping.

Where the study is kept: in the run store's own database (the URL of `store.database_url_object`,
the SQLite file or the PostgreSQL server), through Optuna's RDBStorage, which creates its own
tables (`studies`, `trials`, `trial_params`, `version_info`, `alembic_version`, ...). The store's
tables (`run`, `taskresult`, ... on `SQLModel.metadata`) are a disjoint set of names, created and
checked by store/db.py only; `check_disjoint` proves it on every start.

What a study selects on: a validation metric only (a catalogue row whose split is "validation"; the
same rule as `report --select-by`; `val_fraction`, which decides the held-out samples, is never
searched). A test metric
is refused in one line: choosing a configuration by its test score is the very selection bias
this command exists to avoid. Pruning reads the per-task validation accuracy of the trial's run
(each task's row as it lands in the store): after each task the driver calls `trial.report` and
stops the run when the pruner says so (the run is `stopped`, tagged `pruned`; the trial PRUNED).
The driver never reads a test figure: `selection_values` is the only reader of a trial's results.

The search space: `--param KEY=SPEC` (or a `[params]` table of a TOML study file), SPEC one of
`log:LO..HI` (float, log-uniform), `float:LO..HI`, `int:LO..HI`, `intlog:LO..HI` and
`choice:A,B,...` (each value a `--set` literal). Every bound and choice is validated as a config
value before anything is stored.

When the driver dies (killed, machine restarted): workers run in their own sessions and outlive
it. `rmconsole tune --study NAME` takes the study up again where it stood: a trial whose run is
still running is adopted; one whose run finished meanwhile is told its value; one whose run died
(failed or stopped without a pruning decision) is *resumed* from its last task checkpoint as the
same trial (its reported steps kept), and only a run that cannot be resumed makes its trial
FAIL, after which the sampler asks a new one. `--trials N` counts trials that completed or were
pruned; failed trials do not count (at most N of them, then the driver gives up).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .. import store
from ..config import ConfigError, load_config, parse_value, shorten, split_override
from ..numbers import MISSING, fmt
from ..store.records import format_value
from ..tomlfile import TomlFileError, read_text
from ..tomlfile import literal as toml_literal
from ..tomlfile import loads as toml_loads
from . import launch

SAMPLERS = ("tpe", "random", "grid")
PRUNERS = ("median", "none")
KINDS = ("log", "float", "int", "intlog", "choice")
STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
ATTR = "rmconsole"  # the study's user attribute holding what `tune` was asked (JSON)
RUN_ATTR = "run_id"  # a trial's user attribute: its run
PRUNED_TAG = "pruned"
GRID_LIMIT = 10_000


class TuneError(ConfigError):
    """A study that cannot be started or continued as asked (one line)."""


# ---------------------------------------------------------------------- the search space


@dataclass(frozen=True)
class Param:
    """One key of the search space: `kind` one of KINDS; `low`/`high` for ranges, `choices` for choice."""

    key: str
    kind: str
    low: float = 0.0
    high: float = 0.0
    choices: tuple[Any, ...] = ()

    @property
    def spec(self) -> str:
        """The parameter as typed back (`lr=log:0.0001..0.1`): what the study stores."""
        if self.kind == "choice":
            return f"{self.key}=choice:" + ",".join(_literal(c) for c in self.choices)
        return f"{self.key}={self.kind}:{_number(self.low)}..{_number(self.high)}"

    def distribution(self) -> Any:
        import optuna

        d = optuna.distributions
        if self.kind == "choice":
            return d.CategoricalDistribution([_optuna_choice(c) for c in self.choices])
        if self.kind in ("int", "intlog"):
            return d.IntDistribution(int(self.low), int(self.high), log=self.kind == "intlog")
        return d.FloatDistribution(self.low, self.high, log=self.kind == "log")

    def grid_values(self) -> list[Any]:
        """The values a grid visits: every choice, every integer of an int range."""
        if self.kind == "choice":
            return [_optuna_choice(c) for c in self.choices]
        if self.kind == "int" and self.high - self.low < GRID_LIMIT:
            return list(range(int(self.low), int(self.high) + 1))
        raise TuneError(
            f"--param {self.spec}: a grid needs choice:... or int:LO..HI values "
            f"(a {self.kind} range has no grid; use --sampler tpe or random)"
        )

    def as_config(self, value: Any) -> Any:
        """A sampled value as the config takes it (a choice of a list was stored as its TOML text)."""
        if self.kind == "choice" and isinstance(value, str):
            for choice in self.choices:
                if _optuna_choice(choice) == value:
                    return choice
        return value


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else repr(float(value))


def _literal(value: Any) -> str:
    """A choice as a --set literal (strings bare when they read back as themselves)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "+".join(map(str, value)) if all(isinstance(v, str) for v in value) else repr(value)
    return repr(value) if isinstance(value, float) else str(value)


def _optuna_choice(value: Any) -> Any:
    """Optuna's categorical values are None/bool/int/float/str: a list is kept as its text."""
    return value if value is None or isinstance(value, (bool, int, float, str)) else _literal(value)


def parse_param(text: str) -> Param:
    """`KEY=KIND:...` -> Param; every malformed part is one line naming the allowed forms."""
    forms = "KEY=log:LO..HI, float:LO..HI, int:LO..HI, intlog:LO..HI or choice:A,B,..."
    if "=" not in text:
        raise TuneError(f"--param {shorten(text)!r}: expected {forms}")
    try:
        key, raw = split_override(text, forms)
    except ConfigError as err:
        raise TuneError(str(err).replace("--set", "--param", 1)) from None
    kind, sep, body = raw.partition(":")
    kind = kind.strip().lower()
    if not sep or kind not in KINDS:
        raise TuneError(f"--param {shorten(text)!r}: unknown kind {shorten(kind)!r}; expected {forms}")
    if kind == "choice":
        from .sweep import split_values

        parts = split_values(body)
        if any(not p for p in parts):
            raise TuneError(f"--param {shorten(text)!r}: an empty choice (choice:A,B,...)")
        try:
            values = tuple(parse_value(p) for p in parts)
        except ConfigError as err:
            raise TuneError(f"--param {shorten(text)!r}: {err}") from None
        if len(set(map(repr, values))) < len(values):
            raise TuneError(f"--param {shorten(text)!r}: a choice is given twice")
        return Param(key, kind, choices=values)
    low_text, dots, high_text = body.partition("..")
    try:
        if not dots:
            raise ValueError
        low, high = float(low_text), float(high_text)
        if not (math.isfinite(low) and math.isfinite(high)):
            raise ValueError
    except ValueError:
        raise TuneError(
            f"--param {shorten(text)!r}: expected {kind}:LO..HI with two numbers, e.g. "
            f"{key}={kind}:{'1e-4..1e-1' if kind == 'log' else '1..100'}"
        ) from None
    if kind in ("int", "intlog") and not (low.is_integer() and high.is_integer()):
        raise TuneError(f"--param {shorten(text)!r}: {kind} bounds must be whole numbers")
    if not low < high:
        raise TuneError(f"--param {shorten(text)!r}: the low bound must be below the high one")
    if kind in ("log", "intlog") and low <= 0:
        raise TuneError(f"--param {shorten(text)!r}: a log range needs a positive low bound")
    return Param(key, kind, low, high)


def parse_params(texts: list[str]) -> list[Param]:
    params: dict[str, Param] = {}
    for text in texts:
        param = parse_param(text)
        if param.key in params:
            raise TuneError(f"--param {param.key}: given twice")
        if param.key == "seed":
            raise TuneError(
                "--param seed: the seed is not a hyper-parameter (report the chosen setting over "
                "seeds with `rmconsole run --seeds 1,2,3`)"
            )
        params[param.key] = param
    return list(params.values())


# ---------------------------------------------------------------------- what a study is


@dataclass
class StudySpec:
    """What `tune` was asked: stored with the Optuna study, so `--study NAME` alone continues it."""

    name: str
    preset: str | None
    pairs: list[str]
    params: list[Param]
    metric: str
    trials: int
    sampler: str = "tpe"
    pruner: str = "median"
    seed: int = 0
    tags: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "preset": self.preset,
            "set": self.pairs,
            "params": [p.spec for p in self.params],
            "metric": self.metric,
            "trials": self.trials,
            "sampler": self.sampler,
            "pruner": self.pruner,
            "seed": self.seed,
            "tags": self.tags,
        }

    @classmethod
    def from_json(cls, name: str, data: dict[str, Any]) -> StudySpec:
        return cls(
            name,
            data.get("preset"),
            list(data.get("set", [])),
            parse_params(list(data.get("params", []))),
            str(data["metric"]),
            int(data["trials"]),
            str(data.get("sampler", "tpe")),
            str(data.get("pruner", "median")),
            int(data.get("seed", 0)),
            list(data.get("tags", [])),
        )

    def same_search(self, other: StudySpec) -> bool:
        keys = ("preset", "set", "params", "metric", "sampler", "pruner", "seed")
        mine, theirs = self.to_json(), other.to_json()
        return all(mine[k] == theirs[k] for k in keys)


def check_name(name: str) -> str:
    if not STUDY_NAME.fullmatch(name or ""):
        raise TuneError(
            f"--study {shorten(name)!r}: a study name is 1-64 letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit"
        )
    return name


def validation_metrics() -> list[str]:
    """The catalogue's validation metrics (what a study may select on): by the split each metric
    declares, the one rule `report --select-by` follows too (metric_registry.validation_metrics),
    never by a name's `val_` prefix."""
    from ..metric_registry import validation_metrics as declared

    return [m.name for m in declared()]


def check_metric(name: str) -> tuple[str, Literal["minimize", "maximize"]]:
    """(metric, direction) of a validation metric; a test metric or an unknown name is one line."""
    from ..metric_registry import PluginError, metric, metric_names

    allowed = validation_metrics()
    shown = ", ".join(allowed) or "none in this version"
    if name not in metric_names():
        raise TuneError(f"--metric {shorten(name)!r}: not a metric; a study selects on a validation metric: {shown}")
    try:
        declared = metric(name)
    except PluginError as err:
        raise TuneError(f"--metric {name}: {err}") from None
    if declared.split != "validation":
        raise TuneError(
            f"--metric {name}: a test-set metric; a study selects on validation only "
            f"(choosing by test accuracy is the bias it avoids): {shown}"
        )
    return name, "minimize" if metric(name).lower_is_better else "maximize"


# the key that decides the held-out validation samples (streams.hold_out(labels, val_fraction, seed);
# the seed is refused as a parameter already): searched, each trial would be scored on other
# samples and no two trials could be ranked
SPLIT_KEYS = ("val_fraction",)


# what every trial's run gets beside the study's own keys: no test-set evaluation at all, so a
# study reads no test sample, in its driver or in its trials' workers (issue 30)
TRIAL_PAIRS = ("evaluate_test=false",)


MAX_SAMPLER_SEED = 2**31 - 1  # a sampler is seeded with the seed + trials done (TPE, random): under 2**32


def check_spec(spec: StudySpec) -> dict[str, Any]:
    """Validate a study before anything is stored: the name, sampler, pruner, metric, the base
    config, and every bound and choice of every parameter as a config value. Returns the
    distributions Optuna asks with."""
    check_name(spec.name)
    if spec.sampler not in SAMPLERS:
        raise TuneError(f"--sampler {shorten(spec.sampler)!r}: allowed: {', '.join(SAMPLERS)}")
    pruner_options(spec.pruner, spec.trials)  # (TuneError when it cannot be read)
    if not 1 <= spec.trials <= 100_000:
        raise TuneError(f"--trials {spec.trials}: allowed: 1 to 100000")
    if not 0 <= spec.seed <= MAX_SAMPLER_SEED:  # numpy's limit, 2**32 - 1, less a seed for each trial
        raise TuneError(f"--sampler-seed {shorten(spec.seed)} (a study file's seed): allowed: 0 to {MAX_SAMPLER_SEED}")
    if not spec.params:
        raise TuneError(
            "give the search space: --param KEY=log:LO..HI (or float/int/intlog/choice), repeatable, "
            "or a study file's [params] table"
        )
    check_metric(spec.metric)
    for pair in [*spec.pairs, *(p.spec for p in spec.params)]:
        if pair.partition("=")[0].strip() == "evaluate_test":
            raise TuneError(
                f"{shorten(pair)}: a study's trials never evaluate on the test set (evaluate_test=false "
                f"is set for them); report the selected configuration on test with ordinary runs"
            )
    for param in spec.params:  # (before anything else about val_fraction: searched, it is never right)
        if param.key in SPLIT_KEYS:
            raise TuneError(
                f"--param {param.spec}: {param.key} decides which samples are held out for validation; "
                f"searching it would score each trial on another validation set, so trials could not be "
                f"ranked; fix it with --set {param.key}=VALUE"
            )
    _, base = load_config(spec.preset, list(spec.pairs))
    val_fraction = getattr(base, "val_fraction", None)
    if val_fraction is not None and not val_fraction > 0:
        raise TuneError(
            f"--metric {spec.metric}: the runs hold out no validation samples (val_fraction "
            f"{val_fraction}); add --set val_fraction=0.1"
        )
    for param in spec.params:
        if any(p.partition("=")[0].strip() == param.key for p in spec.pairs):
            raise TuneError(f"--param {param.key}: also given with --set; a key is either fixed or searched")
        values = (
            list(param.choices)
            if param.kind == "choice"
            else [int(param.low), int(param.high)]
            if param.kind in ("int", "intlog")
            else [param.low, param.high]
        )
        for value in values:
            try:
                _config_with(spec, {param.key: value})
            except ConfigError as err:
                raise TuneError(f"--param {param.spec}: {_literal(value)} is refused: {err}") from None
    distributions = {p.key: p.distribution() for p in spec.params}
    if spec.sampler == "grid":
        size = math.prod(len(p.grid_values()) for p in spec.params)
        if size > GRID_LIMIT:
            raise TuneError(f"--sampler grid: {size} grid points; at most {GRID_LIMIT}")
    return distributions


def _config_with(spec: StudySpec, values: dict[str, Any]) -> Any:
    from .sweep import sweep_axes

    extra = {k: v[0] for k, v in sweep_axes([*spec.pairs, *TRIAL_PAIRS]).items()}
    extra.update(values)
    return load_config(spec.preset, extra)[1]


def read_study_file(path: Path) -> dict[str, Any]:
    """A TOML study file: `preset`, `metric`, `trials`, `sampler`, `pruner`, `seed`, `tags`
    (a list), `[set]` (fixed keys) and `[params]` (KEY = "log:LO..HI" etc., or a list of choices)."""
    allowed = {"name", "preset", "metric", "trials", "sampler", "pruner", "seed", "tags", "set", "params"}
    import tomllib

    try:
        table = toml_loads(read_text(path), f"study file {path}")
    except TomlFileError as err:
        raise TuneError(str(err)) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise TuneError(f"study file {path}: {err}") from None
    except OSError as err:
        raise TuneError(f"study file {path}: {launch.describe_os_error(err)}") from None
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise TuneError(f"study file {path}: unknown key {unknown[0]!r}; allowed: {', '.join(sorted(allowed))}")
    out: dict[str, Any] = {
        k: table[k] for k in ("name", "preset", "metric", "trials", "sampler", "pruner", "seed") if k in table
    }
    for key, kind in (
        ("name", str),
        ("preset", str),
        ("metric", str),
        ("trials", int),
        ("sampler", str),
        ("pruner", str),
        ("seed", int),
    ):
        if key in out and (not isinstance(out[key], kind) or isinstance(out[key], bool)):
            raise TuneError(
                f"study file {path}: {key} = {shorten(toml_literal(out[key]))}: "
                f"expected {'a whole number' if kind is int else 'a string'}"
            )
    tags = table.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise TuneError(f"study file {path}: tags: expected a list of strings")
    out["tags"] = tags
    fixed, params = table.get("set", {}), table.get("params", {})
    if not isinstance(fixed, dict) or not isinstance(params, dict):
        raise TuneError(f"study file {path}: [set] and [params] must be tables")
    out["set"] = [f"{k}={_toml_value(v)}" for k, v in fixed.items()]
    specs = []
    for key, value in params.items():
        if isinstance(value, list):
            specs.append(f"{key}=choice:" + ",".join(_toml_value(v) for v in value))
        elif isinstance(value, str):
            specs.append(f"{key}={value}")
        else:
            raise TuneError(
                f'study file {path}: params.{key}: expected "log:LO..HI" (or float/int/intlog/choice) '
                f"or a list of choices"
            )
    out["params"] = specs
    return out


def _toml_value(value: Any) -> str:
    """A study file's value as a `--set` literal: as TOML writes it (a date stays `1979-05-27`)."""
    return toml_literal(value)


# ---------------------------------------------------------------------- storage


def check_disjoint() -> None:
    """Optuna's tables and the store's own never share a name (each side owns its tables)."""
    from optuna.storages._rdb import models

    ours = set(store.table_names())
    theirs = set(models.BaseModel.metadata.tables) | {"alembic_version"}
    shared = ours & theirs
    if shared:
        raise TuneError(
            f"the store's tables and Optuna's share names ({', '.join(sorted(shared))}): "
            f"this rmconsole cannot keep studies in its store"
        )


def storage() -> Any:
    """Optuna's RDBStorage on the store's own database (same URL; password included)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    check_disjoint()
    store.get_engine()  # the store exists and its tables are current before Optuna adds its own
    url = store.database_url_object()
    text = url.render_as_string(hide_password=False)
    kwargs: dict[str, Any] = {}
    if url.get_backend_name() == "sqlite":
        kwargs = {"connect_args": {"timeout": 30}}
    try:
        return optuna.storages.RDBStorage(text, engine_kwargs=kwargs)
    except Exception as err:  # noqa: BLE001 - Optuna wraps the driver's errors in its own kinds
        raise TuneError(
            f"cannot keep the study in {store.shown_url(url)}: {shorten(str(err).splitlines()[0])}"
        ) from None


STUDIES_TABLE = "studies"  # one of Optuna's tables: there when a study was ever kept in this database


def studies_kept() -> bool:
    """Whether the store's database holds Optuna's tables, read without creating anything: a
    command that is refused (a bad --param, a test-set metric, no such study) writes nothing, so
    neither the store nor Optuna's tables may be created to answer "which studies are there"."""
    return STUDIES_TABLE in store.existing_tables()


def study_names() -> list[str]:
    import optuna

    if not studies_kept():
        return []
    return [s.study_name for s in optuna.get_all_study_summaries(storage()) if ATTR in s.user_attrs]


def load_study(name: str) -> tuple[Any, StudySpec]:
    """(the Optuna study, its spec) of a stored study; one line when there is none."""
    import optuna

    check_name(name)
    try:
        if not studies_kept():
            raise KeyError(name)
        study = optuna.load_study(study_name=name, storage=storage())
    except KeyError:
        names = study_names()
        raise TuneError(
            f"--study {name}: no such study (stored: {', '.join(names[-8:]) or 'none yet'}); "
            f"start it with --param ... and --metric ..."
        ) from None
    if ATTR not in study.user_attrs:
        raise TuneError(f"--study {name}: an Optuna study rmconsole did not create")
    return study, StudySpec.from_json(name, study.user_attrs[ATTR])


def _sampler(spec: StudySpec, done: int) -> Any:
    import optuna

    if spec.sampler == "grid":
        return _grid_sampler({p.key: p.grid_values() for p in spec.params}, spec.seed)
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=spec.seed + done)
    # a continued study draws on from where it stood, not the same numbers again
    return optuna.samplers.TPESampler(seed=spec.seed + done, n_startup_trials=min(10, max(2, spec.trials // 4)))


PRUNER_OPTIONS = {"startup": "n_startup_trials", "warmup": "n_warmup_steps"}  # Optuna's MedianPruner's


def pruner_options(text: str, trials: int) -> dict[str, int] | None:
    """`none` -> None; `median[:startup=N,warmup=M]` -> MedianPruner's keyword arguments: prune
    nothing until N trials have finished (default: a quarter of --trials, 1 to 5) and never before
    task M + 1 of a trial (steps are 0-based tasks; default 0). TuneError when it cannot be read."""
    name, _, rest = text.partition(":")
    if name not in PRUNERS or (name == "none" and rest):
        raise TuneError(f"--pruner {shorten(text)!r}: allowed: {', '.join(PRUNERS)}, or median:startup=N,warmup=M")
    if name == "none":
        return None
    chosen = {"n_startup_trials": min(5, max(1, trials // 4)), "n_warmup_steps": 0}
    for pair in filter(None, rest.split(",")):
        key, eq, value = pair.partition("=")
        if key.strip() not in PRUNER_OPTIONS or not eq or not value.strip().isdigit() or int(value) > 100_000:
            raise TuneError(
                f"--pruner {shorten(text)!r}: {shorten(pair)!r}: allowed: startup=N (trials finished "
                f"before any is pruned), warmup=M (tasks of a trial never pruned), whole numbers 0 to 100000"
            )
        chosen[PRUNER_OPTIONS[key.strip()]] = int(value)
    return chosen


def _grid_sampler(space: dict[str, list[Any]], seed: int) -> Any:
    """Optuna's GridSampler, less its `Study.stop()` after the last grid point: that call ends an
    `optimize` loop, which this driver does not use, and outside one it raises RuntimeError (the
    grid's last `tell` made `tune --sampler grid` exit 1). The driver asks `is_exhausted` itself."""
    import optuna

    class Grid(optuna.samplers.GridSampler):
        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            return None

    return Grid(space, seed=seed)


def _pruner(spec: StudySpec) -> Any:
    import optuna

    options = pruner_options(spec.pruner, spec.trials)
    if options is None:
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(**options)


def check_startable(spec: StudySpec, *, scheduled: bool = False) -> None:
    """Refuse, before the study is stored, a study whose trials could not start: a dataset that
    is missing or corrupt, a CUDA device that is absent, a home that cannot be written (what
    `run` and a sweep refuse before storing anything; `scheduled`: the device is a node's).
    Checked for every bound and choice of the search space (one config per distinct dataset,
    model, image size, weights, device and GPU count: the rest cannot change the answer)."""
    points: list[dict[str, Any]] = [{}]
    for param in spec.params:
        values = list(param.choices) if param.kind == "choice" else [param.low, param.high]
        points += [{param.key: int(v) if param.kind in ("int", "intlog") else v} for v in values]
    seen = set()
    for point in points:
        cfg = _config_with(spec, point)
        key = (cfg.dataset, cfg.download, cfg.model, cfg.image_size, cfg.model_weights, cfg.device, cfg.gpus)
        if key not in seen:
            seen.add(key)
            launch.check_runnable(cfg, scheduled=scheduled)


def open_study(spec: StudySpec, *, create: bool) -> Any:
    """The Optuna study of `spec`, created (with its spec stored) or loaded with its sampler."""
    import optuna

    _, direction = check_metric(spec.metric)
    store_ = storage()
    done = 0
    if not create:
        done = len(optuna.load_study(study_name=spec.name, storage=store_).trials)
    study = optuna.create_study(
        storage=store_,
        sampler=_sampler(spec, done),
        pruner=_pruner(spec),
        study_name=spec.name,
        direction=direction,
        load_if_exists=not create,
    )
    if create:
        study.set_user_attr(ATTR, spec.to_json())
    return study


def prepare(
    name: str,
    *,
    preset: str | None = None,
    pairs: list[str] | None = None,
    params: list[str] | None = None,
    metric: str | None = None,
    trials: int | None = None,
    sampler: str | None = None,
    pruner: str | None = None,
    seed: int | None = None,
    tags: list[str] | None = None,
    study_file: Path | None = None,
) -> tuple[StudySpec, bool]:
    """(the study's spec, whether it is new). A new study needs its search space and metric; an
    existing one is continued as stored (only --trials may change; anything else that differs
    is refused in one line, naming what was stored)."""
    given: dict[str, Any] = read_study_file(study_file) if study_file is not None else {}
    if given.get("name") and name and given["name"] != name:
        raise TuneError(f"--study {name}: the study file names study {given['name']!r}")
    name = check_name(name or given.get("name", ""))
    explicit = {
        "preset": preset,
        "metric": metric,
        "trials": trials,
        "sampler": sampler,
        "pruner": pruner,
        "seed": seed,
    }
    given.update({k: v for k, v in explicit.items() if v is not None})
    if pairs:
        given["set"] = list(given.get("set", [])) + list(pairs)
    if params:
        given["params"] = list(given.get("params", [])) + list(params)
    if tags:
        given["tags"] = list(given.get("tags", [])) + list(tags)
    existing = name in study_names()
    if existing:
        _, stored = load_study(name)
        if trials is not None or "trials" in given:
            stored.trials = int(given.get("trials", stored.trials))
        asked = dict(stored.to_json())
        for key in ("preset", "set", "params", "metric", "sampler", "pruner", "seed"):
            if key in given:
                value = given[key] if key != "params" else [p.spec for p in parse_params(given[key])]
                if value != asked[key]:
                    raise TuneError(
                        f"--study {name} exists with {key} {_shown(asked[key])}, not {_shown(value)}: "
                        f"continue it with `rmconsole tune --study {name}` (--trials may change), "
                        f"or start another study"
                    )
        check_spec(stored)
        return stored, False
    if "metric" not in given:
        raise TuneError(
            f"--study {name}: a new study needs --metric (a validation metric: "
            f"{', '.join(validation_metrics()) or 'none in this version'})"
        )
    spec = StudySpec(
        name,
        given.get("preset"),
        list(given.get("set", [])),
        parse_params(list(given.get("params", []))),
        str(given["metric"]),
        int(given.get("trials", 20)),
        str(given.get("sampler", "tpe")),
        str(given.get("pruner", "median")),
        int(given.get("seed", 0)),
        launch.check_identity(None, list(given.get("tags", []))),
    )
    if spec.sampler == "grid" and "trials" not in given:
        spec.trials = math.prod(len(p.grid_values()) for p in spec.params) if spec.params else 1
    check_spec(spec)
    return spec, True


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return "[" + " ".join(map(str, value)) + "]" if value else "[]"
    return str(value)


# ---------------------------------------------------------------------- what the driver reads


def selection_values(run_id: int) -> list[float | None]:
    """The per-task validation accuracies of a trial's run, as its rows land (None where a row
    has none): the only results the driver reads while it selects."""
    return store.validation_curves([run_id])[run_id]


def trial_value(run_id: int, metric: str) -> float | None:
    """The study's (validation) metric of a finished run."""
    return store.run_record(run_id).value(metric)


def trial_name(study: str, number: int) -> str:
    return f"{study}·t{number}"


def study_tag(study: str) -> str:
    """The tag of a study's runs (the run filter `study:NAME` reads it: store/filters.py)."""
    from ..store.filters import STUDY_TAG

    return f"{STUDY_TAG}{study}"


# ---------------------------------------------------------------------- the driver


@dataclass
class Active:
    """A trial whose run the driver waits on."""

    trial: Any  # optuna.trial.Trial
    run_id: int
    process: Any = None  # the supervisor started here (None: adopted, or a scheduler's job)
    reported: set[int] = field(default_factory=set)


class StudyDriver:
    """Keeps `parallel` trials running until `spec.trials` have completed or been pruned."""

    def __init__(
        self,
        spec: StudySpec,
        study: Any,
        *,
        parallel: int = 1,
        executor: Any = None,
        log: Callable[[str], None] | None = None,
        poll_s: float = 0.5,
    ) -> None:
        self.spec, self.study = spec, study
        self.parallel = max(1, parallel)
        self.executor = executor
        self.log = log or (lambda message: None)
        self.poll_s = poll_s
        self.distributions = {p.key: p.distribution() for p in spec.params}
        self.params = {p.key: p for p in spec.params}
        self.active: dict[int, Active] = {}

    # -- counting
    def counts(self) -> dict[str, int]:
        from optuna.trial import TrialState

        trials = self.study.get_trials(deepcopy=False)
        return {
            state.name.lower(): sum(t.state == state for t in trials)
            for state in TrialState
            if any(t.state == state for t in trials)
        }

    def settled(self) -> int:
        counts = self.counts()
        return counts.get("complete", 0) + counts.get("pruned", 0)

    def failed(self) -> int:
        return self.counts().get("fail", 0)

    def grid_done(self) -> bool:
        sampler = self.study.sampler
        return self.spec.sampler == "grid" and hasattr(sampler, "is_exhausted") and sampler.is_exhausted(self.study)

    # -- the loop
    def run(self) -> dict[str, int]:
        """Drive the study to its end (Ctrl-C / SIGTERM: `stop`). Returns the trials per state."""
        self.recover()
        while True:
            self.step()
            wanted = self.spec.trials - self.settled() - len(self.active)
            if self.failed() > self.spec.trials:
                self.log(
                    f"study {self.spec.name}: {self.failed()} trials failed; giving up "
                    f"(see their runs: rmconsole runs tag:{study_tag(self.spec.name)})"
                )
                wanted = 0
            while wanted > 0 and len(self.active) < self.parallel and not self.grid_done():
                if not self.start_trial():
                    break
                wanted -= 1
            if not self.active:
                break
            time.sleep(self.poll_s)
        return self.counts()

    def recover(self) -> None:
        """Trials a killed driver left RUNNING: adopt, settle or resume their runs (see the module doc)."""
        from optuna.trial import Trial, TrialState

        for frozen in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            run_id = frozen.user_attrs.get(RUN_ATTR)
            if run_id is None:  # the driver died between asking and starting the run
                self.study.tell(frozen.number, state=TrialState.FAIL)
                self.log(f"trial {frozen.number}: no run was started; failed")
                continue
            if trial_run(self.spec.name, frozen.number, run_id) is None:  # removed, its id maybe another run's
                self.study.tell(frozen.number, state=TrialState.FAIL)
                self.log(f"trial {frozen.number}: its run {run_id} was removed (or is another run now); failed")
                continue
            trial = Trial(self.study, frozen._trial_id)
            entry = Active(trial, int(run_id), reported=set(frozen.intermediate_values))
            launch.reap_dead([store.get_run(entry.run_id)])
            run = store.get_run(entry.run_id)
            if run.status in ("failed", "stopped") and PRUNED_TAG not in (run.tags or []):
                try:
                    resumed = launch.resume_run(entry.run_id)
                except (ValueError, ConfigError, launch.StartFailed, store.StoreError) as err:
                    self.study.tell(frozen.number, state=TrialState.FAIL)
                    self.log(f"trial {frozen.number}: run {run_id} cannot be resumed ({err}); failed")
                    continue
                entry.process = resumed.process
                self.log(f"trial {frozen.number}: run {run_id} resumed at task {resumed.first_task + 1}")
            else:
                self.log(f"trial {frozen.number}: run {run_id} is {run.status}; taken up again")
            self.active[frozen.number] = entry

    def start_trial(self) -> bool:
        """Ask the sampler for a point and start its run; False when no more can be asked."""
        from optuna.trial import TrialState

        trial = self.study.ask(self.distributions)
        values = {key: self.params[key].as_config(value) for key, value in trial.params.items()}
        pairs = list(self.spec.pairs) + [f"{k}={_toml_value(v)}" for k, v in values.items()] + list(TRIAL_PAIRS)
        try:
            launched = launch.launch_run(
                self.spec.preset,
                pairs,
                executor=self.executor,
                name=trial_name(self.spec.name, trial.number),
                tags=[study_tag(self.spec.name), *self.spec.tags],
            )
        except (ConfigError, launch.StartFailed, ValueError) as err:
            self.study.tell(trial, state=TrialState.FAIL)
            self.log(f"trial {trial.number} ({_describe(values)}): refused: {err}")
            return self.failed() <= self.spec.trials
        trial.set_user_attr(RUN_ATTR, launched.run_id)
        self.active[trial.number] = Active(trial, launched.run_id, launched.process)
        where = f"; {self.executor.name} job {launched.job_id}" if launched.job_id else ""
        self.log(f"trial {trial.number}: run {launched.run_id} ({_describe(values)}){where}")
        return True

    def step(self) -> None:
        """One pass: record ended workers, report new per-task validation rows, prune, settle."""
        from optuna.trial import TrialState

        for number, entry in list(self.active.items()):
            proc = entry.process
            if proc is not None and proc.poll() is not None:
                launch.record_exit(entry.run_id, proc.returncode, lease=getattr(proc, "lease", None))
                entry.process = None
            elif proc is None:
                launch.reap_dead([store.get_run(entry.run_id)])
            for step, value in enumerate(selection_values(entry.run_id)):
                if step in entry.reported or value is None:
                    continue
                entry.trial.report(float(value), step)
                entry.reported.add(step)
                run = store.get_run(entry.run_id)
                last = run.n_tasks is not None and step + 1 >= run.n_tasks
                if not last and run.status in store.ACTIVE and entry.trial.should_prune():
                    self.prune(number, entry, step)
                    break
            if number not in self.active:
                continue
            run = store.get_run(entry.run_id)
            if run.status == "finished":
                value = trial_value(entry.run_id, self.spec.metric)
                if value is None or not math.isfinite(value):
                    self.study.tell(entry.trial, state=TrialState.FAIL)
                    self.log(f"trial {number}: run {entry.run_id} finished without {self.spec.metric}; failed")
                else:
                    self.study.tell(entry.trial, value)
                    self.log(f"trial {number}: run {entry.run_id} {self.spec.metric} {value:.2f}" + self.best_text())
                del self.active[number]
            elif run.status == "stopped" and PRUNED_TAG in (run.tags or []):  # pruned by a driver that died
                self.study.tell(entry.trial, state=TrialState.PRUNED)  # before it could say so
                self.log(f"trial {number}: run {entry.run_id} pruned")
                del self.active[number]
            elif run.status in ("failed", "stopped"):
                self.study.tell(entry.trial, state=TrialState.FAIL)
                self.log(f"trial {number}: run {entry.run_id} {run.status}" + (f" ({run.error})" if run.error else ""))
                del self.active[number]

    def prune(self, number: int, entry: Active, step: int) -> None:
        from optuna.trial import TrialState

        store.tag_runs([entry.run_id], add=[PRUNED_TAG])  # first: a restarted driver must not resume it
        try:
            launch.stop_run(entry.run_id)
        except ValueError:
            pass
        if entry.process is not None:
            try:
                entry.process.wait(timeout=15)
            except Exception:  # noqa: BLE001 - stop_run already killed its group
                pass
        self.study.tell(entry.trial, state=TrialState.PRUNED)
        del self.active[number]
        self.log(f"trial {number}: run {entry.run_id} pruned after task {step + 1}")

    def best_text(self) -> str:
        best = best_trial(self.study)
        return "" if best is None else f" (best so far: trial {best.number}, {best.value:.2f})"

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop the running trials' runs; their trials stay RUNNING, so `tune --study NAME` resumes them."""
        for entry in list(self.active.values()):
            try:
                launch.stop_run(entry.run_id, grace_s)
            except ValueError:
                pass


def _describe(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_literal(v) if not isinstance(v, float) else f'{v:.4g}'}" for k, v in values.items())


def best_trial(study: Any) -> Any:
    try:
        return study.best_trial
    except ValueError:  # no completed trial yet
        return None


# ---------------------------------------------------------------------- what the faces show


@dataclass
class TrialRow:
    number: int
    state: str
    run_id: int | None
    params: dict[str, Any]
    value: float | None
    steps: int  # per-task validation values reported
    last: tuple[int, float] | None = None  # (task, value) of the last one: where a pruned trial stopped

    def value_text(self) -> str:
        """Its metric's cell: a complete trial's value; a pruned one's is Optuna's last reported
        step, not the metric, so shown as such: `@2 61.50` (the validation accuracy after task 2,
        where the pruner stopped it); else —."""
        if self.state == "complete":
            return fmt(self.value)
        if self.state == "pruned" and self.last is not None:
            return f"@{self.last[0] + 1} {fmt(self.last[1])}"
        return MISSING

    def param_text(self, key: str) -> str:
        """A searched value as the study's tables show it (a float to 4 significant digits)."""
        value = self.params.get(key)
        if isinstance(value, float):
            return f"{value:.4g}"
        return MISSING if value is None else format_value(value)


PRUNED_NOTE = "@k v: a pruned trial's validation accuracy after task k, where the pruner stopped it (not its metric)"


@dataclass
class StudySummary:
    spec: StudySpec
    direction: str
    trials: list[TrialRow]
    best: TrialRow | None
    driver: int | None  # the pid of a live driver


def summarize(name: str, loaded: tuple[Any, StudySpec] | None = None) -> StudySummary:
    """A study's trials and its best so far, for `tune --show` and the TUI (`loaded`: what
    `load_study(name)` gave, when the caller has it already)."""
    from .driver import driver_pid

    study, spec = loaded if loaded is not None else load_study(name)
    rows = [
        TrialRow(
            t.number,
            t.state.name.lower(),
            trial_run(name, t.number, t.user_attrs.get(RUN_ATTR)),
            {k: spec_param(spec, k).as_config(v) for k, v in t.params.items()},
            t.value,
            len(t.intermediate_values),
            max(t.intermediate_values.items()) if t.intermediate_values else None,
        )
        for t in study.get_trials(deepcopy=False)
    ]
    best = best_trial(study)
    best_row = next((r for r in rows if best is not None and r.number == best.number), None)
    return StudySummary(spec, study.direction.name.lower(), rows, best_row, driver_pid(lock_id(name)))


def trial_run(study: str, number: int, run_id: Any) -> int | None:
    """The run of trial `number` of `study` when run `run_id` is still that trial's (its name and
    tag say so), else None: after `rm` of a trial's run, a new run may get its id (SQLite reuses
    the highest id), and a study must never show another run's figures as its trial's."""
    if not isinstance(run_id, int):
        return None
    try:
        record = store.run_record(run_id)
    except store.UnknownRun:
        return None
    if record.name != trial_name(study, number) or study_tag(study) not in record.tags:
        return None
    return run_id


def spec_param(spec: StudySpec, key: str) -> Param:
    return next((p for p in spec.params if p.key == key), Param(key, "float"))


def lock_id(name: str) -> str:
    """The driver lock's id (runner/driver.py's files under RMCONSOLE_HOME/sweeps)."""
    return f"study-{name}"


def best_line(name: str, summary: StudySummary | None = None) -> str | None:
    """`best so far: trial 3 (run 12) val_A_last 81.20 — lr=0.01, reg_weight=40` or None."""
    if summary is None:
        try:
            summary = summarize(name)
        except ConfigError:
            return None
    best = summary.best
    done = sum(r.state in ("complete", "pruned") for r in summary.trials)
    head = f"study {name}: {done}/{summary.spec.trials} trials done"
    if best is None:
        return head + "; no completed trial yet"
    run = f"run {best.run_id}" if best.run_id is not None else "its run was removed"
    return (
        f"{head}; best so far: trial {best.number} ({run}) {summary.spec.metric} "
        f"{best.value:.2f} — {_describe(best.params)}"
    )
