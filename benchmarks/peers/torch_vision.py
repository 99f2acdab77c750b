"""The vision training step in PyTorch (eager, channels_last; ``--compile``: torch.compile):
throughput (one JSON line) and the fidelity run against blu. Flags and JSON as
``blu_vision.py`` (its docstring describes the measurement).

The networks are written here as functions over the same nested dict as
``examples.vision`` (the same names, the same initial values in a fidelity run): a kernel
stored HWIO by blu is permuted to PyTorch's OIHW once at load; images arrive NHWC, which is
PyTorch's ``channels_last`` memory format of the NCHW tensor. Batch norm is
``F.batch_norm`` (running statistics updated in place, unbiased variance, momentum 0.1 =
blu's 0.9). SGD is ``torch.optim.SGD(momentum=0.9, foreach=True)``. Modes: ``fp32`` (TF32
off), ``tf32`` (TF32 convolutions and products), ``bf16`` (autocast to bfloat16).

``$BENCH_TORCH_PROFILE=n`` profiles ``n`` more steps after the timed ones (``torch.profiler``:
the kernels' table to stderr).

The model shapes come as ``--config-json`` (the example's config as a dict; the driver passes
it) so that this process never imports blu.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

try:  # run as a script (benchmarks/peers on sys.path) or imported from the repo root
    import torch_profile
except ImportError:
    from benchmarks.peers import torch_profile

LR, MOMENTUM, FIDELITY_LR = 0.1, 0.9, 0.01
MODES = ("fp32", "tf32", "bf16")


def _bn(x, p, s, train: bool, momentum: float):
    return F.batch_norm(x, s["mean"], s["var"], p["scale"], p["bias"], train, 1.0 - momentum, 1e-5)


def _conv(x, w, stride: int = 1):
    return F.conv2d(x, w, stride=stride, padding=w.shape[-1] // 2)


def resnet(P, S, x, c: dict, train: bool):
    m, bottleneck = c["momentum"], c["block"] == "bottleneck"
    h = F.relu(_bn(_conv(x, P["stem"]["conv"], 2 if c["stem"] == "imagenet" else 1),
                   P["stem"]["bn"], S["stem"]["bn"], train, m))  # fmt: skip
    if c["stem"] == "imagenet":
        h = F.max_pool2d(h, 3, 2, 1)
    i = 0
    for n, stride0 in zip(c["layers"], c["strides"]):
        for j in range(n):
            p, s, stride = P[f"block{i}"], S[f"block{i}"], stride0 if j == 0 else 1
            n_conv = 3 if bottleneck else 2
            y = h
            for k in range(1, n_conv + 1):
                sk = stride if k == (2 if bottleneck else 1) else 1
                y = _bn(_conv(y, p[f"conv{k}"], sk), p[f"bn{k}"], s[f"bn{k}"], train, m)
                if k < n_conv:
                    y = F.relu(y)
            sc = _bn(_conv(h, p["proj"], stride), p["proj_bn"], s["proj_bn"], train, m) \
                if "proj" in p else h  # fmt: skip
            h = F.relu(y + sc)
            i += 1
    return h.float().mean(dim=(2, 3)) @ P["head"]["w"] + P["head"]["b"]


def vit(P, S, x, c: dict, train: bool):
    d, heads, p = c["dim"], c["heads"], c["patch"]
    h = F.conv2d(x, P["patch"]["w"], P["patch"]["b"], stride=p).flatten(2).transpose(1, 2)
    n, t = h.shape[0], h.shape[1] + 1
    h = torch.cat([P["cls"].expand(n, 1, d).to(h.dtype), h], dim=1) + P["pos"]
    for i in range(c["depth"]):
        b = P[f"block{i}"]
        a = F.layer_norm(h, (d,), b["ln1"]["scale"], b["ln1"]["bias"], 1e-6)
        qkv = (a @ b["qkv"]["w"] + b["qkv"]["b"]).view(n, t, 3, heads, d // heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(n, t, d)
        h = h + a @ b["out"]["w"] + b["out"]["b"]
        a = F.layer_norm(h, (d,), b["ln2"]["scale"], b["ln2"]["bias"], 1e-6)
        a = F.gelu(a @ b["fc1"]["w"] + b["fc1"]["b"])
        h = h + a @ b["fc2"]["w"] + b["fc2"]["b"]
    h = F.layer_norm(h[:, 0], (d,), P["ln"]["scale"], P["ln"]["bias"], 1e-6)
    return h.float() @ P["head"]["w"] + P["head"]["b"]


def load(flat: dict[str, np.ndarray], device, grad: bool) -> tuple[dict, dict]:
    """``params`` and ``batch_stats`` dicts of tensors from blu's flat names and layouts."""
    trees: dict = {"params": {}, "batch_stats": {}}
    for name, v in flat.items():
        parts = name.split("/")
        t = torch.from_numpy(np.ascontiguousarray(v)).to(device)
        if t.ndim == 4:  # HWIO -> OIHW, stored channels_last as the activations
            t = t.permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
        if parts[0] == "params":
            t.requires_grad_(grad)
        d = trees[parts[0]]
        for p in parts[1:-1]:
            d = d.setdefault(p, {})
        d[parts[-1]] = t
    return trees["params"], trees["batch_stats"]


def leaves(tree: dict) -> list:
    return [x for v in tree.values() for x in (leaves(v) if isinstance(v, dict) else [v])]


def set_mode(mode: str) -> None:
    tf32 = mode != "fp32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32


def make_step(c: dict, P: dict, S: dict, mode: str, compile_: bool, lr: float):
    fwd = resnet if "block" in c else vit
    dev = leaves(P)[0].device.type
    opt = torch.optim.SGD(leaves(P), lr=lr, momentum=MOMENTUM, foreach=True)

    def loss_fn(x, y):
        with torch.autocast(dev, torch.bfloat16, enabled=mode == "bf16"):
            return F.cross_entropy(fwd(P, S, x, c, True).float(), y)

    loss_fn = torch.compile(loss_fn) if compile_ else loss_fn

    def step(x, y):
        loss = loss_fn(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def _images(x: np.ndarray, device) -> torch.Tensor:
    # NHWC memory is the channels_last format of the NCHW tensor: a view, no copy
    return torch.from_numpy(np.ascontiguousarray(x)).to(device).permute(0, 3, 1, 2)


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def bench(a: argparse.Namespace) -> dict:
    c = json.loads(a.config_json)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    set_mode(a.mode)
    with np.load(a.weights) as f:
        P, S = load(dict(f), device, grad=True)
    rng = np.random.default_rng(1)
    s = c.get("image_size", 224)
    x = _images(rng.standard_normal((a.batch, s, s, c["in_channels"]), np.float32), device)
    y = torch.from_numpy(rng.integers(0, c["num_classes"], a.batch)).to(device)
    step = make_step(c, P, S, a.mode, a.compile, LR)
    t0 = time.time()
    loss = None
    for _ in range(a.warmup):
        loss = step(x, y)
    _sync(device)
    warm_s = time.time() - t0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(a.steps):
        t = time.perf_counter()
        loss = step(x, y)
        _sync(device)
        times.append(time.perf_counter() - t)
    med = sorted(times)[len(times) // 2]
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else None
    if torch_profile.requested() and device.type == "cuda":
        torch_profile.profile_steps(lambda: step(x, y), torch_profile.requested())
    return dict(
        system="torch-compile" if a.compile else "torch", model=a.model, mode=a.mode, B=a.batch,
        image=s, params=sum(p.numel() for p in leaves(P)), images_s=round(a.batch / med, 1),
        step_ms=round(med * 1e3, 2), peak_GiB=None if peak is None else round(peak / 2**30, 3),
        warmup_s=round(warm_s, 1), loss=float(loss), device=device.type,
        version=torch.__version__,
    )  # fmt: skip


def fidelity(a: argparse.Namespace) -> dict:
    c = json.loads(a.config_json)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    set_mode(a.mode)
    with np.load(a.weights) as f:
        P, S = load(dict(f), device, grad=True)
    with np.load(a.batches) as f:
        xs, ys = f["x"][: a.steps], f["y"][: a.steps]
    step = make_step(c, P, S, a.mode, a.compile, FIDELITY_LR)
    losses = [float(step(_images(x, device), torch.from_numpy(y).long().to(device)))
              for x, y in zip(xs, ys)]  # fmt: skip
    system = "torch-compile" if a.compile else "torch"
    out = dict(system=system, model=a.model, mode=a.mode, steps=len(losses), losses=losses)
    Path(a.out).write_text(json.dumps(out))
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet50")
    p.add_argument("--config-json", required=True, help="the example's config as JSON")
    p.add_argument("--mode", default="fp32", choices=MODES)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--image-size", type=int, default=None, help="(in --config-json)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--fidelity", action="store_true")
    p.add_argument("--weights", required=True, help=".npz of blu's initial params/batch_stats")
    p.add_argument("--batches", help="(--fidelity) .npz with x, y")
    p.add_argument("--out", help="(--fidelity) JSON of the losses")
    return p


if __name__ == "__main__":
    a = build_parser().parse_args()
    print(json.dumps(fidelity(a) if a.fidelity else bench(a)), flush=True)
