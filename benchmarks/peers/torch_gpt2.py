"""GPT-2 training step in PyTorch: throughput (one JSON line) and the fidelity run against blu.

Throughput, measured as ``shared/reference/torch_gpt2.py`` measures it (the anchor of DESIGN.md
§5): GPT-2 with tied embeddings, SDPA causal attention, tanh GELU; fused AdamW (lr 6e-4, decay
0.1 on tensors with ``dim >= 2`` only); random tokens made once on the device; ``--warmup``
steps, then the peak-memory counter is reset and ``--steps`` steps are timed one by one with CUDA
events; tokens/s from the median step. ``--mode`` fp32 (strict: TF32 off), tf32 (TF32 matrix
products), bf16 (autocast to bfloat16, TF32 on, fp32 master weights). ``--compile`` wraps the
model in ``torch.compile``.

    python benchmarks/peers/torch_gpt2.py --mode bf16 [--compile]

Fidelity (``--fidelity``): loads blu's initial weights (``.npz`` of ``params.<key path>`` names,
linear weights stored ``(in, out)``), runs one step per batch of ``--batches`` (``.npz`` with
``x``, ``y``: int ``(N, B, T)``) with the same AdamW, and writes the loss of every step (before
its update) and the gradient's global norm of every step as JSON to ``--out``.

    python benchmarks/peers/torch_gpt2.py --fidelity --mode fp32 --weights w.npz \\
        --batches b.npz --steps 3 --out torch_fp32.json

The model size flags default to GPT-2 124M (vocabulary 50304, 12 layers, 12 heads, d=768,
context 1024); the driver ``benchmarks/gpt2_124m.py`` passes the config it measures, for a
``llama-*`` config with ``--arch llama`` and its sizes (the model of ``torch_llama.py``). Without a
GPU it runs on the CPU (for tests: timing by ``perf_counter``, no peak memory).
``$BENCH_TORCH_PROFILE=n`` profiles ``n`` more steps after the timed ones (``torch.profiler``'s
kernel table to stderr).
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

try:  # run as a script (benchmarks/peers on sys.path) or imported from the repo root
    import torch_llama
    import torch_profile
except ImportError:
    from benchmarks.peers import torch_llama, torch_profile

LR, BETAS, EPS, WEIGHT_DECAY = 6e-4, (0.9, 0.999), 1e-8, 0.1


class Block(nn.Module):
    """Pre-LayerNorm block: causal self-attention, then a 4x MLP with tanh GELU."""

    def __init__(self, d: int, n_head: int):
        super().__init__()
        self.d, self.n_head = d, n_head
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, _ = x.shape
        d, h = self.d, self.n_head
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (t.view(B, T, h, d // h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    """GPT-2 with the output projection tied to the token embedding; returns the mean loss."""

    def __init__(self, vocab: int, n_layer: int, n_head: int, d: int, n_ctx: int):
        super().__init__()
        self.vocab = vocab
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(n_ctx, d)
        self.blocks = nn.ModuleList(Block(d, n_head) for _ in range(n_layer))
        self.lnf = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, tgt):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.lnf(x))
        return F.cross_entropy(logits.float().view(-1, self.vocab), tgt.view(-1))


def make_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    """Fused AdamW; weight decay on matrices and embeddings only (``dim >= 2``)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [
        dict(params=decay, weight_decay=WEIGHT_DECAY),
        dict(params=no_decay, weight_decay=0.0),
    ]
    return torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS, fused=True)


def blu_name_map(n_layer: int) -> dict[str, tuple[str, bool]]:
    """``{blu tensor name: (torch parameter name, transpose?)}`` for blu's GPT-2 parameters
    (``examples/gpt2/model.py``: linears ``{"w": (in, out), "b"}``, norms ``{"g", "b"}``)."""
    m = {"params.wte": ("wte.weight", False), "params.wpe": ("wpe.weight", False)}
    norms = {"ln_1": "ln1", "ln_2": "ln2"}
    linears = {"attn.c_attn": "qkv", "attn.c_proj": "proj", "mlp.c_fc": "fc", "mlp.c_proj": "out"}
    m["params.ln_f.g"], m["params.ln_f.b"] = ("lnf.weight", False), ("lnf.bias", False)
    for i in range(n_layer):
        for src, dst in norms.items():
            m[f"params.h.{i}.{src}.g"] = (f"blocks.{i}.{dst}.weight", False)
            m[f"params.h.{i}.{src}.b"] = (f"blocks.{i}.{dst}.bias", False)
        for src, dst in linears.items():
            m[f"params.h.{i}.{src}.w"] = (f"blocks.{i}.{dst}.weight", True)
            m[f"params.h.{i}.{src}.b"] = (f"blocks.{i}.{dst}.bias", False)
    return m


def load_blu_weights(model: nn.Module, path: str, n_layer: int, arch: str = "gpt2") -> None:
    """Copy blu's initial weights into ``model``; every tensor must match by name and shape.

    Raises:
        ValueError: a name is missing or extra, or a shape differs.
    """
    with np.load(path) as f:
        tensors = {k: f[k] for k in f.files}
    names = (torch_llama.blu_name_map if arch == "llama" else blu_name_map)(n_layer)
    if set(tensors) != set(names):
        missing, extra = sorted(set(names) - set(tensors)), sorted(set(tensors) - set(names))
        raise ValueError(f"{path}: missing tensors {missing[:5]}, unexpected {extra[:5]}")
    own = dict(model.named_parameters())
    with torch.no_grad():
        for src, (dst, transpose) in names.items():
            t = torch.from_numpy(
                np.ascontiguousarray(tensors[src].T if transpose else tensors[src])
            )
            if tuple(t.shape) != tuple(own[dst].shape):
                raise ValueError(f"{src} has shape {tuple(t.shape)}, {dst} {tuple(own[dst].shape)}")
            own[dst].copy_(t)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", default="fp32", choices=["fp32", "tf32", "bf16"])
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--B", type=int, default=16, help="sequences per batch")
    p.add_argument("--T", type=int, default=1024, help="tokens per sequence")
    p.add_argument("--steps", type=int, default=30, help="timed steps (fidelity: steps run)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--n-layer", type=int, default=12)
    p.add_argument("--n-head", type=int, default=12)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--n-ctx", type=int, default=1024)
    p.add_argument(
        "--arch",
        default="gpt2",
        choices=["gpt2", "llama"],
        help="llama: the LLaMA-style decoder of torch_llama.py (the flags below)",
    )
    p.add_argument("--n-kv-head", type=int, default=None, help="llama: K/V heads")
    p.add_argument("--d-ff", type=int, default=None, help="llama: SwiGLU hidden width")
    p.add_argument("--rope-theta", type=float, default=10000.0, help="llama: RoPE base")
    p.add_argument("--norm-eps", type=float, default=1e-5, help="llama: RMSNorm epsilon")
    p.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    p.add_argument("--fidelity", action="store_true", help="run blu's weights and batches")
    p.add_argument("--weights", help="fidelity: blu's initial weights (.npz)")
    p.add_argument("--batches", help="fidelity: token batches (.npz with x, y of (N, B, T))")
    p.add_argument("--out", help="fidelity: where to write the JSON result")
    return p


def build_model(a: argparse.Namespace) -> nn.Module:
    """GPT-2 or (``--arch llama``) the LLaMA-style decoder, sized by the flags.

    Raises:
        SystemExit: ``--arch llama`` without ``--n-kv-head`` and ``--d-ff``.
    """
    if a.arch == "gpt2":
        return GPT(a.vocab, a.n_layer, a.n_head, a.d_model, a.n_ctx)
    if a.n_kv_head is None or a.d_ff is None:
        raise SystemExit("error: --arch llama needs --n-kv-head and --d-ff")
    return torch_llama.Llama(a.vocab, a.n_layer, a.n_head, a.d_model, a.n_ctx, a.n_kv_head,
                             a.d_ff, a.rope_theta, a.norm_eps)  # fmt: skip


def _device_name(dev: str) -> str:
    return torch.cuda.get_device_name() if dev == "cuda" else "cpu"


def main(argv: list[str] | None = None) -> dict:
    a = build_parser().parse_args(argv)
    dev = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = dev == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = a.mode != "fp32"
    torch.backends.cudnn.allow_tf32 = a.mode != "fp32"
    torch.manual_seed(0)
    m = build_model(a).to(dev)
    if a.fidelity:
        load_blu_weights(m, a.weights, a.n_layer, a.arch)
    nparams = sum(p.numel() for p in m.parameters())
    opt = make_optimizer(m)
    step_fn = torch.compile(m) if a.compile else m

    def step(x, y, norms=None):
        with torch.autocast(dev, dtype=torch.bfloat16, enabled=a.mode == "bf16"):
            loss = step_fn(x, y)
        loss.backward()
        if norms is not None:  # the gradients' global norm, in float64
            sq = sum(p.grad.double().pow(2).sum() for p in m.parameters())
            norms.append(math.sqrt(float(sq)))
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    if a.fidelity:
        with np.load(a.batches) as f:
            xs, ys = f["x"][: a.steps], f["y"][: a.steps]
        losses, norms = [], []
        for x, y in zip(xs, ys):
            x = torch.from_numpy(x.astype(np.int64)).to(dev)
            y = torch.from_numpy(y.astype(np.int64)).to(dev)
            losses.append(float(step(x, y, norms).detach()))
        out = dict(
            system="torch" + ("-compile" if a.compile else ""),
            mode=a.mode,
            B=int(xs.shape[1]),
            T=int(xs.shape[2]),
            steps=len(losses),
            losses=losses,
            grad_norms=norms,
            device=_device_name(dev),
            version=torch.__version__,
        )
        with open(a.out, "w") as fh:
            json.dump(out, fh)
        print(json.dumps({k: v for k, v in out.items() if k not in ("losses", "grad_norms")}))
        return out

    x = torch.randint(0, a.vocab, (a.B, a.T), device=dev)
    y = torch.randint(0, a.vocab, (a.B, a.T), device=dev)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    t0 = time.time()
    for _ in range(a.warmup):
        step(x, y)
    sync()
    warm_s = time.time() - t0
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(a.steps):
        if cuda:
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            loss = step(x, y)
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e) / 1e3)
        else:
            t = time.perf_counter()
            loss = step(x, y)
            times.append(time.perf_counter() - t)
    times.sort()
    med = times[len(times) // 2]
    peak = torch.cuda.max_memory_allocated() if cuda else None
    if cuda and torch_profile.requested():
        torch_profile.profile_steps(lambda: step(x, y), torch_profile.requested())
    gib = lambda n: round(n / 2**30, 3)  # noqa: E731
    out = dict(
        system="torch" + ("-compile" if a.compile else ""),
        mode=a.mode,
        B=a.B,
        T=a.T,
        params=nparams,
        tok_s=round(a.B * a.T / med),
        step_ms=round(med * 1e3, 2),
        peak_GiB=None if peak is None else gib(peak),
        reserved_GiB=gib(torch.cuda.max_memory_reserved()) if cuda else None,
        warmup_s=round(warm_s, 1),
        loss=float(loss.detach()),
        device=_device_name(dev),
        version=torch.__version__,
    )
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
