"""Start one process per device: ``python -m blu.parallel.launch --nproc N script.py [args]``.

Like torchrun: the launcher serves the job's key-value store on 127.0.0.1 (a free port unless
``--master-port``), then starts N copies of the script (or ``-m module``) with ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` set;
the script calls ``blu.parallel.initialize()``, which reads them (rank 0 publishes the NCCL
unique id through the store). When one process fails the others are stopped, and the launcher
exits with the failing code. NVLink multicast stays off (``NCCL_NVLS_ENABLE=0`` unless set).

Each rank's output (stdout and stderr) comes through the launcher line by line, each line
prefixed with ``[rank N] `` and written whole, so two ranks never share a line
(``blu.parallel.launch_output``; the ranks run with ``PYTHONUNBUFFERED=1`` unless it is set).

With ``--backend mpi`` the launcher hands the job to ``mpiexec -n N`` (the ``mpich`` wheel's,
beside this Python, else the one on PATH) and the processes' collectives go through MPI
(``blu.parallel.mpi``); ``--backend`` otherwise sets ``BLU_PARALLEL_BACKEND`` for the children.

Under SLURM (``srun``) or MPI (``mpirun``) no launcher is needed: ``initialize()`` reads
``SLURM_PROCID``/``SLURM_NTASKS``, ``OMPI_COMM_WORLD_RANK``/``OMPI_COMM_WORLD_SIZE`` or
``PMI_RANK``/``PMI_SIZE``; under mpirun it uses MPI itself (the ``mpi`` backend on CPUs, MPI to
bootstrap NCCL on GPUs), otherwise rank 0 serves the store at ``MASTER_ADDR:MASTER_PORT``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time

from blu.parallel.launch_output import FileTail, Relay, pump
from blu.parallel.store import StoreServer

# the folder where each rank of an MPI job leaves a mark at normal exit (see runtime.initialize)
DONE_DIR_VAR = "BLU_LAUNCH_DONE_DIR"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m blu.parallel.launch",
        description="Run a script once per device (one process per GPU), torchrun-style.",
    )
    p.add_argument("--nproc", "--nproc-per-node", type=int, default=1, dest="nproc",
                   help="processes to start (one per GPU)")  # fmt: skip
    p.add_argument("--master-addr", default="127.0.0.1", help="address the store listens on")
    p.add_argument("--master-port", type=int, default=0, help="store port (0: a free one)")
    p.add_argument("--backend", choices=("nccl", "mpi", "cpu"), default=None,
                   help="collectives: nccl (GPUs), mpi (CPU processes through mpiexec), cpu "
                   "(CPU processes through the store); default: initialize() chooses")  # fmt: skip
    p.add_argument("-m", dest="module", action="store_true", help="run the target as a module")
    p.add_argument("target", help="script path (or module name with -m)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    return p


def child_env(base: dict, rank: int, nproc: int, addr: str, port: int) -> dict:
    """The environment of process ``rank``."""
    env = dict(base)
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(nproc),
        LOCAL_WORLD_SIZE=str(nproc),
        MASTER_ADDR=addr,
        MASTER_PORT=str(port),
        BLU_STORE_SERVED="1",  # the launcher serves the store, not rank 0
    )
    env.setdefault("NCCL_NVLS_ENABLE", "0")  # never NVLink multicast
    env.setdefault("PYTHONUNBUFFERED", "1")  # lines reach the launcher as they are printed
    return env


def _start(cmd: list[str], env: dict, rank: int, lock, pumps: list) -> subprocess.Popen:
    """Start rank ``rank``, its stdout and stderr relayed with the rank's prefix."""
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for pipe, dest in ((p.stdout, sys.stdout), (p.stderr, sys.stderr)):
        pumps.append(pump(os.dup(pipe.fileno()), Relay(rank, dest, lock)))
        pipe.close()
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if a.nproc < 1:
        print("error: --nproc must be at least 1", file=sys.stderr)
        return 2
    cmd = [sys.executable] + (["-m", a.target] if a.module else [a.target]) + list(a.args)
    if a.backend == "mpi":
        return _run_mpiexec(a.nproc, cmd)

    server = StoreServer(a.master_addr, a.master_port)
    base = dict(os.environ)
    if a.backend:
        base["BLU_PARALLEL_BACKEND"] = a.backend
    lock, pumps = threading.Lock(), []
    procs = [
        _start(cmd, child_env(base, r, a.nproc, server.host, server.port), r, lock, pumps)
        for r in range(a.nproc)
    ]
    code = 0
    try:
        while procs:
            for p in list(procs):
                rc = p.poll()
                if rc is None:
                    continue
                procs.remove(p)
                if rc != 0 and code == 0:
                    code = rc
                    for q in procs:  # one failed: the others would wait for it forever
                        q.send_signal(signal.SIGTERM)
            time.sleep(0.02)
    except KeyboardInterrupt:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        code = 130
    finally:
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        server.close()
        for t in pumps:  # the last lines (a process the rank started may hold its pipe)
            t.join(timeout=10)
    return code


def mpi_env(base: dict) -> dict:
    """The environment ``mpiexec`` passes on: the MPI backend, no stale torchrun-style ranks."""
    env = {
        k: v
        for k, v in base.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "BLU_STORE_SERVED")
    }
    env["BLU_PARALLEL_BACKEND"] = "mpi"
    env.setdefault("NCCL_NVLS_ENABLE", "0")  # never NVLink multicast
    env.setdefault("PYTHONUNBUFFERED", "1")  # lines reach the launcher as they are printed
    return env


def _run_mpiexec(nproc: int, cmd: list[str]) -> int:
    import tempfile

    from blu.parallel.mpi import MpiError, mpiexec

    try:
        exe = mpiexec()
    except MpiError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="blu-launch-") as done:
        env = mpi_env(os.environ)
        env[DONE_DIR_VAR] = done  # each rank leaves a mark when it exits normally
        # each rank's stdout and stderr to files of its own, relayed line by line with a prefix
        files = ["-outfile-pattern", os.path.join(done, "out.%r"),
                 "-errfile-pattern", os.path.join(done, "err.%r")]  # fmt: skip
        lock = threading.Lock()
        streams = (("out", sys.stdout), ("err", sys.stderr))
        tails = [FileTail(os.path.join(done, f"{name}.{r}"), Relay(r, dest, lock))
                 for r in range(nproc) for name, dest in streams]  # fmt: skip
        p = subprocess.Popen([exe, "-n", str(nproc)] + files + cmd, env=env)
        try:
            while (rc := p.poll()) is None:
                for t in tails:
                    t.poll()
                time.sleep(0.05)
        except KeyboardInterrupt:
            p.send_signal(signal.SIGINT)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
            return 130
        finally:
            for t in tails:
                t.poll()
                t.relay.close()
        # mpiexec ends the job when a rank exits early, but may report success (MPICH, when
        # the rank's code was 0): a rank without its mark did not finish
        started = [r for r in range(nproc) if os.path.exists(os.path.join(done, f"{r}.start"))]
        missing = [r for r in range(nproc) if not os.path.exists(os.path.join(done, f"{r}.done"))]
    if started and missing:  # a blu job (it called initialize) in which a rank did not finish
        print(
            f"blu.parallel.launch: rank(s) {missing} of {nproc} did not finish (a rank raised, "
            "exited early or was killed, and mpiexec ended the others); mpiexec returned "
            f"{rc}",
            file=sys.stderr,
        )
        return rc or 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
