"""What the science is configured with: `RunSettings`, the keys every run has, and
`MethodParams`, the base of a method's own hyper-parameters.

`rmconsole/config.py` validates a run (its `RunConfig` holds the common keys plus the run's
method's own keys, from its params class) and hands the validated object to
`cl.loop.run_protocol`; cl reads it through these types only, never through
`getattr(cfg, key, default)`. Plain Python (no torch, no pydantic), so the CLI and the TUI can
validate a config without importing torch.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, Protocol, TypeVar

BOUNDS = ("ge", "gt", "le", "lt")


class RunSettings(Protocol):
    """The keys of a run that the science reads (a validated `rmconsole.config.RunConfig`).

    A method's own keys are not here: it reads them from `Method.params` (its `MethodParams`,
    built from the config, which holds the run's method's keys too). `method_spec` is the run's
    method's declaration (a built-in's or a plug-in's), resolved when the config was validated."""

    dataset: str
    model: str
    model_weights: str | None  # a local file of pretrained weights (cl/modelspec.py)
    method: str
    memory_size: int
    n_tasks: int
    blurry: int
    evaluate_test: bool  # false: no test-set evaluation at all (validation only; tune's trials)
    val_fraction: float  # share of each class's training samples held out for validation (issue 30)
    stream: Literal["online", "offline", "iblurry", "siblurry"]
    disjoint_classes: int  # i-Blurry / Si-Blurry N (percent of disjoint classes)
    pool_order: Literal["shuffled", "dataset"]  # i-Blurry / Si-Blurry: order of a task's blurry samples before pooling
    online_iter: float  # task-free streams: updates per streamed sample
    eval_period: int  # task-free streams: samples between anytime evaluations
    anytime_class_accuracy: bool
    compute_budget: float | None
    train_gflop_per_sample: float | None  # task-free streams: derives online_iter (cl/compute.py)
    augment: tuple[str, ...]
    uncertainty: str
    uncertainty_views: int
    memory_policy: str | None
    epochs: int
    batch_size: int
    memory_batch_size: int | None
    lr: float
    optimizer: Literal["sgd", "adam"]
    schedule: Literal["cosine", "step", "constant", "exp_reset"]
    lr_gamma: float
    weight_decay: float
    seed: int
    class_order: Literal["seed", "paper"]
    eval_every_epoch: bool
    topk: int
    reset_head: bool
    train_head: bool
    image_size: int | None
    download: bool
    data_pipeline: Literal["auto", "memory", "stream"]
    loader_workers: int | None
    gpu_decode: bool | Literal["auto"]
    amp: Literal["auto", "bf16", "off"]
    channels_last: bool | Literal["auto"]
    compile: bool | Literal["auto"]
    cuda_graphs: bool | Literal["auto"]

    @property
    def method_spec(self) -> Any: ...  # a methods.spec.MethodSpec (not imported: spec.py imports this module)


def param(default: Any, help: str, **bounds: float) -> Any:
    """A method parameter: its default, one line of help, and its allowed range (`ge`, `gt`,
    `le`, `lt`; a `Literal` type lists allowed values). config.py turns it into a config key of
    the runs of its method, with the same checks and messages as every other key; `rmconsole
    config-keys` lists it with the methods that read it."""
    unknown = set(bounds) - set(BOUNDS)
    if unknown:
        raise TypeError(f"param(): unknown bound(s) {', '.join(sorted(unknown))}; allowed: {', '.join(BOUNDS)}")
    return dataclasses.field(default=default, metadata={"help": help, "bounds": bounds})


P = TypeVar("P", bound="MethodParams")


@dataclasses.dataclass(frozen=True)
class MethodParams:
    """A method's own hyper-parameters: a frozen dataclass whose fields are `param(...)`s.

    The base has none (experience replay, RM, GDumb, joint training use only common keys)."""

    @classmethod
    def from_settings(cls: type[P], settings: Any) -> P:
        """This method's values out of a run's validated settings (which hold its method's keys).
        Settings of another method lack them: refused, never filled with defaults silently."""
        values = {}
        for f in dataclasses.fields(cls):
            if not hasattr(settings, f.name):
                raise ValueError(
                    f"{cls.__name__} reads {f.name}, which a config of method="
                    f"{getattr(settings, 'method', '?')} does not have"
                )
            values[f.name] = getattr(settings, f.name)
        return cls(**values)

    def check(self, settings: RunSettings, n_classes: int) -> None:
        """Checks across keys that only this method needs, run when a config is validated:
        raise ValueError with one line naming the key, its value and what is wrong."""
