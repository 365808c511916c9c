import pytest

from rmconsole.config import ConfigError, RunConfig, load_config, parse_value, preset_names


def test_every_preset_validates() -> None:
    names = preset_names()
    for required in ("digits-blurry10-online", "mnist-blurry10-online", "cifar10-blurry10-online",
                     "cifar100-blurry10-online", "imagenet-blurry10", "tiny-imagenet-blurry10"):
        assert required in names
    for name in names:
        _, cfg = load_config(name)
        assert isinstance(cfg, RunConfig)


def test_default_preset_and_overrides() -> None:
    name, cfg = load_config(None, ["epochs=3", "augment=none", "memory_policy=random"], seed=4)
    assert name == "digits-blurry10-online"
    assert (cfg.epochs, cfg.augment, cfg.memory_policy, cfg.seed) == (3, (), "random", 4)
    assert parse_value("0.1") == 0.1 and parse_value("true") is True and parse_value("cutmix+autoaug") == "cutmix+autoaug"


@pytest.mark.parametrize("overrides, fragment", [
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
])
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


def test_catalog_names_match_the_registries() -> None:
    """The torch-free catalog the CLI validates against lists exactly what exists."""
    from rmconsole.cl import catalog
    from rmconsole.cl.methods import METHODS

    assert set(catalog.METHOD_NAMES) == set(METHODS)  # (models and datasets: tests/test_models.py, test_datasets.py)
