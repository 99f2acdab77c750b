"""The static integer arguments of lax functions (axes, dimensions, sizes, counts, lengths): a
value that is no int is a BluTypeError naming the argument (an integral float or a numpy int
works as the int)."""

from __future__ import annotations

import numpy as np
import pytest

from blu import lax
from blu.core.errors import BluTypeError

X = np.arange(6.0).reshape(2, 3)

CALLS = {
    "cumsum: axis": lambda v: lax.cumsum(X, axis=v),
    "cummax: axis": lambda v: lax.cummax(X, axis=v),
    "associative_scan: axis": lambda v: lax.associative_scan(lax.add, X, axis=v),
    "sort: dimension": lambda v: lax.sort(X, dimension=v),
    "sort: num_keys": lambda v: lax.sort((X, X), num_keys=v),
    "top_k: k": lambda v: lax.top_k(X, v),
    "scan: length": lambda v: lax.scan(lambda c, _: (c, c), 0.0, None, length=v),
    "dynamic_slice_in_dim: axis": lambda v: lax.dynamic_slice_in_dim(X, 0, 1, axis=v),
    "dynamic_slice: slice_sizes entry": lambda v: lax.dynamic_slice(X, (0, 0), (1, v)),
}


@pytest.mark.parametrize(
    "name, bad",
    [
        (name, bad)
        for name in sorted(CALLS)
        for bad in (None, "a", 1.5, np.array([0, 1]), float("inf"), -np.inf, float("nan"))
        if not (name == "scan: length" and bad is None)  # None: the length of xs
    ],
)
def test_a_value_that_is_no_int_is_a_type_error(name, bad):
    # they raised raw TypeErrors/ValueErrors, or (1.5) truncated silently to 1; an infinite
    # float raised Python's OverflowError
    with pytest.raises(BluTypeError, match=f"{name} must be an int, got"):
        CALLS[name](bad)


@pytest.mark.parametrize("bad", [None, 1.5])
def test_start_indices_and_slice_sizes_that_are_no_sequences(bad):
    with pytest.raises(BluTypeError, match="start_indices must be a sequence"):
        lax.dynamic_slice(X, bad, (1, 1))
    with pytest.raises(BluTypeError, match="start_indices must be a sequence"):
        lax.dynamic_update_slice(X, X[:1], bad)
    with pytest.raises(BluTypeError, match="slice_sizes must be ints"):
        lax.dynamic_slice(X, (0, 0), bad)
