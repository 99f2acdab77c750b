"""Summarize a blu timeline trace (Chrome trace JSON from ``blu.profiler.trace`` or BLU_PROFILE).

    python scripts/summarize_trace.py TRACE.json [--top 20] [--gaps 10]

Prints the kernels (device spans: fused kernels, products, library calls, host fallbacks) with
the most total time — with, where the span carries its work (``bytes``, ``flops`` and ``peak`` in
its args, as ``blu.cuda.profile`` writes them), the achieved GB/s or TFLOP/s and its fraction of
the device's peak — then the host time per call of each GPU program (``launch jit(...)`` host
spans: the Python launch loop's wall time against the GPU time of the call), then the host
gaps between device work: per device lane, the idle time
between one span's end and the next one's start, the largest gaps and what the host was doing
during each (the innermost host span active at the gap's middle, e.g. ``trace jit(step)`` or
``compile jit(step)``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any


def load(path: str | Path) -> list[dict[str, Any]]:
    """The events of a trace file (the object form ``{"traceEvents": [...]}`` or a bare list)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return data["traceEvents"] if isinstance(data, dict) else data


def _lanes(events: list[dict]) -> dict[tuple, list[tuple[float, float, dict]]]:
    lanes: dict[tuple, list] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "device":
            lanes[(e["pid"], e.get("tid", 0))].append((e["ts"], e["ts"] + e.get("dur", 0.0), e))
    for spans in lanes.values():
        spans.sort(key=lambda s: s[0])
    return lanes


def top_kernels(events: list[dict]) -> list[dict[str, Any]]:
    """Per device-span name: calls, total and mean microseconds, share, kind and source line;
    the largest total first."""
    rows: dict[str, dict[str, Any]] = {}
    for e in events:
        if e.get("ph") != "X" or e.get("cat") != "device":
            continue
        r = rows.setdefault(e["name"], {"name": e["name"], "calls": 0, "total_us": 0.0,
                                        "kind": "", "source": "", "bytes": 0.0, "flops": 0.0,
                                        "peak": ""})  # fmt: skip
        r["calls"] += 1
        r["total_us"] += e.get("dur", 0.0)
        args = e.get("args") or {}
        r["bytes"] += float(args.get("bytes", 0) or 0)
        r["flops"] += float(args.get("flops", 0) or 0)
        r["peak"] = r["peak"] or args.get("peak", "")
        r["kind"] = r["kind"] or args.get("kind", "")
        r["source"] = r["source"] or (args.get("source", "").splitlines() or [""])[0]
    grand = sum(r["total_us"] for r in rows.values()) or 1.0
    out = sorted(rows.values(), key=lambda r: -r["total_us"])
    for r in out:
        r["mean_us"] = r["total_us"] / r["calls"]
        r["percent"] = 100 * r["total_us"] / grand
        r["achieved"], r["fraction"] = achieved(r)
    return out


def achieved(row: dict[str, Any]) -> tuple[str, float]:
    """A kernel row's achieved rate (text) and its fraction of the peak its spans name
    (``"4000 GB/s"`` or ``"989 TFLOP/s"``); ``("", 0.0)`` when the spans carry no work."""
    t = row["total_us"] * 1e-6
    if not t or not (row["bytes"] or row["flops"]):
        return "", 0.0
    if row["flops"]:
        rate, unit = row["flops"] / t / 1e12, "TFLOP/s"
    else:
        rate, unit = row["bytes"] / t / 1e9, "GB/s"
    parts = row["peak"].split()
    frac = rate / float(parts[0]) if len(parts) == 2 and parts[1] == unit and float(parts[0]) else 0
    if unit == "TFLOP/s" and rate < 1:  # (a CPU's: GFLOP/s reads better)
        return f"{rate * 1e3:.0f} GFLOP/s", frac
    return f"{rate:.1f} {unit}" if unit == "TFLOP/s" else f"{rate:.0f} {unit}", frac


def host_per_call(events: list[dict]) -> list[dict[str, Any]]:
    """Per GPU program (host spans ``launch <name>``, category "launch"): calls, the mean host
    wall time of the launch loop, and the mean device time the call's spans cover (the first
    device span starting inside the launch to the end of the last one before the next launch of
    any program), both in microseconds."""
    launches = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "launch"),
                      key=lambda e: e["ts"])  # fmt: skip
    dev = sorted((e["ts"], e["ts"] + e.get("dur", 0.0)) for e in events
                  if e.get("ph") == "X" and e.get("cat") == "device")  # fmt: skip
    rows: dict[str, dict[str, Any]] = {}
    for i, e in enumerate(launches):
        lo = e["ts"]
        hi = launches[i + 1]["ts"] if i + 1 < len(launches) else float("inf")
        mine = [d for d in dev if lo <= d[0] < hi]
        gpu = (max(d[1] for d in mine) - min(d[0] for d in mine)) if mine else 0.0
        name = e["name"].removeprefix("launch ")
        r = rows.setdefault(name, {"name": name, "calls": 0, "host_us": 0.0, "gpu_us": 0.0})
        r["calls"] += 1
        r["host_us"] += e.get("dur", 0.0)
        r["gpu_us"] += gpu
    out = sorted(rows.values(), key=lambda r: -r["gpu_us"])
    for r in out:
        r["host_us"] /= r["calls"]
        r["gpu_us"] /= r["calls"]
    return out


def host_gaps(events: list[dict]) -> dict[str, Any]:
    """Idle time between consecutive device spans of each lane (overlapping spans merged).

    Returns ``busy_us`` (device time), ``span_us`` (first start to last end over all lanes),
    ``gap_us`` (the sum of the gaps), ``gaps``: each gap as ``(start_us, length_us, lane,
    host)`` (``host``: the innermost host span active at its middle, or ""), largest first.
    """
    host = [(e["ts"], e["ts"] + e.get("dur", 0.0), e["name"]) for e in events
            if e.get("ph") == "X" and e.get("cat") != "device"]  # fmt: skip
    busy = gap = 0.0
    lo, hi = float("inf"), float("-inf")
    gaps = []
    for lane, spans in _lanes(events).items():
        cur_s, cur_e = spans[0][0], spans[0][1]
        lo, hi = min(lo, cur_s), max(hi, max(s[1] for s in spans))
        for s, e, _ in spans[1:]:
            if s <= cur_e:
                cur_e = max(cur_e, e)
                continue
            busy += cur_e - cur_s
            gaps.append((cur_e, s - cur_e, lane))
            cur_s, cur_e = s, e
        busy += cur_e - cur_s
    out = []
    for start, length, lane in sorted(gaps, key=lambda g: -g[1]):
        gap += length
        mid = start + length / 2
        active = [h for h in host if h[0] <= mid <= h[1]]
        inner = min(active, key=lambda h: h[1] - h[0])[2] if active else ""
        out.append((start, length, lane, inner))
    span = (hi - lo) if out or busy else 0.0
    return {"busy_us": busy, "span_us": max(span, 0.0), "gap_us": gap, "gaps": out}


def report(events: list[dict], top: int = 20, n_gaps: int = 10) -> str:
    rows = top_kernels(events)
    if not rows:
        return "no device spans in this trace (was anything jitted while it was recorded?)"
    width = min(70, max(len(r["name"]) for r in rows[:top]))
    head = (f"{'kernel':<{width}} {'calls':>6} {'total ms':>9} {'mean us':>9} {'%':>6} "
            f"{'achieved':>14} {'of peak':>7}  source")  # fmt: skip
    lines = [f"top kernels by total time ({len(rows)} distinct):", head, "-" * len(head)]
    for r in rows[:top]:
        frac = f"{100 * r['fraction']:.0f}%" if r["fraction"] else ""
        lines.append(
            f"{r['name'][:width]:<{width}} {r['calls']:>6} {r['total_us'] / 1e3:>9.3f} "
            f"{r['mean_us']:>9.1f} {r['percent']:>6.1f} {r['achieved']:>14} {frac:>7}  "
            f"{r['source']}"
        )
    calls = host_per_call(events)
    if calls:
        lines += ["", "host time per call (launch loop wall time vs the call's GPU time):"]
        for c in calls:
            lines.append(
                f"  {c['name']}: {c['calls']} calls, host {c['host_us'] / 1e3:.3f} ms, "
                f"GPU {c['gpu_us'] / 1e3:.3f} ms per call"
            )
    g = host_gaps(events)
    busy_pct = 100 * g["busy_us"] / g["span_us"] if g["span_us"] else 100.0
    lines += [
        "",
        f"device work: {g['busy_us'] / 1e3:.3f} ms busy over {g['span_us'] / 1e3:.3f} ms "
        f"({busy_pct:.1f}%); host gaps between device work: {len(g['gaps'])} totalling "
        f"{g['gap_us'] / 1e3:.3f} ms",
    ]
    if g["gaps"]:
        lines.append(f"largest gaps ({min(n_gaps, len(g['gaps']))}):")
        for start, length, lane, inner in g["gaps"][:n_gaps]:
            lines.append(
                f"  {length / 1e3:>9.3f} ms at {start / 1e3:>10.3f} ms (lane {lane[0]}/{lane[1]})"
                + (f"  host: {inner}" if inner else "")
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", help="the trace JSON file")
    p.add_argument("--top", type=int, default=20, help="kernels to list (default 20)")
    p.add_argument("--gaps", type=int, default=10, help="largest gaps to list (default 10)")
    a = p.parse_args(argv)
    try:
        events = load(a.trace)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: cannot read {a.trace}: {e}", file=sys.stderr)
        return 2
    print(report(events, a.top, a.gaps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
