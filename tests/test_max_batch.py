"""The --find-max-batch search (benchmarks/peers/max_batch.py and gpt2_124m.run_find_max_batch)
with a fake runner on the CPU: against the true maximum by brute force, every try recorded, the
grid respected, and each try a separate worker command of the right batch."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks import gpt2_124m as bench
from benchmarks.peers import max_batch


@given(true_max=st.integers(0, 300), start=st.integers(1, 5), limit=st.integers(5, 260))
def test_search_finds_the_largest_fitting_batch(true_max, start, limit):
    calls = []

    def fits(b):
        calls.append(b)
        return b <= true_max

    got = max_batch.search(fits, start=start, limit=limit)
    want = max((b for b in range(start, limit + 1) if b <= true_max), default=0)  # brute force
    assert got["max_batch"] == want
    assert got["at_limit"] == (want == limit)
    assert [b for b, _ in got["tries"]] == calls and len(set(calls)) == len(calls)
    assert all(ok == (b <= true_max) for b, ok in got["tries"])
    assert len(calls) <= 2 * (limit.bit_length() + 1)  # doubling then bisection: logarithmic


@given(
    grid=st.lists(st.integers(1, 200), min_size=1, max_size=12),
    true_max=st.integers(0, 220),
)
def test_search_tries_only_the_grid(grid, true_max):
    got = max_batch.search(lambda b: b <= true_max, grid=grid, limit=1000)
    assert {b for b, _ in got["tries"]} <= set(grid)
    assert got["max_batch"] == max((b for b in grid if b <= true_max), default=0)


def test_doubling_then_bisection_order():
    got = max_batch.search(lambda b: b <= 37, start=1, limit=1024)
    assert [b for b, _ in got["tries"]] == [1, 2, 4, 8, 16, 32, 64, 48, 40, 36, 38, 37]
    assert got["max_batch"] == 37


def test_bad_search_arguments():
    with pytest.raises(ValueError):
        max_batch.search(lambda b: True, start=0)
    with pytest.raises(ValueError):
        max_batch.search(lambda b: True, grid=[2000], limit=10)


def test_each_try_is_one_worker_process_of_that_batch(tmp_path):
    argv = ["--find-max-batch", "--systems", "blu,torch", "--modes", "bf16",
            "--json", str(tmp_path / "r.json"), "--workdir", str(tmp_path / "w"),
            "--max-batch-limit", "100"]  # fmt: skip
    a = bench.parse_args(argv)
    s = bench.Session(a, argv)
    seen = []

    def fake_run(what, cmd, log):  # an OOM above 24 sequences for blu, 12 for torch
        b = int(next(c.split("=")[1] for c in cmd if c.startswith("--B=")))
        assert "--steps=1" in cmd and "--warmup=1" in cmd
        seen.append((cmd[1].rsplit("/", 1)[1], b, log.name))
        if b > (24 if "blu_gpt2.py" in cmd[1] else 12):
            return None, "exit status 1: out of memory", 1.0
        return {"tok_s": 1000}, None, 1.0

    recs = bench.run_find_max_batch(s, fake_run)
    assert [(r["system"], r["max_batch"]) for r in recs] == [("blu", 24), ("torch", 12)]
    assert recs[0]["errors"]["32"].endswith("out of memory")
    assert len({log for _, _, log in seen}) == len(seen)  # one log (process) per try
    saved = json.loads((tmp_path / "r.json").read_text())["max_batch"]
    assert [(r["system"], r["mode"], r["max_batch"]) for r in saved] == [
        ("blu", "bf16", 24),
        ("torch", "bf16", 12),
    ]
    text = bench.max_batch_report(recs, 1024)
    assert "blu" in text and " 24 " in text and "32-" in text


def test_max_batch_flags_are_checked():
    with pytest.raises(bench.BenchmarkError, match="max-batch-grid"):
        bench.parse_args(["--max-batch-grid", "a,b"])
    with pytest.raises(bench.BenchmarkError, match="max-batch-start"):
        bench.parse_args(["--max-batch-start", "9", "--max-batch-limit", "4"])
    assert bench.parse_args(["--max-batch-grid", "16,8,8"]).max_batch_grid == [8, 16]
