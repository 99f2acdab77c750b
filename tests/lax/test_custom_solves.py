"""lax.custom_root and lax.custom_linear_solve: values against numpy float64, derivatives by the
implicit function theorem against closed forms and central differences (the solvers are
while_loops, which reverse mode cannot differentiate: a gradient that went through them would
fail), jit, vmap, has_aux and pytrees, and their errors."""

import numpy as np
import pytest
from helpers import check_grads, numerical_jvp, tolerance
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu import lax
from blu.core.errors import BluError, BluTypeError

F64 = tolerance(np.float64, 64)

# ---- custom_root -------------------------------------------------------------------------------


def newton(f, x0):
    """Newton's iteration for a scalar root, in a while_loop (not reverse-differentiable)."""

    def step(c):
        x, i = c
        return x - f(x) / blu.grad(f)(x), i + 1

    def more(c):
        x, i = c
        return (bnp.abs(f(x)) > 1e-14 * bnp.maximum(1.0, bnp.abs(x))) & (i < 60)

    x, _ = lax.while_loop(more, step, (x0, 0))
    return x


def scalar_tangent_solve(g, y):
    return y / g(1.0)


def sqrt_root(y):
    """sqrt(y) as the root of x**2 - y (y closed over by f: the parameter)."""
    return lax.custom_root(lambda x: x * x - y, bnp.ones_like(y), newton, scalar_tangent_solve)


@given(st.floats(0.05, 50.0))
def test_custom_root_sqrt_value_and_grad(y):
    y = np.float64(y)
    np.testing.assert_allclose(float(sqrt_root(y)), np.sqrt(y), rtol=F64)
    g = blu.grad(sqrt_root)(y)
    np.testing.assert_allclose(float(g), 1 / (2 * np.sqrt(y)), rtol=F64)
    cd = numerical_jvp(lambda v: np.asarray(sqrt_root(v)), [y], [1.0], eps=1e-6 * y)
    np.testing.assert_allclose(float(g), cd, rtol=1e-6)
    check_grads(sqrt_root, [y], rtol=1e-6)


def test_custom_root_second_order():
    # d2/dy2 sqrt(y) = -1/4 y^(-3/2): the rule's own solution is differentiated by the rule again
    y = np.float64(2.5)
    h = blu.grad(blu.grad(sqrt_root))(y)
    np.testing.assert_allclose(float(h), -0.25 * y**-1.5, rtol=1e-10)


def test_custom_root_no_tangent_by_guess():
    y = np.float64(3.0)
    f = lambda g: lax.custom_root(lambda x: x * x - y, g, newton, scalar_tangent_solve)  # noqa: E731
    assert float(blu.grad(f)(np.float64(1.5))) == 0.0


def test_custom_root_jit_and_vmap():
    ys = np.array([0.5, 2.0, 9.0, 30.0])
    np.testing.assert_allclose(np.asarray(blu.jit(sqrt_root)(ys[1])), np.sqrt(ys[1]), rtol=F64)
    np.testing.assert_allclose(np.asarray(blu.vmap(sqrt_root)(ys)), np.sqrt(ys), rtol=F64)
    g = blu.jit(blu.vmap(blu.grad(sqrt_root)))(ys)
    np.testing.assert_allclose(np.asarray(g), 1 / (2 * np.sqrt(ys)), rtol=F64)


def test_custom_root_has_aux_and_pytree():
    # a pytree guess {"a": x, "b": z}: roots of x**3 - p and z - 2 p, solved elementwise
    p = np.float64(5.0)

    def solve(f, v0):
        a = newton(lambda a: f({"a": a, "b": v0["b"]})["a"], v0["a"])
        b = v0["b"] - f(v0)["b"]
        return {"a": a, "b": b}, bnp.int32(7)

    def tangent_solve(g, y):
        d = g({"a": 1.0, "b": 0.0})["a"]  # the diagonal: the Jacobian is diagonal
        return {"a": y["a"] / d, "b": y["b"]}

    def run(p_):
        f_ = lambda v: {"a": v["a"] ** 3 - p_, "b": v["b"] - 2 * p_}  # noqa: E731
        x, aux = lax.custom_root(
            f_, {"a": np.float64(1), "b": np.float64(0)}, solve, tangent_solve, has_aux=True
        )
        return x, aux

    (x, aux) = run(p)
    np.testing.assert_allclose(float(x["a"]), np.cbrt(p), rtol=F64)
    np.testing.assert_allclose(float(x["b"]), 2 * p, rtol=F64)
    assert int(aux) == 7
    g = blu.grad(lambda q: run(q)[0]["a"] + run(q)[0]["b"])(p)
    np.testing.assert_allclose(float(g), p ** (-2 / 3) / 3 + 2, rtol=F64)


def test_custom_root_errors():
    y = np.float64(2.0)
    f = lambda x: x * x - y  # noqa: E731
    with pytest.raises(BluTypeError, match="solve's output"):
        lax.custom_root(f, y, lambda f, x0: bnp.stack([x0, x0]), scalar_tangent_solve)
    with pytest.raises(BluTypeError, match="f's output"):
        lax.custom_root(lambda x: (x, x), y, newton, scalar_tangent_solve)
    with pytest.raises(BluTypeError, match="pair"):
        lax.custom_root(f, y, newton, scalar_tangent_solve, has_aux=True)


# ---- custom_linear_solve -----------------------------------------------------------------------


def matrices(n: int, seed: int):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n)) + n * np.eye(n)  # well conditioned
    return a, rng.standard_normal(n)


def dense_solve(a, b, symmetric=False, **kw):
    """x = A^{-1} b through custom_linear_solve, A closed over by matvec and the solvers."""
    mv = lambda x: a @ x  # noqa: E731
    if symmetric:
        return lax.custom_linear_solve(
            mv, b, lambda _, r: bnp.linalg.solve(a, r), symmetric=True, **kw
        )
    return lax.custom_linear_solve(
        mv, b, lambda _, r: bnp.linalg.solve(a, r), lambda _, r: bnp.linalg.solve(a.T, r), **kw
    )


@given(st.integers(1, 5), st.integers(0, 2**16))
def test_linear_solve_value_and_grads(n, seed):
    a, b = matrices(n, seed)
    np.testing.assert_allclose(np.asarray(dense_solve(a, b)), np.linalg.solve(a, b), rtol=1e-9)
    w = np.random.default_rng(seed + 1).standard_normal(n)
    loss = lambda a_, b_: bnp.sum(w * dense_solve(a_, b_))  # noqa: E731
    gb = blu.grad(loss, argnums=1)(a, b)
    np.testing.assert_allclose(np.asarray(gb), np.linalg.solve(a.T, w), rtol=1e-8, atol=1e-12)
    ga = np.asarray(blu.grad(loss, argnums=0)(a, b))
    # central differences of numpy's float64 solve, one entry of A at a time
    want = np.zeros_like(a)
    for i in range(n):
        for j in range(n):
            e = np.zeros_like(a)
            e[i, j] = 1.0
            want[i, j] = numerical_jvp(lambda m: w @ np.linalg.solve(m, b), [a], [e])
    np.testing.assert_allclose(ga, want, rtol=1e-6, atol=1e-8)
    check_grads(dense_solve, [a, b], rtol=1e-6, atol=1e-8)


def test_linear_solve_symmetric():
    a, b = matrices(4, 3)
    s = a @ a.T  # symmetric positive definite
    np.testing.assert_allclose(
        np.asarray(dense_solve(s, b, symmetric=True)), np.linalg.solve(s, b), rtol=1e-9
    )
    check_grads(lambda s_, b_: dense_solve(s_, b_, symmetric=True), [s, b], rtol=1e-6)


def test_linear_solve_solvers_not_differentiated():
    # an iterative solver in a while_loop: reverse mode through it would raise
    a, b = matrices(3, 5)
    s = a @ a.T + 3 * np.eye(3)

    def cg(mv, r):
        def step(c):
            x, res, p, k = c
            ap = mv(p)
            alpha = (res @ res) / (p @ ap)
            res2 = res - alpha * ap
            return x + alpha * p, res2, res2 + (res2 @ res2) / (res @ res) * p, k + 1

        x, *_ = lax.while_loop(
            lambda c: (bnp.sqrt(c[1] @ c[1]) > 1e-13) & (c[3] < 50),
            step,
            (bnp.zeros_like(r), r, r, 0),
        )
        return x

    f = lambda s_, b_: lax.custom_linear_solve(lambda x: s_ @ x, b_, cg, symmetric=True)  # noqa: E731
    np.testing.assert_allclose(np.asarray(f(s, b)), np.linalg.solve(s, b), rtol=1e-9)
    check_grads(f, [s, b], rtol=1e-6)


def test_linear_solve_jit_and_vmap():
    a, b = matrices(3, 7)
    bs = np.stack([b, 2 * b + 1, -b])
    np.testing.assert_allclose(np.asarray(blu.jit(dense_solve)(a, b)), np.linalg.solve(a, b),
                               rtol=1e-9)  # fmt: skip
    got = blu.vmap(dense_solve, (None, 0))(a, bs)
    np.testing.assert_allclose(np.asarray(got), np.linalg.solve(a, bs.T).T, rtol=1e-9)
    as_ = np.stack([a, a + np.eye(3), a.T])
    got = blu.jit(blu.vmap(dense_solve))(as_, bs)
    want = np.stack([np.linalg.solve(m, v) for m, v in zip(as_, bs)])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-9)
    g = blu.vmap(blu.grad(lambda m, v: bnp.sum(dense_solve(m, v))), (0, None))(as_, b)
    want = np.stack([-np.outer(np.linalg.solve(m.T, np.ones(3)), np.linalg.solve(m, b))
                     for m in as_])  # fmt: skip
    np.testing.assert_allclose(np.asarray(g), want, rtol=1e-8)
    gb = blu.jit(blu.vmap(blu.grad(lambda v: bnp.sum(dense_solve(a, v)))))(bs)
    np.testing.assert_allclose(np.asarray(gb), np.tile(np.linalg.solve(a.T, np.ones(3)), (3, 1)),
                               rtol=1e-8)  # fmt: skip


def test_linear_solve_pytree_and_has_aux():
    # b = (u, v) with the block-diagonal map (A u, 2 v); solve returns an aux count
    a, u = matrices(3, 11)
    v = np.array([1.0, -4.0])

    def mv(x):
        return (a @ x[0], 2.0 * x[1])

    def solve(_, r):
        return (bnp.linalg.solve(a, r[0]), r[1] / 2.0), {"iters": bnp.int32(1)}

    def tsolve(_, r):
        return (bnp.linalg.solve(a.T, r[0]), r[1] / 2.0), {"iters": bnp.int32(2)}

    def f(u_, v_):
        x, aux = lax.custom_linear_solve(mv, (u_, v_), solve, tsolve, has_aux=True)
        return x, aux

    (x0, x1), aux = f(u, v)
    np.testing.assert_allclose(np.asarray(x0), np.linalg.solve(a, u), rtol=1e-9)
    np.testing.assert_allclose(np.asarray(x1), v / 2, rtol=F64)
    assert int(aux["iters"]) == 1
    gu, gv = blu.grad(lambda u_, v_: bnp.sum(f(u_, v_)[0][0]) + bnp.sum(f(u_, v_)[0][1]),
                      argnums=(0, 1))(u, v)  # fmt: skip
    np.testing.assert_allclose(np.asarray(gu), np.linalg.solve(a.T, np.ones(3)), rtol=1e-8)
    np.testing.assert_allclose(np.asarray(gv), np.full(2, 0.5), rtol=F64)
    _, (t0, t1) = blu.jvp(lambda u_: f(u_, v)[0], (u,), (np.ones(3),))
    np.testing.assert_allclose(np.asarray(t0), np.linalg.solve(a, np.ones(3)), rtol=1e-9)
    np.testing.assert_allclose(np.asarray(t1), 0.0)


def test_linear_solve_errors():
    a, b = matrices(3, 13)
    mv = lambda x: a @ x  # noqa: E731
    solve = lambda _, r: bnp.linalg.solve(a, r)  # noqa: E731
    # no transpose_solve and not symmetric: forward mode works, reverse mode says what is missing
    f = lambda b_: lax.custom_linear_solve(mv, b_, solve)  # noqa: E731
    _, t = blu.jvp(f, (b,), (np.ones(3),))
    np.testing.assert_allclose(np.asarray(t), np.linalg.solve(a, np.ones(3)), rtol=1e-9)
    with pytest.raises(BluError, match="transpose_solve"):
        blu.grad(lambda b_: bnp.sum(f(b_)))(b)
    with pytest.raises(BluTypeError, match=r"solve's output.*\(3,\)"):
        lax.custom_linear_solve(mv, b, lambda _, r: r[:2])
    with pytest.raises(BluTypeError, match="float32"):
        lax.custom_linear_solve(mv, b, lambda _, r: r.astype(np.float32))
    with pytest.raises(BluTypeError, match="matvec's output"):
        lax.custom_linear_solve(lambda x: x[:2], b, solve)
    with pytest.raises(BluTypeError, match="transpose_solve's output"):
        lax.custom_linear_solve(mv, b, solve, lambda _, r: (r, r))
