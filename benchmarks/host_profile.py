"""Where a training step's host time goes: cProfile around the replayed calls of blu's step.

    PYTHONPATH=. python3 benchmarks/host_profile.py --config llama-1b --B 8 --T 2048 [--calls 8]

The step, parameters and batches are ``benchmarks/peers/blu_gpt2.py``'s (bf16). After three
warm-up calls (the second captures the CUDA graph), each call is profiled from its start until it
returns (the host's share: the GPU waits behind it in a step that waits for its loss, as the
benchmark's steps do), then its loss is waited for outside the profile. Prints each call's host
milliseconds (profiled, so inflated) and the profile by own and by cumulative time. On a machine
without a GPU it profiles the CPU step.

``--stub-replay`` measures the GPU path's host share without a GPU: on the simulated device
(``BLU_FAKE_GPU=1``) every call from the second on is "replayed" from a graph that runs nothing,
so what is timed is the host's work alone (the driver's calls aside); it also prints the median
of as many unprofiled calls first:

    BLU_FAKE_GPU=1 PYTHONPATH=. python3 benchmarks/host_profile.py --config gpt2-124m --B 1 \
        --T 64 --calls 200 --stub-replay
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "benchmarks" / "peers")]

import blu_gpt2 as bg  # noqa: E402

import blu  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="gpt2-124m")
    ap.add_argument("--B", type=int, default=16, help="sequences per step")
    ap.add_argument("--T", type=int, default=1024, help="tokens per sequence")
    ap.add_argument("--calls", type=int, default=8, help="profiled calls")
    ap.add_argument("--top", type=int, default=25, help="rows of each listing")
    ap.add_argument(
        "--stub-replay",
        action="store_true",
        help="on the simulated GPU: replay graphs that run nothing (the host's share)",
    )
    a = ap.parse_args(argv)
    if a.stub_replay:
        stub_replay()
    cfg = bg.model_config(a.config, None, False, None)
    ((step, _),) = bg.blu_programs(a.config, "bf16", a.B, a.T, None, False, None)
    params = bg.host_params(cfg, 0, "numpy")
    opt = bg.host_opt_state(params)
    rng = np.random.default_rng(1)
    x = rng.integers(0, cfg.vocab_size, (1, a.B, a.T), dtype=np.int32)
    y = rng.integers(0, cfg.vocab_size, (1, a.B, a.T), dtype=np.int32)
    key = np.zeros(2, np.uint32)
    params, opt, x, y, key = bg.to_run_device((params, opt, x, y, key))
    print("leaves", len(blu.tree_util.tree_leaves((params, opt))))
    prof, host = cProfile.Profile(), []
    with bg.precision_scope("bf16"):
        for _ in range(3):
            params, opt, loss, _ = step(params, opt, x, y, key)
        loss.block_until_ready()
        if a.stub_replay:  # (the replays run nothing: no wait needed)
            for _ in range(a.calls):
                t = time.perf_counter()
                params, opt, loss, _ = step(params, opt, x, y, key)
                host.append(time.perf_counter() - t)
            print(f"host ms (unprofiled, median of {a.calls}) {np.median(host) * 1e3:.3f}")
            host = []
        for _ in range(a.calls):
            t = time.perf_counter()
            prof.enable()
            params, opt, loss, _ = step(params, opt, x, y, key)
            prof.disable()
            host.append(time.perf_counter() - t)
            loss.block_until_ready()
    print("host ms (profiled)", [round(h * 1e3, 2) for h in host])
    stats = pstats.Stats(prof)
    stats.sort_stats("tottime").print_stats(a.top)
    stats.sort_stats("cumulative").print_stats(a.top)
    return 0


def stub_replay() -> None:
    """Graphs on the simulated device that capture and replay nothing (see the docstring)."""
    import contextlib

    import blu.cuda.graph as graph
    from blu.core.config import config
    from blu.cuda.fake import FakeDevice
    from blu.lower.cuda import run

    if not config.fake_gpu:
        raise SystemExit("--stub-replay runs on the simulated GPU: set BLU_FAKE_GPU=1")

    class StubGraph:
        @contextlib.contextmanager
        def capture(self, stream):
            yield self

        def replay(self, stream):
            pass

        def destroy(self):
            pass

    init = run.Bound.__init__

    def graphable(self, exe, dev):
        init(self, exe, dev)
        self.graphable = run._graphs_enabled(self.steps, self.allocs)

    graph.Graph = StubGraph
    run.Bound.__init__ = graphable
    FakeDevice.stream = None  # (what a capture is given)
    config.update("cuda_graphs", True)


if __name__ == "__main__":
    sys.exit(main())
