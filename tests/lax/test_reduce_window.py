"""lax.reduce_window (sum, max, min) against a float64 loop, eager and jitted; gradients against
finite differences (max/min without ties, and JAX's first-maximum convention with ties); vmap
against a loop; the errors; blu.nn's pooling against numpy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.nn as nn
import blu.numpy as bnp
from blu import lax
from blu.core.errors import BluError, BluTypeError, BluValueError
from tests.helpers import check_grads, same_pads

_OPS = {
    "sum": (lax.add, 0.0, np.add),
    "max": (lax.max, -np.inf, np.maximum),
    "min": (lax.min, np.inf, np.minimum),
}
MONOIDS = tuple(sorted(_OPS))


def window_ref(x, monoid, wdims, strides, pads, bd, wd):
    """The definition by loops: dilate (holes hold the identity), pad or crop, reduce each
    window."""
    _, ident, ufunc = _OPS[monoid]
    dil = np.full([(d - 1) * b + 1 if d else 0 for d, b in zip(x.shape, bd)], ident)
    dil[tuple(slice(None, None, b) for b in bd)] = x
    for a, (lo, hi) in enumerate(pads):
        if lo < 0:
            dil = np.take(dil, range(-lo, dil.shape[a]), axis=a)
        if hi < 0:
            dil = np.take(dil, range(0, dil.shape[a] + hi), axis=a)
        widths = [(0, 0)] * dil.ndim
        widths[a] = (max(lo, 0), max(hi, 0))
        dil = np.pad(dil, widths, constant_values=ident)
    eff = [(w - 1) * d + 1 for w, d in zip(wdims, wd)]
    out_sp = [max((p - e) // s + 1, 0) for p, e, s in zip(dil.shape, eff, strides)]
    out = np.full(out_sp, ident)
    for pos in itertools.product(*map(range, out_sp)):
        for ks in itertools.product(*map(range, wdims)):
            idx = tuple(p * s + k * d for p, s, k, d in zip(pos, strides, ks, wd))
            out[pos] = ufunc(out[pos], dil[idx])
    return out


@st.composite
def cases(draw, dilated=True, monoids=MONOIDS):
    r = draw(st.integers(1, 3))
    shape = [draw(st.integers(1, 5)) for _ in range(r)]
    wdims = [draw(st.integers(1, 3)) for _ in range(r)]
    strides = [draw(st.integers(1, 3)) for _ in range(r)]
    bd = [draw(st.integers(1, 2)) if dilated else 1 for _ in range(r)]
    wd = [draw(st.integers(1, 2)) if dilated else 1 for _ in range(r)]
    pads = [(draw(st.integers(-1, 2)), draw(st.integers(-1, 2))) for _ in range(r)]
    # crops never take an axis below 0 (that is an error, tested apart)
    pads = [(lo, max(hi, -((d - 1) * b + 1 + lo))) for (lo, hi), d, b in zip(pads, shape, bd)]
    monoid = draw(st.sampled_from(monoids))
    x = np.random.default_rng(draw(st.integers(0, 2**16))).standard_normal(shape)
    return x, monoid, wdims, strides, pads, bd, wd


def _valid(x, pads, bd):
    return all((d - 1) * b + 1 + lo + hi >= 0 for d, (lo, hi), b in zip(x.shape, pads, bd))


def _rw(monoid, wdims, strides, pads, bd, wd):
    op, init, _ = _OPS[monoid]
    return lambda a: lax.reduce_window(a, init, op, wdims, strides, pads, bd, wd)


@settings(max_examples=25, deadline=None)
@given(cases())
def test_forward_against_loop_eager_and_jit(case):
    x, monoid, wdims, strides, pads, bd, wd = case
    if not _valid(x, pads, bd):
        return
    want = window_ref(x, monoid, wdims, strides, pads, bd, wd)
    f = _rw(monoid, wdims, strides, pads, bd, wd)
    np.testing.assert_allclose(np.asarray(f(x)), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(blu.jit(f)(x)), want, rtol=1e-12, atol=1e-12)


@settings(max_examples=20, deadline=None)
@given(cases())
def test_gradients_against_finite_differences(case):
    x, monoid, wdims, strides, pads, bd, wd = case
    if not _valid(x, pads, bd):
        return
    rw = _rw(monoid, wdims, strides, pads, bd, wd)
    finite = np.isfinite(np.asarray(rw(x)))  # a window of pads only is +-inf: masked out

    def f(a):
        return bnp.where(finite, rw(a), 0.0)

    # distinct values (normal draws) keep max/min differentiable: no ties
    check_grads(f, [x], order=2 if monoid == "sum" else 1, atol=1e-6, rtol=1e-6)


@settings(max_examples=15, deadline=None)
@given(cases(), st.integers(0, 1))
def test_vmap_against_loop(case, axis):
    x, monoid, wdims, strides, pads, bd, wd = case
    if not _valid(x, pads, bd):
        return
    f = _rw(monoid, wdims, strides, pads, bd, wd)
    xs = np.stack([x, -x, 2 * x], axis)
    got = np.asarray(blu.vmap(f, in_axes=axis)(xs))
    want = np.stack([np.asarray(f(np.take(xs, k, axis))) for k in range(3)])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_max_gradient_with_ties_goes_to_the_first_maximum():
    # windows (1,3) (3,3) (3,2): the tie in the middle window sends its cotangent to index 1,
    # the first maximum in the window (XLA's select-and-scatter with >=, as JAX)
    x = np.array([1.0, 3.0, 3.0, 2.0])
    g = blu.grad(lambda a: lax.reduce_window(a, -np.inf, lax.max, (2,), (1,), "VALID").sum())(x)
    np.testing.assert_array_equal(np.asarray(g), [0.0, 2.0, 1.0, 0.0])
    g = blu.grad(lambda a: lax.reduce_window(a, np.inf, lax.min, (2,), (1,), "VALID").sum())(-x)
    np.testing.assert_array_equal(np.asarray(g), [0.0, 2.0, 1.0, 0.0])


@pytest.mark.parametrize("wdims, dtype", [((3, 3), np.int8), ((3, 42), np.int8),
                                           ((2, 64), np.int16), ((1, 200), np.int16)])  # fmt: skip
def test_max_offsets_in_the_narrowest_integer_and_a_wide_windows_gradient(wdims, dtype):
    # ``which`` holds a window offset: int8 up to 127 offsets, int16 beyond (a 200-wide window
    # names offset 199, which int8 would wrap); the gradient against the first-maximum loop
    rng = np.random.default_rng(5)
    x = rng.permutation(4 * 230).reshape(4, 230).astype(np.float64)  # distinct: no ties
    rw = _rw("max", wdims, (1, 3), ((0, 0), (0, 0)), (1, 1), (1, 1))
    jaxpr = blu.make_jaxpr(lambda a: blu.jvp(rw, (a,), (a,))[1])(x).jaxpr
    (gather,) = [e for e in jaxpr.eqns if e.primitive.name == "window_gather"]
    assert gather.invars[1].aval.dtype == dtype
    c = rng.standard_normal(np.shape(rw(x)))
    g = np.asarray(blu.jit(blu.grad(lambda a: (rw(a) * c).sum()))(x))
    want = np.zeros_like(x)
    for i, j in itertools.product(*map(range, c.shape)):
        win = x[i : i + wdims[0], 3 * j : 3 * j + wdims[1]]
        a, b = np.unravel_index(np.argmax(win), win.shape)
        want[i + a, 3 * j + b] += c[i, j]
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "monoid, wdims, strides, pads, bd, wd",
    [
        ("max", (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), (1, 1)),
        ("max", (2, 3), (1, 2), ((0, 2), (-1, 1)), (2, 1), (1, 2)),
        ("min", (3, 1), (2, 1), ((2, 0), (0, 0)), (1, 2), (2, 1)),
    ],
)
def test_compiled_gradient_matches_eager(monoid, wdims, strides, pads, bd, wd):
    """The derivative primitives' decompositions (compiled) against their numpy impls."""
    x = np.random.default_rng(3).standard_normal((5, 6))
    rw = _rw(monoid, wdims, strides, pads, bd, wd)
    c = np.random.default_rng(4).standard_normal(np.shape(rw(x)))

    def loss(a):
        y = rw(a)
        return bnp.where(bnp.isfinite(y), y * c, 0.0).sum()

    want = np.asarray(blu.grad(loss)(x))
    np.testing.assert_allclose(np.asarray(blu.jit(blu.grad(loss))(x)), want, rtol=1e-12)
    # forward over reverse: the gather's transpose transposed back
    hvp = blu.jvp(blu.grad(loss), (x,), (x,))[1]
    np.testing.assert_allclose(
        np.asarray(blu.jit(lambda a, t: blu.jvp(blu.grad(loss), (a,), (t,))[1])(x, x)),
        np.asarray(hvp),
        atol=1e-12,
    )


@settings(max_examples=40, deadline=None)
@given(cases(dilated=False, monoids=("max", "min")))
def test_window_scatter_over_windows_matches_the_loop(case):
    """Without dilations the max pool's gradient gathers, for each element, the ``prod(ceil(w /
    s))`` windows that hold it (``window_select._scatter_windows``), not the ``prod(w)`` offsets
    of the cotangent padded with stride holes: compiled, against the first-extremum loop (sizes,
    windows, strides and crops at random; normal draws are distinct, so no ties)."""
    x, monoid, wdims, strides, pads, bd, wd = case
    if not _valid(x, pads, bd):
        return
    rw = _rw(monoid, wdims, strides, pads, bd, wd)
    y = np.asarray(rw(x))
    if y.size == 0 or not np.isfinite(y).all():
        return  # (a window of padding only: no element gets its cotangent)
    c = np.random.default_rng(1).standard_normal(y.shape)
    g = np.asarray(blu.jit(blu.grad(lambda a: (rw(a) * c).sum()))(x))
    pick = np.argmax if monoid == "max" else np.argmin
    want = np.zeros_like(x)
    lows = [lo for lo, _ in pads]
    for pos in itertools.product(*map(range, y.shape)):
        starts = [p * s - lo for p, s, lo in zip(pos, strides, lows)]
        idx = [range(max(b, 0), min(b + w, n)) for b, w, n in zip(starts, wdims, x.shape)]
        cells = list(itertools.product(*idx))
        vals = [x[q] for q in cells]  # (padding holds the identity: never picked)
        want[cells[int(pick(vals))]] += c[pos]
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-12)


def test_max_pool_gradient_reads_four_windows_without_holes():
    """A 3x3 stride-2 max pool's gradient: no interior (stride-hole) padding in its jaxpr and
    four slices of the cotangent (the windows that hold an element), not nine."""
    x = np.random.default_rng(2).standard_normal((2, 11, 11, 3)).astype(np.float32)

    def loss(a):
        return nn.max_pool(a, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1))).sum()

    jaxpr = blu.make_jaxpr(blu.grad(loss))(x).jaxpr
    eqns = [e for e in jaxpr.eqns if e.primitive.name == "window_scatter"]
    assert len(eqns) == 1
    inner = blu.make_jaxpr(lambda c, w: eqns[0].primitive.decomposition(c, w, **eqns[0].params))(
        *[np.zeros(v.aval.shape, v.aval.dtype) for v in eqns[0].invars]).jaxpr  # fmt: skip
    pads = [e for e in inner.eqns if e.primitive.name == "pad"]
    assert pads and all(lo_hi_in[2] == 0 for e in pads for lo_hi_in in e.params["padding_config"])
    slices = [e for e in inner.eqns if e.primitive.name == "slice"]
    assert len(slices) == 2 * 4  # the cotangent's and the offsets' four windows


@settings(max_examples=25, deadline=None)
@given(cases(), st.sampled_from(["SAME", "SAME_LOWER"]))
def test_same_padding_spans_the_dilated_window(case, padding):
    # JAX's: "SAME" pads for the window's extent after window_dilation, (w - 1) * d + 1
    x, monoid, wdims, strides, _, _, wd = case
    bd = [1] * x.ndim
    eff = [(w - 1) * d + 1 for w, d in zip(wdims, wd)]
    want = window_ref(
        x,
        monoid,
        wdims,
        strides,
        same_pads(x.shape, eff, strides, padding == "SAME_LOWER"),
        bd,
        wd,
    )
    assert want.shape == tuple(-(-n // s) for n, s in zip(x.shape, strides))
    f = _rw(monoid, wdims, strides, padding, bd, wd)
    np.testing.assert_allclose(np.asarray(f(x)), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(blu.jit(f)(x)), want, rtol=1e-12, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(cases(), st.sampled_from([None, "SAME", "SAME_LOWER", "VALID"]))
def test_shape_tuple_is_the_loops_shape(case, padding):
    x, monoid, wdims, strides, pads, bd, wd = case
    if padding is not None:  # the strings pad for the dilated window (no base dilation)
        bd = [1] * x.ndim
        eff = [(w - 1) * d + 1 for w, d in zip(wdims, wd)]
        pads = (
            [(0, 0)] * x.ndim
            if padding == "VALID"
            else same_pads(x.shape, eff, strides, padding == "SAME_LOWER")
        )
    if not _valid(x, pads, bd):
        return
    want = window_ref(x, monoid, wdims, strides, pads, bd, wd).shape
    got = lax.reduce_window_shape_tuple(x.shape, wdims, strides, padding or pads, bd, wd)
    assert got == want and all(type(n) is int for n in got)


def test_shape_tuple_is_jax_arithmetic():
    # (5 dilated by 2 = 9, + 1 + 2 = 12; window 3 dilated by 2 = 5): (12 - 5) // 2 + 1 = 4;
    # a size-0 axis and a window wider than the axis give 0
    got = lax.reduce_window_shape_tuple(
        (5, 0, 3), (3, 1, 4), (2, 1, 1), ((1, 2), (0, 0), (0, 0)), (2, 1, 1), (2, 1, 1)
    )
    assert got == (4, 0, 0)
    assert lax.reduce_window_shape_tuple((7,), (3,), (2,), "SAME") == (4,)
    with pytest.raises(BluValueError, match=r"\(3, 4\): window_dimensions must be 2 ints"):
        lax.reduce_window_shape_tuple((3, 4), (2,), (1, 1), ((0, 0), (0, 0)))
    with pytest.raises(BluValueError, match="negative size"):
        lax.reduce_window_shape_tuple((3, -1), (1, 1), (1, 1), "VALID")
    with pytest.raises(BluTypeError, match="operand_shape"):
        lax.reduce_window_shape_tuple("ab", (1, 1), (1, 1), "VALID")


def test_integer_max_and_errors():
    x = np.array([[3, -7, 5], [1, 2, -9]], np.int32)
    imin = np.iinfo(np.int32).min
    out = lax.reduce_window(x, imin, lax.max, (2, 2), (1, 1), "SAME")
    np.testing.assert_array_equal(np.asarray(out), [[3, 5, 5], [2, 2, -9]])
    assert np.asarray(out).dtype == np.int32
    # other computations and init values take the general path (test_reduce_window_general)
    with pytest.raises(BluValueError, match="must be 2 ints"):
        lax.reduce_window(x, imin, lax.max, (2,), (1,), [(0, 0)])
    with pytest.raises(BluError, match="padding"):
        lax.reduce_window(x, imin, lax.max, (2, 2), (1, 1), "FULL")


def test_sum_with_a_function_tracing_to_add():
    x = np.arange(6.0).reshape(2, 3)
    out = lax.reduce_window(x, 0.0, lambda a, b: a + b, (2, 2), (1, 1), "VALID")
    np.testing.assert_allclose(np.asarray(out), [[8.0, 12.0]])


# ---- blu.nn pooling ----------------------------------------------------------------------------


def test_max_and_avg_pool_nhwc_against_numpy():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 6, 4, 3)).astype(np.float32)
    blocks = x.reshape(2, 3, 2, 2, 2, 3)  # non-overlapping 2x2 windows
    np.testing.assert_allclose(np.asarray(nn.max_pool(x, (2, 2), (2, 2))), blocks.max((2, 4)))
    np.testing.assert_allclose(
        np.asarray(nn.avg_pool(x, (2, 2), (2, 2))), blocks.mean((2, 4)), rtol=1e-6
    )
    np.testing.assert_allclose(np.asarray(nn.min_pool(x[0], (2, 2), (2, 2))), blocks[0].min((1, 3)))
    # SAME padding: 3x3 windows at the border see fewer elements
    x64 = x.astype(np.float64)
    s = window_ref(
        x64, "sum", (1, 3, 3, 1), (1, 1, 1, 1), [(0, 0), (1, 1), (1, 1), (0, 0)], (1,) * 4, (1,) * 4
    )
    np.testing.assert_allclose(np.asarray(nn.avg_pool(x64, (3, 3), padding="SAME")), s / 9)
    counts = window_ref(
        np.ones((1, 6, 4, 1)),
        "sum",
        (1, 3, 3, 1),
        (1,) * 4,
        [(0, 0), (1, 1), (1, 1), (0, 0)],
        (1,) * 4,
        (1,) * 4,
    )
    got = nn.avg_pool(x64, (3, 3), padding="SAME", count_include_pad=False)
    np.testing.assert_allclose(np.asarray(got), s / counts)
    m = window_ref(
        x64, "max", (1, 3, 3, 1), (1, 2, 2, 1), [(0, 0), (1, 1), (1, 1), (0, 0)], (1,) * 4, (1,) * 4
    )
    np.testing.assert_allclose(np.asarray(nn.max_pool(x64, (3, 3), (2, 2), ((1, 1), (1, 1)))), m)


def test_pool_gradients_and_errors():
    x = np.random.default_rng(1).standard_normal((1, 5, 4, 2))
    check_grads(lambda a: nn.avg_pool(a, (2, 2), (1, 2), "SAME"), [x], order=1)
    check_grads(lambda a: nn.max_pool(a, (3, 2), (2, 1), "VALID"), [x], order=1)
    with pytest.raises(BluError, match="strides"):
        nn.max_pool(x, (2, 2), (1,))
    with pytest.raises(BluError, match="padding"):
        nn.avg_pool(x, (2, 2), padding=((1, 1),))


@pytest.mark.parametrize("keep", [True, False])
def test_a_remat_policy_can_keep_the_pool_offsets(keep):
    # saved (int8, the pooled shape), they cross from the forward's kernel to the backward's
    # instead of being found again there; the gradient is the same either way
    x = np.random.default_rng(6).standard_normal((2, 8, 8, 3)).astype(np.float32)
    block = lambda a: nn.max_pool(nn.relu(a), (3, 3), (2, 2), ((1, 1), (1, 1)))  # noqa: E731
    names = (nn.POOL_OFFSETS,) if keep else ()
    rem = blu.checkpoint(block, policy=blu.checkpoint_policies.save_only_these_names(*names))
    grad = blu.jit(blu.grad(lambda a: (rem(a) ** 2).sum()))
    nodes = grad.lower(x, target="cuda:sm_90")._program.plan.nodes
    crossing = {v.aval.str_short() for n in nodes if n.kind == "kernel" for v in n.outputs}
    assert ("i8[2,4,4,3]" in crossing) == keep, crossing
    want = blu.grad(lambda a: (block(a) ** 2).sum())(x)
    np.testing.assert_allclose(np.asarray(grad(x)), np.asarray(want), rtol=1e-6)


def test_reduce_window_strides_and_padding_default_as_jax():
    # JAX's window_strides=None (1 on every axis) and padding="VALID"; they were required
    x = np.arange(12.0).reshape(3, 4)
    want = np.array([[x[i : i + 2, j : j + 2].sum() for j in range(3)] for i in range(2)])

    def f(v):
        return lax.reduce_window(v, 0.0, lax.add, (2, 2))

    for fn in (f, blu.jit(f)):
        got = fn(x)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)
