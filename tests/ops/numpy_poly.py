"""OpInfo entries: the window functions (bartlett, blackman, hamming, hanning, kaiser), i0."""

from __future__ import annotations

import numpy as np

import blu.numpy as bnp
from ops.base import op, unary_sampler, uniform

for _n in ("bartlett", "blackman", "hamming", "hanning"):
    for _m in (0, 1, 6):
        op(
            f"numpy.{_n}[M={_m}]",
            lambda _n=_n, _m=_m: getattr(bnp, _n)(_m),
            lambda _n=_n, _m=_m: getattr(np, _n)(_m),
            lambda rng: (),
            covers=[f"numpy.{_n}"],
            grad=False,
            skip={"vmap": "no array argument", "jit": "no array argument"},
        )

op(
    "numpy.kaiser",
    lambda beta: bnp.kaiser(7, beta),
    lambda beta: np.kaiser(7, float(beta)),
    lambda rng: (rng.uniform(0.5, 6.0, ()),),
    special=[(np.array(0.0),)],
    skip={
        "grad": "computed in the default float (float32) as JAX's, too coarse for float64 finite "
        "differences: test_numpy_windows checks d/dbeta against numpy's"
    },
)
op(
    "numpy.i0",
    bnp.i0,
    np.i0,
    unary_sampler(uniform(-5.0, 5.0)),
    special=[(np.array([0.0, -0.0, 1e-8, -20.0, 20.0]),)],
    finite_grad_at_special=True,
)
