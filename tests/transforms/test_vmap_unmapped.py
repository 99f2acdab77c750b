"""vmap hands an unmapped argument (``in_axes`` None) to the function as it is, as JAX's
``vmap``: a Python value stays one, so it can be a static argument of a ``jit`` inside (it
became an Array: "static argument 1 of type Array is not hashable") or a string option; numpy
arrays are still copied (a function returning one must not hand back the caller's buffer)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import blu


@settings(max_examples=20, deadline=None)
@given(n=st.integers(-3, 3), size=st.integers(0, 4))
def test_static_argument_of_a_jit_inside_vmap(n, size):
    x = np.arange(size * 2, dtype=np.float32).reshape(size, 2)
    scale = blu.jit(lambda a, k: a * k if k >= 0 else -a, static_argnums=1)
    got = blu.vmap(scale, in_axes=(0, None))(x, n)
    np.testing.assert_array_equal(np.asarray(got), x * n if n >= 0 else -x)


def test_python_values_reach_the_function_unchanged():
    seen = []

    def f(a, mode, k):
        seen.append((type(mode), type(k)))
        return a * k if mode == "scale" else a + k

    x = np.arange(3.0, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(blu.vmap(f, (0, None, None))(x, "scale", 2)), x * 2)
    np.testing.assert_array_equal(np.asarray(blu.vmap(f, (0, None, None))(x, "add", 2)), x + 2)
    assert seen == [(str, int), (str, int)]


def test_an_unmapped_numpy_argument_is_not_handed_back():
    buf = np.ones(2, np.float32)
    out = blu.vmap(lambda a, b: b, in_axes=(0, None), out_axes=None)(np.zeros(3), buf)
    buf[0] = 5.0
    np.testing.assert_array_equal(np.asarray(out), [1.0, 1.0])
