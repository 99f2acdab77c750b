"""lax.reduce_window with any computation (JAX's general case): logaddexp, mul, and add/max with
an init value that is not the identity, over random shapes (size-0 and size-1 axes), strides,
padding strings and pairs, base and window dilations, against a float64 loop over explicit
windows, eager, jitted and vmapped; a variadic (value, index) argmax pair; derivatives against
finite differences (operand and init value); the monoid paths keep their primitives;
reduce_window_shape_tuple against the loop's shapes; the errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu import lax
from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from tests.helpers import check_grads, same_pads

# name -> (blu computation, init value, numpy combiner): none is a monoid primitive with its
# identity, so each takes the general path
COMBINERS = {
    "logaddexp": (bnp.logaddexp, -np.inf, np.logaddexp),
    "logaddexp_init": (bnp.logaddexp, 0.25, np.logaddexp),
    "mul": (lax.mul, 1.0, np.multiply),
    "mul_init": (lambda a, b: a * b, 0.75, np.multiply),
    "add_init": (lax.add, 1.5, np.add),
    "max_init": (lax.max, 0.0, np.maximum),
}


def _explicit_pads(padding, shape, wdims, strides, wd):
    if not isinstance(padding, str):
        return list(padding)
    if padding == "VALID":
        return [(0, 0)] * len(shape)
    eff = [(w - 1) * d + 1 for w, d in zip(wdims, wd)]
    return same_pads(shape, eff, strides, padding == "SAME_LOWER")


def window_ref(xs, inits, combine, wdims, strides, padding, bd, wd):
    """The definition by loops over float64 (or integer) arrays: dilate (holes hold the init
    value), pad or crop (pads hold it), fold ``combine`` over each window in row-major order
    from the init values. ``xs``/``inits`` are lists; ``combine`` maps two lists of scalars to
    one."""
    pads = _explicit_pads(padding, xs[0].shape, wdims, strides, wd)
    padded = []
    for x, init in zip(xs, inits):
        dil = np.full([(d - 1) * b + 1 if d else 0 for d, b in zip(x.shape, bd)], init, x.dtype)
        dil[tuple(slice(None, None, b) for b in bd)] = x
        for a, (lo, hi) in enumerate(pads):  # pad, then crop (a crop may eat a pad)
            widths = [(0, 0)] * dil.ndim
            widths[a] = (max(lo, 0), max(hi, 0))
            dil = np.pad(dil, widths, constant_values=init)
            dil = np.take(dil, range(max(-lo, 0), dil.shape[a] - max(-hi, 0)), axis=a)
        padded.append(dil)
    eff = [(w - 1) * d + 1 for w, d in zip(wdims, wd)]
    out_sp = [max((p - e) // s + 1, 0) for p, e, s in zip(padded[0].shape, eff, strides)]
    outs = [np.full(out_sp, init, x.dtype) for x, init in zip(xs, inits)]
    for pos in itertools.product(*map(range, out_sp)):
        acc = list(inits)
        for ks in itertools.product(*map(range, wdims)):
            idx = tuple(p * s + k * d for p, s, k, d in zip(pos, strides, ks, wd))
            acc = combine(acc, [p[idx] for p in padded])
        for o, v in zip(outs, acc):
            o[pos] = v
    return outs


@st.composite
def cases(draw, combiners=tuple(COMBINERS)):
    r = draw(st.integers(0, 3))
    shape = [draw(st.integers(0, 4)) for _ in range(r)]
    wdims = [draw(st.integers(1, 3)) for _ in range(r)]
    strides = [draw(st.integers(1, 3)) for _ in range(r)]
    bd = [draw(st.integers(1, 2)) for _ in range(r)]
    wd = [draw(st.integers(1, 2)) for _ in range(r)]
    if draw(st.booleans()):
        padding = draw(st.sampled_from(["SAME", "SAME_LOWER", "VALID"]))
    else:
        pads = [(draw(st.integers(-1, 2)), draw(st.integers(-1, 2))) for _ in range(r)]
        # crops never take an axis below 0 (that is an error, tested apart)
        padding = [
            (lo, max(hi, -((d - 1) * b + 1 if d else 0) - lo))
            for (lo, hi), d, b in zip(pads, shape, bd)
        ]
    name = draw(st.sampled_from(combiners))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)
    return x, name, wdims, strides, padding, bd, wd


def _rw(name, wdims, strides, padding, bd, wd):
    comp, init, _ = COMBINERS[name]
    return lambda a: lax.reduce_window(a, init, comp, wdims, strides, padding, bd, wd)


def _ref(x, name, wdims, strides, padding, bd, wd):
    _, init, ufunc = COMBINERS[name]
    (out,) = window_ref(
        [x], [init], lambda a, b: [ufunc(a[0], b[0])], wdims, strides, padding, bd, wd
    )
    return out


@settings(max_examples=40, deadline=None)
@given(cases())
def test_forward_against_loop_eager_and_jit(case):
    x, name, wdims, strides, padding, bd, wd = case
    want = _ref(*case)
    f = _rw(name, wdims, strides, padding, bd, wd)
    got = np.asarray(f(x))
    assert got.shape == want.shape and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(blu.jit(f)(x)), want, rtol=1e-12, atol=1e-12)
    shape = lax.reduce_window_shape_tuple(x.shape, wdims, strides, padding, bd, wd)
    assert shape == want.shape and all(type(n) is int for n in shape)


@settings(max_examples=15, deadline=None)
@given(cases(), st.integers(0, 1))
def test_vmap_against_loop(case, axis):
    x, name, wdims, strides, padding, bd, wd = case
    f = _rw(name, wdims, strides, padding, bd, wd)
    axis = min(axis, np.ndim(x))
    xs = np.stack([x, -x, 0.5 * x], axis)
    got = np.asarray(blu.vmap(f, in_axes=axis)(xs))
    want = np.stack([_ref(np.take(xs, k, axis), *case[1:]) for k in range(3)])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_vmap_over_the_init_value():
    # a batched init value fills each example's pads and starts its folds
    x = np.random.default_rng(1).standard_normal((2, 3, 4))
    inits = np.array([0.1, 0.7])
    args = ((2, 2), (1, 1), [(1, 1), (0, 1)], (2, 1), (1, 2))

    def f(a, i):
        return lax.reduce_window(a, i, bnp.logaddexp, *args)

    got = np.asarray(blu.vmap(f)(x, inits))
    for k in range(2):
        (want,) = window_ref([x[k]], [inits[k]], lambda a, b: [np.logaddexp(a[0], b[0])], *args)
        np.testing.assert_allclose(got[k], want, rtol=1e-12)


@settings(max_examples=20, deadline=None)
@given(cases(combiners=("logaddexp_init", "mul", "mul_init", "add_init")))
def test_gradients_against_finite_differences(case):
    x, name, wdims, strides, padding, bd, wd = case
    comp, init, _ = COMBINERS[name]

    def f(a, i):
        return lax.reduce_window(a, i, comp, wdims, strides, padding, bd, wd)

    # the operand and the init value (it fills the pads and starts each window's fold)
    check_grads(f, [x, np.float64(init)], order=2, atol=1e-6, rtol=1e-6)


def test_logaddexp_gradient_is_the_window_softmax():
    # d/dx_j logsumexp(window) = exp(x_j - out): each element's weight in its windows
    x = np.array([0.3, -1.2, 2.0, 0.7, -0.4])
    g = blu.grad(lambda a: lax.reduce_window(a, -np.inf, bnp.logaddexp, (3,), (2,), "VALID").sum())
    out = [np.log(np.exp(x[0:3]).sum()), np.log(np.exp(x[2:5]).sum())]
    want = np.zeros(5)
    want[0:3] += np.exp(x[0:3] - out[0])
    want[2:5] += np.exp(x[2:5] - out[1])
    np.testing.assert_allclose(np.asarray(g(x)), want, rtol=1e-12)


def _argmax_pair(a, b):
    """(value, index): the larger value, the smaller index on ties (associative, commutative)."""
    take_b = (b[0] > a[0]) | ((b[0] == a[0]) & (b[1] < a[1]))
    return bnp.where(take_b, b[0], a[0]), bnp.where(take_b, b[1], a[1])


@settings(max_examples=25, deadline=None)
@given(cases(combiners=("mul",)), st.booleans())
def test_variadic_argmax_pair_against_loop(case, ties):
    x, _, wdims, strides, padding, bd, wd = case
    if ties:
        x = np.round(x)  # -1 and 1 only: ties in most windows
    idx = np.arange(x.size, dtype=np.int32).reshape(x.shape)
    big = np.int32(np.iinfo(np.int32).max)
    init = (-np.inf, big)

    def f(v, i):
        return lax.reduce_window((v, i), init, _argmax_pair, wdims, strides, padding, bd, wd)

    def combine(a, b):
        take_b = b[0] > a[0] or (b[0] == a[0] and b[1] < a[1])
        return list(b) if take_b else list(a)

    want_v, want_i = window_ref([x, idx], [-np.inf, big], combine, wdims, strides, padding, bd, wd)
    for got_v, got_i in (f(x, idx), blu.jit(f)(x, idx)):
        assert np.asarray(got_i).dtype == np.int32
        np.testing.assert_array_equal(np.asarray(got_v), want_v)
        np.testing.assert_array_equal(np.asarray(got_i), want_i)
    # the value's derivative goes to the chosen element (distinct values: no ties)
    if not ties and want_v.size and np.isfinite(want_v).all():
        g = blu.grad(lambda v: f(v, idx)[0].sum())(x)
        want_g = np.zeros(x.size)
        np.add.at(want_g, want_i.ravel(), 1.0)
        np.testing.assert_allclose(np.asarray(g).ravel(), want_g, rtol=0, atol=0)


def test_a_dict_of_operands_and_a_traced_init_value():
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])

    def f(x, init):
        out = lax.reduce_window(
            {"s": x, "q": x * x},
            {"s": init, "q": init},
            lambda a, b: {"s": a["s"] + b["s"], "q": a["q"] + b["q"]},
            (1, 2),
            (1, 1),
            "VALID",
        )
        return out["s"], out["q"]

    s, q = blu.jit(f)(x, np.float64(0.5))  # a traced init value: the general path
    np.testing.assert_allclose(np.asarray(s), x[:, :2] + x[:, 1:] + 0.5, rtol=1e-15)
    np.testing.assert_allclose(np.asarray(q), x[:, :2] ** 2 + x[:, 1:] ** 2 + 0.5, rtol=1e-15)


def _prims(f, *args):
    return [e.primitive.name for e in blu.make_jaxpr(f)(*args).jaxpr.eqns]


def test_the_monoids_keep_their_primitives_and_a_non_identity_init_does_not():
    x = np.arange(12.0).reshape(3, 4)
    monoids = [
        (lax.add, 0.0, "reduce_window_sum"),
        (lax.max, -np.inf, "reduce_window_max"),
        (lambda a, b: bnp.minimum(a, b), np.inf, "reduce_window_min"),
    ]
    for comp, init, prim in monoids:
        prims = _prims(lambda a: lax.reduce_window(a, init, comp, (2, 2), (1, 1), "SAME"), x)
        assert prims == [prim]
    # add with init 1: XLA's semantics, each window's sum plus the init once plus the pads
    out = lax.reduce_window(x, 1.0, lax.add, (2, 2), (1, 1), ((0, 1), (0, 0)))
    padded = np.pad(x, ((0, 1), (0, 0)), constant_values=1.0)
    want = 1.0 + padded[:-1, :-1] + padded[1:, :-1] + padded[:-1, 1:] + padded[1:, 1:]
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-15)
    assert "reduce_window_sum" not in _prims(
        lambda a: lax.reduce_window(a, 1.0, lax.add, (2, 2), (1, 1), "VALID"), x
    )
    # an integer product (reduce_prod over the stacked windows)
    xi = np.array([[3, -7, 5], [1, 2, -9]], np.int32)
    out = lax.reduce_window(xi, 1, lax.mul, (2, 2), (1, 1), "VALID")
    np.testing.assert_array_equal(np.asarray(out), [[3 * -7 * 1 * 2, -7 * 5 * 2 * -9]])
    assert np.asarray(out).dtype == np.int32


def test_errors_name_shapes_and_dtypes():
    x = np.arange(6.0).reshape(2, 3)
    xi = np.arange(6, dtype=np.int32).reshape(2, 3)
    add2 = lambda a, b: (a[0] + b[0], a[1] + b[1])  # noqa: E731
    with pytest.raises(BluValueError, match=r"operand \(2 array\(s\).*init_value \(1 value"):
        lax.reduce_window((x, x), (0.0,), add2, (1, 1), (1, 1), "VALID")
    with pytest.raises(BluTypeError, match=r"init_value\[1\] f32\[\] must have .* float64"):
        lax.reduce_window((x, x), (0.0, np.float32(0)), add2, (1, 1), (1, 1), "VALID")
    with pytest.raises(BluTypeError, match="init_value 0.5 cannot be held by .* int32"):
        lax.reduce_window(xi, 0.5, bnp.logaddexp, (1, 1), (1, 1), "VALID")
    with pytest.raises(BluShapeError, match=r"init_value must be a scalar, got f64\[2\]"):
        lax.reduce_window(x, np.zeros(2), bnp.logaddexp, (1, 1), (1, 1), "VALID")
    with pytest.raises(BluValueError, match="computation returned 2 value"):
        lax.reduce_window(x, 0.5, lambda a, b: (a, b), (1, 1), (1, 1), "VALID")
    with pytest.raises(BluTypeError, match=r"scalars of the operands' dtypes \(float64\), got f32"):
        lax.reduce_window(x, 0.5, lambda a, b: (a + b).astype(np.float32), (1, 1), (1, 1), "VALID")
    with pytest.raises(BluValueError, match=r"reduce_window of f64\[2,3\]: window_dimensions"):
        lax.reduce_window(x, 0.5, bnp.logaddexp, (2,), (1, 1), "VALID")
    with pytest.raises(BluShapeError, match=r"one shape, got f64\[2,3\], f64\[3\]"):
        lax.reduce_window((x, x[0]), (0.0, 0.0), add2, (1, 1), (1, 1), "VALID")
    with pytest.raises(BluValueError, match="crops axis 1"):
        lax.reduce_window(x, 0.5, bnp.logaddexp, (1, 1), (1, 1), ((0, 0), (-2, -2)))


def test_an_init_the_integer_operand_cannot_hold_is_refused_not_truncated():
    # 0.9 as int32 is 0, add's identity: it used to take the monoid path and sum the windows
    with pytest.raises(BluTypeError, match="0.9"):
        lax.reduce_window(bnp.array([1, 2, 3], dtype=np.int32), 0.9, lax.add, (2,), (1,), "VALID")
    got = lax.reduce_window(bnp.array([1, 2, 3], dtype=np.int32), 0, lax.add, (2,), (1,), "VALID")
    np.testing.assert_array_equal(np.asarray(got), [3, 5])
