"""Complex dtypes through blu: promotion, elementwise values against numpy complex128, JAX's
convention for complex gradients against finite differences, holomorphic grad, jit (complex
equations run as fallback nodes) and vmap."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu import lax
from blu.core import dtypes
from blu.core.errors import BluTypeError
from tests.helpers import arrays, shapes


def cplx(shape, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    return scale * (rng.standard_normal(shape) + 1j * rng.standard_normal(shape))


def fd_grad(f, z, eps=1e-6):
    """JAX's gradient of a real function of complex ``z``, by central differences:
    ``df/dx - i df/dy`` per element."""
    z = np.asarray(z, np.complex128)
    g = np.zeros(z.shape, np.complex128)
    for idx in np.ndindex(z.shape):
        for unit, sign in ((1.0, 1.0), (1j, -1j)):
            zp, zm = z.copy(), z.copy()
            zp[idx] += eps * unit
            zm[idx] -= eps * unit
            g[idx] += sign * (float(f(zp)) - float(f(zm))) / (2 * eps)
    return g


def real_loss(fn, out_shape_seed=1):
    """A real scalar of ``fn(z)`` that weighs every real and imaginary part differently."""

    def loss(z):
        out = fn(z)
        rng = np.random.default_rng(out_shape_seed)
        shape = np.shape(out)
        a, b = rng.standard_normal(shape), rng.standard_normal(shape)
        if bnp.iscomplexobj(out):
            return bnp.sum(bnp.real(out) * a + bnp.imag(out) * b)
        return bnp.sum(out * a)

    return loss


# ---- promotion ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "a, b, want",
    [
        (dtypes.complex64, dtypes.float64, dtypes.complex128),
        (dtypes.complex64, dtypes.float32, dtypes.complex64),
        (dtypes.complex64, dtypes.complex128, dtypes.complex128),
        (dtypes.int64, dtypes.complex64, dtypes.complex64),
        (dtypes.bfloat16, dtypes.complex64, dtypes.complex64),
        (dtypes.float32, 1j, dtypes.complex64),
        (dtypes.float64, 1j, dtypes.complex128),
        (dtypes.float16, 1j, dtypes.complex64),
        (dtypes.complex128, 2.0, dtypes.complex128),
        (dtypes.int32, 1j, dtypes.complex64),
    ],
)
def test_promotion(a, b, want):
    # JAX's lattice (https://jax.readthedocs.io/en/latest/type_promotion.html), 64-bit on
    assert dtypes.result_type(a, b) == want
    assert dtypes.result_type(b, a) == want


def test_python_complex_is_weak():
    x = bnp.asarray(1j)
    assert x.dtype == bnp.complex64 and x.weak_type
    assert (bnp.ones(2, bnp.float64) + 1j).dtype == bnp.complex128
    assert (bnp.ones(2, bnp.complex64) * 2.0).dtype == bnp.complex64


def test_lax_complex_parts():
    x, y = np.array([1.0, -2.0], np.float32), np.array([0.5, 3.0], np.float32)
    z = lax.complex(x, y)
    assert z.dtype == np.complex64
    np.testing.assert_array_equal(lax.real(z), x)
    np.testing.assert_array_equal(lax.imag(z), y)
    np.testing.assert_array_equal(lax.conj(z), x - 1j * y)
    with pytest.raises(BluTypeError):
        lax.real(x)
    with pytest.raises(BluTypeError):
        lax.complex(x.astype(np.int32), y.astype(np.int32))


def test_cast_complex_to_real_keeps_real_part():
    z = bnp.asarray(np.array([1.5 + 2j, -3 - 1j, 1j], np.complex64))
    np.testing.assert_array_equal(bnp.astype(z, bnp.float32), [1.5, -3, 0])
    np.testing.assert_array_equal(bnp.astype(z, bnp.bool_), [True, True, True])


# ---- values ------------------------------------------------------------------------------------

UNARY = ["sin", "cos", "tan", "exp", "expm1", "log", "log1p", "log2", "log10", "sqrt", "tanh",
         "sinh", "cosh", "arcsin", "arccos", "arctan", "arcsinh", "arccosh", "arctanh", "square",
         "reciprocal", "negative", "conj", "real", "imag", "abs", "sign", "angle"]  # fmt: skip


@settings(max_examples=10, deadline=None)
@given(shape=shapes(max_dims=3, max_side=3), seed=st.integers(0, 2**16))
@pytest.mark.parametrize("name", UNARY)
def test_unary_matches_numpy(name, shape, seed):
    z = cplx(shape, seed)
    got = getattr(bnp, name)(z)
    want = getattr(np, name)(z)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)


@settings(max_examples=10, deadline=None)
@given(shape=shapes(max_dims=3, max_side=3), seed=st.integers(0, 2**16))
@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide", "power", "equal"])
def test_binary_matches_numpy(name, shape, seed):
    a, b = cplx(shape, seed), cplx(shape, seed + 1)
    got = getattr(bnp, name)(a, b)
    np.testing.assert_allclose(np.asarray(got), getattr(np, name)(a, b), rtol=1e-12)


@settings(max_examples=10, deadline=None)
@given(shape=shapes(min_dims=1, max_dims=3, max_side=3), seed=st.integers(0, 2**16))
def test_reductions_and_products(shape, seed):
    z = cplx(shape, seed)
    np.testing.assert_allclose(bnp.sum(z, axis=0), np.sum(z, axis=0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(bnp.prod(z, axis=-1), np.prod(z, axis=-1), rtol=1e-12)
    if z.size:
        np.testing.assert_allclose(bnp.mean(z), np.mean(z), rtol=1e-12)
        np.testing.assert_allclose(bnp.var(z), np.var(z), rtol=1e-10, atol=1e-12)
    w = cplx(shape[-1:], seed + 1)
    np.testing.assert_allclose(bnp.matmul(z, w), np.matmul(z, w), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(bnp.linalg.vecdot(z, w), np.vecdot(z, w), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        bnp.linalg.vector_norm(z), np.linalg.norm(z.ravel()), rtol=1e-12, atol=1e-12
    )


def test_special_values():
    inf, nan = np.inf, np.nan
    z = np.array([complex(inf, 0), complex(-inf, inf), complex(-inf, nan), complex(nan, 0)])
    got = np.asarray(bnp.expm1(z))
    np.testing.assert_array_equal(got.real, [inf, -1, -1, nan])
    np.testing.assert_array_equal(got.imag[[0, 3]], [0, 0])
    zero = np.asarray(bnp.expm1(np.array([complex(-0.0, 0.0), complex(-0.0, -0.0)])))
    assert not np.signbit(zero.real).any() and list(np.signbit(zero.imag)) == [False, True]
    t = np.asarray(bnp.tanh(np.array([complex(inf, 1.0), complex(-inf, -2.0)])))
    np.testing.assert_array_equal(t.real, [1, -1])
    assert not np.signbit(t.imag[0]) and np.signbit(t.imag[1])
    c = np.array([complex(inf, 1), complex(1, nan), complex(1, 2)])
    np.testing.assert_array_equal(bnp.isinf(c), [True, False, False])
    np.testing.assert_array_equal(bnp.isnan(c), [False, True, False])
    np.testing.assert_array_equal(bnp.isfinite(c), [False, False, True])


# ---- gradients (JAX's convention: df/dx - i df/dy) -----------------------------------------------


def test_grad_convention_matches_jax_cookbook():
    # JAX's autodiff cookbook: f(z) = x^2 + y^2 at 3 + 4j has grad 6 - 8j
    def f(z):
        return bnp.real(z) ** 2 + bnp.imag(z) ** 2

    g = blu.grad(f)(bnp.asarray(np.complex64(3 + 4j)))
    assert g.dtype == np.complex64
    np.testing.assert_allclose(complex(g), 6 - 8j, rtol=1e-6)
    np.testing.assert_allclose(complex(blu.grad(lambda z: bnp.abs(z) ** 2)(3 + 4j)), 6 - 8j)


def test_holomorphic_grad():
    z = np.complex128(0.3 + 0.7j)
    np.testing.assert_allclose(complex(blu.grad(lambda z: z * z, holomorphic=True)(z)), 2 * z)
    np.testing.assert_allclose(
        complex(blu.grad(lambda z: bnp.sin(z), holomorphic=True)(z)), np.cos(z), rtol=1e-12
    )
    with pytest.raises(BluTypeError):
        blu.grad(lambda z: z * z)(z)  # a complex output needs holomorphic=True
    with pytest.raises(BluTypeError):
        blu.grad(lambda x: x * x, holomorphic=True)(1.0)  # holomorphic needs complex inputs


GRAD_FNS = {
    "sin": bnp.sin, "cos": bnp.cos, "tan": bnp.tan, "exp": bnp.exp, "expm1": bnp.expm1,
    "log": bnp.log, "log1p": bnp.log1p, "sqrt": bnp.sqrt, "tanh": bnp.tanh, "sinh": bnp.sinh,
    "cosh": bnp.cosh, "arcsin": bnp.arcsin, "arccos": bnp.arccos, "arctan": bnp.arctan,
    "arcsinh": bnp.arcsinh, "arccosh": bnp.arccosh, "arctanh": bnp.arctanh,
    "abs": bnp.abs, "real": bnp.real, "imag": bnp.imag, "conj": bnp.conj, "angle": bnp.angle,
    "square": bnp.square, "reciprocal": bnp.reciprocal, "pow3": lambda z: z**3,
    "zpow": lambda z: bnp.power(z, z), "mul_conj": lambda z: z * bnp.conj(z),
    "sum": lambda z: bnp.sum(z * (1 + 2j)), "matmul": lambda z: z @ (z.T + 1j),
    "norm": lambda z: bnp.linalg.vector_norm(z), "mean": bnp.mean,
    "cast_real": lambda z: bnp.astype(bnp.real(z), bnp.float64) + bnp.astype(z, bnp.float64),
    "make_complex": lambda z: lax.complex(bnp.imag(z), bnp.real(z) ** 2),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(GRAD_FNS))
def test_grad_against_finite_differences(name):
    z = cplx((2, 2), seed=3, scale=0.5) + 0.1
    loss = real_loss(GRAD_FNS[name])
    got = np.asarray(blu.grad(loss)(z))
    np.testing.assert_allclose(got, fd_grad(loss, z), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["sin", "exp", "abs", "conj", "angle", "make_complex"])
def test_jvp_against_finite_differences(name):
    f = GRAD_FNS[name]
    z, t = cplx((3,), seed=4, scale=0.5) + 0.2, cplx((3,), seed=5)
    _, got = blu.jvp(f, (z,), (t,))
    eps = 1e-6
    want = (np.asarray(f(z + eps * t)) - np.asarray(f(z - eps * t))) / (2 * eps)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-7)


def test_grad_real_input_complex_intermediate():
    # a real parameter through complex values: the gradient is real
    def f(x):
        return bnp.abs(bnp.exp(1j * x) * (x + 2j)) ** 2

    x = bnp.asarray(np.float64(0.7))  # an array: 1j * x is complex128 (a bare 1j * 0.7 is c64)
    g = blu.grad(f)(x)
    assert g.dtype == np.float64
    eps = 1e-6
    np.testing.assert_allclose(float(g), (float(f(x + eps)) - float(f(x - eps))) / (2 * eps))


# ---- linear algebra -----------------------------------------------------------------------------


def test_linalg_values():
    a = cplx((2, 3, 3), 8)
    h = a @ np.conj(np.swapaxes(a, -1, -2)) + np.eye(3)
    L = bnp.linalg
    np.testing.assert_allclose(L.det(a), np.linalg.det(a), rtol=1e-12)
    np.testing.assert_allclose(L.inv(a), np.linalg.inv(a), rtol=1e-10)
    np.testing.assert_allclose(L.solve(a, a[..., :1]), np.linalg.solve(a, a[..., :1]), rtol=1e-10)
    np.testing.assert_allclose(L.cholesky(h), np.linalg.cholesky(h), rtol=1e-12)
    np.testing.assert_allclose(L.eigvalsh(h), np.linalg.eigvalsh(h), rtol=1e-12)
    np.testing.assert_allclose(L.svdvals(a), np.linalg.svdvals(a), rtol=1e-12)
    q, r = L.qr(a)
    np.testing.assert_allclose(np.asarray(q) @ np.asarray(r), a, atol=1e-12)
    assert L.svdvals(a).dtype == np.float64 and L.eigvalsh(h).dtype == np.float64


def test_linalg_gradients():
    a = cplx((3, 3), 9)
    for f in (
        lambda z: bnp.abs(bnp.linalg.det(z)),
        lambda z: bnp.sum(bnp.linalg.svdvals(z) * np.array([1.0, 2.0, 3.0])),
        lambda z: bnp.abs(bnp.linalg.cholesky(z @ bnp.conj(z.T) + np.eye(3))).sum(),
    ):
        np.testing.assert_allclose(np.asarray(blu.grad(f)(a)), fd_grad(f, a), rtol=1e-6)


# ---- jit and vmap --------------------------------------------------------------------------------


def test_jit_complex_runs_as_fallback():
    def f(z, x):
        return bnp.sum(bnp.abs(bnp.exp(z) * x) + bnp.real(z * z)), z * 2 + x

    z, x = cplx((3, 4), seed=6), np.linspace(0, 1, 4)
    want = f(z, x)
    got = blu.jit(f)(z, x)
    np.testing.assert_allclose(float(got[0]), float(want[0]), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1]), rtol=1e-12)
    g = blu.jit(blu.grad(lambda z: f(z, x)[0]))(z)
    np.testing.assert_allclose(np.asarray(g), fd_grad(lambda z: f(z, x)[0], z), rtol=1e-5)


@settings(max_examples=10, deadline=None)
@given(shape=shapes(min_dims=1, max_dims=3, max_side=3), seed=st.integers(0, 2**16))
def test_vmap_complex(shape, seed):
    z = cplx(shape, seed)

    def f(v):
        return bnp.sum(bnp.sqrt(v) * bnp.conj(v)) + bnp.imag(v).sum() * 1j

    got = blu.vmap(f)(z)
    want = np.array([complex(f(z[i])) for i in range(shape[0])]).reshape(shape[0])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)


@settings(max_examples=10, deadline=None)
@given(x=arrays(shapes(max_dims=2, max_side=3)))
def test_real_arrays_unchanged_by_complex_functions(x):
    np.testing.assert_array_equal(bnp.real(x), x)
    np.testing.assert_array_equal(bnp.conj(x), x)
    np.testing.assert_array_equal(bnp.imag(x), np.zeros_like(x))
    assert not bnp.iscomplexobj(x)


def test_nan_reductions_of_complex():
    z = np.array([1 + 1j, complex(np.nan, 0), 2 - 1j, complex(0, np.nan)])
    np.testing.assert_allclose(complex(bnp.nansum(z)), np.nansum(z))
    np.testing.assert_allclose(complex(bnp.nanmean(z)), np.nanmean(z))


def test_rounding_and_nan_to_num_of_complex():
    z = np.array([1.5 + 2.5j, -0.5 - 1.77j, complex(np.nan, np.inf)])
    pairs = [(bnp.round(z), np.round(z)), (bnp.round(z, 1), np.round(z, 1))]
    pairs += [(bnp.rint(z), np.rint(z)), (bnp.nan_to_num(z), np.nan_to_num(z))]
    for got, want in pairs:
        np.testing.assert_array_equal(np.asarray(got), want)
    for fn in (bnp.floor, bnp.ceil, bnp.trunc, bnp.signbit):
        with pytest.raises(BluTypeError, match="complex"):
            fn(z)
    np.testing.assert_allclose(bnp.isclose(z[:2], z[:2] + 1e-9), [True, True])
