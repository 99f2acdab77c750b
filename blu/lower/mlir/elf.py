"""A small reader of 64-bit little-endian ELF files, for checking cached kernels before they are
loaded (``entry_check``): headers, segments, sections, the dynamic table, symbols, relocations.

Nothing is loaded or mapped: the file is bytes, every read is bounds-checked (a malformed or
hostile file raises :class:`ElfError`, never reads past the end, never loops longer than the file
is long).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple


class ElfError(ValueError):
    """The bytes are not a well-formed 64-bit little-endian ELF file."""


class Segment(NamedTuple):
    type: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int


class Section(NamedTuple):
    name: int
    type: int
    offset: int
    size: int
    link: int
    entsize: int


class Symbol(NamedTuple):
    name: str
    type: int  # STT_*
    bind: int  # STB_*
    shndx: int  # 0: undefined; >= 0xFF00: reserved (SHN_ABS, SHN_COMMON, ...)


class Reloc(NamedTuple):
    offset: int
    type: int
    sym: int


SHT_SYMTAB, SHT_STRTAB, SHT_DYNSYM = 2, 3, 11
DT_HASH, DT_STRTAB, DT_SYMTAB, DT_GNU_HASH = 4, 5, 6, 0x6FFFFEF5
MAX_NAME = 4096


class Elf:
    """The parsed headers of an ELF64 little-endian file."""

    def __init__(self, data: bytes):
        self.data = data
        if data[:4] != b"\x7fELF" or len(data) < 64 or data[4] != 2 or data[5] != 1:
            raise ElfError("not a 64-bit little-endian ELF file")
        self.type, self.machine = self.unpack("<HH", 16)
        (self.flags,) = self.unpack("<I", 48)
        (phoff, shoff) = self.unpack("<QQ", 32)
        phentsize, phnum, shentsize, shnum, self.shstrndx = self.unpack("<HHHHH", 54)
        self.segments = [
            Segment(t, o, v, fs, ms)
            for t, _, o, v, _, fs, ms in (
                self.unpack("<IIQQQQQ", phoff + i * phentsize) for i in range(phnum)
            )
        ]
        for s in self.segments:
            if s.offset + s.filesz > len(data):
                raise ElfError("a segment extends past the end of the file (truncated?)")
        self.sections = [
            Section(n, t, o, sz, lk, es)
            for n, t, _, _, o, sz, lk, _, _, es in (
                self.unpack("<IIQQQQIIQQ", shoff + i * shentsize) for i in range(shnum)
            )
        ]

    def unpack(self, fmt: str, off: int) -> tuple:
        if off < 0 or off + struct.calcsize(fmt) > len(self.data):
            raise ElfError("a header points past the end of the file")
        return struct.unpack_from(fmt, self.data, off)

    def string(self, table: int, index: int) -> str:
        """The NUL-terminated string at ``table + index`` (file offsets)."""
        start = table + index
        if index < 0 or start >= len(self.data):
            raise ElfError("a name points past the end of the file")
        end = self.data.find(b"\0", start, start + MAX_NAME)
        if end < 0:
            raise ElfError("an unterminated name")
        return self.data[start:end].decode("latin-1")

    # ---- the dynamic view (what the dynamic loader reads) --------------------------------------

    def file_offset(self, vaddr: int) -> int:
        """The file offset of a virtual address inside a loaded segment's file bytes."""
        for s in self.segments:
            if s.type == 1 and s.vaddr <= vaddr < s.vaddr + s.filesz:
                return s.offset + vaddr - s.vaddr
        raise ElfError(f"address {vaddr:#x} is outside the loaded segments")

    def in_memory(self, vaddr: int, size: int = 8) -> bool:
        """Whether ``[vaddr, vaddr + size)`` lies inside one loaded segment (as mapped)."""
        return any(
            s.type == 1 and s.vaddr <= vaddr and vaddr + size <= s.vaddr + s.memsz
            for s in self.segments
        )

    def dynamic(self) -> list[tuple[int, int]]:
        """The ``(tag, value)`` pairs of the dynamic segment up to ``DT_NULL`` ([] if none)."""
        out = []
        for s in self.segments:
            if s.type != 2:
                continue
            start = self.file_offset(s.vaddr)  # where the loader reads it: by address
            for off in range(start, start + s.filesz - 15, 16):
                tag, val = self.unpack("<qQ", off)
                if tag == 0:
                    break
                out.append((tag, val))
        return out

    def dynamic_symbols(self, tags: dict[int, int]) -> list[Symbol]:
        """Every symbol of the dynamic symbol table, as many as the hash tables (what the loader
        searches) or the section headers say, whichever is more."""
        if DT_SYMTAB not in tags or DT_STRTAB not in tags:
            return []
        count = 0
        if DT_HASH in tags:
            (count,) = self.unpack("<I", self.file_offset(tags[DT_HASH]) + 4)  # nchain
        if DT_GNU_HASH in tags:
            count = max(count, self._gnu_hash_count(self.file_offset(tags[DT_GNU_HASH])))
        for sec in self.sections:
            if sec.type == SHT_DYNSYM and sec.entsize:
                count = max(count, sec.size // sec.entsize)
        if count * 24 > len(self.data):
            raise ElfError("a symbol table longer than the file")
        symtab, strtab = self.file_offset(tags[DT_SYMTAB]), self.file_offset(tags[DT_STRTAB])
        return list(self._symbols(symtab, count, strtab))

    def _gnu_hash_count(self, off: int) -> int:
        nbuckets, symoffset, bloom_size, _ = self.unpack("<IIII", off)
        if (nbuckets + 2 * bloom_size) * 4 > len(self.data):
            raise ElfError("a GNU hash table longer than the file")
        buckets = off + 16 + 8 * bloom_size
        top = max(self.unpack(f"<{nbuckets}I", buckets), default=0)
        if top < symoffset:
            return symoffset
        chains = buckets + 4 * nbuckets
        i = top
        while not self.unpack("<I", chains + 4 * (i - symoffset))[0] & 1:
            i += 1  # ends: each step reads 4 more bytes of the file
        return i + 1

    def _symbols(self, table: int, count: int, strtab: int) -> Iterator[Symbol]:
        for i in range(count):
            name, info, _, shndx, _, _ = self.unpack("<IBBHQQ", table + 24 * i)
            yield Symbol(self.string(strtab, name) if name else "", info & 0xF, info >> 4, shndx)

    def relocations(self, at: int, size: int) -> Iterator[Reloc]:
        """The RELA entries of a table at virtual address ``at`` of ``size`` bytes."""
        start = self.file_offset(at)
        if size > len(self.data):
            raise ElfError("a relocation table longer than the file")
        for off in range(start, start + size - 23, 24):
            r_offset, info, _ = self.unpack("<QQq", off)
            yield Reloc(r_offset, info & 0xFFFFFFFF, info >> 32)

    # ---- the section view (cubins: the CUDA driver reads sections) ----------------------------

    def section_symbols(self) -> list[Symbol]:
        out: list[Symbol] = []
        for sec in self.sections:
            if sec.type != SHT_SYMTAB:
                continue
            if sec.link >= len(self.sections) or sec.size > len(self.data):
                raise ElfError("a malformed symbol table section")
            strtab = self.sections[sec.link].offset
            out.extend(self._symbols(sec.offset, sec.size // 24, strtab))
        return out
