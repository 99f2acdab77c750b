"""dot_general over random dimension numbers against np.einsum in float64; its derivatives in
both operands against finite differences; vmap over each operand against a loop; jit against
eager; dtypes and preferred_element_type; the dot / batch_matmul wrappers; error messages."""

from __future__ import annotations

import string

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blu
from blu import lax
from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from tests.helpers import check_grads, check_jit, check_vmap

F64, F32, F16, BF16 = np.float64, np.float32, np.float16, ml_dtypes.bfloat16
TOL = {F64: 1e-12, F32: 1e-5, F16: 2e-3, BF16: 1e-2}


class Problem:
    """A random dot_general: operand shapes, dimension numbers and the einsum that checks it."""

    def __init__(self, lhs_shape, rhs_shape, dn, einsum):
        self.lhs_shape, self.rhs_shape, self.dn, self.einsum = lhs_shape, rhs_shape, dn, einsum

    def __repr__(self):
        return f"Problem({self.lhs_shape}, {self.rhs_shape}, dn={self.dn}, {self.einsum!r})"


@st.composite
def problems(draw, max_side=3, negative_axes=True):
    """Random valid dimension numbers: nb batch pairs, nc contracting pairs, free dims on each
    side, laid out in random axis orders (pairs in random order too)."""
    nb, nc, nl, nr = (draw(st.integers(0, 2)) for _ in range(4))
    size = lambda: draw(st.integers(0, max_side))  # noqa: E731
    dims = {("b", i): size() for i in range(nb)}
    dims.update({("c", i): size() for i in range(nc)})
    dims.update({("l", i): size() for i in range(nl)})
    dims.update({("r", i): size() for i in range(nr)})
    lhs = draw(st.permutations([k for k in dims if k[0] in "bcl"]))
    rhs = draw(st.permutations([k for k in dims if k[0] in "bcr"]))
    letter = {k: string.ascii_letters[j] for j, k in enumerate(dims)}

    def axis(side, key):
        a = side.index(key)
        return a - len(side) if negative_axes and draw(st.booleans()) else a

    lc = tuple(axis(lhs, ("c", i)) for i in range(nc))
    rc = tuple(axis(rhs, ("c", i)) for i in range(nc))
    lb = tuple(axis(lhs, ("b", i)) for i in range(nb))
    rb = tuple(axis(rhs, ("b", i)) for i in range(nb))
    out = [("b", i) for i in range(nb)] + [k for k in lhs if k[0] == "l"]
    out += [k for k in rhs if k[0] == "r"]
    spec = "".join(letter[k] for k in lhs) + "," + "".join(letter[k] for k in rhs) + "->"
    spec += "".join(letter[k] for k in out)
    shape = lambda side: tuple(dims[k] for k in side)  # noqa: E731
    return Problem(shape(lhs), shape(rhs), ((lc, rc), (lb, rb)), spec)


def _values(rng, shape, dtype=F64):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0 if dtype.kind == "u" else -3, 4, shape).astype(dtype)
    # quarter-integers: exact in every float dtype, so only the result is rounded
    return (rng.integers(-8, 9, shape) / 4).astype(dtype)


def _operands(draw, problem, dtype=F64):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return _values(rng, problem.lhs_shape, dtype), _values(rng, problem.rhs_shape, dtype)


def ref(problem, lhs, rhs):
    return np.einsum(problem.einsum, np.asarray(lhs, F64), np.asarray(rhs, F64))


# ---- values ------------------------------------------------------------------------------------


@given(problem=problems(), data=st.data())
def test_dot_general_matches_einsum(problem, data):
    lhs, rhs = _operands(data.draw, problem)
    got = lax.dot_general(lhs, rhs, problem.dn)
    want = ref(problem, lhs, rhs)
    assert np.shape(got) == want.shape
    assert np.asarray(got).dtype == F64
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)


DTYPES = [F32, F64, BF16, F16, np.int32, np.int64, np.uint8, np.uint32, np.bool_]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@given(problem=problems(negative_axes=False), data=st.data())
def test_dot_general_dtypes(dtype, problem, data):
    lhs, rhs = _operands(data.draw, problem, dtype)
    got = lax.dot_general(lhs, rhs, problem.dn)
    assert np.asarray(got).dtype == np.dtype(dtype)
    if np.dtype(dtype) == np.bool_:
        want = np.einsum(problem.einsum, lhs.astype(np.int64), rhs.astype(np.int64)) > 0
        np.testing.assert_array_equal(np.asarray(got), want)
    elif np.dtype(dtype).kind in "iu":  # wrapping arithmetic: int64 then truncation
        want = np.einsum(problem.einsum, lhs.astype(np.int64), rhs.astype(np.int64))
        np.testing.assert_array_equal(np.asarray(got), want.astype(dtype))
    else:
        want = ref(problem, lhs, rhs)
        scale = max(np.max(np.abs(want)) if want.size else 1.0, 1.0)
        np.testing.assert_allclose(
            np.asarray(got, F64), want, rtol=TOL[dtype], atol=TOL[dtype] * scale
        )


@pytest.mark.parametrize(
    "in_dtype,out_dtype",
    [(BF16, F32), (F16, F32), (F32, F64), (BF16, F64), (np.int8, np.int32), (np.int32, F32),
     (np.uint8, np.int32), (np.bool_, np.int32), (F64, F32)],
    ids=str,
)  # fmt: skip
@given(problem=problems(), data=st.data())
def test_preferred_element_type_sets_output_dtype(in_dtype, out_dtype, problem, data):
    lhs, rhs = _operands(data.draw, problem, in_dtype)
    got = lax.dot_general(lhs, rhs, problem.dn, preferred_element_type=out_dtype)
    assert np.asarray(got).dtype == np.dtype(out_dtype)
    want = ref(problem, lhs.astype(F64), rhs.astype(F64))
    if np.dtype(out_dtype).kind in "iu":
        np.testing.assert_array_equal(np.asarray(got), want.astype(out_dtype))
    else:
        # accumulated in the output dtype (not rounded to bf16/f16 in between)
        tol = 1e-12 if out_dtype == F64 else 1e-6
        np.testing.assert_allclose(np.asarray(got, F64), want, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    "in_dtype,out_dtype",
    [(np.int8, np.int32), (np.uint8, np.int32), (np.int8, np.int64), (F16, F32), (BF16, F32),
     (np.int16, np.int32)],
    ids=str,
)  # fmt: skip
def test_preferred_element_type_under_jit_accumulates_in_the_output_dtype(in_dtype, out_dtype):
    # blu.jit's small 2-D product ran np.matmul(int8, int8, out=int32), which sums in int8 and
    # wraps (and float16 in float16): 100 * 100 + ... came out as -100
    rng = np.random.default_rng(0)
    lo = 0 if np.dtype(in_dtype).kind == "u" else -120
    for m, k, n in [(2, 3, 2), (4, 9, 5)]:
        lhs = rng.integers(lo, 120, (m, k)).astype(in_dtype)
        rhs = rng.integers(lo, 120, (k, n)).astype(in_dtype)
        want = lhs.astype(F64) @ rhs.astype(F64)  # exact: every partial sum fits float64

        def f(a, b):
            return lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=out_dtype)

        for fn in (f, blu.jit(f)):
            got = fn(lhs, rhs)
            assert np.asarray(got).dtype == np.dtype(out_dtype)
            np.testing.assert_array_equal(np.asarray(got).astype(F64), want)


def test_bf16_with_f32_output_keeps_accumulation_precision():
    # 1 + 2^-10 * 8 sums: in bf16 the small terms are lost; in f32 they are not
    lhs = np.array([[1.0] + [2.0**-10] * 8], BF16)
    rhs = np.ones((9, 1), BF16)
    out = lax.dot(lhs, rhs, preferred_element_type=F32)
    assert np.asarray(out).dtype == F32
    np.testing.assert_allclose(np.asarray(out), [[1.0 + 8 * 2.0**-10]], rtol=0, atol=0)


# ---- derivatives -------------------------------------------------------------------------------


@given(problem=problems(), data=st.data())
def test_dot_general_grads_both_operands(problem, data):
    lhs, rhs = _operands(data.draw, problem)
    check_grads(lambda a, b: lax.dot_general(a, b, problem.dn), [lhs, rhs], order=2)
    check_grads(lambda a: lax.dot_general(a, rhs, problem.dn), [lhs])
    check_grads(lambda b: lax.dot_general(lhs, b, problem.dn), [rhs])


@pytest.mark.parametrize("in_dtype", [BF16, F16, F32], ids=str)
@given(problem=problems(), data=st.data())
def test_grads_with_preferred_element_type_keep_input_dtypes(in_dtype, problem, data):
    lhs, rhs = _operands(data.draw, problem, in_dtype)

    def loss(a, b):
        out = lax.dot_general(a, b, problem.dn, preferred_element_type=F32)
        return lax.reduce_sum(lax.mul(out, out))

    ga, gb = blu.grad(loss, argnums=(0, 1))(lhs, rhs)
    assert np.asarray(ga).dtype == np.dtype(in_dtype)
    assert np.asarray(gb).dtype == np.dtype(in_dtype)
    # reference in float64: d/dA sum(out^2) = 2 out . B
    ga64, gb64 = blu.grad(
        lambda a, b: lax.reduce_sum(lax.mul(lax.dot_general(a, b, problem.dn),
                                            lax.dot_general(a, b, problem.dn))),
        argnums=(0, 1),
    )(lhs.astype(F64), rhs.astype(F64))  # fmt: skip
    for g, w in ((ga, ga64), (gb, gb64)):
        w = np.asarray(w)
        scale = max(np.max(np.abs(w)) if w.size else 1.0, 1.0)
        tol = 3e-2 if in_dtype == BF16 else 3e-3
        np.testing.assert_allclose(np.asarray(g, F64), w, rtol=tol, atol=tol * scale)


# ---- vmap and jit ------------------------------------------------------------------------------


def _batched(draw, shape, size, rng):
    nd = len(shape)
    ax = draw(st.sampled_from([None] + list(range(-nd - 1, nd + 1))))
    if ax is None:
        return _values(rng, shape), None
    a = ax % (nd + 1)
    return _values(rng, shape[:a] + (size,) + shape[a:]), ax


@given(problem=problems(), data=st.data())
def test_dot_general_vmap_over_each_operand(problem, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    size = data.draw(st.integers(1, 3))
    lhs, la = _batched(data.draw, problem.lhs_shape, size, rng)
    rhs, ra = _batched(data.draw, problem.rhs_shape, size, rng)
    if la is None and ra is None:
        lhs, la = _values(rng, (size,) + problem.lhs_shape), 0
    f = lambda a, b: lax.dot_general(a, b, problem.dn)  # noqa: E731
    check_vmap(f, [lhs, rhs], [la, ra], atol=1e-12, rtol=1e-12)
    # per-example gradients: vmap of the transpose rules
    g = blu.grad(lambda a, b: lax.reduce_sum(lax.mul(f(a, b), f(a, b))), argnums=(0, 1))
    check_vmap(g, [lhs, rhs], [la, ra], atol=1e-10, rtol=1e-10)
    out_axis = data.draw(st.integers(0, len(np.shape(ref(problem, *_unbatched(problem))))))
    check_vmap(f, [lhs, rhs], [la, ra], out_axis=out_axis, atol=1e-12, rtol=1e-12)


def _unbatched(problem):
    return np.zeros(problem.lhs_shape), np.zeros(problem.rhs_shape)


@given(problem=problems(), data=st.data())
def test_dot_general_jit_and_jit_of_grad(problem, data):
    lhs, rhs = _operands(data.draw, problem)
    check_jit(lambda a, b: lax.dot_general(a, b, problem.dn), [lhs, rhs])
    g = blu.grad(lambda a, b: lax.reduce_sum(lax.dot_general(a, b, problem.dn)), argnums=(0, 1))
    check_jit(g, [lhs, rhs])
    lhs32, rhs32 = lhs.astype(BF16), rhs.astype(BF16)
    check_jit(lambda a, b: lax.dot_general(a, b, problem.dn, preferred_element_type=F32),
              [lhs32, rhs32])  # fmt: skip


# ---- dot and batch_matmul ----------------------------------------------------------------------


@pytest.mark.parametrize("lhs_nd,rhs_nd", [(1, 1), (1, 2), (2, 1), (2, 2)])
@given(m=st.integers(0, 3), k=st.integers(0, 3), n=st.integers(0, 3), seed=st.integers(0, 99))
def test_dot_matches_numpy(lhs_nd, rhs_nd, m, k, n, seed):
    rng = np.random.default_rng(seed)
    a = _values(rng, (m, k)[2 - lhs_nd :])
    b = _values(rng, (k, n)[:rhs_nd])
    got = lax.dot(a, b)
    np.testing.assert_allclose(np.asarray(got), np.dot(a, b), rtol=1e-12, atol=1e-12)
    check_grads(lax.dot, [a, b], order=2)


@given(
    batch=st.lists(st.integers(0, 3), max_size=2),
    mkn=st.tuples(*[st.integers(0, 3)] * 3),
    seed=st.integers(0, 99),
)
def test_batch_matmul_matches_numpy(batch, mkn, seed):
    rng = np.random.default_rng(seed)
    m, k, n = mkn
    a, b = _values(rng, (*batch, m, k)), _values(rng, (*batch, k, n))
    np.testing.assert_allclose(np.asarray(lax.batch_matmul(a, b)), a @ b, rtol=1e-12, atol=1e-12)
    check_grads(lax.batch_matmul, [a, b])
    if batch:
        check_vmap(lax.batch_matmul, [a, b], [0, 0])


def test_matmul_by_dot_general_uses_blas_shapes():
    a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
    out = lax.dot_general(a, b, (((1,), (0,)), ((), ())), precision="highest")
    np.testing.assert_array_equal(np.asarray(out), a @ b)
    out = lax.dot_general(b, a, (((0,), (1,)), ((), ())), precision=("tf32", "tf32"))
    np.testing.assert_array_equal(np.asarray(out), b.T @ a.T)


# ---- errors ------------------------------------------------------------------------------------


def test_dot_general_errors_name_both_shapes():
    a, b = np.zeros((2, 3), F32), np.zeros((4, 5), F32)
    with pytest.raises(
        BluShapeError, match=r"contracting dimensions differ.*f32\[2,3\].*f32\[4,5\]"
    ):
        lax.dot_general(a, b, (((1,), (0,)), ((), ())))
    with pytest.raises(BluShapeError, match=r"batch dimensions differ.*f32\[2,3\].*f32\[4,5\]"):
        lax.dot_general(a, b, (((), ()), ((0,), (0,))))
    with pytest.raises(BluShapeError, match="as many contracting"):
        lax.dot_general(a, b, (((1,), ()), ((), ())))
    with pytest.raises(BluShapeError, match="not distinct"):
        lax.dot_general(a, np.zeros((3, 2), F32), (((1, 1), (0, 0)), ((), ())))
    with pytest.raises(BluShapeError, match=r"out of range for lhs f32\[2,3\] and rhs f32\[4,5\]"):
        lax.dot_general(a, b, (((2,), (0,)), ((), ())))
    with pytest.raises(BluTypeError, match=r"equal dtypes.*f32\[2,3\].*f64\[3,4\]"):
        lax.dot_general(a, np.zeros((3, 4)), (((1,), (0,)), ((), ())))
    with pytest.raises(BluTypeError, match="preferred_element_type int32"):
        lax.dot_general(a, a, (((1,), (1,)), ((), ())), preferred_element_type=np.int32)
    with pytest.raises(BluValueError, match="precision"):
        lax.dot_general(a, a, (((1,), (1,)), ((), ())), precision="fastest")
    with pytest.raises(BluValueError, match="dimension_numbers must be"):
        lax.dot_general(a, a, ((1,), (1,)))
    with pytest.raises(BluShapeError, match=r"dot: operands must be vectors or matrices.*f32\[\]"):
        lax.dot(np.float32(1.0), a)
    with pytest.raises(BluShapeError, match=r"contracting.*f32\[2,3\].*f32\[2,3\]"):
        lax.dot(a, a)
    with pytest.raises(BluShapeError, match=r"batch_matmul: .*f32\[2,3\] and f32\[1,2,3\]"):
        lax.batch_matmul(a, np.zeros((1, 2, 3), F32))
    with pytest.raises(BluShapeError, match="at .*test_lax_dot.py"):
        lax.dot(a, a)
