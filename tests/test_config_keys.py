"""The config keys come from their declarations: RunKeys plus every method's params class.
The keys table (`rmconsole config-keys`, docs/configuration.md) is generated from them."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from typing import Literal

import pytest
import torch
from conftest import REPO, rmconsole

from rmconsole import config
from rmconsole.cl.methods import REGISTRY, Entry, method_class
from rmconsole.cl.methods.params import BiCParams, RegularisedParams, RMParams
from rmconsole.cl.settings import MethodParams, param
from rmconsole.config import KEYS, RunConfig, configuration_page, key_table, load_config


def test_configuration_page_is_up_to_date() -> None:
    page = (REPO / "docs" / "configuration.md").read_text()
    assert page == configuration_page(), "regenerate: rmconsole config-keys --markdown > docs/configuration.md"


def test_key_table_lists_every_key_once_with_what_is_allowed_and_who_reads_it() -> None:
    rows = {row.key: row for row in key_table()}
    assert [row.key for row in key_table()] == list(KEYS)
    assert rows["reg_weight"].methods == "ewc, rwalk" and rows["reg_weight"].default == "unset"
    assert rows["new_classes"].methods == "icarl, bic, bic_star" and rows["new_classes"].allowed == "task, unseen"
    assert rows["rwalk_alpha"].allowed == "> 0 and <= 1" and rows["rwalk_alpha"].default == "0.9"
    assert rows["lr"].methods == "all" and rows["lr"].type == "number"
    assert rows["dataset"].default == "required" and "mnist" in rows["dataset"].allowed
    assert rows["gpu_decode"].allowed == "auto, true, false" and rows["augment"].default == "cutmix+autoaug"
    assert all(row.help for row in rows.values()), [k for k, r in rows.items() if not r.help]


def test_every_method_param_is_a_config_key_with_its_declared_default_and_help() -> None:
    for name, entry in REGISTRY.items():
        for f in dataclasses.fields(entry.params):
            key = RunConfig.model_fields[f.name]
            assert (key.default, key.description) == (f.default, f.metadata["help"]), (name, f.name)


@pytest.mark.parametrize("overrides, message", [
    (["rwalk_alpha=0"], "rwalk_alpha=0: Input should be greater than 0"),
    (["rwalk_interval=1.5"], "rwalk_interval=1.5: Input should be a valid integer"),
    (["reg_weight=true"], "reg_weight=true: expected a number, not a boolean"),
    (["new_classes=all"], "new_classes='all': allowed: 'task' or 'unseen'"),
    (["method=bic", "bic_val_fraction=0.99"], "bic_val_fraction=0.99: holding out 198 of memory_size=200"),
])
def test_a_bad_method_param_gets_one_line_naming_it(overrides: list[str], message: str) -> None:
    with pytest.raises(config.ConfigError) as err:
        load_config(None, overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_method_reads_its_own_params_from_the_run() -> None:
    from rmconsole.cl.data import load_digits
    from rmconsole.cl.loop import build_protocol, make_augmenter
    from rmconsole.cl.methods import Setup

    data, cpu = load_digits(), torch.device("cpu")
    for method, overrides, params_type in [("ewc", {"reg_weight": 7.0}, RegularisedParams),
                                           ("bic", {"bic_temperature": 3.0, "new_classes": "unseen"}, BiCParams),
                                           ("rm", {"rm_variant": "paper"}, RMParams),
                                           ("finetune", {}, MethodParams)]:
        _, cfg = load_config(None, {"method": method, "epochs": 1, **overrides})
        proto = build_protocol(cfg, data)
        learner = method_class(method)(Setup(cfg, data, proto.train_labels, proto.test_labels, proto.groups, cpu,
                                             make_augmenter(cfg, data, cpu)))
        assert type(learner.params) is params_type
        assert {k: getattr(learner.params, k) for k in overrides} == overrides
    assert learner.params == MethodParams()  # finetune has no keys of its own


def test_two_methods_declaring_one_key_differently_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    @dataclasses.dataclass(frozen=True)
    class Clashing(MethodParams):
        new_classes: Literal["all"] = param("all", "another meaning of new_classes")

    monkeypatch.setitem(REGISTRY, "clash", Entry("finetune:Finetune", Clashing))
    with pytest.raises(TypeError, match="new_classes"):
        config._method_keys()


def test_config_keys_command_prints_the_table_and_the_page() -> None:
    table = rmconsole("config-keys")
    assert table.returncode == 0, table.stderr
    assert "rwalk_interval" in table.stdout and "bic_star" in table.stdout
    page = rmconsole("config-keys", "--markdown")
    assert page.returncode == 0 and page.stdout == configuration_page()


def test_validating_a_config_does_not_import_torch() -> None:
    """The CLI and the TUI validate configs on every launch and keystroke: seconds saved."""
    code = ("import sys; from rmconsole.config import load_config, key_table; "
            "load_config(None, ['method=bic', 'reg_weight=2']); key_table(); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
