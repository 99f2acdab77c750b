"""Control flow primitives holding sub-jaxprs: ``cond``/``switch``, ``scan``/``map``,
``while_loop`` and ``fori_loop``;
``custom_root`` and ``custom_linear_solve``."""

from blu.lax.control_flow.conditionals import cond, switch
from blu.lax.control_flow.loops import fori_loop, while_loop
from blu.lax.control_flow.scan import map, scan
from blu.lax.control_flow.solves import custom_linear_solve, custom_root

__all__ = ["cond", "switch", "scan", "while_loop", "fori_loop", "map",
           "custom_root", "custom_linear_solve"]  # fmt: skip
