"""cond / switch / scan / while_loop / fori_loop against Python control flow (values, gradients,
vmap, jit), plus their error messages."""

import numpy as np
import pytest
from helpers import arrays, check_grads, check_jvp, check_vjp, rng_for, shapes
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu import lax
from blu.core import dtypes
from blu.core.errors import BluError, BluShapeError, BluTypeError
from blu.lax.control_flow import cond, fori_loop, scan, switch, while_loop
from blu.lax.control_flow.loops import WhileLoopReverseModeError

# ---- scan --------------------------------------------------------------------------------------


def body(c, x):
    """One step of a small recurrent cell: carry (h, s), slice x of the carry's shape."""
    h, s = c
    h_new = lax.tanh(lax.add(lax.mul(h, x), lax.sin(s)))
    return (h_new, lax.add(s, lax.mul(x, x))), lax.mul(h_new, s)


def body_np(c, x):
    h, s = c
    h_new = np.tanh(h * x + np.sin(s))
    return (h_new, s + x * x), h_new * s


def unrolled(c, xs, reverse=False):
    """The same loop in Python, with blu ops (differentiable)."""
    ys = [None] * xs.shape[0]
    order = range(xs.shape[0] - 1, -1, -1) if reverse else range(xs.shape[0])
    for i in order:
        c, ys[i] = body(c, xs[i])
    return c, ys


def loss_scan(h, s, xs, reverse=False):
    (h, s), ys = scan(body, (h, s), xs, reverse=reverse)
    return lax.add(lax.reduce_sum(lax.mul(h, s)), lax.reduce_sum(lax.sin(ys)))


def loss_unrolled(h, s, xs, reverse=False):
    (h, s), ys = unrolled((h, s), xs, reverse)
    total = lax.reduce_sum(lax.mul(h, s))
    for y in ys:
        total = lax.add(total, lax.reduce_sum(lax.sin(y)))
    return total


@given(st.data())
def test_scan_equals_unrolled_loop_value_and_gradient(data):
    shape = data.draw(shapes(max_dims=2, max_side=3))
    length = data.draw(st.integers(0, 4))
    reverse = data.draw(st.booleans())
    h, s = data.draw(arrays(shape)), data.draw(arrays(shape))
    xs = data.draw(arrays((length,) + shape))
    # value: against a numpy float64 loop
    c = (h, s)
    ys = np.zeros((length,) + shape)
    for i in range(length - 1, -1, -1) if reverse else range(length):
        c, ys[i] = body_np(c, xs[i])
    (gh, gs), gys = scan(body, (h, s), xs, reverse=reverse)
    np.testing.assert_allclose(np.asarray(gh), c[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(gs), c[1], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(gys), ys, rtol=1e-12, atol=1e-12)
    # gradient: against the unrolled Python loop, and jit of both
    g_scan = blu.grad(loss_scan, argnums=(0, 1, 2))(h, s, xs, reverse)
    g_loop = blu.grad(loss_unrolled, argnums=(0, 1, 2))(h, s, xs, reverse)
    g_jit = blu.jit(blu.grad(loss_scan, argnums=(0, 1, 2)), static_argnums=3)(h, s, xs, reverse)
    for a, b, c_ in zip(g_scan, g_loop, g_jit):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(np.asarray(c_), np.asarray(b), rtol=1e-10, atol=1e-12)


@given(st.data())
def test_scan_derivatives_match_finite_differences(data):
    shape = data.draw(shapes(max_dims=1, max_side=3))
    length = data.draw(st.integers(1, 3))
    h, s = data.draw(arrays(shape)), data.draw(arrays(shape))
    xs = data.draw(arrays((length,) + shape))
    check_grads(lambda h, s, xs: scan(body, (h, s), xs), [h, s, xs], order=2)


@given(st.data())
def test_scan_vmap_matches_per_example_loop(data):
    shape = data.draw(shapes(max_dims=1, max_side=3))
    batch = data.draw(st.integers(1, 3))
    h, s = data.draw(arrays((batch,) + shape)), data.draw(arrays(shape))
    xs = data.draw(arrays((2, batch) + shape))  # batched along axis 1 of xs

    def f(h, s, xs):
        return scan(body, (h, s), xs)

    got = blu.vmap(f, in_axes=(0, None, 1))(h, s, xs)
    for b in range(batch):
        want = f(h[b], s, xs[:, b])
        for g, w in zip(blu.core.pytree.tree_leaves(got), blu.core.pytree.tree_leaves(want)):
            np.testing.assert_allclose(np.asarray(g)[b], np.asarray(w), rtol=1e-12, atol=1e-12)
    # and the gradient of the batched loss equals the sum of per-example gradients
    g = blu.grad(lambda s: lax.reduce_sum(blu.vmap(loss_scan, (0, None, 1))(h, s, xs)))(s)
    want = sum(np.asarray(blu.grad(loss_scan, 1)(h[b], s, xs[:, b])) for b in range(batch))
    np.testing.assert_allclose(np.asarray(g), want, rtol=1e-10, atol=1e-12)


def test_scan_closure_over_traced_values_and_length_only():
    rng = np.random.default_rng(0)
    w, c0 = rng.standard_normal(3), rng.standard_normal(3)

    def f(w, c0):  # closes over w (a tracer under grad / vmap / jit)
        c, ys = scan(lambda c, _: (lax.sin(lax.mul(c, w)), c), c0, None, length=4)
        return lax.add(lax.reduce_sum(c), lax.reduce_sum(ys))

    def f_np(w, c0):
        total, c = 0.0, c0
        for _ in range(4):
            total, c = total + c.sum(), np.sin(c * w)
        return total + c.sum()

    np.testing.assert_allclose(float(f(w, c0)), f_np(w, c0), rtol=1e-12)
    np.testing.assert_allclose(float(blu.jit(f)(w, c0)), f_np(w, c0), rtol=1e-12)
    check_vjp(f, [w, c0], rng)
    ws = rng.standard_normal((2, 3))
    got = blu.vmap(f, (0, None))(ws, c0)
    np.testing.assert_allclose(np.asarray(got), [f_np(w_, c0) for w_ in ws], rtol=1e-12)


def test_scan_residuals_of_xs_are_not_copied():
    """Under grad, a scanned-over input the tangent part needs is passed as is (not stacked
    again as an output of the forward loop)."""
    rng = np.random.default_rng(1)
    ws = rng.standard_normal((5, 3, 3))
    ws.flags.writeable = False  # blu copies writable user buffers on entry; this one it keeps

    def f(x, ws):
        dn = (((0,), (0,)), ((), ()))
        return scan(lambda c, w: (lax.tanh(lax.dot_general(c, w, dn)), None), x, ws)[0]

    _, f_jvp = blu.linearize(f, rng.standard_normal(3), ws)
    assert any(r is ws or np.shares_memory(np.asarray(r), ws) for r in f_jvp.residuals)
    assert sum(np.asarray(r).size for r in f_jvp.residuals) <= ws.size + 2 * 5 * 3


@pytest.mark.parametrize(
    "dtype", ["float32", "float64", "bfloat16", "float16", "int32", "int64", "uint8", "uint32"]
)
def test_scan_cond_while_over_dtypes(dtype):
    dt = dtypes.canonicalize(dtype)
    xs = np.arange(6).reshape(3, 2).astype(dt)
    one = np.asarray(1, dt)
    c, ys = scan(lambda c, x: (lax.add(c, x), c), np.zeros(2, dt), xs)
    assert c.dtype == dt and ys.dtype == dt
    np.testing.assert_array_equal(np.asarray(c, np.float64), xs.astype(np.float64).sum(0))
    np.testing.assert_array_equal(np.asarray(ys[2], np.float64), xs[:2].astype(np.float64).sum(0))
    cj, _ = blu.jit(lambda c, xs: scan(lambda c, x: (lax.add(c, x), x), c, xs))(np.zeros(2, dt), xs)
    np.testing.assert_array_equal(np.asarray(cj), np.asarray(c))
    out = cond(True, lambda a: lax.add(a, a), lambda a: a, xs)
    np.testing.assert_array_equal(np.asarray(out, np.float64), 2 * xs.astype(np.float64))
    n = while_loop(lambda v: lax.lt(v[0], 3), lambda v: (lax.add(v[0], 1), lax.add(v[1], v[1])),
                   (0, one))  # fmt: skip
    assert float(np.asarray(n[1], np.float64)) == 8.0


def test_scan_bool_carry_and_int_counter_under_grad():
    xs = np.array([0.5, -1.0, 2.0])

    def f(x):
        def step(c, e):
            i, seen_neg, v = c
            return (lax.add(i, 1), lax.ne(seen_neg, lax.lt(e, 0.0)), lax.mul(v, e)), i

        (i, neg, v), idx = scan(step, (0, False, x), xs)
        return v, i, neg, idx

    v, i, neg, idx = f(np.array(3.0))
    assert float(v) == -3.0 and int(i) == 3 and bool(neg) and list(np.asarray(idx)) == [0, 1, 2]
    assert float(blu.grad(lambda x: f(x)[0])(np.array(3.0))) == -1.0


# ---- cond / switch -----------------------------------------------------------------------------


def true_branch(a, b):
    return lax.mul(lax.sin(a), b), lax.reduce_sum(a)


def false_branch(a, b):
    return lax.add(a, lax.mul(b, b)), lax.reduce_sum(b)


@given(st.data())
def test_cond_under_vmap_with_batched_predicate_equals_python_if(data):
    shape = data.draw(shapes(max_dims=2, max_side=3))
    batch = data.draw(st.integers(1, 4))
    preds = np.array(data.draw(st.lists(st.booleans(), min_size=batch, max_size=batch)))
    a = data.draw(arrays((batch,) + shape))
    b = data.draw(arrays(shape))

    def f(p, a, b):
        return cond(p, true_branch, false_branch, a, b)

    got = blu.vmap(f, in_axes=(0, 0, None))(preds, a, b)
    for i in range(batch):
        want = (np.sin(a[i]) * b, a[i].sum()) if preds[i] else (a[i] + b * b, b.sum())
        np.testing.assert_allclose(np.asarray(got[0])[i], want[0], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.asarray(got[1])[i], want[1], rtol=1e-12, atol=1e-12)
    # gradients through the batched cond, and jit
    loss = lambda a, b: lax.reduce_sum(blu.vmap(f, (0, 0, None))(preds, a, b)[0])
    ga = blu.grad(loss)(a, b)
    want_ga = np.where(preds.reshape((-1,) + (1,) * len(shape)), np.cos(a) * b, 1.0)
    np.testing.assert_allclose(np.asarray(ga), want_ga, rtol=1e-12, atol=1e-12)
    gj = blu.jit(blu.grad(loss))(a, b)
    np.testing.assert_allclose(np.asarray(gj), want_ga, rtol=1e-12, atol=1e-12)


@given(
    st.sampled_from([np.int64, np.uint32, np.uint64]),
    st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=4),
)
def test_switch_clamps_wide_integer_indices(dtype, idx):
    # indices past int32 are clamped too (the cast to int32 wrapped them: 2**32 + 1 picked
    # branch 1, uint32 2**32 - 1 branch 0)
    info = np.iinfo(dtype)
    idx = np.array([min(max(i, int(info.min)), int(info.max)) for i in idx + [2**32 + 1]], dtype)
    want = [float(min(max(int(i), 0), 2)) for i in idx]
    fns = [lambda: 0.0, lambda: 1.0, lambda: 2.0]
    for i, w in zip(idx, want):
        assert float(switch(i, fns)) == w
        assert float(blu.jit(lambda j: switch(j, fns))(i)) == w
    np.testing.assert_array_equal(np.asarray(blu.vmap(lambda j: switch(j, fns))(idx)), want)


@given(st.data())
def test_cond_gradients_match_finite_differences(data):
    shape = data.draw(shapes(max_dims=2, max_side=3))
    p = data.draw(st.booleans())
    a, b = data.draw(arrays(shape)), data.draw(arrays(shape))
    check_grads(lambda a, b: cond(p, true_branch, false_branch, a, b), [a, b], order=2)


@given(st.data())
def test_switch_under_vmap_equals_python_indexing(data):
    shape = data.draw(shapes(max_dims=2, max_side=3))
    batch = data.draw(st.integers(1, 5))
    idx = np.array(data.draw(st.lists(st.integers(-2, 5), min_size=batch, max_size=batch)))
    x = data.draw(arrays((batch,) + shape))
    fns = [lambda v: lax.mul(v, 2.0), lax.sin, lambda v: lax.mul(v, v)]
    np_fns = [lambda v: v * 2.0, np.sin, lambda v: v * v]
    idx = idx.astype(np.int32)
    got = blu.vmap(lambda i, v: switch(i, fns, v))(idx, x)
    for k in range(batch):
        want = np_fns[min(max(int(idx[k]), 0), 2)](x[k])
        np.testing.assert_allclose(np.asarray(got)[k], want, rtol=1e-12, atol=1e-12)
        eager = switch(idx[k], fns, x[k])
        np.testing.assert_allclose(np.asarray(eager), want, rtol=1e-12, atol=1e-12)
    # unbatched index, batched operand: one branch runs on the whole batch
    i0 = int(idx[0])
    got = blu.vmap(lambda v: switch(i0, fns, v))(x)
    np.testing.assert_allclose(np.asarray(got), np_fns[min(max(i0, 0), 2)](x), rtol=1e-12)
    g = blu.grad(lambda v: lax.reduce_sum(switch(np.int32(1), fns, v)))(x)
    np.testing.assert_allclose(np.asarray(g), np.cos(x), rtol=1e-12, atol=1e-12)


def test_cond_closure_and_traced_predicate_under_jit():
    w = np.array([1.0, 2.0, 3.0])

    @blu.jit
    def f(p, x):
        return cond(lax.gt(p, 0.0), lambda v: lax.mul(v, w), lambda v: lax.sub(v, w), x)

    x = np.array([0.5, -0.5, 1.5])
    np.testing.assert_allclose(np.asarray(f(np.float64(1.0), x)), x * w)
    np.testing.assert_allclose(np.asarray(f(np.float64(-1.0), x)), x - w)
    g = blu.grad(lambda w_: lax.reduce_sum(cond(True, lambda v: lax.mul(v, w_), lax.neg, x)))(w)
    np.testing.assert_allclose(np.asarray(g), x)


# ---- fori_loop / while_loop --------------------------------------------------------------------


def step(i, v):
    i = lax.broadcast_in_dim(lax.convert_element_type(i, v.dtype), v.shape, ())
    return lax.add(lax.mul(lax.sin(v), 0.9), i)


@given(st.data())
def test_fori_loop_equals_python_loop_static_and_traced_bounds(data):
    shape = data.draw(shapes(max_dims=2, max_side=3))
    lo = data.draw(st.integers(-2, 3))
    hi = data.draw(st.integers(-2, 5))
    x = data.draw(arrays(shape))
    want = x.copy()
    for i in range(lo, hi):
        want = np.sin(want) * 0.9 + i
    got = fori_loop(lo, hi, step, x)  # static bounds: a scan
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)
    traced = blu.jit(lambda lo, hi, x: fori_loop(lo, hi, step, x))(np.int32(lo), np.int32(hi), x)
    np.testing.assert_allclose(np.asarray(traced), want, rtol=1e-12, atol=1e-12)
    # reverse mode with a static trip count; forward mode with traced bounds
    rng = rng_for(x)
    check_vjp(lambda x: fori_loop(lo, hi, step, x), [x], rng)
    check_jvp(lambda x: blu.jit(lambda x, n: fori_loop(0, n, step, x))(x, np.int32(hi)), [x], rng)


@given(st.data())
def test_while_loop_equals_python_loop_and_vmap_runs_until_all_lanes_stop(data):
    batch = data.draw(st.integers(1, 4))
    x = np.abs(data.draw(arrays((batch,), lo=0.1, hi=3.0))) + 0.1
    limit = data.draw(st.floats(1.0, 50.0))

    def f(x):  # doubles x until it exceeds limit; counts the steps
        return while_loop(
            lambda c: lax.lt(c[1], limit),
            lambda c: (lax.add(c[0], 1), lax.mul(c[1], 2.0)),
            (0, x),
        )

    def f_np(x):
        n = 0
        while x < limit:
            n, x = n + 1, x * 2.0
        return n, x

    for k in range(batch):
        n, v = f(x[k])
        assert (int(n), float(v)) == f_np(x[k])
    ns, vs = blu.vmap(f)(x)  # per-lane predicates: lanes that stop keep their values
    assert [int(n) for n in np.asarray(ns)] == [f_np(v)[0] for v in x]
    np.testing.assert_allclose(np.asarray(vs), [f_np(v)[1] for v in x])
    ns_j, _ = blu.jit(blu.vmap(f))(x)
    np.testing.assert_array_equal(np.asarray(ns_j), np.asarray(ns))
    # forward mode through the loop: d(x * 2^n)/dx = 2^n
    _, t = blu.jvp(lambda x: blu.vmap(f)(x)[1], (x,), (np.ones_like(x),))
    np.testing.assert_allclose(np.asarray(t), [2.0 ** f_np(v)[0] for v in x])


def test_while_loop_batched_closure_predicate():
    limits = np.array([1, 4, 0, 2], np.int32)
    out = blu.vmap(
        lambda n: while_loop(lambda c: lax.lt(c, n), lambda c: lax.add(c, 1), np.int32(0))
    )(limits)
    np.testing.assert_array_equal(np.asarray(out), limits)


# ---- errors ------------------------------------------------------------------------------------


def test_scan_carry_mismatch_names_leaf_shapes_and_dtypes():
    init = {"h": np.zeros(3, np.float32), "n": np.zeros((), np.int32)}
    with pytest.raises(BluTypeError) as e:
        scan(lambda c, x: ({"h": lax.broadcast_in_dim(c["h"], (2, 3), (1,)), "n": c["n"]}, x),
             init, np.zeros((4,), np.float32))  # fmt: skip
    msg = str(e.value)
    assert "carry['h']" in msg and "f32[3]" in msg and "f32[2,3]" in msg and "float32" in msg
    with pytest.raises(BluTypeError) as e:
        scan(lambda c, x: ({"h": c["h"], "n": lax.convert_element_type(c["n"], np.float32)}, x),
             init, np.zeros((4,), np.float32))  # fmt: skip
    msg = str(e.value)
    assert "carry['n']" in msg and "i32[]" in msg and "f32[]" in msg and "int32" in msg
    with pytest.raises(BluTypeError, match="structure"):
        scan(lambda c, x: ((c["h"],), x), init, np.zeros((4,), np.float32))
    with pytest.raises(BluTypeError) as e:
        while_loop(lambda v: True, lambda v: (v[0], lax.convert_element_type(v[1], np.float64)),
                   (np.float32(0), np.float32(1)))  # fmt: skip
    assert "val[1]" in str(e.value) and "f64[]" in str(e.value)
    with pytest.raises(BluTypeError) as e:  # fori_loop's own counter is not part of the name
        fori_loop(0, 2, lambda i, v: {"w": lax.reshape(v["w"], (1, 2))}, {"w": np.zeros(2)})
    assert "val['w']" in str(e.value) and "f64[2]" in str(e.value) and "f64[1,2]" in str(e.value)


def test_weak_typed_carry_is_promoted():
    c, _ = scan(lambda c, x: (lax.add(lax.convert_element_type(c, np.float32), x), None), 0,
                np.ones(3, np.float32))  # fmt: skip
    assert c.dtype == np.float32 and float(c) == 3.0


def test_weak_carry_promotes_to_a_weak_result_of_another_kind():
    # JAX's _promote_weak_typed_inputs: a weak int carry meeting a weak float result (c + 1.5)
    # becomes float32, in scan, while_loop and fori_loop alike (a Python loop's values)
    c, _ = scan(lambda c, x: (c + 1.5, None), 0, None, length=3)
    assert c.dtype == np.float32 and float(c) == 4.5
    w = while_loop(lambda c: c < 3, lambda c: c + 1.5, 0)
    assert w.dtype == np.float32 and float(w) == 3.0
    f = fori_loop(0, 3, lambda i, c: c * 2.0 + i, 1)
    v = 1.0
    for i in range(3):
        v = v * 2.0 + i
    assert f.dtype == np.float32 and float(f) == v


@pytest.mark.parametrize("loop", ["scan", "while_loop", "fori_loop"])
def test_weak_float_carry_is_not_cast_to_an_int_result(loop):
    # 0.5 promoted with int32 is float32, not int32: the carry's types differ (it was truncated
    # to 0, and the while_loop below never ended)
    to_int = lambda c: lax.convert_element_type(lax.gt(c, 0.0), np.int32)  # noqa: E731
    with pytest.raises(BluTypeError, match="int32"):
        if loop == "scan":
            scan(lambda c, x: (to_int(c), None), 0.5, None, length=2)
        elif loop == "while_loop":
            while_loop(lambda c: lax.lt(c, 3), to_int, 0.5)
        else:
            fori_loop(0, 3, lambda i, c: to_int(c), 0.5)


def test_grad_of_while_loop_raises_with_advice():
    f = lambda x: while_loop(lambda c: lax.lt(c[0], 3), lambda c: (lax.add(c[0], 1), lax.sin(c[1])),
                             (0, x))[1]  # fmt: skip
    with pytest.raises(WhileLoopReverseModeError) as e:
        blu.grad(f)(np.array(1.0))
    msg = str(e.value)
    assert "fori_loop" in msg and "scan" in msg and "static" in msg
    # forward mode works
    _, t = blu.jvp(f, (np.array(1.0),), (np.array(1.0),))
    np.testing.assert_allclose(
        float(t), np.cos(np.sin(np.sin(1.0))) * np.cos(np.sin(1.0)) * np.cos(1.0)
    )


def test_other_errors():
    with pytest.raises(BluTypeError) as e:
        cond(True, lambda: np.zeros(3), lambda: np.zeros(4))
    assert "output" in str(e.value) and "[3]" in str(e.value) and "[4]" in str(e.value)
    with pytest.raises(BluShapeError, match="scalar"):
        cond(np.array([True, False]), lambda: 0.0, lambda: 1.0)
    with pytest.raises(BluShapeError, match="leading size"):
        scan(lambda c, x: (c, None), 0.0, (np.zeros(3), np.zeros(4)))
    with pytest.raises(BluTypeError, match="bool scalar"):
        while_loop(lambda v: v, lambda v: v, 1.0)
    with pytest.raises(BluTypeError, match="integer scalar"):
        switch(1.0, [lambda: 0.0], ())
    with pytest.raises(BluError):
        fori_loop(0.0, 3, lambda i, v: v, 1.0)


# ---- map with batch_size ------------------------------------------------------------------------


def _map_body(x):
    """A pytree in and out, with a reduction so a batched body is not elementwise only."""
    a, b = x["a"], x["b"]
    return {"s": blu.numpy.sum(a * b), "t": (a - blu.numpy.max(b), b * 2.0)}


@given(st.integers(0, 9), st.integers(0, 11), st.integers(0, 2**16))
def test_map_batch_size_is_the_loop(n, batch_size, seed):
    """``lax.map(f, xs, batch_size=k)`` (JAX's): chunks of k under vmap, the remainder under
    its own vmap; values as the plain Python loop (it raised a raw TypeError before)."""
    rng = np.random.default_rng(seed)
    xs = {"a": rng.standard_normal((n, 3)), "b": rng.standard_normal((n, 3))}
    want_s = np.array([np.sum(xs["a"][i] * xs["b"][i]) for i in range(n)])
    want_t0 = np.array([xs["a"][i] - xs["b"][i].max() for i in range(n)]).reshape(n, 3)
    for fn in (lambda v: lax.map(_map_body, v, batch_size=batch_size),
               blu.jit(lambda v: lax.map(_map_body, v, batch_size=batch_size))):  # fmt: skip
        got = fn(xs)
        np.testing.assert_allclose(np.asarray(got["s"]), want_s.reshape(n), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(got["t"][0]), want_t0, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(got["t"][1]), xs["b"] * 2.0, rtol=1e-12)


def test_map_batch_size_differentiates():
    x = np.linspace(-1.0, 2.0, 7)
    f = lambda v: blu.numpy.sum(lax.map(lambda t: blu.numpy.sin(t) * t, v, batch_size=3))  # noqa: E731
    np.testing.assert_allclose(np.asarray(blu.grad(f)(x)), np.cos(x) * x + np.sin(x), rtol=1e-12)


def test_map_batch_size_rejects_bad_values():
    xs = np.zeros((4, 2))
    with pytest.raises(BluError, match="batch_size"):
        lax.map(lambda t: t, xs, batch_size=-1)
    with pytest.raises(BluError, match="batch_size"):
        lax.map(lambda t: t, xs, batch_size=1.5)
    with pytest.raises(BluShapeError, match="leading size"):
        lax.map(lambda t: t, (xs, np.zeros(3)), batch_size=2)


def test_fori_loop_bounds_of_two_dtypes_raise():
    # JAX's TypeError: int32 and int16 arrays (it summed with an int32 index); a Python int
    # bound takes the other's dtype
    with pytest.raises(BluTypeError, match="i16"):
        fori_loop(bnp.asarray(0, bnp.int32), bnp.asarray(3, bnp.int16), lambda i, c: c + i, 0)
    assert int(fori_loop(np.int16(0), 3, lambda i, c: c + i, 0)) == 0 + 1 + 2
    # a numpy scalar bound meets any, as a Python int (np.prod of a shape is int64; JAX
    # without x64 makes it int32)
    n = np.prod((2, 3))
    assert int(fori_loop(bnp.asarray(0, bnp.int32), n, lambda i, c: c + i, 0)) == sum(range(6))


def test_cond_takes_one_operand_by_keyword():
    # JAX's cond(pred, true_fun, false_fun, operand=x) (it was a TypeError)
    x = np.array([0.5, -1.0, 2.0], np.float32)
    np.testing.assert_allclose(cond(True, lambda v: v * 2, lambda v: v, operand=x), x * 2)
    np.testing.assert_allclose(cond(False, lambda v: v * 2, lambda v: v - 1, operand=x), x - 1)
    with pytest.raises(BluTypeError, match="operand="):
        cond(True, lambda a, b: a, lambda a, b: b, x, operand=x)


def test_loop_results_from_a_weak_init_are_weak_only_if_the_body_keeps_them_weak():
    # JAX's carry out is the body's: a sum from Python 0.0 of float32 entries is a strong
    # float32, so adding bfloat16 stays float32 (it stayed weak and dropped to bfloat16); a
    # body of weak constants keeps it weak
    xs = bnp.asarray(np.array([0.1, 0.2, 0.3], np.float32))
    b = bnp.asarray(np.ones(2, np.float32), bnp.bfloat16)
    tot = fori_loop(0, 3, lambda i, c: c + xs[i], 0.0)
    c, _ = scan(lambda c, x: (c + x, None), 0.0, xs)
    w = while_loop(lambda c: c < 1.0, lambda c: c + xs[0], 0.0)
    for r, want in ((tot, 0.6), (c, 0.6), (w, 1.0)):
        assert (r + b).dtype == np.float32
        np.testing.assert_allclose(float(r), want, rtol=1e-6)
    weak = while_loop(lambda c: c < 3, lambda c: c + 1.0, 0.0)
    assert (weak + b).dtype == bnp.bfloat16 and float(weak) == 3.0
