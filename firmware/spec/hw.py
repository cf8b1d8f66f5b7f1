"""The accelerator's latencies and sizes the runtime needs, as plain Python.

The performance model (:mod:`firmware.runtime.perfmodel`) plans a GEMM's schedule from these
numbers; the hardware (:mod:`rtl`) declares the same numbers on its components.
``tests/test_layering.py`` holds each constant and function here equal to what the RTL
declares, for several configurations, so the runtime never has to import Amaranth to learn
them.
"""

from __future__ import annotations

__all__ = ["CHECK_LATENCY", "WALK_START_DELAY", "CUT_WAIT", "BUFFER_READ_LATENCY",
           "ACCUMULATE_STAGES", "RESCALER_LATENCY", "OUT_FIFO_LATENCY", "OUT_FIFO_TILES",
           "WORD_FIFO", "DMA_OUTSTANDING", "DMA_BURST", "WRITE_FORM_LATENCY",
           "SLR_STAGES", "KB_ADD_LATENCY", "KB_READ_AHEAD", "QUANTIZER_DRAIN_LATENCY",
           "array_latency", "min_emit_interval", "emit_interval", "fill_latency",
           "accumulate_interval", "kblock_interval", "quantizer_fill_latency",
           "wg_offsets_inner"]

#: Cycles from a descriptor with good dimensions to the checker's verdict
#: (:attr:`rtl.checker.DescriptorChecker.LATENCY`).
CHECK_LATENCY = 16
#: Cycles from the verdict, registered, to the walker's start (:class:`rtl.engine.GemmEngine`):
#: a descriptor's first load job is asked for ``CHECK_LATENCY + 1 + WALK_START_DELAY`` cycles
#: after ``start``.
WALK_START_DELAY = 2
#: Cycles the walker waits at a K chunk's cut before its next command, with a
#: ``DESC_FLAGS.CHUNK`` other than 0 (:attr:`rtl.walker.Walker.CUT_WAIT`).
CUT_WAIT = 3
#: Cycles from a read enable to the vector of an operand buffer
#: (:attr:`rtl.buffer.TransposableBuffer.READ_LATENCY`).
BUFFER_READ_LATENCY = 3
#: Registers from the array's output to the rescaler's input, where a row's partial sums are
#: read, added and written back (:attr:`rtl.datapath.GemmDatapath.ACCUMULATE_STAGES`).
ACCUMULATE_STAGES = 2
#: Cycles from an accepted input to a valid output of the rescaler
#: (:attr:`rtl.rescale.Rescaler.LATENCY`).
RESCALER_LATENCY = 7
#: The datapath's K-block mode (``Accelerator(k_blocks=True)``): cycles of its float32 add
#: (:attr:`rtl.fp32.Fp32Add.LATENCY`), and how far ahead of the rescaler's output it reads a
#: slot's row (:attr:`rtl.datapath.GemmDatapath.KB_READ_AHEAD`).
KB_ADD_LATENCY = 9
KB_READ_AHEAD = 2
#: The BFP8 quantiser's cycles from a unit's exponents to its mantissas leaving
#: (:attr:`rtl.epilogue.TileQuantizer.DRAIN_LATENCY`).
QUANTIZER_DRAIN_LATENCY = 8
#: Cycles from writing the datapath's output FIFO to the entry being readable
#: (:attr:`rtl.datapath.GemmDatapath.OUT_FIFO_LATENCY`).
OUT_FIFO_LATENCY = 2
#: C tiles the datapath's output FIFO holds: its default depth is ``OUT_FIFO_TILES * rows``
#: rows (``GemmDatapath(out_rows=None)``), and a tile reserves ``rows`` of them as it starts.
OUT_FIFO_TILES = 4
#: With one read port, bus words queued per operand between the read router and its gearbox
#: (:attr:`rtl.engine.GemmEngine.WORD_FIFO`).
WORD_FIFO = 64
#: Bursts in flight each DMA master allows by default (``Accelerator(outstanding=...)``).
DMA_OUTSTANDING = 8
#: The DMA masters' longest burst in bus words by default (``Accelerator(burst_beats=...)``).
DMA_BURST = 16
#: Cycles from a burst's last word reaching the DMA writer to its address and first word on
#: the bus (:class:`rtl.dma.DmaWriter`: a burst is formed once all its words are in its FIFO).
WRITE_FORM_LATENCY = 3
#: Registers per crossing of a super logic region in the array
#: (:attr:`rtl.systolic.SystolicArray.SLR_STAGES`).
SLR_STAGES = 2


def _check(rows: int, cols: int, packing: int, slr_groups: int) -> None:
    for name, v in (("rows", rows), ("cols", cols)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive integer, not {v!r}")
    if packing not in (1, 2):
        raise ValueError(f"packing must be 1 or 2, not {packing!r}")
    if not isinstance(slr_groups, int) or isinstance(slr_groups, bool) \
            or not 1 <= slr_groups <= cols:
        raise ValueError(f"slr_groups must be an integer in 1..cols ({cols}), "
                         f"not {slr_groups!r}")


def array_latency(rows: int, cols: int, packing: int = 1, slr_groups: int = 1) -> int:
    """Cycles from the systolic array accepting a tile's last step to the tile's row 0 on its
    output (:attr:`rtl.systolic.SystolicArray.latency`).

    Parameters
    ----------
    rows, cols : int
        The array's shape.
    packing : {1, 2}
        MACs per DSP slice.
    slr_groups : int
        Column groups of a stacked-silicon device (1 to ``cols``).

    Returns
    -------
    int
        ``cols + 5``; packed, ``cols + 9``; ``2 * SLR_STAGES`` more per SLR crossing (row
        ``q`` of column ``j`` is read as soon as it has captured, and the columns wait for
        the last one).

    Raises
    ------
    ValueError
        An argument out of range.
    """
    _check(rows, cols, packing, slr_groups)
    base = cols + 5 if packing == 1 else cols + 9
    return base + 2 * SLR_STAGES * (slr_groups - 1)


def min_emit_interval(rows: int, cols: int, packing: int = 1, slr_groups: int = 1) -> int:
    """The least cycles between two tiles' last steps in the systolic array
    (:attr:`rtl.systolic.SystolicArray.min_emit_interval`).

    Parameters
    ----------
    rows, cols, packing, slr_groups :
        As :func:`array_latency` takes them.

    Returns
    -------
    int
        ``rows`` (the read-out of the tile before, a row a cycle); packed, ``max(rows,
        ceil(rows / 2) + 1)``; the same with SLR groups.
    """
    return emit_interval(rows, cols, rows, packing, slr_groups)


def emit_interval(rows: int, cols: int, read_rows: int, packing: int = 1,
                  slr_groups: int = 1) -> int:
    """The least cycles from the last step of a tile that reads out ``read_rows`` of its
    rows to the next tile's (:meth:`rtl.systolic.SystolicArray.emit_interval`, built with
    ``partial``).

    Parameters
    ----------
    rows, cols, packing, slr_groups :
        As :func:`array_latency` takes them.
    read_rows : int
        1 to ``rows``.

    Returns
    -------
    int
        ``read_rows``; packed, ``max(read_rows, ceil(read_rows / 2) + 1)``.
    """
    _check(rows, cols, packing, slr_groups)
    if not isinstance(read_rows, int) or isinstance(read_rows, bool) \
            or not 1 <= read_rows <= rows:
        raise ValueError(f"read_rows must be an integer in 1..{rows}, not {read_rows!r}")
    return read_rows if packing == 1 else max(read_rows, -(-read_rows // 2) + 1)


def kblock_interval(rows: int, cols: int, read_rows: int | None = None, packing: int = 1,
                    slr_groups: int = 1) -> int:
    """The least cycles from a K-block tile's last step to the next K-block tile's
    (:meth:`rtl.datapath.GemmDatapath.kb_interval_after`): the array's
    :func:`emit_interval` for the ``read_rows`` read out (``None``: all), at least
    ``ACCUMULATE_STAGES + 1`` and the float32 add's read-modify-write of a slot's row,
    ``KB_ADD_LATENCY + KB_READ_AHEAD + 1``.
    """
    read = rows if read_rows is None else read_rows
    return max(emit_interval(rows, cols, read, packing, slr_groups), ACCUMULATE_STAGES + 1,
               KB_ADD_LATENCY + KB_READ_AHEAD + 1)


def accumulate_interval(rows: int, cols: int, packing: int = 1, slr_groups: int = 1) -> int:
    """The least cycles between two tiles read out of the datapath: the array's
    :func:`min_emit_interval`, and at least an accumulation slot's read, add and write
    (``ACCUMULATE_STAGES + 1``), as :class:`rtl.datapath.GemmDatapath` spaces them.

    Parameters
    ----------
    rows, cols, packing, slr_groups :
        As :func:`array_latency` takes them.

    Returns
    -------
    int
    """
    return max(min_emit_interval(rows, cols, packing, slr_groups), ACCUMULATE_STAGES + 1)


def fill_latency(rows: int, cols: int, packing: int = 1, slr_groups: int = 1) -> int:
    """Cycles from issuing a tile's last step to its first C row leaving the datapath
    (:attr:`rtl.datapath.GemmDatapath.fill_latency`).

    Parameters
    ----------
    rows, cols, packing, slr_groups :
        As :func:`array_latency` takes them.

    Returns
    -------
    int
        The operand buffers' read, the array, the accumulation stages, the rescaler and the
        output FIFO.
    """
    return (BUFFER_READ_LATENCY + array_latency(rows, cols, packing, slr_groups)
            + ACCUMULATE_STAGES + RESCALER_LATENCY + OUT_FIFO_LATENCY)


def quantizer_fill_latency(cols: int, tile_block: int = 32) -> int:
    """The BFP8 quantiser's cycles from a unit's last beat to its exponents
    (:attr:`rtl.epilogue.TileQuantizer.fill_latency`): a maximum tree over ``min(cols,
    tile_block)`` lanes, and 4.

    Parameters
    ----------
    cols : int
        Lanes of a beat (the array's columns).
    tile_block : int
        The number format's tile block side.

    Returns
    -------
    int
    """
    return (min(cols, tile_block) - 1).bit_length() + 4


def wg_offsets_inner(cout: int, cin: int, offsets: int, *, rows: int, cols: int,
                     block: int, side: int | None = None) -> bool:
    """Whether :class:`rtl.walker.Walker` walks a weight gradient's kernel offsets inside
    each K chunk (A loaded once a chunk for all of them): its GEMM of ``cout`` x ``cin`` is
    one block of the descriptor's ``side`` (None or out of range: ``block``) and every
    offset's tiles have an accumulation slot of the ``block ** 2``.

    Parameters
    ----------
    cout, cin, offsets : int
        The weight gradient's output and input channels and kernel offsets.
    rows, cols, block : int
        The accelerator's array and reuse block.
    side : int, optional
        The descriptor's block side (``DESC_FLAGS.BLOCK``).

    Returns
    -------
    bool
    """
    side = block if side is None or not 1 <= side <= block else side
    tm, tn = -(-cout // rows), -(-cin // cols)
    return tm <= side and tn <= side and tm * tn * offsets <= block * block
