"""``cond``/``switch`` inside ``blu.shard`` on a predicate that varies over a mesh axis, with
collectives over that axis in the branches (``blu.lax.control_flow.divergent``), on virtual CPU
devices.

Each device runs the branch its own predicate picks, so a collective must be reached by every
device whatever its branch: the same collectives in every branch pair up (each device gives
the operand of its own branch), and a collective in some branches only is an error at trace
time. Values and gradients (inside ``shard``, inside a ``jit`` of it, and outside) are checked
against a per-device numpy float64 program with the collectives written out, and its central
finite differences.

A ``while_loop`` whose predicate varies over the axis, with a collective over it in the loop, is an
error at trace time (devices would run different numbers of iterations); and a cond in a
``custom_jvp``/``custom_vjp`` function or rule runs as one outside it.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu.errors import BluValueError
from blu.parallel import P, all_gather, pmax, pmean, psum, shard
from tests.helpers import first_devices_mesh as _mesh


@pytest.fixture(autouse=True)
def _eight_devices(set_flag):
    set_flag("num_cpu_devices", 8)


# four blocks of two: their sums 1.7, -0.9, 0.8, -0.5 (cond: hot, cold, hot, cold; the switch
# index floor(sum) + 1 clamped: 2, 0, 1, 0)
X = np.array([1.3, 0.4, -0.7, -0.2, 0.9, -0.1, -1.1, 0.6])
W = np.array(0.7)


def _hot(xl):
    return bnp.sum(xl) > 0


# per case: the shard body's function of (w, this device's block), and the numpy program of
# all devices: (w, x) -> the devices' outputs, one row each
def _both_psum(w, xl):
    return blu.lax.cond(_hot(xl), lambda v: psum(v * w, "i"), lambda v: psum(2 * v * w, "i"), xl)


def _both_psum_np(w, x):
    b = x.reshape(4, 2)
    u = np.stack([(1 if r.sum() > 0 else 2) * r * w for r in b])  # each device's own operand
    return np.stack([u.sum(0)] * 4)


def _same_psum(w, xl):
    hot = lambda v: bnp.sin(psum(v * w, "i")) * v  # noqa: E731
    return blu.lax.cond(_hot(xl), hot, lambda v: psum(v * w, "i") + v**2, xl)


def _same_psum_np(w, x):
    b = x.reshape(4, 2)
    s = (b * w).sum(0)
    return np.stack([np.sin(s) * r if r.sum() > 0 else s + r**2 for r in b])


def _pmean_closed_over(w, xl):
    hot = lambda: pmean(bnp.sin(xl * w), "i") * xl  # noqa: E731
    return blu.lax.cond(_hot(xl), hot, lambda: pmean(xl * w**2, "i"))


def _pmean_closed_over_np(w, x):
    b = x.reshape(4, 2)
    m = np.stack([np.sin(r * w) if r.sum() > 0 else r * w**2 for r in b]).mean(0)
    return np.stack([m * r if r.sum() > 0 else m for r in b])


def _switch_all_gather(w, xl):
    k = (bnp.floor(bnp.sum(xl)) + 1).astype("int32")
    branch = lambda c: lambda v: all_gather(v * w * c, "i", tiled=True)  # noqa: E731
    g = blu.lax.switch(k, [branch(1.0), branch(2.0), branch(3.0)], xl)
    return g[2:4] * bnp.sum(g)


def _switch_all_gather_np(w, x):
    b = x.reshape(4, 2)
    k = np.clip(np.floor(b.sum(1)).astype(int) + 1, 0, 2)
    g = np.concatenate([r * w * (c + 1) for r, c in zip(b, k)])
    return np.stack([g[2:4] * g.sum()] * 4)


def _pmax_both(w, xl):
    return blu.lax.cond(
        _hot(xl), lambda v: pmax(v * w, "i"), lambda v: pmax(v * w * w, "i") * v, xl
    )


def _pmax_both_np(w, x):
    b = x.reshape(4, 2)
    m = np.stack([r * w if r.sum() > 0 else r * w * w for r in b]).max(0)
    return np.stack([m if r.sum() > 0 else m * r for r in b])


def _w_in_one_operand(w, xl):
    # the psums pair up although only the taken branch's operand depends on w: the devices
    # taking the other branch see w's effect through the pair's result
    return blu.lax.cond(_hot(xl), lambda v: psum(v * w, "i"), lambda v: psum(v, "i") * w, xl)


def _w_in_one_operand_np(w, x):
    b = x.reshape(4, 2)
    s = np.stack([r * w if r.sum() > 0 else r for r in b]).sum(0)
    return np.stack([s if r.sum() > 0 else s * w for r in b])


def _guarded_log(w, xl):
    # log of a negative sum on the devices that do not take the branch: no nan in the values
    # or the gradients (the branch a device skips sees its inputs through stop_gradient)
    hot = lambda v: psum(v * bnp.log(bnp.sum(v) * w), "i")  # noqa: E731
    return blu.lax.cond(_hot(xl), hot, lambda v: psum(v * w, "i"), xl)


def _guarded_log_np(w, x):
    b = x.reshape(4, 2)
    s = np.stack([r * np.log(r.sum() * w) if r.sum() > 0 else r * w for r in b]).sum(0)
    return np.stack([s] * 4)


CASES = {
    "both psum": (_both_psum, _both_psum_np),
    "same psum": (_same_psum, _same_psum_np),
    "pmean closed over": (_pmean_closed_over, _pmean_closed_over_np),
    "switch all_gather": (_switch_all_gather, _switch_all_gather_np),
    "pmax": (_pmax_both, _pmax_both_np),
    "w in one operand": (_w_in_one_operand, _w_in_one_operand_np),
    "guarded log": (_guarded_log, _guarded_log_np),
}


def _fd(loss, w, x, h=1e-6):
    """Central differences of the numpy loss w.r.t. w and each element of x."""
    gw = (loss(w + h, x) - loss(w - h, x)) / (2 * h)
    gx = np.array([(loss(w, x + h * e) - loss(w, x - h * e)) / (2 * h) for e in np.eye(x.size)])
    return gw, gx


def _close(got, want, rtol=1e-10):
    np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=rtol)


# (the gradient outside of "same psum" was right before: its forward values were, the branches'
# psums having the same operand)
@pytest.mark.parametrize(
    "case,where",
    [
        (c, w)
        for c in CASES
        for w in ("inside", "jit", "outside")
        if (c, w) != ("same psum", "outside")
    ],
)
def test_the_same_collectives_in_every_branch_pair_up_across_the_devices(case, where):
    f, ref = CASES[case]
    mesh = _mesh((4,), ("i",))
    want = ref(W, X)
    loss_np = lambda w, x: ref(w, x).sum()  # noqa: E731  # every device's output, once
    gw_want, gx_want = _fd(loss_np, W, X)

    def loss(w, xb):
        return psum(bnp.sum(f(w, xb)), "i")

    def body(w, xb):
        return f(w, xb)[None], *blu.grad(loss, argnums=(0, 1))(w, xb)

    specs = (P(), P("i")), (P("i"), P(), P("i"))
    if where == "outside":
        run = shard(lambda w, xb: f(w, xb)[None], mesh, specs[0], P("i"))
        out = run(W, X)
        gw, gx = blu.grad(lambda w, x: bnp.sum(run(w, x)), argnums=(0, 1))(W, X)
    else:
        run = shard(body, mesh, *specs)
        out, gw, gx = (blu.jit(run) if where == "jit" else run)(W, X)
    _close(out, want)
    _close(gw, gw_want, 1e-7)  # central differences of float64: ~h**2 and 1e-16 / h
    _close(gx, gx_want, 1e-7)


def test_a_predicate_varying_over_one_axis_of_two_and_a_psum_over_both():
    # mesh (x, y): the predicate is a row's sum (varies over x only); the branches psum over
    # both axes: each device gives the operand of its row's branch
    mesh = _mesh((2, 4), ("x", "y"))
    x = np.array(
        [0.5, -0.2, 0.3, 0.1, 0.4, 0.2, -0.3, 0.6, -0.8, 0.1, -0.4, 0.3, 0.2, -0.5, 0.1, -0.6]
    )

    def f(w, xl):
        hot = lambda v: psum(v * w, ("x", "y"))  # noqa: E731
        cold = lambda v: psum(bnp.sin(v * w), ("x", "y")) * v  # noqa: E731
        return blu.lax.cond(psum(bnp.sum(xl), "y") > 0, hot, cold, xl)

    def ref(w, x):
        b = x.reshape(2, 4, 2)
        hot = b.sum((1, 2)) > 0  # row 0 hot, row 1 cold
        s = sum(b[i, j] * w if hot[i] else np.sin(b[i, j] * w) for i in range(2) for j in range(4))
        return np.stack([s if hot[i] else s * b[i, j] for i in range(2) for j in range(4)])

    def body(w, xb):
        loss = lambda v, u: psum(bnp.sum(f(v, u)), ("x", "y"))  # noqa: E731
        return f(w, xb)[None], *blu.grad(loss, argnums=(0, 1))(w, xb)

    xy = P(("x", "y"))
    out, gw, gx = shard(body, mesh, (P(), xy), (xy, P(), xy))(W, x)
    gw_want, gx_want = _fd(lambda w, x: ref(w, x).sum(), W, x)
    _close(out, ref(W, x))
    _close(gw, gw_want, 1e-7)
    _close(gx, gx_want, 1e-7)


def _one_branch(w, xl):
    return blu.lax.cond(_hot(xl), lambda v: psum(v * w, "i"), lambda v: v * w, xl)


def _switch_one_branch(w, xl):
    k = (bnp.floor(bnp.sum(xl)) + 1).astype("int32")
    gather = lambda v: all_gather(v, "i", tiled=True)[:2]  # noqa: E731
    return blu.lax.switch(k, [lambda v: v, gather, lambda v: v * w], xl)


def _two_against_one(w, xl):
    twice = lambda v: psum(psum(v, "i") * v, "i")  # noqa: E731
    return blu.lax.cond(_hot(xl), twice, lambda v: psum(v * w, "i"), xl)


def _psum_against_pmax(w, xl):
    return blu.lax.cond(_hot(xl), lambda v: psum(v * w, "i"), lambda v: pmax(v * w, "i"), xl)


@pytest.mark.parametrize(
    "f,names",
    [
        (_one_branch, ("psum", "true_fun", "false_fun has none")),
        (_switch_one_branch, ("all_gather", "branch 1", "branch 0 has none")),
        (_two_against_one, ("2nd collective", "psum", "only 1")),
        (_psum_against_pmax, ("psum over axis 'i'", "pmax over axis 'i'")),
    ],
)
def test_a_collective_not_in_every_branch_under_a_varying_predicate_is_an_error(f, names):
    # a device taking the other branch never reaches it: a real machine would hang (or pair
    # it with an unrelated collective); on virtual devices it summed the other devices' values
    mesh = _mesh((4,), ("i",))
    with pytest.raises(BluValueError, match="varies over mesh axis 'i'") as err:
        shard(lambda w, xb: f(w, xb)[None], mesh, (P(), P("i")), P("i"))(W, X)
    for name in names:
        assert name in str(err.value)


# ---- while_loop: a predicate varying over a mesh axis, collectives over it in the loop ----------

# the blocks' sums 1.7, -0.9, 0.8, -0.5 step up by |first element| + 0.5 (1.8, 1.2, 1.4, 1.6) while
# below 3: the devices run 1, 4, 2 and 3 iterations


def _steps(xl):
    return bnp.abs(xl[0]) + 0.5


def _while_psum_in_body(xl):
    body = lambda c: (c[0] + _steps(xl), c[1] + psum(c[0], "i"))  # noqa: E731
    return blu.lax.while_loop(lambda c: c[0] < 3.0, body, (bnp.sum(xl), 0.0 * xl[0]))[1]


def _while_pmax_in_cond(xl):
    # the predicate mixes an invariant pmax and the device's own value: it still varies
    cond = lambda c: (pmax(c, "i") < 9.0) & (c < 3.0)  # noqa: E731
    return blu.lax.while_loop(cond, lambda c: c + _steps(xl), bnp.sum(xl))


def _while_cond_in_body(xl):
    # a cond on an invariant count inside the body, with collectives in its branches
    def body(c):
        v, k = c
        big = blu.lax.cond(k % 2 == 0, lambda: pmax(v, "i"), lambda: -pmax(-v, "i"))
        return v + _steps(xl) + 0 * big, k + 1

    return blu.lax.while_loop(lambda c: c[0] < 3.0, body, (bnp.sum(xl), 0))[0]


def _fori_varying_bound(xl):
    n = (bnp.sum(xl) > 0).astype("int32") + 1  # 2, 1, 2, 1 iterations
    return blu.lax.fori_loop(0, n, lambda i, c: c + all_gather(c, "i", tiled=True)[:2], xl)[0]


@pytest.mark.parametrize(
    "f,names",
    [
        (_while_psum_in_body, ("body_fun runs psum over axis 'i' of f64[]",)),
        (_while_pmax_in_cond, ("cond_fun runs pmax over axis 'i' of f64[]",)),
        (_while_cond_in_body, ("body_fun runs pmax (inside cond) over axis 'i'",)),
        (_fori_varying_bound, ("body_fun runs all_gather over axis 'i' of f64[2]",)),
    ],
)
def test_a_while_loop_whose_predicate_varies_with_collectives_in_it_is_an_error(f, names):
    # devices run different numbers of iterations, and one that has finished never reaches the
    # others' collective (a real machine hangs; on virtual devices the loop ran while any device
    # did, and the collectives took the finished devices' values)
    mesh = _mesh((4,), ("i",))
    for run in (shard, lambda *a: blu.jit(shard(*a))):
        with pytest.raises(BluValueError, match="cond_fun's result varies over mesh axis 'i'") as e:
            run(lambda xb: bnp.reshape(f(xb), (1, -1))[:, :1], mesh, P("i"), P("i"))(X)
        for name in names:
            assert name in str(e.value)
        assert "test_parallel_vma_cond.py" in str(e.value)  # the collective's and the loop's line


def test_the_predicate_the_while_loop_error_suggests_runs_while_any_device_does():
    # the predicate made invariant with pmax: every device iterates until the last one is done,
    # each keeping its own value once its own predicate is false; the psum takes every device's
    # operand at every iteration
    mesh = _mesh((4,), ("i",))
    with pytest.raises(BluValueError, match=re.escape("pmax(pred.astype('int32'), axis) > 0")):
        shard(lambda xb: _while_psum_in_body(xb)[None], mesh, P("i"), P("i"))(X)

    def f(xl):
        mine = lambda c: c[0] < 3.0  # noqa: E731

        def body(c):
            go = mine(c)
            v = bnp.where(go, c[0] + _steps(xl), c[0])
            return v, c[1] + psum(bnp.where(go, c[0], 0.0), "i"), c[2] + go.astype("int32")

        anyone = lambda c: pmax(mine(c).astype("int32"), "i") > 0  # noqa: E731
        v, s, n = blu.lax.while_loop(anyone, body, (bnp.sum(xl), 0.0 * xl[0], 0))
        return bnp.stack([v, s, n.astype(v.dtype)])[None]

    vals = [r.sum() for r in X.reshape(4, 2)]
    steps = [abs(r[0]) + 0.5 for r in X.reshape(4, 2)]
    total, n = 0.0, [0] * 4
    while any(v < 3.0 for v in vals):  # numpy float64, device by device
        total += sum(v for v in vals if v < 3.0)
        n = [k + (v < 3.0) for k, v in zip(n, vals)]
        vals = [v + s if v < 3.0 else v for v, s in zip(vals, steps)]
    want = np.stack([vals, [total] * 4, n], 1)
    np.testing.assert_equal(n, [1, 4, 2, 3])
    _close(shard(f, mesh, P("i"), P("i"))(X), want)
    _close(blu.jit(shard(f, mesh, P("i"), P("i")))(X), want)


# ---- a cond on a varying predicate inside custom_jvp / custom_vjp functions and rules ----------


def _sin_or_square(w, xl):
    hot = lambda v: psum(bnp.sin(v * w), "i")  # noqa: E731
    return blu.lax.cond(_hot(xl), hot, lambda v: psum(v * w * w, "i"), xl)


def _sin_or_square_np(w, x):
    u = [np.sin(r * w) if r.sum() > 0 else r * w * w for r in x.reshape(4, 2)]
    return np.stack([sum(u)] * 4)


@blu.custom_jvp
def _cj(w, xl):
    return _sin_or_square(w, xl)


@_cj.defjvp
def _cj_rule(primals, tangents):  # the rule's own cond: its psums pair up too
    (w, xl), (dw, dx) = primals, tangents
    hot = lambda v: psum(bnp.cos(v * w) * (dx * w + v * dw), "i")  # noqa: E731
    return _cj(w, xl), blu.lax.cond(
        _hot(xl), hot, lambda v: psum(dx * w * w + 2 * v * w * dw, "i"), xl
    )


@blu.custom_vjp
def _cv(w, xl):
    return _sin_or_square(w, xl)


def _cv_bwd(res, ct):  # the output's cotangent is psum-ed back to every device's operand
    w, v = res
    c = bnp.cos(v * w)
    hot = lambda: (psum(bnp.sum(ct * c * v), "i"), psum(ct, "i") * c * w)  # noqa: E731
    cold = lambda: (psum(bnp.sum(ct * 2 * v * w), "i"), psum(ct, "i") * w * w)  # noqa: E731
    return blu.lax.cond(_hot(v), hot, cold)


_cv.defvjp(lambda w, xl: (_cv(w, xl), (w, xl)), _cv_bwd)


@pytest.mark.parametrize(
    "f,where",
    [(f, w) for f in (_cj, _cv) for w in ("inside", "jit", "outside", "jvp")][:-1],  # vjp: no jvp
    ids=lambda v: {_cj: "custom_jvp", _cv: "custom_vjp"}.get(v, v),
)
def test_a_varying_cond_inside_a_custom_rule_function_pairs_its_collectives(f, where):
    # the function (and the rule) is traced knowing its arguments' variance: its cond runs in
    # lockstep (each device's psum operand is its own branch's) as outside a custom rule (it
    # was bound as a cond on an invariant index: on virtual devices every branch summed every
    # device's operand)
    mesh = _mesh((4,), ("i",))
    gw_want, gx_want = _fd(lambda w, x: _sin_or_square_np(w, x).sum(), W, X)
    run = shard(lambda w, xb: f(w, xb)[None], mesh, (P(), P("i")), P("i"))
    if where == "outside":
        out = run(W, X)
        gw, gx = blu.grad(lambda w, x: bnp.sum(run(w, x)), argnums=(0, 1))(W, X)
    elif where == "jvp":
        out, gw = blu.jvp(lambda w: run(w, X), (W,), (np.ones_like(W),))
        gw = bnp.sum(gw)
        gx = blu.jacfwd(lambda x: bnp.sum(run(W, x)))(X)
    else:

        def body(w, xb):
            loss = lambda w, xb: psum(bnp.sum(f(w, xb)), "i")  # noqa: E731
            return f(w, xb)[None], *blu.grad(loss, argnums=(0, 1))(w, xb)

        body = shard(body, mesh, (P(), P("i")), (P("i"), P(), P("i")))
        out, gw, gx = (blu.jit(body) if where == "jit" else body)(W, X)
    _close(out, _sin_or_square_np(W, X))
    _close(gw, gw_want, 1e-7)
    _close(gx, gx_want, 1e-7)


@blu.custom_jvp
def _cj_one_branch(w, xl):
    return _one_branch(w, xl)


_cj_one_branch.defjvp(lambda p, t: (_cj_one_branch(*p), t[0] * p[1]))


@blu.custom_jvp
def _cj_while(xl):
    return _while_psum_in_body(xl)


_cj_while.defjvp(lambda p, t: (_cj_while(*p), t[0][0]))


@pytest.mark.parametrize(
    "f,what",
    [
        (lambda w, xb: _cj_one_branch(w, xb), "cond: the branch index varies over mesh axis 'i'"),
        (lambda w, xb: _cj_while(xb) + 0 * xb, "while_loop: cond_fun's result varies over mesh"),
    ],
    ids=["one-branch psum", "while_loop"],
)
def test_a_custom_rule_function_is_checked_as_outside_one(f, what):
    mesh = _mesh((4,), ("i",))
    with pytest.raises(BluValueError, match=what):
        shard(lambda w, xb: f(w, xb)[None], mesh, (P(), P("i")), P("i"))(W, X)
