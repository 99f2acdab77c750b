"""NaN-ignoring reductions and small numpy helpers that are one-line compositions:
``nanprod``, ``nancumsum``, ``nancumprod``, ``nanvar``, ``nanstd``, ``nanargmax``,
``nanargmin``, ``nanquantile``, ``nanpercentile``, ``nanmedian``; ``isposinf``, ``isneginf``,
``modf``, ``ldexp``, ``frexp``, ``spacing``, ``gcd``, ``lcm``, ``put_along_axis``, ``diagflat``,
``rollaxis``, ``array_equiv``, ``matvec``, ``vecmat``, ``geomspace``.

NaNs are replaced by the operation's identity (1 for products, 0 for sums) or masked out
(``nanvar``: the mean and the count over the non-NaN entries), as numpy does; ``nanargmax`` of
an all-NaN slice gives -1 (numpy raises; JAX gives -1 too).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.numpy._dtypes import issubdtype as _issubdtype
from blu.numpy._promote import (
    asarray_operand,
    asarray_operand_in,
    asarray_operands,
    broadcast_to,
    canonicalize_axes,
    canonicalize_axis,
    promote_args,
    to_inexact,
)
from blu.numpy.creation import arange, logspace
from blu.numpy.index_update import IndexUpdateRef
from blu.numpy.logic import bitwise_and, bitwise_or, equal, right_shift
from blu.numpy.manipulation import broadcast_arrays, concatenate, expand_dims, moveaxis, ravel
from blu.numpy.products import matmul
from blu.numpy.reductions import all as _all
from blu.numpy.reductions import any as _any
from blu.numpy.reductions import argmax, argmin, cumprod, cumsum, prod
from blu.numpy.reductions import sum as _sum
from blu.numpy.selection import diag, take_along_axis, where
from blu.numpy.standard import nextafter
from blu.numpy.transcendental import log10, sqrt
from blu.numpy.ufuncs import abs as _abs
from blu.numpy.ufuncs import clip, floor, floor_divide, isinf, isnan, minimum, multiply, trunc
from blu.numpy.ufuncs import sign as _sign

__all__ = [
    "array_equiv",
    "diagflat",
    "frexp",
    "gcd",
    "lcm",
    "geomspace",
    "isneginf",
    "isposinf",
    "ldexp",
    "matvec",
    "modf",
    "nanargmax",
    "nanmedian",
    "nanpercentile",
    "nanquantile",
    "nanargmin",
    "nancumprod",
    "nancumsum",
    "nanprod",
    "nanstd",
    "nanvar",
    "put_along_axis",
    "rollaxis",
    "spacing",
    "vecmat",
]


def _fill_nan(a: Any, value: float) -> Any:
    a = asarray_operand(a)
    if not _issubdtype(a.dtype, np.inexact):
        return a
    return where(isnan(a), value, a)


def nanprod(a: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
    """``prod`` with NaNs counted as 1."""
    return prod(_fill_nan(a, 1), axis=axis, dtype=dtype, keepdims=keepdims)


def nancumsum(a: Any, axis: int | None = None, dtype: Any = None) -> Any:
    """``cumsum`` with NaNs counted as 0."""
    return cumsum(_fill_nan(a, 0), axis=axis, dtype=dtype)


def nancumprod(a: Any, axis: int | None = None, dtype: Any = None) -> Any:
    """``cumprod`` with NaNs counted as 1."""
    return cumprod(_fill_nan(a, 1), axis=axis, dtype=dtype)


def nanvar(a: Any, axis: Any = None, dtype: Any = None, ddof: int = 0,
           keepdims: bool = False) -> Any:  # fmt: skip
    """The variance over the non-NaN entries (``count - ddof`` in the denominator; NaN where
    that is <= 0)."""
    a = asarray_operand(a)
    if dtype is not None:
        a = a.astype(dtype)
    if not _issubdtype(a.dtype, np.inexact):
        a = a.astype(np.float32)
    ok = ~isnan(a)
    n = _sum(ok, axis=axis, keepdims=True).astype(a.dtype)
    mean = _sum(where(ok, a, 0), axis=axis, keepdims=True) / n
    dev = where(ok, a - mean, 0)
    ss = _sum(dev * dev.conj(), axis=axis, keepdims=keepdims)
    denom = n - ddof if keepdims else _sum(ok, axis=axis).astype(a.dtype) - ddof
    return where(denom > 0, ss / where(denom > 0, denom, 1), np.nan).real


def nanstd(a: Any, axis: Any = None, dtype: Any = None, ddof: int = 0,
           keepdims: bool = False) -> Any:  # fmt: skip
    """``sqrt(nanvar(...))``."""
    return sqrt(nanvar(a, axis, dtype, ddof, keepdims))


def nanargmax(a: Any, axis: int | None = None, keepdims: bool = False) -> Any:
    """``argmax`` ignoring NaNs (-1 for an all-NaN slice)."""
    a = asarray_operand(a)
    if not _issubdtype(a.dtype, np.inexact):
        return argmax(a, axis=axis, keepdims=keepdims)
    nan = isnan(a)
    i = argmax(where(nan, -np.inf, a), axis=axis, keepdims=keepdims)
    return where(_all(nan, axis=axis, keepdims=keepdims), -1, i)


def nanargmin(a: Any, axis: int | None = None, keepdims: bool = False) -> Any:
    """``argmin`` ignoring NaNs (-1 for an all-NaN slice)."""
    a = asarray_operand(a)
    if not _issubdtype(a.dtype, np.inexact):
        return argmin(a, axis=axis, keepdims=keepdims)
    nan = isnan(a)
    i = argmin(where(nan, np.inf, a), axis=axis, keepdims=keepdims)
    return where(_all(nan, axis=axis, keepdims=keepdims), -1, i)


def isposinf(x: Any) -> Any:
    """bool: ``x == +inf``."""
    x = asarray_operand(x)
    return isinf(x) & (x > 0)


def isneginf(x: Any) -> Any:
    """bool: ``x == -inf``."""
    x = asarray_operand(x)
    return isinf(x) & (x < 0)


def modf(x: Any) -> tuple[Any, Any]:
    """``(fractional part, integral part)``, both with ``x``'s sign."""
    x = asarray_operand(x)
    whole = trunc(x)
    # at +-inf the fraction is +-0 (numpy), not inf - inf
    return where(isinf(x), where(x < 0, -0.0, 0.0), x - whole), whole


def ldexp(x1: Any, x2: Any) -> Any:
    """``x1 * 2**x2`` (``x2`` integer), correctly rounded as numpy's: float16, bfloat16 and
    float32 multiply in a wider float, where the product is exact, and round once; float64 by
    three exact powers of two, each a normal number, so ``x1 * 2**x2`` does not overflow on the
    way to a finite result (``ldexp(2**-1074, 1100)``). Beyond the clip of ``x2`` the result
    is 0 or inf either way."""
    x1 = asarray_operand(x1)
    if not _issubdtype(x1.dtype, np.inexact):
        x1 = x1.astype(np.float32)
    dtype = np.dtype(x1.dtype)
    info = np.finfo(dtype)
    # (in int64 first: the limits do not fit an int8 or uint8 x2)
    n = asarray_operand(x2).astype(np.int64)
    n = clip(n, 3 * int(info.minexp), 3 * (int(info.maxexp) - 1)).astype(np.int32)
    wide = np.dtype(np.float32 if dtype == np.float16 else np.float64)
    winfo = np.finfo(wide)
    emin, emax = int(winfo.minexp), int(winfo.maxexp) - 1
    int_type = np.dtype(f"int{winfo.bits}")
    out = x1.astype(wide)
    for last in (False, False, True):  # an exact power of two from its biased exponent bits
        p = n if last else clip(n, emin, emax)
        n = n - p
        bits = (p + emax).astype(int_type) << winfo.nmant
        out = out * lax.bitcast_convert_type(bits, wide)
    return out.astype(dtype)


def frexp(x: Any) -> tuple[Any, Any]:
    """``(mantissa, exponent)`` with ``x == mantissa * 2**exponent``, ``0.5 <= |mantissa| < 1``
    and an int32 exponent (JAX's bit manipulation); 0, infs and NaNs give ``(x, 0)``.

    Raises:
        BluTypeError: ``x`` is complex.
    """
    x = to_inexact(asarray_operand(x))
    dtype = np.dtype(x.dtype)
    if dtypes.is_complex(dtype):
        raise BluTypeError(with_user_line(f"frexp: x must be real, got {dtype}"))
    info = np.finfo(dtype)
    int_type = np.dtype(f"int{info.bits}")
    mask, bias = (1 << info.nexp) - 1, 1 - info.minexp
    tiny = _abs(x) < info.tiny  # subnormals: scale into the normal range first
    x1 = where(tiny, x * np.asarray(2.0**info.nmant, dtype), x)
    x2 = where(tiny, np.asarray(-info.nmant, int_type), np.asarray(0, int_type))
    bits = lax.bitcast_convert_type(x1, int_type)
    x2 = x2 + bitwise_and(right_shift(bits, info.nmant), mask) - (bias - 1)
    bits = bitwise_and(bits, np.asarray(~(mask << info.nmant), int_type))
    bits = bitwise_or(bits, np.asarray((bias - 1) << info.nmant, int_type))
    special = isinf(x) | isnan(x) | equal(x, 0)
    mantissa = where(special, x, lax.bitcast_convert_type(bits, dtype))
    return mantissa, where(special, 0, x2).astype(np.int32)


def spacing(x: Any) -> Any:
    """The distance from ``x`` to the next float away from zero, with ``x``'s sign (numpy's;
    -0.0 counts as positive):
    ``nextafter(x, inf if x >= 0 else -inf) - x``; NaN at infs and NaNs."""
    x = to_inexact(asarray_operand(x))
    away = nextafter(x, where(x < 0, np.asarray(-np.inf, x.dtype), np.asarray(np.inf, x.dtype)))
    return where(isinf(x), np.asarray(np.nan, x.dtype), away - x)


def _integer_args(name: str, x1: Any, x2: Any) -> list[Any]:
    x1, x2 = promote_args(x1, x2)
    if not _issubdtype(x1.dtype, np.integer):
        raise BluTypeError(
            with_user_line(f"{name}: arguments must be integers, got {np.dtype(x1.dtype)}")
        )
    return broadcast_arrays(x1, x2)


def _gcd_body(xs: tuple[Any, Any]) -> tuple[Any, Any]:
    a, b = xs
    nz = b != 0
    a, b = where(nz, b, a), where(nz, lax.rem(a, where(nz, b, 1)), 0)
    return where(a < b, b, a), where(a < b, a, b)


def gcd(x1: Any, x2: Any) -> Any:
    """The greatest common divisor of ``|x1|`` and ``|x2|`` (Euclid's algorithm in a
    ``while_loop``, as JAX; ``gcd(0, 0) == 0``).

    Raises:
        BluTypeError: the arguments are not integers (bool included).
    """
    x1, x2 = _integer_args("gcd", x1, x2)
    out, _ = lax.while_loop(lambda xs: _any(xs[1] != 0), _gcd_body, (_abs(x1), _abs(x2)))
    return out


def lcm(x1: Any, x2: Any) -> Any:
    """The least common multiple of ``|x1|`` and ``|x2|`` (0 if either is 0).

    Raises:
        BluTypeError: the arguments are not integers (bool included).
    """
    x1, x2 = (_abs(x) for x in _integer_args("lcm", x1, x2))
    d = gcd(x1, x2)  # |x1| * (|x2| // d), wrapping on overflow as numpy's and JAX's
    return where(d == 0, 0, multiply(x1, floor_divide(x2, where(d == 0, 1, d))))


def put_along_axis(arr: Any, indices: Any, values: Any, axis: int | None, inplace: bool = True,
                   *, mode: str | None = None) -> Any:  # fmt: skip
    """``arr`` with ``values`` put at ``indices`` along ``axis`` (numpy's ``put_along_axis``,
    functionally: ``arr.at[idx].set(values, mode=mode)`` for the index ``take_along_axis``
    reads). ``axis=None`` puts into ``ravel(arr)`` (1-d ``indices``); the shape is kept.

    Raises:
        BluValueError: ``inplace`` is True (blu arrays are immutable: pass ``inplace=False``, as
            JAX asks). BluShapeError: ``indices``' rank is not ``arr``'s. BluAxisError: ``axis``
            out of range.
    """
    if inplace:
        raise BluValueError(
            with_user_line(
                "put_along_axis cannot modify arrays in place (blu arrays are immutable): pass "
                "inplace=False to get the updated array"
            )
        )
    arr = asarray_operand(arr)
    shape = arr.shape
    work = ravel(arr) if axis is None else arr
    indices = asarray_operand(indices)
    if indices.ndim != work.ndim:
        raise BluShapeError(
            with_user_line(
                f"put_along_axis: indices of shape {indices.shape} for an array of rank "
                f"{work.ndim}{' (axis=None: 1-d)' if axis is None else ''}"
            )
        )
    ax = 0 if axis is None else canonicalize_axis(axis, work.ndim, "put_along_axis")
    idx = tuple(
        indices if i == ax else arange(n, dtype=np.int32).reshape(
            tuple(n if j == i else 1 for j in range(work.ndim)))
        for i, n in enumerate(work.shape)
    )  # fmt: skip
    return IndexUpdateRef(work, idx).set(values, mode=mode).reshape(shape)


def nanquantile(a: Any, q: Any, axis: Any = None, out: None = None, overwrite_input: bool = False,
                method: str = "linear", keepdims: bool = False) -> Any:  # fmt: skip
    """``quantile`` of the non-NaN entries along ``axis`` (an int, a tuple or None for all):
    the sorted row (NaNs last) is read at ``q * (count - 1)`` between the neighbouring order
    statistics (numpy's 'linear'); NaN where a row has no non-NaN entry.

    Returns:
        shape ``q.shape + reduced shape`` (``keepdims``: the reduced axes kept with size 1).

    Raises:
        BluValueError: ``out`` or ``overwrite_input`` given (as JAX), a method other than
            'linear', or ``q`` outside [0, 1]. BluAxisError: an axis out of range.
    """
    if out is not None or overwrite_input:
        raise BluValueError(
            with_user_line("nanquantile does not support out or overwrite_input=True (as JAX)")
        )
    if method != "linear":
        raise BluValueError(with_user_line("nanquantile: only method='linear' is supported"))
    qv = np.asarray(q, np.float64)
    if qv.size and not ((qv >= 0) & (qv <= 1)).all():
        raise BluValueError(with_user_line(f"nanquantile: q must be in [0, 1], got {q!r}"))
    a = to_inexact(asarray_operand(a))
    shape0, dtype = a.shape, a.dtype
    axes = canonicalize_axes(axis, len(shape0), "nanquantile")
    kept = [i for i in range(len(shape0)) if i not in axes]
    keep_shape = tuple(1 if i in axes else d for i, d in enumerate(shape0))
    rest = tuple(shape0[i] for i in kept)
    n = int(np.prod([shape0[i] for i in axes], dtype=np.int64))
    res_shape = qv.shape + (keep_shape if keepdims else rest)
    if n == 0:
        return lax.full(res_shape, np.nan, dtype)
    a = lax.reshape(lax.transpose(a, tuple(kept) + axes), rest + (n,))
    srt = broadcast_to(lax.sort(a, len(rest)), qv.shape + rest + (n,))  # NaNs sort last
    cnt = _sum(~isnan(a), -1, keepdims=True).astype(dtype)  # rest + (1,)
    qb = np.asarray(qv, dtype).reshape(qv.shape + (1,) * (len(rest) + 1))
    pos = qb * (cnt - 1)
    lo = clip(floor(pos), 0, n - 1)
    hi = clip(minimum(lo + 1, cnt - 1), 0, n - 1)
    frac = pos - lo
    v_lo = take_along_axis(srt, lo.astype(np.int32), -1)
    v_hi = take_along_axis(srt, hi.astype(np.int32), -1)
    res = where(cnt == 0, np.asarray(np.nan, dtype), v_lo + (v_hi - v_lo) * frac)
    return lax.reshape(res, res_shape)


def nanpercentile(a: Any, q: Any, axis: Any = None, out: None = None,
                  overwrite_input: bool = False, method: str = "linear",
                  keepdims: bool = False) -> Any:  # fmt: skip
    """``nanquantile(a, q / 100, ...)``."""
    return nanquantile(a, np.asarray(q, np.float64) / 100.0, axis, out, overwrite_input, method,
                       keepdims)  # fmt: skip


def nanmedian(a: Any, axis: Any = None, out: None = None, overwrite_input: bool = False,
              keepdims: bool = False) -> Any:  # fmt: skip
    """The median of the non-NaN entries along ``axis`` (``nanquantile(a, 0.5)``)."""
    return nanquantile(a, 0.5, axis, out, overwrite_input, keepdims=keepdims)


def diagflat(v: Any, k: int = 0) -> Any:
    """A 2-d array with ``ravel(v)`` on the ``k``-th diagonal."""
    return diag(ravel(asarray_operand(v)), k)


def rollaxis(a: Any, axis: int, start: int = 0) -> Any:
    """numpy's ``rollaxis`` (``moveaxis`` is the clearer spelling)."""
    a = asarray_operand(a)
    n = a.ndim
    axis, start = axis % n, start + n if start < 0 else start
    if axis < start:
        start -= 1
    return a if axis == start else moveaxis(a, axis, start)


def array_equiv(a1: Any, a2: Any) -> Any:
    """bool scalar: the arrays are equal after broadcasting (False if they do not broadcast)."""
    a1, a2 = asarray_operand(a1), asarray_operand(a2)
    try:
        shape = np.broadcast_shapes(a1.shape, a2.shape)
    except ValueError:
        return asarray_operand(False)
    return _all(equal(broadcast_to(a1, shape), broadcast_to(a2, shape)))


def matvec(x1: Any, x2: Any) -> Any:
    """Matrix-vector products ``(..., m, n) x (..., n) -> (..., m)`` (numpy 2.2's)."""
    return matmul(asarray_operand(x1), asarray_operand(x2)[..., None])[..., 0]


def vecmat(x1: Any, x2: Any) -> Any:
    """Vector-matrix products ``conj(x1) @ x2``: ``(..., n) x (..., n, m) -> (..., m)``."""
    x1 = asarray_operand(x1)
    return matmul(x1.conj()[..., None, :], asarray_operand(x2))[..., 0, :]


def geomspace(start: Any, stop: Any, num: int = 50, endpoint: bool = True, dtype: Any = None,
              axis: int = 0) -> Any:  # fmt: skip
    """``num`` numbers spaced evenly on a log scale from ``start`` to ``stop`` (both nonzero and
    of one sign: negative endpoints give negative numbers, as numpy's and JAX's). A Python scalar
    bound beside a float64 bound or ``dtype`` is float64's value (JAX's). The first value is
    ``start`` and the last (with ``endpoint``) ``stop`` exactly, as numpy's; an integer or bool
    ``dtype`` is computed in float64 and converted at the end (truncated, as numpy's)."""
    dt = None if dtype is None else dtypes.canonicalize(dtype)
    comp = dt if dt is None or dtypes.is_inexact(dt) else dtypes.float64
    if comp is not None:
        real = dtypes.real_dtype(comp)
        start, stop = (asarray_operand_in(v, real) for v in (start, stop))
    start, stop = asarray_operands(start, stop)
    if comp is not None and not dtypes.is_inexact(start.dtype):
        start = start.astype(comp)
    sign = _sign(start)
    start, stop = start / sign, stop / sign
    out = logspace(log10(start), log10(stop), num, endpoint, 10.0, comp, axis)
    ax = canonicalize_axis(axis, out.ndim, "geomspace")
    if num > 0:  # the endpoints exactly: the logarithms' rounding moved them (256 -> 255.99...)
        first, last = (expand_dims(v.astype(out.dtype), ax) for v in broadcast_arrays(start, stop))
        first = broadcast_to(first, out.shape[:ax] + (1,) + out.shape[ax + 1 :])
        last = broadcast_to(last, first.shape)
        inner = lax.slice_in_dim(out, 1, max(1, num - 1 if endpoint else num), axis=ax)
        parts = [first, inner] + ([last] if endpoint and num > 1 else [])
        out = concatenate(parts, ax) if len(parts) > 1 else first
    sign = sign.astype(out.dtype)
    out = out * (expand_dims(sign, ax) if sign.ndim and out.ndim > sign.ndim else sign)
    return out if dt is None else out.astype(dt)
