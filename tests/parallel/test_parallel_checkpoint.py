"""Sharded checkpoints (blu.parallel.save_sharded / load_sharded).

Saved on one mesh and PartitionSpec, restored onto others (another mesh shape, another spec,
one device, two processes): every restored block equals the original numpy array's slice
exactly (a checkpoint is a copy). Damage is detected; a save that fails midway leaves the
previous checkpoint loadable.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from blu.parallel import (
    CheckpointError,
    NamedSharding,
    P,
    ShardedArray,
    device_put,
    load_sharded,
    make_mesh,
    read_manifest,
    save_sharded,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _four_devices(set_flag):
    set_flag("num_cpu_devices", 4)


def _numbers(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(-100, 100, size=shape).astype(dtype)


def _check_blocks(x, want: np.ndarray, sharding: NamedSharding):
    """Each device's block of ``x`` is ``want``'s slice at the index ``sharding`` gives it."""
    assert isinstance(x, ShardedArray) and x.sharding == sharding
    assert x.shape == want.shape and x.dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(x), want)
    idx = sharding.devices_indices_map(want.shape)
    for sh in x.addressable_shards:
        np.testing.assert_array_equal(np.asarray(sh.data), want[idx[sh.device]])


def _tree():
    return {
        "params": {
            "w": _numbers((8, 6), np.float32, 1),
            "b": _numbers((8,), ml_dtypes.bfloat16, 2),
        },
        "opt": [_numbers((8, 4), np.int32, 3), {"count": np.int64(7)}],
        "empty": np.zeros((0, 4), np.float64),
        "scalar": 0.5,  # a Python float: float32, as device_put holds it
    }


def test_saved_on_4_restored_on_2x2_and_on_one_device(tmp_path):
    mesh4 = make_mesh((4,), ("data",))
    data = NamedSharding(mesh4, P("data"))
    tree = _tree()
    placed = {
        "params": {k: device_put(v, data) for k, v in tree["params"].items()},
        "opt": [device_put(tree["opt"][0], data), tree["opt"][1]],
        "empty": tree["empty"],
        "scalar": tree["scalar"],
    }
    save_sharded(tmp_path / "ck", placed, step=12)
    assert read_manifest(tmp_path / "ck")["step"] == 12

    mesh22 = make_mesh((2, 2), ("data", "model"))
    cols = NamedSharding(mesh22, P(None, "model"))
    rows = NamedSharding(mesh22, P(("data", "model")))
    shardings = {"params": {"w": cols, "b": rows}, "opt": [cols, {"count": None}], "empty": None,
                 "scalar": None}  # fmt: skip
    got = load_sharded(tmp_path / "ck", shardings=shardings)
    _check_blocks(got["params"]["w"], tree["params"]["w"], cols)
    _check_blocks(got["params"]["b"], tree["params"]["b"], rows)
    _check_blocks(got["opt"][0], tree["opt"][0], cols)
    # P(None, "model") on (2, 2): device (i, j) holds columns j*3:(j+1)*3 of w, whatever i
    w = got["params"]["w"]
    for sh in w.addressable_shards:
        j = mesh22.coords(sh.device)["model"]
        np.testing.assert_array_equal(
            np.asarray(sh.data), tree["params"]["w"][:, 3 * j : 3 * j + 3]
        )
    count = got["opt"][1]["count"]
    assert not isinstance(count, ShardedArray) and count.dtype == np.int64 and int(count) == 7
    assert got["scalar"].dtype == np.float32 and float(got["scalar"]) == 0.5  # as device_put
    assert got["empty"].shape == (0, 4) and got["empty"].dtype == np.float64

    whole = load_sharded(tmp_path / "ck")  # one device, the saved structure rebuilt
    assert sorted(whole) == ["empty", "opt", "params", "scalar"] and isinstance(whole["opt"], list)
    for a, b in zip(blu.tree.leaves(whole), blu.tree.leaves(tree)):
        b = np.float32(b) if isinstance(b, float) else b
        assert type(a) is blu.Array and a.dtype == np.asarray(b).dtype
        np.testing.assert_array_equal(np.asarray(a), b)


def test_target_gives_structure_and_shardings(tmp_path):
    mesh = make_mesh((2, 2), ("x", "y"))
    s = NamedSharding(mesh, P("y", "x"))
    x = _numbers((4, 6), ml_dtypes.bfloat16)
    save_sharded(tmp_path, (device_put(x, s), np.arange(3, dtype=np.uint8)))
    other = NamedSharding(make_mesh((4,), ("d",)), P(None, None))
    target = (device_put(np.zeros_like(x), other), blu.ShapeDtypeStruct((3,), np.uint8))
    got = load_sharded(tmp_path, target=target)
    assert isinstance(got, tuple)
    _check_blocks(got[0], x, other)
    np.testing.assert_array_equal(np.asarray(got[1]), np.arange(3))


def test_replicated_blocks_are_written_once(tmp_path):
    mesh = make_mesh((2, 2), ("data", "model"))
    x = _numbers((4, 2), np.float32)
    save_sharded(tmp_path, {"x": device_put(x, NamedSharding(mesh, P("data")))})
    (leaf,) = read_manifest(tmp_path)["leaves"]
    assert leaf["sharding"] == {"mesh_axes": ["data", "model"], "mesh_shape": [2, 2],
                                "spec": [["data"]]}  # fmt: skip
    assert [b["index"] for b in leaf["blocks"]] == [[[0, 2], [0, 2]], [[2, 4], [0, 2]]]


def test_files_are_safetensors(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    x = _numbers((4, 3), np.int16)
    s = NamedSharding(make_mesh((2,), ("d",), blu.devices()[:2]), P("d"))
    h = _numbers((3,), ml_dtypes.bfloat16)
    save_sharded(tmp_path, {"x": device_put(x, s), "z": np.complex64(1 - 2j), "h": h})
    (name,) = read_manifest(tmp_path)["files"]
    got = safetensors_numpy.load_file(str(tmp_path / name))
    assert got["['h'][0:3]"].dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got["['h'][0:3]"], h)
    np.testing.assert_array_equal(got["['x'][0:2,0:3]"], x[:2])
    np.testing.assert_array_equal(got["['x'][2:4,0:3]"], x[2:])
    assert got["['z'][]"] == np.complex64(1 - 2j)


def test_complex128_round_trips(tmp_path):
    z = (_numbers((4,), np.float64) + 1j * _numbers((4,), np.float64, 5)).astype(np.complex128)
    s = NamedSharding(make_mesh((4,), ("d",)), P("d"))
    save_sharded(tmp_path, [device_put(z, s)])
    np.testing.assert_array_equal(np.asarray(load_sharded(tmp_path)[0]), z)


def _corrupt(f: Path, at: int) -> None:
    data = bytearray(f.read_bytes())
    data[at] ^= 0xFF
    f.write_bytes(bytes(data))


def test_damage_is_detected_and_named(tmp_path):
    save_sharded(tmp_path, {"x": _numbers((16,), np.float32)})
    manifest = read_manifest(tmp_path)
    (name,) = manifest["files"]
    block = manifest["leaves"][0]["blocks"][0]
    _corrupt(tmp_path / name, block["end"] - 1)
    with pytest.raises(CheckpointError, match=f"{name} is corrupt: block"):
        load_sharded(tmp_path)
    _corrupt(tmp_path / name, block["end"] - 1)  # mended
    load_sharded(tmp_path)
    (tmp_path / name).write_bytes((tmp_path / name).read_bytes()[:-4])
    with pytest.raises(CheckpointError, match=f"{name} is .* bytes"):
        load_sharded(tmp_path)
    m = tmp_path / "manifest.json"
    m.write_text(m.read_text().replace('"step": null', '"step": 5'))
    with pytest.raises(CheckpointError, match="manifest .* is corrupt"):
        load_sharded(tmp_path)
    with pytest.raises(CheckpointError, match="no sharded checkpoint"):
        load_sharded(tmp_path / "nothing")


@pytest.mark.parametrize("failing", ["block file", "manifest"])
def test_a_failed_save_leaves_the_previous_checkpoint(tmp_path, monkeypatch, failing):
    from blu.parallel import checkpoint

    old, new = _numbers((8,), np.int32, 1), _numbers((8,), np.int32, 2)
    s = NamedSharding(make_mesh((4,), ("d",)), P("d"))
    save_sharded(tmp_path, {"x": device_put(old, s)}, step=1)
    before = set(os.listdir(tmp_path))

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    if failing == "block file":  # the block file's bytes are written, its fsync fails
        monkeypatch.setattr(os, "fsync", full_disk)
    else:  # the block file is complete, the commit fails
        monkeypatch.setattr(checkpoint, "write_atomic", full_disk)
    with pytest.raises(OSError, match="No space"):
        save_sharded(tmp_path, {"x": device_put(new, s)}, step=2)
    monkeypatch.undo()
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".blu-tmp")]
    assert read_manifest(tmp_path)["step"] == 1
    np.testing.assert_array_equal(np.asarray(load_sharded(tmp_path)["x"]), old)
    save_sharded(tmp_path, {"x": device_put(new, s)}, step=3)  # and the next save cleans up
    np.testing.assert_array_equal(np.asarray(load_sharded(tmp_path)["x"]), new)
    after = set(os.listdir(tmp_path))
    assert len(after) == 2 and "manifest.json" in after and not after & (before - {"manifest.json"})


def test_mismatches_name_the_leaf(tmp_path):
    w, b = np.zeros((2, 3), np.float32), np.zeros(2, np.int8)
    save_sharded(tmp_path, {"a": {"w": w}, "b": b})
    with pytest.raises(BluValueError, match=r"leaf \['a'\]\['w'\] is float32\[2, 3\].*\[3, 2\]"):
        load_sharded(tmp_path, target={"a": {"w": w.T}, "b": b})
    with pytest.raises(BluValueError, match=r"leaf \['b'\] is int8\[2\].*int16"):
        load_sharded(tmp_path, target={"a": {"w": w}, "b": b.astype(np.int16)})
    save_sharded(tmp_path / "s", 1.5)  # a Python float target matches a saved one (float32)
    assert float(load_sharded(tmp_path / "s", target=0.0)) == 1.5
    with pytest.raises(BluValueError, match=r"missing from the target: \[\"\['b'\]\"\]"):
        load_sharded(tmp_path, target={"a": {"w": np.zeros((2, 3), np.float32)}})
    mesh = make_mesh((4,), ("d",))
    with pytest.raises(BluShapeError, match=r"leaf \['a'\]\['w'\]"):
        load_sharded(tmp_path, shardings=NamedSharding(mesh, P("d")))
    with pytest.raises(BluTypeError, match=r"leaf \['s'\] is a str"):
        save_sharded(tmp_path / "bad", {"s": "text"})
    with pytest.raises(BluValueError, match="not a NamedSharding"):
        load_sharded(tmp_path, shardings={"a": {"w": mesh}, "b": None})


MESHES = [((4,), ("a",)), ((2, 2), ("a", "b")), ((1, 4), ("a", "b")), ((1,), ("a",))]


@st.composite
def _layout(draw, shape):
    """(mesh, spec) whose splits divide ``shape``."""
    mshape, names = draw(st.sampled_from(MESHES))
    mesh = make_mesh(mshape, names, blu.devices()[: math.prod(mshape)])
    free, spec = list(names), []
    for n in shape:
        fits = [a for a in free if n % mesh.shape[a] == 0]
        pick = draw(st.sampled_from([None, *fits]))
        if pick is not None:
            free.remove(pick)
        spec.append(pick)
    return NamedSharding(mesh, P(*spec))


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_any_layout_restores_onto_any_layout(tmp_path_factory, data):
    shape = tuple(data.draw(st.lists(st.sampled_from([0, 1, 2, 4, 8]), max_size=3)))
    dtype = data.draw(st.sampled_from([np.float32, ml_dtypes.bfloat16, np.int64, np.bool_]))
    x = _numbers(shape, dtype) if dtype is not np.bool_ else _numbers(shape, np.int8) > 0
    before, after = data.draw(_layout(shape)), data.draw(_layout(shape))
    d = tmp_path_factory.mktemp("ck")
    save_sharded(d, {"x": device_put(x, before)})
    _check_blocks(load_sharded(d, shardings={"x": after})["x"], x, after)


# ---- one process per device --------------------------------------------------------------------

WORKER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from blu import parallel as bp
    from blu.parallel import P, NamedSharding

    bp.initialize()
    r, out = bp.process_index(), sys.argv[1]
    mesh = bp.make_mesh((2,), ("x",))
    w = np.arange(24, dtype=np.float32).reshape(4, 6)
    tree = {"w": bp.device_put(w, NamedSharding(mesh, P("x"))), "n": np.int32(5)}
    bp.save_sharded(out, tree, step=3)
    cols = NamedSharding(mesh, P(None, "x"))
    got = bp.load_sharded(out, shardings={"w": cols, "n": None})
    block = np.asarray(got["w"].addressable_shards[0].data)
    assert np.array_equal(block, w[:, 3 * r:3 * r + 3]), block
    assert int(got["n"]) == 5
    print(f"RANK {r} OK", flush=True)
    """
)


def test_two_processes_save_their_blocks_and_reshard(tmp_path):
    script, out = tmp_path / "worker.py", tmp_path / "ck"
    script.write_text(WORKER)
    job = ("RANK", "WORLD_SIZE", "MASTER_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(job)}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("BLU_NUM_CPU_DEVICES", None)
    env["BLU_PARALLEL_BACKEND"] = "cpu"
    cmd = [sys.executable, "-m", "blu.parallel.launch", "--nproc", "2", str(script), str(out)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "RANK 0 OK" in res.stdout and "RANK 1 OK" in res.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["process_count"] == 2 and len(manifest["files"]) == 2
    # restored in this one process, onto 4 virtual devices and a 2-d mesh
    s = NamedSharding(make_mesh((2, 2), ("p", "q")), P("q", "p"))
    got = load_sharded(out, shardings={"w": s, "n": None})
    _check_blocks(got["w"], np.arange(24, dtype=np.float32).reshape(4, 6), s)
