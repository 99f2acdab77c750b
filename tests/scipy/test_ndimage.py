"""blu.scipy.ndimage.map_coordinates against SciPy in float64, finite differences, jit and vmap."""

import numpy as np
import pytest
import scipy.ndimage as snd
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.scipy.ndimage as bnd
from blu.core.errors import BluValueError
from tests.helpers import check_grads, loop_vmap, shapes

_EPS = np.finfo(np.float64).eps


def _close(got, want, scale=1.0):
    got = np.asarray(got)
    assert got.shape == np.shape(want) and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=64 * _EPS * scale)


# ---- ndimage -------------------------------------------------------------------------------------

# JAX's modes under SciPy's names ('constant' and 'wrap' interpolate across the edge)
_SCIPY_MODE = {"constant": "grid-constant", "nearest": "nearest", "wrap": "grid-wrap",
               "mirror": "mirror", "reflect": "reflect"}  # fmt: skip


@settings(deadline=None, max_examples=40)
@given(shapes(min_dims=1, max_dims=3, min_side=1, max_side=5), st.data())
def test_map_coordinates_against_scipy(shape, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = rng.standard_normal(shape)
    order = data.draw(st.sampled_from([0, 1]))
    mode = data.draw(st.sampled_from(sorted(_SCIPY_MODE)))
    # points inside and up to 3 samples outside, off the order-0 ties at half-integers
    coords = [rng.uniform(-3, n + 2, size=(2, 3)) for n in shape]
    coords = [np.where(np.abs(c - np.round(c) - 0.5) < 1e-3, c + 0.01, c) for c in coords]
    got = bnd.map_coordinates(x, coords, order, mode=mode, cval=0.7)
    want = snd.map_coordinates(x, np.array(coords), order=order, mode=_SCIPY_MODE[mode], cval=0.7)
    _close(got, want, 4.0)


def test_map_coordinates_integers_grads_jit_vmap_errors():
    xi = np.arange(12).reshape(3, 4)
    c = [np.array([0.5, 1.2, 2.0]), np.array([1.5, 2.7, -0.4])]
    got = bnd.map_coordinates(xi, c, 1, mode="nearest")
    assert got.dtype == xi.dtype
    np.testing.assert_array_equal(np.asarray(got), [4, 8, 8])  # 4.5, 7.5, 8.0 away from zero
    x = np.random.default_rng(1).standard_normal((3, 4))
    for mode in _SCIPY_MODE:
        f = lambda a, c0, c1, mode=mode: bnd.map_coordinates(a, [c0, c1], 1, mode=mode, cval=0.3)
        check_grads(f, [x, c[0] + 0.05, c[1] + 0.05])
        want = np.asarray(f(x, *c))
        np.testing.assert_allclose(np.asarray(blu.jit(f)(x, *c)), want, rtol=1e-14)
        batch = np.stack([x, 2 * x, -x])
        ref = loop_vmap(lambda a: f(a, *c), [batch], [0])
        np.testing.assert_allclose(np.asarray(blu.vmap(lambda a: f(a, *c))(batch)), ref, rtol=1e-14)
    with pytest.raises(BluValueError, match="order"):
        bnd.map_coordinates(x, c, 3)
    with pytest.raises(BluValueError, match="mode"):
        bnd.map_coordinates(x, c, 1, mode="grid-wrap")
    with pytest.raises(BluValueError, match="one per axis"):
        bnd.map_coordinates(x, c[:1], 1)
