"""lax.conv_general_dilated_patches and conv_general_dilated_local (JAX's) against float64 loops
that cut each window out of the dilated, padded input: shapes, strides, padding, both dilations,
size-1 axes and several layouts (the kernel string ordering the window); gradients against
finite differences, vmap against a loop, jit, dtypes, and the errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import blu
from blu import lax
from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from tests.helpers import check_grads

# (lhs, rhs, out) strings per number of spatial axes; None is NC.../OI.../NC...
LAYOUTS = {
    1: [None, ("NWC", "WIO", "NWC"), ("CWN", "OWI", "WNC")],
    2: [None, ("NHWC", "HWIO", "NHWC"), ("NCHW", "OIWH", "NHCW"), ("HNWC", "WHOI", "CHWN")],
}


def _strings(dn, s):
    if dn is not None:
        return dn
    sp = "HWD"[:s]
    return "NC" + sp, "OI" + sp, "NC" + sp


def _canonical_input(x, dn):
    """x as (N, C, spatial...), the spatial axes in the kernel string's order."""
    ls, rs, _ = _strings(dn, x.ndim - 2)
    sp = [c for c in rs if c not in "OI"]
    return x.transpose([ls.index(c) for c in "NC" + "".join(sp)]), sp


def _dilated_padded(x, ld, pads):
    """(N, C, spatial...) with ld - 1 zeros between elements, then padded (negative: cropped)."""
    shape = [(n - 1) * d + 1 if n else 0 for n, d in zip(x.shape[2:], ld)]
    out = np.zeros(x.shape[:2] + tuple(shape))
    out[(slice(None), slice(None), *(slice(None, None, d) for d in ld))] = x
    for a, (lo, hi) in enumerate(pads, start=2):
        out = np.take(out, range(max(-lo, 0), out.shape[a] - max(-hi, 0)), axis=a)
        widths = [(0, 0)] * out.ndim
        widths[a] = (max(lo, 0), max(hi, 0))
        out = np.pad(out, widths)
    return out


def _explicit_pads(in_sp, fs, strides, padding, rd):
    """SAME: out = ceil(in / stride) with the odd pad high (SAME_LOWER: low); in undilated."""
    if not isinstance(padding, str):
        return padding
    pads = []
    for n, k, st_, r in zip(in_sp, fs, strides, rd):
        eff = (k - 1) * r + 1
        tot = max((-(-n // st_) - 1) * st_ + eff - n, 0) if padding != "VALID" else 0
        pads.append(
            (tot // 2, tot - tot // 2) if padding != "SAME_LOWER" else (tot - tot // 2, tot // 2)
        )
    return pads


def _windows(x, fs, strides, padding, ld, rd, dn):
    """The dilated, padded canonical input, the output's spatial sizes, the window offsets
    (row-major over fs) and the out string's order."""
    xc, sp = _canonical_input(x, dn)
    pads = _explicit_pads(xc.shape[2:], fs, strides, padding, rd)
    xd = _dilated_padded(xc, ld, pads)
    eff = [(k - 1) * r + 1 for k, r in zip(fs, rd)]
    out_sp = [max((p - e) // st_ + 1, 0) for p, e, st_ in zip(xd.shape[2:], eff, strides)]
    os_ = _strings(dn, x.ndim - 2)[2]
    perm = ["NC".index(c) if c in "NC" else 2 + sp.index(c) for c in os_]
    return xd, out_sp, list(itertools.product(*(range(k) for k in fs))), perm


def patches_ref(x, fs, strides, padding, ld, rd, dn):
    xd, out_sp, offsets, perm = _windows(x, fs, strides, padding, ld, rd, dn)
    n, c, s = xd.shape[0], xd.shape[1], len(offsets)
    out = np.zeros((n, c * s, *out_sp))
    for ci, (p, k) in itertools.product(range(c), enumerate(offsets)):
        for y in itertools.product(*(range(m) for m in out_sp)):
            idx = tuple(yy * st_ + kk * r for yy, st_, kk, r in zip(y, strides, k, rd))
            out[(slice(None), ci * s + p, *y)] = xd[(slice(None), ci, *idx)]
    return out.transpose(perm)


def local_ref(x, w, fs, strides, padding, ld, rd, dn):
    """out[n, o, y] = sum over c and the window of x'[n, c, y * st + k * rd] * w[o, c S + p, y],
    w in the kernel string's layout with the output's sizes on its spatial axes."""
    xd, out_sp, offsets, perm = _windows(x, fs, strides, padding, ld, rd, dn)
    rs = _strings(dn, x.ndim - 2)[1]
    sp = [c for c in rs if c not in "OI"]
    wc = w.transpose([rs.index(c) for c in "OI" + "".join(sp)])
    n, c, s = xd.shape[0], xd.shape[1], len(offsets)
    out = np.zeros((n, wc.shape[0], *out_sp))
    for y in itertools.product(*(range(m) for m in out_sp)):
        for ci, (p, k) in itertools.product(range(c), enumerate(offsets)):
            idx = tuple(yy * st_ + kk * r for yy, st_, kk, r in zip(y, strides, k, rd))
            out[(slice(None), slice(None), *y)] += np.outer(
                xd[(slice(None), ci, *idx)], wc[(slice(None), ci * s + p, *y)]
            )
    return out.transpose(perm)


@st.composite
def cases(draw, max_n=2):
    s = draw(st.integers(1, 2))
    dn = draw(st.sampled_from(LAYOUTS[s]))
    ls, rs, _ = _strings(dn, s)
    sp = [c for c in rs if c not in "OI"]
    size = {"N": draw(st.integers(0, max_n)), "C": draw(st.integers(1, 3))}
    size.update({c: draw(st.integers(1, 5)) for c in sp})
    fs = tuple(draw(st.integers(1, 3)) for _ in sp)
    strides = tuple(draw(st.integers(1, 3)) for _ in sp)
    ld = tuple(draw(st.integers(1, 2)) for _ in sp)
    rd = tuple(draw(st.integers(1, 2)) for _ in sp)
    padding = draw(
        st.one_of(
            st.sampled_from(["SAME", "VALID", "SAME_LOWER"]),
            st.lists(st.tuples(st.integers(-1, 2), st.integers(-1, 2)), min_size=s, max_size=s),
        )
    )
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = rng.standard_normal([size[c] for c in ls])
    in_sp = [size[c] for c in sp]
    pads = _explicit_pads(in_sp, fs, strides, padding, rd)
    assume(all((n - 1) * d + 1 + lo + hi >= 0 for n, d, (lo, hi) in zip(in_sp, ld, pads)))
    return x, fs, strides, padding, ld, rd, dn


@given(cases())
def test_patches_against_loop(case):
    x, fs, strides, padding, ld, rd, dn = case
    want = patches_ref(*case)
    got = lax.conv_general_dilated_patches(x, fs, strides, padding, ld, rd, dn)
    assert got.shape == want.shape and np.asarray(got).dtype == np.float64
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)
    f = blu.jit(lambda a: lax.conv_general_dilated_patches(a, fs, strides, padding, ld, rd, dn))
    np.testing.assert_allclose(np.asarray(f(x)), want, rtol=1e-12, atol=1e-12)


def _local_weights(x, fs, strides, padding, ld, rd, dn, o, rng):
    """Weights in the kernel string's layout: O, I = C * prod(fs), the output's spatial sizes."""
    ls, rs, _ = _strings(dn, x.ndim - 2)
    want = patches_ref(x, fs, strides, padding, ld, rd, dn)
    os_ = _strings(dn, x.ndim - 2)[2]
    size = {"O": o, "I": want.shape[os_.index("C")]}
    size.update({c: want.shape[os_.index(c)] for c in rs if c not in "OI"})
    return rng.standard_normal([size[c] for c in rs])


@given(cases(), st.integers(1, 3))
def test_local_against_loop(case, o):
    x, fs, strides, padding, ld, rd, dn = case
    w = _local_weights(*case, o, np.random.default_rng(o))
    want = local_ref(x, w, fs, strides, padding, ld, rd, dn)
    got = lax.conv_general_dilated_local(x, w, strides, padding, fs, ld, rd, dn)
    assert got.shape == want.shape
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-10)


@given(cases(max_n=1))
def test_gradients_against_finite_differences(case):
    x, fs, strides, padding, ld, rd, dn = case
    assume(x.size > 0)
    w = _local_weights(*case, 2, np.random.default_rng(0))

    def patches(a):
        return lax.conv_general_dilated_patches(a, fs, strides, padding, ld, rd, dn)

    def local(a, b):
        return lax.conv_general_dilated_local(a, b, strides, padding, fs, ld, rd, dn)

    check_grads(patches, [x], order=1, atol=1e-6, rtol=1e-6)
    check_grads(local, [x, w], order=2, atol=1e-6, rtol=1e-6)


def test_vmap_against_a_loop_and_the_reference():
    rng = np.random.default_rng(1)
    dn, fs, strides, padding = ("NHWC", "HWIO", "NHWC"), (2, 3), (1, 2), "SAME"
    xs = rng.standard_normal((3, 2, 5, 4, 2))  # mapped over 3
    w = _local_weights(xs[0], fs, strides, padding, (1, 1), (1, 1), dn, 3, rng)
    ws = np.stack([w, 2 * w, -w])

    def local(x, w):
        return lax.conv_general_dilated_local(x, w, strides, padding, fs, dimension_numbers=dn)

    def patches(x):
        return lax.conv_general_dilated_patches(x, fs, strides, padding, dimension_numbers=dn)

    got = np.asarray(blu.vmap(local)(xs, ws))
    ref = [local_ref(x, w_, fs, strides, padding, (1, 1), (1, 1), dn) for x, w_ in zip(xs, ws)]
    np.testing.assert_allclose(got, np.stack(ref), rtol=1e-10, atol=1e-12)
    p = blu.vmap(patches)(xs)
    want_p = np.stack([patches_ref(x, fs, strides, padding, (1, 1), (1, 1), dn) for x in xs])
    np.testing.assert_allclose(np.asarray(p), want_p, rtol=1e-12, atol=1e-12)


def test_feature_order_channel_major_then_window():
    # JAX's documented order: "c" + the kernel's spatial letters (here c, w, h: W before H)
    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(1, 2, 3, 4)  # NCHW
    dn = ("NCHW", "OIWH", "NCHW")
    got = np.asarray(lax.conv_general_dilated_patches(x, (2, 3), (1, 1), "VALID", None, None, dn))
    assert got.dtype == np.float32 and got.shape == (1, 2 * 2 * 3, 1, 3)  # W window 2, H 3
    # output (h=0, w=0): channel c, window offset (dw, dh) row-major over (2 along W, 3 along H)
    want = [x[0, c, dh, dw] for c in range(2) for dw in range(2) for dh in range(3)]
    np.testing.assert_array_equal(got[0, :, 0, 0], want)


def test_dtypes_precision_and_no_new_primitive():
    x = np.arange(1 * 2 * 5, dtype=np.int32).reshape(1, 2, 5)
    p = lax.conv_general_dilated_patches(x, (3,), (2,), "VALID")
    assert np.asarray(p).dtype == np.int32
    np.testing.assert_array_equal(np.asarray(p)[0, :, 1], [2, 3, 4, 7, 8, 9])
    xf = x.astype(np.float32)
    p64 = lax.conv_general_dilated_patches(
        xf, (3,), (2,), "VALID", preferred_element_type=np.float64
    )
    assert np.asarray(p64).dtype == np.float64
    np.testing.assert_allclose(np.asarray(p64)[0, :, 0], [0, 1, 2, 5, 6, 7], rtol=1e-12)
    w = np.ones((4, 6, 2), np.float32)
    out = lax.conv_general_dilated_local(xf, w, (2,), "VALID", (3,), precision="highest")
    assert np.asarray(out).dtype == np.float32
    np.testing.assert_allclose(np.asarray(out)[0, :, 1], [33.0] * 4)  # 2+3+4 + 7+8+9
    local = lambda a, b: lax.conv_general_dilated_local(a, b, (2,), "VALID", (3,))  # noqa: E731
    jaxpr = str(blu.make_jaxpr(local)(xf, w))
    assert jaxpr.count("conv_general_dilated[") == 1 and jaxpr.count("dot_general[") == 1


def test_errors_name_the_shapes():
    x = np.ones((1, 2, 5, 5))
    with pytest.raises(BluShapeError, match=r"filter_shape \(3,\).*f64\[1,2,5,5\]"):
        lax.conv_general_dilated_patches(x, (3,), (1, 1), "VALID")
    with pytest.raises(BluValueError, match=r"f64\[1,2,5,5\].*padding.*FULL"):
        lax.conv_general_dilated_patches(x, (3, 3), (1, 1), "FULL")
    with pytest.raises(BluValueError, match=r"f64\[1,2,5,5\].*2 \(low, high\) pairs"):
        lax.conv_general_dilated_patches(x, (3, 3), (1, 1), [(0, 0)])
    with pytest.raises(BluValueError, match=r"f64\[1,2,5,5\].*crops spatial axis 1"):
        lax.conv_general_dilated_patches(x, (3, 3), (1, 1), [(0, 0), (-3, -3)])
    with pytest.raises(BluValueError, match="filter_shape"):
        lax.conv_general_dilated_patches(x, (3, 0), (1, 1), "VALID")
    with pytest.raises(BluValueError, match="window_strides"):
        lax.conv_general_dilated_patches(x, (3, 3), (1,), "VALID")
    with pytest.raises(BluTypeError, match="filter_shape"):
        lax.conv_general_dilated_patches(x, 3, (1,), "VALID")
    with pytest.raises(BluShapeError, match="no features"):
        lax.conv_general_dilated_patches(np.ones((1, 0, 5)), (3,), (1,), "VALID")
    with pytest.raises(BluShapeError, match=r"rhs f64\[4,18,3\].*rank of lhs f64\[1,2,5,5\]"):
        lax.conv_general_dilated_local(x, np.ones((4, 18, 3)), (1, 1), "VALID", (3, 3))
    with pytest.raises(BluShapeError, match=r"rhs f64\[4,18,3,4\] must have shape \(4, 18, 3, 3\)"):
        lax.conv_general_dilated_local(x, np.ones((4, 18, 3, 4)), (1, 1), "VALID", (3, 3))
    with pytest.raises(BluTypeError, match="dtype"):
        w32 = np.ones((4, 18, 3, 3), np.float32)
        lax.conv_general_dilated_local(x, w32, (1, 1), "VALID", (3, 3))
