"""Calling ``jit(f).lower(...).compile()`` as JAX's ``Compiled``: with the dynamic arguments
only (the static ones are fixed by ``lower``: JAX's "Lowering with static arguments"), and of
the shapes and dtypes it was lowered for. The call re-ran the jitted function on whatever it
got: the static arguments had to be passed again (and any value was taken), other shapes and
dtypes were silently traced and compiled anew."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.core.errors import BluTypeError


def _f(x, n, *, scale=1.0):
    return x * n + scale


@settings(max_examples=15, deadline=None)
@given(n=st.integers(-5, 5), size=st.integers(0, 4), scale=st.floats(-2, 2, width=32))
def test_static_arguments_are_fixed_by_lower(n, size, scale):
    x = np.arange(size, dtype=np.float32)
    c = blu.jit(_f, static_argnums=1, static_argnames="scale").lower(x, n, scale=scale).compile()
    y = np.linspace(-1, 1, size).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(c(y)), y * np.float32(n) + np.float32(scale))


def test_passing_a_static_argument_again_is_an_error_naming_it():
    c = blu.jit(_f, static_argnums=1).lower(bnp.ones(2), 3).compile()
    with pytest.raises(BluTypeError, match="static positional argument"):
        c(bnp.ones(2), 4)  # was run with n=4, retraced


@pytest.mark.parametrize(
    "arg", [np.ones(5, np.float32), np.ones(2, np.int32), np.ones((2, 1), np.float32)]
)
def test_other_shapes_or_dtypes_are_an_error(arg):
    c = blu.jit(lambda a: a * 2).lower(blu.ShapeDtypeStruct((2,), np.float32)).compile()
    np.testing.assert_array_equal(np.asarray(c(np.ones(2, np.float32))), [2.0, 2.0])
    with pytest.raises(BluTypeError, match=r"compiled with f32\[2\] and called with"):
        c(arg)


def test_pytree_and_keyword_arguments():
    def f(d, *, k):
        return d["a"] @ d["b"] + k

    spec = {"a": np.ones((2, 3), np.float32), "b": np.ones((3,), np.float32)}
    c = blu.jit(f).lower(spec, k=np.float32(1)).compile()
    np.testing.assert_array_equal(np.asarray(c(spec, k=np.float32(2))), [5.0, 5.0])
    with pytest.raises(BluTypeError, match="structured as"):
        c({"a": spec["a"]}, k=np.float32(2))
