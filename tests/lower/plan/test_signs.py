"""``blu.lower.plan.signs``: which values of a jaxpr are known ``<= 0`` (a softmax's shift).

Each matched form is checked by evaluating the jaxpr on random and special values (numpy):
every element of a variable said ``<= 0`` is ``<= 0`` or NaN, except in a row whose max is
``+inf`` or NaN under ``blu.nn``'s stable shift (the module docstring's caveat, checked too).
Forms that do not hold, or that the matcher cannot see through, must not be matched."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import blu
import blu.lax as lax
import blu.nn as nn
import blu.numpy as bnp
from blu.core.jaxpr import Jaxpr, Var, eval_jaxpr
from blu.lower.plan.signs import nonpositive


def _keepdims(x):
    return bnp.exp(x - bnp.max(x, axis=1, keepdims=True))


def _indexed(x):
    return bnp.exp(x - bnp.max(x, axis=1)[:, None])


def _over_rows(x):
    return bnp.exp(x - bnp.max(x, axis=0))


def _all_axes(x):
    return bnp.exp(x - bnp.max(x))


def _stopped(x):
    return bnp.exp(x - lax.stop_gradient(bnp.max(x, axis=-1, keepdims=True)))


MATCHED = [_keepdims, _indexed, _over_rows, _all_axes, _stopped,
           lambda x: nn.softmax(x, axis=0), lambda x: nn.log_softmax(x),
           lambda x: nn.logsumexp(x, axis=1)]  # fmt: skip


def _facts(fn, x):
    cj = blu.make_jaxpr(fn)(x)
    return cj.jaxpr, nonpositive(cj.jaxpr)


def _values(jaxpr, x, facts):
    """Each fact's variable's value for the input ``x`` (an eval with them as outputs)."""
    probe = Jaxpr(jaxpr.constvars, jaxpr.invars, jaxpr.eqns, list(facts))
    return [np.asarray(v) for v in eval_jaxpr(probe, [], x)]


@pytest.mark.parametrize("fn", MATCHED)
def test_the_shift_is_found(fn):
    jaxpr, facts = _facts(fn, np.zeros((5, 7), np.float32))
    assert len(facts) == 1 and all(isinstance(v, Var) for v in facts)


SPECIAL = st.sampled_from([0.0, -0.0, -np.inf, np.inf, np.nan])
FINITE = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(
    fn=st.sampled_from(MATCHED),
    x=hnp.arrays(np.float32, hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=6),
                 elements=FINITE | SPECIAL),
)  # fmt: skip
def test_what_is_found_holds(fn, x):
    jaxpr, facts = _facts(fn, x)
    for v in _values(jaxpr, x, facts):
        bad = ~(np.isnan(v) | (v <= 0))
        if bad.any():  # only where the stable shift met a max of +inf or NaN (the caveat)
            assert (np.isposinf(x) | np.isnan(x)).any(), (x, v)


def _other_max(x, y):
    return bnp.exp(x - bnp.max(y, axis=1, keepdims=True))


def _min(x, y):
    return bnp.exp(x - bnp.min(x, axis=1, keepdims=True))


def _added(x, y):
    return bnp.exp(x + bnp.max(x, axis=1, keepdims=True))


def _transposed(x, y):  # rows' maxima subtracted along columns (a square x)
    return bnp.exp(x - bnp.max(x, axis=1)[None, :])


def _reversed(x, y):
    return bnp.exp(bnp.max(x, axis=1, keepdims=True) - x)


def _shifted_by_one(x, y):  # where(isfinite(m), m, 1): not the stable shift
    m = bnp.max(x, axis=1, keepdims=True)
    return bnp.exp(x - bnp.where(bnp.isfinite(m), m, bnp.ones_like(m)))


def _scaled(x, y):  # 2 m: not a max of x
    return bnp.exp(x - 2 * bnp.max(x, axis=1, keepdims=True))


@pytest.mark.parametrize("fn", [_other_max, _min, _added, _transposed, _reversed,
                                _shifted_by_one, _scaled])  # fmt: skip
def test_other_forms_are_not_found(fn):
    x = np.zeros((6, 6), np.float32)
    cj = blu.make_jaxpr(fn)(x, x + 1)
    assert nonpositive(cj.jaxpr) == frozenset()
