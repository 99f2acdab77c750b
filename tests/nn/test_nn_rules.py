"""The custom derivative rules of nn.gelu and nn.layer_norm: values, first and second derivatives
against float64 closed forms and finite differences, special points, low-precision inputs, and
how many activation-sized arrays reverse mode keeps (one per call)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import scipy.special

import blu
from blu import nn
from tests.helpers import check_grads

bf16 = ml_dtypes.bfloat16
C, A = np.sqrt(2 / np.pi), 0.044715

# special points: 0, tiny, moderate, where tanh saturates, and far beyond (x^3 overflows float32)
POINTS = np.array(
    [
        0.0,
        1e-3,
        -1e-3,
        0.5,
        -0.5,
        1.0,
        -2.0,
        3.0,
        -3.0,
        8.0,
        -8.0,
        30.0,
        -30.0,
        1e4,
        -1e4,
        1e13,
        -1e13,
    ]
)


def gelu_ref(x, approximate):
    """Value, first and second derivative in float64 (closed forms)."""
    if approximate:
        u = C * (x + A * x**3)
        th = np.tanh(u)
        s, du, ddu = 1 - th**2, C * (1 + 3 * A * x**2), 6 * A * C * x
        with np.errstate(invalid="ignore", over="ignore"):
            d1 = 0.5 * (1 + th) + np.where(s == 0, 0.0, 0.5 * x * s * du)
            d2 = np.where(s == 0, 0.0, s * du - x * th * s * du**2 + 0.5 * x * s * ddu)
        return 0.5 * x * (1 + th), d1, d2
    cdf = 0.5 * (1 + scipy.special.erf(x / np.sqrt(2)))
    pdf = np.exp(-0.5 * x**2) / np.sqrt(2 * np.pi)
    return x * cdf, cdf + x * pdf, pdf * (2 - x**2)


def elementwise_grads(f, x):
    d1 = blu.grad(lambda v: f(v).sum())
    d2 = blu.grad(lambda v: d1(v).sum())
    return np.asarray(f(x)), np.asarray(d1(x)), np.asarray(d2(x))


@pytest.mark.parametrize("approximate", [True, False])
def test_gelu_value_and_two_derivatives_at_special_points(approximate):
    y, d1, d2 = elementwise_grads(lambda v: nn.gelu(v, approximate), POINTS)
    ry, r1, r2 = gelu_ref(POINTS, approximate)
    np.testing.assert_allclose(y, ry, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(d1, r1, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(d2, r2, rtol=1e-10, atol=1e-14)
    assert np.all(np.isfinite(d1)) and np.all(np.isfinite(d2))
    np.testing.assert_array_equal(d1[-4:], [1.0, 0.0, 1.0, 0.0])  # saturated: exactly 1 and 0


@pytest.mark.parametrize("approximate", [True, False])
def test_gelu_derivatives_against_finite_differences(approximate):
    check_grads(lambda x: nn.gelu(x, approximate), [np.linspace(-5, 5, 21)], order=2)


@pytest.mark.parametrize("approximate", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, bf16])
def test_gelu_low_precision_derivative(approximate, dtype):
    x = np.linspace(-6, 6, 25).astype(dtype)
    y, d1, _ = elementwise_grads(lambda v: nn.gelu(v, approximate), x)
    assert y.dtype == dtype and d1.dtype == dtype
    _, r1, _ = gelu_ref(x.astype(np.float64), approximate)
    tol = 1e-6 if dtype == np.float32 else 1e-2  # bf16: 8 bits, derivative rounded once
    np.testing.assert_allclose(d1.astype(np.float64), r1, rtol=tol, atol=tol)
    # float32 inputs beyond where x^3 overflows still have finite derivatives
    _, big, _ = elementwise_grads(lambda v: nn.gelu(v, approximate), np.float32([1e13, -1e13]))
    np.testing.assert_array_equal(big, [1.0, 0.0])


def test_gelu_value_and_gradient_share_one_tanh():
    """The tanh form's value and its derivative use one tanh per element (the primal clips x as
    the derivative does, so common-subexpression elimination merges them), with values still
    those of the float64 closed forms, x^2 overflowing float32 included (second derivative)."""
    x = np.array([-1e20, -30.0, -2.0, 0.0, 0.5, 9.0, 11.0, 1e20], np.float32)

    def f(v):
        return blu.value_and_grad(lambda v: nn.gelu(v).sum())(v)

    low = blu.jit(f).lower(x, target="cpu")
    tanhs = sum(e.primitive.name == "tanh" for n in low._program.plan.nodes
                if n.kind == "kernel" for e in n.jaxpr.eqns)  # fmt: skip
    assert tanhs == 1
    y, d1, d2 = elementwise_grads(nn.gelu, x)
    ry, r1, r2 = gelu_ref(x.astype(np.float64), True)
    np.testing.assert_allclose(y, ry, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(d1, r1, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(d2, r2, rtol=1e-5, atol=1e-5)
    assert np.all(np.isfinite(d2))


def full_size_residuals(f, *args):
    """The residuals reverse mode keeps for ``f`` at ``args`` that are as large as ``args[0]``
    and are not a smaller array broadcast (constant along an axis: a row statistic or a
    parameter, which the launch plan recomputes from the smaller array instead of holding)."""
    _, f_jvp = blu.linearize(f, *args)
    res = [np.asarray(r) for r in f_jvp.residuals if np.size(r) >= np.size(args[0])]
    return [r for r in res if not any(np.ptp(r, axis=a).max() == 0 for a in range(r.ndim))]


@pytest.mark.parametrize("approximate", [True, False])
def test_gelu_keeps_one_residual(approximate):
    x = np.linspace(-3, 3, 64).reshape(8, 8)
    res = full_size_residuals(lambda v: nn.gelu(v, approximate), x)
    assert len(res) == 1
    np.testing.assert_allclose(res[0], gelu_ref(x, approximate)[1], rtol=1e-12)


# ---- layer norm ----------------------------------------------------------------------------------


def ln_ref(x, g, b, eps, dy):
    """Value and the closed-form gradients w.r.t. x, g, b (float64, last axis)."""
    mu = x.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)
    xhat = (x - mu) * rstd
    gdy = g * dy
    dx = rstd * (gdy - gdy.mean(-1, keepdims=True) - xhat * (gdy * xhat).mean(-1, keepdims=True))
    lead = tuple(range(x.ndim - 1))
    return xhat * g + b, dx, (dy * xhat).sum(lead), dy.sum(lead)


@pytest.mark.parametrize("shape", [(3, 7), (2, 3, 5), (4, 1)])
@pytest.mark.parametrize("eps", [1e-5, 0.5])
def test_layer_norm_gradients_closed_form(shape, eps):
    rng = np.random.default_rng(sum(shape))
    x, dy = rng.normal(size=shape) * 3 + 1, rng.normal(size=shape)
    g, b = rng.normal(size=shape[-1:]), rng.normal(size=shape[-1:])
    y, vjp = blu.vjp(lambda x, g, b: nn.layer_norm(x, g, b, eps=eps), x, g, b)
    want = ln_ref(x, g, b, eps, dy)
    np.testing.assert_allclose(np.asarray(y), want[0], rtol=1e-12, atol=1e-12)
    for got, w in zip(vjp(dy), want[1:]):
        np.testing.assert_allclose(np.asarray(got), w, rtol=1e-10, atol=1e-12)
    if shape[-1] == 1:  # a size-1 row normalizes to 0: y = b, and x has no influence
        np.testing.assert_array_equal(np.asarray(vjp(dy)[0]), 0.0)


def test_layer_norm_finite_differences_forward_and_second_order():
    rng = np.random.default_rng(7)
    x, g, b = rng.normal(size=(3, 6)), rng.normal(size=(6,)), rng.normal(size=(6,))
    check_grads(
        lambda x, g, b: nn.layer_norm(x, g, b, eps=1e-3), [x, g, b], order=2, atol=1e-4, rtol=1e-4
    )
    check_grads(
        lambda x: nn.layer_norm(x, eps=0.1, axis=(0, 1)), [x], order=2, atol=1e-4, rtol=1e-4
    )
    check_grads(lambda x, b: nn.layer_norm(x, None, b), [x, b])
    # forward mode works (a custom_jvp rule, not a custom_vjp)
    t = rng.normal(size=x.shape)
    _, ty = blu.jvp(lambda x: nn.layer_norm(x, g, b), (x,), (t,))
    h = 1e-6
    fd = (ln_ref(x + h * t, g, b, 1e-5, t)[0] - ln_ref(x - h * t, g, b, 1e-5, t)[0]) / (2 * h)
    np.testing.assert_allclose(np.asarray(ty), fd, rtol=1e-6, atol=1e-8)


def test_layer_norm_bfloat16_float32_statistics_and_gradients():
    rng = np.random.default_rng(11)
    # a large common offset: only float32 statistics keep the small deviations
    x = (rng.normal(size=(4, 64)) + 50).astype(bf16)
    g = (1 + 0.1 * rng.normal(size=(64,))).astype(np.float32)
    b = (0.1 * rng.normal(size=(64,))).astype(np.float32)
    dy = rng.normal(size=(4, 64)).astype(bf16)
    y, vjp = blu.vjp(lambda x, g, b: nn.layer_norm(x, g, b), x, g, b)
    dx, dg, db = vjp(dy)
    assert y.dtype == bf16 and dx.dtype == bf16 and dg.dtype == np.float32
    want = ln_ref(
        x.astype(np.float64),
        g.astype(np.float64),
        b.astype(np.float64),
        1e-5,
        dy.astype(np.float64),
    )
    scale = [np.abs(w).max() for w in want]
    for got, w, s in zip((y, dx, dg, db), want, scale):
        np.testing.assert_allclose(np.asarray(got).astype(np.float64), w, atol=2e-2 * s)


def test_layer_norm_keeps_one_activation():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(16, 32))
    res = full_size_residuals(lambda v: nn.layer_norm(v), x)
    assert len(res) == 1  # the normalized values (plus per-row statistics)
    mu, sd = x.mean(-1, keepdims=True), x.std(-1, keepdims=True)
    np.testing.assert_allclose(res[0], (x - mu) / np.sqrt(sd**2 + 1e-5), rtol=1e-12)
    g, b = rng.normal(size=32), rng.normal(size=32)
    assert len(full_size_residuals(lambda v, g, b: nn.layer_norm(v, g, b), x, g, b)) == 1
