"""``einsum``: Einstein summation, parsed here and lowered to dot_general, transposes, sums.

Supported: explicit (``'ij,jk->ik'``) and implicit (``'ij,jk'``: the output is the labels used
once, in alphabetical order) modes, ``...`` for broadcast leading axes, repeated labels within
an operand (diagonals, ``'ii->i'``), size-1 axes broadcasting against a label's other sizes,
and the interleaved form ``einsum(x, [0, 1], y, [1, 2], [0, 2])``.

The operands are contracted two at a time, in the order ``opt_einsum`` finds cheapest
(``optimize=``; left to right with ``optimize=False``). Before each contraction a label that
no later operand and not the output needs is summed out of its operand; each pairwise step is
one ``lax.dot_general`` whose batch axes are the shared labels still needed later and whose
contracting axes are the shared labels needed nowhere else.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

from blu import lax
from blu.core.errors import BluShapeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.numpy._promote import asarray_operands, promote_dtypes
from blu.numpy.selection import diagonal

__all__ = ["einsum", "einsum_path"]

_LETTERS = string.ascii_letters
_ELLIPSIS_LABELS = [chr(c) for c in range(0x391, 0x391 + 40)]  # Greek: never user labels


def _error(msg: str) -> BluValueError:
    return BluValueError(with_user_line(f"einsum: {msg}"))


def _interleaved(args: Sequence[Any]) -> tuple[str, list[Any]]:
    """``(x, [0, 1], y, [1, 2], [0, 2])`` -> ``('ab,bc->ac', [x, y])``."""
    ops, subs = list(args[0::2]), list(args[1::2])
    out = None
    if len(ops) > len(subs):  # the trailing output sublist was taken as an operand
        out = ops.pop()

    def conv(sub: Any) -> str:
        s = []
        for v in sub:
            if v is Ellipsis:
                s.append("...")
            else:
                s.append(_LETTERS[int(v)])
        return "".join(s)

    spec = ",".join(conv(s) for s in subs)
    if out is not None:
        spec += "->" + conv(out)
    return spec, ops


def _parse(spec: str, shapes: list[tuple[int, ...]]) -> tuple[list[list[str]], list[str]]:
    """Label lists per operand and for the output, with '...' expanded to private labels."""
    spec = spec.replace(" ", "")
    if "->" in spec:
        ins, out = spec.split("->")
        if "->" in out:
            raise _error(f"more than one '->' in {spec!r}")
    else:
        ins, out = spec, None
    in_specs = ins.split(",")
    if len(in_specs) != len(shapes):
        raise _error(f"{spec!r} has {len(in_specs)} operands but {len(shapes)} were given")
    labels, n_ell = [], 0
    for s, shape in zip(in_specs, shapes):
        if s.count("...") > 1:
            raise _error(f"more than one '...' in operand {s!r}")
        explicit = s.replace("...", "")
        for c in explicit:
            if c not in _LETTERS:
                raise _error(f"invalid label {c!r} in {spec!r}")
        k = len(shape) - len(explicit)
        if k < 0 or (k > 0 and "..." not in s):
            raise _error(f"operand {s!r} does not match an array of rank {len(shape)}")
        n_ell = max(n_ell, k)
        labels.append((s, k))
    ell = _ELLIPSIS_LABELS[:n_ell]
    in_labels = []
    for s, k in labels:
        pre, _, post = s.partition("...")
        in_labels.append(list(pre) + (ell[n_ell - k :] if k else []) + list(post))
    if out is None:
        counts: dict[str, int] = {}
        for lab in in_labels:
            for c in lab:
                counts[c] = counts.get(c, 0) + 1
        out_labels = ell + sorted(c for c, n in counts.items() if n == 1 and c in _LETTERS)
    else:
        if out.count("...") > 1:
            raise _error(f"more than one '...' in the output {out!r}")
        pre, dots, post = out.partition("...")
        if not dots and n_ell and any(len(s) - len(s.replace("...", "")) for s in in_specs):
            # numpy: ellipsis axes absent from the output are an error unless they are empty
            if any(k for _, k in labels):
                raise _error("the output needs '...' to keep the broadcast axes")
        out_labels = list(pre) + (ell if dots else []) + list(post)
        for c in pre + post:
            if c not in _LETTERS:
                raise _error(f"invalid label {c!r} in the output")
        if len(set(out_labels)) != len(out_labels):
            raise _error(f"repeated label in the output {out!r}")
        all_in = {c for lab in in_labels for c in lab}
        missing = [c for c in out_labels if c not in all_in]
        if missing:
            raise _error(f"output label {missing[0]!r} appears in no operand")
    return in_labels, out_labels


def _label_sizes(in_labels: list[list[str]], shapes: list[tuple[int, ...]]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for lab, shape in zip(in_labels, shapes):
        for c, d in zip(lab, shape):
            if sizes.get(c, 1) == 1:
                sizes[c] = d
            elif d not in (1, sizes[c]):
                raise BluShapeError(
                    with_user_line(
                        f"einsum: label {c!r} has sizes {sizes[c]} and {d} in shapes "
                        + ", ".join(str(s) for s in shapes)
                    )
                )
    return sizes


def _take_diagonals(x: Any, lab: list[str]) -> tuple[Any, list[str]]:
    """Repeated labels in one operand select its diagonal (``'ii'`` -> ``'i'``)."""
    while True:
        dup = next((c for c in lab if lab.count(c) > 1), None)
        if dup is None:
            return x, lab
        i = lab.index(dup)
        j = lab.index(dup, i + 1)
        x = diagonal(x, 0, i, j)  # the diagonal becomes the last axis
        lab = [c for k, c in enumerate(lab) if k not in (i, j)] + [dup]


def _drop_broadcast_ones(x: Any, lab: list[str], sizes: dict[str, int]) -> tuple[Any, list[str]]:
    """Size-1 axes whose label has another size elsewhere broadcast: drop them here."""
    shape = get_aval(x).shape
    keep = [k for k, c in enumerate(lab) if not (shape[k] == 1 and sizes[c] != 1)]
    if len(keep) == len(lab):
        return x, lab
    return lax.reshape(x, tuple(shape[k] for k in keep)), [lab[k] for k in keep]


def _sum_out(x: Any, lab: list[str], needed: set[str]) -> tuple[Any, list[str]]:
    axes = tuple(k for k, c in enumerate(lab) if c not in needed)
    if not axes:
        return x, lab
    return lax.reduce_sum(x, axes), [c for k, c in enumerate(lab) if k not in axes]


def _contract(
    a: Any, la: list[str], b: Any, lb: list[str], needed_later: set[str], precision: Any, pet: Any
) -> tuple[Any, list[str]]:
    shared = [c for c in la if c in lb]
    batch = [c for c in shared if c in needed_later]
    contract = [c for c in shared if c not in needed_later]
    dn = (
        (tuple(la.index(c) for c in contract), tuple(lb.index(c) for c in contract)),
        (tuple(la.index(c) for c in batch), tuple(lb.index(c) for c in batch)),
    )
    out = lax.dot_general(a, b, dn, precision, pet)
    free_a = [c for c in la if c not in shared]
    free_b = [c for c in lb if c not in shared]
    return out, batch + free_a + free_b


def einsum(
    subscripts: Any,
    *operands: Any,
    out: None = None,
    optimize: Any = "auto",
    precision: Any = None,
    preferred_element_type: Any = None,
) -> Any:
    """Einstein summation (see the module docstring for what is supported).

    Args:
        subscripts: e.g. ``'bij,bjk->bik'`` (or an array, for the interleaved form).
        *operands: the arrays (dtypes promote to a common dtype).
        optimize: the contraction order for three or more operands, found by ``opt_einsum``
            (Smith & Gray, "opt_einsum", JOSS 2018): ``"auto"`` / ``True`` (JAX's default),
            ``"greedy"``, ``"optimal"``, ``"dp"``..., or an explicit path (a list of operand
            index tuples, as ``numpy.einsum_path`` gives); ``False`` contracts left to right.
        precision, preferred_element_type: passed to each ``dot_general``.

    Raises:
        BluValueError: a malformed spec. BluShapeError: a label with two different sizes.
    """
    if not isinstance(subscripts, str):
        subscripts, ops = _interleaved((subscripts,) + operands)
    else:
        ops = list(operands)
    if not ops:
        raise _error("needs at least one operand")
    ops = promote_dtypes(*asarray_operands(*ops))
    shapes = [get_aval(o).shape for o in ops]
    in_labels, out_labels = _parse(subscripts, shapes)
    sizes = _label_sizes(in_labels, shapes)

    prepared = []
    for x, lab in zip(ops, in_labels):
        x, lab = _take_diagonals(x, list(lab))
        x, lab = _drop_broadcast_ones(x, lab, sizes)
        prepared.append((x, lab))

    def needed_after(i: int) -> set[str]:
        s = set(out_labels)
        for _, lab in prepared[i + 1 :]:
            s.update(lab)
        return s

    if preferred_element_type is not None and len(prepared) == 1:
        # one operand: its sums accumulate in preferred_element_type (they were summed in the
        # operand's dtype and converted after: a bfloat16 sum rounded to 8 bits)
        x, lab = prepared[0]
        prepared[0] = (lax.convert_element_type(x, preferred_element_type), lab)
    path = _path(prepared, out_labels, sizes, optimize)
    if path is None:  # left to right
        acc, acc_lab = prepared[0]
        if len(prepared) > 1:
            acc, acc_lab = _sum_out(acc, acc_lab, needed_after(0) | set(prepared[1][1]))
        for i in range(1, len(prepared)):
            x, lab = prepared[i]
            later = needed_after(i)
            x, lab = _sum_out(x, lab, later | set(acc_lab))
            acc, acc_lab = _sum_out(acc, acc_lab, later | set(lab))
            acc, acc_lab = _contract(acc, acc_lab, x, lab, later, precision, preferred_element_type)
    else:
        acc, acc_lab = _follow_path(prepared, path, out_labels, precision, preferred_element_type)
    acc, acc_lab = _sum_out(acc, acc_lab, set(out_labels))
    # labels of the output that no operand kept (all their axes broadcast from size 1)
    for c in out_labels:
        if c not in acc_lab:
            acc = lax.reshape(acc, get_aval(acc).shape + (1,))
            acc_lab = acc_lab + [c]
    acc = lax.transpose(acc, tuple(acc_lab.index(c) for c in out_labels))
    if preferred_element_type is not None and len(prepared) == 1:
        acc = lax.convert_element_type(acc, preferred_element_type)
    return acc


def einsum_path(subscripts: Any, /, *operands: Any, optimize: Any = "auto") -> tuple[list, Any]:
    """The contraction order ``einsum`` would follow, without contracting (JAX's
    ``einsum_path``: ``opt_einsum.contract_path``, Smith & Gray, JOSS 2018).

    Only the operands' shapes are read, so they may be traced.

    Args:
        subscripts: e.g. ``'ij,jk,kl->il'`` (or the first operand of the interleaved form).
        *operands: the arrays.
        optimize: ``"auto"`` (JAX's default), ``True`` (``"optimal"``, as JAX), ``False``
            (left to right: ``[(0, 1)] * (len(operands) - 1)``), any strategy name of
            ``opt_einsum`` (``"greedy"``, ``"optimal"``, ``"dp"``...) or an explicit path.

    Returns:
        ``(path, info)``: the list of operand-index tuples (as ``einsum(..., optimize=path)``
        and ``numpy.einsum_path`` take them) and ``opt_einsum``'s ``PathInfo``, whose ``str``
        is the table of contractions, scalings and FLOP counts.

    Raises:
        BluValueError: a malformed spec, sizes that disagree, or an unknown strategy.
    """
    import opt_einsum  # noqa: PLC0415 - imported on first use, as einsum's paths

    if optimize is True:
        optimize = "optimal"
    elif optimize is False:
        optimize = _left_to_right(opt_einsum)
    elif isinstance(optimize, (list, tuple)) and optimize and optimize[0] == "einsum_path":
        optimize = list(optimize[1:])
    try:
        return opt_einsum.contract_path(subscripts, *operands, optimize=optimize)
    except (KeyError, ValueError, TypeError) as e:
        raise BluValueError(with_user_line(f"einsum_path: {e}")) from None


def _left_to_right(opt_einsum: Any) -> Any:
    """An opt_einsum path optimizer contracting the operands in order (JAX's ``Unoptimized``)."""

    class LeftToRight(opt_einsum.paths.PathOptimizer):
        def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> list[tuple[int, int]]:
            return [(0, 1)] * (len(inputs) - 1)

    return LeftToRight()


def _path(prepared: list, out_labels: list[str], sizes: dict, optimize: Any) -> list | None:
    """The pairwise contraction order opt_einsum chooses for the prepared operands (None: left
    to right, for ``optimize=False`` or fewer than three operands)."""
    if optimize is False or optimize is None or len(prepared) < 3:
        return None
    if isinstance(optimize, (list, tuple)) and optimize and optimize[0] == "einsum_path":
        optimize = list(optimize[1:])
    if isinstance(optimize, (list, tuple)):
        return [tuple(step) for step in optimize]
    import opt_einsum

    symbols: dict[str, str] = {}

    def sym(c: str) -> str:
        return symbols.setdefault(c, opt_einsum.get_symbol(len(symbols)))

    ins = ",".join("".join(sym(c) for c in lab) for _, lab in prepared)
    spec = ins + "->" + "".join(sym(c) for c in out_labels if c in symbols)
    shapes = [tuple(get_aval(x).shape) for x, _ in prepared]
    strategy = "auto" if optimize is True else optimize
    try:
        path, _ = opt_einsum.contract_path(spec, *shapes, shapes=True, optimize=strategy)
    except (KeyError, ValueError, TypeError) as e:
        raise _error(f"optimize={optimize!r}: opt_einsum found no path ({e})") from None
    return [tuple(step) for step in path]


def _follow_path(prepared: list, path: list, out_labels: list[str], precision: Any,
                 preferred_element_type: Any) -> tuple[Any, list[str]]:  # fmt: skip
    """Contract the operands in ``path``'s order (each step's operands removed from the list
    and their result appended, as ``numpy.einsum_path`` numbers them)."""
    ops = list(prepared)
    for step in path:
        if any(i >= len(ops) for i in step):
            raise _error(f"optimize path step {step} names an operand past the {len(ops)} left")
        picked = [ops[i] for i in step]
        for i in sorted(step, reverse=True):
            ops.pop(i)
        rest = set(out_labels)
        for _, lab in ops:
            rest.update(lab)
        acc, acc_lab = picked[0]
        for j in range(1, len(picked)):
            x, lab = picked[j]
            later = set(rest)
            for _, lab2 in picked[j + 1 :]:
                later.update(lab2)
            x, lab = _sum_out(x, lab, later | set(acc_lab))
            acc, acc_lab = _sum_out(acc, acc_lab, later | set(lab))
            acc, acc_lab = _contract(acc, acc_lab, x, lab, later, precision, preferred_element_type)
        if len(picked) == 1:
            acc, acc_lab = _sum_out(acc, acc_lab, rest)
        ops.append((acc, acc_lab))
    if len(ops) != 1:
        raise _error(f"optimize path leaves {len(ops)} operands, not one")
    return ops[0]
