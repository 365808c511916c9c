"""Vision Transformers in timm's layout (Dosovitskiy et al. 2021), for the prompt methods (L2P and
its line) and any method that wants a frozen pretrained encoder.

Parameter names are timm's `VisionTransformer`'s (patch_embed.proj, cls_token, pos_embed,
blocks.<i>.{norm1, attn.qkv, attn.proj, norm2, mlp.fc1, mlp.fc2}, norm), so a timm state dict
(`timm.create_model("vit_base_patch16_224", pretrained=True).state_dict()`, saved with
torch.save) loads key for key under `features.`; timm's own classifier `head.*` is dropped (its
1,000 or 21,843 classes are not the run's). Pre-norm blocks, LayerNorm eps 1e-6, exact GELU,
qkv with bias, MLP ratio 4: timm's ViT-B/16. A file whose keys or shapes differ is refused in one
line (models.WeightsError). Nothing is downloaded.

`features(x)` is the pre-logits feature: the [CLS] token after the final norm (timm's
`forward_head(pre_logits=True)` with class-token pooling). Inputs whose side is not the model's
`img_size` are resized bilinearly first (the authors' pipelines resize CIFAR's 32 px to 224).

For the prompt methods, `ViT.run` takes prompt tokens prepended to the input tokens (L2P: after
the [CLS] token, before the patches; they get no position embedding) and per-layer prefixes
(DualPrompt's prefix-tuning: extra keys and values in a layer's attention), and returns every
output token.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
import torch.nn.functional as nnf
from torch import Tensor, nn

from .models import Backbone, WeightsError

Prefixes = Mapping[int, tuple[Tensor, Tensor]]  # layer -> (keys, values), each (B, L, D)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor, prefix: tuple[Tensor, Tensor] | None = None) -> Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if prefix is not None:  # prefix-tuning: keys and values prepended, queries unchanged
            pk, pv = (p.reshape(b, -1, self.heads, d // self.heads).transpose(1, 2) for p in prefix)
            k, v = torch.cat([pk, k], dim=2), torch.cat([pv, v], dim=2)
        out = nnf.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(b, n, d))


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: float = 4.0) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x: Tensor, prefix: tuple[Tensor, Tensor] | None = None) -> Tensor:
        x = x + self.attn(self.norm1(x), prefix)
        return x + self.mlp(self.norm2(x))


class PatchEmbed(nn.Module):
    def __init__(self, channels: int, dim: int, patch: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(channels, dim, patch, patch)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


class ViT(nn.Module):
    """timm's VisionTransformer (class token, learned position embeddings), as `features`."""

    def __init__(
        self, img_size: int, patch: int, channels: int, dim: int, depth: int, heads: int, mlp_ratio: float = 4.0
    ) -> None:
        super().__init__()
        if img_size % patch:
            raise ValueError(f"ViT: image size {img_size} is not a multiple of the patch size {patch}")
        self.img_size, self.patch, self.dim, self.depth = img_size, patch, dim, depth
        self.patch_embed = PatchEmbed(channels, dim, patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, 1 + (img_size // patch) ** 2, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads, mlp_ratio) for _ in range(depth))
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        nn.init.trunc_normal_(self.cls_token, std=0.02)

    def embed(self, x: Tensor) -> Tensor:
        """(B, 1 + patches, D): the [CLS] token and the patch embeddings, position embeddings added."""
        if x.shape[-1] != self.img_size or x.shape[-2] != self.img_size:
            x = nnf.interpolate(x, size=(self.img_size, self.img_size), mode="bilinear", align_corners=False)
        tokens = self.patch_embed(x)
        cls = self.cls_token.expand(len(tokens), -1, -1)
        return torch.cat([cls, tokens], dim=1) + self.pos_embed

    def run(self, x: Tensor, prompts: Tensor | None = None, prefixes: Prefixes | None = None) -> Tensor:
        """Every output token after the final norm: (B, 1 + L_prompts + patches, D). `prompts`
        (B, L, D) are inserted after the [CLS] token; `prefixes[layer]` are prefix keys/values."""
        tokens = self.embed(x)
        if prompts is not None:
            tokens = torch.cat([tokens[:, :1], prompts, tokens[:, 1:]], dim=1)
        for i, block in enumerate(self.blocks):
            tokens = block(tokens, None if prefixes is None else prefixes.get(i))
        return self.norm(tokens)

    def forward(self, x: Tensor) -> Tensor:
        """The pre-logits feature: the [CLS] token of the last layer, normed."""
        return self.run(x)[:, 0]


class ViTBackbone(Backbone):
    """A ViT as a Backbone (features = the ViT, fc = the run's head), loading timm state dicts."""

    features: ViT

    def adapt_state(self, state: dict[str, Tensor], path: str | Path) -> dict[str, Tensor]:
        """A timm state dict as this model's: `features.` + timm's key, timm's `head.*` dropped;
        WeightsError (one line) naming the first key or shape that does not match."""
        if any(k.startswith("features.") for k in state):
            return state  # already this model's layout (a file saved from rmconsole)
        own = self.features.state_dict()
        kept = {k: v for k, v in state.items() if not k.startswith("head.")}
        where = f"model_weights={str(path)!r}"
        missing = next((k for k in own if k not in kept), None)
        if missing is not None:
            raise WeightsError(f"{where}: not a timm ViT of this layout (no {missing!r})")
        extra = next((k for k in kept if k not in own), None)
        if extra is not None:
            raise WeightsError(f"{where}: not a timm ViT of this layout (unexpected {extra!r})")
        bad = next((k for k in own if kept[k].shape != own[k].shape), None)
        if bad is not None:
            raise WeightsError(
                f"{where}: {bad} has shape {tuple(kept[bad].shape)}, this model's is {tuple(own[bad].shape)}"
            )
        return {f"features.{k}": v for k, v in kept.items()}


def _vit(
    in_shape: tuple[int, int, int], n_classes: int, img_size: int, patch: int, dim: int, depth: int, heads: int
) -> ViTBackbone:
    features = ViT(img_size, patch, in_shape[0], dim, depth, heads)
    return ViTBackbone(features, dim, n_classes)


def vit_b16(in_shape: tuple[int, int, int], n_classes: int) -> ViTBackbone:
    """ViT-B/16 at 224 px (timm's vit_base_patch16_224): 12 layers, width 768, 12 heads, 768 features."""
    return _vit(in_shape, n_classes, 224, 16, 768, 12, 12)


def vit_tiny(in_shape: tuple[int, int, int], n_classes: int) -> ViTBackbone:
    """The same layout, small, for tests: 32 px, patch 8, 2 layers, width 64, 4 heads."""
    return _vit(in_shape, n_classes, 32, 8, 64, 2, 4)
