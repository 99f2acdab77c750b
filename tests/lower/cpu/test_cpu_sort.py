"""``sort`` and ``top_k`` on the CPU target (``blu.lower.cpu.sorting``: library nodes writing
numpy's stable sort into the planned buffers, no host fallback), against
``np.argsort(kind="stable")`` / ``np.lexsort`` references over hypothesis shapes (size-0 and
size-1 axes, every axis, several operands and keys), float keys with NaN, +-inf, -0.0 and
duplicates (results compared bit for bit, so stability shows), grad and vmap through jit."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.lax as lax
from blu.core import dtypes
from blu.lower.plan.nodes import NodeKind

DTYPES = [np.float32, np.float64, dtypes.bfloat16, np.float16, np.int32, np.uint8, np.bool_]


def _wide(x):
    return x.astype(np.float32) if x.dtype in (dtypes.bfloat16, np.float16) else x


def _bits(x):
    x = np.asarray(x)
    return x.view(f"u{x.dtype.itemsize}") if dtypes.is_float(x.dtype) else x


def _same(got, want):
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(_bits(got), _bits(want))


def _values(dt, shape, seed):
    rng = np.random.default_rng(seed)
    if dt == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if not dtypes.is_float(np.dtype(dt)):
        return rng.integers(0, 6, shape).astype(dt)
    x = np.round(rng.standard_normal(shape) * 2) / 2
    flat = x.reshape(-1)
    for v in (np.nan, np.inf, -np.inf, -0.0):
        flat[rng.integers(0, max(flat.size, 1), flat.size // 6)] = v
    return x.astype(dt)


def _library_only(f, *args):
    exe = blu.jit(f).lower(*args, target="cpu").compile().executable
    kinds = [n.kind for n in exe.plan.nodes]
    assert NodeKind.FALLBACK not in kinds and NodeKind.LIBRARY in kinds, exe.plan


shapes = st.lists(st.integers(0, 9), min_size=1, max_size=3).map(tuple)


@settings(max_examples=25, deadline=None)
@given(shapes, st.data(), st.sampled_from(DTYPES), st.integers(1, 3), st.integers(0, 2**16))
def test_sort_matches_stable_numpy(shape, data, dt, num_ops, seed):
    dim = data.draw(st.integers(0, len(shape) - 1))
    num_keys = data.draw(st.integers(1, num_ops))
    ops = [_values(dt if j == 0 else np.float32, shape, seed + j) for j in range(num_ops)]
    keys = [_wide(k) for k in ops[:num_keys]]
    perm = (np.argsort(keys[0], axis=dim, kind="stable") if num_keys == 1
            else np.lexsort(keys[::-1], axis=dim))  # fmt: skip
    f = blu.jit(lambda *a: lax.sort(tuple(a), dim, num_keys=num_keys))
    for got, x in zip(f(*ops), ops):
        _same(got, np.take_along_axis(x, perm, axis=dim))


@settings(max_examples=25, deadline=None)
@given(shapes.filter(lambda s: s[-1] > 0), st.data(), st.sampled_from(DTYPES), st.integers(0, 99))
def test_top_k_matches_numpy(shape, data, dt, seed):
    k = data.draw(st.integers(0, shape[-1]))
    x = _values(dt, shape, seed)
    n = shape[-1]
    order = np.argsort(_wide(x)[..., ::-1], axis=-1, kind="stable")
    idx = (n - 1 - order)[..., ::-1][..., :k]
    vals, got_idx = blu.jit(lambda a: lax.top_k(a, k))(x)
    _same(vals, np.take_along_axis(x, idx, axis=-1))
    _same(got_idx, idx.astype(np.int32))


def test_sort_and_top_k_are_library_nodes():
    x = _values(np.float32, (4, 50), 0)
    _library_only(lambda a: lax.sort(a, 0), x)
    _library_only(lambda a: lax.top_k(a, 5), x)


def test_grad_and_vmap_through_jit():
    x = _values(np.float32, (3, 40), 1)
    x = np.where(np.isfinite(x), x, 0).astype(np.float32) + np.arange(120).reshape(3, 40) / 1e3
    w = np.random.default_rng(2).standard_normal((3, 40)).astype(np.float32)
    g = blu.jit(blu.grad(lambda a: (lax.sort(a, 1) * w).sum()))(x)
    want = np.zeros_like(w)
    np.put_along_axis(want, np.argsort(x, 1, kind="stable"), w, 1)
    np.testing.assert_allclose(np.asarray(g), want, rtol=1e-6)
    v, i = blu.jit(blu.vmap(lambda a: lax.top_k(a, 3)))(x)
    np.testing.assert_array_equal(np.asarray(i), np.argsort(-x, 1, kind="stable")[:, :3])
