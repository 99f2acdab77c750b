"""``benchmarks/plan_traffic.py``: the bytes it counts for kernels whose traffic is known by
hand, and its command line on the small models (CPU only: it lowers for the GPU, runs nothing)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import blu
import blu.numpy as bnp

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import plan_traffic as pt  # noqa: E402


def _program(f, *specs):
    return blu.jit(f).lower(*specs, target="cuda:sm_90")._program


def test_an_elementwise_kernel_reads_and_writes_once():
    x = blu.ShapeDtypeStruct((1024, 512), np.float32)
    nbytes, count, _ = pt.traffic(_program(lambda a: bnp.exp(a) * 2.0 + 1.0, x))
    assert count["KERNEL"] == 1 and nbytes["KERNEL"] == 2 * 1024 * 512 * 4


def test_a_column_sum_and_its_use_read_the_input_twice():
    # the mean over rows, then x - mean: stage 1 reads x and writes partials, the combine reads
    # them and writes the sum, the last launch reads x and the mean again and writes x - mean
    x = blu.ShapeDtypeStruct((4096, 256), np.float32)
    prog = _program(lambda a: a - bnp.mean(a, axis=0), x)
    (node,) = [n for n in prog.plan.nodes if n.kind == "kernel"]
    per = pt.kernel_traffic(node)
    (split,) = [p for p in node.layout.gpu_nests if p.strategy == "split"]
    parts = split.parts * split.K * 4
    size = 4096 * 256 * 4
    assert [b for _, b in per][:2] == [size + parts, parts + 256 * 4]
    assert per[-1][1] == 2 * size + 256 * 4  # x and the (256,) mean in, the result out
    nbytes, count, _ = pt.traffic(prog)
    assert count["KERNEL"] == len(per) and nbytes["KERNEL"] == sum(b for _, b in per)


def test_command_line_on_the_small_models(capsys):
    pt.main(["--model", "resnet-tiny", "--batch", "4", "--top", "2"])
    pt.main(["--model", "tiny", "--batch", "2", "--block", "16", "--top", "2"])
    out = capsys.readouterr().out
    assert out.count("total") == 2 and "resnet-tiny bf16 batch 4" in out
