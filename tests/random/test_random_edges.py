"""jax.random's samplers at the edges of their arguments (infinite and far-tail bounds), eager
and jitted, with fixed keys so the tests are deterministic."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import blu
from blu import random
from blu.core.errors import BluShapeError, BluTypeError

KEY = random.key(3)
N = 50_000


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
@pytest.mark.parametrize(
    "lower, upper", [(5.0, np.inf), (-np.inf, -5.0), (-np.inf, np.inf), (-1.0, 1.0), (3.0, 4.0)]
)
def test_truncated_normal_is_finite_and_inside_the_open_interval(dtype, lower, upper):
    # JAX's: the draw is clamped to (nextafter(lower, inf), nextafter(upper, -inf)); u rounding
    # to erf(upper / sqrt 2) = 1 used to give erf_inv(1) = inf (5% of the draws for lower = 5)
    def draw(k):
        return random.truncated_normal(k, lower, upper, (N,), dtype)

    for x in (np.asarray(draw(KEY)), np.asarray(blu.jit(draw)(KEY))):
        x = x.astype(np.float64)
        assert x.dtype == np.float64 and np.all(np.isfinite(x))
        assert np.all(x > lower) and np.all(x < upper)


@pytest.mark.parametrize(
    "draw",
    [
        lambda k: random.beta(k, np.ones(2), np.ones(3)),
        lambda k: random.truncated_normal(k, -np.ones(2), np.ones(3)),
    ],
)
def test_parameters_that_do_not_broadcast_are_a_shape_error(draw):
    # without shape=, the parameters' broadcast was numpy's (a raw ValueError)
    with pytest.raises(BluShapeError, match=r"f\d\d\[2\], .* f\d\d\[3\] do not broadcast"):
        draw(KEY)


@pytest.mark.parametrize("bad", [None, "a", 1.5, np.array([0, 1]), float("inf"), -np.inf, np.nan])
@pytest.mark.parametrize(
    "name, draw",
    [
        ("categorical", lambda k, a: random.categorical(k, np.zeros((2, 3)), axis=a)),
        ("permutation", lambda k, a: random.permutation(k, np.zeros((2, 3)), axis=a)),
        ("choice", lambda k, a: random.choice(k, np.zeros((2, 3)), (1,), axis=a)),
    ],
)
def test_an_axis_that_is_no_int_is_a_type_error(name, draw, bad):
    # raw TypeErrors/ValueErrors from comparing or indexing with it (an infinite float:
    # Python's OverflowError from int())
    with pytest.raises(BluTypeError, match=f"random.{name}: axis must be an int"):
        draw(KEY, bad)
