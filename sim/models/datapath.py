"""Block-level numpy models of the datapath components, built on :mod:`sim.models.golden`.

Each model states, bit for bit, what the matching component in :mod:`rtl` produces:

* :func:`systolic_array` -- :class:`rtl.systolic.SystolicArray`: C tiles from reduction steps.
* :func:`operand_beats` / :func:`buffer_read` -- :class:`rtl.buffer.TransposableBuffer`: how a
  stored tile is streamed in, and what the array reads from it.
* :class:`TileCommand` / :func:`datapath` -- :class:`rtl.datapath.GemmDatapath`.
* :class:`GearboxJob` / :func:`gearbox` -- :class:`rtl.gearbox.Gearbox`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sim.models import fp32, golden

__all__ = ["systolic_array", "operand_beats", "buffer_read", "TileCommand", "datapath",
           "GearboxJob", "gearbox"]


def systolic_array(steps, rows: int, cols: int) -> list[np.ndarray]:
    """Tiles produced by the systolic array for a sequence of reduction steps.

    ``steps`` is an iterable of ``(a_col, b_row, first, last)`` (int8 vectors of length
    ``rows`` and ``cols``). ``first`` clears the accumulators before adding the step's outer
    product; ``last`` emits the sums (int32, rows x cols) after adding it.
    """
    acc = np.zeros((rows, cols), dtype=np.int64)
    tiles = []
    for a_col, b_row, first, last in steps:
        if first:
            acc[:] = 0
        acc += np.outer(np.asarray(a_col, np.int64), np.asarray(b_row, np.int64))
        if last:
            # The hardware accumulator is 32 bits and wraps; within MAX_K steps it never does.
            tiles.append(acc.astype(np.int64).astype(np.uint32).view(np.int32).copy())
    return tiles


def operand_beats(stored: np.ndarray, lanes: int, k_major: bool) -> list[np.ndarray]:
    """The beats that write one stored operand tile into a transposable buffer.

    The tile is sent row-major, ``lanes`` int8 values per beat.

    ``k_major``: the stored tile is ``k x lanes`` (e.g. A when ``transpose_a``; B when not
    ``transpose_b``): one beat per stored row. A stored block ``k x (S * lanes)`` is ``S``
    neighbouring tiles loaded together (a span): ``S`` beats per stored row, tile after tile.

    Otherwise the stored tile is ``lanes x k`` (A when not ``transpose_a``; B when
    ``transpose_b``): each stored row is split into ``ceil(k / lanes)`` beats, the last one
    padded with zeros.
    """
    stored = np.asarray(stored, dtype=np.int8)
    if k_major:
        if stored.ndim != 2 or stored.shape[1] % lanes or not stored.shape[1]:
            raise ValueError(f"stored must be k x (a multiple of {lanes}), not {stored.shape}")
        return [row[i:i + lanes].copy() for row in stored
                for i in range(0, stored.shape[1], lanes)]
    if stored.ndim != 2 or stored.shape[0] != lanes:
        raise ValueError(f"stored must be {lanes} x k, not {stored.shape}")
    k = stored.shape[1]
    chunks = -(-k // lanes)
    padded = np.zeros((lanes, chunks * lanes), dtype=np.int8)
    padded[:, :k] = stored
    return [padded[r, c * lanes:(c + 1) * lanes].copy()
            for r in range(lanes) for c in range(chunks)]


def buffer_read(stored: np.ndarray, k_major: bool) -> np.ndarray:
    """What the array reads from a buffer holding ``stored``: row ``k`` is step ``k``'s vector."""
    return np.asarray(stored, dtype=np.int8) if k_major else np.asarray(stored, np.int8).T


@dataclass
class TileCommand:
    """One tile GEMM for :class:`rtl.datapath.GemmDatapath`.

    ``a`` is the stored A tile (``rows x k``, or ``k x rows`` with ``transpose_a``); ``b`` the
    stored B tile (``k x cols``, or ``cols x k`` with ``transpose_b``). ``clear`` starts a new
    accumulation; ``emit`` sends the C tile out, rescaled by ``row_exp``/``col_exp`` (int8
    vectors) unless ``raw``. ``kblock`` (a datapath built with ``k_blocks``): the tile is
    rescaled and added in float32 to the accumulation slot (``add``) or to +0.0, then stored
    and/or emitted as float32; one that stores and does not emit may read out only its
    first ``read_rows`` rows (0: all), leaving the slot's other rows as they are.
    """

    a: np.ndarray
    b: np.ndarray
    transpose_a: bool = False
    transpose_b: bool = False
    clear: bool = True
    emit: bool = True
    raw: bool = False
    row_exp: np.ndarray = field(default=None)
    col_exp: np.ndarray = field(default=None)
    #: Buffer slots; ``None`` alternates 0, 1, 0, ... with the command's index.
    a_slot: int | None = None
    b_slot: int | None = None
    #: Whether the operand is sent; if not, the slot's tile is reused (``a``/``b`` are then
    #: ignored by the hardware, and the model reads the slot).
    load_a: bool = True
    load_b: bool = True
    #: Tiles loaded by this command into slots ``a_slot ..`` / ``b_slot ..`` (k-major forms
    #: only): ``a`` is then ``k x (a_span * rows)``, ``b`` is ``k x (b_span * cols)``.
    a_span: int = 1
    b_span: int = 1
    #: Accumulation buffer: keep the C tile in ``acc_slot`` / add that slot's sums first.
    store: bool = False
    add: bool = False
    acc_slot: int = 0
    #: One K block: rescale the tile, add it in float32 to ``acc_slot`` (``add``) or +0.0.
    kblock: bool = False
    #: A stored, not emitted, K-block tile: the rows read out (0: all).
    read_rows: int = 0

    @property
    def k(self) -> int:
        if self.a is not None:
            return self.a.shape[0] if self.transpose_a else self.a.shape[1]
        return self.b.shape[1] if self.transpose_b else self.b.shape[0]

    def slots(self, index: int) -> tuple[int, int]:
        return (index % 2 if self.a_slot is None else self.a_slot,
                index % 2 if self.b_slot is None else self.b_slot)

    def fields(self, index: int, rows: int, cols: int) -> dict:
        """The command's payload for :func:`rtl.datapath.command_layout`."""
        a_slot, b_slot = self.slots(index)
        re = np.zeros(rows, np.int8) if self.row_exp is None else self.row_exp
        ce = np.zeros(cols, np.int8) if self.col_exp is None else self.col_exp
        return {"k": self.k, "a_slot": a_slot, "b_slot": b_slot,
                "load_a": self.load_a, "load_b": self.load_b,
                "a_extra": self.a_span - 1, "b_extra": self.b_span - 1,
                "transpose_a": self.transpose_a, "transpose_b": self.transpose_b,
                "clear": self.clear, "emit": self.emit, "raw": self.raw,
                "store": self.store, "add": self.add, "acc_slot": self.acc_slot,
                "row_exp": [int(x) for x in re], "col_exp": [int(x) for x in ce],
                **({"kblock": 1, "read_rows": self.read_rows} if self.kblock else {})}


def _wrap32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.int64).astype(np.uint32).view(np.int32)


def datapath(commands, rows: int, cols: int) -> list[np.ndarray]:
    """The C tiles (as uint32 words: float32 bits, or int32 when ``raw``) for each emit.

    Tracks the buffer slots: a loaded tile is stored as the array reads it (step-major), and a
    command that reuses a slot reads its first ``k`` steps. A ``kblock`` command's tile (the
    array's sums since its ``clear``) is rescaled (:func:`sim.models.golden.rescale`) and
    added to the slot's float32 with ``add``, else to +0.0
    (:func:`sim.models.fp32.fp32_add`); the sum is what it stores and emits. One that
    stores and does not emit with ``read_rows`` stores that many of the sum's first rows;
    the slot's other rows keep what they held (+0.0 in a slot never stored).
    """
    acc = np.zeros((rows, cols), dtype=np.int32)
    slot_a, slot_b, partial = {}, {}, {}
    out = []
    for index, cmd in enumerate(commands):
        a_slot, b_slot = cmd.slots(index)
        if cmd.load_a:
            for i in range(cmd.a_span):
                part = cmd.a if cmd.a_span == 1 else cmd.a[:, i * rows:(i + 1) * rows]
                slot_a[a_slot + i] = buffer_read(part, cmd.transpose_a)
        if cmd.load_b:
            for i in range(cmd.b_span):
                part = cmd.b if cmd.b_span == 1 else cmd.b[:, i * cols:(i + 1) * cols]
                slot_b[b_slot + i] = buffer_read(part, not cmd.transpose_b)
        op_a = np.ascontiguousarray(slot_a[a_slot][:cmd.k].T)   # rows x k
        op_b = np.ascontiguousarray(slot_b[b_slot][:cmd.k])     # k x cols
        part = golden.gemm(op_a, op_b)
        acc = part if cmd.clear else _wrap32(acc.astype(np.int64) + part)
        if cmd.kblock:
            re = np.zeros(rows, np.int8) if cmd.row_exp is None else cmd.row_exp
            ce = np.zeros(cols, np.int8) if cmd.col_exp is None else cmd.col_exp
            term = golden.float32_bits(golden.rescale(acc, re, ce))
            prev = partial[cmd.acc_slot] if cmd.add else np.zeros((rows, cols), np.uint32)
            total = fp32.fp32_add(prev.view(np.uint32), term).astype(np.uint32)
            if cmd.store and cmd.read_rows and not cmd.emit:
                kept = partial.get(cmd.acc_slot, np.zeros((rows, cols), np.uint32)).copy()
                kept[:cmd.read_rows] = total[:cmd.read_rows]
                partial[cmd.acc_slot] = kept
            elif cmd.store:
                partial[cmd.acc_slot] = total.copy()
            if cmd.emit:
                out.append(total.copy())
            continue
        total = acc
        if (cmd.emit or cmd.store) and cmd.add:
            total = _wrap32(acc.astype(np.int64) + partial[cmd.acc_slot])
        if cmd.store:
            partial[cmd.acc_slot] = total.copy()
        if cmd.emit:
            if cmd.raw:
                out.append(total.view(np.uint32).copy())
            else:
                re = np.zeros(rows, np.int8) if cmd.row_exp is None else cmd.row_exp
                ce = np.zeros(cols, np.int8) if cmd.col_exp is None else cmd.col_exp
                out.append(golden.float32_bits(golden.rescale(total, re, ce)).copy())
    return out


@dataclass
class GearboxJob:
    """``nrows`` runs of ``nwords`` bus words, each cut into ``nbeats`` vectors, then
    ``nzero`` rows of zero vectors (see :func:`gearbox`). ``pack``: the rows are packed
    closer than a bus word, ``pstride`` bytes apart from byte ``off`` of ``in_words`` words
    (``nwords`` is then 1)."""

    nwords: int
    nbeats: int
    valid: int
    sel: int = 0
    tag: int = 0
    nrows: int = 1
    nzero: int = 0
    pack: int = 0
    off: int = 0
    pstride: int = 0
    in_words: int = 0


def gearbox(words, jobs, data_width: int, lanes: int) -> list[tuple[np.ndarray, int]]:
    """The vectors :class:`rtl.gearbox.Gearbox` makes: ``(int8 vector, tag)`` per beat.

    ``words`` are the bus words (integers, byte 0 in the low bits) in order; each job takes the
    next ``nwords`` of them. The job's byte run starts ``sel * lanes`` bytes into its first
    word; vector ``b`` holds run bytes ``b * lanes ...``, each kept only below ``valid``.
    A job repeats that for ``nrows`` rows, then adds ``nzero * nbeats`` zero vectors.

    A packed job (``pack``) takes ``in_words`` words, and its row ``r`` is the bus word's
    worth of their bytes from byte ``off + r * pstride`` on (zeros past the last word): rows
    closer together than a bus word, read as one run, each handed on as if it began a word.
    """
    bpw = data_width // 8
    words = list(words)
    out = []
    for job in jobs:
        if job.pack:
            taken, words = words[:job.in_words], words[job.in_words:]
            packed = b"".join(int(w).to_bytes(bpw, "little") for w in taken) + bytes(bpw)
            rows = [packed[job.off + r * job.pstride:][:bpw] for r in range(job.nrows)]
        else:
            rows = []
            for _ in range(job.nrows):
                chunk, words = words[:job.nwords], words[job.nwords:]
                rows.append(b"".join(int(w).to_bytes(bpw, "little") for w in chunk))
        for run in rows:
            run = run[job.sel * lanes:] if lanes <= bpw else run
            run = np.frombuffer(run.ljust(job.nbeats * lanes, b"\0"), np.int8)
            run = run[:job.nbeats * lanes].copy()
            run[job.valid:] = 0
            out += [(run[b * lanes:(b + 1) * lanes].copy(), job.tag) for b in range(job.nbeats)]
        out += [(np.zeros(lanes, np.int8), job.tag) for _ in range(job.nzero * job.nbeats)]
    return out
