"""What a cached CPU kernel may contain, checked before it is loaded.

The kernel cache verifies each entry's sha256 (``cache.verify``), which catches corruption but
not an entry planted by someone who can write the cache folder and recompute the digest (the
folder's permissions keep other users out). As a second line, blu loads only what its own code
generator produces, and that is narrow:

- a shared object (``<key>.so``, linked with ``ld -shared`` from MLIR's object file) has no
  constructors or destructors (``DT_INIT``, ``DT_INIT_ARRAY``, ``DT_PREINIT_ARRAY``,
  ``DT_FINI``, ``DT_FINI_ARRAY``), needs no other library (``DT_NEEDED``), has no interpreter
  and no ``IRELATIVE`` relocations (an ifunc resolver runs at load time);
- a kernel in the LLVM dialect (``<key>.llvm.mlir``) calls no external function but libm's and
  the C memory functions, and has no inline assembly, integer-to-pointer casts, indirect calls
  or global constructors.

Anything else was not written by blu and is refused before ``dlopen`` or compilation.
"""

from __future__ import annotations

import struct
from typing import Any

_MATH = (
    "acos asin atan atan2 cos sin tan acosh asinh atanh cosh sinh tanh exp exp2 exp10 expm1 log "
    "log10 log1p log2 logb pow sqrt cbrt hypot erf erfc tgamma lgamma ceil floor round roundeven "
    "trunc rint nearbyint fmod remainder copysign fabs fmax fmin fma frexp ldexp modf nextafter "
    "sincos"
).split()
_MEMORY = ["malloc", "free", "aligned_alloc", "memcpy", "memset", "memmove"]
ALLOWED_EXTERNALS = frozenset([*_MATH, *(m + "f" for m in _MATH), *_MEMORY])
FORBIDDEN_OPS = frozenset(
    ["llvm.inline_asm", "llvm.inttoptr", "llvm.mlir.global_ctors", "llvm.mlir.global_dtors"]
)

# ---- shared objects ---------------------------------------------------------------------------

_PT_LOAD, _PT_DYNAMIC, _PT_INTERP = 1, 2, 3
_DT_NAMES = {1: "DT_NEEDED", 12: "DT_INIT", 13: "DT_FINI", 25: "DT_INIT_ARRAY",
             26: "DT_FINI_ARRAY", 32: "DT_PREINIT_ARRAY", 17: "DT_REL",
             0x7FFFFFFC: "DT_AUXILIARY", 0x7FFFFFFF: "DT_FILTER", 0x6FFFFEFC: "DT_AUDIT",
             0x6FFFFEFB: "DT_DEPAUDIT"}  # fmt: skip
_DT_RELA, _DT_RELASZ, _DT_JMPREL, _DT_PLTRELSZ = 7, 8, 23, 2
_IRELATIVE = {62: 37, 183: 1032}  # e_machine (x86-64, AArch64) -> R_*_IRELATIVE


def check_shared_object(data: bytes) -> str | None:
    """None if ``data`` is a shared object of the kind blu links, else why not (nothing is
    loaded: the ELF headers are read as bytes)."""
    try:
        return _check_elf(data)
    except (struct.error, IndexError, ValueError):
        return "malformed ELF headers"


def _check_elf(data: bytes) -> str | None:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return "not a 64-bit little-endian ELF file"
    e_type, e_machine = struct.unpack_from("<HH", data, 16)
    if e_type != 3:
        return f"ELF type {e_type}, not a shared object"
    (e_phoff,) = struct.unpack_from("<Q", data, 32)
    e_phentsize, e_phnum = struct.unpack_from("<HH", data, 54)
    loads: list[tuple[int, int, int]] = []
    dyn: tuple[int, int] | None = None
    for i in range(e_phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from(
            "<IIQQQQ", data, e_phoff + i * e_phentsize
        )
        if p_type == _PT_INTERP:
            return "it has a program interpreter"
        if p_type == _PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == _PT_DYNAMIC:
            dyn = (p_offset, p_filesz)
        if p_offset + p_filesz > len(data):
            return "a segment extends past the end of the file (truncated?)"
    if dyn is None:
        return None
    tags: dict[int, int] = {}
    for off in range(dyn[0], dyn[0] + dyn[1], 16):
        tag, val = struct.unpack_from("<qQ", data, off)
        if tag == 0:
            break
        if tag in _DT_NAMES:
            return f"it has {_DT_NAMES[tag]} (code that would run when it is loaded)"
        tags[tag] = val

    def file_offset(vaddr: int) -> int:
        for v, o, n in loads:
            if v <= vaddr < v + n:
                return o + vaddr - v
        raise ValueError("address outside the loaded segments")

    irel = _IRELATIVE.get(e_machine)
    for at, size in ((_DT_RELA, _DT_RELASZ), (_DT_JMPREL, _DT_PLTRELSZ)):
        if at not in tags:
            continue
        start = file_offset(tags[at])
        for off in range(start, start + tags.get(size, 0), 24):
            _, info, _ = struct.unpack_from("<QQq", data, off)
            if irel is not None and info & 0xFFFFFFFF == irel:
                return "it has IRELATIVE relocations (an ifunc resolver runs at load time)"
    return None


# ---- LLVM-dialect kernels ---------------------------------------------------------------------


def check_llvm_module(module: Any) -> str | None:
    """None if a parsed LLVM-dialect module (``mlir.ir.Module``) is of the kind blu's pipeline
    produces, else why not. Call before creating an execution engine."""
    from mlir import ir

    problems: list[str] = []

    def visit(op: Any) -> Any:
        name = op.name
        if name in FORBIDDEN_OPS:
            problems.append(f"it contains {name}")
        elif name == "llvm.func" and len(op.regions[0].blocks) == 0:
            sym = ir.StringAttr(op.attributes["sym_name"]).value
            if sym not in ALLOWED_EXTERNALS:
                problems.append(f"it calls the external function @{sym}")
        elif name == "llvm.call" and "callee" not in op.attributes:
            problems.append("it makes an indirect call")
        return ir.WalkResult.INTERRUPT if problems else ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return problems[0] if problems else None
