"""Sharded checkpoints: each process writes its own blocks, one manifest commits them all.

    save_sharded("ckpt", {"params": params, "opt": opt_state}, step=100)
    state = load_sharded("ckpt", target=state)              # the target's shardings
    state = load_sharded("ckpt", shardings=NamedSharding(mesh2, P(None, "model")))

A checkpoint folder holds

- ``process-<k>-<token>.safetensors``: the blocks process ``k`` owned at save time (of each
  leaf, the blocks of its addressable shards with ``replica_id == 0``, so a replicated block is
  written once; plain arrays by process 0), named ``<leaf path>[start:stop,...]``. ``<token>`` is
  new at each save, so a save never writes a file the committed manifest names;
- ``manifest.json``: the commit record: the tree's leaves (key path, global shape, dtype, the
  mesh and PartitionSpec they were saved with), where each block lies (file, byte range, sha256),
  each file's sha256 and size, and the sha256 of the manifest itself.

The commit protocol: every process writes its file (temporary name, fsync, rename); process 0
gathers the block tables, writes ``manifest.json`` the same way (the rename is the commit
point) and, after a barrier, deletes the files the new manifest does not name (the previous
checkpoint's, and those of saves that crashed). A crash at any point leaves the old checkpoint
or the new one, complete. Concurrent saves to one folder are not supported.

Loading reads the manifest and, for each leaf, only the saved blocks that overlap the block this
process needs under the requested sharding, which may be on another mesh shape or another
PartitionSpec (resharding is reading the overlaps). Files are memory-mapped and each block read
is checked against its sha256, so a damaged byte in any block a load uses raises
:class:`CheckpointError`. With one process per device, all processes must see one shared
folder. The layout is ``torch.distributed.checkpoint``'s (a file per rank, one metadata file
the coordinator writes), in safetensors.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from blu.core import pytree
from blu.core.array import Array
from blu.core.durable import TMP_SUFFIX, write_atomic
from blu.core.errors import BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import Tracer, canonicalize_arg
from blu.parallel import runtime
from blu.parallel import safetensors_file as stf
from blu.parallel.mesh import NamedSharding, check_spec
from blu.parallel.sharded_array import ShardedArray

__all__ = ["CheckpointError", "load_sharded", "read_manifest", "save_sharded"]

FORMAT = "blu-sharded-checkpoint"
VERSION = 1
MANIFEST = "manifest.json"
_FILE = re.compile(r"process-\d{5}-[0-9a-f]{16}\.safetensors")
_TMP = re.compile(r"\.(?:process-\d{5}-[0-9a-f]{16}\.safetensors|manifest\.json)\..*" + TMP_SUFFIX)


class CheckpointError(BluValueError):
    """A checkpoint is missing, incomplete or damaged (the message names the file)."""


# ---- saving ------------------------------------------------------------------------------------


def save_sharded(path: str | os.PathLike, tree: Any, *, step: int | None = None) -> Path:
    """Save a pytree of arrays as a sharded checkpoint in the folder ``path``.

    Every process of the job calls it with its view of the same tree (SPMD). ``ShardedArray``
    leaves are written block by block, by the processes holding them; other leaves (numpy or
    blu arrays, Python scalars) are the same on every process and written by process 0. A
    checkpoint already at ``path`` is replaced only once the new one is complete.

    Args:
        path: the checkpoint folder (created if missing).
        tree: a pytree (dicts, lists, tuples, registered nodes) of arrays of blu's dtypes.
        step: an optional training step, recorded in the manifest (:func:`read_manifest`).

    Returns:
        ``Path(path)``.

    Raises:
        BluTypeError: a leaf is not an array, or of a dtype safetensors cannot hold.
        BluValueError: a traced leaf (save outside jit/grad), or two leaves with one key path.
        OSError: writing failed (the previous checkpoint is then untouched).
    """
    d = Path(path)
    me, comm = runtime.process_index(), _comm()
    leaves = _named_leaves(tree)
    token = _agree_token(comm)
    d.mkdir(parents=True, exist_ok=True)
    fname = f"process-{me:05d}-{token}.safetensors"
    owned, table = [], []
    for i, (name, _, leaf) in enumerate(leaves):
        for index, block in _owned_blocks(leaf, me):
            key = name + "[" + ",".join(f"{a}:{b}" for a, b in index) + "]"
            owned.append((key, block))
            table.append((i, key, index))
    meta = {"format": FORMAT, "version": str(VERSION), "process": str(me)}
    offsets, sha, size = stf.write(d / fname, owned, meta)
    mine = {
        "file": fname,
        "sha256": sha,
        "size": size,
        "blocks": [
            [i, key, [list(ab) for ab in index], *offsets[key], _sha(block)]
            for (i, key, index), (_, block) in zip(table, owned)
        ],
    }
    parts = _gather_json(comm, mine)
    if me == 0:
        manifest = _manifest(leaves, parts, step)
        body = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
        write_atomic(d / MANIFEST, [body.encode()])  # the commit point
    if comm is not None:
        comm.barrier()  # nobody returns (or cleans up) before the commit
    if me == 0:
        _remove_stale(d, {p["file"] for p in parts})
    return d


def _comm():
    return runtime.world_communicator() if runtime.process_count() > 1 else None


def _agree_token(comm) -> str:
    """A fresh token for this save's file names, process 0's, on every process."""
    raw = np.frombuffer(uuid.uuid4().bytes[:8], np.uint8)
    if comm is not None:
        raw = np.asarray(comm.all_gather(raw))[0]
    return bytes(raw).hex()


def _gather_json(comm, obj: Any) -> list[Any]:
    """``obj`` of every process, in process order (two all_gathers: the lengths, the bytes)."""
    data = np.frombuffer(json.dumps(obj).encode(), np.uint8)
    if comm is None:
        return [obj]
    lengths = np.asarray(comm.all_gather(np.array([data.size], np.int64)))[:, 0]
    padded = np.zeros(int(lengths.max()), np.uint8)
    padded[: data.size] = data
    rows = np.asarray(comm.all_gather(padded))
    return [json.loads(bytes(r[:n]).decode()) for r, n in zip(rows, lengths)]


def _sha(block: np.ndarray) -> str:
    return hashlib.sha256(stf.encode(block).reshape(-1).view(np.uint8)).hexdigest()


def _named_leaves(tree: Any) -> list[tuple[str, list, Any]]:
    """(key path string, JSON key path, leaf) of each leaf, checked; a leaf that is not a
    ShardedArray as the numpy array ``device_put`` would hold (Python floats float32)."""
    out, seen = [], set()
    for path, leaf in pytree.tree_flatten_with_path(tree)[0]:
        name = pytree.keystr(path)
        if name in seen:
            raise BluValueError(with_user_line(f"save_sharded: two leaves have key path {name!r}"))
        seen.add(name)
        if isinstance(leaf, Tracer):
            raise BluValueError(
                with_user_line(
                    f"save_sharded: leaf {name or '<root>'} is traced: save outside jit/grad/vmap"
                )
            )
        if not isinstance(leaf, ShardedArray):
            if not isinstance(leaf, (Array, np.ndarray, np.generic, int, float, complex, bool)):
                raise BluTypeError(
                    with_user_line(
                        f"save_sharded: leaf {name or '<root>'} is a {type(leaf).__name__}, "
                        "not an array"
                    )
                )
            leaf = canonicalize_arg(leaf)._value  # as device_put would hold it
        if not stf.supported(leaf.dtype):
            raise BluTypeError(
                with_user_line(
                    f"save_sharded: leaf {name or '<root>'} has dtype {leaf.dtype}, which a "
                    "safetensors checkpoint cannot hold"
                )
            )
        out.append((name, leaf_keys(path), leaf))
    return out


def _owned_blocks(leaf: Any, me: int):
    """(index as [(start, stop)] per dim, block) of the blocks this process writes."""
    if isinstance(leaf, ShardedArray):
        shape = leaf.shape
        for sh in leaf.addressable_shards:
            if sh.replica_id == 0:
                index = [s.indices(n)[:2] for s, n in zip(sh.index, shape)]
                yield index, np.asarray(sh.data)
    elif me == 0:
        yield [(0, n) for n in leaf.shape], leaf


def _sharding_record(leaf: Any) -> dict | None:
    if not isinstance(leaf, ShardedArray):
        return None
    mesh, spec = leaf.sharding.mesh, leaf.sharding.spec

    def jsonable(n):
        return n if isinstance(n, (str, int)) else repr(n)

    return {
        "mesh_axes": [jsonable(n) for n in mesh.axis_names],
        "mesh_shape": list(mesh.devices.shape),
        "spec": [[jsonable(n) for n in spec.names_of(i)] for i in range(len(spec))],
    }


def _manifest(leaves: list, parts: list[dict], step: int | None) -> dict:
    blocks: list[list] = [[] for _ in leaves]
    for part in parts:
        for i, key, index, begin, end, sha in part["blocks"]:
            blocks[i].append(
                {
                    "key": key,
                    "index": index,
                    "file": part["file"],
                    "begin": begin,
                    "end": end,
                    "sha256": sha,
                }  # fmt: skip
            )
    out = {
        "format": FORMAT,
        "version": VERSION,
        "step": None if step is None else int(step),
        "process_count": len(parts),
        "files": {p["file"]: {"sha256": p["sha256"], "size": p["size"]} for p in parts},
        "leaves": [
            {
                "path": name,
                "keys": keys,
                "shape": [int(n) for n in np.shape(leaf)],
                "dtype": np.dtype(leaf.dtype).name,
                "sharding": _sharding_record(leaf),
                "blocks": sorted(bl, key=lambda b: b["index"]),
            }
            for (name, keys, leaf), bl in zip(leaves, blocks)
        ],
    }
    out["manifest_sha256"] = _manifest_digest(out)
    return out


def _manifest_digest(manifest: dict) -> str:
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _remove_stale(d: Path, keep: set[str]) -> None:
    """Delete this module's files the manifest does not name (never other files)."""
    for entry in os.scandir(d):
        if (_FILE.fullmatch(entry.name) and entry.name not in keep) or _TMP.fullmatch(entry.name):
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                pass


def leaf_keys(path: tuple) -> list:
    """A key path as JSON: ``["dict", key]``, ``["seq", i]``, ``["attr", name]`` entries
    (``["other", str]`` for keys JSON cannot hold; such trees load only into a target)."""
    out = []
    for k in path:
        if isinstance(k, pytree.DictKey) and isinstance(k.key, (str, int)):
            out.append(["dict", k.key])
        elif isinstance(k, (pytree.SequenceKey, pytree.FlattenedIndexKey)):
            out.append(["seq", int(getattr(k, "idx", getattr(k, "key", 0)))])
        elif isinstance(k, pytree.GetAttrKey):
            out.append(["attr", k.name])
        else:
            out.append(["other", str(k)])
    return out


def rebuild(paths: list[list], values: list) -> Any:
    """The tree of dicts and lists whose leaves at ``paths`` (from ``leaf_keys``) are
    ``values``; objects with attributes become dicts of them."""
    if len(paths) == 1 and not paths[0]:
        return values[0]
    groups: dict = {}
    for keys, v in zip(paths, values):
        if not keys or keys[0][0] == "other":
            raise BluValueError(
                with_user_line(
                    "load_sharded: this checkpoint's tree has nodes only a target can rebuild "
                    "(pass target=...)"
                )
            )
        groups.setdefault((keys[0][0], keys[0][1]), []).append((keys[1:], v))
    kinds = {kind for kind, _ in groups}
    children = {
        key: rebuild([p for p, _ in g], [v for _, v in g]) for (_, key), g in groups.items()
    }
    if kinds == {"seq"}:
        return [children[i] for i in sorted(children)]
    return children


# ---- loading -----------------------------------------------------------------------------------


def read_manifest(path: str | os.PathLike) -> dict:
    """The manifest of the checkpoint in ``path`` (checked: format, version, its sha256).

    Its ``"step"`` is the step given to :func:`save_sharded`; ``"leaves"`` lists each leaf's
    ``"path"``, ``"shape"``, ``"dtype"`` and the ``"sharding"`` it was saved with.

    Raises:
        CheckpointError: no checkpoint there, or a manifest that is not one of this format or
            was altered.
    """
    f = Path(path) / MANIFEST
    try:
        manifest = json.loads(f.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"no sharded checkpoint in {path} ({MANIFEST} is missing)") from None
    except (OSError, ValueError) as e:
        raise CheckpointError(f"checkpoint manifest {f} is unreadable: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{f} is not a blu sharded-checkpoint manifest")
    if manifest.get("version") != VERSION:
        raise CheckpointError(
            f"{f} is version {manifest.get('version')}; this blu reads version {VERSION}"
        )
    if manifest.get("manifest_sha256") != _manifest_digest(manifest):
        raise CheckpointError(f"checkpoint manifest {f} is corrupt (its sha256 does not match)")
    return manifest


def load_sharded(path: str | os.PathLike, target: Any = None, shardings: Any = None) -> Any:
    """Load the checkpoint in ``path``, each leaf laid out as asked (resharding as needed).

    Args:
        path: a folder :func:`save_sharded` wrote.
        target: optional pytree giving the structure, shapes, dtypes and shardings to load
            into: ``ShardedArray`` leaves (their ``.sharding``), arrays, or any object with
            ``shape`` and ``dtype`` (e.g. ``blu.ShapeDtypeStruct``; a ``sharding`` attribute
            that is a ``NamedSharding`` is used). Without it, the saved tree is rebuilt from
            its key paths (dicts and lists; tuples come back as lists).
        shardings: a ``NamedSharding`` for every leaf, or a pytree of ``NamedSharding``/``None``
            with the tree's structure; it overrides the target's. ``None`` for a leaf: a plain,
            whole ``blu.Array``.

    Returns:
        The pytree: ``ShardedArray`` leaves (on one process per device, holding only this
        process's block) where a sharding is given, ``blu.Array`` leaves otherwise.

    Raises:
        CheckpointError: no checkpoint, a missing or truncated file, a block whose sha256 does
            not match (the file is named), a leaf whose saved blocks do not cover it.
        BluValueError: the target's or shardings' structure, a shape or a dtype does not match
            the checkpoint (the leaf's key path is named); a sharding that is not a
            NamedSharding.
        BluShapeError: a sharding that does not divide its leaf's shape.
    """
    d = Path(path)
    manifest = read_manifest(d)
    saved = {leaf["path"]: leaf for leaf in manifest["leaves"]}
    if target is not None:
        t_leaves, treedef = pytree.tree_flatten_with_path(target)
        names = [pytree.keystr(p) for p, _ in t_leaves]
        _check_same_paths(names, list(saved), "target")
        for name, (_, t) in zip(names, t_leaves):
            _check_leaf(saved[name], t)
        wanted = {n: _target_sharding(t) for n, (_, t) in zip(names, t_leaves)}
    else:
        names, treedef = list(saved), None
        wanted = dict.fromkeys(names)
    if shardings is not None:
        wanted = _sharding_overrides(shardings, names)
    files = _Files(d, manifest["files"])
    values = [_restore(saved[n], wanted[n], files) for n in names]
    if treedef is not None:
        return pytree.tree_unflatten(treedef, values)
    return rebuild([saved[n]["keys"] for n in names], values)


def _check_same_paths(names: list[str], saved: list[str], what: str) -> None:
    missing = [n for n in saved if n not in set(names)]
    extra = [n for n in names if n not in set(saved)]
    if missing or extra:
        raise BluValueError(
            with_user_line(
                f"load_sharded: the {what}'s tree does not match the checkpoint's: leaves "
                f"missing from the {what}: {missing[:5]}; leaves the checkpoint lacks: {extra[:5]}"
            )
        )


def _check_leaf(entry: dict, t: Any) -> None:
    if not (hasattr(t, "shape") and hasattr(t, "dtype")):
        t = canonicalize_arg(t)  # a Python scalar as device_put holds it
    shape, dtype = tuple(int(n) for n in t.shape), np.dtype(t.dtype)
    if shape != tuple(entry["shape"]) or dtype.name != entry["dtype"]:
        raise BluValueError(
            with_user_line(
                f"load_sharded: leaf {entry['path'] or '<root>'} is {entry['dtype']}"
                f"{list(entry['shape'])} in the checkpoint but {dtype}{list(shape)} in the target"
            )
        )


def _target_sharding(t: Any) -> NamedSharding | None:
    s = getattr(t, "sharding", None)
    return s if isinstance(s, NamedSharding) else None


def _sharding_overrides(shardings: Any, names: list[str]) -> dict:
    if isinstance(shardings, NamedSharding):
        return dict.fromkeys(names, shardings)
    is_leaf = lambda v: v is None or isinstance(v, NamedSharding)  # noqa: E731
    flat = pytree.tree_flatten_with_path(shardings, is_leaf=is_leaf)[0]
    given = {pytree.keystr(p): s for p, s in flat}
    _check_same_paths(list(given), names, "shardings")
    for n, s in given.items():
        if s is not None and not isinstance(s, NamedSharding):
            raise BluValueError(
                with_user_line(f"load_sharded: shardings[{n}] is {s!r}, not a NamedSharding")
            )
    return given


def _restore(entry: dict, sharding: NamedSharding | None, files: _Files) -> Any:
    shape, dtype = tuple(entry["shape"]), stf.dtype_named(entry["dtype"])
    if sharding is None:
        return Array(_assemble(entry, [(0, n) for n in shape], dtype, files))
    check_spec(sharding.spec, sharding.mesh, shape, f"load_sharded (leaf {entry['path']})")
    if not runtime.is_initialized():
        value = _assemble(entry, [(0, n) for n in shape], dtype, files)
        return ShardedArray(value, sharding, shape)
    mesh_procs = sorted(dev.process_index for dev in sharding.mesh.devices.flat)
    if mesh_procs != list(range(runtime.process_count())):
        raise BluValueError(
            with_user_line(
                f"load_sharded: {sharding.mesh} must hold one device of each of the "
                f"{runtime.process_count()} processes (blu.parallel.make_mesh)"
            )
        )
    index = sharding.devices_indices_map(shape)[runtime.this_device()]
    region = [s.indices(n)[:2] for s, n in zip(index, shape)]
    return ShardedArray(_assemble(entry, region, dtype, files), sharding, shape, local=True)


def _assemble(entry: dict, region: list, dtype: np.dtype, files: _Files) -> np.ndarray:
    """The ``region`` ([(start, stop)] per dim) of a leaf, from the saved blocks overlapping it."""
    out = np.empty(tuple(b - a for a, b in region), dtype)
    if not out.size:
        return out
    covered = 0
    for block in entry["blocks"]:
        index = [tuple(ab) for ab in block["index"]]
        lo = [max(a, s) for (a, _), (s, _) in zip(region, index)]
        hi = [min(b, e) for (_, b), (_, e) in zip(region, index)]
        if any(h <= a for a, h in zip(lo, hi)):
            continue
        data = files.block(block, dtype, tuple(e - s for s, e in index))
        dst = tuple(slice(a - r, b - r) for a, b, (r, _) in zip(lo, hi, region))
        src = tuple(slice(a - s, b - s) for a, b, (s, _) in zip(lo, hi, index))
        out[dst] = data[src]
        covered += math.prod(b - a for a, b in zip(lo, hi))
    if covered != out.size:
        raise CheckpointError(
            f"checkpoint leaf {entry['path'] or '<root>'}: its saved blocks cover {covered} of "
            f"the {out.size} elements of region {region} (blocks missing from the manifest)"
        )
    return out


class _Files:
    """The checkpoint's files, memory-mapped on first use; blocks checked against their
    sha256 as they are read."""

    def __init__(self, d: Path, files: dict):
        self.d, self.files, self.maps = d, files, {}

    def _map(self, name: str) -> np.ndarray:
        mm = self.maps.get(name)
        if mm is not None:
            return mm
        f = self.d / name
        want = self.files.get(name, {}).get("size")
        try:
            size = f.stat().st_size
        except FileNotFoundError:
            raise CheckpointError(f"checkpoint file {f} is missing") from None
        if size != want:
            raise CheckpointError(f"checkpoint file {f} is {size} bytes, the manifest says {want}")
        mm = self.maps[name] = np.memmap(f, np.uint8, mode="r")
        return mm

    def block(self, block: dict, dtype: np.dtype, shape: tuple) -> np.ndarray:
        raw = self._map(block["file"])[block["begin"] : block["end"]]
        if hashlib.sha256(raw).hexdigest() != block["sha256"]:
            raise CheckpointError(
                f"checkpoint file {self.d / block['file']} is corrupt: block {block['key']!r} "
                "does not match its sha256"
            )
        return stf.decode(raw, dtype, shape)
