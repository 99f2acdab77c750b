"""A training step's GPU time as it replays, node by node: a CUPTI trace joined with the plan.

``BENCH_REPLAY_TRACE=trace.json python3 benchmarks/peers/blu_gpt2.py ...`` (on the GPU)
records the replayed steps' kernels (``benchmarks/peers/replay_trace.py``); this reads that
trace beside the same step's launch plan, lowered here on the CPU for ``cuda:sm_90`` by the
same tree with the same flags (blu's kernel names are their cache keys: another emitter
version or flag finds none of them), and prints where each step's time goes:

    python benchmarks/replay_profile.py trace.json --model gpt2-124m --mode bf16 --batch 16 \\
        --block 1024 [--steps 3] [--top 40] [--copy-gbs 3000]

blu's kernels are named after their cache keys (``k<key>_<launch>``), so each one is found in
the plan exactly; the kernels between them (cuBLASLt, cuDNN, NCCL) go to the library calls and
products the plan has there, in order (one each, the rest to the last). Per row: the node, its
kernels' time per step (the median over the steps), its share of the step's busy time, and for
blu's kernels the bytes ``plan_traffic`` says they must move at least, as GB/s and as a
fraction of ``--copy-gbs`` (the card's copy bandwidth, reads plus writes). The head line gives
the step's span on the GPU (first kernel's start to the last one's end), the kernels' busy time
and the idle time between them.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

TARGET = "cuda:sm_90"


def kernels(trace: dict) -> list[dict]:
    """The trace's GPU kernel events, in start order."""
    evs = [e for e in trace.get("traceEvents", []) if e.get("cat") == "kernel" and "dur" in e]
    return sorted(evs, key=lambda e: float(e["ts"]))


def split_steps(evs: list[dict], n: int) -> list[list[dict]]:
    """The kernels of each of ``n`` steps: at the ``n - 1`` widest gaps between kernels (the
    host waits for each step's loss before it replays the next)."""
    if n <= 1 or len(evs) < n:
        return [evs]
    gaps = sorted(range(1, len(evs)), key=lambda i: float(evs[i]["ts"]) - _end(evs[i - 1]))
    cuts = sorted(gaps[-(n - 1) :])
    return [evs[a:b] for a, b in zip([0, *cuts], [*cuts, len(evs)], strict=True)]


def _end(e: dict) -> float:
    return float(e["ts"]) + float(e["dur"])


def plan_index(prog: Any) -> tuple[dict[str, list[int]], dict[str, int], list[tuple[int, str]]]:
    """For blu's kernels, ``{function name: [node indices, in plan order]}`` (nodes with the same
    kernel text share one module: a layer's kernels in every layer) and ``{function name: bytes
    it moves at least}``; the plan's ``(node index, label)`` in order."""
    from plan_traffic import kernel_traffic, traffic

    from blu.lower.cuda.codegen import launches
    from blu.lower.cuda.kernels import kernel_text
    from blu.lower.mlir.cache import kernel_key
    from blu.lower.mlir.llvm import symbol
    from blu.lower.mlir.scatter import scatter_launches
    from blu.lower.plan.nodes import NodeKind

    nodes: dict[str, list[int]] = collections.defaultdict(list)
    moved: dict[str, int] = {}
    for k, node in enumerate(prog.plan.nodes):
        if not node.kind.compiled:
            continue
        sym = symbol(kernel_key(kernel_text(node), TARGET))
        if node.kind == NodeKind.KERNEL:
            per = dict(kernel_traffic(node))  # (named after "k")
            for la in launches(node.layout, sym):
                nodes[la.func].append(k)
                moved[la.func] = per.get("k" + la.func[len(sym) :], 0)
        else:
            for la in scatter_launches(node.eqns[0], sym):
                nodes[la.func].append(k)
                moved[la.func] = 0
    labels = {k: label for _, k, label, _ in traffic(prog)[2]}
    return dict(nodes), moved, [(k, labels[k]) for k in range(len(prog.plan.nodes))]


def _gemm(name: str) -> bool:
    """Whether a library kernel is a matrix product's main kernel (cuBLAS/cuBLASLt)."""
    gemm = any(w in name for w in ("nvjet", "gemm", "xmma", "cutlass"))
    return gemm and "splitKreduce" not in name


def _slots(prog: Any) -> list[tuple[int, bool]]:
    """The plan's library nodes in order: ``(node index, whether it is a matrix product)``."""
    from blu.lower.plan.nodes import NodeKind

    out = []
    for k, n in enumerate(prog.plan.nodes):
        if n.kind in (NodeKind.DOT, NodeKind.LIBRARY):
            prim = n.eqns[0].primitive.name if n.eqns else ""
            out.append((k, n.kind == NodeKind.DOT or prim.startswith("dot_")))
    return out


def _assign(pending: list[dict], slots: list[tuple[int, bool]]) -> list[int]:
    """Node indices for a run of library kernels between two of blu's: each product's main
    kernel to the next product (its split-K reduction with it), the others (cuDNN's) to the
    next library call that is not a product (without moving past the products before it);
    -1 where no node is left."""
    out, i, last_gemm, filled = [], 0, -1, set()
    for e in pending:
        name = e["name"]
        if "splitKreduce" in name and last_gemm >= 0:
            out.append(slots[last_gemm][0])
            continue
        want = _gemm(name)
        j = next((j for j in range(i, len(slots)) if slots[j][1] == want and j not in filled), None)
        if j is None:
            out.append(slots[-1][0] if slots else -1)
            continue
        if want:
            filled.add(j)
            last_gemm = i = j
        out.append(slots[j][0])
    return out


def attribute(step: list[dict], funcs: dict, slots: list) -> dict[int, list[tuple[str, float]]]:
    """``{node index: [(kernel name, duration in us)]}`` for one step's kernels."""
    out: dict[int, list[tuple[str, float]]] = collections.defaultdict(list)
    last = -1  # the node of the last blu kernel seen
    pending: list[dict] = []
    seen: set[tuple[int, str]] = set()

    def flush(upto: int) -> None:  # the library kernels between node `last` and node `upto`
        between = [s for s in slots if last < s[0] < upto]
        for e, k in zip(pending, _assign(pending, between), strict=True):
            out[k].append((e["name"], float(e["dur"])))
        pending.clear()

    for e in step:
        cands = funcs.get(e["name"])
        if cands is None:
            pending.append(e)
            continue
        # the first node at or after the last one that launches it and has not yet (a node's
        # launches follow each other; the kernel's next use is a later layer's node)
        k = next((c for c in cands if c >= last and (c, e["name"]) not in seen), cands[-1])
        seen.add((k, e["name"]))
        flush(k)
        out[k].append((e["name"], float(e["dur"])))
        last = k
    flush(1 << 62)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", help="the Chrome trace $BENCH_REPLAY_TRACE wrote")
    p.add_argument("--model", default="gpt2-124m")
    p.add_argument("--mode", default="bf16", choices=("fp32", "tf32", "bf16"))
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--block", type=int, default=1024)
    p.add_argument("--n-ctx", type=int, default=None)
    p.add_argument("--steps", type=int, default=3, help="steps the trace holds")
    p.add_argument("--top", type=int, default=40)
    p.add_argument(
        "--copy-gbs",
        type=float,
        default=3000.0,
        help="the card's copy bandwidth, GB/s (H100 SXM ~3000, H200 ~4200)",
    )
    a = p.parse_args(argv)
    from plan_traffic import program

    evs = kernels(json.loads(Path(a.trace).read_text()))
    if not evs:
        raise SystemExit(f"{a.trace}: no kernel events (was it recorded on a GPU?)")
    prog = program(a.model, a.mode, a.batch, a.block, a.n_ctx)
    funcs, moved, order = plan_index(prog)
    labels = dict(order)
    steps = split_steps(evs, a.steps)
    slots = _slots(prog)
    per_node: dict[int, list[float]] = collections.defaultdict(list)
    counts: dict[int, int] = {}
    names: dict[int, list[tuple[str, float]]] = {}
    spans, busy = [], []
    for st in steps:
        got = attribute(st, funcs, slots)
        for k, durs in got.items():
            per_node[k].append(sum(d for _, d in durs))
            counts[k] = len(durs)
            names[k] = durs
        spans.append(_end(st[-1]) - float(st[0]["ts"]))
        busy.append(sum(float(e["dur"]) for e in st))
    span, work = statistics.median(spans), statistics.median(busy)
    matched = sum(1 for e in steps[0] if e["name"] in funcs)
    if not matched:
        print("none of the trace's kernels is one of this plan's: lower with the tree and the "
              "flags ($BLU_GPU_*) of the run that recorded it", file=sys.stderr)  # fmt: skip
    print(f"{a.model} {a.mode} {a.batch} x {a.block}: {len(steps)} steps of {len(steps[0])} "
          f"kernels ({matched} blu's); a step spans {span / 1e3:.2f} ms on the GPU, kernels busy "
          f"{work / 1e3:.2f} ms, idle between them {(span - work) / 1e3:.2f} ms")  # fmt: skip
    groups: dict[str, list] = {}  # nodes of one label (a layer's node in every layer) together
    for k, times in per_node.items():
        t = statistics.median(times)
        nbytes = sum(moved.get(name, 0) for name, _ in names[k])
        label = labels.get(k, "library kernels with no library node left to take them")[:72]
        if not nbytes:
            label += "  [" + names[k][0][0][:48] + "]"
        g = groups.setdefault(label, [0.0, 0, 0, 0, k])
        g[0] += t
        g[1] += 1
        g[2] += counts[k]
        g[3] += nbytes
    print(f"{'us/step':>9} {'share':>6} {'nodes':>5} {'us/node':>8} {'kernels':>7} {'GB/s':>6} "
          f"{'of copy':>7}  node (first)")  # fmt: skip
    for label, (t, n, nk, nbytes, k) in sorted(groups.items(), key=lambda kv: -kv[1][0])[: a.top]:
        rate = nbytes / (t * 1e-6) / 1e9 if nbytes and t else 0.0
        frac = f"{rate / a.copy_gbs:7.0%}" if rate else " " * 7
        gbs = f"{rate:6.0f}" if rate else " " * 6
        print(f"{t:9.1f} {t / work:6.1%} {n:5d} {t / n:8.1f} {nk:7d} {gbs} {frac}  #{k} {label}")
    total = sum(g[0] for g in groups.values())
    print(f"{total:9.1f} us of kernels a step in {len(per_node)} nodes")


if __name__ == "__main__":
    main()
