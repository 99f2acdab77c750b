"""blu.nn: neural-network functions over arrays and parameter pytrees (functional, no modules).

Everything here is a pure function of arrays, built from ``blu.numpy`` and ``blu.lax``, so it
differentiates, vmaps and jits. Reductions that need range (softmax, log_softmax, logsumexp,
cross_entropy, layer_norm statistics) are computed in float32 when given bfloat16/float16.

- activations: ``relu``, ``gelu``, ``silu``/``swish``, ``sigmoid``, and the rest of
  ``jax.nn``'s (``blu.nn.activations``): ``softplus``, ``log_sigmoid``, ``soft_sign``,
  ``sparse_plus``, ``sparse_sigmoid``, ``elu``, ``celu``, ``selu``, ``glu``, ``hard_tanh``,
  ``relu6``, ``hard_sigmoid``, ``hard_silu``/``hard_swish``, ``leaky_relu``, ``mish``,
  ``squareplus``, ``standardize``, ``tanh``, ``identity``
- normalization and probabilities: ``layer_norm``, ``rms_norm``, ``batch_norm`` (running
  statistics in and out, ``train`` explicit), ``group_norm``, ``softmax``, ``log_softmax``,
  ``logsumexp``, ``logmeanexp``, ``log1mexp``
- layers: ``linear``, ``embedding``, ``one_hot``, ``dropout``
- losses: ``cross_entropy``, ``linear_cross_entropy`` (the output projection fused with the
  loss, in row chunks: the logits are never held whole)
- pooling: ``max_pool``, ``avg_pool``, ``min_pool`` (flax.linen's, NHWC)
- attention: ``dot_product_attention`` (layout ``(..., T, heads, head_dim)``),
  ``causal_self_attention`` (GPT-2's block)
- ``initializers``: ``normal``, ``uniform``, ``zeros``, ``ones``, ``xavier_uniform``,
  ``lecun_normal``, ``truncated_normal``
"""

from blu.nn.layers import dropout, embedding, linear, one_hot
from blu.nn.losses import cross_entropy
from blu.nn.softmax_family import log_softmax, logsumexp, softmax
from blu.nn.activations import *  # noqa: F403
from blu.nn.activations import __all__ as _activations
from blu.nn.classifier import linear_cross_entropy
from blu.nn.log_means import log1mexp, logmeanexp
from blu.nn.attention import causal_self_attention, dot_product_attention
from blu.nn.pooling import POOL_OFFSETS, avg_pool, max_pool, min_pool
from blu.nn.normalization import (
    BATCH_NORM_STATISTICS,
    batch_norm,
    group_norm,
    layer_norm,
    rms_norm,
)
from blu.nn import initializers

__all__ = [
    "BATCH_NORM_STATISTICS",
    "POOL_OFFSETS",
    "avg_pool",
    "batch_norm",
    "causal_self_attention",
    "cross_entropy",
    "dot_product_attention",
    "dropout",
    "embedding",
    "group_norm",
    "initializers",
    "layer_norm",
    "linear",
    "linear_cross_entropy",
    "log1mexp",
    "log_softmax",
    "logmeanexp",
    "logsumexp",
    "max_pool",
    "min_pool",
    "one_hot",
    "rms_norm",
    "softmax",
    *_activations,
]
