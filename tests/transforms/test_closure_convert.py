"""``blu.closure_convert`` (JAX's): the traced values a function closes over become trailing
arguments; the converted function equals the original, derivatives flow through the hoisted
constants (closed forms, float64), concrete closed-over arrays stay inside, and a call with
the wrong structure is a BluTypeError."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.core.errors import BluTypeError

TOL = dict(rtol=1e-12, atol=1e-12)


@functools.partial(blu.custom_vjp, nondiff_argnums=(0,))
def _call(f, x, *consts):
    """A custom_vjp function of a function: its rules differentiate ``f`` w.r.t. ``consts``."""
    return f(x, *consts)


def _call_fwd(f, x, *consts):
    return f(x, *consts), (x, consts)


def _call_bwd(f, res, g):
    x, consts = res
    _, f_vjp = blu.vjp(f, x, *consts)
    return f_vjp(g)


_call.defvjp(_call_fwd, _call_bwd)


@settings(deadline=None)
@given(w=st.floats(-3.0, 3.0), x=st.floats(-3.0, 3.0))
def test_gradient_through_hoisted_constants(w, x):
    w, x = np.float64(w), np.float64(x)
    hoisted = []

    def outer(w):
        f = lambda t: bnp.sin(w * t) * w
        conv, consts = blu.closure_convert(f, x)
        hoisted.append(len(consts))
        return _call(conv, x, *consts)

    val, g = blu.value_and_grad(outer)(w)
    assert hoisted == [1]
    np.testing.assert_allclose(float(val), np.sin(w * x) * w, **TOL)  # the converted f is f
    np.testing.assert_allclose(float(g), np.cos(w * x) * x * w + np.sin(w * x), **TOL)
    g_jit = blu.jit(blu.grad(outer))(w)
    np.testing.assert_allclose(float(g_jit), float(g), **TOL)


def test_converted_function_with_new_constants():
    consts_seen = []

    def outer(a, b):
        f = lambda p: {"y": p["x"] * a + b}
        conv, consts = blu.closure_convert(f, {"x": np.zeros(3)})
        consts_seen.append(len(consts))
        doubled = [2.0 * c for c in consts]
        return bnp.sum(conv({"x": np.array([1.0, 2.0, 3.0])}, *doubled)["y"])

    val, (ga, gb) = blu.value_and_grad(outer, argnums=(0, 1))(np.float64(0.5), np.float64(-1.0))
    assert consts_seen == [2]
    # sum(x * 2a + 2b) with x = 1, 2, 3
    np.testing.assert_allclose(float(val), 6.0 * 2 * 0.5 + 3 * 2 * -1.0, **TOL)
    np.testing.assert_allclose([float(ga), float(gb)], [12.0, 6.0], **TOL)


def test_concrete_closures_stay_inside():
    a = np.array([1.0, -2.0, 3.0])
    conv, consts = blu.closure_convert(lambda x: x * bnp.asarray(a), np.zeros(3))
    assert consts == []
    np.testing.assert_allclose(np.asarray(conv(np.array([2.0, 2.0, 2.0]))), 2.0 * a, **TOL)


def test_wrong_structure_is_a_type_error():
    conv, _ = blu.closure_convert(lambda x: x + 1.0, np.zeros(3))
    with pytest.raises(BluTypeError, match="structure of the example arguments"):
        conv(np.zeros(3), np.zeros(3))
