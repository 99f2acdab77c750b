"""Random programs for the fuzzer of ``test_fuzz_programs.py``: hypothesis strategies that build
small programs from blu's primitives (elementwise, weak-typed Python scalars, broadcasting,
reductions, shape operations, products, cumulative sums, sorting, softmax, and control flow:
``lax.cond``, ``lax.scan``, ``lax.fori_loop``, ``lax.while_loop``), on float32/float64 inputs of
random shapes with size-0 and size-1 dimensions, taken and returned as pytrees.

A ``Program`` is data (its steps and their parameters), run by one interpreter over a namespace:
blu's (``BLU``: ``blu.numpy``, ``blu.lax``) or numpy's (``NUMPY``: plain Python control flow),
so the numpy run is an independent float64 reference. Each step's result shape and dtype come
from running the numpy form on the native dtypes while the program is drawn (numpy 2 promotes
Python scalars weakly, as blu and JAX do). ``repr(program)`` prints a call that rebuilds it (for
a regression test).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import ml_dtypes  # noqa: F401  (numpy knows bfloat16 by name)
import numpy as np
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu import lax

# ---- the two namespaces the programs run in ------------------------------------------------------


def _np_scan(f, init, xs, reverse=False):
    """``lax.scan`` as a Python loop (``xs`` a pytree of arrays sharing their leading axis)."""
    leaves, tree = blu.tree_util.tree_flatten(xs)
    c, ys = init, []
    order = range(leaves[0].shape[0])
    for i in reversed(order) if reverse else order:
        c, y = f(c, blu.tree_util.tree_unflatten(tree, [x[i] for x in leaves]))
        ys.append(y)
    if reverse:
        ys.reverse()
    if not ys:  # no step: the per-step output's shape from one step on zeros
        _, y = f(
            init,
            blu.tree_util.tree_unflatten(tree, [np.zeros(x.shape[1:], x.dtype) for x in leaves]),
        )
        return c, blu.tree_util.tree_map(
            lambda v: np.zeros((0,) + np.shape(v), np.asarray(v).dtype), y
        )
    return c, blu.tree_util.tree_map(lambda *v: np.stack(v), *ys)


def _np_fori(lo, hi, body, x):
    for i in range(lo, hi):
        x = body(i, x)
    return x


def _np_while(cond, body, c):
    while cond(c):
        c = body(c)
    return c


def _np_softmax(x, axis):
    if x.size == 0:
        return x
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _np_add_at(x, idx, v):
    out = np.array(x, copy=True)
    np.add.at(out, idx, v)
    return out


def _np_logsumexp(x, axis):
    mx = np.max(x, axis=axis, keepdims=True)
    return np.squeeze(mx, axis) + np.log(np.sum(np.exp(x - mx), axis=axis))


@blu.custom_jvp
def _softplus(x):
    return bnp.logaddexp(x, 0.0)


@_softplus.defjvp
def _softplus_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _softplus(x), blu.nn.sigmoid(x) * t


@blu.custom_jvp
def _scale(x):
    return x * 1.5


@_scale.defjvp
def _scale_jvp(primals, tangents):  # a linear function's rule: the function of its tangents
    return _scale(primals[0]), _scale(tangents[0])


@dataclasses.dataclass(frozen=True)
class Namespace:
    np: Any
    cond: Callable
    switch: Callable
    scan: Callable
    fori: Callable
    while_: Callable
    softmax: Callable
    sigmoid: Callable
    logsumexp: Callable
    add_at: Callable
    remat: Callable
    jit: Callable
    softplus: Callable
    matmul: Callable = bnp.matmul
    tensordot: Callable = lambda x, y: bnp.tensordot(x, y, axes=1)  # noqa: E731
    clip: Callable = bnp.clip
    scale: Callable = _scale


def _np_product(f):
    """numpy's product in the operands' promoted dtype (ml_dtypes' bfloat16 products give
    float32; blu and JAX keep bfloat16)."""
    return lambda x, y: np.asarray(f(x, y)).astype(np.result_type(x, y))


BLU = Namespace(bnp, lax.cond, lax.switch, lax.scan, lax.fori_loop, lax.while_loop,
                lambda x, axis: blu.nn.softmax(x, axis=axis), blu.nn.sigmoid,
                lambda x, axis: blu.nn.logsumexp(x, axis=axis),
                lambda x, idx, v: bnp.asarray(x).at[idx].add(v), blu.checkpoint, blu.jit,
                _softplus)  # fmt: skip
NUMPY = Namespace(np, lambda p, t, f, x: t(x) if p else f(x), lambda i, bs, x: bs[int(i)](x),
                  _np_scan, _np_fori, _np_while, _np_softmax, lambda x: 1.0 / (1.0 + np.exp(-x)),
                  _np_logsumexp, _np_add_at, lambda f: f, lambda f: f,
                  lambda x: np.logaddexp(x, 0.0), _np_product(np.matmul),
                  _np_product(lambda x, y: np.tensordot(x, y, axes=1)),
                  # Python bounds are weak: x's dtype (numpy gives float32 for a 0-d bfloat16)
                  lambda x, lo, hi: np.asarray(np.clip(x, lo, hi)).astype(x.dtype),
                  lambda x: x * 1.5)  # fmt: skip

# ---- the operations ------------------------------------------------------------------------------
# name -> fn(m, params, *xs): a result or a tuple of results. SMOOTH: differentiable at random
# points; FORWARD_ONLY: no reverse mode (a while_loop), as in JAX.

_SCALARS = (0.5, -1.5, 2.0, 3)  # Python scalars: weakly typed (the int too)


def _matmul(m, p, x):
    w = np.random.default_rng(p["seed"]).standard_normal((x.shape[-1], p["k"]))
    return m.matmul(x, w.astype(x.dtype))


def _scan(m, p, x):
    def body(c, xt):
        c = m.np.tanh(c * 0.7 + xt)
        return c, c * 2.0

    return m.scan(body, m.np.zeros(x.shape[1:], x.dtype), x, reverse=p["reverse"])


def _scan_tree(m, p, x, y):
    """A scan whose carry is a pytree and which reads two sequences (``y`` broadcast to ``x``)."""

    def body(c, xs):
        a, (b, n) = c
        xt, yt = xs
        a2 = (m.np.sin(a) * 0.5 + xt * yt).astype(a.dtype)  # y may have another dtype
        return (a2, (b + a2 * 0.25, n)), a2 - b

    init = (m.np.zeros(x.shape[1:], x.dtype), (m.np.zeros(x.shape[1:], x.dtype) + 0.5, 1.0))
    (a, (b, _)), ys = m.scan(body, init, (x, m.np.broadcast_to(y, x.shape)))
    return a, b, ys


def _switch(m, p, x):
    total = m.np.sum(x)
    index = (total > 0.0).astype("int32") + (total > 1.0).astype("int32")
    branches = [lambda v: m.np.cos(v), lambda v: v * 2.0, lambda v: m.np.tanh(v) - 1.0]
    return m.switch(index, branches, x)


def _take(m, p, x):
    n = x.shape[p["axis"]]
    idx = np.random.default_rng(p["seed"]).integers(0, n, p["k"])  # repeats, any order
    return m.np.take(x, idx, axis=p["axis"])


def _add_at(m, p, x, y):
    idx = np.random.default_rng(p["seed"]).integers(0, x.shape[0], p["k"])
    v = m.np.broadcast_to(m.np.sum(y) * 0.1, (p["k"],) + x.shape[1:]).astype(x.dtype)
    return m.add_at(x, idx, v)


def _while_counted(m, p, x):
    return m.while_(lambda c: c[0] < p["n"], lambda c: (c[0] + 1, m.np.cos(c[1]) * c[1]), (0, x))[1]


def _while_data(m, p, x):
    def cond(c):
        return (c[0] < 4) & (m.np.sum(c[1] * c[1]) < 10.0)

    return m.while_(cond, lambda c: (c[0] + 1, c[1] * 1.5 + 0.1), (0, x))[1]


OPS: dict[str, Callable] = {
    # elementwise, one operand
    "sin": lambda m, p, x: m.np.sin(x),
    "tanh": lambda m, p, x: m.np.tanh(x),
    "exp_tanh": lambda m, p, x: m.np.exp(m.np.tanh(x)),
    "log1p_sq": lambda m, p, x: m.np.log1p(x * x),
    "sqrt_1p": lambda m, p, x: m.np.sqrt(1.0 + x * x),
    "sigmoid": lambda m, p, x: m.sigmoid(x),
    "abs": lambda m, p, x: m.np.abs(x),
    "scalar_mul": lambda m, p, x: x * p["c"],
    "scalar_radd": lambda m, p, x: p["c"] + x,
    "scalar_rsub": lambda m, p, x: p["c"] - x,
    "scalar_div": lambda m, p, x: x / p["c"],
    "astype": lambda m, p, x: x.astype(p["dtype"]),
    # elementwise, two operands that broadcast
    "add": lambda m, p, x, y: x + y,
    "sub": lambda m, p, x, y: x - y,
    "mul": lambda m, p, x, y: x * y,
    "div": lambda m, p, x, y: x / (1.0 + y * y),
    "maximum": lambda m, p, x, y: m.np.maximum(x, y),
    "where": lambda m, p, x, y: m.np.where(x > y, x, y * 0.5),
    # reductions, shapes, products
    "sum": lambda m, p, x: m.np.sum(x, axis=p["axis"], keepdims=p["keepdims"]),
    "mean": lambda m, p, x: m.np.mean(x, axis=p["axis"], keepdims=p["keepdims"]),
    "max": lambda m, p, x: m.np.max(x, axis=p["axis"], keepdims=p["keepdims"]),
    "transpose": lambda m, p, x: m.np.transpose(x, p["perm"]),
    "reshape": lambda m, p, x: m.np.reshape(x, p["shape"]),
    "expand_dims": lambda m, p, x: m.np.expand_dims(x, p["axis"]),
    "broadcast_to": lambda m, p, x: m.np.broadcast_to(x, p["shape"]),
    "slice": lambda m, p, x: x[p["start"] :: p["step"]],
    "flip": lambda m, p, x: m.np.flip(x, p["axis"]),
    "concatenate": lambda m, p, x, y: m.np.concatenate([x, y], axis=p["axis"]),
    "matmul": _matmul,
    "cumsum": lambda m, p, x: m.np.cumsum(x, axis=p["axis"]),
    "sort": lambda m, p, x: m.np.sort(x, axis=p["axis"]),
    "softmax": lambda m, p, x: m.softmax(x, p["axis"]),
    # control flow
    "cond": lambda m, p, x: m.cond(
        m.np.sum(x) > p["c"], lambda v: m.np.sin(v), lambda v: m.np.tanh(v) * 0.5, x
    ),
    "scan": _scan,
    "fori": lambda m, p, x: m.fori(0, p["n"], lambda i, v: m.np.sin(v) * 0.9 + 0.1 * v, x),
    "while_counted": _while_counted,
    "switch": _switch,
    "scan_tree": _scan_tree,
    "remat": lambda m, p, x: m.remat(lambda v: m.np.sin(v) * v)(x),
    "jit": lambda m, p, x: m.jit(lambda v: m.np.tanh(v) + v * v)(x),
    "custom_jvp": lambda m, p, x: m.softplus(x),
    "custom_jvp_linear": lambda m, p, x: m.scale(x),
    # more array operations
    "take": _take,
    "add_at": _add_at,
    "tensordot": lambda m, p, x, y: m.tensordot(x, y),
    "clip": lambda m, p, x: m.clip(x, -0.5, 0.7),
    "logsumexp": lambda m, p, x: m.logsumexp(x, p["axis"]),
    "var": lambda m, p, x: m.np.var(x, axis=p["axis"]),
    "cumprod": lambda m, p, x: m.np.cumprod(x, axis=p["axis"]),
    "pad": lambda m, p, x: m.np.pad(x, p["width"]),
    "roll": lambda m, p, x: m.np.roll(x, p["shift"], axis=p["axis"]),
    "repeat": lambda m, p, x: m.np.repeat(x, 2, axis=p["axis"]),
    "triu": lambda m, p, x: m.np.triu(x),
    "while_data": _while_data,
}
NONSMOOTH = {"abs", "maximum", "where", "max", "sort", "cond", "while_data", "switch", "clip"}
FORWARD_ONLY = {"while_counted", "while_data"}


# ---- programs ------------------------------------------------------------------------------------


@dataclasses.dataclass
class Step:
    op: str
    args: tuple[int, ...]
    params: dict


@dataclasses.dataclass
class Program:
    """``inputs``: (shape, dtype name) per input leaf; ``tree``: how the inputs are packed
    ("flat": positional, "dict", "nested"); ``steps``: each appends its results to the values
    (inputs first); ``outputs``: the values returned (as a dict with a nested tuple)."""

    inputs: list[tuple[tuple[int, ...], str]]
    tree: str
    steps: list[Step]
    outputs: tuple[int, ...]
    seed: int = 0

    def __repr__(self) -> str:
        steps = ", ".join(f"Step({s.op!r}, {s.args!r}, {s.params!r})" for s in self.steps)
        return (f"Program({self.inputs!r}, {self.tree!r}, [{steps}], {self.outputs!r}, "
                f"seed={self.seed})")  # fmt: skip

    @property
    def smooth(self) -> bool:
        return not any(s.op in NONSMOOTH for s in self.steps)

    @property
    def reverse_ok(self) -> bool:
        return not any(s.op in FORWARD_ONLY for s in self.steps)

    @property
    def precision(self) -> str:
        """The least precise float dtype the program computes in (its tolerances')."""
        used = {dt for _, dt in self.inputs} | {
            s.params["dtype"] for s in self.steps if s.op == "astype"
        }
        return next(
            dt
            for dt in ("bfloat16", "float16", "float32", "float64")
            if dt in used or dt == "float64"
        )

    @property
    def n_ops(self) -> int:
        return 4 * len(self.steps) + 4

    # -- the inputs, packed and unpacked --

    def arrays(self, dtype: Any = None, batch: tuple[int, list] | None = None) -> list:
        """The input leaves (seeded normal values), in their dtypes or ``dtype``; with
        ``batch=(size, axes)``, a batch axis of ``size`` inserted at each leaf's axis."""
        rng = np.random.default_rng(self.seed)
        out = []
        for k, (shape, dt) in enumerate(self.inputs):
            shape = list(shape)
            if batch is not None and batch[1][k] is not None:
                shape.insert(batch[1][k] % (len(shape) + 1), batch[0])
            out.append(rng.uniform(-1.5, 1.5, shape).astype(dtype or dt))
        return out

    def pack(self, leaves: list) -> tuple:
        """The positional arguments of ``fn`` from the input leaves."""
        if self.tree == "dict":
            return ({f"x{i}": v for i, v in enumerate(leaves)},)
        if self.tree == "nested":
            return (leaves[0], tuple(leaves[1:]))
        return tuple(leaves)

    def unpack(self, *args) -> list:
        if self.tree == "dict":
            return [args[0][f"x{i}"] for i in range(len(self.inputs))]
        if self.tree == "nested":
            return [args[0], *args[1]]
        return list(args)

    # -- running --

    def run(self, m: Namespace, leaves: list, wide: bool = False) -> dict:
        """The outputs; ``wide``: every ``astype`` to float64 (derivatives in float64)."""
        vals = list(leaves)
        for s in self.steps:
            params = {"dtype": "float64"} if wide and s.op == "astype" else s.params
            out = OPS[s.op](m, params, *(vals[i] for i in s.args))
            vals.extend(out if isinstance(out, tuple) else (out,))
        first, *rest = (vals[i] for i in self.outputs)
        return {"y": first, "rest": tuple(rest)}

    def fn(self, m: Namespace = BLU) -> Callable:
        """The program as a function of its packed inputs (``self.pack``)."""
        return lambda *args: self.run(m, self.unpack(*args))

    def flat_fn(self, m: Namespace = BLU, wide: bool = False) -> Callable:
        """The program as a function of its input leaves."""
        return lambda *leaves: self.run(m, list(leaves), wide)


# ---- drawing a program ---------------------------------------------------------------------------

FLOATS = ("float32", "float64")
HALF = ("float16", "bfloat16", "float32", "float64")
_shape = st.lists(st.sampled_from([0, 1, 1, 2, 3, 4]), min_size=0, max_size=3).map(tuple)


def _axis(draw, nd: int) -> int:
    return draw(st.integers(-nd, nd - 1))


def _draw_params(draw, op: str, shapes: list[tuple[int, ...]], dtypes=FLOATS) -> dict | None:
    """Parameters for ``op`` on operands of ``shapes``, or None where it does not apply."""
    s = shapes[0]
    nd = len(s)
    if op.startswith("scalar_"):
        return {"c": draw(st.sampled_from(_SCALARS))}
    if op == "astype":
        return {"dtype": draw(st.sampled_from(dtypes))}
    if op in ("sum", "mean", "max"):
        axis = None if nd == 0 or draw(st.booleans()) else _axis(draw, nd)
        reduced = int(np.prod(s)) if axis is None else s[axis]
        if op != "sum" and reduced == 0:
            return None  # mean: NaN (0/0); max: no identity
        return {"axis": axis, "keepdims": draw(st.booleans())}
    if op == "transpose":
        return {"perm": tuple(draw(st.permutations(range(nd))))}
    if op == "reshape":
        if nd >= 1 and s[0] % 2 == 0 and s[0] > 0 and draw(st.booleans()):
            return {"shape": (2, s[0] // 2) + s[1:]}
        return {"shape": (int(np.prod(s)),) if draw(st.booleans()) else s + (1,)}
    if op == "expand_dims":
        return {"axis": draw(st.integers(-nd - 1, nd))}
    if op == "broadcast_to":
        return {"shape": (draw(st.sampled_from([0, 1, 3])),) + s}
    if op in ("slice", "flip", "cumsum", "sort", "softmax"):
        if nd == 0:
            return None
        if op == "slice":
            return {"start": draw(st.integers(0, 2)), "step": draw(st.integers(1, 2))}
        return {"axis": _axis(draw, nd)}
    if op == "concatenate":
        t = shapes[1]
        axes = [a for a in range(nd) if len(t) == nd and s[:a] + s[a + 1 :] == t[:a] + t[a + 1 :]]
        return {"axis": draw(st.sampled_from(axes))} if axes else None
    if op == "matmul":
        if nd == 0:
            return None
        return {"seed": draw(st.integers(0, 99)), "k": draw(st.sampled_from([0, 1, 3]))}
    if op == "scan":
        return {"reverse": draw(st.booleans())} if nd >= 1 else None
    if op == "scan_tree":
        return (
            {}
            if nd >= 1 and _broadcasts(s, shapes[1]) and np.broadcast_shapes(s, shapes[1]) == s
            else None
        )
    if op in ("take", "logsumexp", "var", "cumprod", "roll", "repeat"):
        if nd == 0:
            return None
        axis = _axis(draw, nd)
        if op == "take":
            return None if s[axis] == 0 else {"axis": axis, "seed": draw(st.integers(0, 99)),
                                               "k": draw(st.sampled_from([0, 1, 3]))}  # fmt: skip
        if op in ("logsumexp", "var") and s[axis] == 0:
            return None
        return {"axis": axis, "shift": draw(st.integers(-2, 3))}
    if op == "add_at":
        if nd == 0 or s[0] == 0:
            return None
        return {"seed": draw(st.integers(0, 99)), "k": draw(st.sampled_from([0, 1, 4]))}
    if op == "tensordot":
        t = shapes[1]
        return {} if nd >= 1 and len(t) >= 1 and s[-1] == t[0] else None
    if op == "pad":
        if nd == 0:
            return None
        return {"width": [(draw(st.integers(0, 2)), draw(st.integers(0, 1))) for _ in s]}
    if op == "triu":
        return {} if nd >= 2 else None
    if op == "cond":
        return {"c": draw(st.sampled_from([-0.5, 0.0, 0.5]))}
    if op in ("fori", "while_counted"):
        return {"n": draw(st.sampled_from([0, 1, 3]))}
    return {}


def _infer(op: str, params: dict, arg_specs: list) -> list[tuple[tuple[int, ...], str]]:
    """Result (shape, dtype) of a step: its numpy form on ones of the native dtypes."""
    xs = [np.ones(shape, dt) for shape, dt in arg_specs]
    with np.errstate(all="ignore"):
        out = OPS[op](NUMPY, params, *xs)
    return [
        (np.shape(o), str(np.asarray(o).dtype)) for o in (out if isinstance(out, tuple) else (out,))
    ]


@st.composite
def programs(draw, max_steps: int = 8, ops: tuple[str, ...] = tuple(OPS), dtypes=FLOATS) -> Program:
    """A program of up to ``max_steps`` steps from ``ops`` on inputs of ``dtypes`` (``HALF``
    adds float16 and bfloat16)."""
    n_in = draw(st.integers(1, 3))
    inputs = [(draw(_shape), draw(st.sampled_from(dtypes))) for _ in range(n_in)]
    specs = list(inputs)
    steps: list[Step] = []
    for _ in range(draw(st.integers(1, max_steps))):
        op = draw(st.sampled_from(ops))
        binary = OPS[op].__code__.co_argcount == 4
        # half of the steps read the latest value (deep chains), the others any value
        i = draw(st.one_of(st.just(len(specs) - 1), st.integers(0, len(specs) - 1)))
        args = (i,)
        if binary:
            s0 = specs[i][0]
            if op == "concatenate":
                partners = [j for j, sp in enumerate(specs) if len(sp[0]) == len(s0)]
            elif op == "tensordot":
                partners = [j for j, sp in enumerate(specs) if sp[0][:1] == s0[-1:]]
            else:
                partners = [j for j, sp in enumerate(specs) if _broadcasts(specs[i][0], sp[0])]
            if not partners:
                continue
            args = (i, draw(st.sampled_from(partners)))
        params = _draw_params(draw, op, [specs[a][0] for a in args], dtypes)
        if params is None:
            continue
        steps.append(Step(op, args, params))
        specs.extend(_infer(op, params, [specs[a] for a in args]))
    if not steps:  # every draw was inapplicable: one elementwise step
        steps.append(Step("sin", (0,), {}))
        specs.extend(_infer("sin", {}, [specs[0]]))
    last = len(specs) - 1
    others = draw(st.lists(st.integers(n_in, last), max_size=2))
    tree = draw(st.sampled_from(["flat", "dict", "nested"]))
    return Program(inputs, tree, steps, (last, *others), seed=draw(st.integers(0, 2**16)))


def _broadcasts(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    try:
        np.broadcast_shapes(a, b)
    except ValueError:
        return False
    return True
