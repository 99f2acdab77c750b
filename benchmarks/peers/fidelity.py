"""Fidelity of blu against PyTorch on GPT-2: the shared inputs and the comparison (issue #7).

Both sides start from the same initial weights (made by blu's side on the host, written as a
``.npz`` of ``params.<key path>`` arrays) and train on the same batches (a ``.npz`` of ``x``,
``y``: int32 ``(N, B, T)``, windows of real text). Two checks:

- ``fp32``: the losses of the first :data:`FP32_STEPS` steps and the gradient's global norm at
  step 1 agree to :data:`FP32_TOL` relative (``|blu - torch| / |torch|``);
- ``bf16``: over all steps run (200 by default) the per-step losses stay within
  :data:`BF16_TOL` relative of each other.

Tokens come from GPT-2 BPE of ``pd_books.txt`` (13 public-domain books, ~3.1M tokens; see
``shared/data/README.md``), pre-tokenized to ``pd_books.gpt2.npy`` by :func:`prepare_tokens` so
the GPU machine needs neither tiktoken nor ``../shared``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
FP32_STEPS, FP32_TOL, BF16_TOL = 3, 1e-4, 0.02
TEXT_FILE, TOKENS_FILE = "pd_books.txt", "pd_books.gpt2.npy"
SYNTHETIC_TOKENS = 1 << 20


class FidelityError(Exception):
    """Fidelity inputs that cannot be made (no corpus to tokenize, a damaged token file)."""


@dataclasses.dataclass(frozen=True)
class Inputs:
    """The files both sides read, what they hold and a digest of their contents."""

    weights: Path
    batches: Path
    inputs_id: str
    data: str


def data_dirs() -> list[Path]:
    """Where token files are looked for: ``$BLU_DATA_DIR``, ``.data`` and ``.cache/data`` in the
    repo (git-ignored; ``.data`` travels to the GPU machine), ``../shared/data``."""
    env = os.environ.get("BLU_DATA_DIR", "")
    dirs = [Path(env)] if env else []
    return dirs + [ROOT / ".data", ROOT / ".cache" / "data", ROOT.parent / "shared" / "data"]


def find_token_source(data: str | os.PathLike | None = None) -> Path | None:
    """``data`` if given, else the first ``pd_books.gpt2.npy`` found, else the first
    ``pd_books.txt``."""
    if data is not None:
        return Path(data)
    for name in (TOKENS_FILE, TEXT_FILE):
        for d in data_dirs():
            if (d / name).is_file():
                return d / name
    return None


def load_tokens(path: Path) -> np.ndarray:
    """Token ids from a ``.npy`` (1-D integers) or a UTF-8 ``.txt`` (GPT-2 BPE via the
    example's tokenizer, its files looked for beside the text first).

    Raises:
        FidelityError: not 1-D integers, or too few tokens.
    """
    if path.suffix == ".npy":
        tokens = np.load(path)
    else:
        from examples.gpt2.data import DataError, GPT2Tokenizer, read_corpus

        try:
            try:
                tok = GPT2Tokenizer(data_dir=path.parent)
            except DataError:
                tok = GPT2Tokenizer()
            tokens = tok.encode(read_corpus(path))
        except DataError as e:
            raise FidelityError(str(e)) from None
    if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer) or len(tokens) < 2:
        raise FidelityError(
            f"{path}: expected 1-D integer token ids, got {tokens.dtype}{list(tokens.shape)}"
        )
    return tokens


def prepare_tokens(data: str | None = None, out: Path | None = None) -> Path:
    """Tokenize the corpus (``data`` or the first ``pd_books.txt`` found) into ``out`` (default
    ``.data/pd_books.gpt2.npy``, uint16).

    Raises:
        FidelityError: no text corpus found.
    """
    src = (
        Path(data)
        if data
        else next((d / TEXT_FILE for d in data_dirs() if (d / TEXT_FILE).is_file()), None)
    )
    if src is None or src.suffix == ".npy":
        raise FidelityError(
            f"no {TEXT_FILE} to tokenize in {', '.join(map(str, data_dirs()))}; "
            "pass --data CORPUS.txt"
        )
    tokens = load_tokens(src)
    out = out or ROOT / ".data" / TOKENS_FILE
    out.parent.mkdir(parents=True, exist_ok=True)
    np.save(out, tokens.astype(np.uint16 if tokens.max() < 1 << 16 else np.int32))
    return out


def make_batches(tokens: np.ndarray, n: int, batch: int, block: int, seed: int):
    """``n`` batches of random windows: ``x, y`` int32 ``(n, batch, block)``, ``y`` shifted.

    Raises:
        FidelityError: fewer than ``block + 1`` tokens.
    """
    if len(tokens) <= block:
        raise FidelityError(f"{len(tokens)} tokens cannot fill a window of {block + 1}")
    rng = np.random.default_rng(seed + 1)
    starts = rng.integers(0, len(tokens) - block, (n, batch))
    win = tokens[starts[..., None] + np.arange(block + 1)].astype(np.int32)
    return win[..., :-1], win[..., 1:]


def digest(arrays: dict[str, np.ndarray]) -> str:
    """sha256 over names, dtypes, shapes and bytes, in name order."""
    h = hashlib.sha256()
    for k in sorted(arrays):
        v = np.ascontiguousarray(arrays[k])
        h.update(f"{k}|{v.dtype.str}|{v.shape}|".encode())
        h.update(v.data)
    return h.hexdigest()


def _tokens_for(vocab: int, data: str | None, seed: int) -> tuple[np.ndarray, str]:
    src = find_token_source(data)
    if src is None:  # no corpus at all: uniform random tokens, marked as such
        rng = np.random.default_rng(seed)
        return rng.integers(0, vocab, SYNTHETIC_TOKENS), "synthetic (no corpus found)"
    tokens = load_tokens(src)
    desc = f"{src.name} ({len(tokens):,} GPT-2 tokens)"
    if int(tokens.max()) >= vocab:
        tokens, desc = tokens % vocab, desc + f" folded into {vocab} ids"
    return tokens, desc


def prepare_inputs(
    workdir: Path,
    config: str,
    vocab: int,
    padded_vocab: int,
    batch: int,
    block: int,
    steps: int,
    seed: int,
    init: str,
    data: str | None = None,
    n_ctx: int | None = None,
) -> Inputs:
    """Write (or reuse) the initial weights and write the batches for both sides.

    The weights (``host_params`` of ``benchmarks/peers/blu_gpt2.py``) are kept in ``workdir``
    by config, vocabulary, seed and init, with their digest beside them, so later invocations
    reuse them; the batches are remade each time (cheap, deterministic from ``seed``).
    ``n_ctx``: the model's context if not the config's (GPT-2's position table).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    ctx = "" if n_ctx is None else f"-c{n_ctx}"
    stem = f"weights-{config}{ctx}-v{padded_vocab}-s{seed}-{init}"
    weights, weights_sha = workdir / f"{stem}.npz", workdir / f"{stem}.sha256"
    if not (weights.is_file() and weights_sha.is_file()):
        from benchmarks.peers.blu_gpt2 import host_params, model_config, params_to_named

        named = params_to_named(host_params(model_config(config, vocab, n_ctx=n_ctx), seed, init))
        tmp = workdir / f".{stem}.{os.getpid()}.npz"
        np.savez(tmp, **named)
        os.replace(tmp, weights)
        weights_sha.write_text(digest(named))
    tokens, desc = _tokens_for(padded_vocab, data, seed)
    x, y = make_batches(tokens, steps, batch, block, seed)
    batches = workdir / f"batches-{config}-B{batch}-T{block}-n{steps}-s{seed}.npz"
    np.savez(batches, x=x, y=y)
    both = weights_sha.read_text().strip() + digest({"x": x, "y": y})
    return Inputs(weights, batches, hashlib.sha256(both.encode()).hexdigest()[:16], desc)


# ---- the comparison ----------------------------------------------------------------------------


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if b else abs(a - b)


def compare(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per check (``fp32``, ``bf16``) from the fidelity records of blu and torch.

    Returns:
        ``{"check", "steps", "data", "passed" (True, False or None when it cannot be judged),
        "worst_rel", "tol", "detail"}`` per check that has any record.
    """
    rows = []
    for check, tol in (("fp32", FP32_TOL), ("bf16", BF16_TOL)):
        side = {r["system"]: r for r in records if r.get("check") == check}
        if not side:
            continue
        row = dict(check=check, steps=None, data=None, passed=None, worst_rel=None, tol=tol)
        b, t = side.get("blu"), side.get("torch")
        missing = [n for n, r in (("blu", b), ("torch", t)) if r is None]
        failed = [n for n, r in (("blu", b), ("torch", t)) if r is not None and not r.get("ok")]
        if missing or failed:
            why = [f"no {n} result" for n in missing]
            why += [f"{n} failed: {side[n].get('error')}" for n in failed]
            rows.append(dict(row, detail="; ".join(why)))
            continue
        if b["inputs"] != t["inputs"]:
            rows.append(
                dict(
                    row,
                    detail=f"different inputs (blu {b['inputs']}, torch "
                    f"{t['inputs']}): run both sides again",
                )
            )
            continue
        bl, tl = b["losses"], t["losses"]
        want = FP32_STEPS if check == "fp32" else max(b["steps"], t["steps"])
        n = min(len(bl), len(tl), want)
        if n < want:
            rows.append(dict(row, passed=False, detail=f"{n} steps compared, {want} needed"))
            continue
        rel = [_rel(bl[i], tl[i]) for i in range(n)]
        if check == "fp32":
            norm_rel = _rel(b["grad_norms"][0], t["grad_norms"][0])
            worst = max(rel + [norm_rel])
            detail = (
                ", ".join(f"loss {i + 1}: {bl[i]:.6f} vs {tl[i]:.6f}" for i in range(n))
                + f"; grad norm 1: {b['grad_norms'][0]:.6g} vs {t['grad_norms'][0]:.6g} "
                f"(rel {norm_rel:.1e}); worst loss rel {max(rel):.1e}"
            )
        else:
            worst = max(rel)
            at = int(np.argmax(rel)) + 1
            detail = (
                f"loss {bl[0]:.3f} -> {bl[n - 1]:.3f} (blu), {tl[0]:.3f} -> {tl[n - 1]:.3f}"
                f" (torch); worst step {at}: {bl[at - 1]:.4f} vs {tl[at - 1]:.4f}"
            )
        rows.append(
            dict(
                row,
                steps=n,
                data=b.get("data"),
                passed=bool(worst <= tol),
                worst_rel=float(worst),
                detail=detail,
            )
        )
    return rows
