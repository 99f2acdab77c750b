"""The --find-max-batch search (benchmarks/peers/max_batch.py and gpt2_124m.run_find_max_batch)
with a fake runner on the CPU: against the true maximum by brute force, every try recorded, the
grid respected, and each try a separate worker command of the right batch."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks import gpt2_124m as bench
from benchmarks.peers import blu_gpt2, max_batch


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
            "--max-batch-limit", "100", "--blu-max-batch", "search"]  # fmt: skip
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


@given(
    true_max=st.integers(0, 300),
    start=st.integers(1, 40),
    limit=st.integers(40, 400),
    fixed=st.floats(1.0, 20.0),
    per=st.floats(0.05, 2.0),
    noise=st.floats(0.0, 0.3),
    report=st.booleans(),
)
def test_guided_search_finds_the_largest_fitting_batch(
    true_max, start, limit, fixed, per, noise, report
):
    """Against brute force, whatever the peaks say (a line with an offset, none at all): the
    guess only orders the tries."""
    calls = []

    def try_batch(b):
        calls.append(b)
        wobble = noise * ((b * 7919) % 13 - 6) / 6  # deterministic, up to +-noise
        return b <= true_max, (fixed + per * b + wobble) * 2**30 if report else None

    budget = (fixed + per * (true_max + 0.5)) * 2**30
    got = max_batch.search_guided(try_batch, budget, start=start, limit=limit)
    want = min(true_max, limit)
    assert got["max_batch"] == want and got["at_limit"] == (want == limit)
    assert [b for b, _ in got["tries"]] == calls and len(set(calls)) == len(calls)
    assert all(ok == (b <= true_max) for b, ok in got["tries"])
    assert len(calls) <= 2 * (limit.bit_length() + 2)


@pytest.mark.parametrize(
    "fixed, per, budget, start, want, tries",
    [
        (2, 0.5, 100, 16, 196, [16, 18, 196, 197]),  # far below: the line from two peaks
        (20, 3, 138, 36, 39, [36, 40, 38, 39]),  # a start near the answer: four tries
    ],
)
def test_guided_search_needs_few_tries_when_the_peaks_are_a_line(
    fixed, per, budget, start, want, tries
):
    def try_batch(b):
        peak = (fixed + per * b) * 2**30
        return peak <= budget * 2**30, peak

    got = max_batch.search_guided(try_batch, budget * 2**30, start=start, limit=1024)
    assert got["max_batch"] == want
    assert [b for b, _ in got["tries"]] == tries


def test_blu_batch_from_the_plan_is_run_once_and_the_over_batch_refused(tmp_path):
    argv = ["--find-max-batch", "--systems", "blu", "--modes", "bf16,fp32",
            "--json", str(tmp_path / "r.json"), "--workdir", str(tmp_path / "w")]  # fmt: skip
    a = bench.parse_args(argv)
    s = bench.Session(a, argv)
    seen = []
    predicted = {"bf16": 381, "fp32": 108}
    report = "jit(train_step): out of memory on cuda:0: ... f32[24448,50304] ... model.py:221"

    def fake_run(what, cmd, log):
        seen.append(cmd)
        mode = next(c.split("=")[1] for c in cmd if c.startswith("--mode="))
        if "--predict-max-batch" in cmd:
            assert f"--device-bytes={bench.H200_MEMORY_BYTES}" in cmd
            b = predicted[mode]
            return dict(max_batch=b, at_limit=False, device_bytes=1, budget_bytes=1,
                        footprint_GiB=137.3, plan_peak_GiB=136.0, next_footprint_GiB=137.7,
                        plan_tries=[[b, True, 137.3]], oom_report_plan="plan says no",
                        over_batch=b + 9, over_footprint_GiB=140.5), None, 1.0  # fmt: skip
        b = int(next(c.split("=")[1] for c in cmd if c.startswith("--B=")))
        assert "--steps=1" in cmd and "--warmup=1" in cmd
        if b > predicted[mode]:  # the worker's traceback ends with the report
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text("Traceback ...\nblu.core.errors.BluOutOfMemoryError: " + report + "\n")
            return None, "exit status 1: BluOutOfMemoryError", 1.0
        return {"tok_s": 1000, "peak_GiB": 137.4}, None, 1.0

    recs = bench.run_find_max_batch(s, fake_run)
    assert [(r["mode"], r["max_batch"], r["verified"]) for r in recs] == [
        ("bf16", 381, True),
        ("fp32", 108, True),
    ]
    assert [r["tries"] for r in recs] == [[[381, True], [390, False]], [[108, True], [117, False]]]
    assert all(r["over_refused"] and r["oom_report_gpu"] == report for r in recs)
    assert recs[0]["oom_report_plan"] == "plan says no" and recs[0]["measured_peak_GiB"] == 137.4
    assert len(seen) == 6  # per mode: one prediction, the predicted batch, the batch over
    text = bench.max_batch_report(recs, 1024)
    assert "381 predicted" in text and "verified" in text and "refused" in text


def test_prediction_bisects_the_footprint_and_finds_the_first_batch_over(monkeypatch):
    # a footprint that is not quite a line (the plan's arena packing): 1 GiB + 0.3 GiB per
    # sequence, plus 64 MiB at every odd batch
    def fake(config, mode, b, block, vocab=0, target="", n_ctx=None):
        return 2**30 + b * 3 * 2**30 // 10 + (b % 2) * 2**26

    monkeypatch.setattr(blu_gpt2, "footprint", fake)
    budget = 40 * 2**30
    got = blu_gpt2.predict_max_batch("tiny", "bf16", 32, budget, limit=512)
    want = max(b for b in range(1, 513) if fake("", "", b, 0) <= budget)  # brute force
    assert got["max_batch"] == want and got["bytes"] == fake("", "", want, 0)
    assert got["next_bytes"] == fake("", "", want + 1, 0) > budget
    known = {b: n for b, _, n in got["tries"]}
    device = 45 * 2**30
    over, n = blu_gpt2.first_batch_over("tiny", "bf16", 32, device, known)
    assert over == min(b for b in range(1, 1000) if fake("", "", b, 0) > device) and n > device


def test_the_plan_report_of_the_training_step_needs_no_kernel_and_names_the_model_line():
    """Lowered for the H200's target on the CPU (no kernel compiled): one byte short of the
    footprint, the report names the model's buffers and their lines in examples/gpt2."""
    n = blu_gpt2.footprint("tiny", "fp32", 2, 16)
    assert blu_gpt2.plan_oom_report("tiny", "fp32", 2, 16, n) is None
    text = blu_gpt2.plan_oom_report("tiny", "fp32", 2, 16, n - 1)
    assert text.startswith("jit(train_step): out of memory")
    assert "f32[" in text and "examples/gpt2/model.py:" in text
    assert "by 1 B" not in text and "exceeds" in text


def test_a_longer_context_reaches_the_prediction_and_the_plan(tmp_path):
    """``--find-max-batch --n-ctx``: the prediction process gets the context (GPT-2 at 8K has a
    position table of 8192 rows), and the plan's footprint grows with it."""
    argv = ["--find-max-batch", "--systems", "blu", "--modes", "bf16", "--block", "32",
            "--n-ctx", "64", "--config", "tiny", "--json", str(tmp_path / "r.json"),
            "--workdir", str(tmp_path / "w")]  # fmt: skip
    a = bench.parse_args(argv)
    s = bench.Session(a, argv)
    seen = []

    def fake_run(what, cmd, log):
        seen.append(cmd)
        if "--predict-max-batch" in cmd:
            return None, "stop here", 1.0
        raise AssertionError("nothing runs without a prediction")

    (r,) = bench.run_find_max_batch(s, fake_run)
    assert "--n-ctx=64" in seen[0] and r["max_batch"] is None
    base = blu_gpt2.footprint("tiny", "fp32", 2, 16)
    assert blu_gpt2.footprint("tiny", "fp32", 2, 16, n_ctx=512) > base  # the position table


def test_saved_predictions_stand_for_the_prediction_process(tmp_path):
    """``--blu-predictions`` (written by the kernel-cache fill): a record matching config, mode,
    block, vocabulary, limit, device memory and margin replaces the prediction process."""
    preds = tmp_path / "p.json"
    rec = dict(system="blu", config="gpt2-124m", mode="bf16", T=1024, vocab=bench.GPT2_TOKENS,
               limit=1024, device_bytes=bench.H200_MEMORY_BYTES,
               margin_bytes=bench.MAX_BATCH_MARGIN_BYTES, max_batch=383, at_limit=False,
               budget_bytes=1, footprint_GiB=138.3, plan_peak_GiB=138.0, next_footprint_GiB=138.7,
               plan_tries=[], oom_report_plan="plan", over_batch=389,
               over_footprint_GiB=140.4)  # fmt: skip
    other = dict(rec, margin_bytes=1, max_batch=999)  # another margin: not this run's
    longer = dict(rec, n_ctx=8192, max_batch=7)  # another context: not this run's either
    preds.write_text(json.dumps([other, longer, rec]))
    argv = ["--find-max-batch", "--systems", "blu", "--modes", "bf16", "--blu-predictions",
            str(preds), "--json", str(tmp_path / "r.json"),
            "--workdir", str(tmp_path / "w")]  # fmt: skip
    a = bench.parse_args(argv)
    s = bench.Session(a, argv)
    seen = []

    def fake_run(what, cmd, log):
        assert "--predict-max-batch" not in cmd
        b = int(next(c.split("=")[1] for c in cmd if c.startswith("--B=")))
        seen.append(b)
        return ({"tok_s": 1, "peak_GiB": 138.3}, None, 1.0) if b <= 383 else (None, "oom", 1.0)

    (r,) = bench.run_find_max_batch(s, fake_run)
    assert seen == [383, 389] and r["max_batch"] == 383 and r["oom_report_plan"] == "plan"
    assert not r["over_refused"]  # no BluOutOfMemoryError in its log: said so, not hidden
    assert r["errors"]["389"] == "oom"
