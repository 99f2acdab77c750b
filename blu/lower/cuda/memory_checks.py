"""Out-of-memory reports for CUDA calls: before compiling a program whose memory plan cannot fit
the device (``check_device_memory``), and the helpers ``run.Bound`` uses when the allocator
fails during a call (which blocks are the call's own, what a failed request was for)."""

from __future__ import annotations

from typing import Any

from blu.cuda.array import DeviceArray
from blu.lower.plan.memory_report import out_of_memory_error


def check_device_memory(name: str, prepared: Any, donated: tuple, args: Any) -> None:
    """Before compiling a program for a call: raise its out-of-memory report when the memory
    plan needs more than the arguments' device can still give (the allocator's free and cached
    bytes), so nothing is compiled, looked up or launched for a program that cannot run.

    Raises:
        BluOutOfMemoryError: the arena, the fresh outputs and the host arguments to copy need
            more than ``available_bytes()``; the plan's report (``plan.memory_report``).
    """
    dev = next(a.device for a in args if isinstance(a, DeviceArray))
    alloc = dev.allocator
    available = alloc.available_bytes()
    if available is None:
        return
    _, plan, memory = prepared
    a = memory.analysis
    on_host = sum(v.aval.size * v.aval.dtype.itemsize
                  for x, v in zip(args, prepared[0].invars)
                  if not (isinstance(x, DeviceArray) and x.device is dev))  # fmt: skip
    need = max(memory.arena_size, 1) + a.output_bytes - a.alias_bytes + on_host
    if need <= available:
        return
    raise out_of_memory_error(
        name, plan, memory, asked=need, free=available, where=str(dev),
        what="its arena of temporaries and its outputs (checked before compiling its kernels)",
        donated=donated, **held_by_others(alloc, list(args)),
    )  # fmt: skip


def held_by_others(alloc: Any, mine: list[Any]) -> dict[str, Any]:
    """``out_of_memory_error``'s ``other_bytes`` and ``other_largest``: the live blocks of
    ``alloc`` not behind the device arrays ``mine``."""
    own = {id(b) for b in blocks_of(mine)}
    others = [b for b in alloc.live_blocks() if id(b) not in own]
    return {"other_bytes": sum(b.size for b in others),
            "other_largest": [(b.size, b.tag) for b in others[:4]]}  # fmt: skip


def blocks_of(arrays: list[Any]) -> list[Any]:
    """The allocator blocks behind device arrays (views count their owner's)."""
    out = []
    for a in arrays:
        while a is not None and isinstance(a, DeviceArray) and a._block is None:
            a = a._owner
        if isinstance(a, DeviceArray) and a._block is not None:
            out.append(a._block)
    return out


def failed_what(tag: str | None) -> str:
    """What the failed request was for, from its allocation tag."""
    if not tag:
        return "a buffer"
    return f"its arena of temporaries ({tag})" if tag.endswith("temporaries") else f"an {tag}"
