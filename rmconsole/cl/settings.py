"""What the science is configured with: `RunSettings`, the keys every run has, each declared
once here (its type, default, one line of help, its allowed range), and `MethodParams`, the base
of a method's own hyper-parameters.

`rmconsole/config/` builds its pydantic model from these declarations and validates a run (its
`RunConfig` holds the common keys plus the run's method's own keys, from its params class) and
hands the validated object to `cl.loop.run_protocol`; cl reads it through these types only, never
through `getattr(cfg, key, default)`. Plain Python (no torch, no pydantic), so the CLI and the
TUI can validate a config without importing torch.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, Protocol, TypeVar, get_type_hints

from .catalog import AUGMENTATIONS, MEASURES, MEMORY_POLICIES
from .datasets import builtins as builtin_datasets
from .modelspec import BUILTINS as BUILTIN_MODELS

BOUNDS = ("ge", "gt", "le", "lt")
REQUIRED: Any = dataclasses.MISSING  # a key without a default: every preset gives it
MAX_INT = 2**63 - 1  # the largest integer a key holds: the store's integers (SQLite INTEGER, PostgreSQL BIGINT)


def _declared(what: str, default: Any, help: str, bounds: dict[str, float], **extra: Any) -> Any:
    """A declaration as a dataclass field: its default; its help, bounds and `extra` as metadata."""
    unknown = set(bounds) - set(BOUNDS)
    if unknown:
        raise TypeError(f"{what}(): unknown bound(s) {', '.join(sorted(unknown))}; allowed: {', '.join(BOUNDS)}")
    return dataclasses.field(default=default, metadata={"help": help, "bounds": bounds, **extra})


def key(default: Any, help: str, *, allowed: str | None = None, runtime: bool = False, **bounds: float) -> Any:
    """A key every run has, declared in `RunSettings`: its default (`REQUIRED`: the preset gives
    it), one line of help, what is allowed where the type and bounds do not say it (a registry's
    names), its bounds (`ge`, `gt`, `le`, `lt`) and whether it is a runtime choice (where or how
    a run computes, not what it is). config/ turns it into a field of RunConfig, as `param`."""
    return _declared("key", default, help, bounds, allowed=allowed, runtime=runtime)


class RunSettings(Protocol):
    """The keys every run has (a validated `rmconsole.config.RunConfig`), in the order they are
    listed and stored: each declared once, here; config/ derives their validation, the keys
    table (`rmconsole config-keys`, docs/configuration.md) and `run --help` from it. `device`,
    `threads` and `gpus` are the runner's (cl is handed its device and process group).

    A method's own keys are not here: it reads them from `Method.params` (its `MethodParams`,
    built from the config, which holds the run's method's keys too). `method_spec` is the run's
    method's declaration (a built-in's or a plug-in's), resolved when the config was validated."""

    dataset: str = key(
        REQUIRED,
        "the dataset (digits is bundled; the others under RMCONSOLE_DATA; `rmconsole data list`)",
        allowed=f"{', '.join(builtin_datasets())}, an installed plug-in's, or folder:PATH (an ImageFolder tree)",
    )
    model: str = key(REQUIRED, "the backbone", allowed=f"{', '.join(BUILTIN_MODELS)}, or an installed plug-in's")
    model_weights: str | None = key(  # a local file of pretrained weights (cl/modelspec.py)
        None,
        "a local file of pretrained weights for the backbone (a state dict, read with "
        "torch.load weights_only; its features, and its head when the shapes match); "
        "unset: random initialisation",
    )
    method: str = key("rm", "the continual-learning method (built in, or an installed plug-in's)")
    memory_size: int = key(REQUIRED, "episodic memory slots K (at least one per class)", gt=0)
    n_tasks: int = key(5, "tasks the classes are split into (evenly)", ge=1)
    blurry: int = key(10, "M of BlurryM (i-Blurry-N-M: M, the blurry share); 0 = disjoint", ge=0, le=100)
    stream: Literal["online", "offline", "iblurry", "siblurry"] = key(
        "online",
        "online: one pass over the stream, then E epochs on the memory; offline: E epochs "
        "per task; iblurry / siblurry: the follow-up's task-free stream, trained sample by "
        "sample with anytime evaluation (docs/anytime.md)",
    )
    val_fraction: float = key(  # issue 30
        0.0,
        "share of EACH class's training samples held out as a validation stream "
        "(never trained on, never in the memory; validation accuracy is measured "
        "where test accuracy is, for selection: `report --select-by`); 0 = none",
        ge=0,
        lt=0.5,
    )
    evaluate_test: bool = key(
        True,
        "measure accuracy on the TEST split after every task (and at the anytime "
        "points); false: the run never reads a test image and measures validation "
        "only (needs val_fraction > 0; what `rmconsole tune` trials use)",
    )
    disjoint_classes: int = key(50, "i-Blurry / Si-Blurry: N, the percent of classes that are disjoint", ge=0, le=100)
    pool_order: Literal["shuffled", "dataset"] = key(
        "shuffled",
        "i-Blurry / Si-Blurry: the order of a task's blurry samples before the pool takes "
        "its first ones; shuffled: a random share (the papers; i-Blurry's published "
        "splits); dataset: storage order, as the Si-Blurry authors' sampler (on a dataset "
        "stored class by class it pools whole classes; docs/anytime.md)",
    )
    online_iter: float = key(1.0, "task-free streams: model updates per streamed sample (fractional allowed)", gt=0)
    eval_period: int = key(100, "task-free streams: anytime evaluation every this many streamed samples", ge=1)
    anytime_class_accuracy: bool = key(
        False, "task-free streams: also store per-class accuracy with every anytime evaluation"
    )
    compute_budget: float | None = key(
        None,
        "task-free streams: training cost allowed per streamed sample, in image passes "
        "(forward 1 + backward 2); a slower method skips the samples that arrive while it is "
        "busy (real-time evaluation, Ghunaim et al. 2023); unset = no limit",
        gt=0,
    )
    train_gflop_per_sample: float | None = key(  # a FLOP credit instead of online_iter (cl/compute.py)
        None,
        "task-free streams: training compute per streamed sample in GFLOP (matmul and "
        "convolution FLOPs, measured on the run's model): each sample adds it to a credit and "
        "the method takes an update only while the credit covers what its updates cost, its "
        "own extra passes included, as the budgeted-CL papers fix compute per sample "
        "(replaces online_iter; docs/compute.md); unset = online_iter",
        gt=0,
    )
    augment: tuple[str, ...] = key(
        ("cutmix", "autoaug"),
        "training augmentation, '+'-joined",
        allowed=f"{', '.join(AUGMENTATIONS)}; randaug and autoaug exclude each other",
    )
    uncertainty: Literal[MEASURES] = key(  # type: ignore[valid-type]  # a Literal of a tuple: valid at runtime
        "randaug", "RM's uncertainty measure (perturbation used for the votes)"
    )
    uncertainty_views: int = key(12, "perturbed views per candidate for the uncertainty votes", ge=1)
    memory_policy: Literal[MEMORY_POLICIES] | None = key(  # type: ignore[valid-type]  # as uncertainty
        None, "memory update policy (default: the method's own)"
    )
    epochs: int = key(256, "memory epochs E (online) or epochs per task (offline)", ge=0)
    batch_size: int = key(16, "training batch size", ge=2)
    memory_batch_size: int | None = key(None, "batch size of the memory epochs (default: batch_size; RM: half)", ge=2)
    lr: float = key(0.05, "learning rate", gt=0)
    optimizer: Literal["sgd", "adam"] = key(
        "sgd", "sgd: Nesterov momentum 0.9; adam: the follow-up's Adam (task-free streams only)"
    )
    schedule: Literal["cosine", "step", "constant", "exp_reset"] = key(
        "cosine",
        "learning-rate schedule of each training call; exp_reset (task-free): x lr_gamma "
        "per step, back to lr when a new class arrives",
    )
    lr_gamma: float = key(0.9999, "exp_reset: learning-rate factor per optimiser step", gt=0, le=1)
    weight_decay: float = key(1e-4, "SGD weight decay", ge=0)
    seed: int = key(1, "random seed: class order, stream, initialisation, draws", ge=0, le=MAX_INT)
    device: str = key("auto", "where to train", allowed="auto, cpu, cuda, cuda:N", runtime=True)
    class_order: Literal["seed", "paper"] = key(
        "seed",
        "class order from the seed, or the dataset's own (the paper's: cifar10 / mnist "
        "seeds 1-3; a folder dataset's: its class_orders.toml)",
    )
    topk: int = key(
        1,
        "also measure top-k accuracy with every evaluation when k > 1 "
        "(top-1 is always stored; the ImageNet presets use 5, as the authors' code reports)",
        ge=1,
    )
    eval_every_epoch: bool = key(False, "also record the best accuracy over epochs (test-set selected, reported apart)")
    reset_head: bool = key(False, "re-create the classifier head at every task (authors' code)")
    train_head: bool = key(
        True, "false: the classifier head is left out of the optimiser (the authors' iCaRL, to reproduce their figure)"
    )
    image_size: int | None = key(None, "image side for folder datasets (default: tiny_imagenet 64, imagenet 224)", ge=8)
    download: bool = key(False, "download a torchvision dataset that is missing", runtime=True)
    threads: int | None = key(None, "CPU threads for torch", ge=1, le=4096, runtime=True)
    # ImageNet scale: input pipeline, GPU fast path, multi-GPU (runtime choices, like device)
    data_pipeline: Literal["auto", "memory", "stream"] = key(
        "auto",
        "ImageFolder datasets: decoded once into memory, or streamed from disk; auto by size",
        runtime=True,
    )
    loader_workers: int | None = key(
        None, "DataLoader decode processes per rank (0: a thread)", ge=0, le=1024, runtime=True
    )
    gpu_decode: bool | Literal["auto"] = key("auto", "decode JPEGs with nvJPEG on a CUDA device", runtime=True)
    amp: Literal["auto", "bf16", "off"] = key("auto", "autocast dtype; auto = bf16 on CUDA, off on CPU", runtime=True)
    channels_last: bool | Literal["auto"] = key("auto", "channels_last convolutions; auto = on CUDA", runtime=True)
    compile: bool | Literal["auto", "step"] = key(
        "auto",
        "torch.compile the backbone (true), or the whole training step of a default-step method (step: "
        "CutMix, forward, loss, backward, optimiser; instead of a CUDA graph); auto = off (measured slower on an H100)",
        runtime=True,
    )
    cuda_graphs: bool | Literal["auto"] = key(
        "auto", "replay plain training steps as CUDA graphs; auto = on for single-process CUDA runs", runtime=True
    )
    gpus: int = key(
        1,
        "processes per node under torchrun (one GPU each; CPU processes on device=cpu)",
        ge=1,
        le=1024,
        runtime=True,
    )

    @property
    def method_spec(self) -> Any: ...  # a methods.spec.MethodSpec (not imported: spec.py imports this module)


def declared_keys() -> dict[str, tuple[Any, dataclasses.Field[Any]]]:
    """Every key `RunSettings` declares, in order: (its type, its `key(...)` declaration)."""
    hints = get_type_hints(RunSettings)
    return {name: (hints[name], vars(RunSettings)[name]) for name in RunSettings.__annotations__}


def param(default: Any, help: str, **bounds: float) -> Any:
    """A method parameter: its default, one line of help, and its allowed range (`ge`, `gt`,
    `le`, `lt`; a `Literal` type lists allowed values). config/ turns it into a config key of
    the runs of its method, with the same checks and messages as every other key; `rmconsole
    config-keys` lists it with the methods that read it."""
    return _declared("param", default, help, bounds)


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
