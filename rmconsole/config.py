"""RunConfig: one validated model of a run, built from a preset file plus overrides.

A run's keys are the ones every run has (`RunKeys` and the runtime choices of `RunConfig`,
below) plus ONLY its method's own parameters: each method declares them in its params class
(a torch-free `MethodParams` beside the method, named by its `MethodSpec`; built-ins and
plug-ins alike, `rmconsole.methods`). `config_model(spec)` is the pydantic model of that
method's runs (a `RunConfig` subclass); `to_dict()`, what is stored, is flat: the common keys,
then the method's.

Every bad value is rejected here, before anything is stored, with one line that names the key,
the value and what is allowed:
- a key of another method (`--set bic_temperature=3` on an RM run) is refused naming the
  methods that read it (`bic_temperature=3: read by bic, bic_star, not by method=rm`);
- a key no method reads is `unknown config key 'x'`, with a did-you-mean.

A preset's top-level keys that the run's method does not read (another method's parameters) are
dropped for that run, so a BiC preset run with `--set method=rm` works; a preset's
`[methods.X]` table applies to method X only, and its keys must be X's (or common). A stored
config is rebuilt the same way (`build_config(run.config)`), so a run stored by an earlier
version, which holds every method's keys (~61), still rebuilds, resumes and compares. A sweep
applies a method's key to the grid points whose method reads it (runner/sweep.py).

`key_table()` lists the keys (`rmconsole config-keys`, docs/configuration.md) with the methods
that read each.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator, model_validator

from . import datasets as dataset_registry
from . import models as model_registry
from . import plugins
from .cl.catalog import AUGMENTATIONS, MEASURES, MEMORY_POLICIES, parse_augment
from .cl.datasets import ORDERS_FILE, DatasetMissing, UnknownDataset
from .cl.datasets import builtins as builtin_datasets
from .cl.methods import REGISTRY, MethodSpec
from .cl.modelspec import BUILTINS as BUILTIN_MODELS
from .cl.modelspec import UnknownModel
from .cl.protocols import is_task_free
from .methods import UnknownMethod, method_names, method_spec, method_specs, readers_of
from .tomlfile import TomlFileError, read_text
from .tomlfile import literal as toml_literal
from .tomlfile import loads as toml_loads

DEFAULT_PRESET = "digits-blurry10-online"
MAX_INT = 2**63 - 1  # the store's integers (SQLite INTEGER, PostgreSQL BIGINT)
# two keys' allowed values, declared once in cl/catalog.py as tuples
Measure = Literal[MEASURES]  # type: ignore[valid-type]  # a Literal of a tuple: valid at runtime, pydantic checks it
MemoryPolicy = Literal[MEMORY_POLICIES]  # type: ignore[valid-type]  # a Literal of a tuple, as Measure


def shorten(value: object, limit: int = 80) -> str:
    """An echoed value kept short: a long one keeps its start and end, so no error is a 100 KB line."""
    text = str(value)
    return (
        text if len(text) <= limit else f"{text[: limit // 2 - 1]}…{text[-(limit // 2 - 1) :]} ({len(text)} characters)"
    )


class ConfigError(Exception):
    """A user error in a preset or override: the message is one line for the terminal."""


def _registered(
    value: str, kind: str, check: Callable[[str], Any], unknown: type[Exception], listing: Callable[[], str]
) -> str:
    """`value` when `check` (a registry's lookup) knows it; else the validators' one line for an
    unregistered model or dataset, with what is registered (`listing`, asked only then)."""
    try:
        check(value)
    except unknown:
        raise ValueError(f"not a registered {kind}; registered: {listing()}") from None
    return value


class RunKeys(BaseModel):
    """The keys every run has: the experiment, the training engine, where it runs."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # lr=inf is refused, not trained

    dataset: str = Field(
        description="the dataset (digits is bundled; the others under RMCONSOLE_DATA; `rmconsole data list`)",
        json_schema_extra={
            "allowed": f"{', '.join(builtin_datasets())}, an installed plug-in's, or folder:PATH (an ImageFolder tree)"
        },
    )
    model: str = Field(
        description="the backbone",
        json_schema_extra={"allowed": f"{', '.join(BUILTIN_MODELS)}, or an installed plug-in's"},
    )
    model_weights: str | None = Field(
        default=None,
        description="a local file of pretrained weights for the backbone (a state dict, read with "
        "torch.load weights_only; its features, and its head when the shapes match); "
        "unset: random initialisation",
    )
    method: str = Field(
        default="rm",
        description="the continual-learning method (built in, or an installed plug-in's)",
        json_schema_extra={"allowed": ", ".join(REGISTRY)},
    )
    memory_size: int = Field(gt=0, description="episodic memory slots K (at least one per class)")
    n_tasks: int = Field(default=5, ge=1, description="tasks the classes are split into (evenly)")
    blurry: int = Field(
        default=10, ge=0, le=100, description="M of BlurryM (i-Blurry-N-M: M, the blurry share); 0 = disjoint"
    )
    stream: Literal["online", "offline", "iblurry", "siblurry"] = Field(
        default="online",
        description="online: one pass over the stream, then E epochs on the memory; offline: E epochs "
        "per task; iblurry / siblurry: the follow-up's task-free stream, trained sample by "
        "sample with anytime evaluation (docs/anytime.md)",
    )
    val_fraction: float = Field(
        default=0.0,
        ge=0,
        lt=0.5,
        description="share of EACH class's training samples held out as a validation stream "
        "(never trained on, never in the memory; validation accuracy is measured "
        "where test accuracy is, for selection: `report --select-by`); 0 = none",
    )
    evaluate_test: bool = Field(
        default=True,
        description="measure accuracy on the TEST split after every task (and at the anytime "
        "points); false: the run never reads a test image and measures validation "
        "only (needs val_fraction > 0; what `rmconsole tune` trials use)",
    )
    disjoint_classes: int = Field(
        default=50, ge=0, le=100, description="i-Blurry / Si-Blurry: N, the percent of classes that are disjoint"
    )
    pool_order: Literal["shuffled", "dataset"] = Field(
        default="shuffled",
        description="i-Blurry / Si-Blurry: the order of a task's blurry samples before the pool takes "
        "its first ones; shuffled: a random share (the papers; i-Blurry's published "
        "splits); dataset: storage order, as the Si-Blurry authors' sampler (on a dataset "
        "stored class by class it pools whole classes; docs/anytime.md)",
    )
    online_iter: float = Field(
        default=1.0, gt=0, description="task-free streams: model updates per streamed sample (fractional allowed)"
    )
    eval_period: int = Field(
        default=100, ge=1, description="task-free streams: anytime evaluation every this many streamed samples"
    )
    anytime_class_accuracy: bool = Field(
        default=False, description="task-free streams: also store per-class accuracy with every anytime evaluation"
    )
    compute_budget: float | None = Field(
        default=None,
        gt=0,
        description="task-free streams: training cost allowed per streamed sample, in image passes "
        "(forward 1 + backward 2); a slower method skips the samples that arrive while it is "
        "busy (real-time evaluation, Ghunaim et al. 2023); unset = no limit",
    )
    train_gflop_per_sample: float | None = Field(
        default=None,
        gt=0,
        description="task-free streams: training compute per streamed sample in GFLOP (matmul and "
        "convolution FLOPs of forward + backward, measured on the run's model); sets online_iter "
        "to it divided by one training step's GFLOP at batch_size, as the budgeted-CL papers "
        "derive their iterations (method overheads come on top, docs/compute.md); unset = online_iter",
    )
    augment: tuple[str, ...] = Field(
        default=("cutmix", "autoaug"),
        description="training augmentation, '+'-joined",
        json_schema_extra={"allowed": f"{', '.join(AUGMENTATIONS)}; randaug and autoaug exclude each other"},
    )
    uncertainty: Measure = Field(
        default="randaug", description="RM's uncertainty measure (perturbation used for the votes)"
    )
    uncertainty_views: int = Field(
        default=12, ge=1, description="perturbed views per candidate for the uncertainty votes"
    )
    memory_policy: MemoryPolicy | None = Field(
        default=None, description="memory update policy (default: the method's own)"
    )
    epochs: int = Field(default=256, ge=0, description="memory epochs E (online) or epochs per task (offline)")
    batch_size: int = Field(default=16, ge=2, description="training batch size")
    memory_batch_size: int | None = Field(
        default=None, ge=2, description="batch size of the memory epochs (default: batch_size; RM: half)"
    )
    lr: float = Field(default=0.05, gt=0, description="learning rate")
    optimizer: Literal["sgd", "adam"] = Field(
        default="sgd", description="sgd: Nesterov momentum 0.9; adam: the follow-up's Adam (task-free streams only)"
    )
    schedule: Literal["cosine", "step", "constant", "exp_reset"] = Field(
        default="cosine",
        description="learning-rate schedule of each training call; exp_reset (task-free): x lr_gamma "
        "per step, back to lr when a new class arrives",
    )
    lr_gamma: float = Field(
        default=0.9999, gt=0, le=1, description="exp_reset: learning-rate factor per optimiser step"
    )
    weight_decay: float = Field(default=1e-4, ge=0, description="SGD weight decay")
    seed: int = Field(
        default=1, ge=0, le=MAX_INT, description="random seed: class order, stream, initialisation, draws"
    )
    device: str = Field(
        default="auto", description="where to train", json_schema_extra={"allowed": "auto, cpu, cuda, cuda:N"}
    )
    class_order: Literal["seed", "paper"] = Field(
        default="seed",
        description="class order from the seed, or the dataset's own (the paper's: cifar10 / mnist "
        "seeds 1-3; a folder dataset's: its class_orders.toml)",
    )
    topk: int = Field(
        default=1,
        ge=1,
        description="also measure top-k accuracy with every evaluation when k > 1 "
        "(top-1 is always stored; the ImageNet presets use 5, as the authors' code reports)",
    )
    eval_every_epoch: bool = Field(
        default=False, description="also record the best accuracy over epochs (test-set selected, reported apart)"
    )
    reset_head: bool = Field(default=False, description="re-create the classifier head at every task (authors' code)")
    train_head: bool = Field(
        default=True,
        description="false: the classifier head is left out of the optimiser (the authors' iCaRL, to reproduce their figure)",
    )
    image_size: int | None = Field(
        default=None, ge=8, description="image side for folder datasets (default: tiny_imagenet 64, imagenet 224)"
    )
    download: bool = Field(default=False, description="download a torchvision dataset that is missing")
    threads: int | None = Field(default=None, ge=1, le=4096, description="CPU threads for torch")


class RunConfig(RunKeys):
    """Everything that defines a run: the keys every run has and the runtime choices below. A
    run's config is an instance of `config_model(its method's spec)`, this class plus the
    method's own parameters. Unknown keys are errors, never silently ignored."""

    # ImageNet scale: input pipeline, GPU fast path, multi-GPU (runtime choices, like device)
    data_pipeline: Literal["auto", "memory", "stream"] = Field(
        default="auto",
        description="ImageFolder datasets: decoded once into memory, or streamed from disk; auto by size",
    )
    loader_workers: int | None = Field(
        default=None, ge=0, le=1024, description="DataLoader decode processes per rank (0: a thread)"
    )
    gpu_decode: bool | Literal["auto"] = Field(default="auto", description="decode JPEGs with nvJPEG on a CUDA device")
    amp: Literal["auto", "bf16", "off"] = Field(
        default="auto", description="autocast dtype; auto = bf16 on CUDA, off on CPU"
    )
    channels_last: bool | Literal["auto"] = Field(
        default="auto", description="channels_last convolutions; auto = on CUDA"
    )
    compile: bool | Literal["auto"] = Field(
        default="auto", description="torch.compile the backbone; auto = off (measured slower on an H100)"
    )
    cuda_graphs: bool | Literal["auto"] = Field(
        default="auto", description="replay plain training steps as CUDA graphs; auto = on for single-process CUDA runs"
    )
    gpus: int = Field(
        default=1,
        ge=1,
        le=1024,
        description="processes per node under torchrun (one GPU each; CPU processes on device=cpu)",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        """`epochs=true` is a wrong type, not 1 (pydantic would quietly take a bool as a number)."""
        if isinstance(data, dict):
            for key, value in data.items():
                field = cls.model_fields.get(key)
                expected = _number_kind(field.annotation) if field is not None else None
                if isinstance(value, bool) and expected:
                    raise ValueError(f"{key}={str(value).lower()}: expected {expected}, not a boolean")
                if expected and isinstance(value, str):  # memory_size = "200" in a preset: a typo, not a number
                    raise ValueError(
                        f"{key}={shorten(value)!r}: a string for {_kind_key(expected)}; write "
                        f"{key}={shorten(value)} without quotes"
                        if _is_number(value)
                        else f"{key}={shorten(value)!r}: expected {expected}, not a string"
                    )
                if expected == "an integer" and isinstance(value, float):  # epochs = 1e3 or 2.5
                    whole = (
                        f"; write {key}={int(value)}"
                        if value.is_integer() and abs(value) <= MAX_INT
                        else "; allowed: whole numbers"
                    )
                    raise ValueError(f"{key}={value!r}: a float for an integer key{whole}")
                if isinstance(value, int) and not isinstance(value, bool) and not -MAX_INT <= value <= MAX_INT:
                    raise ValueError(f"{key}={shorten(value)}: out of range; allowed: at most {MAX_INT}")
        return data

    @model_validator(mode="after")
    def _store_integers(self) -> RunConfig:
        """Every integer fits the store's integer columns (a seed of 20 digits is refused here, not
        by an OverflowError when the run is stored)."""
        for key, value in self.model_dump().items():
            if isinstance(value, int) and not isinstance(value, bool) and not -MAX_INT <= value <= MAX_INT:
                raise ValueError(f"{key}={shorten(value)}: out of range; allowed: at most {MAX_INT}")
            if isinstance(value, float) and value != 0 and abs(value) < sys.float_info.min:  # lr=1e-320 trained
                raise ValueError(
                    f"{key}={value!r}: a subnormal number (below {sys.float_info.min:.4g}), which "
                    f"floats hold only approximately; use 0 or a value of at least {sys.float_info.min:.4g}"
                )
        return self

    @field_validator("augment", mode="before")
    @classmethod
    def _augment(cls, value: Any) -> tuple[str, ...]:
        if not isinstance(value, (str, list, tuple)):
            raise ValueError("must be a list or a '+'-joined string")
        if isinstance(value, str) and (
            not value.strip() or any(not p.strip() for p in value.replace(",", "+").split("+"))
        ):
            raise ValueError(
                "an empty augmentation name; allowed: none, cutmix, randaug, autoaug (join with '+'; "
                "augment=none for no augmentation)"
            )
        return parse_augment(value)

    @field_validator("gpu_decode", "channels_last", "compile", "cuda_graphs", mode="before")
    @classmethod
    def _auto_bool(cls, value: Any) -> Any:
        if isinstance(value, bool) or value == "auto":
            return value
        raise ValueError("allowed: auto, true, false")

    @field_validator("method")
    @classmethod
    def _method(cls, value: str) -> str:
        if value not in method_names():
            raise ValueError(
                f"unknown method{did_you_mean(value, method_names())}; allowed: {', '.join(method_names())}"
            )
        return value

    @property
    def method_spec(self) -> MethodSpec:
        """The run's method's declaration (a built-in's or a plug-in's): what cl trains."""
        return method_spec(self.method)

    @field_validator("model")
    @classmethod
    def _model(cls, value: str) -> str:
        """A registered backbone (built-in or plug-in)."""
        return _registered(value, "model", model_registry.get, UnknownModel, lambda: ", ".join(model_registry.names()))

    @field_validator("model_weights")
    @classmethod
    def _model_weights(cls, value: str | None) -> str | None:
        """A file that is there, stored as an absolute path (whether it holds this model's weights is
        checked when it is built; whether it loads, before a run is stored: launch.check_runnable)."""
        if value is None:
            return None
        path = Path(value).expanduser()
        if not path.is_file():
            raise ValueError("no such file (give a local state dict; nothing is downloaded)")
        return str(path.resolve())  # the worker may start elsewhere

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, value: str) -> str:
        """A registered dataset (built-in, plug-in, folder:PATH), its class count known."""
        try:
            return _registered(value, "dataset", dataset_registry.classes, UnknownDataset, dataset_registry.listing)
        except DatasetMissing as err:  # a folder:PATH without its tree: no class count to check against
            raise ValueError(str(err)) from None

    def dataset_classes(self) -> int:
        """The dataset's class count (a folder dataset's: its tree's class folders, when it is there)."""
        return dataset_registry.classes(self.dataset)

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if value in ("auto", "cpu", "cuda") or (value.startswith("cuda:") and value[5:].isdigit()):
            return value
        raise ValueError("allowed: auto, cpu, cuda, cuda:N")

    @model_validator(mode="after")
    def _consistent(self) -> RunConfig:
        n_classes = self.dataset_classes()
        if n_classes % self.n_tasks:
            raise ValueError(
                f"n_tasks={self.n_tasks}: {self.dataset} has {n_classes} classes, which must split evenly into tasks"
            )
        if self.memory_size < n_classes:
            raise ValueError(
                f"memory_size={self.memory_size}: smaller than the {n_classes} classes of "
                f"{self.dataset}, so some class would get no slot"
            )
        if self.topk > n_classes:
            raise ValueError(f"topk={self.topk}: larger than the {n_classes} classes of {self.dataset}")
        if self.gpus > 1 and self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(
                f"gpus={self.gpus}: each process takes its own GPU, so device must be auto, cuda "
                f"or cpu, not {self.device!r} (choose GPUs with CUDA_VISIBLE_DEVICES)"
            )
        if not self.evaluate_test:
            self._validation_only_checks()
        if is_task_free(self.stream):
            self._task_free_checks()
        else:
            if not self.method_spec.runs_under("task"):
                raise ValueError(
                    f"method={self.method}: runs on the task-free streams only (stream=iblurry or "
                    f"siblurry), not stream={self.stream}"
                )
            if self.optimizer != "sgd" or self.schedule == "exp_reset":
                what = f"optimizer={self.optimizer}" if self.optimizer != "sgd" else f"schedule={self.schedule}"
                raise ValueError(
                    f"{what}: only for the task-free streams (stream=iblurry or siblurry); the RM "
                    f"paper's protocol trains with SGD and a per-epoch schedule"
                )
        if self.class_order == "paper" and self.seed not in (orders := dataset_registry.orders(self.dataset)):
            paper = sorted(n for n, spec in builtin_datasets().items() if spec.class_orders)
            has = (
                f"{self.dataset} has orders for seeds {', '.join(map(str, sorted(orders)))} only"
                if orders
                else f"the paper has orders for {', '.join(paper)} seeds 1-3 only"
            )
            raise ValueError(
                f"class_order=paper: {has}, not {self.dataset} seed {self.seed} (a folder dataset's "
                f"own: its {ORDERS_FILE}; or use class_order=seed)"
            )
        return self

    def _validation_only_checks(self) -> None:
        """evaluate_test=false measures the validation stream only: without one the run would
        measure nothing, and the best-over-epochs figure is itself a test evaluation."""
        if not self.val_fraction > 0:
            raise ValueError(
                "evaluate_test=false: with val_fraction=0 the run would measure nothing; "
                "set val_fraction > 0 (e.g. 0.1) or evaluate_test=true"
            )
        if self.eval_every_epoch:
            raise ValueError(
                "evaluate_test=false: eval_every_epoch=true evaluates on the test set after "
                "every epoch; set eval_every_epoch=false"
            )

    def _task_free_checks(self) -> None:
        """What a task-free (i-Blurry / Si-Blurry) run needs: a method that has the online hooks,
        a per-step schedule, one process, and the stream's own class order."""
        if not self.method_spec.runs_under("task-free"):
            able = sorted(spec.name for spec in method_specs()[0] if spec.runs_under("task-free"))
            raise ValueError(
                f"method={self.method}: has no task-free version; with stream={self.stream} use one of "
                f"{', '.join(able)}"
            )
        if self.schedule not in ("constant", "exp_reset"):
            raise ValueError(
                f"schedule={self.schedule}: task-free streams update per sample; allowed: constant, exp_reset"
            )
        if self.class_order != "seed":
            raise ValueError(f"class_order={self.class_order}: task-free streams label classes by first appearance")
        if self.gpus > 1:
            raise ValueError(f"gpus={self.gpus}: task-free streams run in one process")
        if self.n_tasks < 1 or self.dataset_classes() < self.n_tasks:
            raise ValueError(f"n_tasks={self.n_tasks}: more tasks than the {self.dataset_classes()} classes")

    @model_validator(mode="after")
    def _method_checks(self) -> RunConfig:
        """What only the run's method needs across keys (its params class's `check`)."""
        self.method_spec.params.from_settings(self).check(self, self.dataset_classes())
        return self

    def to_dict(self) -> dict[str, Any]:
        """What is stored: flat, the common keys then the method's own."""
        data = self.model_dump()
        data["augment"] = list(self.augment)
        return data


COMMON_KEYS = tuple(RunConfig.model_fields)  # the keys every run has
# keys only a task-free run reads (their help says "task-free streams:" / "i-Blurry"; adam and
# exp_reset are refused on the task streams), and where a run runs rather than what it is
TASK_FREE_ONLY = (
    "disjoint_classes",
    "online_iter",
    "eval_period",
    "anytime_class_accuracy",
    "compute_budget",
    "train_gflop_per_sample",
    "optimizer",
    "lr_gamma",
)
# keys of the task protocol that, on a task-free stream, only these built-in methods read: only
# RM and GDumb run memory epochs there (cl/methods/taskfree.py memory_epochs, gdumb.py), only RM
# scores uncertainty. A task-free ER or CLIB run's listing leaves them out; a plug-in's shows them.
TASK_FREE_READERS: dict[str, tuple[str, ...]] = {
    "epochs": ("rm", "gdumb"),
    "memory_batch_size": ("rm", "gdumb"),
    "uncertainty": ("rm",),
    "uncertainty_views": ("rm",),
}
RUNTIME_KEYS = ("device", "threads", "download", *(k for k in RunConfig.model_fields if k not in RunKeys.model_fields))
# the keys a newcomer changes first: `rmconsole config-keys` (curated), `run --help`
ESSENTIAL_KEYS = (
    "dataset",
    "method",
    "memory_size",
    "n_tasks",
    "blurry",
    "stream",
    "epochs",
    "augment",
    "seed",
    "lr",
    "batch_size",
    "device",
)
# every key a built-in method's run can have (a plug-in's keys: key_readers / method_keys)
KEYS = tuple(dict.fromkeys([*COMMON_KEYS, *(k for spec in REGISTRY.values() for k in spec.keys)]))


def _param_field(params: type[Any], name: str) -> tuple[Any, Any]:
    """A params-class field as a pydantic field: same type, default, help and bounds."""
    f = next(f for f in dataclasses.fields(params) if f.name == name)
    hint = get_type_hints(params)[name]
    return hint, Field(default=f.default, description=f.metadata.get("help", ""), **f.metadata.get("bounds", {}))


@functools.cache
def config_model(spec: MethodSpec) -> type[RunConfig]:
    """The model of `spec`'s runs: RunConfig plus the method's own parameters. A parameter named
    like a key every run has, or declared unlike another method's key of the same name (a key
    means one thing: the keys table has one row for it), is a ConfigError naming the method."""
    fields: dict[str, Any] = {}
    for key in spec.keys:
        if key in COMMON_KEYS:
            raise ConfigError(
                f"method {spec.name!r}: its parameter {key!r} has the name of a key every run has; "
                f"rename it in {spec.params.__name__}"
            )
        fields[key] = _param_field(spec.params, key)
    for other in (REGISTRY[n] for n in _sharing_builtins(spec)):
        for key in set(spec.keys) & set(other.keys):
            if _declaration(spec.params, key) != _declaration(other.params, key):
                raise ConfigError(
                    f"method {spec.name!r}: its parameter {key!r} is declared unlike method "
                    f"{other.name!r}'s; rename it or declare it alike"
                )
    if not fields:
        return RunConfig
    return create_model(f"RunConfig_{spec.name}", __base__=RunConfig, **fields)


def _sharing_builtins(spec: MethodSpec) -> list[str]:
    """The built-ins (other than `spec`) that share one of its keys."""
    return [name for name, other in REGISTRY.items() if other is not spec and set(spec.keys) & set(other.keys)]


def _declaration(params: type[Any], key: str) -> tuple[Any, ...]:
    f = next(f for f in dataclasses.fields(params) if f.name == key)
    return (
        get_type_hints(params)[key],
        f.default,
        f.metadata.get("help"),
        tuple(sorted(f.metadata.get("bounds", {}).items())),
    )


def _spec_of(method: Any) -> MethodSpec | None:
    """The spec of a config's `method` value; None when it names no method (the model's own
    check then says so in one line); a plug-in that cannot be used is a ConfigError."""
    if not isinstance(method, str):
        return None
    try:
        return method_spec(method)
    except UnknownMethod:
        return None
    except plugins.PluginError as err:
        raise ConfigError(str(err)) from None


def config_view(config: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(key, value as --set writes it, differs from its default) for the keys a run's method
    reads: the keys every run has (less the task-free-only ones on a task run, and the runtime
    choices when at their defaults), then the method's own; another method's keys, which a run
    stored by an earlier version holds (~61 keys), are left out. What `run` and `show` print."""
    method = config.get("method")
    defaults = config_defaults(method)
    spec = _spec_of(method)
    own = set(spec.keys) if spec is not None else set()
    task_free = is_task_free(str(config.get("stream", "")))
    out = []
    for key, value in config.items():
        if key not in COMMON_KEYS and key not in own:
            continue
        if key in TASK_FREE_ONLY and not task_free:
            continue
        if task_free and not reads_on_task_free(method, key):
            continue
        default = defaults.get(key)
        if isinstance(default, tuple):
            default = list(default)
        required = (
            key in defaults
            and RunConfig.model_fields.get(key) is not None
            and RunConfig.model_fields[key].is_required()
        )
        changed = (
            key in defaults
            and not required
            and value != default
            and not (isinstance(value, (list, tuple)) and list(value) == default)
        )
        if (key in RUNTIME_KEYS or value is None) and not changed:  # where it ran, or unset: only when set
            continue
        out.append((key, show_value(value), changed))
    return out


def reads_on_task_free(method: Any, key: str) -> bool:
    """Whether a task-free run of `method` reads `key` (False only for a built-in method that a
    TASK_FREE_READERS row leaves out: ER's `epochs`; a plug-in's reads are not known: True)."""
    from .cl.methods import REGISTRY

    readers = TASK_FREE_READERS.get(key)
    return readers is None or method not in REGISTRY or method in readers


def essential_keys_help() -> list[str]:
    """The curated key help: the keys a newcomer changes first, each `key (default): help`."""
    fields = RunConfig.model_fields

    def default(key: str) -> str:
        text = _default_text(fields[key])
        return "the preset's" if text == "required" else f"default {text}"

    return [f"{key} ({default(key)}): {fields[key].description}" for key in ESSENTIAL_KEYS]


def show_value(value: Any) -> str:
    """A value as `--set` writes it (`bic_temperature=3`, `augment=cutmix+autoaug`)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "+".join(map(str, value)) or "none"
    return shorten(value)


def not_read(key: str, value: Any, methods: list[str]) -> str:
    """The one line for a method key that the run's method (or no run of a sweep) reads."""
    readers = readers_of(key)
    return f"{shorten(key)}={show_value(value)}: read by {', '.join(readers)}, not by method={', '.join(methods)}"


def did_you_mean(name: str, names: list[str] | tuple[str, ...]) -> str:
    """` (did you mean X?)` / ` (did you mean X or Y?)` with the registered names closest to a
    typo, or "" when none is close: a typo gets its fix, not the whole list to read."""

    def score(candidate: str) -> float:
        return difflib.SequenceMatcher(None, str(name), candidate).ratio()

    close = difflib.get_close_matches(str(name), list(names), n=2, cutoff=0.6)
    close = [c for c in close if score(c) >= score(close[0]) - 0.03]  # a second only when as close as the first
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def unknown_key(key: str) -> str:
    """`unknown config key 'x'`, with the closest known key when one is close."""
    known = list(dict.fromkeys([*KEYS, *method_keys()]))
    return f"unknown config key {shorten(key)!r}{did_you_mean(key, known)}; `rmconsole config-keys` lists the keys"


def method_keys() -> tuple[str, ...]:
    """Every method's own keys (built-ins', then the loadable plug-ins')."""
    from .methods import key_readers

    return tuple(key_readers())


def check_key(key: str) -> None:
    """A key some run can have (common, or some method's), else ConfigError with a did-you-mean."""
    if key not in COMMON_KEYS and not readers_of(key):
        raise ConfigError(unknown_key(key))


def check_keys(config: dict[str, Any], spec: MethodSpec) -> None:
    """Every key of `config` is common or read by its method `spec`: one line otherwise."""
    own = set(spec.keys)
    for key, value in config.items():
        if key in COMMON_KEYS or key in own:
            continue
        if readers_of(key):
            raise ConfigError(not_read(key, value, [spec.name]))
        raise ConfigError(unknown_key(key))


def _number_kind(annotation: Any) -> str | None:
    """'an integer' / 'a number' for int / float fields (optional or not), else None."""
    text = str(annotation)
    if text in ("<class 'int'>", "typing.Optional[int]", "int | None", "Optional[int]"):
        return "an integer"
    if text in ("<class 'float'>", "typing.Optional[float]", "float | None", "Optional[float]"):
        return "a number"
    return None


def _kind_key(expected: str) -> str:
    """'an integer' -> 'an integer key', 'a number' -> 'a number key'."""
    return f"{expected} key"


def _is_number(text: str) -> bool:
    """Whether a string spells a number (`"200"`, `"0.05"`): then the quotes are the mistake."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def key_number_kind(key: str) -> str | None:
    """'an integer' / 'a number' when `key` (a common key, or a method's own, declared alike by
    every method that reads it) holds numbers; None otherwise."""
    field = RunConfig.model_fields.get(key)
    if field is not None:
        return _number_kind(field.annotation)
    for name in readers_of(key)[:1]:
        return _number_kind(get_type_hints(method_spec(name).params).get(key))
    return None


def checked_value(key: str, raw: str) -> Any:
    """A `--set` value parsed (`parse_value`), a float for an integer key refused naming what was
    typed and how it was read (`epochs=1e3` is not quietly 1000)."""
    value = parse_value(raw)
    if isinstance(value, float) and key_number_kind(key) == "an integer":
        whole = (
            f"; write {key}={int(value)}"
            if value.is_integer() and abs(value) <= MAX_INT
            else "; allowed: whole numbers"
        )
        raise ConfigError(f"{key}={shorten(raw)}: a float ({value!r}) for an integer key{whole}")
    return value


def _one_line(err: ValidationError) -> str:
    """The first pydantic error as `key=value: problem`."""
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        return unknown_key(loc)
    if first["type"] == "missing":
        return f"config key {loc!r} is required"
    if not loc:  # a model-level check already names its key
        return shorten(msg, 600)
    value = first.get("input")
    # as written (TOML): a preset's `epochs = 1979-05-27` is not echoed as datetime.date(1979, 5, 27)
    shown = repr(value) if isinstance(value, str) else toml_literal(value)
    shown = shorten(shown) if len(shown) > 80 else shown
    if first["type"] == "literal_error":
        return f"{loc}={shown}: {msg.replace('Input should be', 'allowed:')}"
    return f"{loc}={shown}: {shorten(msg, 400)}"


def preset_dir() -> Path:
    """The bundled presets: package data `rmconsole/presets` when installed from a wheel (setuptools
    maps the top-level presets/ there), else the top-level presets/ beside the package (a checkout
    on PYTHONPATH, or an editable install)."""
    installed = Path(str(resources.files("rmconsole") / "presets"))
    if any(installed.glob("*.toml")):  # a folder that holds presets (a stale empty one does not count)
        return installed
    return Path(__file__).resolve().parent.parent / "presets"


def builtin_preset_names() -> list[str]:
    return sorted(p.stem for p in preset_dir().glob("*.toml"))


def plugin_presets() -> tuple[dict[str, tuple[Path, str]], list[str]]:
    """The presets installed plug-in packages ship ({name: (TOML file, package)}, entry-point
    group `rmconsole.presets`, plugins.preset_files) and one line for each one refused: a name
    a built-in preset has (a `--preset` name always means the built-in), one name in two
    packages, a package folder not found."""
    from . import plugins

    found, problems = plugins.preset_files()
    builtin = set(builtin_preset_names())
    out: dict[str, tuple[Path, str]] = {}
    for name, (path, entry) in sorted(found.items()):
        if name in builtin:
            problems.append(
                f"preset {name!r} of package {entry.package} has a built-in preset's name: not used; rename its file"
            )
        else:
            out[name] = (path, entry.package)
    return out, problems


def preset_names() -> list[str]:
    """Every preset `--preset` takes: the bundled ones, then the installed plug-ins' (sorted)."""
    return builtin_preset_names() + sorted(plugin_presets()[0])


def preset_path(name: str) -> Path | None:
    """The TOML file of preset `name`: a bundled one, else a plug-in's; None when neither has it."""
    path = preset_dir() / f"{name}.toml"
    if path.exists():
        return path
    found = plugin_presets()[0].get(name)
    return found[0] if found is not None else None


def read_preset(name_or_path: str) -> tuple[str, dict[str, Any]]:
    """(preset name, its table) for a preset name (bundled or a plug-in's) or a TOML file path."""
    if not name_or_path.strip():
        raise ConfigError(
            f"--preset {name_or_path!r}: give a preset name ({', '.join(preset_names())}) or a .toml file"
        )
    try:
        path = Path(name_or_path)
        if not (path.suffix == ".toml" or path.exists()):
            found = preset_path(name_or_path)
            if found is None:
                raise ConfigError(
                    f"unknown preset {shorten(name_or_path)!r}{did_you_mean(name_or_path, preset_names())}; "
                    f"`rmconsole presets` lists them (or give a .toml file)"
                )
            path = found
        text = read_text(path)  # a regular file of at most 1 MiB, a BOM dropped (tomlfile.py)
    except TomlFileError as err:
        raise ConfigError(str(err)) from None
    except FileNotFoundError:
        raise ConfigError(f"preset file {shorten(str(path))!r} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"preset file {shorten(str(path))!r} is a directory, not a TOML file") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"preset file {shorten(str(path))!r} is not valid TOML: {err}") from None
    except OSError as err:
        raise ConfigError(f"preset {shorten(name_or_path)!r} cannot be read: {err.strerror}") from None
    try:
        table = toml_loads(text, f"preset file {shorten(str(path))!r}")  # nesting bounded first
    except TomlFileError as err:
        raise ConfigError(str(err)) from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"preset file {shorten(str(path))!r} is not valid TOML: {err}") from None
    table.pop("description", None)
    return path.stem, table


def preset_description(name: str) -> str:
    path = preset_path(name)
    if path is None:
        return ""
    try:
        table = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return ""
    return str(table.get("description", ""))


def parse_value(raw: str) -> Any:
    """A --set value: a TOML literal (number, bool, list, quoted string) or else the raw string."""
    try:
        return toml_loads(f"v = {raw}", "the value")["v"]  # nesting bounded first
    except TomlFileError as err:
        raise ConfigError(f"{shorten(raw)!r}: {err}") from None
    except tomllib.TOMLDecodeError:
        for number in (int, float):  # `.05`, `007`: numbers TOML spells otherwise, never a quoted string
            try:
                return number(raw)
            except ValueError:
                continue
        return raw


def split_override(pair: str, expected: str = "KEY=VALUE") -> tuple[str, str]:
    """`--set KEY=RAW` -> (key, raw), the key checked against the config's keys."""
    key, sep, raw = pair.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {shorten(pair)!r}: expected {expected}")
    check_key(key)
    return key, raw.strip()


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """`--set` pairs as a dict; a key given twice is refused naming both values (the last one
    silently winning hid a slip such as `--set epochs=1 ... --set epochs=2`)."""
    out: dict[str, Any] = {}
    raws: dict[str, str] = {}
    for pair in pairs:
        key, raw = split_override(pair)
        value = checked_value(key, raw)
        if key in out and out[key] != value:
            raise ConfigError(twice(key, f"--set {key}={shorten(raws[key])}", f"--set {key}={shorten(raw)}"))
        out[key], raws[key] = value, raw
    return out


def twice(key: str, first: str, second: str) -> str:
    """The one line for a key given two different values."""
    return f"{key} is given twice: {first} and {second}; give it once"


def method_of(table: dict[str, Any], overrides: dict[str, Any] | None = None) -> Any:
    """The method a preset table and overrides give (the override's, else the preset's, else rm)."""
    return (overrides or {}).get("method", table.get("method", "rm"))


def for_method(table: dict[str, Any], overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """A preset's keys for the run's method: its top-level keys, less the parameters of other
    methods (a BiC preset's `bic_temperature` is dropped from a run with `--set method=rm`), then
    its `[methods.<method>]` table (a preset of the follow-up's settings gives each method its
    own optimiser, lr, schedule...), then the overrides (never dropped: a key of another method
    there is refused by `build_config`). The method is the override's, else the preset's.

    A stored config goes through here as a table, so a run stored by an earlier version (every
    method's keys in its config) rebuilds with its own method's keys only."""
    overrides = overrides or {}
    sections = table.get("methods") or {}
    if not isinstance(sections, dict) or not all(isinstance(v, dict) for v in sections.values()):
        raise ConfigError("preset key 'methods' must hold one table per method ([methods.NAME])")
    known = method_names()
    unknown = sorted(set(sections) - set(known))
    if unknown:
        raise ConfigError(f"preset table [methods.{unknown[0]}]: unknown method; known: {', '.join(known)}")
    method = method_of(table, overrides)
    spec = _spec_of(method)
    own = set(spec.keys) if spec is not None else None
    common = {
        k: v
        for k, v in table.items()
        if k != "methods" and (own is None or k in COMMON_KEYS or k in own or not readers_of(k))
    }
    return {**common, **(sections.get(method, {}) if isinstance(method, str) else {}), **overrides}


def build_config(table: dict[str, Any], overrides: dict[str, Any] | None = None) -> RunConfig:
    """The validated config of a preset table (or a stored config) plus overrides, as the model
    of its method's runs (`config_model`); ConfigError, one line, for anything wrong."""
    merged = for_method(table, overrides)
    spec = _spec_of(merged.get("method", "rm"))
    if spec is not None:
        check_keys(merged, spec)
    try:
        return (config_model(spec) if spec is not None else RunConfig)(**merged)
    except ValidationError as err:
        raise ConfigError(_one_line(err)) from None
    except TypeError as err:
        raise ConfigError(str(err)) from None


def load_config(
    preset: str | None = None, overrides: list[str] | dict[str, Any] | None = None, **explicit: Any
) -> tuple[str, RunConfig]:
    """(preset name, config) from a preset name/file, `--set` pairs and explicit options."""
    name, table = read_preset(DEFAULT_PRESET if preset is None else preset)
    extra = parse_overrides(overrides) if isinstance(overrides, list) else dict(overrides or {})
    for key, value in explicit.items():
        if value is None:
            continue
        if key in extra and extra[key] != value:  # `--set seed=2 --seed 3`: refused, not the last one winning
            raise ConfigError(twice(key, f"--set {key}={show_value(extra[key])}", f"--{key.replace('_', '-')} {value}"))
        extra[key] = value
    return name, build_config(table, extra)


def config_defaults(method: Any = None) -> dict[str, Any]:
    """Each key's default for runs of `method` (every method's keys when None or unknown); a key
    with none (dataset, model, memory_size: a preset gives them) is None, as in a run without it."""
    spec = _spec_of(method) if method is not None else None
    model = config_model(spec) if spec is not None else RunConfig
    out = {k: None if f.is_required() else f.default for k, f in model.model_fields.items()}
    if spec is None:
        out.update(method_key_defaults())
    return out


def method_key_defaults() -> dict[str, Any]:
    """Every method's own key with its declared default (built-ins', then loadable plug-ins')."""
    out: dict[str, Any] = {}
    for spec in method_specs()[0]:
        for f in dataclasses.fields(spec.params):
            out.setdefault(f.name, f.default)
    return out


def overrides_of(preset: str | None, config: dict[str, Any]) -> dict[str, Any]:
    """The keys of `config` whose value differs from what the preset alone gives for the config's
    method (its table over the defaults, its `[methods.X]` table included), as `--set` would write
    them back: what tells two runs of a preset apart. `method` differs when it is not the
    preset's. The seed is left out (every runs table has it as a column). A config of an earlier
    version (every method's keys) compares only its method's keys."""
    _, table = read_preset(preset or DEFAULT_PRESET)
    method = config.get("method", method_of(table))
    try:
        base = build_config(table, {"method": method}).to_dict()
    except ConfigError:  # a preset that is not valid alone (a partial TOML file): its table and the defaults
        try:
            from_table = for_method(table, {"method": method})
        except ConfigError:
            from_table = {k: v for k, v in table.items() if k != "methods"}
        base = config_defaults(method) | from_table
        base["augment"] = list(parse_augment(base["augment"])) if base.get("augment") is not None else []
    base["method"] = method_of(table)
    return {k: v for k, v in config.items() if k != "seed" and k in base and v != base[k]}


# --------------------------------------------------------------------------- the keys table


@dataclass(frozen=True)
class KeyRow:
    """One config key as `rmconsole config-keys` and docs/configuration.md list it."""

    key: str
    type: str
    default: str
    allowed: str
    help: str
    methods: str  # the methods that read it ("all" for the keys every run has)


def key_table(plugins_too: bool = True) -> list[KeyRow]:
    """Every config key, in order: the keys every run has, then each method's own (built-ins',
    then, with `plugins_too`, the installed plug-ins'), with the methods that read it; generated
    from the fields and the methods' params classes, so the listing cannot drift from what is
    validated. A plug-in that cannot be used is left out (`method_specs` says why)."""
    specs = method_specs()[0] if plugins_too else list(REGISTRY.values())
    rows = []
    # the installed plug-ins' backbones and datasets by name (listed, not imported), as methods are
    installed = (
        {
            "model": [n for n in plugins.available("model") if n not in BUILTIN_MODELS],
            "dataset": [n for n in plugins.available("dataset") if n not in builtin_datasets()],
        }
        if plugins_too
        else {}
    )
    for key, field in RunConfig.model_fields.items():
        allowed = ", ".join(s.name for s in specs) if key == "method" else _allowed_text(field)
        if installed.get(key):
            allowed += f" (installed: {', '.join(sorted(installed[key]))})"
        rows.append(
            KeyRow(key, _type_text(field.annotation), _default_text(field), allowed, field.description or "", "all")
        )
    models: dict[str, type[RunConfig]] = {}
    readers: dict[str, list[str]] = {}
    for spec in specs:
        try:
            models[spec.name] = config_model(spec)
        except ConfigError:  # a plug-in declaring a key badly: refused when it is used, left out here
            continue
        for key in spec.keys:
            readers.setdefault(key, []).append(spec.name)
    for key, names in readers.items():
        field = models[names[0]].model_fields[key]
        rows.append(
            KeyRow(
                key,
                _type_text(field.annotation),
                _default_text(field),
                _allowed_text(field),
                field.description or "",
                ", ".join(names),
            )
        )
    return rows


def method_reads(method: str | None, key: str) -> bool:
    """Whether a run of `method` reads `key`: every key but the methods' own parameters, which
    only their methods read (a report row shows ER's `rm_variant` as "—", not as RM's default)."""
    readers = readers_of(key)
    return not readers or method is None or method in readers


def keys_markdown() -> str:
    """The keys table as a markdown table."""
    lines = ["| key | type | default | allowed | help | methods |", "|---|---|---|---|---|---|"]
    for row in key_table(plugins_too=False):
        lines.append(
            f"| `{row.key}` | {row.type} | {_code(row.default)} | {row.allowed} | {row.help} | {row.methods} |"
        )
    return "\n".join(lines) + "\n"


def configuration_page() -> str:
    """docs/configuration.md: regenerate with `rmconsole config-keys --markdown > docs/configuration.md`."""
    return (
        "# Configuration keys\n\n"
        "<!-- generated by `rmconsole config-keys --markdown`; edit the key declarations "
        "(rmconsole/config.py, the methods' params modules rmconsole/cl/methods/*_params.py), not this "
        "page -->\n\n"
        "A run is a preset (a TOML file of these keys, `rmconsole presets`) plus overrides "
        "(`--set KEY=VALUE`, TOML literals). Unknown keys and bad values are refused with one line "
        "naming the key, the value and what is allowed. Keys whose *methods* column names methods "
        "are those methods' own parameters (each declared in the params module beside its method, "
        "e.g. `rmconsole/cl/methods/bic_params.py`, or by an installed plug-in): a run's config holds "
        "the keys every run has plus its method's own. `--set` of another method's key is refused, "
        "naming the methods that read it; in a sweep it applies to the runs whose method reads it; a "
        "preset's top-level keys that the run's method does not read are dropped for that run.\n\n" + keys_markdown()
    )


def _type_text(annotation: Any) -> str:
    names = {int: "integer", float: "number", bool: "boolean", str: "string"}
    if annotation in names:
        return names[annotation]
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) is Literal:
        return "choice"
    if get_origin(annotation) is tuple:
        return "list"
    if len(args) < len(get_args(annotation)):  # Optional[X]
        return f"{_type_text(args[0])} or unset"
    if args:  # a union, e.g. bool or "auto"
        return " or ".join(_type_text(a) if get_origin(a) is not Literal else ", ".join(get_args(a)) for a in args)
    return str(annotation)


def _default_text(field: Any) -> str:
    if field.is_required():
        return "required"
    value = field.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return "+".join(value) or "none"
    return str(value)


def _allowed_text(field: Any) -> str:
    extra = field.json_schema_extra or {}
    if "allowed" in extra:
        return str(extra["allowed"])
    options = [field.annotation, *get_args(field.annotation)]
    choices = [str(v) for a in options if get_origin(a) is Literal for v in get_args(a)]
    choices += ["true", "false"] if bool in options else []
    if choices:
        return ", ".join(choices)
    symbols = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    bounds = [f"{symbols[name]} {getattr(m, name)}" for m in field.metadata for name in symbols if hasattr(m, name)]
    return " and ".join(bounds)


def choices_of(key: str) -> tuple[str, ...] | None:
    """A key every run has whose values are a closed set (a choice, a boolean, `auto`): those
    values as `--set` writes them, with `none` where the key may be unset; None for an
    open-ended key (a number, a name, a method or dataset a plug-in may add). The run filter
    refuses `stream:nope` with these instead of matching no run."""
    field = RunConfig.model_fields.get(key)
    extra = field.json_schema_extra if field is not None else None
    if field is None or (isinstance(extra, dict) and "allowed" in extra):
        return None
    annotation = field.annotation
    members = [annotation] if get_origin(annotation) is Literal or annotation is bool else get_args(annotation)
    values: list[str] = []
    for member in members:
        if get_origin(member) is Literal:
            values += [str(v) for v in get_args(member)]
        elif member is bool:
            values += ["true", "false"]
        elif member is type(None):
            values.append("none")
        else:  # a number or a name beside the choices: open-ended
            return None
    return tuple(values) or None


def _code(text: str) -> str:
    return f"`{text}`" if text not in ("required", "unset") else text
