/*
 * cupti_parse_check.c — native/shim/cupti_parse.c on hand-made CUPTI activity buffers (cases 8-10: the
 * nesting rule of cupti_parse.h): records laid out
 * with the full sizes of CUDA 13.0's newest record versions (pi_cupti.h), walked by a stand-in for
 * cuptiActivityGetNextRecord.  Prints "ok N" or the first mismatch (exit 1).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cupti_parse.h"
#include "events.h"

static size_t rec_size(uint32_t kind) {
    switch (kind) {
    case PI_CUPTI_KIND_CONCURRENT_KERNEL: case PI_CUPTI_KIND_KERNEL: return PI_CUPTI_SIZEOF_KERNEL10;
    case PI_CUPTI_KIND_MEMCPY: return PI_CUPTI_SIZEOF_MEMCPY6;
    case PI_CUPTI_KIND_MEMSET: return PI_CUPTI_SIZEOF_MEMSET4;
    case PI_CUPTI_KIND_EXTERNAL_CORRELATION: return PI_CUPTI_SIZEOF_EXTERNAL_CORRELATION;
    case PI_CUPTI_KIND_DRIVER: case PI_CUPTI_KIND_RUNTIME: return PI_CUPTI_SIZEOF_API;
    default: return 0;
    }
}

/* the iterator as CUPTI documents it: *record NULL starts, MAX_LIMIT_REACHED at the end */
static pi_CUptiResult next(uint8_t *buf, size_t valid, pi_cupti_record **r) {
    size_t off = *r ? (size_t)((uint8_t *)*r - buf) + rec_size((*r)->kind) : 0;
    if (off >= valid) return PI_CUPTI_ERROR_MAX_LIMIT_REACHED;
    *r = (pi_cupti_record *)(buf + off);
    return PI_CUPTI_SUCCESS;
}

typedef struct { uint8_t *b; size_t n; } buffer;
static void *put(buffer *B, uint32_t kind) {
    size_t sz = rec_size(kind);
    void *p = B->b + B->n;
    memset(p, 0xAB, sz); /* reserved bytes are never read as fields */
    ((pi_cupti_record *)p)->kind = kind;
    B->n += sz;
    return p;
}
static void kernel(buffer *B, uint32_t corr, uint64_t start, uint64_t end, uint32_t stream, uint64_t node,
                   const char *name) {
    pi_cupti_kernel *k = put(B, PI_CUPTI_KIND_CONCURRENT_KERNEL);
    k->start = start, k->end = end, k->deviceId = 0, k->streamId = stream, k->correlationId = corr;
    k->graphNodeId = node, k->graphId = node ? 7 : 0, k->name = name;
}
static void ext(buffer *B, uint32_t corr, uint64_t id, uint32_t kind) {
    pi_cupti_external_correlation *x = put(B, PI_CUPTI_KIND_EXTERNAL_CORRELATION);
    x->externalKind = kind, x->externalId = id, x->correlationId = corr, x->reserved0 = 0;
}
static void api(buffer *B, uint32_t corr) {
    pi_cupti_api *a = put(B, PI_CUPTI_KIND_DRIVER);
    a->correlationId = corr;
}
static void api_at(buffer *B, uint32_t kind, uint32_t tid, uint32_t corr, uint64_t start, uint64_t end) {
    pi_cupti_api *a = put(B, kind);
    a->cbid = 0, a->start = start, a->end = end, a->processId = 77, a->threadId = tid, a->correlationId = corr;
    a->returnValue = 0;
}
#define RT PI_CUPTI_KIND_RUNTIME
#define DRV PI_CUPTI_KIND_DRIVER

#define OURS PI_CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2
#define MAXOUT 64
static pi_gpu_act out[MAXOUT];
static int nout;
static long ntotal;
static void sink(void *ctx, const pi_gpu_act *a) {
    (void)ctx;
    ntotal++;
    if (nout < MAXOUT) out[nout++] = *a;
}

static int fails;
#define EXPECT(c) do { if (!(c)) { printf("FAIL line %d: %s\n", __LINE__, #c); fflush(stdout); fails++; } } while (0)

int main(void) {
    static uint8_t mem[1 << 16];
    buffer B = {mem, 0};
    pi_corr_map m;
    pi_gpu_pending pend = {0};
    if (pi_corr_init(&m, 10)) return 2;
    const pi_cuptiActivityGetNextRecord_fn nx = next;

    /* 1: pairing, API record, kernel, memcpy, memset; a kernel before its pairing in the same buffer */
    api(&B, 100);
    ext(&B, 100, 5001, OURS);
    kernel(&B, 100, 1000, 2000, 13, 0, "k_a");
    kernel(&B, 101, 2100, 2500, 13, 0, "k_b");
    ext(&B, 101, 5004, OURS);
    pi_cupti_memcpy *c = put(&B, PI_CUPTI_KIND_MEMCPY);
    c->copyKind = PI_CUPTI_MEMCPY_DTOH, c->bytes = 1ull << 33, c->start = 3000, c->end = 4000, c->deviceId = 1;
    c->streamId = 14, c->correlationId = 102, c->graphNodeId = 0, c->graphId = 0;
    ext(&B, 102, 5007, OURS);
    pi_cupti_memset *s = put(&B, PI_CUPTI_KIND_MEMSET);
    s->bytes = 4096, s->start = 4100, s->end = 4200, s->deviceId = 0, s->streamId = 15, s->correlationId = 103;
    s->graphNodeId = 0, s->graphId = 0;
    ext(&B, 103, 5010, OURS);
    /* another tool's id (torch.profiler's CUSTOM0) is not ours */
    ext(&B, 104, 9999, PI_CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0);
    kernel(&B, 104, 5000, 5100, 13, 0, "k_other");
    long seen = pi_cupti_parse(nx, OURS, B.b, B.n, &m, &pend, sink, NULL);
    EXPECT(seen == 11);
    EXPECT(nout == 4);
    EXPECT(out[0].kind == PI_GPU_KERNEL && out[0].ext == 5001 && out[0].start == 1000 && out[0].end == 2000 &&
           out[0].stream == 13 && strcmp(out[0].name, "k_a") == 0 && out[0].graph_node == 0);
    EXPECT(out[1].kind == PI_GPU_KERNEL && out[1].ext == 5004 && out[1].start == 2100);
    EXPECT(out[2].kind == PI_GPU_MEMCPY && out[2].ext == 5007 && out[2].bytes == (1ull << 33) &&
           out[2].copy_kind == PI_CUPTI_MEMCPY_DTOH && out[2].device == 1 && out[2].stream == 14);
    EXPECT(out[3].kind == PI_GPU_MEMSET && out[3].ext == 5010 && out[3].bytes == 4096 && out[3].end == 4200);
    EXPECT(pend.n == 1 && pend.a[0].corr == 104);

    /* 2: a graph replay (nodes carry the graph launch's correlation id) whose pairing comes a buffer later */
    nout = 0;
    B.n = 0;
    kernel(&B, 110, 6000, 6100, 13, 1, "node_a");
    kernel(&B, 110, 6100, 6300, 13, 2, "node_b");
    kernel(&B, 110, 6300, 6400, 13, 3, "node_a");
    pi_cupti_parse(nx, OURS, B.b, B.n, &m, &pend, sink, NULL);
    EXPECT(nout == 0 && pend.n == 4);
    B.n = 0;
    ext(&B, 110, 5020, OURS);
    pi_cupti_parse(nx, OURS, B.b, B.n, &m, &pend, sink, NULL);
    EXPECT(nout == 3);
    for (int i = 0; i < nout && i < 3; i++)
        EXPECT(out[i].ext == 5020 && out[i].graph_node == (uint64_t)(i + 1) && out[i].graph == 7);
    EXPECT(pend.n == 1); /* the CUSTOM0 one still waits */

    /* 3: an activity waits for its pairing however many buffers come first (no age limit): 200 buffers of
     * other calls' pairings, then its own */
    nout = 0;
    B.n = 0;
    kernel(&B, 120, 6500, 6600, 13, 0, "waits");
    pi_cupti_parse(nx, OURS, B.b, B.n, &m, &pend, sink, NULL);
    for (int i = 0; i < 200; i++) {
        B.n = 0;
        api(&B, 200 + i);
        ext(&B, 200 + i, 6000 + i, OURS);
        pi_cupti_parse(nx, OURS, B.b, B.n, &m, &pend, sink, NULL);
    }
    EXPECT(nout == 0 && pend.n == 2);
    B.n = 0;
    ext(&B, 120, 5025, OURS);
    pi_cupti_parse(nx, OURS, B.b, B.n, &m, &pend, sink, NULL);
    EXPECT(nout == 1 && out[0].corr == 120 && out[0].ext == 5025 && pend.n == 1 && pend.evicted == 0);

    /* 4: the final drain sends what still waits, paired where known, in order */
    nout = 0;
    B.n = 0;
    kernel(&B, 130, 7000, 7100, 13, 0, "late");
    kernel(&B, 131, 7100, 7200, 13, 0, "never");
    pi_cupti_parse(nx, OURS, B.b, B.n, &m, &pend, sink, NULL);
    pi_corr_put(&m, 130, 5030);
    pi_cupti_pending_drain(&m, &pend, sink, NULL);
    EXPECT(nout == 3 && out[0].corr == 104 && out[0].ext == 0 && out[1].ext == 5030 && out[2].ext == 0 &&
           pend.n == 0 && pend.evicted == 0);

    /* 5: the map's window: an id 2^10 later overwrites the slot, the old one is no longer known */
    pi_corr_put(&m, 140, 1);
    pi_corr_put(&m, 140 + 1024, 2);
    EXPECT(pi_corr_get(&m, 140) == 0 && pi_corr_get(&m, 140 + 1024) == 2);

    /* 6: a failing iterator */
    EXPECT(pi_cupti_parse(nx, OURS, B.b, 0, &m, &pend, sink, NULL) == 0); /* an empty buffer */
    /* 7: the bound: past PI_GPU_PENDING_MAX unpaired activities the oldest quarter goes out unmatched, counted */
    nout = 0;
    ntotal = 0;
    B.n = 0;
    int per = (int)(sizeof mem / PI_CUPTI_SIZEOF_KERNEL10), sent = 0;
    while (sent < PI_GPU_PENDING_MAX + 10) {
        B.n = 0;
        for (int i = 0; i < per; i++, sent++) kernel(&B, 300000u + (uint32_t)sent, 1, 2, 13, 0, "lost");
        pi_cupti_parse(nx, OURS, B.b, B.n, &m, &pend, sink, NULL);
    }
    EXPECT(pend.evicted == PI_GPU_PENDING_MAX / 4 && ntotal == (long)pend.evicted && out[0].ext == 0 &&
           out[0].corr == 300000u);
    EXPECT(pend.n == (size_t)sent - pend.evicted && pend.n <= PI_GPU_PENDING_MAX);
    pi_corr_free(&m);
    free(pend.a);
    pend = (pi_gpu_pending){0};

    /* 8: the nesting rule.  The kernel carries the runtime call's correlationId (R); the shim's id was
     * pushed inside it and pairs with the driver call's (D) only.  The pairing, the driver record, the
     * runtime record and the kernel in every order, each in a buffer of its own: the kernel is joined. */
    {
        static const char *const orders[] = {"xdrk", "xdkr", "xkdr", "kxdr", "krdx", "rdxk", "rkxd", "drxk",
                                             "kdrx", "dxrk", "rxdk", "krxd"};
        for (unsigned o = 0; o < sizeof orders / sizeof orders[0]; o++) {
            if (pi_corr_init(&m, 10)) return 2;
            nout = 0;
            uint32_t R = 500 + 10 * o, D = R + 1;
            for (const char *c = orders[o]; *c; c++) {
                B.n = 0;
                if (*c == 'x') ext(&B, D, 8000 + o, OURS);
                if (*c == 'd') api_at(&B, DRV, 9, D, 1100, 1200);
                if (*c == 'r') api_at(&B, RT, 9, R, 1000, 1300);
                if (*c == 'k') kernel(&B, R, 2000, 2500, 13, 0, "nested");
                pi_cupti_parse(nx, OURS, B.b, B.n, &m, &pend, sink, NULL);
            }
            EXPECT(nout == 1 && out[0].corr == R && out[0].ext == 8000 + o && pend.n == 0);
            if (nout != 1) printf("  order %s\n", orders[o]);
            EXPECT(m.nested == 1);
            pi_corr_free(&m);
        }
    }
    /* 9: what the rule does not join: a driver call on another thread, one outside the runtime call's
     * [start, end], one of another process; and a runtime call's own pairing wins over its driver call's */
    if (pi_corr_init(&m, 10)) return 2;
    nout = 0;
    B.n = 0;
    ext(&B, 601, 9001, OURS);
    api_at(&B, DRV, 10, 601, 1100, 1200);  /* thread 10 */
    api_at(&B, RT, 11, 600, 1000, 1300);   /* thread 11: not its driver call */
    kernel(&B, 600, 2000, 2100, 13, 0, "other_thread");
    ext(&B, 611, 9011, OURS);
    api_at(&B, DRV, 12, 611, 1400, 1500);  /* after the runtime call ended */
    api_at(&B, RT, 12, 610, 1000, 1300);
    kernel(&B, 610, 2100, 2200, 13, 0, "outside");
    ext(&B, 621, 9021, OURS);
    pi_cupti_api *other = put(&B, DRV);     /* another process, same thread id */
    other->start = 1100, other->end = 1200, other->processId = 78, other->threadId = 13, other->correlationId = 621;
    api_at(&B, RT, 13, 620, 1000, 1300);
    kernel(&B, 620, 2200, 2300, 13, 0, "other_process");
    ext(&B, 630, 9030, OURS);               /* the runtime call's own pairing (the shim interposed it) */
    ext(&B, 631, 9031, OURS);
    api_at(&B, DRV, 14, 631, 1100, 1200);
    api_at(&B, RT, 14, 630, 1000, 1300);
    kernel(&B, 630, 2300, 2400, 13, 0, "own");
    pi_cupti_parse(nx, OURS, B.b, B.n, &m, &pend, sink, NULL);
    EXPECT(nout == 1 && out[0].corr == 630 && out[0].ext == 9030);
    EXPECT(pend.n == 3 && m.nested == 0);
    /* 10: bounded: 5000 threads' runtime calls, each with a nested driver call, then their kernels: the
     * tables hold a few recent calls per thread, the links are made as the records come */
    nout = 0;
    ntotal = 0;
    pend.n = 0;
    for (uint32_t t = 0; t < 5000; t++) {
        B.n = 0;
        uint32_t R = 2000 + 2 * t;
        ext(&B, R + 1, 20000 + t, OURS);
        api_at(&B, DRV, 100 + t, R + 1, 10 * t + 1001, 10 * t + 1002);
        api_at(&B, RT, 100 + t, R, 10 * t + 1000, 10 * t + 1003);
        kernel(&B, R, 10 * t, 10 * t + 5, 13, 0, "many");
        pi_cupti_parse(nx, OURS, B.b, B.n, &m, &pend, sink, NULL);
    }
    EXPECT(ntotal == 5000 && m.nested == 5000 && pend.n == 0);
    if (ntotal != 5000) printf("  ntotal %ld nested %llu pending %zu\n", ntotal, (unsigned long long)m.nested, pend.n);
    pi_corr_free(&m);
    free(pend.a);
    if (fails) return 1;
    printf("ok %d\n", 10);
    return 0;
}
