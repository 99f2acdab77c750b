"""Vision Transformer (Dosovitskiy et al. 2021) as pure functions over a nested dict, NHWC input.

The patch embedding is a ``patch x patch`` convolution of stride ``patch``; a learned class
token is prepended and learned position embeddings added; pre-LN encoder blocks (attention
through ``blu.nn.dot_product_attention``, an exact-GELU MLP); the class token's final layer
norm feeds the head. The layout is torchvision's ``vit_b_16`` (fused QKV projection with
bias, layer norm eps 1e-6), so ``vit-b16`` has its 86,567,656 parameters.

``init(cfg, key) -> (params, {})`` and ``apply(params, batch_stats, x, cfg, *, train)`` have
the ResNet's signatures (no batch statistics here: the empty dict passes through).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

import blu.numpy as bnp
import blu.random as random
from blu import lax, nn

_DN = ("NHWC", "HWIO", "NHWC")


@dataclasses.dataclass(frozen=True)
class ViTConfig:
    """A ViT's shape: ``image_size`` divisible by ``patch``; ``dim`` divisible by ``heads``."""

    image_size: int = 224
    patch: int = 16
    dim: int = 768
    depth: int = 12
    heads: int = 12
    mlp_dim: int = 3072
    num_classes: int = 1000
    in_channels: int = 3

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch) ** 2


CONFIGS = {
    "vit-b16": ViTConfig(),
    # digits: 8x8 in 2x2 patches -> 16 tokens + the class token
    "vit-tiny": ViTConfig(image_size=8, patch=2, dim=64, depth=2, heads=4, mlp_dim=128,
                          num_classes=10, in_channels=1),
}  # fmt: skip


def _linear_init(key, fan_in: int, fan_out: int):
    # Glorot & Bengio 2010's uniform (torchvision's MLP and attention projections)
    b = math.sqrt(6.0 / (fan_in + fan_out))
    return random.uniform(key, (fan_in, fan_out), np.float32, -b, b)


def _ln(d: int) -> dict:
    return {"scale": np.ones(d, np.float32), "bias": np.zeros(d, np.float32)}


def init(cfg: ViTConfig, key) -> tuple[dict, dict]:
    """Fresh parameters (and the empty batch statistics)."""
    d, p = cfg.dim, cfg.patch
    k_patch, k_pos, k_head, *k_blocks = random.split(key, 3 + cfg.depth)
    fan_in = p * p * cfg.in_channels
    params: dict[str, Any] = {
        "patch": {
            "w": random.truncated_normal(k_patch, -2.0, 2.0, (p, p, cfg.in_channels, d))
            * np.float32(math.sqrt(1.0 / fan_in)),
            "b": np.zeros(d, np.float32),
        },
        "cls": np.zeros((1, 1, d), np.float32),
        "pos": random.normal(k_pos, (1, cfg.num_patches + 1, d), np.float32) * np.float32(0.02),
    }
    for i, kb in enumerate(k_blocks):
        k1, k2, k3, k4 = random.split(kb, 4)
        params[f"block{i}"] = {
            "ln1": _ln(d),
            "qkv": {"w": _linear_init(k1, d, 3 * d), "b": np.zeros(3 * d, np.float32)},
            "out": {"w": _linear_init(k2, d, d), "b": np.zeros(d, np.float32)},
            "ln2": _ln(d),
            "fc1": {"w": _linear_init(k3, d, cfg.mlp_dim), "b": np.zeros(cfg.mlp_dim, np.float32)},
            "fc2": {"w": _linear_init(k4, cfg.mlp_dim, d), "b": np.zeros(d, np.float32)},
        }
    params["ln"] = _ln(d)
    params["head"] = {  # small random, not torchvision's zeros: every logit learns from step 1
        "w": random.normal(k_head, (d, cfg.num_classes), np.float32) * np.float32(0.01),
        "b": np.zeros(cfg.num_classes, np.float32),
    }
    return params, {}


def _dense(x, p):
    return x @ p["w"].astype(x.dtype) + p["b"].astype(x.dtype)


def _block(x, p, cfg: ViTConfig):
    n, t, d = x.shape
    h = nn.layer_norm(x, p["ln1"]["scale"], p["ln1"]["bias"], eps=1e-6)
    qkv = bnp.reshape(_dense(h, p["qkv"]), (n, t, 3, cfg.heads, d // cfg.heads))
    a = nn.dot_product_attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2])
    x = x + _dense(bnp.reshape(a, (n, t, d)), p["out"])
    h = nn.layer_norm(x, p["ln2"]["scale"], p["ln2"]["bias"], eps=1e-6)
    return x + _dense(nn.gelu(_dense(h, p["fc1"]), approximate=False), p["fc2"])


def apply(params: dict, batch_stats: dict, x, cfg: ViTConfig, *, train: bool):
    """Logits ``(N, num_classes)`` of NHWC images ``(N, image_size, image_size, in_channels)``;
    ``batch_stats`` returned as given (``train`` changes nothing: no dropout here)."""
    del train
    p = cfg.patch
    w = params["patch"]["w"]
    h = lax.conv_general_dilated(x, w.astype(x.dtype), (p, p), "VALID", dimension_numbers=_DN)
    n = h.shape[0]
    h = bnp.reshape(h + params["patch"]["b"].astype(h.dtype), (n, -1, cfg.dim))
    cls = bnp.broadcast_to(params["cls"].astype(h.dtype), (n, 1, cfg.dim))
    h = bnp.concatenate([cls, h], axis=1) + params["pos"].astype(h.dtype)
    for i in range(cfg.depth):
        h = _block(h, params[f"block{i}"], cfg)
    h = nn.layer_norm(h[:, 0], params["ln"]["scale"], params["ln"]["bias"], eps=1e-6)
    return _dense(h.astype(np.float32), params["head"]), batch_stats
