import pytest

from rmconsole.config import ConfigError, RunConfig, load_config, parse_value, preset_names


def test_every_preset_validates() -> None:
    names = preset_names()
    for required in (
        "digits-blurry10-online",
        "mnist-blurry10-online",
        "cifar10-blurry10-online",
        "cifar100-blurry10-online",
        "imagenet-blurry10",
        "tiny-imagenet-blurry10",
    ):
        assert required in names
    for name in names:
        _, cfg = load_config(name)
        assert isinstance(cfg, RunConfig)


def test_default_preset_and_overrides() -> None:
    name, cfg = load_config(None, ["epochs=3", "augment=none", "memory_policy=random"], seed=4)
    assert name == "digits-blurry10-online"
    assert (cfg.epochs, cfg.augment, cfg.memory_policy, cfg.seed) == (3, (), "random", 4)
    assert (
        parse_value("0.1") == 0.1 and parse_value("true") is True and parse_value("cutmix+autoaug") == "cutmix+autoaug"
    )


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (["nope=1"], "unknown config key 'nope'"),
        (["memory_size=0"], "memory_size=0"),
        (["memory_size=-5"], "memory_size=-5"),
        (["memory_size=4"], "smaller than the 10 classes"),
        (["lr=fast"], "lr='fast'"),
        (["method=magic"], "method='magic'"),
        (["dataset=svhn"], "dataset='svhn'"),
        (["model=vit"], "model='vit'"),
        (["augment=cutmix autoaug"], "unknown augmentation"),
        (["stream=batch"], "stream='batch'"),
        (["n_tasks=3"], "split evenly"),
        (["class_order=paper"], "class_order=paper"),
        (["device=tpu"], "device='tpu'"),
        (["epochs"], "expected KEY=VALUE"),
    ],
)
def test_bad_values_give_one_line_naming_the_key(overrides: list[str], fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    message = str(err.value)
    assert fragment in message and "\n" not in message


def test_unknown_preset_and_bad_toml(tmp_path) -> None:
    with pytest.raises(ConfigError, match="unknown preset 'nope'"):
        load_config("nope")
    bad = tmp_path / "bad.toml"
    bad.write_text("dataset = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(str(bad))
    extra = tmp_path / "extra.toml"
    extra.write_text('dataset = "digits"\nmodel = "mlp400"\nmemory_size = 100\ncolour = "blue"\n')
    with pytest.raises(ConfigError, match="unknown config key 'colour'"):
        load_config(str(extra))


def test_the_catalog_imports_nothing_of_the_package() -> None:
    """cl/catalog.py is imported by memory.py, augment.py, uncertainty.py and config.py: an import
    of the method registry there (it once built a METHOD_NAMES of the built-ins only) closes a
    circle through the method files. Method names come from `rmconsole.methods` (plug-ins included);
    models and datasets: tests/cl/test_models.py, test_datasets.py."""
    import ast
    from pathlib import Path

    from rmconsole.cl import catalog

    tree = ast.parse(Path(catalog.__file__).read_text(encoding="utf-8"))
    imported = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level > 0]
    assert imported == [] and not hasattr(catalog, "METHOD_NAMES")


def test_a_key_given_twice_is_refused_naming_both_values() -> None:
    """`--set epochs=1 --set epochs=2` and `--set seed=2 --seed 3` once let the last one win."""
    with pytest.raises(ConfigError, match=r"^epochs is given twice: --set epochs=1 and --set epochs=2; give it once$"):
        load_config(None, ["epochs=1", "epochs=2"])
    with pytest.raises(ConfigError, match=r"^seed is given twice: --set seed=2 and --seed 3; give it once$"):
        load_config(None, ["seed=2"], seed=3)
    _, cfg = load_config(None, ["epochs=1", "epochs=1"], seed=None)  # the same value twice is no conflict
    assert cfg.epochs == 1


@pytest.mark.parametrize(
    "pair, message",
    [
        ("epochs=1e3", "epochs=1e3: a float (1000.0) for an integer key; write epochs=1000"),
        ("epochs=2.5", "epochs=2.5: a float (2.5) for an integer key; allowed: whole numbers"),
        ("memory_size='200'", "memory_size='200': a string for an integer key; write memory_size=200 without quotes"),
        ("lr='0.1'", "lr='0.1': a string for a number key; write lr=0.1 without quotes"),
    ],
)
def test_a_number_of_the_wrong_type_is_refused(pair: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, [pair])
    assert str(err.value) == message


def test_a_preset_number_of_the_wrong_type_is_refused(tmp_path) -> None:
    quoted = tmp_path / "quoted.toml"
    quoted.write_text('dataset = "digits"\nmodel = "mlp400"\nmemory_size = "200"\n')
    with pytest.raises(ConfigError, match=r"^memory_size='200': a string for an integer key"):
        load_config(str(quoted))
    floated = tmp_path / "floated.toml"
    floated.write_text('dataset = "digits"\nmodel = "mlp400"\nmemory_size = 200\nepochs = 1e3\n')
    with pytest.raises(ConfigError, match=r"^epochs=1000.0: a float for an integer key; write epochs=1000$"):
        load_config(str(floated))


def test_numbers_toml_spells_otherwise_still_read_as_numbers() -> None:
    """`.05` is not TOML but is plainly a number: read as one, not refused as a string."""
    _, cfg = load_config(None, ["lr=.05", "epochs=007"])
    assert (cfg.lr, cfg.epochs) == (0.05, 7)
    _, cfg = load_config(None, ["lr=1"])  # an integer for a number key is fine
    assert cfg.lr == 1.0


def test_a_typo_gets_the_closest_registered_name_not_the_list() -> None:
    with pytest.raises(ConfigError) as err:
        load_config("digits-blurry10-onlin")
    assert "(did you mean digits-blurry10-online?)" in str(err.value)
    assert "cifar100" not in str(err.value)  # not the whole list
    with pytest.raises(ConfigError, match=r"unknown method \(did you mean er\?\)"):
        load_config(None, ["method=err"])
    with pytest.raises(ConfigError, match=r"did you mean epochs\?"):
        load_config(None, ["epoch=3"])


def test_config_view_lists_the_keys_the_method_reads_and_marks_non_defaults() -> None:
    """`run` and `show` once printed all ~61 keys of an earlier version's config (bic_/ewcpp_/mir_
    keys on an RM run, task-free keys on a task run, every runtime choice)."""
    from rmconsole.config import config_view, method_key_defaults

    _, cfg = load_config(None, ["device=cpu", "epochs=3"])
    old = {**method_key_defaults(), **cfg.to_dict()}  # as an earlier version stored it: every method's keys
    assert len(old) > 55
    view = {key: (value, changed) for key, value, changed in config_view(old)}
    assert view["epochs"] == ("3", True) and view["device"] == ("cpu", True)
    assert view["lr"] == ("0.05", False) and view["augment"] == ("cutmix+autoaug", False)
    assert view["dataset"] == ("digits", False)  # a required key has no default to differ from
    assert "rm_variant" in view and not any(k.startswith(("bic_", "ewcpp_", "mir_", "scr_")) for k in view)
    assert "online_iter" not in view and "compute_budget" not in view  # task-free only
    assert "amp" not in view and "model_weights" not in view  # a runtime choice at its default; unset
    assert len(view) <= 26  # the RM run reads 26 keys (val_fraction and evaluate_test among them)
    _, free = load_config("cifar100-iblurry50-10", ["method=er"])
    view = {key: changed for key, _, changed in config_view(free.to_dict())}
    assert view["online_iter"] and view["optimizer"] and "rm_variant" not in view


def test_the_digits_task_free_preset_lists_only_what_its_method_reads() -> None:
    """digits-iblurry50-10: i-Blurry on the embedded digits, valid without overrides; its listing
    (run, show) and its label name the task-free protocol; ER's run shows no `epochs` (only RM and
    GDumb run memory epochs on a task-free stream), RM's does."""
    from rmconsole.cl.protocols import setting_label
    from rmconsole.config import config_view

    _, er = load_config("digits-iblurry50-10")
    assert (er.dataset, er.stream, er.method, er.schedule) == ("digits", "iblurry", "er", "exp_reset")
    shown = {key for key, _, _ in config_view(er.to_dict())}
    assert "epochs" not in shown and "uncertainty" not in shown and "eval_period" in shown
    _, rm = load_config("digits-iblurry50-10", ["method=rm"])
    assert rm.schedule == "constant" and {"epochs", "uncertainty"} <= {k for k, _, _ in config_view(rm.to_dict())}
    assert setting_label(er.to_dict()) == "iblurry50-10 task-free"
    _, task = load_config(None)
    assert setting_label(task.to_dict()) == "blurry10 online" and "epochs" in {
        k for k, _, _ in config_view(task.to_dict())
    }
