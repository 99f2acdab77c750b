"""``benchmarks/replay_profile.py``: a made-up CUPTI trace of a small GPT-2 step's launches, with
known durations, joined back to the plan's nodes (CPU only: the plan is lowered for the GPU, no
kernel runs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "benchmarks" / "peers")]

from benchmarks import plan_traffic as pt  # noqa: E402
from benchmarks import replay_profile as rp  # noqa: E402
from blu.lower.plan.nodes import NodeKind  # noqa: E402


def _trace(prog, funcs, steps: int):
    """Chrome trace events of ``steps`` steps: each node's kernels in plan order (blu's by
    function name, a product one GEMM and a split-K reduction, attention three cuDNN kernels),
    and the microseconds each node took."""
    by_node: dict[int, list[str]] = {}
    for f, ks in funcs.items():
        for k in ks:
            by_node.setdefault(k, []).append(f)
    evs, ts, want = [], 0.0, {}
    for _ in range(steps):
        for k, node in enumerate(prog.plan.nodes):
            if k in by_node:
                names = sorted(by_node[k])  # (a node's launches: _0a, _0b, _1, ...)
            elif node.kind in (NodeKind.DOT, NodeKind.LIBRARY):
                prim = node.eqns[0].primitive.name
                if node.kind == NodeKind.DOT or prim.startswith("dot_"):
                    names = ["nvjet_sm90_tst_128x128_NNT", "cublasLt::splitKreduce_kernel"]
                else:
                    names = ["cudnn::fusion::compute_dot_do_o", "cudnn_sdpa_bprop", "convert_dq"]
            else:
                continue
            for i, name in enumerate(names):
                dur = 1.0 + (k % 7) + i
                evs.append({"cat": "kernel", "name": name, "ts": ts, "dur": dur, "ph": "X"})
                ts += dur + 1.0
                want[k] = want.get(k, 0.0) + dur
        ts += 5000.0  # the host between steps
    return {"traceEvents": evs}, {k: v / steps for k, v in want.items()}


def test_every_kernel_goes_back_to_its_node(tmp_path, capsys):
    prog = pt.program("small", "bf16", 2, 64)
    funcs, moved, order = rp.plan_index(prog)
    assert funcs and all(ks == sorted(ks) for ks in funcs.values())
    trace, want = _trace(prog, funcs, steps=3)
    evs = rp.kernels(trace)
    steps = rp.split_steps(evs, 3)
    assert [len(s) for s in steps] == [len(evs) // 3] * 3
    got = rp.attribute(steps[1], funcs, rp._slots(prog))
    assert -1 not in got
    assert {k: sum(d for _, d in v) for k, v in got.items()} == want
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace))
    rp.main([str(path), "--model", "small", "--batch", "2", "--block", "64", "--top", "5"])
    out = capsys.readouterr().out
    assert "3 steps of" in out and f"{sum(want.values()):9.1f} us of kernels a step" in out
