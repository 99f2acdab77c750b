"""custom_jvp.defjvp / custom_vjp.defvjp take JAX's ``symbolic_zeros=`` (False only in blu)."""

import numpy as np
import pytest

import blu
from blu import lax
from blu.core.errors import BluValueError
from blu.transforms.custom_derivatives import custom_jvp, custom_vjp


def test_symbolic_zeros_false_is_the_default_and_true_is_refused():
    x = np.array([0.25, -1.5, 3.0])
    total = lambda f: lambda x, y: lax.reduce_sum(f(x, y))  # noqa: E731

    f = custom_jvp(lambda x, y: lax.mul(lax.sin(x), y))
    # deliberately not the derivative of sin(x) * y (d/dx 2 y, d/dy 3): shows the rule is used
    rule = lambda p, t: (f(*p), lax.add(lax.mul(lax.mul(t[0], p[1]), lax.full_like(t[0], 2.0)),  # noqa: E731
                                        lax.mul(t[1], lax.full_like(t[1], 3.0))))  # fmt: skip
    assert f.defjvp(rule, symbolic_zeros=False) is rule
    with pytest.raises(BluValueError, match=r"defjvp: symbolic_zeros=True is not supported"):
        f.defjvp(lambda p, t: (f(*p), t[0]), symbolic_zeros=True)
    gx, gy = blu.grad(total(f), (0, 1))(x, 2.0 * x)
    np.testing.assert_allclose(np.asarray(gx), 2.0 * 2.0 * x, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(gy), np.full(3, 3.0), rtol=1e-12)
    # only x perturbed: the rule still gets an array tangent for y (zeros), not a symbolic zero
    seen = []

    def recording_rule(p, t):
        seen.append(type(t[1]).__name__)
        return rule(p, t)

    f.defjvp(recording_rule, symbolic_zeros=False)
    y = np.array([1.0, -2.0, 0.5])
    _, t_out = blu.jvp(lambda x: f(x, y), (x,), (np.ones(3),))
    np.testing.assert_allclose(np.asarray(t_out), 2.0 * y, rtol=1e-12)
    assert seen and "Zero" not in "".join(seen)

    g = custom_vjp(lambda x, y: lax.mul(lax.sin(x), y))
    fwd = lambda x, y: (g(x, y), (x, y))  # noqa: E731
    bwd = lambda r, ct: (lax.mul(ct, lax.mul(lax.cos(r[0]), r[1])), lax.mul(ct, lax.sin(r[0])))  # noqa: E731
    assert g.defvjp(fwd, bwd, symbolic_zeros=False) is None
    with pytest.raises(BluValueError, match=r"defvjp: symbolic_zeros=True is not supported"):
        g.defvjp(fwd, lambda r, ct: (ct, ct), symbolic_zeros=True)
    gx, gy = blu.grad(total(g), (0, 1))(x, 2.0 * x)
    np.testing.assert_allclose(np.asarray(gx), np.cos(x) * 2.0 * x, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(gy), np.sin(x), rtol=1e-12)
