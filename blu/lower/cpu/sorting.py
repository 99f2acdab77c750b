"""The CPU's library lowerings of ``sort`` and ``top_k`` (``blu.lax.sorting``): numpy's stable
sort (a radix sort for small integers, timsort otherwise) called on the planned buffers, so the
node needs no host round trip of its own and its outputs land where the memory plan put them.

The semantics are the primitives' impls: float keys in NumPy's order (NaN last, ``-0.0`` equal
to ``0.0``; half floats compared in float32, where numpy mis-orders their NaNs), stable, several
keys compared lexicographically (``np.lexsort``); ``top_k`` largest first, ties by lower index,
NaN counted as the largest. A compiled kernel would not beat numpy's sort here: the time goes
into comparisons and data movement that numpy's sort already does in C.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from blu.lax import sorting
from blu.lower.library import LibraryLowering, register_library


def _write(outs: Sequence[np.ndarray], results: Sequence[np.ndarray]) -> None:
    for dst, r in zip(outs, results, strict=True):
        dst[...] = r


def sort_call(ins, outs, workspace, *, dimension: int, is_stable: bool, num_keys: int) -> None:
    """Write ``sort(*ins)`` into ``outs`` (numpy arrays in the plan's buffers)."""
    _write(outs, sorting.sort_p.impl(*ins, dimension=dimension, is_stable=is_stable,
                                     num_keys=num_keys))  # fmt: skip


def top_k_call(ins, outs, workspace, *, k: int) -> None:
    """Write ``top_k(ins[0], k)``'s values and int32 indices into ``outs``."""
    _write(outs, sorting.top_k_p.impl(ins[0], k=k))


def _plain(avals, params, target: str) -> bool:
    """Real operands only (the orders of complex keys are not defined here)."""
    return all(np.dtype(a.dtype).kind != "c" for a in avals)


for _p, _call in ((sorting.sort_p, sort_call), (sorting.top_k_p, top_k_call)):
    register_library(_p, LibraryLowering(workspace=lambda avals, params, target: 0, cpu=_call,
                                         gpu=None, applies=_plain),
                     platform="cpu")  # fmt: skip
