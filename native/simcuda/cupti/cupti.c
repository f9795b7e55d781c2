/*
 * cupti.c — simcuda's simulated libcupti.so.13: the part of the CUPTI Activity API that pyinterpose's
 * shim uses, producing records with the real layouts and full sizes (pi_cupti.h) from simcuda's device
 * clock.  Behaviour that matters for a client, as real CUPTI does it:
 *   - records go into buffers the client hands out (bufferRequested) and come back through
 *     bufferCompleted: a full buffer from a CUPTI-owned thread, everything on cuptiActivityFlushAll;
 *   - a device record (kernel, memcpy, memset) exists only once its op has finished on the device
 *     (host clock >= its end): a flush before that does not deliver it;
 *   - a record that finds no room (no buffer, or one too small for it) is dropped and counted;
 *     cuptiActivityGetNumDroppedRecords returns the count and resets it;
 *   - external-correlation records (CUSTOM0..2 ids pushed per thread) appear only before API records
 *     (DRIVER or RUNTIME activity enabled as well — the documented pitfall), with the ids pushed when that
 *     API call BEGAN: an id pushed inside a runtime call pairs with the driver call made after it;
 *   - a device record carries the correlation id of the outermost API call that made it: the runtime
 *     call's (cudaLaunchKernel), not the driver call's (cuLaunchKernel) it made — which is why a client
 *     that pushes its id inside the runtime call (around the driver call) finds no pairing for it;
 *   - timestamps are on the CUPTI clock: CLOCK_MONOTONIC + offset (+ drift), simcu_hook.h.
 * The callback API is there for one purpose: the resource domain's GRAPHNODE_CREATED (inside each
 * captured call) and GRAPHNODE_CLONED (instantiation), which tie a replayed record's graphNodeId to the
 * captured call; one subscriber.
 * Simplifications: API records (and correlation ids that matter) only for driver calls that enqueue or
 * capture device work and for outermost runtime calls that made one (runtime records have cbid 0);
 * nothing for other calls.
 *
 * Test knobs (docs/simcuda-device-clock.md):
 *   SIMCUPTI_BUSY=1        cuptiActivityRegisterCallbacks, cuptiActivityEnable and cuptiSubscribe return
 *                          CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED (another profiler holds CUPTI)
 *   SIMCUPTI_FAIL=a,b      the named entry points (e.g. cuptiActivityEnable) return CUPTI_ERROR_UNKNOWN
 *   SIMCUPTI_WORKER_MS     how often the CUPTI thread looks for finished ops and full buffers (10)
 *   SIMCUPTI_CLOCK_OFFSET_NS, SIMCUPTI_CLOCK_DRIFT_PPM  the CUPTI clock (simcu_hook.h)
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "pi_cupti.h"
#include "../simcu_hook.h"

#define API __attribute__((visibility("default")))
typedef pi_CUptiResult CUptiResult;

#define ERR_INVALID_PARAMETER 1
#define ERR_QUEUE_EMPTY 18
#define ERR_OUT_OF_MEMORY 8
#define KIND_COUNT 64                  /* kinds are < this */
#define EXT_KINDS 6                    /* CUpti_ExternalCorrelationKind: INVALID .. CUSTOM2 */
#define EXT_DEPTH 64
#define MAX_RECORD 216

/* ---------------- state ---------------- */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;     /* everything below */
static pthread_mutex_t g_deliver = PTHREAD_MUTEX_INITIALIZER;  /* bufferCompleted calls, in order */
static pthread_cond_t g_wake;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static struct simcu_clock g_clock;
static unsigned g_worker_ms = 10;
static const char *g_fail;  /* SIMCUPTI_FAIL, SIMCUPTI_BUSY: read once (getenv on every push/pop cost 5 % of a launch) */
static int g_busy;

static pi_cupti_buffer_requested_fn g_req;
static pi_cupti_buffer_completed_fn g_comp;
static volatile int g_enabled[KIND_COUNT];
static int g_attached, g_worker_started;
static int g_worker_stop, g_worker_running;   /* the library is being unloaded: the thread leaves */
static pthread_t g_worker_thread;
static size_t g_dropped;

struct buffer { uint8_t *p; size_t size, used, max_records, nrecords; struct buffer *next; };
static struct buffer g_cur;            /* p == NULL: none */
static struct buffer *g_full_head, *g_full_tail;

/* device records not yet finished, in the order their ops were enqueued (a ring that grows).  A record
 * is written to a buffer when it and every record before it have finished: never before its op ends,
 * at most as late as the longest op enqueued before it (CUPTI's own delivery is not immediate either);
 * a FIFO costs O(1) per record where a heap on the end time cost a third of the launch time. */
struct pending { uint64_t ready; uint32_t size; uint8_t rec[MAX_RECORD]; };
static struct pending *g_fifo;
static size_t g_fifo_head, g_fifo_n, g_fifo_cap;

static int g_gridid;

/* kernel names: interned (records hold the pointer) */
struct name { char *s; struct name *next; };
static struct name *g_names[256];

static __thread uint64_t t_ext[EXT_KINDS][EXT_DEPTH];
static __thread int t_ext_n[EXT_KINDS];
static __thread int t_in_callback;
static __thread uint32_t t_tid;   /* gettid() once per thread (a system call costs ~0.5 us on a VM) */
static uint32_t g_pid;            /* getpid() once per process (reset in a forked child) */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void init_wake(void)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g_wake, &ca);
    pthread_condattr_destroy(&ca);
}

static void atfork_prepare(void) { pthread_mutex_lock(&g_deliver); pthread_mutex_lock(&g_lock); }
static void atfork_parent(void) { pthread_mutex_unlock(&g_lock); pthread_mutex_unlock(&g_deliver); }
static void atfork_child(void)
{
    pthread_mutex_init(&g_lock, NULL);
    pthread_mutex_init(&g_deliver, NULL);
    init_wake();   /* the parent's thread waited on it: its state is not the child's (a broadcast could hang) */
    g_worker_started = g_worker_running = 0; /* the thread is not in the child: started on the next use */
    /* the parent's records are the parent's: the child starts empty (its copies of the buffers are
     * left alone, they belong to the client's memory) */
    g_fifo_n = 0;
    memset(&g_cur, 0, sizeof g_cur);
    g_full_head = g_full_tail = NULL;
    g_dropped = 0;
    g_pid = 0;
    t_tid = 0; /* the forking thread is the child's only thread, with a new id */
}

static void init(void)
{
    g_clock = simcu_clock_from_env();
    const char *b = getenv("SIMCUPTI_BUSY");
    g_busy = b && *b && strcmp(b, "0") != 0;
    g_fail = getenv("SIMCUPTI_FAIL");
    const char *w = getenv("SIMCUPTI_WORKER_MS");
    if (w && *w) g_worker_ms = (unsigned)strtoul(w, NULL, 10);
    if (g_worker_ms == 0) g_worker_ms = 1;
    init_wake();
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* the test knobs (read once in init) */
static int failing(const char *fn)
{
    pthread_once(&g_once, init);
    const char *f = g_fail;
    if (!f || !*f) return 0;
    size_t n = strlen(fn);
    for (const char *p = f; (p = strstr(p, fn)); p += n)
        if ((p == f || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
    return 0;
}
static int busy(void) { return g_busy; }
#define FAIL_IF_ASKED(fn) do { if (failing(fn)) return PI_CUPTI_ERROR_UNKNOWN; } while (0)

static const char *intern(const char *s)
{
    if (!s) return NULL;
    size_t h = 5381;
    for (const char *p = s; *p; p++) h = h * 33 + (unsigned char)*p;
    h &= 255;
    for (struct name *n = g_names[h]; n; n = n->next)
        if (!strcmp(n->s, s)) return n->s;
    struct name *n = malloc(sizeof *n);
    if (!n || !(n->s = strdup(s))) {
        free(n);
        return NULL;
    }
    n->next = g_names[h];
    g_names[h] = n;
    return n->s;
}

/* ---------------- buffers (caller holds g_lock) ---------------- */

static void close_current(void)
{
    if (!g_cur.p) return;
    struct buffer *b = malloc(sizeof *b);
    if (!b) return; /* cannot happen in practice; the buffer stays current */
    *b = g_cur;
    b->next = NULL;
    if (g_full_tail) g_full_tail->next = b;
    else g_full_head = b;
    g_full_tail = b;
    memset(&g_cur, 0, sizeof g_cur);
}

static int fits(size_t size)
{
    return g_cur.p && g_cur.used + size <= g_cur.size && (!g_cur.max_records || g_cur.nrecords < g_cur.max_records);
}

/* write one record; drops it (counted) when the client gives no buffer with room.  bufferRequested
 * is called with g_lock held: it must not call back into CUPTI (Kineto's and the shim's allocate). */
static void emit(const void *rec, size_t size)
{
    if (!fits(size)) {
        if (g_cur.p && g_cur.nrecords) close_current();
        if (!g_cur.p) {
            uint8_t *p = NULL;
            size_t sz = 0, maxr = 0;
            if (g_req) g_req(&p, &sz, &maxr);
            if (p) g_cur = (struct buffer){p, sz, 0, maxr, 0, NULL};
        }
        if (!fits(size)) {
            g_dropped++;
            if (g_cur.p && !g_cur.nrecords) close_current(); /* too small: handed back empty */
            return;
        }
    }
    memcpy(g_cur.p + g_cur.used, rec, size);
    g_cur.used += size;
    g_cur.nrecords++;
    if (g_cur.used == g_cur.size) close_current();
}

static void fifo_push(uint64_t ready, const void *rec, uint32_t size)
{
    if (g_fifo_n == g_fifo_cap) {
        size_t cap = g_fifo_cap ? g_fifo_cap * 2 : 1024;
        struct pending *f = malloc(cap * sizeof *f);
        if (!f) {
            g_dropped++;
            return;
        }
        for (size_t i = 0; i < g_fifo_n; i++) f[i] = g_fifo[(g_fifo_head + i) % g_fifo_cap];
        free(g_fifo);
        g_fifo = f;
        g_fifo_cap = cap;
        g_fifo_head = 0;
    }
    struct pending *p = &g_fifo[(g_fifo_head + g_fifo_n++) % g_fifo_cap];
    p->ready = ready;
    p->size = size;
    memcpy(p->rec, rec, size);
}

static const struct pending *fifo_front(void) { return g_fifo_n ? &g_fifo[g_fifo_head] : NULL; }

/* records of finished ops go into buffers, in enqueue order; at most `max` of them (0: all).
 * Returns 1 when finished records remain. */
static int collect(uint64_t now, size_t max)
{
    const struct pending *p;
    size_t n = 0;
    while ((p = fifo_front()) && p->ready <= now) {
        if (max && n++ == max) return 1;
        emit(p->rec, p->size);
        g_fifo_head = (g_fifo_head + 1) % g_fifo_cap;
        g_fifo_n--;
    }
    return 0;
}

/* hand every closed buffer to bufferCompleted, outside g_lock, in order */
static void deliver(void)
{
    pthread_mutex_lock(&g_deliver);
    for (;;) {
        pthread_mutex_lock(&g_lock);
        struct buffer *b = g_full_head;
        if (b) {
            g_full_head = b->next;
            if (!g_full_head) g_full_tail = NULL;
        }
        pi_cupti_buffer_completed_fn comp = g_comp;
        pthread_mutex_unlock(&g_lock);
        if (!b) break;
        t_in_callback = 1;
        if (comp) comp(NULL, 0, b->p, b->size, b->used);
        t_in_callback = 0;
        free(b);
    }
    pthread_mutex_unlock(&g_deliver);
}

/* ---------------- the CUPTI thread: finished ops into buffers, full buffers out ---------------- */

static void *worker(void *arg)
{
    (void)arg;
    /* every SIMCUPTI_WORKER_MS (or when a buffer fills): finished records into buffers, a few hundred
     * per hold of the lock (the launching threads take it too), then full buffers out */
    pthread_mutex_lock(&g_lock);
    for (;;) {
        if (g_worker_stop) break;
        uint64_t now = now_ns();
        int more = collect(now, 256);
        int have_full = g_full_head != NULL;
        if (more || have_full) {
            pthread_mutex_unlock(&g_lock);
            if (have_full) deliver();
            pthread_mutex_lock(&g_lock);
            continue;
        }
        uint64_t next = now + (uint64_t)g_worker_ms * 1000000ull;
        struct timespec ts = {(time_t)(next / 1000000000ull), (long)(next % 1000000000ull)};
        pthread_cond_timedwait(&g_wake, &g_lock, &ts);
    }
    g_worker_running = 0;
    pthread_cond_broadcast(&g_wake);
    pthread_mutex_unlock(&g_lock);
    return NULL;
}

/* caller holds g_lock */
static void start_worker(void)
{
    if (g_worker_started) return;
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_JOINABLE);   /* joined when the library is unloaded */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the program's signals are not for this thread */
    if (pthread_create(&t, &a, worker, NULL) == 0) {
        g_worker_started = g_worker_running = 1;
        g_worker_thread = t;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&a);
}

/* ---------------- the hooks simcuda's driver calls ---------------- */

static int enabled(int k) { return g_enabled[k]; }

/* the external ids on this thread's stacks when each open API call began (api_enter), innermost last */
#define API_DEPTH 16
static __thread uint64_t t_snap[API_DEPTH][EXT_KINDS];
static __thread uint8_t t_snap_has[API_DEPTH][EXT_KINDS];
static __thread int t_snap_n; /* open calls (may exceed API_DEPTH: the deeper ones take the stacks at exit) */

static void on_api_enter(void)
{
    if (t_snap_n < API_DEPTH)
        for (int k = 1; k < EXT_KINDS; k++) {
            t_snap_has[t_snap_n][k] = t_ext_n[k] > 0;
            t_snap[t_snap_n][k] = t_ext_n[k] ? t_ext[k][t_ext_n[k] - 1] : 0;
        }
    t_snap_n++;
}

/* An API call ends: its record (kind DRIVER or RUNTIME, when that kind is enabled), preceded by one
 * external correlation record per external kind whose stack was not empty when the call BEGAN — an id
 * pushed inside a runtime call names the driver call begun after the push, never the runtime call. */
static void on_api_exit(int api_kind, uint32_t corr, uint32_t cbid, uint64_t start, uint64_t end, int entered,
                        int write)
{
    int slot = -1;
    if (entered && t_snap_n > 0) slot = --t_snap_n < API_DEPTH ? t_snap_n : -1;
    if (!write) return;
    uint32_t kind = api_kind == SIMCU_API_RUNTIME ? PI_CUPTI_KIND_RUNTIME : PI_CUPTI_KIND_DRIVER;
    if (!enabled((int)kind)) return; /* the pitfall: no API record, no external correlation either */
    pthread_mutex_lock(&g_lock);
    if (enabled(PI_CUPTI_KIND_EXTERNAL_CORRELATION))
        for (int k = 1; k < EXT_KINDS; k++) {
            int has = slot >= 0 ? t_snap_has[slot][k] : t_ext_n[k] > 0;
            if (!has) continue;
            uint8_t rec[PI_CUPTI_SIZEOF_EXTERNAL_CORRELATION] = {0};
            pi_cupti_external_correlation *r = (void *)rec;
            r->kind = PI_CUPTI_KIND_EXTERNAL_CORRELATION;
            r->externalKind = (uint32_t)k;
            r->externalId = slot >= 0 ? t_snap[slot][k] : t_ext[k][t_ext_n[k] - 1];
            r->correlationId = corr;
            emit(rec, sizeof rec);
        }
    uint8_t rec[PI_CUPTI_SIZEOF_API] = {0};
    pi_cupti_api *r = (void *)rec;
    r->kind = kind;
    r->cbid = cbid;
    r->start = simcu_cupti_time(&g_clock, start);
    r->end = simcu_cupti_time(&g_clock, end);
    if (!g_pid) g_pid = (uint32_t)getpid();
    if (!t_tid) t_tid = (uint32_t)syscall(SYS_gettid);
    r->processId = g_pid;
    r->threadId = t_tid;
    r->correlationId = corr;
    r->returnValue = 0;
    emit(rec, sizeof rec);
    int full = g_full_head != NULL;
    pthread_mutex_unlock(&g_lock);
    if (full) pthread_cond_signal(&g_wake);
}

/* grid and block of CUpti_ActivityKernel10 (offsets 52..72): beyond the view's named fields */
#define KERNEL_GRID_OFFSET 52

static void on_op(const struct simcu_op *op)
{
    uint8_t rec[MAX_RECORD] = {0};
    uint32_t size = 0;
    pthread_mutex_lock(&g_lock);
    if (op->kind == SIMCU_OP_KERNEL && (enabled(PI_CUPTI_KIND_CONCURRENT_KERNEL) || enabled(PI_CUPTI_KIND_KERNEL))) {
        pi_cupti_kernel *r = (void *)rec;
        size = PI_CUPTI_SIZEOF_KERNEL10;
        r->kind = enabled(PI_CUPTI_KIND_CONCURRENT_KERNEL) ? PI_CUPTI_KIND_CONCURRENT_KERNEL : PI_CUPTI_KIND_KERNEL;
        r->start = simcu_cupti_time(&g_clock, op->start_ns);
        r->end = simcu_cupti_time(&g_clock, op->end_ns);
        r->completed = r->end;
        r->deviceId = op->device;
        r->contextId = op->device + 1;
        r->streamId = op->stream_id;
        int32_t dims[6] = {(int32_t)op->grid[0], (int32_t)op->grid[1], (int32_t)op->grid[2],
                           (int32_t)op->block[0], (int32_t)op->block[1], (int32_t)op->block[2]};
        memcpy(rec + KERNEL_GRID_OFFSET, dims, sizeof dims);
        r->correlationId = op->corr_id;
        r->gridId = ++g_gridid;
        r->name = intern(op->name);
        r->graphNodeId = op->graph_node_id;
        r->graphId = op->graph_id;
    } else if (op->kind == SIMCU_OP_MEMCPY && enabled(PI_CUPTI_KIND_MEMCPY)) {
        pi_cupti_memcpy *r = (void *)rec;
        size = PI_CUPTI_SIZEOF_MEMCPY6;
        r->kind = PI_CUPTI_KIND_MEMCPY;
        r->copyKind = op->copy_kind;
        r->srcKind = op->src_kind;
        r->dstKind = op->dst_kind;
        r->flags = 0;
        r->bytes = op->bytes;
        r->start = simcu_cupti_time(&g_clock, op->start_ns);
        r->end = simcu_cupti_time(&g_clock, op->end_ns);
        r->deviceId = op->device;
        r->contextId = op->device + 1;
        r->streamId = op->stream_id;
        r->correlationId = op->corr_id;
        r->graphNodeId = op->graph_node_id;
        r->graphId = op->graph_id;
    } else if (op->kind == SIMCU_OP_MEMSET && enabled(PI_CUPTI_KIND_MEMSET)) {
        pi_cupti_memset *r = (void *)rec;
        size = PI_CUPTI_SIZEOF_MEMSET4;
        r->kind = PI_CUPTI_KIND_MEMSET;
        r->value = op->value;
        r->bytes = op->bytes;
        r->start = simcu_cupti_time(&g_clock, op->start_ns);
        r->end = simcu_cupti_time(&g_clock, op->end_ns);
        r->deviceId = op->device;
        r->contextId = op->device + 1;
        r->streamId = op->stream_id;
        r->correlationId = op->corr_id;
        r->graphNodeId = op->graph_node_id;
        r->graphId = op->graph_id;
    }
    if (size) fifo_push(op->end_ns, rec, size);
    if (size && !g_worker_started) start_worker(); /* a forked child */
    pthread_mutex_unlock(&g_lock);
}

/* ---------------- the callback API: one subscriber, the resource domain's graph-node callbacks ---------------- */

struct pi_cupti_subscriber_st { pi_cupti_callback_fn cb; void *userdata; uint64_t resource_cbids; };
static struct pi_cupti_subscriber_st g_sub;
static int g_subscribed;
static simcu_graph_id_fn g_graph_id;
static simcu_detach_fn g_detach;

static void on_graph_node(uint32_t cbid, void *graph, void *original_graph, void *node, void *original_node,
                          int node_type, void *graph_exec)
{
    pthread_mutex_lock(&g_lock);
    int fire = g_subscribed && cbid < 64 && (g_sub.resource_cbids >> cbid & 1);
    pi_cupti_callback_fn cb = g_sub.cb;
    void *ud = g_sub.userdata;
    pthread_mutex_unlock(&g_lock);
    if (!fire || !cb) return;
    pi_cupti_graph_data gd = {graph, original_graph, node, original_node, node_type, NULL, graph_exec};
    pi_cupti_resource_data rd = {NULL, NULL, &gd};
    cb(ud, PI_CUPTI_CB_DOMAIN_RESOURCE, cbid, &rd);
}

static const struct simcu_hooks g_hooks = {SIMCU_HOOK_VERSION, on_op, on_graph_node, on_api_enter, on_api_exit};

/* caller holds g_lock: find simcuda's driver (loading it if the program has not yet) and attach */
static int attach(void)
{
    if (g_attached) return 1;
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!h) h = dlopen("libcuda.so.1", RTLD_LAZY);
    simcu_attach_fn fn = h ? (simcu_attach_fn)dlsym(h, SIMCU_ATTACH_SYMBOL) : NULL;
    if (!fn || fn(&g_hooks) != SIMCU_HOOK_VERSION) return 0; /* not simcuda's driver */
    g_graph_id = (simcu_graph_id_fn)dlsym(h, SIMCU_GRAPH_ID_SYMBOL);
    g_detach = (simcu_detach_fn)dlsym(h, SIMCU_DETACH_SYMBOL);
    g_attached = 1;
    return 1;
}

/* unloaded (dlclose) or at exit: the driver must not call into a library that is gone */
__attribute__((destructor)) static void detach(void)
{
    if (g_attached && g_detach) g_detach(&g_hooks);
    /* the CUPTI thread runs this library's code: it must be out of it before the code is unmapped
     * (it leaves at its next wake-up; bounded, in case it is inside a client's callback at exit) */
    pthread_mutex_lock(&g_lock);
    if (g_worker_started && g_worker_running) {
        g_worker_stop = 1;
        pthread_cond_broadcast(&g_wake);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += 2;
        while (g_worker_running && pthread_cond_timedwait(&g_wake, &g_lock, &ts) == 0) {
        }
        int gone = !g_worker_running;
        pthread_mutex_unlock(&g_lock);
        if (gone) pthread_join(g_worker_thread, NULL);   /* past its last instruction here */
        else pthread_detach(g_worker_thread);
        return;
    }
    pthread_mutex_unlock(&g_lock);
}

/* ---------------- the API ---------------- */

API CUptiResult cuptiActivityRegisterCallbacks(pi_cupti_buffer_requested_fn req, pi_cupti_buffer_completed_fn comp)
{
    pthread_once(&g_once, init);
    FAIL_IF_ASKED("cuptiActivityRegisterCallbacks");
    if (busy()) return PI_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    if (!req || !comp) return ERR_INVALID_PARAMETER;
    pthread_mutex_lock(&g_lock);
    g_req = req;
    g_comp = comp;
    pthread_mutex_unlock(&g_lock);
    return PI_CUPTI_SUCCESS;
}

static int supported(uint32_t kind)
{
    switch (kind) {
    case PI_CUPTI_KIND_MEMCPY: case PI_CUPTI_KIND_MEMSET: case PI_CUPTI_KIND_KERNEL: case PI_CUPTI_KIND_DRIVER:
    case PI_CUPTI_KIND_RUNTIME: case PI_CUPTI_KIND_CONCURRENT_KERNEL: case PI_CUPTI_KIND_EXTERNAL_CORRELATION:
        return 1;
    default:
        return 0;
    }
}

API CUptiResult cuptiActivityEnable(uint32_t kind)
{
    pthread_once(&g_once, init);
    FAIL_IF_ASKED("cuptiActivityEnable");
    if (busy()) return PI_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    if (kind == 0 || kind >= KIND_COUNT) return PI_CUPTI_ERROR_INVALID_KIND;
    if (!supported(kind)) return PI_CUPTI_ERROR_NOT_COMPATIBLE;
    pthread_mutex_lock(&g_lock);
    int ok = attach();
    if (ok) {
        g_enabled[kind] = 1;
        start_worker();
    }
    pthread_mutex_unlock(&g_lock);
    return ok ? PI_CUPTI_SUCCESS : PI_CUPTI_ERROR_NOT_INITIALIZED;
}

API CUptiResult cuptiActivityDisable(uint32_t kind)
{
    pthread_once(&g_once, init);
    FAIL_IF_ASKED("cuptiActivityDisable");
    if (kind == 0 || kind >= KIND_COUNT) return PI_CUPTI_ERROR_INVALID_KIND;
    if (!supported(kind)) return PI_CUPTI_ERROR_NOT_COMPATIBLE;
    g_enabled[kind] = 0;
    return PI_CUPTI_SUCCESS;
}

static size_t record_size(uint32_t kind)
{
    switch (kind) {
    case PI_CUPTI_KIND_KERNEL: case PI_CUPTI_KIND_CONCURRENT_KERNEL: return PI_CUPTI_SIZEOF_KERNEL10;
    case PI_CUPTI_KIND_MEMCPY: return PI_CUPTI_SIZEOF_MEMCPY6;
    case PI_CUPTI_KIND_MEMSET: return PI_CUPTI_SIZEOF_MEMSET4;
    case PI_CUPTI_KIND_EXTERNAL_CORRELATION: return PI_CUPTI_SIZEOF_EXTERNAL_CORRELATION;
    case PI_CUPTI_KIND_DRIVER: case PI_CUPTI_KIND_RUNTIME: return PI_CUPTI_SIZEOF_API;
    default: return 0;
    }
}

API CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, pi_cupti_record **record)
{
    FAIL_IF_ASKED("cuptiActivityGetNextRecord");
    if (!buffer || !record) return ERR_INVALID_PARAMETER;
    size_t off = 0;
    if (*record) {
        uint8_t *cur = (uint8_t *)*record;
        if (cur < buffer || cur >= buffer + valid) return ERR_INVALID_PARAMETER;
        size_t sz = record_size((*record)->kind);
        if (!sz) return PI_CUPTI_ERROR_INVALID_KIND;
        off = (size_t)(cur - buffer) + sz;
    }
    if (off + sizeof(uint32_t) > valid) return PI_CUPTI_ERROR_MAX_LIMIT_REACHED;
    pi_cupti_record *r = (pi_cupti_record *)(buffer + off);
    size_t sz = record_size(r->kind);
    if (!sz || off + sz > valid) return PI_CUPTI_ERROR_MAX_LIMIT_REACHED;
    *record = r;
    return PI_CUPTI_SUCCESS;
}

API CUptiResult cuptiActivityFlushAll(uint32_t flag)
{
    pthread_once(&g_once, init);
    FAIL_IF_ASKED("cuptiActivityFlushAll");
    if (t_in_callback) return PI_CUPTI_SUCCESS; /* from inside bufferCompleted: nothing more to do */
    pthread_mutex_lock(&g_lock);
    uint64_t now = now_ns();
    while (collect(now, 256)) { /* in batches: launching threads take the lock too */
        pthread_mutex_unlock(&g_lock);
        pthread_mutex_lock(&g_lock);
    }
    /* every record in a buffer is complete (records are written when their op has finished), so
     * the default flush and FLUSH_FORCED both hand back the partly filled buffer */
    if (g_cur.p && g_cur.nrecords) close_current();
    pthread_mutex_unlock(&g_lock);
    deliver();
    return PI_CUPTI_SUCCESS;
}

API CUptiResult cuptiActivityGetNumDroppedRecords(void *context, uint32_t streamId, size_t *dropped)
{
    FAIL_IF_ASKED("cuptiActivityGetNumDroppedRecords");
    if (!dropped) return ERR_INVALID_PARAMETER;
    pthread_mutex_lock(&g_lock);
    *dropped = g_dropped;
    g_dropped = 0; /* as CUPTI: reading resets the count */
    pthread_mutex_unlock(&g_lock);
    return PI_CUPTI_SUCCESS;
}

API CUptiResult cuptiActivityPushExternalCorrelationId(uint32_t kind, uint64_t id)
{
    FAIL_IF_ASKED("cuptiActivityPushExternalCorrelationId");
    if (kind == 0 || kind >= EXT_KINDS) return ERR_INVALID_PARAMETER;
    if (t_ext_n[kind] == EXT_DEPTH) return ERR_OUT_OF_MEMORY;
    t_ext[kind][t_ext_n[kind]++] = id;
    return PI_CUPTI_SUCCESS;
}

API CUptiResult cuptiActivityPopExternalCorrelationId(uint32_t kind, uint64_t *lastId)
{
    FAIL_IF_ASKED("cuptiActivityPopExternalCorrelationId");
    if (kind == 0 || kind >= EXT_KINDS) return ERR_INVALID_PARAMETER;
    if (t_ext_n[kind] == 0) return ERR_QUEUE_EMPTY;
    uint64_t id = t_ext[kind][--t_ext_n[kind]];
    if (lastId) *lastId = id;
    return PI_CUPTI_SUCCESS;
}

API CUptiResult cuptiGetTimestamp(uint64_t *timestamp)
{
    pthread_once(&g_once, init);
    FAIL_IF_ASKED("cuptiGetTimestamp");
    if (!timestamp) return ERR_INVALID_PARAMETER;
    *timestamp = simcu_cupti_time(&g_clock, now_ns());
    return PI_CUPTI_SUCCESS;
}

API CUptiResult cuptiSubscribe(pi_cupti_subscriber *subscriber, pi_cupti_callback_fn callback, void *userdata)
{
    pthread_once(&g_once, init);
    FAIL_IF_ASKED("cuptiSubscribe");
    if (busy()) return PI_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    if (!subscriber) return ERR_INVALID_PARAMETER;
    pthread_mutex_lock(&g_lock);
    CUptiResult r = PI_CUPTI_SUCCESS;
    if (g_subscribed) r = PI_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED; /* one subscriber, as CUDA <= 13.2 */
    else if (!attach()) r = PI_CUPTI_ERROR_NOT_INITIALIZED;
    else {
        g_sub = (struct pi_cupti_subscriber_st){callback, userdata, 0};
        g_subscribed = 1;
        *subscriber = &g_sub;
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

API CUptiResult cuptiUnsubscribe(pi_cupti_subscriber subscriber)
{
    FAIL_IF_ASKED("cuptiUnsubscribe");
    pthread_mutex_lock(&g_lock);
    CUptiResult r = g_subscribed && subscriber == &g_sub ? PI_CUPTI_SUCCESS : ERR_INVALID_PARAMETER;
    if (!r) g_subscribed = 0;
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* only the resource domain is simulated (GRAPHNODE_CREATED and GRAPHNODE_CLONED fire; other resource
 * callbacks are accepted and never fire); other domains: CUPTI_ERROR_NOT_COMPATIBLE */
API CUptiResult cuptiEnableCallback(uint32_t enable, pi_cupti_subscriber subscriber, uint32_t domain, uint32_t cbid)
{
    FAIL_IF_ASKED("cuptiEnableCallback");
    pthread_mutex_lock(&g_lock);
    CUptiResult r = PI_CUPTI_SUCCESS;
    if (!g_subscribed || subscriber != &g_sub) r = ERR_INVALID_PARAMETER;
    else if (domain != PI_CUPTI_CB_DOMAIN_RESOURCE) r = PI_CUPTI_ERROR_NOT_COMPATIBLE;
    else if (cbid >= 64) r = ERR_INVALID_PARAMETER;
    else if (enable) g_sub.resource_cbids |= 1ull << cbid;
    else g_sub.resource_cbids &= ~(1ull << cbid);
    pthread_mutex_unlock(&g_lock);
    return r;
}

API CUptiResult cuptiEnableDomain(uint32_t enable, pi_cupti_subscriber subscriber, uint32_t domain)
{
    FAIL_IF_ASKED("cuptiEnableDomain");
    pthread_mutex_lock(&g_lock);
    CUptiResult r = PI_CUPTI_SUCCESS;
    if (!g_subscribed || subscriber != &g_sub) r = ERR_INVALID_PARAMETER;
    else if (domain != PI_CUPTI_CB_DOMAIN_RESOURCE) r = PI_CUPTI_ERROR_NOT_COMPATIBLE;
    else g_sub.resource_cbids = enable ? ~0ull : 0;
    pthread_mutex_unlock(&g_lock);
    return r;
}

static CUptiResult graph_id(int what, void *handle, uint64_t *id)
{
    if (!handle || !id) return ERR_INVALID_PARAMETER;
    if (!g_graph_id) return PI_CUPTI_ERROR_NOT_INITIALIZED;
    return g_graph_id(what, handle, id) == 0 ? PI_CUPTI_SUCCESS : ERR_INVALID_PARAMETER;
}

API CUptiResult cuptiGetGraphNodeId(void *node, uint64_t *nodeId)
{
    FAIL_IF_ASKED("cuptiGetGraphNodeId");
    return graph_id(0, node, nodeId);
}

API CUptiResult cuptiGetGraphId(void *graph, uint32_t *pId)
{
    FAIL_IF_ASKED("cuptiGetGraphId");
    uint64_t id = 0;
    CUptiResult r = graph_id(1, graph, pId ? &id : NULL);
    if (!r) *pId = (uint32_t)id;
    return r;
}

API CUptiResult cuptiGetGraphExecId(void *graphExec, uint32_t *pId)
{
    FAIL_IF_ASKED("cuptiGetGraphExecId");
    uint64_t id = 0;
    CUptiResult r = graph_id(2, graphExec, pId ? &id : NULL);
    if (!r) *pId = (uint32_t)id;
    return r;
}

API CUptiResult cuptiGetVersion(uint32_t *version)
{
    if (!version) return ERR_INVALID_PARAMETER;
    *version = 130001; /* CUPTI_API_VERSION of CUDA 13.0 */
    return PI_CUPTI_SUCCESS;
}

static const struct { int code; const char *text; } g_results[] = {
    {0, "CUPTI_SUCCESS"},
    {1, "CUPTI_ERROR_INVALID_PARAMETER"},
    {7, "CUPTI_ERROR_INVALID_OPERATION"},
    {8, "CUPTI_ERROR_OUT_OF_MEMORY"},
    {12, "CUPTI_ERROR_MAX_LIMIT_REACHED"},
    {14, "CUPTI_ERROR_NOT_COMPATIBLE"},
    {15, "CUPTI_ERROR_NOT_INITIALIZED"},
    {18, "CUPTI_ERROR_QUEUE_EMPTY"},
    {21, "CUPTI_ERROR_INVALID_KIND"},
    {35, "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES"},
    {39, "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"},
    {999, "CUPTI_ERROR_UNKNOWN"},
};

API CUptiResult cuptiGetResultString(CUptiResult result, const char **str)
{
    if (!str) return ERR_INVALID_PARAMETER;
    for (size_t i = 0; i < sizeof g_results / sizeof g_results[0]; i++)
        if (g_results[i].code == result) {
            *str = g_results[i].text;
            return PI_CUPTI_SUCCESS;
        }
    *str = "CUPTI_ERROR_UNKNOWN";
    return ERR_INVALID_PARAMETER;
}
