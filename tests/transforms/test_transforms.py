"""grad / jvp / vjp / linearize / vmap / jit and their compositions, against independent oracles."""

import logging

import numpy as np
import pytest
from helpers import arrays, check_grads, check_vmap, loop_vmap, shapes
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import blu
import blu.numpy as bnp
from blu import lax
from blu.core.errors import BluError, BluTypeError


def f_elem(x, y):
    """A smooth function of two same-shape arrays, written with lax ops."""
    return lax.add(lax.mul(lax.sin(x), y), lax.tanh(lax.mul(x, y)))


def f_scalar(x, y):
    return lax.reduce_sum(f_elem(x, y))


def df_dx(x, y):
    """d f_scalar / dx computed by hand in float64."""
    return np.cos(x) * y + (1 - np.tanh(x * y) ** 2) * y


@given(st.data())
def test_grad_matches_hand_derivative(data):
    shape = data.draw(shapes())
    x, y = data.draw(arrays(shape)), data.draw(arrays(shape))
    np.testing.assert_allclose(
        np.asarray(blu.grad(f_scalar)(x, y)), df_dx(x, y), rtol=1e-12, atol=1e-12
    )


@given(st.data())
def test_grads_against_finite_differences_second_order(data):
    shape = data.draw(shapes(max_dims=2))
    x, y = data.draw(arrays(shape)), data.draw(arrays(shape))
    check_grads(f_elem, [x, y], order=2)


@given(st.data())
def test_compositions_agree(data):
    shape = data.draw(shapes(min_dims=1, max_dims=2, min_side=1))
    x, y = data.draw(arrays(shape)), data.draw(arrays(shape))
    want = df_dx(x, y)
    for g in (
        blu.jit(blu.grad(f_scalar)),
        blu.grad(blu.jit(f_scalar)),
        blu.jit(blu.grad(blu.jit(f_scalar))),
    ):
        np.testing.assert_allclose(np.asarray(g(x, y)), want, rtol=1e-12, atol=1e-12)
    # vmap(grad) over the leading axis equals per-row gradients
    got = blu.vmap(blu.grad(f_scalar))(x, y)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)
    # grad(vmap): the sum of the batched outputs
    got2 = blu.grad(lambda a, b: lax.reduce_sum(blu.vmap(f_scalar)(a, b)))(x, y)
    np.testing.assert_allclose(np.asarray(got2), want, rtol=1e-12, atol=1e-12)


def test_second_derivative_through_jit_and_vmap():
    f = lambda x: lax.mul(lax.sin(x), x)  # f'' = 2 cos x - x sin x
    d2 = blu.vmap(blu.grad(blu.jit(blu.grad(f))))
    x = np.linspace(-2, 2, 7)
    np.testing.assert_allclose(np.asarray(d2(x)), 2 * np.cos(x) - x * np.sin(x), rtol=1e-12)


def test_value_and_grad_argnums_and_aux():
    def loss(w, b, scale):
        out = lax.reduce_sum(lax.mul(lax.add(w, b), scale))
        return out, {"out": out}

    w, b = np.arange(3.0), np.ones(3)
    (val, aux), (gw, gb) = blu.value_and_grad(loss, argnums=(0, 1), has_aux=True)(w, b, 2.0)
    assert float(val) == pytest.approx(2 * (3 + 3))
    assert float(aux["out"]) == float(val)
    np.testing.assert_array_equal(np.asarray(gw), 2 * np.ones(3))
    np.testing.assert_array_equal(np.asarray(gb), 2 * np.ones(3))
    g, aux2 = blu.grad(loss, has_aux=True)(w, b, 2.0)
    np.testing.assert_array_equal(np.asarray(g), 2 * np.ones(3))


def test_grad_pytree_argument():
    params = {"a": np.array(2.0), "b": (np.array([1.0, 3.0]),)}
    loss = lambda p: lax.add(lax.mul(p["a"], p["a"]), lax.reduce_sum(lax.mul(p["b"][0], p["b"][0])))
    g = blu.grad(loss)(params)
    assert float(g["a"]) == 4.0
    np.testing.assert_array_equal(np.asarray(g["b"][0]), [2.0, 6.0])


def test_grad_errors():
    with pytest.raises(BluError, match="scalar"):
        blu.grad(lambda x: lax.sin(x))(np.ones(3))
    with pytest.raises(BluError, match="has_aux"):
        blu.grad(lambda x: (lax.reduce_sum(x), x))(np.ones(3))
    with pytest.raises(BluError, match="float inputs"):
        blu.grad(lambda x: lax.convert_element_type(x, np.float32))(np.int32(3))


def test_grad_of_unused_input_is_zero():
    g = blu.grad(lambda x, y: lax.reduce_sum(lax.sin(x)), argnums=1)(np.ones(2), np.ones(3))
    np.testing.assert_array_equal(np.asarray(g), np.zeros(3))


def test_stop_gradient():
    f = lambda x: lax.mul(x, lax.stop_gradient(x))
    assert float(blu.grad(f)(3.0)) == 3.0


def test_jvp_and_linearize_agree():
    x, t = np.linspace(-1, 1, 5), np.linspace(0.5, 1.5, 5)
    f = lambda x: lax.mul(lax.exp(x), lax.sin(x))
    out, tout = blu.jvp(f, (x,), (t,))
    out2, f_jvp = blu.linearize(f, x)
    want = (np.exp(x) * np.sin(x) + np.exp(x) * np.cos(x)) * t
    np.testing.assert_allclose(np.asarray(tout), want, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(f_jvp(t)), want, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(out2), np.asarray(out))


def df_dy(x, y):
    """d f_elem / dy computed by hand in float64."""
    return np.sin(x) + (1 - np.tanh(x * y) ** 2) * x


def f_elem_aux(x, y):
    """f_elem with auxiliary data: a float array, an int and a nested tuple."""
    return f_elem(x, y), {"sq": lax.mul(x, x), "n": 3, "t": (lax.exp(y),)}


def _check_aux(aux, x, y, n=3):
    np.testing.assert_allclose(np.asarray(aux["sq"]), x * x, rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(aux["n"]), n)
    np.testing.assert_allclose(np.asarray(aux["t"][0]), np.exp(y), rtol=1e-12)


@given(st.data())
def test_jvp_and_linearize_has_aux(data):
    # has_aux= raised a raw TypeError (jax.jvp / jax.linearize take it)
    shape = data.draw(shapes(max_dims=2))
    x, y, tx, ty = (data.draw(arrays(shape)) for _ in range(4))
    want_out = np.sin(x) * y + np.tanh(x * y)
    want_t = df_dx(x, y) * tx + df_dy(x, y) * ty
    out, t_out, aux = blu.jvp(f_elem_aux, (x, y), (tx, ty), has_aux=True)
    np.testing.assert_allclose(np.asarray(out), want_out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(t_out), want_t, rtol=1e-12, atol=1e-12)
    _check_aux(aux, x, y)
    out2, f_jvp, aux2 = blu.linearize(f_elem_aux, x, y, has_aux=True)
    np.testing.assert_allclose(np.asarray(out2), want_out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(f_jvp(tx, ty)), want_t, rtol=1e-12, atol=1e-12)
    want_t2 = df_dx(x, y) * ty + df_dy(x, y) * tx
    np.testing.assert_allclose(np.asarray(f_jvp(ty, tx)), want_t2, rtol=1e-12, atol=1e-12)
    assert len(f_jvp.jaxpr.outvars) == 1  # the aux's tangents are not staged
    _check_aux(aux2, x, y)


def test_jvp_has_aux_under_jit_and_vmap():
    x, y = np.linspace(-1.5, 1.5, 6).reshape(2, 3), np.linspace(0.5, 2.0, 6).reshape(2, 3)
    tx, ty = np.cos(np.arange(6.0)).reshape(2, 3), np.ones((2, 3))
    want_t = df_dx(x, y) * tx + df_dy(x, y) * ty
    jvp_aux = lambda *a: blu.jvp(f_elem_aux, a[:2], a[2:], has_aux=True)
    for g in (
        blu.jit(jvp_aux),
        blu.vmap(jvp_aux),
        blu.vmap(blu.jit(jvp_aux), in_axes=1, out_axes=-1),
    ):
        out, t_out, aux = g(x, y, tx, ty)
        np.testing.assert_allclose(np.asarray(t_out), want_t, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.asarray(aux["sq"]), x * x, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(aux["t"][0]), np.exp(y), rtol=1e-12)

    @blu.jit
    def lin(x, y, tx, ty):  # linearize with aux under jit, its tangent map applied inside
        _, f_jvp, aux = blu.linearize(f_elem_aux, x, y, has_aux=True)
        return f_jvp(tx, ty), aux

    t_out, aux = lin(x, y, tx, ty)
    np.testing.assert_allclose(np.asarray(t_out), want_t, rtol=1e-12, atol=1e-12)
    _check_aux(aux, x, y)


def test_jvp_aux_is_not_differentiated_by_that_jvp_but_by_an_outer_grad():
    # the aux x**3 carries no tangent of the jvp (as JAX: its primal is returned) ...
    g = lambda x: (lax.sin(x), lax.mul(x, lax.mul(x, x)))
    out, t, aux = blu.jvp(g, (0.7,), (1.0,), has_aux=True)
    assert float(t) == pytest.approx(np.cos(0.7), rel=1e-6)
    assert float(aux) == pytest.approx(0.7**3, rel=1e-6)
    # ... while a transform around the jvp still sees through it: d/dx x**3 = 3 x**2
    d_aux = blu.grad(lambda x: blu.jvp(g, (x,), (np.float64(1.0),), has_aux=True)[2])(
        np.float64(0.7)
    )
    assert float(d_aux) == pytest.approx(3 * 0.7**2, rel=1e-12)


@pytest.mark.parametrize("name", ["jvp", "linearize"])
@pytest.mark.parametrize("bad", [lambda x: lax.sin(x), lambda x: (x, x, x), lambda x: {"a": x}])
def test_has_aux_output_not_a_pair_is_a_blu_type_error(name, bad):
    x = np.ones(3)
    with pytest.raises(BluTypeError, match=rf"{name}: has_aux=True requires .* pair"):
        if name == "jvp":
            blu.jvp(bad, (x,), (x,), has_aux=True)
        else:
            blu.linearize(bad, x, has_aux=True)


def f_mixed(x, n, b):
    """A float loss of a float, an int and a bool array: sum(sin(x) * n * (2 if b else 1))."""
    return bnp.sum(bnp.sin(x) * n.astype(x.dtype) * bnp.where(b, 2.0, 1.0).astype(x.dtype))


@given(st.data())
def test_grad_allow_int(data):
    # allow_int= raised a raw TypeError (jax.grad / value_and_grad / jacrev take it); an
    # integer or bool input's gradient is zeros of its own dtype (JAX's is float0)
    shape = data.draw(shapes(max_dims=2))
    x = data.draw(arrays(shape))
    n = data.draw(hnp.arrays(np.int32, shape, elements=st.integers(-3, 3)))
    b = data.draw(hnp.arrays(np.bool_, shape))
    w = np.where(b, 2.0, 1.0)
    want_val, want_gx = np.sum(np.sin(x) * n * w), np.cos(x) * n * w
    for g in (
        blu.value_and_grad(f_mixed, argnums=(0, 1, 2), allow_int=True),
        blu.jit(blu.value_and_grad(f_mixed, argnums=(0, 1, 2), allow_int=True)),
    ):
        val, (gx, gn, gb) = g(x, n, b)
        np.testing.assert_allclose(float(val), want_val, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.asarray(gx), want_gx, rtol=1e-12, atol=1e-12)
        assert (gn.dtype, gn.shape, gb.dtype, gb.shape) == (np.int32, shape, np.bool_, shape)
        assert not np.asarray(gn).any() and not np.asarray(gb).any()
    gn = blu.grad(f_mixed, argnums=1, allow_int=True)(x, n, b)
    assert gn.dtype == np.int32 and gn.shape == shape and not np.asarray(gn).any()


def test_grad_allow_int_under_vmap_and_python_int():
    x, n = np.linspace(-1.0, 1.0, 6).reshape(2, 3), np.arange(6, dtype=np.int32).reshape(2, 3)
    b = np.array([[True, False, True], [False, False, True]])
    gx, gn = blu.vmap(blu.grad(f_mixed, argnums=(0, 1), allow_int=True))(x, n, b)
    np.testing.assert_allclose(np.asarray(gx), np.cos(x) * n * np.where(b, 2.0, 1.0), rtol=1e-12)
    assert gn.dtype == np.int32 and gn.shape == (2, 3) and not np.asarray(gn).any()
    # a Python int exponent: d/dx x**k = k x**(k-1), and the int's gradient is 0
    gx, gk = blu.grad(lambda x, k: x**k, argnums=(0, 1), allow_int=True)(np.float64(1.5), 3)
    assert float(gx) == pytest.approx(3 * 1.5**2, rel=1e-12)
    assert int(gk) == 0 and not np.issubdtype(gk.dtype, np.inexact)


def test_jacrev_allow_int():
    x, n = np.array([0.5, -1.0, 2.0]), np.array([2, -1, 3], dtype=np.int32)
    f = lambda x, n: lax.mul(lax.sin(x), n.astype(x.dtype))
    jx, jn = blu.jacrev(f, argnums=(0, 1), allow_int=True)(x, n)
    np.testing.assert_allclose(np.asarray(jx), np.diag(np.cos(x) * n), rtol=1e-12)
    assert jn.dtype == np.int32 and jn.shape == (3, 3) and not np.asarray(jn).any()


@pytest.mark.parametrize("transform", [blu.grad, blu.value_and_grad, blu.jacrev])
def test_integer_input_without_allow_int_is_an_error_naming_it(transform):
    f = lambda x, n: lax.reduce_sum(lax.mul(x, n.astype(x.dtype)))
    with pytest.raises(BluTypeError, match=r"i32\[3\].*allow_int=True"):
        transform(f, argnums=(0, 1))(np.ones(3), np.arange(3, dtype=np.int32))
    # holomorphic still wants complex inputs, allow_int or not (as jax.grad)
    if transform is not blu.jacrev:
        with pytest.raises(BluTypeError, match="holomorphic=True"):
            transform(f, argnums=1, holomorphic=True, allow_int=True)(np.ones(3), np.arange(3))


def test_vjp_cotangent_structure_checked():
    out, f_vjp = blu.vjp(lambda x: (lax.sin(x), lax.cos(x)), np.ones(2))
    with pytest.raises(BluError):
        f_vjp(np.ones(2))
    (ct,) = f_vjp((np.ones(2), np.zeros(2)))
    np.testing.assert_allclose(np.asarray(ct), np.cos(np.ones(2)))


# ---- vmap --------------------------------------------------------------------------------------


@given(st.data())
def test_vmap_matches_loop_with_random_axes(data):
    shape = data.draw(shapes(min_dims=0, max_dims=2, min_side=0, max_side=3))
    size = data.draw(st.integers(0, 3))
    ax_x = data.draw(st.sampled_from([None] + list(range(-len(shape) - 1, len(shape) + 1))))
    ax_y = data.draw(st.sampled_from([None] + list(range(-len(shape) - 1, len(shape) + 1))))
    if ax_x is None and ax_y is None:
        ax_x = 0
    out_ax = data.draw(st.sampled_from(list(range(-len(shape) - 1, len(shape) + 1))))

    def batched(ax):
        if ax is None:
            return data.draw(arrays(shape))
        full = list(shape)
        full.insert(ax % (len(shape) + 1), size)
        return data.draw(arrays(tuple(full)))

    x, y = batched(ax_x), batched(ax_y)
    check_vmap(f_elem, [x, y], [ax_x, ax_y], out_axis=out_ax)


def test_vmap_pytrees_none_axis_size_and_nesting():
    xs = {"a": np.arange(6.0).reshape(2, 3), "b": np.ones(3)}
    f = lambda d: lax.add(d["a"], d["b"])
    out = blu.vmap(f, in_axes=({"a": 0, "b": None},))(xs)
    np.testing.assert_array_equal(np.asarray(out), xs["a"] + 1)
    # no mapped input: axis_size broadcasts
    out = blu.vmap(lambda: lax.full((2,), 1.0), in_axes=(), axis_size=4)()
    assert np.asarray(out).shape == (4, 2)
    # nested vmap = outer product
    x, y = np.arange(3.0), np.arange(4.0)
    outer = blu.vmap(blu.vmap(lax.mul, in_axes=(None, 0)), in_axes=(0, None))(x, y)
    np.testing.assert_array_equal(np.asarray(outer), np.outer(x, y))
    # out_axes=None for an unbatched output
    c = blu.vmap(lambda a: lax.full((), 2.0), out_axes=None)(x)
    assert float(c) == 2.0


def test_vmap_maps_keyword_arguments_over_axis_0():
    # JAX's rule: in_axes names the positional arguments; keywords are mapped over axis 0
    x = np.arange(6.0).reshape(2, 3)
    w = np.arange(3.0) + 1
    f = lambda a, *, scale, shift: a * scale["s"] + shift
    out = blu.vmap(f, in_axes=(1,))(x, scale={"s": w}, shift=np.full(3, 0.5))
    want = np.stack([x[:, i] * w[i] + 0.5 for i in range(3)])
    np.testing.assert_array_equal(np.asarray(out), want)
    with pytest.raises(BluError, match="inconsistent sizes"):
        blu.vmap(lax.mul)(np.ones(3), y=np.ones(4))


def test_vmap_errors():
    with pytest.raises(BluError, match="inconsistent sizes"):
        blu.vmap(lax.add)(np.ones(3), np.ones(4))
    with pytest.raises(BluError, match="out of range"):
        blu.vmap(lax.sin, in_axes=2)(np.ones(3))
    with pytest.raises(BluError, match="axis_size"):
        blu.vmap(lambda x: x, in_axes=None)(np.ones(3))
    with pytest.raises(BluError, match="out_axes=None"):
        blu.vmap(lax.sin, out_axes=None)(np.ones(3))


def test_vmap_of_jit_equals_loop():
    f = blu.jit(lambda a, b: lax.reduce_sum(f_elem(a, b)))
    x, y = np.random.default_rng(0).standard_normal((2, 4, 3))
    got = blu.vmap(f)(x, y)
    np.testing.assert_allclose(np.asarray(got), loop_vmap(f, [x, y], [0, 0]), rtol=1e-12)


# ---- jit ---------------------------------------------------------------------------------------


def test_jit_caches_per_signature_and_logs_reason(caplog):
    traces = []

    @blu.jit
    def f(x):
        traces.append(1)
        return lax.sin(x)

    f(np.ones(3, np.float32))
    f(np.ones(3, np.float32) * 2)
    assert len(traces) == 1
    with blu.config.override(log_compiles=True), caplog.at_level(logging.WARNING, "blu.jit"):
        f(np.ones(4, np.float32))
    assert len(traces) == 2
    assert "changed from f32[3] to f32[4]" in caplog.text


def test_jit_static_args():
    traces = []

    @blu.jit(static_argnames="n")
    def power(x, n):
        traces.append(n)
        out = x
        for _ in range(n - 1):
            out = lax.mul(out, x)
        return out

    assert float(power(2.0, n=3)) == 8.0
    assert float(power(3.0, n=3)) == 27.0
    assert float(power(2.0, n=4)) == 16.0
    assert traces == [3, 4]
    # static_argnums maps to the same parameter
    p2 = blu.jit(power.fun, static_argnums=1)
    assert float(p2(2.0, 5)) == 32.0
    with pytest.raises(BluError, match="hashable"):
        blu.jit(lambda x, s: x, static_argnums=1)(1.0, [1, 2])


def test_jit_pytrees_kwargs_and_donation():
    @blu.jit
    def step(params, x, *, scale):
        return {k: blu.numpy.multiply(v, scale) for k, v in params.items()}, lax.sin(x)

    out, s = step({"a": np.ones(2), "b": np.zeros(1)}, np.zeros(3), scale=3.0)
    np.testing.assert_array_equal(np.asarray(out["a"]), [3, 3])
    donated = blu.jit(lambda p: lax.add(p, 1.0), donate_argnums=0)
    np.testing.assert_array_equal(np.asarray(donated(np.ones(2))), [2, 2])


def test_jit_lower_and_eval_shape_without_values():
    f = blu.jit(lambda x, y: lax.mul(x, y))
    spec = blu.ShapeDtypeStruct((2, 3), np.float32)
    lowered = f.lower(spec, spec)
    assert "mul" in lowered.as_text("jaxpr") and "f32[2,3]" in lowered.as_text("jaxpr")
    # the default target's IR, as JAX shows StableHLO: the launch plan and each kernel's MLIR
    assert "kernel[mul]" in lowered.as_text() and "func.func" in lowered.as_text()
    assert lowered.memory_analysis().argument_size_in_bytes == 2 * 2 * 3 * 4
    compiled = lowered.compile()
    np.testing.assert_array_equal(
        np.asarray(compiled(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))), 1
    )
    shapes_out = blu.eval_shape(lambda x: lax.reduce_sum(x, 0), spec)
    assert shapes_out.shape == (3,) and shapes_out.dtype == np.float32


def test_jit_closure_over_tracer_is_retraced():
    # jit inside grad closing over the outer tracer: each call must see its own tracer
    def outer(y):
        g = blu.jit(lambda x: blu.numpy.multiply(x, y))
        return lax.reduce_sum(g(np.ones(2)))

    assert float(blu.grad(outer)(3.0)) == 2.0
    assert float(blu.grad(outer)(5.0)) == 2.0


def test_jit_non_array_argument_suggests_static():
    class Config:
        pass

    with pytest.raises(BluError, match="static_argnums"):
        blu.jit(lambda cfg, x: x)(Config(), 1.0)


def test_usage_errors_are_clear():
    with pytest.raises(BluError, match="has_aux=True requires"):
        blu.grad(lambda x: lax.reduce_sum(x), has_aux=True)(np.ones(2))
    with pytest.raises(BluError, match="cotangent leaf 0 is f64\\[3\\]"):
        blu.vjp(lax.sin, np.ones(2))[1](np.ones(3))
    with pytest.raises(BluError, match="as tuples"):
        blu.jvp(lax.sin, np.ones(2), np.ones(2))
    with pytest.raises(BluError, match="ints or None"):
        blu.vmap(lax.sin, in_axes=0.0)(np.ones(2))
    with pytest.raises(BluError, match="static_argnums \\[3\\] out of range"):
        blu.jit(lambda x: x, static_argnums=3)
    with pytest.raises(BluError, match="not parameters"):
        blu.jit(lambda x: x, static_argnames="nonexistent")
    with pytest.raises(BluError, match="immutable"):
        x = blu.numpy.zeros(3)
        x[0] = 1.0
