"""``argnums`` of grad / value_and_grad / jacfwd / jacrev, as JAX's: negative positions count
from the end, a position out of ``[-len(args), len(args))`` is an error naming it (it raised a
raw IndexError for a negative one), and a position named twice is an error (grad returned a
zero gradient for its first mention); numpy integers are positions too."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu.core.errors import BluError, BluTypeError, BluValueError


def _prod(*xs):
    out = 1.0
    for x in xs:
        out = out * x
    return out


@settings(max_examples=30, deadline=None)
@given(data=st.data(), n=st.integers(1, 4))
def test_grad_of_a_product_at_any_valid_argnums(data, n):
    xs = [float(v) for v in data.draw(st.lists(st.integers(1, 5), min_size=n, max_size=n))]
    nums = data.draw(
        st.lists(st.integers(-n, n - 1), min_size=1, max_size=n, unique_by=lambda i: i % n)
    )
    got = blu.grad(_prod, argnums=tuple(nums))(*xs)
    for i, g in zip(nums, got):
        want = np.prod([x for j, x in enumerate(xs) if j != i % n])  # d/dx_i of the product
        assert float(g) == want


@pytest.mark.parametrize("transform", [blu.grad, blu.value_and_grad, blu.jacfwd, blu.jacrev])
@pytest.mark.parametrize("argnums", [2, -3, (0, 5), (-3,)])
def test_out_of_range_argnums_is_a_blu_error(transform, argnums):
    with pytest.raises(BluTypeError, match="argnums"):
        transform(lambda a, b: a * b, argnums=argnums)(2.0, 3.0)


@pytest.mark.parametrize("transform", [blu.grad, blu.jacfwd, blu.jacrev])
@pytest.mark.parametrize("argnums", [(0, 0), (1, -1)])
def test_an_argument_named_twice_is_an_error(transform, argnums):
    # grad(f, argnums=(0, 0)) returned (0., df/da): the second slot overwrote the first
    with pytest.raises(BluValueError, match="more than once"):
        transform(lambda a, b: a * b, argnums=argnums)(2.0, 3.0)


def test_numpy_integer_argnums_and_non_int_argnums():
    assert float(blu.grad(lambda a, b: a * b, argnums=np.int64(1))(2.0, 3.0)) == 2.0
    assert float(blu.jacrev(lambda a, b: a * b, argnums=np.int32(-1))(2.0, 3.0)) == 2.0
    with pytest.raises(BluError, match="argnums must be ints"):
        blu.grad(lambda a, b: a * b, argnums=(0, 1.5))(2.0, 3.0)


@pytest.mark.parametrize("transform", [blu.grad, blu.jacfwd, blu.jacrev])
@pytest.mark.parametrize("argnums", [1.5, "0", None])
def test_a_scalar_that_is_not_a_position_is_a_clear_error(transform, argnums):
    # a lone float or str raised Python's "'float' object is not iterable"
    with pytest.raises(BluTypeError, match="argnums must be ints"):
        transform(lambda a, b: a * b, argnums=argnums)(2.0, 3.0)


def test_any_sequence_of_positions_is_taken():
    g = blu.grad(lambda a, b: a * b * b, argnums=range(2))(2.0, 3.0)
    np.testing.assert_allclose([float(v) for v in g], [9.0, 12.0], rtol=1e-6)


@pytest.mark.parametrize("transform", [blu.grad, blu.jacfwd, blu.jacrev])
def test_a_0d_integer_array_is_one_position(transform):
    # JAX's operator.index; it raised Python's "iteration over a 0-d array"
    g = transform(lambda a, b: a * b * b, argnums=np.array(1))(2.0, 3.0)
    assert float(g) == 12.0  # d/db of a b^2, unwrapped like argnums=1
    for bad in (np.array(1.0), np.array(True)):
        with pytest.raises(BluTypeError, match="argnums must be ints"):
            transform(lambda a, b: a * b, argnums=bad)(2.0, 3.0)


@pytest.mark.parametrize("transform", [blu.grad, blu.value_and_grad, blu.jacfwd, blu.jacrev])
@pytest.mark.parametrize("argnums", [True, False, np.bool_(True)])
def test_a_bool_is_not_a_position(transform, argnums):
    # bool is an int subclass: grad(f, argnums=True) silently differentiated argument 1,
    # though argnums=(0, True) was already refused
    with pytest.raises(BluTypeError, match=f"argnums must be ints, got {argnums!r}"):
        transform(lambda a, b: a * b, argnums=argnums)(2.0, 3.0)
