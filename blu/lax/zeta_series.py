"""The Hurwitz zeta function ``zeta(x, q) = sum_{n >= 0} (q + n)**-x`` (``jax.lax.zeta``),
composed of elementwise operations.

As Cephes' ``zeta`` (S. L. Moshier, 1989) and XLA's, which JAX's lowers to: the first ten terms
summed, then the Euler-Maclaurin formula for the rest (the integral, half the last term and
twelve Bernoulli corrections, ``B_2k / (2k)!`` times the ``2k - 1``-th derivative). Fixed
counts, no loop: accurate to a few ulps for ``x > 1`` and ``q > 0``.
"""

from __future__ import annotations

__all__ = ["zeta"]

import math
from fractions import Fraction
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.errors import BluTypeError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax.bits import and_, not_, or_
from blu.lax.elementwise import add, div, eq, floor, le, lt, mul, neg, operands, select, sub
from blu.lax.shapes import full_like
from blu.lax.special import pow

_TERMS = 9  # Cephes' N: the sum runs over q, q + 1, ..., q + 9
_CORRECTIONS = 12  # Cephes' M: Bernoulli corrections of the Euler-Maclaurin formula


def _bernoulli(n: int) -> Fraction:
    """The Bernoulli number ``B_n`` (``B_1 = -1/2``), by the Akiyama-Tanigawa algorithm."""
    a = [Fraction(0)] * (n + 1)
    for m in range(n + 1):
        a[m] = Fraction(1, m + 1)
        for j in range(m, 0, -1):
            a[j - 1] = j * (a[j - 1] - a[j])
    return a[0] if n != 1 else Fraction(-1, 2)


# Cephes' A[i] = (2i + 2)! / B_{2i + 2}: 12, -720, 30240, ...
_A = [float(math.factorial(2 * i + 2) / _bernoulli(2 * i + 2)) for i in range(_CORRECTIONS)]


def zeta(x: Any, q: Any) -> Any:
    """The Hurwitz zeta function ``sum_{n >= 0} (q + n)**-x``, elementwise
    (``jax.lax.zeta``; ``scipy.special.zeta(x, q)``); ``zeta(x, 1)`` is Riemann's.

    As XLA's: ``inf`` at ``x == 1`` and at ``q`` a non-positive integer, NaN for ``x < 1`` and
    for a non-positive ``q`` with a non-integer ``x``. Derivative in ``q``: ``-x zeta(x + 1,
    q)`` (JAX's); in ``x``, that of the series (JAX's has none).

    Args:
        x, q: float arrays of one shape and dtype (a Python scalar takes the other's).

    Returns:
        An array of their shape and dtype.

    Raises:
        BluTypeError: not real float operands.
    """
    x, q = operands(x, q)
    for v in (x, q):
        if not dtypes.is_float(get_aval(v).dtype):
            raise BluTypeError(
                with_user_line(
                    f"zeta: needs real float operands, got {get_aval(x).str_short()}, "
                    f"{get_aval(q).str_short()}"
                )
            )

    def c(v: float) -> Any:
        return full_like(x, v)

    one = c(1.0)
    neg_x = neg(x)
    s = pow(q, neg_x)
    a = q
    for _ in range(_TERMS):
        a = add(a, one)
        s = add(s, pow(a, neg_x))
    b = pow(a, neg_x)
    w = a
    s = add(s, div(mul(b, w), sub(x, one)))
    s = sub(s, mul(c(0.5), b))
    # term i: x (x + 1) ... (x + 2i) b / w**(2i + 1) / A[i], its product updated one factor
    # at a time (x (x + 1) ... alone overflows float32 for large x where b underflows)
    t = div(mul(x, b), w)
    for i, coeff in enumerate(_A):
        s = add(s, div(t, c(coeff)))
        t = mul(t, div(mul(add(x, c(2 * i + 1.0)), add(x, c(2 * i + 2.0))), mul(w, w)))
    zero = c(0.0)
    q_pole = and_(le(q, zero), eq(q, floor(q)))
    domain = or_(lt(x, one), and_(le(q, zero), not_(eq(x, floor(x)))))
    s = select(q_pole, c(np.inf), s)
    s = select(eq(x, one), c(np.inf), s)
    return select(domain, c(np.nan), s)
