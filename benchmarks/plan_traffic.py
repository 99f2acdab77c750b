"""The GPU launch plan of a training step, read on the CPU (lowered for ``cuda:sm_90``; no
kernel compiled, no GPU): its launches and the bytes each one moves, estimated from the kernel
layouts.

A kernel node's nests are its launches (a split reduction two: stage 1 and the combine). Each
nest reads every materialized value its members read (the node's inputs, its outputs and its
private buffers, once each, at most one element a point of the nest) and writes its
materialized members; a split also writes and reads its partial results. A library call or
product moves its operands and results once.
The estimate is what a launch must move at least (a value read twice within one launch, or
re-read through caches, counts once), so it measures how many passes the plan makes over the
activations, not how fast a kernel runs: GPU time comes from ``BLU_PROFILE=1`` on the GPU.

    python benchmarks/plan_traffic.py --model resnet50 --batch 256 [--top 20]
    python benchmarks/plan_traffic.py --model gpt2-124m --batch 16 --block 1024
"""

from __future__ import annotations

import argparse
import collections
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "peers"))

from blu.lower.cuda.codegen import launches  # noqa: E402
from blu.lower.plan.fusion import is_reduction  # noqa: E402
from blu.lower.plan.nodes import NodeKind  # noqa: E402

# the primitives a node's line names (what the kernel does, not its broadcasts and reshapes)
_SHOWN = ("reduce_sum", "reduce_max", "pad", "slice", "select", "dot_general",
          "conv_general_dilated", "dot_product_attention")  # fmt: skip


def _nbytes(vs: Any) -> int:
    return sum(v.aval.size * v.aval.dtype.itemsize for v in vs)


def program(model: str, mode: str, batch: int, block: int, n_ctx: int | None = None) -> Any:
    """The lowered ``Program`` of the model's benchmark step (vision or GPT-2/LLaMA)."""
    from examples.vision import models

    if model in models.CONFIGS:
        from blu_vision import _scope
        from blu_vision import program as vision_program

        fn, specs = vision_program(model, mode, batch)
        scope = _scope(mode)
    else:
        from blu_gpt2 import blu_programs, precision_scope

        ((fn, specs),) = blu_programs(model, mode, batch, block, n_ctx=n_ctx)
        scope = precision_scope(mode)
    with scope:
        return fn.lower(*specs, target="cuda:sm_90")._program


def kernel_traffic(node: Any) -> list[tuple[str, int]]:
    """``[(launch name, bytes)]`` of a kernel node, one entry per launch."""
    layout = node.layout
    names = iter(la.func for la in launches(layout, "k"))
    plans = layout.gpu_nests
    out = []
    for j, (nest, p) in enumerate(zip(layout.nests, plans)):
        if p.host >= 0:  # (a map run by its split's stage 2: a few values, no launch)
            continue
        if p.group >= 0 and p.group != j:  # a row group's later nests run in its launch
            if p.strategy == "split":  # ... but for its column reductions' second stage
                reds = [m for m in nest.members if is_reduction(layout.producer[m])]
                out.append((next(names, "?"), p.parts * p.K * 4 * len(p.partials) + _nbytes(reds)))
            continue
        members = [m for q, n in zip(plans, layout.nests) if q.group == j for m in n.members]
        members = members or nest.members
        read: set = set()
        for m in members:
            read.update(layout.reads(m)[0])
        read -= set(members)  # (computed in this launch, not read back)
        points = math.prod(nest.shape)  # a slice of a value reads at most one element a point
        moved = sum(min(v.aval.size, points) * v.aval.dtype.itemsize for v in read)
        written = [m for m in members if m in layout.buffer]
        if p.strategy == "split":  # the combine writes the reductions' results
            parts = p.parts * p.K * 4 * len(p.partials)
            reds = [m for m in written if is_reduction(layout.producer[m])]
            out.append((next(names, "?"), moved + _nbytes(written) - _nbytes(reds) + parts))
            out.append((next(names, "?"), parts + _nbytes(reds)))
        elif p.K:  # (a group with column reductions writes their partials instead)
            cols = [q for q in plans if q.group == j and q.strategy == "split"]
            reds = [m for m in written if is_reduction(layout.producer[m])] if cols else []
            parts = sum(q.parts * q.K * 4 * len(q.partials) for q in cols)
            out.append((next(names, "?"), moved + _nbytes(written) - _nbytes(reds) + parts))
    return out


def traffic(prog: Any) -> tuple[collections.Counter, collections.Counter, list]:
    """Bytes and launches by node kind, and ``(bytes, node index, label)`` per node."""
    nbytes, count, rows = collections.Counter(), collections.Counter(), []
    for k, node in enumerate(prog.plan.nodes):
        kind = node.kind
        if kind == NodeKind.KERNEL and getattr(node, "layout", None) is not None:
            per = kernel_traffic(node)
            b, n = sum(x for _, x in per), len(per)
        elif kind == NodeKind.VIEW:
            b, n = 0, 0
        else:
            b, n = _nbytes([*(v for v in node.inputs if hasattr(v, "aval")), *node.outputs]), 1
        nbytes[kind.name] += b
        count[kind.name] += n
        prims = collections.Counter(e.primitive.name for e in node.eqns)
        what = ", ".join(f"{p} x{c}" for p, c in prims.most_common() if p in _SHOWN)
        big = max(node.outputs, key=lambda v: v.aval.size, default=None)
        rows.append((b, k, f"{kind.name} -> {big.aval.str_short() if big else '-'} {what}", n))
    return nbytes, count, rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet50", help="a vision model or a GPT-2/LLaMA config")
    p.add_argument("--mode", default="bf16", choices=("fp32", "tf32", "bf16"))
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--block", type=int, default=1024, help="tokens a sequence (GPT-2/LLaMA)")
    p.add_argument(
        "--n-ctx",
        type=int,
        default=None,
        help="GPT-2: position-table rows, if not the config's (T = 8192: 8192)",
    )
    p.add_argument("--top", type=int, default=15, help="the largest nodes to list")
    a = p.parse_args(argv)
    prog = program(a.model, a.mode, a.batch, a.block, a.n_ctx)
    nbytes, count, rows = traffic(prog)
    print(f"{a.model} {a.mode} batch {a.batch}: plan peak "
          f"{prog.memory_analysis().peak_bytes / 2**30:.2f} GiB")  # fmt: skip
    print(f"{'kind':<10}{'launches':>10}{'GB moved':>12}")
    for kind in sorted(count, key=lambda k: -nbytes[k]):
        print(f"{kind:<10}{count[kind]:>10}{nbytes[kind] / 1e9:>12.2f}")
    print(f"{'total':<10}{sum(count.values()):>10}{sum(nbytes.values()) / 1e9:>12.2f}")
    for b, k, label, n in sorted(rows, reverse=True)[: a.top]:
        print(f"  #{k:<5} {b / 1e9:7.3f} GB  {n:>2} launches  {label[:90]}")


if __name__ == "__main__":
    main()
