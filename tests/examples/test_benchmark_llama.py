"""The GPT-2 benchmark driver on LLaMA configs (``benchmarks/gpt2_124m.py --config llama-*``):
flags and the peers' model sizes, blu's host init of the LLaMA parameters, the PyTorch peer's
weight loading (``benchmarks/peers/torch_llama.py``) and, end to end on the CPU, the fidelity
harness: from the same weights and batches, blu's example LLaMA and the PyTorch LLaMA agree."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repo root holds benchmarks/ and examples/

from benchmarks import gpt2_124m as drv  # noqa: E402
from benchmarks.peers import blu_models, fidelity, report  # noqa: E402

TINY = ["--config", "llama-tiny", "--batch", "2", "--block", "32", "--vocab", "256"]
HAS_TORCH = importlib.util.find_spec("torch") is not None


def test_llama_1b_is_the_issue_model_with_llama_3_vocabulary():
    a = drv.parse_args(["--config", "llama-1b", "--block", "2048", "--batch", "8",
                        "--systems", "blu,torch-compile", "--modes", "bf16"])  # fmt: skip
    assert a.vocab == 128256  # Llama 3's tokenizer, a multiple of the config's padding (64)
    assert drv.model_dims(a.config, a.vocab) == dict(
        vocab=128256, n_layer=16, n_head=32, d_model=2048, n_ctx=2048, arch="llama",
        n_kv_head=8, d_ff=8192, rope_theta=500000.0, norm_eps=1e-5,
    )  # fmt: skip
    torch_cmd = drv.worker_command("torch-compile", "bf16", a)
    for flag in ("--arch=llama", "--n-kv-head=8", "--d-ff=8192", "--rope-theta=500000.0",
                 "--vocab=128256", "--B=8", "--T=2048", "--compile"):  # fmt: skip
        assert flag in torch_cmd
    blu_cmd = drv.worker_command("blu", "bf16", a)
    assert "--config=llama-1b" in blu_cmd and "--vocab=128256" in blu_cmd
    assert drv.parse_args(["--config", "gpt2-124m"]).vocab == 50257


def test_jax_and_too_long_blocks_are_refused_for_llama(capsys):
    assert drv.cli([*TINY, "--systems", "blu,jax"]) == 2
    assert "--systems jax" in capsys.readouterr().err
    assert drv.parse_args(["--config", "llama-1b"]).systems == ["blu", "torch", "torch-compile"]
    assert drv.cli(["--config", "llama-1b", "--block", "4096"]) == 2
    assert "--block 4096" in capsys.readouterr().err


def test_numpy_init_scales_the_residual_projections():
    cfg = blu_models.model_config("llama-small", 512)
    named = blu_models.params_to_named(blu_models.host_params(cfg, 0, "numpy"))
    small = 0.02 / math.sqrt(2 * cfg.n_layer)
    for name, std in (("params.layers.0.attn.wq", 0.02), ("params.layers.1.attn.wo", small),
                      ("params.layers.2.mlp.w_down", small), ("params.head", 0.02),
                      ("params.embed", 0.02)):  # fmt: skip
        assert named[name].std() == pytest.approx(std, rel=0.05), name
    assert np.all(named["params.layers.0.attn_norm.g"] == 1) and np.all(named["params.norm.g"] == 1)
    assert named["params.layers.0.attn.wk"].shape == (cfg.d_model, cfg.n_kv_head * cfg.head_dim)
    with pytest.raises(ValueError, match="scan-layers"):
        blu_models.model_config("llama-tiny", 256, scan_layers=True)


@pytest.mark.skipif(not HAS_TORCH, reason="needs PyTorch")
def test_torch_llama_loads_every_blu_weight_transposed(tmp_path):
    from benchmarks.peers import torch_gpt2, torch_llama

    cfg = blu_models.model_config("llama-tiny", 256)
    named = blu_models.params_to_named(blu_models.host_params(cfg))
    m = torch_llama.Llama(cfg.vocab_size, cfg.n_layer, cfg.n_head, cfg.d_model, cfg.n_ctx,
                          cfg.n_kv_head, cfg.d_ff, cfg.rope_theta, cfg.norm_eps)  # fmt: skip
    names = torch_llama.blu_name_map(cfg.n_layer)
    assert set(names) == set(named)
    assert {d for d, _ in names.values()} == {n for n, _ in m.named_parameters()}
    path = tmp_path / "w.npz"
    np.savez(path, **named)
    torch_gpt2.load_blu_weights(m, str(path), cfg.n_layer, "llama")
    w = dict(m.named_parameters())
    np.testing.assert_array_equal(
        w["layers.1.wk.weight"].detach().numpy(), named["params.layers.1.attn.wk"].T
    )
    np.testing.assert_array_equal(w["head.weight"].detach().numpy(), named["params.head"])
    assert m.head.weight is not m.embed.weight  # untied
    np.savez(path, **{k: v for k, v in named.items() if k != "params.head"})
    with pytest.raises(ValueError, match="missing"):
        torch_gpt2.load_blu_weights(m, str(path), cfg.n_layer, "llama")


@pytest.mark.skipif(not HAS_TORCH, reason="needs PyTorch")
def test_torch_rope_is_blus_rotate_half():
    import torch

    from benchmarks.peers import torch_llama
    from examples.gpt2 import llama

    cos, sin = torch_llama.rope_tables(7, 8, 500000.0)
    bcos, bsin = llama.rope_tables(np.arange(7), 8, 500000.0)
    np.testing.assert_array_equal(cos.numpy(), bcos)
    np.testing.assert_array_equal(sin.numpy(), bsin)
    x = np.random.default_rng(0).standard_normal((1, 7, 2, 8)).astype(np.float32)  # (B, T, H, D)
    want = np.asarray(llama.apply_rope(x, bcos, bsin))
    got = torch_llama.apply_rope(torch.from_numpy(x).transpose(1, 2), cos, sin).transpose(1, 2)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)


@pytest.mark.skipif(not HAS_TORCH, reason="needs PyTorch")
def test_fidelity_blu_llama_against_torch_llama_on_tiny(tmp_path):
    tokens = tmp_path / "tokens.npy"
    rng = np.random.default_rng(0)
    np.save(tokens, (np.cumsum(rng.integers(1, 4, 20_000)) % 256).astype(np.uint16))
    res = tmp_path / "r.json"
    argv = [*TINY, "--systems", "blu,torch", "--no-throughput", "--fidelity",
            "--fidelity-steps", "4", "--data", str(tokens), "--json", str(res),
            "--workdir", str(tmp_path / "w")]  # fmt: skip
    assert drv.main(argv) == 0
    recs = report.load(res)["fidelity"]
    assert {(r["system"], r["check"]) for r in recs} == {
        (s, c) for s in ("blu", "torch") for c in ("fp32", "bf16")
    }
    assert all(r["ok"] for r in recs), [r["error"] for r in recs]
    checks = {c["check"]: c for c in fidelity.compare(recs)}
    assert checks["fp32"]["passed"], checks["fp32"]["detail"]  # 3 losses and a norm to 1e-4
    assert checks["bf16"]["passed"] and checks["bf16"]["steps"] == 4
    blu_fp32 = next(r for r in recs if r["system"] == "blu" and r["check"] == "fp32")
    assert blu_fp32["losses"][0] == pytest.approx(math.log(256), rel=0.05)  # ~uniform at init


def test_gpt2_at_8192_tokens_needs_a_longer_position_table(capsys):
    long = ["--config", "gpt2-124m", "--block", "8192", "--batch", "8", "--modes", "bf16"]
    assert drv.cli(long) == 2
    assert "--n-ctx 8192" in capsys.readouterr().err  # the error names the way out
    a = drv.parse_args([*long, "--n-ctx", "8192"])
    assert drv.model_dims(a.config, a.vocab, a.n_ctx)["n_ctx"] == 8192
    for system in ("blu", "torch-compile"):  # every system builds the same 8192-row table
        assert "--n-ctx=8192" in drv.worker_command(system, "bf16", a)
    params = blu_models.param_specs(blu_models.model_config("gpt2-124m", 50257, n_ctx=8192))
    assert params["wpe"].shape == (8192, 768)
    assert drv.cli([*long, "--n-ctx", "0"]) == 2
    assert "--n-ctx must be positive" in capsys.readouterr().err


def test_the_gpt2_section_of_benchmarks_md_is_not_written_for_llama(capsys):
    assert drv.cli([*TINY, "--update-benchmarks"]) == 2
    assert "--update-benchmarks" in capsys.readouterr().err


@pytest.mark.skipif(not HAS_TORCH, reason="needs PyTorch")
def test_torch_gqa_by_sdpa_equals_repeated_kv_heads(monkeypatch):
    import torch

    from benchmarks.peers import torch_llama

    assert not torch_llama.sdpa_reads_gqa(torch.float32)  # enable_gqa would be the math kernel
    torch.manual_seed(0)
    blk = torch_llama.Block(32, 4, 2, 64, 1e-5)
    x = torch.randn(2, 8, 32)
    cos, sin = torch_llama.rope_tables(8, 8, 10000.0)
    out = {}
    for mode in ("repeat", "sdpa"):
        monkeypatch.setattr(torch_llama, "GQA_MODE", mode)
        out[mode] = blk.attention(x, cos, sin).detach().numpy()
    np.testing.assert_allclose(out["sdpa"], out["repeat"], rtol=1e-5, atol=1e-6)
