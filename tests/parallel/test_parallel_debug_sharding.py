"""``blu.debug.visualize_sharding`` / ``visualize_array_sharding`` / ``inspect_array_sharding``
(JAX's) on 8 virtual CPU devices: the printed grids are written out by hand from JAX's sizing
(10 lines high times ``scale`` for 2-D arrays, 2.5 characters per unit of aspect, at least
``min_width``) and its labels (``CPU`` and the sorted ids holding a block)."""

from __future__ import annotations

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu.core.errors import BluTypeError, BluValueError
from blu.debug import inspect_array_sharding, visualize_array_sharding, visualize_sharding
from blu.parallel import NamedSharding, P, with_sharding_constraint
from tests.helpers import first_devices_mesh


@pytest.fixture(autouse=True)
def _devices(set_flag):
    set_flag("num_cpu_devices", 8)


def _mesh():
    return first_devices_mesh((2, 4), ("x", "y"))


def _grid(rows: list[list[str]], widths: list[int], lines: int = 1, at: int = 0) -> str:
    """The expected box: each row ``lines`` high with the labels centred on line ``at``."""
    out = ["┌" + "┬".join("─" * w for w in widths) + "┐"]
    for r, labels in enumerate(rows):
        for k in range(lines):
            cells = [(lab if k == at else "").center(w) for lab, w in zip(labels, widths)]
            out.append("│" + "│".join(cells) + "│")
        if r < len(rows) - 1:
            out.append("├" + "┼".join("─" * w for w in widths) + "┤")
    out.append("└" + "┴".join("─" * w for w in widths) + "┘")
    return "\n".join(out) + "\n\n"


def test_2d_fully_split(capsys):
    visualize_sharding((8, 8), NamedSharding(_mesh(), P("x", "y")))
    # each block: half the height (5 lines less padding: 4) and a quarter of 10 * 2.5 columns
    # (6, raised to min_width 9, less 2 for padding: 7)
    want = _grid([["CPU 0", "CPU 1", "CPU 2", "CPU 3"], ["CPU 4", "CPU 5", "CPU 6", "CPU 7"]],
                 [7] * 4, lines=4, at=1)  # fmt: skip
    assert capsys.readouterr().out == want


def test_2d_partially_replicated_rows_and_columns(capsys):
    mesh = _mesh()
    visualize_sharding((8, 8), NamedSharding(mesh, P("x")))
    rows = capsys.readouterr().out
    assert rows == _grid([["CPU 0,1,2,3"], ["CPU 4,5,6,7"]], [23], lines=4, at=1)
    visualize_sharding((8, 16), NamedSharding(mesh, P(None, "y")))
    # one row of height 10 (9 lines, label on line 4); columns a quarter of 20 * 2.5 = 12 - 2
    cols = capsys.readouterr().out
    assert cols == _grid([["CPU 0,4", "CPU 1,5", "CPU 2,6", "CPU 3,7"]], [10] * 4, lines=9, at=4)


def test_1d_split_replicated_and_over_two_axes(capsys):
    mesh = _mesh()
    visualize_sharding((8,), NamedSharding(mesh, P("y")))
    assert capsys.readouterr().out == _grid([["CPU 0,4", "CPU 1,5", "CPU 2,6", "CPU 3,7"]], [7] * 4)
    visualize_sharding((16,), NamedSharding(mesh, P(("x", "y"))))
    assert capsys.readouterr().out == _grid([[f"CPU {i}" for i in range(8)]], [7] * 8)
    visualize_sharding((4,), NamedSharding(mesh, P()))
    assert capsys.readouterr().out == _grid([["CPU 0,1,2,3,4,5,6,7"]], [19])


def test_scale_and_widths(capsys):
    mesh = _mesh()
    visualize_sharding((8, 8), NamedSharding(mesh, P("x", "y")), scale=2.0, min_width=3)
    # height 20: blocks of 10 (9 lines, label on line 4); base width 20: 2.5 * 20 / 4 = 12 - 2
    want = _grid([["CPU 0", "CPU 1", "CPU 2", "CPU 3"], ["CPU 4", "CPU 5", "CPU 6", "CPU 7"]],
                 [10] * 4, lines=9, at=4)  # fmt: skip
    assert capsys.readouterr().out == want
    visualize_sharding((64,), NamedSharding(mesh, P(("x", "y"))), max_width=30)
    # 8 columns of 7 do not fit in 30 (less 9 borders): each cut to its label's 5
    assert capsys.readouterr().out == _grid([[f"CPU {i}" for i in range(8)]], [5] * 8)


def test_visualize_array_sharding_of_sharded_and_plain_arrays(capsys):
    mesh = _mesh()
    x = blu.device_put(np.arange(32.0).reshape(4, 8), NamedSharding(mesh, P("x", "y")))
    visualize_array_sharding(x)
    # height 10 * 4 / 4... aspect 8 / 4: base width 20, each quarter 12.5 -> 12 - 2
    want = _grid([["CPU 0", "CPU 1", "CPU 2", "CPU 3"], ["CPU 4", "CPU 5", "CPU 6", "CPU 7"]],
                 [10] * 4, lines=4, at=1)  # fmt: skip
    assert capsys.readouterr().out == want
    visualize_array_sharding(bnp.ones((3,)))  # one device: 1 / 3 * 10 -> 3 * 2.5 -> min 9
    assert capsys.readouterr().out == _grid([["CPU 0"]], [7])


def test_visualize_refuses_other_ranks():
    s = NamedSharding(_mesh(), P())
    with pytest.raises(BluValueError, match=r"1 or 2 dimensions.*\(2, 2, 2\)"):
        visualize_sharding((2, 2, 2), s)
    with pytest.raises(BluValueError, match="1 or 2 dimensions"):
        visualize_sharding((), s)
    with pytest.raises(BluValueError, match="1 or 2 dimensions"):
        visualize_array_sharding(bnp.ones((2, 2, 2)))


def test_visualize_refuses_a_non_sharding():
    # a PartitionSpec or a string where the sharding goes: a BluTypeError naming the type
    with pytest.raises(BluTypeError, match="sharding must be a Sharding.*PartitionSpec"):
        visualize_sharding((2, 2), P("x"))
    with pytest.raises(BluTypeError, match="sharding must be a Sharding.*str"):
        visualize_sharding((2, 2), "x")


def test_inspect_eager_and_in_plain_jit():
    mesh = _mesh()
    x = blu.device_put(np.ones((8, 4), np.float32), NamedSharding(mesh, P("y")))
    got = []
    inspect_array_sharding({"a": x, "b": bnp.ones(2)}, callback=got.append)
    assert got[0] == NamedSharding(mesh, P("y"))
    assert got[1] == bnp.ones(2).sharding and got[1].device_set == {blu.parallel.devices()[0]}

    got.clear()
    f = blu.jit(lambda a: (inspect_array_sharding(a * 2, callback=got.append), a + 1)[1])
    np.testing.assert_allclose(np.asarray(f(bnp.ones(3))), np.full(3, 2.0))
    f(bnp.ones(3))  # cached: no second call back (JAX's calls back when compiling)
    assert [len(s.device_set) for s in got] == [1]


def test_inspect_inside_a_partitioned_jit_reports_the_layouts():
    mesh = _mesh()
    x = blu.device_put(np.arange(64.0).reshape(8, 8), NamedSharding(mesh, P("x", "y")))
    got = []

    def f(a):
        b = bnp.sin(a)
        inspect_array_sharding(b, callback=got.append)
        c = with_sharding_constraint(b, NamedSharding(mesh, P("y", None)))
        inspect_array_sharding(c, callback=got.append)
        return c * 2

    g = blu.jit(f)
    np.testing.assert_allclose(np.asarray(g(x)), 2 * np.sin(np.arange(64.0).reshape(8, 8)))
    assert got == [NamedSharding(mesh, P("x", "y")), NamedSharding(mesh, P("y"))]
    g(x)
    assert len(got) == 2  # once per signature

    got.clear()
    h = blu.jit(lambda a: a.sum(), in_shardings=NamedSharding(mesh, P(None, "x")))
    grad_in = blu.jit(
        blu.grad(lambda a: (inspect_array_sharding(a, callback=got.append), (a * a).sum())[1]),
        in_shardings=NamedSharding(mesh, P(None, "x")),
    )
    np.testing.assert_allclose(np.asarray(grad_in(np.ones((4, 4)))), np.full((4, 4), 2.0))
    assert got == [NamedSharding(mesh, P(None, "x"))]
    assert float(h(np.ones((4, 4)))) == 16.0


def test_inspect_inside_shard_raises_and_bad_callback():
    mesh = _mesh()

    def body(a):
        inspect_array_sharding(a, callback=print)
        return a

    with pytest.raises(BluValueError, match="one device's block"):
        blu.shard(body, mesh, P("x"), P("x"))(np.ones((8,)))
    with pytest.raises(TypeError, match="not callable"):
        inspect_array_sharding(bnp.ones(2), callback=3)


def test_inspect_in_a_jit_that_runs_shard_on_sharded_arguments_raises():
    mesh = first_devices_mesh((8,), ("x",))
    x = blu.device_put(np.arange(8.0), NamedSharding(mesh, P("x")))
    got = []

    def f(a):
        inspect_array_sharding(a, callback=got.append)
        return blu.shard(lambda b: b * 2, mesh, P("x"), P("x"))(a)

    with pytest.raises(BluValueError, match="tracks no layout"):
        blu.jit(f)(x)
    assert got == []
    # the same function of an unsharded array: one device, called back when traced
    np.testing.assert_allclose(np.asarray(blu.jit(f)(np.arange(8.0))), 2 * np.arange(8.0))
    assert [len(s.device_set) for s in got] == [1]
