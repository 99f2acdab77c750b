"""blu.numpy.fft against numpy.fft (float64/complex128), its gradients (JAX's convention for
complex inputs) against finite differences, vmap against a Python loop, and jit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import blu
import blu.numpy as bnp
from blu import lax
from blu.core.errors import BluError, BluValueError
from tests.numpy.test_complex import cplx, fd_grad, real_loss

NORMS = ["backward", "ortho", "forward"]


def batch_shapes(min_dims=1, max_dims=3):
    """Shapes with transform axes of size >= 1 (a DFT needs a point) and, before them, a batch
    axis that may be 0."""
    return st.tuples(
        st.integers(0, 2), hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, max_side=4)
    ).map(lambda t: (t[0],) + t[1])


def close(got, want):
    got = np.asarray(got)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


@settings(max_examples=15, deadline=None)
@given(shape=batch_shapes(), seed=st.integers(0, 2**16), norm=st.sampled_from(NORMS),
       n=st.none() | st.integers(1, 6))  # fmt: skip
def test_one_dimensional_match_numpy(shape, seed, norm, n):
    z = cplx(shape, seed)
    r = z.real.copy()
    close(bnp.fft.fft(z, n=n, norm=norm), np.fft.fft(z, n=n, norm=norm))
    if shape[0]:  # numpy rejects a transform over a size-0 axis (blu gives an empty result)
        close(bnp.fft.ifft(z, n=n, axis=0, norm=norm), np.fft.ifft(z, n=n, axis=0, norm=norm))
    close(bnp.fft.rfft(r, n=n, norm=norm), np.fft.rfft(r, n=n, norm=norm))
    close(bnp.fft.ihfft(r, n=n, norm=norm), np.fft.ihfft(r, n=n, norm=norm))
    if n is not None or shape[-1] > 1:  # the default length 2 (m - 1) must be >= 1
        close(bnp.fft.irfft(z, n=n, norm=norm), np.fft.irfft(z, n=n, norm=norm))
        close(bnp.fft.hfft(z, n=n, norm=norm), np.fft.hfft(z, n=n, norm=norm))


@settings(max_examples=15, deadline=None)
@given(shape=batch_shapes(min_dims=2, max_dims=4), seed=st.integers(0, 2**16),
       norm=st.sampled_from(NORMS))  # fmt: skip
def test_n_dimensional_match_numpy(shape, seed, norm):
    z = cplx(shape, seed)
    r = z.real.copy()
    axes = (-1, 1) if len(shape) > 2 else (1,)
    s = tuple(3 for _ in axes)
    if shape[0]:  # all axes (even > 3 of them)
        close(bnp.fft.fftn(z, norm=norm), np.fft.fftn(z, norm=norm))
    close(bnp.fft.ifftn(z, s=s, axes=axes, norm=norm), np.fft.ifftn(z, s=s, axes=axes, norm=norm))
    close(bnp.fft.rfftn(r, axes=axes, norm=norm), np.fft.rfftn(r, axes=axes, norm=norm))
    close(bnp.fft.irfftn(z, s=s, axes=axes, norm=norm), np.fft.irfftn(z, s=s, axes=axes, norm=norm))
    close(bnp.fft.fft2(z[..., :2, :]), np.fft.fft2(z[..., :2, :]))
    close(bnp.fft.rfft2(r), np.fft.rfft2(r))


def test_single_precision_stays_single():
    z = cplx((4, 5), 0).astype(np.complex64)
    assert bnp.fft.fft(z).dtype == np.complex64
    assert bnp.fft.rfft(z.real).dtype == np.complex64
    assert bnp.fft.irfft(z).dtype == np.float32
    assert bnp.fft.fft(np.arange(4)).dtype == np.complex64  # ints: default float first
    np.testing.assert_allclose(bnp.fft.fft(z), np.fft.fft(z.astype(np.complex128)), rtol=1e-5)


@pytest.mark.parametrize("n", [1, 2, 7, 8])
@pytest.mark.parametrize("d", [1.0, 0.25])
def test_frequencies_and_shifts(n, d):
    np.testing.assert_allclose(bnp.fft.fftfreq(n, d=d, dtype=bnp.float64), np.fft.fftfreq(n, d))
    np.testing.assert_allclose(bnp.fft.rfftfreq(n, d=d, dtype=bnp.float64), np.fft.rfftfreq(n, d))
    assert bnp.fft.fftfreq(n).dtype == np.float32
    x = np.arange(n * 3.0).reshape(n, 3)
    np.testing.assert_array_equal(bnp.fft.fftshift(x), np.fft.fftshift(x))
    np.testing.assert_array_equal(bnp.fft.ifftshift(x, axes=0), np.fft.ifftshift(x, axes=0))
    np.testing.assert_array_equal(bnp.fft.ifftshift(bnp.fft.fftshift(x)), x)


def test_errors():
    with pytest.raises(BluError):
        bnp.fft.fft(np.ones(3), n=0)
    with pytest.raises(BluError):
        bnp.fft.rfft(np.ones(3) + 1j)
    with pytest.raises(BluError):
        bnp.fft.fft(np.ones(3), norm="bad")
    with pytest.raises(BluError):
        lax.fft(np.ones((2, 3)), "RFFT", (4,))  # trailing axis must be fft_lengths


@pytest.mark.parametrize("name", ["fftn", "ifftn", "rfftn", "irfftn"])
def test_s_longer_than_the_rank_is_a_clear_error(name):
    # numpy raises (its axes range(-len(s), 0) leave the array); blu failed inside a transpose
    # ("permutation (0, 1, 2, -1)"), JAX returns a (2, 2, 2) array
    x = np.ones((3, 4, 5))
    with pytest.raises(ValueError):
        getattr(np.fft, name)(x, s=(2, 2, 2, 2))
    with pytest.raises(
        BluValueError, match=r"s \(2, 2, 2, 2\) has more entries than x has axes \(3\)"
    ):
        getattr(bnp.fft, name)(x, s=(2, 2, 2, 2))
    # as many entries as axes is fine (numpy's values)
    want = getattr(np.fft, name)(x, s=(2, 3, 4))
    np.testing.assert_allclose(np.asarray(getattr(bnp.fft, name)(x, s=(2, 3, 4))), want, atol=1e-12)


# ---- derivatives ---------------------------------------------------------------------------------

F = bnp.fft
GRAD_CASES = {
    "fft": lambda z, norm: F.fft(z, norm=norm),
    "fft_n_pad": lambda z, norm: F.fft(z, n=5, axis=0, norm=norm),
    "fft_n_crop": lambda z, norm: F.fft(z, n=2, norm=norm),
    "ifft": lambda z, norm: F.ifft(z, norm=norm),
    "fftn": lambda z, norm: F.fftn(z, norm=norm),
    "ifftn": lambda z, norm: F.ifftn(z, s=(2, 4), norm=norm),
    "rfft": lambda z, norm: F.rfft(bnp.real(z), norm=norm),
    "rfft_odd": lambda z, norm: F.rfft(bnp.real(z), n=3, norm=norm),
    "rfftn": lambda z, norm: F.rfftn(bnp.imag(z), norm=norm),
    "irfft": lambda z, norm: F.irfft(z, norm=norm),
    "irfft_odd": lambda z, norm: F.irfft(z, n=5, norm=norm),
    "irfftn": lambda z, norm: F.irfftn(z, s=(3, 5), norm=norm),
    "hfft": lambda z, norm: F.hfft(z, n=7, norm=norm),
    "ihfft": lambda z, norm: F.ihfft(bnp.real(z), norm=norm),
    "roundtrip": lambda z, norm: F.ifft(F.fft(z, norm=norm) * z, norm=norm),
}


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_grad_against_finite_differences(name, norm):
    z = cplx((3, 4), seed=7)
    loss = real_loss(lambda v: GRAD_CASES[name](v, norm))
    np.testing.assert_allclose(
        np.asarray(blu.grad(loss)(z)), fd_grad(loss, z), rtol=1e-6, atol=1e-7
    )


def test_real_input_gradient_is_real():
    x = np.random.default_rng(0).standard_normal((2, 6))
    loss = real_loss(lambda v: F.rfft(v))
    g = blu.grad(loss)(x)
    assert g.dtype == np.float64
    eps, want = 1e-6, np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = eps
        want[idx] = (float(loss(x + e)) - float(loss(x - e))) / (2 * eps)
    np.testing.assert_allclose(np.asarray(g), want, rtol=1e-6, atol=1e-7)


def test_jvp_is_the_transform_of_the_tangent():
    z, t = cplx((2, 5), 1), cplx((2, 5), 2)
    _, got = blu.jvp(lambda v: F.fft(v, norm="ortho"), (z,), (t,))
    np.testing.assert_allclose(np.asarray(got), np.fft.fft(t, norm="ortho"), rtol=1e-12)


# ---- vmap and jit --------------------------------------------------------------------------------


@settings(max_examples=10, deadline=None)
@given(shape=batch_shapes(min_dims=1, max_dims=2), seed=st.integers(0, 2**16))
def test_vmap_matches_loop(shape, seed):
    z = cplx(shape, seed)

    def f(v):
        return F.fft(v, axis=-1) + F.irfft(v, n=4)[..., :1]

    got = blu.vmap(f, in_axes=0, out_axes=-1)(z)  # batch axis 0 (maybe size 0), moved last
    want = np.stack([np.asarray(f(z[i])) for i in range(shape[0])] or [np.zeros(shape[1:])], -1)
    np.testing.assert_allclose(np.asarray(got), want[..., : shape[0]], rtol=1e-12, atol=1e-12)
    got0 = blu.vmap(F.rfft)(z.real)
    np.testing.assert_allclose(np.asarray(got0), np.fft.rfft(z.real), rtol=1e-12, atol=1e-12)


def test_jit_and_grad_under_jit():
    z = cplx((3, 8), 3)

    def loss(v):
        return bnp.sum(bnp.abs(F.fft(v)) ** 2) + bnp.sum(F.irfft(v) ** 3)

    np.testing.assert_allclose(float(blu.jit(loss)(z)), float(loss(z)), rtol=1e-12)
    g = blu.jit(blu.grad(loss))(z)
    np.testing.assert_allclose(np.asarray(g), fd_grad(loss, z), rtol=1e-5, atol=1e-6)
    x = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    np.testing.assert_allclose(blu.jit(F.rfft)(x), np.fft.rfft(x), rtol=1e-5, atol=1e-5)


ONE_D = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"]
N_D = ["fftn", "ifftn", "rfftn", "irfftn", "fft2", "ifft2", "rfft2", "irfft2"]


@pytest.mark.parametrize("name", ONE_D)
def test_one_dimensional_arguments_go_positionally(name):
    """``fft(x, n, axis, norm)`` as numpy and JAX spell it (a TypeError before: keyword-only)."""
    x = cplx((3, 4), 7)
    x = x.real if name in ("rfft", "ihfft") else x
    np_fn, blu_fn = getattr(np.fft, name), getattr(bnp.fft, name)
    close(blu_fn(x, 5, 0, "ortho"), np_fn(x, 5, 0, "ortho"))
    close(blu_fn(x, 3), np_fn(x, 3))


@pytest.mark.parametrize("name", N_D)
def test_n_dimensional_arguments_go_positionally(name):
    x = cplx((2, 3, 4), 8)
    x = x.real if name in ("rfftn", "rfft2") else x
    np_fn, blu_fn = getattr(np.fft, name), getattr(bnp.fft, name)
    close(blu_fn(x, (3, 5), (0, 2), "forward"), np_fn(x, (3, 5), (0, 2), "forward"))


def test_frequencies_and_shifts_take_positional_arguments():
    np.testing.assert_allclose(np.asarray(bnp.fft.fftfreq(7, 0.5)), np.fft.fftfreq(7, 0.5),
                               rtol=1e-6)  # fmt: skip
    np.testing.assert_allclose(np.asarray(bnp.fft.rfftfreq(8, 0.1)), np.fft.rfftfreq(8, 0.1),
                               rtol=1e-6)  # fmt: skip
    x = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(np.asarray(bnp.fft.fftshift(x, 0)), np.fft.fftshift(x, 0))
    np.testing.assert_array_equal(np.asarray(bnp.fft.ifftshift(x, (1,))), np.fft.ifftshift(x, (1,)))


@pytest.mark.parametrize(
    "call",
    [
        lambda z: bnp.fft.irfft(z, 4.0),
        lambda z: bnp.fft.fft(z, 2.5),
        lambda z: bnp.fft.fftn(z, s=5),
        lambda z: bnp.fft.rfftn(z.real, s=(2.0, 3)),
        lambda z: bnp.fft.fftfreq(4.0),
        lambda z: bnp.fft.rfftfreq(np.float64(3)),
    ],
)
def test_non_integer_lengths_are_blu_type_errors(call):
    """A float ``n`` or ``s`` entry, or an ``s`` that is no sequence, is a BluTypeError naming
    the argument (Python's TypeError from ``operator.index``/``len`` escaped before)."""
    with pytest.raises(blu.errors.BluTypeError, match=r"fft\.\w+: (n|s) must"):
        call(cplx((3, 4), 0))
    # integer-valued numpy scalars and arrays are still lengths
    z = cplx((3, 4), 1)
    close(bnp.fft.fftn(z, s=np.array([2, 5])), np.fft.fftn(z, s=[2, 5], axes=(0, 1)))
    close(bnp.fft.fft(z, np.int64(3)), np.fft.fft(z, 3))


@pytest.mark.parametrize("n", [1, 4, 5])
def test_frequencies_take_a_traced_spacing(n):
    """``d`` may be traced (JAX's ``d`` is any scalar array): under jit, vmap and grad it
    divides the static ``k / n`` (``float(d)`` raised a ConcretizationError before). The
    derivative of ``k / (d n)`` in ``d`` is ``-k / (d^2 n)``."""
    d = np.float64(0.3)
    for fn, ref in ((bnp.fft.fftfreq, np.fft.fftfreq), (bnp.fft.rfftfreq, np.fft.rfftfreq)):
        want = ref(n, d)
        got = blu.jit(lambda d: fn(n, d, dtype=np.float64))(d)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-14)
        ds = np.array([0.5, 2.0])
        got = blu.vmap(lambda d: fn(n, d, dtype=np.float64))(ds)
        np.testing.assert_allclose(np.asarray(got), [ref(n, v) for v in ds], rtol=1e-14)
        w = np.arange(1.0, want.size + 1)
        g = blu.grad(lambda d: bnp.sum(fn(n, d, dtype=np.float64) * w))(d)
        np.testing.assert_allclose(float(g), -np.sum(ref(n, 1.0) * w) / d**2, rtol=1e-12)


@pytest.mark.parametrize(
    "call",
    [
        lambda F, x: F.rfft(x),
        lambda F, x: F.ihfft(x),
        lambda F, x: F.rfftn(x),
        lambda F, x: F.rfft2(np.zeros((2, 3, 0))),
    ],
)
def test_real_transform_of_an_empty_axis_raises(call):
    # numpy: "Invalid number of FFT data points (0)"; JAX fails to lower; blu returned one
    # frequency, 0 (rfft(zeros(0)) == [0j])
    with pytest.raises(ValueError):
        call(np.fft, np.zeros(0))
    with pytest.raises(BluValueError, match="length 0"):
        call(bnp.fft, np.zeros(0))
    # an empty batch axis is an empty result, and n pads an empty signal (numpy's)
    assert bnp.fft.rfft(np.zeros((0, 4))).shape == (0, 3)
    np.testing.assert_array_equal(np.asarray(bnp.fft.rfft(np.zeros(0), n=4)), np.zeros(3))
