"""Tracing to jaxprs, the printer, eval_jaxpr, and the errors of the tracing machinery."""

import re

import numpy as np
import pytest

import blu
from blu import lax
from blu.core.errors import BluError, ConcretizationError, EscapedTracerError
from blu.core.jaxpr import eval_jaxpr


def test_make_jaxpr_prints_like_jax():
    jaxpr = blu.make_jaxpr(lambda x: lax.mul(lax.sin(x), 2.0))(np.zeros(3, np.float32))
    text = str(jaxpr)
    assert text.splitlines()[0] == "{ lambda ; a:f32[3]. let"
    assert "b:f32[3] = sin a" in text
    assert "broadcast_in_dim" in text  # the scalar is broadcast explicitly, as in lax
    assert text.splitlines()[-1].strip().startswith("in (")


def test_scalar_literals_are_inline():
    text = str(blu.make_jaxpr(lambda x: lax.mul(x, 3.0))(np.float32(1)))
    assert re.search(r"= mul a 3\.0", text), text


def test_closed_over_arrays_become_constvars():
    w = blu.numpy.asarray_operand(np.arange(3.0))
    closed = blu.make_jaxpr(lambda x: lax.add(x, w))(np.ones(3))
    assert len(closed.jaxpr.constvars) == 1
    assert closed.consts[0] is w
    (out,) = eval_jaxpr(closed.jaxpr, closed.consts, np.ones(3))
    np.testing.assert_array_equal(np.asarray(out), np.arange(3.0) + 1)


def test_eval_jaxpr_reproduces_the_function():
    f = lambda x, y: lax.tanh(lax.add(lax.mul(x, y), lax.exp(x)))
    x, y = np.linspace(-1, 1, 4), np.linspace(2, 3, 4)
    closed = blu.make_jaxpr(f)(x, y)
    (out,) = eval_jaxpr(closed.jaxpr, closed.consts, x, y)
    np.testing.assert_allclose(np.asarray(out), np.tanh(x * y + np.exp(x)), rtol=1e-12)


def test_pytree_inputs_and_outputs():
    closed = blu.make_jaxpr(lambda d: {"s": lax.add(d["a"], d["b"][0])})(
        {"a": np.ones(2), "b": (np.ones(2),)}
    )
    assert len(closed.jaxpr.invars) == 2 and len(closed.jaxpr.outvars) == 1


def test_static_argnums_in_make_jaxpr():
    closed = blu.make_jaxpr(lambda x, n: lax.mul(x, float(n)), static_argnums=1)(np.ones(2), 4)
    assert len(closed.jaxpr.invars) == 1
    assert "4.0" in str(closed)


def test_bool_of_tracer_inside_jit_names_what_to_do():
    @blu.jit
    def f(x):
        if lax.gt(x, 0.0):
            return x
        return lax.neg(x)

    with pytest.raises(ConcretizationError) as e:
        f(np.float32(1.0))
    msg = str(e.value)
    assert "static_argnums" in msg and "blu.lax.cond" in msg
    assert "test_tracing.py" in msg  # the user's line


def test_float_of_tracer_raises():
    with pytest.raises(ConcretizationError):
        blu.grad(lambda x: float(x))(1.0)


def test_np_asarray_of_tracer_raises():
    with pytest.raises(ConcretizationError):
        blu.jit(lambda x: np.asarray(x))(np.ones(2))


def test_escaped_tracer_detected():
    leaked = []

    def f(x):
        leaked.append(x)
        return lax.sin(x)

    blu.jit(f)(np.ones(2))
    with pytest.raises(EscapedTracerError) as e:
        lax.cos(leaked[0])
    assert "escaped" in str(e.value) and "test_tracing.py" in str(e.value)


def test_escaped_jvp_tracer_used_in_another_transform():
    leaked = []

    def f(x):
        leaked.append(x)
        return lax.mul(x, x)

    blu.grad(f)(1.0)
    with pytest.raises(EscapedTracerError):
        blu.grad(lambda y: lax.mul(y, leaked[0]))(2.0)


def test_shape_mismatch_names_shapes_and_line():
    with pytest.raises(BluError) as e:
        lax.add(np.ones((2, 3)), np.ones((3, 2)))
    msg = str(e.value)
    assert "f64[2,3]" in msg and "f64[3,2]" in msg and "test_tracing.py" in msg


def test_dtype_mismatch_names_dtypes():
    with pytest.raises(BluError) as e:
        lax.mul(np.ones(3, np.float32), np.ones(3, np.float64))
    assert "f32[3]" in str(e.value) and "f64[3]" in str(e.value)


def test_invalid_operand_type():
    with pytest.raises(BluError) as e:
        lax.sin("hello")
    assert "str" in str(e.value)


def test_array_type_behaves_like_numpy():
    x = blu.numpy.asarray_operand(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    assert isinstance(x, blu.Array)
    assert x.shape == (2, 3) and x.dtype == np.float32 and x.ndim == 2 and x.size == 6
    np.testing.assert_array_equal(np.asarray(x), np.arange(6.0).reshape(2, 3))
    assert "Array(" in repr(x)
    y = x + 1.0
    assert isinstance(y, blu.Array) and y.dtype == np.float32  # weak scalar defers
    np.testing.assert_array_equal(np.asarray(np.ones(3) + blu.numpy.asarray_operand(np.ones(3))), 2)
