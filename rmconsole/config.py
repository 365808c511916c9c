"""RunConfig: one validated model of a run, built from a preset file plus overrides.

Every bad value is rejected here, before anything is stored, with one line that names the
key, the value and what is allowed.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .cl.catalog import (
    DATASET_CLASSES, DATASETS, MEASURES, MEMORY_POLICIES, METHOD_NAMES, MODEL_NAMES, PAPER_CLASS_ORDERS,
    parse_augment,
)

DEFAULT_PRESET = "digits-blurry10-online"


class ConfigError(Exception):
    """A user error in a preset or override: the message is one line for the terminal."""


class RunConfig(BaseModel):
    """Everything that defines a run. Unknown keys are errors, never silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dataset: Literal[DATASETS]  # type: ignore[valid-type]
    model: Literal[MODEL_NAMES]  # type: ignore[valid-type]
    method: str = "rm"
    memory_size: int = Field(gt=0)
    n_tasks: int = Field(default=5, ge=1)
    blurry: int = Field(default=10, ge=0, le=100, description="M of BlurryM; 0 = disjoint")
    stream: Literal["online", "offline"] = "online"
    augment: tuple[str, ...] = ("cutmix", "autoaug")
    uncertainty: Literal[MEASURES] = "randaug"  # type: ignore[valid-type]
    uncertainty_views: int = Field(default=12, ge=1)
    memory_policy: Optional[Literal[MEMORY_POLICIES]] = None  # type: ignore[valid-type]
    epochs: int = Field(default=256, ge=0, description="memory epochs E (online) or epochs per task (offline)")
    batch_size: int = Field(default=16, ge=2)
    memory_batch_size: Optional[int] = Field(default=None, ge=2)
    lr: float = Field(default=0.05, gt=0)
    schedule: Literal["cosine", "step", "constant"] = "cosine"
    weight_decay: float = Field(default=1e-4, ge=0)
    seed: int = Field(default=1, ge=0)
    device: str = "auto"
    class_order: Literal["seed", "paper"] = "seed"
    eval_every_epoch: bool = False
    reset_head: bool = Field(default=False, description="re-create the classifier head at every task (authors' code)")
    train_head: bool = Field(default=True, description="false: the classifier head is left out of the optimiser (the authors' iCaRL, to reproduce their figure)")
    image_size: Optional[int] = Field(default=None, ge=8)
    download: bool = False
    threads: Optional[int] = Field(default=None, ge=1, description="CPU threads for torch")
    # baselines' own hyper-parameters (paper defaults); methods that do not use a key ignore it
    reg_weight: Optional[float] = Field(
        default=None, ge=0, description="EWC / Rwalk regularisation weight lambda (default: the method's own, EWC 100, Rwalk 1)")
    rwalk_alpha: float = Field(default=0.9, gt=0, le=1, description="Rwalk: weight of the newest window in the EWC++ Fisher")
    rwalk_interval: int = Field(default=10, ge=1, description="Rwalk: optimiser steps per Fisher/score update")
    new_classes: Literal["task", "unseen"] = Field(
        default="task", description="iCaRL / BiC: a task's new classes are its own classes (task) or only never-seen ones (unseen)")
    bic_val_fraction: float = Field(default=0.1, gt=0, lt=1, description="BiC: share of the memory held out for validation")
    bic_temperature: float = Field(default=2.0, gt=0, description="BiC: distillation temperature T")
    bic_bias_epochs: int = Field(default=200, ge=0, description="BiC: epochs of the bias-correction stage on the held-out set")

    # ImageNet scale: input pipeline, GPU fast path, multi-GPU (runtime choices, like device)
    data_pipeline: Literal["auto", "memory", "stream"] = Field(
        default="auto", description="ImageFolder datasets: decoded once into memory, or streamed from disk; auto by size")
    loader_workers: Optional[int] = Field(default=None, ge=0, description="DataLoader decode processes per rank (0: a thread)")
    gpu_decode: Union[bool, Literal["auto"]] = Field(default="auto", description="decode JPEGs with nvJPEG on a CUDA device")
    amp: Literal["auto", "bf16", "off"] = Field(default="auto", description="autocast dtype; auto = bf16 on CUDA, off on CPU")
    channels_last: Union[bool, Literal["auto"]] = Field(default="auto", description="channels_last convolutions; auto = on CUDA")
    compile: Union[bool, Literal["auto"]] = Field(default="auto", description="torch.compile the backbone; auto = off (measured slower on an H100)")
    cuda_graphs: Union[bool, Literal["auto"]] = Field(
        default="auto", description="replay plain training steps as CUDA graphs; auto = on for single-process CUDA runs")
    gpus: int = Field(default=1, ge=1, description="processes per node under torchrun (one GPU each; CPU processes on device=cpu)")

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
        return data

    @field_validator("augment", mode="before")
    @classmethod
    def _augment(cls, value: Any) -> tuple[str, ...]:
        if not isinstance(value, (str, list, tuple)):
            raise ValueError("must be a list or a '+'-joined string")
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
        if value not in METHOD_NAMES:
            raise ValueError(f"unknown method; allowed: {', '.join(sorted(METHOD_NAMES))}")
        return value

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if value in ("auto", "cpu", "cuda") or (value.startswith("cuda:") and value[5:].isdigit()):
            return value
        raise ValueError("allowed: auto, cpu, cuda, cuda:N")

    @model_validator(mode="after")
    def _consistent(self) -> "RunConfig":
        n_classes = DATASET_CLASSES[self.dataset]
        if n_classes % self.n_tasks:
            raise ValueError(f"n_tasks={self.n_tasks}: {self.dataset} has {n_classes} classes, "
                             f"which must split evenly into tasks")
        if self.memory_size < n_classes:
            raise ValueError(f"memory_size={self.memory_size}: smaller than the {n_classes} classes of "
                             f"{self.dataset}, so some class would get no slot")
        if self.gpus > 1 and self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"gpus={self.gpus}: each process takes its own GPU, so device must be auto, cuda "
                             f"or cpu, not {self.device!r} (choose GPUs with CUDA_VISIBLE_DEVICES)")
        if self.class_order == "paper" and (self.dataset, self.seed) not in PAPER_CLASS_ORDERS:
            known = sorted({d for d, _ in PAPER_CLASS_ORDERS})
            raise ValueError(f"class_order=paper: the paper has orders for {', '.join(known)} seeds 1-3 only, "
                             f"not {self.dataset} seed {self.seed} (use class_order=seed)")
        return self

    @model_validator(mode="after")
    def _baseline_budget(self) -> "RunConfig":
        if self.method in ("bic", "bic_star"):
            held_out = max(1, round(self.bic_val_fraction * self.memory_size))
            n_classes = DATASET_CLASSES[self.dataset]
            if self.memory_size - held_out < n_classes:
                raise ValueError(f"bic_val_fraction={self.bic_val_fraction}: holding out {held_out} of memory_size="
                                 f"{self.memory_size} leaves fewer training slots than the {n_classes} classes")
        return self

    def to_dict(self) -> dict[str, Any]:
        data = self.model_dump()
        data["augment"] = list(self.augment)
        return data


KEYS = tuple(RunConfig.model_fields)


def _number_kind(annotation: Any) -> str | None:
    """'an integer' / 'a number' for int / float fields (optional or not), else None."""
    text = str(annotation)
    if text in ("<class 'int'>", "typing.Optional[int]", "int | None", "Optional[int]"):
        return "an integer"
    if text in ("<class 'float'>", "typing.Optional[float]", "float | None", "Optional[float]"):
        return "a number"
    return None


def _one_line(err: ValidationError) -> str:
    """The first pydantic error as `key=value: problem`."""
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        return f"unknown config key {loc!r}; known keys: {', '.join(KEYS)}"
    if first["type"] == "missing":
        return f"config key {loc!r} is required"
    if not loc:  # a model-level check already names its key
        return msg
    value = first.get("input")
    shown = value if not isinstance(value, (dict, list)) else str(value)
    if first["type"] == "literal_error":
        return f"{loc}={shown!r}: {msg.replace('Input should be', 'allowed:')}"
    return f"{loc}={shown!r}: {msg}"


def preset_dir() -> Path:
    return Path(str(resources.files("rmconsole") / "presets"))


def preset_names() -> list[str]:
    return sorted(p.stem for p in preset_dir().glob("*.toml"))


def read_preset(name_or_path: str) -> tuple[str, dict[str, Any]]:
    """(preset name, its table) for a preset name or a TOML file path."""
    path = Path(name_or_path)
    if not (path.suffix == ".toml" or path.exists()):
        path = preset_dir() / f"{name_or_path}.toml"
        if not path.exists():
            raise ConfigError(f"unknown preset {name_or_path!r}; available: {', '.join(preset_names())} "
                              f"(or give a .toml file)")
    try:
        table = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"preset file {str(path)!r} does not exist") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"preset file {str(path)!r} is not valid TOML: {err}") from None
    except OSError as err:
        raise ConfigError(f"preset file {str(path)!r} cannot be read: {err.strerror}") from None
    table.pop("description", None)
    return path.stem, table


def preset_description(name: str) -> str:
    table = tomllib.loads((preset_dir() / f"{name}.toml").read_text())
    return str(table.get("description", ""))


def parse_value(raw: str) -> Any:
    """A --set value: a TOML literal (number, bool, list, quoted string) or else the raw string."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def split_override(pair: str, expected: str = "KEY=VALUE") -> tuple[str, str]:
    """`--set KEY=RAW` -> (key, raw), the key checked against the config's keys."""
    key, sep, raw = pair.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {pair!r}: expected {expected}")
    if key not in KEYS:
        raise ConfigError(f"unknown config key {key!r}; known keys: {', '.join(KEYS)}")
    return key, raw.strip()


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, raw = split_override(pair)
        out[key] = parse_value(raw)
    return out


def build_config(table: dict[str, Any], overrides: dict[str, Any] | None = None) -> RunConfig:
    merged = {**table, **(overrides or {})}
    try:
        return RunConfig(**merged)
    except ValidationError as err:
        raise ConfigError(_one_line(err)) from None
    except TypeError as err:
        raise ConfigError(str(err)) from None


def load_config(preset: str | None = None, overrides: list[str] | dict[str, Any] | None = None,
                **explicit: Any) -> tuple[str, RunConfig]:
    """(preset name, config) from a preset name/file, `--set` pairs and explicit options."""
    name, table = read_preset(preset or DEFAULT_PRESET)
    extra = parse_overrides(overrides) if isinstance(overrides, list) else dict(overrides or {})
    extra.update({k: v for k, v in explicit.items() if v is not None})
    return name, build_config(table, extra)
