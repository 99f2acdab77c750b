"""``blu.custom_gradient`` (JAX's): a function returning ``(value, vjp_fn)`` gets ``vjp_fn`` as
its reverse-mode derivative; values and gradients against closed forms (float64), under
``jit`` and ``vmap``, with several and pytree arguments, and its errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.core.errors import BluTypeError
from blu.transforms.custom_vjp import CustomVJPForwardModeError

TOL = dict(rtol=1e-12, atol=1e-12)


@blu.custom_gradient
def log1pexp(x):
    """JAX's example: a stable gradient 1 - 1 / (1 + e^x) from a value computed in the body."""
    e = bnp.exp(x)
    return bnp.log1p(e), lambda g: (g * (1.0 - 1.0 / (1.0 + e)),)


@settings(deadline=None)
@given(x=st.floats(-30.0, 30.0))
def test_value_and_gradient_against_closed_forms(x):
    v, g = blu.value_and_grad(log1pexp)(np.float64(x))
    np.testing.assert_allclose(float(v), np.log1p(np.exp(x)), **TOL)
    np.testing.assert_allclose(float(g), 1.0 - 1.0 / (1.0 + np.exp(x)), **TOL)


def test_the_rule_is_used_not_the_body():
    @blu.custom_gradient
    def f(x):
        return x**2, lambda g: (g * x,)  # "gradient" x instead of 2x

    assert float(f(3.0)) == 9.0
    assert float(blu.grad(f)(3.0)) == 3.0
    # chained: the outer call's rule gives f(x) = 4, the inner's 4 * x = 8
    assert float(blu.grad(lambda x: f(f(x)))(2.0)) == 8.0


def test_two_arguments_a_bare_cotangent_and_keywords():
    @blu.custom_gradient
    def f(x, y):
        s, c = bnp.sin(x), bnp.cos(x)
        return s * y, lambda g: (g * c * y, g * s * 10.0)

    x, y = np.float64(0.7), np.float64(-1.3)
    gx, gy = blu.grad(f, argnums=(0, 1))(x, y)
    np.testing.assert_allclose([float(gx), float(gy)], [np.cos(x) * y, np.sin(x) * 10.0], **TOL)
    gx_kw = blu.grad(lambda a: f(a, y=y))(x)
    np.testing.assert_allclose(float(gx_kw), np.cos(x) * y, **TOL)

    @blu.custom_gradient
    def total(v):  # one argument: a bare cotangent is the 1-tuple
        return bnp.sum(v), lambda g: g * 5.0 * bnp.ones_like(v)

    np.testing.assert_allclose(np.asarray(blu.grad(total)(np.ones(3))), [5.0] * 3, **TOL)


def test_pytree_argument_under_jit_and_vmap():
    @blu.custom_gradient
    def f(p):
        out = p["a"] * p["b"]
        return out, lambda g: ({"a": g * p["b"] * 2.0, "b": g * p["a"] * 3.0},)

    a, b = np.array([1.0, 2.0, -0.5]), np.array([0.3, -4.0, 2.0])
    g = blu.jit(blu.vmap(blu.grad(lambda a, b: f({"a": a, "b": b}), argnums=(0, 1))))(a, b)
    np.testing.assert_allclose(np.asarray(g[0]), 2.0 * b, **TOL)
    np.testing.assert_allclose(np.asarray(g[1]), 3.0 * a, **TOL)


def test_errors():
    with pytest.raises(BluTypeError, match=r"pair \(value, vjp_fn\)"):
        blu.custom_gradient(lambda x: x * 2.0)(1.0)

    @blu.custom_gradient
    def wrong_count(x):
        return x, lambda g: (g, g)

    with pytest.raises(BluTypeError, match="one cotangent per"):
        blu.grad(wrong_count)(1.0)

    @blu.custom_gradient
    def sq(x):
        return x * x, lambda g: (2.0 * g * x,)

    with pytest.raises(CustomVJPForwardModeError):
        blu.jvp(sq, (1.0,), (1.0,))
