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

import numpy as np
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu import lax

# ---- the two namespaces the programs run in ------------------------------------------------------


def _np_scan(f, init, xs, reverse=False):
    c, ys = init, []
    order = range(xs.shape[0])
    for i in reversed(order) if reverse else order:
        c, y = f(c, xs[i])
        ys.append(y)
    if reverse:
        ys.reverse()
    return c, (np.stack(ys) if ys else np.zeros((0,) + np.shape(init), np.asarray(init).dtype))


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


@dataclasses.dataclass(frozen=True)
class Namespace:
    np: Any
    cond: Callable
    scan: Callable
    fori: Callable
    while_: Callable
    softmax: Callable
    sigmoid: Callable


BLU = Namespace(bnp, lax.cond, lax.scan, lax.fori_loop, lax.while_loop,
                lambda x, axis: blu.nn.softmax(x, axis=axis), blu.nn.sigmoid)  # fmt: skip
NUMPY = Namespace(np, lambda p, t, f, x: t(x) if p else f(x), _np_scan, _np_fori, _np_while,
                  _np_softmax, lambda x: 1.0 / (1.0 + np.exp(-x)))  # fmt: skip

# ---- the operations ------------------------------------------------------------------------------
# name -> fn(m, params, *xs): a result or a tuple of results. SMOOTH: differentiable at random
# points; FORWARD_ONLY: no reverse mode (a while_loop), as in JAX.

_SCALARS = (0.5, -1.5, 2.0, 3)  # Python scalars: weakly typed (the int too)


def _matmul(m, p, x):
    w = np.random.default_rng(p["seed"]).standard_normal((x.shape[-1], p["k"]))
    return x @ w.astype(x.dtype)


def _scan(m, p, x):
    def body(c, xt):
        c = m.np.tanh(c * 0.7 + xt)
        return c, c * 2.0

    return m.scan(body, m.np.zeros(x.shape[1:], x.dtype), x, reverse=p["reverse"])


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
    "while_data": _while_data,
}
NONSMOOTH = {"abs", "maximum", "where", "max", "sort", "cond", "while_data"}
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
        return "float32" if "float32" in used else "float64"

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

_shape = st.lists(st.sampled_from([0, 1, 1, 2, 3, 4]), min_size=0, max_size=3).map(tuple)


def _axis(draw, nd: int) -> int:
    return draw(st.integers(-nd, nd - 1))


def _draw_params(draw, op: str, shapes: list[tuple[int, ...]]) -> dict | None:
    """Parameters for ``op`` on operands of ``shapes``, or None where it does not apply."""
    s = shapes[0]
    nd = len(s)
    if op.startswith("scalar_"):
        return {"c": draw(st.sampled_from(_SCALARS))}
    if op == "astype":
        return {"dtype": draw(st.sampled_from(["float32", "float64"]))}
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
    return [(np.shape(o), str(np.asarray(o).dtype)) for o in (out if isinstance(out, tuple) else (out,))]


@st.composite
def programs(draw, max_steps: int = 8, ops: tuple[str, ...] = tuple(OPS)) -> Program:
    n_in = draw(st.integers(1, 3))
    inputs = [(draw(_shape), draw(st.sampled_from(["float32", "float64"]))) for _ in range(n_in)]
    specs = list(inputs)
    steps: list[Step] = []
    for _ in range(draw(st.integers(1, max_steps))):
        op = draw(st.sampled_from(ops))
        binary = OPS[op].__code__.co_argcount == 4
        # half of the steps read the latest value (deep chains), the others any value
        i = draw(st.one_of(st.just(len(specs) - 1), st.integers(0, len(specs) - 1)))
        args = (i,)
        if binary:
            if op == "concatenate":
                partners = [j for j, sp in enumerate(specs) if len(sp[0]) == len(specs[i][0])]
            else:
                partners = [j for j, sp in enumerate(specs) if _broadcasts(specs[i][0], sp[0])]
            args = (i, draw(st.sampled_from(partners)))
        params = _draw_params(draw, op, [specs[a][0] for a in args])
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
