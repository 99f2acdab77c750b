"""The out-of-memory report of a memory plan: what a program asked for, what was free, and the
buffers that make its peak.

JAX users have asked since 2022 (jax-ml/jax#9530) for an out-of-memory error that says *which*
arrays fill the device. blu's plan is static (``blu.lower.plan.memory.MemoryPlan``), so when a
compiled program cannot get its arena or its output buffers, or before launching anything when
the plan's peak cannot fit a device of a given size (:func:`check_fits`), the error lists the
largest buffers live at the plan's peak node: shape and dtype, size, the jaxpr equation that
makes each (primitive and launch-plan node) and the user's source line of that equation, plus
the bytes other live device arrays hold (the caching allocator's count). Nothing here needs a
kernel or a GPU: the figures are the plan's.
"""

from __future__ import annotations

from typing import Any

from blu.core.errors import BluOutOfMemoryError, with_user_line
from blu.lower.plan.memory_timeline import Buffer, buffers

MAX_LISTED = 8  # buffers listed in a report


def gib(n: int | float) -> str:
    """``n`` bytes as ``"1.25 GiB (1,342,177,280 bytes)"`` (MiB below 1 GiB)."""
    if n >= 2**30:
        return f"{n / 2**30:.2f} GiB ({int(n):,} bytes)"
    return f"{n / 2**20:.2f} MiB ({int(n):,} bytes)"


def footprint_bytes(analysis: Any) -> int:
    """The device bytes a call holds at once: its arguments, its whole arena (one allocation,
    so it counts fully even where the plan's live bytes are lower), its outputs not written into
    donated arguments, and its largest live numpy-fallback results. What the caching allocator
    counts as the call's peak, and so what must fit the device."""
    a = analysis
    return (a.argument_bytes + a.temp_bytes + a.output_bytes - a.alias_bytes
            + a.fallback_bytes)  # fmt: skip


def peak_buffers(plan: Any, memory: Any, donated: tuple = ()) -> tuple[int, list[Buffer]]:
    """The node index at which the plan's live bytes peak, and the buffers live there (largest
    first; arguments included: a donated one until its last reader, the others all along, as
    the caller still holds them).

    Args:
        plan: a launch plan (``blu.lower.plan.nodes.Plan``).
        memory: its ``MemoryPlan``.
        donated: per argument, whether the program may take its buffer over.
    """
    live = memory.analysis.live_bytes_at
    if not live:
        return -1, []

    def held(b: Buffer) -> bool:
        if b.place == "arg":
            return b.end >= k or not _is_donated(b, donated)
        return b.start <= k <= b.end

    k = max(range(len(live)), key=lambda i: (live[i], -i))
    return k, [b for b in buffers(plan, memory) if held(b)]


def report(
    name: str,
    plan: Any,
    memory: Any,
    *,
    headline: str,
    other_bytes: int | None = None,
    other_largest: list[tuple[int, str | None]] | None = None,
    donated: tuple = (),
) -> str:
    """The report's text (without the user's line; :func:`out_of_memory_error` adds it).

    Args:
        name: the program's name (``jit(name)``).
        plan, memory: the launch plan and its ``MemoryPlan``.
        headline: the first line: what was asked and what was free.
        other_bytes: bytes held by live device arrays other than this call's arguments (None:
            not known, e.g. before running).
        other_largest: ``[(bytes, tag)]`` of the largest of those arrays.
        donated: per argument, whether it is donated.
    """
    a = memory.analysis
    k, live = peak_buffers(plan, memory, donated)
    lines = [headline]
    at = ""
    if 0 <= k < len(plan.nodes):
        at = f" during step {k} of {len(plan.nodes)} ({plan.nodes[k].label()})"
    lines.append(
        f"  jit({name}) holds {gib(footprint_bytes(a))} at once: arguments "
        f"{gib(a.argument_bytes)}, temporaries (one arena) {gib(a.temp_bytes)}, outputs "
        f"{gib(a.output_bytes)} ({gib(a.alias_bytes)} of them written into donated arguments); "
        f"its memory plan's live bytes peak at {gib(a.peak_bytes)}{at}."
    )
    if live:
        lines.append("  largest buffers live at the peak (shape and dtype, size, made by, line):")
        for b in live[:MAX_LISTED]:
            made = b.producer if b.place == "arg" else f"{b.producer} [{b.place}]"
            if b.place == "arg" and _is_donated(b, donated):
                made += " (donated)"
            src = f"  at {b.source}" if b.source else ""
            lines.append(f"    {b.label:<24} {gib(b.nbytes):>32}  {made}{src}")
        if len(live) > MAX_LISTED:
            rest = sum(b.nbytes for b in live[MAX_LISTED:])
            lines.append(f"    ... and {len(live) - MAX_LISTED} more buffers ({gib(rest)})")
    if other_bytes is not None:
        lines.append(
            f"  other live device arrays (not this call's arguments) hold {gib(other_bytes)}"
            + (":" if other_largest else ".")
        )
        for nb, tag in (other_largest or [])[:4]:
            lines.append(f"    {gib(nb):>32}  {tag or '(untagged)'}")
    lines.append(
        "  Use a smaller batch, free arrays you no longer need (del x), donate arguments "
        "(donate_argnums), keep activations in a narrower dtype or rematerialize them "
        "(blu.checkpoint)."
    )
    return "\n".join(lines)


def _is_donated(b: Buffer, donated: tuple) -> bool:
    i = int(b.producer.split()[1])
    return i < len(donated) and bool(donated[i])


def out_of_memory_error(
    name: str,
    plan: Any,
    memory: Any,
    *,
    asked: int,
    free: int | None,
    what: str,
    where: str = "",
    other_bytes: int | None = None,
    other_largest: list[tuple[int, str | None]] | None = None,
    donated: tuple = (),
) -> BluOutOfMemoryError:
    """A ``BluOutOfMemoryError`` for a program that could not get ``asked`` bytes for ``what``
    (e.g. ``"its arena of temporaries"``), with :func:`report`'s text and the user's line.

    Attributes set on the error: ``nbytes`` (asked), ``free_bytes``, ``other_bytes``, ``peak``
    (the plan's peak bytes) and ``buffers`` (the ``Buffer`` list live at the peak).
    """
    where = f" on {where}" if where else ""
    free_s = f"{gib(free)} free" if free is not None else "free memory unknown"
    headline = (
        f"jit({name}): out of memory{where}: could not allocate {what}, {gib(asked)} asked; "
        f"{free_s}."
    )
    text = report(name, plan, memory, headline=headline, other_bytes=other_bytes,
                  other_largest=other_largest, donated=donated)  # fmt: skip
    err = BluOutOfMemoryError(with_user_line(text))
    err.nbytes, err.free_bytes, err.other_bytes = asked, free, other_bytes  # type: ignore[attr-defined]
    err.peak = memory.analysis.peak_bytes  # type: ignore[attr-defined]
    err.buffers = peak_buffers(plan, memory, donated)[1]  # type: ignore[attr-defined]
    return err


def check_fits(
    name: str, plan: Any, memory: Any, device_bytes: int, in_use: int = 0, donated: tuple = ()
) -> None:
    """Raise the report before running anything when the program's footprint (arguments, arena
    and fresh outputs: :func:`footprint_bytes`) cannot fit.

    Args:
        name: the program's name.
        plan, memory: the launch plan and its ``MemoryPlan``.
        device_bytes: the memory the program may use (e.g. the GPU's, less a margin).
        in_use: bytes already held by other arrays (counted against ``device_bytes``).
        donated: per argument, whether it is donated.

    Raises:
        BluOutOfMemoryError: ``footprint_bytes + in_use > device_bytes``; the message says by
            how much, and lists the plan's largest buffers at its peak.
    """
    a = memory.analysis
    need = footprint_bytes(a)
    if need + in_use <= device_bytes:
        return
    # what the program allocates when called (its arguments are on the device already): the
    # arena and the outputs not written into donated arguments
    free = max(device_bytes - in_use - a.argument_bytes, 0)
    asked = need - a.argument_bytes
    raise out_of_memory_error(
        name,
        plan,
        memory,
        asked=asked,
        free=free,
        what=(
            f"its arena of temporaries and its outputs (with its arguments, it exceeds the "
            f"{gib(device_bytes)} given by {gib(need + in_use - device_bytes)})"
        ),
        other_bytes=in_use or None,  # none given: no line about other arrays
        donated=donated,
    )
