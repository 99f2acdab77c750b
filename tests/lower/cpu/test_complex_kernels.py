"""Complex values in fused CPU kernels (``blu/lower/mlir/rules_complex.py``): every equation of
these jitted programs must be fused into a kernel (no fallback node), and agree with numpy.

References: random finite inputs against numpy in complex128 / float64 on the (already rounded)
inputs, within a tolerance of the dtype (relative to the magnitude of the complex result: one
part may cancel to nearly 0); special values (0, -0, inf, -inf, NaN, huge, tiny in either part)
against numpy in the same dtype, which is the impl's semantics (``np.multiply``, ``np.divide``,
``np.exp`` ... of complex64/complex128): NaN where numpy has NaN, equal infinities, the rest within
the tolerance. Deviations documented in ``rules_complex.py`` are kept out of the special grid
(``exp`` where ``exp(re)`` overflows but the result would not).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.lax as lax
import blu.numpy as bnp
from blu.lower.plan.nodes import NodeKind

C64, C128 = np.complex64, np.complex128
CDTYPES = (C64, C128)
RTOL = {np.dtype(C64): 2e-6, np.dtype(C128): 4e-15}  # a few roundings of the dtype


def _kinds(f, *args) -> list:
    exe = blu.jit(f).lower(*args, target="cpu").compile().executable
    return [n.kind for n in exe.plan.nodes]


def assert_fused(f, *args) -> None:
    kinds = _kinds(f, *args)
    assert NodeKind.FALLBACK not in kinds, kinds
    assert NodeKind.KERNEL in kinds or not kinds, kinds


def _cplx(shape, dt, rng, scale=1.0):
    z = scale * (rng.standard_normal(shape) + 1j * rng.standard_normal(shape))
    return z.astype(dt)


def assert_close(got, want, dt, rtol=None, floor=1e-300):
    """Per part: NaN where ``want`` has NaN, equal infinities, else within ``rtol`` of
    ``max(|want|, floor)`` (the result's complex magnitude; ``floor``: the operands' scale, for
    results that cancel)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype == np.bool_:
        np.testing.assert_array_equal(got, want)
        return
    rtol = RTOL[np.dtype(dt)] if rtol is None else rtol
    mag = np.abs(want.astype(C128)) if np.isfinite(want).all() else np.abs(np.nan_to_num(want))
    for g, w in (
        ((got.real, want.real), (got.imag, want.imag)) if want.dtype.kind == "c" else ((got, want),)
    ):
        g, w = g.astype(np.float64), w.astype(np.float64)
        nan_w = np.isnan(w)
        np.testing.assert_array_equal(np.isnan(g), nan_w, err_msg="NaN positions")
        inf_w = np.isinf(w)
        np.testing.assert_array_equal(g[inf_w], w[inf_w], err_msg="infinities")
        ok = ~(nan_w | inf_w)
        err = np.abs(g[ok] - w[ok])
        bound = rtol * np.maximum(np.asarray(mag)[ok] if np.ndim(mag) else mag, floor)
        assert (err <= bound + 1e-300).all(), (g[ok][err > bound], w[ok][err > bound])


def _mk(re, im):
    """``re + i im`` without arithmetic (``1j * inf`` is ``NaN + inf j``)."""
    z = np.empty(np.shape(re), np.result_type(re, np.complex64))
    z.real, z.imag = re, im
    return z


# name: (blu function, numpy reference), each of (z, w)
UNARY = {
    "neg": (lambda z: -z, np.negative),
    "conj": (lax.conj, np.conj),
    "real": (lax.real, np.real),
    "imag": (lax.imag, np.imag),
    "abs": (bnp.abs, np.abs),
    "exp": (bnp.exp, np.exp),
    "log": (bnp.log, np.log),
    "sqrt": (bnp.sqrt, np.sqrt),
    "square": (lax.square, np.square),
    "sin": (bnp.sin, np.sin),
    "rsqrt": (lax.rsqrt, lambda z: 1 / np.sqrt(z)),
    "log1p": (bnp.log1p, np.log1p),
    "exp2": (bnp.exp2, np.exp2),
    "cos": (bnp.cos, np.cos),
    "sinh": (bnp.sinh, np.sinh),
    "cosh": (bnp.cosh, np.cosh),
    # the impl's square-and-multiply from 1 (so (1 + 0j) * (inf + 0j) = inf + NaN j)
    "pow3": (lambda z: lax.integer_pow(z, 3), lambda z: (np.ones_like(z) * z) * (z * z)),
    "pow-2": (lambda z: lax.integer_pow(z, -2), lambda z: 1 / (np.ones_like(z) * (z * z))),
    "sign": (lax.sign, lambda z: np.where(z == 0, 0, z / np.where(z == 0, 1, np.abs(z)))),
}
BINARY = {
    "add": (lambda z, w: z + w, np.add),
    "sub": (lambda z, w: z - w, np.subtract),
    "mul": (lambda z, w: z * w, np.multiply),
    "div": (lambda z, w: z / w, np.divide),
    "eq": (lambda z, w: z == w, np.equal),
    "ne": (lambda z, w: z != w, np.not_equal),
    "complex": (lambda z, w: lax.complex(lax.real(z), lax.imag(w)),
                lambda z, w: _mk(z.real, w.imag)),
    "where": (lambda z, w: bnp.where(lax.real(z) > 0, z, w),
              lambda z, w: np.where(z.real > 0, z, w)),
}  # fmt: skip
# functions of the parts (mathlib's float32 polynomials, libm) and their products: a few ulp more
_TRANSCENDENTAL = ("exp", "log", "log1p", "exp2", "sin", "cos", "sinh", "cosh")
LOOSE = {"sqrt": 2, "rsqrt": 4, **dict.fromkeys(_TRANSCENDENTAL, 8)}

shapes = st.lists(st.integers(0, 5), min_size=0, max_size=3).map(tuple)


@pytest.mark.parametrize("dt", CDTYPES, ids=["c64", "c128"])
@pytest.mark.parametrize("name", [*UNARY, *BINARY])
@settings(max_examples=4, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**16))
def test_random_finite_against_complex128(name, dt, shape, seed):
    rng = np.random.default_rng(seed)
    z, w = _cplx(shape, dt, rng, 2.0), _cplx(shape, dt, rng, 2.0)
    fn, ref = UNARY[name] if name in UNARY else BINARY[name]
    args = (z,) if name in UNARY else (z, w)
    got = blu.jit(fn)(*args)
    want = ref(*(a.astype(C128) for a in args))
    assert np.asarray(got).dtype == np.asarray(ref(*args)).dtype
    assert_close(got, want, dt, RTOL[np.dtype(dt)] * LOOSE.get(name, 1), floor=1.0)
    assert_fused(fn, *args)


def _special(dt):
    """Every pair of parts from a grid of special values (both orders for binary ops)."""
    big = float(np.finfo(np.dtype(dt).char.lower()).max) / 3
    tiny = float(np.finfo(np.dtype(dt).char.lower()).tiny)
    vals = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 1e-3, big, -big, tiny, np.inf, -np.inf,
                     np.nan])  # fmt: skip
    re, im = np.meshgrid(vals, vals)
    z = _mk(re.ravel(), im.ravel()).astype(dt)
    zz, ww = np.meshgrid(z, z)
    return z, zz.ravel().copy(), ww.ravel().copy()


@pytest.mark.parametrize("dt", CDTYPES, ids=["c64", "c128"])
@pytest.mark.parametrize("name", [*UNARY, *BINARY])
def test_special_values_against_numpy_in_the_dtype(name, dt):
    z, zz, ww = _special(dt)
    fn, ref = UNARY[name] if name in UNARY else BINARY[name]
    args = (z,) if name in UNARY else (zz, ww)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = ref(*args)
        got = blu.jit(fn)(*args)
    rtol = RTOL[np.dtype(dt)] * LOOSE.get(name, 1)
    assert_close(got, want, dt, rtol)


@pytest.mark.parametrize("dt", CDTYPES, ids=["c64", "c128"])
def test_division_and_abs_do_not_overflow(dt):
    big = float(np.finfo(np.dtype(dt).char.lower()).max) / 4
    z = np.array([big + big * 1j, 3 * big - 2 * big * 1j, 1 + 1j], dt)
    w = np.array([big - big * 1j, big + 2 * big * 1j, big * 1j], dt)
    assert_close(blu.jit(lambda z, w: z / w)(z, w), z.astype(C128) / w.astype(C128), dt)
    assert_close(blu.jit(bnp.abs)(z), np.abs(z.astype(C128)), dt)
    assert np.isfinite(np.asarray(blu.jit(bnp.sqrt)(z))).all()


@pytest.mark.parametrize("dt", CDTYPES, ids=["c64", "c128"])
def test_data_movement_of_complex_arrays(dt):
    rng = np.random.default_rng(1)
    z, w = _cplx((3, 4), dt, rng), _cplx((4,), dt, rng)

    def f(z, w):
        t = lax.transpose(z, (1, 0)) * w[:, None]  # transpose, broadcast
        r = bnp.reshape(t, (2, 6))[:, 1:5:2]  # reshape, strided slice
        p = lax.pad(r, np.asarray(0, dt), [(1, 0, 1), (0, 2, 0)])
        return bnp.concatenate([p, bnp.flip(p, 0)], axis=1), bnp.squeeze(z[:1], 0)

    Z, W = z.astype(C128), w.astype(C128)
    t = (Z.T * W[:, None]).reshape(2, 6)[:, 1:5:2]
    p = np.zeros((4, 4), C128)
    p[1::2, :2] = t
    got = blu.jit(f)(z, w)
    assert_close(got[0], np.concatenate([p, p[::-1]], axis=1), dt)
    assert_close(got[1], Z[0], dt)
    assert_fused(f, z, w)


@pytest.mark.parametrize("dt", CDTYPES, ids=["c64", "c128"])
def test_gathers_and_dynamic_slices_of_complex_arrays(dt):
    rng = np.random.default_rng(11)
    x, u = _cplx((6, 8), dt, rng), _cplx((2, 3), dt, rng)
    idx = rng.integers(-8, 8, (6, 4)).astype(np.int32)
    rows = np.array([5, 0, 2], np.int32)

    def f(x, u, i, idx, rows):
        a = lax.dynamic_slice(x, (i, i + 1), (3, 4)) * 2
        b = lax.dynamic_update_slice(x, u, (i, 5))
        return a, b, bnp.take_along_axis(x, idx, axis=1) + 1j, x[rows] - x[rows[::-1]]

    i = np.int32(2)
    got = blu.jit(f)(x, u, i, idx, rows)
    X, U = x.astype(C128), u.astype(C128)
    b = X.copy()
    b[2:4, 5:8] = U
    want = (X[2:5, 3:7] * 2, b, np.take_along_axis(X, idx % 8, axis=1) + 1j,
            X[rows] - X[rows[::-1]])  # fmt: skip
    for g, w in zip(got, want):
        assert_close(g, w, dt)
    assert_fused(f, x, u, i, idx, rows)


@pytest.mark.parametrize(
    "src, dst",
    [(C64, C128), (C128, C64), (np.float32, C64), (np.float64, C128), (np.int32, C128),
     (np.float32, C128), (C128, np.float64), (C64, np.float32), (C64, np.bool_),
     (C128, np.int32)],
)  # fmt: skip
def test_convert_element_type(src, dst):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 3)) * 40 + 1j * rng.standard_normal((5, 3))
    x[0, 0], x[0, 1], x[0, 2] = 0, 1j, np.nan
    with np.errstate(invalid="ignore"):  # NaN -> int32 in the sample
        x = x.astype(src) if np.dtype(src).kind == "c" else x.real.astype(src)

    def f(x):
        return lax.convert_element_type(x, dst)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = np.asarray(blu.jit(f)(x))
        want = np.asarray(f(x))  # the impl (numpy astype with the real-part rule)
    assert got.dtype == np.dtype(dst)
    if np.dtype(dst).kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        assert_close(got, want, C64 if np.dtype(dst).itemsize <= 8 else C128)
    assert_fused(f, x)


@pytest.mark.parametrize("dt", CDTYPES, ids=["c64", "c128"])
@pytest.mark.parametrize("shape, axes", [((6, 70), (1,)), ((70, 6), (0,)), ((4, 5, 3), (0, 2)),
                                         ((0, 3), (0,)), ((1,), (0,))])  # fmt: skip
def test_sum_and_prod_reductions(dt, shape, axes):
    rng = np.random.default_rng(3)
    z = _cplx(shape, dt, rng)

    def f(z):
        return bnp.sum(z * 2, axis=axes), bnp.prod(z[..., :3] / 2 + 1, axis=axes)

    got = blu.jit(f)(z)
    Z = z.astype(C128)
    n = int(np.prod([shape[a] for a in axes]))
    assert_close(got[0], np.sum(Z * 2, axis=axes), dt, RTOL[np.dtype(dt)] * max(n, 1))
    assert_close(got[1], np.prod(Z[..., :3] / 2 + 1, axis=axes), dt, RTOL[np.dtype(dt)] * 8)
    assert_fused(f, z)


# ---- transforms: an FFT-filter-like chain ------------------------------------------------------


def _filter_loss(xr, xi, wr, wi):
    p = lax.complex(xr, xi) * lax.complex(wr, wi)
    return bnp.sum(lax.real(p) + lax.imag(p) ** 2 + bnp.abs(p))


def _filter_grads_numpy(xr, xi, wr, wi):
    pr, pi = xr * wr - xi * wi, xr * wi + xi * wr
    a = np.hypot(pr, pi)
    gr = wr + 2 * pi * wi + (pr * wr + pi * wi) / a
    gi = -wi + 2 * pi * wr + (-pr * wi + pi * wr) / a
    return gr, gi


@pytest.mark.parametrize("dt", (np.float32, np.float64))
def test_grad_of_a_complex_chain_is_fused(dt):
    rng = np.random.default_rng(4)
    xr, xi, wr, wi = (rng.standard_normal((3, 8)).astype(dt) for _ in range(4))
    g = blu.jit(blu.grad(_filter_loss, argnums=(0, 1)))
    got = g(xr, xi, wr, wi)
    want = _filter_grads_numpy(*(a.astype(np.float64) for a in (xr, xi, wr, wi)))
    tol = 1e-4 if dt == np.float32 else 1e-11
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), b, rtol=tol, atol=tol)
    assert_fused(blu.grad(_filter_loss, argnums=(0, 1)), xr, xi, wr, wi)


def test_grad_with_respect_to_a_complex_input():
    rng = np.random.default_rng(5)
    z, w = _cplx((4, 6), C128, rng), _cplx((4, 6), C128, rng)

    def loss(z, w):
        return _filter_loss(lax.real(z), lax.imag(z), lax.real(w), lax.imag(w))

    got = blu.jit(blu.grad(loss))(z, w)
    gr, gi = _filter_grads_numpy(z.real, z.imag, w.real, w.imag)
    np.testing.assert_allclose(np.asarray(got), gr - 1j * gi, rtol=1e-11, atol=1e-11)  # JAX's
    assert_fused(blu.grad(loss), z, w)


def test_vmap_of_jit_of_a_complex_chain():
    rng = np.random.default_rng(6)
    z, w = _cplx((5, 3, 8), C64, rng), _cplx((8,), C64, rng)

    def f(z, w):
        p = bnp.exp(z * w) / (1 + bnp.abs(z))
        return lax.real(p) - lax.imag(bnp.sqrt(p)), bnp.sum(p, axis=-1)

    got = blu.vmap(blu.jit(f), in_axes=(0, None))(z, w)
    Z, W = z.astype(C128), w.astype(C128)
    p = np.exp(Z * W) / (1 + np.abs(Z))
    assert_close(got[0], p.real - np.sqrt(p).imag, C64, 2e-5)
    assert_close(got[1], np.sum(p, axis=-1), C64, 2e-5)
    assert_fused(blu.vmap(f, in_axes=(0, None)), z, w)


def test_primitives_without_a_complex_rule_still_fall_back():
    z = _cplx((4,), C64, np.random.default_rng(7))
    f = bnp.tanh  # no complex rule: a fallback node, numpy's result
    assert NodeKind.FALLBACK in _kinds(f, z)
    assert_close(blu.jit(f)(z), np.tanh(z.astype(C128)), C64, 1e-5)
