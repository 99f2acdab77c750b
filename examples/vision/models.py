"""Both architectures behind one interface, chosen by the config's name.

``get(name) -> (module, config)``: ``module.init(cfg, key) -> (params, batch_stats)`` and
``module.apply(params, batch_stats, x, cfg, *, train) -> (logits, batch_stats)``.
"""

from __future__ import annotations

import dataclasses
from types import ModuleType
from typing import Any

import numpy as np

from blu import tree_util
from examples.vision import ExampleError, resnet, vit

CONFIGS: dict[str, Any] = {**resnet.CONFIGS, **vit.CONFIGS}


def get(name: str, **overrides) -> tuple[ModuleType, Any]:
    """The module and config of ``name`` (``overrides``: config fields, e.g. ``num_classes``)."""
    if name not in CONFIGS:
        raise ExampleError(f"unknown model {name!r}; choose from {', '.join(CONFIGS)}")
    cfg = CONFIGS[name]
    module = resnet if isinstance(cfg, resnet.ResNetConfig) else vit
    return module, dataclasses.replace(cfg, **overrides)


def num_params(tree: Any) -> int:
    return sum(int(np.prod(np.shape(p))) for p in tree_util.tree_leaves(tree))
