"""What a cached kernel may contain, checked before it is loaded, compiled or handed to a driver.

The kernel cache verifies each entry's sha256 (``cache.verify``), which catches corruption but not
an entry planted by someone who can write the cache folder or who handed the folder over (the
digest is no secret: anyone can recompute it). So blu loads only code of the narrow kind its own
pipeline produces; anything else was not written by blu and is refused (the entry is discarded
and rebuilt; on a machine without MLIR, a clear ``KernelCacheMiss``):

- a shared object (``<key>.so``, linked with ``ld -shared`` from MLIR's object file): no
  constructors or destructors, no other library needed (``DT_NEEDED``), no interpreter, only the
  dynamic tags ``ld`` writes for such an object; every imported (undefined) dynamic symbol on
  :data:`ALLOWED_IMPORTS`; no ifunc (``STT_GNU_IFUNC``, ``IRELATIVE``: a resolver would run at
  load or look-up time); only the relocation types of :data:`_RELOC_TYPES`, each writing inside
  the object's own segments;
- a kernel in the LLVM dialect (``<key>.llvm.mlir``): only functions and globals at the top level;
  a declaration (no body) only of a name on :data:`ALLOWED_IMPORTS`; a definition (a body) only
  with external, internal or private linkage (never ``available_externally``, ``weak``,
  ``linkonce``..., which let LLVM take another library's code instead), and with external linkage
  only under blu's kernel-symbol pattern (never a libc or libm name); globals internal or private
  with an initializer; calls only to functions of the module, by name; the address only of the
  module's globals; no inline assembly, integer-to-pointer casts, arbitrary intrinsics, invokes or
  global constructors;
- PTX (``<key>.ptx``): text without ``.extern`` declarations (blu's PTX has none: libdevice is
  linked in by the NVVM pipeline) but the dynamic shared memory's (``.extern .shared .align N
  .b8 __dynamic_shmem__K[];``: a window of the block's shared memory, no code or data of another
  module);
- a cubin (``<key>.cubin``, read only beside a verified PTX): an ELF file for the CUDA machine
  whose only undefined symbols are the ones ``ptxas`` itself writes (``.nv.reservedSmem.*``).

Where the allow-lists come from: the undefined dynamic symbols, relocation types, dynamic tags,
LLVM-dialect ops and symbol linkages of every kernel that the CPU rule, attention, elementwise,
gather/scatter and sorting tests compile (1,220 shared objects), and of the PTX and cubins that
the GPU lowering tests compile here (174): libm's functions in double and float precision
(``sincos`` included) and ``memset``; ``memcpy``/``memmove`` are added because LLVM's loop-idiom
pass may emit them like ``memset``.

What these checks cannot do: prove what native code does. A shared object of the allowed shape
may still contain machine code that makes system calls by itself, and GPU code may write any
memory the GPU can reach. Those are kept out by the folder's permissions (``cache.check_private``:
only this user can write it) and by carrying a cache only between machines one trusts
(``scripts/fill_gpu_cache.py`` exports only PTX and cubins). The CPU's shared objects never travel.
"""

from __future__ import annotations

import re
from typing import Any

from blu.lower.mlir.elf import DT_HASH, Elf, ElfError

_MATH = (
    "acos asin atan atan2 cos sin tan acosh asinh atanh cosh sinh tanh exp exp2 exp10 expm1 log "
    "log10 log1p log2 logb pow sqrt cbrt hypot erf erfc tgamma lgamma ceil floor round roundeven "
    "trunc rint nearbyint fmod remainder copysign fabs fmax fmin fma frexp ldexp modf nextafter "
    "sincos"
).split()
_MEMORY = ["memcpy", "memset", "memmove"]
ALLOWED_IMPORTS = frozenset([*_MATH, *(m + "f" for m in _MATH), *_MEMORY])
ALLOWED_EXTERNALS = ALLOWED_IMPORTS  # the name the LLVM-text check used before
KERNEL_SYMBOL = re.compile(r"(_mlir_)?k[0-9a-f]{24}")  # llvm.symbol(key), its packed wrapper

# ---- shared objects ---------------------------------------------------------------------------

_PT_INTERP, _PT_TLS = 3, 7
_STT_TLS, _STT_GNU_IFUNC = 6, 10
_DT_REFUSED = {1: "DT_NEEDED", 12: "DT_INIT", 13: "DT_FINI", 25: "DT_INIT_ARRAY",
               26: "DT_FINI_ARRAY", 32: "DT_PREINIT_ARRAY", 17: "DT_REL", 36: "DT_RELR",
               0x7FFFFFFC: "DT_AUXILIARY", 0x7FFFFFFF: "DT_FILTER", 0x6FFFFEFC: "DT_AUDIT",
               0x6FFFFEFB: "DT_DEPAUDIT", 15: "DT_RPATH", 29: "DT_RUNPATH"}  # fmt: skip
_DT_RELA, _DT_RELASZ, _DT_JMPREL, _DT_PLTRELSZ, _DT_PLTREL = 7, 8, 23, 2, 20
# the tags ``ld -shared`` writes for an object with no dependencies (and a few as harmless)
_DT_ALLOWED = frozenset([
    DT_HASH, 0x6FFFFEF5, 5, 6, 10, 11,  # GNU_HASH, STRTAB, SYMTAB, STRSZ, SYMENT
    _DT_RELA, _DT_RELASZ, 9, 0x6FFFFFF9,  # RELAENT, RELACOUNT
    _DT_JMPREL, _DT_PLTRELSZ, _DT_PLTREL, 3,  # PLTGOT
    22, 30, 0x6FFFFFFB, 24, 14, 21,  # TEXTREL, FLAGS, FLAGS_1, BIND_NOW, SONAME, DEBUG
    0x6FFFFFF0, 0x6FFFFFFC, 0x6FFFFFFD, 0x6FFFFFFE, 0x6FFFFFFF,  # VERSYM, VERDEF(NUM), VERNEED(NUM)
])  # fmt: skip
# e_machine -> (relocation types: none, absolute, pc-relative, GOT entry, PLT slot, relative)
_RELOC_TYPES = {62: frozenset({0, 1, 2, 6, 7, 8}), 183: frozenset({0, 257, 261, 1025, 1026, 1027})}


def check_shared_object(data: bytes) -> str | None:
    """None if ``data`` is a shared object of the kind blu links, else why not (nothing is
    loaded: the ELF headers are read as bytes)."""
    try:
        return _check_so(Elf(data))
    except ElfError as e:
        return f"malformed ELF ({e})"


def _check_so(elf: Elf) -> str | None:
    if elf.type != 3:
        return f"ELF type {elf.type}, not a shared object"
    relocs = _RELOC_TYPES.get(elf.machine)
    if relocs is None:
        return f"machine {elf.machine}: blu checks shared objects for x86-64 and AArch64 only"
    for s in elf.segments:
        if s.type == _PT_INTERP:
            return "it has a program interpreter"
        if s.type == _PT_TLS:
            return "it has thread-local storage"
        if s.type == 1 and (s.offset - s.vaddr) % 4096:
            return "a loaded segment's file offset and address disagree (the loader refuses it)"
    if sum(s.type == 2 for s in elf.segments) != 1:
        return "it has no dynamic segment, or several"
    dyn = elf.dynamic()
    tags = dict(dyn)
    for tag, _ in dyn:
        if tag in _DT_REFUSED:
            return f"it has {_DT_REFUSED[tag]} (code or libraries that would load with it)"
        if tag not in _DT_ALLOWED:
            return f"it has the dynamic tag {tag:#x}, which blu's linker never writes"
    if tags.get(_DT_PLTREL, _DT_RELA) != _DT_RELA:
        return "it has REL relocations"
    syms = elf.dynamic_symbols(tags)
    for sym in syms:
        if sym.type == _STT_GNU_IFUNC:
            return f"its symbol {sym.name!r} is an ifunc (a resolver runs when it is looked up)"
        if sym.type == _STT_TLS:
            return f"its symbol {sym.name!r} is thread-local"
        if sym.shndx >= 0xFF00:
            return f"its symbol {sym.name!r} is absolute or common (blu's linker writes none)"
        if sym.shndx == 0 and sym.name and sym.name not in ALLOWED_IMPORTS:
            return f"it imports {sym.name!r}, which blu's kernels never call"
    for at, size in ((_DT_RELA, _DT_RELASZ), (_DT_JMPREL, _DT_PLTRELSZ)):
        if at not in tags:
            continue
        for r in elf.relocations(tags[at], tags.get(size, 0)):
            if r.type not in relocs:
                return f"it has a relocation of type {r.type} (IRELATIVE, TLS or another kind)"
            if r.sym >= max(len(syms), 1):
                return "a relocation names a symbol past the symbol table"
            if not elf.in_memory(r.offset):
                return f"a relocation writes at {r.offset:#x}, outside the object's segments"
    return None


# ---- LLVM-dialect kernels ---------------------------------------------------------------------

FORBIDDEN_OPS = frozenset(
    ["llvm.inline_asm", "llvm.inttoptr", "llvm.mlir.global_ctors", "llvm.mlir.global_dtors",
     "llvm.call_intrinsic", "llvm.invoke", "llvm.landingpad", "llvm.resume", "llvm.mlir.alias",
     "llvm.mlir.ifunc", "llvm.dso_local_equivalent", "llvm.blockaddress", "llvm.indirectbr"]
)  # fmt: skip
_TOP_LEVEL = frozenset(["llvm.func", "llvm.mlir.global"])
_LOCAL = frozenset(["private", "internal"])
_LINKAGE = re.compile(r"#llvm\.linkage<(\w+)>")


def _linkage(op: Any) -> str:
    if "linkage" not in op.attributes:
        return "external"
    m = _LINKAGE.fullmatch(str(op.attributes["linkage"]))
    return m.group(1) if m else str(op.attributes["linkage"])


def check_llvm_module(module: Any) -> str | None:
    """None if a parsed LLVM-dialect module (``mlir.ir.Module``) is of the kind blu's pipeline
    produces, else why not. Call before creating an execution engine."""
    from mlir import ir

    functions: set[str] = set()
    data: set[str] = set()
    for top in module.body.operations:
        op = top.operation
        if op.name in FORBIDDEN_OPS or op.name not in _TOP_LEVEL:
            return f"it contains {op.name} at the top level"
        sym = ir.StringAttr(op.attributes["sym_name"]).value
        link = _linkage(op)
        has_body = len(op.regions) > 0 and len(op.regions[0].blocks) > 0
        if op.name == "llvm.mlir.global":
            if link not in _LOCAL or not (has_body or "value" in op.attributes):
                return f"it has the global @{sym} with {link} linkage (another library's data)"
            data.add(sym)
        elif not has_body:
            if sym not in ALLOWED_IMPORTS:
                return f"it calls the external function @{sym}"
            functions.add(sym)
        elif link not in _LOCAL and link != "external":
            return (
                f"it defines @{sym} with {link} linkage (LLVM may bind the name to another "
                "library's code instead of the body)"
            )
        elif link == "external" and (sym in ALLOWED_IMPORTS or not KERNEL_SYMBOL.fullmatch(sym)):
            return f"it defines @{sym}, a name blu's kernels never define"
        else:
            functions.add(sym)
    problems: list[str] = []

    def visit(op: Any) -> Any:
        name = op.name
        if name in FORBIDDEN_OPS:
            problems.append(f"it contains {name}")
        elif name == "llvm.call":
            if "callee" not in op.attributes:
                problems.append("it makes an indirect call")
            elif ir.FlatSymbolRefAttr(op.attributes["callee"]).value not in functions:
                callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
                problems.append(f"it calls @{callee}, which is not a function of the module")
        elif name == "llvm.mlir.addressof":
            target = ir.FlatSymbolRefAttr(op.attributes["global_name"]).value
            if target not in data:
                problems.append(f"it takes the address of @{target} (only its own globals')")
        return ir.WalkResult.INTERRUPT if problems else ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return problems[0] if problems else None


# ---- GPU images -------------------------------------------------------------------------------

_COMMENT = re.compile(rb"//[^\n]*|/\*.*?\*/", re.S)
_EXTERN = re.compile(rb"\.extern\b[^;{]*?([A-Za-z_$%][\w$]*)\s*(?:\([^)]*\)\s*)?;")
# the one ``.extern`` blu's PTX has: its dynamic shared memory (``compiler.dynamic_shared``)
_DYNAMIC_SHARED = re.compile(
    rb"\.extern\s+\.shared\s+\.align\s+\d+\s+\.b8\s+__dynamic_shmem__\d+\s*\[\s*\]\s*;"
)
_EM_CUDA = 190
PTXAS_UNDEFINED = re.compile(r"\.nv\.reservedSmem\.[\w.]+")


def check_ptx(data: bytes) -> str | None:
    """None if ``data`` is PTX text of the kind blu's NVVM pipeline writes, else why not."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "PTX that is not UTF-8 text"
    code = _DYNAMIC_SHARED.sub(b" ", _COMMENT.sub(b" ", data))
    m = _EXTERN.search(code) or re.search(rb"\.extern\b", code)
    if m is not None:
        name = m.group(1).decode() if m.groups() else "?"
        return f"PTX with an .extern declaration of {name!r} (blu's PTX declares none)"
    return None


def check_cubin(data: bytes) -> str | None:
    """None if ``data`` is a CUDA ELF image whose undefined symbols are only ptxas's own."""
    try:
        elf = Elf(data)
        if elf.machine != _EM_CUDA:
            return f"not a CUDA ELF image (machine {elf.machine})"
        for sym in elf.section_symbols():
            if sym.shndx == 0 and sym.name and not PTXAS_UNDEFINED.fullmatch(sym.name):
                return f"a cubin with the undefined symbol {sym.name!r} (ptxas writes none such)"
    except ElfError as e:
        return f"malformed cubin ({e})"
    return None
