"""benchmarks/checkpoint_io.py runs (a tiny size): it saves, loads and reports both."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

pytest.importorskip("safetensors")


def test_checkpoint_benchmark_runs(tmp_path, capsys):
    import checkpoint_io as bench

    params, opt = bench.state(1e-5)  # 10 kB: three leaves of 833 floats
    assert len(params) == 1 and set(opt) == {"m", "v"}
    assert sum(v.nbytes for v in params.values()) * 3 == pytest.approx(1e4, rel=0.01)
    bench.main(["--gb", "1e-5", "--rounds", "1", "--dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert out.startswith("save: ") and "\nload: " in out
    assert list(tmp_path.iterdir()) == []  # each round's folder is removed
