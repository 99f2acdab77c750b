"""blu.shard, meshes, shardings and device_put on virtual CPU devices.

Property tests over random meshes (1 to 3 axes, 1 to 8 devices) and random PartitionSpecs:
``shard(f)`` equals the unsharded ``f`` on the gathered arrays, and so do their gradients
(taken outside ``shard``, and inside it for data-parallel gradients); composition with jit and
vmap; the errors a user meets.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu import lax
from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from blu.parallel import (
    Mesh,
    NamedSharding,
    P,
    ShardedArray,
    all_gather,
    axis_index,
    device_put,
    devices,
    make_mesh,
    pmax,
    pmean,
    psum,
    psum_scatter,
    shard,
)
from tests.helpers import arrays, check_grads, loop_vmap
from tests.helpers import first_devices_mesh as _mesh


@pytest.fixture(autouse=True)
def _eight_devices(set_flag):
    set_flag("num_cpu_devices", 8)


MESH_SHAPES = [(8,), (4,), (2,), (1,), (2, 4), (4, 2), (1, 8), (2, 2), (2, 2, 2), (1, 2, 4)]


@st.composite
def meshes(draw):
    shape = draw(st.sampled_from(MESH_SHAPES))
    names = tuple(draw(st.permutations(["x", "y", "z"]))[: len(shape)])
    return _mesh(shape, names)


@st.composite
def sharded_arrays(draw, mesh, min_rank=0, max_rank=3, free=None):
    """(spec, global array): each dim split over an ordered subset of the unused mesh axes;
    sizes multiples of the split (0 included)."""
    rank = draw(st.integers(min_rank, max_rank))
    free = list(mesh.axis_names if free is None else free)
    spec, shape = [], []
    for _ in range(rank):
        k = draw(st.integers(0, min(2, len(free))))
        chosen = draw(st.permutations(free))[:k]
        for n in chosen:
            free.remove(n)
        spec.append(None if not chosen else chosen[0] if k == 1 else tuple(chosen))
        split = math.prod(mesh.shape[n] for n in chosen)
        shape.append(
            split * draw(st.sampled_from([1, 1, 2, 0])) if chosen else draw(st.integers(0, 3))
        )
    return P(*spec), draw(arrays(tuple(shape)))


def _gather_all(b, spec):
    """Inside shard: the global array back from the blocks (all_gather per split dim)."""
    for i in range(len(spec)):
        names = spec.names_of(i)
        if names:
            b = all_gather(b, names, axis=i, tiled=True)
    return b


# ---- shard(f) == f ------------------------------------------------------------------------------


@given(st.data())
def test_elementwise_keeps_the_layout(data):
    mesh = data.draw(meshes())
    spec, x = data.draw(sharded_arrays(mesh))
    out = shard(lambda b: bnp.sin(b) * 2.0, mesh, spec, spec)(x)
    assert isinstance(out, ShardedArray) and out.sharding == NamedSharding(mesh, spec)
    np.testing.assert_allclose(np.asarray(out), np.sin(x) * 2.0, rtol=1e-12)
    for s in out.addressable_shards:
        np.testing.assert_allclose(np.asarray(s.data), np.sin(x[s.index]) * 2.0, rtol=1e-12)


@given(st.data())
def test_gather_everything(data):
    mesh = data.draw(meshes())
    spec, x = data.draw(sharded_arrays(mesh))
    out = shard(lambda b: _gather_all(b, spec), mesh, spec, P())(x)
    np.testing.assert_array_equal(np.asarray(out), x)


@given(st.data())
def test_reduction_over_a_split_dimension(data):
    mesh = data.draw(meshes())
    spec, x = data.draw(sharded_arrays(mesh, min_rank=1))
    names0 = spec.names_of(0)
    out_spec = P(*spec[1:])

    def f(b):
        return psum(bnp.sin(b).sum(0), names0), pmax(lax.reduce_max(b, (0,)), names0)

    s, m = shard(f, mesh, spec, (out_spec, out_spec))(x)
    np.testing.assert_allclose(np.asarray(s), np.sin(x).sum(0), rtol=1e-10, atol=1e-12)
    want_max = x.max(0) if x.shape[0] else np.full(x.shape[1:], -np.inf)
    np.testing.assert_array_equal(np.asarray(m), want_max)


@given(st.data())
def test_row_and_column_parallel_matmul(data):
    # Megatron: x split over rows (a) and the contraction (b); w split over the contraction
    mesh = data.draw(meshes())
    names = list(mesh.axis_names)
    k_names = tuple(data.draw(st.permutations(names))[: data.draw(st.integers(0, len(names)))])
    m_names = tuple(n for n in names if n not in k_names)[:1]
    km = math.prod(mesh.shape[n] for n in k_names)
    mm = math.prod(mesh.shape[n] for n in m_names)
    rng = np.random.default_rng(len(k_names) * 7 + km + mm)
    x = rng.standard_normal((mm * 2, km * 2))
    w = rng.standard_normal((km * 2, 3))
    xs, ws = P(m_names or None, k_names or None), P(k_names or None)

    def f(xb, wb):
        return psum(xb @ wb, k_names)

    sf = shard(f, mesh, (xs, ws), P(m_names or None))
    np.testing.assert_allclose(np.asarray(sf(x, w)), x @ w, rtol=1e-10, atol=1e-12)
    gx, gw = blu.grad(lambda a, b: (sf(a, b) ** 2).sum(), argnums=(0, 1))(x, w)
    rx, rw = blu.grad(lambda a, b: ((a @ b) ** 2).sum(), argnums=(0, 1))(x, w)
    np.testing.assert_allclose(np.asarray(gx), np.asarray(rx), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(gw), np.asarray(rw), rtol=1e-10, atol=1e-12)


# ---- gradients ----------------------------------------------------------------------------------


@given(st.data())
def test_gradient_of_a_sharded_function_is_the_unsharded_gradient(data):
    mesh = data.draw(meshes())
    spec, x = data.draw(sharded_arrays(mesh, min_rank=1))
    names0 = spec.names_of(0)

    def local(b):  # sum over dim 0 of sin(x) * x, then everything gathered
        return _gather_all(psum((bnp.sin(b) * b).sum(0), names0), P(*spec[1:]))

    sharded = shard(local, mesh, spec, P())
    g = blu.grad(lambda v: (sharded(v) ** 2).sum())(x)
    want = blu.grad(lambda v: (((bnp.sin(v) * v).sum(0)) ** 2).sum())(x)
    np.testing.assert_allclose(np.asarray(g), np.asarray(want), rtol=1e-9, atol=1e-12)


@given(st.data())
def test_data_parallel_gradient_inside_shard(data):
    # shard_map's rule: the gradient, taken per device, of the pmean-ed loss w.r.t. the
    # replicated parameters is the full-batch gradient; that of the local loss is the sum of
    # the devices' gradients
    mesh = data.draw(meshes())
    spec, _ = data.draw(sharded_arrays(mesh, min_rank=1, max_rank=1))
    names = spec.names_of(0)
    n = math.prod(mesh.shape[m] for m in names)
    rng = np.random.default_rng(n)
    x = rng.standard_normal((n * 3, 4))
    w = {"w": rng.standard_normal((4, 2)), "b": rng.standard_normal((2,))}

    def loss(p, xb):
        return bnp.mean(bnp.tanh(xb @ p["w"] + p["b"]) ** 2)

    def step(p, xb):
        l, g = blu.value_and_grad(lambda p: pmean(loss(p, xb), names))(p)
        return l, g, blu.grad(loss)(p, xb)

    l, g, g_sum = blu.jit(shard(step, mesh, (P(), P(names or None)), P()))(w, x)
    rl, rg = blu.value_and_grad(loss)(w, x)
    np.testing.assert_allclose(float(l), float(rl), rtol=1e-12)
    for k in w:
        np.testing.assert_allclose(np.asarray(g[k]), np.asarray(rg[k]), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(
            np.asarray(g_sum[k]), n * np.asarray(rg[k]), rtol=1e-10, atol=1e-12
        )


def test_check_grads_through_shard():
    mesh = _mesh((2, 2), ("x", "y"))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 4))

    def local(b):
        return bnp.tanh(all_gather(b, "y", axis=1, tiled=True)) * psum(b.sum(), ("x", "y"))

    f = shard(local, mesh, P("x", "y"), P("x"))
    check_grads(f, [x], order=2)


def test_replicated_input_gradient_sums_over_devices():
    mesh = _mesh((4,), ("x",))
    w = np.array([0.5, -1.0])
    xs = np.arange(8.0).reshape(4, 2)
    f = shard(lambda w, xb: (xb * w).sum(1), mesh, (P(), P("x")), P("x"))
    g = blu.grad(lambda w: f(w, xs).sum())(w)
    np.testing.assert_allclose(np.asarray(g), xs.sum(0))


# ---- composition with jit and vmap --------------------------------------------------------------


@given(st.data())
def test_jit_and_vmap_of_shard(data):
    mesh = data.draw(meshes())
    spec, x = data.draw(sharded_arrays(mesh, min_rank=1))
    f = shard(lambda b: bnp.cos(b) * 2.0 + psum(b.sum(), mesh.axis_names), mesh, spec, spec)
    replicas = math.prod(mesh.shape[n] for n in mesh.axis_names if n not in spec.all_names())
    want = np.cos(x) * 2.0 + x.sum() * replicas  # each block counted once per replica
    np.testing.assert_allclose(np.asarray(f(x)), want, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.asarray(blu.jit(f)(x)), want, rtol=1e-12, atol=1e-12)
    xs = np.stack([x, x * 2.0, -x])
    got = blu.vmap(f)(xs)
    np.testing.assert_allclose(np.asarray(got), loop_vmap(f, [xs], [0]), rtol=1e-12, atol=1e-12)


def test_jit_inside_shard_and_named_vmap_inside_shard():
    mesh = _mesh((2, 2), ("x", "y"))
    x = np.arange(16.0).reshape(4, 4)
    inner = blu.jit(lambda b: psum(b, "x") * 2.0)
    out = shard(inner, mesh, P("x", "y"), P(None, "y"))(x)
    np.testing.assert_allclose(np.asarray(out), 2 * x.reshape(2, 2, 4).sum(0))
    # a vmap axis of its own inside the per-device program
    f = shard(
        lambda b: blu.vmap(lambda r: psum(r, ("v", "x")), axis_name="v")(b), mesh, P("x"), P()
    )
    want = x.sum(0)
    np.testing.assert_allclose(np.asarray(f(x)), np.tile(want, (2, 1)))


def test_scan_with_collectives_inside_shard():
    mesh = _mesh((4,), ("x",))
    x = np.arange(8.0)

    def f(b):
        def body(c, _):
            c = ppermute_ring(c) + psum(b, "x")
            return c, axis_index("x")

        return lax.scan(body, b, None, length=3)

    def ppermute_ring(c):
        from blu.parallel import ppermute

        return ppermute(c, "x", [(i, (i + 1) % 4) for i in range(4)])

    c, ys = shard(f, mesh, P("x"), (P("x"), P("x")))(x)
    blocks, s = x.reshape(4, 2), x.reshape(4, 2).sum(0)
    ref = blocks.copy()
    for _ in range(3):
        ref = np.roll(ref, 1, axis=0) + s
    np.testing.assert_allclose(np.asarray(c), ref.reshape(-1))
    np.testing.assert_array_equal(np.asarray(ys), np.repeat(np.arange(4), 3))


# ---- device_put and sharded arrays --------------------------------------------------------------


@given(st.data())
def test_device_put_shards(data):
    mesh = data.draw(meshes())
    spec, x = data.draw(sharded_arrays(mesh))
    s = NamedSharding(mesh, spec)
    a = device_put(x, s)
    assert isinstance(a, ShardedArray) and a.sharding == s and a.shape == x.shape
    np.testing.assert_array_equal(np.asarray(a), x)
    shards = a.addressable_shards
    assert [sh.device for sh in shards] == list(mesh.devices.flat)
    block = s.shard_shape(x.shape)
    for sh in shards:
        assert np.asarray(sh.data).shape == block
        np.testing.assert_array_equal(np.asarray(sh.data), x[sh.index])
    # each block once per replica: (block, replica_id) pairs are distinct, ids 0..replicas-1
    keys = {(tuple((i.start, i.stop) for i in sh.index), sh.replica_id) for sh in shards}
    if x.size:  # empty blocks all read slice(0, 0): indistinguishable by their index
        assert len(keys) == len(shards)
    replicas = math.prod(mesh.shape[n] for n in mesh.axis_names if n not in spec.all_names())
    assert {sh.replica_id for sh in shards} == set(range(replicas))
    # an eager operation sees the global array
    np.testing.assert_allclose(np.asarray(a * 2.0), x * 2.0)
    # JAX's Array / Sharding attributes (they raised AttributeError): all virtual devices are
    # this process's; replicated iff every axis the spec names has size 1
    whole = all(mesh.shape[n] == 1 for n in spec.all_names())
    assert a.is_fully_replicated is whole and s.is_fully_replicated is whole
    assert s.num_devices == mesh.size == len(s.addressable_devices)
    assert s.addressable_devices == set(mesh.devices.flat) and s.is_fully_addressable
    assert s.memory_kind is None
    assert s.addressable_devices_indices_map(x.shape) == {sh.device: sh.index for sh in shards}
    glob = a.global_shards
    assert [(g.device, g.index, g.replica_id) for g in glob] == [
        (sh.device, sh.index, sh.replica_id) for sh in shards
    ]
    for g in glob:
        np.testing.assert_array_equal(np.asarray(g.data), x[g.index])


def test_device_put_pytrees_and_devices():
    mesh = make_mesh((2, 4), ("x", "y"))
    tree = {"a": np.ones((4, 8)), "b": [np.zeros(2), 3.0]}
    out = device_put(tree, NamedSharding(mesh, P()))
    assert all(isinstance(v, ShardedArray) for v in (out["a"], out["b"][0], out["b"][1]))
    specs = {"a": NamedSharding(mesh, P("x", "y")), "b": NamedSharding(mesh, P())}
    out = device_put(tree, specs)
    assert out["a"].sharding.spec == P("x", "y") and out["b"][0].sharding.spec == P()
    plain = device_put(np.arange(3), devices()[0])
    assert type(plain) is blu.Array
    assert len(devices()) == 8 and mesh.size == 8 and mesh.shape == {"x": 2, "y": 4}
    assert plain.devices() == {devices()[0]} and out["a"].devices() == set(devices())


def test_device_put_to_a_named_device_records_it():
    x = np.arange(6.0).reshape(2, 3)
    for k in (3, 7):
        a = blu.device_put(x, devices()[k])
        assert a.devices() == {devices()[k]} and a.device == devices()[k]
        assert a.sharding == blu.sharding.SingleDeviceSharding(devices()[k])
        np.testing.assert_array_equal(np.asarray(a), x)
        (sh,) = a.addressable_shards  # its one block, on its device
        assert sh.device == devices()[k]
        np.testing.assert_array_equal(np.asarray(sh.data), x)
        np.testing.assert_array_equal(np.asarray(blu.jit(lambda v: v * 2.0)(a)), x * 2.0)
    with pytest.raises(BluValueError, match=r"Device\(id=99.*not a device of this job"):
        device_put(np.arange(3), blu.sharding.Device(99))


def test_device_put_takes_a_single_device_sharding():
    # JAX's device_put(x, y.sharding) for an array y on one device (it raised "expected a
    # NamedSharding or Device"), alone or as a leaf of a pytree of shardings
    x = np.arange(6.0).reshape(2, 3)
    on3 = blu.device_put(x, devices()[3])
    a = blu.device_put(x + 1, on3.sharding)
    assert a.devices() == {devices()[3]} and a.sharding == on3.sharding
    np.testing.assert_array_equal(np.asarray(a), x + 1)
    mesh = make_mesh((8,), ("d",))
    tree = device_put([x, np.arange(8.0)], [on3.sharding, NamedSharding(mesh, P("d"))])
    assert tree[0].sharding == on3.sharding and tree[1].sharding.spec == P("d")
    np.testing.assert_array_equal(np.asarray(tree[0]), x)
    np.testing.assert_array_equal(np.asarray(tree[1]), np.arange(8.0))


@pytest.mark.parametrize("shape", [(2.5, 4), (-2, -4), (-1, -8), (0, 8), (8.0,), 8])
def test_make_mesh_sizes_must_be_positive_integers(shape):
    # (2.5, 4) was truncated to a (2, 4) mesh; negative sizes reached numpy's reshape
    with pytest.raises(BluValueError, match="make_mesh: axis_shapes must be positive integers"):
        blu.make_mesh(shape, ("x", "y")[: len(shape) if isinstance(shape, tuple) else 1])
    mesh = blu.make_mesh((np.int64(2), 4), ("x", "y"))  # numpy integers are integers
    assert mesh.shape == {"x": 2, "y": 4} and mesh.size == len(devices()) == 8


def test_parallel_make_mesh_takes_devices_by_jax_keyword():
    # blu.parallel.make_mesh named it devices_ (a raw TypeError for JAX's devices=)
    order = [devices()[i] for i in (7, 5, 3, 1, 6, 4, 2, 0)]
    mesh = make_mesh((2, 4), ("x", "y"), devices=order)
    assert mesh == blu.make_mesh((2, 4), ("x", "y"), devices=order)
    assert mesh.device_ids.tolist() == [[7, 5, 3, 1], [6, 4, 2, 0]]
    x = device_put(np.arange(8.0), NamedSharding(mesh, P(("x", "y"))))
    assert [sh.device.id for sh in x.addressable_shards] == [7, 5, 3, 1, 6, 4, 2, 0]
    np.testing.assert_array_equal([float(sh.data[0]) for sh in x.addressable_shards], range(8))


def test_shard_accepts_sharded_arrays_and_returns_them():
    mesh = make_mesh((8,), ("d",))
    x = device_put(np.arange(16.0), NamedSharding(mesh, P("d")))
    y = shard(lambda b: b + axis_index("d"), mesh, P("d"), P("d"))(x)
    np.testing.assert_allclose(np.asarray(y), np.arange(16.0) + np.repeat(np.arange(8), 2))
    assert y.sharding.spec == P("d")


# ---- errors -------------------------------------------------------------------------------------


def test_errors(set_flag):
    mesh = make_mesh((2, 4), ("x", "y"))
    f = lambda b: b  # noqa: E731
    with pytest.raises(BluShapeError, match=r"splits dimension 0 \(size 6\).*total size 4"):
        shard(f, mesh, P("y"), P("y"))(np.ones(6))
    with pytest.raises(BluShapeError, match="does not divide"):
        device_put(np.ones((3, 4)), NamedSharding(mesh, P("x")))
    with pytest.raises(BluValueError, match=r"names axis 'w', which is not an axis of Mesh"):
        shard(f, mesh, P("w"), P())(np.ones(8))
    with pytest.raises(BluValueError, match="not an axis of"):
        NamedSharding(mesh, P(None, "q"))
    with pytest.raises(BluValueError, match="uses a mesh axis twice"):
        shard(f, mesh, P("x", "x"), P())(np.ones((2, 2)))
    with pytest.raises(BluValueError, match="has 2 entries for an array of rank 1"):
        shard(f, mesh, P("x", None), P())(np.ones(4))
    with pytest.raises(BluValueError, match=r"mesh shape \(3,\) holds 3 devices but there are 8"):
        make_mesh((3,), ("x",))
    with pytest.raises(BluValueError, match="2 axis names"):
        Mesh(np.array(devices()[:4], dtype=object), ("a", "b"))
    with pytest.raises(BluValueError, match="appears twice"):
        Mesh(np.array([devices()[0], devices()[0]], dtype=object), ("a",))
    with pytest.raises(BluValueError, match=r"differs across mesh axis 'y'.*does not name 'y'"):
        shard(lambda b: b * axis_index("y"), mesh, P("x"), P("x"))(np.ones(4))
    with pytest.raises(BluValueError, match="does not match the structure"):
        shard(lambda a, b: a, mesh, (P(), P(), P()), P())(np.ones(2), np.ones(2))
    with pytest.raises(BluValueError, match="expected a Mesh"):
        shard(f, "mesh", P(), P())
    with pytest.raises(BluTypeError, match=r"keyword arguments \['c'\] are not taken"):
        shard(lambda b, c=1: b * c, mesh, P("x"), P("x"))(np.ones(4), c=2)  # (a raw TypeError)
    with pytest.raises(BluValueError, match="BLU_NUM_CPU_DEVICES must be a positive integer"):
        set_flag("num_cpu_devices", "zero")
        devices()


def test_jit_over_sharded_arrays_partitions_or_runs_the_shard_inside():
    mesh = make_mesh((8,), ("d",))
    x = device_put(np.arange(8.0), NamedSharding(mesh, P("d")))
    doubled = blu.jit(lambda v: v * 2)(x)  # partitioned (blu.parallel.spmd): the split kept
    np.testing.assert_allclose(np.asarray(doubled), np.arange(8.0) * 2)
    assert doubled.sharding == NamedSharding(mesh, P("d"))
    # a function that runs shard itself is the per-device program already: not partitioned
    ok = blu.jit(lambda v: shard(lambda b: psum(b, "d"), mesh, P("d"), P())(v) + 1.0)(x)
    np.testing.assert_allclose(np.asarray(ok), x.reshape(8, 1).sum(0) + 1.0)
    np.testing.assert_allclose(
        np.asarray(blu.jit(lambda v: v * 2)(np.asarray(x))), np.arange(8.0) * 2
    )


def test_psum_scatter_then_all_gather_is_psum():
    mesh = make_mesh((8,), ("d",))
    x = np.arange(64.0).reshape(8, 8)
    f = shard(lambda b: all_gather(psum_scatter(b[0], "d", tiled=True), "d", tiled=True),
              mesh, P("d"), P())  # fmt: skip
    np.testing.assert_allclose(np.asarray(f(x)), x.sum(0))


def test_a_jitted_function_retraces_under_another_mesh():
    from blu.transforms import jit as jit_mod

    if not hasattr(jit_mod, "note_shard"):
        pytest.skip("needs the jit hook (axis env in the jit cache key) from the lead")
    inner = blu.jit(lambda b: pmean(b, "x") + all_gather(b, "x").sum())
    for n in (4, 2, 8):
        mesh = _mesh((n,), ("x",))
        x = np.arange(2.0 * n)
        out = shard(inner, mesh, P("x"), P())(x)
        blocks = x.reshape(n, 2)
        np.testing.assert_allclose(np.asarray(out), blocks.mean(0) + x.sum())
