"""Checkpoints: tensors in safetensors, everything else in JSON, committed atomically.

A checkpoint folder holds

- ``ckpt-<step>.safetensors``: the parameters (``params.<path>``) and optimizer state
  (``opt.<path>``) as named tensors, ``<path>`` being the pytree key path with dots
  (``params.h.0.attn.c_attn.w``);
- ``ckpt.json``: the commit record: the metadata (model config, step, RNG seed, tokenizer,
  training flags, loss history), the tensor file's name, and its sha256.

Saving writes the new tensor file under a temporary name, renames it into place, then replaces
``ckpt.json`` (temporary file + ``os.replace``, atomic on POSIX) and only then deletes the
previous tensor file: a crash at any point leaves the old checkpoint or the new one, complete.
Loading checks the JSON, the hash and every tensor's name, shape and dtype before anything is
used; a damaged checkpoint raises :class:`CheckpointError` and is left as it is.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from examples.gpt2 import ExampleError
from examples.gpt2.data import atomic_write_bytes

FORMAT = "blu-gpt2-example"
VERSION = 1
RECORD = "ckpt.json"


class CheckpointError(ExampleError):
    """A checkpoint is missing, corrupt, or does not match the requested model or run."""


def _key_name(k: Any) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def flatten_named(tree: Any, prefix: str) -> dict[str, Any]:
    """``{"<prefix>.<dotted key path>": leaf}`` for every leaf of ``tree``."""
    from blu.core import pytree

    leaves, _ = pytree.tree_flatten_with_path(tree)
    out = {}
    for path, leaf in leaves:
        name = ".".join([prefix, *(_key_name(k) for k in path)])
        if name in out:
            raise CheckpointError(f"two leaves share the checkpoint name {name!r}")
        out[name] = leaf
    return out


def unflatten_named(template: Any, prefix: str, tensors: dict[str, np.ndarray], where: str) -> Any:
    """Rebuild ``template``'s structure from ``tensors``, checking names, shapes and dtypes.

    Raises:
        CheckpointError: a tensor is missing or has another shape or dtype than the template.
    """
    from blu.core import pytree

    named = flatten_named(template, prefix)
    leaves = []
    for name, ref in named.items():
        if name not in tensors:
            raise CheckpointError(f"{where} has no tensor {name!r}: it was saved for another model")
        got, ref_shape, ref_dtype = tensors[name], tuple(ref.shape), np.dtype(ref.dtype)
        if got.shape != ref_shape or got.dtype != ref_dtype:
            raise CheckpointError(
                f"{where}: tensor {name!r} is {got.dtype}{list(got.shape)} but the model "
                f"expects {ref_dtype}{list(ref_shape)}"
            )
        leaves.append(got)
    extra = sorted(n for n in tensors if n.startswith(prefix + ".") and n not in named)
    if extra:
        raise CheckpointError(f"{where} has tensors the model lacks: {extra[:5]}")
    return pytree.tree_unflatten(pytree.tree_structure(template), leaves)


def save(ckpt_dir: str | os.PathLike, params: Any, opt_state: Any, meta: dict) -> Path:
    """Write a checkpoint of ``params`` and ``opt_state`` with JSON-serialisable ``meta``.

    Returns:
        The path of the new tensor file.
    """
    import safetensors.numpy

    d = Path(ckpt_dir)
    d.mkdir(parents=True, exist_ok=True)
    tensors = {
        n: np.require(np.asarray(v), requirements="C")  # (not ascontiguousarray: keeps 0-d)
        for n, v in {**flatten_named(params, "params"), **flatten_named(opt_state, "opt")}.items()
    }
    blob = safetensors.numpy.save(tensors, metadata={"format": FORMAT, "version": str(VERSION)})
    step = int(meta.get("step", 0))
    name = f"ckpt-{step:08d}.safetensors"
    old = _current_tensor_file(d)
    atomic_write_bytes(d / name, blob)
    record = {
        "format": FORMAT,
        "version": VERSION,
        "tensors_file": name,
        "tensors_sha256": hashlib.sha256(blob).hexdigest(),
        "meta": meta,
    }
    atomic_write_bytes(d / RECORD, (json.dumps(record, indent=1) + "\n").encode())
    if old is not None and old != name:
        with contextlib.suppress(OSError):
            (d / old).unlink()
    return d / name


def _current_tensor_file(d: Path) -> str | None:
    try:
        return json.loads((d / RECORD).read_text())["tensors_file"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def exists(ckpt_dir: str | os.PathLike) -> bool:
    """Whether ``ckpt_dir`` holds a checkpoint record (valid or not)."""
    return (Path(ckpt_dir) / RECORD).exists()


def load(ckpt_dir: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict]:
    """Read and verify a checkpoint.

    Returns:
        ``(tensors, meta)``: the named tensors (numpy) and the metadata given to :func:`save`;
        rebuild pytrees with :func:`unflatten_named`.

    Raises:
        CheckpointError: no checkpoint, unreadable or malformed record, missing tensor file,
            hash mismatch, or a tensor file safetensors cannot read.
    """
    import safetensors.numpy

    d = Path(ckpt_dir)
    rec_path = d / RECORD
    if not rec_path.exists():
        raise CheckpointError(f"no checkpoint to resume from: {rec_path} does not exist")
    try:
        record = json.loads(rec_path.read_text(encoding="utf-8"))
        name, digest, meta = record["tensors_file"], record["tensors_sha256"], record["meta"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(
            f"checkpoint record {rec_path} is corrupt ({type(e).__name__}: {e}); it was left "
            f"untouched: move it away or pass --overwrite to start a new run"
        ) from None
    if record.get("format") != FORMAT or record.get("version") != VERSION:
        raise CheckpointError(
            f"{rec_path} is not a {FORMAT} v{VERSION} checkpoint "
            f"(format {record.get('format')!r}, version {record.get('version')!r})"
        )
    t_path = d / str(name)
    try:
        blob = t_path.read_bytes()
    except OSError as e:
        raise CheckpointError(f"checkpoint tensor file {t_path} is unreadable: {e}") from None
    if hashlib.sha256(blob).hexdigest() != digest:
        raise CheckpointError(
            f"checkpoint {t_path} is corrupt: its sha256 does not match {rec_path}; it was "
            f"left untouched: move it away or pass --overwrite to start a new run"
        )
    try:
        tensors = safetensors.numpy.load(blob)
    except Exception as e:  # safetensors raises its own SafetensorError
        raise CheckpointError(f"checkpoint {t_path} is unreadable by safetensors: {e}") from None
    return tensors, meta
