"""numpy.block, fromfunction, mask_indices, isscalar, iterable (JAX's; blu had none) against
numpy over random block grids and shapes (size-0 / size-1 dims included), under jit, vmap and
grad where they take arrays; the errors."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import shapes
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.core.errors import BluShapeError, BluTypeError, BluValueError


@st.composite
def _grids(draw):
    """A 2-level block grid: rows of blocks of one height, columns summing to one width; some
    blocks of lower rank (0-d or 1-d: numpy gives them leading size-1 axes)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lead = tuple(draw(shapes(max_dims=1, max_side=2)))
    width = draw(st.integers(0, 5))
    rows = []
    for _ in range(draw(st.integers(1, 3))):
        h = draw(st.integers(0, 3))
        cuts = sorted(draw(st.lists(st.integers(0, width), max_size=2)))
        edges = [0, *cuts, width]
        row = []
        for a, b in zip(edges[:-1], edges[1:]):
            row.append(rng.uniform(-2, 2, lead + (h, b - a)))
        rows.append(row)
    if not lead and width == 1 and draw(st.booleans()):  # a 1-d block in a row of height 1
        rows.append([rng.uniform(-2, 2, (1,))])
    return rows


@given(_grids())
def test_block_against_numpy(rows):
    want = np.block(rows)
    got = bnp.block(rows)
    np.testing.assert_array_equal(np.asarray(got), want)
    leaves = [b for row in rows for b in row]
    structure = [len(row) for row in rows]

    def f(*bs):
        it = iter(bs)
        return bnp.block([[next(it) for _ in range(n)] for n in structure])

    np.testing.assert_array_equal(np.asarray(blu.jit(f)(*leaves)), want)
    batched = [np.stack([b, 2 * b]) for b in leaves]
    got = blu.vmap(f)(*batched)
    np.testing.assert_array_equal(np.asarray(got), np.stack([want, 2 * want]))
    # the gradient of sum(w * block) hands each block its window of w
    w = np.random.default_rng(0).standard_normal(want.shape)
    grads = blu.grad(lambda bs: bnp.sum(f(*bs) * w))(leaves)
    for g, b in zip(grads, leaves):
        np.testing.assert_array_equal(np.asarray(g).shape, b.shape)
    np.testing.assert_array_equal(np.block([[g for g in grads[i - n : i]] for n, i in zip(
        structure, np.cumsum(structure))]), w)  # fmt: skip


def test_block_depths_scalars_and_promotion():
    a = np.ones((2, 2), np.int32)
    for arg in ([1, 2, 3], 3, [[1, 2], [3, 4]], [[a, np.zeros((2, 1), np.float32)]], [[[a]]],
                [np.int8(1), np.ones(2, np.int16)]):  # fmt: skip
        want = np.block(arg)
        got = np.asarray(bnp.block(arg))
        np.testing.assert_array_equal(got, want)
        assert got.shape == want.shape
    assert np.asarray(bnp.block([a, np.ones((2, 1), np.float32)])).dtype == np.float32
    with pytest.raises(BluValueError, match="empty list"):
        bnp.block([[a], []])
    with pytest.raises(BluValueError, match="depths differ"):
        bnp.block([[a], a])
    with pytest.raises(BluTypeError, match="tuple"):
        bnp.block((a, a))
    with pytest.raises(BluShapeError, match=r"\(2, 2\), \(3, 1\)"):
        bnp.block([a, np.ones((3, 1))])


@given(shape=shapes(max_dims=3), dtype=st.sampled_from([float, np.float64, np.int32]))
def test_fromfunction_against_numpy(shape, dtype):
    def f(*ix):
        out = 1.0 if dtype is float else dtype(1)
        for k, i in enumerate(ix):
            out = out * (k + 2) + i * i
        return out

    got = bnp.fromfunction(f, shape, dtype=dtype)
    want = np.fromfunction(f, shape, dtype=dtype)
    np.testing.assert_allclose(np.asarray(got), np.broadcast_to(want, shape), rtol=1e-6)
    # JAX's default coordinate dtype is the default float (float32); numpy's float64. With
    # shape () the function is called with no coordinates and its value is returned as it is
    if shape:
        assert np.asarray(got).dtype == (np.float32 if dtype is float else np.dtype(dtype))


def test_fromfunction_pytrees_kwargs_and_errors():
    out = bnp.fromfunction(lambda i, j, c: {"s": i + c * j, "p": i * j}, (2, 3), c=10)
    i, j = np.indices((2, 3))
    np.testing.assert_array_equal(np.asarray(out["s"]), i + 10 * j)
    np.testing.assert_array_equal(np.asarray(out["p"]), i * j)
    np.testing.assert_array_equal(np.asarray(bnp.fromfunction(lambda i: 2 * i, 4, dtype=int)),
                                  [0, 2, 4, 6])  # fmt: skip
    with pytest.raises(BluValueError, match="negative"):
        bnp.fromfunction(lambda i: i, (2, -1))
    with pytest.raises(BluTypeError, match="shape"):
        bnp.fromfunction(lambda i: i, "ab")


@pytest.mark.parametrize("name", ["triu", "tril"])
@given(n=st.integers(0, 6), k=st.integers(-7, 7))
def test_mask_indices_against_numpy(name, n, k):
    got = bnp.mask_indices(n, getattr(bnp, name), k)
    want = np.mask_indices(n, getattr(np, name), k)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g), w)
        assert np.asarray(g).dtype == np.int32
    size = len(want[0]) + 2  # under jit the number of indices is static, padded with zeros
    got = blu.jit(lambda: bnp.mask_indices(n, getattr(bnp, name), k, size=size))()
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.concatenate([w, [0, 0]]))


def test_mask_indices_checks_the_mask_shape():
    with pytest.raises(BluShapeError, match=r"\(3,\), not \(3, 3\)"):
        bnp.mask_indices(3, lambda a, k: a[0], 0)


def test_isscalar_and_iterable():
    x = bnp.ones(3)
    cases = [1, 2.5, 1j, True, np.float32(1), "s", b"b", None, [1], (1,), np.ones(2),
             np.array(1.0), x, bnp.asarray(1.0), {"a": 1}, range(3)]  # fmt: skip
    for c in cases:
        # JAX: numpy's isscalar, except that every 0-d array is a scalar
        want = bool(np.isscalar(c) or (isinstance(c, np.ndarray) and c.ndim == 0))
        if isinstance(c, blu.Array):
            want = c.ndim == 0
        assert bnp.isscalar(c) is want, c
        assert bnp.iterable(c) is (np.iterable(c) if not isinstance(c, blu.Array) else c.ndim > 0)
    seen = []
    blu.jit(lambda t, s: seen.append((bnp.isscalar(t), bnp.isscalar(s))) or t)(x, 1.0)
    blu.vmap(lambda t: seen.append(bnp.isscalar(t)) or t)(x)
    assert seen == [(False, True), True]


def test_creation_sizes_must_be_ints():
    # a float size or diagonal raises BluTypeError naming the argument (it was a bare TypeError
    # from operator.index, and tri truncated k=-1.5 to -1 where numpy's j <= i - 1.5 is -2)
    for make, what in [
        (lambda: bnp.linspace(0, 1, 2.0), "num"),
        (lambda: bnp.eye(2.0), "N"),
        (lambda: bnp.eye(3, k=1.5), "k"),
        (lambda: bnp.tri(3, 2.5), "M"),
        (lambda: bnp.tri(3, k=-1.5), "k"),
    ]:
        with pytest.raises(BluTypeError, match=f"{what} must be an int"):
            make()
    np.testing.assert_array_equal(np.asarray(bnp.tri(3, k=np.int32(-1))), np.tri(3, k=-1))
