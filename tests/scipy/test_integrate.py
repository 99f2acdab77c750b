"""blu.scipy.integrate.trapezoid against SciPy in float64, finite differences and jit."""

import numpy as np
import scipy.integrate as sint
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.scipy.integrate as bint
from tests.helpers import check_grads, shapes

_EPS = np.finfo(np.float64).eps


def _close(got, want, scale=1.0):
    got = np.asarray(got)
    assert got.shape == np.shape(want) and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=64 * _EPS * scale)


# ---- integrate -----------------------------------------------------------------------------------


@settings(deadline=None, max_examples=25)
@given(shapes(min_dims=1, max_dims=3, min_side=1, max_side=5), st.data())
def test_trapezoid_against_scipy(shape, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    y = rng.standard_normal(shape)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    kind = data.draw(st.sampled_from(["dx", "x1", "xfull"]))
    if kind == "dx":
        kw = {"dx": data.draw(st.floats(0.01, 3.0))}
    elif kind == "x1":
        kw = {"x": np.sort(rng.standard_normal(shape[axis]))}
    else:
        kw = {"x": np.sort(rng.standard_normal(shape), axis=axis)}
    want = sint.trapezoid(y, axis=axis, **kw)
    _close(bint.trapezoid(y, axis=axis, **kw), want, max(1.0, np.abs(y).sum()))


def test_trapezoid_dtype_grads_jit():
    assert bint.trapezoid(np.arange(4)).dtype == np.float32
    y, x = np.array([[1.0, 2.0, 4.0], [0.5, -1.0, 3.0]]), np.array([0.0, 0.3, 1.0])
    check_grads(lambda a, b: bint.trapezoid(a, b), [y, x])
    np.testing.assert_allclose(
        np.asarray(blu.jit(bint.trapezoid)(y, x)), sint.trapezoid(y, x), rtol=1e-14
    )
