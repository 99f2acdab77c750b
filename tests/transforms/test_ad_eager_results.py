"""What ``jvp`` / ``vjp`` / ``linearize`` (and so ``grad``) hand back eagerly are ``Array``s of
the right dtype, as JAX's: a constant output, a cotangent passed straight back by a linear
function, or a ``custom_vjp`` rule's literal zero came back as a bare Python float, a numpy
scalar or the caller's own numpy buffer. A cotangent of another float dtype than its output is a
``BluTypeError`` naming both (it failed inside a transpose rule, or gave a gradient of the
cotangent's dtype); a Python scalar cotangent is cast, as JAX's weakly typed ones."""

from __future__ import annotations

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu.core.errors import BluTypeError


def _is_array(x, dtype, value):
    assert isinstance(x, blu.Array), type(x)
    assert x.dtype == dtype
    np.testing.assert_array_equal(np.asarray(x), value)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ct", [0.0, None])
def test_custom_vjp_literal_or_none_cotangent_is_an_array_of_the_arguments_dtype(dtype, ct):
    @blu.custom_vjp
    def f(a):
        return a * 2

    f.defvjp(lambda a: (a * 2, None), lambda r, g: (ct,))
    # grad was the Python float 0.0 (ct=0.) or np.float32(0.0) for a float64 argument (None)
    _is_array(blu.grad(f)(dtype(1.5)), dtype, 0.0)


def test_constant_outputs_are_arrays():
    (p, c), (tp, tc) = blu.jvp(lambda a: (a, 2.0), (1.0,), (1.0,))
    _is_array(c, np.float32, 2.0)  # was the Python float 2.0
    _is_array(tc, np.float32, 0.0)
    out, f_vjp = blu.vjp(lambda a: (a, 2.0), 1.0)
    _is_array(out[1], np.float32, 2.0)
    _is_array(f_vjp((3.0, 1.0))[0], np.float32, 3.0)  # was the Python float 3.0
    out, f_jvp = blu.linearize(lambda a: (a * 3, 2.0), np.float64(1.0))
    _is_array(out[1], np.float32, 2.0)
    t = f_jvp(np.float64(1.0))
    _is_array(t[0], np.float64, 3.0)
    _is_array(t[1], np.float32, 0.0)  # was np.float32(0.0)


def test_a_cotangent_passed_straight_back_is_not_the_callers_buffer():
    ct = np.array([1.0, 2.0], np.float32)
    (g,) = blu.vjp(lambda a: a, bnp.zeros(2))[1](ct)
    ct[0] = 100.0
    _is_array(g, np.float32, [1.0, 2.0])


def test_cotangent_dtype_must_match_a_float_output():
    _, f_vjp = blu.vjp(lambda a: a * 2, bnp.ones(2))
    with pytest.raises(BluTypeError, match=r"f64\[2\].*f32\[2\]"):
        f_vjp(np.ones(2))  # failed inside mul's transpose ("operands must have equal dtypes")
    _, f_vjp = blu.vjp(lambda a: a, bnp.ones(2))
    with pytest.raises(BluTypeError, match=r"f64\[2\].*f32\[2\]"):
        f_vjp(np.ones(2))  # returned a float64 cotangent for a float32 input
    _, f_vjp = blu.vjp(lambda a: bnp.sum(a) * 2, np.ones(2))
    _is_array(f_vjp(1.0)[0], np.float64, [2.0, 2.0])  # a Python scalar is cast
