"""One file per continual-learning method, and REGISTRY, the built-ins' declarations.

To add a method: write `cl/methods/<name>.py` (a `Method[P]` subclass that overrides the hooks
that make it different: see the table in base.py), its parameter class `P` in a torch-free
`<name>_params.py` beside it (none: `MethodParams`), and its `MethodSpec` line in REGISTRY. A
method in another package declares the same `MethodSpec` under the entry-point group
`rmconsole.methods` (spec.py); `rmconsole.methods` (outside cl/) is the registry of both.

This module, spec.py and the *_params.py modules stay free of torch: config.py reads REGISTRY
to validate a run's method and its keys. The method classes (and torch) load on first use:
`method_class(name or spec)`, or `METHODS` / `Method` / `Setup` / `Task` as attributes of this
package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..settings import MethodParams
from .bic_params import BiCParams
from .clib_params import CLIBParams
from .coda_params import CODAParams
from .dualprompt_params import DualPromptParams
from .ewc_params import EWCParams
from .ewcpp_params import EWCppParams
from .gsa_params import GSAParams
from .icarl_params import ICaRLParams
from .knn_params import KNNParams
from .l2p_params import L2PParams
from .mir_params import MIRParams
from .mvp_params import MVPParams
from .ocm_params import OCMParams
from .onpro_params import OnProParams
from .pcr_params import PCRParams
from .rm_params import RMParams
from .rwalk_params import RwalkParams
from .scr_params import SCRParams
from .spec import MethodSpec

if TYPE_CHECKING:
    from .base import Method, Setup, Task

BOTH = ("task", "task-free")
_HERE = __name__  # built-ins name their classes by absolute module path, as a plug-in does


def _spec(
    name: str, implementation: str, params: type[MethodParams], protocols: tuple[str, ...], summary: str
) -> MethodSpec:
    return MethodSpec(name, f"{_HERE}.{implementation}", params, protocols, summary)


REGISTRY: dict[str, MethodSpec] = {
    spec.name: spec
    for spec in [
        _spec(
            "rm",
            "rm:RainbowMemory",
            RMParams,
            BOTH,
            "Rainbow Memory (Bang et al., CVPR 2021): uncertainty-diverse memory, data augmentation",
        ),
        _spec(
            "finetune",
            "finetune:Finetune",
            MethodParams,
            ("task",),
            "the RM authors' baseline: random memory, shuffled in with the stream",
        ),
        _spec(
            "er", "er:ER", MethodParams, BOTH, "experience replay: reservoir memory, half stream / half memory batches"
        ),
        _spec(
            "ewc", "ewc:EWC", EWCParams, ("task",), "EWC (Kirkpatrick et al. 2017): a Fisher-weighted quadratic penalty"
        ),
        _spec(
            "rwalk",
            "rwalk:Rwalk",
            RwalkParams,
            ("task",),
            "Rwalk (Chaudhry et al. 2018): EWC++ Fisher plus path-integral importance",
        ),
        _spec(
            "icarl",
            "icarl:ICaRL",
            ICaRLParams,
            ("task",),
            "iCaRL (Rebuffi et al. 2017): herding exemplars, distillation, nearest-mean classifier",
        ),
        _spec(
            "gdumb",
            "gdumb:GDumb",
            MethodParams,
            BOTH,
            "GDumb (Prabhu et al. 2020): a greedy class-balanced memory, the model trained from scratch on it",
        ),
        _spec("bic", "bic:BiC", BiCParams, BOTH, "BiC (Wu et al. 2019): distillation plus a bias-correction layer"),
        _spec("bic_star", "bic:BiCStar", BiCParams, BOTH, "BiC as the RM authors ran it (BiC*)"),
        _spec("joint", "joint:Joint", MethodParams, ("task",), "joint training on every task at once: the upper bound"),
        # the follow-up's online methods (task-free streams only)
        _spec(
            "ewcpp",
            "ewcpp:EWCpp",
            EWCppParams,
            ("task-free",),
            "EWC++ (Chaudhry et al. 2018): an online Fisher and one penalty slot",
        ),
        _spec(
            "mir",
            "mir:MIR",
            MIRParams,
            ("task-free",),
            "MIR (Aljundi et al. 2019): replay the memory samples a virtual step would hurt most",
        ),
        _spec(
            "er_ace",
            "er_ace:ERACE",
            MethodParams,
            ("task-free",),
            "ER-ACE (Caccia et al. 2022): asymmetric cross-entropy on the stream batch",
        ),
        _spec(
            "scr",
            "scr:SCR",
            SCRParams,
            ("task-free",),
            "SCR (Mai et al. 2021): supervised contrastive replay, nearest-class-mean classifier",
        ),
        _spec(
            "clib",
            "clib:CLIB",
            CLIBParams,
            ("task-free",),
            "CLIB (Koh et al., ICLR 2022): sample-wise importance memory, adaptive learning rate",
        ),
        _spec(
            "knn",
            "knn:KNN",
            KNNParams,
            ("task-free",),
            "kNN on frozen features (Prabhu et al. 2023, ACM): every streamed sample's feature stored, k-NN vote",
        ),
        _spec(
            "l2p",
            "l2p:L2P",
            L2PParams,
            ("task-free",),
            "L2P (Wang et al., CVPR 2022): a prompt pool on a frozen ViT, prompts chosen by key-query matching",
        ),
        _spec(
            "dualprompt",
            "dualprompt:DualPrompt",
            DualPromptParams,
            ("task-free",),
            "DualPrompt (Wang et al., ECCV 2022): G- and E-prompts as attention prefixes of a frozen ViT",
        ),
        _spec(
            "coda",
            "coda:CODAPrompt",
            CODAParams,
            ("task-free",),
            "CODA-Prompt (Smith et al., CVPR 2023): attention-weighted orthogonal prompt components, prefix-tuned",
        ),
        _spec(
            "pcr",
            "pcr:PCR",
            PCRParams,
            ("task-free",),
            "PCR (Lin et al., CVPR 2023): proxy-based contrastive replay, a cosine classifier",
        ),
        _spec(
            "gsa",
            "gsa:GSA",
            GSAParams,
            ("task-free",),
            "GSA (Guo et al., CVPR 2023): new-class loss plus a replay loss weighted by each class's gradient ratio",
        ),
        _spec(
            "onpro",
            "onpro:OnPro",
            OnProParams,
            ("task-free",),
            "OnPro (Wei et al., ICCV 2023): prototype equilibrium and prototype-fed mixup of the replayed samples",
        ),
        _spec(
            "mvp", "mvp:MVP", MVPParams, ("task-free",), "MVP (Moon et al., ICCV 2023): prompts, logit masks, L_CVPT"
        ),
        _spec(
            "ocm",
            "ocm:OCM",
            OCMParams,
            ("task-free",),
            "OCM (Guo et al., ICML 2022): InfoNCE on 16 transformed copies, MI with the previous model",
        ),
    ]
}


def builtin_spec(name: str) -> MethodSpec:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(sorted(REGISTRY))}") from None


def method_class(method: str | MethodSpec) -> type[Method]:
    """The class of a built-in method (by name) or of any method's spec, imported now, checked to
    be a `Method` whose params type is the one its spec declares (the config validated those keys)."""
    from .base import Method

    spec = builtin_spec(method) if isinstance(method, str) else method
    cls = spec.load()
    if not (isinstance(cls, type) and issubclass(cls, Method)):
        raise TypeError(
            f"method {spec.name!r}: {spec.implementation} is not a Method subclass (rmconsole.cl.methods.base.Method)"
        )
    if cls.params_type is not spec.params:
        raise TypeError(
            f"method {spec.name!r}: its class reads {cls.params_type.__name__} but its spec declares "
            f"{spec.params.__name__}; write class {cls.__name__}(..., Method[{spec.params.__name__}])"
        )
    return cls


def params_class(name: str) -> type[MethodParams]:
    return builtin_spec(name).params


def __getattr__(name: str) -> Any:
    if name == "METHODS":  # name -> class, aliases included
        return {method: method_class(method) for method in REGISTRY}
    if name in ("Method", "Setup", "Task"):
        from . import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "METHODS",
    "REGISTRY",
    "Method",
    "MethodSpec",
    "Setup",
    "Task",
    "builtin_spec",
    "method_class",
    "params_class",
]
