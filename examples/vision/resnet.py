"""ResNet (He, Zhang, Ren & Sun 2016) as pure functions over nested dicts, channels last (NHWC).

``init(cfg, key) -> (params, batch_stats)``: the trained parameters and batch norm's running
statistics as two pytrees (flax's ``params`` and ``batch_stats`` collections).
``apply(params, batch_stats, x, cfg, *, train) -> (logits, batch_stats)``: with ``train=True``
every batch norm normalizes by the batch's statistics and the returned ``batch_stats`` are
updated; with ``train=False`` the running ones are used and returned unchanged.

The layout follows torchvision's ``resnet50`` ("ResNet v1.5": the stride of a bottleneck is on
its 3x3 convolution; a 1x1 convolution and batch norm project the shortcut where the shape
changes; convolutions have no bias), so ``resnet50`` has torchvision's 25,557,032 parameters.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

import blu
import blu.numpy as bnp
import blu.random as random
from blu import lax, nn

_DN = ("NHWC", "HWIO", "NHWC")


@dataclasses.dataclass(frozen=True)
class ResNetConfig:
    """A ResNet's shape.

    ``block``: ``"bottleneck"`` (1x1, 3x3, 1x1 with 4x expansion) or ``"basic"`` (two 3x3);
    ``layers``: blocks per stage; ``widths``: each stage's inner width; ``strides``: each
    stage's first stride; ``stem``: ``"imagenet"`` (7x7 stride 2 and a 3x3 stride 2 max pool) or
    ``"small"`` (one 3x3 stride 1 convolution, no pool: small images such as 8x8 digits).
    """

    block: str
    layers: tuple[int, ...]
    widths: tuple[int, ...]
    strides: tuple[int, ...]
    stem: str = "imagenet"
    stem_width: int = 64
    num_classes: int = 1000
    in_channels: int = 3
    image_size: int = 224
    momentum: float = 0.9  # batch norm's running statistics (flax's convention)

    @property
    def expansion(self) -> int:
        return 4 if self.block == "bottleneck" else 1


CONFIGS = {
    "resnet50": ResNetConfig("bottleneck", (3, 4, 6, 3), (64, 128, 256, 512), (1, 2, 2, 2)),
    "resnet18": ResNetConfig("basic", (2, 2, 2, 2), (64, 128, 256, 512), (1, 2, 2, 2)),
    # digits: 8x8 -> 8x8 (16 ch) -> 4x4 (32) -> 2x2 (64) -> global average pool
    "resnet-tiny": ResNetConfig(
        "basic", (1, 1, 1), (16, 32, 64), (1, 2, 2), stem="small", stem_width=16,
        num_classes=10, in_channels=1, image_size=8,
    ),
}  # fmt: skip


# ---- layers -------------------------------------------------------------------------------------


def _conv_init(key, k: int, cin: int, cout: int):
    # He et al. 2015's normal with fan_out (torchvision's kaiming_normal_(mode="fan_out"))
    std = math.sqrt(2.0 / (k * k * cout))
    return random.normal(key, (k, k, cin, cout), np.float32) * np.float32(std)


def _bn_init(c: int, zero: bool = False):
    scale = np.zeros(c, np.float32) if zero else np.ones(c, np.float32)
    return {"scale": scale, "bias": np.zeros(c, np.float32)}, {
        "mean": np.zeros(c, np.float32),
        "var": np.ones(c, np.float32),
    }


def conv(x, w, stride: int = 1):
    """NHWC x HWIO with 'SAME'-style symmetric padding ``k // 2`` (torchvision's)."""
    k = w.shape[0]
    pad = ((k // 2, k // 2),) * 2
    return lax.conv_general_dilated(
        x, w.astype(x.dtype), (stride, stride), pad, dimension_numbers=_DN
    )


def bn(x, p, s, train: bool, momentum: float):
    """Batch norm of NHWC ``x``; returns ``(y, new running statistics)``."""
    y, (m, v) = nn.batch_norm(
        x, p["scale"], p["bias"], s["mean"], s["var"], train=train, momentum=momentum
    )
    return y, {"mean": m, "var": v}


# ---- the network --------------------------------------------------------------------------------


def _block_shapes(cfg: ResNetConfig):
    """(in channels, width, stride) of every block, stage by stage."""
    cin, out = cfg.stem_width, []
    for n, w, s in zip(cfg.layers, cfg.widths, cfg.strides):
        for i in range(n):
            out.append((cin, w, s if i == 0 else 1))
            cin = w * cfg.expansion
    return out


def init(cfg: ResNetConfig, key) -> tuple[dict, dict]:
    """Fresh parameters and batch statistics (the last batch norm of each residual branch
    starts at zero scale, Goyal et al. 2017: every block starts as the identity)."""
    blocks = _block_shapes(cfg)
    keys = random.split(key, len(blocks) + 2)
    k0 = 7 if cfg.stem == "imagenet" else 3
    bnp_, bns = _bn_init(cfg.stem_width)
    params: dict[str, Any] = {
        "stem": {"conv": _conv_init(keys[0], k0, cfg.in_channels, cfg.stem_width), "bn": bnp_}
    }
    stats: dict[str, Any] = {"stem": {"bn": bns}}
    e = cfg.expansion
    for i, ((cin, w, s), bk) in enumerate(zip(blocks, keys[1:-1])):
        ks = random.split(bk, 4)
        if cfg.block == "bottleneck":
            convs = [(1, cin, w), (3, w, w), (1, w, w * e)]
        else:
            convs = [(3, cin, w), (3, w, w)]
        p, st = {}, {}
        for j, (k, a, b) in enumerate(convs):
            p[f"conv{j + 1}"] = _conv_init(ks[j], k, a, b)
            p[f"bn{j + 1}"], st[f"bn{j + 1}"] = _bn_init(b, zero=j == len(convs) - 1)
        if s != 1 or cin != w * e:
            p["proj"] = _conv_init(ks[3], 1, cin, w * e)
            p["proj_bn"], st["proj_bn"] = _bn_init(w * e)
        params[f"block{i}"], stats[f"block{i}"] = p, st
    feat = cfg.widths[-1] * e
    bound = 1.0 / math.sqrt(feat)  # torchvision's nn.Linear default
    params["head"] = {
        "w": random.uniform(keys[-1], (feat, cfg.num_classes), np.float32, -bound, bound),
        "b": np.zeros(cfg.num_classes, np.float32),
    }
    return params, stats


# batch norm's per-channel statistics (``nn.batch_norm`` tags them) and max pooling's window
# offsets (int8, ``nn.POOL_OFFSETS``): what a rematerialized block keeps; the rest (the
# normalized values, the ReLU's mask) is recomputed in the backward pass from the convolution's
# output, as torch.compile's ResNet does (it keeps max pooling's offsets in int8 too)
_KEEP_STATS = blu.checkpoint_policies.save_only_these_names(*nn.BATCH_NORM_STATISTICS,
                                                            nn.POOL_OFFSETS)  # fmt: skip


def apply(params: dict, batch_stats: dict, x, cfg: ResNetConfig, *, train: bool):
    """Logits ``(N, num_classes)`` of NHWC images ``x`` ``(N, H, W, in_channels)``, and the
    batch statistics (updated if ``train``). In training, each batch norm with the ReLU (and
    residual sum, max pool) after it is one ``blu.checkpoint`` block keeping only the
    statistics: the activations kept for the backward pass are the convolutions' outputs and
    inputs."""
    m = cfg.momentum
    new: dict[str, Any] = {}
    stride0 = 2 if cfg.stem == "imagenet" else 1
    remat = (lambda f: blu.checkpoint(f, policy=_KEEP_STATS)) if train else (lambda f: f)

    def stem(c, p, s):
        h, s = bn(c, p, s, train, m)
        h = nn.relu(h)
        if cfg.stem == "imagenet":
            h = nn.max_pool(h, (3, 3), (2, 2), ((1, 1), (1, 1)))
        return h, s

    def bn_relu(c, p, s):
        y, s = bn(c, p, s, train, m)
        return nn.relu(y), s

    def bn_add_relu(c, p, s, sc):  # sc: the shortcut, or (its convolution, bn params, stats)
        y, s = bn(c, p, s, train, m)
        if isinstance(sc, tuple):
            sc, s2 = bn(*sc, train, m)
            return nn.relu(y + sc), (s, s2)
        return nn.relu(y + sc), (s, None)

    h, s = remat(stem)(conv(x, params["stem"]["conv"], stride0), params["stem"]["bn"],
                       batch_stats["stem"]["bn"])  # fmt: skip
    new["stem"] = {"bn": s}
    for i, (_, _, stride) in enumerate(_block_shapes(cfg)):
        p, st = params[f"block{i}"], batch_stats[f"block{i}"]
        ns: dict[str, Any] = {}
        n_conv = 3 if cfg.block == "bottleneck" else 2
        y = h
        for j in range(1, n_conv + 1):
            # the stride on the first 3x3 convolution (bottleneck: v1.5's, the middle one)
            sj = stride if j == (2 if cfg.block == "bottleneck" else 1) else 1
            c = conv(y, p[f"conv{j}"], sj)
            if j < n_conv:
                y, ns[f"bn{j}"] = remat(bn_relu)(c, p[f"bn{j}"], st[f"bn{j}"])
        sc = ((conv(h, p["proj"], stride), p["proj_bn"], st["proj_bn"]) if "proj" in p
              else h)  # fmt: skip
        h, (ns[f"bn{n_conv}"], proj) = remat(bn_add_relu)(c, p[f"bn{n_conv}"],
                                                          st[f"bn{n_conv}"], sc)  # fmt: skip
        if proj is not None:
            ns["proj_bn"] = proj
        new[f"block{i}"] = ns
    feat = bnp.mean(h.astype(np.float32), axis=(1, 2))
    return feat @ params["head"]["w"] + params["head"]["b"], new
