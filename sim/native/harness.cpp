// Native Verilator harness for the accelerator: the AXI4 memory model and an AXI4-Lite host,
// in C++, behind a small C API (loaded by sim/native/__init__.py through ctypes).
//
// Compiled with -DMODEL=<Verilated class> -DMODEL_H="<header>" -DDW=<AXI data width in bits>.
//
// Memory model: a flat byte array at address 0 behind one AXI subordinate port (with
// -DWRITE_PORTS=2 .. 6 more write ports, mem_w1 ... mem_w5, and with -DREAD_PORTS=2 .. 5 more
// read ports, mem_r1 ... mem_r4, on the same memory, each port with the knobs below of its
// own) whose timing is set by a few knobs (sim_configure; firmware/spec/ports.py has the
// boards' presets):
//
// * outstanding_reads: AR bursts accepted and not yet fully returned; ARREADY is low at the
//   limit (0 = unlimited). Reads return in order, the first beat `read_latency` cycles after
//   the AR, then at most one beat per cycle.
// * outstanding_writes: AW bursts accepted whose B has not been sent; AWREADY is low at the
//   limit (0 = unlimited). The B response goes `write_latency` cycles after the burst is
//   complete (its last W beat and its AW both received).
// * max_burst: longest burst (beats) the port takes; a longer one is a protocol violation and
//   is answered with SLVERR (nothing written).
// * write_order: 0 "aw-first" (W beats are accepted only for bursts whose AW was accepted),
//   1 "w-first" (AWREADY only once the burst's W beats, up to WLAST, have all arrived: W is
//   buffered ahead of its AW, which a manager must allow for), 2 "random" (one of the two,
//   drawn per burst from the seed).
// * pause: probability, per channel per cycle, of back-pressure (ARREADY, AWREADY, WREADY
//   low) or of a gap (RVALID, BVALID not raised). A raised RVALID / BVALID stays up, with its
//   payload, until the handshake.
// * dram (sim_set_dram): the DRAM's bytes per cycle behind every port together (0 =
//   unlimited). A budget grows by that much each cycle (banking at most DRAM_BURST_BEATS bus
//   words); an R beat is raised, and WREADY, only while a bus word is in the budget, and
//   each R beat raised or W beat taken spends one. The write ports share what the R beats
//   left, a word for each port with WVALID that gets WREADY (so several ports cannot each
//   take a beat on the last word; they take turns at going first). Who goes first when the
//   budget is short
//   (sim_set_dram's `arbitration`, as the DDR4 MIG's AXI arbitration scheme): 0 "reads-first"
//   (the MIG's default, RD_PRI_REG: a W beat only with a word left after the R beat), 1
//   "round-robin" (ROUND_ROBIN: while a write port holds WVALID, an R beat and a W beat take
//   turns — the R beat leaves a word in the budget for the W beat on the write's turn).
//
// Bursts that touch the error range, or lie outside memory, answer SLVERR / DECERR (and write
// nothing). Protocol checks count violations: a burst crossing 4 KB, a wrong WLAST, a size
// other than the bus width, a burst longer than max_burst, and a manager that drops VALID or
// changes the payload on AR, AW or W before READY. Counters (sim_counter) record beats,
// bursts and the most bursts seen in flight (the write ports' summed, their in-flight most
// the largest of one port).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <type_traits>
#include <utility>
#include <vector>

#include "verilated.h"
#include MODEL_H
#if TRACE
#include <string>
#include "verilated_vcd_c.h"
// The VCD the next Sim writes (sim_trace), set before sim_new.
static std::string trace_path;
#endif

#ifndef DW
#error "DW (AXI data width) must be defined"
#endif
static constexpr int BPW = DW / 8;
#ifndef WRITE_PORTS
#define WRITE_PORTS 1
#endif
#ifndef READ_PORTS
#define READ_PORTS 1
#endif
// What the DRAM budget may bank while the ports are idle (the controller's queues, open
// rows): two bursts of 16 beats.
static constexpr double DRAM_BURST_BEATS = 32;

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

enum WriteOrder : unsigned { AW_FIRST = 0, W_FIRST = 1, RANDOM_ORDER = 2 };

// Counters, in the order sim_counter() numbers them (sim/native/__init__.py names them).
enum Counter : int {
    READ_BEATS, WRITE_BEATS, READ_BURSTS, WRITE_BURSTS, MAX_READS_IN_FLIGHT,
    MAX_WRITES_IN_FLIGHT, VIOLATIONS, STABILITY_VIOLATIONS, BURST_VIOLATIONS, AR_STALLS,
    AW_STALLS, W_STALLS, DRAM_OVERDRAWN, N_COUNTERS
};

struct ReadBurst {
    uint64_t addr;
    unsigned len;   // beats
    unsigned beat;
    uint64_t due;   // cycle the first beat may go
    uint8_t resp;
};

// One write burst, built from its AW and its W beats in whichever order they come.
struct WriteBurst {
    bool w_first = false;     // this burst's order: AWREADY waits for all its W beats
    bool have_aw = false;
    uint64_t addr = 0;
    unsigned len = 0;
    uint8_t resp = 0;
    unsigned beats = 0;       // W beats received
    bool closed = false;      // all W beats received (len reached, or WLAST before the AW)
    std::vector<uint8_t> data;
    std::vector<uint64_t> strb;
};

struct Response {
    uint64_t due;
    uint8_t resp;
};

// A manager's VALID/payload, to check it is held until READY.
using Payload = std::array<uint64_t, BPW / 8 + 4>;   // address fields, or W data, strb, last
struct Held {
    bool pending = false;     // VALID was high and READY low in the last cycle
    Payload payload{};
};

// One AXI4 read port's pins on the model (mem_r, mem_r1).
#define RPIN_T(name) std::remove_reference_t<decltype(std::declval<MODEL &>().mem_r__##name)>
struct ReadPins {
    RPIN_T(arvalid) *arvalid; RPIN_T(arready) *arready; RPIN_T(araddr) *araddr;
    RPIN_T(arlen) *arlen; RPIN_T(arsize) *arsize; RPIN_T(arburst) *arburst;
    RPIN_T(rvalid) *rvalid; RPIN_T(rready) *rready; RPIN_T(rdata) *rdata;
    RPIN_T(rresp) *rresp; RPIN_T(rlast) *rlast; RPIN_T(rid) *rid;
};
#define READ_PINS(top, P) ReadPins{&top->P##arvalid, &top->P##arready, &top->P##araddr, \
    &top->P##arlen, &top->P##arsize, &top->P##arburst, &top->P##rvalid, &top->P##rready, \
    &top->P##rdata, &top->P##rresp, &top->P##rlast, &top->P##rid}

// A read port's state: its bursts in flight, returned in order.
struct ReadState {
    ReadPins pins;
    std::deque<ReadBurst> reads;
    bool r_shown = false;
    Held ar_held;
    // sampled this cycle
    bool ar = false, r = false;
    ReadBurst nb{};
};

// One AXI4 write port's pins on the model (mem_w, mem_w1, ...).
#define PIN_T(name) std::remove_reference_t<decltype(std::declval<MODEL &>().mem_w__##name)>
struct WritePins {
    PIN_T(awvalid) *awvalid; PIN_T(awready) *awready; PIN_T(awaddr) *awaddr;
    PIN_T(awlen) *awlen; PIN_T(awsize) *awsize; PIN_T(awburst) *awburst;
    PIN_T(wvalid) *wvalid; PIN_T(wready) *wready; PIN_T(wdata) *wdata; PIN_T(wstrb) *wstrb;
    PIN_T(wlast) *wlast; PIN_T(bvalid) *bvalid; PIN_T(bready) *bready; PIN_T(bresp) *bresp;
    PIN_T(bid) *bid;
};
#define WRITE_PINS(top, P) WritePins{&top->P##awvalid, &top->P##awready, &top->P##awaddr, \
    &top->P##awlen, &top->P##awsize, &top->P##awburst, &top->P##wvalid, &top->P##wready, \
    &top->P##wdata, &top->P##wstrb, &top->P##wlast, &top->P##bvalid, &top->P##bready, \
    &top->P##bresp, &top->P##bid}

// A write port's state: its bursts (AW and W in whichever order they come) and responses.
struct WriteState {
    WritePins pins;
    std::deque<WriteBurst> writes;     // in AW/W order; the front completes first
    std::deque<Response> responses;
    unsigned aw_count = 0;             // bursts in `writes` whose AW has been accepted
    bool b_shown = false;
    Held aw_held, w_held;
    // sampled this cycle
    bool aw = false, w = false, bfire = false, wlast = false;
    uint64_t aw_addr = 0, wstrb = 0;
    unsigned aw_len = 0;
    uint8_t wdata[BPW];
};

struct Sim {
    VerilatedContext ctx;
    MODEL *top;
#if TRACE
    VerilatedVcdC *vcd = nullptr;
#endif
    std::vector<uint8_t> mem;
    uint64_t cycle = 0;
    unsigned outstanding_reads = 0, outstanding_writes = 0;   // 0: unlimited
    unsigned read_latency, write_latency, max_burst = 256;
    unsigned write_order = AW_FIRST;
    double pause;
    uint64_t rng, order_rng;
    uint64_t err_lo = 0, err_hi = 0;
    std::vector<ReadState> rports;
    std::vector<WriteState> wports;
    double dram = 0;                   // bytes per cycle, 0: unlimited
    double w_budget = 0;               // what is left of the budget for the W beats driven
    double budget = 0;                 // bytes the DRAM can move now
    unsigned arbitration = 0;          // 0 reads first, 1 round-robin (see the top)
    bool write_turn = false;           // round-robin: the next short budget goes to a W beat
    uint64_t counters[N_COUNTERS] = {0};

    Sim(size_t bytes, unsigned latency_, double pause_, uint64_t seed)
        : mem(bytes, 0), read_latency(latency_), write_latency(latency_ / 4 + 1),
          pause(pause_), rng(seed * 2654435761u + 1), order_rng(seed * 40503u + 7) {
#if TRACE
        if (!trace_path.empty()) ctx.traceEverOn(true);
#endif
        top = new MODEL{&ctx};
        rports.push_back(ReadState{READ_PINS(top, mem_r__)});
#if READ_PORTS > 1
        rports.push_back(ReadState{READ_PINS(top, mem_r1__)});
#endif
#if READ_PORTS > 2
        rports.push_back(ReadState{READ_PINS(top, mem_r2__)});
#endif
#if READ_PORTS > 3
        rports.push_back(ReadState{READ_PINS(top, mem_r3__)});
#endif
#if READ_PORTS > 4
        rports.push_back(ReadState{READ_PINS(top, mem_r4__)});
#endif
        wports.push_back(WriteState{WRITE_PINS(top, mem_w__)});
#if WRITE_PORTS > 1
        wports.push_back(WriteState{WRITE_PINS(top, mem_w1__)});
#endif
#if WRITE_PORTS > 2
        wports.push_back(WriteState{WRITE_PINS(top, mem_w2__)});
#endif
#if WRITE_PORTS > 3
        wports.push_back(WriteState{WRITE_PINS(top, mem_w3__)});
#endif
#if WRITE_PORTS > 4
        wports.push_back(WriteState{WRITE_PINS(top, mem_w4__)});
#endif
#if WRITE_PORTS > 5
        wports.push_back(WriteState{WRITE_PINS(top, mem_w5__)});
#endif
#if TRACE
        if (!trace_path.empty()) {
            vcd = new VerilatedVcdC;
            top->trace(vcd, 99);
            vcd->open(trace_path.c_str());
        }
#endif
        top->clk = 0;
        top->rst = 1;
        for (int i = 0; i < 4; i++) tick();
        top->rst = 0;
        tick();
    }
    ~Sim() {
#if TRACE
        if (vcd) { vcd->close(); delete vcd; }
#endif
        top->final();
        delete top;
    }

    static uint64_t next(uint64_t &state) {
        state ^= state << 13; state ^= state >> 7; state ^= state << 17;
        return state;
    }

    bool paused() {
        if (pause <= 0) return false;
        return (next(rng) >> 11) * (1.0 / 9007199254740992.0) < pause;
    }

    uint8_t check(uint64_t addr, unsigned len) {
        uint64_t end = addr + uint64_t(len) * BPW;
        if (end > mem.size()) return 3;                      // DECERR
        if (len > max_burst) return 2;                       // SLVERR: the port refuses it
        if (addr < err_hi && end > err_lo) return 2;         // SLVERR
        return 0;
    }

    // Protocol checks of one address (both channels share them).
    void check_address(uint64_t addr, unsigned len, unsigned size) {
        if ((addr & 0xFFF) + uint64_t(len) * BPW > 4096) counters[VIOLATIONS]++;
        if ((1u << size) != BPW) counters[VIOLATIONS]++;
        if (len > max_burst) { counters[VIOLATIONS]++; counters[BURST_VIOLATIONS]++; }
    }

    // VALID must stay high, and the payload unchanged, from the cycle it rises to READY.
    void check_held(Held &h, bool valid, bool ready, const Payload &payload) {
        if (h.pending && (!valid || payload != h.payload)) {
            counters[VIOLATIONS]++;
            counters[STABILITY_VIOLATIONS]++;
        }
        h.pending = valid && !ready;
        h.payload = payload;
    }

    // An address channel's (AR or AW) sampling: VALID and the payload held until READY, a
    // stall counted, the address checked when the handshake happens; returns whether it did.
    bool address_handshake(Held &h, bool valid, bool ready, uint64_t addr, unsigned len,
                           unsigned size, unsigned burst, Counter stalls) {
        check_held(h, valid, ready, Payload{addr, len, size, burst});
        if (valid && !ready) counters[stalls]++;
        if (valid && ready) check_address(addr, len + 1u, size);
        return valid && ready;
    }

    // The burst the next AW (at `aw_count`) or W beat belongs to, created on first sight.
    WriteBurst &write_burst(WriteState &p, size_t i) {
        while (p.writes.size() <= i) {
            WriteBurst b;
            b.w_first = write_order == W_FIRST
                        || (write_order == RANDOM_ORDER && (next(order_rng) >> 33 & 1));
            p.writes.push_back(b);
        }
        return p.writes[i];
    }

    static size_t w_index(const WriteState &p) {
        size_t i = 0;
        while (i < p.writes.size() && p.writes[i].closed) i++;
        return i;
    }

    static unsigned writes_in_flight(const WriteState &p) {
        return p.aw_count + unsigned(p.responses.size());
    }

    // The front burst is complete (AW and every W beat): write memory, queue its response.
    void retire_writes(WriteState &p) {
        while (!p.writes.empty() && p.writes.front().have_aw && p.writes.front().closed) {
            WriteBurst &b = p.writes.front();
            if (b.beats != b.len) counters[VIOLATIONS]++;    // WLAST before the AW's length
            if (b.resp == 0) {
                unsigned n = b.beats < b.len ? b.beats : b.len;
                for (unsigned k = 0; k < n; k++) {
                    uint8_t *dst = &mem[b.addr + uint64_t(k) * BPW];
                    for (int i = 0; i < BPW; i++)
                        if (b.strb[k] >> i & 1) dst[i] = b.data[size_t(k) * BPW + i];
                }
            }
            p.responses.push_back({cycle + write_latency, b.resp});
            p.writes.pop_front();
            p.aw_count--;
        }
    }

    bool dram_has_word() const { return dram <= 0 || budget >= BPW; }

    // Round-robin: a write port offers a W beat now (its WVALID, a registered output).
    bool write_waiting() const {
        for (const auto &p : wports)
            if (*p.pins.wvalid) return true;
        return false;
    }

    // An R beat may take a word of the budget: reads first, or, round-robin, not on the
    // write's turn unless a word is left for the W beat.
    bool read_may_take() const {
        if (!dram_has_word()) return false;
        if (dram <= 0 || arbitration == 0 || !write_turn) return true;
        return budget >= 2 * BPW || !write_waiting();
    }

    // A write port's outputs from its state (before the clock edge).
    void drive_write(WriteState &p) {
        WritePins &q = p.pins;
        WriteBurst &next_aw = write_burst(p, p.aw_count);
        bool aw_room = outstanding_writes == 0 || writes_in_flight(p) < outstanding_writes;
        *q.awready = !paused() && aw_room && (!next_aw.w_first || next_aw.closed);
        size_t wi = w_index(p);
        WriteBurst &next_w = write_burst(p, wi);
        // W ahead of its AW is buffered for at most as many bursts as AWs may be outstanding.
        size_t ahead = wi >= p.aw_count ? wi - p.aw_count : 0;
        size_t ahead_limit = outstanding_writes ? outstanding_writes : 64;
        bool w_open = next_w.have_aw || (next_w.w_first && ahead < ahead_limit);
        *q.wready = !paused() && w_open && w_budget >= (dram > 0 ? BPW : 0);
        // the word this port's beat will take, out of what is left for the ports after it
        if (dram > 0 && *q.wready && *q.wvalid) w_budget -= BPW;
        bool gap = paused();
        if (!p.b_shown && !p.responses.empty() && p.responses.front().due <= cycle && !gap)
            p.b_shown = true;
        *q.bvalid = p.b_shown;
        if (p.b_shown) *q.bresp = p.responses.front().resp;
        *q.bid = 0;
    }

    // A write port's handshakes, sampled before the clock edge.
    void sample_write(WriteState &p) {
        WritePins &q = p.pins;
        p.aw = address_handshake(p.aw_held, *q.awvalid, *q.awready, uint64_t(*q.awaddr),
                                 *q.awlen, *q.awsize, *q.awburst, AW_STALLS);
        if (p.aw) {
            p.aw_addr = *q.awaddr;
            p.aw_len = *q.awlen + 1u;
        }
        bool wv = *q.wvalid, wr = *q.wready;
        get_bytes(*q.wdata, p.wdata);
        p.wstrb = get_strb(*q.wstrb);
        p.wlast = *q.wlast;
        Payload wpayload{};
        std::memcpy(wpayload.data(), p.wdata, BPW);
        wpayload[BPW / 8] = p.wstrb;
        wpayload[BPW / 8 + 1] = p.wlast;
        check_held(p.w_held, wv, wr, wpayload);
        if (wv && !wr) counters[W_STALLS]++;
        p.w = wv && wr;
        p.bfire = p.b_shown && *q.bready;
    }

    // A write port's state after the clock edge.
    void update_write(WriteState &p) {
        if (p.w) {
            counters[WRITE_BEATS]++;
            if (dram > 0) budget -= BPW;
            write_turn = false;
            WriteBurst &b = write_burst(p, w_index(p));
            b.data.insert(b.data.end(), p.wdata, p.wdata + BPW);
            b.strb.push_back(p.wstrb);
            b.beats++;
            if (b.have_aw) {
                b.closed = b.beats == b.len;
                if (b.closed != p.wlast) counters[VIOLATIONS]++;
            } else {
                b.closed = p.wlast;
                // No WLAST within the longest burst AXI has: a violation; close it anyway.
                if (!p.wlast && b.beats == 256) { counters[VIOLATIONS]++; b.closed = true; }
            }
        }
        if (p.aw) {
            WriteBurst &b = write_burst(p, p.aw_count);
            b.have_aw = true;
            b.addr = p.aw_addr;
            b.len = p.aw_len;
            b.resp = check(p.aw_addr, p.aw_len);
            if (b.beats >= b.len) b.closed = true;   // (a WLAST misplaced counts at retiring)
            p.aw_count++;
            counters[WRITE_BURSTS]++;
            if (writes_in_flight(p) > counters[MAX_WRITES_IN_FLIGHT])
                counters[MAX_WRITES_IN_FLIGHT] = writes_in_flight(p);
        }
        if (p.bfire) {
            p.responses.pop_front();
            p.b_shown = false;
        }
        retire_writes(p);
    }

    // A read port's outputs from its state (before the clock edge).
    void drive_read(ReadState &p) {
        ReadPins &q = p.pins;
        bool ar_room = outstanding_reads == 0 || p.reads.size() < outstanding_reads;
        *q.arready = !paused() && ar_room;
        bool gap = paused();
        if (!p.r_shown && !p.reads.empty() && p.reads.front().due <= cycle && !gap
            && read_may_take()) {
            p.r_shown = true;
            if (dram > 0) budget -= BPW;
            write_turn = true;
        }
        if (p.r_shown) {
            ReadBurst &b = p.reads.front();
            if (b.resp == 0) put_bytes(*q.rdata, &mem[b.addr + uint64_t(b.beat) * BPW]);
            else { uint8_t z[BPW] = {0}; put_bytes(*q.rdata, z); }
            *q.rresp = b.resp;
            *q.rlast = b.beat + 1 == b.len;
            *q.rid = 0;
        }
        *q.rvalid = p.r_shown;
    }

    // A read port's handshakes, sampled before the clock edge.
    void sample_read(ReadState &p) {
        ReadPins &q = p.pins;
        p.ar = address_handshake(p.ar_held, *q.arvalid, *q.arready, uint64_t(*q.araddr),
                                 *q.arlen, *q.arsize, *q.arburst, AR_STALLS);
        p.nb = ReadBurst{};
        if (p.ar) {
            p.nb.addr = *q.araddr;
            p.nb.len = *q.arlen + 1u;
            p.nb.due = cycle + read_latency;
            p.nb.resp = check(p.nb.addr, p.nb.len);
        }
        p.r = p.r_shown && *q.rready;
    }

    // A read port's state after the clock edge.
    void update_read(ReadState &p) {
        if (p.r) {
            counters[READ_BEATS]++;
            p.r_shown = false;
            ReadBurst &b = p.reads.front();
            if (++b.beat == b.len) p.reads.pop_front();
        }
        if (p.ar) {
            p.reads.push_back(p.nb);
            counters[READ_BURSTS]++;
            if (p.reads.size() > counters[MAX_READS_IN_FLIGHT])
                counters[MAX_READS_IN_FLIGHT] = p.reads.size();
        }
    }

    // One clock cycle: drive the model's outputs, sample handshakes, clock edge, update.
    void tick() {
        // ---- drive subordinate outputs from the model state ----
        for (auto &p : rports) drive_read(p);
        // The budget the write ports share this cycle (what the R beats left): each W beat
        // one word, so that several ports cannot each take a beat on one word (and so
        // overdraw it, and the reads after them, under reads-first). The ports take turns
        // at going first.
        w_budget = budget;
        for (size_t i = 0; i < wports.size(); i++)
            drive_write(wports[(i + cycle) % wports.size()]);
        top->clk = 0;
        top->eval();
#if TRACE
        if (vcd) vcd->dump(2 * cycle);
#endif

        // ---- sample handshakes ----
        for (auto &p : rports) sample_read(p);
        for (auto &p : wports) sample_write(p);

        // ---- clock edge ----
        top->clk = 1;
        top->eval();
#if TRACE
        if (vcd) vcd->dump(2 * cycle + 1);
#endif
        cycle++;

        // ---- update the model ----
        for (auto &p : rports) update_read(p);
        for (auto &p : wports) update_write(p);
        // (the beats of a cycle never take more than the budget held: a check of the above)
        if (dram > 0 && budget < 0) counters[DRAM_OVERDRAWN]++;
        if (dram > 0) budget = std::min(budget + dram, DRAM_BURST_BEATS * BPW);
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
#if TRACE
void sim_trace(const char *path) { trace_path = path; }
#endif
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
uint64_t sim_violations(void *h) { return static_cast<Sim *>(h)->counters[VIOLATIONS]; }
int sim_irq(void *h) { return static_cast<Sim *>(h)->top->irq; }
void sim_set_error_range(void *h, uint64_t lo, uint64_t hi) {
    Sim *s = static_cast<Sim *>(h);
    s->err_lo = lo; s->err_hi = hi;
}
// Read latency and pause only (the write latency keeps its value).
void sim_set_timing(void *h, unsigned latency, double pause) {
    Sim *s = static_cast<Sim *>(h);
    s->read_latency = latency; s->pause = pause;
}
// The port's knobs (see the top of this file); takes effect for bursts not yet accepted.
void sim_configure(void *h, unsigned outstanding_reads, unsigned outstanding_writes,
                   unsigned read_latency, unsigned write_latency, unsigned max_burst,
                   unsigned write_order, double pause) {
    Sim *s = static_cast<Sim *>(h);
    s->outstanding_reads = outstanding_reads; s->outstanding_writes = outstanding_writes;
    s->read_latency = read_latency; s->write_latency = write_latency;
    s->max_burst = max_burst; s->write_order = write_order; s->pause = pause;
}
// The DRAM's bytes per cycle behind all ports (0: unlimited) and who goes first when it is
// short (0 reads first, 1 round-robin); the budget starts full.
void sim_set_dram(void *h, double bytes_per_cycle, unsigned arbitration) {
    Sim *s = static_cast<Sim *>(h);
    s->dram = bytes_per_cycle;
    s->arbitration = arbitration;
    s->write_turn = false;
    s->budget = DRAM_BURST_BEATS * BPW;
}
uint64_t sim_beats(void *h, int writes) {
    Sim *s = static_cast<Sim *>(h);
    return s->counters[writes ? WRITE_BEATS : READ_BEATS];
}
uint64_t sim_counter(void *h, int which) {
    Sim *s = static_cast<Sim *>(h);
    return which >= 0 && which < N_COUNTERS ? s->counters[which] : 0;
}
void sim_clear_counters(void *h) {
    Sim *s = static_cast<Sim *>(h);
    uint64_t keep = s->counters[VIOLATIONS];   // violations accumulate for the whole run
    uint64_t keep_s = s->counters[STABILITY_VIOLATIONS], keep_b = s->counters[BURST_VIOLATIONS];
    for (auto &c : s->counters) c = 0;
    s->counters[VIOLATIONS] = keep;
    s->counters[STABILITY_VIOLATIONS] = keep_s; s->counters[BURST_VIOLATIONS] = keep_b;
}
uint64_t sim_outstanding(void *h) {
    Sim *s = static_cast<Sim *>(h);
    uint64_t writes = 0;
    for (auto &p : s->wports) {
        for (auto &b : p.writes) writes += b.have_aw || b.beats;
        writes += p.responses.size();
    }
    uint64_t reads = 0;
    for (auto &p : s->rports) reads += p.reads.size();
    return reads + writes;
}
}
