"""The ViT backbones in timm's layout: a timm-style state dict (timm's keys, its own head) loads
into `features`, its head dropped; a file of another layout or shape is refused in one line; the
pre-logits feature is the normed [CLS] token. (Checked once by hand against timm 1.0.31's
vit_base_patch16_224, random init: max |timm - ours| of the pre-logits features = 0.0; timm is
not a dependency, so the suite checks the layout on the small model.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rmconsole.cl.models import WeightsError, build_model, check_weights
from rmconsole.cl.vit import ViT


def timm_style_file(path: Path, seed: int = 0, n_head: int = 1000) -> Path:
    """A small ViT's weights saved as timm saves them: no `features.` prefix, a `head` of its own."""
    torch.manual_seed(seed)
    model = build_model("vit_tiny", (3, 32, 32), 10)
    state = {k.removeprefix("features."): v for k, v in model.state_dict().items() if k.startswith("features.")}
    state["head.weight"], state["head.bias"] = torch.randn(n_head, 64), torch.zeros(n_head)
    torch.save(state, path)
    return path


def test_timm_keys_load_into_features_and_the_head_is_dropped(tmp_path: Path) -> None:
    path = timm_style_file(tmp_path / "vit.pt")
    timm_state = torch.load(path, weights_only=True)
    assert {"cls_token", "pos_embed", "patch_embed.proj.weight", "blocks.1.attn.qkv.weight", "norm.bias"} <= set(
        timm_state
    )
    model = build_model("vit_tiny", (3, 32, 32), 5, weights=str(path))
    loaded = model.state_dict()
    assert all(torch.equal(loaded[f"features.{k}"], v) for k, v in timm_state.items() if not k.startswith("head."))
    assert model.fc.out_features == 5  # the run's head, not the file's 1,000-way one


def test_a_file_of_another_layout_or_shape_is_refused_in_one_line(tmp_path: Path) -> None:
    path = timm_style_file(tmp_path / "vit.pt")
    state = torch.load(path, weights_only=True)
    del state["blocks.1.mlp.fc2.bias"]
    torch.save(state, tmp_path / "short.pt")
    with pytest.raises(WeightsError, match=r"not a timm ViT of this layout \(no 'blocks.1.mlp.fc2.bias'\)"):
        build_model("vit_tiny", (3, 32, 32), 5, weights=str(tmp_path / "short.pt"))
    state = torch.load(path, weights_only=True)
    state["pos_embed"] = torch.zeros(1, 197, 64)
    torch.save(state, tmp_path / "wide.pt")
    with pytest.raises(WeightsError) as err:
        build_model("vit_tiny", (3, 32, 32), 5, weights=str(tmp_path / "wide.pt"))
    assert str(err.value).endswith("pos_embed has shape (1, 197, 64), this model's is (1, 17, 64)")
    assert "\n" not in str(err.value)
    with pytest.raises(WeightsError, match=r"pos_embed has shape \(1, 197, 64\)"):  # before a run: on the meta device
        check_weights("vit_tiny", tmp_path / "wide.pt", (3, 32, 32), 5)
    check_weights("vit_tiny", path, (3, 32, 32), 5)  # timm's file passes


def test_features_are_the_normed_cls_token_and_small_inputs_are_resized() -> None:
    torch.manual_seed(0)
    vit = ViT(32, 8, 3, 64, 2, 4).eval()
    x = torch.randn(2, 3, 32, 32)
    tokens = vit.run(x)
    assert tokens.shape == (2, 1 + 16, 64) and torch.equal(vit(x), tokens[:, 0])
    small = torch.randn(2, 3, 8, 8)
    resized = torch.nn.functional.interpolate(small, size=(32, 32), mode="bilinear", align_corners=False)
    assert torch.equal(vit(small), vit(resized))
    b16 = ViT(224, 16, 3, 768, 0, 12)  # vit_b16's embedding (its 12 layers left out: seconds to build)
    assert b16.pos_embed.shape == (1, 197, 768) and b16.patch_embed.proj.weight.shape == (768, 3, 16, 16)
