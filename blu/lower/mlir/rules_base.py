"""The helpers every per-element rules module shares (``rules.py``, ``rules_casts.py``, ...):
an operand's dtype, the ``"elementwise"`` slot's decorator, and one-line ``arith`` ops."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from blu.core.primitive import Primitive
from blu.lower.mlir.emit import Builder
from blu.lower.slots import lowering


def _dt(eqn: Any, i: int = 0) -> np.dtype:
    return eqn.invars[i].aval.dtype


def _rule(*prims: Primitive) -> Callable:
    return lowering("elementwise", *prims)


def _binop(b: Builder, op: str, x: str, y: str, ty: str) -> str:
    return b.op(f"arith.{op} {x}, {y} : {ty}")


def _sel(b: Builder, c: str, x: str, y: str, ty: str) -> str:
    return b.op(f"arith.select {c}, {x}, {y} : {ty}")


def _cmpi(b: Builder, pred: str, x: str, y: str, ty: str) -> str:
    return b.op(f"arith.cmpi {pred}, {x}, {y} : {ty}")
