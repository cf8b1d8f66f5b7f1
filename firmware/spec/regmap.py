"""The accelerator's register map, described once.

Everything else is derived from :data:`REGISTERS`: the AXI4-Lite register block in
:mod:`rtl.csr`, the driver's offsets and field helpers (this module, used by
:class:`firmware.Device`), and the register table of the documentation
(``python -m firmware.spec.regmap`` prints it).

This module is plain Python on purpose: the board-side driver imports it without Amaranth.

Access kinds
------------
``ro``   read-only, driven by the hardware.
``rw``   read-write, holds what the host wrote.
``w1p``  write-1-pulse: writing 1 to a bit makes a one-cycle pulse; reads as 0.
``w1c``  write-1-clear: a bit set by the hardware stays set until the host writes 1 to it.

Descriptors: the host writes one GEMM into the ``DESC_*`` registers and writes
``CTRL.ENQUEUE``; the engine copies the staged descriptor into its queue (so the staging
registers may be rewritten at once) and runs queued descriptors in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

__all__ = ["Field", "Register", "REGISTERS", "ErrorCode", "MAGIC", "VERSION", "TILE_BLOCK",
           "WRITE_PORTS",
           "READ_PORTS", "STRIPE_MIN_WORDS", "check_write_ports", "check_read_ports",
           "packed_stride", "stored_packed", "by_name",
           "offset", "field_value", "pack", "markdown_table"]

#: ``ID`` register contents: ASCII "BFP8".
MAGIC = 0x42465038
#: Register map version (major << 16 | minor): changes when the map does.
VERSION = 0x0001_0015

#: Side of the number format's square tile blocks (``CONFIG_FEATURES.TILE_LOG2``): BFP8 tile
#: blocks, :mod:`sim.models.bfp`.
TILE_BLOCK = 32

#: The AXI write port counts a build may have (``CONFIG_BUS.WRITE_PORTS``; at most the
#: array's rows): the RTL, the functional model, the performance model and the command lines
#: take these. Six is what a Zynq UltraScale+ PS offers the fabric for bulk traffic
#: (S_AXI_HP0..3_FPD and S_AXI_HPC0..1_FPD, UG1085); the Zynq-7000 PS has four HP ports.
WRITE_PORTS = (1, 2, 3, 4, 5, 6)


def check_write_ports(write_ports, rows: int | None = None) -> int:
    """``write_ports`` if it is one of :data:`WRITE_PORTS` (and at most ``rows``: a port
    takes whole rows of a C tile), else ValueError naming it."""
    if write_ports not in WRITE_PORTS or isinstance(write_ports, bool):
        raise ValueError(f"write_ports must be one of {', '.join(map(str, WRITE_PORTS))}, "
                         f"not {write_ports!r}")
    if rows is not None and write_ports > rows:
        raise ValueError(f"write_ports ({write_ports}) must be at most rows ({rows})")
    return write_ports


#: The AXI read port counts a build may have (``CONFIG_BUS.READ_PORTS``): with 2, A is read
#: through ``mem_r`` and B through ``mem_r1``, each with a DMA reader of its own; with 3, B's
#: rows are striped over ``mem_r1`` (even rows) and ``mem_r2`` (odd rows); with 4, over
#: ``mem_r1``, ``mem_r2`` and ``mem_r3`` (rows 0, 1, 2 mod 3); with 5, over ``mem_r1`` to
#: ``mem_r4`` (rows 0 to 3 mod 4).
READ_PORTS = (1, 2, 3, 4, 5)
#: With 3 to 5 read ports, a B load job is striped only when each of its rows is at least
#: this many bus words. A row is one read burst, and a port's bursts in flight bound how many
#: it reads a cycle however short they are: rows of two words (a convolution's B tile, 32
#: bytes on a 16-byte bus) striped over three ports are read about three times as fast as
#: on one. A row of one word is not striped (a job of rows that follow
#: one another in memory is read as one long command on one port instead). Stated here,
#: without Amaranth, for the RTL and the performance model alike.
STRIPE_MIN_WORDS = 2


def packed_stride(stride: int, bus_bytes: int) -> bool:
    """Whether an A or B operand whose rows are ``stride`` bytes apart is *packed*: rows
    closer than a bus word (``0 < stride < bus_bytes``), read as one run of words from the
    first row's word to the last row's last byte and realigned a row a cycle
    (:class:`rtl.loader.LoadSequencer`, :class:`rtl.gearbox.Gearbox`). Such a stride is
    legal for A and B only (``ErrorCode.MISALIGNED`` for C's). The hardware's rule, stated
    once for the models, the checker's models and the driver."""
    return 0 < stride < bus_bytes


def stored_packed(row_bytes: int, itemsize: int, bus_bytes: int) -> bool:
    """Whether :meth:`firmware.Device.empty` stores a matrix packed (its stride its rows'
    bytes, a :func:`packed_stride`): an int8 matrix whose rows are shorter than a bus word.
    Any other matrix's rows start on a word."""
    return itemsize == 1 and row_bytes < bus_bytes


def check_read_ports(read_ports) -> int:
    """``read_ports`` if it is one of :data:`READ_PORTS`, else ValueError naming it."""
    if read_ports not in READ_PORTS or isinstance(read_ports, bool):
        raise ValueError(f"read_ports must be 1, 2, 3, 4 or 5, not {read_ports!r}")
    return read_ports


@dataclass(frozen=True)
class Field:
    name: str
    lsb: int
    width: int
    doc: str

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.lsb


@dataclass(frozen=True)
class Register:
    name: str
    offset: int
    access: str
    doc: str
    fields: tuple[Field, ...] = field(default_factory=tuple)

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"register {self.name} has no field {name!r}")


def _reg(name, offset, access, doc, *fields):
    return Register(name, offset, access, doc, tuple(Field(*f) for f in fields))


class ErrorCode(IntEnum):
    """``STATUS.ERROR_CODE`` values: why the engine stopped."""

    NONE = 0
    ZERO_DIMENSION = 1       # M, N or K is zero
    K_TOO_LARGE = 2          # K above 65535
    MISALIGNED = 3           # an address, or a stride (A, B: one of a word or more), not a
    #                          multiple of the bus width
    OUT_OF_WINDOW = 4        # a transfer would leave [WINDOW_BASE, WINDOW_LIMIT)
    BAD_STRIDE = 5           # a row stride shorter than the row
    READ_ERROR = 6           # SLVERR/DECERR on a read
    WRITE_ERROR = 7          # SLVERR/DECERR on a write
    QUEUE_OVERFLOW = 8       # ENQUEUE while the queue was full
    DIMENSION_TOO_LARGE = 9  # M or N above 65535
    PROTOCOL_ERROR = 10      # the memory broke AXI (RLAST not on a burst's last beat)
    UNSUPPORTED = 11         # DESC_EPILOGUE asks for what CONFIG_FEATURES does not offer
    NONFINITE = 12           # a value to quantise to BFP8 is inf or NaN
    BAD_CHAIN = 13           # a descriptor chain's entry writes what a chain may not

    @property
    def meaning(self) -> str:
        return _ERROR_MEANINGS[self]


_ERROR_MEANINGS = {
    ErrorCode.NONE: "no error",
    ErrorCode.ZERO_DIMENSION: "a dimension (M, N or K) is zero",
    ErrorCode.K_TOO_LARGE: "K exceeds 65535 (a descriptor's limit; sums stay exact to 131071)",
    ErrorCode.MISALIGNED: "an address, or a row stride (of A and B: one of a bus word or "
                          "more), is not aligned to the bus width",
    ErrorCode.OUT_OF_WINDOW: "an access would fall outside the programmed address window",
    ErrorCode.BAD_STRIDE: "a row stride is shorter than the row it steps over",
    ErrorCode.READ_ERROR: "the memory answered a read with SLVERR or DECERR",
    ErrorCode.WRITE_ERROR: "the memory answered a write with SLVERR or DECERR",
    ErrorCode.QUEUE_OVERFLOW: "a descriptor was enqueued while the queue was full",
    ErrorCode.DIMENSION_TOO_LARGE: "M or N exceeds 65535",
    ErrorCode.PROTOCOL_ERROR: "the memory broke the AXI protocol (an RLAST not on the last "
                              "beat of its burst)",
    ErrorCode.UNSUPPORTED: "the descriptor asks for an epilogue or tile exponents this build "
                           "does not have (CONFIG_FEATURES)",
    ErrorCode.NONFINITE: "a value to quantise to BFP8 tile blocks is inf or NaN",
    ErrorCode.BAD_CHAIN: "a descriptor chain's entry writes a register other than a DESC_* "
                         "one, or CTRL other than ENQUEUE",
}


def _addr(prefix, offset, what):
    return [
        _reg(f"{prefix}_LO", offset, "rw", f"{what}, bits 31..0 (byte address)"),
        _reg(f"{prefix}_HI", offset + 4, "rw", f"{what}, bits 63..32"),
    ]


def _counter(prefix, offset, what):
    return [
        _reg(f"{prefix}_LO", offset, "ro", f"{what}, bits 31..0 (reading LO latches HI)"),
        _reg(f"{prefix}_HI", offset + 4, "ro", f"{what}, bits 63..32 (as latched)"),
    ]


_IRQ_FIELDS = (("DONE", 0, 1, "a descriptor finished"),
               ("ERROR", 1, 1, "the engine stopped on an error"))

#: Every register of the map, in address order: the one description the RTL's register block,
#: the driver, the documentation and the tests are derived from.
REGISTERS: tuple[Register, ...] = tuple([
    _reg("ID", 0x000, "ro", "Identification: 0x42465038 (\"BFP8\")"),
    _reg("VERSION", 0x004, "ro", "Register map version (major << 16 | minor)"),
    _reg("CONFIG_ARRAY", 0x008, "ro", "Systolic array shape",
         ("ROWS", 0, 16, "array rows"), ("COLS", 16, 16, "array columns")),
    _reg("CONFIG_BUFFER", 0x00C, "ro", "On-chip buffers",
         ("DEPTH", 0, 16, "largest K of one tile"),
         ("QUEUE", 16, 8, "descriptor queue depth"),
         ("PACKING", 24, 4, "MACs per DSP slice"),
         ("BLOCK_LOG2", 28, 4, "log2 of the largest reuse block's side in C tiles")),
    _reg("CONFIG_BUS", 0x010, "ro", "Memory bus",
         ("DATA_WIDTH", 0, 16, "AXI data width in bits"),
         ("ADDR_WIDTH", 16, 8, "AXI address width in bits"),
         ("WRITE_PORTS", 24, 4, "AXI4 write ports C rows are dealt to (mem_w, mem_w1, ...)"),
         ("READ_PORTS", 28, 4, "AXI4 read ports: 1 (mem_r reads A and B), 2 (mem_r1 reads B) "
                                "3 (B's rows striped over mem_r1 and mem_r2), 4 (over "
                                "mem_r1, mem_r2 and mem_r3) or 5 (over mem_r1 to mem_r4)")),
    _reg("CONFIG_DMA", 0x014, "ro", "DMA bursts",
         ("BURST_BEATS", 0, 9, "longest burst each DMA master issues, in beats (the memory "
                               "port's limit: 16 on AXI3 ports)"),
         ("OUTSTANDING", 16, 8, "bursts each DMA master keeps in flight")),
    _reg("CONFIG_FEATURES", 0x018, "ro", "Optional parts of the build",
         ("EPILOGUE", 0, 1, "the write-back epilogue: DESC_EPILOGUE's bias, ReLU, masks and "
                            "BFP8 output, and quantise-only descriptors"),
         ("K_BLOCKS", 1, 1, "operands with tile exponents (DESC_EPILOGUE.A_TILES, B_TILES)"),
         ("FP32", 2, 1, "where EPILOGUE is 0: RELU, BIAS and MASK_IN also on a float32 C, "
                        "and SGD on a float32 C of one row (M = 1, a bias vector)"),
         ("CONV", 3, 1, "convolution descriptors (DESC_CONV): forward, backward-data and "
                        "weight-gradient implicit GEMMs"),
         ("POOL", 4, 1, "pooling on a convolution's write path (DESC_POOL)"),
         ("CHAIN", 5, 1, "descriptor chains in memory (CTRL.RUN_CHAIN)"),
         ("ADD", 6, 1, "a residual's sum on a convolution's write path (DESC_CONV.ADD)"),
         ("CONV_FORWARD", 7, 1, "where CONV is 0: forward convolutions (DESC_CONV.MODE 1) "
                                "with tile exponents, no pooling stage or residual sum, "
                                "and the batch a multiple of CONFIG_ARRAY.COLS"),
         ("CONV_BACKWARD_DATA", 12, 1, "where CONV is 0: backward-data convolutions "
                                       "(DESC_CONV.MODE 2) likewise"),
         ("CONV_WEIGHT_GRAD", 13, 1, "where CONV is 0: weight gradients (DESC_CONV.MODE 3), "
                                     "the batch a multiple of 2**TILE_LOG2: a float32 or "
                                     "BFP8 stack, SGD of a BFP8 stack, or SGD of a float32 "
                                     "row (one output channel, a 1 x 1 kernel: a bias's)"),
         ("POOL_FORWARD", 14, 1, "where POOL is 0: max pooling (DESC_POOL.MODE 1, KIND 0) "
                                 "on CONV_FORWARD's convolutions, windows as their stride "
                                 "tiling the output exactly, C BFP8 without MASK_IN or BIAS "
                                 "2, at most 2**20 positions in the pool's input"),
         ("POOL_BACKWARD", 15, 1, "where POOL is 0: a max pool's backward pass "
                                  "(DESC_POOL.MODE 2, KIND 0) on CONV_BACKWARD_DATA's "
                                  "convolutions, windows as their stride, the batch a "
                                  "multiple of 2**TILE_LOG2, C BFP8 without a bias"),
         ("TILE_LOG2", 8, 4, "log2 of the side of the number format's tile blocks"),
         ("OPS", 16, 8, "the DESC_EPILOGUE bits 7..0 this build runs, each as in "
                        "DESC_EPILOGUE (all of them where EPILOGUE is 1). RELU, BIAS, "
                        "MASK_IN, QUANTIZE_ONLY and SGD only with BFP8 where EPILOGUE is "
                        "0"),
         ("BIAS_GRAD", 24, 1, "a weight gradient's bias gradient (DESC_CONV.BIAS_GRAD)"),
         ("UNFOLD", 25, 1, "quantise-only descriptors with DESC_CONV.MODE 1: a "
                           "convolution's float32 input unfolded (DESC_EPILOGUE."
                           "QUANTIZE_ONLY)")),
    _reg("CTRL", 0x020, "w1p", "Control pulses",
         ("ENQUEUE", 0, 1, "copy the staged descriptor into the queue (starts the engine)"),
         ("SOFT_RESET", 1, 1, "abort everything, drain the bus, return to idle"),
         ("CLEAR_COUNTERS", 2, 1, "zero the performance counters"),
         ("RUN_CHAIN", 3, 1, "run the descriptor chain at CHAIN_ADDR (CONFIG_FEATURES.CHAIN; "
                             "builds without it ignore this)")),
    _reg("STATUS", 0x024, "ro", "Engine state",
         ("BUSY", 0, 1, "a descriptor is running or queued"),
         ("ERROR", 1, 1, "stopped on an error (cleared by SOFT_RESET)"),
         ("QUEUE_FULL", 2, 1, "ENQUEUE would overflow"),
         ("QUEUE_LEVEL", 8, 8, "descriptors queued, the running ones (up to two) included"),
         ("ERROR_CODE", 16, 8, "an ErrorCode")),
    _reg("IRQ_ENABLE", 0x028, "rw", "Interrupt enables", *_IRQ_FIELDS),
    _reg("IRQ_STATUS", 0x02C, "w1c", "Interrupt causes (write 1 to clear)", *_IRQ_FIELDS),
    _reg("DONE_COUNT", 0x030, "ro", "Descriptors finished since reset (wraps)"),
    *_addr("WINDOW_BASE", 0x040, "Lowest address the DMA may touch"),
    *_addr("WINDOW_LIMIT", 0x048, "One past the highest address the DMA may touch"),
    *_counter("CYCLES", 0x060, "Clock cycles since the counters were cleared"),
    *_counter("BUSY_CYCLES", 0x068, "Cycles with STATUS.BUSY set"),
    *_counter("ACTIVE_CYCLES", 0x070, "Cycles the array did useful MACs"),
    *_counter("STALL_CYCLES", 0x078, "Busy cycles the array waited for the DMA"),
    *_counter("MACS", 0x080, "Useful multiply-accumulates"),
    _reg("DESC_M", 0x100, "rw", "Rows of C (1..65535)"),
    _reg("DESC_N", 0x104, "rw", "Columns of C (1..65535; a quantise-only descriptor's up "
                                "to 2**32 - 1 where CONFIG_FEATURES.CONV is 1, an "
                                "activation matrix's H*W*batch)"),
    _reg("DESC_K", 0x108, "rw", "Reduction length (1..65535)"),
    _reg("DESC_FLAGS", 0x10C, "rw", "Descriptor options",
         ("TRANSPOSE_A", 0, 1, "A is stored K x M"),
         ("TRANSPOSE_B", 1, 1, "B is stored N x K"),
         ("RAW", 2, 1, "write int32 sums instead of rescaled float32"),
         ("ROW_EXP_VECTOR", 3, 1, "row exponents are an int8 vector at DESC_ROW_EXP_ADDR"),
         ("COL_EXP_VECTOR", 4, 1, "column exponents are an int8 vector at DESC_COL_EXP_ADDR"),
         ("OVERLAP", 5, 1, "may start (check, read A and B, compute) while the descriptor "
                           "before it still writes C: set only if it reads nothing that one "
                           "writes (its own C tiles wait for that one's to be in memory)"),
         ("CHUNK", 6, 2, "the longest K chunk: 0, the buffers' depth, the first block's chunks "
                         "ramped up to it; 1, 2, 3: the depth, half, a quarter (no less than "
                         "max(rows, cols, bus bytes)), every block cut into about equal "
                         "chunks; the schedule, never the result"),
         ("ROW_EXP", 8, 8, "scalar row exponent (int8) when not ROW_EXP_VECTOR"),
         ("COL_EXP", 16, 8, "scalar column exponent (int8) when not COL_EXP_VECTOR"),
         ("BLOCK", 24, 5, "side of the reuse blocks in C tiles, 1..2**CONFIG_BUFFER.BLOCK_LOG2 "
                          "(0 or more: the largest); the schedule, never the result")),
    *_addr("DESC_A_ADDR", 0x110, "Address of A"),
    _reg("DESC_A_STRIDE", 0x118, "rw", "Bytes between rows of A as stored"),
    *_addr("DESC_B_ADDR", 0x120, "Address of B"),
    _reg("DESC_B_STRIDE", 0x128, "rw", "Bytes between rows of B as stored"),
    *_addr("DESC_C_ADDR", 0x130, "Address of C"),
    _reg("DESC_C_STRIDE", 0x138, "rw", "Bytes between rows of C"),
    *_addr("DESC_ROW_EXP_ADDR", 0x140, "Address of the M row exponents (int8)"),
    *_addr("DESC_COL_EXP_ADDR", 0x148, "Address of the N column exponents (int8)"),
    _reg("DESC_EPILOGUE", 0x150, "rw", "What the write-back does to C (0: nothing; "
                                       "CONFIG_FEATURES says what a build offers)",
         ("BFP8", 0, 1, "write C as BFP8 tile blocks: int8 mantissas at DESC_C_ADDR, rows "
                        "DESC_C_STRIDE bytes apart, tile exponents at DESC_C_EXP_ADDR"),
         ("STOCHASTIC", 1, 1, "round to BFP8 stochastically (bits from DESC_SEED), else to "
                              "nearest"),
         ("BIAS", 2, 2, "add a float32 bias vector at DESC_BIAS_ADDR: 0 none, 1 one per row, "
                        "2 one per column"),
         ("RELU", 4, 1, "ReLU, writing its mask (v > 0) at DESC_MASK_ADDR"),
         ("MASK_IN", 5, 1, "zero C where the mask at DESC_MASK_ADDR is 0 (ReLU's backward)"),
         ("QUANTIZE_ONLY", 6, 1, "no GEMM: the M x N float32 matrix at DESC_A_ADDR (rows "
                                 "DESC_A_STRIDE bytes apart, both multiples of the bus "
                                 "word) goes through the epilogue; DESC_K, B and the "
                                 "exponent vectors unused. With DESC_CONV.MODE 1 "
                                 "(CONFIG_FEATURES.UNFOLD) the matrix is the convolution's "
                                 "Cin x H*W*batch input there unfolded, Cin*kh*kw x "
                                 "OH*OW*batch (row (ci*kh + dy)*kw + dx, zeros at padding), "
                                 "DESC_M and DESC_N unused, the batch a multiple of "
                                 "2**TILE_LOG2, with BFP8 (and STOCHASTIC) alone, no "
                                 "pooling, ADD or BIAS_GRAD (else UNSUPPORTED)"),
         ("SGD", 7, 1, "an optimiser step in place of C: C = DESC_DECAY * C - DESC_LR * "
                       "G, each product and the sum rounded to float32, G this GEMM's "
                       "result, C the stored weights "
                       "(BFP8 tile blocks with BFP8, else float32) read before they are "
                       "written; not with BIAS, RELU, MASK_IN or QUANTIZE_ONLY"),
         ("A_TILES", 8, 1, "A's exponents are its tile grid at DESC_ROW_EXP_ADDR (as A is "
                           "stored, row-major): they change along K"),
         ("B_TILES", 9, 1, "B's exponents are its tile grid at DESC_COL_EXP_ADDR")),
    *_addr("DESC_BIAS_ADDR", 0x158, "Address of the bias vector (float32)"),
    *_addr("DESC_MASK_ADDR", 0x160, "Address of the ReLU mask (a bit per element, each row "
                                    "LSB first)"),
    _reg("DESC_MASK_STRIDE", 0x168, "rw", "Bytes between rows of the mask"),
    *_addr("DESC_C_EXP_ADDR", 0x170, "Address of C's tile exponents (int8, row-major)"),
    _reg("DESC_SEED_LO", 0x178, "rw", "Seed of stochastic rounding, bits 31..0"),
    _reg("DESC_SEED_HI", 0x17C, "rw", "Seed of stochastic rounding, bits 63..32"),
    _reg("DESC_LR", 0x180, "rw", "Learning rate of DESC_EPILOGUE.SGD (float32 bits)"),
    _reg("DESC_DECAY", 0x184, "rw", "The stored weights' factor of DESC_EPILOGUE.SGD, 1 - "
                                    "lr * weight_decay (float32 bits; 1.0 without weight "
                                    "decay)"),
    _reg("DESC_CONV", 0x188, "rw", "A convolution as an implicit GEMM (CONFIG_FEATURES.CONV; "
                                   "layouts in docs/architecture.md, 'Convolutions'): needs "
                                   "A_TILES and B_TILES, no transposes; DESC_M, N and K "
                                   "unused",
         ("MODE", 0, 2, "0 a GEMM; 1 forward: C (Cout x OH*OW*batch) = the weight stack at "
                        "A * the input at B; 2 backward-data: C (Cin x H*W*batch) = the "
                        "stack at A (each offset's matrix transposed, the kernel rotated) * "
                        "the deltas at B (Cout x OH*OW*batch); 3 weight gradient: C (the "
                        "stack, kh*kw matrices of Cout x Cin, each its own tile grid) = the "
                        "deltas at A * the input at B transposed, K the output positions"),
         ("KERNEL_H", 2, 4, "kernel height, 1..15"), ("KERNEL_W", 6, 4, "kernel width, 1..15"),
         ("STRIDE_H", 10, 3, "vertical stride, 1..7"),
         ("STRIDE_W", 13, 3, "horizontal stride, 1..7"),
         ("PAD_H", 16, 4, "zero padding above and below, 0..15"),
         ("PAD_W", 20, 4, "zero padding left and right, 0..15"),
         ("DILATION_H", 24, 3, "vertical dilation, 1..7"),
         ("DILATION_W", 27, 3, "horizontal dilation, 1..7"),
         ("ADD", 30, 1, "MODE 1 or 2 only (else UNSUPPORTED; CONFIG_FEATURES.ADD): add the "
                        "BFP8 matrix at DESC_ADD_ADDR, of the shape ReLU's mask has (a "
                        "pool's input, an unpool's output), to C before the bias: a "
                        "residual connection, or its backward pass's sum of deltas"),
         ("BIAS_GRAD", 31, 1, "MODE 3 only (else UNSUPPORTED; CONFIG_FEATURES.BIAS_GRAD): "
                              "also the bias gradient, the sums of the deltas' rows (each "
                              "tile block's exact sum rescaled by its exponent, added in "
                              "float32 in K's order), for the Cout float32 biases at "
                              "DESC_BIAS_ADDR: stepped as the stack with SGD, else "
                              "written there")),
    _reg("DESC_CONV_IMAGE", 0x18C, "rw", "The convolution's input image",
         ("HEIGHT", 0, 16, "H, 1..65535"), ("WIDTH", 16, 16, "W, 1..65535")),
    _reg("DESC_CONV_CHANNELS", 0x190, "rw", "The convolution's channels",
         ("IN", 0, 16, "Cin, 1..65535"), ("OUT", 16, 16, "Cout, 1..65535")),
    _reg("DESC_CONV_BATCH", 0x194, "rw", "The convolution's batch (images), 1..65535"),
    _reg("DESC_POOL", 0x198, "rw", "A pooling stage on a convolution's write path "
                                   "(CONFIG_FEATURES.POOL; the channels and batch are the "
                                   "convolution's C's)",
         ("MODE", 0, 2, "0 none; 1 pool C after ReLU (forward convolutions): C is the "
                        "pool's output, ReLU's mask its input's; 2 route C through the "
                        "pool's backward pass before the bias (backward-data): C is the "
                        "pool's input, MASK_IN's mask too; 3 refused with UNSUPPORTED"),
         ("KIND", 2, 1, "0 max (its argmax written with MODE 1, read with MODE 2, at "
                        "DESC_ARGMAX_ADDR), 1 average"),
         ("KERNEL_H", 4, 4, "window height, 1..15"), ("KERNEL_W", 8, 4, "window width, 1..15"),
         ("STRIDE_H", 12, 4, "vertical stride, 1..15"),
         ("STRIDE_W", 16, 4, "horizontal stride, 1..15")),
    _reg("DESC_POOL_IMAGE", 0x19C, "rw", "The pool's input image",
         ("HEIGHT", 0, 16, "height, 1..65535"), ("WIDTH", 16, 16, "width, 1..65535")),
    *_addr("DESC_ARGMAX_ADDR", 0x1A0, "Address of a max pool's argmax (a byte per output "
                                      "element, the window offset dy * KERNEL_W + dx)"),
    _reg("DESC_ARGMAX_STRIDE", 0x1A8, "rw", "Bytes between rows of the argmax"),
    *_addr("CHAIN_ADDR", 0x1B0, "Address of a descriptor chain: CHAIN_ENTRIES entries of "
                                "8 bytes, a register's offset then the value written to it "
                                "(little-endian 32-bit words), applied in order as the host's "
                                "writes would be; DESC_* registers and CTRL.ENQUEUE only"),
    _reg("CHAIN_ENTRIES", 0x1B8, "rw", "Entries of the chain at CHAIN_ADDR"),
    _reg("CHAIN_SEED_LO", 0x1BC, "rw", "XORed into DESC_SEED of every descriptor the chain "
                                       "enqueues, bits 31..0 (a recorded step's seeds "
                                       "advanced per replay)"),
    _reg("CHAIN_SEED_HI", 0x1C0, "rw", "As CHAIN_SEED_LO, bits 63..32"),
    *_addr("DESC_ADD_ADDR", 0x1C4, "Address of DESC_CONV.ADD's matrix (int8 mantissas)"),
    _reg("DESC_ADD_STRIDE", 0x1CC, "rw", "Bytes between rows of DESC_CONV.ADD's matrix"),
    *_addr("DESC_ADD_EXP_ADDR", 0x1D0, "Address of DESC_CONV.ADD's matrix's tile exponents "
                                       "(int8, row-major)"),
])

_BY_NAME = {r.name: r for r in REGISTERS}

#: Bytes of address space the register block decodes.
SIZE = 0x200


def by_name(name: str) -> Register:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no register named {name!r}") from None


def offset(name: str) -> int:
    """Byte offset of register ``name``."""
    return by_name(name).offset


def field_value(register: str, name: str, word: int) -> int:
    """Extract field ``name`` of ``register`` from a 32-bit ``word``."""
    f = by_name(register).field(name)
    return (word >> f.lsb) & ((1 << f.width) - 1)


def pack(register: str, **fields: int) -> int:
    """A 32-bit word for ``register`` with the given field values (others zero).

    Raises ``ValueError`` if a value does not fit its field (negative values are taken as
    two's complement of the field width).
    """
    reg = by_name(register)
    word = 0
    for name, value in fields.items():
        f = reg.field(name)
        if not -(1 << (f.width - 1)) <= value < (1 << f.width):
            raise ValueError(f"{register}.{name}={value} does not fit in {f.width} bits")
        word |= (value & ((1 << f.width) - 1)) << f.lsb
    return word


def _check() -> None:
    seen = {}
    for r in REGISTERS:
        if r.offset % 4 or not 0 <= r.offset < SIZE:
            raise AssertionError(f"{r.name}: bad offset {r.offset:#x}")
        if r.offset in seen:
            raise AssertionError(f"{r.name} and {seen[r.offset]} share offset {r.offset:#x}")
        seen[r.offset] = r.name
        if r.access not in ("ro", "rw", "w1p", "w1c"):
            raise AssertionError(f"{r.name}: unknown access {r.access!r}")
        used = 0
        for f in r.fields:
            if f.lsb + f.width > 32 or used & f.mask:
                raise AssertionError(f"{r.name}.{f.name} overlaps or leaves the word")
            used |= f.mask


_check()


def markdown_table() -> str:
    """The register table, as Markdown."""
    lines = ["| offset | register | access | fields | description |",
             "|---:|---|---|---|---|"]
    for r in REGISTERS:
        fields = "<br>".join(
            f"`[{f.lsb + f.width - 1}:{f.lsb}]` {f.name}" if f.width > 1 else
            f"`[{f.lsb}]` {f.name}" for f in r.fields)
        doc = r.doc.replace("|", "\\|")
        lines.append(f"| `0x{r.offset:03X}` | `{r.name}` | {r.access} | {fields} | {doc} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
