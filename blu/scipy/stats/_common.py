"""What the distributions share: JAX's promotion of their arguments (integers to float32,
otherwise the common float dtype) and broadcasting, and the standardized variable of the
location-scale families."""

from __future__ import annotations

from typing import Any

import numpy as np

from blu import numpy as bnp
from blu.scipy.special import _floats


def promote(*args: Any) -> list:
    """The arguments as float arrays of one dtype, broadcast together (JAX's
    ``promote_args_inexact``, which the arithmetic then broadcasts)."""
    return _floats(*args)


def standardize(x: Any, *args: Any) -> list:
    """``promote(x, *params, loc, scale)`` (``args`` ends in ``loc, scale``) with ``x``
    replaced by ``z = (x - loc) / scale`` and ``loc`` left out: ``[z, *params, scale]``."""
    x, *params, loc, scale = promote(x, *args)
    return [(x - loc) / scale, *params, scale]


def as_floats(*args: Any) -> list:
    """The arguments as arrays of their promoted float dtype, not broadcast (Python numbers
    weakly typed, integers to float32)."""
    dt = bnp.result_type(*args)
    if not bnp.issubdtype(dt, bnp.inexact):
        dt = bnp.result_type(dt, np.dtype(np.float32))
    return [bnp.asarray(a, dtype=dt) for a in args]
