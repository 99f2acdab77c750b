"""einsum's contraction order from opt_einsum (optimize=): every strategy and explicit paths
give numpy's float64 result; the chosen order is the cheap one (fewer flops in the jaxpr)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.errors import BluValueError

RNG = np.random.default_rng(0)
A, B, C = RNG.normal(size=(30, 40)), RNG.normal(size=(40, 50)), RNG.normal(size=(50, 2))


STRATEGIES = ["auto", True, False, "greedy", "optimal", "dp", [(1, 2), (0, 1)],
              ["einsum_path", (0, 1), (0, 1)]]  # fmt: skip


@pytest.mark.parametrize("optimize", STRATEGIES)
def test_chain_every_strategy(optimize):
    got = bnp.einsum("ij,jk,kl->il", A, B, C, optimize=optimize)
    np.testing.assert_allclose(np.asarray(got), A @ B @ C, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "spec, shapes",
    [
        ("bij,jk,b,...k->...bi", [(3, 4, 5), (5, 4), (3,), (2, 2, 4)]),
        ("ii,ij,jk->k", [(4, 4), (4, 4), (4, 3)]),
        ("ab,bc,cd,de->", [(2, 3), (3, 4), (4, 5), (5, 6)]),
        ("ij,kl,jk", [(2, 3), (4, 5), (3, 4)]),  # implicit output
    ],
)
def test_general_specs_against_numpy(spec, shapes):
    ops = [RNG.normal(size=s) for s in shapes]
    want = np.einsum(spec, *ops)
    for optimize in ("auto", False, "optimal"):
        got = bnp.einsum(spec, *ops, optimize=optimize)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-12)
    # the gradient of the sum against central differences on one entry
    g = blu.grad(lambda x: bnp.sum(bnp.einsum(spec, x, *ops[1:])))(ops[0])
    e = np.zeros(shapes[0])
    e.flat[1] = 1e-6
    fd = (
        np.sum(np.einsum(spec, ops[0] + e, *ops[1:]))
        - np.sum(np.einsum(spec, ops[0] - e, *ops[1:]))
    ) / 2e-6
    assert np.asarray(g).flat[1] == pytest.approx(fd, rel=1e-6, abs=1e-8)


def _dot_flops(jaxpr) -> int:
    total = 0
    for e in jaxpr.eqns:
        if e.primitive.name == "dot_general":
            out = e.outvars[0].aval.shape
            (lc, _), _ = e.params["dimension_numbers"]
            k = int(np.prod([e.invars[0].aval.shape[i] for i in lc]))
            total += 2 * int(np.prod(out)) * k
    return total


def test_the_order_is_the_cheap_one():
    spec = "ij,jk,kl->il"
    cheap = _dot_flops(blu.make_jaxpr(lambda *o: bnp.einsum(spec, *o))(A, B, C).jaxpr)
    left = _dot_flops(
        blu.make_jaxpr(lambda *o: bnp.einsum(spec, *o, optimize=False))(A, B, C).jaxpr
    )
    assert cheap == 2 * (40 * 50 * 2 + 30 * 40 * 2)  # B @ C first
    assert left == 2 * (30 * 40 * 50 + 30 * 50 * 2)
    assert cheap < left / 5


def test_bad_paths_are_blu_errors():
    with pytest.raises(BluValueError, match="past the"):
        bnp.einsum("ij,jk,kl->il", A, B, C, optimize=[(0, 5)])
    with pytest.raises(BluValueError, match="operands, not one"):
        bnp.einsum("ij,jk,kl->il", A, B, C, optimize=[(0, 1)])
    with pytest.raises(BluValueError, match="opt_einsum"):
        bnp.einsum("ij,jk,kl->il", A, B, C, optimize="no-such-strategy")


# ---- einsum_path ---------------------------------------------------------------------------------


def _cost(labels, out, sizes, path):
    """The cost of contracting operands with index ``labels`` along ``path`` (opt_einsum's
    numbering: the picked operands leave the list, their result is appended), each pairwise
    step counted as opt_einsum's model counts it: the size of the joint index space, twice when
    an index is summed."""
    ops = [set(lab) for lab in labels]
    total = 0
    for i, j in path:
        rest = set(out).union(*[o for k, o in enumerate(ops) if k not in (i, j)])
        joint = ops[i] | ops[j]
        kept = joint & rest
        total += math.prod(sizes[c] for c in joint) * (2 if joint - kept else 1)
        for k in sorted((i, j), reverse=True):
            ops.pop(k)
        ops.append(kept)
    return total


def _all_paths(n):
    if n == 1:
        return [[]]
    firsts = [(i, j) for i in range(n) for j in range(i + 1, n)]
    return [[f, *rest] for f in firsts for rest in _all_paths(n - 1)]


@given(dims=st.lists(st.integers(0, 7), min_size=4, max_size=5))
def test_einsum_path_optimal_is_the_cheapest_order(dims):
    """For a chain of three or four matrices the 'optimal' path costs the least of all the
    pairwise orders (each enumerated here, costed independently); False is left to right; the
    paths drive einsum (blu's and numpy's) to numpy's product."""
    rng = np.random.default_rng(len(dims))
    mats = [rng.standard_normal((dims[i], dims[i + 1])) for i in range(len(dims) - 1)]
    letters = "abcde"
    spec = ",".join(letters[i : i + 2] for i in range(len(mats))) + "->a" + letters[len(mats)]
    path, info = bnp.einsum_path(spec, *mats, optimize="optimal")
    assert all(isinstance(step, tuple) for step in path)
    labels = [letters[i : i + 2] for i in range(len(mats))]
    sizes = dict(zip(letters, dims))
    out = "a" + letters[len(mats)]
    best = min(_cost(labels, out, sizes, p) for p in _all_paths(len(mats)))
    assert _cost(labels, out, sizes, path) == best
    assert str(info).splitlines()[0].strip() == f"Complete contraction:  {spec}"
    unopt, _ = bnp.einsum_path(spec, *mats, optimize=False)
    assert unopt == [(0, 1)] * (len(mats) - 1)
    want = np.linalg.multi_dot(mats) if all(dims) else np.einsum(spec, *mats)
    for p in (path, unopt, bnp.einsum_path(spec, *mats)[0]):
        got = bnp.einsum(spec, *mats, optimize=p)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(np.einsum(spec, *mats, optimize=["einsum_path", *p]), want,
                                   rtol=1e-10, atol=1e-10)  # fmt: skip


def test_einsum_path_reads_only_shapes():
    """Under jit the operands are tracers: the path is the eager one; the interleaved form;
    mismatched sizes are a BluValueError naming the label."""
    want = bnp.einsum_path("ij,jk,kl", A, B, C)[0]
    seen = []
    blu.jit(lambda a, b, c: seen.append(bnp.einsum_path("ij,jk,kl", a, b, c)[0]) or a)(A, B, C)
    # A @ (B @ C): 40*50*2 + 30*40*2 multiplications, (A @ B) @ C: 30*40*50 + 30*50*2
    assert seen == [want] == [[(1, 2), (0, 1)]]
    assert bnp.einsum_path(A, [0, 1], B, [1, 2], C, [2, 3], [0, 3])[0] == want
    with pytest.raises(BluValueError, match="'j'"):
        bnp.einsum_path("ij,jk", A, C)


def test_one_operand_sums_accumulate_in_preferred_element_type():
    # they were summed in the operand's dtype and converted after: a bfloat16 sum with
    # preferred_element_type=float32 came back rounded to 8 bits, an int8 one wrapped
    rng = np.random.default_rng(0)
    x = rng.standard_normal((30, 40)).astype(ml_dtypes.bfloat16)
    got = bnp.einsum("ij->j", x, preferred_element_type=bnp.float32)
    assert got.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got), x.astype(np.float64).sum(0), rtol=1e-6, atol=1e-5)
    got = bnp.einsum("ii->", x[:, :30], preferred_element_type=bnp.float32)
    np.testing.assert_allclose(float(got), np.trace(x[:, :30].astype(np.float64)), rtol=1e-6)
    i8 = np.full((3, 100), 100, np.int8)
    got = bnp.einsum("ij->i", i8, preferred_element_type=bnp.int32)
    np.testing.assert_array_equal(np.asarray(got), np.full(3, 10000))
