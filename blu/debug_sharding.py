"""``blu.debug``'s sharding views (JAX's ``jax.debug.inspect_array_sharding``,
``visualize_array_sharding``, ``visualize_sharding``).

``visualize_sharding`` prints a 1-D or 2-D array's blocks as a grid, each cell naming the
devices that hold that block (``CPU 0,4``: replicated over devices 0 and 4), sized as JAX's
(``scale``, ``min_width``, ``max_width``). JAX draws it with ``rich``; blu prints plain text
with box-drawing characters and needs no extra package. ``use_color`` paints each cell's
background with ANSI colours (from ``color_map``, or a fixed palette) only when standard output
is a terminal; anywhere else (a file, a pipe, pytest's capture) the grid is plain text.

``inspect_array_sharding`` calls back with a value's sharding: at once for an array (a
``ShardedArray``'s ``NamedSharding``, or the ``SingleDeviceSharding`` of one that is not
sharded), and inside a ``jit`` that partitions over a mesh with the layout the partitioner gave
the value, when the function is partitioned (its first call per signature; JAX's runs when the
function is compiled). A pending partial sum is reported by its dimensions' split.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

from blu.core import pytree
from blu.core.errors import BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import Tracer
from blu.transforms.jit import hold_sharding_callback

__all__ = ["inspect_array_sharding", "visualize_array_sharding", "visualize_sharding"]

# 256-colour ANSI backgrounds used when no color_map is given (tab20b-like blues, greens, reds)
_PALETTE = (61, 67, 104, 146, 64, 107, 143, 186, 136, 178, 180, 223, 131, 167, 174, 217)


def _chunk(size: int, slc: Any) -> tuple[int, float]:
    """(block index, fraction of the dimension) of one device's slice of a dimension."""
    if isinstance(slc, int):
        slc = slice(slc, slc + 1)
    start = 0 if slc.start is None else slc.start
    stop = size if slc.stop is None else slc.stop
    n = stop - start
    return (start // n if n else 0), (n / size if size else 1.0)


def _grid(shape: tuple[int, ...], sharding: Any) -> tuple[dict, dict, dict]:
    """Per block (row, col): the device ids holding it, its height and width fractions."""
    ids: dict = {}
    heights: dict = {}
    widths: dict = {}
    for dev, slcs in sharding.devices_indices_map(shape).items():
        parts = [_chunk(s, x) for s, x in zip(shape, slcs, strict=True)]
        if len(shape) == 1:
            key = (0, parts[0][0])
            heights[key], widths[key] = None, parts[0][1]
        else:
            key = (parts[0][0], parts[1][0])
            heights[key], widths[key] = parts[0][1], parts[1][1]
        ids.setdefault(key, set()).add(dev.id)
    return ids, heights, widths


def _ansi(color_map: Callable | None, k: int, n: int) -> str:
    if color_map is None:
        return f"\x1b[48;5;{_PALETTE[k % len(_PALETTE)]}m\x1b[30m"
    r, g, b = (int(c * 255) for c in tuple(color_map(k / max(n - 1, 1)))[:3])
    fg = "30" if r * 0.299 + g * 0.587 + b * 0.114 > 186 else "97"
    return f"\x1b[48;2;{r};{g};{b}m\x1b[{fg}m"


def visualize_sharding(
    shape: Sequence[int],
    sharding: Any,
    *,
    use_color: bool = True,
    scale: float = 1.0,
    min_width: int = 9,
    max_width: int = 80,
    color_map: Callable[[float], tuple] | None = None,
) -> None:
    """Print which devices hold which block of an array of ``shape`` laid out by ``sharding``.

    Example: ``visualize_sharding((8, 8), NamedSharding(mesh, P("x")))`` on a ``(2, 2)`` mesh
    prints two rows, ``CPU 0,1`` and ``CPU 2,3`` (each row replicated over the ``y`` axis).

    Args:
        shape: the global shape, of 1 or 2 dimensions.
        sharding: a ``NamedSharding`` or ``SingleDeviceSharding`` (anything with
            ``devices_indices_map`` and ``device_set``).
        use_color: paint the cells with ANSI colours when standard output is a terminal (plain
            text otherwise, where JAX's ``rich`` would also drop colour).
        scale: the grid's height in lines is ``10 * scale`` for a 2-D array (JAX's).
        min_width, max_width: bounds on a cell's width and the grid's width, in characters.
        color_map: a function of ``[0, 1]`` to an RGB(A) tuple of floats in ``[0, 1]`` (a
            matplotlib colormap); with ``use_color`` on a terminal.

    Raises:
        BluValueError: ``shape`` has not 1 or 2 dimensions.
        BluTypeError: ``sharding`` is not a sharding (a ``PartitionSpec``, say).
        BluShapeError: ``sharding`` does not divide ``shape``.
    """
    shape = tuple(int(s) for s in shape)
    if len(shape) not in (1, 2):
        raise BluValueError(
            with_user_line(
                f"visualize_sharding: only arrays of 1 or 2 dimensions can be shown; got shape "
                f"{shape} ({len(shape)} dimensions)"
            )
        )
    if not (hasattr(sharding, "devices_indices_map") and hasattr(sharding, "device_set")):
        raise BluTypeError(
            with_user_line(
                f"visualize_sharding: sharding must be a Sharding (NamedSharding, "
                f"SingleDeviceSharding), got {type(sharding).__name__} {sharding!r}"
            )
        )
    ids, heights, widths = _grid(shape, sharding)
    rows = max(r for r, _ in ids) + 1
    cols = max(c for _, c in ids) + 1
    kind = next(iter(sharding.device_set)).platform.upper()
    base_h = int(10 * scale)
    base_w = int(base_h * (shape[1] if len(shape) == 2 else 1) / max(shape[0], 1))
    label = {k: f"{kind} " + ",".join(str(i) for i in sorted(v)) for k, v in ids.items()}

    def inner(r: int, c: int) -> int:  # a cell's width inside its borders (JAX's padding)
        w = min(max(int(widths[r, c] * base_w * 2.5), min_width), max_width)
        return max(w - 2, len(label[r, c]))

    col_w = [max(inner(r, c) for r in range(rows)) for c in range(cols)]
    room = max_width - (cols + 1)  # (the borders take cols + 1 characters)
    if sum(col_w) > room:  # narrowed to fit, as rich fits a table to the console
        total = sum(col_w)
        col_w = [max(max(len(label[r, c]) for r in range(rows)), w * room // total)
                 for c, w in enumerate(col_w)]  # fmt: skip
    # lines per row: JAX's height less its two padding lines, the label on the middle one
    row_h = [
        1 if heights[r, 0] is None else max(int(heights[r, 0] * base_h) - 1, 1) for r in range(rows)
    ]
    color = use_color and sys.stdout.isatty()
    lines = ["┌" + "┬".join("─" * w for w in col_w) + "┐"]
    for r in range(rows):
        for line in range(row_h[r]):
            cells = []
            for c in range(cols):
                text = label[r, c] if line == max(row_h[r] - 1, 0) // 2 else ""
                cell = text.center(col_w[c])
                if color:
                    cell = _ansi(color_map, r * cols + c, rows * cols) + cell + "\x1b[0m"
                cells.append(cell)
            lines.append("│" + "│".join(cells) + "│")
        if r < rows - 1:
            lines.append("├" + "┼".join("─" * w for w in col_w) + "┤")
    lines.append("└" + "┴".join("─" * w for w in col_w) + "┘")
    print("\n".join(lines), end="\n\n")


def _sharding_now(x: Any) -> Any:
    """The sharding of an array or a value traced outside a partitioned jit."""
    if not isinstance(x, Tracer):
        s = getattr(x, "sharding", None)
        if s is not None and hasattr(s, "devices_indices_map"):
            return s
        import blu.numpy as bnp

        return bnp.asarray(x).sharding
    from blu.transforms.axes import axis_env_key

    names = [n for n, _ in axis_env_key()]
    if names:
        raise BluValueError(
            with_user_line(
                "inspect_array_sharding: inside blu.shard or a named vmap (axes "
                f"{names}) a value is one device's block, which has no sharding of its own; the "
                "shard's in_specs / out_specs say how the global arrays are laid out (call it "
                "on the shard's arguments or results)"
            )
        )
    from blu.numpy.devices import CPU_DEVICE
    from blu.parallel.mesh import SingleDeviceSharding

    return SingleDeviceSharding(CPU_DEVICE)  # a jit that is not partitioned runs on one device


def inspect_array_sharding(value: Any, *, callback: Callable[[Any], None]) -> None:
    """Call ``callback(sharding)`` for each array leaf of ``value`` (JAX's).

    An array's: a ``ShardedArray``'s ``NamedSharding``, ``SingleDeviceSharding`` for one that is
    not sharded (and for values traced by a ``jit``, ``vmap`` or ``grad`` that does not
    partition: the program runs on one device), at once. Inside a ``jit`` that partitions over
    a mesh (sharded arguments, ``in_shardings``): ``NamedSharding(mesh, spec)`` with the layout
    the partitioner gave the value (``with_sharding_constraint`` fixes it), called when the
    function is partitioned, its first call per signature (JAX's: when it is compiled); a
    cached call does not call back.

    Args:
        value: an array, a tracer, or a pytree of them.
        callback: a function of one sharding; its result is ignored.

    Raises:
        BluTypeError: ``callback`` is not callable.
        BluValueError: inside ``blu.shard`` (a per-device block has no sharding); in a ``jit``
            of sharded arguments whose function runs ``blu.shard`` (the ``jit`` is not
            partitioned, so no layout is known outside the shard), when it is first called.
    """
    if not callable(callback):
        raise BluTypeError(
            with_user_line(f"inspect_array_sharding: callback {callback!r} is not callable")
        )
    from blu.parallel.spmd import partitioning_mesh
    from blu.parallel.spmd_inspect import inspect_sharding_p

    for leaf in pytree.tree_leaves(value):
        if isinstance(leaf, Tracer) and partitioning_mesh() is not None:
            inspect_sharding_p.bind(leaf, callback=callback)
            continue
        s = _sharding_now(leaf)
        if not (isinstance(leaf, Tracer) and hold_sharding_callback(_untracked())):
            callback(s)  # (a trace of sharded arguments is held: the partitioner redoes it)


def _untracked() -> Callable[[], None]:
    """What a held call does if the trace of sharded arguments runs as it is (it calls
    ``blu.shard``, so the partitioner does not redo it): raise, as nothing knows the layout."""
    err = BluValueError(
        with_user_line(
            "inspect_array_sharding: in a jit whose function runs blu.shard on sharded "
            "arguments, blu tracks no layout of the values outside the shard (the jit is not "
            "partitioned); inspect the arrays before the jit, or the shard's results"
        )
    )

    def fail() -> None:
        raise err

    return fail


def visualize_array_sharding(arr: Any, **kwargs: Any) -> None:
    """``visualize_sharding(arr.shape, sharding)`` with the sharding ``inspect_array_sharding``
    finds for ``arr`` (inside a partitioned ``jit``: printed when the function is partitioned).

    Args:
        arr: an array (1-D or 2-D) or a tracer of one.
        kwargs: ``visualize_sharding``'s keyword arguments.
    """
    shape = tuple(arr.shape)
    inspect_array_sharding(arr, callback=lambda s: visualize_sharding(shape, s, **kwargs))
