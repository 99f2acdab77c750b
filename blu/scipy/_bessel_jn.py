"""``bessel_jn`` of ``blu.scipy.special`` (``jax.scipy.special``'s): the Bessel functions of the
first kind ``J_0`` to ``J_v`` of real ``z`` by Miller's backward recurrence (Zhang & Jin,
*Computation of Special Functions*, 1996, ``BJNDD``; DLMF 10.74.iv), in ``blu.numpy`` operations.

From ``f_(n_iter + 1) = 0``, ``f_(n_iter) = 1`` the recurrence ``f_(k-1) = 2k/z f_k - f_(k+1)``
(DLMF 10.6.1) runs down to ``f_0``; the ``f_k`` are proportional to ``J_k(z)`` and are normalized
by ``J_0 + 2 (J_2 + J_4 + ...) = 1`` (DLMF 10.12.4 at 0). Where ``|f_k|`` passes 1 every ``f``
kept so far is divided by it, so the recurrence does not overflow for small ``|z|``. Below
``|z| = 1e-4`` the first two terms of the power series (DLMF 10.2.2) are used instead; at 0,
``J_0 = 1`` and the others are 0; at ``+-inf`` NaN (scipy's). Differentiable through the
operations, as JAX's.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from blu import numpy as bnp
from blu.core.errors import BluError, BluTypeError, BluValueError, with_user_line

__all__ = ["bessel_jn"]

_SMALL = 1e-4


def _static_int(name: str, value: Any) -> int:
    try:
        return operator.index(value)
    except (TypeError, BluError):
        raise BluTypeError(
            with_user_line(f"bessel_jn: {name} must be a concrete integer, got {value!r}")
        ) from None


def _miller(z: Any, v: int, n_iter: int) -> list:
    f_next = bnp.zeros_like(z)
    f = bnp.ones_like(z)
    kept: dict[int, Any] = {n_iter: f} if n_iter <= v else {}
    norm = 2.0 * f if n_iter % 2 == 0 else bnp.zeros_like(z)
    for k in range(n_iter, 0, -1):
        f_prev = (2.0 * k) * f / z - f_next
        f_next, f = f, f_prev
        if k - 1 <= v:
            kept[k - 1] = f
        if (k - 1) % 2 == 0:
            norm = norm + (f if k - 1 == 0 else 2.0 * f)
        big = bnp.abs(f) > 1.0
        scale = 1.0 / bnp.where(big, bnp.abs(f), 1.0)
        f_next, f, norm = f_next * scale, f * scale, norm * scale
        kept = {j: g * scale for j, g in kept.items()}
    return [kept[j] / norm for j in range(v + 1)]


def _series(z: Any, v: int) -> list:
    """``J_k(z) ~ (z/2)^k / k! (1 - (z/2)^2 / (k + 1))`` for small ``|z|``."""
    h = 0.5 * z
    return [h**k / math.factorial(k) * (1.0 - h * h / (k + 1)) for k in range(v + 1)]


def bessel_jn(z: Any, *, v: int, n_iter: int = 50) -> Any:
    """The Bessel functions of the first kind ``J_0(z)`` to ``J_v(z)`` of integer order and real
    ``z``, by Miller's backward recurrence from order ``n_iter`` (Zhang & Jin's ``BJNDD``).

    Returns an array of shape ``(v + 1, *z.shape)`` with ``z``'s dtype (integers computed in
    float32). ``n_iter`` must be large enough for ``|z|`` (as a rule ``n_iter > |z| + 25``;
    the default 50 is accurate to float64 rounding for ``|z| <= 20``). At ``z = 0`` gives
    ``J_0 = 1`` and 0 above (JAX's recurrence divides by 0 there), NaN at ``+-inf``
    (scipy's) and at NaN. Differentiable in ``z``.

    Raises:
        BluTypeError: ``v`` or ``n_iter`` is not a concrete integer.
        BluValueError: ``z`` is complex (JAX's ``ValueError``), ``v`` is negative, or
            ``v > n_iter`` (JAX returns only ``n_iter + 1`` orders then).
    """
    v = _static_int("v", v)
    n_iter = _static_int("n_iter", n_iter)
    z = bnp.asarray(z)
    if bnp.issubdtype(z.dtype, bnp.complexfloating):
        raise BluValueError(with_user_line(f"bessel_jn: complex z ({z.dtype}) is not supported"))
    if v < 0 or v > n_iter:
        raise BluValueError(
            with_user_line(f"bessel_jn: v must be in [0, n_iter] = [0, {n_iter}], got v={v}")
        )
    if not bnp.issubdtype(z.dtype, bnp.inexact):
        z = z.astype(np.float32)
    dt = z.dtype
    if dt in (bnp.float16, bnp.bfloat16):
        z = z.astype(np.float32)
    small = bnp.abs(z) < _SMALL
    zl = bnp.where(small, 1.0, z)
    zs = bnp.where(small, z, 0.0)
    rows = [
        bnp.where(small, s, m) for s, m in zip(_series(zs, v), _miller(zl, v, n_iter), strict=True)
    ]
    out = bnp.stack(rows)
    return bnp.where(bnp.isinf(z), bnp.nan, out).astype(dt)  # scipy's NaN at +-inf
