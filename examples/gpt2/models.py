"""The architectures the training command line knows, behind one interface.

``model`` (GPT-2) and ``llama`` (a LLaMA-style decoder) expose the same functions
(``init_params``, ``hidden_states``, ``logits_from_hidden``, ``loss_fn``) over their own config
class; the functions here pick the module from the config, so training, checkpoints and sampling
are written once for both. ``CONFIGS`` maps every ``--config`` name to its config.
"""

from __future__ import annotations

from types import ModuleType

from examples.gpt2 import ExampleError, llama, model
from examples.gpt2.llama import LlamaConfig
from examples.gpt2.model import GPTConfig, Params, num_params

ModelConfig = GPTConfig | LlamaConfig
ARCHS = ("gpt2", "llama")
CONFIGS: dict[str, ModelConfig] = {**model.CONFIGS, **llama.CONFIGS}

__all__ = ["ARCHS", "CONFIGS", "ModelConfig", "arch_of", "config_from_dict", "num_params"]


def arch_of(cfg: ModelConfig) -> str:
    """``"gpt2"`` or ``"llama"``."""
    return "llama" if isinstance(cfg, LlamaConfig) else "gpt2"


def _module(cfg: ModelConfig) -> ModuleType:
    return llama if isinstance(cfg, LlamaConfig) else model


def config_from_dict(d: dict) -> ModelConfig:
    """The config a checkpoint recorded (``cfg.to_dict()``; GPT-2's carry no ``arch``).

    Raises:
        ExampleError: fields that fit neither architecture.
    """
    try:
        return LlamaConfig(**d) if d.get("arch") == "llama" else GPTConfig(**d)
    except TypeError as e:
        raise ExampleError(f"unknown model config {d}: {e}") from None


def init_params(cfg: ModelConfig, key) -> Params:
    """Initial float32 parameters of ``cfg``'s architecture (see ``model``/``llama``)."""
    return _module(cfg).init_params(cfg, key)


def hidden_states(params: Params, ids, cfg: ModelConfig, key=None, compute_dtype=None):
    """Final-norm output ``(B, T, d_model)`` of token ids ``(B, T)``."""
    return _module(cfg).hidden_states(params, ids, cfg, key, compute_dtype)


def logits_from_hidden(params: Params, h, cfg: ModelConfig, compute_dtype=None):
    """Output projection ``(..., d_model) -> (..., vocab_size)``."""
    return _module(cfg).logits_from_hidden(params, h, compute_dtype)


def forward(params: Params, ids, cfg: ModelConfig, key=None, compute_dtype=None):
    """Logits ``(B, T, vocab_size)`` of token ids ``(B, T)``."""
    return _module(cfg).forward(params, ids, cfg, key, compute_dtype)


def loss_fn(params: Params, x, y, cfg: ModelConfig, key=None, compute_dtype=None):
    """Mean next-token cross-entropy (float32 nats) of ids ``x`` and targets ``y`` ``(B, T)``."""
    return _module(cfg).loss_fn(params, x, y, cfg, key, compute_dtype)
