/* residency.c — simcuda: where managed memory lives, on the device clock, the device's capacity, and the
 * high-water mark of resident device bytes (SIMCUDA_STATS "resident_peak_bytes").
 *
 * The model (issue 31; docs/swap-run.md):
 *  - a managed allocation (cuMemAllocManaged) has no page anywhere until it is touched or prefetched;
 *    it counts against the device only while it is resident there;
 *  - cuMemPrefetchAsync[_v2] to a device is a copy on the H2D engine of the stream (bytes / h2d_gbps +
 *    copy latency): the bytes are taken on the device when it STARTS and usable when it ENDS; to the host
 *    (CU_DEVICE_CPU / a host location) it is a copy on the D2H engine, the device bytes given back when it
 *    ENDS.  A prefetch of a range that is already where it is sent costs nothing (no op).  Prefetches leave
 *    no CUPTI record (real CUPTI reports them as unified-memory counters, not memcpy);
 *  - a kernel whose parameters point into a managed allocation touches it (the whole allocation: the
 *    swap engine moves whole blocks): never populated (or discarded) -> it becomes resident at the kernel's
 *    start, and the kernel runs SIMCUDA_FAULT_NS + bytes / SIMCUDA_POPULATE_GBPS (default 11) longer: the
 *    device populates it page fault by page fault (counted: "first_touches"; an H100, 2026-11-28: a median
 *    8 MiB block first written by a kernel took it 0.75 ms longer).  A prefetch to the device of a range
 *    never populated populates it there at no cost (a stream-ordered op of no duration); on its way to the device -> the kernel
 *    starts when it has arrived; on the host -> a fault: the kernel starts no earlier than the data has
 *    landed on the host and runs SIMCUDA_FAULT_NS (default 20000) + bytes / h2d_gbps longer, the bytes
 *    resident from its start (counted: "faults");
 *  - freeing a managed allocation gives its resident bytes back at once.
 *
 * The device's capacity (SIMCUDA_MEMORY_BYTES) bounds the resident bytes on the device clock, as UVM does:
 *  - resident device bytes = ordinary allocations (cuMemAlloc*, counted from the host time of the
 *    allocation, or where its stream gets to a stream-ordered one, to that of its free) + resident managed
 *    bytes; they never exceed the capacity;
 *  - a prefetch to the device, or a kernel's touch of managed memory that is not resident (a fault or a
 *    first touch), that needs room evicts OTHER resident managed allocations of the device, least recently
 *    used first (last use: the end of the last kernel that named it, or of the prefetch that brought it):
 *    each eviction is a D2H copy-engine op on the device clock (a queue of simcuda's own), starting no
 *    earlier than the victim's last use, its bytes given back at its end; the prefetch or kernel starts
 *    after the evictions end (counted: "evictions", "evicted_bytes").  Allocations the kernel itself names
 *    are never victims.  Room is judged over the whole known future of the device clock (from the op's
 *    earliest start on: ops already enqueued may hold bytes later), so the bound holds whatever order the
 *    ops were enqueued in;
 *  - what cannot be made room for (all the other managed bytes would not be enough: ordinary allocations
 *    hold the rest) stays on the host: the prefetch does nothing; a kernel that touches it pays the fault
 *    cost (SIMCUDA_FAULT_NS + bytes / h2d_gbps: served from host memory) and it stays on the host (counted:
 *    "faults" and "no_room", which also counts such prefetches);
 *  - ordinary memory is never evicted.  An ordinary allocation (cuMemAlloc*) that fits beside the other
 *    ordinary allocations (the only check that can fail it: simcuda's OOM is unchanged) but needs room held
 *    by resident managed memory EVICTS it, least recently used first, as above; the allocating call returns
 *    (and its bytes count) when the evictions have ended: the host waits for them, as a real cudaMalloc
 *    waits for the driver.  This is what NVIDIA's UVM driver does: its physical memory manager registers
 *    eviction callbacks with the allocator it shares with the resource manager "to make it possible for
 *    other PMA clients (most importantly RM which CUDA uses for non-UVM allocations) to successfully
 *    allocate memory from the user memory pool allocated by UVM" (nvidia-uvm uvm_pmm_gpu.c, in the
 *    open-gpu-kernel-modules sources and the 390.48 driver's uvm8_pmm_gpu.c), and the CUDA runtime
 *    reference says of cudaMallocManaged on such GPUs that managed memory "may be evicted from device memory
 *    to host memory at any time by the Unified Memory driver in order to make room for other allocations".
 *    Not established: how long a real cudaMalloc takes when it evicts, and the driver's LRU order exactly
 *    (uvm_pmm_gpu.c orders its list by when a 2 MiB root chunk was last made resident — it does not see
 *    accesses to resident pages —, simcuda by a whole allocation's last use);
 *  - cuMemGetInfo's free memory counts the managed bytes resident at the moment of the call as used.
 * cuMemCreate (VMM) and graph memory pools are charged against the capacity at allocation (memory.c) but
 * are not on this timeline.  The high-water mark is taken over all of it, sorted by time (frees first at
 * equal times), at exit.  Residency is tracked per allocation, not per page. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../sim_driver.h"

enum { LOC_NONE = 0, LOC_DEVICE = 1, LOC_HOST = 2 };

struct mres {
    uint64_t addr, size;
    int device;
    int loc;           /* where the data is (or is going: the last prefetch decides) */
    uint64_t at;       /* device time from which it is there (a prefetch's end) */
    uint64_t last_use; /* device time of its last use (a kernel's end, a prefetch's arrival): the LRU order */
};

static pthread_mutex_t g_rlock = PTHREAD_MUTEX_INITIALIZER;
static struct mres *g_m;          /* sorted by addr */
static size_t g_nm, g_capm;
struct rev { uint64_t t; int64_t d; int device, managed; };
static struct rev *g_ev;
static size_t g_nev, g_capev;
static int g_logging = -1;
static uint64_t g_faults, g_prefetches, g_prefetch_bytes, g_evictions, g_evicted_bytes, g_no_room, g_first_touches;
static uint64_t g_fault_ns = 20000;
static double g_populate_gbps = 11.0;

static struct sim_queue g_evq[SIM_MAX_DEVICES]; /* the evictions' queue, per device */
static int g_evq_ready[SIM_MAX_DEVICES];

static int logging(void)
{
    if (g_logging < 0) {
        const char *s = getenv("SIMCUDA_STATS");
        const char *f = getenv("SIMCUDA_FAULT_NS");
        if (f && *f) g_fault_ns = strtoull(f, NULL, 10);
        const char *pg = getenv("SIMCUDA_POPULATE_GBPS");
        if (pg && atof(pg) > 0) g_populate_gbps = atof(pg);
        g_logging = s && *s;
    }
    return g_logging;
}

/* per device, the timeline of resident bytes the capacity is checked on: changes at or before the
 * present are summed (settled), later ones (the device clock runs behind the host) kept pending */
struct mtev { uint64_t t; int64_t d; int managed; };
static struct mtev *g_pend[SIM_MAX_DEVICES];
static size_t g_npend[SIM_MAX_DEVICES], g_cappend[SIM_MAX_DEVICES], g_foldat[SIM_MAX_DEVICES];
static int64_t g_settled[SIM_MAX_DEVICES], g_settled_managed[SIM_MAX_DEVICES];

/* g_rlock held: the changes at or before now join the settled sums */
static void fold(int dev, uint64_t now)
{
    size_t k = 0;
    for (size_t i = 0; i < g_npend[dev]; i++) {
        struct mtev e = g_pend[dev][i];
        if (e.t <= now) {
            g_settled[dev] += e.d;
            if (e.managed) g_settled_managed[dev] += e.d;
        } else {
            g_pend[dev][k++] = e;
        }
    }
    g_npend[dev] = k;
    g_foldat[dev] = 2 * k > 4096 ? 2 * k : 4096;
}

/* g_rlock held */
static int g_log_managed = 1;
static void log_ev(uint64_t t, int64_t d, int device)
{
    if (d == 0) return;
    if (device >= 0 && device < SIM_MAX_DEVICES) {
        if (g_npend[device] >= g_foldat[device]) fold(device, sim_now_ns());
        if (g_npend[device] == g_cappend[device]) {
            size_t n = g_cappend[device] ? g_cappend[device] * 2 : 4096;
            struct mtev *e = realloc(g_pend[device], n * sizeof *e);
            if (e) g_pend[device] = e, g_cappend[device] = n;
        }
        if (g_npend[device] < g_cappend[device])
            g_pend[device][g_npend[device]++] = (struct mtev){t, d, g_log_managed};
        if (!g_foldat[device]) g_foldat[device] = 4096;
    }
    if (!logging()) return;
    if (g_nev == g_capev) {
        size_t n = g_capev ? g_capev * 2 : 4096;
        struct rev *e = realloc(g_ev, n * sizeof *e);
        if (!e) return;
        g_ev = e;
        g_capev = n;
    }
    g_ev[g_nev++] = (struct rev){t, d, device, g_log_managed};
}

static int cmp_mtev(const void *a, const void *b)
{
    const struct mtev *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return (x->d > y->d) - (x->d < y->d); /* frees first */
}

/* g_rlock held: the highest resident byte count on dev at any device time from s on (what is known now) */
static int64_t suffix_max(int dev, uint64_t s, int64_t bytes)
{
    fold(dev, sim_now_ns());
    int64_t level = g_settled[dev], bound = level;
    for (size_t i = 0; i < g_npend[dev]; i++)
        if (g_pend[dev][i].d > 0) bound += g_pend[dev][i].d;
    if (bound + bytes <= (int64_t)sim_capacity()) return bound; /* the fast answer: it fits whatever the order */
    qsort(g_pend[dev], g_npend[dev], sizeof *g_pend[dev], cmp_mtev);
    size_t i = 0;
    for (; i < g_npend[dev] && g_pend[dev][i].t <= s; i++) level += g_pend[dev][i].d;
    int64_t best = level;
    for (; i < g_npend[dev]; i++) {
        level += g_pend[dev][i].d;
        if (level > best) best = level;
    }
    return best;
}

/* g_rlock held: the earliest device time from s on after which `bytes` more fit on dev for good, on what
 * is known now (s itself when they fit at once; UINT64_MAX when they never do) */
static uint64_t fits_from(int dev, uint64_t s, int64_t bytes)
{
    int64_t cap = (int64_t)sim_capacity();
    int64_t m = suffix_max(dev, s, bytes); /* sorts the pending changes unless the fast answer fits */
    if (m + bytes <= cap) return s;
    size_t n = g_npend[dev], i = 0;
    int64_t level = g_settled[dev];
    for (; i < n && g_pend[dev][i].t <= s; i++) level += g_pend[dev][i].d;
    /* the level after each later change, then from the last one back the highest from there on */
    int64_t *after = malloc((n - i + 1) * sizeof *after);
    if (!after) return UINT64_MAX;
    for (size_t k = i; k < n; k++) after[k - i] = (level += g_pend[dev][k].d);
    uint64_t t = UINT64_MAX;
    int64_t hi = INT64_MIN;
    for (size_t k = n; k-- > i;) {
        if (after[k - i] > hi) hi = after[k - i];
        if (k + 1 < n && g_pend[dev][k + 1].t == g_pend[dev][k].t) continue; /* after all changes at that time */
        if (hi + bytes <= cap) t = g_pend[dev][k].t;
        else break;
    }
    free(after);
    return t;
}

/* g_rlock held: evict managed allocation i to the host (a D2H op of simcuda's own, after its last use);
 * returns the device time its bytes are given back */
static uint64_t evict(size_t i)
{
    struct mres *m = &g_m[i];
    int dev = m->device;
    if (!g_evq_ready[dev]) {
        sim_queue_init(&g_evq[dev], dev, 1);
        g_evq_ready[dev] = 1;
    }
    struct sim_opdesc op = {.kind = SIMCU_OP_MEMCPY, .engine = SIM_ENGINE_D2H, .bytes = m->size, .copy_kind = 2,
                            .src_kind = 5, .dst_kind = 5, .unrecorded = 1};
    op.dur_ns = sim_copy_ns(SIM_ENGINE_D2H, m->size);
    op.not_before = m->last_use > m->at ? m->last_use : m->at;
    uint64_t start = 0;
    uint64_t end = sim_dev_submit_at(&g_evq[dev], &op, 0, &start);
    if (!end) end = sim_now_ns() > op.not_before ? sim_now_ns() : op.not_before; /* the fast path: done already */
    log_ev(end, -(int64_t)m->size, dev);
    m->loc = LOC_HOST;
    m->at = end;
    g_evictions++;
    g_evicted_bytes += m->size;
    return end;
}

struct cand { uint64_t last_use, addr; size_t i; };
static int cmp_cand(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->last_use != y->last_use) return x->last_use < y->last_use ? -1 : 1;
    return (x->addr > y->addr) - (x->addr < y->addr);
}

/* g_rlock held: room for `bytes` more on dev from device time s on, evicting resident managed allocations
 * (not those in keep[]) least recently used first.  All or nothing unless partial (then as much as there
 * is).  Returns 1 when there is room; *ready = when the evictions made for it have ended (0: none made). */
static int make_room(int dev, uint64_t s, int64_t bytes, const uint64_t *keep, int nkeep, int partial,
                     uint64_t *ready)
{
    *ready = 0;
    int64_t need = suffix_max(dev, s, bytes) + bytes - (int64_t)sim_capacity();
    if (need <= 0) return 1;
    struct cand *c = malloc((g_nm ? g_nm : 1) * sizeof *c);
    if (!c) return 0;
    size_t nc = 0;
    int64_t total = 0;
    for (size_t i = 0; i < g_nm; i++) {
        if (g_m[i].device != dev || g_m[i].loc != LOC_DEVICE) continue;
        int kept = 0;
        for (int k = 0; k < nkeep && !kept; k++) kept = keep[k] == g_m[i].addr;
        if (kept) continue;
        c[nc++] = (struct cand){g_m[i].last_use, g_m[i].addr, i};
        total += (int64_t)g_m[i].size;
    }
    if (total < need && !partial) {
        free(c);
        return 0;
    }
    qsort(c, nc, sizeof *c, cmp_cand);
    for (size_t k = 0; k < nc && need > 0; k++) {
        uint64_t e = evict(c[k].i);
        if (e > *ready) *ready = e;
        need -= (int64_t)g_m[c[k].i].size;
    }
    free(c);
    return need <= 0;
}

/* the stream-ordered allocator's calls count where their stream gets to them (sim_res_stream_time) */
static __thread uint64_t t_stream_time;
HIDDEN void sim_res_stream_time(uint64_t t) { t_stream_time = t; }

/* an ordinary allocation (delta > 0) or free: it counts from now (or where its stream gets to it); an
 * allocation that needs room held by resident managed memory evicts it, and returns when that is done */
HIDDEN void sim_res_device_bytes(int device, int64_t delta)
{
    uint64_t now = sim_now_ns();
    if (t_stream_time > now) now = t_stream_time;
    t_stream_time = 0;
    uint64_t ready = 0, wait = 0;
    pthread_mutex_lock(&g_rlock);
    if (delta > 0 && g_nm && device >= 0 && device < SIM_MAX_DEVICES) {
        /* room: resident managed memory evicted, then (managed bytes still on their way out, stream-ordered
         * frees not yet reached on the device clock) from when the device clock has it */
        make_room(device, now, delta, NULL, 0, 1, &ready);
        uint64_t t = fits_from(device, ready > now ? ready : now, delta);
        if (t != UINT64_MAX && t > ready) ready = t;
        if (ready > now) now = wait = ready; /* only then: where there was room, nothing waits */
    }
    g_log_managed = 0;
    log_ev(now, delta, device);
    g_log_managed = 1;
    pthread_mutex_unlock(&g_rlock);
    if (wait) sim_wait_until(wait); /* the allocating call waits for the driver's evictions */
}

/* the managed bytes resident on device dev now (cuMemGetInfo counts them as used) */
HIDDEN uint64_t sim_res_managed_resident(int dev)
{
    if (dev < 0 || dev >= SIM_MAX_DEVICES) return 0;
    pthread_mutex_lock(&g_rlock);
    fold(dev, sim_now_ns());
    int64_t v = g_settled_managed[dev];
    pthread_mutex_unlock(&g_rlock);
    return v > 0 ? (uint64_t)v : 0;
}

/* g_rlock held: index of the allocation containing p, or -1 */
static long find(uint64_t p)
{
    size_t lo = 0, hi = g_nm;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (g_m[mid].addr <= p) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return -1;
    struct mres *m = &g_m[lo - 1];
    return p < m->addr + m->size ? (long)(lo - 1) : -1;
}

HIDDEN void sim_res_managed_alloc(uint64_t addr, uint64_t size, int device)
{
    pthread_mutex_lock(&g_rlock);
    if (g_nm == g_capm) {
        size_t n = g_capm ? g_capm * 2 : 256;
        struct mres *m = realloc(g_m, n * sizeof *m);
        if (!m) {
            pthread_mutex_unlock(&g_rlock);
            return;
        }
        g_m = m;
        g_capm = n;
    }
    size_t i = 0;
    while (i < g_nm && g_m[i].addr < addr) i++;
    memmove(&g_m[i + 1], &g_m[i], (g_nm - i) * sizeof *g_m);
    g_m[i] = (struct mres){addr, size, device, LOC_NONE, 0, 0};
    g_nm++;
    pthread_mutex_unlock(&g_rlock);
}

HIDDEN void sim_res_managed_free(uint64_t addr)
{
    pthread_mutex_lock(&g_rlock);
    long i = find(addr);
    if (i >= 0 && g_m[i].addr == addr) {
        struct mres *m = &g_m[i];
        if (m->loc == LOC_DEVICE) log_ev(sim_now_ns(), -(int64_t)m->size, m->device);
        else if (m->loc == LOC_HOST && m->at > sim_now_ns()) /* still leaving the device: gone now */
            log_ev(sim_now_ns(), -(int64_t)m->size, m->device), log_ev(m->at, (int64_t)m->size, m->device);
        memmove(&g_m[i], &g_m[i + 1], (g_nm - (size_t)i - 1) * sizeof *g_m);
        g_nm--;
    }
    pthread_mutex_unlock(&g_rlock);
}

/* a prefetch of [p, p+n) to the device (to_device) or to the host, on queue q; to the device it makes
 * room first (evictions), and does nothing when none can be made (the range stays where it is) */
HIDDEN CUresult sim_res_prefetch(uint64_t p, uint64_t n, int to_device, int device, struct sim_queue *q)
{
    (void)n;
    (void)device;
    pthread_mutex_lock(&g_rlock);
    long i = find(p);
    if (i < 0) {
        pthread_mutex_unlock(&g_rlock);
        return CUDA_SUCCESS;
    }
    struct mres m = g_m[i];
    int want = to_device ? LOC_DEVICE : LOC_HOST;
    if (m.loc == want || (!to_device && m.loc == LOC_NONE)) {
        pthread_mutex_unlock(&g_rlock);
        return CUDA_SUCCESS; /* already there (nothing to move off a device it never reached) */
    }
    /* a never-populated range prefetched to the device is populated there: no bytes move, no copy engine
     * (a stream-ordered op of no duration, as a discard is; assumed: not measured on a GPU) */
    int populate = to_device && m.loc == LOC_NONE;
    uint64_t bytes = populate ? 0 : m.size;
    struct sim_opdesc op = {.kind = SIMCU_OP_MEMCPY, .engine = to_device ? SIM_ENGINE_H2D : SIM_ENGINE_D2H,
                            .bytes = bytes, .copy_kind = to_device ? 1 : 2, .src_kind = 5, .dst_kind = 5,
                            .unrecorded = 1};
    op.dur_ns = sim_copy_ns(op.engine, bytes);
    if (populate) op.kind = SIMCU_OP_MEMSET, op.engine = SIM_ENGINE_COMPUTE, op.dur_ns = 0;
    op.not_before = to_device ? m.at : 0; /* a swap-in after its own swap-out */
    if (to_device) {
        uint64_t ready = 0;
        if (!make_room(m.device, sim_dev_peek_start(q, &op), (int64_t)m.size, &m.addr, 1, 0, &ready)) {
            g_no_room++;
            pthread_mutex_unlock(&g_rlock);
            return CUDA_SUCCESS; /* no room: it stays on the host; a kernel that needs it faults */
        }
        if (ready > op.not_before) op.not_before = ready;
    }
    uint64_t start = 0;
    uint64_t end = sim_dev_submit_at(q, &op, 0, &start);
    if (!start) start = end = sim_now_ns() > op.not_before ? sim_now_ns() : op.not_before;
    i = find(p);
    if (i >= 0) {
        struct mres *r = &g_m[i];
        if (to_device) log_ev(start, (int64_t)r->size, r->device);
        else log_ev(end, -(int64_t)r->size, r->device);
        r->loc = want;
        r->at = end;
        if (to_device && end > r->last_use) r->last_use = end;
        g_prefetches++;
        g_prefetch_bytes += bytes;
    }
    pthread_mutex_unlock(&g_rlock);
    return CUDA_SUCCESS;
}

/* before a kernel is submitted on q: the managed allocations its parameters name; sets op->not_before
 * and adds the faults' cost to op->dur_ns; returns how many allocations it names that are resident for it
 * (their addresses in touched[], at most max; fresh[k]: it becomes resident at the kernel's start) */
HIDDEN int sim_res_kernel_begin(struct sim_queue *q, void **params, const size_t *sizes, unsigned nparams,
                                struct sim_opdesc *op, uint64_t *touched, int *fresh, int max)
{
    if (!g_nm || !params) return 0;
    logging(); /* reads SIMCUDA_FAULT_NS */
    uint64_t named[64];
    int nn = 0, nt = 0;
    pthread_mutex_lock(&g_rlock);
    for (unsigned k = 0; k < nparams && nn < 64; k++) { /* what it names: never evicted to make room for it */
        if (sizes[k] != 8 || !params[k]) continue;
        uint64_t v;
        memcpy(&v, params[k], 8);
        long i = find(v);
        if (i < 0) continue;
        int dup = 0;
        for (int j = 0; j < nn && !dup; j++) dup = named[j] == g_m[i].addr;
        if (!dup) named[nn++] = g_m[i].addr;
    }
    for (int j = 0; j < nn; j++) {
        struct mres *m = &g_m[find(named[j])];
        if (m->loc == LOC_DEVICE && m->at > op->not_before) op->not_before = m->at;
    }
    int64_t extra = 0; /* bytes made resident for this kernel so far */
    for (int j = 0; j < nn; j++) {
        struct mres *m = &g_m[find(named[j])];
        if (m->loc == LOC_DEVICE) {
            if (nt < max) fresh[nt] = 0, touched[nt++] = m->addr;
            continue;
        }
        uint64_t ready = 0;
        int room = make_room(m->device, sim_dev_peek_start(q, op), extra + (int64_t)m->size, named, nn, 0, &ready);
        m = &g_m[find(named[j])];
        if (room && ready > op->not_before) op->not_before = ready;
        if (m->loc == LOC_HOST || !room) { /* a fault: the data comes back (or is read from the host) */
            if (m->loc == LOC_HOST && m->at > op->not_before) op->not_before = m->at;
            op->dur_ns += g_fault_ns + sim_copy_ns(SIM_ENGINE_H2D, m->size);
            op->fault_ns += g_fault_ns + sim_copy_ns(SIM_ENGINE_H2D, m->size);
            g_faults++;
        }
        if (!room) { /* no room on the device: it stays on the host */
            g_no_room++;
            if (m->loc == LOC_NONE) m->loc = LOC_HOST, m->at = 0;
            continue;
        }
        if (m->loc == LOC_NONE) { /* first touch: populated on the device page fault by page fault */
            uint64_t pop = g_fault_ns + (uint64_t)((double)m->size / g_populate_gbps);
            op->dur_ns += pop;
            op->fault_ns += pop;
            g_first_touches++;
        }
        extra += (int64_t)m->size;
        if (nt < max) fresh[nt] = 1, touched[nt++] = m->addr;
        m->loc = LOC_DEVICE;
        m->at = 0;
    }
    pthread_mutex_unlock(&g_rlock);
    return nt;
}

/* after the kernel was submitted (its device start and end known): the allocations made resident for it
 * count from its start; all it named were last used at its end */
HIDDEN void sim_res_kernel_end(const uint64_t *touched, const int *fresh, int nt, uint64_t start, uint64_t end)
{
    pthread_mutex_lock(&g_rlock);
    for (int k = 0; k < nt; k++) {
        long i = find(touched[k]);
        if (i < 0) continue;
        if (fresh[k]) {
            log_ev(start, (int64_t)g_m[i].size, g_m[i].device);
            if (g_m[i].at < start) g_m[i].at = start;
        }
        if (end > g_m[i].last_use) g_m[i].last_use = end;
    }
    pthread_mutex_unlock(&g_rlock);
}

static int cmp_ev(const void *a, const void *b)
{
    const struct rev *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return (x->d > y->d) - (x->d < y->d); /* frees first */
}

/* the high-water mark of resident device bytes on device dev (sorts the log: at exit);
 * SIMCUDA_RESIDENT_LOG=path: the sorted log too, one "time delta device managed" line per change (a test aid) */
HIDDEN uint64_t sim_res_peak(int dev)
{
    pthread_mutex_lock(&g_rlock);
    qsort(g_ev, g_nev, sizeof *g_ev, cmp_ev);
    const char *lp = getenv("SIMCUDA_RESIDENT_LOG");
    if (lp && *lp && dev == 0) {
        FILE *f = fopen(lp, "w");
        for (size_t i = 0; f && i < g_nev; i++)
            fprintf(f, "%llu %lld %d %d\n", (unsigned long long)g_ev[i].t, (long long)g_ev[i].d, g_ev[i].device,
                    g_ev[i].managed);
        if (f) fclose(f);
    }
    int64_t cur = 0, peak = 0;
    for (size_t i = 0; i < g_nev; i++) {
        if (g_ev[i].device != dev) continue;
        cur += g_ev[i].d;
        if (cur > peak) peak = cur;
    }
    pthread_mutex_unlock(&g_rlock);
    return (uint64_t)peak;
}

HIDDEN void sim_res_counts(uint64_t c[7])
{
    pthread_mutex_lock(&g_rlock);
    c[0] = g_faults;
    c[1] = g_prefetches;
    c[2] = g_prefetch_bytes;
    c[3] = g_evictions;
    c[4] = g_evicted_bytes;
    c[5] = g_no_room;
    c[6] = g_first_touches;
    pthread_mutex_unlock(&g_rlock);
}

/* a stream-ordered discard (cuMemDiscardBatchAsync): the range's pages are dropped where they are, when
 * the stream gets there; the next touch populates them afresh (their contents are undefined, as the real
 * call says) */
HIDDEN CUresult sim_res_discard(uint64_t p, struct sim_queue *q)
{
    struct sim_opdesc op = {.kind = SIMCU_OP_MEMSET, .engine = SIM_ENGINE_COMPUTE, .unrecorded = 1};
    uint64_t start = 0;
    sim_dev_submit_at(q, &op, 0, &start);
    if (!start) start = sim_now_ns();
    pthread_mutex_lock(&g_rlock);
    long i = find(p);
    if (i >= 0) {
        struct mres *m = &g_m[i];
        if (m->loc == LOC_DEVICE) log_ev(start, -(int64_t)m->size, m->device);
        else if (m->loc == LOC_HOST && m->at > start) /* still leaving: gone at the discard instead */
            log_ev(start, -(int64_t)m->size, m->device), log_ev(m->at, (int64_t)m->size, m->device);
        m->loc = LOC_NONE;
        m->at = 0;
    }
    pthread_mutex_unlock(&g_rlock);
    return CUDA_SUCCESS;
}
