"""A picture of a memory plan: every buffer as a bar over the launch plan's node index.

As PyTorch's memory visualizer (``torch.cuda.memory._dump_snapshot`` and
``pytorch.org/memory_viz``) draws allocations over time, :func:`draw_timeline` draws the
buffers of one jitted program's static plan (``blu.lower.memory.MemoryPlan``) over its steps:

- the top panel: bytes live during each node (``MemoryAnalysis.live_bytes_at``), the peak marked;
- the bottom panel: one bar per buffer, from the node that makes it to its last reader, at its
  place: arena temporaries at their arena offset (so reuse is visible: bars stacked in the same
  bytes one after another), arguments, outputs and numpy-fallback results in a band above
  the arena. The largest buffers are labelled with their shape and dtype, the primitive that
  makes them and the user's source line; in the HTML every bar says so when hovered.

``path`` ending in ``.png`` writes a PNG (matplotlib, the ``examples`` extra); anything else a
self-contained HTML page (an inline SVG: no scripts, no network).
"""

from __future__ import annotations

import dataclasses
import html
from pathlib import Path
from typing import Any

from blu.core.errors import BluValueError


@dataclasses.dataclass(frozen=True)
class Buffer:
    """One buffer of the plan.

    Attributes:
        label: ``f32[16384,50304]``-style shape and dtype.
        nbytes: its size.
        start, end: the first and last node index it is live at (inclusive; -1: before the
            first node, i.e. an argument).
        place: "arena", "arg", "out", "donated" or "fallback".
        offset: the byte offset in the arena (arena buffers), else None.
        producer: the primitive making it (``argument 3`` for arguments).
        source: the user's source line of that equation ("" when unknown).
    """

    label: str
    nbytes: int
    start: int
    end: int
    place: str
    offset: int | None
    producer: str
    source: str

    def describe(self) -> str:
        where = f" at {self.source}" if self.source else ""
        return f"{self.label} ({_size(self.nbytes)}) {self.producer}{where}"


def buffers(plan: Any, memory: Any) -> list[Buffer]:
    """The buffers of ``memory`` (a ``MemoryPlan`` of ``plan``), largest first.

    Raises:
        BluValueError: ``memory`` has no liveness tables (a plan built before they existed).
    """
    if not hasattr(memory, "defined_at"):
        raise BluValueError("memory_timeline: this MemoryPlan keeps no liveness tables")
    made_by: dict[Any, Any] = {}
    for n in plan.nodes:
        for e in n.eqns:
            for v in e.outvars:
                made_by[v] = e
    end = len(plan.nodes)
    out: list[Buffer] = []
    for r, place in memory.place.items():
        if memory.root.get(r, r) is not r:
            continue
        nbytes = r.aval.size * r.aval.dtype.itemsize
        start = memory.defined_at.get(r, -1)
        last = memory.last_use.get(r, start)
        kind = place[0]
        if kind == "arg":
            producer, source = f"argument {place[1]}", ""
            if last < 0:
                last = 0
        else:
            e = made_by.get(r)
            producer = e.primitive.name if e is not None else "?"
            source = (e.source or "") if e is not None else ""
            if kind == "donated":
                producer += f" (into argument {place[1]})"
        out.append(
            Buffer(
                label=r.aval.str_short(),
                nbytes=nbytes,
                start=start,
                end=min(max(last, start), end),
                place=kind,
                offset=place[1] if kind == "arena" else None,
                producer=producer,
                source=source,
            )
        )
    out.sort(key=lambda b: (-b.nbytes, b.start))
    return out


def _size(n: float) -> str:
    for unit, k in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= k:
            return f"{n / k:.2f} {unit}"
    return f"{int(n)} B"


def _layout(bufs: list[Buffer], arena_size: int) -> list[tuple[Buffer, float, float]]:
    """``(buffer, y, height)`` in bytes: arena buffers at their offsets; the others packed in a
    band above the arena (first fit over lanes of the buffers' own heights)."""
    placed: list[tuple[Buffer, float, float]] = []
    band: list[tuple[float, float, int, int]] = []  # (y, height, start, end) outside the arena
    top = float(arena_size)
    for b in bufs:
        if b.offset is not None:
            placed.append((b, float(b.offset), float(b.nbytes)))
            continue
        y = top
        for by, bh, bs, be in sorted(band):
            overlaps_time = not (b.end < bs or be < b.start)
            if overlaps_time and y < by + bh and by < y + b.nbytes:
                y = by + bh
        band.append((y, float(b.nbytes), b.start, b.end))
        placed.append((b, y, float(b.nbytes)))
    return placed


def draw_timeline(
    plan: Any, memory: Any, path: str | Path, *, top: int = 12, title: str = "memory plan"
) -> Path:
    """Draw the plan's buffers over its nodes into ``path`` (``.png``, else HTML).

    Args:
        plan: the launch plan (``blu.lower.partition.Plan``).
        memory: its ``MemoryPlan`` (``Lowered.memory`` / an executable's ``memory``).
        path: the file to write (its folder must exist).
        top: how many of the largest buffers get a text label on the picture.
        title: the picture's title (the program's name, say).

    Returns:
        ``path`` as a Path.

    Raises:
        BluValueError: a plan without liveness tables; ImportError: a PNG without matplotlib.
    """
    path = Path(path)
    bufs = buffers(plan, memory)
    live = list(getattr(memory.analysis, "live_bytes_at", ()) or [0])
    n_nodes = max(len(plan.nodes), 1)
    placed = _layout(bufs, memory.arena_size)
    labelled = {id(b) for b in bufs[:top]}
    a = memory.analysis
    subtitle = (
        f"{title}: {n_nodes} nodes, peak {_size(a.peak_bytes)}, arena {_size(a.temp_bytes)}, "
        f"arguments {_size(a.argument_bytes)}, outputs {_size(a.output_bytes)}"
    )
    if path.suffix.lower() == ".png":
        _png(path, placed, labelled, live, n_nodes, memory.arena_size, subtitle)
    else:
        path.write_text(_html(placed, labelled, live, n_nodes, memory.arena_size, subtitle))
    return path


_COLORS = {"arena": "#4c78a8", "arg": "#9d9d9d", "out": "#54a24b", "donated": "#72b7b2",
           "fallback": "#e45756"}  # fmt: skip


def _png(path, placed, labelled, live, n_nodes, arena_size, subtitle) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    fig, (ax0, ax1) = plt.subplots(
        2, 1, figsize=(14, 9), sharex=True, gridspec_kw={"height_ratios": [1, 3]}
    )
    gib = 2**30
    ax0.plot(range(len(live)), [v / gib for v in live], color="#333")
    if live:
        k = max(range(len(live)), key=live.__getitem__)
        ax0.axvline(k, color="#e45756", lw=0.8)
        ax0.set_title(subtitle, fontsize=9)
    ax0.set_ylabel("live GiB")
    ymax = 0.0
    for b, y, h in placed:
        x0, w = b.start - 0.5, b.end - b.start + 1
        ax1.add_patch(Rectangle((x0, y / gib), w, h / gib, color=_COLORS[b.place], alpha=0.7,
                                lw=0.2, ec="white"))  # fmt: skip
        ymax = max(ymax, (y + h) / gib)
        if id(b) in labelled:
            ax1.text(x0, (y + h / 2) / gib, b.describe(), fontsize=6, va="center")
    ax1.axhline(arena_size / gib, color="#333", lw=0.6, ls="--")
    ax1.set_xlim(-1, n_nodes + 1)
    ax1.set_ylim(0, max(ymax, 1e-9) * 1.02)
    ax1.set_xlabel("launch-plan node")
    ax1.set_ylabel("GiB (arena offset; above the dashed line: arguments, outputs, fallbacks)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _html(placed, labelled, live, n_nodes, arena_size, subtitle) -> str:
    W, H0, H1, pad = 1400.0, 160.0, 560.0, 40.0
    total = max([y + h for _, y, h in placed] + [1.0])
    peak = max(live + [1])
    sx = lambda k: pad + (k + 1) * (W - 2 * pad) / (n_nodes + 1)  # noqa: E731
    sy1 = lambda b: H0 + pad + H1 - b * H1 / total  # noqa: E731
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W:.0f}" '
        f'height="{H0 + H1 + 2 * pad:.0f}" font-family="sans-serif" font-size="10">'
    ]
    pts = " ".join(f"{sx(k):.1f},{H0 - v * (H0 - pad) / peak:.1f}" for k, v in enumerate(live))
    parts.append(f'<polyline fill="none" stroke="#333" points="{pts}"/>')
    parts.append(f'<text x="{pad}" y="14">live bytes per node (max {_size(peak)})</text>')
    for b, y, h in placed:
        x0, x1 = sx(b.start - 0.5), sx(b.end + 0.5)
        y0, y1 = sy1(y + h), sy1(y)
        tip = html.escape(f"{b.describe()}; nodes {b.start}..{b.end}; {b.place}")
        parts.append(
            f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{max(x1 - x0, 0.5):.1f}" '
            f'height="{max(y1 - y0, 0.5):.1f}" fill="{_COLORS[b.place]}" fill-opacity="0.7" '
            f'stroke="white" stroke-width="0.3"><title>{tip}</title></rect>'
        )
        if id(b) in labelled:
            parts.append(
                f'<text x="{x0 + 2:.1f}" y="{(y0 + y1) / 2 + 3:.1f}">'
                f"{html.escape(b.describe())}</text>"
            )
    ya = sy1(arena_size)
    parts.append(
        f'<line x1="{pad}" x2="{W - pad}" y1="{ya:.1f}" y2="{ya:.1f}" stroke="#333" '
        'stroke-dasharray="4 3"/>'
    )
    parts.append("</svg>")
    legend = ", ".join(f'<span style="color:{c}">&#9632;</span> {k}' for k, c in _COLORS.items())
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>blu memory plan</title>"
        "</head><body style='font-family:sans-serif'>\n"
        f"<h3>{html.escape(subtitle)}</h3>\n<p>Bars: buffers over the launch-plan nodes, at "
        "their arena offset (below the dashed line) or above it (arguments, outputs, fallback "
        f"results). Hover a bar for its shape, maker and source line. {legend}</p>\n"
        + "\n".join(parts)
        + "\n</body></html>\n"
    )
