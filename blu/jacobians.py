"""Jacobians and Hessians: ``jacfwd`` (vmap of jvp over the inputs' standard basis), ``jacrev``
(vmap of vjp over the outputs' basis) and ``hessian``.

User-level compositions of the transforms (as ``jax.jacfwd`` in JAX's API module): they build
the basis and split the result with ``blu.numpy``, so they live above it, not in
``blu.transforms``.

Complex numbers follow JAX (``jax.jacfwd``/``jax.jacrev``, and "Complex numbers and
differentiation" in JAX's documentation): a Jacobian is a complex matrix only where it is one,
for a holomorphic function (``holomorphic=True``: complex inputs and outputs, the result is
``f'(z)``). Without it, ``jacfwd`` takes real inputs only (a real input's direction is the only
one its basis spans, so for a complex input it would silently drop ``d/dy``) and ``jacrev`` real
outputs only (for a real output of complex inputs it gives ``df/dx - i df/dy`` per element, as
``grad``; integer outputs get zero rows); a complex input to ``jacfwd`` or complex output of
``jacrev`` raises ``BluTypeError``: use ``blu.jvp``/``blu.vjp`` directly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import blu.numpy as bnp
from blu.core import dtypes, pytree
from blu.core.errors import BluTypeError, with_user_line
from blu.core.interpreter import get_aval
from blu.transforms.ad_api import jvp, replace_args, resolve_argnums, single_argnum, vjp
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


_HINT = (
    "; for a holomorphic function pass holomorphic=True, for a non-holomorphic one use "
    "blu.jvp / blu.vjp directly"
)
_INT_HINT = "; pass allow_int=True for an integer or bool input (its rows are then zero)"


def _check_inputs(
    name: str, holomorphic: bool, leaves: list[Any], real_only: bool, allow_int: bool = False
) -> None:
    """JAX's input dtypes: complex with ``holomorphic``; else float (``real_only``: jacfwd) or
    float and complex (jacrev), and integer and bool too with ``allow_int`` (jacrev)."""
    for leaf in leaves:
        a = get_aval(leaf)
        if holomorphic and not dtypes.is_complex(a.dtype):
            raise BluTypeError(
                with_user_line(
                    f"{name}(holomorphic=True) requires complex inputs, got {a.str_short()}"
                )
            )
        ok = dtypes.is_float(a.dtype) if real_only else dtypes.is_inexact(a.dtype)
        ok = ok or (allow_int and not dtypes.is_inexact(a.dtype))
        if not holomorphic and not ok:
            what = "real float" if real_only else "float or complex"
            raise BluTypeError(
                with_user_line(
                    f"{name} requires {what} inputs, got {a.str_short()}"
                    + (_HINT if dtypes.is_complex(a.dtype) else "")
                    + (_INT_HINT if name == "jacrev" and not dtypes.is_inexact(a.dtype) else "")
                )
            )


def _check_outputs(name: str, holomorphic: bool, leaves: list[Any], real_only: bool) -> None:
    """JAX's output dtypes: complex with ``holomorphic``; else any (jacfwd) or not complex
    (``real_only``: jacrev; integer and bool outputs are kept, with zero rows, where JAX
    raises)."""
    for leaf in leaves:
        a = get_aval(leaf)
        if holomorphic and not dtypes.is_complex(a.dtype):
            raise BluTypeError(
                with_user_line(
                    f"{name}(holomorphic=True) requires complex outputs, got {a.str_short()}"
                )
            )
        if not holomorphic and real_only and dtypes.is_complex(a.dtype):
            raise BluTypeError(with_user_line(f"{name} requires real outputs, got {a.str_short()}"
                                              + _HINT))  # fmt: skip


def _aux_pair(name: str, out: Any) -> tuple[Any, Any]:
    """``fun``'s ``(output, aux)`` with ``has_aux``.

    Raises:
        BluTypeError: ``fun`` did not return a pair.
    """
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise BluTypeError(
            with_user_line(
                f"{name}(has_aux=True) requires the function to return a pair (output, aux), "
                f"got {type(out).__name__}"
            )
        )
    return out[0], out[1]


def jacfwd(
    fun: Callable,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    *,
    holomorphic: bool = False,
) -> Callable:
    """Jacobian by forward mode (vmap of jvp over the standard basis), as ``jax.jacfwd``.

    The result for an output of shape ``O`` and input of shape ``I`` has shape ``O + I``, with
    the output's dtype.

    Args:
        fun: function of pytrees of arrays.
        argnums: the positional argument(s) to differentiate.
        has_aux: ``fun`` returns ``(output, aux)``; the result is ``(jacobian, aux)``.
        holomorphic: ``fun`` is holomorphic: inputs and outputs complex, the result ``f'(z)``.

    Keyword arguments of the call are passed to ``fun`` (not differentiated).

    Raises:
        BluTypeError: without ``holomorphic``, an input that is not a real float (a complex
        input's basis would span only its real direction); with it, an input or output that is
        not complex.
    """

    def jac(*args: Any, **kwargs: Any):
        nums = resolve_argnums("jacfwd", argnums, len(args))
        diff = tuple(args[i] for i in nums)
        leaves, tree = pytree.tree_flatten(diff)
        _check_inputs("jacfwd", holomorphic, leaves, real_only=True)
        basis, total = _std_basis(leaves)

        def partial_fun(*d):
            out = fun(*replace_args(args, nums, d), **kwargs)
            return _aux_pair("jacfwd", out) if has_aux else out

        def push(*tangent_leaves):
            y, t = jvp(partial_fun, diff, pytree.tree_unflatten(tree, list(tangent_leaves)))
            return (t[0], y[1]) if has_aux else t  # (aux: of the primals, not batched)

        # outputs: (total,) + out_shape  -> move basis axis last and split per input leaf
        out = vmap(push, in_axes=0, out_axes=(-1, None) if has_aux else -1)(*basis)
        out, aux = out if has_aux else (out, None)
        # a tangent has its output's dtype class (complex for complex outputs)
        _check_outputs("jacfwd", holomorphic, pytree.tree_leaves(out), real_only=False)
        # per output leaf, the pieces per input leaf (held in a _Pieces, a pytree leaf, so that
        # an output that is itself a list is not mistaken for the pieces)
        jac_tree = pytree.tree_map(lambda o: _Pieces(_split_last(o, leaves)), out)
        # (``tree`` is the tuple of the differentiated arguments: one entry for an int argnums)
        pick = (lambda t: t[0]) if single_argnum(argnums) else (lambda t: t)
        result = pytree.tree_map(lambda p: pick(pytree.tree_unflatten(tree, p.parts)), jac_tree)
        return (result, aux) if has_aux else result

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


def jacrev(
    fun: Callable,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    *,
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Callable:
    """Jacobian by reverse mode (vmap of vjp over the output's standard basis), as
    ``jax.jacrev``.

    Output shape ``O + I`` as for ``jacfwd``, with the input's dtype: for a real output of a
    complex input each row is that element's ``grad``, ``df/dx - i df/dy`` (JAX's convention).

    Args:
        fun: function of pytrees of arrays.
        argnums: the positional argument(s) to differentiate.
        has_aux: ``fun`` returns ``(output, aux)``; the result is ``(jacobian, aux)``.
        holomorphic: ``fun`` is holomorphic: inputs and outputs complex, the result ``f'(z)``.
        allow_int: integer and bool inputs may be differentiated too: their Jacobian is zero,
            with the input's dtype (JAX's is a ``float0`` array, a dtype blu does not have).

    Keyword arguments of the call are passed to ``fun`` (not differentiated).

    Raises:
        BluTypeError: without ``holomorphic``, an input that is not float or complex (integer
        and bool ones pass with ``allow_int``), or a complex output (integer and bool outputs
        get zero rows; JAX raises for them); with it, an input or output that is not complex.
    """

    def jac(*args: Any, **kwargs: Any):
        nums = resolve_argnums("jacrev", argnums, len(args))
        diff = tuple(args[i] for i in nums)
        leaves = pytree.tree_leaves(diff)
        _check_inputs("jacrev", holomorphic, leaves, real_only=False, allow_int=allow_int)

        def partial_fun(*d):
            out = fun(*replace_args(args, nums, d), **kwargs)
            return _aux_pair("jacrev", out) if has_aux else out

        out, f_vjp, *aux = vjp(partial_fun, *diff, has_aux=has_aux)
        out_leaves, out_tree = pytree.tree_flatten(out)
        _check_outputs("jacrev", holomorphic, out_leaves, real_only=True)
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
            per_out.append(sl[0] if single_argnum(argnums) else sl)
            start += oa.size
        result = pytree.tree_unflatten(out_tree, per_out)
        return (result, aux[0]) if has_aux else result

    return jac


def hessian(
    fun: Callable,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    *,
    holomorphic: bool = False,
) -> Callable:
    """Second derivatives: ``jacfwd(jacrev(fun))`` (``has_aux`` and ``holomorphic`` passed to
    both; without ``holomorphic`` the inputs must be real floats, as for ``jacfwd``)."""
    inner = jacrev(fun, argnums, has_aux, holomorphic=holomorphic)
    return jacfwd(inner, argnums, has_aux, holomorphic=holomorphic)
