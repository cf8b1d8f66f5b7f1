"""One DMA reader shared by two clients, a whole command at a time."""

from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .dma import dma_command_layout
from .fifo import Fifo
from .pipe import RegisterSlice

__all__ = ["ReadShare", "read_word_layout"]


def read_word_layout(data_width: int) -> data.StructLayout:
    """A word of :attr:`rtl.dma.DmaReader.o_stream`: a bus word and whether it ends its
    command."""
    return data.StructLayout({"data": data_width, "last": 1})


class ReadShare(wiring.Component):
    """Shares one :class:`rtl.dma.DmaReader` between two clients, command by command.

    Commands from :attr:`a_cmd` (the engine's load sequencer) and :attr:`b_cmd` (a side
    client) go to :attr:`cmd`, one whole command at a time; the side of each command goes
    into a FIFO of ``depth`` tags as it is issued. The reader returns the words of its
    commands in order on :attr:`words`, each command's last with ``last``: each word goes to
    the side at the head of the tag FIFO (:attr:`a_words` or :attr:`b_words`, ``last``
    kept), and the tag is popped with the ``last`` word. A command of 0 beats (the reader
    reads nothing for it) is passed on without a tag. The routing rule is the whole model:
    each side receives exactly the words of its own commands, in the order it gave them.

    Port ``b`` goes first when both offer a command. Its demand limits itself (a side client
    issues only into buffer room that only its consumer frees), so ``a`` is never starved,
    and the side data, which a whole unit of output waits for, is read as early as it is
    asked for. A command is issued only while the tag FIFO has room.

    Words come back in the order their commands were issued, on one stream for both sides:
    a word its side does not take holds back every word behind it, the other side's too.
    The sharing is free of deadlock when no side, to take a word, waits for a word of a
    command issued after it. The side client on ``b`` must therefore take every word of a
    command it issued without waiting for anything that depends on port ``a``'s words: it
    issues a command only when it has buffer room for all the command's words, and then
    takes them as they come. Likewise port ``a``'s client must not wait for ``b``'s words
    to take its own: where what consumes ``a``'s words can stall on the side data (a
    datapath behind a write-back that uses it), the side commands a stall can wait for must
    be issued before the ``a`` commands whose words would queue ahead of them.

    Parameters
    ----------
    data_width : int
        Bus width.
    addr_width : int
        Command address width.
    depth : int
        Tags: commands issued whose words have not all passed (at least 2). The reader holds
        about ``2 * outstanding + 2`` commands; a smaller FIFO limits it to that many.

    Attributes
    ----------
    a_cmd, b_cmd : In(stream.Signature(rtl.dma.dma_command_layout(addr_width)))
    cmd : Out(stream.Signature(rtl.dma.dma_command_layout(addr_width)))
        To the reader's ``cmd``; ``valid`` and ``payload`` are registers.
    words : In(stream.Signature(read_word_layout(data_width)))
        From the reader's ``o_stream``.
    a_words, b_words : Out(stream.Signature(read_word_layout(data_width)))

    Latency
    -------
    A command is on :attr:`cmd` 1 cycle after it is taken (a :class:`rtl.pipe.RegisterSlice`),
    its tag at the FIFO's head 2 cycles after. A word passes combinationally (``ready``
    follows the chosen side's).

    Throughput
    ----------
    A command a cycle; a word a cycle, within a command and across commands of either side
    (the tag of the next command is at the head the cycle after the last word).
    """

    def __init__(self, data_width: int = 128, addr_width: int = 32, *, depth: int = 16):
        if not isinstance(depth, int) or depth < 2:
            raise ValueError(f"depth must be an integer of at least 2, not {depth!r}")
        self.data_width, self.addr_width, self.depth = data_width, addr_width, depth
        cmd, word = dma_command_layout(addr_width), read_word_layout(data_width)
        super().__init__({
            "a_cmd": In(stream.Signature(cmd)),
            "b_cmd": In(stream.Signature(cmd)),
            "cmd": Out(stream.Signature(cmd)),
            "words": In(stream.Signature(word)),
            "a_words": Out(stream.Signature(word)),
            "b_words": Out(stream.Signature(word)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.out = out = RegisterSlice(dma_command_layout(self.addr_width))
        m.submodules.tags = tags = Fifo(width=1, depth=self.depth)
        wiring.connect(m, out.o_stream, wiring.flipped(self.cmd))

        # ---- commands: b first; each issued one's side into the tag FIFO -------------------
        a, b = self.a_cmd, self.b_cmd
        pick_b = Signal()
        free = Signal()                # the slice and the tag FIFO can take a command
        m.d.comb += [
            pick_b.eq(b.valid),
            free.eq(out.i_stream.ready & tags.w_rdy),
            out.i_stream.valid.eq((a.valid | b.valid) & tags.w_rdy),
            out.i_stream.payload.eq(Mux(pick_b, b.payload, a.payload)),
            a.ready.eq(free & ~pick_b),
            b.ready.eq(free),
            tags.w_data.eq(pick_b),
            tags.w_en.eq(free & (a.valid | b.valid) & (out.i_stream.payload.beats != 0)),
        ]

        # ---- words: to the side of the oldest tag, popped with the command's last ----------
        w = self.words
        to_b = tags.r_data[0]
        for side, o in ((0, self.a_words), (1, self.b_words)):
            m.d.comb += [o.payload.eq(w.payload),
                         o.valid.eq(w.valid & tags.r_rdy & (to_b == side))]
        m.d.comb += [
            w.ready.eq(tags.r_rdy & Mux(to_b, self.b_words.ready, self.a_words.ready)),
            tags.r_en.eq(w.valid & w.ready & w.payload.last),
        ]
        return m
