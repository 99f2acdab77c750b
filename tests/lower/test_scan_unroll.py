"""Short scans unrolled before the CUDA plan (``blu/lower/plan/scan_unroll.py``): no scan left,
the same values as the scan (numpy's evaluation of both jaxprs), stacked rows forwarded (no
stacking or slicing left where only rows are read), and GPT-2 scanned over its blocks planned
as the unrolled model is."""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.lax as lax
import blu.numpy as bnp
from blu.core.jaxpr import eval_jaxpr
from blu.lower.backend import prepare
from blu.lower.plan.scan_unroll import unroll_scans, wants_unroll


def jaxpr_of(f, *args):
    closed = blu.make_jaxpr(f)(*args)
    return closed.jaxpr, list(closed.consts)


def names(jaxpr) -> collections.Counter:
    return collections.Counter(e.primitive.name for e in jaxpr.eqns)


def same_values(f, *args, max_length=16, rtol=1e-12):
    """``f``'s jaxpr and its unrolled form give the same values (float64 inputs)."""
    j, consts = jaxpr_of(f, *args)
    u = unroll_scans(j, max_length)
    want = eval_jaxpr(j, consts, *args)
    got = eval_jaxpr(u, consts, *args)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=1e-12)
    return j, u


@settings(max_examples=20, deadline=None)
@given(length=st.integers(1, 9), reverse=st.booleans(), seed=st.integers(0, 2**16))
def test_rnn_unrolled_equals_scan(length, reverse, seed):
    rng = np.random.default_rng(seed)
    h, w = rng.standard_normal((2, 3)), rng.standard_normal((3, 3))
    xs = rng.standard_normal((length, 2, 3))

    def f(h, xs, w):
        return lax.scan(lambda h, x: (bnp.tanh(h @ w + x), (h * 2.0, 1.0)), h, xs, reverse=reverse)

    j, u = same_values(f, h, xs, w)
    assert names(j)["scan"] == 1 and names(u)["scan"] == 0


def test_rows_of_a_stack_are_forwarded():
    """A scan over ``stack`` of values reads those values (no slice), and a second scan over
    the first one's stacked outputs reads its rows: the stacking is dead."""
    a, b, c = (np.full((2, 2), v) for v in (1.0, 2.0, 3.0))

    def f(a, b, c):
        _, ys = lax.scan(lambda s, w: (s + w.sum(), w * s), 0.0, bnp.stack([a, b, c]))
        return lax.scan(lambda s, y: (s * 0.5 + y.sum(), None), 1.0, ys)[0]

    j, u = same_values(f, a, b, c)
    n = names(u)
    assert n["scan"] == 0 and n["slice"] == 0 and n["concatenate"] == 0, n


def test_slices_of_stacked_gradients_fold():
    """The gradient of a scan over stacked parameters comes back unstacked: slices of the
    stacked cotangent become its rows."""
    ws = [np.random.default_rng(i).standard_normal((3, 3)) for i in range(4)]
    x = np.ones((2, 3))

    def loss(ws, x):
        h, _ = lax.scan(lambda h, w: (bnp.tanh(h @ w), None), x, bnp.stack(ws))
        return (h * h).sum()

    def g(a, b, c, d, x):
        return blu.grad(loss)([a, b, c, d], x)

    j, u = same_values(g, *ws, x)
    n = names(u)
    assert n["scan"] == 0 and n["concatenate"] == 0 and n["slice"] == 0, n


def test_nested_and_long_scans():
    """A short scan inside a short scan is unrolled too; a scan longer than the limit stays a
    loop unless its ``unroll`` asks for every iteration."""
    xs = np.arange(24.0).reshape(4, 6)

    def f(xs):
        def outer(c, row):
            inner, _ = lax.scan(lambda s, v: (s + v, None), c, row)
            return inner, inner

        return lax.scan(outer, 0.0, xs)

    _, u = same_values(f, xs)
    assert names(u)["scan"] == 0
    long = np.arange(40.0)
    j, _ = jaxpr_of(lambda v: lax.scan(lambda s, x: (s + x, None), 0.0, v)[0], long)
    assert names(unroll_scans(j, 16))["scan"] == 1
    j, _ = jaxpr_of(lambda v: lax.scan(lambda s, x: (s + x, None), 0.0, v, unroll=True)[0], long)
    assert names(unroll_scans(j, 16))["scan"] == 0
    assert names(unroll_scans(j, 0))["scan"] == 0  # asked for: unrolled even with the limit 0


@pytest.mark.parametrize("length", [0, 3])
def test_wants_unroll_bounds(length):
    j, _ = jaxpr_of(lambda v: lax.scan(lambda s, x: (s + x, None), 0.0, v)[0], np.ones(length))
    (e,) = [e for e in j.eqns if e.primitive.name == "scan"]
    assert wants_unroll(e, 16) == (length > 0)
    assert not wants_unroll(e, 0)


def test_gpt2_scanned_plans_as_unrolled():
    """GPT-2 (tiny) with its blocks scanned: on the CUDA target the same library calls
    (packed attention, cuBLASLt epilogues) and the same planned peak as unrolled."""
    import blu.random as random
    from examples.gpt2.model import CONFIGS, init_params, loss_fn

    cfg = CONFIGS["tiny"].with_vocab(64)
    params = init_params(cfg, random.key(0))
    x = np.zeros((2, 32), np.int32)
    plans = []
    for c in (cfg, dataclasses.replace(cfg, scan_layers=True)):

        def f(p, x, c=c):
            return blu.grad(lambda p: loss_fn(p, x, x, c, compute_dtype=bnp.bfloat16))(p)

        closed = blu.make_jaxpr(f)(params, x)
        prep = prepare(closed.jaxpr, (False,) * len(closed.jaxpr.invars), "cuda:sm_90")
        libs = collections.Counter(n.eqns[0].primitive.name for n in prep.plan.nodes
                                   if n.kind == "library")  # fmt: skip
        assert not any(n.kind == "loop" for n in prep.plan.nodes)
        plans.append((libs, prep.memory.analysis.peak_bytes))
    assert plans[0] == plans[1], plans
