"""Small helpers shared by the RTL components."""

from amaranth import Signal

__all__ = ["delay"]


def delay(m, sig, n: int, name: str):
    """``sig`` delayed by ``n`` registers in ``m``'s ``sync`` domain (``sig`` itself if 0)."""
    for s in range(n):
        r = Signal.like(sig, name=f"{name}_d{s}")
        m.d.sync += r.eq(sig)
        sig = r
    return sig
