"""NumPy's index tricks as ``jax.numpy`` has them: ``mgrid``, ``ogrid`` (grids from static
slices: an integer or float step as ``arange``, a complex step ``nj`` as ``linspace`` of ``n``
points), ``r_``, ``c_`` (slices, scalars and arrays concatenated, with numpy's string
directives), ``s_``, ``index_exp`` (numpy's own) and ``ix_`` (an open mesh of 1-d arrays,
traceable)."""

from __future__ import annotations

from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import Tracer, get_aval
from blu.numpy._promote import array, asarray_operand, concrete_value
from blu.numpy.creation import arange, linspace, meshgrid, zeros
from blu.numpy.manipulation import concatenate, expand_dims, reshape, stack, transpose
from blu.numpy.selection import nonzero

__all__ = ["c_", "index_exp", "ix_", "mgrid", "ogrid", "r_", "s_"]

s_ = np.s_
index_exp = np.index_exp


def _static(v: Any, what: str) -> Any:
    """A slice bound as a Python number (None stays None).

    Raises:
        ConcretizationError: ``v`` is traced. BluTypeError: ``v`` is not a number.
    """
    if v is None:
        return None
    val = np.asarray(concrete_value(v, what))
    if val.ndim != 0 or val.dtype.kind not in "biufc":
        raise BluTypeError(with_user_line(f"{what} must be a number, got {v!r:.40}"))
    return val.item()


def _grid_1d(s: Any, name: str) -> Any:
    """The 1-d grid of the slice ``s``: ``arange(start, stop, step)``, or for a complex step
    ``linspace(start, stop, int(abs(step)))`` (both ends included)."""
    if not isinstance(s, slice):
        raise BluTypeError(
            with_user_line(f"{name}: expected slices such as 0:5 or 0:1:5j, got {s!r:.40}")
        )
    start = _static(s.start, f"the slice start of bnp.{name}") or 0
    stop = _static(s.stop, f"the slice stop of bnp.{name}")
    step = _static(s.step, f"the slice step of bnp.{name}") or 1
    if stop is None:
        raise BluValueError(with_user_line(f"{name}: the slice {s} needs a stop"))
    if isinstance(step, complex):
        return linspace(start, stop, int(abs(step)))
    if isinstance(start, complex) or isinstance(stop, complex):
        raise BluTypeError(with_user_line(f"{name}: complex bounds in the slice {s}"))
    return arange(start, stop, step)


def _grids(key: Any, name: str) -> list:
    """The 1-d grids of the slices of ``key``, promoted to one dtype."""
    grids = [_grid_1d(k, name) for k in key]
    if grids:
        dt = dtypes.result_type(*grids)
        grids = [g.astype(dt) for g in grids]
    return grids


class _Mgrid:
    """A dense grid: ``bnp.mgrid[0:3, 0:1:5j]`` is ``stack(meshgrid(arange(0, 3),
    linspace(0, 1, 5), indexing='ij'))`` (JAX's ``mgrid``; the slices are static)."""

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            return _grid_1d(key, "mgrid")
        if not isinstance(key, tuple):
            key = (key,)
        grids = _grids(key, "mgrid")
        if not grids:
            return arange(0)
        return stack(meshgrid(*grids, indexing="ij", sparse=False), 0)

    def __repr__(self) -> str:
        return "blu.numpy.mgrid"


class _Ogrid:
    """An open grid: ``bnp.ogrid[0:3, 0:1:5j]`` is ``meshgrid(..., indexing='ij',
    sparse=True)``, a list of broadcastable arrays (JAX's ``ogrid``; the slices are static)."""

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            return _grid_1d(key, "ogrid")
        if not isinstance(key, tuple):
            key = (key,)
        return meshgrid(*_grids(key, "ogrid"), indexing="ij", sparse=True)

    def __repr__(self) -> str:
        return "blu.numpy.ogrid"


mgrid = _Mgrid()
ogrid = _Ogrid()


def _directive(text: str, params: list[int], name: str) -> list[int]:
    """``[axis, ndmin, trans1d, matrix]`` from a string directive (JAX's parse: ``'r'``,
    ``'c'`` or up to three comma-separated integers)."""
    if text == "r":
        return params[:3] + [0]
    if text == "c":
        return params[:3] + [1]
    vec: list[Any] = text.split(",")
    vec = vec + params[len(vec) :] if len(vec) < 4 else vec[:3] + [params[-1]]
    try:
        return [int(v) for v in vec]
    except ValueError:
        raise BluValueError(
            with_user_line(
                f"{name}: could not understand the directive {text!r} (expected 'r', 'c' or "
                "'axis[,ndmin[,trans1d]]' as integers)"
            )
        ) from None


class _AxisConcat:
    """Slices (as ``arange`` / ``linspace``), scalars and arrays concatenated along an axis."""

    axis: int
    ndmin: int
    trans1d: int
    name: str

    def __getitem__(self, key: Any) -> Any:
        items = key if isinstance(key, tuple) else (key,)
        params = [self.axis, self.ndmin, self.trans1d, -1]
        if items and isinstance(items[0], str):
            params, items = _directive(items[0], params, self.name), items[1:]
        axis, ndmin, trans1d, matrix = params
        out = []
        for item in items:
            if isinstance(item, slice):
                # a 1-d grid (numpy swaps its axis to ``trans1d``: the same on size-1 axes)
                new, item_ndim = _grid_1d(item, self.name), 1
            elif isinstance(item, str):
                raise BluValueError(
                    with_user_line(f"{self.name}: a string directive must come first")
                )
            else:
                new = asarray_operand(item)
                item_ndim = get_aval(new).ndim
            new = array(new, copy=False, ndmin=ndmin)
            if trans1d != -1 and item_ndim < ndmin:
                # numpy's rule: the item's own axes start at ``trans1d`` (from the end when < 0)
                k2 = ndmin - item_ndim
                k1 = trans1d + k2 + 1 if trans1d < 0 else trans1d
                if not 0 <= k1 <= k2:
                    raise BluValueError(
                        with_user_line(
                            f"{self.name}: trans1d={trans1d} does not fit an item of "
                            f"{item_ndim} dimensions made {ndmin}-d"
                        )
                    )
                axes = list(range(ndmin))
                new = transpose(new, axes[:k1] + axes[k2:] + axes[k1:k2])
            out.append(new)
        if not out:
            raise BluValueError(with_user_line(f"{self.name}: nothing to concatenate"))
        res = concatenate(out, axis=axis)
        if matrix != -1 and get_aval(res).ndim == 1:
            res = expand_dims(res, matrix)
        return res

    def __len__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return f"blu.numpy.{self.name}"


class RClass(_AxisConcat):
    """Concatenation along the first axis (JAX's ``r_``): ``bnp.r_[0:3, 5, [7, 8]]``; a
    leading string ``'axis,ndmin,trans1d'`` (or ``'r'`` / ``'c'``: a row or column of the
    flat result) sets how the items are made at least ``ndmin``-d and joined."""

    axis, ndmin, trans1d, name = 0, 1, -1, "r_"


class CClass(_AxisConcat):
    """Concatenation along the last axis, 1-d items as columns (JAX's ``c_``): ``bnp.c_[a, b]``
    is ``r_['-1,2,0', a, b]``."""

    axis, ndmin, trans1d, name = -1, 2, 0, "c_"


r_ = RClass()
c_ = CClass()


def ix_(*args: Any) -> tuple:
    """An open mesh of 1-d index arrays: the ``i``-th of ``n`` is its argument reshaped to
    size 1 on every axis but ``i`` (traceable; ``x[ix_(rows, cols)]`` picks a sub-block). A
    concrete boolean array stands for its ``nonzero()`` positions (numpy's); an empty one
    becomes an int32 array.

    Raises:
        BluShapeError: an argument is not 1-d. BluTypeError: a traced boolean argument.
    """
    n = len(args)
    out = []
    for i, a in enumerate(args):
        a = asarray_operand(a)
        aval = get_aval(a)
        if aval.ndim != 1:
            raise BluShapeError(
                with_user_line(f"ix_: argument {i} must be 1-d, got shape {aval.shape}")
            )
        if aval.dtype == np.bool_:
            if isinstance(a, Tracer):
                raise BluTypeError(
                    with_user_line(
                        f"ix_: argument {i} is a traced boolean array {aval.str_short()}; its "
                        "positions' count is not static (pass integer indices)"
                    )
                )
            (a,) = nonzero(a)
            aval = get_aval(a)
        shape = [1] * n
        shape[i] = aval.shape[0]
        if aval.shape[0] == 0:
            out.append(zeros(tuple(shape), dtypes.default_int))
        else:
            out.append(reshape(a, tuple(shape)))
    return tuple(out)
