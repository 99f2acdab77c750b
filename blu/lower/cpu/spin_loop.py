"""The spinning workers' native loop (``blu/lower/cpu/spin.py``) as MLIR's LLVM dialect: the
control block's layout (``_Slot``), the op kinds a posted part lists, and ``_source()``, the
text MLIR's execution engine compiles in the process (never written to the kernel cache)."""

from __future__ import annotations

import platform

MAX_OPS = 256  # calls one posted part may hold
SPIN_NS = 5_000_000  # a worker with no work for this long goes back to sleep (5 ms)
YIELD_NS = 50_000  # ... and after this long it yields its core at each check (50 us)


class _Slot:
    """Positions in a worker's control block (``int64``; 8 per 64-byte cache line: what the caller
    writes, the claim, and what the runner writes sit on separate lines)."""

    SEQ, PARK, SPIN_NS, CLOCK, YIELD, N_OPS, STOLEN, YIELD_NS = range(8)
    CLAIMED = 8
    DONE, T_END, ACTIVE = 16, 17, 18
    TS_WORKER, TS_CALLER = 24, 26  # struct timespec scratch (2 slots each)
    OPS, OP_SLOTS = 32, 16


# op kinds (slot 0 of an op; slot 1: the function's address)
KERNEL = 1  # fn(void **packed): blu's compiled kernels (``mlir_cpu.Kernel``)
SGEMM32, SGEMM64, DGEMM32, DGEMM64 = 2, 3, 4, 5  # cblas_?gemm, 32- or 64-bit integers
COPY = 6  # rows x bytes, strided: [dst, src, rows, row bytes, dst stride, src stride]

_S = _Slot
_GEMMS = {SGEMM32: ("i32", "f32"), SGEMM64: ("i64", "f32"), DGEMM32: ("i32", "f64"),
          DGEMM64: ("i64", "f64")}  # fmt: skip


def _slot(ptr: str, i: int | str, name: str) -> str:
    return f"    %{name} = llvm.getelementptr {ptr}[{i}] : (!llvm.ptr) -> !llvm.ptr, i64\n"


def _slots(**fields: int) -> str:
    """Pointers to the control block's fields: ``%name = &ctl[index]`` for each."""
    return "".join(_slot("%ctl", i, name) for name, i in fields.items())


def _gemm_block(kind: int) -> str:
    """The block of ``run_ops`` that calls a ``cblas_?gemm`` (row-major flags first: CBLAS enums
    are C ``int``; alpha and beta sit in their slots as float64 bits)."""
    it, rt = _GEMMS[kind]
    lines = [f"  ^g{kind}:"]
    args, types = [], []
    for j in range(2, 16):
        lines.append(_slot("%base", j, f"g{kind}p{j}").rstrip())
        if j in (9, 11, 14):  # a, b, c
            lines.append(f"    %g{kind}a{j} = llvm.load %g{kind}p{j} : !llvm.ptr -> !llvm.ptr")
            types.append("!llvm.ptr")
        elif j in (8, 13):  # alpha, beta
            lines.append(f"    %g{kind}r{j} = llvm.load %g{kind}p{j} : !llvm.ptr -> f64")
            if rt == "f32":
                lines.append(f"    %g{kind}a{j} = llvm.fptrunc %g{kind}r{j} : f64 to f32")
            else:
                lines.append(f"    %g{kind}a{j} = llvm.fadd %g{kind}r{j}, %zero_f : f64")
            types.append(rt)
        else:
            t = "i32" if j in (2, 3, 4) else it
            lines.append(f"    %g{kind}w{j} = llvm.load %g{kind}p{j} : !llvm.ptr -> i64")
            if t == "i32":
                lines.append(f"    %g{kind}a{j} = llvm.trunc %g{kind}w{j} : i64 to i32")
            else:
                lines.append(f"    %g{kind}a{j} = llvm.add %g{kind}w{j}, %zero : i64")
            types.append(t)
        args.append(f"%g{kind}a{j}")
    lines.append(f"    llvm.call %fn({', '.join(args)}) : !llvm.ptr, ({', '.join(types)}) -> ()")
    lines.append("    llvm.br ^next")
    return "\n".join(lines) + "\n"


def _pause() -> str:
    if platform.machine().lower() in ("x86_64", "amd64"):
        return '    llvm.call_intrinsic "llvm.x86.sse2.pause"() : () -> ()\n'
    return ""


def _source() -> str:
    s = _S
    gemms = "".join(_gemm_block(k) for k in _GEMMS)
    cases = ", ".join(f"{k}: ^g{k}" for k in _GEMMS)
    worker_fields = _slots(
        pact=s.ACTIVE,
        ppark=s.PARK,
        pseq=s.SEQ,
        pclaim=s.CLAIMED,
        pdone=s.DONE,
        pend=s.T_END,
        pclock=s.CLOCK,
        pyield=s.YIELD,
        pspin=s.SPIN_NS,
        pyns=s.YIELD_NS,
        ts=s.TS_WORKER,
    )
    finish_fields = _slots(
        pseq=s.SEQ,
        pclaim=s.CLAIMED,
        pdone=s.DONE,
        pend=s.T_END,
        pstolen=s.STOLEN,
        pclock=s.CLOCK,
        pyield=s.YIELD,
        ts=s.TS_CALLER,
    )
    return f"""module {{
  llvm.func @blu_now(%clock: !llvm.ptr, %ts: !llvm.ptr) -> i64 {{
    %mono = llvm.mlir.constant(1 : i32) : i32
    %r = llvm.call %clock(%mono, %ts) : !llvm.ptr, (i32, !llvm.ptr) -> i32
    %sec = llvm.load %ts : !llvm.ptr -> i64
{_slot("%ts", 1, "pns")}    %ns = llvm.load %pns : !llvm.ptr -> i64
    %g = llvm.mlir.constant(1000000000 : i64) : i64
    %t = llvm.mul %sec, %g : i64
    %u = llvm.add %t, %ns : i64
    llvm.return %u : i64
  }}

  llvm.func @blu_run_ops(%ctl: !llvm.ptr) {{
    %zero = llvm.mlir.constant(0 : i64) : i64
    %zero_f = llvm.mlir.constant(0.0 : f64) : f64
    %one = llvm.mlir.constant(1 : i64) : i64
    %width = llvm.mlir.constant({s.OP_SLOTS} : i64) : i64
    %first = llvm.mlir.constant({s.OPS} : i64) : i64
{_slot("%ctl", s.N_OPS, "pn")}    %n = llvm.load %pn : !llvm.ptr -> i64
    llvm.br ^loop(%zero : i64)
  ^loop(%i: i64):
    %more = llvm.icmp "slt" %i, %n : i64
    llvm.cond_br %more, ^body, ^exit
  ^body:
    %scaled = llvm.mul %i, %width : i64
    %off = llvm.add %scaled, %first : i64
    %base = llvm.getelementptr %ctl[%off] : (!llvm.ptr, i64) -> !llvm.ptr, i64
    %kind = llvm.load %base : !llvm.ptr -> i64
{_slot("%base", 1, "pfn")}    %fn = llvm.load %pfn : !llvm.ptr -> !llvm.ptr
    llvm.switch %kind : i64, ^next [
      {KERNEL}: ^kernel,
      {cases},
      {COPY}: ^copy
    ]
  ^kernel:
{_slot("%base", 2, "pk")}    %packed = llvm.load %pk : !llvm.ptr -> !llvm.ptr
    llvm.call %fn(%packed) : !llvm.ptr, (!llvm.ptr) -> ()
    llvm.br ^next
{gemms}  ^copy:
{_slot("%base", 2, "pc2")}{_slot("%base", 3, "pc3")}{_slot("%base", 4, "pc4")}\
{_slot("%base", 5, "pc5")}{_slot("%base", 6, "pc6")}{_slot("%base", 7, "pc7")}\
    %dst = llvm.load %pc2 : !llvm.ptr -> !llvm.ptr
    %src = llvm.load %pc3 : !llvm.ptr -> !llvm.ptr
    %rows = llvm.load %pc4 : !llvm.ptr -> i64
    %bytes = llvm.load %pc5 : !llvm.ptr -> i64
    %dstep = llvm.load %pc6 : !llvm.ptr -> i64
    %sstep = llvm.load %pc7 : !llvm.ptr -> i64
    llvm.br ^row(%zero : i64)
  ^row(%r: i64):
    %rmore = llvm.icmp "slt" %r, %rows : i64
    llvm.cond_br %rmore, ^rowbody, ^next
  ^rowbody:
    %doff = llvm.mul %r, %dstep : i64
    %soff = llvm.mul %r, %sstep : i64
    %d = llvm.getelementptr %dst[%doff] : (!llvm.ptr, i64) -> !llvm.ptr, i8
    %sp = llvm.getelementptr %src[%soff] : (!llvm.ptr, i64) -> !llvm.ptr, i8
    "llvm.intr.memcpy"(%d, %sp, %bytes) <{{isVolatile = false}}> : (!llvm.ptr, !llvm.ptr, i64) -> ()
    %r1 = llvm.add %r, %one : i64
    llvm.br ^row(%r1 : i64)
  ^next:
    %i1 = llvm.add %i, %one : i64
    llvm.br ^loop(%i1 : i64)
  ^exit:
    llvm.return
  }}

  llvm.func @blu_worker(%ctl: !llvm.ptr) {{
    %zero = llvm.mlir.constant(0 : i64) : i64
    %one = llvm.mlir.constant(1 : i64) : i64
    %mask = llvm.mlir.constant(255 : i64) : i64
{worker_fields}    llvm.store %one, %pact atomic release {{alignment = 8 : i64}} : i64, !llvm.ptr
    %clock = llvm.load %pclock : !llvm.ptr -> !llvm.ptr
    %yield = llvm.load %pyield : !llvm.ptr -> !llvm.ptr
    %spin = llvm.load %pspin : !llvm.ptr -> i64
    %yns = llvm.load %pyns : !llvm.ptr -> i64
    %t0 = llvm.call @blu_now(%clock, %ts) : (!llvm.ptr, !llvm.ptr) -> i64
    llvm.br ^loop(%t0, %zero : i64, i64)
  ^loop(%last: i64, %spins: i64):
    %park = llvm.load %ppark atomic acquire {{alignment = 8 : i64}} : !llvm.ptr -> i64
    %parked = llvm.icmp "ne" %park, %zero : i64
    llvm.cond_br %parked, ^exit, ^check
  ^check:
    %seq = llvm.load %pseq atomic acquire {{alignment = 8 : i64}} : !llvm.ptr -> i64
    %claimed = llvm.load %pclaim atomic acquire {{alignment = 8 : i64}} : !llvm.ptr -> i64
    %new = llvm.icmp "ne" %seq, %claimed : i64
    llvm.cond_br %new, ^claim, ^idle
  ^claim:
    %cas = llvm.cmpxchg %pclaim, %claimed, %seq acq_rel acquire : !llvm.ptr, i64
    %won = llvm.extractvalue %cas[1] : !llvm.struct<(i64, i1)>
    llvm.cond_br %won, ^run, ^loop(%last, %spins : i64, i64)
  ^run:
    llvm.call @blu_run_ops(%ctl) : (!llvm.ptr) -> ()
    %t = llvm.call @blu_now(%clock, %ts) : (!llvm.ptr, !llvm.ptr) -> i64
    llvm.store %t, %pend {{alignment = 8 : i64}} : i64, !llvm.ptr
    llvm.store %seq, %pdone atomic release {{alignment = 8 : i64}} : i64, !llvm.ptr
    llvm.br ^loop(%t, %zero : i64, i64)
  ^idle:
{_pause()}    %s1 = llvm.add %spins, %one : i64
    %low = llvm.and %s1, %mask : i64
    %tick = llvm.icmp "eq" %low, %zero : i64
    llvm.cond_br %tick, ^time, ^loop(%last, %s1 : i64, i64)
  ^time:
    %now = llvm.call @blu_now(%clock, %ts) : (!llvm.ptr, !llvm.ptr) -> i64
    %idle = llvm.sub %now, %last : i64
    %over = llvm.icmp "sgt" %idle, %spin : i64
    llvm.cond_br %over, ^exit, ^polite
  ^polite:
    %long = llvm.icmp "sgt" %idle, %yns : i64
    llvm.cond_br %long, ^yield, ^loop(%last, %s1 : i64, i64)
  ^yield:
    %y = llvm.call %yield() : !llvm.ptr, () -> i32
    llvm.br ^loop(%last, %s1 : i64, i64)
  ^exit:
    llvm.store %zero, %pact atomic release {{alignment = 8 : i64}} : i64, !llvm.ptr
    llvm.return
  }}

  llvm.func @blu_post(%ctl: !llvm.ptr) {{
    %one = llvm.mlir.constant(1 : i64) : i64
    %seq = llvm.load %ctl atomic acquire {{alignment = 8 : i64}} : !llvm.ptr -> i64
    %next = llvm.add %seq, %one : i64
    llvm.store %next, %ctl atomic release {{alignment = 8 : i64}} : i64, !llvm.ptr
    llvm.return
  }}

  llvm.func @blu_finish(%ctl: !llvm.ptr) {{
    %zero = llvm.mlir.constant(0 : i64) : i64
    %one = llvm.mlir.constant(1 : i64) : i64
    %mask = llvm.mlir.constant(1023 : i64) : i64
{finish_fields}    %seq = llvm.load %pseq atomic acquire {{alignment = 8 : i64}} : !llvm.ptr -> i64
    %claimed = llvm.load %pclaim atomic acquire {{alignment = 8 : i64}} : !llvm.ptr -> i64
    %open = llvm.icmp "ne" %seq, %claimed : i64
    llvm.cond_br %open, ^steal, ^wait
  ^steal:
    %cas = llvm.cmpxchg %pclaim, %claimed, %seq acq_rel acquire : !llvm.ptr, i64
    %won = llvm.extractvalue %cas[1] : !llvm.struct<(i64, i1)>
    llvm.cond_br %won, ^mine, ^wait
  ^mine:
    llvm.store %one, %pstolen {{alignment = 8 : i64}} : i64, !llvm.ptr
    llvm.call @blu_run_ops(%ctl) : (!llvm.ptr) -> ()
    %clock = llvm.load %pclock : !llvm.ptr -> !llvm.ptr
    %t = llvm.call @blu_now(%clock, %ts) : (!llvm.ptr, !llvm.ptr) -> i64
    llvm.store %t, %pend {{alignment = 8 : i64}} : i64, !llvm.ptr
    llvm.store %seq, %pdone atomic release {{alignment = 8 : i64}} : i64, !llvm.ptr
    llvm.return
  ^wait:
    llvm.store %zero, %pstolen {{alignment = 8 : i64}} : i64, !llvm.ptr
    llvm.br ^spin(%zero : i64)
  ^spin(%k: i64):
    %done = llvm.load %pdone atomic acquire {{alignment = 8 : i64}} : !llvm.ptr -> i64
    %finished = llvm.icmp "eq" %done, %seq : i64
    llvm.cond_br %finished, ^out, ^pause
  ^pause:
{_pause()}    %k1 = llvm.add %k, %one : i64
    %low = llvm.and %k1, %mask : i64
    %tick = llvm.icmp "eq" %low, %zero : i64
    llvm.cond_br %tick, ^yield, ^spin(%k1 : i64)
  ^yield:
    %yield = llvm.load %pyield : !llvm.ptr -> !llvm.ptr
    %y = llvm.call %yield() : !llvm.ptr, () -> i32
    llvm.br ^spin(%k1 : i64)
  ^out:
    llvm.return
  }}
}}
"""
