"""lax.conv_general_dilated against a float64 loop (and scipy.signal), its gradients against
finite differences, vmap vs a loop, jit; numpy.convolve/correlate against NumPy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.signal
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu import lax
from blu.core.errors import BluError, BluTypeError, BluValueError
from tests.helpers import check_grads


def conv_ref(x, w, strides, pads, ld, rd, groups):
    """The definition, by loops: x (N, C, *sp), w (O, C/G, *win), float64."""
    n, c, *sp = x.shape
    o, i, *win = w.shape
    s = len(sp)
    dil = np.zeros([n, c] + [(d - 1) * l + 1 if d else 0 for d, l in zip(sp, ld)])
    dil[(slice(None), slice(None), *(slice(None, None, l) for l in ld))] = x
    for ax, (lo, hi) in enumerate(pads):  # pad (or crop) one axis at a time
        a = 2 + ax
        if lo < 0:
            dil = np.take(dil, range(-lo, dil.shape[a]), axis=a)
        if hi < 0:
            dil = np.take(dil, range(0, dil.shape[a] + hi), axis=a)
        widths = [(0, 0)] * dil.ndim
        widths[a] = (max(lo, 0), max(hi, 0))
        dil = np.pad(dil, widths)
    eff = [(k - 1) * r + 1 if k else 0 for k, r in zip(win, rd)]
    out_sp = [max((p - e) // st + 1, 0) for p, e, st in zip(dil.shape[2:], eff, strides)]
    out = np.zeros([n, o, *out_sp])
    og = o // groups
    for b, oc in itertools.product(range(n), range(o)):
        g = oc // og
        for pos in itertools.product(*(range(m) for m in out_sp)):
            acc = 0.0
            for ic in range(i):
                for ks in itertools.product(*(range(k) for k in win)):
                    idx = tuple(p * st + k * r for p, st, k, r in zip(pos, strides, ks, rd))
                    acc += dil[(b, g * i + ic, *idx)] * w[(oc, ic, *ks)]
            out[(b, oc, *pos)] = acc
    assert len(out_sp) == s
    return out


@st.composite
def conv_cases(draw):
    s = draw(st.integers(1, 2))
    g = draw(st.integers(1, 2))
    n = draw(st.integers(0, 2))
    cg, og = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    sp = [draw(st.integers(1, 5)) for _ in range(s)]
    win = [draw(st.integers(1, 3)) for _ in range(s)]
    strides = [draw(st.integers(1, 2)) for _ in range(s)]
    ld = [draw(st.integers(1, 2)) for _ in range(s)]
    rd = [draw(st.integers(1, 2)) for _ in range(s)]
    padding = draw(
        st.one_of(
            st.sampled_from(["SAME", "VALID", "SAME_LOWER"]),
            st.lists(st.tuples(st.integers(-1, 2), st.integers(-1, 2)), min_size=s, max_size=s),
        )
    )
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal([n, g * cg, *sp])
    w = rng.standard_normal([g * og, cg, *win])
    return x, w, strides, padding, ld, rd, g


def _pads(x, w, strides, padding, rd):
    if isinstance(padding, str):
        eff = [(k - 1) * r + 1 for k, r in zip(w.shape[2:], rd)]
        return lax.padtype_to_pads(x.shape[2:], eff, strides, padding)
    return padding


def _valid(x, w, strides, padding, ld, rd):
    pads = _pads(x, w, strides, padding, rd)
    dil = [(d - 1) * l + 1 for d, l in zip(x.shape[2:], ld)]
    return all(d + lo + hi >= 0 for d, (lo, hi) in zip(dil, pads))


@given(conv_cases())
def test_conv_against_loop(case):
    x, w, strides, padding, ld, rd, g = case
    if not _valid(x, w, strides, padding, ld, rd):
        return
    want = conv_ref(x, w, strides, _pads(x, w, strides, padding, rd), ld, rd, g)
    f = lambda a, b: lax.conv_general_dilated(  # noqa: E731
        a, b, strides, padding, ld, rd, feature_group_count=g
    )
    got = np.asarray(f(x, w))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.asarray(blu.jit(f)(x, w)), want, rtol=1e-10, atol=1e-10)


@given(conv_cases())
def test_conv_gradients(case):
    x, w, strides, padding, ld, rd, g = case
    if not _valid(x, w, strides, padding, ld, rd) or x.size == 0:
        return
    x, w = x[:1], w

    def f(a, b):
        return lax.conv_general_dilated(a, b, strides, padding, ld, rd, feature_group_count=g)

    check_grads(f, [x, w], order=2, atol=1e-5, rtol=1e-5)


def test_nhwc_and_hwio_layouts_match_nchw():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 6, 5))  # NCHW
    w = rng.standard_normal((4, 3, 3, 2))  # OIHW
    ref = conv_ref(x, w, (2, 1), lax.padtype_to_pads((6, 5), (3, 2), (2, 1), "SAME"),
                   (1, 1), (1, 1), 1)  # fmt: skip
    got = lax.conv_general_dilated(
        x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0), (2, 1), "SAME",
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )  # fmt: skip
    np.testing.assert_allclose(np.asarray(got), ref.transpose(0, 2, 3, 1), rtol=1e-10)
    dn = lax.conv_dimension_numbers(x.shape, w.shape, ("NCHW", "OIHW", "NHWC"))
    assert dn == lax.ConvDimensionNumbers((0, 1, 2, 3), (0, 1, 2, 3), (0, 3, 1, 2))
    got2 = lax.conv_general_dilated(x, w, (2, 1), "SAME", dimension_numbers=dn)
    np.testing.assert_allclose(np.asarray(got2), ref.transpose(0, 2, 3, 1), rtol=1e-10)


def test_against_scipy_correlate():
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((1, 1, 9, 7)), rng.standard_normal((1, 1, 4, 3))
    for mode, pad in (("valid", "VALID"), ("full", [(3, 3), (2, 2)])):
        got = lax.conv_general_dilated(x, w, (1, 1), pad)[0, 0]
        want = scipy.signal.correlate(x[0, 0], w[0, 0], mode=mode)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-12)


def test_depthwise_and_vmap_against_loop():
    rng = np.random.default_rng(5)
    xs = rng.standard_normal((3, 2, 4, 6))  # vmapped over 3, conv batch 2, C = 4
    w = rng.standard_normal((4, 1, 3))  # depthwise: G = C = 4

    def f(x):
        return lax.conv_general_dilated(x, w, (1,), "SAME", feature_group_count=4)

    got = np.asarray(blu.vmap(f)(xs))
    want = np.stack([np.asarray(f(x)) for x in xs])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    ref = conv_ref(xs[0], w, (1,), [(1, 1)], (1,), (1,), 4)
    np.testing.assert_allclose(got[0], ref, rtol=1e-10)
    gx = blu.vmap(blu.grad(lambda x: bnp.sum(f(x) ** 2)))(xs)
    want_g = np.stack([np.asarray(blu.grad(lambda x: bnp.sum(f(x) ** 2))(x)) for x in xs])
    np.testing.assert_allclose(np.asarray(gx), want_g, rtol=1e-12)


def test_float32_and_errors():
    x = np.ones((1, 2, 5), np.float32)
    w = np.ones((3, 2, 2), np.float32)
    out = lax.conv_general_dilated(x, w, (1,), "VALID")
    assert np.asarray(out).dtype == np.float32 and out.shape == (1, 3, 4)
    np.testing.assert_array_equal(np.asarray(out), 4.0)
    with pytest.raises(BluError, match="dtype"):
        lax.conv_general_dilated(x, w.astype(np.float64), (1,), "VALID")
    with pytest.raises(BluError, match="feature_group_count"):
        lax.conv_general_dilated(x, w, (1,), "VALID", feature_group_count=2)
    with pytest.raises(BluError, match="batch_group_count"):
        lax.conv_general_dilated(x, w, (1,), "VALID", batch_group_count=2)
    with pytest.raises(BluError, match="padding"):
        lax.conv_general_dilated(x, w, (1,), "FULL")
    with pytest.raises(BluError, match="window_strides"):
        lax.conv_general_dilated(x, w, (0,), "VALID")


# ---- numpy.convolve / correlate ----------------------------------------------------------------


@given(st.integers(1, 7), st.integers(1, 7), st.sampled_from(["full", "same", "valid"]))
def test_convolve_correlate_against_numpy(m, n, mode):
    rng = np.random.default_rng(m * 10 + n)
    a, v = rng.standard_normal(m), rng.standard_normal(n)
    np.testing.assert_allclose(np.asarray(bnp.convolve(a, v, mode)), np.convolve(a, v, mode),
                               rtol=1e-10, atol=1e-12)  # fmt: skip
    np.testing.assert_allclose(np.asarray(bnp.correlate(a, v, mode)), np.correlate(a, v, mode),
                               rtol=1e-10, atol=1e-12)  # fmt: skip
    check_grads(lambda p, q: bnp.convolve(p, q, mode), [a, v], order=2)


def test_convolve_dtypes_and_errors():
    out = bnp.convolve(np.array([1, 2, 3]), np.array([0, 1]))
    assert np.asarray(out).dtype == np.float32  # ints promote to the default float (as JAX)
    np.testing.assert_array_equal(np.asarray(out), [0, 1, 2, 3])
    with pytest.raises(BluError, match="1-d"):
        bnp.convolve(np.ones((2, 2)), np.ones(2))
    with pytest.raises(BluError, match="empty"):
        bnp.convolve(np.ones(0), np.ones(2))
    with pytest.raises(BluError, match="mode"):
        bnp.convolve(np.ones(3), np.ones(2), "circular")


# ---- the shape helpers: conv_general_permutations, conv_*shape_tuple -----------------------------


def test_conv_general_permutations_by_hand():
    assert lax.conv_general_permutations(("NHWC", "HWIO", "NHWC")) == (
        (0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2),
    )  # fmt: skip
    # the spatial axes ordered as in the kernel's string: W before H
    assert lax.conv_general_permutations(["NCHW", "OIWH", "NHCW"]) == (
        (0, 1, 3, 2), (0, 1, 2, 3), (0, 2, 3, 1),
    )  # fmt: skip
    assert lax.conv_general_permutations(("CN", "IO", "NC")) == ((1, 0), (1, 0), (0, 1))
    for bad, err in (
        ("NCHW", BluTypeError),  # not three strings
        ((0, 1, 2), BluTypeError),
        (("NCH", "OIHW", "NCHW"), BluValueError),  # lengths differ
        (("NCHH", "OIHW", "NCHW"), BluValueError),  # a repeated letter
        (("NCHW", "OIHW", "NCHX"), BluValueError),  # different spatial letters
        (("NXHW", "OIHW", "NCHW"), BluValueError),  # no C
    ):
        with pytest.raises(err):
            lax.conv_general_permutations(bad)


def _out_size(n, k, st, pad):
    """The forward convolution's output size by cases (k = the dilated window)."""
    if pad == "SAME" or pad == "SAME_LOWER":
        return -(-n // st)
    if pad == "VALID":
        return max(-(-(n - k + 1) // st), 0)
    return max((n + pad[0] + pad[1] - k) // st + 1, 0)


@given(
    st.lists(st.tuples(st.integers(1, 6), st.integers(1, 4), st.integers(1, 3)), min_size=1,
             max_size=2),
    st.sampled_from(["SAME", "VALID", "SAME_LOWER", "pairs"]),
    st.integers(1, 3), st.integers(1, 2), st.integers(0, 2**16),
)  # fmt: skip
def test_conv_shape_tuples_against_cases_and_the_convolution(dims, padding, c, bg, seed):
    rng = np.random.default_rng(seed)
    sp, win, strides = (tuple(d[i] for d in dims) for i in range(3))
    if padding == "pairs":
        padding = [(int(rng.integers(-1, 3)), int(rng.integers(-1, 3))) for _ in dims]
    n, o = 2 * bg, 3 * bg
    want = (n // bg, o, *(_out_size(a, k, s, p) for a, k, s, p in
                          zip(sp, win, strides, [padding] * len(dims) if isinstance(padding, str)
                              else padding)))  # fmt: skip
    lhs_shape, rhs_shape = (n, c, *sp), (o, c, *win)
    assert lax.conv_shape_tuple(lhs_shape, rhs_shape, strides, padding, bg) == want
    x, w = np.ones(lhs_shape), np.ones(rhs_shape)
    out = lax.conv_general_dilated(x, w, strides, padding, batch_group_count=bg)
    assert out.shape == want
    # channels-last layouts: the same sizes laid out by the strings
    dn = (("NWC", "WIO", "NWC"), ("NHWC", "HWIO", "NHWC"))[len(dims) - 1]
    got = lax.conv_general_shape_tuple(
        np.moveaxis(x, 1, -1).shape, np.moveaxis(w, (0, 1), (-1, -2)).shape, strides, padding,
        dn,
    )  # fmt: skip
    assert got == (n, *want[2:], o)  # no batch groups here


@given(
    st.lists(st.tuples(st.integers(1, 5), st.integers(1, 4), st.integers(1, 3)), min_size=1,
             max_size=2),
    st.sampled_from(["SAME", "VALID", "pairs"]), st.integers(0, 2**16),
)  # fmt: skip
def test_conv_transpose_shape_tuple_against_keras_and_conv_transpose(dims, padding, seed):
    rng = np.random.default_rng(seed)
    sp, win, strides = (tuple(d[i] for d in dims) for i in range(3))
    if padding == "pairs":
        padding = [(int(rng.integers(0, 3)), int(rng.integers(0, 3))) for _ in dims]
    if padding == "SAME":  # Keras's Conv2DTranspose sizes
        out_sp = [a * s for a, s in zip(sp, strides)]
    elif padding == "VALID":
        out_sp = [a * s + max(k - s, 0) for a, k, s in zip(sp, win, strides)]
    else:  # the transposed convolution's own padding of the input dilated by the strides
        out_sp = [max((a - 1) * s + 1 + lo + hi - k + 1, 0)
                  for a, k, s, (lo, hi) in zip(sp, win, strides, padding)]  # fmt: skip
    dn = (("NWC", "WIO", "NWC"), ("NHWC", "HWIO", "NHWC"))[len(dims) - 1]
    lhs_shape, rhs_shape = (2, *sp, 3), (*win, 3, 4)
    want = (2, *out_sp, 4)
    assert lax.conv_transpose_shape_tuple(lhs_shape, rhs_shape, strides, padding, dn) == want
    got = lax.conv_transpose(np.ones(lhs_shape), np.ones(rhs_shape), strides, padding)
    assert got.shape == want


def test_conv_shape_tuple_errors_name_the_shapes():
    with pytest.raises(BluError, match=r"\(1, 2, 5\).*\(3, 2\)"):  # ranks differ
        lax.conv_shape_tuple((1, 2, 5), (3, 2), (1,), "VALID")
    with pytest.raises(BluValueError, match="padding.*FULL"):
        lax.conv_shape_tuple((1, 2, 5), (3, 2, 2), (1,), "FULL")
    with pytest.raises(BluValueError, match="1 \\(low, high\\) pairs"):
        lax.conv_shape_tuple((1, 2, 5), (3, 2, 2), (1,), [(0, 0), (1, 1)])
    with pytest.raises(
        BluValueError, match=r"crops spatial axis 0.*\(1, 2, 5\)|\(1, 2, 5\).*crops"
    ):
        lax.conv_shape_tuple((1, 2, 5), (3, 2, 2), (1,), [(-3, -3)])
    with pytest.raises(BluValueError, match="batch_group_count=2"):
        lax.conv_shape_tuple((3, 2, 5), (4, 2, 2), (1,), "VALID", batch_group_count=2)
    with pytest.raises(BluValueError, match="strides"):
        lax.conv_general_shape_tuple((1, 5, 2), (2, 2, 3), (0,), "VALID", ("NWC", "WIO", "NWC"))
    with pytest.raises(BluValueError, match="SAME_LOWER"):  # no transposed SAME_LOWER
        lax.conv_transpose_shape_tuple((1, 5, 2), (2, 2, 3), (2,), "SAME_LOWER",
                                       ("NWC", "WIO", "NWC"))  # fmt: skip


@pytest.mark.parametrize("bad", [1.5, 2.0, "2", "x", None, [2]])
def test_counts_strides_and_pads_that_are_not_ints_are_refused(bad):
    # int() truncated 1.5 to 1 and read "2" (batch_group_count=2.5 gave batch 2, strides of 1.5
    # stride 1), "x" was a plain ValueError: JAX takes ints only (operator.index)
    x, w = np.ones((4, 2, 5)), np.ones((4, 2, 2))
    with pytest.raises(BluTypeError, match="batch_group_count must be an int"):
        lax.conv_shape_tuple(x.shape, w.shape, (1,), "VALID", batch_group_count=bad)
    for kw in ("batch_group_count", "feature_group_count"):
        with pytest.raises(BluTypeError, match=f"{kw} must be an int"):
            lax.conv_general_dilated(x, w, (1,), "VALID", **{kw: bad})
    with pytest.raises(BluTypeError, match="strides"):
        lax.conv_shape_tuple(x.shape, w.shape, (bad,), "VALID")
    with pytest.raises(BluTypeError, match="window_strides"):
        lax.conv_general_dilated(x, w, (bad,), "VALID")
    with pytest.raises(BluTypeError, match="padding"):
        lax.conv_general_dilated(x, w, (1,), [(bad, 0)])


def test_numpy_ints_are_counts():
    x, w = np.ones((4, 2, 5)), np.ones((4, 2, 2))
    want = (2, 4, 4)
    assert lax.conv_shape_tuple(x.shape, w.shape, (np.int64(1),), "VALID", np.int32(2)) == want
    out = lax.conv_general_dilated(x, w, (np.int64(1),), [(np.int8(0), 0)],
                                   batch_group_count=np.int64(2))  # fmt: skip
    assert out.shape == want
