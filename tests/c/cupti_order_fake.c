/*
 * cupti_order_fake.c — a stand-in libcupti (loaded by the shim through $PYINTERPOSE_CUPTI) whose only job is
 * to hand buffers over in one chosen, legal order, so that the shim's buffer ordering is tested
 * deterministically instead of by thread timing:
 *
 *   at every cuptiActivityFlushAll with records to give:
 *     1. the external-correlation records of every call pushed since the last flush, in one or more buffers
 *        handed over from a CUPTI-owned thread (a new thread, joined): the shim must not write there while
 *        the ring has no room, so it queues them;
 *     2. then, on the flushing thread, each call's kernel record in a buffer of its own (FAKECUPTI_PER_BUFFER
 *        records per buffer, default 1): many more buffers than an unpaired activity used to wait.
 *
 * Pairings come first, as CUPTI writes them (at the call); a consumer that parses buffers in the order
 * CUPTI delivered them joins every kernel to its call.  $FAKECUPTI_UNPAIRED=N: the first such flush also
 * hands over N kernel records that no pairing will ever name (as kernels launched on a path the shim does
 * not hook).  $FAKECUPTI_LOG (optional) gets one line per flush: "pairings N kernels M" (the ground truth
 * of what was handed over; M counts the unpaired ones too).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pi_cupti.h"

#define API __attribute__((visibility("default")))
#define MAXCALLS (1 << 16)

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pi_cupti_buffer_requested_fn g_req;
static pi_cupti_buffer_completed_fn g_comp;
static struct { uint32_t corr; uint64_t ext, t; } g_calls[MAXCALLS];
static int g_n;
static uint32_t g_corr;
static __thread uint64_t t_stack[64];
static __thread int t_depth;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static size_t rec_size(uint32_t kind) {
    switch (kind) {
    case PI_CUPTI_KIND_CONCURRENT_KERNEL: return PI_CUPTI_SIZEOF_KERNEL10;
    case PI_CUPTI_KIND_EXTERNAL_CORRELATION: return PI_CUPTI_SIZEOF_EXTERNAL_CORRELATION;
    default: return 0;
    }
}

API pi_CUptiResult cuptiActivityRegisterCallbacks(pi_cupti_buffer_requested_fn req, pi_cupti_buffer_completed_fn comp) {
    g_req = req;
    g_comp = comp;
    return PI_CUPTI_SUCCESS;
}
API pi_CUptiResult cuptiActivityEnable(uint32_t kind) { (void)kind; return PI_CUPTI_SUCCESS; }
API pi_CUptiResult cuptiActivityDisable(uint32_t kind) { (void)kind; return PI_CUPTI_SUCCESS; }
API pi_CUptiResult cuptiGetTimestamp(uint64_t *t) { *t = now_ns(); return PI_CUPTI_SUCCESS; }
API pi_CUptiResult cuptiActivityGetNumDroppedRecords(void *c, uint32_t s, size_t *d) {
    (void)c, (void)s;
    *d = 0;
    return PI_CUPTI_SUCCESS;
}

API pi_CUptiResult cuptiActivityGetNextRecord(uint8_t *buf, size_t valid, pi_cupti_record **r) {
    size_t off = *r ? (size_t)((uint8_t *)*r - buf) + rec_size((*r)->kind) : 0;
    if (off >= valid) return PI_CUPTI_ERROR_MAX_LIMIT_REACHED;
    *r = (pi_cupti_record *)(buf + off);
    return PI_CUPTI_SUCCESS;
}

/* each push is one call that enqueues one kernel */
API pi_CUptiResult cuptiActivityPushExternalCorrelationId(uint32_t kind, uint64_t id) {
    (void)kind;
    if (t_depth < 64) t_stack[t_depth] = id;
    t_depth++;
    pthread_mutex_lock(&g_lock);
    if (g_n < MAXCALLS) {
        g_calls[g_n].corr = ++g_corr;
        g_calls[g_n].ext = id;
        g_calls[g_n].t = now_ns();
        g_n++;
    }
    pthread_mutex_unlock(&g_lock);
    return PI_CUPTI_SUCCESS;
}
API pi_CUptiResult cuptiActivityPopExternalCorrelationId(uint32_t kind, uint64_t *last) {
    (void)kind;
    if (t_depth > 0) t_depth--;
    if (last) *last = t_depth < 64 ? t_stack[t_depth] : 0;
    return PI_CUPTI_SUCCESS;
}

typedef struct { uint8_t *p; size_t size, used; } buf_t;

static int open_buf(buf_t *b) {
    size_t maxr = 0;
    b->p = NULL, b->size = 0, b->used = 0;
    g_req(&b->p, &b->size, &maxr);
    return b->p != NULL;
}

static void *put(buf_t *b, uint32_t kind) {
    size_t sz = rec_size(kind);
    if (b->p && b->used + sz > b->size) {
        g_comp(NULL, 0, b->p, b->size, b->used);
        b->p = NULL;
    }
    if (!b->p && !open_buf(b)) return NULL;
    if (b->used + sz > b->size) return NULL;
    void *r = b->p + b->used;
    memset(r, 0, sz);
    ((pi_cupti_record *)r)->kind = kind;
    b->used += sz;
    return r;
}

typedef struct { int from, to; } span;

static void *pairings_thread(void *arg) { /* CUPTI's own thread */
    span *s = arg;
    buf_t b = {0};
    for (int i = s->from; i < s->to; i++) {
        pi_cupti_external_correlation *x = put(&b, PI_CUPTI_KIND_EXTERNAL_CORRELATION);
        if (!x) continue;
        x->externalKind = PI_CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2;
        x->externalId = g_calls[i].ext;
        x->correlationId = g_calls[i].corr;
    }
    if (b.p) g_comp(NULL, 0, b.p, b.size, b.used);
    return NULL;
}

static int g_flushed; /* calls already handed over */

API pi_CUptiResult cuptiActivityFlushAll(uint32_t flag) {
    (void)flag;
    pthread_mutex_lock(&g_lock);
    span s = {g_flushed, g_n};
    g_flushed = g_n;
    pthread_mutex_unlock(&g_lock);
    if (s.from == s.to || !g_req || !g_comp) return PI_CUPTI_SUCCESS;
    pthread_t t;
    if (pthread_create(&t, NULL, pairings_thread, &s) != 0) return PI_CUPTI_ERROR_UNKNOWN;
    pthread_join(t, NULL);
    const char *pb = getenv("FAKECUPTI_PER_BUFFER");
    int per = pb && atoi(pb) > 0 ? atoi(pb) : 1;
    buf_t b = {0};
    for (int i = s.from; i < s.to; i++) {
        if (b.p && (i - s.from) % per == 0) {
            g_comp(NULL, 0, b.p, b.size, b.used);
            b.p = NULL;
        }
        pi_cupti_kernel *k = put(&b, PI_CUPTI_KIND_CONCURRENT_KERNEL);
        if (!k) continue;
        k->start = g_calls[i].t + 1000;
        k->end = g_calls[i].t + 2000;
        k->streamId = 7;
        k->correlationId = g_calls[i].corr;
        k->name = "fake_kernel";
    }
    if (b.p) g_comp(NULL, 0, b.p, b.size, b.used);
    b.p = NULL;
    static int unpaired_done;
    const char *un = getenv("FAKECUPTI_UNPAIRED");
    int nun = un && !unpaired_done ? atoi(un) : 0;
    unpaired_done = 1;
    for (int i = 0; i < nun; i++) {
        pi_cupti_kernel *k = put(&b, PI_CUPTI_KIND_CONCURRENT_KERNEL);
        if (!k) continue;
        k->start = g_calls[s.from].t + 3000;
        k->end = g_calls[s.from].t + 4000;
        k->streamId = 7;
        k->correlationId = (1u << 30) + (uint32_t)i;
        k->name = "unhooked_kernel";
    }
    if (b.p) g_comp(NULL, 0, b.p, b.size, b.used);
    const char *log = getenv("FAKECUPTI_LOG");
    FILE *f = log && log[0] ? fopen(log, "a") : NULL;
    if (f) {
        fprintf(f, "pairings %d kernels %d\n", s.to - s.from, s.to - s.from + nun);
        fclose(f);
    }
    return PI_CUPTI_SUCCESS;
}
