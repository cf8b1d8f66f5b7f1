"""Small helpers shared by the RTL components."""

from amaranth import Signal

__all__ = ["delay"]


def delay(m, sig, n: int, name: str, *, reset_less: bool = False):
    """``sig`` delayed by ``n`` registers in ``m``'s ``sync`` domain (``sig`` itself if 0).

    ``reset_less``: for data whose every use is qualified by a (reset) flag — the registers
    then hang on no reset net (neither ``rst`` nor a ``ResetInserter``'s soft reset) and a
    synthesiser may pack the chain into SRLs."""
    for s in range(n):
        r = Signal.like(sig, name=f"{name}_d{s}", reset_less=reset_less)
        m.d.sync += r.eq(sig)
        sig = r
    return sig
