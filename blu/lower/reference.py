"""The reference executable: interprets a jaxpr with each primitive's numpy implementation (no
per-op tracing, wrapping or shape checks). What ``jit`` runs with ``BLU_JIT_BACKEND=numpy`` or
where the MLIR bindings are not installed; the oracle the compiled executables are tested
against."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core.jaxpr import Jaxpr, Literal, Var, pp_jaxpr


class NumpyExecutable:
    """Runs a jaxpr (no constvars) on numpy arrays."""

    target = "cpu"

    def __init__(self, jaxpr: Jaxpr, name: str = "jit"):
        self.jaxpr = jaxpr
        self.name = name
        # pre-convert literals once, so the hot loop only reads
        self._steps = []
        for eqn in jaxpr.eqns:
            ins = [
                ("lit", np.asarray(a.val, a.aval.dtype)) if isinstance(a, Literal) else ("var", a)
                for a in eqn.invars
            ]
            impl = eqn.primitive.impl
            if impl is None:
                from blu.core.primitive import MissingRuleError

                raise MissingRuleError(f"primitive '{eqn.primitive.name}' has no impl rule")
            self._steps.append(
                (impl, ins, eqn.params, eqn.outvars, eqn.primitive.multiple_results, ())
            )
        # free each intermediate after its last use, so peak memory follows liveness
        last_use: dict[Var, int] = {}
        for i, eqn in enumerate(jaxpr.eqns):
            for a in eqn.invars:
                if isinstance(a, Var):
                    last_use[a] = i
        keep = {v for v in jaxpr.outvars if isinstance(v, Var)}
        dead_after: list[list[Var]] = [[] for _ in jaxpr.eqns]
        for v, i in last_use.items():
            if v not in keep:
                dead_after[i].append(v)
        self._steps = [step[:5] + (tuple(d),) for step, d in zip(self._steps, dead_after)]

    def __call__(self, *args: np.ndarray) -> list[np.ndarray]:
        env: dict[Var, Any] = dict(zip(self.jaxpr.invars, args, strict=True))
        for impl, ins, params, outvars, multi, dead in self._steps:
            vals = [x if kind == "lit" else env[x] for kind, x in ins]
            out = impl(*vals, **params)
            if multi:
                for v, o in zip(outvars, out):
                    env[v] = _fix_dtype(o, v)
            else:
                env[outvars[0]] = _fix_dtype(out, outvars[0])
            del vals
            for v in dead:
                env.pop(v, None)
        return [
            np.asarray(v.val, v.aval.dtype) if isinstance(v, Literal) else env[v]
            for v in self.jaxpr.outvars
        ]

    def memory_analysis(self) -> None:
        """None: the reference interpreter plans no memory."""
        return None

    def as_text(self) -> str:
        return pp_jaxpr(self.jaxpr)


def _fix_dtype(x: Any, v: Var) -> np.ndarray:
    x = np.asarray(x)
    return x if x.dtype == v.aval.dtype else x.astype(v.aval.dtype)


def run_numpy(jaxpr: Jaxpr, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    return NumpyExecutable(jaxpr)(*args)
