"""jax.nn.initializers' variance-scaling family, orthogonal and delta_orthogonal: variances,
bounds and orthogonality measured on large draws against the formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu.core.errors import BluAxisError, BluShapeError
from blu.nn import initializers as init

KEY = blu.random.key(7)


@pytest.mark.parametrize(
    "make, shape, variance, bound",
    [
        (init.glorot_uniform, (300, 500), 2 / 800, math.sqrt(6 / 800)),
        (init.glorot_normal, (300, 500), 2 / 800, 2 * math.sqrt(2 / 800) / 0.8796256610342398),
        (init.he_uniform, (400, 100), 2 / 400, math.sqrt(6 / 400)),
        (init.he_normal, (400, 100), 2 / 400, 2 * math.sqrt(2 / 400) / 0.8796256610342398),
        (init.lecun_uniform, (3, 3, 20, 64), 1 / 180, math.sqrt(3 / 180)),
        (init.kaiming_normal, (250, 400), 2 / 250, None),
        (init.xavier_normal, (250, 400), 2 / 650, None),
    ],
)
def test_variance_and_bounds(make, shape, variance, bound):
    w = make()(KEY, shape)
    assert w.shape == shape and w.dtype == np.float32
    w = np.asarray(w, np.float64)
    assert abs(w.mean()) < 4 * math.sqrt(variance / w.size)
    assert w.var() == pytest.approx(variance, rel=0.03)
    if bound is not None:
        assert np.abs(w).max() <= bound * (1 + 1e-6)


def test_variance_scaling_modes_axes_and_errors():
    w = init.variance_scaling(3.0, "fan_out", "normal", in_axis=0, out_axis=1)(KEY, (50, 600))
    assert np.asarray(w).var() == pytest.approx(3.0 / 600, rel=0.03)
    w = init.variance_scaling(1.0, "fan_in", "uniform", dtype=np.float64)(KEY, (80, 500))
    assert w.dtype == np.float64
    assert (
        init.variance_scaling(1.0, "fan_in", "uniform")(KEY, (2, 2), np.float16).dtype == np.float16
    )
    with pytest.raises(blu.BluError, match="mode"):
        init.variance_scaling(1.0, "fan_x", "normal")
    with pytest.raises(blu.BluError, match="distribution"):
        init.variance_scaling(1.0, "fan_in", "cauchy")
    with pytest.raises(blu.BluError, match="rank >= 2"):
        init.he_normal()(KEY, (5,))
    with pytest.raises(blu.errors.BluValueError, match="scale"):
        init.variance_scaling(-1.0, "fan_in", "normal")  # was Python's math domain error


def test_axis_sequences_and_batch_axis():
    # JAX's: in/out axes may be sequences, batch axes count in no fan (they raised TypeErrors)
    shape = (8, 6, 5, 40)  # batch 8, inputs 6 * 5 = 30, outputs 40, no receptive field
    w = init.variance_scaling(2.0, "fan_in", "normal", in_axis=(1, 2), out_axis=-1, batch_axis=0)
    w = np.asarray(w(KEY, shape), np.float64)
    assert w.var() == pytest.approx(2.0 / 30, rel=0.07)  # 2 / (8 * 30) counting the batch
    w = np.asarray(init.he_uniform(in_axis=(1, 2), batch_axis=(0,))(KEY, shape), np.float64)
    assert np.abs(w).max() <= math.sqrt(6 / 30) and w.var() == pytest.approx(2 / 30, rel=0.07)
    for make in (init.xavier_uniform, init.lecun_normal):  # JAX's arguments, as glorot's
        w = np.asarray(make(in_axis=0, out_axis=1, dtype=np.float64)(KEY, (300, 100)))
        assert w.dtype == np.float64
    assert np.asarray(init.lecun_normal(in_axis=0, out_axis=1)(KEY, (300, 600))).var() == (
        pytest.approx(1 / 300, rel=0.05)
    )
    with pytest.raises(blu.BluError, match="in_axis"):
        init.glorot_normal(in_axis=3)(KEY, (4, 5))


@pytest.mark.parametrize(
    "make, kwargs, shape, error, words",
    [
        (init.orthogonal, {"column_axis": 5}, (3, 4), IndexError, ["column_axis 5", "(3, 4)"]),
        (init.orthogonal, {"column_axis": -3}, (3, 4), IndexError, ["column_axis -3", "(3, 4)"]),
        (init.orthogonal, {"column_axis": 1.5}, (3, 4), TypeError, ["column_axis 1.5", "(3, 4)"]),
        (init.glorot_uniform, {"in_axis": 1.0}, (3, 4), TypeError, ["in_axis 1.0", "(3, 4)"]),
        (init.he_normal, {"out_axis": (0, 2.0)}, (3, 4), TypeError, ["out_axis 2.0", "(3, 4)"]),
        (init.lecun_uniform, {"out_axis": "x"}, (3, 4), TypeError, ["out_axis 'x'", "(3, 4)"]),
        (init.he_uniform, {"batch_axis": 3}, (2, 3, 4), IndexError, ["batch_axis 3", "(2, 3, 4)"]),
        (init.glorot_normal, {"batch_axis": None}, (2, 3), TypeError, ["batch_axis None"]),
    ],
)
def test_axis_arguments_checked(make, kwargs, shape, error, words):
    with pytest.raises(blu.BluError) as info:
        make(**kwargs)(KEY, shape)
    assert isinstance(info.value, error)  # JAX's raw error class, and blu's
    for w in words:
        assert w in str(info.value)


def test_dtype_arguments_in_jax_order():
    # normal/uniform/constant(value, dtype), truncated_normal(stddev, dtype, lower, upper)
    w = init.truncated_normal(2.0, np.float64, -1.0, 0.5)(KEY, (4000,))
    assert w.dtype == np.float64
    w = np.asarray(w)
    assert w.min() >= -2.0 and w.max() <= 1.0 and w.min() < -1.9 and w.max() > 0.9
    assert init.normal(0.5, dtype=np.float16)(KEY, (3,)).dtype == np.float16
    assert init.normal(0.5, np.float16)(KEY, (3,), np.float32).dtype == np.float32  # call's wins
    u = init.uniform(0.5, np.float64)(KEY, (4000,))
    assert u.dtype == np.float64 and 0 <= float(u.min()) and float(u.max()) < 0.5
    c = init.constant(3, dtype=np.int32)(KEY, (2,))
    assert c.dtype == np.int32 and np.all(np.asarray(c) == 3)


@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (3, 2, 5)])
def test_orthogonal(shape):
    w = np.asarray(init.orthogonal(scale=2.0)(KEY, shape), np.float64)
    assert w.shape == shape
    m = w.reshape(-1, shape[-1])
    small = min(m.shape)
    gram = m.T @ m if m.shape[0] >= m.shape[1] else m @ m.T
    np.testing.assert_allclose(gram, 4.0 * np.eye(small), atol=1e-5)


def test_initializers_under_jit():
    w = blu.jit(lambda k: init.he_uniform()(k, (8, 4)))(KEY)
    np.testing.assert_allclose(np.asarray(w), np.asarray(init.he_uniform()(KEY, (8, 4))), rtol=1e-6)


@settings(deadline=None)
@given(
    spatial=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    n_in=st.integers(1, 5),
    extra=st.integers(0, 3),
    column_axis=st.sampled_from([-1, -2, 0, 1]),
    seed=st.integers(0, 2**16),
)
def test_delta_orthogonal_is_orthogonal_at_the_center_and_zero_elsewhere(
    spatial, n_in, extra, column_axis, seed
):
    shape = (*spatial, n_in, n_in + extra)
    make = init.delta_orthogonal(scale=1.5, column_axis=column_axis, dtype=np.float64)
    w = np.asarray(make(blu.random.key(seed), shape))
    assert w.shape == shape and w.dtype == np.float64
    center = tuple((k - 1) // 2 for k in spatial)
    c = w[center]
    np.testing.assert_allclose(c @ c.T, 1.5**2 * np.eye(n_in), atol=1e-12)  # orthonormal rows
    if extra == 0:
        np.testing.assert_allclose(c.T @ c, 1.5**2 * np.eye(n_in), atol=1e-12)
    rest = w.copy()
    rest[center] = 0.0
    assert not rest.any()  # every other tap is exactly zero


def test_delta_orthogonal_dtype_and_shape_errors():
    assert init.delta_orthogonal()(KEY, (3, 4, 4)).dtype == np.float32
    assert init.delta_orthogonal()(KEY, (3, 4, 4), np.float64).dtype == np.float64
    for bad in [(4, 4), (4,), (1, 1, 1, 1, 4, 4)]:
        with pytest.raises(BluShapeError, match="3-D, 4-D or 5-D"):
            init.delta_orthogonal()(KEY, bad)
    with pytest.raises(BluShapeError, match=r"fan_in 5 > fan_out 4"):
        init.delta_orthogonal()(KEY, (3, 3, 5, 4))
    with pytest.raises(BluAxisError, match="column_axis 2"):
        init.delta_orthogonal(column_axis=2)(KEY, (3, 4, 4))
