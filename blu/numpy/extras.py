"""More of NumPy's API as ``jax.numpy`` has it: ``unique``, the 1-d set operations (``isin``,
``intersect1d``, ``union1d``, ``setdiff1d``, ``setxor1d``), ``select``, ``argwhere``,
``flatnonzero``, ``cross``, ``vectorize``, ``apply_along_axis``, ``lexsort``, ``rot90``,
``sinc``, ``heaviside``, ``trapezoid``, ``ediff1d`` (the index helpers are in
``index_tricks``).

Results whose size depends on values (``unique``, ``argwhere``, the set operations) need
concrete inputs or a static ``size=`` (missing entries filled with ``fill_value``), as in JAX.
"""

from __future__ import annotations

import builtins
import operator
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.errors import BluShapeError, BluValueError, with_user_line
from blu.numpy._dtypes import issubdtype as _issubdtype
from blu.numpy._dtypes import result_type as _result_type
from blu.numpy._promote import (
    asarray_operand,
    asarray_operand_in,
    asarray_operands,
    asarray_operands_keep_kind,
    broadcast_to,
    canonicalize_axis,
    concrete_value,
    promote_dtypes,
)
from blu.numpy.creation import asarray, ones_like, zeros, zeros_like
from blu.numpy.logic import equal, logical_not, logical_xor
from blu.numpy.manipulation import (
    astype,
    concatenate,
    expand_dims,
    flip,
    moveaxis,
    ravel,
    reshape,
    stack,
    swapaxes,
)
from blu.numpy.reductions import any as _any
from blu.numpy.reductions import argmax
from blu.numpy.reductions import sum as _sum
from blu.numpy.selection import nonzero, take, take_along_axis, where
from blu.numpy.sets import _groups, _row_groups, unique_all
from blu.numpy.sorting import argsort
from blu.numpy.transcendental import sin
from blu.numpy.ufuncs import clip

__all__ = [
    "apply_along_axis",
    "apply_over_axes",
    "argwhere",
    "cross",
    "ediff1d",
    "flatnonzero",
    "heaviside",
    "intersect1d",
    "isin",
    "lexsort",
    "rot90",
    "select",
    "setdiff1d",
    "setxor1d",
    "sinc",
    "trapezoid",
    "trim_zeros",
    "union1d",
    "unique",
    "vectorize",
]


def unique(
    ar: Any,
    return_index: bool = False,
    return_inverse: bool = False,
    return_counts: bool = False,
    axis: int | None = None,
    *,
    equal_nan: bool = True,
    size: int | None = None,
    fill_value: Any = None,
    sorted: bool = True,  # noqa: A002
) -> Any:
    """The sorted unique values of ``ar`` (flattened), as ``jax.numpy.unique``.

    Args:
        ar: any shape.
        return_index, return_inverse, return_counts: also return the first index of each value
            (int32), the index of each element's value (``ar``'s shape), the counts.
        axis: None (the raveled ``ar``'s values) or an axis: the distinct slices along it,
            sorted lexicographically (the inverse indices are then 1-d, numpy's).
        equal_nan: whether the NaNs are one value (numpy's and JAX's default) or each their
            own (the Array API's rule, as ``unique_all`` and the other ``unique_*``).
        size, fill_value: a static result length (needed under ``jit``) and the padding.
        sorted: numpy's and JAX's keyword; the values are sorted either way (as JAX's).

    Returns:
        ``values``, or a tuple ``(values, [index], [inverse], [counts])``.

    Raises:
        BluAxisError: ``axis`` out of range.
        ConcretizationError: traced input without ``size``.
    """
    if axis is None:
        values, indices, inverse, counts = _groups(ar, size, fill_value, bool(equal_nan))
    else:
        values, indices, inverse, counts = _row_groups(ar, axis, size, fill_value, bool(equal_nan))
    if not (return_index or return_inverse or return_counts):
        return values
    out = [values]
    if return_index:
        out.append(indices)
    if return_inverse:
        out.append(inverse)
    if return_counts:
        out.append(counts)
    return tuple(out)


def isin(element: Any, test_elements: Any, assume_unique: bool = False, invert: bool = False,
         *, method: str = "auto"):  # fmt: skip
    """bool array of ``element``'s shape: whether each element is in ``test_elements``.
    ``method`` (JAX's: 'auto', 'compare_all', 'binary_search', 'sort') is accepted; every
    element is compared with every test element whatever it says.

    Raises:
        BluValueError: an unknown ``method``.
    """
    if method not in ("auto", "compare_all", "binary_search", "sort"):
        raise BluValueError(
            with_user_line(
                f"isin: unknown method {method!r} (expected 'auto', 'compare_all', "
                "'binary_search' or 'sort')"
            )
        )
    element, test = asarray_operands(element, test_elements)
    test = ravel(test)
    hit = _any(equal(element[..., None], test), axis=-1)
    return logical_not(hit) if invert else hit


def _compact(values: Any, keep: Any, size: int | None, fill_value: Any, name: str) -> Any:
    """``values[keep]`` (1-d), concrete, or padded to ``size`` with ``fill_value``."""
    if size is None:
        v = concrete_value(values, f"{name} without size=")
        k = concrete_value(keep, f"{name} without size=")
        return asarray(v[k])
    (idx,) = nonzero(keep, size=size, fill_value=-1)
    got = take(values, clip(idx, 0, None))
    # the padding takes the values' dtype (as JAX's setdiff1d), never widening the result
    fill = got[0] if fill_value is None else astype(asarray(fill_value), got.dtype)
    return where(idx >= 0, got, fill)


def _unique_sorted(ar: Any, size: int | None, name: str) -> tuple[Any, Any]:
    """The unique values of ``ar`` and a mask of which are real (not padding)."""
    ar = ravel(asarray_operand(ar))
    if size is None:
        v = np.unique(concrete_value(ar, f"{name} without size="))
        return asarray(v), asarray(np.ones(v.shape, bool))
    n = builtins.max(ar.shape[0], 1)
    r = unique_all(ar, size=n)
    return r.values, r.counts > 0


def union1d(ar1: Any, ar2: Any, *, size: int | None = None, fill_value: Any = None) -> Any:
    """The sorted unique values of both arrays (flattened)."""
    both = concatenate([ravel(a) for a in asarray_operands(ar1, ar2)])
    return unique(both, size=size, fill_value=fill_value)


def intersect1d(ar1: Any, ar2: Any, assume_unique: bool = False, return_indices: bool = False,
                *, size: int | None = None, fill_value: Any = None) -> Any:  # fmt: skip
    """The sorted unique values found in both arrays (of their promoted dtype).

    With ``return_indices``: ``(values, ind1, ind2)``, the index of each value's first
    occurrence in the raveled ``ar1`` and ``ar2`` (int32; with ``size``, the padding's indices
    are the arrays' lengths, as JAX's)."""
    ar1, ar2 = (ravel(a) for a in promote_dtypes(ar1, ar2))
    if not return_indices:
        u, real = _unique_sorted(ar1, size, "intersect1d")
        keep = real & isin(u, ar2)
        return _compact(u, keep, size, fill_value, "intersect1d")
    if size is None:
        a = concrete_value(ar1, "intersect1d without size=")
        b = concrete_value(ar2, "intersect1d without size=")
        v, i1, i2 = np.intersect1d(a, b, assume_unique=assume_unique, return_indices=True)
        return asarray(v), asarray(i1.astype(np.int32)), asarray(i2.astype(np.int32))
    n1, n2 = ar1.shape[0], ar2.shape[0]
    u, first1, _, counts = unique_all(ar1, size=builtins.max(n1, 1))
    eq = equal(u[:, None], ar2[None, :])
    keep = (counts > 0) & _any(eq, axis=-1)
    first2 = argmax(eq, axis=-1) if n2 else zeros(u.shape, np.int32)
    (idx,) = nonzero(keep, size=size, fill_value=-1)
    ok, safe = idx >= 0, clip(idx, 0, None)
    values = take(u, safe)
    fill = values[0] if fill_value is None else astype(asarray(fill_value), values.dtype)
    values = where(ok, values, fill)
    return values, where(ok, take(first1, safe), n1), where(ok, take(first2, safe), n2)


def setdiff1d(ar1: Any, ar2: Any, assume_unique: bool = False, *, size: int | None = None,
              fill_value: Any = None) -> Any:  # fmt: skip
    """The sorted unique values of ``ar1`` not in ``ar2``."""
    u, real = _unique_sorted(ar1, size, "setdiff1d")
    keep = real & isin(u, ar2, invert=True)
    return _compact(u, keep, size, fill_value, "setdiff1d")


def setxor1d(ar1: Any, ar2: Any, assume_unique: bool = False, *, size: int | None = None,
             fill_value: Any = None) -> Any:  # fmt: skip
    """The sorted unique values in exactly one of the arrays.

    A NaN equals nothing, so each array's NaNs are kept, one per array (numpy's and JAX's:
    ``setxor1d([nan, 1], [nan, 2])`` is ``[1, 2, nan, nan]``); with ``size`` there is one NaN
    however many arrays have one."""
    ar1, ar2 = (ravel(a) for a in promote_dtypes(ar1, ar2))
    if size is None:
        a = concrete_value(ar1, "setxor1d without size=")
        b = concrete_value(ar2, "setxor1d without size=")
        return asarray(np.setxor1d(a, b, assume_unique=assume_unique))
    both = concatenate([ar1, ar2])
    u, _, _, counts = _groups(both, builtins.max(both.shape[0], 1), None, equal_nan=True)
    nan = u != u
    keep = (counts > 0) & (logical_xor(isin(u, ar1), isin(u, ar2)) | nan)
    return _compact(u, keep, size, fill_value, "setxor1d")


def select(condlist: Sequence[Any], choicelist: Sequence[Any], default: Any = 0) -> Any:
    """``choicelist[i]`` where ``condlist[i]`` is the first true condition, else ``default``.

    Raises:
        BluValueError: the lists differ in length or are empty.
    """
    if len(condlist) != len(choicelist):
        raise BluValueError(
            with_user_line(f"select: {len(condlist)} conditions but {len(choicelist)} choices")
        )
    if len(condlist) == 0:  # (an array of conditions has no truth value)
        raise BluValueError(with_user_line("select: condlist is empty"))
    out = asarray_operands(default, *choicelist)[0]  # 0.1 beside float64 is float64's
    for cond, choice in zip(reversed(condlist), reversed(choicelist)):
        out = where(cond, choice, out)
    return out


def argwhere(a: Any, *, size: int | None = None, fill_value: Any = None) -> Any:
    """Indices of the nonzero elements, ``(count, a.ndim)`` int32 (``size`` rows under jit)."""
    a = asarray_operand(a)
    if a.ndim == 0:
        rows = argwhere(reshape(a, (1,)), size=size, fill_value=fill_value)
        return rows[:, :0]
    return stack(nonzero(a, size=size, fill_value=fill_value), axis=1)


def flatnonzero(a: Any, *, size: int | None = None, fill_value: Any = None) -> Any:
    """Indices of the nonzero elements of ``ravel(a)`` (int32)."""
    return nonzero(ravel(asarray_operand(a)), size=size, fill_value=fill_value)[0]


def cross(a: Any, b: Any, axisa: int = -1, axisb: int = -1, axisc: int = -1,
          axis: int | None = None) -> Any:  # fmt: skip
    """The cross product of 3-vectors (or 2-vectors) along the given axes, as ``numpy.cross``.

    Raises:
        BluValueError: a vector axis has a length other than 2 or 3.
    """
    if axis is not None:
        axisa = axisb = axisc = axis
    a = moveaxis(asarray_operand(a), axisa, -1)
    b = moveaxis(asarray_operand(b), axisb, -1)
    if a.shape[-1] not in (2, 3) or b.shape[-1] not in (2, 3):
        raise BluValueError(
            with_user_line(
                f"cross: vector axes must have length 2 or 3, got {a.shape[-1]} and {b.shape[-1]}"
            )
        )
    a0, a1 = a[..., 0], a[..., 1]
    b0, b1 = b[..., 0], b[..., 1]
    if a.shape[-1] == 2 and b.shape[-1] == 2:
        return a0 * b1 - a1 * b0
    a2 = a[..., 2] if a.shape[-1] == 3 else zeros(a0.shape, a.dtype)
    b2 = b[..., 2] if b.shape[-1] == 3 else zeros(b0.shape, b.dtype)
    c = stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)
    return moveaxis(c, -1, axisc)


_DIMS = re.compile(r"\(([^()]*)\)")


def _parse_signature(signature: str) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    try:
        ins, outs = signature.replace(" ", "").split("->")
        parse = lambda s: [tuple(d for d in g.split(",") if d) for g in _DIMS.findall(s)]  # noqa: E731
        return parse(ins), parse(outs)
    except ValueError:
        raise BluValueError(f"vectorize: not a gufunc signature: {signature!r}") from None


def vectorize(pyfunc: Callable[..., Any], *, excluded: frozenset = frozenset(),
              signature: str | None = None) -> Callable[..., Any]:  # fmt: skip
    """``pyfunc`` mapped over its arguments' broadcast leading (loop) dimensions with
    ``blu.vmap``, as ``jax.numpy.vectorize`` (``signature`` in numpy's gufunc form, e.g.
    ``"(n),(n)->()"``, names the core dimensions each call sees).

    Args:
        pyfunc: a function of blu arrays.
        excluded: positions or names of arguments passed through unmapped.
        signature: core dimensions per argument and result.

    Returns:
        The vectorized function.
    """
    from blu.transforms.batching import vmap

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        mapped = [i for i in range(len(args)) if i not in excluded]
        fixed_kw = {k: v for k, v in kwargs.items() if k in excluded}
        mapped_kw = sorted(k for k in kwargs if k not in excluded)
        # a Python float beside float64 arguments is float64's value (JAX's with x64)
        vals = asarray_operands_keep_kind(
            *[args[i] for i in mapped], *[kwargs[k] for k in mapped_kw]
        )
        core = [()] * len(vals)
        if signature is not None:
            ins, _ = _parse_signature(signature)
            if len(ins) != len(vals):
                raise BluValueError(
                    with_user_line(
                        f"vectorize: signature {signature!r} has {len(ins)} inputs, "
                        f"got {len(vals)} mapped arguments"
                    )
                )
            core = ins
        loops = [v.shape[: v.ndim - len(c)] for v, c in zip(vals, core)]
        loop = np.broadcast_shapes(*loops) if loops else ()
        vals = [broadcast_to(v, loop + v.shape[v.ndim - len(c) :]) for v, c in zip(vals, core)]

        def call(*vs: Any) -> Any:
            a = list(args)
            for i, v in zip(mapped, vs[: len(mapped)]):
                a[i] = v
            kw = dict(fixed_kw)
            kw.update(zip(mapped_kw, vs[len(mapped) :]))
            return pyfunc(*a, **kw)

        f = call
        for _ in loop:
            f = vmap(f)
        return f(*vals)

    return wrapped


def apply_along_axis(func1d: Callable[..., Any], axis: int, arr: Any, *args: Any,
                     **kwargs: Any) -> Any:  # fmt: skip
    """``func1d`` applied to each 1-d slice of ``arr`` along ``axis`` (with ``blu.vmap``); the
    slice's result dimensions replace ``axis``.

    Raises:
        BluAxisError: ``axis`` is not in ``[-arr.ndim, arr.ndim)``.
    """
    from blu.transforms.batching import vmap

    arr = asarray_operand(arr)
    axis = canonicalize_axis(axis, arr.ndim, "apply_along_axis")
    f = lambda x: func1d(x, *args, **kwargs)  # noqa: E731
    moved = moveaxis(arr, axis, -1)
    for _ in range(arr.ndim - 1):
        f = vmap(f)
    out = asarray_operand(f(moved))
    extra = out.ndim - (arr.ndim - 1)
    for i in range(extra):
        out = moveaxis(out, arr.ndim - 1 + i, axis + i)
    return out


def apply_over_axes(func: Callable[[Any, int], Any], a: Any, axes: Any) -> Any:
    """``func(a, axis)`` for each axis of ``axes`` in turn, each result of ``a``'s rank or one
    less (then the axis is put back with size 1), as ``jax.numpy.apply_over_axes``:
    ``apply_over_axes(bnp.sum, a, (0, 2))`` is ``bnp.sum(a, (0, 2), keepdims=True)``.

    Raises:
        BluAxisError: an axis out of range. BluShapeError: ``func`` returns another rank.
    """
    a = asarray_operand(a)
    nd = a.ndim
    for ax in (axes,) if np.ndim(axes) == 0 else tuple(axes):
        axis = canonicalize_axis(ax, nd, "apply_over_axes")
        b = asarray_operand(func(a, axis))
        if b.ndim == nd - 1:
            b = expand_dims(b, axis)
        elif b.ndim != nd:
            raise BluShapeError(
                with_user_line(
                    f"apply_over_axes: func(a, {axis}) must return an array of rank {nd} or "
                    f"{nd - 1} (a of shape {a.shape}), got shape {b.shape}"
                )
            )
        a = b
    return a


def lexsort(keys: Any, axis: int = -1) -> Any:
    """Indices that sort by the last key, then the one before... (stable), as
    ``numpy.lexsort``; ``keys`` a sequence of arrays of one shape (or a stacked array)."""
    if getattr(keys, "shape", None) == ():
        raise BluValueError(with_user_line("lexsort: keys is a 0-d array, not a sequence of keys"))
    keys = [asarray_operand(k) for k in keys]
    if not keys:
        raise BluValueError(with_user_line("lexsort: needs at least one key"))
    if any(k.shape != keys[0].shape for k in keys):
        shapes = ", ".join(str(k.shape) for k in keys)
        raise BluShapeError(with_user_line(f"lexsort: all keys need one shape, got {shapes}"))
    idx = argsort(keys[0], axis=axis, stable=True)
    for k in keys[1:]:
        order = argsort(take_along_axis(k, idx, axis), axis=axis, stable=True)
        idx = take_along_axis(idx, order, axis)
    return idx


def rot90(m: Any, k: int = 1, axes: tuple[int, int] = (0, 1)) -> Any:
    """``m`` rotated by 90 degrees ``k`` times in the plane of ``axes`` (first towards second).

    Raises:
        BluValueError: ``axes`` is not two distinct axes. BluAxisError: an axis out of range.
    """
    m = asarray_operand(m)
    if len(axes) != 2:
        raise BluValueError(with_user_line(f"rot90: axes must be two axes, got {axes!r}"))
    nd = np.ndim(m)
    a0, a1 = (canonicalize_axis(a, nd, "rot90") for a in axes)
    if a0 == a1:
        raise BluValueError(
            with_user_line(f"rot90: axes must be different, got {axes!r} for {nd}-d m")
        )
    k = operator.index(k) % 4
    if k == 0:
        return m
    if k == 2:
        return flip(flip(m, a0), a1)
    if k == 1:
        return swapaxes(flip(m, a1), a0, a1)
    return flip(swapaxes(m, a0, a1), a1)


def sinc(x: Any) -> Any:
    """``sin(pi x) / (pi x)``, 1 at 0, as numpy's ``sinc``.

    Near 0 (``|pi x|`` below 0.1 in float64, 0.5 in narrower floats) it is the Maclaurin series
    ``1 - t**2/6 + t**4/120 - t**6/5040 + t**8/362880`` in ``t = pi x`` (truncation below half
    an ulp there), so its derivatives are accurate near 0 too: the quotient's derivative
    ``(t cos t - sin t) / t**2`` cancels catastrophically for small ``t``."""
    x = asarray_operand(x)
    if not _issubdtype(x.dtype, np.inexact):
        x = x.astype(np.float32)
    t = np.pi * x
    near = abs(t) < (0.1 if x.dtype == np.float64 else 0.5)
    safe = where(near, ones_like(t), t)
    t2 = where(near, t, zeros_like(t)) ** 2
    series = 1 + t2 * (-1 / 6 + t2 * (1 / 120 + t2 * (-1 / 5040 + t2 / 362880)))
    return where(near, series, sin(safe) / safe)


def heaviside(x1: Any, x2: Any) -> Any:
    """0 for ``x1 < 0``, ``x2`` at 0, 1 for ``x1 > 0``, NaN where ``x1`` is NaN; a float
    (integers and bools give the default float, as JAX's and numpy's)."""
    x1 = asarray_operand(x1)
    x2 = asarray_operand_in(x2, x1.dtype)  # 0.1 next to float64 is float64's 0.1
    out = where(x1 < 0, 0, where(x1 > 0, 1, where(x1 == 0, x2, x1)))
    dt = _result_type(x1.dtype, x2.dtype)
    return out.astype(dt if dtypes.is_inexact(dt) else dtypes.default_float)


def trapezoid(y: Any, x: Any = None, dx: float = 1.0, axis: int = -1) -> Any:
    """The trapezoidal rule along ``axis`` (sample points ``x`` or spacing ``dx``)."""
    y = moveaxis(asarray_operand(y), axis, -1)
    if x is None:
        d = dx
    else:
        x = asarray_operand(x)
        x = moveaxis(x, axis, -1) if x.ndim > 1 else x
        d = x[..., 1:] - x[..., :-1]
    return _sum(d * (y[..., 1:] + y[..., :-1]) / 2.0, axis=-1)


def ediff1d(ary: Any, to_end: Any = None, to_begin: Any = None) -> Any:
    """Differences of consecutive elements of ``ravel(ary)``, with optional ends."""
    a = ravel(asarray_operand(ary))
    parts = [a[1:] - a[:-1]]
    if to_begin is not None:
        parts.insert(0, ravel(asarray_operand_in(to_begin, a.dtype)).astype(a.dtype))
    if to_end is not None:
        parts.append(ravel(asarray_operand_in(to_end, a.dtype)).astype(a.dtype))
    return concatenate(parts)


def trim_zeros(filt: Any, trim: str = "fb", axis: Any = None) -> Any:
    """``filt`` without its leading ('f' in ``trim``) and trailing ('b') zeros along each axis
    of ``axis`` (an int, a tuple, or None for all), a slice kept where any element across the
    other axes is nonzero (numpy 2.2's and ``jax.numpy.trim_zeros``; an all-zero array trims
    to size 0 along them). The result's shape depends on the values, so ``filt`` must be
    concrete (not under ``jit`` or ``grad``, as JAX).

    Raises:
        ConcretizationError: a traced ``filt``. BluAxisError: an axis out of range.
        BluValueError: ``trim`` other than 'f', 'b', 'fb' or 'bf'.
    """
    if not isinstance(trim, str) or trim.lower() not in ("f", "b", "fb", "bf"):
        raise BluValueError(
            with_user_line(f"trim_zeros: trim must be 'f', 'b' or 'fb', got {trim!r}")
        )
    v = concrete_value(filt, "trim_zeros (filt: the result's length depends on its values)")
    axes = (
        tuple(range(v.ndim))
        if axis is None
        else tuple(
            sorted({canonicalize_axis(a, v.ndim, "trim_zeros") for a in np.atleast_1d(axis)})
        )
    )
    index = [slice(None)] * v.ndim
    for ax in axes:
        others = tuple(i for i in range(v.ndim) if i != ax)
        (nz,) = np.nonzero(np.any(v != 0, axis=others))
        if not nz.size:
            index[ax] = slice(0, 0)
            continue
        start = int(nz[0]) if "f" in trim.lower() else 0
        stop = int(nz[-1]) + 1 if "b" in trim.lower() else v.shape[ax]
        index[ax] = slice(start, stop)
    return asarray_operand(filt)[tuple(index)]
