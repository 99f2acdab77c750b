"""The models blu's benchmark side builds, GPT-2 or LLaMA-style, and their weights on the host.

The config name picks the architecture (``examples.gpt2.models``: ``gpt2-*``, ``tiny``,
``small`` are GPT-2; ``llama-*`` the LLaMA-style decoder of ``examples/gpt2/llama.py``); both
expose the same functions, so the training step, its programs and the fidelity run are written
once (``benchmarks/peers/blu_gpt2.py``). The initial weights are made here, on the host, and
written by name for the PyTorch peer (``params.<key path>``: GPT-2's ``params.h.0.attn.c_attn.w``,
LLaMA's ``params.layers.0.attn.wq``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from typing import Any

import numpy as np

import blu
import blu.random as random
from blu.core import pytree
from examples.gpt2.checkpoint import flatten_named, unflatten_named
from examples.gpt2.models import CONFIGS, ModelConfig, arch_of, init_params

GPT2_TOKENS = 50257  # GPT-2's BPE vocabulary (padded by the config, e.g. to 50304)
LLAMA_TOKENS = 128256  # Llama 3's tokenizer (the 1B model's vocabulary)
INITS = ("numpy", "blu")
# the residual projections, whose init is scaled by 1/sqrt(2 n_layer): GPT-2's, LLaMA's
_RESIDUAL = ("c_proj", "wo", "w_down")


def default_vocab(name: str) -> int:
    """The tokenizer vocabulary a config is benchmarked with: GPT-2's BPE, or Llama 3's.

    Raises:
        KeyError: unknown config name.
    """
    return LLAMA_TOKENS if arch_of(CONFIGS[name]) == "llama" else GPT2_TOKENS


def model_config(
    name: str, vocab: int | None = None, scan_layers: bool = False, n_ctx: int | None = None
) -> ModelConfig:
    """The example's config ``name`` sized for ``vocab`` tokens (None: :func:`default_vocab`;
    padded as the config says); ``scan_layers``: GPT-2's blocks as one ``lax.scan``; ``n_ctx``:
    another context than the config's (GPT-2's learned position table has ``n_ctx`` rows, so
    e.g. ``gpt2-124m`` at 8192 tokens needs ``n_ctx=8192``; LLaMA's RoPE has no table).

    Raises:
        KeyError: unknown config name.
        ValueError: ``scan_layers`` for a LLaMA config (it has no scanned form), ``n_ctx < 1``.
    """
    cfg = CONFIGS[name].with_vocab(default_vocab(name) if vocab is None else vocab)
    if n_ctx is not None:
        if n_ctx < 1:
            raise ValueError(f"n_ctx must be positive, got {n_ctx}")
        cfg = dataclasses.replace(cfg, n_ctx=n_ctx)
    if arch_of(cfg) == "llama":
        if scan_layers:
            raise ValueError(f"--scan-layers is for GPT-2 configs, not {name}")
        return cfg
    return dataclasses.replace(cfg, scan_layers=scan_layers)


def param_specs(cfg: ModelConfig) -> Any:
    """The parameters as a pytree of ``ShapeDtypeStruct`` (nothing is computed)."""
    return blu.eval_shape(lambda k: init_params(cfg, k), random.key(0))


def host_params(cfg: ModelConfig, seed: int = 0, how: str = "numpy") -> Any:
    """Initial float32 parameters as numpy arrays, in the example's structure.

    ``how="blu"``: the example's ``init_params`` with ``blu.random.key(seed)``, jitted as the
    example runs it (op by op, the threefry draws of 124M parameters took about 30 s of 2
    cores; jitted, seconds). ``how="numpy"``: the same distribution
    (weights N(0, 0.02²), the residual projections N(0, (0.02/sqrt(2L))²), biases 0, norm gains
    1) drawn with numpy's PCG64 — seconds, not a minute.
    """
    if how == "blu":
        init = blu.jit(functools.partial(init_params, cfg))
        return pytree.tree_map(np.asarray, init(random.key(seed)))
    if how != "numpy":
        raise ValueError(f"init must be one of {INITS}, got {how!r}")
    template = param_specs(cfg)
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, spec in flatten_named(template, "params").items():
        parts = name.split(".")
        if parts[-1] == "g":
            tensors[name] = np.ones(spec.shape, np.float32)
        elif parts[-1] == "b":
            tensors[name] = np.zeros(spec.shape, np.float32)
        else:
            residual = any(p in _RESIDUAL for p in parts[-2:])
            std = 0.02 / math.sqrt(2 * cfg.n_layer) if residual else 0.02
            tensors[name] = rng.standard_normal(spec.shape, np.float32) * np.float32(std)
    return unflatten_named(template, "params", tensors, "initial weights")


def params_to_named(params: Any) -> dict[str, np.ndarray]:
    """``{"params.<key path>": array}``, the names the weight file and the torch peer use."""
    return {k: np.asarray(v) for k, v in flatten_named(params, "params").items()}


def params_from_file(cfg: ModelConfig, path: str | Path) -> Any:
    """Parameters from a ``.npz`` written with :func:`params_to_named` (names, shapes checked)."""
    with np.load(path) as f:
        tensors = {k: f[k] for k in f.files}
    return unflatten_named(param_specs(cfg), "params", tensors, str(path))
