"""JAX's mesh and sharding API around the partitioner on virtual CPU devices: ``Mesh``'s
``axis_sizes`` / ``shape`` and ``with mesh:``, ``PartitionSpec.UNCONSTRAINED``, the sharding of
a partitioned ``jit``'s outputs. Values against numpy; layouts against the blocks each device
holds.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

import blu
from blu.core.errors import BluValueError
from blu.parallel import NamedSharding, P, make_mesh, with_sharding_constraint


@pytest.fixture(autouse=True)
def _devices(set_flag):
    set_flag("num_cpu_devices", 4)


def _blocks(out):
    return [np.asarray(s.data) for s in out.addressable_shards]


def test_mesh_axis_sizes_shape_and_with_mesh():
    # JAX's Mesh.axis_sizes and OrderedDict shape; `with mesh:` names the mesh of bare
    # PartitionSpecs (it raised AttributeError / "given as PartitionSpecs only")
    mesh = make_mesh((2, 2), ("a", "b"))
    assert mesh.axis_sizes == (2, 2)
    assert isinstance(mesh.shape, collections.OrderedDict)
    assert list(mesh.shape.items()) == [("a", 2), ("b", 2)]
    x = np.arange(32, dtype=np.float64).reshape(8, 4)

    def f(v):
        return with_sharding_constraint(v * 2, P(None, "b"))

    with mesh as m:
        assert m is mesh
        out = blu.jit(f, in_shardings=P("a"))(x)
        split = blu.jit(f, in_shardings=P("a"), out_shardings=P(("a", "b")))(x)
    np.testing.assert_array_equal(np.asarray(out), 2 * x)
    assert out.sharding == NamedSharding(mesh, P(None, "b"))  # the constraint's layout
    for k, (_, b) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        np.testing.assert_array_equal(_blocks(out)[k], 2 * x[:, 2 * b : 2 * b + 2])
        np.testing.assert_array_equal(_blocks(split)[k], 2 * x[2 * k : 2 * k + 2])
    with pytest.raises(BluValueError, match="name the mesh"):  # (outside it again)
        blu.jit(f, in_shardings=P("a"))(x)


def test_unconstrained_keeps_the_partitioners_split():
    # JAX's PartitionSpec.UNCONSTRAINED (it was an AttributeError): the dimension keeps its
    # split, less the axes the constrained dimensions take
    mesh = make_mesh((2, 2), ("a", "b"))
    x = np.arange(32, dtype=np.float64).reshape(8, 4)
    rows = NamedSharding(mesh, P("a"))
    out = blu.jit(
        lambda v: with_sharding_constraint(v * 2, P(P.UNCONSTRAINED, "b")), in_shardings=rows
    )(x)
    assert out.sharding == NamedSharding(mesh, P("a", "b"))
    for k, (a, b) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        np.testing.assert_array_equal(_blocks(out)[k], 2 * x[4 * a : 4 * a + 4, 2 * b : 2 * b + 2])
    out = blu.jit(
        lambda v: with_sharding_constraint(v, P(P.UNCONSTRAINED, "a")), in_shardings=rows
    )(x)
    assert out.sharding == NamedSharding(mesh, P(None, "a"))  # 'a' moved to dimension 1
    np.testing.assert_array_equal(np.asarray(out), x)
    assert repr(P(P.UNCONSTRAINED, "a")) == "P(P.UNCONSTRAINED, 'a')"
    np.testing.assert_array_equal(np.asarray(with_sharding_constraint(x, P(P.UNCONSTRAINED))), x)
    with pytest.raises(BluValueError, match="UNCONSTRAINED is only allowed"):
        blu.device_put(x, NamedSharding(mesh, P(P.UNCONSTRAINED)))


def test_replicated_outputs_report_their_named_sharding():
    # JAX's: a partitioned jit's replicated output has NamedSharding(mesh, P()) (it reported a
    # SingleDeviceSharding); it stays a plain array to jit (a later jit of it alone is not
    # partitioned) and holds the whole value on every device
    mesh = make_mesh((2, 2), ("a", "b"))
    x = np.arange(32, dtype=np.float64).reshape(8, 4)
    f = blu.jit(lambda v: (v.sum(0), v * 3), in_shardings=NamedSharding(mesh, P("a")))
    total, rows = f(x)
    np.testing.assert_allclose(np.asarray(total), x.sum(0), rtol=1e-12)
    assert total.sharding == NamedSharding(mesh, P())
    assert total.sharding.is_fully_replicated and total.devices() == set(mesh.devices.flat)
    shards = total.addressable_shards
    assert [s.device for s in shards] == list(mesh.devices.flat)
    assert [s.replica_id for s in shards] == [0, 1, 2, 3]
    for s in shards:
        np.testing.assert_allclose(np.asarray(s.data), x.sum(0), rtol=1e-12)
    assert rows.sharding == NamedSharding(mesh, P("a"))
    g = blu.jit(lambda t: t * 2)
    np.testing.assert_allclose(np.asarray(g(total)), 2 * x.sum(0), rtol=1e-12)
    assert not getattr(g, "_spmd_cache", None)  # (not partitioned)
