"""blu.numpy.pad's reflecting, statistic, ramp and empty modes against numpy.pad (float64 and
int32, random shapes and widths larger than the axes), with gradients against finite
differences and vmap against a loop."""

import ml_dtypes
import numpy as np
import pytest
from helpers import arrays, check_grads, check_vmap, shapes
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.core.errors import BluTypeError, BluValueError

_MODES = [
    ("reflect", {}),
    ("symmetric", {}),
    ("reflect", {"reflect_type": "odd"}),
    ("symmetric", {"reflect_type": "odd"}),
    ("maximum", {}),
    ("minimum", {}),
    ("mean", {}),
    ("median", {}),
    ("mean", {"stat_length": 2}),
    ("median", {"stat_length": (1, 3)}),
    ("linear_ramp", {}),
    ("linear_ramp", {"end_values": (-3, 7)}),
]


@given(st.data())
def test_pad_modes_match_numpy(data):
    # they were a BluValueError ('mode is not supported')
    shape = data.draw(shapes(min_dims=1, max_dims=3, min_side=1))
    x = data.draw(arrays(shape, -5.0, 5.0))
    if data.draw(st.booleans()):
        x = np.round(x * 3).astype(np.int32)
    widths = tuple((data.draw(st.integers(0, 7)), data.draw(st.integers(0, 7))) for _ in shape)
    mode, kw = data.draw(st.sampled_from(_MODES))
    want = np.pad(x, widths, mode, **kw)
    for got in (
        bnp.pad(x, widths, mode, **kw),
        blu.jit(lambda x: bnp.pad(x, widths, mode, **kw))(x),
    ):
        got = np.asarray(got)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    # 'empty' leaves numpy's values undefined; JAX's (and blu's) are zeros
    np.testing.assert_array_equal(np.asarray(bnp.pad(x, widths, "empty")), np.pad(x, widths))


@given(st.data())
def test_pad_odd_reflection_keeps_bool_and_small_int_dtypes(data):
    # numpy computes 2 * edge - x and assigns it back into x's dtype (wrapping int8; a bool is
    # any nonzero value); blu returned bool input's pad as int32 with values like -6
    shape = data.draw(shapes(min_dims=1, max_dims=2, min_side=1))
    dt = data.draw(st.sampled_from([np.bool_, np.int8, np.uint8]))
    x = np.asarray(data.draw(arrays(shape, -100.0, 100.0))).astype(np.int64).astype(dt)
    widths = tuple((data.draw(st.integers(0, 6)), data.draw(st.integers(0, 6))) for _ in shape)
    mode = data.draw(st.sampled_from(["reflect", "symmetric"]))
    with np.errstate(over="ignore"):
        want = np.pad(x, widths, mode, reflect_type="odd")
    got = np.asarray(bnp.pad(x, widths, mode, reflect_type="odd"))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode, kw", _MODES)
def test_pad_modes_grad_and_vmap(mode, kw):
    x = np.arange(1.0, 7.0).reshape(2, 3) ** 1.5
    check_grads(lambda a: bnp.pad(a, ((2, 3), (4, 1)), mode, **kw), [x])
    check_vmap(lambda a: bnp.pad(a, ((5, 2),), mode, **kw), [x], [0])


def test_pad_mode_errors():
    x = np.ones((2, 3))
    with pytest.raises(BluValueError, match="unknown mode"):
        bnp.pad(x, 1, "nope")
    with pytest.raises(BluValueError, match="reflect_type"):
        bnp.pad(x, 1, "reflect", reflect_type="neither")
    with pytest.raises(BluValueError, match="stat_length"):
        bnp.pad(x, 1, "mean", stat_length=0)
    with pytest.raises(BluValueError, match="empty axis"):
        bnp.pad(np.ones((0, 2)), 1, "reflect")
    # a float width raises, as numpy's and JAX's (int() truncated it: pad(x, 1.5) padded 1)
    for width in (1.5, 2.0, ((1, 2.5), (0, 0)), True, {0: (1, 2)}):
        with pytest.raises(BluTypeError, match="pad_width"):
            bnp.pad(x, width)


@pytest.mark.parametrize(
    "mode, kw",
    [
        ("reflect", {"stat_length": 2}),
        ("symmetric", {"constant_values": 1}),
        ("edge", {"reflect_type": "odd"}),
        ("wrap", {"end_values": 1}),
        ("mean", {"end_values": 1}),
        ("linear_ramp", {"stat_length": 1}),
        ("constant", {"reflect_type": "even"}),
        ("empty", {"constant_values": 0}),
    ],
)
def test_pad_keyword_a_mode_does_not_take_is_an_error(mode, kw):
    # numpy's and JAX's ValueError 'unsupported keyword arguments for mode'; it was ignored,
    # so pad(x, 1, 'reflect', stat_length=2) quietly padded as if it were not given
    x = np.arange(4.0)
    with pytest.raises(ValueError, match="unsupported keyword"):
        np.pad(x, 1, mode, **kw)
    with pytest.raises(BluValueError, match=f"mode '{mode}' does not take {next(iter(kw))}"):
        bnp.pad(x, 1, mode, **kw)


@pytest.mark.parametrize("mode", ["mean", "median", "linear_ramp"])
def test_pad_bool_statistics_and_ramps_match_numpy(mode):
    # numpy rounds (mean, median) and floors (linear_ramp) integers only: a bool's 0.5 is True;
    # they were rounded or floored to False
    x = np.array([True, False, False, True, False])
    kw = {"stat_length": 2} if mode != "linear_ramp" else {}
    want = np.pad(x, 3, mode, **kw)
    got = np.asarray(bnp.pad(x, 3, mode, **kw))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def _numpy_padder(vector, width, axis, kwargs):  # numpy's: fills in place
    vector[: width[0]] = kwargs.get("value", 10) + axis
    if width[1]:
        vector[-width[1] :] = -kwargs.get("value", 10)


def _blu_padder(vector, width, axis, kwargs):  # JAX's and blu's: returns the padded vector
    vector = vector.at[: width[0]].set(kwargs.get("value", 10) + axis)
    return vector.at[vector.shape[0] - width[1] :].set(-kwargs.get("value", 10))


@given(st.data())
def test_pad_with_a_function_matches_numpy(data):
    # a callable mode was a BluValueError ('unknown mode')
    shape = data.draw(shapes(min_dims=1, max_dims=3, min_side=1))
    x = data.draw(arrays(shape, -5.0, 5.0))
    widths = tuple((data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))) for _ in shape)
    value = data.draw(st.sampled_from([{}, {"value": 2.5}]))
    want = np.pad(x, widths, _numpy_padder, **value)
    for got in (
        bnp.pad(x, widths, _blu_padder, **value),
        blu.jit(lambda x: bnp.pad(x, widths, _blu_padder, **value))(x),
    ):
        np.testing.assert_array_equal(np.asarray(got), want)


def test_pad_function_errors():
    with pytest.raises(BluValueError, match="must return the padded vector"):
        bnp.pad(np.ones((2, 3)), 1, lambda v, w, ax, kw: None)
    with pytest.raises(BluValueError, match="does not take value"):
        bnp.pad(np.ones((2, 3)), 1, "edge", value=3)


@given(st.data())
def test_linear_ramp_of_half_floats_is_rounded_once(data):
    # the ramp stepped in float16 / bfloat16 and drifted by ulps from numpy's float64 values
    dt = data.draw(st.sampled_from([np.float16, ml_dtypes.bfloat16]))
    x = data.draw(arrays((data.draw(st.integers(1, 5)),), -8.0, 8.0)).astype(dt)
    widths = (data.draw(st.integers(0, 9)), data.draw(st.integers(0, 9)))
    ends = (data.draw(st.integers(-9, 9)), data.draw(st.integers(-9, 9)))
    want = np.pad(x.astype(np.float64), widths, "linear_ramp", end_values=ends).astype(dt)
    got = np.asarray(bnp.pad(x, widths, "linear_ramp", end_values=ends))
    assert got.dtype == dt
    np.testing.assert_array_equal(got, want)
