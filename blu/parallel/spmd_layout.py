"""Layouts of values in a partitioned program, and the collectives that change them.

A ``Layout`` says how one global array is held by the devices of a mesh: per dimension, the
mesh axes it is split over (major first, as a ``PartitionSpec`` entry), and the mesh axes over
which the devices hold *partial sums* (each device a term; the value is their sum). It is
GSPMD's sharding with its "partial" state (Xu et al. 2021, "GSPMD: General and Scalable
Parallelization for ML Computation Graphs", section 3).

``reshard`` moves a per-device block from one layout to another inside a ``blu.shard`` body
with the cheapest collectives it knows: a pending sum becomes ``psum`` (all-reduce) or
``psum_scatter`` (reduce-scatter) when the target splits a dimension over that axis; a split
dimension becomes whole by ``all_gather``; a whole dimension is split by slicing this device's
block (no communication); a replicated value becomes a partial sum by keeping it on the first
device of the axis only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu import lax
from blu.core.interpreter import get_aval
from blu.lax import parallel as coll
from blu.parallel.mesh import Mesh, PartitionSpec

Axes = tuple  # mesh axis names, major first


class Layout:
    """Per dimension, the mesh axes it is split over; ``partial``: the axes summed over.

    Attributes:
        dims: one tuple of mesh axis names per dimension (``()``: the dimension is whole).
        partial: mesh axes (sorted in mesh order by ``normalize``) over which each device holds
            one term of a sum.
    """

    __slots__ = ("dims", "partial")

    def __init__(self, dims: Sequence[Axes], partial: Sequence[Any] = ()):
        self.dims = tuple(tuple(d) for d in dims)
        self.partial = tuple(partial)

    @classmethod
    def replicated(cls, ndim: int) -> Layout:
        return cls(((),) * ndim)

    @classmethod
    def from_spec(cls, spec: PartitionSpec | None, ndim: int) -> Layout:
        spec = spec or PartitionSpec()
        return cls(tuple(spec.names_of(i) for i in range(ndim)))

    def spec(self) -> PartitionSpec:
        """The ``PartitionSpec`` of the dimensions (the partial sum must be resolved first)."""
        entries = [d if len(d) > 1 else (d[0] if d else None) for d in self.dims]
        while entries and entries[-1] is None:
            entries.pop()
        return PartitionSpec(*entries)

    def used(self) -> set:
        """Every mesh axis the layout splits a dimension over or sums over."""
        return {a for d in self.dims for a in d} | set(self.partial)

    def is_replicated(self) -> bool:
        return not self.partial and not any(self.dims)

    def with_dims(self, dims: Sequence[Axes]) -> Layout:
        return Layout(dims, self.partial)

    def whole(self) -> Layout:
        """The same partial sum with every dimension whole."""
        return Layout(((),) * len(self.dims), self.partial)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Layout)
            and self.dims == other.dims
            and set(self.partial) == set(other.partial)
        )

    def __hash__(self) -> int:
        return hash((self.dims, frozenset(self.partial)))

    def __repr__(self) -> str:
        p = f", partial={list(self.partial)}" if self.partial else ""
        return f"Layout({self.spec()!r}{p})"


def drop_trivial(lay: Layout, mesh: Mesh) -> Layout:
    """``lay`` without mesh axes of size 1 (splitting over one device, or summing one term)."""
    keep = lambda axes: tuple(a for a in axes if mesh.shape[a] > 1)  # noqa: E731
    return Layout([keep(d) for d in lay.dims], keep(lay.partial))


def split_size(mesh: Mesh, axes: Axes) -> int:
    return math.prod(mesh.shape[a] for a in axes)


def local_shape(mesh: Mesh, shape: Sequence[int], layout: Layout) -> tuple[int, ...]:
    """The per-device block's shape of a global ``shape`` laid out as ``layout``."""
    return tuple(n // split_size(mesh, d) for n, d in zip(shape, layout.dims))


def divides(mesh: Mesh, size: int, axes: Axes) -> bool:
    return size % split_size(mesh, axes) == 0


def _slice_block(x: Any, d: int, axes: Axes, mesh: Mesh) -> Any:
    """This device's block of whole dimension ``d`` split over ``axes`` (no communication)."""
    n = split_size(mesh, axes)
    block = get_aval(x).shape[d] // n
    start = lax.mul(coll.axis_index(axes), lax.full((), block, np.int32))
    return lax.dynamic_slice_in_dim(x, start, block, axis=d, allow_negative_indices=False)


def _first_only(x: Any, axes: Axes) -> Any:
    """``x`` on the first device along ``axes``, zeros elsewhere: a replicated value as a sum."""
    aval = get_aval(x)
    first = lax.eq(coll.axis_index(axes), lax.full((), 0, np.int32))
    zeros = lax.full(aval.shape, 0, aval.dtype)
    return lax.select(lax.broadcast_in_dim(first, aval.shape, ()), x, zeros)


def reshard(x: Any, src: Layout, dst: Layout, mesh: Mesh, log: list | None = None) -> Any:
    """``x`` (this device's block, laid out as ``src``) as its block laid out as ``dst``;
    ``log`` gets a line per collective (kind, block aval, mesh axes)."""
    src, dst = drop_trivial(src, mesh), drop_trivial(dst, mesh)
    if src == dst:  # (mesh axes of size 1 hold nothing to move: a world of one moves nothing)
        return x

    def note(kind: str, axes: Any) -> None:
        if log is not None:
            log.append(f"{kind} {get_aval(x).str_short()} over {tuple(axes)}")

    dims = list(src.dims)
    pending = [a for a in src.partial if a not in dst.partial]
    for a in pending:  # resolve sums: reduce-scatter where ``dst`` splits a dim over ``a``
        target = next(
            (
                d
                for d, want in enumerate(dst.dims)
                if a in want
                and want[: len(dims[d]) + 1] == dims[d] + (a,)
                and get_aval(x).shape[d] % mesh.shape[a] == 0
            ),
            None,
        )
        if target is None:
            note("all-reduce", (a,))
            x = coll.psum(x, a)
        else:
            note("reduce-scatter", (a,))
            x = coll.psum_scatter(x, a, scatter_dimension=target, tiled=True)
            dims[target] = dims[target] + (a,)
    for d, (have, want) in enumerate(zip(dims, dst.dims)):  # gather what must move or go
        if have and want[: len(have)] != have:
            note("all-gather", have)
            x = coll.all_gather(x, have, axis=d, tiled=True)
            dims[d] = ()
    for d, (have, want) in enumerate(zip(dims, dst.dims)):  # split further: slice locally
        if want != have:
            x = _slice_block(x, d, want[len(have) :], mesh)
    extra = [a for a in dst.partial if a not in src.partial]
    if extra:
        x = _first_only(x, tuple(extra))
    return x
