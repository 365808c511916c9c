"""The model of a run's config: pydantic's `RunConfig`, built from the declarations of the keys
every run has (`cl/settings.py`'s `RunSettings`, each key declared there once) with every check
across keys; `config_model(spec)`, the same plus a method's own parameters (its params class);
the key groups the other modules read (`COMMON_KEYS`, `RUNTIME_KEYS`, `KEYS`)."""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from .. import datasets as dataset_registry
from .. import models as model_registry
from .. import plugins
from ..cl.catalog import parse_augment
from ..cl.datasets import ORDERS_FILE, DatasetMissing, UnknownDataset
from ..cl.datasets import builtins as builtin_datasets
from ..cl.methods import REGISTRY, MethodSpec
from ..cl.modelspec import UnknownModel
from ..cl.protocols import is_task_free
from ..cl.settings import MAX_INT, RunSettings, declared_keys
from ..methods import UnknownMethod, method_names, method_spec, method_specs
from .errors import ConfigError, did_you_mean, shorten


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


def _field(hint: Any, declared: dataclasses.Field[Any]) -> tuple[Any, Any]:
    """A declared key (a common key's `key(...)`, a method's `param(...)`) as a pydantic field:
    its type, default (none: required), help, bounds and what is allowed where the type does not
    say it."""
    allowed = declared.metadata.get("allowed")
    return hint, Field(
        ... if declared.default is dataclasses.MISSING else declared.default,
        description=declared.metadata.get("help", ""),
        json_schema_extra={"allowed": allowed} if allowed else None,
        **declared.metadata.get("bounds", {}),
    )


DECLARED = declared_keys()  # the keys every run has, in order: (type, declaration), from cl/settings.py
if TYPE_CHECKING:  # for the type checker, the model has RunSettings's keys (its fields at runtime)

    class RunKeys(BaseModel, RunSettings):
        pass

else:
    RunKeys = create_model(
        "RunKeys",
        __config__=ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False),  # lr=inf is refused, not trained
        __doc__="The keys every run has, one field per declaration of `RunSettings`.",
        **{name: _field(hint, declared) for name, (hint, declared) in DECLARED.items()},
    )


class RunConfig(RunKeys):
    """Everything that defines a run: the keys every run has (`RunKeys`, from their declarations)
    with the checks of their values and across keys. A run's config is an instance of
    `config_model(its method's spec)`, this class plus the method's own parameters. Unknown keys
    are errors, never silently ignored."""

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        """`epochs=true` is a wrong type, not 1 (pydantic would quietly take a bool as a number)."""
        if isinstance(data, dict):
            for key, value in data.items():
                field = cls.model_fields.get(key)
                expected = number_kind(field.annotation) if field is not None else None
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

    @field_validator("gpu_decode", "channels_last", "cuda_graphs", mode="before")
    @classmethod
    def _auto_bool(cls, value: Any) -> Any:
        if isinstance(value, bool) or value == "auto":
            return value
        raise ValueError("allowed: auto, true, false")

    @field_validator("compile", mode="before")
    @classmethod
    def _compile(cls, value: Any) -> Any:
        if isinstance(value, bool) or value in ("auto", "step"):
            return value
        raise ValueError("allowed: auto, true, false, step")

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
        """A file that is there, stored as an absolute path (whether it loads and holds this model's
        weights is checked before a run is stored: launch.check_runnable, and again when it is built)."""
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
# where or how a run computes, not what it is (declared `runtime=True`): printed only when set
RUNTIME_KEYS = tuple(name for name, (_, declared) in DECLARED.items() if declared.metadata["runtime"])
# every key a built-in method's run can have (a plug-in's keys: key_readers / method_keys)
KEYS = tuple(dict.fromkeys([*COMMON_KEYS, *(k for spec in REGISTRY.values() for k in spec.keys)]))


def number_kind(annotation: Any) -> str | None:
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
        fields[key] = _field(get_type_hints(spec.params)[key], _param(spec.params, key))
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


def _param(params: type[Any], key: str) -> dataclasses.Field[Any]:
    """The declaration of parameter `key` in a params class."""
    return next(f for f in dataclasses.fields(params) if f.name == key)


def _declaration(params: type[Any], key: str) -> tuple[Any, ...]:
    f = _param(params, key)
    return (
        get_type_hints(params)[key],
        f.default,
        f.metadata.get("help"),
        tuple(sorted(f.metadata.get("bounds", {}).items())),
    )


def spec_of(method: Any) -> MethodSpec | None:
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
