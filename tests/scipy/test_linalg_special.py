"""blu.scipy.linalg's structured special matrices against scipy.linalg: those built from arrays
element by element over batch shapes (JAX's leading batch axes) and lengths including 0 and 1;
those of a static size against scipy's exact ones, in JAX's default dtypes; the errors."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sl
from hypothesis import given, settings
from hypothesis import strategies as st

from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from blu.scipy import linalg as L

BATCHES = [(), (1,), (3,), (2, 1), (0,)]


def _each(f, out_core, *arrays):
    """``f`` on the last axis of each array, over the broadcast batch shape, stacked."""
    batch = np.broadcast_shapes(*(a.shape[:-1] for a in arrays))
    count = int(np.prod(batch))
    flat = [
        np.reshape(np.broadcast_to(a, batch + a.shape[-1:]), (count, a.shape[-1])) for a in arrays
    ]
    outs = [f(*(x[i] for x in flat)) for i in range(count)]
    return np.reshape(np.array(outs), batch + out_core) if outs else np.zeros(batch + out_core)


def _close(got, want, rtol=1e-12):
    got = np.asarray(got)
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


@settings(deadline=None, max_examples=40)
@given(st.integers(0, 5), st.integers(0, 5), st.sampled_from(BATCHES), st.data())
def test_matrices_of_arrays_against_scipy(m, n, batch, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    c, r = rng.standard_normal(batch + (m,)), rng.standard_normal(batch + (n,))
    _close(L.hankel(c, r), _each(sl.hankel, (m, n), c, r))
    _close(L.hankel(c), _each(sl.hankel, (m, m), c))
    _close(L.circulant(c), _each(sl.circulant, (m, m), c))
    _close(L.fiedler(c), _each(sl.fiedler, (m, m), c))
    assert L.fiedler(np.arange(3, dtype=np.int32)).dtype == np.int32  # integers stay (JAX's)
    if m >= 2:
        s = rng.standard_normal(batch + (m - 1,))
        _close(L.leslie(c, s), _each(sl.leslie, (m, m), c, s))
        _close(L.companion(c), _each(sl.companion, (m - 1, m - 1), c))
    if m >= 1:
        core = (m - 1, m - 1)  # (scipy gives shape (0,) for one coefficient)
        want = _each(lambda a: sl.fiedler_companion(a).reshape(core), core, c)
        _close(L.fiedler_companion(c), want)
        for mode in ("full", "valid", "same"):
            k = data.draw(st.integers(1, 5))
            rows = {"full": m + k - 1, "valid": max(m, k) - min(m, k) + 1, "same": max(m, k)}
            got = L.convolution_matrix(c, k, mode)
            _close(got, _each(lambda a: sl.convolution_matrix(a, k, mode), (rows[mode], k), c))


def test_companion_roots_and_promotion():
    coeffs = np.array([1, -6, 11, -6])  # (x - 1)(x - 2)(x - 3)
    for f in (L.companion, L.fiedler_companion):
        got = f(coeffs)
        assert got.dtype == np.float32
        np.testing.assert_allclose(
            np.sort(np.linalg.eigvals(np.asarray(got)).real), [1, 2, 3], rtol=1e-5
        )


@pytest.mark.parametrize("n", [0, 1, 2, 5, 8])
def test_static_matrices_against_scipy(n):
    for got, want in (
        (L.invhilbert(n), sl.invhilbert(n)),
        (L.pascal(n), sl.pascal(n)),
        (L.pascal(n, "lower"), sl.pascal(n, "lower")),
        (L.invpascal(n), sl.invpascal(n)),
        (L.invpascal(n, "upper"), sl.invpascal(n, "upper")),
    ):
        assert got.dtype == np.float32
        _close(got, want.astype(np.float32), rtol=1e-6)
    if n:
        _close(L.helmert(n), sl.helmert(n), rtol=1e-6)
        _close(L.helmert(n, full=True), sl.helmert(n, full=True), rtol=1e-6)
        assert L.helmert(n).dtype == np.float32
    got = L.dft(n, "n", dtype=np.complex128)
    _close(got, sl.dft(n, "n") if n else np.zeros((0, 0)))
    assert L.dft(n).dtype == np.complex64
    if n and not n & (n - 1):
        had = L.hadamard(n)
        assert had.dtype == np.int32
        np.testing.assert_array_equal(had, sl.hadamard(n))
        _close(L.hadamard(n, np.float64), sl.hadamard(n, np.float64))


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: L.hankel(np.ones((2, 3)), np.ones((3, 3))), BluShapeError, "broadcast"),
        (lambda: L.leslie(np.ones(3), np.ones(3)), BluShapeError, r"f64\[3\].*f64\[3\]"),
        (lambda: L.leslie(np.ones(1), np.ones(0)), BluShapeError, r"f64\[1\]"),
        (lambda: L.companion(np.ones(1)), BluShapeError, r"companion.*f64\[1\]"),
        (lambda: L.fiedler_companion(np.ones(0)), BluShapeError, r"f64\[0\]"),
        (lambda: L.convolution_matrix(np.ones(3), 0), BluValueError, "positive"),
        (lambda: L.convolution_matrix(np.ones(3), 2, "wide"), BluValueError, "mode"),
        (lambda: L.convolution_matrix(1.0, 2), BluShapeError, "scalar"),
        (lambda: L.convolution_matrix(np.ones(3), 2.5), BluTypeError, "int"),
        (lambda: L.pascal(3, "diagonal"), BluValueError, "kind"),
        (lambda: L.invhilbert(-1), BluValueError, ">= 0"),
        (lambda: L.helmert(0), BluValueError, ">= 1"),
        (lambda: L.hadamard(6), BluValueError, "power of 2"),
        (lambda: L.dft(3, "half"), BluValueError, "scale"),
        (lambda: L.dft(3, dtype=np.float32), BluValueError, "complex"),
    ],
)
def test_bad_input_raises_blu_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()
