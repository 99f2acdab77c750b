"""The collectives on the CPU as library nodes (``NodeKind.LIBRARY``; ``blu/lower/collectives.py``
says what each does): with one process per device (MPI ranks), the communicator's MPI call reads
the operand's planned buffer and writes the result's (``MpiCommunicator``'s ``*_into``
methods), bfloat16/float16 reductions going through float32 in the node's workspace. Other
communicators (the TCP store of a CPU job without MPI, a group of one) copy their result in.
"""

from __future__ import annotations

from blu.lower.collectives import COLLECTIVES, host_call, host_workspace
from blu.lower.library import LibraryLowering, register_library

for _p in COLLECTIVES:
    register_library(
        _p, LibraryLowering(workspace=host_workspace, cpu=host_call(_p), gpu=None), platform="cpu"
    )
