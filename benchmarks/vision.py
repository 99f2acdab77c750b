"""Vision training throughput: blu vs PyTorch eager (channels_last) vs torch.compile on ResNet-50
(batch 256, 224x224) and ViT-B/16, images/s and peak memory, from the same initial weights.

Each (model, system, mode) runs in its own process (``benchmarks/peers/blu_vision.py``,
``torch_vision.py``: one JSON line each, so each peak is the run's own); the step is a forward
in training mode, cross-entropy, backward and SGD with momentum on one random NHWC batch. The
first ``--fidelity-steps`` steps are then run in fp32 by every system from the same weights on
the same batches, and their losses compared (relative difference at most ``--fidelity-rtol``).

``--tiny`` is the CPU smoke mode: resnet-tiny and vit-tiny, batch 4, 8x8 images, two timed
steps, fp32, torch.compile left out (a systems list given still wins); PyTorch missing: its
rows are skipped with a note, not failed.

    python benchmarks/vision.py                       # the GPU run (H200)
    python benchmarks/vision.py --tiny                # CPU smoke
    python benchmarks/vision.py --models resnet50 --systems blu,torch --modes bf16
    python benchmarks/vision.py --fill                # here, before the GPU run: blu's kernels

``--fill`` runs nothing: it lowers and compiles blu's programs of the same flags (every model
and mode's step, and the fp32 fidelity step) for ``cuda:sm_90`` into the kernel cache
(``BLU_CACHE_DIR``), since the GPU machine has no MLIR; ``scripts/fill_gpu_cache.py`` calls it.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.peers import blu_vision  # noqa: E402

SYSTEMS = ("blu", "torch", "torch-compile")
MODES = ("bf16", "tf32", "fp32")
MODELS = ("resnet50", "vit-b16")
TINY_MODELS = ("resnet-tiny", "vit-tiny")
PEERS = ROOT / "benchmarks" / "peers"
DEFAULT_WORKDIR = ROOT / ".cache" / "bench_vision"


class BenchmarkError(Exception):
    """A flag the benchmark cannot use (printed as ``error: ...``, exit status 2)."""


def _csv(value: str, allowed: tuple[str, ...], flag: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items or any(v not in allowed for v in items):
        raise BenchmarkError(f"{flag} takes a comma-separated list of {', '.join(allowed)}")
    return list(dict.fromkeys(items))


def build_parser() -> argparse.ArgumentParser:
    doc = __doc__ or ""
    p = argparse.ArgumentParser(
        prog="python benchmarks/vision.py",
        description=doc.split("\n\n")[0],
        epilog="\n\n".join(doc.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--models", default=None, help="default: resnet50,vit-b16 (--tiny: the tiny)")
    p.add_argument("--systems", default=None, help="default: blu,torch,torch-compile")
    p.add_argument("--modes", default=None, help="default: bf16,tf32 for ResNet-50, bf16 for ViT")
    p.add_argument("--batch", type=int, default=None, help="default 256 (--tiny: 4)")
    p.add_argument("--steps", type=int, default=None, help="timed steps (default 20; --tiny 2)")
    p.add_argument("--warmup", type=int, default=None, help="default 5 (--tiny 1)")
    p.add_argument("--fidelity-steps", type=int, default=3, metavar="N", help="0: none")
    p.add_argument("--fidelity-batch", type=int, default=None, help="default 32 (--tiny 4)")
    p.add_argument("--fidelity-rtol", type=float, default=1e-3)
    p.add_argument("--tiny", action="store_true", help="CPU smoke mode (see above)")
    p.add_argument("--workdir", default=str(DEFAULT_WORKDIR), help="weights and batches")
    p.add_argument("--json", default=None, metavar="PATH", help="append the records (JSON lines)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per process (default 600)")
    p.add_argument("--fill", action="store_true", help="compile blu's GPU programs (see above)")
    return p


def resolve(a: argparse.Namespace) -> argparse.Namespace:
    """Fill the defaults (per ``--tiny``) and check the flags."""
    a.models = _csv(a.models or ",".join(TINY_MODELS if a.tiny else MODELS),
                    MODELS + TINY_MODELS, "--models")  # fmt: skip
    sys_default = ("blu", "torch") if a.tiny else SYSTEMS
    a.systems = _csv(a.systems or ",".join(sys_default), SYSTEMS, "--systems")
    a.modes = _csv(a.modes, MODES, "--modes") if a.modes else None
    a.batch = a.batch or (4 if a.tiny else 256)
    a.steps = a.steps or (2 if a.tiny else 20)
    a.warmup = a.warmup if a.warmup is not None else (1 if a.tiny else 5)
    a.fidelity_batch = a.fidelity_batch or (4 if a.tiny else 32)
    for flag in ("batch", "steps", "fidelity_batch"):
        if getattr(a, flag) < 1:
            raise BenchmarkError(f"--{flag.replace('_', '-')} must be >= 1")
    return a


def modes_for(a: argparse.Namespace, model: str) -> list[str]:
    if a.modes:
        return a.modes
    if a.tiny:
        return ["fp32"]
    return ["bf16", "tf32"] if model.startswith("resnet") else ["bf16"]


def prepare(model: str, a: argparse.Namespace, work: Path) -> tuple[Path, Path, str]:
    """Blu's initial weights and the fidelity batches as ``.npz``, and the config as JSON."""
    module, cfg, params, stats = blu_vision.init_state(model, None)
    weights = work / f"{model}.weights.npz"
    flat = {**blu_vision.flatten(params, "params"), **blu_vision.flatten(stats, "batch_stats")}
    np.savez(weights, **flat)
    rng = np.random.default_rng(2)
    s, c = getattr(cfg, "image_size", 224), cfg.in_channels
    n, b = max(a.fidelity_steps, 1), a.fidelity_batch
    x = rng.standard_normal((n, b, s, s, c), np.float32)
    y = rng.integers(0, cfg.num_classes, (n, b)).astype(np.int32)
    batches = work / f"{model}.batches.npz"
    np.savez(batches, x=x, y=y)
    return weights, batches, json.dumps(dataclasses.asdict(cfg))


def run_peer(system: str, args: list[str], cfg_json: str, weights: Path,
             timeout: float | None = None) -> dict:  # fmt: skip
    """One peer process; its JSON line, or ``{"ok": False, "error": ...}``. Its output is kept
    in ``<workdir>/logs/`` (named by system and flags)."""
    if system == "blu":
        cmd = [sys.executable, str(PEERS / "blu_vision.py"), *args]
    else:
        cmd = [sys.executable, str(PEERS / "torch_vision.py"), *args,
               "--config-json", cfg_json, "--weights", str(weights)]  # fmt: skip
        if system == "torch-compile":
            cmd.append("--compile")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"system": system, "ok": False, "error": f"timed out after {timeout:.0f} s"}
    logs = weights.parent / "logs"
    logs.mkdir(exist_ok=True)
    name = "_".join([system, *(v for v in args if not v.startswith(("-", "/")))])
    (logs / f"{name}.log").write_text(p.stdout + "\n---- stderr\n" + p.stderr)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not lines:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        return {"system": system, "ok": False, "error": " | ".join(tail)}
    return {**json.loads(lines[-1]), "ok": True}


def fill(a: argparse.Namespace) -> None:
    """Compile blu's programs of this run for the GPU (``--fill``)."""
    for model in a.models:
        jobs = [(mode, a.batch, blu_vision.LR) for mode in modes_for(a, model)]
        if a.fidelity_steps:
            jobs.append(("fp32", a.fidelity_batch, blu_vision.FIDELITY_LR))
        for mode, batch, lr in jobs:
            t = time.perf_counter()
            blu_vision.compile_program(model, mode, batch, lr)
            print(f"[vision] {model} {mode} batch {batch} (lr {lr}): compiled for cuda:sm_90 "
                  f"in {time.perf_counter() - t:.0f} s", flush=True)  # fmt: skip


def main(argv: list[str] | None = None) -> list[dict]:
    a = resolve(build_parser().parse_args(argv))
    if a.fill:
        fill(a)
        return []
    has_torch = importlib.util.find_spec("torch") is not None
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    records: list[dict] = []
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for model in a.models:
        weights, batches, cfg_json = prepare(model, a, work)
        for system in a.systems:
            if system != "blu" and not has_torch:
                print(f"{model} {system}: skipped (PyTorch is not installed)")
                continue
            for mode in modes_for(a, model):
                args = ["--model", model, "--mode", mode, "--batch", str(a.batch),
                        "--steps", str(a.steps), "--warmup", str(a.warmup)]  # fmt: skip
                r = {**run_peer(system, args, cfg_json, weights, a.timeout), "model": model,
                     "mode": mode, "date": date}  # fmt: skip
                records.append(r)
                print(_row(r), flush=True)
        if a.fidelity_steps:
            records.append(check_fidelity(model, a, weights, batches, cfg_json, has_torch))
    if a.json:
        with open(a.json, "a", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
    return records


def check_fidelity(model, a, weights, batches, cfg_json, has_torch) -> dict:
    """fp32 losses of the first steps, every system against blu's."""
    out: dict = {"check": "fidelity", "model": model, "steps": a.fidelity_steps, "losses": {}}
    for system in a.systems:
        if system != "blu" and not has_torch:
            continue
        path = Path(a.workdir) / f"{model}.{system}.fidelity.json"
        args = ["--model", model, "--mode", "fp32", "--fidelity", "--weights", str(weights),
                "--batches", str(batches), "--steps", str(a.fidelity_steps),
                "--out", str(path)]  # fmt: skip
        r = run_peer(system, args, cfg_json, weights, a.timeout)
        out["losses"][system] = r.get("losses") if r["ok"] else None
        if not r["ok"]:
            out.setdefault("errors", {})[system] = r["error"]
    ref = out["losses"].get("blu")
    worst = 0.0
    for system, losses in out["losses"].items():
        if system == "blu" or losses is None or ref is None:
            continue
        worst = max(worst, float(np.max(np.abs(np.subtract(losses, ref)) / np.abs(ref))))
    out["max_rel_diff"] = worst
    out["ok"] = ref is not None and worst <= a.fidelity_rtol and "errors" not in out
    verdict = "ok" if out["ok"] else "FAILED"
    losses = ", ".join(f"{k} {v}" for k, v in out["losses"].items())
    print(
        f"{model} fidelity (fp32, {a.fidelity_steps} steps): {losses}; "
        f"max relative difference {worst:.2e} -> {verdict}"
    )
    return out


def _row(r: dict) -> str:
    if not r["ok"]:
        return f"{r['model']:<12} {r['system']:<14} {r['mode']:<5} failed: {r['error']}"
    peak = f"{r['peak_GiB']:.2f} GiB" if r.get("peak_GiB") is not None else "-"
    return (f"{r['model']:<12} {r['system']:<14} {r['mode']:<5} {r['images_s']:>10,.1f} images/s"
            f"  {r['step_ms']:>9.2f} ms/step  peak {peak}  ({r['device']})")  # fmt: skip


def cli(argv: list[str] | None = None) -> int:
    try:
        main(argv)
    except BenchmarkError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli())
