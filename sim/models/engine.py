"""Numpy / Python models of the descriptor engine's components, beat for beat on their streams.

* :func:`check` -- :class:`rtl.checker.DescriptorChecker`: the verdict on a descriptor.
* :func:`walk` -- :class:`rtl.walker.Walker`: tile commands, load jobs, write jobs.
* :func:`load_sequence` -- :class:`rtl.loader.LoadSequencer`: DMA reads, gearbox jobs, routes.
* :func:`route` -- :class:`rtl.router.ReadRouter`: which words go to which gearbox.
* :func:`issue` -- :class:`rtl.issue.CommandIssue`: datapath commands with their exponents.
* :func:`write_back` -- :class:`rtl.writeback.WriteBack`: DMA write commands, words, strobes.

Payloads are dicts of the stream layouts' fields (integers; int8 vectors as lists). Where the
hardware truncates a value to a field's width, so do the models.
"""

from __future__ import annotations

import numpy as np

from firmware.spec.regmap import STRIPE_MIN_WORDS, TILE_BLOCK, ErrorCode, packed_stride

__all__ = ["descriptor", "check", "check_regions", "chunk_align", "ramp_start", "chunk_depth",
           "k_chunks",
           "block_chunks", "b_first", "loads_b_first",
           "block_side", "column_order", "tile_order", "walk", "load_sequence", "stripe",
           "interleave", "route", "issue", "write_back"]

#: The descriptor's fields each tile command carries (``rtl.issue.DESC_FIELDS``).
CMD_DESC_FIELDS = ("transpose_a", "transpose_b", "raw", "row_vec", "col_vec", "row_exp",
                   "col_exp")
_DESC_FIELDS = ("m", "n", "k", "transpose_a", "transpose_b", "raw", "row_vec", "col_vec",
                "row_exp", "col_exp", "a_addr", "a_stride", "b_addr", "b_stride", "c_addr",
                "c_stride", "row_exp_addr", "col_exp_addr", "block", "overlap", "chunk")


#: The fields of ``descriptor_layout(k_blocks=True)`` and ``(epilogue=True)``.
_OPTIONAL_FIELDS = ("tiles", "bfp8", "stochastic", "c_exp_addr", "seed", "relu", "mask_addr",
                    "mask_stride", "bias", "bias_addr", "mask_in", "quantize_only")


def descriptor(**fields) -> dict:
    """A descriptor (every field of :func:`rtl.checker.descriptor_layout`, 0 unless given;
    ``tiles`` of ``descriptor_layout(k_blocks=True)`` and the BFP8 output's, ReLU's, bias's
    and stored mask's fields of ``descriptor_layout(epilogue=True)`` only if given)."""
    bad = set(fields) - set(_DESC_FIELDS) - set(_OPTIONAL_FIELDS)
    if bad:
        raise ValueError(f"unknown descriptor fields {sorted(bad)}")
    return {name: int(fields.get(name, 0)) for name in _DESC_FIELDS} | {
        name: int(fields[name]) for name in _OPTIONAL_FIELDS if name in fields}


def _ceil_to(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def check(desc: dict, window_base: int, window_limit: int, data_width: int = 128,
          addr_width: int = 32) -> int:
    """The error code :class:`rtl.checker.DescriptorChecker` gives ``desc`` (0: accepted)."""
    d = desc
    only = d.get("quantize_only")
    code = check_dimensions(d["m"], d["n"], 1 if only else d["k"])
    if code:
        return code
    ta, tb = d["transpose_a"], d["transpose_b"]
    regions = [   # base, stored rows, stride, bytes a row, used, may be packed
        (d["a_addr"], d["k"] if ta else d["m"], d["a_stride"], d["m"] if ta else d["k"], 1, 1),
        (d["b_addr"], d["n"] if tb else d["k"], d["b_stride"], d["k"] if tb else d["n"], 1, 1),
        (d["c_addr"], d["m"], d["c_stride"], d["n"] if d.get("bfp8") else d["n"] << 2, 1, 0),
        (d["row_exp_addr"], 1, 0, d["m"], d["row_vec"], 0),
        (d["col_exp_addr"], 1, 0, d["n"], d["col_vec"], 0),
    ]
    if only:
        # quantise-only: A is the M x N float32 matrix (aligned as C); no B, no vectors
        regions[0] = (d["a_addr"], d["m"], d["a_stride"], 4 * d["n"], 1, 0)
        regions[1] = regions[1][:4] + (0, 1)
        regions[3:5] = [r[:4] + (0, 0) for r in regions[3:5]]
    if d.get("tiles"):
        # the tile grids, rows right after one another (2: no stride alignment)
        gm, gn, gk = (-(-d[x] // TILE_BLOCK) for x in "mnk")
        regions[3:] = [(d["row_exp_addr"], gm, gk, gk, 1, 2),
                       (d["col_exp_addr"], gk, gn, gn, 1, 2)]
    if d.get("bfp8"):
        # C's tile grid (DESC_EPILOGUE.BFP8)
        gm, gn = (-(-d[x] // TILE_BLOCK) for x in "mn")
        regions.append((d["c_exp_addr"], gm, gn, gn, 1, 2))
    if d.get("relu") or d.get("mask_in"):
        # the ReLU mask (DESC_EPILOGUE.RELU, or MASK_IN's stored one): a bit per element,
        # rows of ceil(N / 8) bytes
        regions.append((d["mask_addr"], d["m"], d["mask_stride"], -(-d["n"] // 8), 1, 0))
    if d.get("bias"):
        # the bias (DESC_EPILOGUE.BIAS): a float32 per row (1) or per column
        regions.append((d["bias_addr"], 1, 0, 4 * (d["m"] if d["bias"] == 1 else d["n"]), 1,
                        0))
    return check_regions([r[:4] + (r[5],) for r in regions if r[4]], window_base,
                         window_limit, data_width, addr_width)


def check_dimensions(m: int, n: int, k: int) -> int:
    """The checker's first rules, on the dimensions: ``ZERO_DIMENSION``, then
    ``DIMENSION_TOO_LARGE`` (M or N above 65535), then ``K_TOO_LARGE``; 0 when all pass."""
    if m == 0 or n == 0 or k == 0:
        return int(ErrorCode.ZERO_DIMENSION)
    if m > 65535 or n > 65535:
        return int(ErrorCode.DIMENSION_TOO_LARGE)
    if k > 65535:
        return int(ErrorCode.K_TOO_LARGE)
    return 0


def check_regions(regions, window_base: int, window_limit: int, data_width: int = 128,
                  addr_width: int = 32) -> int:
    """The checker's rules for the memory regions of a descriptor: ``MISALIGNED`` (a base, or
    a stride that may not be packed, not a multiple of the bus word), then ``BAD_STRIDE`` (a
    stride shorter than its rows), then ``OUT_OF_WINDOW``; 0 when all pass.

    ``regions``: ``(base, rows, stride, bytes a row, may be packed)`` each (may be packed
    2: any stride, as a tile grid's)."""
    bpw = data_width // 8
    align = stride = window = False
    for base, rows, pitch, nbytes, packable in regions:
        # the last byte's offset, rounded up to a word (for an aligned stride, the rows
        # before the last plus the last's bytes rounded up)
        end = base + _ceil_to(((rows - 1) & 0xFFFF_FFFF) * pitch + nbytes, bpw)
        align |= bool(base % bpw or (pitch % bpw and not (
            packable == 2 or packable and packed_stride(pitch, bpw))))
        stride |= rows > 1 and pitch < nbytes
        window |= base < window_base or end > window_limit or end > 1 << addr_width
    if align:
        return int(ErrorCode.MISALIGNED)
    if stride:
        return int(ErrorCode.BAD_STRIDE)
    if window:
        return int(ErrorCode.OUT_OF_WINDOW)
    return 0


def chunk_align(rows: int, cols: int, data_width: int) -> int:
    """The step alignment of :class:`rtl.walker.Walker`'s K chunks: ``max(rows, cols, bus
    bytes)`` (the ``align`` of :func:`k_chunks`)."""
    return max(rows, cols, data_width // 8)


def ramp_start(rows: int, cols: int, data_width: int) -> int:
    """The first chunk of :class:`rtl.walker.Walker`'s ramp: the least multiple of
    :func:`chunk_align` that is at least ``rows + cols - 1``, the array's least interval
    between two tiles' read-outs (:attr:`rtl.systolic.SystolicArray.min_emit_interval`,
    one SLR group). A shorter first chunk leaves the array waiting on its own read-out
    rather than computing (a 16x16 array's block of 64 tiles at 16 steps: 64 read-outs of
    31 cycles, not 64 x 16 steps), and holds the block's first C back for as long."""
    align = chunk_align(rows, cols, data_width)
    return -(-(rows + cols - 1) // align) * align


#: ``DESC_FLAGS.CHUNK`` values: 0, the buffers' depth after a ramp in the first block; 1, 2
#: and 3, the depth, half and a quarter of it, balanced in every block (:func:`chunk_depth`).
CHUNK_CHOICES = (0, 1, 2, 3)


def chunk_depth(depth: int, chunk: int, rows: int, cols: int, data_width: int) -> int:
    """The longest K chunk of a descriptor whose ``DESC_FLAGS.CHUNK`` is ``chunk``: ``depth``
    for 0 and 1, ``depth / 2`` for 2, ``depth / 4`` for 3, never less than
    :func:`chunk_align` (a power of two, as ``depth`` is)."""
    if chunk not in CHUNK_CHOICES:
        raise ValueError(f"chunk must be one of {CHUNK_CHOICES}, not {chunk!r}")
    return max(depth >> max(0, chunk - 1), chunk_align(rows, cols, data_width))


def k_chunks(k: int, depth: int, align: int = 1, ramp: bool = False,
             balanced: bool = False, start: int | None = None) -> list[tuple[int, int]]:
    """The K chunks ``(k0, kc)`` a block is walked over, in order.

    ``k`` is cut into chunks of at most ``depth`` steps. With more than one, the first holds
    the remainder ``(k - 1) % depth + 1`` rounded up to a multiple of ``align`` (so that
    every later chunk starts on an aligned step: a row of a lane-run tile starts on a bus
    word), the middle ones ``depth`` and the last what is left (more than ``depth - align``).
    A short chunk last would leave the block's C write-back (issued in its last chunk) with
    little compute to hide behind; first, it also shortens the pipeline's fill.

    ``ramp`` (the descriptor's first block) starts with chunks of ``start`` (default
    ``align``; a multiple of it, :func:`ramp_start`), ``2 start``, ``4 start``, ... steps,
    each taken while it fits in ``depth`` and what is left after it is at least twice as
    long; the rest is cut as above. The first command then waits only
    for a short chunk's operands, and each next chunk's operands load while the previous
    one, half as long, computes: the array starts early instead of after a whole chunk's
    loads.

    ``balanced`` cuts instead, while more than ``depth`` steps are left, a chunk of half the
    short chunk plus ``depth``, rounded up to ``align``: a chunk ``(s + depth) / 2`` rather
    than ``s`` then ``depth``, so the chunks are about equal (576 at depth 512 -> 288 + 288,
    not 64 + 512). After a short chunk, the next one's loads — its first tile waits for all
    of a k-major span — have only the short chunk's compute to hide behind: at a block's
    start that was the previous block's last chunk, after a ramp its last (784 at depth 256
    from 32: 32, 64, 128, then 160, 224, 176, not 64, 256, 240). With ``ramp`` and
    ``balanced`` and no ramp step taken (``k`` under three ``align``), the first chunk is
    still the short-first cut (the walker has it a cycle after the descriptor), the rest
    balanced.

    The sums are int32 and exact in any order, so results do not depend on the chunks.
    :class:`rtl.walker.Walker` uses ``align =`` :func:`chunk_align`.
    """
    def short(rest):        # the remainder of a cut into depth steps, rounded up to align
        return (((rest - 1) % depth) | (align - 1)) + 1

    chunks, k0, size = [], 0, start or align
    while ramp and size <= depth and k - k0 - size >= 2 * size:
        chunks.append((k0, size))
        k0, size = k0 + size, 2 * size
    rest = k - k0
    if ramp and balanced and not chunks and rest > depth:
        first = short(rest)
        chunks.append((k0, first))
        k0, rest = k0 + first, rest - first
    while balanced and rest > depth:
        kc = -(-(short(rest) + depth) // (2 * align)) * align
        chunks.append((k0, kc))
        k0, rest = k0 + kc, rest - kc
    if rest <= depth:
        return chunks + [(k0, rest)]
    first = short(rest)
    return chunks + [(k0, first)] + [(k0 + r0, min(depth, rest - r0))
                                     for r0 in range(first, rest, depth)]


def block_chunks(k: int, depth: int, align: int, first: bool,
                 start: int | None = None) -> list[tuple[int, int]]:
    """The K chunks of one block as :class:`rtl.walker.Walker` cuts them: the descriptor's
    first block ramps (from ``start``, :func:`ramp_start`), then every block is balanced
    (:func:`k_chunks`)."""
    return k_chunks(k, depth, align, ramp=first, balanced=True, start=start)


def array_block_chunks(k: int, rows: int, cols: int, depth: int, data_width: int,
                       first: bool, chunk: int = 0, k_blocks: bool = False,
                       k_runs: tuple[int, ...] | None = None) -> list[tuple[int, int]]:
    """:func:`block_chunks` as the walker of a ``rows x cols`` array on a ``data_width``-bit
    bus cuts a block: aligned to :func:`chunk_align`, its ramp from :func:`ramp_start`.
    With ``chunk`` (``DESC_FLAGS.CHUNK``) not 0, no ramp: every block is cut balanced into
    chunks of at most :func:`chunk_depth` steps — about equal chunks, so that each chunk's
    loads run under the compute of one as long (a load-bound descriptor of one block: 256
    steps on an 8 x 16 array at depth 512 as 128 + 128, not the ramp's 32, 64 and 160,
    whose last chunk computes alone). With ``k_blocks`` (a descriptor with tile exponents
    on an ``Accelerator(k_blocks=True)``), one chunk per tile block of K
    (:data:`firmware.spec.regmap.TILE_BLOCK` steps, the last one shorter), or with
    ``k_runs`` one per run of K (a convolution's: a kernel offset's block of at most
    ``TILE_BLOCK`` channels, :meth:`sim.models.conv.ConvGeometry.k_runs`; their sum is
    ``k``)."""
    if k_blocks and k_runs is not None:
        starts = np.cumsum((0, *k_runs[:-1])).tolist()
        return list(zip(starts, k_runs, strict=True))
    if k_blocks:
        return [(k0, min(TILE_BLOCK, k - k0)) for k0 in range(0, k, TILE_BLOCK)]
    align = chunk_align(rows, cols, data_width)
    if chunk:
        return block_chunks(k, chunk_depth(depth, chunk, rows, cols, data_width), align,
                            first=False)
    return block_chunks(k, depth, align, first, start=ramp_start(rows, cols, data_width))


def block_side(field: int, block: int) -> int:
    """The side of a descriptor's reuse blocks: its ``block`` field if in ``1..block`` (the
    buffers' slots per operand), else ``block``."""
    return field if 1 <= field <= block else block


def column_order(m: int, n: int, k: int, rows: int, cols: int, depth: int,
                 side: int) -> bool:
    """Whether :class:`rtl.walker.Walker` walks a GEMM's blocks (``side`` tiles square) down
    the columns of blocks (M inner, keeping B's tiles from block to block) rather than along
    the rows (N inner, keeping A's): only where K fits one chunk (else nothing is kept and
    the rows are walked), and where B's re-reads would be the larger — there is more than
    one row of blocks, and one column of blocks, or an array with more columns than rows (a
    row of blocks then re-reads B ``cols / rows`` times as often as a column of blocks would
    A), or a square one with M > N."""
    more_m = -(-m // rows) > side
    more_n = -(-n // cols) > side
    return k <= depth and more_m and (not more_n or cols > rows or (cols == rows and m > n))


def block_order(m: int, n: int, k: int, rows: int, cols: int, depth: int, data_width: int,
                side: int, chunk: int = 0, k_blocks: bool = False,
                k_runs: tuple[int, ...] | None = None) -> list[tuple[int, int, bool, bool]]:
    """The blocks of a GEMM in :class:`rtl.walker.Walker`'s order: ``(m_blk, n_blk, keep_a,
    keep_b)``, the block's first row and column and whether it keeps the A (B) tiles of
    the block before it instead of loading them — when that block was one K chunk and shares
    its rows of blocks (columns, in :func:`column_order`). ``k_blocks``: K cut into tile
    blocks, or ``k_runs`` (:func:`array_block_chunks`)."""
    ms, ns = range(0, m, side * rows), range(0, n, side * cols)
    down = column_order(m, n, k, rows, cols, TILE_BLOCK if k_blocks else
                        chunk_depth(depth, chunk, rows, cols, data_width), side)
    order = [(mb, nb) for nb in ns for mb in ms] if down else [(mb, nb) for mb in ms for nb in ns]
    # whether the first block, and those after it, are one K chunk
    one = [len(array_block_chunks(k, rows, cols, depth, data_width, first=f, chunk=chunk,
                                  k_blocks=k_blocks, k_runs=k_runs)) == 1
           for f in (True, False)]
    out = [(*order[0], False, False)] if order else []
    for idx in range(1, len(order)):
        (pm_, pn_), (mb, nb) = order[idx - 1], order[idx]
        keep = one[idx > 1] and (pn_ == nb if down else pm_ == mb)
        out.append((mb, nb, keep and not down, keep and down))
    return out


def tile_order(bm: int, bn: int, transpose_b: bool) -> list[tuple[int, int]]:
    """The C tiles ``(i, j)`` of a ``bm x bn`` block in :class:`rtl.walker.Walker`'s order:
    ``j`` inner, or ``i`` inner where B is transposed.

    A lane-run operand (A as stored, B transposed) loads a tile with the first command that
    uses it, so the first pass over the inner index waits for one such load per tile. With
    ``j`` inner that is B's tiles where B is lane-run (transposed): a row of tiles each
    waiting for a B tile that takes longer to read than to compute. Walking ``i`` inner
    there loads each B tile once per column of ``bm`` tiles (A's tiles, as stored, are
    loaded down the first column; transposed, as one span). Sums and C do not depend on the
    order; only when the operands arrive does."""
    return [(i, j) for j in range(bn) for i in range(bm)] if transpose_b else \
        [(i, j) for i in range(bm) for j in range(bn)]


def walk_chunks(m: int, n: int, k: int, rows: int, cols: int, depth: int, data_width: int,
                side: int, parity: tuple[int, int] = (0, 0), chunk: int = 0,
                k_blocks: bool = False, k_runs: tuple[int, ...] | None = None,
                k_walked: tuple[tuple[bool, ...], ...] | None = None,
                marks: list | None = None, replays: int = 0):
    """The K chunks of a GEMM in :class:`rtl.walker.Walker`'s order, each with its block and
    the buffer slot parities of its operands: ``(m_blk, n_blk, keep_a, keep_b, k0, kc,
    a_par, b_par)`` (:func:`block_order`, :func:`array_block_chunks`, ``chunk`` its
    ``DESC_FLAGS.CHUNK``). Each operand goes to the other set of slots from chunk to chunk,
    but stays in its set for a block that keeps it. ``k_blocks``: K cut into tile blocks,
    or into ``k_runs``; ``k_walked`` (with ``k_runs``, per block of columns: which kernel
    offsets it walks, each an equal share of the runs, :func:`sim.models.conv.
    walked_offsets`) leaves out the runs of the offsets a block skips, which take no
    slots; ``marks``, a list, is given per chunk a pair: the offsets skipped just before
    it, and whether it is a replay. ``replays`` (a backward-data convolution through a max
    pool's argmax, its window's phases less one): after each block's last chunk as many
    chunks of one step (``k0 = k - 1``, zeros in B), which add to the kept sums and write
    them at the next phase; no block then keeps an operand.

    Returns the chunks and the parities ``(A's, B's)`` after the last one.
    """
    a_par, b_par = parity
    blocks = block_order(m, n, k, rows, cols, depth, data_width, side, chunk, k_blocks,
                         k_runs)
    out = []
    per = len(k_runs) // len(k_walked[0]) if k_walked else 1
    skipped = 0
    for idx, (m_blk, n_blk, keep_a, keep_b) in enumerate(blocks):
        for r, (k0, kc) in enumerate(array_block_chunks(
                k, rows, cols, depth, data_width, first=idx == 0, chunk=chunk,
                k_blocks=k_blocks, k_runs=k_runs)):
            if k_walked is not None and not k_walked[n_blk // (side * cols)][r // per]:
                skipped += r % per == 0
                continue
            last = k0 + kc == k
            for rep in range(1 + replays * last):
                if marks is not None:
                    marks.append((0 if rep else skipped, bool(rep)))
                out.append((m_blk, n_blk, keep_a and not replays, keep_b and not replays,
                            k - 1 if rep else k0, 1 if rep else kc, a_par, b_par))
                nxt = (blocks[idx + 1] if last and rep == replays and idx + 1 < len(blocks)
                       and not replays else None)
                a_par ^= not (nxt and nxt[2])
                b_par ^= not (nxt and nxt[3])
            skipped = 0
    return out, (a_par, b_par)


def loads_b_first(transpose_a: bool, a_packed: bool, transpose_b: bool,
                  b_packed: bool) -> bool:
    """The rule of :func:`b_first` on whether each operand is stored packed (rows under a
    bus word): B alone packed and k-major (as stored). The performance model applies it to
    the layout the driver chooses."""
    return not transpose_b and b_packed and not (transpose_a and a_packed)


def b_first(desc: dict, data_width: int) -> bool:
    """Whether :class:`rtl.walker.Walker` offers a command's B load before its A load: where
    B alone is stored packed, k-major with a stride under a bus word (its gearbox makes a
    row a cycle, slower than the bus: read behind A's words it would start last, and the
    command's compute wait for it; read first, it runs while A's words arrive)."""
    bpw = data_width // 8
    return loads_b_first(desc["transpose_a"], desc["a_stride"] < bpw, desc["transpose_b"],
                         desc["b_stride"] < bpw)


def walk(desc: dict, rows: int, cols: int, depth: int, block: int, data_width: int,
         tag_width: int | None = None, parity: int | tuple[int, int] = 0, bank: int = 0):
    """What :class:`rtl.walker.Walker` issues for one (checked) descriptor.

    Blocks of ``b x b`` tiles, ``b`` the descriptor's ``block`` (if present and in
    ``1..block``; else ``block``, the buffers' slots), chunk by chunk as
    :func:`walk_chunks` orders them (K cut as its ``chunk`` says) and assigns their slots;
    each command's A load, then B's, or B's first where :func:`b_first`.

    With ``tiles`` (a descriptor of a ``Walker(k_blocks=True)``; its commands then carry
    ``tiles`` too): K chunks of one tile block, and before each chunk, for each tile ``i``
    (``j``) of the block, a packed one-byte load of the exponent in A's (B's) grid that the
    chunk uses. Each time it loads exponents (before each chunk, or a block's vectors) it
    loads them into the other bank of exponent registers than the last time: the tags'
    top bit and the ``bank`` of every command after them (``bank``: the bank of the last
    exponents before this descriptor).

    Returns ``(commands, loads, writes, parity, bank)``: the payloads on ``o_cmd``,
    ``o_load`` and ``o_write`` in order, the slot parities ``(A's, B's)`` the next
    descriptor starts with (``parity``: both, or such a pair) and the bank of its last
    exponents.
    """
    R, C, D, BL = rows, cols, depth, block
    side = block_side(desc.get("block", 0), BL)
    bpw = data_width // 8
    banked = "tiles" in desc          # (a walker of K blocks: two banks of exponents)
    halves = banked and C == 2 * TILE_BLOCK
    tag_width = ((1 + max(1, BL.bit_length() - 1) + halves + banked) if tag_width is None
                 else tag_width)
    m, n, k = desc["m"], desc["n"], desc["k"]
    ta, tb = desc["transpose_a"], desc["transpose_b"]
    cmds, loads, writes = [], [], []

    def load(path, lanes, lane_run, v, x0, base, stride, k0, kc, tag=0, exp=False, span=1,
             v_span=None):
        v_k = v if v_span is None else v_span
        job = {"base": base, "stride": stride, "path": path, "tag": tag}
        if lane_run:
            job.update(row0=x0, col=k0, rows=v, nzero=lanes - v, nwords=-(-kc // bpw),
                       nbeats=-(-kc // lanes), valid=kc, sel=0)
        else:
            off = x0 % bpw if lanes <= bpw else 0
            job.update(row0=0 if exp else k0, col=x0 // bpw * bpw, rows=1 if exp else kc,
                       nzero=0, nwords=-(-(off + v_k) // bpw), nbeats=span, valid=v_k,
                       sel=off // lanes if lanes <= bpw else 0)
        loads.append(job)

    first_b = b_first(desc, data_width)
    tiles = "tiles" in desc
    kb = tiles and desc["tiles"]
    chunks, parity = walk_chunks(m, n, k, R, C, D, data_width, side,
                                 (parity, parity) if isinstance(parity, int) else parity,
                                 chunk=desc.get("chunk", 0), k_blocks=bool(kb))
    T = TILE_BLOCK
    gm, gn, gk = (-(-x // T) for x in (m, n, k))
    for m_blk, n_blk, keep_a, keep_b, k0, kc, a_par, b_par in chunks:
        bm = min(-(-(m - m_blk) // R), side)
        bn = min(-(-(n - n_blk) // C), side)
        if banked and (kb or ((desc["row_vec"] or desc["col_vec"]) and k0 == 0)):
            bank ^= 1
        top = bank << (tag_width - 1) if banked else 0       # (an exponent's bank)
        if kb:
            def grid_byte(path, xb, tag, kbi=k0 // T):
                """The one-byte load of grid byte (tile block xb, K block kbi)."""
                if path == 0:
                    off = kbi * gm + xb if ta else xb * gk + kbi
                else:
                    off = xb * gk + kbi if tb else kbi * gn + xb
                loads.append({"base": desc["row_exp_addr" if path == 0 else "col_exp_addr"],
                              "stride": 1, "path": path, "tag": tag, "row0": 0, "col": off,
                              "rows": 1, "nzero": 0, "nwords": 1, "nbeats": 1, "valid": 1,
                              "sel": 0})

            for path, count, x_blk, lanes in ((0, bm, m_blk, R), (1, bn, n_blk, C)):
                for i in range(count):
                    grid_byte(path, (x_blk + i * lanes) // T, 1 | i << 1 | top)
            # a B tile's columns from TILE_BLOCK on, in the next tile block: its exponent
            # there too, tagged with the top bit
            for j in range(bn if halves else 0):
                x0 = n_blk + j * C
                if n - x0 > T:
                    grid_byte(1, x0 // T + 1, 1 | j << 1 | 1 << (tag_width - 2) | top)
        for i in range(bm if desc["row_vec"] and k0 == 0 and not kb else 0):
            x0 = m_blk + i * R
            load(0, R, False, min(m - x0, R), x0, desc["row_exp_addr"], 0, 0, 0,
                 tag=1 | i << 1 | top, exp=True)
        for j in range(bn if desc["col_vec"] and k0 == 0 and not kb else 0):
            x0 = n_blk + j * C
            load(1, C, False, min(n - x0, C), x0, desc["col_exp_addr"], 0, 0, 0,
                 tag=1 | j << 1 | top, exp=True)
        last = k0 + kc == k
        for i, j in tile_order(bm, bn, tb):
            m0, n0 = m_blk + i * R, n_blk + j * C
            load_a = not keep_a and ((i == 0 and j == 0) if ta else j == 0)
            load_b = not keep_b and (i == 0 if tb else (i == 0 and j == 0))
            cmds.append({
                "k": kc, "a_slot": i + BL * a_par if BL > 1 else a_par,
                "b_slot": j + BL * b_par if BL > 1 else b_par,
                "load_a": int(load_a), "load_b": int(load_b),
                "a_extra": bm - 1 if ta else 0, "b_extra": 0 if tb else bn - 1,
                "emit": int(last), "store": int(not last), "add": int(k0 != 0),
                "acc_slot": i * BL + j, "i": i, "j": j,
                **{f: desc[f] for f in CMD_DESC_FIELDS},
                **({"tiles": desc["tiles"], "bank": bank} if tiles else {}),
                # a middle K block: A's rows inside M read out where fewer than R (the
                # datapath's read_rows; 0: all)
                **({"read_rows": m - m0 if desc["tiles"] and not last and k0 != 0
                    and m - m0 < R else 0} if tiles else {})})
            if last:
                writes.append({"m0": m0, "n0": n0})
            jobs = []                 # (A's, then B's; B's first where b_first)
            if load_a:
                jobs.append(((0, R, not ta, min(m - m0, R), m0, desc["a_addr"],
                              desc["a_stride"], k0, kc), min(m - m_blk, side * R), bm))
            if load_b:
                jobs.append(((1, C, tb, min(n - n0, C), n0, desc["b_addr"],
                              desc["b_stride"], k0, kc), min(n - n_blk, side * C), bn))
            for args, v_span, span in (jobs[::-1] if first_b else jobs):
                load(*args, span=span, v_span=v_span)
    return cmds, loads, writes, parity, bank


def _sel_bits(data_width: int, lanes: int) -> int:
    return (max(2, data_width // 8 // lanes) - 1).bit_length()


def load_sequence(jobs, data_width: int, addr_width: int, a_lanes: int, b_lanes: int):
    """What :class:`rtl.loader.LoadSequencer` sends for ``jobs`` (load job payloads).

    A job's rows are one read command each of ``nwords`` words, ``stride`` bytes apart, with a
    routing entry of ``rows`` rows; rows that follow one another in memory (``stride ==
    nwords * bus bytes``, ``rows * nwords < 2**24``) are one command of ``rows * nwords``
    words with a routing entry of one row.

    Rows closer than a bus word (``0 < stride < bus bytes``) are *packed*: one command from
    the first row's word to the word of the last row's last byte used (``sel * lanes +
    valid`` bytes of a row, ``valid`` where ``lanes >= bus bytes``), its address rounded down
    to a word, a routing entry of one row, and a gearbox job with ``pack`` set, ``off`` the
    first row's byte in its word, ``pstride`` the stride, ``in_words`` the command's words
    and ``nwords`` 1 (:func:`sim.models.datapath.gearbox`). A packed job's rows must each use fewer
    bytes than a word (``sel * lanes + valid < bus bytes``; ValueError otherwise): the
    walker's do, a packed matrix's rows being no longer than their stride.

    Returns ``(rd_cmds, a_jobs, b_jobs, routes)``.
    """
    bpw = data_width // 8
    rd, gb, routes = [], ([], []), []
    for i, j in enumerate(jobs):
        lanes = (a_lanes, b_lanes)[j["path"]]
        sel = j["sel"] & ((1 << _sel_bits(data_width, lanes)) - 1)
        addr = (j["base"] + j["row0"] * j["stride"] + j["col"]) % (1 << 64)
        packed = bool(j["rows"]) and packed_stride(j["stride"], bpw)
        off = addr % bpw if packed else 0
        used = j["valid"] + (sel * lanes if lanes < bpw else 0)
        if packed and used >= bpw:
            raise ValueError(f"jobs[{i}] is packed (stride {j['stride']}) but its rows use "
                             f"{used} bytes: a packed row must use fewer than {bpw}")
        in_words = (off + (j["rows"] - 1) * j["stride"] + used + bpw - 1) // bpw \
            if packed else 0
        gb[j["path"]].append({"nrows": j["rows"] & 0xFFFF, "nzero": j["nzero"] & 0xFFFF,
                              "nwords": 1 if packed else j["nwords"], "nbeats": j["nbeats"],
                              "valid": j["valid"], "sel": sel, "tag": j["tag"],
                              "pack": int(packed), "off": off,
                              "pstride": j["stride"] if packed else 0,
                              "in_words": in_words % (1 << 24)})
        if j["rows"]:
            routes.append({"path": j["path"], "rows": j["rows"] & 0xFFFF})
        if packed:
            routes[-1]["rows"] = 1
            rd.append({"addr": (addr - off) % (1 << addr_width), "beats": in_words % (1 << 24)})
            continue
        words = j["rows"] * j["nwords"]
        if j["rows"] and j["nwords"] and j["stride"] == j["nwords"] * (data_width // 8) \
                and words < 1 << 24:
            # rows that follow one another in memory: one command, one routing entry's row
            routes[-1]["rows"] = 1
            rd.append({"addr": addr % (1 << addr_width), "beats": words})
            continue
        for _ in range(j["rows"]):
            rd.append({"addr": addr % (1 << addr_width), "beats": j["nwords"]})
            addr = (addr + j["stride"]) % (1 << 64)
    return rd, gb[0], gb[1], routes


def stripe(job: dict, min_words: int = STRIPE_MIN_WORDS, ways: int = 2):
    """What :class:`rtl.stripe.LoadStriper` makes of one load job: ``(jobs, merge)``.

    A job of at least ``ways`` rows of at least ``min_words`` words whose stride times
    ``ways`` fits 32 bits is dealt to the ``ways`` load sequencers in turn: way ``w`` gets
    rows ``w, w + ways, ...`` (way 0 also the zero rows), as a job at ``ways`` times the
    stride whose first row is where the job's row ``w`` is: with ``row0 + w = ways * q + r``,
    ``row0 = q`` and ``base + r * stride``. ``jobs`` is the list of the ways' jobs (a job not
    striped: ``[job]``, to way 0 alone); ``merge`` the :class:`rtl.stripe.VectorInterleave`
    entry."""
    striped = (job["rows"] >= ways and job["nwords"] >= min_words
               and job["stride"] * ways < 1 << 32)
    merge = {"nrows": job["rows"], "nzero": job["nzero"], "nbeats": job["nbeats"],
             "striped": int(striped)}
    if not striped:
        return [dict(job)], merge
    out = []
    for w in range(ways):
        q, r = divmod(job["row0"] + w, ways)
        out.append({**job, "base": (job["base"] + r * job["stride"]) % (1 << 64),
                    "row0": q, "stride": ways * job["stride"],
                    "rows": (job["rows"] + ways - 1 - w) // ways,
                    "nzero": job["nzero"] if w == 0 else 0})
    return out, merge


def interleave(merges, *inputs):
    """The vectors :class:`rtl.stripe.VectorInterleave` sends for ``merges`` (its job
    entries), taking from ``inputs`` (one iterable of vectors per way) in turn: each row read
    of a striped job from input ``row mod ways``, every other row from the first; ``nbeats``
    vectors a row."""
    inputs, out = [iter(v) for v in inputs], []
    for j in merges:
        for r in range(j["nrows"] + j["nzero"]):
            src = inputs[r % len(inputs) if j["striped"] and r < j["nrows"] else 0]
            out += [next(src) for _ in range(j["nbeats"])]
    return out


def route(words, routes):
    """Which of ``words`` (``(data, last)`` pairs) :class:`rtl.router.ReadRouter` sends to the A
    and to the B gearbox, by ``routes`` (``{"path", "rows"}`` entries). Returns two lists of
    data."""
    out = ([], [])
    words = list(words)
    pos = 0
    for r in routes:
        lasts = 0
        while lasts < r["rows"]:
            data, last = words[pos]
            pos += 1
            out[r["path"]].append(data)
            lasts += bool(last)
    return out


def issue(program, rows: int, cols: int):
    """The datapath commands :class:`rtl.issue.CommandIssue` sends.

    ``program`` is the order of events the walker's protocol guarantees: ``("exp", path,
    index, vector)`` (an exponent vector arriving from gearbox ``path``) and ``("cmd",
    tile_command)``, each command with its descriptor's :data:`CMD_DESC_FIELDS`. Operand
    vectors pass through unchanged (not modelled here). A command with ``tiles`` (a
    ``CommandIssue(k_blocks=True)``) gives every lane lane 0 of its vectors and sets
    ``kblock``; with ``cols == 2 * TILE_BLOCK`` B's lanes from ``TILE_BLOCK`` on take lane 0
    of the vector of event ``("exp", 1, index, vector, True)`` (the tag's bit below the
    bank's set) instead. With ``k_blocks`` the registers are two banks: an event
    ``("exp", path, index, vector, hi, bank)`` writes bank ``bank`` (0 where not given),
    and a command reads its ``bank``'s.
    """
    regs = {}                    # (bank, A's / B's / B's second tile block's) -> registers
    out = []
    for event in program:
        if event[0] == "exp":
            _, path, index, vector, *more = event
            hi, bank = (list(more) + [False, 0])[:2]
            regs.setdefault((bank, 2 if hi else path), {})[index] = [int(x) for x in vector]
            continue
        t = desc = event[1]
        bank = t.get("bank", 0)
        regs_a, regs_b, regs_hi = (regs.get((bank, p), {}) for p in (0, 1, 2))
        row = regs_a.get(t["i"], [0] * rows) if desc["row_vec"] else [desc["row_exp"]] * rows
        col = regs_b.get(t["j"], [0] * cols) if desc["col_vec"] else [desc["col_exp"]] * cols
        if t.get("tiles"):
            row = [regs_a.get(t["i"], [0])[0]] * rows
            col = [regs_b.get(t["j"], [0])[0]] * cols
            if cols == 2 * TILE_BLOCK:
                col[TILE_BLOCK:] = [regs_hi.get(t["j"], [0])[0]] * TILE_BLOCK
        out.append({"k": t["k"], "a_slot": t["a_slot"], "b_slot": t["b_slot"],
                    "load_a": t["load_a"], "load_b": t["load_b"], "a_extra": t["a_extra"],
                    "b_extra": t["b_extra"], "transpose_a": desc["transpose_a"],
                    "transpose_b": desc["transpose_b"], "clear": 1, "emit": t["emit"],
                    "store": t["store"], "add": t["add"], "acc_slot": t["acc_slot"],
                    "raw": desc["raw"], "row_exp": row, "col_exp": col,
                    **({"kblock": t["tiles"], "read_rows": t.get("read_rows", 0)}
                       if "tiles" in t else {})})
    return out


def write_back(jobs, c_rows, desc: dict, rows: int, cols: int, data_width: int,
               addr_width: int, phase: int = 0, ports: int = 1):
    """What :class:`rtl.writeback.WriteBack` sends for ``jobs`` (``{"m0", "n0"}``) and the C
    rows (each ``cols`` uint32 words), the jobs' tiles counted from reset: of tile ``t`` it
    takes rows ``f``, ``f + ports``, ... below ``rows`` with ``f = (phase - t * rows) %
    ports``: row ``i`` of the datapath's stream goes to port ``i % ports`` (so ``f`` is
    ``phase`` where ``ports`` divides ``rows``; else the deal runs on across tiles and a
    tile's rows here are a row more or fewer as ``f`` rotates).

    Returns ``(wr_cmds, words)``: ``{"addr", "beats"}`` and ``(data, strb)`` integers.
    """
    bpw = data_width // 8
    row_bytes = 4 * cols
    cmds, words = [], []
    c_rows = iter(c_rows)
    for t, job in enumerate(jobs):
        m0, n0 = job["m0"], job["n0"]
        n_valid = min(desc["n"] - n0, cols)
        nwords = 1 if row_bytes <= bpw else -(-4 * n_valid // bpw)
        for r in range((phase - t * rows) % ports, rows, ports):
            addr = (desc["c_addr"] + (m0 + r) * desc["c_stride"] + 4 * n0 // bpw * bpw) \
                % (1 << 64)
            row = next(c_rows)
            if m0 + r < desc["m"]:
                cmds.append({"addr": addr % (1 << addr_width), "beats": nwords})
                row = np.asarray(row, np.uint32)
                bits = int.from_bytes(row.astype("<u4").tobytes(), "little")
                strb = sum(0xF << 4 * c for c in range(cols) if c < n_valid)
                if row_bytes >= bpw:
                    for w in range(nwords):
                        words.append(((bits >> 8 * bpw * w) % (1 << data_width),
                                      (strb >> bpw * w) % (1 << bpw)))
                else:
                    off = 4 * n0 % bpw
                    words.append(((bits << 8 * off) % (1 << data_width),
                                  (strb << off) % (1 << bpw)))
    return cmds, words
