"""Checkpoints: tensors in safetensors, everything else in JSON, committed atomically.

A checkpoint folder (``--out``) holds

- ``ckpt-<step>-<sha256 prefix>.safetensors``: the parameters (``params.<path>``) and optimizer
  state (``opt.<path>``) as named tensors, ``<path>`` being the pytree key path with dots
  (``params.h.0.attn.c_attn.w``); named by its content, so a new checkpoint never overwrites
  the file the committed one points to (also at the same step, under ``--overwrite``);
- ``ckpt.json``: the commit record: the metadata (model config, step, RNG seed, tokenizer,
  training flags, loss history), the tensor file's name and sha256, and ``record_sha256``, the
  sha256 of all of that (so the metadata is covered too: an edited step or flag is refused);
- ``.lock``: held (``flock``) by the run using the folder, with its pid;
- ``.ckpt-written``: the manifest, one name a line, of the files runs of this example wrote
  here (tensor files, ``samples.txt``), each recorded before it is written. Cleaning up deletes
  only files it names (or the tensor file of the record being replaced), never other files of
  the folder, whatever their names.

The commit protocol (SQLite's promise: a crash at any point leaves the old checkpoint or the
new one, complete): write the tensor file under a temporary name, fsync, rename it to its
content name, fsync the folder; write the record the same way and rename it over
``ckpt.json`` (the commit point); only then delete the tensor files runs of this example
wrote that the record no longer names. Temporary files a crash left (this module's names only)
are removed when the next run takes the folder (:func:`lock_out_dir`). Loading checks the
JSON, both hashes and every tensor's name, shape and dtype before anything is used; a damaged
checkpoint raises :class:`CheckpointError` and is left as it is.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from examples.gpt2 import ExampleError

FORMAT = "blu-gpt2-example"
VERSION = 2
RECORD = "ckpt.json"
LOCK = ".lock"
MANIFEST = ".ckpt-written"
TMP_SUFFIX = ".ckpt-tmp"
_TENSOR_NAME = re.compile(r"ckpt-\d{8}-[0-9a-f]{16}\.safetensors")
# the temporary files of _commit_temporary and lock_out_dir's probe: the only ones cleaned up
_TMP_NAME = re.compile(
    r"\.(?:ckpt-\d{8}(?:-[0-9a-f]{16})?\.safetensors|ckpt\.json|\.ckpt-written)\.\d+"
    r"\.[0-9a-f]+\.ckpt-tmp|\.write-probe\.\d+\.ckpt-tmp"
)
_RECORD_KEYS = ("format", "version", "tensors_file", "tensors_sha256", "meta", "record_sha256")


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
    """Commit a checkpoint of ``params`` and ``opt_state`` with JSON-serialisable ``meta``
    (the protocol in the module docstring: a crash leaves the old or the new one, complete).

    The tensors stream to a temporary file (``safetensors.numpy.save_file``), which is hashed
    from the page cache and renamed to its content name: no in-memory copy of the whole file
    (``safetensors.numpy.save`` built one, at about 0.3 GB/s: most of a 14 GB LLaMA-1B
    checkpoint's time, and 14 GB of host memory beside the tensors).

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
    step = int(meta.get("step", 0))
    replaced = _current_tensor_file(d)  # written by a run of this example: its record says so
    digest = ""

    def fill(tmp: Path) -> str:
        nonlocal digest
        safetensors.numpy.save_file(tensors, tmp, metadata={"format": FORMAT,
                                                            "version": str(VERSION)})  # fmt: skip
        tensors.clear()
        with open(tmp, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        name = f"ckpt-{step:08d}-{digest[:16]}.safetensors"
        record_written(d, name)  # before the file has its name: a crash never leaves it unrecorded
        return name

    name = _commit_temporary(d, f"ckpt-{step:08d}.safetensors", fill)
    record = _record(name, digest, meta)
    _durable_write(d, RECORD, (json.dumps(record, indent=1) + "\n").encode())  # the commit
    _remove_unreferenced(d, name, replaced)
    return d / name


def written(ckpt_dir: str | os.PathLike) -> list[str]:
    """The names the manifest of ``ckpt_dir`` records (files runs of this example wrote)."""
    try:
        text = (Path(ckpt_dir) / MANIFEST).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    return [n for n in dict.fromkeys(text.splitlines()) if n and "/" not in n and n != ".."]


def record_written(ckpt_dir: str | os.PathLike, name: str) -> None:
    """Record in the manifest that this example writes ``ckpt_dir/name`` (call it before)."""
    d = Path(ckpt_dir)
    names = written(d)
    if name not in names:
        _durable_write(d, MANIFEST, "".join(f"{n}\n" for n in [*names, name]).encode())


def remove_written(ckpt_dir: str | os.PathLike, names: list[str]) -> None:
    """Delete those of ``names`` that the manifest records, and forget them; other files of
    the folder (a user's) are left alone."""
    d = Path(ckpt_dir)
    listed = written(d)
    gone = [n for n in names if n in listed]
    for n in gone:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(d / n)
    if gone:
        _durable_write(d, MANIFEST, "".join(f"{n}\n" for n in listed if n not in gone).encode())


def _record(name: str, digest: str, meta: dict) -> dict:
    body = {"format": FORMAT, "version": VERSION, "tensors_file": name, "tensors_sha256": digest,
            "meta": meta}  # fmt: skip
    return {**body, "record_sha256": _record_hash(body)}


def _record_hash(body: dict) -> str:
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canon.encode()).hexdigest()


def _durable_write(d: Path, name: str, data: bytes) -> None:
    """``d/name`` replaced atomically and durably (``_commit_temporary``) by ``data``."""

    def fill(tmp: Path) -> str:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        return name

    _commit_temporary(d, name, fill)


def _commit_temporary(d: Path, stem: str, fill: Callable[[Path], str]) -> str:
    """Write a temporary file of ``d`` (``.<stem>.<pid>.<random>.ckpt-tmp``) by ``fill(tmp)``,
    which returns the name it is to take (having done what must precede that); fsync it, rename
    it onto that name, fsync the folder. The temporary file is removed on any failure.

    Returns:
        The name.
    """
    tmp = d / f".{stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}{TMP_SUFFIX}"
    try:
        name = fill(tmp)
        _fsync_path(tmp)
        os.replace(tmp, d / name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_path(d)
    return name


def _fsync_path(path: Path) -> None:
    """Flush a file's (or a folder's) data to the disk (``fsync`` on a read-only descriptor:
    Linux flushes the file's pages whichever descriptor asks)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_unreferenced(d: Path, keep: str, replaced: str | None = None) -> None:
    """Delete the tensor files other than ``keep`` that runs of this example wrote (older
    checkpoints, a crashed run's): those the manifest records, and ``replaced`` (the tensor file
    of the record just replaced). Tensor files of other origin are left alone."""
    stale = [n for n in written(d) if _TENSOR_NAME.fullmatch(n) and n != keep]
    if replaced is not None and replaced != keep and replaced not in stale:
        with contextlib.suppress(OSError):
            os.unlink(d / replaced)
    with contextlib.suppress(OSError):
        remove_written(d, stale)


def _current_tensor_file(d: Path) -> str | None:
    try:
        rec = json.loads((d / RECORD).read_text())
        body = {k: rec[k] for k in _RECORD_KEYS[:-1]}
        if rec["record_sha256"] == _record_hash(body) and _TENSOR_NAME.fullmatch(
            body["tensors_file"]
        ):
            return body["tensors_file"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


class OutDirLock:
    """The exclusive hold of a run on its output folder (see :func:`lock_out_dir`)."""

    def __init__(self, path: Path, fd: int):
        self.path, self.fd = path, fd

    def release(self) -> None:
        import fcntl

        if self.fd >= 0:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


@contextlib.contextmanager
def lock_out_dir(out: str | os.PathLike) -> Iterator[OutDirLock]:
    """Take ``out`` for this run before any training: create it, check it is writable, lock it
    against a second run (``.lock`` with this pid, ``flock``: released even if the process
    dies), and remove temporary files and unreferenced tensor files a crashed run left.

    Raises:
        CheckpointError: the folder cannot be created or written, or another run holds it.
    """
    import fcntl

    d = Path(out)
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd = os.open(d / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise CheckpointError(
            f"--out {d} is not writable ({e.strerror}): checkpoints could not be saved; pick "
            "another --out or fix its permissions"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        other = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EACCES):
            raise CheckpointError(
                f"--out {d} is in use by another run (pid {other}, lock {d / LOCK}): wait "
                "for it to finish, or pick another --out"
            ) from None
        raise
    lock = OutDirLock(d / LOCK, fd)
    try:
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            probe = d / f".write-probe.{os.getpid()}{TMP_SUFFIX}"
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            os.unlink(probe)
        except OSError as e:
            raise CheckpointError(
                f"--out {d} is not writable ({e.strerror}): checkpoints could not be saved; "
                "pick another --out or fix its permissions"
            ) from None
        _clean_leftovers(d)
        yield lock
    finally:
        lock.release()


def _clean_leftovers(d: Path) -> None:
    for p in d.iterdir():
        if _TMP_NAME.fullmatch(p.name):
            with contextlib.suppress(OSError):
                os.unlink(p)
    current = _current_tensor_file(d)
    if current is not None:  # a damaged record: leave everything for the user to look at
        _remove_unreferenced(d, current)


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
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(
            f"checkpoint record {rec_path} is corrupt ({type(e).__name__}: {e}); it was left "
            f"untouched: move it away or pass --overwrite to start a new run"
        ) from None
    if not isinstance(record, dict):
        raise CheckpointError(f"checkpoint record {rec_path} is corrupt: not a JSON object")
    if record.get("format") != FORMAT or record.get("version") != VERSION:
        raise CheckpointError(
            f"{rec_path} is not a {FORMAT} v{VERSION} checkpoint "
            f"(format {record.get('format')!r}, version {record.get('version')!r})"
        )
    missing = [k for k in _RECORD_KEYS if k not in record]
    if missing:
        raise CheckpointError(
            f"checkpoint record {rec_path} is corrupt: it lacks {missing}; it was left "
            "untouched: move it away or pass --overwrite to start a new run"
        )
    body = {k: record[k] for k in _RECORD_KEYS[:-1]}
    if record["record_sha256"] != _record_hash(body):
        raise CheckpointError(
            f"checkpoint record {rec_path} is corrupt: its record_sha256 does not match its "
            "contents (edited or damaged); it was left untouched: move it away or pass "
            "--overwrite to start a new run"
        )
    name, digest, meta = body["tensors_file"], body["tensors_sha256"], body["meta"]
    if not isinstance(name, str) or not _TENSOR_NAME.fullmatch(name) or not isinstance(meta, dict):
        raise CheckpointError(
            f"checkpoint record {rec_path} is corrupt: tensors_file {name!r} is not a tensor "
            "file name of this format, or meta is not an object"
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


def require_meta(meta: dict, keys: tuple[str, ...], where: str) -> None:
    """Raise a CheckpointError naming the metadata keys a checkpoint lacks."""
    missing = [k for k in keys if k not in meta]
    if missing:
        raise CheckpointError(
            f"checkpoint {where} lacks the metadata {missing}: it was not written by this "
            "example (or by an older version); start a new run with --overwrite"
        )
