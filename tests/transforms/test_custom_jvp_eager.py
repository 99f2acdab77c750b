"""custom_jvp called eagerly (at the root, on concrete arrays): the value is the function's, its
rule is traced only to check it, once per signature (nondiff arguments, avals and structures in
and out, the flags), and every transform of the same function still applies the rule."""

import numpy as np
import pytest
from helpers import arrays, shapes
from hypothesis import given

import blu
from blu import lax
from blu.core.errors import BluTypeError, BluValueError, EscapedTracerError
from blu.transforms.custom_derivatives import custom_jvp
from blu.tree_util import register_pytree_node


def counted_sin(scale: float = 7.0):
    """sin with a rule whose tangent is deliberately ``scale * t`` (not cos): a result equal
    to ``scale`` can only come from the rule. ``calls[0]``: how often the rule ran."""
    calls = [0]
    f = custom_jvp(lax.sin)

    @f.defjvp
    def f_jvp(primals, tangents):
        calls[0] += 1
        (x,), (t,) = primals, tangents
        return f(x), lax.mul(t, lax.full_like(t, scale))

    return f, calls


def test_eager_value_is_the_functions_and_transforms_still_use_the_rule():
    f, calls = counted_sin()
    x = np.array([0.3, -1.2, 2.5])
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(f(x)), np.sin(x), rtol=1e-15)
    assert calls[0] == 1  # checked at the first call only
    total = lambda x: lax.reduce_sum(f(x), (0,))  # noqa: E731
    np.testing.assert_allclose(np.asarray(blu.grad(total)(x)), np.full(3, 7.0), rtol=1e-15)
    np.testing.assert_allclose(np.asarray(blu.jit(blu.grad(total))(x)), np.full(3, 7.0))
    _, t = blu.jvp(f, (x,), (np.ones(3),))
    np.testing.assert_allclose(np.asarray(t), np.full(3, 7.0), rtol=1e-15)
    g = blu.vmap(blu.grad(lambda s: f(s)))(x)
    np.testing.assert_allclose(np.asarray(g), np.full(3, 7.0), rtol=1e-15)
    # second order: the rule's tangent 7 t has no derivative in x
    np.testing.assert_allclose(np.asarray(blu.grad(blu.grad(f))(0.3)), 0.0, atol=1e-15)
    np.testing.assert_allclose(np.asarray(blu.jit(f)(x)), np.sin(x), rtol=1e-15)
    np.testing.assert_allclose(np.asarray(f(x)), np.sin(x), rtol=1e-15)  # eager again


@given(shapes(max_dims=2).flatmap(lambda s: arrays(s)))
def test_eager_random_shapes_value_and_gradient(x):
    f, calls = counted_sin(scale=3.0)
    for _ in range(2):
        np.testing.assert_allclose(np.asarray(f(x)), np.sin(x), rtol=1e-15, atol=1e-300)
    assert calls[0] == 1
    g = blu.grad(lambda x: lax.reduce_sum(f(x), tuple(range(np.ndim(x)))))(x)
    np.testing.assert_allclose(np.asarray(g), np.full(np.shape(x), 3.0), rtol=1e-15)


def test_eager_rule_checked_per_signature():
    f, calls = counted_sin()
    f(np.ones(3))
    f(np.ones(3))
    assert calls[0] == 1
    f(np.ones(4))  # another shape
    f(np.ones(3, np.float32))  # another dtype
    f(1.0)  # a weak scalar
    assert calls[0] == 4
    f(np.ones(4))
    f(np.ones(3, np.float32))
    f(2.0)
    assert calls[0] == 4
    with blu.config.override(log_compiles=False):  # flags of another generation: checked again
        f(np.ones(3))
    assert calls[0] == 5


def test_eager_bad_rule_raises_at_every_call():
    bad = custom_jvp(lax.sin)
    bad.defjvp(lambda p, t: (lax.sin(p[0]), lax.reduce_sum(t[0], (0,))))
    for _ in range(2):  # a rule that failed is not remembered
        with pytest.raises(BluTypeError, match="tangent output"):
            bad(np.ones(3))
    with pytest.raises(BluTypeError, match="tangent output"):
        blu.grad(lambda x: lax.reduce_sum(bad(x), (0,)))(np.ones(3))


def test_eager_rule_failing_for_one_shape_only():
    f = custom_jvp(lax.sin)

    @f.defjvp
    def f_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        if x.shape == (2,):
            raise BluValueError(f"no rule for shape {x.shape}")
        return f(x), t

    f(np.ones(3))
    f(np.ones(3))
    for _ in range(2):
        with pytest.raises(BluValueError, match=r"shape \(2,\)"):
            f(np.ones(2))


def test_eager_new_rule_is_checked_again():
    f, calls = counted_sin()
    f(np.ones(3))
    f.defjvp(lambda p, t: (lax.sin(p[0]), lax.reduce_sum(t[0], (0,))))
    with pytest.raises(BluTypeError, match="tangent output"):
        f(np.ones(3))
    f.defjvps(lambda t, out, x: lax.mul(t, lax.full_like(t, 5.0)))
    np.testing.assert_allclose(np.asarray(f(np.ones(3))), np.sin(np.ones(3)), rtol=1e-15)
    g = blu.grad(lambda x: lax.reduce_sum(f(x), (0,)))(np.ones(3))
    np.testing.assert_allclose(np.asarray(g), np.full(3, 5.0), rtol=1e-15)


def test_eager_nondiff_arguments_are_part_of_the_signature():
    def scaled(n, x):
        return lax.mul(x, lax.full_like(x, n))

    f = custom_jvp(scaled, nondiff_argnums=(0,))
    seen = []

    @f.defjvp
    def f_jvp(n, primals, tangents):
        seen.append(n)
        if n == 3:  # a rule that refuses one value of the nondiff argument
            raise BluValueError("n = 3 refused")
        (x,), (t,) = primals, tangents
        return f(n, x), lax.mul(t, lax.full_like(t, 10.0 * n))

    x = np.array([0.5, 2.0])
    for n in (2, 2, 4, 4):
        np.testing.assert_allclose(np.asarray(f(n, x)), x * n, rtol=1e-15)
    assert seen == [2, 4]
    with pytest.raises(BluValueError, match="n = 3"):
        f(3, x)
    f(2.0, x)  # 2.0 is not 2: checked on its own
    assert seen == [2, 4, 3, 2.0]
    g = blu.grad(lambda x: lax.reduce_sum(f(2, x), (0,)))(x)
    np.testing.assert_allclose(np.asarray(g), np.full(2, 20.0), rtol=1e-15)
    assert len(seen) == 5  # the gradient applied the rule
    f(np.float64(2.0), x)  # not a plain Python value: checked at every call
    f(np.float64(2.0), x)
    assert len(seen) == 7
    g2 = custom_jvp(scaled, nondiff_argnums=(2,))
    g2.defjvp(f_jvp)
    with pytest.raises(BluValueError, match="out of range"):
        g2(2, x)


class _Box:
    """A pytree node whose data (a list) cannot be hashed."""

    def __init__(self, x, tags):
        self.x, self.tags = x, tags


register_pytree_node(_Box, lambda b: ((b.x,), list(b.tags)), lambda tags, c: _Box(c[0], tags))


def test_eager_pytree_with_unhashable_node_data():
    f = custom_jvp(lambda b: _Box(lax.sin(b.x), b.tags))
    seen = []

    @f.defjvp
    def f_jvp(primals, tangents):
        seen.append(1)
        (b,), (t,) = primals, tangents
        return f(b), _Box(lax.mul(t.x, lax.full_like(t.x, 7.0)), b.tags)

    x = np.array([0.2, 1.3])
    for _ in range(2):  # no signature to remember: checked at every call, as before
        out = f(_Box(x, ["a"]))
        np.testing.assert_allclose(np.asarray(out.x), np.sin(x), rtol=1e-15)
        assert out.tags == ["a"]
    assert len(seen) == 2
    g = blu.grad(lambda x: lax.reduce_sum(f(_Box(x, ["a"])).x, (0,)))(x)
    np.testing.assert_allclose(np.asarray(g), np.full(2, 7.0), rtol=1e-15)


def test_eager_errors_unchanged():
    with pytest.raises(BluTypeError, match="defjvp"):
        custom_jvp(lax.sin)(np.ones(2))
    with pytest.raises(BluValueError, match="symbolic_zeros"):
        custom_jvp(lax.sin).defjvp(lambda p, t: (p[0], t[0]), symbolic_zeros=True)
    f, _ = counted_sin()
    leaked = []
    blu.jit(lambda x: leaked.append(x) or x)(np.ones(2))
    f(np.ones(2))
    with pytest.raises(EscapedTracerError):
        f(leaked[0])


def test_eager_call_from_a_rule_at_the_root():
    # jvp at the root applies g's rule to concrete values there: its eager call of f gives
    # f's value, and f's own rule is not needed
    f, calls = counted_sin()
    g = custom_jvp(lax.cos)

    @g.defjvp
    def g_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return g(x), lax.mul(t, lax.neg(f(x)))  # d cos = -sin

    x = np.array([0.4, 1.1])
    p, t = blu.jvp(g, (x,), (np.full(2, 2.0),))
    np.testing.assert_allclose(np.asarray(p), np.cos(x), rtol=1e-15)
    np.testing.assert_allclose(np.asarray(t), -2.0 * np.sin(x), rtol=1e-15)
    h = blu.grad(blu.grad(g))  # g's rule differentiated: f's rule gives 7, not cos
    np.testing.assert_allclose(np.asarray(h(0.4)), -7.0, rtol=1e-15)


def test_eager_check_under_one_flag_state_does_not_count_for_another_thread():
    # thread A checks the rule (slowly) with no override; thread B calls under an override the
    # rule rejects. A's check, finished after B's flags were read, must not mark B's signature
    # checked: B's next call checks the rule and raises
    import threading

    from blu.core.config import config

    started, go = threading.Event(), threading.Event()

    @custom_jvp
    def f(x):
        return x * 2.0

    @f.defjvp
    def f_jvp(primals, tangents):
        if config.debug_nans:
            raise RuntimeError("the rule rejects debug_nans")
        if threading.current_thread().name == "A":
            started.set()
            go.wait(10)
        return f(primals[0]), 2.0 * tangents[0]

    x = np.ones(3, np.float32)
    ta = threading.Thread(target=lambda: f(x), name="A")
    ta.start()
    assert started.wait(10)
    seen = []

    def thread_b():
        with config.override(debug_nans=True):
            f(x)  # (A is inside the rule: this call's own check is skipped)
            go.set()
            ta.join()
            try:
                f(x)
            except RuntimeError as e:
                seen.append(str(e))

    tb = threading.Thread(target=thread_b, name="B")
    tb.start()
    tb.join(20)
    assert seen == ["the rule rejects debug_nans"]
