/*
 * allocsim.c — simulated allocators replaying a request stream (see allocsim.h).
 *
 * A port of pyinterpose/analysis/pools/allocators.py, decision for decision:
 * the Python docstring states the rules and their sources, the comments here
 * name the Python function each piece mirrors.  Blocks live in one arena and
 * are referred to by index (the arena grows with realloc, so no pointer to a
 * block is held across an allocation of another).  A free list, sorted by
 * (size, address) like the Python's sorted lists of (size, addr, block), is a
 * treap threaded through the blocks; lists sorted by address (unmapped ranges,
 * CNMeM's lent blocks) use the same treap keyed by address.  A block is in at
 * most one list at a time.
 */
#include "allocsim.h"

#include <stdlib.h>
#include <string.h>

#define MiB (INT64_C(1) << 20)
#define kMinBlockSize INT64_C(512)
#define kSmallSize MiB
#define kSmallBuffer (2 * MiB)
#define kMinLargeAlloc (10 * MiB)
#define kRoundLarge (2 * MiB)
#define MAX_SIZE (INT64_C(1) << 45)      /* larger requests: the Python reference */
#define MAX_BYTES (INT64_C(1) << 52)     /* larger capacities / options: the Python reference */
#define ADDR_LIMIT (INT64_C(1) << 61)    /* address / reserved sums beyond this: the Python reference */

enum { ERR_NOMEM = 1, ERR_RANGE = 2 };
enum { BY_SIZE = 0, BY_ADDR = 1 };

/* ------------------------------------------------------------------ blocks */

typedef struct {
    int64_t addr, size;
    int32_t prev, next;   /* address neighbours in the same segment / chain */
    int32_t l, r;         /* treap children */
    int32_t key;          /* the list it belongs to (pool and stream, manager) */
    int32_t seg;          /* classic segment id, expandable range id, or -1 */
    uint32_t prio;
    uint8_t free;         /* free (not handed to a request, not lent) */
    uint8_t mapped;       /* expandable segments: pages mapped */
} blk_t;

typedef struct {
    blk_t *b;
    int32_t n, cap, recycled;
    uint64_t rng;
    int err;
} arena_t;

#define BK(i) (A->b[(i)])

static uint32_t rnd(arena_t *A)
{
    uint64_t x = A->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    A->rng = x;
    return (uint32_t)(x >> 16);
}

static int32_t newblk(arena_t *A, int64_t addr, int64_t size, int32_t seg, int32_t key)
{
    int32_t i;
    if (A->recycled >= 0) {
        i = A->recycled;
        A->recycled = BK(i).next;
    } else {
        if (A->n == A->cap) {
            int32_t nc = A->cap ? A->cap * 2 : 1024;
            if (A->cap > (1 << 29)) {
                A->err = ERR_NOMEM;
                return -1;
            }
            blk_t *nb = realloc(A->b, (size_t)nc * sizeof(blk_t));
            if (!nb) {
                A->err = ERR_NOMEM;
                return -1;
            }
            A->b = nb;
            A->cap = nc;
        }
        i = A->n++;
    }
    blk_t *x = &BK(i);
    x->addr = addr;
    x->size = size;
    x->prev = x->next = x->l = x->r = -1;
    x->key = key;
    x->seg = seg;
    x->prio = rnd(A);
    x->free = 1;
    x->mapped = 1;
    return i;
}

static void delblk(arena_t *A, int32_t i)
{
    BK(i).next = A->recycled;
    BK(i).size = -1;
    A->recycled = i;
}

/* ------------------------------------------------------------------ treap */

static inline int cmpk(const blk_t *x, int64_t k1, int64_t k2, int mode)
{
    int64_t a1 = mode == BY_SIZE ? x->size : x->addr;
    int64_t a2 = mode == BY_SIZE ? x->addr : 0;
    if (a1 != k1)
        return a1 < k1 ? -1 : 1;
    if (a2 != k2)
        return a2 < k2 ? -1 : 1;
    return 0;
}

#define K1(x, mode) ((mode) == BY_SIZE ? (x)->size : (x)->addr)
#define K2(x, mode) ((mode) == BY_SIZE ? (x)->addr : 0)

/* l: keys < k, r: keys >= k */
static void tsplit(arena_t *A, int32_t t, int64_t k1, int64_t k2, int mode, int32_t *l, int32_t *r)
{
    if (t < 0) {
        *l = *r = -1;
        return;
    }
    if (cmpk(&BK(t), k1, k2, mode) < 0) {
        tsplit(A, BK(t).r, k1, k2, mode, &BK(t).r, r);
        *l = t;
    } else {
        tsplit(A, BK(t).l, k1, k2, mode, l, &BK(t).l);
        *r = t;
    }
}

static int32_t tmerge(arena_t *A, int32_t a, int32_t b)
{
    if (a < 0)
        return b;
    if (b < 0)
        return a;
    if (BK(a).prio > BK(b).prio) {
        BK(a).r = tmerge(A, BK(a).r, b);
        return a;
    }
    BK(b).l = tmerge(A, a, BK(b).l);
    return b;
}

static int32_t tins(arena_t *A, int32_t t, int32_t x, int mode)
{
    if (t < 0)
        return x;
    if (BK(x).prio > BK(t).prio) {
        tsplit(A, t, K1(&BK(x), mode), K2(&BK(x), mode), mode, &BK(x).l, &BK(x).r);
        return x;
    }
    if (cmpk(&BK(x), K1(&BK(t), mode), K2(&BK(t), mode), mode) < 0)
        BK(t).l = tins(A, BK(t).l, x, mode);
    else
        BK(t).r = tins(A, BK(t).r, x, mode);
    return t;
}

static int32_t terase(arena_t *A, int32_t t, int32_t x, int mode)
{
    if (t < 0) {
        A->err = ERR_RANGE;   /* not in the list: a broken invariant */
        return t;
    }
    if (t == x)
        return tmerge(A, BK(t).l, BK(t).r);
    if (cmpk(&BK(x), K1(&BK(t), mode), K2(&BK(t), mode), mode) < 0)
        BK(t).l = terase(A, BK(t).l, x, mode);
    else
        BK(t).r = terase(A, BK(t).r, x, mode);
    return t;
}

static void tinsert(arena_t *A, int32_t *root, int32_t x, int mode)
{
    BK(x).l = BK(x).r = -1;
    *root = tins(A, *root, x, mode);
}

static void tremove(arena_t *A, int32_t *root, int32_t x, int mode)
{
    *root = terase(A, *root, x, mode);
    BK(x).l = BK(x).r = -1;
}

/* first node with key >= (k1, k2) */
static int32_t tlower(arena_t *A, int32_t t, int64_t k1, int64_t k2, int mode)
{
    int32_t res = -1;
    while (t >= 0) {
        if (cmpk(&BK(t), k1, k2, mode) < 0) {
            t = BK(t).r;
        } else {
            res = t;
            t = BK(t).l;
        }
    }
    return res;
}

/* first node with key > key(x) */
static int32_t tsucc(arena_t *A, int32_t t, int32_t x, int mode)
{
    int64_t k1 = K1(&BK(x), mode), k2 = K2(&BK(x), mode);
    int32_t res = -1;
    while (t >= 0) {
        if (cmpk(&BK(t), k1, k2, mode) <= 0) {
            t = BK(t).r;
        } else {
            res = t;
            t = BK(t).l;
        }
    }
    return res;
}

/* last node with address <= a (BY_ADDR lists) */
static int32_t tfloor_addr(arena_t *A, int32_t t, int64_t a)
{
    int32_t res = -1;
    while (t >= 0) {
        if (BK(t).addr <= a) {
            res = t;
            t = BK(t).r;
        } else {
            t = BK(t).l;
        }
    }
    return res;
}

typedef struct {
    int32_t *v;
    int64_t n, cap;
} vec_t;

static int vpush(vec_t *v, int32_t x)
{
    if (v->n == v->cap) {
        int64_t nc = v->cap ? v->cap * 2 : 64;
        int32_t *nv = realloc(v->v, (size_t)nc * sizeof(int32_t));
        if (!nv)
            return -1;
        v->v = nv;
        v->cap = nc;
    }
    v->v[v->n++] = x;
    return 0;
}

/* in order (ascending key) */
static void tcollect(arena_t *A, int32_t t, vec_t *out)
{
    while (t >= 0) {
        tcollect(A, BK(t).l, out);
        if (vpush(out, t) < 0)
            A->err = ERR_NOMEM;
        t = BK(t).r;
    }
}

/* ------------------------------------------------------------------ request ids, streams */

typedef struct {
    int64_t *keys;
    int32_t *vals;
    uint64_t mask;
    int64_t count;
} hmap_t;

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    x *= UINT64_C(0xc4ceb9fe1a85ec53);
    x ^= x >> 33;
    return x;
}

static int hm_init(hmap_t *h, int64_t expect)
{
    uint64_t cap = 16;
    while (cap < (uint64_t)expect * 2)
        cap <<= 1;
    h->keys = malloc(cap * sizeof(int64_t));
    h->vals = malloc(cap * sizeof(int32_t));
    if (!h->keys || !h->vals)
        return -1;
    memset(h->vals, 0xff, cap * sizeof(int32_t));
    h->mask = cap - 1;
    h->count = 0;
    return 0;
}

static void hm_free(hmap_t *h)
{
    free(h->keys);
    free(h->vals);
}

/* value of k, adding it with value h->count when absent; -1: out of memory */
static int32_t hm_id(hmap_t *h, int64_t k)
{
    if ((uint64_t)(h->count + 1) * 2 > h->mask + 1) {
        hmap_t g;
        if (hm_init(&g, (h->count + 1) * 2) < 0) {
            hm_free(&g);
            return -1;
        }
        for (uint64_t i = 0; i <= h->mask; i++) {
            if (h->vals[i] < 0)
                continue;
            uint64_t j = mix64((uint64_t)h->keys[i]) & g.mask;
            while (g.vals[j] >= 0)
                j = (j + 1) & g.mask;
            g.keys[j] = h->keys[i];
            g.vals[j] = h->vals[i];
        }
        g.count = h->count;
        hm_free(h);
        *h = g;
    }
    uint64_t j = mix64((uint64_t)k) & h->mask;
    while (h->vals[j] >= 0) {
        if (h->keys[j] == k)
            return h->vals[j];
        j = (j + 1) & h->mask;
    }
    h->keys[j] = k;
    h->vals[j] = (int32_t)h->count;
    return (int32_t)h->count++;
}

/* Dense numbers of values in first-seen order (a hash map, and the last value remembered: requests
 * come in runs of one stream) */
typedef struct {
    hmap_t h;
    int64_t last_v;
    int32_t last_i;
} numberer_t;

static int numberer_init(numberer_t *nb)
{
    nb->last_v = 0;
    nb->last_i = -1;
    if (hm_init(&nb->h, 8) < 0) {
        hm_free(&nb->h);
        return -1;
    }
    return 0;
}

/* the number of v; -1: out of memory */
static int32_t numberer_id(numberer_t *nb, int64_t v)
{
    if (nb->last_i >= 0 && v == nb->last_v)
        return nb->last_i;
    int32_t s = hm_id(&nb->h, v);
    if (s >= 0) {
        nb->last_i = s;
        nb->last_v = v;
    }
    return s;
}

typedef struct {
    int32_t *slot;      /* per request: dense id of its block id */
    int64_t nslots;
    int32_t *sidx;      /* per request: dense id of its stream (first-seen order) */
    uint64_t *svals;    /* stream value of each dense id */
    int32_t nstreams;
    int32_t *live;      /* per slot: the live block, or -1 */
    int64_t *rsz;       /* per slot: bytes handed out (CNMeM) */
    /* the requests: either per request is_alloc, size (slot, sidx above per request), or, in the
     * by-block form (req != NULL), req[i] = slot of an alloc, ~slot of a free, with size and
     * stream index per slot (bsize, sidx) */
    const uint8_t *is_alloc;
    const int64_t *size;
    const int32_t *req;
    const int64_t *bsize;
    const int32_t *bsidx;   /* by block: the stream index per slot */
} prep_t;

/* request i of a prep_t: alloc?, slot, size, stream index (either form; the branch is the same
 * for every request of a replay) */
static inline int rq_alloc(const prep_t *p, int64_t i)
{
    return p->req ? p->req[i] >= 0 : p->is_alloc[i] != 0;
}
static inline int32_t rq_slot(const prep_t *p, int64_t i)
{
    if (p->req) {
        int32_t r = p->req[i];
        return r >= 0 ? r : ~r;
    }
    return p->slot[i];
}
static inline int64_t rq_size(const prep_t *p, int64_t i)
{
    return p->req ? p->bsize[rq_slot(p, i)] : p->size[i];
}
static inline int32_t rq_sidx(const prep_t *p, int64_t i)
{
    return p->req ? p->bsidx[rq_slot(p, i)] : p->sidx[i];
}

static void prep_free(prep_t *p)
{
    free(p->slot);
    free(p->sidx);
    free(p->svals);
    free(p->live);
    free(p->rsz);
}

static int prep(prep_t *p, int64_t n, const uint8_t *is_alloc, const int64_t *size, const int64_t *bid,
                const uint64_t *stream, int want_rsz)
{
    memset(p, 0, sizeof(*p));
    p->is_alloc = is_alloc;
    p->size = size;
    if (n > INT32_MAX / 2)
        return -ERR_RANGE;
    p->slot = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    if (!p->slot)
        return -ERR_NOMEM;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int64_t i = 0; i < n; i++) {
        if (bid[i] < lo)
            lo = bid[i];
        if (bid[i] > hi)
            hi = bid[i];
    }
    if (n == 0 || (lo >= 0 && hi < 2 * n + 1024)) {   /* block ids are small: use them directly */
        for (int64_t i = 0; i < n; i++)
            p->slot[i] = (int32_t)bid[i];
        p->nslots = n ? hi + 1 : 0;
    } else {
        hmap_t h;
        if (hm_init(&h, n) < 0) {
            hm_free(&h);
            return -ERR_NOMEM;
        }
        for (int64_t i = 0; i < n; i++) {
            p->slot[i] = hm_id(&h, bid[i]);
            if (p->slot[i] < 0) {
                hm_free(&h);
                return -ERR_NOMEM;
            }
        }
        p->nslots = h.count;
        hm_free(&h);
    }
    p->live = malloc((size_t)(p->nslots ? p->nslots : 1) * sizeof(int32_t));
    if (!p->live)
        return -ERR_NOMEM;
    memset(p->live, 0xff, (size_t)p->nslots * sizeof(int32_t));
    if (want_rsz) {
        p->rsz = calloc((size_t)(p->nslots ? p->nslots : 1), sizeof(int64_t));
        if (!p->rsz)
            return -ERR_NOMEM;
    }
    if (stream) {
        p->sidx = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
        if (!p->sidx)
            return -ERR_NOMEM;
        numberer_t nb;
        if (numberer_init(&nb) < 0)
            return -ERR_NOMEM;
        for (int64_t i = 0; i < n; i++) {
            int32_t s = numberer_id(&nb, (int64_t)stream[i]);
            if (s < 0) {
                hm_free(&nb.h);
                return -ERR_NOMEM;
            }
            p->sidx[i] = s;
        }
        hmap_t h = nb.h;
        p->nstreams = (int32_t)h.count;
        p->svals = malloc((size_t)(h.count ? h.count : 1) * sizeof(uint64_t));
        if (!p->svals) {
            hm_free(&h);
            return -ERR_NOMEM;
        }
        for (uint64_t j = 0; j <= h.mask; j++)
            if (h.vals[j] >= 0)
                p->svals[h.vals[j]] = (uint64_t)h.keys[j];
        hm_free(&h);
    }
    return 0;
}

/* The dense stream index of each slot, in first-seen order over the requests (as prep numbers them):
 * sidx[s] for every slot a request names (others untouched); returns the number of streams (their
 * values: bstream at any slot of that index), or -ERR_NOMEM / -ERR_RANGE. */
int64_t pi_as_stream_ids(int64_t n, const int32_t *req, int64_t nslots, const uint64_t *bstream, int32_t *sidx)
{
    if (n > INT32_MAX / 2 || nslots < 0 || nslots > INT32_MAX / 2)
        return -ERR_RANGE;
    for (int64_t i = 0; i < n; i++)
        if (req[i] >= nslots || req[i] < -nslots)
            return -ERR_RANGE;
    numberer_t nb;
    if (numberer_init(&nb) < 0)
        return -ERR_NOMEM;
    for (int64_t i = 0; i < n; i++) {
        int32_t sl = req[i] >= 0 ? req[i] : ~req[i];
        int32_t s = numberer_id(&nb, (int64_t)bstream[sl]);
        if (s < 0) {
            hm_free(&nb.h);
            return -ERR_NOMEM;
        }
        sidx[sl] = s;
    }
    int64_t count = (int64_t)nb.h.count;
    hm_free(&nb.h);
    return count;
}

/* prep for the by-block form: req[i] in [-nslots, nslots) (~slot: a free), size and stream index per
 * slot (bsidx: pi_as_stream_ids's, in [0, nstreams), svals their values; NULL: no streams) */
static int prep_b(prep_t *p, int64_t n, const int32_t *req, int64_t nslots, const int64_t *bsize,
                  const int32_t *bsidx, const uint64_t *svals, int64_t nstreams, int want_rsz)
{
    memset(p, 0, sizeof(*p));
    p->req = req;
    p->bsize = bsize;
    if (n > INT32_MAX / 2 || nslots < 0 || nslots > INT32_MAX / 2 || nstreams < 0 || nstreams > INT32_MAX / 2)
        return -ERR_RANGE;
    for (int64_t i = 0; i < n; i++)
        if (req[i] >= nslots || req[i] < -nslots)
            return -ERR_RANGE;
    p->nslots = nslots;
    p->live = malloc((size_t)(nslots ? nslots : 1) * sizeof(int32_t));
    if (!p->live)
        return -ERR_NOMEM;
    memset(p->live, 0xff, (size_t)nslots * sizeof(int32_t));
    if (want_rsz) {
        p->rsz = calloc((size_t)(nslots ? nslots : 1), sizeof(int64_t));
        if (!p->rsz)
            return -ERR_NOMEM;
    }
    if (bsidx) {
        for (int64_t s = 0; s < nslots; s++)
            if (bsidx[s] < 0 || bsidx[s] >= nstreams)
                return -ERR_RANGE;
        p->bsidx = bsidx;
        p->nstreams = (int32_t)nstreams;
        p->svals = malloc((size_t)(nstreams ? nstreams : 1) * sizeof(uint64_t));
        if (!p->svals)
            return -ERR_NOMEM;
        memcpy(p->svals, svals, (size_t)nstreams * sizeof(uint64_t));
    }
    return 0;
}

static int check_sizes(int64_t n, const int64_t *size)
{
    for (int64_t i = 0; i < n; i++)
        if (size[i] < 0 || size[i] > MAX_SIZE)
            return -1;
    return 0;
}

static inline int64_t round_up(int64_t x, int64_t m)
{
    return (x + m - 1) / m * m;   /* x >= 0, m > 0 */
}

static inline int bit_length(int64_t x)
{
    return x > 0 ? 64 - __builtin_clzll((uint64_t)x) : 0;
}

static void result_init(pi_as_result *out)
{
    memset(out, 0, sizeof(*out));
    out->oom_at = -1;
}

/* the reserved curve after a stop at request ``from`` (< n): that request keeps the
 * most reserved while it was tried, the unplayed ones what stays reserved */
static void fill_after(int64_t *reserved_after, int64_t from, int64_t n, int64_t step_peak, int64_t v)
{
    if (reserved_after && from < n) {
        reserved_after[from] = step_peak > v ? step_peak : v;
        for (int64_t k = from + 1; k < n; k++)
            reserved_after[k] = v;
    }
}
/* the for-loop step that records the most bytes reserved during request i (the heap
 * ``H``'s step_peak, then restarted at what stays reserved); runs after ``continue``
 * too, not after ``break`` */
#define REC_STEP(H) (reserved_after ? (void)(reserved_after[i] = (H).step_peak) : (void)0), \
                    (H).step_peak = (H).reserved, i++

/* ------------------------------------------------------------------ cudaMalloc */

/* _simulate_cudamalloc: prefix sums of the rounded sizes (numpy's wrapping int64
 * arithmetic, hence unsigned sums) */
static int cm_run(const prep_t *p, int64_t n, int64_t capacity, int64_t *reserved_after, pi_as_result *out)
{
    result_init(out);
    uint64_t live = 0, raw = 0;
    int64_t peak = INT64_MIN, peak_raw = INT64_MIN, peak_before = INT64_MIN, allocs = 0, allocs_before = 0;
    int64_t oom = -1;
    for (int64_t i = 0; i < n; i++) {
        int64_t s = rq_size(p, i);
        if (s > MAX_SIZE || s < -MAX_SIZE)
            return -ERR_RANGE;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t s = rq_size(p, i);
        int64_t r = s >= kRoundLarge ? (int64_t)(((uint64_t)s + kRoundLarge - 1) / kRoundLarge * kRoundLarge)
                                     : round_up(s < 1 ? 1 : s, 512);
        int is_a = rq_alloc(p, i);
        if (is_a) {
            live += (uint64_t)r;
            raw += (uint64_t)s;
            allocs++;
        } else {
            live -= (uint64_t)r;
            raw -= (uint64_t)s;
        }
        if ((int64_t)live > peak)
            peak = (int64_t)live;
        if ((int64_t)raw > peak_raw)
            peak_raw = (int64_t)raw;
        if (oom < 0 && capacity >= 0 && (int64_t)live > capacity) {
            oom = i;   /* the first request over the capacity: what came before counts */
            peak_before = i ? peak_before : INT64_MIN;
            allocs_before = allocs - (is_a ? 1 : 0);
        }
        if (oom < 0)
            peak_before = peak;
        if (reserved_after)
            reserved_after[i] = oom < 0 ? (int64_t)live : i ? reserved_after[i - 1] : 0;
    }
    if (n == 0)
        peak = peak_raw = 0;
    if (oom >= 0) {
        out->peak_reserved = oom ? peak_before : 0;
        out->backing = allocs_before;
    } else {
        out->peak_reserved = peak;
        out->backing = allocs;
    }
    out->peak_allocated = out->peak_reserved;
    out->oom_at = oom;
    out->details[0] = peak_raw;
    return 0;
}

int pi_as_cudamalloc(int64_t n, const uint8_t *is_alloc, const int64_t *size, int64_t capacity,
                     int64_t *reserved_after, pi_as_result *out)
{
    prep_t p;
    memset(&p, 0, sizeof(p));
    p.is_alloc = is_alloc;
    p.size = size;
    return cm_run(&p, n, capacity, reserved_after, out);
}

int pi_as_cudamalloc_b(int64_t n, const int32_t *req, int64_t nslots, const int64_t *bsize, int64_t capacity,
                       int64_t *reserved_after, pi_as_result *out)
{
    result_init(out);
    prep_t p;
    memset(&p, 0, sizeof(p));
    p.req = req;
    p.bsize = bsize;
    if (n > INT32_MAX / 2 || nslots < 0 || nslots > INT32_MAX / 2)
        return -ERR_RANGE;
    for (int64_t i = 0; i < n; i++)
        if (req[i] >= nslots || req[i] < -nslots)
            return -ERR_RANGE;
    return cm_run(&p, n, capacity, reserved_after, out);
}

/* ------------------------------------------------------------------ _Heap */

typedef struct {
    arena_t A;
    int32_t *froot;       /* free lists by key */
    int32_t nkeys;
    int64_t capacity;     /* < 0: none */
    int64_t reserved, peak_reserved, allocated, peak_allocated, backing, next_addr;
    int64_t step_peak;   /* most reserved during the current request (the reserved curve) */
    int64_t *seg_size;    /* classic segments by id (= backing count at creation); -1 released */
    int32_t *seg_first;
    int64_t seg_cap;
    int32_t *live;
} heap_t;

static int heap_init(heap_t *h, int32_t nkeys, int64_t capacity, int32_t *live)
{
    memset(h, 0, sizeof(*h));
    h->A.recycled = -1;
    h->A.rng = UINT64_C(0x9e3779b97f4a7c15);
    h->nkeys = nkeys;
    h->froot = malloc((size_t)(nkeys ? nkeys : 1) * sizeof(int32_t));
    if (!h->froot)
        return -1;
    for (int32_t k = 0; k < nkeys; k++)
        h->froot[k] = -1;
    h->capacity = capacity;
    h->live = live;
    return 0;
}

static void heap_free(heap_t *h)
{
    free(h->A.b);
    free(h->froot);
    free(h->seg_size);
    free(h->seg_first);
}

#define HA (&h->A)

static void h_insert(heap_t *h, int32_t b)
{
    tinsert(HA, &h->froot[h->A.b[b].key], b, BY_SIZE);
}

static void h_remove(heap_t *h, int32_t b)
{
    tremove(HA, &h->froot[h->A.b[b].key], b, BY_SIZE);
}

static int32_t h_best_fit(heap_t *h, int32_t key, int64_t size)
{
    return tlower(HA, h->froot[key], size, INT64_MIN, BY_SIZE);
}

/* _Heap.new_segment */
static int32_t h_new_segment(heap_t *h, int32_t key, int64_t size)
{
    if (h->capacity >= 0 && h->reserved + size > h->capacity)
        return -1;
    if (size > ADDR_LIMIT || h->next_addr > ADDR_LIMIT - size) {
        h->A.err = ERR_RANGE;
        return -1;
    }
    int64_t seg = h->backing;
    if (seg >= h->seg_cap) {
        int64_t nc = h->seg_cap ? h->seg_cap * 2 : 256;
        int64_t *ns = realloc(h->seg_size, (size_t)nc * sizeof(int64_t));
        if (ns)
            h->seg_size = ns;
        int32_t *nf = realloc(h->seg_first, (size_t)nc * sizeof(int32_t));
        if (nf)
            h->seg_first = nf;
        if (!ns || !nf || nc > INT32_MAX) {
            h->A.err = ERR_NOMEM;
            return -1;
        }
        h->seg_cap = nc;
    }
    int32_t b = newblk(HA, h->next_addr, size, (int32_t)seg, key);
    if (b < 0)
        return -1;
    h->backing++;
    h->next_addr += size;
    h->seg_size[seg] = size;
    h->seg_first[seg] = b;
    h->reserved += size;
    if (h->reserved > h->peak_reserved)
        h->peak_reserved = h->reserved;
    if (h->reserved > h->step_peak)
        h->step_peak = h->reserved;
    h_insert(h, b);
    return b;
}

/* _Heap.release_segment: cudaFree the whole free segment of b (no prev, no next) */
static int64_t h_release_segment(heap_t *h, int32_t b)
{
    h_remove(h, b);
    int32_t seg = h->A.b[b].seg;
    int64_t size = h->seg_size[seg];
    h->seg_size[seg] = -1;
    h->reserved -= size;
    delblk(HA, b);
    return size;
}

/* _Heap.release_free_segments (segments in creation order) */
static void h_release_free_segments(heap_t *h)
{
    arena_t *A = HA;
    for (int64_t s = 0; s < h->backing; s++) {
        if (h->seg_size[s] < 0)
            continue;
        int32_t f = h->seg_first[s];
        if (BK(f).free && BK(f).next < 0 && BK(f).prev < 0)
            h_release_segment(h, f);
    }
}

/* _Heap.take; slot < 0: not a request (CNMeM's blocks lent to a child) */
static void h_take(heap_t *h, int32_t b, int64_t size, int split, int64_t slot, int count)
{
    arena_t *A = HA;
    h_remove(h, b);
    if (split && BK(b).size > size) {
        int32_t rest = newblk(A, BK(b).addr + size, BK(b).size - size, BK(b).seg, BK(b).key);
        if (rest < 0)
            return;
        BK(rest).prev = b;
        BK(rest).next = BK(b).next;
        if (BK(b).next >= 0)
            BK(BK(b).next).prev = rest;
        BK(b).next = rest;
        BK(b).size = size;
        h_insert(h, rest);
    }
    BK(b).free = 0;
    if (slot >= 0)
        h->live[slot] = b;
    if (count) {
        h->allocated += BK(b).size;
        if (h->allocated > h->peak_allocated)
            h->peak_allocated = h->allocated;
    }
}

/* _Heap.release: coalesce with free neighbours of the same segment */
static void h_release(heap_t *h, int64_t slot)
{
    arena_t *A = HA;
    int32_t b = h->live[slot];
    if (b < 0)
        return;
    h->live[slot] = -1;
    h->allocated -= BK(b).size;
    BK(b).free = 1;
    int32_t p = BK(b).prev, nx = BK(b).next;
    if (p >= 0 && BK(p).free) {
        h_remove(h, p);
        BK(p).size += BK(b).size;
        BK(p).next = BK(b).next;
        if (BK(b).next >= 0)
            BK(BK(b).next).prev = p;
        delblk(A, b);
        b = p;
    }
    if (nx >= 0 && BK(nx).free) {
        h_remove(h, nx);
        BK(b).size += BK(nx).size;
        BK(b).next = BK(nx).next;
        if (BK(nx).next >= 0)
            BK(BK(nx).next).prev = b;
        delblk(A, nx);
    }
    h_insert(h, b);
}

/* ------------------------------------------------------------------ PyTorch rounding */

/* _pytorch_round */
static int64_t pt_round(int64_t size, const int64_t *divs)
{
    if (size < kMinBlockSize)
        return kMinBlockSize;
    int bl = bit_length(size);
    int idx = bl - 1 - 20;
    if (idx < 0)
        idx = 0;
    if (idx > 15)
        idx = 15;
    int64_t d = divs[idx];
    if (d > 1 && size > kMinBlockSize * d) {
        if ((size & (size - 1)) == 0)
            return size;
        int64_t p = INT64_C(1) << (bl - 1);
        int64_t step = p >> (bit_length(d) - 1);
        if (step == 0)
            return p << 1;
        return round_up(size, step);
    }
    return round_up(size, kMinBlockSize);
}

/* ------------------------------------------------------------------ PyTorch classic segments */

/* _release_available_cached_blocks (only with max_split_size set) */
static int pt_release_available(heap_t *h, int32_t key, int64_t rs, int64_t mss, vec_t *tmp)
{
    arena_t *A = HA;
    int64_t target = rs > mss ? rs : mss;
    int32_t b = tlower(A, h->froot[key], target, INT64_MIN, BY_SIZE);
    if (b >= 0) {
        if (BK(b).prev < 0 && BK(b).next < 0) {
            h_release_segment(h, b);
            return 1;
        }
        return 0;
    }
    tmp->n = 0;
    tcollect(A, h->froot[key], tmp);
    int64_t released = 0;
    for (int64_t j = tmp->n - 1; j >= 0; j--) {
        b = tmp->v[j];
        if (released >= target || BK(b).size < mss)
            break;
        if (BK(b).prev < 0 && BK(b).next < 0)
            released += h_release_segment(h, b);
    }
    return released >= target;
}

static int pt_classic(int64_t n, prep_t *p,
                      int64_t capacity, int64_t max_split_size, const int64_t *divs,
                      int64_t mnsr, int64_t large_segment_size, int64_t *reserved_after,
                      pi_as_result *out)
{
    heap_t hh, *h = &hh;
    vec_t tmp = {0};
    if (heap_init(h, 2 * p->nstreams, capacity, p->live) < 0) {
        heap_free(h);
        return -ERR_NOMEM;
    }
    arena_t *A = HA;
    int64_t mss = max_split_size ? max_split_size : INT64_C(1) << 62;
    int64_t oom = -1, i = 0;
    h->step_peak = h->reserved;
    for (; i < n && !A->err; REC_STEP(*h)) {
        if (!rq_alloc(p, i)) {
            h_release(h, rq_slot(p, i));
            continue;
        }
        int64_t rs = pt_round(rq_size(p, i), divs);
        int small = rs <= kSmallSize;
        int32_t key = 2 * rq_sidx(p, i) + (small ? 0 : 1);
        int32_t b = h_best_fit(h, key, rs);
        if (b >= 0 && max_split_size) {
            if (rs < mss && BK(b).size >= mss)
                b = -1;
            else if (rs >= mss && BK(b).size >= rs + mnsr)
                b = -1;
        }
        if (b < 0) {
            int64_t seg = small ? kSmallBuffer
                                : rs < kMinLargeAlloc ? large_segment_size : round_up(rs, kRoundLarge);
            b = h_new_segment(h, key, seg);
            if (b < 0 && !A->err && max_split_size && pt_release_available(h, key, rs, mss, &tmp))
                b = h_new_segment(h, key, seg);
            if (b < 0 && !A->err) {
                h_release_free_segments(h);
                b = h_new_segment(h, key, seg);
            }
            if (A->err)
                break;
            if (b < 0) {
                oom = i;
                break;
            }
        }
        int64_t rem = BK(b).size - rs;
        int split = small ? rem >= kMinBlockSize : (rs < mss && rem > kSmallSize);
        h_take(h, b, rs, split, rq_slot(p, i), 1);
    }
    int err = A->err;
    fill_after(reserved_after, i, n, h->step_peak, h->reserved);
    out->peak_reserved = h->peak_reserved;
    out->backing = h->backing;
    out->peak_allocated = h->peak_allocated;
    out->oom_at = oom;
    heap_free(h);
    free(tmp.v);
    return err ? -err : 0;
}

/* ------------------------------------------------------------------ PyTorch expandable segments */

typedef struct {
    heap_t h;             /* blocks, free (mapped) lists, live, counters; no classic segments */
    int32_t *uroot;       /* unmapped blocks by key, by address */
    int64_t *rbase, *rpage;   /* ranges (ExpandableSegment): base address, page size */
    int64_t nranges, rcap;
    int64_t large_page;
    int64_t next_va;
    int64_t pages_mapped, pages_unmapped, segment_maps, ranges_released;
} exp_t;

static void e_ins_u(exp_t *e, int32_t b)
{
    tinsert(&e->h.A, &e->uroot[e->h.A.b[b].key], b, BY_ADDR);
}

static void e_rm_u(exp_t *e, int32_t b)
{
    tremove(&e->h.A, &e->uroot[e->h.A.b[b].key], b, BY_ADDR);
}

static void splice_after(arena_t *A, int32_t a, int32_t nb)
{
    BK(nb).prev = a;
    BK(nb).next = BK(a).next;
    if (BK(a).next >= 0)
        BK(BK(a).next).prev = nb;
    BK(a).next = nb;
}

static void splice_before(arena_t *A, int32_t a, int32_t nb)
{
    BK(nb).next = a;
    BK(nb).prev = BK(a).prev;
    if (BK(a).prev >= 0)
        BK(BK(a).prev).next = nb;
    BK(a).prev = nb;
}

/* _Expandable._merge: dst absorbs src when src is free and mapped like dst */
static void e_merge(exp_t *e, int32_t dst, int32_t src)
{
    arena_t *A = &e->h.A;
    if (src < 0 || !BK(src).free || BK(src).mapped != BK(dst).mapped)
        return;
    if (BK(src).mapped)
        h_remove(&e->h, src);
    else
        e_rm_u(e, src);
    if (BK(dst).prev == src) {
        BK(dst).addr = BK(src).addr;
        BK(dst).prev = BK(src).prev;
        if (BK(src).prev >= 0)
            BK(BK(src).prev).next = dst;
    } else {
        BK(dst).next = BK(src).next;
        if (BK(src).next >= 0)
            BK(BK(src).next).prev = dst;
    }
    BK(dst).size += BK(src).size;
    delblk(A, src);
}

static inline int64_t e_exp_size(arena_t *A, int32_t b)
{
    int32_t nx = BK(b).next;
    return BK(b).size + (nx >= 0 && !BK(nx).mapped ? BK(nx).size : 0);
}

/* _Expandable.get_free_block */
static int32_t e_get_free_block(exp_t *e, int32_t key, int64_t rs, int64_t mss, int64_t mnsr)
{
    arena_t *A = &e->h.A;
    int32_t root = e->h.froot[key];
    int32_t b = tlower(A, root, rs, INT64_MIN, BY_SIZE);
    if (b < 0)
        return -1;
    for (;;) {
        int32_t nx = tsucc(A, root, b, BY_SIZE);
        if (nx < 0 || !(e_exp_size(A, nx) < e_exp_size(A, b)))
            break;
        b = nx;
    }
    if (rs < mss && BK(b).size >= mss)
        return -1;
    if (rs >= mss && BK(b).size >= rs + mnsr)
        return -1;
    h_remove(&e->h, b);
    return b;
}

/* _Expandable._find_expandable_block */
static int32_t e_find_expandable_block(exp_t *e, int32_t key, int64_t rs)
{
    arena_t *A = &e->h.A;
    int32_t root = e->uroot[key];
    int32_t u = tlower(A, root, INT64_MIN, INT64_MIN, BY_ADDR);
    while (u >= 0) {
        int32_t c = u;
        if (BK(c).prev >= 0 && BK(BK(c).prev).free)
            c = BK(c).prev;
        int64_t got = 0;
        int32_t x = c;
        while (got < rs && x >= 0 && BK(x).free) {
            got += BK(x).size;
            x = BK(x).next;
        }
        if (got >= rs)
            return c;
        u = tsucc(A, root, u, BY_ADDR);
    }
    int64_t page = (key & 1) == 0 ? kSmallBuffer : e->large_page;
    int64_t pages;
    if (e->h.capacity >= 0)
        pages = (e->h.capacity + e->h.capacity / 8 + page - 1) / page;
    else
        pages = (INT64_C(1) << 46) / page;
    int64_t span = pages * page;
    if (e->next_va > ADDR_LIMIT - span - page) {
        A->err = ERR_RANGE;
        return -1;
    }
    if (e->nranges == e->rcap) {
        int64_t nc = e->rcap ? e->rcap * 2 : 64;
        int64_t *nb = realloc(e->rbase, (size_t)nc * sizeof(int64_t));
        if (nb)
            e->rbase = nb;
        int64_t *np = realloc(e->rpage, (size_t)nc * sizeof(int64_t));
        if (np)
            e->rpage = np;
        if (!nb || !np || nc > INT32_MAX) {
            A->err = ERR_NOMEM;
            return -1;
        }
        e->rcap = nc;
    }
    int32_t r = (int32_t)e->nranges++;
    e->rbase[r] = e->next_va;
    e->rpage[r] = page;
    int32_t b = newblk(A, e->next_va, span, r, key);
    if (b < 0)
        return -1;
    BK(b).mapped = 0;
    e->next_va += span + page;
    e_ins_u(e, b);
    return b;
}

/* _Expandable._map_block */
static int32_t e_map_block(exp_t *e, int32_t u, int64_t size)
{
    arena_t *A = &e->h.A;
    if (u < 0 || BK(u).mapped || !BK(u).free) {
        A->err = ERR_RANGE;
        return -1;
    }
    int32_t r = BK(u).seg;
    int64_t base = e->rbase[r], page = e->rpage[r];
    int64_t begin = (BK(u).addr - base) / page;
    int64_t end = (BK(u).addr + size - base + page - 1) / page;
    int64_t npg = end - begin;
    int64_t mapped = npg * page;
    if (e->h.capacity >= 0 && e->h.reserved + mapped > e->h.capacity)
        return -1;
    e->h.reserved += mapped;
    if (e->h.reserved > e->h.peak_reserved)
        e->h.peak_reserved = e->h.reserved;
    if (e->h.reserved > e->h.step_peak)
        e->h.step_peak = e->h.reserved;
    e->pages_mapped += npg;
    e->segment_maps++;
    e_rm_u(e, u);
    BK(u).mapped = 1;
    if (mapped < BK(u).size) {
        int32_t rem = newblk(A, BK(u).addr + mapped, BK(u).size - mapped, r, BK(u).key);
        if (rem < 0)
            return -1;
        BK(rem).mapped = 0;
        splice_after(A, u, rem);
        e_ins_u(e, rem);
        BK(u).size = mapped;
    }
    e_merge(e, u, BK(u).prev);
    e_merge(e, u, BK(u).next);
    h_insert(&e->h, u);
    return u;
}

/* _Expandable.try_allocate */
static int32_t e_try_allocate(exp_t *e, int32_t key, int64_t rs)
{
    arena_t *A = &e->h.A;
    int32_t c = e_find_expandable_block(e, key, rs);
    if (c < 0)
        return -1;
    if (!BK(c).mapped) {
        int64_t want = BK(c).size < rs ? BK(c).size : rs;
        c = e_map_block(e, c, want);
        if (c < 0)
            return -1;
    }
    while (BK(c).size < rs) {
        int32_t nxt = BK(c).next;
        if (nxt < 0) {
            A->err = ERR_RANGE;
            return -1;
        }
        int64_t want = rs - BK(c).size;
        if (BK(nxt).size < want)
            want = BK(nxt).size;
        c = e_map_block(e, nxt, want);
        if (c < 0)
            return -1;
    }
    h_remove(&e->h, c);
    return c;
}

/* _Expandable._unmap_block */
static void e_unmap_block(exp_t *e, int32_t b)
{
    arena_t *A = &e->h.A;
    int32_t r = BK(b).seg;
    int64_t base = e->rbase[r], page = e->rpage[r];
    int64_t begin = (BK(b).addr - base + page - 1) / page;
    int64_t end = (BK(b).addr + BK(b).size - base) / page;
    if (begin >= end)
        return;
    int64_t uptr = base + begin * page, usize = (end - begin) * page;
    h_remove(&e->h, b);
    int64_t before = uptr - BK(b).addr;
    if (before > 0) {
        int32_t bf = newblk(A, BK(b).addr, before, r, BK(b).key);
        if (bf < 0)
            return;
        splice_before(A, b, bf);
        h_insert(&e->h, bf);
    }
    int64_t after = BK(b).size - before - usize;
    if (after > 0) {
        int32_t af = newblk(A, uptr + usize, after, r, BK(b).key);
        if (af < 0)
            return;
        splice_after(A, b, af);
        h_insert(&e->h, af);
    }
    BK(b).addr = uptr;
    BK(b).size = usize;
    BK(b).mapped = 0;
    e_merge(e, b, BK(b).prev);
    e_merge(e, b, BK(b).next);
    e_ins_u(e, b);
    e->h.reserved -= usize;
    e->pages_unmapped += end - begin;
}

/* _Expandable.release_cached_blocks: large pool, then small; streams by value */
static void e_release_cached_blocks(exp_t *e, const int32_t *stream_order, int32_t nstreams, vec_t *todo)
{
    arena_t *A = &e->h.A;
    for (int pool = 1; pool >= 0; pool--) {
        todo->n = 0;
        for (int32_t j = 0; j < nstreams; j++)
            tcollect(A, e->h.froot[2 * stream_order[j] + pool], todo);
        for (int64_t j = 0; j < todo->n && !A->err; j++) {
            int32_t b = todo->v[j];
            e_unmap_block(e, b);
            if (!BK(b).mapped && BK(b).prev < 0 && BK(b).next < 0) {
                e_rm_u(e, b);   /* release_expandable_segment */
                e->ranges_released++;
                delblk(A, b);
            }
        }
    }
}

/* _Expandable.take */
static void e_take(exp_t *e, int32_t b, int64_t rs, int64_t slot)
{
    arena_t *A = &e->h.A;
    if (BK(b).size - rs >= kMinBlockSize) {
        int32_t rest = newblk(A, BK(b).addr + rs, BK(b).size - rs, BK(b).seg, BK(b).key);
        if (rest < 0)
            return;
        splice_after(A, b, rest);
        h_insert(&e->h, rest);
        BK(b).size = rs;
    }
    BK(b).free = 0;
    e->h.live[slot] = b;
    e->h.allocated += BK(b).size;
    if (e->h.allocated > e->h.peak_allocated)
        e->h.peak_allocated = e->h.allocated;
}

/* _Expandable.release */
static void e_release(exp_t *e, int64_t slot)
{
    arena_t *A = &e->h.A;
    int32_t b = e->h.live[slot];
    if (b < 0)
        return;
    e->h.live[slot] = -1;
    e->h.allocated -= BK(b).size;
    BK(b).free = 1;
    e_merge(e, b, BK(b).prev);
    e_merge(e, b, BK(b).next);
    h_insert(&e->h, b);
}

static int pt_expandable(int64_t n, prep_t *p,
                         int streams_signed, int64_t capacity, int64_t max_split_size,
                         const int64_t *divs, int64_t mnsr, int64_t large_segment_size,
                         int64_t *reserved_after, pi_as_result *out)
{
    exp_t ee, *e = &ee;
    memset(e, 0, sizeof(*e));
    vec_t todo = {0};
    int32_t *order = malloc((size_t)(p->nstreams ? p->nstreams : 1) * sizeof(int32_t));
    if (heap_init(&e->h, 2 * p->nstreams, capacity, p->live) < 0 || !order) {
        heap_free(&e->h);
        free(order);
        return -ERR_NOMEM;
    }
    e->uroot = malloc((size_t)(p->nstreams ? 2 * p->nstreams : 1) * sizeof(int32_t));
    if (!e->uroot) {
        heap_free(&e->h);
        free(order);
        return -ERR_NOMEM;
    }
    for (int32_t k = 0; k < 2 * p->nstreams; k++)
        e->uroot[k] = -1;
    for (int32_t j = 0; j < p->nstreams; j++)
        order[j] = j;
    /* the streams by value, as Python's sorted() orders the (pool, stream) keys */
    if (p->nstreams <= 64) {
        for (int32_t j = 1; j < p->nstreams; j++) {
            int32_t v = order[j], k = j;
            uint64_t xv = p->svals[v] ^ (streams_signed ? UINT64_C(1) << 63 : 0);
            while (k > 0 && (p->svals[order[k - 1]] ^ (streams_signed ? UINT64_C(1) << 63 : 0)) > xv) {
                order[k] = order[k - 1];
                k--;
            }
            order[k] = v;
        }
    } else {
        /* many streams: sort (value, index) pairs */
        uint64_t *pairs = malloc((size_t)p->nstreams * 2 * sizeof(uint64_t));
        if (!pairs) {
            heap_free(&e->h);
            free(order);
            free(e->uroot);
            return -ERR_NOMEM;
        }
        for (int32_t j = 0; j < p->nstreams; j++) {
            pairs[2 * j] = p->svals[j] ^ (streams_signed ? UINT64_C(1) << 63 : 0);
            pairs[2 * j + 1] = (uint64_t)j;
        }
        /* shell sort on pairs by value (values are distinct) */
        for (int64_t gap = p->nstreams / 2; gap > 0; gap /= 2)
            for (int64_t j = gap; j < p->nstreams; j++) {
                uint64_t v0 = pairs[2 * j], v1 = pairs[2 * j + 1];
                int64_t k = j;
                while (k >= gap && pairs[2 * (k - gap)] > v0) {
                    pairs[2 * k] = pairs[2 * (k - gap)];
                    pairs[2 * k + 1] = pairs[2 * (k - gap) + 1];
                    k -= gap;
                }
                pairs[2 * k] = v0;
                pairs[2 * k + 1] = v1;
            }
        for (int32_t j = 0; j < p->nstreams; j++)
            order[j] = (int32_t)pairs[2 * j + 1];
        free(pairs);
    }
    e->large_page = large_segment_size;
    arena_t *A = &e->h.A;
    int64_t mss = max_split_size ? max_split_size : INT64_C(1) << 62;
    int64_t oom = -1, i = 0;
    e->h.step_peak = e->h.reserved;
    for (; i < n && !A->err; REC_STEP(e->h)) {
        if (!rq_alloc(p, i)) {
            e_release(e, rq_slot(p, i));
            continue;
        }
        int64_t rs = pt_round(rq_size(p, i), divs);
        int32_t key = 2 * rq_sidx(p, i) + (rs <= kSmallSize ? 0 : 1);
        int32_t b = e_get_free_block(e, key, rs, mss, mnsr);
        if (b < 0 && !A->err) {
            b = e_try_allocate(e, key, rs);
            if (b < 0 && !A->err) {
                e_release_cached_blocks(e, order, p->nstreams, &todo);
                if (!A->err)
                    b = e_try_allocate(e, key, rs);
            }
            if (A->err)
                break;
            if (b < 0) {
                oom = i;
                break;
            }
        }
        if (A->err)
            break;
        e_take(e, b, rs, rq_slot(p, i));
    }
    int err = A->err;
    fill_after(reserved_after, i, n, e->h.step_peak, e->h.reserved);
    out->peak_reserved = e->h.peak_reserved;
    out->backing = e->pages_mapped;
    out->peak_allocated = e->h.peak_allocated;
    out->oom_at = oom;
    out->details[0] = e->segment_maps;
    out->details[1] = e->pages_mapped;
    out->details[2] = e->pages_unmapped;
    out->details[3] = e->nranges;
    out->details[4] = e->ranges_released;
    heap_free(&e->h);
    free(e->uroot);
    free(e->rbase);
    free(e->rpage);
    free(order);
    free(todo.v);
    return err ? -err : 0;
}

/* the requests of the public entry points: per request (req NULL), or by block (is_alloc, bid NULL;
 * size and stream per slot) */
#define RQ_ARGS const uint8_t *is_alloc, const int64_t *bid, const int32_t *req, int64_t nslots, \
                const int64_t *size, const uint64_t *stream, const int32_t *bsidx, const uint64_t *svals, \
                int64_t nstreams
#define RQ_PREP(P, WANT_RSZ) (req ? prep_b((P), n, req, nslots, size, bsidx, svals, nstreams, (WANT_RSZ)) \
                              : prep((P), n, is_alloc, size, bid, stream, (WANT_RSZ)))
#define RQ_SIZES_BAD() (check_sizes(req ? nslots : n, size) < 0)

static int pt_run(int64_t n, RQ_ARGS, int streams_signed, int64_t capacity,
                  int64_t max_split_size, const int64_t *divisions, int64_t max_non_split_rounding,
                  int64_t large_segment_size, int expandable_segments,
                  int64_t *reserved_after, pi_as_result *out)
{
    result_init(out);
    if (RQ_SIZES_BAD() || capacity > MAX_BYTES || max_split_size < 0 ||
        max_split_size > MAX_BYTES || max_non_split_rounding < 0 || max_non_split_rounding > MAX_BYTES ||
        large_segment_size <= 0 || large_segment_size > MAX_BYTES)
        return -ERR_RANGE;
    for (int k = 0; k < 16; k++)
        if (divisions[k] < 0 || divisions[k] > (INT64_C(1) << 30))
            return -ERR_RANGE;
    prep_t p;
    int rc = RQ_PREP(&p, 0);
    if (rc == 0) {
        if (expandable_segments)
            rc = pt_expandable(n, &p, streams_signed, capacity, max_split_size, divisions,
                               max_non_split_rounding, large_segment_size, reserved_after, out);
        else
            rc = pt_classic(n, &p, capacity, max_split_size, divisions,
                            max_non_split_rounding, large_segment_size, reserved_after, out);
    }
    prep_free(&p);
    return rc;
}

/* ------------------------------------------------------------------ BFC */

static int bfc_run(int64_t n, RQ_ARGS, int64_t capacity, int allow_growth, int64_t max_internal_fragmentation,
                   int64_t *reserved_after, pi_as_result *out)
{
    result_init(out);
    if (RQ_SIZES_BAD() || capacity > MAX_BYTES)
        return -ERR_RANGE;
    prep_t p;
    (void)stream;   /* BFC has no streams */
    (void)bsidx;
    (void)svals;
    (void)nstreams;
    int rc = req ? prep_b(&p, n, req, nslots, size, NULL, NULL, 0, 0) : prep(&p, n, is_alloc, size, bid, NULL, 0);
    heap_t hh, *h = &hh;
    if (rc < 0 || heap_init(h, 1, capacity, p.live) < 0) {
        if (rc == 0)
            heap_free(h);
        prep_free(&p);
        return rc < 0 ? rc : -ERR_NOMEM;
    }
    arena_t *A = HA;
    if (!allow_growth && capacity < 0)
        allow_growth = 1;
    int64_t region = 2 * MiB;
    if (!allow_growth)
        h_new_segment(h, 0, capacity / 256 * 256);
    int64_t oom = -1, i = 0;
    h->step_peak = h->reserved;
    for (; i < n && !A->err; REC_STEP(*h)) {
        if (!rq_alloc(&p, i)) {
            h_release(h, rq_slot(&p, i));
            continue;
        }
        int64_t rs = round_up(rq_size(&p, i), 256);
        if (rs < 256)
            rs = 256;
        int32_t b = h_best_fit(h, 0, rs);
        if (b < 0 && allow_growth) {
            int grew = 0;
            while (rs > region) {
                region *= 2;
                grew = 1;
            }
            int64_t want = region;
            if (capacity >= 0) {
                int64_t left = (capacity - h->reserved) / 256 * 256;
                if (left < want)
                    want = left;
            }
            if (want >= rs)
                b = h_new_segment(h, 0, want);
            if (b >= 0 && !grew)
                region *= 2;
            if (region > MAX_BYTES * 64) {   /* doubling without bound (no capacity): Python ints */
                A->err = ERR_RANGE;
                break;
            }
        }
        if (A->err)
            break;
        if (b < 0) {
            oom = i;
            break;
        }
        int split = BK(b).size >= 2 * rs || BK(b).size - rs >= max_internal_fragmentation;
        h_take(h, b, rs, split, rq_slot(&p, i), 1);
    }
    int err = A->err;
    fill_after(reserved_after, i, n, h->step_peak, h->reserved);
    out->peak_reserved = h->peak_reserved;
    out->backing = h->backing;
    out->peak_allocated = h->peak_allocated;
    out->oom_at = oom;
    heap_free(h);
    prep_free(&p);
    return err ? -err : 0;
}

/* ------------------------------------------------------------------ CNMeM */

typedef struct {
    heap_t h;             /* key 0: the root manager; 1..: children in registration order */
    int32_t lent;         /* root blocks lent to children, by address */
    int32_t nchildren;
    int64_t borrowed, steals;
} cn_t;

#define ROOT 0

static int32_t cn_root_alloc(cn_t *c, int64_t rs)
{
    int32_t b = h_best_fit(&c->h, ROOT, rs);
    if (b < 0 && !c->h.A.err)
        b = h_new_segment(&c->h, ROOT, rs);   /* exact-size cudaMalloc */
    return b;
}

/* Manager::allocate without taking the block */
static int32_t cn_allocate(cn_t *c, int32_t key, int64_t rs)
{
    arena_t *A = &c->h.A;
    int32_t b = h_best_fit(&c->h, key, rs);
    if (b >= 0)
        return b;
    if (key == ROOT)
        return cn_root_alloc(c, rs);
    int32_t pb = cn_root_alloc(c, rs);   /* a child borrows exactly rs from the root */
    if (pb < 0)
        return -1;
    h_take(&c->h, pb, rs, 1, -1, 0);
    if (A->err)
        return -1;
    int32_t same = tfloor_addr(A, c->lent, BK(pb).addr);
    if (same >= 0 && BK(same).addr == BK(pb).addr) {   /* the Python dict would replace it */
        A->err = ERR_RANGE;
        return -1;
    }
    tinsert(A, &c->lent, pb, BY_ADDR);
    c->borrowed++;
    int32_t cb = newblk(A, BK(pb).addr, rs, -1, key);   /* a head block of the child */
    if (cb < 0)
        return -1;
    h_insert(&c->h, cb);
    return cb;
}

/* stealUnsafe -> stealBlockUnsafe -> giveBlockUnsafe */
static int32_t cn_steal(cn_t *c, int32_t key, int64_t rs)
{
    arena_t *A = &c->h.A;
    for (int32_t ck = 1; ck <= c->nchildren; ck++) {
        int32_t g = h_best_fit(&c->h, ck, rs);
        if (g < 0)
            continue;
        h_remove(&c->h, g);
        if (BK(g).size > rs) {   /* extractBlockUnsafe(stolen=true): the remainder is a head */
            int32_t rest = newblk(A, BK(g).addr + rs, BK(g).size - rs, -1, ck);
            if (rest < 0)
                return -1;
            BK(rest).next = BK(g).next;
            if (BK(g).next >= 0)
                BK(BK(g).next).prev = rest;
            h_insert(&c->h, rest);
        } else if (BK(g).next >= 0) {
            BK(BK(g).next).prev = -1;
        }
        if (BK(g).prev >= 0)
            BK(BK(g).prev).next = -1;
        int64_t addr = BK(g).addr;
        c->steals++;
        delblk(A, g);
        if (key != ROOT)   /* a child pushes the stolen block on its used list as a head */
            return newblk(A, addr, rs, -1, key);
        /* the root: its lent block becomes [before][stolen][after] */
        int32_t L = tfloor_addr(A, c->lent, addr);
        if (L < 0 || !(addr < BK(L).addr + BK(L).size)) {
            A->err = ERR_RANGE;
            return -1;
        }
        int64_t l_end = BK(L).addr + BK(L).size, end = addr + rs;
        int32_t nxt = BK(L).next, s;
        int32_t lseg = BK(L).seg;
        if (addr > BK(L).addr) {
            s = newblk(A, addr, rs, lseg, ROOT);
            if (s < 0)
                return -1;
            BK(L).size = addr - BK(L).addr;
            BK(L).next = -1;
        } else {
            s = L;
            tremove(A, &c->lent, L, BY_ADDR);
            BK(s).size = rs;
            if (BK(s).prev >= 0)
                BK(BK(s).prev).next = -1;
        }
        BK(s).prev = -1;
        if (l_end > end) {
            int32_t a = newblk(A, end, l_end - end, lseg, ROOT);
            if (a < 0)
                return -1;
            BK(a).free = 0;
            tinsert(A, &c->lent, a, BY_ADDR);
            BK(s).next = a;
            BK(a).prev = s;
            BK(a).next = nxt;
            if (nxt >= 0)
                BK(nxt).prev = a;
        } else {
            BK(s).next = nxt;
            if (nxt >= 0)
                BK(nxt).prev = s;
        }
        return s;
    }
    return -1;
}

/* CNMeM's rounding of a request: 512-byte multiples, at least 512 */
static inline int64_t cn_round(int64_t size)
{
    int64_t rs = round_up(size, 512);
    return rs < 512 ? 512 : rs;
}

static int cn_run(int64_t n, RQ_ARGS, int64_t capacity, int64_t initial_bytes, int streams,
                  int steal, int64_t *reserved_after, pi_as_result *out)
{
    result_init(out);
    if (RQ_SIZES_BAD() || capacity > MAX_BYTES || initial_bytes < 0 || initial_bytes > MAX_BYTES)
        return -ERR_RANGE;
    prep_t p;
    int rc = RQ_PREP(&p, !req);   /* by block, a slot's rounded size is its size's: no rsz */
    cn_t cc, *c = &cc;
    memset(c, 0, sizeof(*c));
    if (rc < 0 || heap_init(&c->h, 1 + p.nstreams, capacity, p.live) < 0) {
        if (rc == 0)
            heap_free(&c->h);
        prep_free(&p);
        return rc < 0 ? rc : -ERR_NOMEM;
    }
    arena_t *A = &c->h.A;
    c->lent = -1;
    int32_t *child = calloc((size_t)(p.nstreams ? p.nstreams : 1), sizeof(int32_t));   /* stream -> key */
    if (!child) {
        heap_free(&c->h);
        prep_free(&p);
        return -ERR_NOMEM;
    }
    if (streams < 0) {   /* auto: more than one stream among the allocations */
        int32_t first = -1;
        streams = 0;
        for (int64_t i = 0; i < n; i++) {
            if (!rq_alloc(&p, i))
                continue;
            if (first < 0)
                first = rq_sidx(&p, i);
            else if (rq_sidx(&p, i) != first) {
                streams = 1;
                break;
            }
        }
    }
    if (initial_bytes) {
        if (h_new_segment(&c->h, ROOT, round_up(initial_bytes, 512)) < 0 && !A->err)
            A->err = ERR_RANGE;   /* the caller checks the capacity first */
    }
    int64_t allocated = 0, peak_allocated = 0, oom = -1, i = 0;
    c->h.step_peak = c->h.reserved;
    for (; i < n && !A->err; REC_STEP(c->h)) {
        int64_t slot = rq_slot(&p, i);
        if (!rq_alloc(&p, i)) {
            if (p.live[slot] >= 0) {
                allocated -= p.rsz ? p.rsz[slot] : cn_round(p.bsize[slot]);
                h_release(&c->h, slot);
            }
            continue;
        }
        int64_t rs = cn_round(rq_size(&p, i));
        int32_t key = ROOT;
        if (streams && p.svals[rq_sidx(&p, i)] != 0) {
            int32_t s = rq_sidx(&p, i);
            if (!child[s])
                child[s] = ++c->nchildren;
            key = child[s];
        }
        int32_t b = cn_allocate(c, key, rs);
        if (A->err)
            break;
        if (b >= 0) {
            h_take(&c->h, b, rs, 1, slot, 0);
        } else {
            b = (steal && (key != ROOT || c->nchildren)) ? cn_steal(c, key, rs) : -1;
            if (A->err)
                break;
            if (b < 0) {
                oom = i;
                break;
            }
            BK(b).free = 0;
            p.live[slot] = b;
        }
        if (p.rsz)
            p.rsz[slot] = rs;
        allocated += rs;
        if (allocated > peak_allocated)
            peak_allocated = allocated;
    }
    int err = A->err;
    fill_after(reserved_after, i, n, c->h.step_peak, c->h.reserved);
    out->peak_reserved = c->h.peak_reserved;
    out->backing = c->h.backing;
    out->peak_allocated = peak_allocated;
    out->oom_at = oom;
    out->details[0] = streams;
    out->details[1] = c->nchildren;
    out->details[2] = c->borrowed;
    out->details[3] = c->steals;
    heap_free(&c->h);
    free(child);
    prep_free(&p);
    return err ? -err : 0;
}

/* ------------------------------------------------------------------ entry points */

int pi_as_pytorch(int64_t n, const uint8_t *is_alloc, const int64_t *bid, const int64_t *size,
                  const uint64_t *stream, int streams_signed, int64_t capacity,
                  int64_t max_split_size, const int64_t *divisions, int64_t max_non_split_rounding,
                  int64_t large_segment_size, int expandable_segments,
                  int64_t *reserved_after, pi_as_result *out)
{
    return pt_run(n, is_alloc, bid, NULL, 0, size, stream, NULL, NULL, 0, streams_signed, capacity, max_split_size,
                  divisions, max_non_split_rounding, large_segment_size, expandable_segments, reserved_after, out);
}

int pi_as_pytorch_b(int64_t n, const int32_t *req, int64_t nslots, const int64_t *bsize, const int32_t *bsidx,
                    const uint64_t *svals, int64_t nstreams, int streams_signed, int64_t capacity,
                    int64_t max_split_size, const int64_t *divisions, int64_t max_non_split_rounding,
                    int64_t large_segment_size, int expandable_segments,
                    int64_t *reserved_after, pi_as_result *out)
{
    return pt_run(n, NULL, NULL, req, nslots, bsize, NULL, bsidx, svals, nstreams, streams_signed, capacity,
                  max_split_size, divisions, max_non_split_rounding, large_segment_size, expandable_segments,
                  reserved_after, out);
}

int pi_as_bfc(int64_t n, const uint8_t *is_alloc, const int64_t *bid, const int64_t *size,
              int64_t capacity, int allow_growth, int64_t max_internal_fragmentation,
              int64_t *reserved_after, pi_as_result *out)
{
    return bfc_run(n, is_alloc, bid, NULL, 0, size, NULL, NULL, NULL, 0, capacity, allow_growth,
                   max_internal_fragmentation, reserved_after, out);
}

int pi_as_bfc_b(int64_t n, const int32_t *req, int64_t nslots, const int64_t *bsize,
                int64_t capacity, int allow_growth, int64_t max_internal_fragmentation,
                int64_t *reserved_after, pi_as_result *out)
{
    return bfc_run(n, NULL, NULL, req, nslots, bsize, NULL, NULL, NULL, 0, capacity, allow_growth,
                   max_internal_fragmentation, reserved_after, out);
}

int pi_as_cnmem(int64_t n, const uint8_t *is_alloc, const int64_t *bid, const int64_t *size,
                const uint64_t *stream, int64_t capacity, int64_t initial_bytes, int streams,
                int steal, int64_t *reserved_after, pi_as_result *out)
{
    return cn_run(n, is_alloc, bid, NULL, 0, size, stream, NULL, NULL, 0, capacity, initial_bytes, streams, steal,
                  reserved_after, out);
}

int pi_as_cnmem_b(int64_t n, const int32_t *req, int64_t nslots, const int64_t *bsize, const int32_t *bsidx,
                  const uint64_t *svals, int64_t nstreams, int64_t capacity, int64_t initial_bytes, int streams,
                  int steal, int64_t *reserved_after, pi_as_result *out)
{
    return cn_run(n, NULL, NULL, req, nslots, bsize, NULL, bsidx, svals, nstreams, capacity, initial_bytes, streams,
                  steal, reserved_after, out);
}
