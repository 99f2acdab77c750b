"""Compiled ``dynamic_slice``, ``dynamic_update_slice`` and ``take_along_axis``
(``blu/lower/mlir/rules_dynamic.py``: index rules inside fused kernels) against independent
references written here: Python loops over the output points with the clamping spelled out
(XLA's rule: each start clamped into ``[0, dim - size]``; ``take_along_axis``: negative indices
count from the end, then clamp into ``[0, n - 1]``), not the numpy impls. The programs pass
``allow_negative_indices=False``: the primitives' clamping is what the kernels implement (the
public functions first count a negative start from the end, as JAX does:
``tests/lax/test_lax_slicing.py``).

Random shapes include size-0 and size-1 dimensions; starts are in range, negative, past the end
and at the extremes of every integer dtype (signed and unsigned, 8 to 64 bits); values include
NaN and -0.0, compared bit for bit (data movement is exact). Every program is checked to run as
compiled kernels (no host fallback node). Also: grad and vmap (batched starts) through ``jit``.
"""

from __future__ import annotations

import importlib.util
import itertools

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.lax as lax
from blu.lax.sorting import take_along_axis
from blu.lower.lowering import host_fallbacks
from blu.lower.plan.nodes import NodeKind

BF16, F16 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)
F32, F64, I32, BOOL = (np.dtype(t) for t in (np.float32, np.float64, np.int32, np.bool_))
DTYPES = [F32, F64, BF16, F16, I32, BOOL]
INDEX_DTYPES = [np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8,
                                      np.uint16, np.uint32, np.uint64)]  # fmt: skip
HAVE_MLIR = importlib.util.find_spec("mlir") is not None
pytestmark = pytest.mark.skipif(not HAVE_MLIR, reason="needs the MLIR bindings")


# ---- inputs and checks ------------------------------------------------------------------------


def values(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Random values of ``dtype`` (floats with a NaN and a -0.0 sprinkled in)."""
    dtype = np.dtype(dtype)
    if dtype == BOOL:
        return np.asarray(rng.random(shape) < 0.5)
    if dtype.kind in "iu":
        return np.asarray(rng.integers(-1000, 1000, shape)).astype(dtype)
    x = np.asarray(rng.standard_normal(shape) * 3).astype(dtype)
    flat = x.reshape(-1)
    if flat.size > 2:
        flat[rng.integers(0, flat.size, 2)] = np.asarray([np.nan, -0.0]).astype(dtype)
    return x


def start(draw, n: int, dtype) -> np.ndarray:
    """A start index of ``dtype`` for an axis of size ``n``: in range, or negative, past the end,
    or an extreme of the dtype (kept only where the dtype can hold it)."""
    info = np.iinfo(dtype)
    pool = [0, 1, n - 1, n, n + 5, -1, -n - 3, info.min, info.max, 2**31, 2**40]
    v = draw(st.sampled_from([p for p in pool if info.min <= p <= info.max]))
    return np.asarray(v, dtype)[()]


def clamp(s, lo: int, hi: int) -> int:
    return min(max(int(s), lo), hi)


def assert_same(got, want, what=""):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.dtype, got.shape)
    if want.dtype.kind == "f" or want.dtype == BF16:  # bit for bit, NaN and -0.0 included
        bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[want.dtype.itemsize]
        got, want = got.view(bits), want.view(bits)
    np.testing.assert_array_equal(got, want, err_msg=str(what))


def executable(f, *args):
    return blu.jit(f).lower(*args, target="cpu").compile().executable


def assert_compiled(f, *args):
    """``jit(f)``'s CPU plan has no host fallback, and ``f``'s primitives are in its kernels."""
    exe = executable(f, *args)
    kinds = [n.kind for n in exe.plan.nodes]
    assert NodeKind.FALLBACK not in kinds and exe.fallbacks == [], exe.plan
    return exe


def run(f, *args):
    """``jit(f)(*args)`` as numpy, after checking it compiles without a fallback."""
    assert_compiled(f, *args)
    return np.asarray(blu.jit(f)(*args))


def test_no_longer_host_fallbacks():
    fallbacks = host_fallbacks()
    for name in ("dynamic_slice", "dynamic_update_slice", "take_along_axis"):
        assert name not in fallbacks


# ---- dynamic_slice ----------------------------------------------------------------------------


@st.composite
def slice_cases(draw):
    rank = draw(st.integers(0, 3))
    shape = tuple(draw(st.integers(0, 5)) for _ in range(rank))
    sizes = tuple(draw(st.integers(0, n)) for n in shape)
    idt = draw(st.sampled_from(INDEX_DTYPES))
    starts = [start(draw, n, idt) for n in shape]
    return shape, sizes, starts, draw(st.sampled_from(DTYPES)), draw(st.integers(0, 2**31 - 1))


def ref_dynamic_slice(x, starts, sizes):
    s = [clamp(v, 0, n - m) for v, n, m in zip(starts, x.shape, sizes)]
    out = np.zeros(sizes, x.dtype)
    for p in itertools.product(*map(range, sizes)):
        out[p] = x[tuple(a + b for a, b in zip(s, p))]
    return out


@given(slice_cases())
def test_dynamic_slice_matches_a_loop(case):
    shape, sizes, starts, dtype, seed = case
    x = values(np.random.default_rng(seed), shape, dtype)
    got = run(
        lambda x, *s: lax.dynamic_slice(x, s, sizes, allow_negative_indices=False), x, *starts
    )
    assert_same(got, ref_dynamic_slice(x, starts, sizes), case)


@pytest.mark.parametrize("idt", INDEX_DTYPES)
def test_dynamic_slice_fuses_with_its_neighbours(idt):
    """``x[i]`` with a traced ``i`` and arithmetic around it: one kernel, no fallback."""
    rng = np.random.default_rng(1)
    x, y = values(rng, (6, 5), F32), values(rng, (5,), F32)

    def f(x, y, i):
        return (
            lax.dynamic_index_in_dim(x * 2.0, i, keepdims=False, allow_negative_indices=False) + y
        )

    for i in [0, 3, 5, 200 if np.iinfo(idt).max >= 200 else 9, np.iinfo(idt).max]:
        i = np.asarray(i, idt)[()]
        exe = assert_compiled(f, x, y, i)
        assert [n.kind for n in exe.plan.nodes] == [NodeKind.KERNEL]
        want = (x * np.float32(2.0))[clamp(i, 0, 5)] + y
        assert_same(np.asarray(blu.jit(f)(x, y, i)), want, i)


def test_dynamic_slice_literal_and_negative_starts():
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    got = run(lambda x: lax.dynamic_slice(x, [-5, 4], [2, 3], allow_negative_indices=False), x)
    assert_same(got, x[0:2, 3:6])


def test_starts_computed_inside_the_kernel():
    """Starts made by the kernel itself (``2 * i - 1``: computed at the point, not read at the
    function's entry like an input's) and read twice (one window of each primitive)."""
    x = np.arange(40, dtype=np.float32).reshape(8, 5)
    u = -np.ones((2, 5), np.float32)

    def f(x, u, i):
        j = i * 2 - 1
        window = lax.dynamic_slice(x, [j, np.int32(0)], [3, 5], allow_negative_indices=False)
        return window.sum(), lax.dynamic_update_slice(
            x + 1.0, u * 3.0, [j, np.int32(0)], allow_negative_indices=False
        )

    for i in [-4, 0, 2, 3, 9]:
        j = clamp(2 * i - 1, 0, 5)
        assert_compiled(f, x, u, np.int32(i))
        s, y = blu.jit(f)(x, u, np.int32(i))
        assert float(s) == float(x[j : j + 3].sum())
        want = x + np.float32(1)
        want[clamp(2 * i - 1, 0, 6) : clamp(2 * i - 1, 0, 6) + 2] = -3.0
        assert_same(np.asarray(y), want, i)


# ---- dynamic_update_slice ---------------------------------------------------------------------


def ref_dynamic_update_slice(x, u, starts):
    s = [clamp(v, 0, n - m) for v, n, m in zip(starts, x.shape, u.shape)]
    out = x.copy()
    for p in itertools.product(*map(range, u.shape)):
        out[tuple(a + b for a, b in zip(s, p))] = u[p]
    return out


@given(slice_cases())
def test_dynamic_update_slice_matches_a_loop(case):
    shape, sizes, starts, dtype, seed = case
    rng = np.random.default_rng(seed)
    x, u = values(rng, shape, dtype), values(rng, sizes, dtype)
    got = run(
        lambda x, u, *s: lax.dynamic_update_slice(x, u, s, allow_negative_indices=False),
        x,
        u,
        *starts,
    )
    assert_same(got, ref_dynamic_update_slice(x, u, starts), case)


def test_kv_cache_update_in_a_compiled_loop():
    """A KV cache written one position per step of a ``fori_loop`` (the loop compiles on the
    CPU: a loop node whose body has no fallback)."""
    rng = np.random.default_rng(2)
    cache, new = np.zeros((2, 8, 3), np.float32), values(rng, (8, 2, 1, 3), F32)

    def fill(cache, new):
        def body(t, c):
            row = lax.dynamic_index_in_dim(new, t, keepdims=False, allow_negative_indices=False)
            return lax.dynamic_update_slice(c, row, [0, t, 0], allow_negative_indices=False)

        return lax.fori_loop(0, 8, body, cache)

    exe = assert_compiled(fill, cache, new)
    assert NodeKind.LOOP in [n.kind for n in exe.plan.nodes]
    want = np.transpose(new[:, :, 0], (1, 0, 2))
    assert_same(np.asarray(blu.jit(fill)(cache, new)), want)


# ---- take_along_axis --------------------------------------------------------------------------


@st.composite
def along_cases(draw):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(0, 4)) for _ in range(rank))
    axis = draw(st.integers(0, rank - 1))
    ishape = shape[:axis] + (draw(st.integers(0, 4)),) + shape[axis + 1 :]
    idt = draw(st.sampled_from(INDEX_DTYPES))
    n, info = shape[axis], np.iinfo(idt)
    pool = [p for p in range(-n, n)] or [0]
    if draw(st.booleans()):  # also out of range: the kernel clamps (numpy would raise)
        pool += [p for p in (n, n + 3, -n - 1, info.min, info.max) if info.min <= p <= info.max]
    pool = [p for p in pool if info.min <= p <= info.max]
    return shape, axis, ishape, idt, pool, draw(st.sampled_from(DTYPES)), draw(st.integers(0, 99))


def ref_take_along_axis(x, idx, axis):
    n = x.shape[axis]
    out = np.zeros(idx.shape, x.dtype)
    for p in itertools.product(*map(range, idx.shape)):
        i = int(idx[p])
        i = clamp(i + n if i < 0 else i, 0, n - 1)
        q = list(p)
        q[axis] = i
        out[p] = x[tuple(q)]
    return out


@given(along_cases())
def test_take_along_axis_matches_a_loop(case):
    shape, axis, ishape, idt, pool, dtype, seed = case
    rng = np.random.default_rng(seed)
    x = values(rng, shape, dtype)
    idx = rng.choice(np.asarray(pool, np.int64 if idt.kind == "i" else np.uint64), ishape)
    idx = idx.astype(idt)
    got = run(lambda x, i: take_along_axis(x, i, axis), x, idx)
    if shape[axis] == 0:  # nothing to read: zeros (numpy raises for any index)
        assert_same(got, np.zeros(ishape, x.dtype))
        return
    assert_same(got, ref_take_along_axis(x, idx, axis), case)


def test_sort_jvp_compiles_its_take_along_axis():
    """The JVP of a sort permutes the tangent with ``take_along_axis``: a kernel node now (the
    sort itself stays a host fallback)."""
    x = np.array([[3.0, -1.0, 2.0], [0.5, 4.0, -2.0]], np.float32)
    t = np.array([[1.0, 10.0, 100.0], [2.0, 20.0, 200.0]], np.float32)

    def f(x, t):
        return blu.jvp(lambda x: lax.sort(x, dimension=1), (x,), (t,))[1]

    exe = executable(f, x, t)
    kernels = [e.primitive.name for n in exe.plan.nodes if n.kind == NodeKind.KERNEL
               for e in n.eqns]  # fmt: skip
    assert "take_along_axis" in kernels, exe.plan
    want = np.take_along_axis(t, np.argsort(x, axis=1, kind="stable"), axis=1)
    assert_same(np.asarray(blu.jit(f)(x, t)), want)


# ---- grad and vmap through jit ----------------------------------------------------------------


def test_grad_of_dynamic_slice_and_update_through_jit():
    """d/dx of ``sum(w * dynamic_slice(x))`` is ``w`` in the (clamped) window, 0 elsewhere;
    d/du of ``sum(v * dynamic_update_slice(x, u))`` is ``v``'s window, d/dx ``v`` outside."""
    rng = np.random.default_rng(3)
    x, w = values(rng, (5, 6), F64), values(rng, (2, 4), F64)
    x, w = np.nan_to_num(x), np.nan_to_num(w)
    u, v = values(rng, (2, 4), F64), values(rng, (5, 6), F64)
    u, v = np.nan_to_num(u), np.nan_to_num(v)
    for i, j in [(1, 1), (-3, 9), (4, 2)]:
        i, j = np.int32(i), np.int64(j)
        si, sj = clamp(i, 0, 3), clamp(j, 0, 2)

        def f(x, i, j):
            return (w * lax.dynamic_slice(x, [i, j], [2, 4], allow_negative_indices=False)).sum()

        assert_compiled(blu.grad(f), x, i, j)
        want = np.zeros_like(x)
        want[si : si + 2, sj : sj + 4] = w
        np.testing.assert_array_equal(np.asarray(blu.jit(blu.grad(f))(x, i, j)), want)

        def g(x, u, i, j):
            return (v * lax.dynamic_update_slice(x, u, [i, j], allow_negative_indices=False)).sum()

        gx, gu = blu.jit(blu.grad(g, argnums=(0, 1)))(x, u, i, j)
        assert_compiled(blu.grad(g, argnums=(0, 1)), x, u, i, j)
        want_x = v.copy()
        want_x[si : si + 2, sj : sj + 4] = 0
        np.testing.assert_array_equal(np.asarray(gx), want_x)
        np.testing.assert_array_equal(np.asarray(gu), v[si : si + 2, sj : sj + 4])


def test_vmap_of_jit_with_batched_starts():
    """Per-member starts (the batching rule turns them into a gather / scatter) and shared ones
    (``dynamic_slice`` with the batch axis whole): each against a loop over the members."""
    rng = np.random.default_rng(4)
    x, u = values(rng, (4, 7, 3), F32), values(rng, (4, 2, 3), F32)
    starts = np.array([-2, 0, 5, 100], np.int32)
    ds = blu.jit(lambda x, s: lax.dynamic_slice(x, [s, 0], [2, 3], allow_negative_indices=False))
    dus = blu.jit(
        lambda x, u, s: lax.dynamic_update_slice(
            x, u, [s, np.int32(1)], allow_negative_indices=False
        )
    )
    got = np.asarray(blu.vmap(ds)(x, starts))
    got_u = np.asarray(blu.vmap(dus)(x, u[:, :, :2], starts))
    shared = np.asarray(blu.vmap(ds, in_axes=(0, None))(x, np.int32(3)))
    for b in range(4):
        assert_same(got[b], ref_dynamic_slice(x[b], [starts[b], 0], (2, 3)))
        assert_same(got_u[b], ref_dynamic_update_slice(x[b], u[b, :, :2], [starts[b], 1]))
        assert_same(shared[b], ref_dynamic_slice(x[b], [3, 0], (2, 3)))
    assert_compiled(blu.vmap(ds, in_axes=(0, None)), x, np.int32(3))


# ---- in place -----------------------------------------------------------------------------------


def test_kv_cache_update_is_written_over_the_donated_cache():
    """``dynamic_update_slice`` reads its operand only at the output's own point, so the
    memory plan writes the output over a donated cache (the kernel stores through the input's
    pointer); the values still match the loop reference, with the
    update's arithmetic fused in."""
    from blu.lower.cpu.kernels import emit_node

    rng = np.random.default_rng(5)
    cache, new = values(rng, (2, 16, 4), F32), values(rng, (2, 1, 4), F32)

    def step(cache, new, t):
        return lax.dynamic_update_slice(
            cache, new * 2.0, [np.int32(0), t, np.int32(0)], allow_negative_indices=False
        )

    f = blu.jit(step, donate_argnums=0)
    low = f.lower(cache, new, np.int32(3), target="cpu")
    nodes = [n for n in low._program.plan.nodes if n.kind == "kernel" and n.inplace]
    assert nodes, str(low._program.plan)
    for n in nodes:
        text = emit_node(n, "k")
        assert all(f"%out{o}[" not in text for o, _ in n.inplace), text
    want = cache.copy()
    c = cache.copy()
    for t in [3, -1, 15, 40]:
        want = ref_dynamic_update_slice(want, new * np.float32(2.0), [0, t, 0])
        c = f(c, new, np.int32(t))
        assert_same(np.asarray(c), want, t)


def test_operand_read_elsewhere_is_not_written_over():
    """An update made from the operand itself (rows ``0..2`` written at rows ``1..3``: a shift
    down) reads it at other points: written in place, row 2 would read row 1 already
    overwritten. That output gets a buffer of its own."""
    x = np.arange(12, dtype=np.float32).reshape(4, 3)

    def f(x, t):
        window = lax.dynamic_slice(
            x, [np.int32(0), np.int32(0)], [3, 3], allow_negative_indices=False
        )
        return lax.dynamic_update_slice(x, window, [t, np.int32(0)], allow_negative_indices=False)

    g = blu.jit(f, donate_argnums=0)
    low = g.lower(x, np.int32(1), target="cpu")
    assert not [n for n in low._program.plan.nodes if n.kind == "kernel" and n.inplace]
    want = x.copy()
    want[1:] = x[:3]
    assert_same(np.asarray(g(x.copy(), np.int32(1))), want)
