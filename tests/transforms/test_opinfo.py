"""Generic tests over the OpInfo table (tests/opinfo.py): every public operation against its
float64 reference, its derivatives (forward, reverse, mixed, to order 2) against finite
differences, jacfwd against jacrev, vmap against a loop, grad(vmap) against vmap(grad), jit
against eager, every keyword honoured, and the special points.

Samples per operation: 1 random sample (plus the special points) under HYPOTHESIS_PROFILE=ci,
6 under dev (the profile decides the depth, as for the hypothesis tests).
"""

from __future__ import annotations

import os
import zlib

import numpy as np
import pytest
from helpers import assert_close, check_grads, check_jit, loop_vmap, tolerance
from opinfo import NOT_OPERATIONS, TABLE, OpInfo, covered, public_names

import blu
from blu.core import pytree

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the references at inf/NaN

N_SAMPLES = 6 if os.environ.get("HYPOTHESIS_PROFILE", "ci") == "dev" else 1


def _samples(e: OpInfo) -> list[tuple]:
    return [
        e.sample(np.random.default_rng([i, zlib.crc32(e.name.encode())])) for i in range(N_SAMPLES)
    ]


def _is_float(a) -> bool:
    return isinstance(a, np.ndarray) and a.dtype.kind == "f"


def _diff_args(e: OpInfo, args: tuple) -> tuple[int, ...]:
    if e.diff_args is not None:
        return e.diff_args
    return tuple(i for i, a in enumerate(args) if _is_float(a))


def _of(e: OpInfo, args: tuple, which: tuple[int, ...], **kw):
    """``e.fn`` as a function of the arguments ``which``, the others fixed."""

    def f(*xs):
        full = list(args)
        for i, x in zip(which, xs):
            full[i] = x
        return e.fn(*full, **kw)

    return f


def _float_out(out) -> list:
    return [o for o in pytree.tree_leaves(out) if np.dtype(o.dtype).kind == "f"]


def _skip(e: OpInfo, test: str) -> None:
    if test in e.skip:
        pytest.skip(e.skip[test])


IDS = [e.name for e in TABLE]


def test_every_public_operation_and_primitive_has_an_entry():
    missing = sorted(public_names() - covered())
    assert not missing, f"operations without an OpInfo entry: {missing}"
    stale = sorted(n for n in NOT_OPERATIONS if n not in public_names())
    assert not stale, f"NOT_OPERATIONS names that are not public: {stale}"


@pytest.mark.parametrize("e", TABLE, ids=IDS)
def test_value_against_float64_reference(e: OpInfo):
    _skip(e, "value")
    for args in _samples(e) + list(e.special):
        want = e.ref(*args)
        if want is None:
            continue
        got = e.fn(*args)
        assert_close(got, want, e.n_ops)


@pytest.mark.parametrize("e", [e for e in TABLE if e.grad], ids=[e.name for e in TABLE if e.grad])
def test_derivatives_against_finite_differences(e: OpInfo):
    """check_grads to order 2: forward, reverse, and mixed (reverse of forward)."""
    _skip(e, "grad")
    for args in _samples(e):
        which = _diff_args(e, args)
        if not which or not _float_out(e.fn(*args)):
            continue
        f = _of(e, args, which)
        tol = 1e-5 * e.n_ops
        check_grads(f, [args[i] for i in which], order=2, atol=tol, rtol=tol)


@pytest.mark.parametrize("e", [e for e in TABLE if e.grad], ids=[e.name for e in TABLE if e.grad])
def test_jacfwd_equals_jacrev(e: OpInfo):
    _skip(e, "grad")
    _skip(e, "jacobians")
    # special points only where the gradient is finite there: at an infinite partial
    # derivative forward mode gives 0 * inf = NaN for a zero tangent where reverse mode gives 0
    # (docs/conventions.md)
    special = list(e.special) if e.finite_grad_at_special else []
    for args in _samples(e) + special:
        which = _diff_args(e, args)
        if not which or not _float_out(e.fn(*args)):
            continue
        f = _of(e, args, which)
        xs = [args[i] for i in which]
        argnums = tuple(range(len(xs)))
        fwd = blu.jacfwd(f, argnums=argnums)(*xs)
        rev = blu.jacrev(f, argnums=argnums)(*xs)
        assert_close(fwd, rev, 4 * e.n_ops)


@pytest.mark.parametrize("e", TABLE, ids=IDS)
def test_vmap_against_loop(e: OpInfo):
    """vmap over a new leading axis of every array argument (two samples: the second float
    sample perturbed, integer and bool ones repeated) against a loop; non-array arguments
    (axes, modes) are closed over. And grad(vmap(f)) == vmap(grad(f)) for the first
    differentiable argument."""
    _skip(e, "vmap")
    rng = np.random.default_rng(0)
    for args in _samples(e):
        arrays = tuple(i for i, a in enumerate(args) if isinstance(a, np.ndarray))
        if not arrays:
            continue
        f = _of(e, args, arrays)
        bargs = [
            np.stack([args[i], args[i] + 0.05 * rng.standard_normal(args[i].shape)])
            if _is_float(args[i])
            else np.stack([args[i], args[i]])
            for i in arrays
        ]
        got = blu.vmap(f)(*bargs)
        want = loop_vmap(f, bargs, [0] * len(bargs))
        assert_close(got, want, e.n_ops)
        if not e.grad or "grad" in e.skip:
            continue
        which = [k for k, i in enumerate(arrays) if i in _diff_args(e, args)]
        if not which or not _float_out(e.fn(*args)):
            continue
        k0 = which[0]

        def scalar(x, *rest, k0=k0):
            full = list(rest)
            full.insert(k0, x)
            return sum(blu.numpy.sum(o) for o in _float_out(f(*full)))

        others = [a for k, a in enumerate(bargs) if k != k0]
        g_of_v = blu.grad(lambda x: blu.numpy.sum(blu.vmap(scalar)(x, *others)))(bargs[k0])
        v_of_g = blu.vmap(blu.grad(scalar))(bargs[k0], *others)
        assert_close(g_of_v, v_of_g, 4 * e.n_ops)


@pytest.mark.parametrize("e", TABLE, ids=IDS)
def test_jit_against_eager(e: OpInfo):
    _skip(e, "jit")
    for args in _samples(e)[:1]:
        arrays = [i for i, a in enumerate(args) if isinstance(a, np.ndarray)]
        f = _of(e, args, tuple(arrays))
        check_jit(f, [args[i] for i in arrays], rtol=tolerance(np.float32, e.n_ops))


@pytest.mark.parametrize(
    "e", [e for e in TABLE if e.kwargs], ids=[e.name for e in TABLE if e.kwargs]
)
def test_every_keyword_is_honoured(e: OpInfo):
    """Each keyword variant matches the reference given the same keyword, and changes the
    result on at least one sample (an accepted argument that changes nothing fails)."""
    for kw in e.kwargs:
        changed = False
        for args in list(e.special) + _samples(e):
            got = e.fn(*args, **kw)
            want = e.ref(*args, **kw)
            if want is not None:
                assert_close(got, want, e.n_ops)
            base = e.fn(*args)
            for g, b in zip(pytree.tree_leaves(got), pytree.tree_leaves(base)):
                g, b = np.asarray(g), np.asarray(b)
                if g.shape != b.shape or not np.array_equal(g, b, equal_nan=g.dtype.kind == "f"):
                    changed = True
        assert changed, f"{e.name}: keyword {kw} accepted but changes nothing"


_SPECIAL_GRAD = [e for e in TABLE if e.finite_grad_at_special]


@pytest.mark.parametrize("e", _SPECIAL_GRAD, ids=[e.name for e in _SPECIAL_GRAD])
def test_finite_gradient_at_special_points(e: OpInfo):
    """Where the function is differentiable (or a convention applies: docs/conventions.md) the
    gradient at the special points is finite in forward and reverse mode, and they agree."""
    for args in e.special:
        which = _diff_args(e, args)
        f = _of(e, args, which)
        xs = [args[i] for i in which]
        argnums = tuple(range(len(xs)))
        fwd = blu.jacfwd(f, argnums=argnums)(*xs)
        rev = blu.jacrev(f, argnums=argnums)(*xs)
        for leaf in pytree.tree_leaves(fwd) + pytree.tree_leaves(rev):
            assert np.all(np.isfinite(np.asarray(leaf))), (e.name, args, fwd, rev)
        assert_close(fwd, rev, 4 * e.n_ops)
