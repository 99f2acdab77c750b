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

Gradients (JAX's pmap rule, see ``blu.shard``): each device differentiates its share of the loss
(``loss / M`` when the loss is replicated over the M devices of the model axis, or its own
tokens' part with sequence parallelism); split parameters then get their exact gradient, and
parameters replicated over the model axis get it after a ``psum`` over it
(:func:`sync_gradients`), which is Megatron's all-reduce of the replicated parameters'
gradients.
"""

from __future__ import annotations

from typing import Any

from blu.core import pytree
from blu.lax.parallel import all_gather, pmean, psum, psum_scatter
from blu.parallel.mesh import PartitionSpec

_is_spec = lambda s: isinstance(s, PartitionSpec)  # noqa: E731


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
    """The full gradients of every parameter from this device's (inside ``blu.shard``).

    Leaves whose spec does not split them over ``model_axis`` are summed over it (each device
    holds a partial gradient of a replicated parameter); with ``data_axis``, every leaf is then
    averaged over it (data parallelism).

    Args:
        grads: the gradients of this device's share of the loss (see the module docstring).
        specs: the parameters' PartitionSpecs (a pytree prefix of ``grads``).
        model_axis: the tensor-parallel mesh axis (or a tuple of axes).
        data_axis: the data-parallel mesh axis, or None.
    """
    names = model_axis if isinstance(model_axis, tuple) else (model_axis,)

    def one(spec, g):
        sub = pytree.tree_leaves(g)
        if not sub:
            return g
        split = set(spec.all_names())
        over = tuple(n for n in names if n not in split)
        g = pytree.tree_map(lambda v: psum(v, over), g) if over else g
        return pmean(g, data_axis) if data_axis is not None else g

    return pytree.tree_map(one, specs, grads, is_leaf=_is_spec)
