"""Stream drivers for cocotb testbenches of Amaranth components (``<port>__valid`` etc.)."""

from cocotb.triggers import ReadOnly, RisingEdge

__all__ = ["send", "receive"]


async def send(dut, port, beats, rng, stall):
    """Drive ``beats`` (integers) onto stream ``port``, idling a cycle with prob. ``stall``."""
    valid = getattr(dut, f"{port}__valid")
    ready = getattr(dut, f"{port}__ready")
    payload = getattr(dut, f"{port}__payload")
    for beat in beats:
        while rng.random() < stall:
            valid.value = 0
            await RisingEdge(dut.clk)
        payload.value = beat
        valid.value = 1
        while True:
            await ReadOnly()
            accepted = str(ready.value) == "1"  # X/Z (before reset settles) is not ready
            await RisingEdge(dut.clk)
            if accepted:
                break
    valid.value = 0


async def receive(dut, port, count, rng, stall):
    """Take ``count`` payloads (integers) from stream ``port``, dropping ready with ``stall``."""
    valid = getattr(dut, f"{port}__valid")
    ready = getattr(dut, f"{port}__ready")
    payload = getattr(dut, f"{port}__payload")
    beats = []
    while len(beats) < count:
        take = rng.random() >= stall
        ready.value = int(take)
        await ReadOnly()
        if take and str(valid.value) == "1":
            beats.append(int(payload.value))
        await RisingEdge(dut.clk)
    ready.value = 0
    return beats
