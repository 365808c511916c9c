import math
import random

import pytest
import torch
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from rmconsole.cl import augment as A


def _reference(op: str, x: torch.Tensor, m: float) -> torch.Tensor:
    """torchvision's own op, as its RandAugment/AutoAugment applies it."""
    if op == "ShearX":
        return F.affine(x, angle=0.0, translate=[0, 0], scale=1.0, shear=[math.degrees(math.atan(m)), 0.0], center=[0, 0])
    if op == "ShearY":
        return F.affine(x, angle=0.0, translate=[0, 0], scale=1.0, shear=[0.0, math.degrees(math.atan(m))], center=[0, 0])
    if op == "TranslateX":
        return F.affine(x, angle=0.0, translate=[int(m), 0], scale=1.0, shear=[0.0, 0.0])
    if op == "TranslateY":
        return F.affine(x, angle=0.0, translate=[0, int(m)], scale=1.0, shear=[0.0, 0.0])
    return {
        "Rotate": lambda: F.rotate(x, m), "Brightness": lambda: F.adjust_brightness(x, 1 + m),
        "Color": lambda: F.adjust_saturation(x, 1 + m), "Contrast": lambda: F.adjust_contrast(x, 1 + m),
        "Sharpness": lambda: F.adjust_sharpness(x, 1 + m), "Posterize": lambda: F.posterize(x, int(m)),
        "Solarize": lambda: F.solarize(x, 255 * m), "AutoContrast": lambda: F.autocontrast(x),
        "Equalize": lambda: F.equalize(x), "Invert": lambda: F.invert(x), "Identity": lambda: x,
    }[op]()


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("op", A.OPS)
def test_each_batched_op_equals_torchvision(op: str, channels: int) -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (6, channels, 16, 16), dtype=torch.uint8, generator=gen)
    table = A.magnitudes(op, 31, 16, 16)
    values = [0.0] if table is None else [float(table[b]) for b in (3, 17, 30)]
    if op in A.SIGNED:
        values += [-v for v in values]
    for m in values:
        ours = A.apply_ops(x, torch.full((6,), A.OP_ID[op]), torch.full((6,), m))
        assert torch.equal(ours, _reference(op, x, m)), (op, m)


def test_magnitude_table_is_torchvisions() -> None:
    space = v2.RandAugment._AUGMENTATION_SPACE
    for op in A.RANDAUGMENT_OPS:
        fn, signed = space[op]
        theirs = fn(31, 28, 30)
        ours = A.magnitudes(op, 31, 28, 30)
        assert (theirs is None) == (ours is None)
        if theirs is not None:
            assert torch.allclose(theirs.float(), ours.float())
        assert signed == (op in A.SIGNED)


def test_cifar10_policy_is_torchvisions() -> None:
    theirs = v2.AutoAugment(v2.AutoAugmentPolicy.CIFAR10)._policies
    assert [tuple(map(tuple, sub)) for sub in theirs] == [tuple(map(tuple, sub)) for sub in A.CIFAR10_POLICY]


def test_mixed_ops_in_one_batch_match_per_sample() -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (len(A.OPS), 3, 12, 12), dtype=torch.uint8, generator=gen)
    ops = torch.arange(len(A.OPS))
    mags = torch.tensor([0.2 if A.magnitudes(op, 31, 12, 12) is not None else 0.0 for op in A.OPS])
    mags[A.OP_ID["Posterize"]] = 5
    mags[A.OP_ID["TranslateX"]] = 3
    out = A.apply_ops(x, ops, mags)
    for i, op in enumerate(A.OPS):
        assert torch.equal(out[i:i + 1], _reference(op, x[i:i + 1], float(mags[i]))), op


@pytest.mark.parametrize("policy", ["randaug", "autoaug"])
def test_every_sample_gets_its_own_draw(policy: str) -> None:
    gen = torch.Generator().manual_seed(3)
    one = torch.randint(0, 256, (1, 3, 16, 16), dtype=torch.uint8, generator=gen)
    batch = one.repeat(64, 1, 1, 1)
    out = A.randaugment(batch, gen) if policy == "randaug" else A.autoaugment(batch, gen)
    distinct = {bytes(img.flatten().tolist()) for img in out}
    assert len(distinct) > 16  # one draw for the whole batch would give 1


def test_crop_flip_per_sample_and_shape() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.arange(64, dtype=torch.uint8).view(1, 1, 8, 8).repeat(32, 1, 1, 1)
    out = A.crop_flip(x, 2, gen)
    assert out.shape == x.shape and out.dtype == torch.uint8
    assert len({bytes(i.flatten().tolist()) for i in out}) > 8
    no_pad = A.crop_flip(x, 0, gen, flip=False)
    assert torch.equal(no_pad, x)


def test_cutmix_box_and_lambda() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.zeros(8, 1, 10, 10)
    x[4:] = 1.0
    y = torch.arange(8)
    mixed, y_a, y_b, lam = A.cutmix(x, y, random.Random(4), gen)
    assert torch.equal(y_a, y) and sorted(y_b.tolist()) == list(range(8))
    pasted = (mixed != x).float().mean(dim=(1, 2, 3))
    partner_differs = (x[y_b].flatten(1) != x.flatten(1)).any(1)
    box = 1.0 - lam
    assert torch.allclose(pasted[partner_differs], torch.full_like(pasted[partner_differs], box))


def test_parse_augment_rejects_unknown_names() -> None:
    assert A.parse_augment("cutmix+autoaug") == ("cutmix", "autoaug")
    assert A.parse_augment(["none"]) == ()
    with pytest.raises(ValueError, match="unknown augmentation"):
        A.parse_augment("cutmix autoaug")  # the authors' issue #11 token
    with pytest.raises(ValueError):
        A.parse_augment("cutmix+mixup")


SETTINGS = {  # paper Table 4's rows, as `augment` values
    "none": (), "cutmix": ("cutmix",), "randaug": ("randaug",), "autoaug": ("autoaug",),
    "cutmix+autoaug": ("cutmix", "autoaug"),
}


def _augmenter(names: tuple[str, ...], seed: int = 0) -> A.Augmenter:
    return A.Augmenter(names, torch.zeros(1, 1, 1, 1), torch.ones(1, 1, 1, 1), 4, seed)


@pytest.mark.parametrize("setting", SETTINGS)
def test_parse_augment_settings(setting: str) -> None:
    assert A.parse_augment(setting) == SETTINGS[setting]
    assert A.parse_augment(setting.upper().replace("+", ",")) == SETTINGS[setting]


@pytest.mark.parametrize("setting", SETTINGS)
def test_each_setting_augments_every_sample_on_its_own(setting: str) -> None:
    """A batch of 64 copies of one image: crop/flip and the policy are drawn per sample, so the
    batch comes out with many distinct images. Crop/flip only move pixels (and pad with 0); a
    policy also makes pixel values the image never had, in many samples but not in all."""
    aug = _augmenter(SETTINGS[setting])
    one = torch.randint(0, 256, (1, 1, 16, 16), dtype=torch.uint8, generator=torch.Generator().manual_seed(5))
    out = aug.train(one.repeat(64, 1, 1, 1))
    assert out.shape == (64, 1, 16, 16) and out.dtype == torch.float32
    assert len({img.numpy().tobytes() for img in out}) > 20
    values = (out * 255).round().to(torch.uint8)  # mean 0, std 1: undo the scaling only
    known = torch.isin(values, torch.cat([one.flatten(), torch.tensor([0], dtype=torch.uint8)]))
    new_values = int((~known).flatten(1).any(1).sum())
    if "randaug" in setting or "autoaug" in setting:
        assert 10 < new_values < 64
    else:
        assert new_values == 0


@pytest.mark.parametrize("setting", SETTINGS)
def test_describe_names_the_effective_pipeline(setting: str) -> None:
    steps = _augmenter(SETTINGS[setting]).describe()
    assert steps[:2] == ["random_crop(padding=4)", "horizontal_flip(p=0.5)"] and "normalize" in steps
    assert any(s.startswith("randaugment") for s in steps) == ("randaug" in setting)
    assert any(s.startswith("autoaugment") for s in steps) == ("autoaug" in setting)
    assert any(s.startswith("cutmix") for s in steps) == ("cutmix" in setting)


@pytest.mark.parametrize("setting", SETTINGS)
def test_cutmix_only_when_enabled_and_about_half_the_batches(setting: str) -> None:
    aug = _augmenter(SETTINGS[setting], seed=1)
    x, y = torch.rand(8, 1, 16, 16), torch.arange(8)
    mixed = [aug.maybe_cutmix(x, y) is not None for _ in range(400)]
    if "cutmix" in setting:
        assert 150 < sum(mixed) < 250
    else:
        assert not any(mixed)


@pytest.mark.parametrize("bad", ["cutmix autoaug", "mixup", "cutmix+cutout", ["cutmix", "autoaugment"], "randaug+autoaug"])
def test_unknown_or_conflicting_augmentation_is_rejected_everywhere(bad) -> None:
    with pytest.raises(ValueError):
        A.parse_augment(bad)
    with pytest.raises(ValueError):
        _augmenter(tuple(bad) if isinstance(bad, list) else (bad,))
