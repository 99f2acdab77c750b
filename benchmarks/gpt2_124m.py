"""GPT-2 124M training step on one GPU: blu against PyTorch (eager and compiled) and JAX.

    python benchmarks/gpt2_124m.py          # every system and mode, the fidelity checks, the table
    python benchmarks/gpt2_124m.py --systems blu --json runs/bench/gpt2_124m.json
    python benchmarks/gpt2_124m.py --systems torch,torch-compile,jax --no-fidelity \\
        --json runs/bench/gpt2_124m.json                  # merged into the same JSON
    python benchmarks/gpt2_124m.py --report --update-benchmarks   # table from the JSON
    python benchmarks/gpt2_124m.py --config tiny --batch 2 --block 32 --steps 5 --no-fidelity
    python benchmarks/gpt2_124m.py --config llama-1b --block 2048 --batch 8 --modes bf16 \\
        --systems blu,torch-compile                       # the LLaMA-style model (issue #36)
    python benchmarks/gpt2_124m.py --config gpt2-124m --block 8192 --n-ctx 8192 --batch 8 \\
        --modes bf16 --systems blu,torch-compile          # GPT-2 with an 8192-row position table

A ``llama-*`` config (``examples/gpt2/llama.py``: RMSNorm, RoPE, SwiGLU, grouped-query
attention, untied head; vocabulary Llama 3's 128256 unless ``--vocab``) runs the same way: blu
trains the example's own LLaMA (``benchmarks/peers/blu_models.py``), PyTorch the same math
(``benchmarks/peers/torch_llama.py``, through ``torch_gpt2.py --arch llama``); JAX has no LLaMA
peer. ``--n-ctx`` gives the model a longer context than its config's (GPT-2's learned position
table: ``--block 8192`` needs ``--n-ctx 8192``), the same for every system.

Each system and precision mode runs in its own process (``benchmarks/peers/``: ``blu_gpt2.py``,
``torch_gpt2.py`` [``--compile``], ``jax_gpt2.py``), the peers measured as
``shared/reference/`` measures them: the same model (GPT-2, tied embeddings, vocabulary padded to
50304), batch (16 x 1024), AdamW with decay on matrices only, warm-up, then the median of the
timed steps; peak memory from each framework's own allocator. A process that fails, times out
or whose framework is missing is recorded as such; the driver goes on. Results are merged into
``--json`` after every process (a record replaces the one of the same system, mode, config,
batch and block), so runs split over several invocations make one table: tokens/s, peak GiB,
and the ratios of blu to every peer (tokens/s and peak memory).

The fidelity checks of issue #7 run too (``--no-fidelity`` skips them), each by blu and by
PyTorch on the same initial weights (made by blu's side, on the host) and the same batches:
(1) fp32, the losses of the first 3 steps and the gradient norm at step 1 agree to 1e-4
relative; (2) bf16, over
``--fidelity-steps`` (200) steps on real text (GPT-2 BPE of ``pd_books.txt``) the per-step
losses stay within 2% of each other. The token source is ``--data`` (a ``.txt`` corpus or a
``.npy`` of token ids), else the first ``pd_books.gpt2.npy``, else ``pd_books.txt``, in
``$BLU_DATA_DIR``, ``.data/`` and ``.cache/data/`` (git-ignored; ``.data/`` is carried to the
GPU machine) and ``../shared/data``; ``--prepare-data`` writes ``.data/pd_books.gpt2.npy``
(tokenizing needs tiktoken and the GPT-2 BPE files; the ``.npy`` needs neither).

``--find-max-batch`` runs instead the search for the largest batch (x ``--block`` tokens) that
trains one step, per system and mode, each try a fresh process running one warm-up and one
timed step (so an out-of-memory failure cannot poison the next try). The peers search on the GPU
(``benchmarks/peers/max_batch.py``: ``search_guided``, from ``--max-batch-start``, guessing from
the peaks the fitting tries report; with ``--max-batch-grid``, only the grid's sizes). blu
(``--blu-max-batch plan``, the default) predicts the batch from its memory plan instead — the
largest whose footprint fits ``--device-memory`` less ``--max-batch-margin``, found by lowering
only (``blu_gpt2.py --predict-max-batch``: no kernel, no GPU) — then runs that one batch on the
GPU (its kernels filled ahead by ``scripts/fill_gpu_cache.py``, which predicts the same batch),
records the plan's out-of-memory report for one sequence more, and runs the smallest batch whose
footprint exceeds the whole device, which blu must refuse with its report before compiling or
launching anything (that text is recorded too). ``--blu-max-batch search`` searches blu on the GPU
like the peers (its kernels must be in the cache for every size tried). Results go to
``--json`` (``max_batch``) and a table.

``--update-benchmarks`` rewrites this benchmark's marked section of BENCHMARKS.md (date,
machine, commands, the tables); nothing else in the file changes.

The GPU machine has no MLIR: :func:`fill_cache` (called by ``scripts/fill_gpu_cache.py``)
compiles blu's programs for a config, modes, batch and block ahead of time.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.peers import bench_cli, report  # noqa: E402
from benchmarks.peers import fidelity as fid  # noqa: E402
from benchmarks.peers.bench_cli import (  # noqa: E402, F401  (re-exported)
    CONFIGS,
    DEFAULT_JSON,
    DEFAULT_PREDICTIONS,
    DEFAULT_WORKDIR,
    GPT2_TOKENS,
    H200_MEMORY_BYTES,
    MAX_BATCH_MARGIN_BYTES,
    MODES,
    PEERS_DIR,
    SYSTEMS,
    BenchmarkError,
    model_dims,
)


def build_parser():
    """The benchmark's flags (``bench_cli.build_parser`` with this module's docstring)."""
    return bench_cli.build_parser(__doc__)


def parse_args(argv: list[str] | None = None):
    """Parsed and checked flags (``bench_cli.parse_args``).

    Raises:
        BenchmarkError: an impossible value, naming the flag.
    """
    return bench_cli.parse_args(argv, __doc__)


# ---- the programs blu runs on the GPU (for the kernel-cache fill) ------------------------------


def blu_programs(config: str, precision: str, batch: int, block: int, vocab: int | None = None):
    """``[(jitted_fn, specs)]``: every jitted function the blu side runs on the GPU for this
    config, precision, batch and block (see ``benchmarks/peers/blu_gpt2.py``). Lower them under
    ``precision_scope(precision)`` — or call :func:`fill_cache`, which does."""
    from benchmarks.peers.blu_gpt2 import blu_programs as programs

    return programs(config, precision, batch, block, vocab or bench_cli.default_vocab(config))


def fill_cache(
    config: str = "gpt2-124m",
    modes: list[str] | tuple[str, ...] = MODES,
    batch: int = 16,
    block: int = 1024,
    vocab: int | None = None,
    target: str = "cuda:sm_90",
    n_ctx: int | None = None,
) -> None:
    """Compile blu's programs for every mode in ``modes`` into the kernel cache
    (``BLU_CACHE_DIR``); the benchmark and its fidelity checks (same batch and block) then find
    every kernel. ``vocab``: the tokenizer's (None: the config's default, as the driver's
    ``--vocab``); ``n_ctx``: the model's context if not the config's (as ``--n-ctx``). Prints
    one line per program."""
    from benchmarks.peers.blu_gpt2 import compile_blu_programs

    vocab = vocab or bench_cli.default_vocab(config)
    for mode in modes:
        t = time.perf_counter()
        compiled = compile_blu_programs(config, mode, batch, block, vocab, target, n_ctx=n_ctx)
        print(
            f"[gpt2_124m] {config} {mode} {batch}x{block}: {len(compiled)} program(s) "
            f"compiled for {target} in {time.perf_counter() - t:.0f} s",
            flush=True,
        )


def fill_max_batch_cache(
    config: str = "gpt2-124m",
    modes: list[str] | tuple[str, ...] = MODES,
    block: int = 1024,
    vocab: int | None = None,
    device_bytes: int = H200_MEMORY_BYTES,
    margin_bytes: int = MAX_BATCH_MARGIN_BYTES,
    limit: int = 1024,
    target: str = "cuda:sm_90",
    out: str | Path | None = DEFAULT_PREDICTIONS,
    n_ctx: int | None = None,
) -> dict[str, int]:
    """For ``--find-max-batch``: per mode, the batch blu's plan predicts (the record
    ``blu_gpt2.py --predict-max-batch`` gives with the same device memory and margin) and its
    programs compiled into the kernel cache (one batch size per mode). The records are merged
    into ``out`` (default ``.data/max_batch_plan.json``: ``.data/`` travels to the GPU machine),
    which ``--blu-predictions`` reads there instead of predicting again. ``n_ctx``: the model's
    context if not the config's (as ``--n-ctx``). Returns ``{mode: batch}``."""
    from benchmarks.peers.blu_gpt2 import predict_record

    vocab = vocab or bench_cli.default_vocab(config)
    found = {}
    for mode in modes:
        rec = predict_record(
            config, mode, block, device_bytes, margin_bytes, vocab, limit, n_ctx=n_ctx
        )
        b = found[mode] = rec["max_batch"]
        print(f"[gpt2_124m] max batch {config} {mode}: B={b} predicted by the plan "
              f"({rec['footprint_GiB']} GiB of {rec['budget_bytes'] / 2**30:.2f} GiB; "
              f"B={rec['over_batch']} over the device) in {rec['seconds']:.0f} s",
              flush=True)  # fmt: skip
        if out is not None:
            path = Path(out)
            saved = json.loads(path.read_text()) if path.is_file() else []
            saved = [r for r in saved if _prediction_key(r) != _prediction_key(rec)] + [rec]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(saved, indent=1))
        if b:
            fill_cache(config, [mode], b, block, vocab, target, n_ctx=n_ctx)
    return found


def _prediction_key(r: dict) -> tuple:
    """What a saved prediction must match to stand for a new one."""
    return tuple(r.get(k) for k in ("config", "mode", "T", "vocab", "limit", "device_bytes",
                                    "margin_bytes", "n_ctx"))  # fmt: skip


# ---- running one process -----------------------------------------------------------------------


def _flags(**values: Any) -> list[str]:
    """``--name=value`` arguments (underscores become dashes; None values are left out)."""
    return [f"--{k.replace('_', '-')}={v}" for k, v in values.items() if v is not None]


def worker_command(system: str, mode: str, a: argparse.Namespace) -> list[str]:
    """The command line of one throughput process."""
    common = _flags(mode=mode, B=a.batch, T=a.block, steps=a.steps, warmup=a.warmup)
    if system == "blu":
        own = _flags(config=a.config, vocab=a.vocab, seed=a.seed, init=a.init, n_ctx=a.n_ctx)
        return [sys.executable, str(PEERS_DIR / "blu_gpt2.py"), *common, *own]
    sizes = _flags(**model_dims(a.config, a.vocab, a.n_ctx))
    script = "jax_gpt2.py" if system == "jax" else "torch_gpt2.py"
    extra = ["--compile"] if system == "torch-compile" else []
    return [sys.executable, str(PEERS_DIR / script), *common, *sizes, *extra]


def fidelity_command(side: str, check: str, steps: int, inputs: Any, out: Path, a) -> list[str]:
    """The command line of one side (``blu`` or ``torch``) of a fidelity check."""
    common = ["--fidelity", *_flags(mode=check, weights=inputs.weights, batches=inputs.batches,
                                    steps=steps, out=out, B=a.batch, T=a.block)]  # fmt: skip
    if side == "blu":
        own = _flags(config=a.config, vocab=a.vocab, n_ctx=a.n_ctx)
        return [sys.executable, str(PEERS_DIR / "blu_gpt2.py"), *common, *own]
    sizes = _flags(**model_dims(a.config, a.vocab, a.n_ctx))
    return [sys.executable, str(PEERS_DIR / "torch_gpt2.py"), *common, *sizes]


def run_process(cmd: list[str], timeout: float, log: Path) -> tuple[dict | None, str | None, float]:
    """Run ``cmd`` (output to ``log``); returns ``(the last JSON line it printed, error, s)``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    t = time.perf_counter()
    with open(log, "w") as fh:
        fh.write("$ " + shlex.join(cmd) + "\n")
        fh.flush()
        # its own process group, so a timeout also ends what it started (torch.compile workers)
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=fh, text=True,
            start_new_session=True,
        )  # fmt: skip
        try:
            stdout, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            stdout, _ = proc.communicate()
            fh.write(stdout or "")
            return None, f"timed out after {timeout:.0f} s (log {log})", time.perf_counter() - t
        fh.write(stdout)
    secs = time.perf_counter() - t
    record = None
    for line in reversed(stdout.splitlines()):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            break
        record = None
    if proc.returncode != 0 or record is None:
        tail = [ln for ln in log.read_text().splitlines() if ln.strip()][-6:]
        why = f"exit status {proc.returncode}" if proc.returncode else "no JSON result"
        return None, f"{why}: " + " | ".join(tail)[-600:] + f" (log {log})", secs
    return record, None, secs


class Session:
    """One invocation: its identity (date, machine, command) and the results file it updates."""

    def __init__(self, a: argparse.Namespace, argv: list[str]):
        self.a = a
        self.start = time.perf_counter()
        self.date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        self.machine = a.machine or report.machine_name()
        self.command = shlex.join(["python", "benchmarks/gpt2_124m.py", *argv])
        self.results = report.load(a.json)
        self.workdir = Path(a.workdir)

    def stamp(self, record: dict, **fields: Any) -> dict:
        a = self.a
        base = dict(
            config=a.config,
            B=a.batch,
            T=a.block,
            vocab=model_dims(a.config, a.vocab, a.n_ctx)["vocab"],
            n_ctx=model_dims(a.config, a.vocab, a.n_ctx)["n_ctx"],
            date=self.date,
            machine=self.machine,
            command=self.command,
        )
        return {**record, **base, **fields}

    def time_left(self) -> float | None:
        if not self.a.time_budget:
            return None
        return self.a.time_budget - (time.perf_counter() - self.start)

    def run(self, what: str, cmd: list[str], log: Path) -> tuple[dict | None, str | None, float]:
        left = self.time_left()
        if left is not None and left < 20:
            return None, f"not run: --time-budget {self.a.time_budget:.0f} s spent", 0.0
        timeout = self.a.timeout if left is None else min(self.a.timeout, left - 5)
        print(f"[gpt2_124m] {what} ...", flush=True)
        rec, err, secs = run_process(cmd, timeout, log)
        print(f"[gpt2_124m] {what}: " + (err or "ok") + f" ({secs:.0f} s)", flush=True)
        return rec, err, secs

    def save(self, kind: str, record: dict) -> None:
        report.merge(self.results, kind, [record])
        report.save(self.a.json, self.results)


def run_throughput(s: Session) -> None:
    for system in s.a.systems:
        for mode in s.a.modes:
            cmd = worker_command(system, mode, s.a)
            rec, err, secs = s.run(
                f"{system} {mode}", cmd, s.workdir / "logs" / f"{system}-{mode}.log"
            )
            ok = rec is not None and rec.get("tok_s") is not None
            rec = dict(
                rec or {}, system=system, mode=mode, ok=ok, error=err, seconds=round(secs, 1)
            )
            s.save("runs", s.stamp(rec))


def run_fidelity(s: Session) -> None:
    a = s.a
    sides = [x for x in ("blu", "torch") if x in a.systems]
    if not sides:
        print("[gpt2_124m] --fidelity: neither blu nor torch in --systems; skipped")
        return
    dims = model_dims(a.config, a.vocab, a.n_ctx)
    inputs = fid.prepare_inputs(
        s.workdir,
        a.config,
        a.vocab,
        dims["vocab"],
        a.batch,
        a.block,
        a.fidelity_steps,
        a.seed,
        a.init,
        a.data,
        a.n_ctx,
    )
    for check, steps in (("fp32", fid.FP32_STEPS), ("bf16", a.fidelity_steps)):
        for side in sides:
            out = s.workdir / "fidelity" / f"{side}-{check}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.unlink(missing_ok=True)
            cmd = fidelity_command(side, check, steps, inputs, out, a)
            log = s.workdir / "logs" / f"fidelity-{side}-{check}.log"
            _, err, secs = s.run(f"fidelity {check} {side} ({steps} steps)", cmd, log)
            rec = json.loads(out.read_text()) if err is None and out.is_file() else {}
            if err is None and not rec:
                err = f"no result file {out}"
            rec = dict(
                rec,
                system=side,
                check=check,
                steps=steps,
                inputs=inputs.inputs_id,
                data=inputs.data,
                ok=err is None,
                error=err,
                seconds=round(secs, 1),
            )
            s.save("fidelity", s.stamp(rec))


def run_find_max_batch(s: Session, run: Any = None) -> list[dict]:
    """The largest batch per system and mode, saved as ``max_batch`` records (see the module
    docstring: blu from its plan, the peers by ``max_batch.search_guided``);
    ``run(what, cmd, log) -> (record, error, seconds)`` runs one process (default:
    ``Session.run``, a fresh process). Returns the records."""

    from benchmarks.peers import max_batch

    run = run or s.run
    a = s.a
    records = []
    for system in a.systems:
        for mode in a.modes:
            if system == "blu" and a.blu_max_batch == "plan":
                rec = blu_max_batch_from_plan(s, mode, run)
            else:
                errors: dict[str, str] = {}

                def one(batch: int, system: str = system, mode: str = mode) -> tuple:
                    rec, err = _try_batch(s, run, system, mode, batch)
                    if err:
                        errors[str(batch)] = err[-300:]
                    peak = (rec or {}).get("peak_GiB")
                    return err is None, None if peak is None else peak * 2**30

                if a.max_batch_grid is not None:
                    found = max_batch.search(
                        lambda b: one(b)[0], start=a.max_batch_start, limit=a.max_batch_limit,
                        grid=a.max_batch_grid,
                    )  # fmt: skip
                else:
                    found = max_batch.search_guided(
                        one, a.device_memory - a.max_batch_margin, start=a.max_batch_start,
                        limit=a.max_batch_limit,
                    )  # fmt: skip
                    found["peaks"] = {str(b): round(p / 2**30, 3)
                                      for b, p in found["peaks"].items()}  # fmt: skip
                rec = dict(system=system, mode=mode, **found, errors=errors, grid=a.max_batch_grid,
                           how="grid" if a.max_batch_grid else "search")  # fmt: skip
            rec = s.stamp(rec, B=None)
            records.append(rec)
            s.save("max_batch", rec)
            print(f"[gpt2_124m] max batch {system} {mode}: {rec['max_batch']} x {a.block} "
                  f"tokens{' (the limit)' if rec.get('at_limit') else ''}", flush=True)  # fmt: skip
            for key in ("oom_report_plan", "oom_report_gpu"):
                if rec.get(key):
                    print(f"[gpt2_124m] {key} (blu {mode}):\n{rec[key]}", flush=True)
    return records


def _try_batch(s: Session, run: Any, system: str, mode: str, batch: int) -> tuple:
    """One try of ``batch``: ``(the worker's record or None, error or None)``."""
    import argparse as _argparse

    one = _argparse.Namespace(**{**vars(s.a), "batch": batch, "steps": 1, "warmup": 1})
    log = s.workdir / "logs" / f"maxbatch-{system}-{mode}-B{batch}.log"
    rec, err, _ = run(f"max batch {system} {mode}: B={batch}", worker_command(system, mode, one),
                      log)  # fmt: skip
    if err is None and (rec is None or rec.get("tok_s") is None):
        err = "no tokens/s in its result"
    return rec, err


def _error_text(log: Path, name: str = "BluOutOfMemoryError") -> str | None:
    """The message of the ``name`` exception a failed process printed (its traceback's last
    exception, to the end of the log), or None."""
    try:
        text = log.read_text()
    except OSError:
        return None
    k = text.rfind(name + ": ")
    return None if k < 0 else text[k + len(name) + 2 :].rstrip()


def _saved_prediction(a: argparse.Namespace, mode: str) -> dict | None:
    """The prediction ``--blu-predictions`` holds for this config, mode, block, vocabulary,
    limit, device memory, margin and context, or None."""
    if not a.blu_predictions:
        return None
    path = Path(a.blu_predictions)
    if not path.is_file():
        raise BenchmarkError(f"--blu-predictions {path} does not exist")
    want = (a.config, mode, a.block, a.vocab, a.max_batch_limit, a.device_memory,
            a.max_batch_margin, a.n_ctx)  # fmt: skip
    for r in json.loads(path.read_text()):
        if _prediction_key(r) == want:
            return r
    return None


def blu_max_batch_from_plan(s: Session, mode: str, run: Any) -> dict:
    """blu's largest batch: predicted from the memory plan (one process, lowering only), then
    that batch run on the GPU, then the smallest batch over the whole device, which must be
    refused with the out-of-memory report (``BluOutOfMemoryError``) before anything runs."""
    a = s.a
    cmd = [sys.executable, str(PEERS_DIR / "blu_gpt2.py"), "--predict-max-batch",
           *_flags(mode=mode, config=a.config, vocab=a.vocab, T=a.block,
                   device_bytes=a.device_memory, margin_bytes=a.max_batch_margin,
                   limit=a.max_batch_limit, n_ctx=a.n_ctx)]  # fmt: skip
    log = s.workdir / "logs" / f"maxbatch-blu-{mode}-predict.log"
    pred = _saved_prediction(a, mode)
    if pred is not None:
        print(f"[gpt2_124m] max batch blu {mode}: the plan's prediction from {a.blu_predictions}"
              f" (B={pred['max_batch']})", flush=True)  # fmt: skip
        err = None
    else:
        pred, err, _ = run(f"max batch blu {mode}: predicted from the plan", cmd, log)
    rec: dict = dict(system="blu", mode=mode, how="plan", errors={}, grid=None, tries=[])
    if pred is None:
        rec.update(max_batch=None, predicted=None, at_limit=False, errors={"predict": err})
        return rec
    b = pred["max_batch"]
    rec.update(predicted=b, at_limit=pred["at_limit"], device_bytes=pred["device_bytes"],
               budget_bytes=pred["budget_bytes"], gpu_total_bytes=pred.get("gpu_total_bytes"),
               footprint_GiB=pred["footprint_GiB"], plan_peak_GiB=pred["plan_peak_GiB"],
               next_footprint_GiB=pred["next_footprint_GiB"], plan_tries=pred["plan_tries"],
               oom_report_plan=pred["oom_report_plan"], over_batch=pred["over_batch"],
               over_footprint_GiB=pred["over_footprint_GiB"])  # fmt: skip
    verified = None
    if b:
        got, err = _try_batch(s, run, "blu", mode, b)
        verified = err is None
        rec["tries"].append([b, verified])
        if err:
            rec["errors"][str(b)] = err[-600:]
        else:
            rec.update(measured_peak_GiB=got.get("peak_GiB"), tok_s=got.get("tok_s"))
    rec["verified"] = verified
    rec["max_batch"] = b if verified else None
    over = pred.get("over_batch")
    if over:
        got, err = _try_batch(s, run, "blu", mode, over)
        rec["tries"].append([over, err is None])
        log = s.workdir / "logs" / f"maxbatch-blu-{mode}-B{over}.log"
        rec["oom_report_gpu"] = _error_text(log)
        rec["over_refused"] = err is not None and rec["oom_report_gpu"] is not None
        if err is not None and rec["oom_report_gpu"] is None:
            rec["errors"][str(over)] = err[-600:]
    return rec


def max_batch_report(records: list[dict], block: int) -> str:
    """The search's table: system, mode, the largest batch, the tries."""
    lines = [f"largest batch (x {block} tokens) that trains one step on one GPU:"]
    for r in records:
        tries = " ".join(f"{b}{'+' if ok else '-'}" for b, ok in r["tries"])
        top = f">={r['max_batch']}" if r.get("at_limit") else str(r["max_batch"])
        how = r.get("how", "search") + ")"
        if r.get("how") == "plan":
            how = (f"plan: {r.get('predicted')} predicted ({r.get('footprint_GiB')} GiB planned, "
                   f"{r.get('measured_peak_GiB')} GiB measured), "
                   f"{'verified' if r.get('verified') else 'NOT verified'}; "
                   f"B={r.get('over_batch')} "
                   f"{'refused' if r.get('over_refused') else 'NOT refused'} "
                   "before running)")  # fmt: skip
        lines.append(f"  {r['system']:<14} {r['mode']:<5} {top:>6}   tries: {tries}   ({how}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = parse_args(argv)
    if a.prepare_data:
        path = fid.prepare_tokens(a.data)
        print(f"wrote {path}")
        return 0
    s = Session(a, argv)
    if a.find_max_batch and not a.report:
        print(max_batch_report(run_find_max_batch(s), a.block))
        return 0
    if not a.report:
        if not a.no_throughput:
            run_throughput(s)
        if a.fidelity:
            run_fidelity(s)
    dims = model_dims(a.config, a.vocab, a.n_ctx)
    view = report.select(s.results, a.config, a.batch, a.block, dims["vocab"])
    print()
    print(report.text_report(view, a.config, a.batch, a.block))
    if a.update_benchmarks:
        md = Path(a.benchmarks_md)
        text = md.read_text() if md.is_file() else "# Benchmarks\n"
        md.write_text(
            report.rewrite_section(text, report.markdown_section(view, a.config, a.batch, a.block))
        )
        print(f"updated {md}")
    return 0


def cli(argv: list[str] | None = None) -> int:
    try:
        return main(argv)
    except (BenchmarkError, report.ReportError, fid.FidelityError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(cli())
