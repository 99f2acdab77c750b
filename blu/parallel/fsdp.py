"""Fully sharded data parallelism (FSDP, ZeRO-3) as a sharding of the training step.

Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models"
(stage 3); PyTorch's FullyShardedDataParallel. Parameters, gradients and optimizer state are
split over the data axis; each device keeps 1/N of every (large enough) parameter. Inside
``blu.shard`` the step

- gathers a layer's parameters (``all_gather``, tiled) just before the layer runs, inside a
  ``checkpoint`` of that layer, so the gathered copy is dead once the layer's forward is done
  (the memory plan frees it) and is gathered again in the backward pass;
- gets the gradients already reduce-scattered: the transpose of ``all_gather`` is
  ``psum_scatter``, so each device receives the sum over devices of its slice's gradient
  (replicated leaves get the same sum: shard_map's gradient rule ``psum``-s their cotangent);
- updates its slices with the ordinary optimizer (the optimizer state has the parameters'
  specs, so it is sharded too).

It is a choice of PartitionSpecs, not a separate trainer:

    specs = fsdp.specs(params, mesh.shape["data"])              # P("data") or P() per leaf
    def step(p, opt_state, x, y):                                # p: this device's slices
        mean_loss = lambda p: bp.pmean(loss_of_sharded_params(p, x, y), "data")
        loss, g = blu.value_and_grad(mean_loss)(p)              # the data-parallel mean
        p, opt_state = opt.step(g, opt_state, p)
        return p, opt_state, loss
    blu.jit(blu.shard(step, mesh, (specs, state_specs, P("data"), P("data")),
                      (specs, state_specs, P())))

where the loss calls ``fsdp.layer(block_fn, block_specs)(block_slices, x)`` per layer (or
``fsdp.gather`` for a parameter used directly).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from blu.core import pytree
from blu.lax.parallel import all_gather
from blu.parallel.mesh import PartitionSpec
from blu.transforms.remat import checkpoint

_is_spec = lambda s: isinstance(s, PartitionSpec)  # noqa: E731


def _sharded_dim(shape: tuple[int, ...], n: int, min_size: int) -> int | None:
    """The dimension to split N ways: the largest one that N divides (the first on ties);
    None (replicate) for small or indivisible parameters."""
    if int(np.prod(shape, dtype=np.int64)) < min_size or n == 1:
        return None
    fits = [i for i, s in enumerate(shape) if s % n == 0 and s >= n]
    return max(fits, key=lambda i: (shape[i], -i)) if fits else None


def specs(params: Any, n: int, axis: Any = "data", min_size: int = 0) -> Any:
    """The FSDP PartitionSpec of every parameter.

    Args:
        params: a pytree of arrays (global shapes).
        n: the size of the data axis.
        axis: its name.
        min_size: parameters with fewer elements stay replicated (biases, LayerNorm gains are
            cheap to keep whole and save a collective each).

    Returns:
        a pytree of ``PartitionSpec``: ``P(..., axis, ...)`` on the largest dimension N divides,
        else ``P()`` (replicated).
    """

    def one(p):
        d = _sharded_dim(tuple(np.shape(p)), n, min_size)
        if d is None:
            return PartitionSpec()
        return PartitionSpec(*([None] * d + [axis]))

    return pytree.tree_map(one, params)


def _spec_dim(spec: PartitionSpec) -> int | None:
    for i in range(len(spec)):
        if spec.names_of(i):
            return i
    return None


def _axis_of(spec: PartitionSpec) -> Any:
    d = _spec_dim(spec)
    return None if d is None else spec.names_of(d)


def gather(slices: Any, param_specs: Any) -> Any:
    """The whole parameters from this device's slices (inside ``blu.shard``): an
    ``all_gather(tiled=True)`` along each leaf's sharded dimension; replicated leaves as they
    are. Its transpose reduce-scatters the gradients."""

    def one(spec, x):
        d = _spec_dim(spec)
        if d is None:
            return x
        return all_gather(x, spec.names_of(d), axis=d, tiled=True)

    return pytree.tree_map(one, param_specs, slices, is_leaf=_is_spec)


def layer(fn: Callable, param_specs: Any) -> Callable:
    """``fn(params, *args)`` as an FSDP layer ``(slices, *args)``: the parameters are gathered
    just before ``fn`` runs, inside a ``checkpoint``, so only the slices (and the layer's
    inputs) are kept for the backward pass, which gathers them again.

    Args:
        fn: the layer, a function of the whole parameters (a pytree) and activations.
        param_specs: the layer's parameter specs (from :func:`specs`).
    """

    def gathered(slices, *args):
        return fn(gather(slices, param_specs), *args)

    return checkpoint(gathered)


def mean_gradients(grads: Any, param_specs: Any, axis: Any = "data") -> Any:
    """The data-parallel mean gradient of each slice, from the gradients of the *local* loss
    (inside ``blu.shard``).

    Under shard_map's gradient rule every leaf arrives summed over the devices: sharded leaves
    because ``all_gather``'s transpose reduce-scatters, replicated ones because the cotangent
    of a parameter invariant over ``axis`` is ``psum``-ed over it. So each is divided by N.
    (The gradient of ``pmean(loss, axis)`` is the mean already: no call is needed then.)
    """
    from blu.transforms.axes import axis_sizes, normalize_names

    def one(spec, g):
        names = _axis_of(spec)
        if names is None:
            names = normalize_names(axis, "fsdp.mean_gradients")
        return g / float(np.prod(axis_sizes(names, "fsdp.mean_gradients")))

    return pytree.tree_map(one, param_specs, grads, is_leaf=_is_spec)


def optimizer_specs(opt_state: Any, params: Any, param_specs: Any) -> Any:
    """Specs for an optimizer state (a NamedTuple such as ``AdamState``): each field shaped
    like the parameters (moments, momentum) gets the parameters' specs, the rest (the step
    counter) is replicated."""
    p_tree = pytree.tree_structure(params)
    fields = []
    for v in opt_state:
        if v is not None and pytree.tree_structure(v) == p_tree:
            fields.append(param_specs)
        else:
            fields.append(pytree.tree_map(lambda _: PartitionSpec(), v))
    return type(opt_state)(*fields)
