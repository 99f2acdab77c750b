"""``blu.fwd_and_bwd`` (JAX's): the forward pass returns the residuals as a pytree and the
backward pass gives vjp's cotangents (closed forms in float64); jitted, ``bwd`` is traced once
across iterations; ``argnums`` as an int or a sequence, ``has_aux``, and the cotangent checks."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.core.errors import BluShapeError, BluTypeError

TOL = dict(rtol=1e-12, atol=1e-12)


def _layer(x, w):
    return bnp.tanh(x @ w)


@settings(deadline=None)
@given(m=st.integers(1, 4), k=st.integers(1, 4), n=st.integers(1, 4), seed=st.integers(0, 999))
def test_cotangents_against_closed_forms(m, k, n, seed):
    rng = np.random.default_rng(seed)
    x, w, ct = rng.standard_normal((m, k)), rng.standard_normal((k, n)), rng.standard_normal((m, n))
    t = ct * (1.0 - np.tanh(x @ w) ** 2)  # numpy float64
    for jitted in (True, False):
        fwd, bwd = blu.fwd_and_bwd(_layer, argnums=(0, 1), jitted=jitted)
        y, res = fwd(x, w)
        np.testing.assert_allclose(np.asarray(y), np.tanh(x @ w), **TOL)
        dx, dw = bwd(res, ct)
        np.testing.assert_allclose(np.asarray(dx), t @ w.T, **TOL)
        np.testing.assert_allclose(np.asarray(dw), x.T @ t, **TOL)


def test_bwd_is_traced_once_across_iterations(caplog):
    rng = np.random.default_rng(0)
    x, w, ct = rng.standard_normal((4, 3)), rng.standard_normal((3, 5)), rng.standard_normal((4, 5))
    fwd, bwd = blu.fwd_and_bwd(_layer, argnums=1)
    with blu.config.override(log_compiles=True), caplog.at_level(logging.WARNING, "blu.jit"):
        for i in range(3):
            y, res = fwd(x + i, w)
            dw = bwd(res, ct)  # an int argnums: the cotangent itself
            t = ct * (1.0 - np.tanh((x + i) @ w) ** 2)
            np.testing.assert_allclose(np.asarray(dw), (x + i).T @ t, **TOL)
    traces = [r.getMessage() for r in caplog.records if "tracing" in r.getMessage()]
    assert sum("bwd(" in m for m in traces) == 1 and sum("fwd(" in m for m in traces) == 1


def test_has_aux_and_pytree_arguments():
    def loss(p, x):
        h = x @ p["w"] + p["b"]
        return bnp.sum(h**2), {"h": h}

    x = np.array([[1.0, 2.0], [-1.0, 0.5]])
    p = {"w": np.array([[0.3, -0.2], [0.1, 0.4]]), "b": np.array([0.5, -1.0])}
    fwd, bwd = blu.fwd_and_bwd(loss, argnums=0, has_aux=True)
    val, res, aux = fwd(p, x)
    h = x @ p["w"] + p["b"]
    np.testing.assert_allclose(float(val), np.sum(h**2), **TOL)
    np.testing.assert_allclose(np.asarray(aux["h"]), h, **TOL)
    g = bwd(res, 1.0)  # a Python scalar cotangent is cast to the output's dtype
    np.testing.assert_allclose(np.asarray(g["w"]), x.T @ (2.0 * h), **TOL)
    np.testing.assert_allclose(np.asarray(g["b"]), (2.0 * h).sum(0), **TOL)


def test_errors():
    fwd, bwd = blu.fwd_and_bwd(_layer, argnums=(0, 1), jitted=False)
    _, res = fwd(np.ones((2, 3)), np.ones((3, 4)))
    with pytest.raises(BluShapeError, match=r"f64\[4,2\].*f64\[2,4\]"):
        bwd(res, np.ones((4, 2)))
    with pytest.raises(BluTypeError, match=r"f32\[2,4\].*f64\[2,4\]"):
        bwd(res, np.ones((2, 4), np.float32))
    with pytest.raises(BluTypeError, match="structure"):
        bwd(res, (np.ones((2, 4)),))
    with pytest.raises(BluTypeError, match="residuals fwd returned"):
        bwd(np.ones(3), np.ones((2, 4)))
    with pytest.raises(BluTypeError, match="argnums"):
        blu.fwd_and_bwd(_layer, argnums=2)[0](np.ones((2, 3)), np.ones((3, 4)))
