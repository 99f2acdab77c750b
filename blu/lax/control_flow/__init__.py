"""Control flow primitives holding sub-jaxprs: ``cond``/``switch``, ``scan``/``map``,
``while_loop`` and ``fori_loop``."""

from blu.lax.control_flow.conditionals import cond, switch
from blu.lax.control_flow.loops import fori_loop, while_loop
from blu.lax.control_flow.scan import map, scan

__all__ = ["cond", "switch", "scan", "while_loop", "fori_loop", "map"]
