"""The config keys come from their declarations: the keys every run has plus each method's own
params class (a run's config holds its method's only). The keys table (`rmconsole config-keys`,
docs/configuration.md) is generated from them."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from typing import Literal

import pytest
import torch
from conftest import REPO
from support.cli import in_process

from rmconsole import config
from rmconsole.cl.methods import REGISTRY, MethodSpec, method_class
from rmconsole.cl.methods.bic_params import BiCParams
from rmconsole.cl.methods.ewc_params import EWCParams
from rmconsole.cl.methods.rm_params import RMParams
from rmconsole.cl.settings import BOUNDS, MethodParams, declared_keys, param
from rmconsole.config import COMMON_KEYS, KEYS, RunConfig, config_model, configuration_page, key_table, load_config


def test_configuration_page_is_up_to_date() -> None:
    page = (REPO / "docs" / "configuration.md").read_text()
    assert page == configuration_page(), "regenerate: rmconsole config-keys --markdown > docs/configuration.md"


def test_key_table_lists_every_key_once_with_what_is_allowed_and_who_reads_it() -> None:
    rows = {row.key: row for row in key_table()}
    assert [row.key for row in key_table()] == list(KEYS) and KEYS[: len(COMMON_KEYS)] == COMMON_KEYS
    assert rows["reg_weight"].methods == "ewc, rwalk" and rows["reg_weight"].default == "unset"
    assert rows["new_classes"].methods == "icarl, bic, bic_star" and rows["new_classes"].allowed == "task, unseen"
    assert rows["rwalk_alpha"].allowed == "> 0 and <= 1" and rows["rwalk_alpha"].default == "0.9"
    assert rows["lr"].methods == "all" and rows["lr"].type == "number"
    assert rows["dataset"].default == "required" and "mnist" in rows["dataset"].allowed
    assert rows["gpu_decode"].allowed == "auto, true, false" and rows["augment"].default == "cutmix+autoaug"
    assert all(row.help for row in rows.values()), [k for k, r in rows.items() if not r.help]


def test_every_method_param_is_a_key_of_its_runs_only_with_its_declared_default_and_help() -> None:
    for name, spec in REGISTRY.items():
        model = config_model(spec)
        assert set(model.model_fields) == set(COMMON_KEYS) | set(spec.keys), name
        for f in dataclasses.fields(spec.params):
            key = model.model_fields[f.name]
            assert (key.default, key.description) == (f.default, f.metadata["help"]), (name, f.name)
    assert set(RunConfig.model_fields) == set(COMMON_KEYS)
    _, rm = load_config(None)
    assert "bic_temperature" not in rm.to_dict() and "rm_variant" in rm.to_dict()
    assert list(rm.to_dict())[: len(COMMON_KEYS)] == list(COMMON_KEYS)  # flat: common keys, then the method's


def test_the_keys_every_run_has_are_declared_once_in_cl_settings() -> None:
    """RunConfig's fields are cl/settings.py's RunSettings declarations, in their order, with their
    type, default, help and bounds: config/ declares no key of its own (issue 39)."""
    declared = declared_keys()
    assert list(RunConfig.model_fields) == list(declared) == list(COMMON_KEYS)
    for name, (hint, key) in declared.items():
        field = RunConfig.model_fields[name]
        required = key.default is dataclasses.MISSING
        assert field.annotation == hint and field.description == key.metadata["help"], name
        assert field.is_required() == required and (required or field.default == key.default), name
        bounds = {b: getattr(m, b) for m in field.metadata for b in BOUNDS if hasattr(m, b)}
        assert bounds == key.metadata["bounds"], name


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["method=rwalk", "rwalk_alpha=0"], "rwalk_alpha=0: Input should be greater than 0"),
        (["method=rwalk", "rwalk_interval=1.5"], "rwalk_interval=1.5: a float (1.5) for an integer key"),
        (["method=ewc", "reg_weight=true"], "reg_weight=true: expected a number, not a boolean"),
        (["method=icarl", "new_classes=all"], "new_classes='all': allowed: 'task' or 'unseen'"),
        (["method=bic", "bic_val_fraction=0.99"], "bic_val_fraction=0.99: holding out 198 of memory_size=200"),
        (["bic_temperature=3"], "bic_temperature=3: read by bic, bic_star, not by method=rm"),
        (
            ["method=finetune", "new_classes=unseen"],
            "new_classes=unseen: read by icarl, bic, bic_star, not by method=finetune",
        ),
        (["bic_temprature=3"], "unknown config key 'bic_temprature' (did you mean bic_temperature?)"),
        (["colour=blue"], "unknown config key 'colour'; `rmconsole config-keys` lists the keys"),
    ],
)
def test_a_bad_method_param_gets_one_line_naming_it(overrides: list[str], message: str) -> None:
    with pytest.raises(config.ConfigError) as err:
        load_config(None, overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_method_reads_its_own_params_from_the_run() -> None:
    from rmconsole.cl.data import load_digits
    from rmconsole.cl.loop import build_protocol, make_augmenter
    from rmconsole.cl.methods import Setup

    data, cpu = load_digits(), torch.device("cpu")
    for method, overrides, params_type in [
        ("ewc", {"reg_weight": 7.0}, EWCParams),
        ("bic", {"bic_temperature": 3.0, "new_classes": "unseen"}, BiCParams),
        ("rm", {"rm_variant": "paper"}, RMParams),
        ("finetune", {}, MethodParams),
    ]:
        _, cfg = load_config(None, {"method": method, "epochs": 1, **overrides})
        proto = build_protocol(cfg, data)
        learner = method_class(method)(
            Setup(cfg, data, proto.train_labels, proto.test_labels, proto.groups, cpu, make_augmenter(cfg, data, cpu))
        )
        assert type(learner.params) is params_type
        assert {k: getattr(learner.params, k) for k in overrides} == overrides
    assert learner.params == MethodParams()  # finetune has no keys of its own


def test_two_methods_declaring_one_key_differently_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    @dataclasses.dataclass(frozen=True)
    class Clashing(MethodParams):
        new_classes: Literal["all"] = param("all", "another meaning of new_classes")

    clash = MethodSpec("clash", "rmconsole.cl.methods.finetune:Finetune", Clashing)
    with pytest.raises(config.ConfigError, match=r"new_classes.*declared unlike method 'icarl'"):
        config.config_model(clash)


def test_a_params_key_named_like_a_common_key_is_refused() -> None:
    @dataclasses.dataclass(frozen=True)
    class Shadowing(MethodParams):
        lr: float = param(0.1, "a second learning rate")

    with pytest.raises(config.ConfigError, match="'lr' has the name of a key every run has"):
        config.config_model(MethodSpec("shadow", "rmconsole.cl.methods.finetune:Finetune", Shadowing))


def test_a_preset_keeps_its_method_tables_and_drops_other_methods_top_level_keys() -> None:
    """A BiC preset run as RM: its bic_* keys are BiC's, set aside for the RM run; an RM key in
    [methods.rm] of the follow-up's presets still applies to RM only."""
    _, rm = load_config("mnist-blurry10-online-bic", {"method": "rm"})
    assert rm.method == "rm" and not any(k.startswith("bic_") or k == "new_classes" for k in rm.to_dict())
    _, bic = load_config("mnist-blurry10-online-bic")
    assert bic.to_dict()["bic_temperature"] == 2.0 and bic.memory_policy is not None
    _, er = load_config("cifar10-iblurry50-10")
    _, on_rm = load_config("cifar10-iblurry50-10", {"method": "rm"})
    assert (er.optimizer, on_rm.optimizer) == ("adam", "sgd")  # [methods.rm] as before
    with pytest.raises(config.ConfigError, match="bic_temperature=3: read by bic, bic_star, not by method=rm"):
        config.build_config(
            {"dataset": "digits", "model": "mlp400", "memory_size": 100, "methods": {"rm": {"bic_temperature": 3}}}
        )


def test_the_keys_table_names_each_method_key_s_readers() -> None:
    rows = {row.key: row for row in key_table()}
    assert rows["bic_temperature"].methods == "bic, bic_star" and rows["rm_variant"].methods == "rm"
    assert rows["ewcpp_alpha"].methods == "ewcpp" and rows["imp_update_period"].methods == "clib"
    assert config.method_reads("bic", "bic_temperature") and not config.method_reads("rm", "bic_temperature")
    assert config.method_reads("rm", "lr") and config.method_reads(None, "bic_temperature")


def test_config_keys_command_prints_the_table_and_the_page() -> None:
    table = in_process("config-keys")
    assert table.returncode == 0, table.stderr
    assert "rwalk_interval" in table.stdout and "bic_star" in table.stdout
    page = in_process("config-keys", "--markdown")
    assert page.returncode == 0 and page.stdout == configuration_page()


def test_validating_a_config_does_not_import_torch() -> None:
    """The CLI and the TUI validate configs on every launch and keystroke: seconds saved."""
    code = (
        "import sys; from rmconsole.config import load_config, key_table; "
        "load_config(None, ['method=bic', 'bic_temperature=2']); key_table(); "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
