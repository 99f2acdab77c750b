"""JAX's top-level helpers: devices and processes, make_mesh, clear_caches, pure_callback,
blu.debug, blu.sharding and blu.errors; named_call, named_scope and ensure_compile_time_eval."""

from __future__ import annotations

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu.core import errors as core_errors


def test_device_helpers_single_process():
    assert blu.device_count() == len(blu.devices()) == 1
    assert blu.local_devices() == blu.devices()
    assert blu.local_device_count() == 1
    assert blu.default_backend() == "cpu"
    assert blu.process_index() == 0 and blu.process_count() == 1
    with pytest.raises(blu.errors.BluValueError, match="no 'gpu' devices"):
        blu.local_devices(backend="gpu")


def test_device_helpers_virtual_devices(set_flag):
    set_flag("num_cpu_devices", 4)
    assert blu.device_count() == 4 and blu.local_device_count() == 4
    mesh = blu.make_mesh((2, 2), ("a", "b"))
    assert mesh.shape == {"a": 2, "b": 2}
    s = blu.NamedSharding(mesh, blu.P("a", None))
    assert isinstance(s, blu.sharding.Sharding)
    assert blu.sharding.PartitionSpec is type(blu.P("a"))
    with pytest.raises(blu.errors.BluValueError, match="holds 6 devices"):
        blu.make_mesh((3, 2), ("a", "b"))
    with pytest.raises(blu.errors.BluValueError, match="axis_types"):
        blu.make_mesh((4,), ("a",), axis_types=("explicit",))


def test_errors_module_is_the_core_family():
    assert blu.errors.BluOutOfMemoryError is core_errors.BluOutOfMemoryError
    assert issubclass(blu.errors.ConcretizationTypeError, blu.errors.BluError)
    with pytest.raises(blu.errors.ConcretizationTypeError):
        blu.jit(lambda x: 1.0 if x > 0 else 2.0)(np.float32(1.0))


def test_clear_caches_retraces():
    traces = []

    @blu.jit
    def f(x):
        traces.append(1)
        return x + 1

    f(np.float32(1.0))
    f(np.float32(2.0))
    assert len(traces) == 1
    blu.clear_caches()
    assert float(f(np.float32(3.0))) == 4.0
    assert len(traces) == 2


def _host_sin(a):
    return np.sin(a.astype(np.float64)).astype(a.dtype)


def _sin_cb(x):
    return blu.pure_callback(_host_sin, blu.ShapeDtypeStruct(x.shape, x.dtype), x)


def test_pure_callback_eager_jit_vmap():
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    want = np.sin(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(_sin_cb(x)), want, rtol=1e-6)
    np.testing.assert_allclose(
        np.asarray(blu.jit(lambda v: _sin_cb(v) * 2)(x)), 2 * want, rtol=1e-6
    )
    calls = []

    def counted(a):
        calls.append(a.shape)
        return a * 3

    def g(v):
        return blu.pure_callback(counted, blu.ShapeDtypeStruct(v.shape, v.dtype), v)

    np.testing.assert_allclose(np.asarray(blu.vmap(g)(x)), 3 * x)
    assert calls == [(3,), (3,)]  # sequential: one call per row
    calls.clear()

    def h(v):
        return blu.pure_callback(
            counted, blu.ShapeDtypeStruct(v.shape, v.dtype), v, vmap_method="expand_dims"
        )

    np.testing.assert_allclose(np.asarray(blu.jit(blu.vmap(h))(x)), 3 * x)
    assert calls == [(2, 3)]  # one call with the batch


def test_pure_callback_pytrees_and_errors():
    def two(a, b):
        return {"s": a + b, "p": (a * b).astype(np.int32)}

    out = blu.pure_callback(
        two,
        {"s": blu.ShapeDtypeStruct((2,), np.float32), "p": blu.ShapeDtypeStruct((2,), np.int32)},
        np.array([1.0, 2.0], np.float32),
        b=np.array([3.0, 4.0], np.float32),
    )
    np.testing.assert_array_equal(np.asarray(out["s"]), [4.0, 6.0])
    assert out["p"].dtype == np.int32
    with pytest.raises(blu.errors.BluValueError, match=r"shape \(3,\)"):
        blu.pure_callback(lambda a: np.zeros(3), blu.ShapeDtypeStruct((2,), np.float32), np.ones(2))
    with pytest.raises(blu.errors.BluTypeError, match="custom_jvp"):
        blu.grad(lambda v: _sin_cb(v).sum())(np.ones(2, np.float32))


def test_debug_print_runs_each_call_under_jit(capsys):
    @blu.jit
    def f(x):
        blu.debug.print("x={x} sum={}", bnp.sum(x), x=x)
        return x * 2

    f(np.array([1.0, 2.0], np.float32))
    f(np.array([3.0, 4.0], np.float32))
    out = capsys.readouterr().out.splitlines()
    assert out == ["x=[1. 2.] sum=3.0", "x=[3. 4.] sum=7.0"]


def test_debug_callback_under_grad_and_vmap():
    seen = []

    def loss(w):
        blu.debug.callback(lambda v: seen.append(np.array(v)), w)
        return bnp.sum(w * w)

    g = blu.jit(blu.grad(loss))(np.array([1.0, -2.0], np.float32))
    np.testing.assert_allclose(np.asarray(g), [2.0, -4.0])
    np.testing.assert_array_equal(seen[-1], [1.0, -2.0])
    seen.clear()
    blu.vmap(lambda r: (blu.debug.callback(seen.append, r), r)[1])(np.eye(2, dtype=np.float32))
    assert len(seen) == 1 and seen[0].shape == (2, 2)  # the whole batch at once
    with pytest.raises(blu.errors.BluTypeError, match="disable_jit"):
        blu.debug.breakpoint()


def test_default_matmul_precision_and_aliases():
    before = blu.config.default_matmul_precision
    with blu.default_matmul_precision("tensorfloat32"):
        assert blu.config.default_matmul_precision == "tf32"
        with blu.default_matmul_precision("highest"):
            assert blu.config.default_matmul_precision == "fp32"
    assert blu.config.default_matmul_precision == before
    with pytest.raises(blu.errors.BluValueError, match="expected one of"):
        with blu.default_matmul_precision("fp8"):
            pass
    j = blu.jacobian(lambda x: x**2)(np.array([1.0, 3.0], np.float32))
    np.testing.assert_allclose(np.asarray(j), np.diag([2.0, 6.0]))
    assert isinstance(blu.devices()[0], blu.Device)


def test_array_devices_and_sharding():
    x = bnp.arange(6.0).reshape(2, 3)
    (dev,) = x.devices()
    assert dev.platform == "cpu" and dev.id == 0
    s = x.sharding
    assert isinstance(s, blu.sharding.Sharding) and isinstance(s, blu.sharding.SingleDeviceSharding)
    assert s.device_set == {dev} and s.is_fully_replicated and s.shard_shape(x.shape) == (2, 3)
    # the one block is the whole array
    (idx,) = s.devices_indices_map(x.shape).values()
    np.testing.assert_array_equal(np.asarray(x)[idx], np.arange(6.0).reshape(2, 3))
    assert s == blu.sharding.SingleDeviceSharding(dev) and hash(s) == hash(x.sharding)
    # JAX's Array.addressable_shards / global_shards (AttributeError before): one shard, the
    # whole array on its device
    for shards in (x.addressable_shards, x.global_shards):
        (sh,) = shards
        assert sh.device == dev and sh.replica_id == 0
        np.testing.assert_array_equal(np.asarray(sh.data), np.arange(6.0).reshape(2, 3))
        np.testing.assert_array_equal(np.asarray(x)[sh.index], np.arange(6.0).reshape(2, 3))
    assert x.is_fully_replicated and x.is_fully_addressable


def test_memory_analysis_of_the_default_target_and_shape_dtype_struct_tracing():
    f = blu.jit(lambda a, b: bnp.tanh(a @ b) * 2.0)
    a = np.ones((64, 32), np.float32)
    b = np.ones((32, 16), np.float32)
    m = f.lower(a, b).compile().memory_analysis()
    assert m is not None
    assert m.argument_size_in_bytes == a.nbytes + b.nbytes
    assert m.output_size_in_bytes == 64 * 16 * 4
    spec = blu.ShapeDtypeStruct((64, 32), np.float32)
    jaxpr = blu.make_jaxpr(lambda a, b: bnp.tanh(a @ b))(spec, b)
    assert [str(v.aval) for v in jaxpr.jaxpr.invars] == [
        str(blu.core.aval.ShapedArray((64, 32), np.float32)),
        str(blu.core.aval.ShapedArray((32, 16), np.float32)),
    ]
    assert jaxpr.jaxpr.outvars[0].aval.shape == (64, 16)


# ---- named_call / named_scope / ensure_compile_time_eval ----------------------------------------


def _layer(x, w):
    return bnp.tanh(x @ w) * 2.0


def test_named_call_and_named_scope_keep_results_and_jaxprs(tmp_path):
    x = np.arange(6.0).reshape(2, 3) / 7.0
    w = np.linspace(-1.0, 1.0, 12).reshape(3, 4)
    want = np.tanh(x @ w) * 2.0  # numpy float64
    named = blu.named_call(_layer, name="dense")
    assert named.__name__ == "_layer"

    def scoped(x, w):
        with blu.named_scope("block"):
            return _layer(x, w)

    for fn in (named, scoped, blu.jit(named), blu.named_call(_layer)):
        np.testing.assert_allclose(np.asarray(fn(x, w)), want, rtol=1e-12)
    plain = str(blu.make_jaxpr(_layer)(x, w))
    assert str(blu.make_jaxpr(named)(x, w)) == plain
    assert str(blu.make_jaxpr(scoped)(x, w)) == plain
    g = blu.grad(lambda w: bnp.sum(named(x, w)))(w)
    want_g = x.T @ (2.0 * (1.0 - np.tanh(x @ w) ** 2))
    np.testing.assert_allclose(np.asarray(g), want_g, rtol=1e-12)
    # the names are spans of a profiler trace
    with blu.profiler.trace(tmp_path / "t.json") as writer:
        named(x, w)
        scoped(x, w)
        blu.named_call(_layer)(x, w)
    spans = [e["name"] for e in writer.events if e.get("cat") == "user"]
    assert spans == ["dense", "block", "_layer"]


def test_named_scope_and_named_call_want_string_names():
    with pytest.raises(blu.errors.BluTypeError, match="must be a string"):
        with blu.named_scope(3):
            pass
    with pytest.raises(blu.errors.BluTypeError, match="must be a string"):
        blu.named_call(_layer, name=("a",))


def test_ensure_compile_time_eval_gives_concrete_values_under_jit():
    @blu.jit
    def f(x):
        with blu.ensure_compile_time_eval():
            n = int(bnp.sum(bnp.arange(4)))  # 0 + 1 + 2 + 3, a Python int while tracing
            scale = bnp.cos(np.float64(0.5))
            assert isinstance(scale, blu.Array)  # concrete, not a tracer
            y = x[:n] * scale  # x is traced: staged as usual
        return y + bnp.zeros(n)

    x = np.linspace(0.0, 1.0, 9)
    np.testing.assert_allclose(np.asarray(f(x)), x[:6] * np.cos(0.5), rtol=1e-12)

    def no_block(x):
        return x[: int(bnp.sum(bnp.arange(4)))]

    with pytest.raises(blu.errors.ConcretizationTypeError):
        blu.jit(no_block)(x)


def test_ensure_compile_time_eval_under_grad_and_vmap_and_at_the_root():
    def h(x):
        with blu.ensure_compile_time_eval():
            c = bnp.cos(np.float64(0.5))
            assert isinstance(c, blu.Array)
            return bnp.sin(x) * c

    x = np.float64(1.0)
    np.testing.assert_allclose(float(blu.grad(h)(x)), np.cos(1.0) * np.cos(0.5), rtol=1e-12)
    xs = np.array([0.0, 1.0, 2.0])
    np.testing.assert_allclose(np.asarray(blu.vmap(h)(xs)), np.sin(xs) * np.cos(0.5), rtol=1e-12)
    np.testing.assert_allclose(float(h(x)), np.sin(1.0) * np.cos(0.5), rtol=1e-12)
    # the jaxpr of a function without the block is unchanged by one used elsewhere
    assert "cos" in str(blu.make_jaxpr(lambda x: bnp.sin(x) * bnp.cos(np.float64(0.5)))(x))
    assert "cos" not in str(blu.make_jaxpr(h)(x))
