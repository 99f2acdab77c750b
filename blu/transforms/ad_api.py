"""The user's differentiation API on pytrees: ``jvp``, ``linearize``, ``vjp``, ``grad`` and
``value_and_grad``, with their argument checks (``argnums``, primals against tangents,
cotangents against outputs).

Each flattens its arguments, runs the flat machinery of ``blu.transforms.ad`` (``jvp_flat``,
``linearize_flat``, ``vjp_flat``) and hands back eager ``Array``s in the caller's structure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from blu.core import dtypes, pytree
from blu.core.array import Array
from blu.core.errors import BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import Tracer, canonicalize_arg, get_aval
from blu.core.jaxpr import dce_jaxpr, eval_jaxpr
from blu.transforms import ops
from blu.transforms.ad import jvp_flat, linearize_flat, vjp_flat
from blu.transforms.ad_util import Zero, eager_arrays, instantiate, tangent_aval

# ---- forward mode ------------------------------------------------------------------------------


def _aux_pair(name: str, out: Any) -> tuple[Any, Any]:
    """``fun``'s ``(output, aux)`` with ``has_aux``.

    Raises:
        BluTypeError: ``fun`` did not return a pair.
    """
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        if isinstance(out, (tuple, list)):
            what = f"a {type(out).__name__} of length {len(out)}"
        elif isinstance(out, (Array, Tracer, np.ndarray)):
            what = f"one array {get_aval(out).str_short()}"
        else:
            what = type(out).__name__
        raise BluTypeError(
            with_user_line(
                f"{name}has_aux=True requires the function to return a pair (output, aux), "
                f"got {what}"
            )
        )
    return out[0], out[1]


def _flat_with_aux(
    name: str, fun: Callable, in_tree: Any, has_aux: bool, out_tree: list, aux_tree: list
) -> Callable:
    """``fun`` on flat leaves, returning its output's leaves then (with ``has_aux``) its aux's,
    whose trees it appends to ``out_tree`` and ``aux_tree``. The aux rides along as extra
    outputs, so it leaves the transform as plain primal values (its tangents are dropped)."""

    def flat_fun(*args):
        out = fun(*pytree.tree_unflatten(in_tree, list(args)))
        aux_leaves: list = []
        if has_aux:
            out, aux = _aux_pair(name, out)
            aux_leaves, t_aux = pytree.tree_flatten(aux)
            aux_tree.append(t_aux)
        out_leaves, t = pytree.tree_flatten(out)
        out_tree.append(t)
        return out_leaves + aux_leaves

    return flat_fun


def jvp(fun: Callable, primals: Sequence[Any], tangents: Sequence[Any], has_aux: bool = False):
    """Forward-mode derivative: ``(fun(*primals), d fun(primals) · tangents)``.

    Args:
        fun: function of pytrees of arrays (returning ``(output, aux)`` with ``has_aux``).
        primals: tuple of arguments.
        tangents: tuple of the same structure, shapes and dtypes.
        has_aux: ``fun`` returns a pair whose second element, auxiliary data, is not
            differentiated: the result is ``(primals_out, tangents_out, aux)``, ``aux`` the
            value ``fun`` returned (as ``jax.jvp``).

    Raises:
        BluTypeError: primals and tangents differ in structure, shape or dtype; with
        ``has_aux``, ``fun`` did not return a pair.
    """
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise BluTypeError(
            with_user_line(
                "jvp(fun, primals, tangents) takes primals and tangents as tuples, e.g. "
                f"jvp(f, (x,), (t,)); got {type(primals).__name__} and {type(tangents).__name__}"
            )
        )
    p_leaves, tree = pytree.tree_flatten(tuple(primals))
    t_leaves, t_tree = pytree.tree_flatten(tuple(tangents))
    p_leaves = [canonicalize_arg(x) for x in p_leaves]
    t_leaves = [canonicalize_arg(x) for x in t_leaves]
    if t_tree != tree:
        raise BluTypeError(with_user_line(f"jvp: primals {tree} and tangents {t_tree} differ"))
    for p, t in zip(p_leaves, t_leaves):
        pa, ta = get_aval(p), get_aval(t)
        if pa.shape != ta.shape or (dtypes.is_inexact(pa.dtype) and pa.dtype != ta.dtype):
            raise BluTypeError(
                with_user_line(
                    f"jvp: primal {pa.str_short()} and tangent {ta.str_short()} must match"
                )
            )
    out_tree: list = []
    aux_tree: list = []
    flat_fun = _flat_with_aux("jvp: ", fun, tree, has_aux, out_tree, aux_tree)
    outs, t_outs = jvp_flat(flat_fun, p_leaves, t_leaves)
    n_out = out_tree[0].num_leaves
    outs, aux_vals, t_outs = outs[:n_out], outs[n_out:], t_outs[:n_out]
    t_outs = eager_arrays([instantiate(t) for t in t_outs])
    outs = eager_arrays(outs)
    res = (pytree.tree_unflatten(out_tree[0], outs), pytree.tree_unflatten(out_tree[0], t_outs))
    if has_aux:
        return res + (pytree.tree_unflatten(aux_tree[0], eager_arrays(aux_vals)),)
    return res


# ---- linearize ----------------------------------------------------------------------------------


def linearize_with_aux(
    prefix: str, fun: Callable, in_tree: Any, leaves: list, has_aux: bool
) -> tuple[list, Any, list, list, Any, Any]:
    """``linearize_flat`` of ``fun`` (pytree arguments ``in_tree`` with flat ``leaves``):
    ``(outs, linear_jaxpr, residuals, aux_leaves, out_tree, aux_tree)``; with ``has_aux`` the
    aux's tangents are dropped from the linear jaxpr (``aux_tree`` is None without)."""
    out_tree: list = []
    aux_tree: list = []
    flat_fun = _flat_with_aux(prefix, fun, in_tree, has_aux, out_tree, aux_tree)
    outs, jaxpr, residuals = linearize_flat(flat_fun, leaves)
    n_out = out_tree[0].num_leaves
    outs, aux_vals = outs[:n_out], outs[n_out:]
    if has_aux:  # the aux's tangents are not wanted: drop their staged work
        jaxpr = dce_jaxpr(jaxpr, [i < n_out for i in range(len(jaxpr.outvars))])
    return outs, jaxpr, residuals, aux_vals, out_tree[0], aux_tree[0] if aux_tree else None


def linearize(fun: Callable, *primals: Any, has_aux: bool = False):
    """``(fun(*primals), f_jvp)`` where ``f_jvp(*tangents)`` evaluates the linearized function.

    The primal computation runs once; ``f_jvp`` replays only the staged linear part. With
    ``has_aux``, ``fun`` returns ``(output, aux)`` and the result is ``(output, f_jvp, aux)``,
    ``aux`` not differentiated (as ``jax.linearize``).

    Raises:
        BluTypeError: with ``has_aux``, ``fun`` did not return a pair.
    """
    leaves, tree = pytree.tree_flatten(primals)
    leaves = [canonicalize_arg(x) for x in leaves]
    outs, jaxpr, residuals, aux_vals, out_tree, aux_tree = linearize_with_aux(
        "linearize: ", fun, tree, leaves, has_aux
    )

    def f_jvp(*tangents):
        t_leaves = pytree.tree_leaves(tangents)

        t_outs = eager_arrays(eval_jaxpr(jaxpr, residuals, *t_leaves), jaxpr.out_avals)
        return pytree.tree_unflatten(out_tree, t_outs)

    f_jvp.jaxpr = jaxpr  # type: ignore[attr-defined]
    f_jvp.residuals = residuals  # type: ignore[attr-defined]
    out = pytree.tree_unflatten(out_tree, eager_arrays(outs))
    if has_aux:
        return out, f_jvp, pytree.tree_unflatten(aux_tree, eager_arrays(aux_vals))
    return out, f_jvp


# ---- reverse mode ------------------------------------------------------------------------------


def vjp(fun: Callable, *primals: Any, has_aux: bool = False):
    """``(fun(*primals), f_vjp)`` where ``f_vjp(ct)`` returns the cotangents of ``primals``.

    Args:
        fun: function of pytrees of arrays returning a pytree (or ``(out, aux)`` with has_aux).
        primals: its arguments.

    Returns:
        ``(out, f_vjp)`` or ``(out, f_vjp, aux)``; ``f_vjp`` takes a cotangent with ``out``'s
        structure and returns a tuple with one cotangent per primal.
    """
    leaves, in_tree = pytree.tree_flatten(primals)
    leaves = [canonicalize_arg(x) for x in leaves]
    out_tree: list = []
    aux_tree: list = []

    flat_fun = _flat_with_aux("", fun, in_tree, has_aux, out_tree, aux_tree)
    outs, f_vjp_flat = vjp_flat(flat_fun, leaves)
    n_out = out_tree[0].num_leaves
    outs, aux_vals = outs[:n_out], outs[n_out:]
    in_avals = [tangent_aval(get_aval(x)) for x in leaves]
    aux_zeros = [Zero(tangent_aval(get_aval(a))) for a in aux_vals]

    def f_vjp(ct: Any) -> tuple:
        ct_leaves, ct_tree = pytree.tree_flatten(ct)
        if ct_tree != out_tree[0]:
            raise BluTypeError(
                with_user_line(f"vjp: cotangent structure {ct_tree} != output {out_tree[0]}")
            )
        for i, (c, o) in enumerate(zip(ct_leaves, outs)):
            ca, oa = get_aval(c), tangent_aval(get_aval(o))
            # a float output's cotangent has its dtype (JAX's check); a weakly typed one (a
            # Python scalar) is cast to it
            wrong_dtype = dtypes.is_inexact(oa.dtype) and ca.dtype != oa.dtype
            if ca.shape != oa.shape or (wrong_dtype and not ca.weak_type):
                raise BluTypeError(
                    with_user_line(
                        f"vjp: cotangent leaf {i} is {ca.str_short()} but the output it "
                        f"pairs with is {oa.str_short()}"
                    )
                )
            if wrong_dtype:
                ct_leaves[i] = ops.convert_element_type(c, oa.dtype)
        cts = f_vjp_flat(ct_leaves + aux_zeros)
        cts = [instantiate(Zero(a) if c is None else c) for c, a in zip(cts, in_avals)]
        return pytree.tree_unflatten(in_tree, eager_arrays(cts, in_avals))

    out = pytree.tree_unflatten(out_tree[0], eager_arrays(outs))
    if has_aux:
        return out, f_vjp, pytree.tree_unflatten(aux_tree[0], eager_arrays(aux_vals))
    return out, f_vjp


def single_argnum(argnums: Any) -> bool:
    """Whether ``argnums`` is one position (results unwrapped) rather than a sequence: an int,
    a numpy integer or a 0-d integer array (JAX's ``operator.index``). A ``bool`` is not one:
    ``resolve_argnums`` refuses it, alone as in a sequence (``True`` would mean argument 1)."""
    if isinstance(argnums, np.ndarray):
        return argnums.ndim == 0 and argnums.dtype.kind in "iu"
    return dtypes.is_int_scalar(argnums)


def _argnums_tuple(argnums: int | Sequence[int]) -> tuple[int, ...]:
    if isinstance(argnums, np.ndarray) and argnums.ndim == 0:
        return (argnums[()],)  # a numpy scalar: resolve_argnums checks it is an integer
    if single_argnum(argnums):
        return (int(argnums),)
    # a float or a str is neither a position nor a sequence of them: resolve_argnums names it
    iterable = hasattr(argnums, "__iter__") and not isinstance(argnums, str)
    return tuple(argnums) if iterable else (argnums,)


def resolve_argnums(name: str, argnums: int | Sequence[int], n_args: int) -> tuple[int, ...]:
    """``argnums`` as non-negative positions among ``n_args`` positional arguments.

    Raises:
        BluTypeError: a position that is not an int, or out of range (``-n_args <= i <
            n_args``, as JAX).
        BluValueError: a position named twice (its gradient would be split between the two).
    """
    nums = _argnums_tuple(argnums)
    if not all(dtypes.is_int_scalar(i) for i in nums):
        raise BluTypeError(with_user_line(f"{name}: argnums must be ints, got {argnums!r}"))
    nums = tuple(int(i) for i in nums)
    bad = [i for i in nums if not -n_args <= i < n_args]
    if bad:
        raise BluTypeError(
            with_user_line(f"{name}: argnums={argnums} but only {n_args} positional args")
        )
    out = tuple(i % n_args for i in nums)
    if len(set(out)) != len(out):
        raise BluValueError(
            with_user_line(f"{name}: argnums={argnums} names an argument more than once")
        )
    return out


def replace_args(args: Sequence[Any], nums: Sequence[int], values: Sequence[Any]) -> list[Any]:
    """``args`` as a list with ``args[i]`` replaced by the matching entry of ``values`` for each
    position ``i`` of ``nums``: the differentiated arguments put back among the others."""
    full = list(args)
    for i, a in zip(nums, values):
        full[i] = a
    return full


def value_and_grad(
    fun: Callable,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Callable:
    """A function returning ``(fun(*args), gradient of fun with respect to args[argnums])``.

    ``fun`` must return a real scalar (shape ``()``, a float dtype), or ``(scalar, aux)`` with
    ``has_aux``, in which case the result is ``((value, aux), grad)``.

    Complex inputs follow JAX's convention: the gradient is the pullback of 1 through the
    R-linear derivative, so for ``f: C -> R`` at ``z = x + iy`` it is ``df/dx - i df/dy``
    (the conjugate of the direction of steepest ascent; ``-lr * conj(g)`` descends). With
    ``holomorphic=True`` ``fun`` must return a complex scalar and the inputs must be complex
    (as ``jax.grad``); the result is the complex derivative ``f'(z)``.

    With ``allow_int=True`` integer and bool inputs may be differentiated too: their gradient
    is zero, an array of their own shape and dtype (JAX's is a ``float0`` array, a dtype blu
    does not have).

    Raises:
        BluTypeError: the output is not a float scalar (a complex one with ``holomorphic``),
        or a differentiated input is not float or complex (complex, with ``holomorphic``;
        integer and bool ones pass with ``allow_int``).
    """

    def vg(*args: Any, **kwargs: Any):
        nums = resolve_argnums("grad", argnums, len(args))
        for i in nums:
            for leaf in pytree.tree_leaves(args[i]):
                aval = get_aval(leaf)
                if holomorphic and not dtypes.is_complex(aval.dtype):
                    raise BluTypeError(
                        with_user_line(
                            f"grad(holomorphic=True) requires complex inputs, but argument {i} "
                            f"has a leaf {aval.str_short()}"
                        )
                    )
                if not dtypes.is_inexact(aval.dtype) and not allow_int:
                    raise BluTypeError(
                        with_user_line(
                            f"grad requires float inputs, but argument {i} has a leaf "
                            f"{aval.str_short()}; use a float dtype, exclude it from argnums "
                            "or pass allow_int=True (its gradient is then zero)"
                        )
                    )

        def partial_fun(*diff_args):
            return fun(*replace_args(args, nums, diff_args), **kwargs)

        diff = tuple(args[i] for i in nums)
        res = vjp(partial_fun, *diff, has_aux=has_aux)
        out, f_vjp = res[0], res[1]
        aval = get_aval(out) if not isinstance(out, (tuple, list, dict)) else None
        ok = dtypes.is_complex if holomorphic else dtypes.is_float  # as jax.grad
        if aval is None or aval.shape != () or not ok(aval.dtype):
            what = aval.str_short() if aval is not None else type(out).__name__
            kind = "complex scalar (holomorphic=True)" if holomorphic else "float scalar"
            raise BluTypeError(
                with_user_line(
                    f"grad requires a function returning a {kind}, got {what}"
                    + ("" if has_aux else " (if it returns (loss, aux), pass has_aux=True)")
                )
            )
        g = f_vjp(Array(np.ones((), aval.dtype)))
        g = g[0] if single_argnum(argnums) else g
        return ((out, res[2]), g) if has_aux else (out, g)

    vg.__name__ = f"value_and_grad({getattr(fun, '__name__', 'fun')})"
    return vg


def grad(
    fun: Callable,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Callable:
    """The gradient of a scalar function (see ``value_and_grad``, which also says the
    convention for complex inputs, ``holomorphic`` and ``allow_int``), with respect to
    ``args[argnums]``.

    Returns ``grad`` (or ``(grad, aux)`` with ``has_aux``) with the structure of the argument(s).
    """
    vg = value_and_grad(fun, argnums, has_aux, holomorphic, allow_int)

    def g(*args: Any, **kwargs: Any):
        (val, grads) = vg(*args, **kwargs)
        return (grads, val[1]) if has_aux else grads

    g.__name__ = f"grad({getattr(fun, '__name__', 'fun')})"
    return g
