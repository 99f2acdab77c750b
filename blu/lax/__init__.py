"""blu.lax: the primitives' user-facing functions (strict shapes and dtypes, like jax.lax)."""

from blu.lax.elementwise import (
    add, convert_element_type, cos, div, eq, exp, ge, gt, le, log, lt, mul, ne, neg, select, sin,
    sub, tanh,
)  # fmt: skip
from blu.lax.reductions import reduce_sum
from blu.lax.shapes import broadcast_in_dim, full, full_like, reshape, transpose
