"""Tensor parallelism (Megatron-LM) inside ``blu.shard``: column- and row-parallel linear layers,
sequence parallelism, and the gradient rule for parameters replicated over the model axis.

Shoeybi et al. 2019, "Megatron-LM: Training Multi-Billion Parameter Language Models Using Model
Parallelism", section 3 (an MLP's first linear split by columns, its second by rows, one
all-reduce per MLP; attention split by heads the same way); Korthikanti et al. 2022, "Reducing
Activation Recomputation in Large Transformer Models", section 4.2.2 (sequence parallelism: the
all-reduce becomes a reduce-scatter over the sequence, and an all-gather before the next
column-parallel layer, so layer norms and dropout run on 1/M of the tokens).

All functions run inside ``blu.shard`` on one device's blocks; the layout is a choice of
PartitionSpecs on the parameters:

    w_col: P(None, "model"), b_col: P("model")        # column-parallel (out features split)
    w_row: P("model", None), b_row: P()                # row-parallel (in features split)

Gradients (shard_map's rule, see ``blu.shard``): take the gradient of the global loss, e.g.
``pmean(loss, ("data", "model"))`` (the ``model`` mean is a no-op for a loss that is already
equal over the model axis, and averages the devices' token shares with sequence parallelism).
Split parameters then get their exact gradient, and parameters replicated over the model axis
too: their cotangent is ``psum``-ed over it by the transpose of the implicit ``pvary`` where
they meet split values, which is Megatron's all-reduce of the replicated parameters' gradients.
"""

from __future__ import annotations

import math
from typing import Any

from blu.core import pytree
from blu.lax.parallel import all_gather, psum, psum_scatter
from blu.transforms.axes import axis_sizes, normalize_names


def column_linear(x: Any, w: Any, b: Any | None = None) -> Any:
    """``x @ w + b`` with ``w``'s output features split over the model axis.

    Args:
        x: ``(..., d_in)``, the whole input (equal on every device of the model axis).
        w: ``(d_in, d_out / M)``, this device's columns; b: ``(d_out / M,)`` or None.

    Returns:
        ``(..., d_out / M)``: this device's output features. No communication.
    """
    y = x @ w
    return y if b is None else y + b


def row_linear(
    x: Any, w: Any, b: Any | None, axis: Any, *, scatter_dimension: int | None = None
) -> Any:
    """``x @ w + b`` with ``w``'s input features split over ``axis``: the partial products are
    summed over the axis (``psum``), or, with ``scatter_dimension`` (sequence parallelism),
    summed and split along that dimension of the output (``psum_scatter``, tiled).

    Args:
        x: ``(..., d_in / M)``, this device's input features (a column-parallel layer's output).
        w: ``(d_in / M, d_out)``, this device's rows; b: ``(d_out,)``, replicated, or None.
        axis: the model axis name.
        scatter_dimension: None (the output is replicated) or the dimension of the output
            (e.g. 1, the sequence of ``(B, T, d)``) each device keeps ``1/M`` of.

    Returns:
        ``(..., d_out)``, equal on every device, or its block along ``scatter_dimension``.
    """
    y = x @ w
    if scatter_dimension is None:
        y = psum(y, axis)
    else:
        y = psum_scatter(y, axis, scatter_dimension=scatter_dimension, tiled=True)
    return y if b is None else y + b


def gather_sequence(x: Any, axis: Any, dim: int = 1) -> Any:
    """The whole sequence from this device's block of it (sequence parallelism: before a
    column-parallel layer); its transpose reduce-scatters the cotangent."""
    return all_gather(x, axis, axis=dim, tiled=True)


def sync_gradients(grads: Any, specs: Any, model_axis: Any, data_axis: Any | None = None) -> Any:
    """The data-parallel mean of the gradients of a loss that is *not* averaged over
    ``data_axis`` (inside ``blu.shard``).

    Under shard_map's gradient rule the gradients of a loss equal over ``model_axis`` are exact
    over it already (the replicated parameters' partial gradients are ``psum``-ed by the rule),
    and the gradients of a loss that differs over ``data_axis`` are summed over it: each leaf
    is divided by the size of ``data_axis``. Taking the gradient of ``pmean(loss, data_axis)``
    instead needs no call.

    Args:
        grads: the gradients (a pytree).
        specs: the parameters' PartitionSpecs (a pytree prefix of ``grads``; kept for the
            earlier signature).
        model_axis: the tensor-parallel mesh axis (kept for the earlier signature).
        data_axis: the data-parallel mesh axis, or None (then ``grads`` are returned as they
            are).
    """
    del specs, model_axis
    if data_axis is None:
        return grads
    n = math.prod(axis_sizes(normalize_names(data_axis, "sync_gradients"), "sync_gradients"))
    return pytree.tree_map(lambda g: g / n, grads)
