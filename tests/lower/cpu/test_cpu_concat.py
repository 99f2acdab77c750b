"""Sums of zero-padded parts that tile their output, done by the CPU as copies
(``blu/lower/cpu/concat.py``): which sums qualify (against a Python count of how often each
output position is covered), the rewritten programs' values against numpy float64, and the
gradient of splitting an array (``qkv[:, :, i]``) against finite differences."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu import lax
from blu.lower.cpu import concat


def _covered_once(pads, out_shape) -> int | None:
    """The tiling axis by brute force: each operand's region of the output marked in a count
    array; the operands tile the output when every element is covered exactly once and each
    operand is padded on one shared axis only, without interior or negative padding."""
    if len(pads) < 2:
        return None
    axes = set()
    for shape, cfg in pads:
        for d, (lo, hi, interior) in enumerate(cfg):
            if interior or lo < 0 or hi < 0 or lo + shape[d] + hi != out_shape[d]:
                return None
            if lo or hi:
                axes.add(d)
    if len(axes) != 1:
        return None
    (axis,) = axes
    count = np.zeros(out_shape[axis], np.int64)
    for shape, cfg in pads:
        lo = cfg[axis][0]
        count[lo : lo + shape[axis]] += 1
    return axis if np.all(count == 1) else None


@st.composite
def _pads(draw):
    """Operands splitting one axis of a random shape (size-0/1 dims included), then maybe one
    mutation: a part shifted (overlap or gap), a second padded axis, interior or negative
    padding, a part dropped."""
    nd = draw(st.integers(1, 4))
    shape = draw(st.lists(st.integers(0, 4), min_size=nd, max_size=nd))
    axis = draw(st.integers(0, nd - 1))
    k = draw(st.integers(2, 4))
    cuts = sorted(draw(st.lists(st.integers(0, shape[axis]), min_size=k - 1, max_size=k - 1)))
    bounds = [0, *cuts, shape[axis]]
    pads = []
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        s = list(shape)
        s[axis] = hi - lo
        cfg = [[0, 0, 0] for _ in range(nd)]
        cfg[axis] = [lo, shape[axis] - hi, 0]
        pads.append([s, cfg])
    mutation = draw(st.sampled_from(["none", "shift", "axis", "interior", "negative", "drop"]))
    i = draw(st.integers(0, k - 1))
    s, cfg = pads[i]
    if mutation == "shift" and cfg[axis][0] + cfg[axis][1] > 0:
        step = 1 if cfg[axis][1] > 0 else -1
        cfg[axis][0] += step
        cfg[axis][1] -= step
    elif mutation == "axis":
        other = draw(st.integers(0, nd - 1))
        cfg[other][1] += 1
        s[other] -= 1 if s[other] > 0 else 0
        if s[other] + cfg[other][0] + cfg[other][1] != shape[other]:
            cfg[other][1] -= 1  # no room: leave this one alone
    elif mutation == "interior" and s[axis] > 1:
        cfg[axis][2] = 1
        cfg[axis][1] -= s[axis] - 1
    elif mutation == "negative":
        cfg[axis][0] -= 1
        s[axis] += 1
    elif mutation == "drop":
        pads.pop(i)
    return [(tuple(s), tuple(tuple(c) for c in cfg)) for s, cfg in pads], tuple(shape)


@settings(max_examples=200, deadline=None)
@given(_pads())
def test_tiling_agrees_with_a_count_of_the_covered_positions(case):
    pads, out_shape = case
    assert concat.tiling(pads, out_shape) == _covered_once(pads, out_shape)


def _padded_sum(pads, value=0.0, reduce=True):
    """The sum of the padded operands and (``reduce``) its total: a reduction reading it."""

    def f(*xs):
        terms = [lax.pad(x, np.float32(value), cfg) for x, (_, cfg) in zip(xs, pads, strict=True)]
        out = terms[0]
        for t in terms[1:]:
            out = out + t
        return (out, out.sum()) if reduce else out * 2.0

    return f


def _ref(xs, pads, out_shape, value=0.0):
    out = np.zeros(out_shape, np.float64)
    for x, (_, cfg) in zip(xs, pads, strict=True):
        full = np.full(out_shape, value, np.float64)
        idx = tuple(slice(lo, lo + n) for (lo, _, _), n in zip(cfg, x.shape, strict=True))
        full[idx] = x
        out += full
    return out


def _names(f, *args):
    low = blu.jit(f).lower(*args, target="cpu")
    return [e.primitive.name for n in low._program.plan.nodes for e in n.eqns]


@settings(max_examples=30, deadline=None)
@given(_pads(), st.integers(0, 2**31 - 1))
def test_padded_sums_run_as_copies_exactly_when_they_tile(case, seed):
    pads, out_shape = case
    if any(lo < 0 or interior for _, cfg in pads for lo, _, interior in cfg):
        return  # lax.pad's results would not be comparable with the slicing reference
    if any(lo + n + hi != o for (s, cfg) in pads for (lo, hi, _), n, o in
           zip(cfg, s, out_shape, strict=True)):  # fmt: skip
        return
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(s).astype(np.float32) for s, _ in pads]
    f = _padded_sum(pads)
    old = concat.MIN_ELEMENTS
    concat.MIN_ELEMENTS = 0
    try:
        names = _names(f, *xs)
        got, total = (np.asarray(v) for v in blu.jit(f)(*xs))
    finally:
        concat.MIN_ELEMENTS = old
    tiles = _covered_once(pads, out_shape) is not None
    if all(np.prod(s) > 0 for s, _ in pads):  # (the simplifier folds empty arrays first)
        assert ("cpu_concat" in names) == tiles
        assert ("pad" in names) != tiles
    want = _ref(xs, pads, out_shape)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(total, want.sum(), rtol=1e-5, atol=1e-5)


PADS = [((3, 2), ((0, 0, 0), (0, 3, 0))), ((3, 3), ((0, 0, 0), (2, 0, 0)))]


def test_padding_by_another_value_is_not_a_concatenation(monkeypatch):
    monkeypatch.setattr(concat, "MIN_ELEMENTS", 0)
    xs = [np.arange(6, dtype=np.float32).reshape(3, 2), np.ones((3, 3), np.float32)]
    f = _padded_sum(PADS, value=1.5)
    assert "cpu_concat" not in _names(f, *xs)
    got, total = (np.asarray(v) for v in blu.jit(f)(*xs))
    want = _ref(xs, PADS, (3, 5), 1.5)
    np.testing.assert_allclose(got, want)
    np.testing.assert_allclose(total, want.sum(), rtol=1e-6)


def test_a_sum_no_reduction_reads_stays_fused(monkeypatch):
    """Alone (no reduction after it) the fused sum runs near copy speed: left as it is."""
    monkeypatch.setattr(concat, "MIN_ELEMENTS", 0)
    xs = [np.arange(6, dtype=np.float32).reshape(3, 2), np.ones((3, 3), np.float32)]
    f = _padded_sum(PADS, reduce=False)
    assert "cpu_concat" not in _names(f, *xs)
    np.testing.assert_allclose(np.asarray(blu.jit(f)(*xs)), 2 * _ref(xs, PADS, (3, 5)))


def test_small_sums_stay_fused():
    xs = [np.ones(s, np.float32) for s, _ in PADS]
    assert "cpu_concat" not in _names(_padded_sum(PADS), *xs)


def test_the_rewrite_leaves_gpu_programs_alone():
    from blu.lower.backend import prepare

    pads = [((64, 64), ((0, 0, 0), (0, 64, 0))), ((64, 64), ((0, 0, 0), (64, 0, 0)))]
    xs = [np.ones(s, np.float32) for s, _ in pads]
    j = blu.make_jaxpr(_padded_sum(pads))(*xs).jaxpr
    names = lambda p: [e.primitive.name for n in p.plan.nodes for e in n.eqns]  # noqa: E731
    assert "cpu_concat" in names(prepare(j, (False, False), "cpu"))
    assert "cpu_concat" not in names(prepare(j, (False, False), "cuda:sm_90"))


@pytest.mark.parametrize("shape", [(2, 3, 3 * 2 * 4), (1, 1, 3 * 1 * 1), (4, 128, 3 * 4 * 32)])
def test_gradient_of_a_split_against_finite_differences(shape):
    """``q, k, v = (qkv + bias).reshape(B, T, 3, H, D)[:, :, i]`` as the GPT example splits its
    fused projection; the VJP (three pads summed, then the bias gradient: a sum over the rows)
    becomes one copy when large enough."""
    b, t, c = shape
    h = 2 if c % 6 == 0 and c >= 6 else 1
    d = c // 3 // h
    rng = np.random.default_rng(0)
    qkv, bias = rng.standard_normal(shape), rng.standard_normal(c)
    w = [rng.standard_normal((b, t, h, d)) for _ in range(3)]

    def loss(qkv, bias):
        x = (qkv + bias).reshape(b, t, 3, h, d)
        q, k, v = x[:, :, 0], x[:, :, 1], x[:, :, 2]
        return (q * w[0]).sum() + (blu.numpy.sin(k) * w[1]).sum() + (v * v * w[2]).sum()

    grad = blu.grad(loss, argnums=(0, 1))
    gq, gb = (np.asarray(g) for g in blu.jit(grad)(qkv, bias))
    if b * t * c >= concat.MIN_ELEMENTS:
        assert "cpu_concat" in _names(grad, qkv, bias)
    eps = 1e-6
    flat = qkv.reshape(-1)
    for i in range(min(flat.size, 48)):  # a sample of the coordinates
        j = (i * 7919) % flat.size
        e = np.zeros_like(flat)
        e[j] = eps
        up = float(loss((flat + e).reshape(shape), bias))
        dn = float(loss((flat - e).reshape(shape), bias))
        np.testing.assert_allclose(gq.reshape(-1)[j], (up - dn) / (2 * eps), rtol=1e-6, atol=1e-7)
    for j in range(min(c, 16)):
        e = np.zeros(c)
        e[j] = eps
        fd = (float(loss(qkv, bias + e)) - float(loss(qkv, bias - e))) / (2 * eps)
        np.testing.assert_allclose(gb[j], fd, rtol=1e-6, atol=1e-6)
    # and every coordinate against the closed form
    x = (qkv + bias).reshape(b, t, 3, h, d)
    want = np.stack([w[0], np.cos(x[:, :, 1]) * w[1], 2 * x[:, :, 2] * w[2]], axis=2)
    np.testing.assert_allclose(gq, want.reshape(shape), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gb, want.reshape(-1, c).sum(axis=0), rtol=1e-10, atol=1e-10)


@settings(max_examples=20, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=2, max_size=4),
    st.lists(st.integers(0, 3), min_size=1, max_size=3),
    st.integers(0, 2**31 - 1),
)
def test_a_concatenate_a_reduction_reads_runs_as_a_copy(sizes, rest, seed):
    """``concatenate`` then a sum over the leading axes (a bias gradient), against numpy
    float64; rewritten when a reduction reads it and nothing is empty."""
    axis = len(rest)  # the parts join on the last axis
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal((*rest, n)).astype(np.float32) for n in sizes]

    def f(*xs):
        y = blu.numpy.concatenate(xs, axis=axis)
        s = y.reshape(int(np.prod(rest)), sum(sizes)).sum(axis=0)
        return y, s, (y * 2.0).sum()

    old = concat.MIN_ELEMENTS
    concat.MIN_ELEMENTS = 0
    try:
        names = _names(f, *xs)
        y, s, t = (np.asarray(v) for v in blu.jit(f)(*xs))
    finally:
        concat.MIN_ELEMENTS = old
    want = np.concatenate([x.astype(np.float64) for x in xs], axis=axis)
    if want.size and all(x.size for x in xs):
        assert "cpu_concat" in names
    np.testing.assert_allclose(y, want, rtol=0, atol=0)
    rows = want.reshape(int(np.prod(rest)), sum(sizes))
    np.testing.assert_allclose(s, rows.sum(axis=0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(t, 2 * want.sum(), rtol=1e-5, atol=1e-5)


def test_a_concatenate_without_a_reduction_stays_fused(monkeypatch):
    monkeypatch.setattr(concat, "MIN_ELEMENTS", 0)
    xs = [np.ones((4, 3), np.float32), np.full((4, 2), 2.0, np.float32)]
    f = lambda a, b: blu.numpy.concatenate([a, b], axis=1) * 3.0  # noqa: E731
    assert "cpu_concat" not in _names(f, *xs)
    np.testing.assert_allclose(np.asarray(blu.jit(f)(*xs)), 3 * np.concatenate(xs, axis=1))


def test_the_copy_writes_a_strided_output_too():
    """The library call writes its planned (contiguous) buffer through a reshaped view; an
    output that is not contiguous gets the values all the same."""
    xs = [np.arange(6.0).reshape(2, 3), np.arange(4.0).reshape(2, 2)]
    out = np.zeros((5, 2)).T
    concat._cpu_call(xs, [out], None, dimension=1, shapes=((2, 3), (2, 2)), shape=(2, 5))
    np.testing.assert_array_equal(out, np.concatenate(xs, axis=1))
    flat = np.zeros(10)
    concat._cpu_call(xs, [flat], None, dimension=1, shapes=((2, 3), (2, 2)), shape=(10,))
    np.testing.assert_array_equal(flat, np.concatenate(xs, axis=1).reshape(-1))
