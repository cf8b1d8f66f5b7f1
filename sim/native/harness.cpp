// Native Verilator harness for the accelerator: the AXI4 memory model and an AXI4-Lite host,
// in C++, behind a small C API (loaded by sim/native.py through ctypes).
//
// Compiled with -DMODEL=<Verilated class> -DMODEL_H="<header>" -DDW=<AXI data width in bits>.
//
// Memory model: a flat byte array at address 0. Reads: one AR per cycle, the first data beat
// `latency` cycles after the AR, then one beat per cycle, bursts in order. Writes: W beats
// follow their AW; the B response comes `latency / 4 + 1` cycles after the last W beat. Every
// channel can pause at random (probability `pause`). Bursts that touch the error range, or
// lie outside memory, answer SLVERR / DECERR (and write nothing). Protocol checks count
// violations: a burst crossing 4 KB, a wrong wlast, a size other than the bus width.
#include <cstdint>
#include <cstring>
#include <deque>
#include <type_traits>
#include <vector>

#include "verilated.h"
#include MODEL_H

#ifndef DW
#error "DW (AXI data width) must be defined"
#endif
static constexpr int BPW = DW / 8;

namespace {

template <typename T> void put_bytes(T &sig, const uint8_t *src) {
    if constexpr (std::is_integral_v<T>) {
        uint64_t v = 0;
        std::memcpy(&v, src, BPW);
        sig = static_cast<T>(v);
    } else {
        for (int i = 0; i < BPW / 4; i++) {
            uint32_t w;
            std::memcpy(&w, src + 4 * i, 4);
            sig[i] = w;
        }
    }
}

template <typename T> void get_bytes(const T &sig, uint8_t *dst) {
    if constexpr (std::is_integral_v<T>) {
        uint64_t v = sig;
        std::memcpy(dst, &v, BPW);
    } else {
        for (int i = 0; i < BPW / 4; i++) {
            uint32_t w = sig[i];
            std::memcpy(dst + 4 * i, &w, 4);
        }
    }
}

template <typename T> uint64_t get_strb(const T &sig) {
    return static_cast<uint64_t>(sig);
}

struct Burst {
    uint64_t addr;
    unsigned len;   // beats
    unsigned beat;
    uint64_t due;   // cycle the first beat (reads) or the response (writes) may go
    uint8_t resp;
};

struct Sim {
    VerilatedContext ctx;
    MODEL *top;
    std::vector<uint8_t> mem;
    uint64_t cycle = 0;
    unsigned latency;
    double pause;
    uint64_t rng;
    uint64_t err_lo = 0, err_hi = 0;
    std::deque<Burst> reads, writes, responses;
    uint64_t violations = 0, read_beats = 0, write_beats = 0;

    Sim(size_t bytes, unsigned latency_, double pause_, uint64_t seed)
        : mem(bytes, 0), latency(latency_), pause(pause_), rng(seed * 2654435761u + 1) {
        top = new MODEL{&ctx};
        top->clk = 0;
        top->rst = 1;
        for (int i = 0; i < 4; i++) tick();
        top->rst = 0;
        tick();
    }
    ~Sim() {
        top->final();
        delete top;
    }

    bool paused() {
        if (pause <= 0) return false;
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        return (rng >> 11) * (1.0 / 9007199254740992.0) < pause;
    }

    uint8_t check(uint64_t addr, unsigned len) {
        uint64_t end = addr + uint64_t(len) * BPW;
        if (end > mem.size()) return 3;                      // DECERR
        if (addr < err_hi && end > err_lo) return 2;         // SLVERR
        return 0;
    }

    // One clock cycle: drive the model's outputs, sample handshakes, clock edge, update.
    void tick() {
        // ---- drive subordinate outputs from the model state ----
        top->mem_r__arready = !paused();
        bool rv = false;
        if (!reads.empty() && reads.front().due <= cycle && !paused()) {
            Burst &b = reads.front();
            rv = true;
            if (b.resp == 0) put_bytes(top->mem_r__rdata, &mem[b.addr + uint64_t(b.beat) * BPW]);
            else { uint8_t z[BPW] = {0}; put_bytes(top->mem_r__rdata, z); }
            top->mem_r__rresp = b.resp;
            top->mem_r__rlast = b.beat + 1 == b.len;
            top->mem_r__rid = 0;
        }
        top->mem_r__rvalid = rv;
        top->mem_w__awready = !paused();
        bool w_open = false;
        for (auto &b : writes) if (b.beat < b.len) { w_open = true; break; }
        top->mem_w__wready = w_open && !paused();
        bool bv = !responses.empty() && responses.front().due <= cycle && !paused();
        top->mem_w__bvalid = bv;
        if (bv) top->mem_w__bresp = responses.front().resp;
        top->mem_w__bid = 0;
        top->clk = 0;
        top->eval();

        // ---- sample handshakes ----
        bool ar = top->mem_r__arvalid && top->mem_r__arready;
        Burst nb{};
        if (ar) {
            nb.addr = top->mem_r__araddr;
            nb.len = top->mem_r__arlen + 1u;
            if ((nb.addr & 0xFFF) + uint64_t(nb.len) * BPW > 4096) violations++;
            if ((1u << top->mem_r__arsize) != BPW) violations++;
            nb.due = cycle + latency;
            nb.resp = check(nb.addr, nb.len);
        }
        bool r = rv && top->mem_r__rready;
        bool aw = top->mem_w__awvalid && top->mem_w__awready;
        Burst wb{};
        if (aw) {
            wb.addr = top->mem_w__awaddr;
            wb.len = top->mem_w__awlen + 1u;
            if ((wb.addr & 0xFFF) + uint64_t(wb.len) * BPW > 4096) violations++;
            if ((1u << top->mem_w__awsize) != BPW) violations++;
            wb.resp = check(wb.addr, wb.len);
        }
        bool w = top->mem_w__wvalid && top->mem_w__wready;
        uint8_t wdata[BPW];
        uint64_t wstrb = 0;
        bool wlast = false;
        if (w) {
            get_bytes(top->mem_w__wdata, wdata);
            wstrb = get_strb(top->mem_w__wstrb);
            wlast = top->mem_w__wlast;
        }
        bool bfire = bv && top->mem_w__bready;

        // ---- clock edge ----
        top->clk = 1;
        top->eval();
        cycle++;

        // ---- update the model ----
        if (r) {
            read_beats++;
            Burst &b = reads.front();
            if (++b.beat == b.len) reads.pop_front();
        }
        if (ar) reads.push_back(nb);
        if (w) {
            write_beats++;
            for (auto &b : writes) {
                if (b.beat >= b.len) continue;
                if (b.resp == 0) {
                    uint8_t *dst = &mem[b.addr + uint64_t(b.beat) * BPW];
                    for (int i = 0; i < BPW; i++) if (wstrb >> i & 1) dst[i] = wdata[i];
                }
                b.beat++;
                if ((b.beat == b.len) != wlast) violations++;
                if (b.beat == b.len) {
                    Burst done = b;
                    done.due = cycle + latency / 4 + 1;
                    responses.push_back(done);
                }
                break;
            }
            while (!writes.empty() && writes.front().beat >= writes.front().len) writes.pop_front();
        }
        if (aw) writes.push_back(wb);
        if (bfire) responses.pop_front();
    }

    void lite_write(uint32_t addr, uint32_t data) {
        top->ctrl__awaddr = addr; top->ctrl__awvalid = 1; top->ctrl__awprot = 0;
        top->ctrl__wdata = data; top->ctrl__wstrb = 0xF; top->ctrl__wvalid = 1;
        top->ctrl__bready = 1;
        bool aw_done = false, w_done = false;
        for (int guard = 0; guard < 1000; guard++) {
            top->eval();
            bool awf = top->ctrl__awvalid && top->ctrl__awready;
            bool wf = top->ctrl__wvalid && top->ctrl__wready;
            bool bf = top->ctrl__bvalid && top->ctrl__bready;
            tick();
            if (awf) { aw_done = true; top->ctrl__awvalid = 0; }
            if (wf) { w_done = true; top->ctrl__wvalid = 0; }
            if (bf && aw_done && w_done) break;
        }
        top->ctrl__bready = 0;
    }

    uint32_t lite_read(uint32_t addr) {
        top->ctrl__araddr = addr; top->ctrl__arvalid = 1; top->ctrl__arprot = 0;
        top->ctrl__rready = 1;
        uint32_t value = 0xFFFFFFFFu;
        bool ar_done = false;
        for (int guard = 0; guard < 1000; guard++) {
            top->eval();
            bool arf = top->ctrl__arvalid && top->ctrl__arready;
            bool rf = top->ctrl__rvalid && top->ctrl__rready;
            if (rf && ar_done) value = top->ctrl__rdata;
            tick();
            if (arf) { ar_done = true; top->ctrl__arvalid = 0; }
            if (rf && ar_done) break;
        }
        top->ctrl__rready = 0;
        return value;
    }
};

}  // namespace

extern "C" {
void *sim_new(uint64_t bytes, unsigned latency, double pause, uint64_t seed) {
    return new Sim(bytes, latency, pause, seed);
}
void sim_free(void *h) { delete static_cast<Sim *>(h); }
void sim_step(void *h, uint64_t n) {
    Sim *s = static_cast<Sim *>(h);
    for (uint64_t i = 0; i < n; i++) s->tick();
}
void sim_write32(void *h, uint32_t addr, uint32_t data) { static_cast<Sim *>(h)->lite_write(addr, data); }
uint32_t sim_read32(void *h, uint32_t addr) { return static_cast<Sim *>(h)->lite_read(addr); }
uint8_t *sim_memory(void *h) { return static_cast<Sim *>(h)->mem.data(); }
uint64_t sim_cycle(void *h) { return static_cast<Sim *>(h)->cycle; }
uint64_t sim_violations(void *h) { return static_cast<Sim *>(h)->violations; }
int sim_irq(void *h) { return static_cast<Sim *>(h)->top->irq; }
void sim_set_error_range(void *h, uint64_t lo, uint64_t hi) {
    Sim *s = static_cast<Sim *>(h);
    s->err_lo = lo; s->err_hi = hi;
}
void sim_set_timing(void *h, unsigned latency, double pause) {
    Sim *s = static_cast<Sim *>(h);
    s->latency = latency; s->pause = pause;
}
uint64_t sim_beats(void *h, int writes) {
    Sim *s = static_cast<Sim *>(h);
    return writes ? s->write_beats : s->read_beats;
}
uint64_t sim_outstanding(void *h) {
    Sim *s = static_cast<Sim *>(h);
    return s->reads.size() + s->writes.size() + s->responses.size();
}
}
