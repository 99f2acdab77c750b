"""blu.numpy: the NumPy API on blu arrays (``import blu.numpy as bnp``)."""

from blu.numpy._promote import asarray_operand, promote_args
from blu import lax as _lax


def add(x, y):
    return _lax.add(*promote_args(x, y))


def subtract(x, y):
    return _lax.sub(*promote_args(x, y))


def multiply(x, y):
    return _lax.mul(*promote_args(x, y))


def sin(x):
    return _lax.sin(*promote_args(x))
