"""blu.numpy matmul/dot/vdot/inner/outer/tensordot/kron and einsum against numpy, with random
shapes and random einsum specs (implicit and explicit modes, '...', diagonals, broadcasting)."""

import numpy as np
import pytest
from helpers import arrays, shapes
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.core.errors import BluError, BluTypeError


def _close(got, want, rtol=1e-10, atol=1e-10, dtype=None):
    g = np.asarray(got)
    assert g.shape == np.shape(want), (g.shape, np.shape(want))
    if dtype is not None:
        assert g.dtype == dtype, (g.dtype, dtype)
    np.testing.assert_allclose(
        g.astype(np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol
    )


@st.composite
def matmul_shapes(draw):
    """Shapes of two matmul operands: 1-D or batched, with broadcasting batch dims."""
    m, k, n = (draw(st.integers(0, 3)) for _ in range(3))
    a_vec, b_vec = draw(st.booleans()), draw(st.booleans())
    batch = draw(shapes(max_dims=3, max_side=3))
    ba = tuple(d if draw(st.booleans()) else 1 for d in batch)[draw(st.integers(0, len(batch))) :]
    bb = tuple(d if draw(st.booleans()) else 1 for d in batch)[draw(st.integers(0, len(batch))) :]
    sa = (k,) if a_vec else ba + (m, k)
    sb = (k,) if b_vec else bb + (k, n)
    return sa, sb


@settings(max_examples=50)
@given(st.data())
def test_matmul_against_numpy(data):
    sa, sb = data.draw(matmul_shapes())
    a, b = data.draw(arrays(sa)), data.draw(arrays(sb))
    want = np.matmul(a, b)
    _close(bnp.matmul(a, b), want, dtype=np.float64)
    _close(bnp.asarray(a) @ b, want)
    _close(a @ bnp.asarray(b), want)
    _close(
        bnp.matmul(a.astype(np.float32), b.astype(np.float32)),
        want,
        rtol=1e-5,
        atol=1e-5,
        dtype=np.float32,
    )


def test_matmul_dtypes_and_errors():
    a = np.arange(6, dtype=np.int8).reshape(2, 3)
    b = np.arange(12, dtype=np.int32).reshape(3, 4)
    got = bnp.matmul(a, b)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), a.astype(np.int32) @ b)
    out = bnp.matmul(
        np.ones((2, 3), np.float16), np.ones((3, 2), np.float16), preferred_element_type=bnp.float32
    )
    assert out.dtype == np.float32
    with pytest.raises(BluError, match="inner sizes"):
        bnp.matmul(np.ones((2, 3)), np.ones((4, 2)))
    with pytest.raises(BluError, match="0-d"):
        bnp.matmul(np.ones(()), np.ones((2, 2)))
    with pytest.raises(BluError, match="broadcast"):
        bnp.matmul(np.ones((2, 1, 3)), np.ones((3, 3, 1)))


def test_matmul_with_shared_weights_is_one_product():
    # (B, T, C) @ (C, D) stays one dot_general, with no broadcast of the weights
    jaxpr = blu.make_jaxpr(bnp.matmul)(np.ones((4, 5, 3), np.float32), np.ones((3, 2), np.float32))
    text = str(jaxpr)
    assert text.count("dot_general") == 1 and "broadcast_in_dim" not in text


@given(st.data())
def test_dot_inner_vdot_outer_tensordot_kron(data):
    sa = data.draw(shapes(max_dims=3))
    a = data.draw(arrays(sa))
    # dot: b's second-to-last (or only) axis matches a's last
    if sa:
        k = sa[-1]
        sb = data.draw(st.sampled_from([(k,), (k, 2), (3, k, 2), ()]))
    else:
        sb = data.draw(shapes(max_dims=2))
    b = data.draw(arrays(sb))
    _close(bnp.dot(a, b), np.dot(a, b))
    _close(bnp.asarray(a).dot(b), np.dot(a, b))
    c = data.draw(arrays((sa[-1],) if sa else ()))
    _close(bnp.inner(a, c), np.inner(a, c))
    d = data.draw(arrays(sa))
    _close(bnp.vdot(a, d), np.vdot(a, d))
    _close(bnp.outer(a, b), np.outer(a, b))
    _close(bnp.kron(a, b), np.kron(a, b))
    n = data.draw(st.integers(0, len(sa)))
    e = data.draw(arrays(sa[len(sa) - n :] + (2,)))
    _close(bnp.tensordot(a, e, n), np.tensordot(a, e, n))
    if len(sa) >= 2:
        f = data.draw(arrays((sa[0], 2, sa[1])))
        _close(bnp.tensordot(a, f, ((0, 1), (0, 2))), np.tensordot(a, f, ((0, 1), (0, 2))))
        _close(bnp.tensordot(a, f, (0, 0)), np.tensordot(a, f, (0, 0)))
    if sa:
        _close(bnp.vecdot(a, d), np.sum(a * d, axis=-1))


# ---- einsum ------------------------------------------------------------------------------------


@st.composite
def einsum_problems(draw):
    """A random einsum spec (implicit or explicit, '...', repeated labels, size-1 broadcasting)
    with matching float64 operands."""
    pool = "abcde"
    sizes = {c: draw(st.integers(0, 3)) for c in pool}
    n_ops = draw(st.integers(1, 3))
    use_ell = draw(st.booleans())
    ell_shape = draw(shapes(max_dims=2, max_side=3)) if use_ell else ()
    specs, ops = [], []
    for _ in range(n_ops):
        labels = draw(st.lists(st.sampled_from(pool), max_size=3))
        shape = []
        for c in labels:
            d = sizes[c]
            if d > 1 and draw(st.integers(0, 5)) == 0:
                d = 1  # broadcasts against the label's other sizes
            shape.append(d)
        # a repeated label within one operand must have one size there
        for i, c in enumerate(labels):
            shape[i] = shape[labels.index(c)]
        spec = "".join(labels)
        if use_ell:
            k = draw(st.integers(0, len(ell_shape)))
            e = tuple(d if draw(st.booleans()) else 1 for d in ell_shape[len(ell_shape) - k :])
            pos = draw(st.integers(0, len(labels)))
            spec = spec[:pos] + "..." + spec[pos:]
            shape = shape[:pos] + list(e) + shape[pos:]
        specs.append(spec)
        ops.append(draw(arrays(tuple(shape))))
    lhs = ",".join(specs)
    if draw(st.booleans()):
        return lhs, ops
    used = sorted({c for s in specs for c in s if c in pool})
    out = draw(st.permutations(used))[: draw(st.integers(0, len(used)))]
    out = "".join(out)
    if use_ell:
        pos = draw(st.integers(0, len(out)))
        out = out[:pos] + "..." + out[pos:]
    return lhs + "->" + out, ops


@settings(max_examples=100)
@given(einsum_problems())
def test_einsum_against_numpy(problem):
    spec, ops = problem
    want = np.einsum(spec, *ops)
    _close(bnp.einsum(spec, *ops), want)


@pytest.mark.parametrize(
    "spec,shapes_",
    [
        ("ij,jk->ik", [(2, 3), (3, 4)]),
        ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]),
        ("ii", [(3, 3)]),
        ("ii->i", [(3, 3)]),
        ("iij->j", [(2, 2, 3)]),
        ("i,j", [(2,), (3,)]),
        ("ba", [(2, 3)]),
        ("...ij,...jk", [(5, 2, 3), (3, 4)]),
        ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
        ("ij,ij,ij->", [(2, 3)] * 3),
        ("i,i,i->i", [(4,)] * 3),
        (",i->i", [(), (3,)]),
        ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 2)]),
        ("i->", [(0,)]),
        ("ij->ji", [(0, 2)]),
    ],
)
def test_einsum_cases(spec, shapes_):
    rng = np.random.default_rng(0)
    ops = [rng.standard_normal(s) for s in shapes_]
    _close(bnp.einsum(spec, *ops), np.einsum(spec, *ops))


def test_einsum_interleaved_dtypes_errors():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 4))
    _close(bnp.einsum(a, [0, 1], b, [1, 2], [0, 2]), np.einsum(a, [0, 1], b, [1, 2], [0, 2]))
    _close(bnp.einsum(a, [Ellipsis, 1], b, [1, 2]), np.einsum(a, [Ellipsis, 1], b, [1, 2]))
    out = bnp.einsum("ij,jk", a.astype(np.float16), b.astype(np.float32))
    assert out.dtype == np.float32
    out = bnp.einsum(
        "ij,jk", a.astype(np.float16), b.astype(np.float16), preferred_element_type=bnp.float32
    )
    assert out.dtype == np.float32
    with pytest.raises(BluError, match="sizes 2 and 3"):
        bnp.einsum("ij,ij->", a, b)
    with pytest.raises(BluError, match="operands"):
        bnp.einsum("ij,jk->ik", a)
    with pytest.raises(BluError, match="appears in no operand"):
        bnp.einsum("ij->iz", a)
    with pytest.raises(BluError, match="repeated"):
        bnp.einsum("ij->ii", a)
    with pytest.raises(BluError):
        bnp.einsum("...i->i", np.ones((2, 3)))
    with pytest.raises(BluError, match="rank"):
        bnp.einsum("ijk->", a)


def test_einsum_lowers_to_one_dot_general_per_pair():
    a, b = np.ones((2, 3, 4), np.float32), np.ones((2, 4, 5), np.float32)
    text = str(blu.make_jaxpr(lambda a, b: bnp.einsum("bij,bjk->bik", a, b))(a, b))
    assert text.count("dot_general") == 1


@given(st.data())
def test_trace_matches_numpy(data):
    x = data.draw(arrays(data.draw(shapes(min_dims=2, max_dims=3))))
    _close(bnp.trace(x), np.trace(x))
    _close(bnp.trace(x, 1, dtype=bnp.float32), np.trace(x, 1), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("fn", [bnp.vecdot, bnp.linalg.vecdot])
@pytest.mark.parametrize("axis", [1.5, -0.5, "0"], ids=repr)
def test_vecdot_axis_that_is_no_int_is_a_type_error(fn, axis):
    """A non-int axis passed the range check and then indexed a shape tuple: Python's
    'tuple indices must be integers'. Integer-likes still work (reference: the float64 sum of
    products)."""
    x = np.arange(6.0).reshape(2, 3)
    with pytest.raises(BluTypeError, match="vecdot: axis must be an int"):
        fn(x, x, axis=axis)
    np.testing.assert_allclose(np.asarray(fn(x, x, axis=np.int64(0))), (x * x).sum(axis=0))
