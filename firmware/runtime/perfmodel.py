"""Analytic performance model of a GEMM on the accelerator: cycles from shapes, configuration
and memory port; the schedule :class:`firmware.Device` plans with it.

The engine's schedule is walked at the granularity at which it overlaps work: one K chunk of
one block of ``block x block`` C tiles, blocks and chunks in the walker's order
(:func:`sim.models.engine.walk_chunks`), and within a chunk tile by tile
(:func:`sim.models.engine.tile_order`):

* **operand reads**: each load job's runs of bus words, cut into bursts of at most the port's
  ``max_burst`` and the DMA's own (``dma_burst``, the ``burst_beats`` it was built with), at
  ``min(1, outstanding * beats / (read_latency + beats))`` words a cycle
  (:func:`read_rate`) plus :data:`LOAD_OVERHEAD`; rows shorter than a bus word are stored
  packed and pass the gearbox a row a cycle. A job's reads may begin a DMA FIFO's worth of
  words (:data:`READ_FIFO`) before its buffer slots are free;
* **compute**: each tile takes ``kc`` array cycles once the tile before it has and its
  operands are in, at least :func:`firmware.spec.hw.accumulate_interval` after it;
* **C write-back** in a block's last chunk, one burst per row over the write ports; the
  array starts a tile only once the tile :data:`firmware.spec.hw.OUT_FIFO_TILES` before it
  is written.

Behind a DRAM of :func:`firmware.spec.ports.dram_bytes_per_cycle` bytes a cycle the bytes are
booked in time buckets (:class:`_DramLedger`): reads first (the Zynq presets, the writes
sure of :data:`WRITE_FLOOR` of a bucket) or round-robin (:data:`FAIR_SHARE` each way). A
port's random back-pressure ``pause`` stretches each burst's beats by ``1 / (1 - pause)``.
The hardware latencies come from :mod:`firmware.spec.hw`; nothing here imports the RTL.

``python -m firmware.runtime.perfmodel --board B`` predicts a board's default configuration
over the training GEMMs of typical layers; ``--check JSON...`` predicts committed
measurements again and prints the errors. ``tests/test_perfmodel.py`` checks the model
against the cycle-accurate model.
"""

from __future__ import annotations

import argparse
import functools
import sys

from firmware.spec import hw, regmap
from firmware.spec.ports import dram_bytes_per_cycle
from firmware.spec.regmap import STRIPE_MIN_WORDS
from sim.models.conv import ConvGeometry
from sim.models.engine import CHUNK_CHOICES, loads_b_first, tile_order, walk_chunks

__all__ = ["predict", "predict_quantize", "predict_queued", "predict_cycles", "best_block",
           "best_plan", "best_chunk", "run_shape", "read_rate",
           "training_gemms", "record_config", "check_records", "main"]

#: Cycles of control per operand load (command phases, the address multiply).
LOAD_OVERHEAD = 4
#: Cycles from ``start`` to the walk's first job: the descriptor checked, the verdict
#: registered, the walk begun (:mod:`firmware.spec.hw`). Behind another descriptor in the
#: queue it is hidden.
START_LATENCY = hw.CHECK_LATENCY + 1 + hw.WALK_START_DELAY
#: Words the DMA reader's FIFO holds (``burst_beats * outstanding``) at the default bursts:
#: how far a load's reads may run ahead of its buffer slots' freeing (:func:`predict` takes
#: it from its ``dma_burst`` and ``dma_outstanding``).
READ_FIFO = hw.DMA_BURST * hw.DMA_OUTSTANDING
#: K-block descriptors (``k_blocks``): a K-block tile's C rows leave ``KB_ADD_LATENCY``
#: cycles later than a tile's, and K-block read-outs are ``KB_ADD_LATENCY + KB_READ_AHEAD +
#: 1`` cycles apart at least (``GemmDatapath.kb_interval``; :mod:`firmware.spec.hw`).
KB_ADD_LATENCY = hw.KB_ADD_LATENCY
KB_READ_AHEAD = hw.KB_READ_AHEAD
#: K-block descriptors: cycles besides the port's read latency from one K chunk's exponents
#: in the issue stage to the chunk after next's (the walker's exponent states and their
#: one-byte loads, the loader, the gearbox and the issue stage's write): a chunk's exponents
#: load into the bank the chunk before last used once its commands have left (two banks,
#: :class:`rtl.issue.CommandIssue`), so a chunk of few tiles waits for them. Measured on
#: weight gradients of one tile a kernel offset (``rtl.walker.Walker``'s offsets inside
#: the chunk): 84 cycles a pair of chunks behind the ideal port (read latency 32), 88 behind
#: ``zynqmp-hp`` (40).
EXP_TRIP = 48
#: K-block descriptors: the banks of exponent registers (:class:`rtl.issue.CommandIssue`),
#: a K chunk's exponents loading into the bank of the chunk this many before.
EXP_BANKS = 2

#: Cycles the walker takes to probe a tile of a block at a kernel offset it may skip (the
#: convolution cursor's latency, ``rtl.convcursor.ConvCursor.LATENCY``).
PROBE_TILE = 4
#: K-block descriptors: the walker's cycles (``rtl.walker.Walker``'s states), by which it
#: issues a chunk's exponents, commands and load jobs one after another, the next chunk's
#: once the bank of the chunk before last is free. A tile's command: CMD's four phases
#: and NEXT. A load job: a cycle in LOAD where a queue takes it (two read ports or more);
#: behind one read port the load sequencer takes a job with its last read command,
#: :data:`WALK_LOADER` cycles on. An exponent byte: EXP_PREP, EXP_PREP2, EXP and LOAD. A
#: convolution (forward, backward-data) moves its cursor before each tile's B load and each
#: column exponent and waits :data:`WALK_CURSOR` of its latency more. A tile's command
#: reaches the array :data:`WALK_ISSUE` cycles after the walker offers it.
WALK_TILE = 5
WALK_LOAD = 1
WALK_LOADER = 4
WALK_EXP = 4
WALK_CURSOR = 2
WALK_EXP_CURSOR = 3
WALK_ISSUE = 2


def read_rate(beats: float, outstanding: int, latency: int, keep: float = 1.0) -> float:
    """Words per cycle on a channel that keeps bursts in flight.

    Parameters
    ----------
    beats : float
        The mean burst length in words.
    outstanding : int
        Bursts in flight at most.
    latency : int
        Cycles from a burst's address to its first beat.
    keep : float
        Words a cycle the channel moves at most (``1 - pause``).

    Returns
    -------
    float
        ``min(keep, outstanding * beats / (latency + beats / keep))``.
    """
    return min(keep, outstanding * beats / (latency + beats / keep))


#: Under a reads-first DRAM, the share of the DRAM's bytes the writes are sure of while the
#: reads would take them all: the read ports leave gaps (pauses, a burst's latency) in which
#: a write beat takes a word. Fitted over the Pynq-Z1 default's GEMMs behind ``zynq7-hp``
#: (0.05 to 0.2 tried; ``python -m firmware.runtime.perfmodel --check`` gives the errors).
WRITE_FLOOR = 0.15


#: Under a round-robin DRAM (``dram_arbitration``), the share of the DRAM's bytes each
#: direction is sure of however much the other asked for first: an R beat and a W beat
#: take turns.
FAIR_SHARE = 0.5


class _DramLedger:
    """The DRAM's bytes, spent in time buckets of :data:`BUCKET` cycles by the transfers the
    schedule asks for (each at most its own rate, the buckets at most the DRAM's): a fluid
    model of channels sharing the DRAM. ``share``: the part of a bucket reads (writes) get
    whatever the other direction booked before them — (1, :data:`WRITE_FLOOR`) for a DRAM
    that serves reads first, (:data:`FAIR_SHARE`, :data:`FAIR_SHARE`) for round-robin;
    what a transfer takes of the other direction's bytes, those move to the next bucket (and
    on, while full).
    """

    BUCKET = 32

    def __init__(self, rate: float | None, share: tuple = (0.0, 0.0)):
        self.rate = rate                  # bytes a cycle, None: unlimited
        self.share = share
        self.used: dict[int, list[float]] = {}    # bucket -> [bytes read, bytes written]

    def move(self, start: float, cycles: float, nbytes: float, way: int = 0) -> float:
        """When a transfer of ``nbytes`` (``way`` 0: read, 1: write) that alone would take
        ``cycles`` from ``start`` ends."""
        if self.rate is None or nbytes <= 0 or cycles <= 0:
            return start + cycles
        own = nbytes / cycles             # the channel's own bytes a cycle
        t, left, B = start, float(nbytes), self.BUCKET
        while True:
            b = int(t // B)
            span = (b + 1) * B - t
            used = self.used.setdefault(b, [0.0, 0.0])
            free = self.rate * B - used[0] - used[1]
            room = max(free, self.rate * B * self.share[way] - used[way])
            room = max(0.0, room)
            speed = min(own, room / span)
            take = min(left, speed * span)
            used[way] += take
            self._spill(b, 1 - way)
            if take >= left:
                return t + left / speed
            left -= speed * span
            t = (b + 1) * B

    def _spill(self, b: int, way: int) -> None:
        """Move ``way``'s bytes beyond bucket ``b``'s capacity to the buckets after it."""
        cap = self.rate * self.BUCKET
        while True:
            used = self.used.setdefault(b, [0.0, 0.0])
            over = min(used[0] + used[1] - cap, used[way])
            if over <= 1e-9:
                return
            used[way] -= over
            b += 1
            self.used.setdefault(b, [0.0, 0.0])[way] += over


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _bursts(words: int, burst: int) -> list[int]:
    full, rest = divmod(words, burst)
    return [burst] * full + ([rest] if rest else [])


def _port_rates(port: dict, bpw: int, dma_burst: int, dma_outstanding: int) -> tuple:
    """A port's limits as the DMA masters meet them: the longest burst, the read and write
    bursts in flight, the words a cycle a channel moves at most (``keep``) and the DRAM's
    bytes a cycle (None: unlimited)."""
    burst = min(dma_burst, port.get("max_burst") or dma_burst)
    o_rd = min(dma_outstanding, port.get("outstanding_reads") or dma_outstanding)
    o_wr = min(dma_outstanding, port.get("outstanding_writes") or dma_outstanding)
    # A data channel held back with probability `pause` a cycle moves at most 1 - pause words.
    keep = 1.0 - (port.get("pause") or 0.0)
    # The DRAM behind the port (reads and writes of every port together): no channel moves
    # more than its rate alone, and the whole GEMM's traffic takes at least its time.
    dram = dram_bytes_per_cycle(port, bpw)
    if dram is not None:
        keep = min(keep, dram / bpw)
    return burst, o_rd, o_wr, keep, dram


def kblock_interval(rows: int, cols: int, packing: int = 1,
                    read_rows: int | None = None) -> int:
    """The least cycles from a K-block read-out of the datapath to the next
    (``GemmDatapath.kb_interval``, or after a tile that read out ``read_rows`` rows
    ``kb_interval_after``): :func:`firmware.spec.hw.kblock_interval`."""
    return hw.kblock_interval(rows, cols, read_rows, packing)


def predict(m: int, n: int, k: int, transpose_a: bool = False, transpose_b: bool = False, *,
            rows: int, cols: int, depth: int, block: int, data_width: int, port: dict,
            read_ports: int = 1, write_ports: int = 1,
            dma_outstanding: int = hw.DMA_OUTSTANDING, dma_burst: int = hw.DMA_BURST,
            copies: int = 1, chunk: int = 0, k_blocks: bool = False,
            k_runs: tuple[int, ...] | None = None, b_per_tile: bool = False,
            b_group: int = 1, offsets: int = 1,
            k_walked: tuple[tuple[bool, ...], ...] | None = None, replays: int = 0,
            c_bytes: int = 4) -> dict:
    """Predicted cycles of one GEMM descriptor, from its start to its last C row in memory.

    Parameters
    ----------
    m, n, k, transpose_a, transpose_b :
        The GEMM, as :meth:`firmware.Device.gemm` takes it.
    rows, cols, depth, block, data_width :
        The accelerator's configuration.
    port : dict
        ``outstanding_reads``, ``outstanding_writes`` (``None``: unlimited),
        ``read_latency``, ``write_latency``, ``max_burst``, ``pause`` (0 if absent) and the
        DRAM (``dram_gbps`` with ``clock_mhz`` and ``data_width``; absent: unlimited) — as
        :func:`firmware.spec.ports.resolve_port` returns.
    read_ports : {1, 2, 3, 4, 5}
        AXI read ports (``Accelerator(read_ports=...)``): 2 reads A and B in parallel, 3, 4
        and 5 stripe B's rows over two, three and four.
    write_ports : {1, 2, 3, 4, 5, 6}
        AXI write ports C rows are dealt to in turn (``Accelerator(write_ports=...)``), each
        with the port's limits of its own; where they do not divide ``rows`` the deal runs
        on across tiles (:func:`rtl.writeback.tile_phase`), so each port takes every
        ``write_ports``-th row and C leaves at all the ports' pace (the last tile, below,
        at that of the ports that take ``ceil(rows / write_ports)`` of its rows).
    chunk : {0, 1, 2, 3}
        ``DESC_FLAGS.CHUNK``: the longest K chunk and whether the first block ramps
        (:func:`sim.models.engine.array_block_chunks`).
    dma_outstanding, dma_burst : int
        The DMA masters' bursts in flight and longest burst in bus words
        (``Accelerator(outstanding=..., burst_beats=...)``): the bursts are at most
        ``dma_burst`` and the port's ``max_burst`` long, and the reader's FIFO holds
        ``dma_burst * dma_outstanding`` words.
    k_blocks : bool
        A descriptor with tile exponents (``DESC_EPILOGUE.A_TILES`` and ``B_TILES``) on an
        ``Accelerator(k_blocks=True)``: K chunks of one tile block each
        (:func:`sim.models.engine.array_block_chunks`), every tile of a chunk read out
        (emitted or stored) at least ``GemmDatapath.kb_interval`` after the one before, its
        C rows ``KB_ADD_LATENCY`` cycles later; a tile's middle K blocks (neither its first
        nor its last) read out only A's rows inside M, and the next tile follows
        :func:`kblock_interval` of those rows after it. The per-chunk exponent loads (a byte a tile)
        are not modelled: they run while the datapath's queued commands compute.
    k_runs : tuple of int, optional
        With ``k_blocks``, the K chunks of every tile in order, in place of tile blocks of
        K (:func:`sim.models.engine.array_block_chunks`): a convolution's runs, one per kernel
        offset and block of at most ``TILE_BLOCK`` channels, each its own read-out
        (:meth:`sim.models.conv.ConvGeometry.k_runs`). Their sum is ``k``.
    b_per_tile : bool
        B (k-major) read a job per group of ``b_group`` tiles, as a convolution's forward
        and backward-data B is: each group's ``b_group * cols`` bytes a step from the
        column the walker's cursor gives (a multiple of ``cols``: aligned to a bus word),
        one burst a row, striped over the B ports like any job
        (:data:`firmware.spec.regmap.STRIPE_MIN_WORDS`). Without it a k-major B is one job
        for the block, a run of its tiles' bytes a step.
    b_group : int
        With ``b_per_tile``, the tiles of a job (:func:`sim.models.conv.b_group`: the
        tiles of one position's images that the block holds together).
    k_walked : tuple of tuple of bool, optional
        With ``k_runs``, per block of ``block`` tiles of columns, the kernel offsets the
        walker walks, each an equal share of the runs (:func:`sim.models.conv.
        walked_offsets`: a forward or backward-data convolution skips the offsets between
        its first and last that no tile of the block reads B at). Each skipped offset
        delays the next chunk's exponents by the probe, :data:`PROBE_TILE` a tile of the
        block.
    replays : int
        With ``k_runs``, a backward-data convolution through a max pool's argmax: its
        window's phases less one. Each block's sums are kept after its last chunk, and for
        each further phase a chunk of one step (B zeros: no reads, no exponents) adds to
        them and writes them (:func:`sim.models.engine.walk_chunks`).
    c_bytes : {4, 1}
        Bytes an element of C takes on the bus: 4 (float32, int32), or 1 (a BFP8 C's
        mantissas, ``DESC_EPILOGUE.BFP8``: the write-back takes a row a cycle and makes a
        beat of a row's bytes; each tile block's exponent byte is not counted).
    offsets : int
        With ``k_blocks``, a weight gradient's kernel offsets walked inside each K chunk
        (:func:`firmware.spec.hw.wg_offsets_inner`: the GEMM of one offset is one block): every
        chunk's A loaded once, then for each offset B's tiles, into the other set of B's
        slots each time, and the block's tiles computed and read out as a chunk of their
        own. The MACs are the ``offsets`` GEMMs'.
    copies : int
        The GEMM queued this many times back to back, each after the first with
        ``DESC_FLAGS.OVERLAP`` (its chunks walked after the one before's, the slot parities
        carried on, its C after the one before's): the cycles of them all. ``queued`` in
        :func:`predict_queued`.

    Returns
    -------
    dict
        ``cycles``, ``compute_cycles`` (the array busy), ``utilization`` (MACs over
        ``rows * cols * cycles``), ``bound_by`` (what limits most chunks: "compute", "reads"
        or "writes"), ``chunks``, and the bus words read and written (``read_words``,
        ``write_words``).
    """
    regmap.check_read_ports(read_ports)
    regmap.check_write_ports(write_ports, rows)
    if not isinstance(b_group, int) or isinstance(b_group, bool) or b_group < 1:
        raise ValueError(f"b_group must be a positive integer, not {b_group!r}")
    if not isinstance(offsets, int) or isinstance(offsets, bool) or offsets < 1 \
            or (offsets > 1 and not k_blocks):
        raise ValueError(f"offsets must be a positive integer (more than 1 with k_blocks), "
                         f"not {offsets!r}")
    if k_runs is not None and (not k_blocks or sum(k_runs) != k
                               or not all(0 < r <= regmap.TILE_BLOCK for r in k_runs)):
        raise ValueError(f"k_runs must be K-block runs of 1..{regmap.TILE_BLOCK} steps summing "
                         f"to k = {k}, with k_blocks")
    bpw = data_width // 8
    burst, o_rd, o_wr, keep, dram = _port_rates(port, bpw, dma_burst, dma_outstanding)
    read_fifo = dma_burst * dma_outstanding
    lat_r, lat_w = port["read_latency"], port["write_latency"]
    traffic = [0, 0]                      # words read, words written

    def read_cycles(runs: list[int]) -> float:
        bursts = [b for w in runs for b in _bursts(w, burst)]
        if not bursts:
            return 0.0
        beats = sum(bursts)
        traffic[0] += beats
        return beats / read_rate(beats / len(bursts), o_rd, lat_r, keep)

    ways = read_ports - 1 if read_ports >= 3 else 1

    def striped(runs, vectors, lanes, zero_vectors=0):
        """A job whose rows (``runs``) :class:`rtl.stripe.LoadStriper` deals to the ``ways``
        B read ports in turn: ``("stripe", way 0's rows, way 1's, ..., all vectors)``, each
        with its gearbox's share of the vectors (the zero rows' on way 0)."""
        parts = [runs[w::ways] for w in range(ways)]
        shares = [vectors * len(p) // (len(runs) + zero_vectors) for p in parts]
        shares[0] = vectors - sum(shares[1:])
        return ("stripe", *(job_cycles(p, v, lanes)
                            for p, v in zip(parts, shares, strict=True)), vectors)

    def operand_jobs(k_major, lanes, x_blk, limit, tiles, kc, stripe=False, per_tile=False):
        """The load jobs of one operand in a chunk, each as its read and gearbox cycles: a
        k-major operand is one job for the block (a run of bus words per step), a lane-run
        one a job per tile (a run per lane inside the matrix). A gearbox makes one vector a
        cycle: a k-major step a vector per tile, a lane run one per ``lanes`` steps. With
        ``stripe`` (B with three to five read ports) a job of ``ways`` or more runs of at
        least :data:`firmware.spec.regmap.STRIPE_MIN_WORDS` words is striped over ``ways`` ports."""
        def stripes(runs, words):
            """LoadStriper's rule: ``runs`` rows of ``words`` words are striped."""
            return stripe and runs >= ways and words >= STRIPE_MIN_WORDS

        if k_major and per_tile:
            # a job per group of b_group tiles (b_per_tile): its rows at an aligned column,
            # a vector a tile a step
            jobs = []
            for t in range(0, tiles, b_group):
                n_in = min(b_group, tiles - t)
                w = _cdiv(min(n_in * lanes, limit - x_blk - t * lanes), bpw)
                jobs.append(striped([w] * kc, kc * n_in, lanes) if stripes(kc, w)
                            else job_cycles([w] * kc, kc * n_in, lanes))
            return jobs
        if k_major:
            v = min(tiles * lanes, limit - x_blk)
            if regmap.stored_packed(limit, 1, bpw):
                # rows shorter than a word are stored packed (firmware.Device): one run from
                # the chunk's first row (k0, a multiple of the bus bytes: at a word's start)
                # to its last row's last byte, a row a cycle through the gearbox
                return [job_cycles([_cdiv((kc - 1) * limit + v, bpw)], kc * tiles, lanes,
                                   packed=True)]
            offset = x_blk % bpw if lanes <= bpw else 0
            words = _cdiv(offset + v, bpw)
            if stripes(kc, words):
                return [striped([words] * kc, kc * tiles, lanes)]
            # the run is a whole stored row of a packed matrix: the rows follow one another
            runs = [words * kc] if words == _cdiv(limit, bpw) else [words] * kc
            return [job_cycles(runs, kc * tiles, lanes)]
        rows_in = [min(lanes, limit - x_blk - t * lanes) for t in range(tiles)]
        vectors = lanes * _cdiv(kc, lanes)        # the zero rows beyond the edge included
        if regmap.stored_packed(k, 1, bpw):
            # packed rows of k bytes (kc == k): a tile's rows one run, from its first row's
            # byte in its word
            return [job_cycles([_cdiv((x_blk + t * lanes) * k % bpw + r * k, bpw)], vectors,
                               lanes, packed=True) for t, r in enumerate(rows_in)]
        words = _cdiv(kc, bpw)
        # striped where a tile has two rows or more; else a tile's rows of one chunk are
        # whole rows (kc == k): one run
        return [striped([words] * r, vectors, lanes, lanes - r) if stripes(r, words) else
                job_cycles([words * r] if kc == k else [words] * r, vectors, lanes,
                           zero=(lanes - r) * _cdiv(kc, lanes))
                for r in rows_in]

    def job_cycles(runs, vectors, lanes, packed=False, zero=0):
        """(read cycles, gearbox cycles, words, tail): the gearbox's cycles only where a
        vector is narrower than a bus word or the rows are packed, a row a cycle (else it
        keeps up with the bus); ``tail``, where it does, the ``zero`` vectors of the rows
        beyond the matrix's edge, one a cycle after the last word."""
        narrow = lanes < bpw or packed
        return (read_cycles(runs) + LOAD_OVERHEAD, vectors + 1 if narrow else 0, sum(runs),
                0 if narrow else zero)

    # the array's least interval between two tiles' last steps (SystolicArray.
    # min_emit_interval: rows, the read-out a row a cycle), and at least the
    # datapath's accumulation read, add and write (GemmDatapath: ACCUMULATE_STAGES + 1)
    interval = kblock_interval(rows, cols) if k_blocks else hw.accumulate_interval(rows, cols)
    chunks = []
    last_use = [{}, {}]          # operand -> parity -> the last chunk that used those slots
    if not isinstance(copies, int) or copies < 1:
        raise ValueError(f"copies must be a positive integer, not {copies!r}")
    # (as the driver stores them: rows shorter than a bus word packed)
    first_b = loads_b_first(transpose_a, regmap.stored_packed(m, 1, bpw), transpose_b,
                            regmap.stored_packed(n, 1, bpw))
    walked, parity = [], (0, 0)
    if k_walked is not None and (
            k_runs is None or len(k_walked) != _cdiv(n, block * cols)
            or any(not w or len(w) != len(k_walked[0]) for w in k_walked)
            or len(k_runs) % len(k_walked[0])):
        raise ValueError("k_walked must give, with k_runs, each block of columns a flag per "
                         "kernel offset, each offset as many K runs")
    if c_bytes not in (1, 4) or isinstance(c_bytes, bool):
        raise ValueError(f"c_bytes must be 4 or 1, not {c_bytes!r}")
    if not isinstance(replays, int) or replays < 0 or (replays and k_runs is None):
        raise ValueError(f"replays must be a non-negative integer, with k_runs, not "
                         f"{replays!r}")
    marks = []                  # (offsets skipped before, a replay) per chunk, where walked
    for _ in range(copies):
        more, parity = walk_chunks(m, n, k, rows, cols, depth, data_width, block, parity,
                                   chunk=chunk, k_blocks=k_blocks, k_runs=k_runs,
                                   k_walked=k_walked, replays=replays,
                                   marks=None if k_walked is None and not replays else marks)
        walked += more
    if offsets > 1:
        # each chunk once per offset: A kept after the first, B to the other slots each time
        inner, b_next = [], walked[0][7] if walked else 0
        for m_blk, n_blk, keep_a, keep_b, k0, kc, a_par, _ in walked:
            for o in range(offsets):
                inner.append((m_blk, n_blk, keep_a or o > 0, keep_b, k0, kc, a_par, b_next))
                b_next ^= 1
        walked = inner
    for ci, (m_blk, n_blk, keep_a, keep_b, k0, kc, a_par, b_par) in enumerate(walked):
        bm = min(block, _cdiv(m - m_blk, rows))
        rows_in = [min(rows, m - m_blk - i * rows) for i in range(bm)]
        bn = min(block, _cdiv(n - n_blk, cols))
        # a block that keeps an operand's tiles (block_order) loads none of them
        a_jobs = [] if keep_a else operand_jobs(transpose_a, rows, m_blk, m, bm, kc)
        # (a replay's B: zero rows, no reads)
        replay = bool(marks) and marks[ci][1]
        b_jobs = [] if keep_b or replay else operand_jobs(
            not transpose_b, cols, n_blk, n, bn, kc, read_ports >= 3, b_per_tile)
        # The walker's order (tile_order); each command's A load, then B — or B's first
        # where B alone is stored packed (sim.models.engine.b_first)
        loads, tiles = [], []
        a_at, b_at = {}, {}
        for i, j in tile_order(bm, bn, transpose_b):
            ai = 0 if len(a_jobs) == 1 else i
            bi = j // b_group if b_per_tile else 0 if len(b_jobs) == 1 else j
            for x in ((1, 0) if first_b else (0, 1)):
                jobs, at, idx = (a_jobs, a_at, ai) if x == 0 else (b_jobs, b_at, bi)
                if jobs and idx not in at:
                    at[idx] = len(loads)
                    loads.append((x, jobs[idx]))
            tiles.append((a_at.get(ai), b_at.get(bi)))
        write = 0.0
        if k0 + kc == k:
            runs = []
            for j in range(bn):
                cols_in = min(cols, n - n_blk - j * cols)
                words = _cdiv(c_bytes * cols_in, bpw) if c_bytes * cols > bpw else 1
                runs += [words] * sum(rows_in)
            beats = sum(runs) / len(runs)
            # the rows dealt to the write ports in turn, across tiles: each takes every P-th
            wrate = write_ports * read_rate(beats, o_wr, lat_w + 2, keep)
            if dram is not None:
                wrate = min(wrate, dram / bpw)
            traffic[1] += sum(runs)
            write = sum(runs) / wrate
        # A load into an operand's slots waits for the last chunk that used them (a kept
        # operand loads nothing and waits for none).
        after = [None if kept else last_use[x].get(par)
                 for x, par, kept in ((0, a_par, keep_a), (1, b_par, keep_b))]
        last_use[0][a_par] = last_use[1][b_par] = len(chunks)
        # each tile's read-out interval to the next tile: K blocks between a tile's first
        # and last read out only its rows inside M (the walker's read_rows)
        middle = k_blocks and 0 < k0 and k0 + kc < k
        # (``interval`` is the K-block one for a tile of all its rows)
        gaps = [kblock_interval(rows, cols, read_rows=rows_in[i]) if middle else interval
                for i, _ in tile_order(bm, bn, transpose_b)]
        # the walker's cycles for the chunk (K blocks): its exponents, then per tile its
        # command and the load jobs it offers with it (tile_jobs: each tile's new loads, in
        # the order they were booked); behind one read port it waits for the load
        # sequencer to take each job
        tile_jobs, seen = [], set()
        for a_l, b_l in tiles:
            new = sorted({a_l, b_l} - {None} - seen)
            tile_jobs.append(new)
            seen.update(new)
        cursor = WALK_CURSOR if b_per_tile and k_runs is not None else 0
        loader = 0 if read_ports >= 2 else WALK_LOADER
        exps_n = 0 if replay else bm + bn * (2 if cols == 2 * regmap.TILE_BLOCK else 1)
        walk = 1 + exps_n * (WALK_EXP + loader) + (bn * WALK_EXP_CURSOR
                                                    if cursor and not replay else 0)
        chunks.append({"compute": bm * bn * kc, "kc": kc, "loads": loads, "gaps": gaps,
                       "walk_exps": walk, "walk_tile": WALK_TILE + cursor,
                       "walk_load": WALK_LOAD + loader, "tile_jobs": tile_jobs,
                       "after": after,
                       "probe": marks[ci][0] * bn * PROBE_TILE if marks else 0,
                       "replay": replay,
                       "tiles": tiles, "write": write,
                       "write_words": sum(runs) if write else 0})
    # The schedule: a chunk's load jobs one after the other (with two ports, A's and B's
    # each on their own), each into its operand's slots once the last chunk using them has
    # computed; each tile computes once the tile before it has and its operands are in, and
    # in a last chunk hands its C rows to the write channel.
    rr = port.get("dram_arbitration", "reads-first") == "round-robin"
    share = (FAIR_SHARE, FAIR_SHARE) if rr else (1.0, WRITE_FLOOR)

    # The order the walk books its transfers in the DRAM ledger. Reads first: chunk i + 1's
    # loads, made while chunk i computes, before chunk i's tiles and C writes wherever they
    # wait for nothing chunk i computes (their slots last used two chunks back or earlier),
    # so that they take the DRAM's bytes first and the writes have what they leave
    # (WRITE_FLOOR at least). Round-robin: in the schedule's order, chunk by chunk.
    steps = [("load", 0)]
    for i in range(len(chunks)):
        nxt = [("load", i + 1)] if i + 1 < len(chunks) else []
        ahead = nxt and not rr and all(j is None or j < i for j in chunks[i + 1]["after"])
        steps += nxt + [("compute", i)] if ahead else [("compute", i)] + nxt

    walker = k_blocks and offsets == 1

    def schedule(ledger):
        nports = max(read_ports, 2)
        read_end = [[0.0] * nports for _ in chunks]     # each port's (one: all the same)
        comp_end = [0.0] * len(chunks)
        votes = {"compute": 0, "reads": 0, "writes": 0}
        wclock = 0.0
        last_end = -float(interval)        # the last tile's last step
        last_gap = interval                # and its read-out interval to the next
        # when the last job's vectors are made: through one router to both gearboxes in read
        # order, or with two read ports, each gearbox from its own reader (and each buffer
        # taking its loads independently of the other's)
        gearbox = [0.0] * nports
        # with two read ports: when the last load began into its buffer (the datapath takes
        # commands in order, so a load begins once its buffer has taken the load before it
        # and the load before it, of either operand, has begun)
        begin = 0.0
        dones = [None] * len(chunks)
        wends = []
        # (K blocks: when each chunk's exponents are in, EXP_TRIP and the read latency after
        # those of the chunk EXP_BANKS before)
        exps = [0.0] * len(chunks)
        # (K blocks, but for a weight gradient's offsets inside its chunks, whose pace
        # EXP_TRIP was measured on: the walker's clock, when it has offered each chunk's
        # last job; each chunk's commands' and load jobs' times; each chunk's last tile's
        # start)
        walk_end, cmd_at, job_at = 0.0, [None] * len(chunks), [None] * len(chunks)
        last_start = [0.0] * len(chunks)
        for kind, i in steps:
            c = chunks[i]
            if kind == "load" and walker:
                # the walker offers the chunk's exponents once the bank of the chunk before
                # last is free (its last command taken), then each tile's command and loads
                free = last_start[i - EXP_BANKS] if i >= EXP_BANKS and not c["replay"] else 0
                at = max(walk_end, free) + c["probe"] + c["walk_exps"]
                cmd_at[i], job_at[i] = [], [0.0] * len(c["loads"])
                for jobs in c["tile_jobs"]:
                    cmd_at[i].append(at + 1)
                    at += c["walk_tile"]
                    for x in jobs:
                        job_at[i][x] = at
                        at += c["walk_load"]
                walk_end = at
            if kind == "load":
                clock = list(read_end[i - 1]) if i else [0.0] * nports
                done = []
                for x_job, (path, job) in enumerate(c["loads"]):
                    # the ports (and gearbox clocks) the job's rows go through: one, or with three
                    # to five read ports B's rows dealt to ports 1, 2 ... in turn
                    subs = [(1 + w, job[1 + w]) for w in range(ways)] if job[0] == "stripe" else \
                        [(path if read_ports >= 2 else 0, job)]
                    j = c["after"][path]
                    free = 0.0 if j is None else comp_end[j]
                    # (its job is offered when the walker is at its tile)
                    offered = job_at[i][x_job] if walker else 0.0
                    if read_ports >= 2:
                        free = begin = max(begin, *(gearbox[p] for p, _ in subs), free)
                    ends = []
                    for p, (cycles, vectors, words, tail) in subs:
                        # (with one read port, one channel and each operand's own gearbox)
                        g = p if read_ports >= 2 else path
                        # the job's words wait in the DMA's FIFO for its slots: its reads may
                        # begin up to a FIFO's worth of words before they free
                        lead = cycles * min(1.0, read_fifo / words) if words else 0.0
                        start = max(clock[p], free - lead - lat_r, offered)
                        clock[p] = ledger.move(start, cycles, words * bpw)
                        # a job's vectors follow its gearbox's previous job's and its own words
                        # (reads run on meanwhile, into the FIFO), once its slots are free
                        gearbox[g] = max(max(gearbox[g], start + lat_r, free) + vectors,
                                         clock[p] + lat_r + tail)
                        ends.append(gearbox[g])
                        if read_ports == 1 and vectors:
                            # the router hands words over in read order: the reads run on at
                            # most the DMA's FIFO and the operand's word FIFO ahead of a gearbox
                            # slower than the bus
                            clock[p] = max(clock[p], gearbox[g] - lat_r
                                           - (read_fifo + hw.WORD_FIFO) * vectors / words)
                    if job[0] == "stripe":
                        # the interleave passes the gearboxes' vectors in order, one a cycle
                        merged = max(*ends, free + job[-1])
                        for w in range(ways):
                            gearbox[1 + w] = merged
                        ends.append(merged)
                    done.append(max(ends))
                read_end[i] = clock if read_ports >= 2 else [max(clock)] * nports
                dones[i] = done
                continue
            done = dones[i]
            t = comp_end[i - 1] if i else 0.0
            waited = stalled = 0.0
            if c["replay"]:
                exps[i] = exps[i - 1]        # (no exponents: its sums are zeros)
            elif k_blocks and i >= EXP_BANKS:
                exps[i] = exps[i - EXP_BANKS] + lat_r + EXP_TRIP
            if c["probe"]:
                # (the walker probes the offsets it skips before it loads the exponents)
                exps[i] = max(exps[i], (exps[i - 1] if i else 0.0) + c["probe"] + lat_r
                              + EXP_TRIP)
            if exps[i] > t:
                waited += exps[i] - t
                t = exps[i]
            per_tile = c["write"] / len(c["tiles"])
            tile_bytes = c["write_words"] * bpw / len(c["tiles"])
            for x_t, ((a_l, b_l), gap) in enumerate(zip(c["tiles"], c["gaps"], strict=True)):
                ready = max(0.0 if a_l is None else done[a_l],
                            0.0 if b_l is None else done[b_l],
                            cmd_at[i][x_t] + WALK_ISSUE if walker else 0.0)
                if ready > t:
                    waited += ready - t
                    t = ready
                if per_tile and len(wends) >= hw.OUT_FIFO_TILES and wends[-hw.OUT_FIFO_TILES] > t:
                    # the array starts a tile once the output FIFO has room for its C rows:
                    # the tile OUT_TILES before it written
                    stalled += wends[-hw.OUT_FIFO_TILES] - t
                    t = wends[-hw.OUT_FIFO_TILES]
                # a tile read out (every tile: stored, or emitted) ends at least the array's
                # read-out interval after the one before
                t = max(t + c["kc"], last_end + last_gap)
                last_end, last_gap = t, gap
                last_start[i] = t - c["kc"]
                if per_tile:
                    # the tile's C rows go out once it has computed, after those before it
                    wclock = ledger.move(max(wclock, t), per_tile, tile_bytes, 1)
                    wends.append(wclock)
            comp_end[i] = t
            worst = max((waited, "reads"), (stalled, "writes"), (c["compute"] / 2, "compute"))
            votes[worst[1]] += 1
        return comp_end[-1], wclock, votes

    end, wclock, votes = schedule(_DramLedger(dram, share))
    # After the last tile's last step: its first C row leaves the datapath (the declared fill
    # latency), its rows are dealt to the write ports in turn (each port's write-back makes a
    # word a cycle), the last row's burst forms in the DMA writer once its words are in and
    # goes out, and its response comes back. The writes booked on the channel (wclock, from
    # each tile's last step) are shifted by the same fill and forming latencies; all of it
    # after the descriptor's check (START_LATENCY).
    words = _cdiv(c_bytes * min(cols, n), bpw)
    fill = hw.fill_latency(rows, cols) + (KB_ADD_LATENCY if k_blocks else 0)
    last_rows = _cdiv(rows, write_ports) * words / keep
    start = START_LATENCY + (hw.CUT_WAIT if chunk else 0)
    total = start + max(end + fill + last_rows + min(words, burst) / keep,
                        wclock + fill) + hw.WRITE_FORM_LATENCY + lat_w
    if dram is not None:
        total = max(total, sum(traffic) * bpw / dram + lat_r + lat_w)
    compute = sum(c["compute"] for c in chunks)
    return {"cycles": int(round(total)), "compute_cycles": compute,
            "utilization": offsets * m * n * k / (rows * cols * total),
            "bound_by": max(votes, key=votes.get), "chunks": len(chunks),
            "read_words": traffic[0], "write_words": traffic[1]}


def predict_quantize(m: int, n: int, *, rows: int, cols: int, data_width: int, port: dict,
                     dma_outstanding: int = hw.DMA_OUTSTANDING,
                     dma_burst: int = hw.DMA_BURST, unfold=None, **_config) -> dict:
    """Predicted cycles of one quantise-only descriptor (``DESC_EPILOGUE.QUANTIZE_ONLY``):
    the ``m x n`` float32 matrix read a tile row at a time (:class:`rtl.fpread.Fp32TileReader`:
    one burst of the row's bus words inside the matrix a ``cols``-wide tile row) through the
    first read port at :func:`read_rate`, a cycle more for each bus word of a tile row
    beyond N and for each tile row beyond M (or, where that is less, every tile block's
    ``T`` rows through the write-back and the quantiser's fill and drain latencies, as for a
    matrix of few rows), then the last unit through the BFP8 write-back:
    its ``T * T / cols`` beats re-read from the quantiser's buffer and its ``T * T`` bytes
    written, and the write response.

    Parameters
    ----------
    m, n : int
        The matrix.
    rows, cols, data_width, port, dma_outstanding, dma_burst :
        As :func:`predict` takes them (other configuration keys are ignored).
    unfold : sim.models.conv.ConvGeometry, optional
        The matrix is this convolution's input unfolded (``m`` and ``n`` its
        :func:`sim.models.conv.unfold`'s, the batch whole units): a tile row is one burst
        of the tile's bus words where its pixel is inside the image, else one zero slot
        and no read.

    Returns
    -------
    dict
        ``cycles``, ``compute_cycles`` (0), ``read_words`` and ``write_words``.
    """
    T = regmap.TILE_BLOCK
    bpw = data_width // 8
    F = bpw // 4                                   # float32 words a bus word
    burst, o_rd, _, keep, _ = _port_rates(port, bpw, dma_burst, dma_outstanding)
    # a row's words in each tile column: full tiles, and the last one's lanes inside N
    full, rest = divmod(n, cols)
    runs = [_cdiv(cols, F)] * full + ([_cdiv(rest, F)] if rest else [])
    bursts = [b for w in runs for b in _bursts(w, burst)]
    words = m * sum(runs)
    # every tile row inside M is `4 * cols / bus bytes` slots on the reader's word side, a
    # read word or a zero (beyond N), a slot a cycle; a row beyond M is one slot
    slots = _cdiv(n, cols) * (m * _cdiv(cols, F) + _cdiv(m, rows) * rows - m)
    if unfold is not None:
        # (the tile rows whose pixel is inside the image: a kernel offset's valid output
        # positions, a tile of each position's images; the others one zero slot each)
        g = unfold
        one = ConvGeometry(1, 1, g.height, g.width, 1, g.kernel, g.stride, g.padding,
                           g.dilation)
        inside = g.channels * sum(int((one.input_index(dy, dx) >= 0).sum())
                                  for dy, dx in one.offsets) * _cdiv(g.batch, cols)
        per = _cdiv(cols, F)
        bursts = _bursts(per, burst)
        words = inside * per
        slots -= (m * _cdiv(n, cols) - inside) * (per - 1)
    rate = read_rate(sum(bursts) / len(bursts), o_rd, port["read_latency"], keep)
    # the write-back takes a unit's T rows a cycle each (rows beyond M as zeros), and the
    # quantiser its exponents and drain after them: with few rows, that and not the reads
    units = _cdiv(m, T) * _cdiv(n, T)
    per_unit = (T * _cdiv(T, cols) + hw.quantizer_fill_latency(cols, T)
                + hw.QUANTIZER_DRAIN_LATENCY)
    tail = T * T // cols + _cdiv(T * T, bpw) + port["write_latency"]
    body = max(words / rate + (slots - words), units * per_unit)
    return {"cycles": int(round(START_LATENCY + body + tail)),
            "compute_cycles": 0, "read_words": words, "write_words": m * _cdiv(n, bpw)}


def predict_queued(m: int, n: int, k: int, transpose_a: bool = False,
                   transpose_b: bool = False, **config) -> int:
    """Predicted cycles of the GEMM behind another (the same) in the descriptor queue.

    Parameters
    ----------
    m, n, k, transpose_a, transpose_b :
        The GEMM.
    **config :
        :func:`predict`'s keyword arguments.

    Returns
    -------
    int
        Two copies' cycles (:func:`predict`'s ``copies``) less one copy's, as
        ``python -m sim.bench utilization`` measures ``queued_cycles``.
    """
    two = predict(m, n, k, transpose_a, transpose_b, copies=2, **config)["cycles"]
    return two - predict(m, n, k, transpose_a, transpose_b, **config)["cycles"]


def predict_cycles(m: int, n: int, k: int, transpose_a: bool = False,
                   transpose_b: bool = False, *, queued: bool = False, **config) -> int:
    """Predicted cycles of the GEMM alone or queued.

    Parameters
    ----------
    m, n, k, transpose_a, transpose_b :
        The GEMM.
    queued : bool
        Behind another copy of it (:func:`predict_queued`) instead of alone
        (:func:`predict`'s ``cycles``).
    **config :
        :func:`predict`'s keyword arguments.

    Returns
    -------
    int
    """
    if queued:
        return predict_queued(m, n, k, transpose_a, transpose_b, **config)
    return predict(m, n, k, transpose_a, transpose_b, **config)["cycles"]


#: A smaller block is chosen only if predicted at least this much faster: within it, the
#: larger block, which reads each operand fewer times. 0: only an exact tie goes to the
#: larger block (the model charges for the DRAM's bytes).
BLOCK_MARGIN = 0.0

#: Queued, a block other than the one chosen alone is taken only if predicted at least this
#: much faster: the queued prediction misses by up to 16 % on a few shapes, where a switch
#: on a small predicted gain loses. Chosen by ``python -m sim.bench utilization`` over the
#: benchmark GEMMs (queued utilisation against the block chosen alone).
QUEUED_BLOCK_MARGIN = 0.04


def best_block(m: int, n: int, k: int, transpose_a: bool = False, transpose_b: bool = False,
               *, rows: int, cols: int, depth: int, block: int, data_width: int,
               port: dict, write_ports: int = 1, read_ports: int = 1,
               queued: bool = False, dma_burst: int = hw.DMA_BURST) -> int:
    """The reuse block's side with the fewest predicted cycles.

    Larger blocks read A and B fewer times; smaller ones let C leave earlier and start
    computing after fewer loads.

    Parameters
    ----------
    m, n, k, transpose_a, transpose_b :
        The GEMM.
    rows, cols, depth, block, data_width, port, write_ports, read_ports, dma_burst :
        As :func:`predict` takes them; ``block`` is the largest side tried.
    queued : bool
        Fewest cycles behind another GEMM in the queue (:func:`predict_queued`, at chunk 0),
        taken only :data:`QUEUED_BLOCK_MARGIN` faster than the side chosen alone.

    Returns
    -------
    int
        The largest side in ``1..block`` within :data:`BLOCK_MARGIN` of the fastest, each
        side at its fastest ``DESC_FLAGS.CHUNK``.

    Notes
    -----
    Cached by shape, configuration and port: a training run asks for the same few shapes
    every step.
    """
    knobs = _port_key(port, dma_burst)
    return _best_block(m, n, k, bool(transpose_a), bool(transpose_b), rows, cols, depth, block,
                       data_width, knobs, write_ports, read_ports, bool(queued))


def _port_key(port: dict, dma_burst: int) -> tuple:
    """The port's knobs the model reads and the DMA's burst length, as a hashable key for the
    caches below (:func:`_config` turns it back into :func:`predict`'s arguments)."""
    return tuple(sorted((key, port.get(key)) for key in (
        "outstanding_reads", "outstanding_writes", "read_latency", "write_latency",
        "max_burst", "pause", "dram_gbps", "clock_mhz", "data_width", "dram_arbitration"))) \
        + (("dma_burst", dma_burst),)


def _config(knobs: tuple, **config) -> dict:
    """:func:`predict`'s keyword arguments from a :func:`_port_key` and the rest."""
    port = dict(knobs)
    return dict(port=port, dma_burst=port.pop("dma_burst"), **config)


@functools.lru_cache(maxsize=16384)
def _fastest_chunk(m, n, k, ta, tb, rows, cols, depth, side, data_width, knobs, write_ports,
                   read_ports) -> tuple[int, int]:
    """``(cycles, chunk)``: the ``DESC_FLAGS.CHUNK`` predicted fastest alone at reuse block
    ``side`` (the lowest of a tie), and its cycles. A chunk that walks the GEMM as a lower
    one does (the same chunks in the same order, :func:`walk_chunks`) is predicted alike,
    and skipped."""
    config = _config(knobs, rows=rows, cols=cols, depth=depth, data_width=data_width,
                     write_ports=write_ports, read_ports=read_ports)
    walks, best = set(), None
    for chunk in CHUNK_CHOICES:
        walk = tuple(walk_chunks(m, n, k, rows, cols, depth, data_width, side, chunk=chunk)[0])
        if walk in walks:
            continue
        walks.add(walk)
        cycles = predict(m, n, k, ta, tb, block=side, chunk=chunk, **config)["cycles"]
        if best is None or cycles < best[0]:
            best = (cycles, chunk)
    return best


@functools.lru_cache(maxsize=4096)
def _best_block(m, n, k, ta, tb, rows, cols, depth, block, data_width, knobs,
                write_ports, read_ports, queued) -> int:
    if not queued:
        # alone, each side at its fastest chunk (best_chunk's choice there: no margin)
        return _largest_near_fastest({side: _fastest_chunk(
            m, n, k, ta, tb, rows, cols, depth, side, data_width, knobs, write_ports,
            read_ports)[0] for side in range(1, block + 1)})
    # queued: the side chosen alone at the ramp (chunk 0) is the one to depart from
    config = _config(knobs, rows=rows, cols=cols, depth=depth, data_width=data_width,
                     write_ports=write_ports, read_ports=read_ports)
    one = {side: predict(m, n, k, ta, tb, block=side, **config)["cycles"]
           for side in range(1, block + 1)}
    alone = _largest_near_fastest(one)
    # predict_queued's two copies less one, the one already predicted above
    behind = {side: predict(m, n, k, ta, tb, block=side, copies=2, **config)["cycles"] - c
              for side, c in one.items()}
    side = _largest_near_fastest(behind)
    return side if behind[side] < behind[alone] * (1 - QUEUED_BLOCK_MARGIN) else alone


#: Queued, a ``DESC_FLAGS.CHUNK`` other than 0 (the first block's ramp) is taken only if
#: predicted at least this much faster than 0, as :data:`QUEUED_BLOCK_MARGIN` for the block.
#: Alone there is no margin: the block side and the chunk are chosen together. Chosen by
#: ``python -m sim.bench sweep`` (every schedule of the benchmark GEMMs).
CHUNK_MARGIN = 0.04


def best_chunk(m: int, n: int, k: int, transpose_a: bool = False, transpose_b: bool = False,
               *, rows: int, cols: int, depth: int, block: int, data_width: int, port: dict,
               write_ports: int = 1, read_ports: int = 1, queued: bool = False,
               dma_burst: int = hw.DMA_BURST) -> int:
    """The ``DESC_FLAGS.CHUNK`` with the fewest predicted cycles at a given block side.

    The ramp (0) starts the array after a short first chunk's loads, which pays where the
    blocks are compute-bound; about equal chunks keep loads and compute side by side where a
    descriptor is one block bound by its loads.

    Parameters
    ----------
    m, n, k, transpose_a, transpose_b :
        The GEMM.
    rows, cols, depth, block, data_width, port, write_ports, read_ports, dma_burst :
        As :func:`predict` takes them; ``block`` is the side the GEMM runs at
        (:func:`best_plan`'s).
    queued : bool
        Fewest cycles behind another GEMM (:func:`predict_queued`); then 0 unless another
        chunk is :data:`CHUNK_MARGIN` faster.

    Returns
    -------
    int
        A ``DESC_FLAGS.CHUNK`` value (:func:`sim.models.engine.chunk_depth`).
    """
    knobs = _port_key(port, dma_burst)
    return _best_chunk(m, n, k, bool(transpose_a), bool(transpose_b), rows, cols, depth, block,
                       data_width, knobs, write_ports, read_ports, bool(queued))


@functools.lru_cache(maxsize=4096)
def _best_chunk(m, n, k, ta, tb, rows, cols, depth, block, data_width, knobs, write_ports,
                read_ports, queued) -> int:
    if not queued:
        return _fastest_chunk(m, n, k, ta, tb, rows, cols, depth, block, data_width, knobs,
                              write_ports, read_ports)[1]
    config = _config(knobs, rows=rows, cols=cols, depth=depth, block=block,
                     data_width=data_width, write_ports=write_ports, read_ports=read_ports)
    cycles = {chunk: predict_queued(m, n, k, ta, tb, chunk=chunk, **config)
              for chunk in CHUNK_CHOICES}
    best = min(CHUNK_CHOICES, key=lambda c: (cycles[c], c))
    return best if cycles[best] < cycles[0] * (1 - CHUNK_MARGIN) else 0


def run_shape(m: int, n: int, k: int, transpose_a: bool, transpose_b: bool,
              turned: bool) -> tuple:
    """The GEMM the accelerator runs.

    Parameters
    ----------
    m, n, k, transpose_a, transpose_b :
        The GEMM as given.
    turned : bool
        Run as its transpose ``C^T = op(B)^T op(A)^T`` (:func:`best_plan`).

    Returns
    -------
    tuple
        ``(m, n, k, transpose_a, transpose_b)`` of the GEMM run.
    """
    if turned:
        return n, m, k, not transpose_b, not transpose_a
    return m, n, k, transpose_a, transpose_b


#: :func:`best_plan` runs a GEMM as its transpose only where that is predicted at least this
#: much faster: the model's error on the GEMMs it turns (a few per cent) stays below it.
TRANSPOSE_MARGIN = 0.1


def best_plan(m: int, n: int, k: int, transpose_a: bool = False, transpose_b: bool = False,
              *, rows: int, cols: int, depth: int, block: int, data_width: int, port: dict,
              write_ports: int = 1, read_ports: int = 1,
              queued: bool = False, dma_burst: int = hw.DMA_BURST) -> tuple[bool, int]:
    """Whether to run a GEMM as its transpose, and the reuse block of the GEMM run.

    The transpose ``C^T = op(B)^T op(A)^T`` (an ``n x m x k`` GEMM reading the same operand
    bytes in place) pays where N is small and M large: the short side goes on the array's
    rows and the long operand is read as B is, over B's read ports. The result is the same
    bit for bit.

    Parameters
    ----------
    m, n, k, transpose_a, transpose_b :
        The GEMM.
    rows, cols, depth, block, data_width, port, write_ports, read_ports, queued, dma_burst :
        As :func:`best_block` takes them.

    Returns
    -------
    tuple of (bool, int)
        ``(turned, block)``: turned where predicted (:func:`predict` at each orientation's
        fastest chunk, or :func:`predict_queued`) at least :data:`TRANSPOSE_MARGIN` faster;
        the block as :func:`best_block` chooses it for the GEMM run.
    """
    knobs = _port_key(port, dma_burst)
    return _best_plan(m, n, k, bool(transpose_a), bool(transpose_b), rows, cols, depth, block,
                      data_width, knobs, write_ports, read_ports, bool(queued))


@functools.lru_cache(maxsize=4096)
def _best_plan(m, n, k, ta, tb, rows, cols, depth, block, data_width, knobs, write_ports,
               read_ports, queued) -> tuple[bool, int]:
    config = _config(knobs, rows=rows, cols=cols, depth=depth, data_width=data_width,
                     write_ports=write_ports, read_ports=read_ports)
    plans = []
    for turned in (False, True):
        shape = run_shape(m, n, k, ta, tb, turned)
        side = _best_block(*shape, rows, cols, depth, block, data_width, knobs, write_ports,
                           read_ports, queued)
        cycles = (predict_queued(*shape, block=side, **config) if queued
                  else _fastest_chunk(*shape, rows, cols, depth, side, data_width, knobs,
                                      write_ports, read_ports)[0])
        plans.append((turned, side, cycles))
    (_, side, cycles), (_, t_side, t_cycles) = plans
    return (True, t_side) if t_cycles < cycles * (1 - TRANSPOSE_MARGIN) else (False, side)


def _largest_near_fastest(cycles: dict) -> int:
    """The largest block side whose cycles are within :data:`BLOCK_MARGIN` of the fewest."""
    fastest = min(cycles.values())
    return max(side for side, c in cycles.items() if c <= fastest * (1 + BLOCK_MARGIN))


def training_gemms(batch: int, fan_in: int, fan_out: int) -> list[tuple]:
    """The GEMMs of one training step of a fully connected layer ``y = x W``.

    Parameters
    ----------
    batch, fan_in, fan_out : int
        ``x`` is ``batch x fan_in``, ``W`` is ``fan_in x fan_out``.

    Returns
    -------
    list of tuple
        ``(name, M, N, K, transpose_a, transpose_b)`` of the forward, backward-data and
        weight-gradient GEMMs, operands stored as the layer keeps them.
    """
    return [("forward", batch, fan_out, fan_in, False, False),
            ("backward-data", batch, fan_in, fan_out, False, True),
            ("weight-gradient", fan_in, fan_out, batch, True, False)]


#: Typical layers ``(fan_in, fan_out)``, fully connected and convolution-shaped, that the
#: command line predicts.
LAYERS = [(784, 256), (256, 256), (256, 10), (576, 128), (1152, 256)]


def record_config(record: dict) -> dict:
    """:func:`predict`'s keyword arguments (all but ``block``) for a measured GEMM.

    Parameters
    ----------
    record : dict
        One JSON record of ``python -m sim.bench utilization``, ``model`` or ``sweep``.

    Returns
    -------
    dict
    """
    from firmware.spec.ports import resolve_port

    # (a model-check record carries its port as resolved: a dict of knobs has no preset name)
    port = resolve_port(record.get("port_spec", record["port"]))
    return dict(rows=record["rows"], cols=record["cols"], data_width=record["data_width"],
                depth=record.get("depth", 512), port=port,
                write_ports=record.get("write_ports", 1),
                read_ports=record.get("read_ports", 1),
                dma_burst=record.get("burst_beats", hw.DMA_BURST))


def check_records(paths) -> dict:
    """The model against committed measurements, predicted again.

    Parameters
    ----------
    paths : iterable of path-like
        JSON files of ``python -m sim.bench utilization`` (alone and queued, at the block
        sides each GEMM ran with), ``model`` (with ``--k-blocks``, in the K-block mode) or
        ``sweep`` (every schedule).

    Returns
    -------
    dict
        Per file and board (or port): ``gemms``, ``mean_abs_error``, ``max_abs_error`` and
        ``within_5_percent``.

    Raises
    ------
    OSError, ValueError, KeyError
        A file is missing or not such a record.
    """
    import json
    from pathlib import Path

    errors: dict[str, list[float]] = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        for r in data["results"]:
            config = record_config(r)
            shape = (r["m"], r["n"], r["k"], r["transpose_a"], r["transpose_b"])
            label = f"{Path(path).stem}: {r.get('board', r['port'])}"
            if "schedules" in r:               # a sweep record: every schedule it ran
                label += " sweep" + (" queued" if r["queued"] else "")
                for sch in r["schedules"]:
                    got = predict_cycles(*run_shape(*shape, sch["turned"]), block=sch["block"],
                                         chunk=sch["chunk"], queued=r["queued"], **config)
                    errors.setdefault(label, []).append(got / sch["cycles"] - 1)
            elif "block_used" in r:            # a utilisation record: alone and queued
                # (as run: the transpose where the driver turned it, best_plan)
                alone = predict(*run_shape(*shape, r.get("transposed", False)),
                                block=r["block_used"], chunk=r.get("chunk_used", 0),
                                **config)["cycles"]
                errors.setdefault(label, []).append(alone / r["cycles"] - 1)
                queued = predict_queued(*run_shape(*shape, r.get("transposed_queued", False)),
                                        block=r["block_used_queued"],
                                        chunk=r.get("chunk_used_queued", 0), **config)
                errors.setdefault(label + " queued", []).append(
                    queued / r["queued_cycles"] - 1)
            else:                              # a model-check record
                alone = predict(*shape, block=r["block"], k_blocks=r.get("k_blocks", False),
                                **config)["cycles"]
                errors.setdefault(label, []).append(alone / r["cycles"] - 1)
    return {label: {"gemms": len(e), "mean_abs_error": round(sum(map(abs, e)) / len(e), 4),
                    "max_abs_error": round(max(map(abs, e)), 4),
                    "within_5_percent": sum(abs(x) <= 0.05 for x in e)}
            for label, e in errors.items()}


def main(argv=None) -> int:
    """The command line, ``python -m firmware.runtime.perfmodel``; exits 2 on bad arguments."""
    from firmware.spec.boards import BOARDS
    from firmware.spec.ports import BOARD_PORTS, resolve_port

    parser = argparse.ArgumentParser(
        prog="python -m firmware.runtime.perfmodel",
        description="Predict a board's default configuration over the training GEMMs of "
                    "typical layers, for several block sizes and read port counts, and "
                    "with each GEMM's block side and chunk chosen by best_block and "
                    "best_chunk (as Device.gemm does, the GEMM as given), "
                    "up to the board's block; C written through the board's write ports (or "
                    "--write-ports), A and B read through its read ports (or --read-ports).")
    parser.add_argument("--board", choices=sorted(BOARDS))
    parser.add_argument("--check", nargs="+", metavar="JSON",
                        help="instead: predict again the GEMMs measured in these files "
                             "(sim.bench utilization, model or sweep output) and print the errors")
    parser.add_argument("--blocks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--ports", type=int, nargs="+", choices=list(regmap.READ_PORTS),
                        default=list(regmap.READ_PORTS),
                        help="read port counts of the fixed-block columns")
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--write-ports", type=int, choices=list(regmap.WRITE_PORTS),
                        help="AXI write ports (default: the board's)")
    parser.add_argument("--read-ports", type=int, choices=list(regmap.READ_PORTS),
                        help="AXI read ports of the chosen-side column (default: the board's)")
    args = parser.parse_args(argv)
    if args.check:
        try:
            summary = check_records(args.check)
        except (OSError, ValueError, KeyError) as e:
            parser.error(f"--check: {e}")
        print("| measurements | GEMMs | mean abs error | largest | within 5 % |")
        print("|---|---:|---:|---:|---:|")
        for label, v in summary.items():
            print(f"| {label} | {v['gemms']} | {100 * v['mean_abs_error']:.2f} % | "
                  f"{100 * v['max_abs_error']:.2f} % | {v['within_5_percent']} |")
        return 0
    if args.board is None:
        parser.error("--board is required (or --check)")
    for b in args.blocks:
        if b < 1 or b & (b - 1) or b > 16:
            parser.error(f"--blocks: a block must be a power of two in 1..16, not {b}")
    board = BOARDS[args.board]
    cfg = board.config(write_ports=args.write_ports, read_ports=args.read_ports)
    port = resolve_port(BOARD_PORTS[args.board])
    variants = [(bl, p) for bl in args.blocks for p in args.ports]
    print(f"{board.name}: {cfg['rows']}x{cfg['cols']}, depth {cfg['depth']}, "
          f"{cfg['data_width']}-bit bus, port preset {port['name']} "
          f"(default block {cfg['block']}), {cfg.get('write_ports', 1)} write port(s), "
          f"{cfg.get('read_ports', 1)} read port(s); "
          f"predicted PE utilisation, %")
    print("| GEMM | M x N x K | " + " | ".join(f"block {bl}, {p} read port{'s' * (p > 1)}"
                                            for bl, p in variants)
          + f" | chosen side <= {cfg['block']}, {cfg.get('read_ports', 1)} read port(s) |")
    print("|---|---|" + "---:|" * (len(variants) + 1))
    geometry = {key: cfg[key] for key in ("rows", "cols", "depth", "data_width")}
    geometry["write_ports"] = cfg.get("write_ports", 1)
    geometry["dma_burst"] = cfg.get("burst_beats", hw.DMA_BURST)
    means = [0.0] * (len(variants) + 1)
    count = 0
    for batch in args.batch:
        for fan_in, fan_out in LAYERS:
            for name, m, n, k, ta, tb in training_gemms(batch, fan_in, fan_out):
                row = []
                for i, (bl, p) in enumerate(variants):
                    u = predict(m, n, k, ta, tb, block=bl, port=port, **geometry,
                                read_ports=p)["utilization"]
                    means[i] += u
                    row.append(f"{100 * u:.1f}")
                own = cfg.get("read_ports", 1)
                side = best_block(m, n, k, ta, tb, block=cfg["block"], port=port, **geometry,
                                  read_ports=own)
                chunk = best_chunk(m, n, k, ta, tb, block=side, port=port, **geometry,
                                   read_ports=own)
                u = predict(m, n, k, ta, tb, block=side, chunk=chunk, port=port, **geometry,
                            read_ports=own)["utilization"]
                means[-1] += u
                row.append(f"{100 * u:.1f} (side {side}, chunk {chunk})")
                count += 1
                print(f"| {fan_in}->{fan_out} b{batch} {name} | {m}x{n}x{k} | "
                      + " | ".join(row) + " |")
    print("| mean | | " + " | ".join(f"{100 * s / count:.1f}" for s in means) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
