"""Shared pieces of the optimizer tests against float64 numpy loops: the leaves of a tree in
float64, a tree-vs-list closeness check, a run of an optimizer over a list of gradients, and
normal random gradients shaped like the parameters."""

from __future__ import annotations

import numpy as np

import blu
from blu.core import pytree

RTOL, ATOL = 3e-5, 3e-6  # float32 over a few steps


def leaves64(tree):
    """The leaves of ``tree`` as float64 numpy arrays."""
    return [np.asarray(x, np.float64) for x in pytree.tree_leaves(tree)]


def assert_close(got, want, rtol=RTOL, atol=ATOL):
    """``got``'s leaves are close to the arrays of the list ``want``, shapes equal."""
    got = leaves64(got)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def run_steps(opt, params, grads, jit=False):
    """``opt.init(params)`` then one ``opt.step`` per gradient tree; the params and the state."""
    state = opt.init(params)
    step = blu.jit(opt.step) if jit else opt.step
    for g in grads:
        params, state = step(g, state, params)
    return params, state


def normal_grads(rng, params, steps, dtype=np.float32):
    """``steps`` trees of standard-normal gradients shaped like ``params``."""
    return [
        pytree.tree_map(lambda p: rng.normal(size=np.shape(p)).astype(dtype), params)
        for _ in range(steps)
    ]
