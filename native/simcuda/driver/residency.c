/* residency.c — simcuda: where managed memory lives, on the device clock, and the high-water mark of
 * resident device bytes (SIMCUDA_STATS "resident_peak_bytes").
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
 *    swap engine moves whole blocks): never populated -> it becomes resident at the kernel's start, no
 *    cost (first touch with the device as preferred location); on its way to the device -> the kernel
 *    starts when it has arrived; on the host -> a fault: the kernel starts no earlier than the data has
 *    landed on the host and runs SIMCUDA_FAULT_NS (default 20000) + bytes / h2d_gbps longer, the bytes
 *    resident from its start (counted: "faults");
 *  - freeing a managed allocation gives its resident bytes back at once.
 * Ordinary device allocations count from the host time of their allocation to that of their free (the
 * stream-ordered ones from where their stream gets to the call, when that is later).  The
 * high-water mark is taken over all of it, sorted by time (frees first at equal times), at exit.
 * Residency is tracked per allocation, not per page. */
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
};

static pthread_mutex_t g_rlock = PTHREAD_MUTEX_INITIALIZER;
static struct mres *g_m;          /* sorted by addr */
static size_t g_nm, g_capm;
struct rev { uint64_t t; int64_t d; int device, managed; };
static struct rev *g_ev;
static size_t g_nev, g_capev;
static int g_logging = -1;
static uint64_t g_faults, g_prefetches, g_prefetch_bytes;
static uint64_t g_fault_ns = 20000;

static int logging(void)
{
    if (g_logging < 0) {
        const char *s = getenv("SIMCUDA_STATS");
        const char *f = getenv("SIMCUDA_FAULT_NS");
        if (f && *f) g_fault_ns = strtoull(f, NULL, 10);
        g_logging = s && *s;
    }
    return g_logging;
}

/* g_rlock held */
static int g_log_managed = 1;
static void log_ev(uint64_t t, int64_t d, int device)
{
    if (!logging() || d == 0) return;
    if (g_nev == g_capev) {
        size_t n = g_capev ? g_capev * 2 : 4096;
        struct rev *e = realloc(g_ev, n * sizeof *e);
        if (!e) return;
        g_ev = e;
        g_capev = n;
    }
    g_ev[g_nev++] = (struct rev){t, d, device, g_log_managed};
}

/* the stream-ordered allocator's calls count where their stream gets to them (sim_res_stream_time) */
static __thread uint64_t t_stream_time;
HIDDEN void sim_res_stream_time(uint64_t t) { t_stream_time = t; }

HIDDEN void sim_res_device_bytes(int device, int64_t delta)
{
    if (!logging()) return;
    uint64_t now = sim_now_ns();
    if (t_stream_time > now) now = t_stream_time;
    t_stream_time = 0;
    pthread_mutex_lock(&g_rlock);
    g_log_managed = 0;
    log_ev(now, delta, device);
    g_log_managed = 1;
    pthread_mutex_unlock(&g_rlock);
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
    g_m[i] = (struct mres){addr, size, device, LOC_NONE, 0};
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

/* a prefetch of [p, p+n) to the device (to_device) or to the host, on queue q */
HIDDEN CUresult sim_res_prefetch(uint64_t p, uint64_t n, int to_device, int device, struct sim_queue *q)
{
    (void)n;
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
    pthread_mutex_unlock(&g_rlock);
    /* a never-populated range prefetched to the device is populated there: no bytes move */
    uint64_t bytes = (to_device && m.loc == LOC_NONE) ? 0 : m.size;
    struct sim_opdesc op = {.kind = SIMCU_OP_MEMCPY, .engine = to_device ? SIM_ENGINE_H2D : SIM_ENGINE_D2H,
                            .bytes = bytes, .copy_kind = to_device ? 1 : 2, .src_kind = 5, .dst_kind = 5,
                            .unrecorded = 1};
    op.dur_ns = sim_copy_ns(op.engine, bytes);
    op.not_before = to_device ? m.at : 0; /* a swap-in after its own swap-out */
    uint64_t start = 0;
    uint64_t end = sim_dev_submit_at(q, &op, 0, &start);
    pthread_mutex_lock(&g_rlock);
    i = find(p);
    if (i >= 0) {
        struct mres *r = &g_m[i];
        if (to_device) log_ev(start, (int64_t)r->size, r->device);
        else log_ev(end, -(int64_t)r->size, r->device);
        r->loc = want;
        r->at = end;
        g_prefetches++;
        g_prefetch_bytes += bytes;
    }
    pthread_mutex_unlock(&g_rlock);
    (void)device;
    return CUDA_SUCCESS;
}

/* before a kernel is submitted: the managed allocations its parameters name; sets op->not_before and
 * adds the faults' cost to op->dur_ns; returns how many allocations become resident at its start
 * (their indices in touched[], at most max) */
HIDDEN int sim_res_kernel_begin(void **params, const size_t *sizes, unsigned nparams, struct sim_opdesc *op,
                                uint64_t *touched, int max)
{
    if (!g_nm || !params) return 0;
    int nt = 0;
    pthread_mutex_lock(&g_rlock);
    for (unsigned k = 0; k < nparams; k++) {
        if (sizes[k] != 8 || !params[k]) continue;
        uint64_t v;
        memcpy(&v, params[k], 8);
        long i = find(v);
        if (i < 0) continue;
        struct mres *m = &g_m[i];
        if (m->loc == LOC_DEVICE) {
            if (m->at > op->not_before) op->not_before = m->at;
            continue;
        }
        if (m->loc == LOC_HOST) {   /* a fault: the data comes back while the kernel waits */
            if (m->at > op->not_before) op->not_before = m->at;
            op->dur_ns += g_fault_ns + sim_copy_ns(SIM_ENGINE_H2D, m->size);
            op->fault_ns += g_fault_ns + sim_copy_ns(SIM_ENGINE_H2D, m->size);
            g_faults++;
        }
        if (nt < max) touched[nt++] = m->addr;
        m->loc = LOC_DEVICE;
        m->at = 0;
    }
    pthread_mutex_unlock(&g_rlock);
    return nt;
}

/* after the kernel was submitted (its device start known): the touched allocations count from then */
HIDDEN void sim_res_kernel_end(const uint64_t *touched, int nt, uint64_t start)
{
    pthread_mutex_lock(&g_rlock);
    for (int k = 0; k < nt; k++) {
        long i = find(touched[k]);
        if (i < 0) continue;
        log_ev(start, (int64_t)g_m[i].size, g_m[i].device);
        if (g_m[i].at < start) g_m[i].at = start;
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

HIDDEN void sim_res_counts(uint64_t *faults, uint64_t *prefetches, uint64_t *bytes)
{
    *faults = g_faults;
    *prefetches = g_prefetches;
    *bytes = g_prefetch_bytes;
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
