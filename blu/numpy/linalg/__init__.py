"""blu.numpy.linalg: linear algebra (for now ``norm``; decompositions and solvers follow)."""

from __future__ import annotations

from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.errors import BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.numpy._promote import asarray_operand, canonicalize_axes, to_inexact

__all__ = ["norm"]


def norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Any:
    """Vector and matrix norms, as ``numpy.linalg.norm``.

    Vector norms (``axis`` an int, or ``x`` 1-D with ``axis`` None): ``ord`` None/2 (Euclidean),
    1, inf, -inf, 0 (number of nonzeros) or any other p (``sum(|x|^p)^(1/p)``).
    Matrix norms (``axis`` a pair, or ``x`` 2-D with ``axis`` None): 'fro'/None (Frobenius),
    1, -1 (max/min column sum), inf, -inf (max/min row sum). With ``ord`` and ``axis`` both
    None the result is the 2-norm of the raveled array, whatever the rank.

    The gradient at ``x = 0`` is not yet made finite (the Euclidean norm's is NaN there).

    Raises:
        BluValueError: an unsupported ``ord`` ('nuc' and 2 for matrices need an SVD).
    """
    from blu.numpy import reductions as r
    import blu.numpy as u

    x = to_inexact(asarray_operand(x))
    nd = get_aval(x).ndim
    if axis is None and ord is None:
        return u.sqrt(r.sum(u.multiply(x, x), axis=None, keepdims=keepdims))
    if axis is None:
        axis = tuple(range(nd))
    axes = canonicalize_axes(axis, nd, "norm")
    if len(axes) == 1:
        a = u.abs(x)
        if ord is None or ord == 2:
            return u.sqrt(r.sum(u.multiply(x, x), axes, keepdims=keepdims))
        if ord == np.inf:
            return r.max(a, axes, keepdims=keepdims)
        if ord == -np.inf:
            return r.min(a, axes, keepdims=keepdims)
        if ord == 0:
            return r.sum(u.not_equal(x, 0), axes, dtype=get_aval(x).dtype, keepdims=keepdims)
        if ord == 1:
            return r.sum(a, axes, keepdims=keepdims)
        if isinstance(ord, str):
            raise BluValueError(with_user_line(f"norm: invalid ord {ord!r} for vectors"))
        p = float(ord)
        return u.power(r.sum(u.power(a, p), axes, keepdims=keepdims), 1.0 / p)
    if len(axes) == 2:
        r0, c0 = axes
        if ord is None or ord == "fro":
            return u.sqrt(r.sum(u.multiply(x, x), axes, keepdims=keepdims))
        a = u.abs(x)
        if ord in (1, -1):  # column sums (over rows), then extremum over columns
            s = r.sum(a, r0, keepdims=True)
            red = r.max if ord == 1 else r.min
            out = red(s, c0, keepdims=True)
        elif ord in (np.inf, -np.inf):
            s = r.sum(a, c0, keepdims=True)
            red = r.max if ord == np.inf else r.min
            out = red(s, r0, keepdims=True)
        else:
            raise BluValueError(
                with_user_line(f"norm: matrix ord {ord!r} is not supported yet (needs an SVD)")
            )
        if keepdims:
            return out
        from blu.numpy.manipulation import squeeze

        return squeeze(out, axes)
    raise BluValueError(with_user_line(f"norm: axis must be an int or a pair, got {axis!r}"))


del dtypes
