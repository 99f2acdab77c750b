"""jit's static-argument options checked at ``jit`` time with a ``BluError`` naming them: a
negative ``static_argnums`` of a ``*args`` function (it raised a raw IndexError, or, with
positional parameters before ``*args``, silently made the first one static), and
``static_argnums`` / ``static_argnames`` of the wrong type (raw TypeErrors); ``eval_shape``
takes ``ShapeDtypeStruct``s as keyword arguments too (as positional ones)."""

from __future__ import annotations

import numpy as np
import pytest

import blu
from blu.core.errors import BluTypeError, BluValueError


@pytest.mark.parametrize("fun", [lambda *a: a[0] * a[1], lambda x, *r: x * r[-1]])
def test_negative_static_argnums_of_a_varargs_function_is_an_error(fun):
    with pytest.raises(BluValueError, match=r"negative static_argnums \[-1\]"):
        blu.jit(fun, static_argnums=-1)


def test_positive_static_argnums_of_a_varargs_function():
    seen = []

    def f(x, *r):
        seen.append(type(r[0]))
        return x * r[0]

    assert float(blu.jit(f, static_argnums=1)(2.0, 3)) == 6.0
    assert seen == [int]  # the static argument reached the function as the Python value


@pytest.mark.parametrize(
    "kw",
    [{"static_argnums": "x"}, {"static_argnums": 1.0}, {"static_argnames": 1},
     {"static_argnums": (0, True)}],
)  # fmt: skip
def test_option_of_the_wrong_type_is_an_error(kw):
    with pytest.raises(BluTypeError, match="must be an? (int|str)"):
        blu.jit(lambda a, x=1: a * x, **kw)


@pytest.mark.parametrize("nums", [0, np.int64(0), [0], (0,)])
def test_static_argnums_spellings(nums):
    j = blu.jit(lambda n, x: x * n, static_argnums=nums)
    assert j.static_argnums == frozenset({0})
    assert float(j(3, 2.0)) == 6.0


def test_eval_shape_takes_specs_as_keyword_arguments():
    spec = blu.ShapeDtypeStruct((2, 3), np.float64)
    out = blu.eval_shape(lambda a, *, k: a @ k.T, spec, k=spec)
    assert (out.shape, out.dtype) == ((2, 2), np.float64)
