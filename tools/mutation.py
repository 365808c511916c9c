"""Mutation testing of the science: `python tools/mutation.py [--module NAME ...] [--list] [--report-only]`.

Each mutant is one small change to one function of a science module (an operator swapped, a
comparison loosened, a constant moved, a keyword argument dropped, an in-place update removed,
`min` for `max`, `sum` for `mean`...). A mutant is killed when one of the test files that cover
its module (MODULES below: module -> tests) fails with it in place, or runs past the per-mutant
timeout; the score is

    killed / (mutants - judged equivalent)

Mutants judged equivalent (no test can tell them apart: the same behaviour on every input the
code can receive) are listed in tools/mutation_equivalent.toml with one line of reasoning each
and what the mutant changes; they are left out of the denominator while the mutant of that name
still changes that (a name is an ordinal: when a function grows the report lists the judgements
to make again). The goal: >= 90% over all modules together, none under 80%.

How it runs (the machine is small and shared): the parent process runs the covering test files
once, unmutated (imports and first-call costs paid once); each mutant runs in a forked child that swaps the mutated function's
code object in (every live function object of that code, closures included) and runs
`pytest -x -q -p no:cacheprovider` on the module's test files only, killed after `--timeout`
(default: 3 x the unmutated run + 20 s). Only code inside functions is mutated (default
arguments, decorators, annotations, module-level statements and `raise` messages are not).
A module with more than `--max-per-module` mutants (default 0: all) is sampled with a fixed
seed, and the report says so. Results are kept per module in .mutation/NAME.json, so
`--report-only` prints the score of the last runs and `--module` reruns one module.
Not part of the default test run.
"""

from __future__ import annotations

import argparse
import ast
import gc
import importlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import tomllib
import types
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / ".mutation"
EQUIVALENT = REPO / "tools" / "mutation_equivalent.toml"

# module (a dotted name; a trailing ":f,g" limits it to those functions / classes) -> the test
# files that cover it. Keep these to the fast files that pin the module's behaviour.
SCIENCE = ["tests/cl/test_known_science_bugs.py", "tests/cl/test_science_reference_values.py"]
ONLINE_METHODS = "tests/cl/test_taskfree_methods.py::"
BASELINES = "tests/cl/test_baselines.py::"
DEVIATIONS = "tests/cl/test_followup_deviations.py::"  # the labelled deviations' options (mir_score_mode, scr_views)


# the captured regions outside the step (augmentation, MIR's retrieval, CLIB's importance pass):
# the GPU's path trains the CPU's weights, and each region is capturable and counted inside
SYNCS = "tests/cl/test_step_syncs.py::"
CAPTURED_REGIONS = [
    f"{SYNCS}test_the_graphs_path_trains_the_eager_paths_weights",
    f"{SYNCS}test_the_augmentation_is_a_captured_region_and_leaves_little_outside",
    f"{SYNCS}test_mir_retrieval_is_capturable_and_leaves_little_outside",
    f"{SYNCS}test_a_graphed_mir_retrieval_steps_virtually_at_the_updates_own_rate",
    f"{SYNCS}test_clib_importance_pass_is_capturable_and_counted_inside",
]


def _taskfree(name: str, *tests: str) -> list[str]:
    """A task-free method: the pure pins, its own tests in test_taskfree_methods.py, its protocol run."""
    return [
        "tests/cl/test_method_update_rules.py",
        *(ONLINE_METHODS + t for t in tests),
        f"{ONLINE_METHODS}test_every_task_free_method_runs_the_protocol_to_its_end[{name}]",
    ]


def _survivors(method: str) -> list[str]:
    """The pins of tests/cl/test_method_state_and_schedules.py named test_<method>_..., written against the
    mutants the method's own tests let survive (one node id each, so a module runs only its own)."""
    path = REPO / "tests" / "cl" / "test_method_state_and_schedules.py"
    if not path.exists():
        return []
    tree = ast.parse(path.read_text())
    return [
        f"tests/cl/test_method_state_and_schedules.py::{f.name}"
        for f in tree.body
        if isinstance(f, ast.FunctionDef) and f.name.startswith(f"test_{method}_")
    ]


def _rehearsal(method: str) -> list[str]:
    """The tests of tests/cl/test_online_rehearsal_methods.py named test_<method>_... (issue 40's
    methods: PCR, GSA, OnPro, OCM), in file order: the pure pins first, the protocol run last."""
    path = REPO / "tests" / "cl" / "test_online_rehearsal_methods.py"
    tree = ast.parse(path.read_text())
    return [
        f"tests/cl/test_online_rehearsal_methods.py::{f.name}"
        for f in tree.body
        if isinstance(f, ast.FunctionDef) and f.name.startswith(f"test_{method}_")
    ]


def _taskwise(*names: str) -> list[str]:
    """A method of the RM paper's protocol: its tests in test_baselines.py (names), its short digits
    run and its resume (method names)."""
    out = []
    for n in names:
        if n.startswith("test_"):
            out.append(BASELINES + n)
        else:
            out.append(f"{BASELINES}test_short_digits_run_of_every_method[{n}]")
            if n in ("ewc", "rwalk", "icarl", "gdumb", "bic"):
                out.append(f"{BASELINES}test_resuming_from_a_task_checkpoint_continues_the_same_run[{n}]")
    return out


MODULES: dict[str, list[str]] = {
    "rmconsole.cl.streams": ["tests/cl/test_streams.py", "tests/cl/test_stream_holdout.py", *SCIENCE],
    "rmconsole.cl.memory": ["tests/cl/test_memory.py", *SCIENCE],
    "rmconsole.cl.uncertainty": ["tests/cl/test_uncertainty.py", *SCIENCE],
    "rmconsole.cl.metrics": ["tests/cl/test_metrics_schedule.py", *SCIENCE],
    "rmconsole.cl.schedule": ["tests/cl/test_metrics_schedule.py", *SCIENCE],
    "rmconsole.cl.online": ["tests/cl/test_taskfree_driver_and_anytime.py"],
    # the default step of an MLP without autograd: bit for bit autograd's (its test trains both)
    "rmconsole.cl.mlp_step": ["tests/cl/test_engine_fast_paths.py"],
    # seeds stacked in one process: each seed's weights and draws as alone
    "rmconsole.cl.stacked:StackedModels,StackedStep,SeedStack": ["tests/cl/test_stacked.py"],
    # the graphed step's casts and counters at once: autocast's and batch norm's numbers, bit for bit
    "rmconsole.cl.graphs:ModuleWork,module_work,StepWatch,MethodStep": [
        "tests/cl/test_cuda_graph_step.py",
        "tests/cl/test_stacked.py",
        "tests/cl/test_captured_steps.py",
    ],
    "rmconsole.cl.results:RunRows": ["tests/cl/test_metric_catalog.py"],
    "rmconsole.cl.metrics_anytime": ["tests/cl/test_taskfree_driver_and_anytime.py"],
    # the run summaries (the store asks `summarize`; these are the rules it runs)
    "rmconsole.cl.metric_catalog:mean_std,Metric,_last,_average,_forgetting,_worst_forgetting,_best_epoch,"
    "_topk_rows,_topk,_auc,_online,_anytime_count,summarize": [
        "tests/cl/test_taskfree_driver_and_anytime.py",
        "tests/cl/test_metric_catalog.py",
    ],
    "rmconsole.cl.methods.quadratic": [
        "tests/cl/test_method_update_rules.py",
        f"{BASELINES}test_proximal_penalty_step_is_exact_and_stable_for_any_lambda",
    ],
    "rmconsole.cl.methods.ewcpp": _taskfree(
        "ewcpp", "test_ewcpp_fisher_is_an_ema_of_squared_gradients_and_the_penalty_starts_at_a_boundary"
    ),
    "rmconsole.cl.methods.mir": _taskfree(
        "mir",
        "test_mir_retrieves_the_candidates_whose_loss_rises_most",
        "test_mir_batches_are_stream_plus_retrieved",
        "test_mir_copies_a_models_buffers_as_clones_would",
        "test_mir_virtual_step_is_theta_minus_lr_g_whichever_memory_it_writes",
        "test_mir_look_ahead_keeps_a_parameter_the_loss_does_not_reach",
    )
    + [f"{DEVIATIONS}test_mir_train_mode_scoring_moves_batch_norm_statistics_and_eval_mode_does_not"]
    + CAPTURED_REGIONS,
    "rmconsole.cl.methods.er_ace": _taskfree(
        "er_ace",
        "test_er_ace_spares_the_logits_of_classes_absent_from_the_incoming_batch",
        "test_er_ace_trains_with_its_split",
    ),
    "rmconsole.cl.methods.scr": _taskfree(
        "scr",
        "test_supervised_contrastive_loss_hand_case",
        "test_scr_predicts_the_nearest_class_mean_of_its_memory",
        "test_scr_trains_two_views_of_every_sample",
    )
    + [f"{DEVIATIONS}test_scr_recipe_views_are_the_clean_batch_and_scrs_recipe_of_it"]
    + _survivors("scr"),
    "rmconsole.cl.methods.clib": _taskfree(
        "clib",
        "test_clib_evicts_the_least_important_sample_of_the_largest_class",
        "test_clib_importance_update_is_the_follow_ups_formula",
        "test_clib_adaptive_lr_moves_towards_the_better_rate",
        "test_clib_trains_on_memory_only",
    )
    + _survivors("clib")
    + CAPTURED_REGIONS,
    "rmconsole.cl.methods.gdumb": [
        *_taskfree(
            "gdumb",
            "test_gdumb_balanced_memory_and_a_fresh_model_per_evaluation",
            "test_balanced_rule_counts_the_incoming_sample",
        ),
        *_taskwise(
            "gdumb",
            "test_gdumb_trains_a_fresh_model_on_a_balanced_memory",
            "test_greedy_balanced_sampler_balances_an_imbalanced_stream",
        ),
        *_survivors("gdumb"),
    ],
    "rmconsole.cl.methods.rm": _taskfree(
        "rm",
        "test_rm_port_rebuilds_the_head_trains_stream_only_and_balances_memory",
        "test_rm_paper_variant_keeps_the_head_and_rebuilds_memory_by_uncertainty",
    )
    + _survivors("rm"),
    "rmconsole.cl.methods.bic": _taskfree(
        "bic",
        "test_bic_holds_out_a_shrinking_share_per_class_and_never_trains_on_it",
        "test_bic_distils_from_a_snapshot_taken_at_each_new_class",
        "test_bic_refits_the_current_tasks_bias_layer_before_every_evaluation",
    )
    + _taskwise(
        "bic", "test_bic_holds_out_validation_and_trains_and_uses_the_bias", "test_bic_star_has_no_distillation"
    )
    + _survivors("bic"),
    "rmconsole.cl.methods.pcr": _rehearsal("pcr"),
    "rmconsole.cl.methods.gsa": _rehearsal("gsa"),
    "rmconsole.cl.methods.ocm": ["tests/cl/test_ocm.py"],
    "rmconsole.cl.methods.onpro": ["tests/cl/test_onpro.py"],
    "rmconsole.cl.methods.taskfree": [
        "tests/cl/test_taskfree_driver_and_anytime.py",
        "tests/cl/test_taskfree_protocol.py",
        *CAPTURED_REGIONS,
        *_survivors("taskfree"),
    ],
    "rmconsole.cl.methods.er": ["tests/cl/test_taskfree_protocol.py", *_survivors("er")],
    "rmconsole.cl.methods.base": [
        "tests/cl/test_method_update_rules.py",
        *_survivors("base"),  # the fast pins first: most mutants die there
        *_taskwise("finetune", "ewc", "icarl", "bic"),
    ],
    "rmconsole.cl.methods.ewc": [
        "tests/cl/test_method_update_rules.py",
        *_survivors("ewc"),  # the fast pins first: most mutants die there
        *_taskwise(
            "ewc",
            "test_ewc_consolidation_is_the_sum_of_per_task_penalties",
            "test_ewc_penalty_is_nonzero_after_the_first_task",
            "test_regularised_methods_run_to_the_end_on_digits_with_their_defaults[ewc]",
        ),
    ],
    "rmconsole.cl.methods.rwalk": [
        "tests/cl/test_method_update_rules.py",
        *_survivors("rwalk"),  # the fast pins first: most mutants die there
        *_taskwise(
            "rwalk",
            "test_rwalk_scores_accumulate_and_change",
            "test_rwalk_score_is_the_loss_decrease_over_the_kl_distance",
            "test_regularised_methods_run_to_the_end_on_digits_with_their_defaults[rwalk]",
        ),
    ],
    "rmconsole.cl.methods.icarl": _survivors("icarl")
    + _taskwise(
        "icarl",
        "test_icarl_classifies_by_nearest_mean_of_exemplars",
        "test_icarl_distills_old_classes_and_labels_new_ones",
    ),
    "rmconsole.cl.methods.incremental": _survivors("incremental")
    + _taskwise("bic", "test_new_class_rules", "test_bic_star_has_no_distillation"),
    "rmconsole.cl.methods.joint": _survivors("joint") + _taskwise("joint", "test_joint_sees_every_class_at_once"),
    "rmconsole.cl.methods.finetune": _taskwise("finetune"),
    "rmconsole.cl.methods.spec": ["tests/cl/test_method_params.py", "tests/cl/test_method_interface.py"],
    "rmconsole.cl.methods": ["tests/cl/test_method_params.py", "tests/cl/test_method_interface.py"],
    # the conformance kit: its parts in process first (milliseconds), then its broken methods on the
    # kit's quick data (a mutant that lets one pass dies in seconds), then a method that must pass
    "rmconsole.testing": [
        "tests/platform/test_conformance_kit.py",
        "tests/platform/test_conformance_kit_hooks.py",
        "tests/platform/test_conformance_kit_rules.py",
        "tests/platform/test_conformance_kit_frames.py",
        *(
            f"tests/platform/test_conformance.py::{t}"
            for t in (
                "test_the_clock_is_shifted_everywhere_a_method_reads_it",
                "test_a_hook_no_protocol_calls_is_caught",
                "test_a_hook_of_a_protocol_the_method_does_not_declare_is_caught",
                "test_no_built_in_method_defines_an_unknown_hook",
                "test_bad_arguments_are_one_line",
                "test_a_method_that_fails_to_run_is_reported_with_its_traceback",
                "test_a_checkpoint_the_worker_cannot_load_is_caught",
                "test_each_route_to_test_data_is_caught",
                "test_train_images_read_around_take_are_caught",
                "test_a_memory_grown_inside_one_hook_is_caught",
                "test_a_decision_that_depends_on_the_thread_count_is_caught",
                "test_a_method_that_reads_the_clock_is_caught",
                "test_a_method_peeking_at_test_data_is_caught",
                "test_a_method_overfilling_its_memory_is_caught",
                "test_a_method_keeping_state_outside_its_checkpoint_is_caught",
                "test_a_non_deterministic_method_is_caught",
                "test_draws_from_the_generator_the_protocol_seeds_conform",
                "test_a_conforming_method_passes_every_rule_on_quick_data",
            )
        ),
    ],
}
# the *_params.py files of the methods hold dataclasses only (no function bodies: nothing to mutate)

SWAP_NAMES = {"min": "max", "max": "min", "any": "all", "all": "any"}
SWAP_ATTRS = {
    "mean": "sum",
    "sum": "mean",
    "argmax": "argmin",
    "argmin": "argmax",
    "max": "min",
    "min": "max",
    "amax": "amin",
    "amin": "amax",
    "maximum": "minimum",
    "minimum": "maximum",
    "clamp_min": "clamp_max",
    "clamp_max": "clamp_min",
    "log_softmax": "softmax",
    "softmax": "log_softmax",
    "train": "eval",
    "eval": "train",
    "detach": "clone",
    "add_": "sub_",
    "sub_": "add_",
    "mul_": "div_",
    "div_": "mul_",
}
BINOPS = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
}
CMPOPS = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
QUIET_CALLS = ("log", "report", "phase", "advance", "describe", "debug", "info", "warning")


@dataclass
class Mutant:
    name: str  # module:function#k (k: the mutant's ordinal within its function)
    module: str
    function: str  # the top-level function's qualname (its code object is swapped)
    line: int
    description: str
    site: int  # index of the node in ast.walk order of the module
    variant: str


def _parse(module: str) -> tuple[types.ModuleType, ast.Module, str]:
    mod = importlib.import_module(module)
    path = Path(mod.__file__ or "")
    source = path.read_text()
    return mod, ast.parse(source, filename=str(path)), source


def _functions(tree: ast.Module, only: set[str] | None) -> list[tuple[str, ast.AST]]:
    """(qualname, node) of every function defined at module level or in a class (not nested in a function)."""
    out: list[tuple[str, ast.AST]] = []

    def visit(body: list[ast.stmt], prefix: str, top: str | None) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if only is None or (top or node.name) in only:
                    out.append((prefix + node.name, node))
            elif isinstance(node, ast.ClassDef):
                if only is None or (top or node.name) in only or top is not None:
                    visit(node.body, prefix + node.name + ".", top or node.name)
            elif isinstance(node, ast.If):  # e.g. `if TYPE_CHECKING:` blocks are left alone
                continue

    visit(tree.body, "", None)
    return out


def _skipped_nodes(fn: ast.AST) -> set[int]:
    """ids of nodes never mutated: annotations, defaults, decorators, docstrings, raise statements."""
    skip: set[int] = set()

    def all_of(node: ast.AST | None) -> None:
        if node is not None:
            skip.update(id(n) for n in ast.walk(node))

    for node in ast.walk(fn):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
                if a is not None:
                    all_of(a.annotation)
            for d in [*args.defaults, *args.kw_defaults]:
                all_of(d)
            if not isinstance(node, ast.Lambda):
                all_of(node.returns)
                for d in node.decorator_list:
                    all_of(d)
                body = node.body
                if (
                    body
                    and isinstance(body[0], ast.Expr)
                    and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)
                ):
                    all_of(body[0])
        elif isinstance(node, ast.AnnAssign):
            all_of(node.annotation)
        elif isinstance(node, (ast.Raise, ast.JoinedStr)):
            all_of(node)
        elif isinstance(node, ast.Call) and _call_name(node) in QUIET_CALLS:
            all_of(node)  # log lines and progress reports: what they say is not the science
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and _call_name(node.value) in QUIET_CALLS:
            all_of(node)
    return skip


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _string_context(parents: dict[int, ast.AST], node: ast.AST) -> bool:
    """A string is mutated only where it selects something: compared, a key, an index, a keyword's value."""
    parent = parents.get(id(node))
    if isinstance(parent, ast.Compare):
        return True
    if isinstance(parent, ast.Subscript) and parent.slice is node:
        return True
    if isinstance(parent, ast.Dict) and any(k is node for k in parent.keys):
        return True
    if isinstance(parent, ast.keyword):
        return True
    return False


def _variants(node: ast.AST, parents: dict[int, ast.AST]) -> list[tuple[str, str]]:
    """(variant key, description) of the mutations of one node."""
    out: list[tuple[str, str]] = []
    if isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in BINOPS:
        out.append(("op", f"{type(node.op).__name__} -> {BINOPS[type(node.op)].__name__}"))
    elif isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            if type(op) in CMPOPS:
                out.append((f"cmp{i}", f"{type(op).__name__} -> {CMPOPS[type(op)].__name__}"))
    elif isinstance(node, ast.BoolOp):
        out.append(("bool", "and <-> or"))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
        out.append(("unary", f"drop {type(node.op).__name__}"))
    elif isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, bool):
            out.append(("const", f"{v} -> {not v}"))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append(("const", f"{v!r} -> {v + 1!r}"))
        elif isinstance(v, str) and _string_context(parents, node):
            out.append(("const", f"{v!r} -> 'XX{v}XX'"))
    elif isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Name) and f.id in SWAP_NAMES:
            out.append(("name", f"{f.id} -> {SWAP_NAMES[f.id]}"))
        if isinstance(f, ast.Attribute) and f.attr in SWAP_ATTRS:
            out.append(("attr", f".{f.attr} -> .{SWAP_ATTRS[f.attr]}"))
        for i, kw in enumerate(node.keywords):
            if kw.arg is not None:
                out.append((f"kw{i}", f"drop {kw.arg}="))
    elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        out.append(("stmt", "statement removed"))
    elif isinstance(node, ast.Break):
        out.append(("jump", "break -> continue"))
    elif isinstance(node, ast.Continue):
        out.append(("jump", "continue -> break"))
    return out


def _apply(node: ast.AST, variant: str) -> ast.AST:
    """Mutate `node` in place (returns the node that replaces it in its parent)."""
    if variant == "op":
        node.op = BINOPS[type(node.op)]()  # type: ignore[attr-defined]
    elif variant.startswith("cmp"):
        i = int(variant[3:])
        node.ops[i] = CMPOPS[type(node.ops[i])]()  # type: ignore[attr-defined]
    elif variant == "bool":
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()  # type: ignore[attr-defined]
    elif variant == "unary":
        return node.operand  # type: ignore[attr-defined,no-any-return]
    elif variant == "const":
        v = node.value  # type: ignore[attr-defined]
        node.value = (not v) if isinstance(v, bool) else v + 1 if isinstance(v, (int, float)) else f"XX{v}XX"  # type: ignore[attr-defined]
    elif variant == "name":
        node.func.id = SWAP_NAMES[node.func.id]  # type: ignore[attr-defined]
    elif variant == "attr":
        node.func.attr = SWAP_ATTRS[node.func.attr]  # type: ignore[attr-defined]
    elif variant.startswith("kw"):
        del node.keywords[int(variant[2:])]  # type: ignore[attr-defined]
    elif variant == "stmt":
        return ast.copy_location(ast.Pass(), node)
    elif variant == "jump":
        return ast.copy_location(ast.Continue() if isinstance(node, ast.Break) else ast.Break(), node)
    return node


def mutants_of(spec: str) -> list[Mutant]:
    module, _, only_text = spec.partition(":")
    only = set(only_text.split(",")) if only_text else None
    _, tree, source = _parse(module)
    index = {id(n): i for i, n in enumerate(ast.walk(tree))}
    out: list[Mutant] = []
    for qualname, fn in _functions(tree, only):
        skip = _skipped_nodes(fn)
        parents = {id(c): p for p in ast.walk(fn) for c in ast.iter_child_nodes(p)}
        k = 0
        for node in ast.walk(fn):
            if id(node) in skip or node is fn:
                continue
            for variant, description in _variants(node, parents):
                k += 1
                line = getattr(node, "lineno", 0)
                text = source.splitlines()[line - 1].strip() if line else ""
                out.append(
                    Mutant(
                        f"{module}:{qualname}#{k}",
                        spec,
                        qualname,
                        line,
                        f"line {line}: {description} in `{text}`",
                        index[id(node)],
                        variant,
                    )
                )
    return out


def _mutated_code(m: Mutant) -> types.CodeType:
    module = m.module.partition(":")[0]
    mod, tree, _ = _parse(module)
    nodes = list(ast.walk(tree))
    target = nodes[m.site]
    parents = {
        id(c): (p, field)
        for p in nodes
        for field, value in ast.iter_fields(p)
        for c in (value if isinstance(value, list) else [value])
        if isinstance(c, ast.AST)
    }
    new = _apply(target, m.variant)
    if new is not target:
        parent, field = parents[id(target)]
        value = getattr(parent, field)
        if isinstance(value, list):
            value[value.index(target)] = new
        else:
            setattr(parent, field, new)
    ast.fix_missing_locations(tree)
    return compile(tree, mod.__file__ or "", "exec")


def _codes(code: types.CodeType) -> list[types.CodeType]:
    out = [code]
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out.extend(_codes(c))
    return out


def _key(code: types.CodeType, seen: dict[tuple[str, int], int]) -> tuple[str, int, int]:
    base = (code.co_qualname, code.co_firstlineno)
    seen[base] = seen.get(base, -1) + 1
    return (*base, seen[base])


def install(m: Mutant) -> int:
    """Swap the mutated code into every live function of `m.function` (and of its nested functions)."""
    module = importlib.import_module(m.module.partition(":")[0])
    new_codes = {}
    seen: dict[tuple[str, int], int] = {}
    for c in _codes(_mutated_code(m)):
        new_codes[_key(c, seen)] = c
    filename = module.__file__
    seen = {}
    original = compile(ast.parse(Path(filename or "").read_text()), filename or "", "exec")
    by_shape = {}
    for c in _codes(original):
        by_shape[(c.co_qualname, c.co_firstlineno, c.co_code, c.co_consts.__len__())] = _key(c, seen)
    prefix = m.function
    swapped = 0
    for obj in _LIVE.get(filename or "", []):
        q = obj.__code__.co_qualname
        if q != prefix and not q.startswith(prefix + ".<locals>."):
            continue
        c = obj.__code__
        key = by_shape.get((c.co_qualname, c.co_firstlineno, c.co_code, len(c.co_consts)))
        if key is None or key not in new_codes:
            continue
        obj.__code__ = new_codes[key]
        swapped += 1
    return swapped


_LIVE: dict[str, list[types.FunctionType]] = {}  # file -> its live function objects (taken before gc.freeze)


def _collect_live(module: str) -> None:
    filename = importlib.import_module(module).__file__ or ""
    _LIVE[filename] = [
        o for o in gc.get_objects() if isinstance(o, types.FunctionType) and o.__code__.co_filename == filename
    ]


def run_tests(tests: list[str], timeout: float, mutant: Mutant | None, log: Path | None = None) -> tuple[str, float]:
    """Fork; in the child install the mutant and run pytest (its output to `log`, else
    discarded). -> (status, seconds)."""
    began = time.monotonic()
    pid = os.fork()
    if pid == 0:  # child
        code = 3
        try:
            out = os.open(log or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(out, 1)
            os.dup2(out, 2)
            if mutant is not None and install(mutant) == 0:
                os._exit(4)
            import pytest

            code = int(
                pytest.main(
                    [
                        *tests,
                        "-n",
                        "0",
                        "-x",
                        "-q",
                        "-p",
                        "no:cacheprovider",
                        "-p",
                        "no:unraisableexception",
                        "-m",
                        "not slow and not gpu",
                    ]
                )
            )
        except BaseException:  # noqa: BLE001 - a mutant that breaks the import machinery is killed
            code = 1
        os._exit(code)
    deadline = began + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout", time.monotonic() - began
        time.sleep(0.05)
    seconds = time.monotonic() - began
    if os.WIFSIGNALED(status):
        return "crashed", seconds
    code = os.WEXITSTATUS(status)
    return {0: "survived", 1: "killed", 2: "interrupted", 4: "not installed", 5: "no tests"}.get(
        code, f"exit {code}"
    ), seconds


# Per module, attributes of it set for the parent's warm-up only: the conformance kit's thread check
# at one thread. libgomp's thread pool does not survive fork: a forked child whose parent has started
# it hangs at its first parallel region (every child of the kit's module hung: no result).
PRELOAD_PATCH: dict[str, dict[str, object]] = {"rmconsole.testing": {"_MORE_THREADS": 1}}


def _preload(tests: list[str], module: str) -> None:
    """Run the test files once in the parent, so each forked child starts warm (imports done,
    first-call costs paid). The unmutated run in a child that follows checks the fork is sound."""
    import pytest

    devnull = os.open(os.devnull, os.O_WRONLY)
    saved = os.dup(1), os.dup(2)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    patched = PRELOAD_PATCH.get(module, {})
    saved_attrs = {name: getattr(importlib.import_module(module), name) for name in patched}
    for name, value in patched.items():
        setattr(importlib.import_module(module), name, value)
    try:  # a full unmutated run: lazy imports and first-call set-ups happen here, once
        pytest.main(
            [*tests, "-n", "0", "-q", "-p", "no:cacheprovider", "-m", "not slow and not gpu"]
        )  # in this process: xdist workers would not see the mutant
    finally:
        for name, value in saved_attrs.items():
            setattr(importlib.import_module(module), name, value)
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)


def short(spec: str) -> str:
    return spec.partition(":")[0].removeprefix("rmconsole.cl.")


def run_module(spec: str, args: argparse.Namespace) -> None:
    tests = [t for t in MODULES[spec] if (REPO / t.partition("::")[0]).exists()]
    if not tests:
        print(f"{short(spec)}: none of its test files exist: {' '.join(MODULES[spec])}", file=sys.stderr)
        sys.exit(2)
    mutants = mutants_of(spec)
    total = len(mutants)
    sampled = False
    previous: dict = {}
    if args.mutant:  # rerun these (e.g. after a new test), keeping the other results of the last run
        path = RESULTS / f"{short(spec)}.json"
        previous = json.loads(path.read_text()) if path.exists() else {}
        mutants = [m for m in mutants if m.name in set(args.mutant)]
        sampled = previous.get("sampled", False)
    elif args.max_per_module and total > args.max_per_module:
        mutants = sorted(random.Random(spec).sample(mutants, args.max_per_module), key=lambda m: m.site)
        sampled = True
    _preload(tests, spec.partition(":")[0])
    _collect_live(spec.partition(":")[0])
    gc.collect()
    gc.freeze()  # the children's collections (pytest runs several) then skip the parent's heap
    RESULTS.mkdir(exist_ok=True)
    log = RESULTS / f"{short(spec)}.unmutated.log"  # what failed, when the unmutated run fails
    status, seconds = run_tests(tests, 3600, None, log)
    if status != "survived":
        failed = [line for line in log.read_text(errors="replace").splitlines() if line.startswith("FAILED ")]
        print(
            f"{short(spec)}: the unmutated tests do not pass ({status}): {' '.join(tests)}\n"
            + "".join(f"  {line}\n" for line in failed)
            + f"  (pytest's output: {log})",
            file=sys.stderr,
        )
        sys.exit(2)
    timeout = args.timeout or 3 * seconds + 20
    print(
        f"{short(spec)}: {len(mutants)} mutants{f' (sampled from {total})' if sampled else ''}, tests "
        f"{' '.join(Path(t).name for t in tests)} ({seconds:.1f} s unmutated, timeout {timeout:.0f} s)",
        flush=True,
    )
    results = dict(previous.get("results", {}))
    for i, m in enumerate(mutants):
        st, s = run_tests(tests, timeout, m)
        results[m.name] = {"status": st, "description": m.description, "seconds": round(s, 2)}
        if args.verbose or st != "killed":
            print(f"  [{i + 1}/{len(mutants)}] {st:9s} {m.name}  {m.description}", flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{short(spec)}.json").write_text(
        json.dumps({"module": spec, "total": total, "sampled": sampled, "tests": tests, "results": results}, indent=1)
    )


def what_changes(description: str) -> str:
    """A mutant's description without its line number: what the judgement of an equivalent was made
    on, unchanged when code above it moves."""
    return description.split(": ", 1)[1] if description.startswith("line ") else description


def judged_equivalent() -> dict[str, dict[str, str]]:
    """tools/mutation_equivalent.toml: name -> {mutant: what it changes, why: the reasoning}."""
    if not EQUIVALENT.exists():
        return {}
    table = tomllib.loads(EQUIVALENT.read_text()).get("equivalent", {})
    return {n: v for n, v in table.items() if isinstance(v, dict) and {"mutant", "why"} <= v.keys()}


def report(specs: list[str]) -> int:
    judged_table = judged_equivalent()
    stale: list[tuple[str, str, str]] = []
    equivalent: set[str] = set()
    rows = []
    all_killed = all_denominator = 0
    worst = 1.0
    survivors = []
    for spec in specs:
        path = RESULTS / f"{short(spec)}.json"
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        results = data["results"]
        for n, r in results.items():  # a name is an ordinal: a judgement holds only for the mutant it was made on
            if n in judged_table:
                if what_changes(r["description"]) == judged_table[n]["mutant"]:
                    equivalent.add(n)
                else:
                    stale.append((n, judged_table[n]["mutant"], what_changes(r["description"])))
        killed = sum(1 for r in results.values() if r["status"] in ("killed", "timeout", "crashed"))
        judged = [
            n for n, r in results.items() if n in equivalent and r["status"] not in ("killed", "timeout", "crashed")
        ]
        denominator = len(results) - len(judged)
        score = killed / denominator if denominator else 1.0
        worst = min(worst, score) if denominator else worst
        all_killed += killed
        all_denominator += denominator
        rows.append((short(spec), len(results), data["total"] if data["sampled"] else None, killed, len(judged), score))
        survivors += [
            (n, r)
            for n, r in results.items()
            if r["status"] not in ("killed", "timeout", "crashed") and n not in equivalent
        ]
    if not rows:
        print("no results under .mutation/: run without --report-only first", file=sys.stderr)
        return 2
    print(f"{'module':28s} {'mutants':>8s} {'killed':>7s} {'equiv':>6s} {'score':>7s}")
    for name, n, total, killed, judged, score in rows:
        sample = f" (sampled from {total})" if total else ""
        print(f"{name:28s} {n:8d} {killed:7d} {judged:6d} {100 * score:6.1f}%{sample}")
    overall = all_killed / all_denominator if all_denominator else 1.0
    print(
        f"{'all':28s} {sum(r[1] for r in rows):8d} {all_killed:7d} {sum(r[4] for r in rows):6d} {100 * overall:6.1f}%"
    )
    if stale:
        print(f"equivalents judged on another mutant (the function changed; judge again): {len(stale)}")
        for n, was, now in stale:
            print(f"  {n}: judged `{was}`, now `{now}`")
    if survivors:
        print(f"not killed and not judged equivalent: {len(survivors)}")
        for n, r in survivors:
            print(f"  {n} ({r['status']}) {r['description']}")
    print(f"mutation score: {100 * overall:.1f}% over all modules, lowest module {100 * worst:.1f}%")
    return 0 if overall >= 0.9 and worst >= 0.8 else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--module", action="append", default=[], help="run only this module (e.g. online, methods.ewcpp; repeatable)"
    )
    parser.add_argument("--timeout", type=float, default=0.0, help="seconds per mutant (default 3 x unmutated + 20)")
    parser.add_argument("--max-per-module", type=int, default=0, help="sample at most this many mutants per module")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--report-only", action="store_true", help="print the score of the last runs")
    parser.add_argument(
        "--mutant",
        action="append",
        default=[],
        help="rerun only this mutant (module:function#k; with one --module), keeping the rest",
    )
    parser.add_argument("--no-report", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("-v", "--verbose", action="store_true", help="print killed mutants too")
    args = parser.parse_args()
    os.chdir(REPO)
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "tests"))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("RMCONSOLE_TEST_DATA", str(REPO.parent / "shared" / "data"))
    specs = list(MODULES)
    if args.module:
        wanted = set(args.module)
        specs = [s for s in MODULES if short(s) in wanted or s.partition(":")[0] in wanted]
        unknown = wanted - {short(s) for s in specs} - {s.partition(":")[0] for s in specs}
        if unknown:
            print(
                f"--module: unknown {', '.join(sorted(unknown))}; known: {', '.join(short(s) for s in MODULES)}",
                file=sys.stderr,
            )
            return 2
    if args.list:
        for spec in specs:
            ms = mutants_of(spec)
            print(f"{short(spec)}: {len(ms)} mutants")
            if args.verbose:
                for m in ms:
                    print(f"  {m.name}  {m.description}")
        return 0
    if not args.report_only:
        if len(specs) > 1:  # one fresh process per module: each warms up on its own tests
            for spec in specs:
                extra = [f"--timeout={args.timeout}", f"--max-per-module={args.max_per_module}"]
                subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--module",
                        short(spec),
                        "--no-report",
                        *extra,
                        *(["-v"] if args.verbose else []),
                    ],
                    check=False,
                )
        else:
            import torch

            torch.set_num_threads(1)
            run_module(specs[0], args)
    if args.no_report:
        return 0
    return report(specs if args.module else list(MODULES))


if __name__ == "__main__":
    sys.exit(main())
