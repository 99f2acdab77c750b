"""Jacobians and Hessians: ``jacfwd`` (vmap of jvp over the inputs' standard basis), ``jacrev``
(vmap of vjp over the outputs' basis) and ``hessian``.

User-level compositions of the transforms (as ``jax.jacfwd`` in JAX's API module): they build
the basis and split the result with ``blu.numpy``, so they live above it, not in
``blu.transforms``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import blu.numpy as bnp
from blu.core import dtypes, pytree
from blu.core.interpreter import get_aval
from blu.transforms.ad import _argnums_tuple, jvp, vjp
from blu.transforms.batching import vmap

__all__ = ["jacfwd", "jacrev", "hessian"]


def _std_basis(leaves: list[Any]) -> Any:
    """Identity basis for the flattened inputs: (total, ...) stacked tangents per leaf."""
    sizes = [get_aval(x).size for x in leaves]
    total = sum(sizes)
    dtype = dtypes.result_type(*[get_aval(x).dtype for x in leaves]) if leaves else dtypes.float32
    eye = bnp.eye(total, dtype=dtype)
    out, start = [], 0
    for x, n in zip(leaves, sizes):
        aval = get_aval(x)
        block = eye[:, start : start + n].reshape((total,) + aval.shape).astype(aval.dtype)
        out.append(block)
        start += n
    return out, total


def jacfwd(fun: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """Jacobian by forward mode (vmap of jvp over the standard basis).

    The result for an output of shape ``O`` and input of shape ``I`` has shape ``O + I``.
    """
    nums = _argnums_tuple(argnums)

    def jac(*args: Any):
        diff = tuple(args[i] for i in nums)
        leaves, tree = pytree.tree_flatten(diff)
        basis, total = _std_basis(leaves)

        def partial_fun(*d):
            full = list(args)
            for i, a in zip(nums, d):
                full[i] = a
            return fun(*full)

        def push(*tangent_leaves):
            return jvp(partial_fun, diff, pytree.tree_unflatten(tree, list(tangent_leaves)))[1]

        # outputs: (total,) + out_shape  -> move basis axis last and split per input leaf
        out = vmap(push, in_axes=0, out_axes=-1)(*basis)
        # per output leaf, the pieces per input leaf (held in a _Pieces, a pytree leaf, so that
        # an output that is itself a list is not mistaken for the pieces)
        jac_tree = pytree.tree_map(lambda o: _Pieces(_split_last(o, leaves)), out)
        if isinstance(argnums, int):
            return pytree.tree_map(lambda p: p.parts[0], jac_tree)
        return pytree.tree_map(lambda p: pytree.tree_unflatten(tree, p.parts), jac_tree)

    return jac


class _Pieces:
    __slots__ = ("parts",)

    def __init__(self, parts: list[Any]):
        self.parts = parts


def _split_last(o: Any, leaves: list[Any]) -> list[Any]:
    parts, start = [], 0
    for x in leaves:
        aval = get_aval(x)
        piece = o[..., start : start + aval.size]
        parts.append(piece.reshape(o.shape[:-1] + aval.shape))
        start += aval.size
    return parts


def jacrev(fun: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """Jacobian by reverse mode (vmap of vjp over the output's standard basis).

    Output shape ``O + I`` as for ``jacfwd``.
    """
    nums = _argnums_tuple(argnums)

    def jac(*args: Any):
        diff = tuple(args[i] for i in nums)

        def partial_fun(*d):
            full = list(args)
            for i, a in zip(nums, d):
                full[i] = a
            return fun(*full)

        out, f_vjp = vjp(partial_fun, *diff)
        out_leaves, out_tree = pytree.tree_flatten(out)
        basis, total = _std_basis(out_leaves)
        cts = vmap(lambda *b: f_vjp(pytree.tree_unflatten(out_tree, list(b))), in_axes=0)(*basis)
        # cts: tuple over diff args of pytrees with leading axis `total` = flattened outputs
        per_out = []
        start = 0
        for o in out_leaves:
            oa = get_aval(o)
            sl = pytree.tree_map(
                lambda c: c[start : start + oa.size].reshape(oa.shape + c.shape[1:]), cts
            )
            per_out.append(sl[0] if isinstance(argnums, int) else sl)
            start += oa.size
        return pytree.tree_unflatten(out_tree, per_out)

    return jac


def hessian(fun: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """Second derivatives: ``jacfwd(jacrev(fun))``."""
    return jacfwd(jacrev(fun, argnums), argnums)
