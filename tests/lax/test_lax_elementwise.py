"""Elementwise lax primitives (elementwise.py, special.py) against independent oracles.

Each float op is checked eagerly against a float64 reference built from Python's ``math``
module (or a series/bisection written here), its derivatives against finite differences to
second order, vmap against a per-slice loop and jit against eager. The op tables here also
drive ``test_lax_elementwise_dtypes.py`` (every float dtype, weak types, integers, special
values, errors).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal
from typing import NamedTuple

import ml_dtypes
import numpy as np
import pytest
from helpers import arrays, check_grads, check_jit, check_vmap, shapes
from hypothesis import given
from hypothesis import strategies as st

import blu
from blu import lax

FLOAT_DTYPES = [ml_dtypes.bfloat16, np.float16, np.float32, np.float64]
# |blu(x) - ref(x)| <= tol * (1 + |ref(x)|) with x already rounded to the dtype: one rounding
# of the result (bf16: 8 bits, f16: 11 bits) plus the float32 computation
TOL = {ml_dtypes.bfloat16: 1.6e-2, np.float16: 2e-3, np.float32: 1e-5, np.float64: 1e-10}


# ---- float64 references ------------------------------------------------------------------------


def V(f: Callable) -> Callable:
    """Vectorize a scalar function of Python floats over float64 arrays."""
    vf = np.vectorize(f, otypes=[np.float64])
    return lambda *xs: vf(*[np.asarray(x, np.float64) for x in xs])


def _round_half_away(v: float) -> float:
    return float(Decimal(v).quantize(Decimal(1), rounding=ROUND_HALF_UP))  # exact decimal


def _erf_inv(y: np.ndarray) -> np.ndarray:
    """Bisection on math.erf (monotone), to full float64 resolution."""
    lo, hi = np.full(np.shape(y), -7.0), np.full(np.shape(y), 7.0)
    erf = V(math.erf)
    for _ in range(80):
        mid = (lo + hi) / 2
        below = erf(mid) < y
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return (lo + hi) / 2


def _digamma(x: float) -> float:
    """Recurrence up to x >= 10, then the asymptotic series (A&S 6.3.18)."""
    acc = 0.0
    while x < 10:
        acc -= 1 / x
        x += 1
    x2 = 1 / (x * x)
    series = x2 * (1 / 12 - x2 * (1 / 120 - x2 * (1 / 252 - x2 * (1 / 240 - x2 / 132))))
    return acc + math.log(x) - 0.5 / x - series


def _polygamma(m: int, x: float) -> float:
    """(-1)^(m+1) m! zeta(m+1, x), the Hurwitz zeta by Euler-Maclaurin (A&S 6.4.10)."""
    s, n = m + 1, 20
    z = sum((x + k) ** -s for k in range(n))
    a = x + n
    z += a ** (1 - s) / (s - 1) + a**-s / 2 + s * a ** (-s - 1) / 12
    z -= s * (s + 1) * (s + 2) * a ** (-s - 3) / 720
    return (-1) ** (m + 1) * math.factorial(m) * z


# ---- the op tables -----------------------------------------------------------------------------


def _away_from_zero(x, gap=0.3):
    return np.where(np.abs(x) < gap, x + np.where(x < 0, -gap, gap), x)


def _away_from_integers(x, gap=0.05):
    frac = x - np.floor(x)
    return np.where((frac < gap) | (frac > 1 - gap), x + 2 * gap, x)


def _away_from_half_integers(x):
    return _away_from_integers(x - 0.5) + 0.5


class Op(NamedTuple):
    name: str
    fn: Callable  # the blu function
    ref: Callable  # float64 reference
    lo: float = -3.0  # the domain of the tests
    hi: float = 3.0
    smooth: Callable | None = None  # moves values away from kinks (derivative tests only)
    grad_lo: float | None = None  # a narrower domain for derivatives
    float_only: bool = True


def _sign(v):
    return float((v > 0) - (v < 0))


UNARY = [
    Op("neg", lax.neg, lambda x: -x, float_only=False),
    Op("abs", lax.abs, V(abs), smooth=lambda x: _away_from_zero(x, 0.05), float_only=False),
    Op("sign", lax.sign, V(_sign), smooth=lambda x: _away_from_zero(x, 0.05), float_only=False),
    Op("floor", lax.floor, V(math.floor), smooth=_away_from_integers),
    Op("ceil", lax.ceil, V(math.ceil), smooth=_away_from_integers),
    Op(
        "round", lax.round, V(_round_half_away), smooth=lambda x: _away_from_integers(x - 0.5) + 0.5
    ),
    Op("square", lax.square, V(lambda v: v * v), float_only=False),
    Op("sqrt", lax.sqrt, V(math.sqrt), 0.0, 10.0, grad_lo=0.3),
    Op("rsqrt", lax.rsqrt, V(lambda v: 1 / math.sqrt(v)), 1e-3, 10.0, grad_lo=0.3),
    Op("cbrt", lax.cbrt, V(math.cbrt), smooth=_away_from_zero),
    Op("ipow0", lambda x: lax.integer_pow(x, 0), V(lambda v: 1.0), float_only=False),
    Op("ipow1", lambda x: lax.integer_pow(x, 1), V(lambda v: v), float_only=False),
    Op("ipow3", lambda x: lax.integer_pow(x, 3), V(lambda v: v**3), float_only=False),
    Op("ipow5", lambda x: lax.integer_pow(x, 5), V(lambda v: v**5), -2.0, 2.0, float_only=False),
    Op("ipow-2", lambda x: lax.integer_pow(x, -2), V(lambda v: v**-2), 0.5, 3.0, float_only=False),
    Op("sin", lax.sin, V(math.sin)),
    Op("cos", lax.cos, V(math.cos)),
    Op("tan", lax.tan, V(math.tan), -1.2, 1.2),
    Op("asin", lax.asin, V(math.asin), -0.9, 0.9),
    Op("acos", lax.acos, V(math.acos), -0.9, 0.9),
    Op("atan", lax.atan, V(math.atan)),
    Op("sinh", lax.sinh, V(math.sinh)),
    Op("cosh", lax.cosh, V(math.cosh)),
    Op("tanh", lax.tanh, V(math.tanh)),
    Op("asinh", lax.asinh, V(math.asinh)),
    Op("acosh", lax.acosh, V(math.acosh), 1.1, 5.0),
    Op("atanh", lax.atanh, V(math.atanh), -0.9, 0.9),
    Op("exp", lax.exp, V(math.exp)),
    Op("exp2", lax.exp2, V(lambda v: 2.0**v)),
    Op("expm1", lax.expm1, V(math.expm1)),
    Op("log", lax.log, V(math.log), 1e-3, 10.0, grad_lo=0.3),
    Op("log1p", lax.log1p, V(math.log1p), -0.9, 3.0),
    Op("logistic", lax.logistic, V(lambda v: 1 / (1 + math.exp(-v))), -8.0, 8.0),
    Op("erf", lax.erf, V(math.erf)),
    Op("erfc", lax.erfc, V(math.erfc)),
    Op("erf_inv", lax.erf_inv, _erf_inv, -0.95, 0.95),
    Op("lgamma", lax.lgamma, V(math.lgamma), 0.1, 6.0, grad_lo=0.4),
    Op("digamma", lax.digamma, V(_digamma), 0.2, 6.0, grad_lo=0.5),
    Op("polygamma1", lambda x: lax.polygamma(1, x), V(lambda v: _polygamma(1, v)), 0.3, 6.0),
    Op("polygamma2", lambda x: lax.polygamma(2, x), V(lambda v: _polygamma(2, v)), 0.5, 6.0),
]


class Op2(NamedTuple):
    name: str
    fn: Callable
    ref: Callable
    x_dom: tuple[float, float] = (-3.0, 3.0)
    y_dom: tuple[float, float] = (-3.0, 3.0)
    prep: Callable = lambda x, y: (x, y)  # applied in every test (e.g. no division by 0)
    smooth: Callable = lambda x, y: (x, y)  # derivative tests only
    float_only: bool = False


def _rem_smooth(x, y):
    # fmod jumps where x / y crosses a nonzero integer: keep the quotient away from those
    frac = np.abs(x / y) % 1
    return np.where((frac < 0.05) | (frac > 0.95), x + 0.1 * y, x), y


def _no_ties(x, y):
    return x, np.where(np.abs(x - y) < 0.05, y + 0.1, y)


BINARY = [
    Op2("add", lax.add, V(operator.add)),
    Op2("sub", lax.sub, V(operator.sub)),
    Op2("mul", lax.mul, V(operator.mul)),
    Op2("div", lax.div, V(operator.truediv), prep=lambda x, y: (x, _away_from_zero(y))),
    Op2(
        "rem", lax.rem, V(math.fmod), prep=lambda x, y: (x, _away_from_zero(y)), smooth=_rem_smooth
    ),  # fmt: skip
    Op2("max", lax.max, V(max), smooth=_no_ties),
    Op2("min", lax.min, V(min), smooth=_no_ties),
    Op2("select", lambda x, y: lax.select(lax.gt(x, y), x, y), V(max), smooth=_no_ties),
    Op2("pow", lax.pow, V(math.pow), (0.2, 3.0), (-2.0, 2.0), float_only=True),
    Op2(
        "atan2",
        lax.atan2,
        V(math.atan2),
        prep=lambda x, y: (_away_from_zero(x), y),
        float_only=True,
    ),  # fmt: skip
]

ids = [op.name for op in UNARY]
ids2 = [op.name for op in BINARY]


def draw_x(data, op: Op, shape, grad: bool = False):
    lo = op.grad_lo if grad and op.grad_lo is not None else op.lo
    x = data.draw(arrays(shape, lo, op.hi))
    return op.smooth(x) if grad and op.smooth else x


def draw_xy(data, op: Op2, shape, grad: bool = False):
    x = data.draw(arrays(shape, *op.x_dom))
    y = data.draw(arrays(shape, *op.y_dom))
    x, y = op.prep(x, y)
    return op.smooth(x, y) if grad else (x, y)


def _f64(x) -> np.ndarray:
    return np.asarray(x, np.float64)


# ---- float ops: values, derivatives, vmap, jit --------------------------------------------------


@pytest.mark.parametrize("op", UNARY, ids=ids)
@given(data=st.data())
def test_unary_matches_float64_reference(op, data):
    x = draw_x(data, op, data.draw(shapes()))
    got = op.fn(x)
    assert got.dtype == np.float64 and got.shape == x.shape
    np.testing.assert_allclose(_f64(got), op.ref(x), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("op", BINARY, ids=ids2)
@given(data=st.data())
def test_binary_matches_float64_reference(op, data):
    x, y = draw_xy(data, op, data.draw(shapes()))
    got = op.fn(x, y)
    assert got.dtype == np.float64 and got.shape == x.shape
    np.testing.assert_allclose(_f64(got), op.ref(x, y), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op", UNARY, ids=ids)
@given(data=st.data())
def test_unary_grads_second_order(op, data):
    x = draw_x(data, op, data.draw(shapes(max_dims=2, max_side=3)), grad=True)
    check_grads(op.fn, [x], order=2)


@pytest.mark.parametrize("op", BINARY, ids=ids2)
@given(data=st.data())
def test_binary_grads_second_order(op, data):
    x, y = draw_xy(data, op, data.draw(shapes(max_dims=2, max_side=3)), grad=True)
    check_grads(op.fn, [x, y], order=2)


def _batched(data, core, axis, size):
    """The shape of an argument mapped at ``axis`` (None: not mapped) around ``core``."""
    if axis is None:
        return core
    shape = list(core)
    shape.insert(axis % (len(core) + 1), size)
    return tuple(shape)


@pytest.mark.parametrize("op", UNARY, ids=ids)
@given(data=st.data())
def test_unary_vmap_matches_loop(op, data):
    core = data.draw(shapes(max_dims=2))
    axis = data.draw(st.integers(-len(core) - 1, len(core)))
    x = draw_x(data, op, _batched(data, core, axis, data.draw(st.integers(1, 3))))
    check_vmap(op.fn, [x], [axis])


@pytest.mark.parametrize("op", BINARY, ids=ids2)
@given(data=st.data())
def test_binary_vmap_matches_loop(op, data):
    core = data.draw(shapes(max_dims=2))
    axis_choices = [None, *range(-len(core) - 1, len(core) + 1)]
    ax = data.draw(st.sampled_from(axis_choices))
    ay = data.draw(st.sampled_from(axis_choices[1:] if ax is None else axis_choices))
    size = data.draw(st.integers(1, 3))
    x = data.draw(arrays(_batched(data, core, ax, size), *op.x_dom))
    y = data.draw(arrays(_batched(data, core, ay, size), *op.y_dom))
    if op.name in ("div", "rem"):
        y = _away_from_zero(y)
    if op.name == "atan2":
        x = _away_from_zero(x)
    check_vmap(op.fn, [x, y], [ax, ay])


@pytest.mark.parametrize("op", UNARY, ids=ids)
@given(data=st.data())
def test_unary_jit_matches_eager(op, data):
    check_jit(op.fn, [draw_x(data, op, data.draw(shapes()))])


@pytest.mark.parametrize("op", BINARY, ids=ids2)
@given(data=st.data())
def test_binary_jit_matches_eager(op, data):
    check_jit(op.fn, list(draw_xy(data, op, data.draw(shapes()))))


def test_vmap_of_grad_and_grad_of_jit_compose():
    x = np.linspace(0.3, 2.0, 12).reshape(3, 4)
    y = np.linspace(-1.0, 1.5, 12).reshape(3, 4)

    def f(a, b):
        return lax.reduce_sum(lax.mul(lax.pow(a, b), lax.erf(lax.atan2(a, b))))

    want = np.stack([np.asarray(blu.grad(f)(x[i], y[i])) for i in range(3)])
    np.testing.assert_allclose(np.asarray(blu.vmap(blu.grad(f))(x, y)), want, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(blu.grad(blu.jit(f))(x, y)), _f64(blu.grad(f)(x, y)))
