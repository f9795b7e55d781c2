/* clock.c — simcuda's device clock: stream queues, engines, the bounded launch queue, the device-op log
 * (SIMCUDA_DEVICE_LOG) and the hook to the simulated CUPTI.  See sim_device.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "../sim_driver.h"

/* ---------------- the model's parameters ---------------- */

struct model {
    uint64_t kernel_ns;        /* SIMCUDA_KERNEL_NS: kernels without a duration of their own (0) */
    uint64_t launch_latency_ns; /* SIMCUDA_LAUNCH_LATENCY_NS: enqueue -> earliest start (0) */
    double gbps[SIM_NENGINES]; /* SIMCUDA_H2D_GBPS, _D2H_, _D2D_ (0 = copies take no time) */
    uint64_t copy_latency_ns;  /* SIMCUDA_COPY_LATENCY_NS: added to every copy (0) */
    double memset_gbps;        /* SIMCUDA_MEMSET_GBPS (0 = memsets take no time) */
    unsigned queue_depth;      /* SIMCUDA_QUEUE_DEPTH: unfinished ops a stream holds (1024) */
};

static struct model g_model = {0, 0, {0, 0, 0, 0}, 0, 0, 1024};
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct simcu_clock g_clock;

struct device_state {
    uint64_t legacy_tail;      /* last end on the legacy stream */
    uint64_t blocking_tail;    /* last end on any blocking stream (the legacy stream waits for these) */
    uint64_t all_tail;         /* last end of anything (cuCtxSynchronize) */
    uint64_t engine_free[SIM_NENGINES];
    struct sim_queue legacy;
    int timed;                 /* some op here has taken device time (or had a launch latency) */
};
static struct device_state g_dev[SIM_MAX_DEVICES];
/* The stall (SIMCUDA_STATS "stall_ns"): per device, how much later the program's kernels started than
 * their streams and the host let them — held by a cuStreamWaitEvent whose event completed after the
 * stream's own last op had ended, or by managed memory still on its way (not_before) — plus the time page
 * faults added to them.  Every op but prefetches (unrecorded copies: the swap engine's, on its own copy
 * streams), which are the cause, not the program's time. */
static uint64_t g_stall[SIM_MAX_DEVICES];
static __thread struct sim_queue *t_ptds[SIM_MAX_DEVICES];
static uint32_t g_next_stream_id = 13; /* CUPTI numbers the legacy stream 7, created streams from 13 */
static uint32_t g_next_corr;
static __thread int t_has_next;
static __thread uint64_t t_last_enqueue; /* the enqueue time of this thread's last computed op */
static __thread uint64_t t_next_ns;

static int g_log_fd = -1;
static const struct simcu_hooks *volatile g_hooks;

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : dflt;
}
static double env_f(const char *name, double dflt)
{
    const char *v = getenv(name);
    return v && *v ? strtod(v, NULL) : dflt;
}

static void atfork_prepare(void) { pthread_mutex_lock(&g_lock); }
static void atfork_parent(void) { pthread_mutex_unlock(&g_lock); }
static void atfork_child(void) { pthread_mutex_init(&g_lock, NULL); }

static void open_log(void)
{
    const char *path = getenv("SIMCUDA_DEVICE_LOG");
    if (!path || !*path) return;
    g_log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (g_log_fd < 0) {
        fprintf(stderr, "simcuda: cannot open SIMCUDA_DEVICE_LOG=%s: %s\n", path, strerror(errno));
        return;
    }
    static const char head[] =
        "# simcuda device log v1: op pid tid corr device stream enqueue_ns start_ns end_ns start_cupti "
        "end_cupti graph_id graph_node_id bytes name\n";
    if (write(g_log_fd, head, sizeof head - 1) < 0) { /* best effort */ }
}

static void init(void)
{
    g_model.kernel_ns = env_u64("SIMCUDA_KERNEL_NS", 0);
    g_model.launch_latency_ns = env_u64("SIMCUDA_LAUNCH_LATENCY_NS", 0);
    g_model.gbps[SIM_ENGINE_H2D] = env_f("SIMCUDA_H2D_GBPS", 0);
    g_model.gbps[SIM_ENGINE_D2H] = env_f("SIMCUDA_D2H_GBPS", 0);
    g_model.gbps[SIM_ENGINE_D2D] = env_f("SIMCUDA_D2D_GBPS", 0);
    g_model.copy_latency_ns = env_u64("SIMCUDA_COPY_LATENCY_NS", 0);
    g_model.memset_gbps = env_f("SIMCUDA_MEMSET_GBPS", 0);
    uint64_t qd = env_u64("SIMCUDA_QUEUE_DEPTH", 1024);
    g_model.queue_depth = qd < 1 ? 1 : qd > (1u << 20) ? (1u << 20) : (unsigned)qd;
    g_clock = simcu_clock_from_env();
    for (int i = 0; i < SIM_MAX_DEVICES; i++) {
        memset(&g_dev[i].legacy, 0, sizeof g_dev[i].legacy); /* not sim_queue_init: it takes the lock */
        g_dev[i].legacy.device = i;
        g_dev[i].legacy.legacy = 1;
        g_dev[i].legacy.id = 7;
    }
    open_log();
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

static void lock(void) { pthread_once(&g_once, init); pthread_mutex_lock(&g_lock); }
static void unlock(void) { pthread_mutex_unlock(&g_lock); }

/* ---------------- public (simcuda.h) knobs ---------------- */

SIM_API(CUresult, simcuSetDeviceModel, (const char *key, double value))
{
    if (!key || value < 0) return CUDA_ERROR_INVALID_VALUE;
    lock();
    CUresult r = CUDA_SUCCESS;
    if (!strcmp(key, "kernel_ns")) g_model.kernel_ns = (uint64_t)value;
    else if (!strcmp(key, "launch_latency_ns")) g_model.launch_latency_ns = (uint64_t)value;
    else if (!strcmp(key, "h2d_gbps")) g_model.gbps[SIM_ENGINE_H2D] = value;
    else if (!strcmp(key, "d2h_gbps")) g_model.gbps[SIM_ENGINE_D2H] = value;
    else if (!strcmp(key, "d2d_gbps")) g_model.gbps[SIM_ENGINE_D2D] = value;
    else if (!strcmp(key, "copy_latency_ns")) g_model.copy_latency_ns = (uint64_t)value;
    else if (!strcmp(key, "memset_gbps")) g_model.memset_gbps = value;
    else if (!strcmp(key, "queue_depth")) {
        /* applies to streams created afterwards (and to streams that have not run anything yet) */
        if (value < 1 || value > (1u << 20)) r = CUDA_ERROR_INVALID_VALUE;
        else g_model.queue_depth = (unsigned)value;
    } else r = CUDA_ERROR_INVALID_VALUE;
    unlock();
    return r;
}

SIM_API(CUresult, simcuSetNextLaunchDuration, (unsigned long long ns))
{
    t_has_next = 1;
    t_next_ns = ns;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, simcuGetDeviceTime, (unsigned long long *mono_ns, unsigned long long *cupti_ns))
{
    pthread_once(&g_once, init);
    uint64_t now = sim_now_ns();
    if (mono_ns) *mono_ns = now;
    if (cupti_ns) *cupti_ns = simcu_cupti_time(&g_clock, now);
    return CUDA_SUCCESS;
}

HIDDEN int sim_take_next_launch_ns(uint64_t *ns)
{
    if (!t_has_next) return 0;
    t_has_next = 0;
    *ns = t_next_ns;
    return 1;
}

HIDDEN uint64_t sim_default_kernel_ns(void) { pthread_once(&g_once, init); return g_model.kernel_ns; }

HIDDEN uint64_t sim_copy_ns(enum sim_engine e, uint64_t bytes)
{
    pthread_once(&g_once, init);
    double gbps = g_model.gbps[e];
    uint64_t t = g_model.copy_latency_ns;
    if (gbps > 0) t += (uint64_t)((double)bytes / gbps); /* 1 GB/s = 1 byte/ns */
    return t;
}

HIDDEN uint64_t sim_memset_ns(uint64_t bytes)
{
    pthread_once(&g_once, init);
    return g_model.memset_gbps > 0 ? (uint64_t)((double)bytes / g_model.memset_gbps) : 0;
}

/* ---------------- queues ---------------- */

HIDDEN void sim_queue_init(struct sim_queue *q, int dev, int nonblocking)
{
    memset(q, 0, sizeof *q);
    q->device = dev;
    q->nonblocking = nonblocking;
    lock();
    q->id = g_next_stream_id++;
    unlock();
}

HIDDEN void sim_queue_fini(struct sim_queue *q)
{
    free(q->ring);
    q->ring = NULL;
}

HIDDEN struct sim_queue *sim_queue_of(CUstream s, int dev)
{
    pthread_once(&g_once, init);
    if (s == NULL || s == SIM_STREAM_LEGACY) return &g_dev[dev].legacy;
    if (s == SIM_STREAM_PER_THREAD) {
        if (!t_ptds[dev]) {
            struct sim_queue *q = calloc(1, sizeof *q); /* lives as long as the thread (never freed) */
            if (!q) return &g_dev[dev].legacy;
            sim_queue_init(q, dev, 0);
            t_ptds[dev] = q;
        }
        return t_ptds[dev];
    }
    return &s->q;
}

/* The runtime's calls (cuGetExportTable with SIMCU_RT_TRACE_UUID, simcu_hook.h): the outermost runtime
 * call open on this thread has a correlation id of its own, and every device op enqueued inside it
 * carries that id (as real CUPTI's records carry the outermost API call's); its API record is written
 * when it enqueued or captured device work. */
static __thread unsigned t_rt_depth;
static __thread uint32_t t_rt_corr;
static __thread uint64_t t_rt_t0;
static __thread int t_rt_worked;
static __thread int t_rt_traced; /* CUPTI was attached when it began: a call CUPTI never saw begin is none */

static void rt_trace_enter(void)
{
    if (t_rt_depth++) return;
    const struct simcu_hooks *h = __atomic_load_n(&g_hooks, __ATOMIC_ACQUIRE);
    t_rt_corr = __atomic_add_fetch(&g_next_corr, 1, __ATOMIC_RELAXED);
    t_rt_worked = 0;
    t_rt_traced = h && h->api_enter;
    t_rt_t0 = t_rt_traced ? sim_now_ns() : 0;
    if (t_rt_traced) h->api_enter();
}

static void rt_trace_leave(void)
{
    if (!t_rt_depth || --t_rt_depth) return;
    const struct simcu_hooks *h = __atomic_load_n(&g_hooks, __ATOMIC_ACQUIRE);
    if (!t_rt_traced || !h || !h->api_exit) return;
    uint64_t end = sim_now_ns();
    h->api_exit(SIMCU_API_RUNTIME, t_rt_corr, 0, t_rt_t0 <= end ? t_rt_t0 : end, end, 1, t_rt_worked);
}

static const struct simcu_rt_trace g_rt_trace = {sizeof(struct simcu_rt_trace), rt_trace_enter, rt_trace_leave};

HIDDEN const void *sim_rt_trace_table(void) { return &g_rt_trace; }

/* the correlation id a device op enqueued now carries: the open runtime call's (when CUPTI saw it begin),
 * else its driver call's */
static uint32_t op_corr(uint32_t corr) { return t_rt_depth && t_rt_traced ? t_rt_corr : corr; }

/* the clock is read only when something needs it: CLOCK_MONOTONIC costs 85 ns on the development VM */
HIDDEN uint32_t sim_api_begin(uint64_t *t0)
{
    const struct simcu_hooks *h = __atomic_load_n(&g_hooks, __ATOMIC_ACQUIRE);
    *t0 = h ? sim_now_ns() : 0;
    t_last_enqueue = 0;
    if (h && h->api_enter) h->api_enter();
    t_rt_worked = 1; /* the open runtime call (if any) made a call that enqueues or captures device work */
    return __atomic_add_fetch(&g_next_corr, 1, __ATOMIC_RELAXED);
}

HIDDEN void sim_api_end(uint32_t corr, uint32_t cbid, uint64_t t0)
{
    const struct simcu_hooks *h = __atomic_load_n(&g_hooks, __ATOMIC_ACQUIRE);
    if (!h || !h->api_exit) return;
    /* the call's end: when its (last) op was enqueued, read then; a clock read less per call */
    uint64_t end = t_last_enqueue ? t_last_enqueue : sim_now_ns();
    h->api_exit(SIMCU_API_DRIVER, corr, cbid, t0 && t0 <= end ? t0 : end, end, t0 != 0, 1);
}

HIDDEN void sim_wait_until(uint64_t t)
{
    if (t == 0) return;
    struct timespec ts = {(time_t)(t / 1000000000ull), (long)(t % 1000000000ull)};
    while (sim_now_ns() < t && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

static uint64_t max64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* caller holds the lock: when the stream lets its next op start (own: were every event wait instant) */
static uint64_t ordered_after_tail(const struct sim_queue *q, uint64_t tail)
{
    const struct device_state *d = &g_dev[q->device];
    uint64_t t = tail;
    if (q->legacy) t = max64(t, d->blocking_tail);
    else if (!q->nonblocking) t = max64(t, d->legacy_tail);
    return t;
}

/* caller holds the lock */
static uint64_t ordered_after(const struct sim_queue *q)
{
    const struct device_state *d = &g_dev[q->device];
    uint64_t t = q->tail;
    if (q->legacy) t = max64(t, d->blocking_tail);
    else if (!q->nonblocking) t = max64(t, d->legacy_tail);
    return t;
}

static const char *op_name(const struct sim_opdesc *op)
{
    if (op->kind == SIMCU_OP_KERNEL) return "kernel";
    if (op->kind == SIMCU_OP_MEMSET) return "memset";
    switch (op->copy_kind) {
    case 1: return "memcpy_htod";
    case 2: return "memcpy_dtoh";
    case 8: return "memcpy_dtod";
    case 9: return "memcpy_htoh";
    default: return "memcpy";
    }
}

/* caller holds the lock: one line, one write (O_APPEND: lines of several processes never interleave) */
static void log_op(const struct sim_queue *q, const struct sim_opdesc *op, uint32_t corr, uint64_t enq,
                   uint64_t start, uint64_t end)
{
    char line[512];
    int n = snprintf(line, sizeof line, "%s\t%d\t%ld\t%u\t%d\t%u\t%llu\t%llu\t%llu\t%llu\t%llu\t%u\t%llu\t%llu\t%s\n",
                     op_name(op), (int)getpid(), (long)syscall(SYS_gettid), corr, q->device, q->id,
                     (unsigned long long)enq, (unsigned long long)start, (unsigned long long)end,
                     (unsigned long long)simcu_cupti_time(&g_clock, start),
                     (unsigned long long)simcu_cupti_time(&g_clock, end), op->graph_id,
                     (unsigned long long)op->graph_node_id, (unsigned long long)op->bytes,
                     op->name ? op->name : "-");
    if (n >= (int)sizeof line) {
        n = sizeof line;
        line[n - 1] = '\n';
    }
    if (write(g_log_fd, line, (size_t)n) < 0) { /* best effort: the log is a test aid */ }
}

HIDDEN uint64_t sim_dev_submit(struct sim_queue *q, const struct sim_opdesc *op, uint32_t corr)
{
    uint64_t start;
    return sim_dev_submit_at(q, op, corr, &start);
}

HIDDEN uint64_t sim_dev_submit_at(struct sim_queue *q, const struct sim_opdesc *op, uint32_t corr, uint64_t *start_out)
{
    corr = op_corr(corr);
    uint64_t enq, start, end;
    *start_out = 0;
    pthread_once(&g_once, init);
    struct device_state *d = &g_dev[q->device];
    /* the fast path: nothing on this device has ever taken device time, so every op so far ended when
     * it was enqueued (all the tails are in the past) and this one does too; with nobody watching (no
     * log, no CUPTI) there is nothing to compute.  Returns 0: "done already". */
    if (op->dur_ns == 0 && op->not_before == 0 && !__atomic_load_n(&d->timed, __ATOMIC_RELAXED) &&
        __atomic_load_n(&g_model.launch_latency_ns, __ATOMIC_RELAXED) == 0 && g_log_fd < 0 &&
        !__atomic_load_n(&g_hooks, __ATOMIC_ACQUIRE))
        return 0;
    lock();
    if (op->dur_ns || g_model.launch_latency_ns) __atomic_store_n(&d->timed, 1, __ATOMIC_RELAXED);
    if (!q->ring) {
        q->ring_cap = g_model.queue_depth;
        q->ring = calloc(q->ring_cap, sizeof *q->ring);
    }
    /* the bounded launch queue: the op ring_cap back must have finished */
    for (;;) {
        uint64_t oldest = q->ring ? q->ring[q->ring_pos] : 0;
        enq = sim_now_ns();
        if (oldest <= enq) break;
        unlock();
        sim_wait_until(oldest);
        lock();
    }
    start = max64(enq + g_model.launch_latency_ns, ordered_after(q));
    uint64_t natural = max64(enq + g_model.launch_latency_ns, ordered_after_tail(q, q->own_tail));
    start = max64(start, op->not_before);
    if (op->engine != SIM_ENGINE_COMPUTE) {
        start = max64(start, d->engine_free[op->engine]);
        natural = max64(natural, d->engine_free[op->engine]);
    }
    if ((op->engine == SIM_ENGINE_COMPUTE || !op->unrecorded) && q->device >= 0 && q->device < SIM_MAX_DEVICES) {
        g_stall[q->device] += (start > natural ? start - natural : 0) + op->fault_ns;
    }
    end = start + op->dur_ns;
    if (op->engine != SIM_ENGINE_COMPUTE) d->engine_free[op->engine] = end;
    q->tail = end;
    q->own_tail = end;
    if (q->ring) {
        q->ring[q->ring_pos] = end;
        q->ring_pos = (q->ring_pos + 1) % q->ring_cap;
    }
    if (q->legacy) d->legacy_tail = max64(d->legacy_tail, end);
    if (!q->nonblocking) d->blocking_tail = max64(d->blocking_tail, end);
    d->all_tail = max64(d->all_tail, end);
    if (g_log_fd >= 0) log_op(q, op, corr, enq, start, end);
    unlock();
    t_last_enqueue = enq;
    *start_out = start;

    const struct simcu_hooks *h = __atomic_load_n(&g_hooks, __ATOMIC_ACQUIRE);
    if (h && h->op && !op->unrecorded) {
        struct simcu_op o = {
            .kind = op->kind, .copy_kind = op->copy_kind, .src_kind = op->src_kind, .dst_kind = op->dst_kind,
            .device = (uint32_t)q->device, .stream_id = q->id, .corr_id = corr, .value = op->value,
            .bytes = op->bytes, .start_ns = start, .end_ns = end, .name = op->name,
            .grid = {op->grid[0], op->grid[1], op->grid[2]}, .block = {op->block[0], op->block[1], op->block[2]},
            .graph_id = op->graph_id, .graph_node_id = op->graph_node_id,
        };
        h->op(&o);
    }
    return end;
}

/* the earliest device time op could start on q if it were enqueued now (nothing is enqueued): what the
 * residency model makes room for before it submits a prefetch or a kernel (residency.c); the real start
 * is never earlier (other threads only push the tails and engines later) */
HIDDEN uint64_t sim_dev_peek_start(struct sim_queue *q, const struct sim_opdesc *op)
{
    pthread_once(&g_once, init);
    lock();
    const struct device_state *d = &g_dev[q->device];
    uint64_t t = max64(sim_now_ns() + g_model.launch_latency_ns, ordered_after(q));
    t = max64(t, op->not_before);
    if (op->engine != SIM_ENGINE_COMPUTE) t = max64(t, d->engine_free[op->engine]);
    unlock();
    return t;
}

HIDDEN uint64_t sim_queue_done_at(struct sim_queue *q)
{
    lock();
    uint64_t t = ordered_after(q);
    unlock();
    return t;
}

HIDDEN uint64_t sim_device_done_at(int dev)
{
    lock();
    uint64_t t = g_dev[dev].all_tail;
    unlock();
    return t;
}

HIDDEN uint64_t sim_dev_stall_ns(int dev)
{
    lock();
    uint64_t t = dev >= 0 && dev < SIM_MAX_DEVICES ? g_stall[dev] : 0;
    unlock();
    return t;
}

HIDDEN void sim_queue_wait_for(struct sim_queue *q, uint64_t t)
{
    lock();
    q->tail = max64(q->tail, t);
    unlock();
}

HIDDEN uint64_t sim_queue_mark(struct sim_queue *q)
{
    lock();
    uint64_t t = max64(ordered_after(q), sim_now_ns());
    unlock();
    return t;
}

/* ---------------- the seam to the simulated libcupti ---------------- */

HIDDEN sim_graph_hook_fn sim_graph_hook(void)
{
    const struct simcu_hooks *h = __atomic_load_n(&g_hooks, __ATOMIC_ACQUIRE);
    return h ? h->graph_node : NULL;
}

SIM_API(int, simcuInternalAttachCupti, (const struct simcu_hooks *hooks))
{
    pthread_once(&g_once, init);
    if (hooks && hooks->version != SIMCU_HOOK_VERSION) return -1;
    /* one CUPTI at a time: a second copy of the library (a wheel ships libcupti.so and libcupti.so.13
     * as two files, and a program may dlopen both names) must not take the first one's records */
    const struct simcu_hooks *none = NULL;
    if (hooks && !__atomic_compare_exchange_n(&g_hooks, &none, hooks, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return none == hooks ? SIMCU_HOOK_VERSION : -1;
    return SIMCU_HOOK_VERSION;
}

/* the attached CUPTI goes away (dlclose, or its destructor at exit): only its own hooks are removed */
SIM_API(void, simcuInternalDetachCupti, (const struct simcu_hooks *hooks))
{
    const struct simcu_hooks *expect = hooks;
    __atomic_compare_exchange_n(&g_hooks, &expect, NULL, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}
