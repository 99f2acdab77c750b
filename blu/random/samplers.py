"""Samplers: uniform, normal, truncated_normal, randint, bernoulli, gumbel, categorical,
permutation and choice, each a pure function of a ``uint32[2]`` key (see ``blu.random``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.random.prng import (
    _UINT_OF_WIDTH,
    _as_array,
    _bits,
    _broadcast,
    _broadcasts_to,
    _check_key,
    _normalize_axis,
    _param_shape,
    _params,
    _shape_arg,
    _unstack2,
    split,
)

# ---- floats ------------------------------------------------------------------------------------


def _float_dtype(dtype: Any, name: str) -> np.dtype:
    dtype = dtypes.canonicalize(dtype)
    if not dtypes.is_float(dtype):
        raise BluTypeError(with_user_line(f"random.{name}: dtype must be a float, got {dtype}"))
    return dtype


_LOW = (dtypes.bfloat16, dtypes.float16)


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a float sampler computes in: float32 for the 16-bit floats, else ``dtype``."""
    return dtypes.float32 if dtype in _LOW else dtype


def _prologue(
    name: str, key: Any, dtype: Any, shape: Any, /, *, compute: bool = False, **params: Any
) -> tuple[Any, np.dtype, tuple[int, ...], list[Any]]:
    """The start the float samplers share, in this order (so the first error stays the
    same): ``dtype`` canonicalized and checked to be a float (``BluTypeError``), ``key``
    checked (``_check_key``), then the sample shape and the parameters converted to
    ``dtype`` (``_compute_dtype(dtype)`` with ``compute``) and broadcast to it (``_params``;
    ``shape=None``: the parameters' broadcast shape). Returns ``(key, dtype, shape, params)``.
    """
    dtype = _float_dtype(dtype, name)
    key = _check_key(key, name)
    if not params:
        return key, dtype, _shape_arg(shape, name), []
    shape, arrs = _params(name, _compute_dtype(dtype) if compute else dtype, shape, **params)
    return key, dtype, shape, arrs


def _unit_floats(k: Any, shape: tuple[int, ...], dtype: np.dtype, name: str) -> Any:
    """Floats ``m * 2**-nmant`` in [0, 1) from the top ``nmant`` random bits (exact in dtype)."""
    nmant = dtypes.finfo(dtype).nmant
    width = 8 * dtype.itemsize
    b = lax.shift_right_logical(_bits(k, shape, width, name), width - nmant)
    return lax.mul(lax.convert_element_type(b, dtype), 2.0**-nmant)


def _as_float_operand(x: Any, dtype: np.dtype, shape: tuple[int, ...], what: str, name: str) -> Any:
    x = lax.convert_element_type(_as_array(x, dtype), dtype)
    return _broadcast(x, shape, what, name)


def _below(x: Any, dtype: np.dtype) -> Any:
    """The largest value of ``dtype`` below the Python scalar ``x`` (numpy's nextafter)."""
    v = np.asarray(x, dtype)
    return np.nextafter(v, np.asarray(-np.inf, dtype))


def uniform(
    key: Any,
    shape: Sequence[int] = (),
    dtype: Any = dtypes.float32,
    minval: Any = 0.0,
    maxval: Any = 1.0,
) -> Any:
    """Uniform floats in ``[minval, maxval)``.

    Built from the top mantissa bits: ``u = m * 2**-nmant`` with ``m`` uniform over the
    ``2**nmant`` values (``nmant`` = 23 for float32), then ``minval + u * (maxval - minval)``,
    clamped so rounding cannot leave the interval (when the bounds are Python scalars the upper
    bound is excluded exactly; traced bounds clamp to ``[minval, maxval]``).

    Args:
        key: ``uint32[2]``.
        shape: output shape.
        dtype: float16, bfloat16, float32 or float64.
        minval, maxval: bounds (scalars or arrays broadcastable to ``shape``).

    Returns:
        An array of ``shape`` and ``dtype``.
    """
    dtype = _float_dtype(dtype, "uniform")
    shape = _shape_arg(shape, "uniform")
    u = _unit_floats(key, shape, dtype, "uniform")
    lo = _as_float_operand(minval, dtype, shape, "minval", "uniform")
    hi = _as_float_operand(maxval, dtype, shape, "maxval", "uniform")
    out = lax.add(lax.mul(u, lax.sub(hi, lo)), lo)
    out = lax.max(lo, out)
    if isinstance(maxval, (int, float)) and isinstance(minval, (int, float)):
        if minval < maxval:
            out = lax.min(out, lax.full(shape, _below(maxval, dtype), dtype))
    else:
        out = lax.min(out, hi)
    return out


def _open_unit(key: Any, shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """Uniform in the open interval (0, 1): the smallest normal number replaces 0."""
    return uniform(key, shape, dtype, minval=float(dtypes.finfo(dtype).tiny), maxval=1.0)


def normal(key: Any, shape: Sequence[int] = (), dtype: Any = dtypes.float32) -> Any:
    """Standard normal floats, ``sqrt(2) * erf_inv(u)`` with ``u`` uniform in (-1, 1).

    Args:
        key: ``uint32[2]``.
        shape: output shape.
        dtype: a float dtype.

    Returns:
        An array of ``shape`` and ``dtype`` (mean 0, variance 1).
    """
    dtype = _float_dtype(dtype, "normal")
    lo = float(np.nextafter(np.asarray(-1.0, dtype), np.asarray(0.0, dtype)))
    u = uniform(key, shape, dtype, lo, 1.0)
    return lax.mul(lax.erf_inv(u), math.sqrt(2.0))


def truncated_normal(
    key: Any,
    lower: Any,
    upper: Any,
    shape: Sequence[int] | None = None,
    dtype: Any = dtypes.float32,
) -> Any:
    """Standard normal floats conditioned on ``lower < x < upper`` (inverse-CDF sampling).

    Args:
        key: ``uint32[2]``.
        lower, upper: bounds (scalars or arrays broadcastable to ``shape``).
        shape: output shape; default the broadcast shape of the bounds.
        dtype: a float dtype.

    Returns:
        An array of ``shape`` and ``dtype``, clamped into the open interval between the floats
        next to the bounds (as JAX's), so always finite. An interval beyond 2 standard
        deviations on one side (``lower >= 2`` or ``upper <= -2``) is sampled by inverting the
        tail's ``erfc`` (JAX's ``erf`` rounds to +-1 there: ``lower = 8`` gave the largest
        float for every draw); where even ``erfc`` underflows (``|bound| > ~13`` in float32),
        by the tail's exponential approximation ``lower + Exp(1) / lower``.
    """
    dtype = _float_dtype(dtype, "truncated_normal")
    lower, upper = _as_array(lower, dtype), _as_array(upper, dtype)
    if shape is None:
        shape = _param_shape("truncated_normal", lower=lower, upper=upper)
    shape = _shape_arg(shape, "truncated_normal")
    lo = _as_float_operand(lower, dtype, shape, "lower", "truncated_normal")
    hi = _as_float_operand(upper, dtype, shape, "upper", "truncated_normal")
    two = lax.full(shape, 2.0, dtype)
    right, left = lax.ge(lo, two), lax.le(hi, lax.neg(two))
    tail = lax.or_(right, left)
    s2 = math.sqrt(2.0)
    # JAX's inversion of erf (its bits) off the tails; safe bounds where the tail's path is taken
    elo = lax.select(tail, lax.full(shape, -1.0, dtype), lo)
    ehi = lax.select(tail, lax.full(shape, 1.0, dtype), hi)
    a = lax.erf(lax.div(elo, lax.full(shape, s2, dtype)))
    b = lax.erf(lax.div(ehi, lax.full(shape, s2, dtype)))
    u = uniform(key, shape, dtype, a, b)
    out = lax.mul(lax.erf_inv(u), s2)
    # the tails, on the right by symmetry: (lower, upper) or (-upper, -lower)
    ta = lax.select(right, lo, lax.select(left, lax.neg(hi), two))
    tb = lax.select(right, hi, lax.select(left, lax.neg(lo), lax.full(shape, 3.0, dtype)))
    x = _right_tail_normal(key, ta, tb, shape, dtype)
    out = lax.select(tail, lax.select(left, lax.neg(x), x), out)
    # JAX's clamp to the open interval: u may round to b = erf(upper / sqrt 2) = 1 (or to
    # a = -1), where erf_inv is infinite; the bounds' gradient flows through a and b only
    lo, hi = lax.stop_gradient(lo), lax.stop_gradient(hi)
    return lax.min(lax.max(out, _next_float(lo, True)), _next_float(hi, False))


# P. J. Acklam's rational approximation of the normal quantile's lower tail in
# sqrt(-2 log p) (relative error 1.15e-9; blu.scipy.special.ndtri's)
_TAIL_NUM = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00,
             -2.549732539343734e00, 4.374664141464968e00, 2.938163982698783e00)  # fmt: skip
_TAIL_DEN = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00,
             3.754408661907416e00, 1.0)  # fmt: skip


def _right_tail_normal(key: Any, a: Any, b: Any, shape: tuple, dtype: Any) -> Any:
    """Standard normal draws conditioned on ``2 <= a < x < b``: ``x = Q^-1(q)`` for ``q``
    uniform between the upper tail's ``Q(b)`` and ``Q(a)`` (``Q(x) = erfc(x / sqrt 2) / 2``),
    Acklam's approximation refined by one Halley step; ``a + Exp(1) / a`` where ``Q(a)``
    is below the smallest normal float. Half-precision dtypes compute in float32."""
    cdt = dtypes.float32 if np.dtype(dtype).itemsize < 4 else dtype
    a, b = lax.convert_element_type(a, cdt), lax.convert_element_type(b, cdt)

    def c(v: float) -> Any:
        return lax.full(shape, v, cdt)

    def horner(coef: tuple, t: Any) -> Any:
        out = c(coef[0])
        for k in coef[1:]:
            out = lax.add(lax.mul(out, t), c(k))
        return out

    r2 = c(1.0 / math.sqrt(2.0))
    qa = lax.mul(c(0.5), lax.erfc(lax.mul(a, r2)))
    qb = lax.mul(c(0.5), lax.erfc(lax.mul(b, r2)))
    v = uniform(key, shape, cdt)
    q = lax.sub(qa, lax.mul(v, lax.sub(qa, qb)))
    tiny = float(np.finfo(cdt).tiny)
    ok = lax.gt(q, c(tiny))
    qs = lax.select(ok, q, c(0.5))
    t = lax.sqrt(lax.mul(c(-2.0), lax.log(qs)))
    y = lax.div(horner(_TAIL_NUM, t), horner(_TAIL_DEN, t))  # the lower tail's quantile
    e = lax.sub(lax.mul(c(0.5), lax.erfc(lax.mul(lax.neg(y), r2))), qs)
    w = lax.mul(lax.mul(e, c(math.sqrt(2.0 * math.pi))), lax.exp(lax.mul(c(0.5), lax.mul(y, y))))
    y = lax.sub(y, lax.div(w, lax.add(c(1.0), lax.mul(c(0.5), lax.mul(y, w)))))
    expo = lax.add(a, lax.div(lax.neg(lax.log1p(lax.neg(v))), a))
    return lax.convert_element_type(lax.select(ok, lax.neg(y), expo), dtype)


def _next_float(x: Any, up: bool) -> Any:
    """The float next to ``x`` toward +inf (``up``) or -inf: numpy's ``nextafter(x, +-inf)``
    (+-inf toward itself and NaN stay; +-0 steps to the smallest subnormal)."""
    aval = get_aval(x)
    udt = _UINT_OF_WIDTH[8 * aval.dtype.itemsize]
    zero = lax.full(aval.shape, 0, aval.dtype)
    one = lax.full(aval.shape, 1, udt)
    b = lax.bitcast_convert_type(x, udt)
    # the magnitude grows where x is on the side of zero it moves away from
    grow = lax.gt(x, zero) if up else lax.lt(x, zero)
    stepped = lax.bitcast_convert_type(
        lax.select(grow, lax.add(b, one), lax.sub(b, one)), aval.dtype
    )
    tiny = lax.bitcast_convert_type(one, aval.dtype)
    stepped = lax.select(lax.eq(x, zero), tiny if up else lax.neg(tiny), stepped)
    inf = lax.full(aval.shape, np.inf if up else -np.inf, aval.dtype)
    keep = lax.or_(lax.ne(x, x), lax.eq(x, inf))
    return lax.select(keep, x, stepped)


# ---- integers ----------------------------------------------------------------------------------


def _int_bound(x: Any, dtype: np.dtype, shape: tuple[int, ...], what: str) -> tuple[Any, Any]:
    """An integer bound clipped to ``dtype``'s range (a ``dtype`` array of ``shape``), and
    whether it was above ``dtype``'s maximum (bool array)."""
    info = np.iinfo(dtype)
    if dtypes.is_int_scalar(x):
        clipped = lax.full(shape, min(max(int(x), info.min), info.max), dtype)
        return clipped, lax.full(shape, int(x) > info.max, dtypes.bool_)
    x = _as_array(x)
    aval = get_aval(x)
    if not dtypes.is_int(aval.dtype):
        raise BluTypeError(
            with_user_line(f"random.randint: {what} must be an integer, got {aval.str_short()}")
        )
    above = lax.full(aval.shape, False, dtypes.bool_)
    src = np.iinfo(aval.dtype)
    if src.min < info.min or src.max > info.max:  # clip in a type holding both ranges
        wide = dtypes.uint64 if aval.dtype == dtypes.uint64 else dtypes.int64
        winfo = np.iinfo(wide)
        x = lax.convert_element_type(x, wide)
        top = lax.full(aval.shape, min(info.max, winfo.max), wide)
        above = lax.gt(x, top)
        x = lax.min(lax.max(x, lax.full(aval.shape, max(info.min, winfo.min), wide)), top)
    x = lax.convert_element_type(x, dtype)
    return _broadcast(x, shape, what, "randint"), _broadcast(above, shape, what, "randint")


def randint(
    key: Any,
    shape: Sequence[int],
    minval: Any,
    maxval: Any,
    dtype: Any = dtypes.int32,
) -> Any:
    """Uniform integers in ``[minval, maxval)``.

    Two independent random words ``h, l`` of the dtype's width per element give
    ``(h * 2**nbits + l) mod span`` computed as JAX's ``_randint`` does, with every product in
    the unsigned dtype of that width (wrapping), so the numbers are JAX's for any span (the
    wrapped products add a small bias for spans above ``2**(nbits/2)``); 8- and 16-bit dtypes
    are sampled in int32 and cast, as JAX does. Bounds are clipped to
    ``dtype``'s range (``maxval`` one past its maximum is allowed: ``randint(k, s, 0, 256,
    uint8)`` covers all bytes); where ``maxval <= minval`` the result is ``minval``.

    Args:
        key: ``uint32[2]``.
        shape: output shape.
        minval, maxval: integer bounds (scalars or arrays broadcastable to ``shape``).
        dtype: an integer dtype (8 to 64 bits).

    Returns:
        An array of ``shape`` and ``dtype``.
    """
    dtype = dtypes.canonicalize(dtype)
    if not dtypes.is_int(dtype):
        raise BluTypeError(with_user_line(f"random.randint: dtype must be an integer, got {dtype}"))
    shape = _shape_arg(shape, "randint")
    nbits = dtype.itemsize * 8
    if nbits < 32:  # JAX samples 8- and 16-bit integers in int32 (less bias), then casts
        info = np.iinfo(dtype)

        def clip32(x: Any, top: int) -> Any:  # clipped before the cast (JAX casts first)
            x = lax.convert_element_type(_as_array(x), dtypes.int64)
            x = lax.max(lax.min(x, lax.full_like(x, top)), lax.full_like(x, int(info.min)))
            return lax.convert_element_type(x, dtypes.int32)

        lo32, hi32 = clip32(minval, int(info.max)), clip32(maxval, int(info.max) + 1)
        return lax.convert_element_type(randint(key, shape, lo32, hi32, dtypes.int32), dtype)
    udt = _UINT_OF_WIDTH[nbits]  # JAX's arithmetic: the unsigned dtype of the width, wrapping
    lo, _ = _int_bound(minval, dtype, shape, "minval")
    hi, above = _int_bound(maxval, dtype, shape, "maxval")
    k1, k2 = _unstack2(split(key))
    higher = lax.convert_element_type(_bits(k1, shape, nbits, "randint"), udt)
    lower = lax.convert_element_type(_bits(k2, shape, nbits, "randint"), udt)
    span = lax.convert_element_type(lax.sub(hi, lo), udt)  # wraps: correct modulo 2**nbits
    empty = lax.le(hi, lo)
    span = lax.select(empty, lax.full(shape, 1, udt), span)
    # maxval above dtype's max: the true span is one more than hi - lo (0 for the full range)
    span = lax.select(
        lax.and_(above, lax.not_(empty)), lax.add(span, lax.full(shape, 1, udt)), span
    )
    # span 0 is 2**nbits: XLA's remainder by 0 returns the dividend, so JAX's result is ``lower``
    full_range = lax.eq(span, lax.full(shape, 0, udt))
    span = lax.select(full_range, lax.full(shape, 1, udt), span)
    mult = lax.rem(lax.full(shape, 2 ** (nbits // 2), udt), span)
    mult = lax.rem(lax.mul(mult, mult), span)
    off = lax.add(lax.mul(lax.rem(higher, span), mult), lax.rem(lower, span))
    off = lax.select(full_range, lower, lax.rem(off, span))
    return lax.add(lo, lax.convert_element_type(off, dtype))


def bernoulli(key: Any, p: Any = 0.5, shape: Sequence[int] | None = None) -> Any:
    """Booleans that are True with probability ``p``.

    Args:
        key: ``uint32[2]``.
        p: probability (scalar or array broadcastable to ``shape``); compared in its float
            dtype (float32 for Python floats).
        shape: output shape; default ``p``'s shape.

    Returns:
        A bool array of ``shape``.
    """
    p = _as_array(p)
    aval = get_aval(p)
    dtype = aval.dtype if dtypes.is_float(aval.dtype) else dtypes.float32
    shape = aval.shape if shape is None else _shape_arg(shape, "bernoulli")
    p = _as_float_operand(p, dtype, shape, "p", "bernoulli")
    return lax.lt(uniform(key, shape, dtype), p)


def gumbel(key: Any, shape: Sequence[int] = (), dtype: Any = dtypes.float32) -> Any:
    """Standard Gumbel floats ``-log(-log(u))``, u uniform in (0, 1)."""
    dtype = _float_dtype(dtype, "gumbel")
    tiny = float(dtypes.finfo(dtype).tiny)
    u = uniform(key, shape, dtype, tiny, 1.0)
    return lax.neg(lax.log(lax.neg(lax.log(u))))


def categorical(key: Any, logits: Any, axis: int = -1, shape: Sequence[int] | None = None) -> Any:
    """Samples from categorical distributions given by unnormalized log-probabilities.

    Gumbel-max: ``argmax(logits + g)`` with g standard Gumbel noise is distributed as
    ``softmax(logits)``; ``-inf`` logits are never drawn.

    Args:
        key: ``uint32[2]``.
        logits: float array; ``axis`` indexes the categories.
        axis: the category axis.
        shape: output shape; must end with (broadcast to) ``logits``' shape without ``axis``;
            default that shape.

    Returns:
        int32 indices of ``shape``.
    """
    logits = _as_array(logits)
    aval = get_aval(logits)
    if not dtypes.is_float(aval.dtype):
        logits = lax.convert_element_type(logits, dtypes.float32)
        aval = get_aval(logits)
    if aval.ndim == 0:
        raise BluShapeError(with_user_line("random.categorical: logits must have a category axis"))
    axis = _normalize_axis(axis, aval.ndim, "categorical")
    batch = aval.shape[:axis] + aval.shape[axis + 1 :]
    shape = batch if shape is None else _shape_arg(shape, "categorical")
    if not _broadcasts_to(batch, shape):
        raise BluShapeError(
            with_user_line(
                f"random.categorical: shape {shape} must end with the logits' batch shape {batch}"
            )
        )
    prefix = shape[: len(shape) - len(batch)]
    tail = list(shape[len(prefix) :])
    tail.insert(axis, aval.shape[axis])
    full_shape = prefix + tuple(tail)
    g = gumbel(key, full_shape, aval.dtype)
    x = lax.add(g, _broadcast(logits, full_shape, "logits", "categorical"))
    return lax.argmax(x, len(prefix) + axis, dtypes.int32)


def _shuffled_indices(key: Any, n: int) -> Any:
    """A uniformly random permutation of ``arange(n)`` (int32): stable sort by random 32-bit keys,
    repeated so that ties (probability ~ n**2 / 2**33 per round) almost surely get broken
    (JAX's rule: ceil(3 ln n / ln 2**32) rounds)."""
    return _shuffle(key, lax.iota(dtypes.int32, n), 0)


def _shuffle(key: Any, x: Any, axis: int) -> Any:
    """Each 1-D slice of ``x`` along ``axis`` permuted on its own (JAX's ``_shuffle``): sorted by
    random 32-bit keys of ``x``'s shape, ``ceil(3 ln size / ln 2**32)`` rounds."""
    shape = get_aval(x).shape
    rounds = max(1, math.ceil(3 * math.log(max(1, math.prod(shape))) / math.log(2**32 - 1)))
    for _ in range(rounds):
        key, sub = _unstack2(split(key))
        _, x = lax.sort_key_val(_bits(sub, shape, 32, "permutation"), x, axis)
    return x


def _take(x: Any, idx: Any, axis: int) -> Any:
    """``numpy.take(x, idx, axis)`` for in-range int32 ``idx`` of rank 1."""
    out = lax.gather(x, lax.reshape(idx, get_aval(idx).shape + (1,)), axes=(axis,))
    perm = list(range(1, axis + 1)) + [0] + list(range(axis + 1, get_aval(out).ndim))
    return lax.transpose(out, tuple(perm))


def permutation(key: Any, x: Any, axis: int = 0, independent: bool = False) -> Any:
    """A random permutation of ``arange(x)`` (an int), or of ``x``'s entries along ``axis``.

    Args:
        key: ``uint32[2]``.
        x: a non-negative int (a Python int or a 0-d integer array, concrete), or an array of
            one or more dimensions.
        axis: the axis of ``x`` to shuffle.
        independent: permute each 1-D slice along ``axis`` on its own (JAX's), instead of
            moving whole slices by one permutation.

    Returns:
        int32 ``arange(x)`` permuted, or ``x`` with its slices along ``axis`` permuted.
    """
    _check_key(key, "permutation")
    if dtypes.is_int_scalar(x):
        if x < 0:
            raise BluValueError(with_user_line(f"random.permutation: n must be >= 0, got {x}"))
        return _shuffled_indices(key, int(x))
    x = _as_array(x)
    aval = get_aval(x)
    if aval.ndim == 0:  # a 0-d integer array is the count n, as JAX (it must be concrete)
        if not dtypes.is_int(aval.dtype):
            raise BluTypeError(
                with_user_line(
                    f"random.permutation: x must be an int, an integer scalar or an array; "
                    f"got {aval.str_short()}"
                )
            )
        return permutation(key, int(x), axis, independent)
    axis = _normalize_axis(axis, aval.ndim, "permutation")
    if independent and aval.ndim > 1:
        return _shuffle(key, x, axis)
    return _take(x, _shuffled_indices(key, aval.shape[axis]), axis)


def choice(
    key: Any,
    a: Any,
    shape: Sequence[int] = (),
    replace: bool = True,
    p: Any = None,
    axis: int = 0,
) -> Any:
    """Random draws from ``arange(a)`` (an int) or from ``a``'s slices along ``axis``.

    Args:
        key: ``uint32[2]``.
        a: an int n (a Python int or a 0-d array, concrete: draw from ``arange(n)``) or an
            array.
        shape: how many draws, as a shape.
        replace: with replacement (independent draws) or without (distinct entries).
        p: optional probabilities of the n entries (need not be normalized).
        axis: the axis of ``a`` to draw along.

    Returns:
        The draws: int32 of ``shape`` for an int ``a``; otherwise ``a`` with ``axis`` replaced
        by ``shape``.

    Raises:
        BluValueError: more draws than entries without replacement, or draws from no entries.
        BluShapeError: ``p`` is not one probability per entry, ``(n,)``.
    """
    shape = _shape_arg(shape, "choice")
    k = math.prod(shape)
    if dtypes.is_int_scalar(a):
        n, arr = int(a), None
    elif get_aval(_as_array(a)).ndim == 0:  # a 0-d array is the count n, as JAX (concrete)
        n, arr = int(_as_array(a)), None
    else:
        arr = _as_array(a)
        axis = _normalize_axis(axis, get_aval(arr).ndim, "choice")
        n = get_aval(arr).shape[axis]
    if n <= 0 and k > 0:  # randint(0, 0) would give index 0 of nothing: invented entries
        raise BluValueError(
            with_user_line(f"random.choice: cannot draw {k} entries from a population of {n}")
        )
    if not replace and k > n:
        raise BluValueError(
            with_user_line(f"random.choice: cannot draw {k} > {n} entries without replacement")
        )
    if p is not None and get_aval(_as_array(p)).shape != (n,):
        # another length would draw from a different population (indices past n clamp)
        raise BluShapeError(
            with_user_line(
                f"random.choice: p must hold one probability per entry, shape ({n},); "
                f"got {get_aval(_as_array(p)).str_short()}"
            )
        )
    if p is None:
        if replace:
            idx = randint(key, (k,), 0, n)
        else:
            idx = lax.slice(_shuffled_indices(key, n), (0,), (k,))
    else:
        logp = lax.log(lax.convert_element_type(_as_array(p), dtypes.float32))
        if replace:
            idx = categorical(key, logp, shape=(k,))
        else:  # Gumbel top-k: the k largest perturbed log-probabilities, without replacement
            g = lax.add(gumbel(key, (n,), dtypes.float32), logp)
            _, order = lax.sort_key_val(lax.neg(g), lax.iota(dtypes.int32, n))
            idx = lax.slice(order, (0,), (k,))
    if arr is None:
        return lax.reshape(idx, shape)
    out = _take(arr, idx, axis)
    out_shape = get_aval(out).shape
    return lax.reshape(out, out_shape[:axis] + shape + out_shape[axis + 1 :])
