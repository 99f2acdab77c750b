"""Shared oracles for the test-suite: finite differences, per-slice loops, eager vs jit.

Every check compares blu against a value computed independently: central differences in
float64 for derivatives, a Python loop over slices for vmap, eager evaluation for jit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import blu
from blu.core import pytree

# ---- strategies --------------------------------------------------------------------------------


def shapes(min_dims: int = 0, max_dims: int = 3, min_side: int = 0, max_side: int = 4):
    """Array shapes including size-0 and size-1 dimensions."""
    return hnp.array_shapes(
        min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side
    )


def arrays(shape, lo: float = -2.0, hi: float = 2.0, dtype=np.float64):
    """float arrays with values in [lo, hi] (finite, no NaN)."""
    return hnp.arrays(
        dtype,
        shape,
        elements=st.floats(lo, hi, allow_nan=False, allow_infinity=False, width=64),
    )


def rng_for(*arrays_: np.ndarray) -> np.random.Generator:
    """A deterministic RNG seeded from the inputs (so hypothesis shrinking is reproducible)."""
    seed = 0
    for a in arrays_:
        seed = (
            seed * 31
            + int(np.asarray(a).size)
            + int(np.abs(np.asarray(a, np.float64)).sum() * 1000)
        ) % (2**32)
    return np.random.default_rng(seed)


# ---- derivatives -------------------------------------------------------------------------------


def _np(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _tree_np(t: Any) -> Any:
    return pytree.tree_map(_np, t)


def _inner(a: Any, b: Any) -> float:
    return float(
        sum(np.sum(_np(x) * _np(y)) for x, y in zip(pytree.tree_leaves(a), pytree.tree_leaves(b)))
    )


def numerical_jvp(f: Callable, args: Sequence[Any], tangents: Sequence[Any], eps: float = 1e-6):
    """Central difference ``(f(x + eps t) - f(x - eps t)) / 2 eps`` in float64."""
    plus = [a + eps * t for a, t in zip(args, tangents)]
    minus = [a - eps * t for a, t in zip(args, tangents)]
    fp, fm = f(*plus), f(*minus)
    return pytree.tree_map(lambda p, m: (_np(p) - _np(m)) / (2 * eps), fp, fm)


def check_jvp(
    f: Callable, args: Sequence[np.ndarray], rng: np.random.Generator, atol=1e-5, rtol=1e-5
):
    """``blu.jvp`` in a random direction equals central differences."""
    tangents = [rng.standard_normal(np.shape(a)) for a in args]
    _, t_out = blu.jvp(f, tuple(args), tuple(tangents))
    expected = numerical_jvp(f, args, tangents)
    for got, want in zip(pytree.tree_leaves(t_out), pytree.tree_leaves(expected)):
        np.testing.assert_allclose(_np(got), want, atol=atol, rtol=rtol)


def check_vjp(
    f: Callable, args: Sequence[np.ndarray], rng: np.random.Generator, atol=1e-5, rtol=1e-5
):
    """``<ct, J t>`` (numerical) equals ``<J^T ct, t>`` (blu.vjp) for random ``ct`` and ``t``."""
    out, f_vjp = blu.vjp(f, *args)
    ct = pytree.tree_map(
        lambda o: rng.standard_normal(np.shape(o)).astype(np.asarray(o).dtype), out
    )
    tangents = [rng.standard_normal(np.shape(a)) for a in args]
    cts_in = f_vjp(ct)
    lhs = _inner(ct, numerical_jvp(f, args, tangents))
    rhs = _inner(cts_in, tangents)
    np.testing.assert_allclose(rhs, lhs, atol=atol, rtol=rtol)


def check_grads(
    f: Callable, args: Sequence[np.ndarray], order: int = 1, rng=None, atol=1e-5, rtol=1e-5
):
    """Check forward and reverse derivatives of ``f`` up to ``order`` against finite differences
    (float64 inputs). Order 2 checks the derivatives of the JVP."""
    rng = rng or rng_for(*args)
    args = [np.asarray(a, np.float64) for a in args]
    check_jvp(f, args, rng, atol, rtol)
    check_vjp(f, args, rng, atol, rtol)
    if order >= 2:
        tangents = [rng.standard_normal(np.shape(a)) for a in args]

        def f_jvp(*xs):
            return blu.jvp(f, tuple(xs), tuple(tangents))[1]

        check_grads(f_jvp, args, order - 1, rng, atol * 10, rtol * 10)


# ---- vmap and jit ------------------------------------------------------------------------------


def loop_vmap(f: Callable, args: Sequence[Any], in_axes: Sequence[int | None], out_axis: int = 0):
    """The reference for vmap: apply ``f`` to each slice and stack the results."""
    size = next(np.shape(a)[ax] for a, ax in zip(args, in_axes) if ax is not None)
    if size == 0:  # no slices: get the per-slice output shape from zeros of the slice shape
        proto = f(
            *[
                a if ax is None else np.zeros(np.delete(np.shape(a), ax), np.asarray(a).dtype)
                for a, ax in zip(args, in_axes)
            ]
        )
        return pytree.tree_map(
            lambda o: np.zeros(
                np.insert(np.shape(o), out_axis % (np.ndim(o) + 1), 0).astype(int),
                np.asarray(o).dtype,
            ),
            proto,
        )
    outs = []
    for i in range(size):
        sl = [
            a if ax is None else np.take(np.asarray(a), i, axis=ax) for a, ax in zip(args, in_axes)
        ]
        outs.append(f(*sl))
    return pytree.tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs], axis=out_axis), *outs)


def check_vmap(
    f: Callable,
    args: Sequence[Any],
    in_axes: Sequence[int | None],
    out_axis: int = 0,
    atol=1e-6,
    rtol=1e-6,
):
    got = blu.vmap(f, in_axes=tuple(in_axes), out_axes=out_axis)(*args)
    want = loop_vmap(f, args, in_axes, out_axis)
    for g, w in zip(pytree.tree_leaves(got), pytree.tree_leaves(want)):
        assert np.shape(g) == np.shape(w), (np.shape(g), np.shape(w))
        np.testing.assert_allclose(
            np.asarray(g, np.float64), np.asarray(w, np.float64), atol=atol, rtol=rtol
        )


_JIT_RTOL = {"float64": 1e-12, "float32": 5e-6, "float16": 2e-3, "bfloat16": 2e-2}


def check_jit(f: Callable, args: Sequence[Any], atol=None, rtol=None):
    """jit(f) equals eager f: exactly for integers and bools; for floats within a few ulps of
    the dtype (compiled kernels fuse operations and keep float32 between them)."""
    got = blu.jit(f)(*args)
    want = f(*args)
    for g, w in zip(pytree.tree_leaves(got), pytree.tree_leaves(want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        r = _JIT_RTOL.get(str(g.dtype), 0.0) if rtol is None else rtol
        a = r if atol is None else atol
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), atol=a, rtol=r)


def random_in_axes(draw, ndims: Sequence[int]) -> list[int | None]:
    """For a hypothesis ``st.composite``: a random in_axis per argument (None or +/- axis)."""
    axes = []
    for nd in ndims:
        choices = [None] + list(range(-nd - 1, nd + 1))
        axes.append(draw(st.sampled_from(choices)))
    return axes


def env_flag(var: str, raw: str) -> None:
    """Set the ``blu.config`` flag read from environment variable ``var`` as if the variable held
    ``raw`` (flags are read from the environment once, at import; conftest restores them)."""
    from blu.core.config import FLAGS, config, read_environment

    name = next(n for n, (v, _, _) in FLAGS.items() if v == var)
    config.update(name, read_environment({var: raw})[name])


# ---- tolerances --------------------------------------------------------------------------------
# One place for the tolerances of tests that compare blu against an independent float64
# reference or against a differently compiled program: a few units of the dtype's epsilon per
# operation in the computation (rounding errors add up roughly linearly with the operation count
# in the worst case), never bit-equality between different programs.

_EPS = {"float64": 2.22e-16, "float32": 1.19e-7, "float16": 9.77e-4, "bfloat16": 7.81e-3}


def tolerance(dtype: Any, n_ops: int = 1) -> float:
    """Relative (and absolute) tolerance for a result of ``dtype`` from ``n_ops`` operations:
    ``64 * n_ops`` epsilons, at least 1e-12. Zero for integers and bools (exact)."""
    name = str(np.dtype(dtype)) if str(dtype) != "bfloat16" else "bfloat16"
    if name not in _EPS:
        return 0.0
    return max(64 * n_ops * _EPS[name], 1e-12)


def assert_close(got: Any, want: Any, n_ops: int = 1, dtype: Any = None) -> None:
    """``got`` equals ``want`` within ``tolerance(dtype of got, n_ops)``; exact for ints/bools;
    NaN matches NaN; shapes must agree."""
    for g, w in zip(pytree.tree_leaves(got), pytree.tree_leaves(want), strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        tol = tolerance(dtype or g.dtype, n_ops)
        if tol == 0.0:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(
                g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol, equal_nan=True
            )


def assert_matches(got: Any, want: Any, dtype: Any = None, rtol: float = 1e-12) -> None:
    """``got`` has ``want``'s shape, ``dtype`` when given, and ``want``'s values to ``rtol``
    (compared in float64): for results numpy computes the same way."""
    g = np.asarray(got)
    assert g.shape == np.shape(want), (g.shape, np.shape(want))
    if dtype is not None:
        assert g.dtype == dtype, (g.dtype, dtype)
    np.testing.assert_allclose(g.astype(np.float64), np.asarray(want, np.float64), rtol=rtol)


# ---- a two-layer MLP's SGD step, and the same step in float64 numpy ----------------------------


def mlp_params(rng: np.random.Generator, d: int, hidden: int, out: int,
               bias2: bool = True) -> dict[str, np.ndarray]:  # fmt: skip
    """float32 weights of ``gelu(x @ w1 + b1) @ w2 (+ b2)``, standard normal."""
    p = {"w1": rng.standard_normal((d, hidden)).astype(np.float32),
         "b1": rng.standard_normal(hidden).astype(np.float32),
         "w2": rng.standard_normal((hidden, out)).astype(np.float32)}  # fmt: skip
    if bias2:
        p["b2"] = rng.standard_normal(out).astype(np.float32)
    return p


def mlp_step(p: dict, x: Any, y: Any) -> dict:
    """One SGD step (lr 0.01) of the squared error of ``gelu_tanh(x @ w1 + b1) @ w2 (+ b2)``."""

    def loss(p):
        h = blu.nn.gelu(x @ p["w1"] + p["b1"], approximate=True)
        out = h @ p["w2"] + p["b2"] if "b2" in p else h @ p["w2"]
        return ((out - y) ** 2).mean()

    g = blu.grad(loss)(p)
    return {k: p[k] - 0.01 * g[k] for k in p}


def mlp_step_float64(p: dict, x: np.ndarray, y: np.ndarray) -> dict:
    """``mlp_step`` by hand in float64 numpy (the tanh GELU's derivative written out)."""
    p = {k: v.astype(np.float64) for k, v in p.items()}
    x, y = x.astype(np.float64), y.astype(np.float64)
    c = np.sqrt(2 / np.pi)
    pre = x @ p["w1"] + p["b1"]
    th = np.tanh(c * (pre + 0.044715 * pre**3))
    h = 0.5 * pre * (1 + th)
    out = h @ p["w2"] + p.get("b2", 0.0)
    dout = 2 * (out - y) / out.size
    dh = dout @ p["w2"].T
    dpre = dh * (0.5 * (1 + th) + 0.5 * pre * (1 - th**2) * c * (1 + 3 * 0.044715 * pre**2))
    g = {"w1": x.T @ dpre, "b1": dpre.sum(0), "w2": h.T @ dout, "b2": dout.sum(0)}
    return {k: p[k] - 0.01 * g[k] for k in p}


def first_devices_mesh(shape: Sequence[int], names: Sequence[str]) -> Any:
    """A ``Mesh`` of the first ``prod(shape)`` devices laid out row-major in ``shape``."""
    import math

    from blu.parallel import Mesh, devices

    devs = np.empty(math.prod(shape), dtype=object)
    devs[:] = devices()[: math.prod(shape)]
    return Mesh(devs.reshape(shape), tuple(names))


def same_pads(shape, eff, strides, lower):
    """'SAME' padding by its definition, for windowed references: ``out = ceil(n / s)``, the
    missing extent ``(out - 1) s + eff - n`` split low/high (the larger half high, or low for
    'SAME_LOWER'). ``eff``: the dilated window sizes."""
    pads = []
    for n, e, s in zip(shape, eff, strides):
        total = max((-(-n // s) - 1) * s + e - n, 0)
        pads.append((total - total // 2, total // 2) if lower else (total // 2, total - total // 2))
    return pads
