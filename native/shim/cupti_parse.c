/* cupti_parse.c — CUPTI activity buffers to joined device activities; see cupti_parse.h. */
#include "cupti_parse.h"

#include <stdlib.h>
#include <string.h>

#include "events.h"

int pi_corr_init(pi_corr_map *m, unsigned bits) {
    size_t n = (size_t)1 << bits;
    m->corr = calloc(n, sizeof *m->corr);
    m->ext = calloc(n, sizeof *m->ext);
    m->nest = calloc(1, sizeof *m->nest);
    m->nested = m->api_runtime = m->api_driver = 0;
    if (!m->corr || !m->ext || !m->nest) {
        pi_corr_free(m);
        return -1;
    }
    m->mask = (uint32_t)(n - 1);
    return 0;
}

void pi_corr_free(pi_corr_map *m) {
    free(m->corr);
    free(m->ext);
    free(m->nest);
    m->corr = NULL;
    m->ext = NULL;
    m->nest = NULL;
    m->mask = 0;
}

void pi_corr_put(pi_corr_map *m, uint32_t corr, uint64_t ext) {
    if (!m->ext) return;
    m->corr[corr & m->mask] = corr;
    m->ext[corr & m->mask] = ext;
}

uint64_t pi_corr_get(const pi_corr_map *m, uint32_t corr) {
    if (!m->ext) return 0;
    uint32_t i = corr & m->mask;
    return m->corr[i] == corr ? m->ext[i] : 0;
}

/* ---- the nesting rule (cupti_parse.h) ---- */

/* the runtime call r (no pairing of its own) takes the pairing of the driver call at d in its thread's
 * driver ring when that call lies inside it and is paired; 1 when it did */
static int link(pi_corr_map *m, uint32_t r_corr, uint64_t r_start, uint64_t r_end, const pi_api_ring *drv, int d) {
    if (drv->corr[d] == r_corr || drv->start[d] < r_start || drv->end[d] > r_end) return 0;
    uint64_t ext = pi_corr_get(m, drv->corr[d]);
    if (!ext) return 0;
    pi_corr_put(m, r_corr, ext);
    m->nested++;
    return 1;
}

/* the runtime call at r of thread t: paired through a driver call inside it, when it has no pairing of its
 * own (the newest driver records first: the one inside it is among the last few) */
static int link_runtime(pi_corr_map *m, pi_api_thread *t, int r) {
    uint32_t corr = t->rt.corr[r];
    uint64_t start = t->rt.start[r], end = t->rt.end[r];
    if (t->drv_start < start || pi_corr_get(m, corr)) return 0;
    for (uint32_t k = 1; k <= t->drv.n; k++) {
        int d = (int)((t->drv.next + PI_API_SPANS - k) % PI_API_SPANS);
        if (link(m, corr, start, end, &t->drv, d)) return 1;
    }
    return 0;
}

/* the driver call at d of thread t is paired: the runtime calls around it may take its pairing */
static int link_driver(pi_corr_map *m, pi_api_thread *t, int d) {
    if (t->rt_end < t->drv.end[d] || !pi_corr_get(m, t->drv.corr[d])) return 0; /* none around it (yet) */
    int n = 0;
    for (uint32_t r = 0; r < t->rt.n; r++)
        if (!pi_corr_get(m, t->rt.corr[r])) n |= link(m, t->rt.corr[r], t->rt.start[r], t->rt.end[r], &t->drv, d);
    return n;
}

static uint32_t thread_slot(uint32_t pid, uint32_t tid) {
    uint32_t h = (pid * 0x9E3779B1u) ^ (tid * 0x85EBCA77u);
    return (h ^ (h >> 15)) % PI_API_THREADS;
}

static int ring_put(pi_api_ring *g, uint32_t corr, uint64_t start, uint64_t end) {
    int i = (int)g->next;
    g->start[i] = start, g->end[i] = end, g->corr[i] = corr;
    g->next = (g->next + 1) % PI_API_SPANS;
    if (g->n < PI_API_SPANS) g->n++;
    return i;
}

int pi_api_seen(pi_corr_map *m, uint32_t kind, uint32_t pid, uint32_t tid, uint32_t corr, uint64_t start,
                uint64_t end) {
    pi_api_nest *nest = m->nest;
    if (kind == PI_CUPTI_KIND_RUNTIME) m->api_runtime++;
    else if (kind == PI_CUPTI_KIND_DRIVER) m->api_driver++;
    if (!nest || (kind != PI_CUPTI_KIND_DRIVER && kind != PI_CUPTI_KIND_RUNTIME) || !start || end < start) return 0;
    uint32_t slot = thread_slot(pid, tid);
    pi_api_thread *t = &nest->t[slot];
    if (!t->used || t->pid != pid || t->tid != tid) { /* a new thread takes the slot */
        t->drv.n = t->drv.next = t->rt.n = t->rt.next = 0;
        t->rt_end = t->drv_start = 0;
        t->pid = pid, t->tid = tid, t->used = 1;
    }
    if (kind == PI_CUPTI_KIND_RUNTIME) {
        int r = ring_put(&t->rt, corr, start, end);
        if (end > t->rt_end) t->rt_end = end;
        return link_runtime(m, t, r);
    }
    int d = ring_put(&t->drv, corr, start, end);
    if (start > t->drv_start) t->drv_start = start;
    nest->index_corr[corr % PI_API_INDEX] = corr;
    nest->index_slot[corr % PI_API_INDEX] = (uint8_t)slot;
    return link_driver(m, t, d);
}

/* a pairing for corr came after its driver API record: the runtime calls around that call may take it */
static int api_paired(pi_corr_map *m, uint32_t corr) {
    pi_api_nest *nest = m->nest;
    if (!nest || nest->index_corr[corr % PI_API_INDEX] != corr) return 0;
    pi_api_thread *t = &nest->t[nest->index_slot[corr % PI_API_INDEX]];
    for (uint32_t d = 0; d < t->drv.n; d++)
        if (t->drv.corr[d] == corr) return link_driver(m, t, (int)d);
    return 0;
}

void pi_cupti_view(const pi_cupti_record *r, pi_gpu_act *a) {
    memset(a, 0, sizeof *a);
    switch (r->kind) {
    case PI_CUPTI_KIND_KERNEL:
    case PI_CUPTI_KIND_CONCURRENT_KERNEL: {
        const pi_cupti_kernel *k = (const pi_cupti_kernel *)r;
        a->kind = PI_GPU_KERNEL;
        a->start = k->start;
        a->end = k->end;
        a->device = (int16_t)k->deviceId;
        a->stream = k->streamId;
        a->corr = k->correlationId;
        a->graph_node = k->graphNodeId;
        a->graph = k->graphId;
        a->name = k->name;
        break;
    }
    case PI_CUPTI_KIND_MEMCPY: {
        const pi_cupti_memcpy *c = (const pi_cupti_memcpy *)r;
        a->kind = PI_GPU_MEMCPY;
        a->start = c->start;
        a->end = c->end;
        a->bytes = c->bytes;
        a->copy_kind = c->copyKind;
        a->device = (int16_t)c->deviceId;
        a->stream = c->streamId;
        a->corr = c->correlationId;
        a->graph_node = c->graphNodeId;
        a->graph = c->graphId;
        break;
    }
    case PI_CUPTI_KIND_MEMSET: {
        const pi_cupti_memset *s = (const pi_cupti_memset *)r;
        a->kind = PI_GPU_MEMSET;
        a->start = s->start;
        a->end = s->end;
        a->bytes = s->bytes;
        a->device = (int16_t)s->deviceId;
        a->stream = s->streamId;
        a->corr = s->correlationId;
        a->graph_node = s->graphNodeId;
        a->graph = s->graphId;
        break;
    }
    default:
        break;
    }
}

/* the oldest quarter of a full list goes out unmatched (counted in p->evicted): bounded memory */
static void evict(pi_gpu_pending *p, pi_gpu_sink sink, void *ctx) {
    size_t k = p->n / 4 ? p->n / 4 : p->n;
    for (size_t i = 0; i < k; i++) {
        p->a[i].ext = 0;
        sink(ctx, &p->a[i]);
    }
    memmove(p->a, p->a + k, (p->n - k) * sizeof *p->a);
    p->n -= k;
    p->evicted += k;
}

static void pend(pi_gpu_pending *p, const pi_gpu_act *a, pi_gpu_sink sink, void *ctx) {
    if (p->n == p->cap && p->cap < PI_GPU_PENDING_MAX) {
        size_t cap = p->cap ? 2 * p->cap : 1024;
        if (cap > PI_GPU_PENDING_MAX) cap = PI_GPU_PENDING_MAX;
        pi_gpu_act *q = realloc(p->a, cap * sizeof *q);
        if (q) {
            p->a = q;
            p->cap = cap;
        }
    }
    if (p->n == p->cap && p->n) evict(p, sink, ctx);
    if (p->n == p->cap) { /* no memory at all: it goes out unmatched rather than not at all */
        sink(ctx, a);
        p->evicted++;
        return;
    }
    p->a[p->n++] = *a;
}

/* pending activities now paired go out, in their order; the others keep waiting (all go at the final drain) */
static void retry(pi_corr_map *m, pi_gpu_pending *p, pi_gpu_sink sink, void *ctx, int final) {
    size_t keep = 0;
    for (size_t i = 0; i < p->n; i++) {
        pi_gpu_act *a = &p->a[i];
        a->ext = pi_corr_get(m, a->corr);
        if (a->ext || final) {
            if (!a->ext) p->unmatched++;
            sink(ctx, a);
        } else {
            p->a[keep++] = *a;
        }
    }
    p->n = keep;
}

long pi_cupti_parse(pi_cuptiActivityGetNextRecord_fn next, uint32_t ext_kind, uint8_t *buf, size_t valid, pi_corr_map *m,
                    pi_gpu_pending *pending, pi_gpu_sink sink, void *ctx) {
    long seen = 0, paired = 0;
    size_t waited = pending->n; /* pending before this buffer: only a new pairing can pair them */
    pi_cupti_record *r = NULL;
    /* one pass: pairings into the map, activities out when their pairing is known, else pending (CUPTI
     * writes the pairing at the call, the activity when it ends, but a buffer holds one thread's or one
     * context's records: a pairing can come later in this buffer or in a later one) */
    for (;;) {
        pi_CUptiResult res = next(buf, valid, &r);
        if (res == PI_CUPTI_ERROR_MAX_LIMIT_REACHED) break;
        if (res != PI_CUPTI_SUCCESS) {
            seen = -1;
            break;
        }
        seen++;
        if (r->kind == PI_CUPTI_KIND_EXTERNAL_CORRELATION) {
            const pi_cupti_external_correlation *x = (const pi_cupti_external_correlation *)r;
            if (x->externalKind == ext_kind) {
                pi_corr_put(m, x->correlationId, x->externalId);
                api_paired(m, x->correlationId);
                paired++;
            }
            continue;
        }
        if (r->kind == PI_CUPTI_KIND_DRIVER || r->kind == PI_CUPTI_KIND_RUNTIME) {
            const pi_cupti_api *api = (const pi_cupti_api *)r;
            paired += pi_api_seen(m, r->kind, api->processId, api->threadId, api->correlationId, api->start, api->end);
            continue;
        }
        pi_gpu_act a;
        pi_cupti_view(r, &a);
        if (!a.kind) continue;
        a.ext = pi_corr_get(m, a.corr);
        if (a.ext) sink(ctx, &a);
        else pend(pending, &a, sink, ctx);
    }
    if (paired && (waited || pending->n)) retry(m, pending, sink, ctx, 0);
    return seen;
}

void pi_cupti_pending_drain(pi_corr_map *m, pi_gpu_pending *pending, pi_gpu_sink sink, void *ctx) {
    retry(m, pending, sink, ctx, 1);
}
