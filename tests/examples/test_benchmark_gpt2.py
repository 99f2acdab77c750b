"""The GPT-2 benchmark driver (``benchmarks/gpt2_124m.py``): flag checks, the results file, the
ratio table, the BENCHMARKS.md section, the fidelity comparison and inputs; end to end, the blu
process on the tiny config on the CPU, peers that fail or are missing, and (when PyTorch is
installed) the fidelity harness against PyTorch."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repo root holds benchmarks/ and examples/

import blu  # noqa: E402
from benchmarks import gpt2_124m as drv  # noqa: E402
from benchmarks.peers import blu_gpt2, fidelity, report  # noqa: E402
from blu.core import pytree  # noqa: E402
from examples.gpt2.checkpoint import flatten_named  # noqa: E402

TINY = ["--config", "tiny", "--batch", "2", "--block", "32", "--vocab", "256", "--no-fidelity"]
HAS_TORCH = importlib.util.find_spec("torch") is not None


def run_record(system, mode, tok_s, peak, ok=True, **kw):
    r = dict(system=system, mode=mode, config="gpt2-124m", B=16, T=1024, vocab=50304, ok=ok,
             tok_s=tok_s, step_ms=None if tok_s is None else 16384 / tok_s * 1e3,
             peak_GiB=peak, error=None if ok else "boom", date="2026-11-29 10:00 UTC",
             machine="NVIDIA H200", command="python benchmarks/gpt2_124m.py")  # fmt: skip
    return {**r, **kw}


def fid_record(system, check, losses, norms, inputs="abc", ok=True):
    return dict(system=system, check=check, config="gpt2-124m", B=16, T=1024, vocab=50304,
                steps=len(losses), losses=losses, grad_norms=norms, inputs=inputs, ok=ok,
                error=None if ok else "crashed", data="pd_books.gpt2.npy")  # fmt: skip


# ---- flags -------------------------------------------------------------------------------------


def test_defaults_are_the_issue_setup():
    a = drv.parse_args([])
    assert a.fidelity and not drv.parse_args(["--no-fidelity"]).fidelity
    assert a.systems == ["blu", "torch", "torch-compile", "jax"]
    assert a.modes == ["fp32", "tf32", "bf16"]
    assert (a.config, a.batch, a.block, a.steps, a.fidelity_steps) == (
        "gpt2-124m",
        16,
        1024,
        30,
        200,
    )
    assert drv.model_dims(a.config, a.vocab) == dict(
        vocab=50304, n_layer=12, n_head=12, d_model=768, n_ctx=1024
    )


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--systems", "blu,tensorflow"], "--systems"),
        (["--systems", ""], "--systems"),
        (["--modes", "fp16"], "--modes"),
        (["--batch", "0"], "--batch"),
        (["--steps", "-1"], "--steps"),
        (["--warmup", "-1"], "--warmup"),
        (["--fidelity-steps", "2"], "--fidelity-steps"),
        (["--config", "tiny", "--block", "64"], "--block"),
        (["--report", "--json", "/nonexistent/results.json"], "--report"),
        (["--data", "/nonexistent/corpus.txt"], "--data"),
    ],
)
def test_bad_flags_are_refused_naming_the_flag(argv, flag, capsys):
    with pytest.raises(drv.BenchmarkError, match=flag):
        drv.parse_args(argv)
    assert drv.cli(argv) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_lists_are_deduplicated_in_order():
    a = drv.parse_args(["--systems", "jax, blu,jax", "--modes", "bf16,fp32"])
    assert a.systems == ["jax", "blu"] and a.modes == ["bf16", "fp32"]


def test_worker_commands_carry_the_same_model_and_batch():
    a = drv.parse_args(["--steps", "7"])
    blu_cmd = drv.worker_command("blu", "bf16", a)
    torch_cmd = drv.worker_command("torch", "bf16", a)
    compiled = drv.worker_command("torch-compile", "tf32", a)
    jax_cmd = drv.worker_command("jax", "fp32", a)
    assert blu_cmd[1].endswith("peers/blu_gpt2.py") and "--config=gpt2-124m" in blu_cmd
    for cmd in (torch_cmd, compiled, jax_cmd):
        assert {"--vocab=50304", "--n-layer=12", "--n-head=12", "--d-model=768"} <= set(cmd)
    for cmd in (blu_cmd, torch_cmd, compiled, jax_cmd):
        assert {"--B=16", "--T=1024", "--steps=7"} <= set(cmd)
        assert not any(x.startswith("--warmup") for x in cmd)  # each script's own default
    assert "--compile" in compiled and "--compile" not in torch_cmd
    assert jax_cmd[1].endswith("peers/jax_gpt2.py")
    a = drv.parse_args(["--warmup", "2"])
    assert "--warmup=2" in drv.worker_command("jax", "fp32", a)


# ---- the results file --------------------------------------------------------------------------


def test_merge_replaces_same_key_and_keeps_others(tmp_path):
    res = report.empty()
    report.merge(res, "runs", [run_record("blu", "fp32", 100, 10.0)])
    report.merge(res, "runs", [run_record("torch", "fp32", 50, 20.0)])
    report.merge(res, "runs", [run_record("blu", "fp32", 120, 9.0)])  # a rerun replaces
    report.merge(res, "runs", [run_record("blu", "fp32", 1, 1.0, B=8)])  # another batch: kept
    assert [(r["system"], r["tok_s"], r["B"]) for r in res["runs"]] == [
        ("blu", 120, 16),
        ("torch", 50, 16),
        ("blu", 1, 8),
    ]
    report.merge(res, "fidelity", [fid_record("blu", "fp32", [1.0] * 3, [1.0] * 3)])
    path = tmp_path / "sub" / "r.json"
    report.save(path, res)
    assert report.load(path) == res
    assert report.load(tmp_path / "missing.json") == report.empty()
    with pytest.raises(report.ReportError):
        report.merge(res, "other", [])


def test_results_file_of_another_kind_is_refused(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("[1, 2]")
    with pytest.raises(report.ReportError, match="not a GPT-2 benchmark results file"):
        report.load(bad)
    bad.write_text("{not json")
    with pytest.raises(report.ReportError, match="not JSON"):
        report.load(bad)


def test_ratios_are_blu_over_each_peer_per_mode():
    runs = [
        run_record("jax", "fp32", 40_000, 30.0),
        run_record("torch", "fp32", 50_000, 20.0),
        run_record("blu", "fp32", 60_000, 10.0),
        run_record("torch-compile", "fp32", None, None, ok=False),
        run_record("torch", "bf16", 300_000, 16.0),  # no blu bf16 run: no ratio
        run_record("blu", "tf32", 200_000, 12.0),
    ]
    rows = report.ratio_rows(runs)
    assert [(r["mode"], r["system"]) for r in rows] == [
        ("fp32", "blu"),
        ("fp32", "torch"),
        ("fp32", "torch-compile"),
        ("fp32", "jax"),
        ("tf32", "blu"),
        ("bf16", "torch"),
    ]
    by = {(r["mode"], r["system"]): r for r in rows}
    assert by["fp32", "torch"]["speed"] == pytest.approx(60_000 / 50_000)
    assert by["fp32", "torch"]["memory"] == pytest.approx(10.0 / 20.0)
    assert by["fp32", "jax"]["speed"] == pytest.approx(1.5)
    assert by["fp32", "jax"]["memory"] == pytest.approx(1 / 3)
    assert by["fp32", "blu"]["speed"] is None and by["fp32", "torch-compile"]["speed"] is None
    assert by["bf16", "torch"]["speed"] is None
    text = report.text_report({"runs": runs, "fidelity": []}, "gpt2-124m", 16, 1024)
    last = text.splitlines()[-7:]
    assert last[0].split()[:2] == ["system", "mode"]  # the table comes last
    assert "60,000" in last[1] and "1.20x" in last[2] and "0.50x" in last[2]
    assert "failed: torch-compile fp32: boom" in text


# ---- BENCHMARKS.md -----------------------------------------------------------------------------


def _view(runs=(), fid=()):
    return {"runs": list(runs), "fidelity": list(fid)}


def test_section_is_appended_then_replaced_leaving_the_rest():
    doc = "# Benchmarks\n\n## Other\n\ntext | kept\n"
    s1 = report.markdown_section(_view([run_record("blu", "fp32", 1, 1.0)]), "gpt2-124m", 16, 1024)
    once = report.rewrite_section(doc, s1)
    assert once.startswith(doc.rstrip("\n")) and once.count(report.BEGIN) == 1
    assert report.rewrite_section(once, s1) == once  # idempotent
    s2 = report.markdown_section(_view([run_record("blu", "fp32", 2, 1.0)]), "gpt2-124m", 16, 1024)
    twice = report.rewrite_section(once + "\n## After\n\nmore\n", s2)
    assert twice.startswith(doc.rstrip("\n")) and twice.endswith("\n## After\n\nmore\n")
    assert "| blu | fp32 | 2 |" in twice and "| blu | fp32 | 1 |" not in twice
    assert "NVIDIA H200" in twice and "`python benchmarks/gpt2_124m.py`" in twice


@pytest.mark.parametrize("extra", ["begin", "end", "swapped"])
def test_damaged_markers_are_refused(extra):
    sec = report.markdown_section(_view(), "gpt2-124m", 16, 1024)
    doc = "# B\n\n" + sec + "\n"
    if extra == "begin":
        doc += report.BEGIN_LINE + "\n"
    elif extra == "end":
        doc += report.END + "\n"
    else:
        doc = "# B\n" + report.END + "\n" + report.BEGIN_LINE + "\n"
    with pytest.raises(report.ReportError):
        report.rewrite_section(doc, sec)


# ---- fidelity: comparison and inputs -----------------------------------------------------------


def test_fp32_check_passes_within_1e_4_and_fails_beyond():
    t_losses, t_norms = [10.0, 9.0, 8.0], [2.0, 1.5, 1.2]
    ok = [fid_record("torch", "fp32", t_losses, t_norms),
          fid_record("blu", "fp32", [10.0005, 9.0, 8.0], [2.0001, 1.0, 1.0])]  # fmt: skip
    (row,) = fidelity.compare(ok)
    assert row["passed"] is True and row["worst_rel"] == pytest.approx(5e-5)
    bad_norm = [ok[0], fid_record("blu", "fp32", t_losses, [2.0004, 1.5, 1.2])]
    assert fidelity.compare(bad_norm)[0]["passed"] is False
    bad_loss = [ok[0], fid_record("blu", "fp32", [10.0, 9.0, 8.002], t_norms)]
    (row,) = fidelity.compare(bad_loss)
    assert row["passed"] is False and row["worst_rel"] == pytest.approx(2.5e-4)


def test_bf16_curve_check_is_2_percent_at_every_step():
    t = list(np.linspace(10.9, 6.0, 200))
    near = [x * (1 + 0.019 * math.sin(i)) for i, x in enumerate(t)]
    far = list(t)
    far[150] *= 1.03
    assert fidelity.compare(
        [fid_record("torch", "bf16", t, t), fid_record("blu", "bf16", near, t)]
    )[0]["passed"]
    (row,) = fidelity.compare(
        [fid_record("torch", "bf16", t, t), fid_record("blu", "bf16", far, t)]
    )
    assert row["passed"] is False and "worst step 151" in row["detail"]


def test_fidelity_that_cannot_be_judged_says_why():
    t = fid_record("torch", "fp32", [1.0] * 3, [1.0] * 3)
    assert "no blu result" in fidelity.compare([t])[0]["detail"]
    crashed = fid_record("blu", "fp32", [], [], ok=False)
    assert "blu failed: crashed" in fidelity.compare([t, crashed])[0]["detail"]
    other = fid_record("blu", "fp32", [1.0] * 3, [1.0] * 3, inputs="xyz")
    (row,) = fidelity.compare([t, other])
    assert row["passed"] is None and "different inputs" in row["detail"]
    short = fid_record("blu", "fp32", [1.0] * 2, [1.0] * 2)
    assert fidelity.compare([t, short])[0]["passed"] is False


def test_batches_are_windows_with_shifted_targets():
    tokens = np.arange(1000, dtype=np.uint16) * 3
    x, y = fidelity.make_batches(tokens, 5, 4, 16, seed=0)
    assert x.shape == y.shape == (5, 4, 16) and x.dtype == np.int32
    np.testing.assert_array_equal(x[..., 1:], y[..., :-1])
    np.testing.assert_array_equal(np.diff(x, axis=-1), 3)  # contiguous windows of the stream
    x2, _ = fidelity.make_batches(tokens, 5, 4, 16, seed=0)
    x3, _ = fidelity.make_batches(tokens, 5, 4, 16, seed=1)
    assert (x == x2).all() and not (x == x3).all()
    with pytest.raises(fidelity.FidelityError):
        fidelity.make_batches(tokens[:16], 1, 1, 16, seed=0)


def test_token_files_are_found_npy_first_and_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("BLU_DATA_DIR", str(tmp_path))
    np.save(tmp_path / fidelity.TOKENS_FILE, np.arange(100, dtype=np.uint16))
    (tmp_path / fidelity.TEXT_FILE).write_text("some text")
    assert fidelity.find_token_source() == tmp_path / fidelity.TOKENS_FILE
    assert fidelity.find_token_source(tmp_path / "x.npy") == tmp_path / "x.npy"
    np.testing.assert_array_equal(
        fidelity.load_tokens(tmp_path / fidelity.TOKENS_FILE), np.arange(100)
    )
    np.save(tmp_path / "bad.npy", np.zeros((2, 2), np.int32))
    with pytest.raises(fidelity.FidelityError, match="1-D integer"):
        fidelity.load_tokens(tmp_path / "bad.npy")
    with pytest.raises(fidelity.FidelityError, match="no pd_books.txt"):
        fidelity.prepare_tokens(str(tmp_path / fidelity.TOKENS_FILE))


def test_digest_sees_names_shapes_and_values():
    a = {"x": np.zeros((2, 3), np.float32)}
    assert fidelity.digest(a) == fidelity.digest({"x": np.zeros((2, 3), np.float32)})
    assert fidelity.digest(a) != fidelity.digest({"y": a["x"]})
    assert fidelity.digest(a) != fidelity.digest({"x": np.zeros((3, 2), np.float32)})
    assert fidelity.digest(a) != fidelity.digest({"x": np.ones((2, 3), np.float32)})


# ---- blu's side: initial weights and program specs ---------------------------------------------


def test_numpy_init_has_the_examples_structure_and_distribution():
    tiny = blu_gpt2.model_config("tiny", 256)
    fast, exact = blu_gpt2.host_params(tiny, 0, "numpy"), blu_gpt2.host_params(tiny, 0, "blu")
    assert pytree.tree_structure(fast) == pytree.tree_structure(exact)
    assert [(x.shape, x.dtype) for x in pytree.tree_leaves(fast)] == [
        (x.shape, x.dtype) for x in pytree.tree_leaves(exact)
    ]
    cfg = blu_gpt2.model_config("small")  # big enough matrices for the statistics
    for name, v in flatten_named(blu_gpt2.host_params(cfg, 0, "numpy"), "params").items():
        assert v.dtype == np.float32
        if name.endswith(".g"):
            assert (v == 1).all(), name
        elif name.endswith(".b"):
            assert (v == 0).all(), name
        else:
            std = 0.02 / math.sqrt(2 * cfg.n_layer) if ".c_proj." in name else 0.02
            assert abs(v.std() / std - 1) < 0.05 and abs(v.mean()) < 0.1 * std, name
    with pytest.raises(ValueError):
        blu_gpt2.host_params(cfg, 0, "torch")


def test_program_specs_match_the_state_the_benchmark_passes():
    cfg = blu_gpt2.model_config("tiny", 256)
    ((fn, specs),) = blu_gpt2.blu_programs("tiny", "bf16", 2, 32, 256)
    params = blu_gpt2.host_params(cfg)
    state = (params, blu_gpt2.host_opt_state(params))
    spec_leaves, spec_tree = pytree.tree_flatten(specs[:2])
    leaves, tree = pytree.tree_flatten(state)
    assert spec_tree == tree
    assert [(s.shape, np.dtype(s.dtype)) for s in spec_leaves] == [
        (x.shape, x.dtype) for x in leaves
    ]
    assert [(s.shape, np.dtype(s.dtype)) for s in specs[2:]] == [
        ((1, 2, 32), np.int32),
        ((1, 2, 32), np.int32),
        ((2,), np.uint32),
    ]
    fn.lower(*specs)  # stages without running
    x = np.zeros((1, 2, 32), np.int32)
    with blu_gpt2.precision_scope("bf16"):
        out = fn(*state, x, x, np.zeros(2, np.uint32))
    assert len(fn._cache) == 1  # the call hit the program staged from the specs
    assert math.isfinite(float(out[2])) and math.isfinite(float(out[3]))
    with pytest.raises(ValueError):
        with blu_gpt2.precision_scope("fp8"):
            pass


# ---- end to end --------------------------------------------------------------------------------


def test_blu_process_runs_tiny_on_the_cpu_and_results_merge(tmp_path, capsys):
    res = tmp_path / "r.json"
    common = [*TINY, "--steps", "3", "--warmup", "1", "--json", str(res),
              "--workdir", str(tmp_path / "w"), "--systems", "blu"]  # fmt: skip
    assert drv.main([*common, "--modes", "fp32"]) == 0
    assert drv.main([*common, "--modes", "bf16"]) == 0
    runs = report.load(res)["runs"]
    assert [(r["system"], r["mode"], r["ok"]) for r in runs] == [
        ("blu", "fp32", True),
        ("blu", "bf16", True),
    ]
    for r in runs:
        assert r["tok_s"] > 0 and r["B"] == 2 and r["T"] == 32 and r["vocab"] == 256
        assert r["backend"] == ("cuda" if blu.cuda.is_available() else "cpu")
        assert r["command"].startswith("python benchmarks/gpt2_124m.py --config tiny")
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1].split()[:2] == ["blu", "bf16"]  # the table is last
    md = tmp_path / "B.md"
    md.write_text("# Benchmarks\n")
    argv = [
        *TINY,
        "--report",
        "--json",
        str(res),
        "--update-benchmarks",
        "--benchmarks-md",
        str(md),
    ]
    assert drv.main(argv) == 0
    assert "| blu | bf16 |" in md.read_text()


def test_missing_or_failing_peers_are_recorded_not_fatal(tmp_path, monkeypatch):
    fake = tmp_path / "fakes"
    for mod in ("torch", "jax"):  # frameworks that fail on import, as on a machine without them
        (fake / mod).mkdir(parents=True)
        (fake / mod / "__init__.py").write_text(f"raise ImportError('no {mod} here')\n")
    monkeypatch.setenv("PYTHONPATH", str(fake))
    res = tmp_path / "r.json"
    argv = [*TINY, "--systems", "torch,jax", "--modes", "fp32", "--json", str(res),
            "--workdir", str(tmp_path / "w")]  # fmt: skip
    assert drv.main(argv) == 0
    runs = report.load(res)["runs"]
    assert [(r["system"], r["ok"]) for r in runs] == [("torch", False), ("jax", False)]
    assert "no torch here" in runs[0]["error"] and "no jax here" in runs[1]["error"]


def test_timeouts_and_time_budget(tmp_path):
    rec, err, _ = drv.run_process(
        [sys.executable, "-c", "import time; time.sleep(30)"], 1, tmp_path / "l.log"
    )
    assert rec is None and err.startswith("timed out after 1 s")
    rec, err, _ = drv.run_process([sys.executable, "-c", "print('hi')"], 30, tmp_path / "l.log")
    assert rec is None and err.startswith("no JSON result")
    res = tmp_path / "r.json"
    argv = [*TINY, "--systems", "blu", "--time-budget", "1", "--json", str(res),
            "--workdir", str(tmp_path / "w")]  # fmt: skip
    assert drv.main(argv) == 0
    runs = report.load(res)["runs"]
    assert len(runs) == 3 and all("time-budget" in r["error"] for r in runs)


@pytest.mark.skipif(not HAS_TORCH, reason="needs PyTorch")
def test_fidelity_harness_blu_against_torch_on_tiny(tmp_path):
    tokens = tmp_path / "tokens.npy"
    rng = np.random.default_rng(0)
    np.save(tokens, (np.cumsum(rng.integers(1, 4, 20_000)) % 256).astype(np.uint16))
    res = tmp_path / "r.json"
    argv = [*TINY, "--systems", "blu,torch", "--no-throughput", "--fidelity",
            "--fidelity-steps", "8", "--data", str(tokens), "--json", str(res),
            "--workdir", str(tmp_path / "w")]  # fmt: skip
    assert drv.main(argv) == 0
    recs = report.load(res)["fidelity"]
    assert {(r["system"], r["check"]) for r in recs} == {
        (s, c) for s in ("blu", "torch") for c in ("fp32", "bf16")
    }
    assert all(r["ok"] for r in recs), [r["error"] for r in recs]
    checks = {c["check"]: c for c in fidelity.compare(recs)}
    assert checks["fp32"]["passed"], checks["fp32"]["detail"]
    assert checks["bf16"]["passed"] and checks["bf16"]["steps"] == 8
    blu_fp32 = next(r for r in recs if r["system"] == "blu" and r["check"] == "fp32")
    assert blu_fp32["losses"][0] == pytest.approx(math.log(256), rel=0.05)  # ~uniform at init


@pytest.mark.skipif(not HAS_TORCH, reason="needs PyTorch")
def test_torch_peer_loads_every_blu_weight_transposed(tmp_path):
    from benchmarks.peers import torch_gpt2

    cfg = blu_gpt2.model_config("tiny", 256)
    named = blu_gpt2.params_to_named(blu_gpt2.host_params(cfg))
    m = torch_gpt2.GPT(cfg.vocab_size, cfg.n_layer, cfg.n_head, cfg.d_model, cfg.n_ctx)
    names = torch_gpt2.blu_name_map(cfg.n_layer)
    assert set(names) == set(named)
    assert {d for d, _ in names.values()} == {n for n, _ in m.named_parameters()}
    path = tmp_path / "w.npz"
    np.savez(path, **named)
    torch_gpt2.load_blu_weights(m, str(path), cfg.n_layer)
    w = dict(m.named_parameters())
    np.testing.assert_array_equal(
        w["blocks.1.qkv.weight"].detach().numpy(), named["params.h.1.attn.c_attn.w"].T
    )
    assert m.head.weight is m.wte.weight
    np.savez(path, **{k: v for k, v in named.items() if k != "params.wpe"})
    with pytest.raises(ValueError, match="missing"):
        torch_gpt2.load_blu_weights(m, str(path), cfg.n_layer)


@pytest.mark.gpu
@pytest.mark.skipif(not blu.cuda.is_available(), reason="needs a GPU (or BLU_FAKE_GPU=1)")
def test_blu_process_on_the_gpu_reports_peak_memory(tmp_path):
    res = tmp_path / "r.json"
    argv = [*TINY, "--systems", "blu", "--modes", "fp32,bf16", "--steps", "3", "--warmup", "1",
            "--json", str(res), "--workdir", str(tmp_path / "w")]  # fmt: skip
    assert drv.main(argv) == 0
    runs = report.load(res)["runs"]
    assert all(r["ok"] and r["backend"] == "cuda" and r["peak_GiB"] > 0 for r in runs), runs
