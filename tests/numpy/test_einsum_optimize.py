"""einsum's contraction order from opt_einsum (optimize=): every strategy and explicit paths
give numpy's float64 result; the chosen order is the cheap one (fewer flops in the jaxpr)."""

from __future__ import annotations

import numpy as np
import pytest

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
