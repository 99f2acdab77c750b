"""Counting and statistics: ``bincount``, ``histogram``, ``histogram2d``, ``histogramdd``,
``histogram_bin_edges``, ``digitize``, ``interp``, ``cov``, ``corrcoef`` (numpy's semantics,
JAX's rules for traced values).

Output sizes that depend on values need concrete inputs or a static size, as in JAX:
``bincount`` takes ``length=`` under ``jit``. Counts are scatter-adds (so weights
differentiate); bins are found with ``searchsorted``.
"""

from __future__ import annotations

import builtins
import operator
from typing import Any

import numpy as np

from blu.core.errors import BluShapeError, BluValueError, with_user_line
from blu.core.interpreter import Tracer
from blu.numpy._dtypes import issubdtype as _issubdtype
from blu.numpy._promote import (
    asarray_operand,
    asarray_operands,
    concrete_value,
    is_concrete,
    promote_args_inexact,
    promote_dtypes,
    to_inexact,
)
from blu.numpy.complexes import conj
from blu.numpy.creation import asarray, linspace, ones, zeros
from blu.numpy.index_update import IndexUpdateHelper
from blu.numpy.logic import equal, greater, less, logical_and
from blu.numpy.manipulation import atleast_1d, concatenate, ravel, reshape, stack
from blu.numpy.products import matmul
from blu.numpy.reductions import max as _max
from blu.numpy.reductions import mean
from blu.numpy.reductions import min as _min
from blu.numpy.reductions import sum as _sum
from blu.numpy.selection import diagonal, take, where
from blu.numpy.sorting import argsort, searchsorted
from blu.numpy.transcendental import sqrt
from blu.numpy.ufuncs import clip, maximum, subtract, true_divide

__all__ = [
    "bincount",
    "corrcoef",
    "cov",
    "digitize",
    "histogram",
    "histogram2d",
    "histogram_bin_edges",
    "histogramdd",
    "interp",
]


def bincount(x: Any, weights: Any = None, minlength: int = 0, *, length: int | None = None) -> Any:
    """Count (or sum ``weights`` of) each value of the non-negative integer array ``x``.

    Args:
        x: 1-d integer (or bool) array.
        weights: optional array of ``x``'s shape.
        minlength: the smallest length of the result.
        length: the result's length (static); needed when ``x`` is traced. Values ``>= length``
            are dropped; negative values count in bin 0 (JAX's: they are clipped to zero,
            where numpy raises).

    Returns:
        ``(length,)``: int32 counts, or sums of ``weights`` (their dtype; int32 for bools).

    Raises:
        BluValueError: ``x`` is not 1-d or not integer.
        ConcretizationError: ``x`` is traced and ``length`` is None.
    """
    x = asarray_operand(x)
    if x.ndim == 1 and x.dtype == np.bool_:  # numpy's and JAX's: False is 0, True is 1
        x = x.astype(np.int32)
    if x.ndim != 1 or not np.issubdtype(x.dtype, np.integer):
        raise BluValueError(
            with_user_line(
                f"bincount: x must be a 1-d integer array, got {x.dtype.name}{list(x.shape)}"
            )
        )
    if length is None:
        v = concrete_value(x, "bincount without length=")
        length = builtins.max(int(v.max()) + 1 if v.size else 0, int(minlength))
    length = operator.index(length)
    w = ones(x.shape, np.int32) if weights is None else asarray_operand(weights)
    if w.dtype == np.bool_:  # sums of bools count the Trues (as sum's), not or them
        w = w.astype(np.int32)
    if weights is not None and w.shape != x.shape:
        raise BluValueError(
            with_user_line(f"bincount: weights has shape {w.shape}, x has shape {x.shape}")
        )
    # negative values clipped to 0 (JAX's); values >= length are dropped by the scatter
    idx = maximum(x, 0)
    return IndexUpdateHelper(zeros((length,), w.dtype))[idx].add(w, mode="drop")


def _edges(a: Any, bins: Any, range_: Any) -> Any:
    if isinstance(bins, str):
        raise BluValueError(
            with_user_line(
                f"histogram: bins={bins!r}: estimators by name are not supported (nor by JAX); "
                "pass a number of bins or an array of edges"
            )
        )
    if isinstance(bins, int) or (np.ndim(bins) == 0 and not isinstance(bins, Tracer)):
        n = operator.index(bins)
        if n < 1:
            raise BluValueError(with_user_line(f"histogram: bins must be >= 1, got {n}"))
        if range_ is None:
            lo, hi = _min(a), _max(a)
        else:
            lo, hi = range_
            if is_concrete(lo) and is_concrete(hi):  # numpy's checks (traced ones can't be)
                flo, fhi = float(np.asarray(lo)), float(np.asarray(hi))
                if not (np.isfinite(flo) and np.isfinite(fhi)):
                    raise BluValueError(
                        with_user_line(f"histogram: range ({flo}, {fhi}) is not finite")
                    )
                if flo > fhi:
                    raise BluValueError(
                        with_user_line(f"histogram: range ({flo}, {fhi}) has min > max")
                    )
            lo, hi = asarray(lo, dtype=a.dtype), asarray(hi, dtype=a.dtype)
        # numpy widens an empty range to (lo - 0.5, hi + 0.5)
        same = equal(lo, hi)
        lo, hi = where(same, lo - 0.5, lo), where(same, hi + 0.5, hi)
        return linspace(lo, hi, n + 1)
    edges = asarray_operand(bins)
    if is_concrete(edges):
        e = np.asarray(concrete_value(edges, "histogram (bins)"))
        if e.ndim != 1 or (np.diff(e) < 0).any():
            raise BluValueError(
                with_user_line(f"histogram: bins must be a 1-d increasing array, got {e!r:.60}")
            )
    return edges


def histogram_bin_edges(a: Any, bins: Any = 10, range: Any = None, weights: Any = None) -> Any:  # noqa: A002
    """The ``bins + 1`` edges ``histogram`` uses (``bins`` equal-width bins over ``range`` or
    the data's min..max; or ``bins`` itself when it is an array of edges)."""
    a = ravel(asarray_operand(a))
    if not _issubdtype(a.dtype, np.inexact):
        a = a.astype(np.float32)
    return _edges(a, bins, range)


def histogram(
    a: Any,
    bins: Any = 10,
    range: Any = None,  # noqa: A002
    weights: Any = None,
    density: bool | None = None,
) -> tuple[Any, Any]:
    """Counts of ``a`` (flattened) in bins, as ``numpy.histogram``.

    Each bin is half-open ``[e_i, e_{i+1})`` except the last, closed; values outside the edges
    are not counted.

    Args:
        a: any shape.
        bins: a number of equal-width bins, or a 1-d array of increasing edges.
        range: ``(lo, hi)`` of the equal-width bins (default: ``a``'s min and max).
        weights: optional, of ``a``'s shape (sums instead of counts).
        density: divide by the total and the bin widths (the result integrates to 1).

    Returns:
        ``(hist, bin_edges)``: ``(nbins,)`` counts (float32 as JAX, or ``weights``' dtype)
        and ``(nbins + 1,)`` edges.
    """
    a = ravel(asarray_operand(a))
    if not _issubdtype(a.dtype, np.inexact):
        a = a.astype(np.float32)
    edges = _edges(a, bins, range)
    n = edges.shape[0] - 1
    idx = searchsorted(edges, a, side="right") - 1
    idx = where(equal(a, take(edges, n)), n - 1, idx)  # the last bin is closed
    inside = logical_and(a >= take(edges, 0), a <= take(edges, n))
    idx = where(inside, idx, n)
    w = (a * 0 + 1) if weights is None else ravel(asarray_operand(weights))
    hist = bincount(idx.astype(np.int32), w, length=n)
    if density:
        widths = subtract(edges[1:], edges[:-1])
        hist = true_divide(hist, _sum(hist) * widths)
    return hist, edges


def histogramdd(
    sample: Any,
    bins: Any = 10,
    range: Any = None,  # noqa: A002
    weights: Any = None,
    density: bool | None = None,
) -> tuple[Any, list[Any]]:
    """Counts of ``N`` points in ``D`` dimensions in a grid of bins (numpy's and JAX's
    ``histogramdd``).

    Each dimension's bins are as ``histogram``'s: half-open ``[e_i, e_{i+1})``, the last one
    closed; a point outside the edges of any dimension is not counted.

    Args:
        sample: an ``(N, D)`` array, one row per point (promoted to an inexact dtype), or
            (numpy's reading) a sequence of ``D`` arrays of ``N`` coordinates, one per
            dimension (``(x, y, z)``; a sequence of numbers is ``N`` points in one dimension).
        bins: one number of equal-width bins or one 1-d array of edges for every dimension, or
            a length-``D`` sequence of them.
        range: a length-``D`` sequence of ``(lo, hi)`` pairs or ``None`` (the data's min and
            max), for the dimensions whose bins are numbers.
        weights: optional ``(N,)`` weights (sums instead of counts).
        density: divide by the total and the bins' volumes.

    Returns:
        ``(hist, edges)``: ``hist`` of shape ``(nbins_0, ..., nbins_{D-1})`` (int32 counts
        without weights and density, as JAX's; else the promoted dtype of sample and weights)
        and the list of the ``D`` arrays of edges.

    Raises:
        BluShapeError: ``sample`` not 2-d, ``weights`` not ``(N,)``.
        BluValueError: ``bins`` or ``range`` not one per dimension, bad bins or ranges.
    """
    if isinstance(sample, (list, tuple)) and len(sample):
        # numpy's reading of a sequence: each entry holds one coordinate of every point
        sample = stack([asarray_operand(c) for c in sample])
        sample = reshape(sample, (-1, 1)) if sample.ndim == 1 else sample.T
    sample = asarray_operand(sample)
    if sample.ndim != 2:
        raise BluShapeError(
            with_user_line(f"histogramdd: sample must be (N, D), got {sample.aval.str_short()}")
        )
    n_pts, d = sample.shape
    if weights is None:
        (sample,) = promote_args_inexact(sample)
    else:
        w = asarray_operand(weights)
        if w.shape != (n_pts,):
            raise BluShapeError(
                with_user_line(
                    f"histogramdd: weights {w.aval.str_short()} must have one weight per point "
                    f"of sample {sample.aval.str_short()}"
                )
            )
        sample, weights = (to_inexact(a) for a in promote_dtypes(sample, w))
    if range is not None and (
        len(range) != d or any(r is not None and np.shape(r)[0] != 2 for r in range)
    ):
        raise BluValueError(
            with_user_line(
                f"histogramdd: range must be {d} (lo, hi) pairs or Nones for a sample of shape "
                f"{sample.shape}, got {range!r}"
            )
        )
    try:
        n_bins = len(bins)
    except TypeError:  # one number of bins (or a 0-d array) for every dimension
        per_dim = [bins] * d
    else:
        if n_bins != d:
            raise BluValueError(
                with_user_line(
                    f"histogramdd: bins must give one entry per dimension, got {n_bins} for "
                    f"sample of shape {sample.shape}"
                )
            )
        per_dim = list(bins)
    idx, edges, nbins = [], [], []
    for i in builtins.range(d):
        col = sample[:, i]
        e = _edges(col, per_dim[i], None if range is None else range[i])
        b = searchsorted(e, col, side="right")
        b = where(equal(col, e[-1]), b - 1, b)  # the last bin is closed
        idx.append(b)
        edges.append(e)
        nbins.append(e.shape[0] + 1)  # with one bin below and one above the edges
    flat = zeros((n_pts,), np.int32)
    stride = 1
    for b, n in zip(reversed(idx), reversed(nbins)):
        flat = flat + clip(b, 0, n - 1).astype(np.int32) * stride
        stride *= n
    hist = bincount(flat, weights, length=stride).reshape(tuple(nbins))
    hist = hist[(slice(1, -1),) * d]
    if density:
        hist = hist.astype(sample.dtype)
        hist = true_divide(hist, _sum(hist))
        for i, e in enumerate(edges):
            shape = [1] * d
            shape[i] = nbins[i] - 2
            hist = true_divide(hist, reshape(subtract(e[1:], e[:-1]), tuple(shape)))
    return hist, edges


def histogram2d(
    x: Any,
    y: Any,
    bins: Any = 10,
    range: Any = None,  # noqa: A002
    weights: Any = None,
    density: bool | None = None,
) -> tuple[Any, Any, Any]:
    """Counts of the points ``(x[k], y[k])`` in a grid of bins (numpy's and JAX's
    ``histogram2d``): ``histogramdd`` of the ``(N, 2)`` sample.

    Args:
        x, y: 1-d coordinates of one length ``N``.
        bins: a number of bins or an array of edges for both dimensions, or a pair of them.
        range: ``[(xlo, xhi), (ylo, yhi)]`` (entries may be None).
        weights, density: as ``histogramdd``.

    Returns:
        ``(hist, xedges, yedges)``; ``hist`` of shape ``(nx, ny)``.

    Raises:
        BluShapeError: ``x`` and ``y`` not 1-d of one length. Others as ``histogramdd``.
    """
    x, y = asarray_operand(x), asarray_operand(y)
    if x.ndim != 1 or x.shape != y.shape:
        raise BluShapeError(
            with_user_line(
                f"histogram2d: x and y must be 1-d of one length, got {x.aval.str_short()} and "
                f"{y.aval.str_short()}"
            )
        )
    try:
        n = len(bins)
    except TypeError:
        n = 1
    if n not in (1, 2):  # one array of edges for both dimensions
        bins = [asarray_operand(bins)] * 2
    x, y = (to_inexact(a) for a in promote_dtypes(x, y))
    hist, edges = histogramdd(stack([x, y], axis=1), bins, range, weights, density)
    return hist, edges[0], edges[1]


def digitize(x: Any, bins: Any, right: bool = False, *, method: str | None = None) -> Any:
    """The bin of each ``x`` (numpy's ``digitize``): for increasing ``bins``, ``i`` with
    ``bins[i-1] <= x < bins[i]`` (``right=True``: ``bins[i-1] < x <= bins[i]``); decreasing
    ``bins`` are also handled. Returns int32 of ``x``'s shape. ``method`` is
    ``searchsorted``'s (JAX's keyword; the result is the same).

    Raises:
        BluValueError: ``bins`` is not 1-d.
    """
    x, bins = asarray_operand(x), asarray_operand(bins)
    if bins.ndim != 1:
        raise BluValueError(with_user_line(f"digitize: bins must be 1-d, got shape {bins.shape}"))
    side = "left" if right else "right"
    if bins.shape[0] == 0:
        return zeros(x.shape, np.int32)
    how = {} if method is None else {"method": method}
    up = searchsorted(bins, x, side=side, **how)
    rev = bins[::-1]
    down = bins.shape[0] - searchsorted(rev, x, side=side, **how)
    increasing = bins[-1] >= bins[0]
    return where(increasing, up, down).astype(np.int32)


def interp(
    x: Any,
    xp: Any,
    fp: Any,
    left: Any = None,
    right: Any = None,
    period: Any = None,
) -> Any:
    """Piecewise-linear interpolation of ``(xp, fp)`` at ``x``, as ``numpy.interp``.

    Args:
        x: points, any shape.
        xp: 1-d increasing sample points (not checked; with ``period``, any order).
        fp: 1-d values at ``xp`` (same length).
        left, right: the values below ``xp[0]`` / above ``xp[-1]`` (default ``fp[0]``,
            ``fp[-1]``).
        period: treat ``x`` and ``xp`` as periodic with this period (``left``/``right``
            ignored).

    Returns:
        An array of ``x``'s shape in ``fp``'s (inexact) dtype.

    Raises:
        BluValueError: ``xp`` / ``fp`` not 1-d of one length, or ``period`` is 0.
    """
    x, xp, fp = asarray_operands(x, xp, fp)
    if xp.ndim != 1 or fp.ndim != 1 or xp.shape != fp.shape or xp.shape[0] == 0:
        raise BluValueError(
            with_user_line(
                f"interp: xp and fp must be 1-d of one non-zero length, got {xp.shape}, {fp.shape}"
            )
        )
    if not _issubdtype(fp.dtype, np.inexact):
        fp = fp.astype(np.float32)
    if not _issubdtype(x.dtype, np.inexact):
        x = x.astype(fp.dtype)
    if period is not None:
        if not isinstance(period, Tracer) and float(np.asarray(period)) == 0:
            raise BluValueError(with_user_line("interp: period must be non-zero"))
        period = abs(period)
        x = x % period
        xp = xp % period
        order = argsort(xp)
        xp, fp = take(xp, order), take(fp, order)
        xp = concatenate([xp[-1:] - period, xp, xp[:1] + period])
        fp = concatenate([fp[-1:], fp, fp[:1]])
        left = right = None
    n = xp.shape[0]
    if n == 1:
        out = x * 0 + fp[0]
    else:
        i = clip(searchsorted(xp, x, side="right"), 1, n - 1)
        x0, x1 = take(xp, i - 1), take(xp, i)
        f0, f1 = take(fp, i - 1), take(fp, i)
        dx = x1 - x0
        t = true_divide(x - x0, where(equal(dx, 0), 1, dx))
        out = where(equal(dx, 0), f0, f0 + t * (f1 - f0))
    lo = fp[0] if left is None else left
    hi = fp[-1] if right is None else right
    out = where(less(x, xp[0]), lo, out)
    out = where(greater(x, xp[-1]), hi, out)
    return out.astype(fp.dtype)


def cov(
    m: Any,
    y: Any = None,
    rowvar: bool = True,
    bias: bool = False,
    ddof: int | None = None,
    fweights: Any = None,
    aweights: Any = None,
) -> Any:
    """The covariance matrix of the variables in ``m`` (and ``y``), as ``numpy.cov``.

    Args:
        m: ``(nvars, nobs)`` (``rowvar=True``) or ``(nobs, nvars)``; 1-d is one variable.
        y: more variables, shaped as ``m``.
        bias: normalize by ``N`` (else ``N - 1``); ``ddof`` overrides it.
        fweights: integer frequency weights ``(nobs,)``; aweights: observation weights.

    Returns:
        ``(nvars, nvars)`` (a 0-d array for one variable), float32 for integer input.
    """
    m = atleast_1d(asarray_operand(m))
    if m.ndim > 2:
        raise BluValueError(with_user_line(f"cov: m has shape {m.shape}; expected 1-d or 2-d"))
    if not _issubdtype(m.dtype, np.inexact):
        m = m.astype(np.float32)
    x = reshape(m, (1, -1)) if m.ndim == 1 else (m if rowvar else m.T)
    if y is not None:
        y = atleast_1d(asarray_operand(y)).astype(x.dtype)
        y = reshape(y, (1, -1)) if y.ndim == 1 else (y if rowvar else y.T)
        x = concatenate([x, y], axis=0)
    if ddof is None:
        ddof = 0 if bias else 1
    w = None
    if fweights is not None:
        w = asarray_operand(fweights).astype(x.dtype)
    if aweights is not None:
        aw = asarray_operand(aweights).astype(x.dtype)
        w = aw if w is None else w * aw
    if w is None:
        avg = mean(x, axis=1)
        w_sum = x.shape[1]
        fact = w_sum - ddof
        xc = x - avg[:, None]
        c = matmul(xc, conj(xc).T)
    else:
        w_sum = _sum(w)
        avg = true_divide(_sum(x * w, axis=1), w_sum)
        if ddof == 0:
            fact = w_sum
        elif aweights is None:
            fact = w_sum - ddof
        else:
            fact = w_sum - ddof * _sum(w * asarray_operand(aweights)) / w_sum
        xc = x - avg[:, None]
        c = matmul(xc * w, conj(xc).T)
    c = true_divide(c, fact)
    return c[0, 0] if c.shape == (1, 1) else c


def corrcoef(x: Any, y: Any = None, rowvar: bool = True) -> Any:
    """Pearson correlation coefficients, as ``numpy.corrcoef`` (``cov`` scaled by the standard
    deviations; real parts clipped to [-1, 1])."""
    c = cov(x, y, rowvar)
    if c.ndim == 0:
        return true_divide(c, c)
    d = sqrt(diagonal(c))
    c = c / d[:, None] / d[None, :]
    if np.issubdtype(c.dtype, np.complexfloating):
        return c
    return clip(c, -1, 1)
