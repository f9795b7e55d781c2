/* planner.c — greedy gap placement and the exact DSA search (see planner.h). */
#include "planner/planner.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ helpers */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct { int64_t key; int64_t idx; } kv64;

static int cmp_kv64(const void *a, const void *b)
{
    const kv64 *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

typedef struct { int64_t lo, hi; } span64;

/* Sorted unique coordinates of all lowers and uppers; fills cl/cu with ranks. */
static int64_t *compress_times(int n, const int64_t *lower, const int64_t *upper,
                               int32_t *cl, int32_t *cu, int *T_out)
{
    kv64 *pts = malloc(sizeof(kv64) * (size_t)(2 * n + 1));
    int64_t *coord = malloc(sizeof(int64_t) * (size_t)(2 * n + 1));
    if (!pts || !coord) { free(pts); free(coord); return NULL; }
    for (int i = 0; i < n; i++) {
        pts[2 * i].key = lower[i]; pts[2 * i].idx = 2 * (int64_t)i;
        pts[2 * i + 1].key = upper[i]; pts[2 * i + 1].idx = 2 * (int64_t)i + 1;
    }
    qsort(pts, (size_t)(2 * n), sizeof(kv64), cmp_kv64);
    int T = 0;
    for (int k = 0; k < 2 * n; k++) {
        if (T == 0 || coord[T - 1] != pts[k].key) coord[T++] = pts[k].key;
        int64_t id = pts[k].idx;
        if (id & 1) cu[id >> 1] = T - 1; else cl[id >> 1] = T - 1;
    }
    free(pts);
    *T_out = T;
    return coord;
}

/* ------------------------------------------------------------ greedy place */

/* Address sets as sorted arrays of disjoint, non-touching spans (touching spans
 * are merged, so a "gap" is always a strictly positive hole). */
typedef struct { span64 *a; int32_t n, cap; } spanset;   /* a[n] is a sentinel */
#define SPAN_END INT64_MAX

static int spanset_add(spanset *s, int64_t lo, int64_t hi)
{
    /* first span with hi >= lo (could merge), last span with lo <= hi */
    int32_t l = 0, r = s->n;
    while (l < r) { int32_t m = (l + r) >> 1; if (s->a[m].hi < lo) l = m + 1; else r = m; }
    int32_t i = l, j = l;
    while (j < s->n && s->a[j].lo <= hi) j++;
    if (j > i) {   /* merge spans i..j-1 with [lo, hi) into slot i */
        if (s->a[i].lo < lo) lo = s->a[i].lo;
        if (s->a[j - 1].hi > hi) hi = s->a[j - 1].hi;
        s->a[i].lo = lo; s->a[i].hi = hi;
        if (j - i > 1) {
            memmove(s->a + i + 1, s->a + j, sizeof(span64) * (size_t)(s->n - j + 1));   /* + sentinel */
            s->n -= j - i - 1;
        }
        return 0;
    }
    if (s->n + 1 >= s->cap) {   /* room for one more span and the sentinel */
        int32_t nc = s->cap ? s->cap * 2 : 4;
        span64 *a = realloc(s->a, sizeof(span64) * (size_t)nc);
        if (!a) return -1;
        s->a = a; s->cap = nc;
    }
    if (s->n == 0) s->a[0].lo = s->a[0].hi = SPAN_END;
    memmove(s->a + i + 1, s->a + i, sizeof(span64) * (size_t)(s->n - i + 1));   /* + sentinel */
    s->a[i].lo = lo; s->a[i].hi = hi;
    s->n++;
    return 0;
}

/* Union of two span lists (sorted, disjoint, each followed by a sentinel span
 * starting at INT64_MAX) into out; touching spans merge.  Branch-free select and
 * append (the comparisons are data-dependent coin flips).  Writes the result and
 * a sentinel; returns the number of spans (at most na + nb). */
static int32_t span_union(const span64 *a, int32_t na, const span64 *b, int32_t nb, span64 *out)
{
    int32_t i = 0, j = 0, k = 0, left = na + nb;
    if (left == 0) { out[0].lo = out[0].hi = SPAN_END; return 0; }
    {   /* the first span */
        int ta = a[0].lo <= b[0].lo;
        out[0] = ta ? a[0] : b[0];
        i = ta; j = !ta; left--;
    }
    while (left-- > 0) {
        span64 s;
        if (a[i].lo <= b[j].lo) s = a[i++]; else s = b[j++];
        if (s.lo <= out[k].hi) { if (s.hi > out[k].hi) out[k].hi = s.hi; }
        else out[++k] = s;
    }
    k++;
    out[k].lo = out[k].hi = SPAN_END;
    return k;
}

/*
 * Greedy placement with a segment tree over (compressed) time.  A placed block
 * is stored at the O(log T) canonical nodes of its lifetime: own[v] holds the
 * address spans of blocks stored at v, sub[v] the union over v's subtree.  The
 * blocks overlapping a query lifetime Q are exactly those stored at a strict
 * ancestor of a canonical node of Q (they span that ancestor, hence meet Q) or
 * anywhere inside the subtree of a canonical node of Q.  So the union of the
 * address ranges they occupy is the union of O(log T) span sets, each already
 * merged; a k-way merge walks its gaps.  Placed blocks tend to touch, so the
 * merged sets stay far smaller than the number of overlapping blocks, and the
 * cost per block is O(log T x (merged spans) x log log T) instead of
 * O(overlapping blocks x log).  Result: the same offsets as the plain
 * "collect every overlapping neighbour, sort, scan" formulation.
 */
int64_t pi_greedy_place(int n, const int64_t *lower, const int64_t *upper, const int64_t *size,
                        const int32_t *order, int best_fit, int64_t *offsets_out)
{
    if (n <= 0) return 0;
    int64_t height = -1;
    int32_t *cl = malloc(sizeof(int32_t) * (size_t)n), *cu = malloc(sizeof(int32_t) * (size_t)n);
    int T = 0;
    int64_t *coord = (cl && cu) ? compress_times(n, lower, upper, cl, cu, &T) : NULL;
    int sz = 1, levels = 1;
    while (sz < T + 1) { sz <<= 1; levels++; }
    spanset *own = calloc((size_t)(2 * sz), sizeof(spanset));
    spanset *sub = calloc((size_t)(2 * sz), sizeof(spanset));
    int32_t *stamp = calloc((size_t)(2 * sz), sizeof(int32_t));
    int maxsets = 4 * levels + 8;
    int32_t *cnodes = malloc(sizeof(int32_t) * (size_t)(2 * levels + 2));
    struct { const span64 *a; int32_t n; } *lists = malloc(sizeof(*lists) * (size_t)maxsets);
    span64 *scratch = NULL;
    int64_t scratch_cap = 0;
    if (!coord || !own || !sub || !stamp || !cnodes || !lists) goto out;
    height = 0;
    for (int oi = 0; oi < n; oi++) {
        int b = order[oi];
        int a0 = cl[b], a1 = cu[b];
        if (a1 <= a0 || size[b] <= 0) { offsets_out[b] = 0; continue; } /* conflicts with nothing */
        int64_t s = size[b];
        /* the canonical nodes of [a0, a1) */
        int nc = 0;
        for (int l = a0 + sz, r = a1 + sz; l < r; l >>= 1, r >>= 1) {
            if (l & 1) cnodes[nc++] = l++;
            if (r & 1) cnodes[nc++] = --r;
        }
        /* gather the span sets: sub[c] for canonical c, own[u] for strict ancestors u */
        int ns = 0, mark = oi + 1;
        int64_t total = 0;
#define GATHER(set) do { if ((set).n) { lists[ns].a = (set).a; lists[ns].n = (set).n; total += (set).n; ns++; } } while (0)
        for (int t = 0; t < nc; t++) { stamp[cnodes[t]] = mark; GATHER(sub[cnodes[t]]); }
        /* Strict ancestors of canonical nodes lie on the two boundary leaves' paths,
         * above the canonical node that holds the leaf (nodes below it are inside Q
         * and already in its sub set). */
        for (int side = 0; side < 2; side++) {
            int u = (side ? a1 - 1 : a0) + sz;
            while (stamp[u] != mark) u >>= 1;          /* the canonical node holding the leaf */
            for (u >>= 1; u >= 1 && stamp[u] != mark; u >>= 1) {
                stamp[u] = mark;
                GATHER(own[u]);
            }
        }
#undef GATHER
        /* Union of the gathered sets by pairwise rounds: interleaved sets collapse
         * as they merge, so later rounds are short. */
        if (2 * (total + ns + 2) > scratch_cap) {   /* two halves, each able to hold every span + sentinels */
            size_t ncap = (size_t)(total + ns + 2) * 2 + 64;
            span64 *p = realloc(scratch, sizeof(span64) * ncap);
            if (!p) { height = -1; goto out; }
            scratch = p; scratch_cap = (int64_t)ncap;
        }
        int nl = ns;
        span64 *half[2] = {scratch, scratch + scratch_cap / 2};
        int side = 0;
        while (nl > 1) {
            span64 *w = half[side];
            int m = 0;
            for (int k = 0; k + 1 < nl; k += 2) {
                int32_t c = span_union(lists[k].a, lists[k].n, lists[k + 1].a, lists[k + 1].n, w);
                lists[m].a = w; lists[m].n = c; m++;
                w += c + 1;
            }
            if (nl & 1) {   /* carry the odd one into this round's half (its old home is overwritten next) */
                memcpy(w, lists[nl - 1].a, sizeof(span64) * (size_t)(lists[nl - 1].n + 1));
                lists[m].a = w; lists[m].n = lists[nl - 1].n; m++;
            }
            nl = m;
            side ^= 1;
        }
        /* walk the union's gaps; without a fitting gap, b goes on top (cur ends at the top) */
        int64_t cur = 0, best = -1, best_gap = INT64_MAX;
        for (int32_t k = 0; nl == 1 && k < lists[0].n; k++) {
            const span64 u = lists[0].a[k];
            if (u.lo - cur >= s) {
                int64_t gap = u.lo - cur;
                if (!best_fit || gap == s) { best = cur; break; }
                if (gap < best_gap) { best_gap = gap; best = cur; }
            }
            cur = u.hi;
        }
        if (best < 0) best = cur;
        offsets_out[b] = best;
        if (best + s > height) height = best + s;
        /* store b: own at canonical nodes; sub at canonical nodes and all their ancestors */
        mark = -(oi + 1);
        for (int t = 0; t < nc; t++) {
            if (spanset_add(&own[cnodes[t]], best, best + s)) { height = -1; goto out; }
            for (int u = cnodes[t]; u >= 1 && stamp[u] != mark; u >>= 1) {
                stamp[u] = mark;
                if (spanset_add(&sub[u], best, best + s)) { height = -1; goto out; }
            }
        }
    }
out:
    if (own) for (int i = 0; i < 2 * sz; i++) free(own[i].a);
    if (sub) for (int i = 0; i < 2 * sz; i++) free(sub[i].a);
    free(own); free(sub); free(stamp); free(cnodes); free(lists); free(scratch);
    free(cl); free(cu); free(coord);
    return height;
}

/* ------------------------------------------------------------- exact search */

enum { ST_NOTFOUND = 0, ST_FOUND = 1, ST_ABORT = 2, ST_TIMEOUT = 3, ST_NOMEM = -1 };

struct pi_dsa {
    int n, S;
    int64_t *size;
    int32_t *sec_lo, *sec_hi;      /* buffer b lies in sections [sec_lo, sec_hi) */
    int32_t *sec_start, *sec_mem;  /* CSR: members of each section; the first ucnt[s] are unplaced */
    int32_t *ucnt;                 /* unplaced members per section */
    int32_t *hint;                 /* per section: an unplaced member last seen at or below the floor */
    int32_t *upos_start, *upos;    /* CSR by buffer: where b sits in sec_mem for each of its sections */
    int64_t *sec_total0;
    int32_t *ov_start, *ov;        /* CSR: time-overlapping buffers */
    /* search state */
    int64_t *off, *minoff, *floor_, *total;
    int32_t *rank;                 /* buffer -> rank in its group's static order */
    int64_t *width, *tkey;
    char heur[16];
    int32_t *arena; size_t arena_top, arena_cap;
    kv64 *sortbuf, *sorttmp;
    int32_t *aff, *aff_stamp, *cover; int stamp;
    int32_t *um_idx; int64_t *um_val; size_t um_n, um_cap;   /* min offset undo */
    int32_t *uf_idx; int64_t *uf_val; size_t uf_n, uf_cap;   /* floor undo */
    int32_t *cuts;                 /* unplaced buffers spanning section boundary s|s+1 */
    int32_t *cutstack; size_t cut_top;  /* cut points; a boundary reaches 0 once per path */
    int64_t nodes, node_limit, cap;
    double deadline;
    const volatile int32_t *stop;  /* another search found the answer: give up (reported as a deadline) */
    int64_t *result;
    int nomem;
};

void pi_dsa_free(pi_dsa *d)
{
    if (!d) return;
    free(d->size); free(d->sec_lo); free(d->sec_hi); free(d->sec_start); free(d->sec_mem);
    free(d->ucnt); free(d->upos_start); free(d->upos); free(d->hint);
    free(d->sec_total0); free(d->ov_start); free(d->ov); free(d->off); free(d->minoff);
    free(d->floor_); free(d->total); free(d->rank); free(d->width); free(d->tkey); free(d->arena); free(d->sortbuf);
    free(d->sorttmp); free(d->aff); free(d->aff_stamp); free(d->cover); free(d->um_idx); free(d->um_val);
    free(d->uf_idx); free(d->uf_val); free(d->cuts); free(d->cutstack);
    free(d);
}

typedef struct { int64_t t; int type; int32_t b; } sweep_pt; /* type 0 = end, 1 = start */

static int cmp_pt(const void *a, const void *b)
{
    const sweep_pt *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    if (x->type != y->type) return x->type - y->type;
    return x->b - y->b;
}

static int push_i32(int32_t **arr, size_t *n, size_t *cap, int32_t v)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 1024;
        int32_t *a = realloc(*arr, sizeof(int32_t) * nc);
        if (!a) return -1;
        *arr = a; *cap = nc;
    }
    (*arr)[(*n)++] = v;
    return 0;
}

pi_dsa *pi_dsa_new(int n, const int64_t *lower, const int64_t *upper, const int64_t *size)
{
    pi_dsa *d = calloc(1, sizeof(pi_dsa));
    if (!d) return NULL;
    d->n = n;
    size_t N = (size_t)(n > 0 ? n : 1);
    d->size = malloc(sizeof(int64_t) * N);
    d->sec_lo = malloc(sizeof(int32_t) * N);
    d->sec_hi = malloc(sizeof(int32_t) * N);
    sweep_pt *pts = malloc(sizeof(sweep_pt) * 2 * N);
    int32_t *act = malloc(sizeof(int32_t) * N), *pos = malloc(sizeof(int32_t) * N);
    int32_t *mem = NULL, *eu = NULL, *ev = NULL, *secst = NULL;
    size_t mem_n = 0, mem_cap = 0, e_n = 0, e_cap = 0, ev_n = 0, ev_cap = 0, st_n = 0, st_cap = 0;
    if (!d->size || !d->sec_lo || !d->sec_hi || !pts || !act || !pos) goto fail;
    memcpy(d->size, size, sizeof(int64_t) * (size_t)n);
    for (int i = 0; i < n; i++) {
        pts[2 * i] = (sweep_pt){lower[i], 1, i};
        pts[2 * i + 1] = (sweep_pt){upper[i], 0, i};
    }
    qsort(pts, (size_t)(2 * n), sizeof(sweep_pt), cmp_pt);
    int nact = 0, S = 0;
    int64_t last_t = INT64_MIN;
    int have_last = 0;
    for (int k = 0; k < 2 * n; k++) {
        sweep_pt p = pts[k];
        if (!have_last) { last_t = p.t; have_last = 1; }
        if (p.type == 0) {
            if (last_t < p.t) {   /* a new maximal cross section: the live set just before t */
                last_t = p.t;
                if (push_i32(&secst, &st_n, &st_cap, (int32_t)mem_n)) goto fail;
                for (int j = 0; j < nact; j++)
                    if (push_i32(&mem, &mem_n, &mem_cap, act[j])) goto fail;
                S++;
            }
            int j = pos[p.b];   /* remove from actives */
            act[j] = act[--nact]; pos[act[j]] = j;
            d->sec_hi[p.b] = S;
        } else {
            for (int j = 0; j < nact; j++) {
                if (push_i32(&eu, &e_n, &e_cap, act[j])) goto fail;
                if (push_i32(&ev, &ev_n, &ev_cap, p.b)) goto fail;
            }
            pos[p.b] = nact; act[nact++] = p.b;
            d->sec_lo[p.b] = S;
        }
    }
    if (push_i32(&secst, &st_n, &st_cap, (int32_t)mem_n)) goto fail;
    d->S = S;
    d->sec_start = secst; secst = NULL;
    d->sec_mem = mem; mem = NULL;
    d->sec_total0 = calloc((size_t)S + 1, sizeof(int64_t));
    d->ov_start = calloc(N + 1, sizeof(int32_t));
    d->ov = malloc(sizeof(int32_t) * (2 * e_n + 1));
    if (!d->sec_total0 || !d->ov_start || !d->ov) goto fail;
    for (int s = 0; s < S; s++)
        for (int32_t q = d->sec_start[s]; q < d->sec_start[s + 1]; q++)
            d->sec_total0[s] += size[d->sec_mem[q]];
    d->ucnt = malloc(sizeof(int32_t) * ((size_t)S + 1));
    d->hint = malloc(sizeof(int32_t) * ((size_t)S + 1));
    d->upos_start = malloc(sizeof(int32_t) * (N + 1));
    d->upos = malloc(sizeof(int32_t) * ((size_t)mem_n + 1));
    if (!d->ucnt || !d->hint || !d->upos_start || !d->upos) goto fail;
    d->upos_start[0] = 0;
    for (int i = 0; i < n; i++) d->upos_start[i + 1] = d->upos_start[i] + (d->sec_hi[i] - d->sec_lo[i]);
    for (int s = 0; s < S; s++)
        for (int32_t q = d->sec_start[s]; q < d->sec_start[s + 1]; q++) {
            int32_t x = d->sec_mem[q];
            d->upos[d->upos_start[x] + (s - d->sec_lo[x])] = q;
        }
    for (size_t e = 0; e < e_n; e++) { d->ov_start[eu[e] + 1]++; d->ov_start[ev[e] + 1]++; }
    for (int i = 0; i < n; i++) d->ov_start[i + 1] += d->ov_start[i];
    {
        int32_t *fill = malloc(sizeof(int32_t) * N);
        if (!fill) goto fail;
        memcpy(fill, d->ov_start, sizeof(int32_t) * (size_t)n);
        for (size_t e = 0; e < e_n; e++) {
            d->ov[fill[eu[e]]++] = ev[e];
            d->ov[fill[ev[e]]++] = eu[e];
        }
        free(fill);
    }
    free(eu); free(ev); eu = ev = NULL;
    d->off = malloc(sizeof(int64_t) * N);
    d->minoff = malloc(sizeof(int64_t) * N);
    d->floor_ = malloc(sizeof(int64_t) * ((size_t)S + 1));
    d->total = malloc(sizeof(int64_t) * ((size_t)S + 1));
    d->rank = malloc(sizeof(int32_t) * N);
    d->width = malloc(sizeof(int64_t) * N);
    d->tkey = malloc(sizeof(int64_t) * N);
    for (int i = 0; d->width && i < n; i++) d->width[i] = upper[i] - lower[i];
    d->sortbuf = malloc(sizeof(kv64) * N);
    d->sorttmp = malloc(sizeof(kv64) * N);
    d->aff = malloc(sizeof(int32_t) * ((size_t)S + 1));
    d->aff_stamp = calloc((size_t)S + 1, sizeof(int32_t));
    d->cover = calloc((size_t)S + 2, sizeof(int32_t));
    d->cuts = calloc((size_t)S + 1, sizeof(int32_t));
    d->cutstack = malloc(sizeof(int32_t) * ((size_t)S + 4 * N + 4));
    d->arena_cap = 2 * N * (N + 1) + 4 * N;
    d->arena = malloc(sizeof(int32_t) * d->arena_cap);
    if (!d->off || !d->minoff || !d->floor_ || !d->total || !d->rank || !d->width || !d->tkey || !d->sortbuf ||
        !d->sorttmp || !d->aff || !d->aff_stamp || !d->cover || !d->arena || !d->cuts || !d->cutstack)
        goto fail;
    free(pts); free(act); free(pos);
    return d;
fail:
    free(pts); free(act); free(pos); free(mem); free(eu); free(ev); free(secst);
    pi_dsa_free(d);
    return NULL;
}

int pi_dsa_nsections(const pi_dsa *d) { return d->S; }

void pi_dsa_totals(const pi_dsa *d, int64_t *total_out)
{
    for (int b = 0; b < d->n; b++) {
        int64_t t = 0;
        for (int s = d->sec_lo[b]; s < d->sec_hi[b]; s++)
            if (d->sec_total0[s] > t) t = d->sec_total0[s];
        total_out[b] = t;
    }
}

int64_t pi_dsa_load(const pi_dsa *d)
{
    int64_t t = 0;
    for (int s = 0; s < d->S; s++)
        if (d->sec_total0[s] > t) t = d->sec_total0[s];
    return t;
}

static int undo_push(int32_t **ia, int64_t **va, size_t *n, size_t *cap, int32_t i, int64_t v)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 4096;
        int32_t *a = realloc(*ia, sizeof(int32_t) * nc);
        if (!a) return -1;
        *ia = a;
        int64_t *b = realloc(*va, sizeof(int64_t) * nc);
        if (!b) return -1;
        *va = b; *cap = nc;
    }
    (*ia)[*n] = i; (*va)[*n] = v; (*n)++;
    return 0;
}

/* merge sort of kv64 by (key, idx) */
static void msort(kv64 *a, kv64 *t, int n)
{
    if (n <= 16) {
        for (int i = 1; i < n; i++) {
            kv64 x = a[i];
            int j = i - 1;
            while (j >= 0 && (a[j].key > x.key || (a[j].key == x.key && a[j].idx > x.idx))) {
                a[j + 1] = a[j]; j--;
            }
            a[j + 1] = x;
        }
        return;
    }
    int h = n / 2;
    msort(a, t, h);
    msort(a + h, t, n - h);
    if (a[h - 1].key < a[h].key || (a[h - 1].key == a[h].key && a[h - 1].idx < a[h].idx)) return;
    memcpy(t, a, sizeof(kv64) * (size_t)h);
    int i = 0, j = h, k = 0;
    while (i < h && j < n) {
        if (t[i].key < a[j].key || (t[i].key == a[j].key && t[i].idx < a[j].idx)) a[k++] = t[i++];
        else a[k++] = a[j++];
    }
    while (i < h) a[k++] = t[i++];
}

/* Static preorder keys for a group (MiniMalloc's W, A, T; all descending, ties by
 * buffer index).  T uses the *current* unplaced section totals, as a fresh
 * sub-problem would see them. */
static __thread const char *g_heur;   /* qsort comparator context (per thread: searches may run in parallel) */
static __thread const pi_dsa *g_d;

static int cmp_heur(const void *pa, const void *pb)
{
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    const pi_dsa *d = g_d;
    for (const char *c = g_heur; *c; c++) {
        int64_t x, y;
        if (*c == 'W') { x = d->width[a]; y = d->width[b]; }
        else if (*c == 'A') { x = d->width[a] * d->size[a]; y = d->width[b] * d->size[b]; }
        else if (*c == 'T') { x = d->tkey[a]; y = d->tkey[b]; }
        else if (*c == 'Z') { x = d->size[a]; y = d->size[b]; }
        else continue;
        if (x != y) return x > y ? -1 : 1;
    }
    return (a > b) - (a < b);
}

static int dsa_rec(pi_dsa *d, const int32_t *pord, int pcnt, int64_t min_off, int min_rank,
                   int slo, int shi);

/* Solve one group of unplaced buffers (given in any order) as a fresh problem:
 * rank them by the heuristic, search, restore the previous ranks. */
static int dsa_group(pi_dsa *d, int32_t *grp, int m, int slo, int shi)
{
    if (d->heur[0]) {
        for (int i = 0; i < m; i++) {
            int x = grp[i];
            int64_t t = 0;
            for (int s = d->sec_lo[x]; s < d->sec_hi[x]; s++)
                if (d->total[s] > t) t = d->total[s];
            d->tkey[x] = t;
        }
        g_heur = d->heur; g_d = d;
        qsort(grp, (size_t)m, sizeof(int32_t), cmp_heur);
    } else {
        for (int i = 1; i < m; i++) {    /* keep the caller's static ranks */
            int32_t v = grp[i]; int j = i - 1;
            while (j >= 0 && d->rank[grp[j]] > d->rank[v]) { grp[j + 1] = grp[j]; j--; }
            grp[j + 1] = v;
        }
    }
    int32_t *saved = d->arena + d->arena_top;
    for (int i = 0; i < m; i++) { saved[i] = d->rank[grp[i]]; d->rank[grp[i]] = i; }
    d->arena_top += (size_t)m;
    int st = dsa_rec(d, grp, m, INT64_MIN, -1, slo, shi);
    d->arena_top -= (size_t)m;
    for (int i = 0; i < m; i++) d->rank[grp[i]] = saved[i];
    return st;
}

/* Dynamic temporal decomposition: after placing b, the unplaced buffers may fall
 * apart into groups that no unplaced buffer connects; solve each on its own. */
static int dsa_decompose(pi_dsa *d, const int32_t *ord, int cnt, int64_t o, int r, int b,
                         int slo, int shi)
{
    int32_t *cutpts = d->cutstack + d->cut_top;
    int ncut = 0;
    cutpts[ncut++] = slo;
    for (int s = d->sec_lo[b]; s + 1 < d->sec_hi[b]; s++)
        if (--d->cuts[s] == 0) cutpts[ncut++] = s + 1;
    int st;
    if (ncut == 1) {
        st = dsa_rec(d, ord, cnt, o, r, slo, shi);
    } else {
        cutpts[ncut++] = shi;
        d->cut_top += (size_t)ncut;
        st = ST_FOUND;
        for (int c = 1; c < ncut && st == ST_FOUND; c++) {
            int lo = cutpts[c - 1], hi = cutpts[c];
            if (hi <= lo) continue;
            int32_t *sub = d->arena + d->arena_top;
            int m = 0;
            for (int i = 0; i < cnt; i++) {
                int32_t x = ord[i];
                if (d->off[x] >= 0) continue;
                if (d->sec_hi[x] <= lo || hi <= d->sec_lo[x]) continue;
                sub[m++] = x;
            }
            if (m == 0) continue;
            d->arena_top += (size_t)m;
            st = dsa_group(d, sub, m, lo, hi);
            d->arena_top -= (size_t)m;
        }
        d->cut_top -= (size_t)ncut;
        if (st == ST_FOUND)   /* groups wrote their own offsets; record b and its ancestors */
            for (int x = 0; x < d->n; x++)
                if (d->off[x] >= 0) d->result[x] = d->off[x];
    }
    for (int s = d->sec_lo[b]; s + 1 < d->sec_hi[b]; s++) d->cuts[s]++;
    return st;
}

static int dsa_rec(pi_dsa *d, const int32_t *pord, int pcnt, int64_t min_off, int min_rank,
                   int slo, int shi)
{
    if (d->node_limit > 0 && d->nodes >= d->node_limit) return ST_ABORT;
    d->nodes++;
    if ((d->nodes & 1023) == 0 &&
        ((d->deadline > 0 && now_s() > d->deadline) || (d->stop && *d->stop))) return ST_TIMEOUT;
    int32_t *ord = d->arena + d->arena_top;
    int cnt = 0;
    kv64 *sb = d->sortbuf;
    for (int i = 0; i < pcnt; i++) {
        int32_t b = pord[i];
        if (d->off[b] < 0) {
            sb[cnt].key = d->minoff[b];
            sb[cnt].idx = ((int64_t)d->rank[b] << 32) | (int64_t)b;
            cnt++;
        }
    }
    if (cnt == 0) {   /* leaf: record every placed buffer (ancestors and this group) */
        for (int b = 0; b < d->n; b++)
            if (d->off[b] >= 0) d->result[b] = d->off[b];
        return ST_FOUND;
    }
    msort(sb, d->sorttmp, cnt);
    int64_t min_h = INT64_MAX;
    for (int i = 0; i < cnt; i++) {
        ord[i] = (int32_t)(sb[i].idx & 0xffffffff);
        int64_t h = sb[i].key + d->size[ord[i]];
        if (h < min_h) min_h = h;
    }
    d->arena_top += (size_t)cnt;
    int st = ST_NOTFOUND;
    for (int i = 0; i < cnt; i++) {
        int32_t b = ord[i], r = d->rank[b];
        int64_t o = d->minoff[b];
        if (o < min_off || (o == min_off && r < min_rank)) continue;   /* canonical order */
        if (o >= min_h) break;                                         /* dominance: sorted by o */
        int64_t h = o + d->size[b];
        if (h > d->cap) continue;
        d->off[b] = o;
        size_t um_mark = d->um_n, uf_mark = d->uf_n;
        int naff = 0;
        for (int32_t q = d->ov_start[b]; q < d->ov_start[b + 1]; q++) {
            int32_t x = d->ov[q];
            if (d->off[x] >= 0 || d->minoff[x] >= h) continue;
            if (undo_push(&d->um_idx, &d->um_val, &d->um_n, &d->um_cap, x, d->minoff[x])) { d->nomem = 1; break; }
            d->minoff[x] = h;
            int lo = d->sec_lo[x] > slo ? d->sec_lo[x] : slo, hi = d->sec_hi[x] < shi ? d->sec_hi[x] : shi;
            if (lo < hi) { d->cover[lo]++; d->cover[hi]--; naff++; }
        }
        if (naff) {   /* sections touched by a raised buffer: prefix sum of the cover marks */
            int run = 0, k = 0;
            for (int s = slo; s <= shi; s++) {
                run += d->cover[s];
                d->cover[s] = 0;
                if (run > 0 && s < shi) d->aff[k++] = s;
            }
            naff = k;
        }
        for (int s = d->sec_lo[b]; s < d->sec_hi[b]; s++) {
            if (undo_push(&d->uf_idx, &d->uf_val, &d->uf_n, &d->uf_cap, s, d->floor_[s])) { d->nomem = 1; }
            else if (d->floor_[s] < h) d->floor_[s] = h;
            d->total[s] -= d->size[b];
            /* move b behind the section's unplaced members (undone LIFO by ucnt++) */
            int32_t *pb = &d->upos[d->upos_start[b] + (s - d->sec_lo[b])];
            int32_t last = d->sec_start[s] + --d->ucnt[s], y = d->sec_mem[last];
            d->sec_mem[*pb] = y;
            d->upos[d->upos_start[y] + (s - d->sec_lo[y])] = *pb;
            d->sec_mem[last] = b;
            *pb = last;
        }
        for (int a = 0; a < naff && !d->nomem; a++) {
            int s = d->aff[a];
            if (s < slo || s >= shi) continue;   /* outside this group: never checked here */
            int64_t m = INT64_MAX, fl = d->floor_[s];
            if (fl >= h) continue;    /* a raised member sits at h here: the min cannot exceed the floor */
            int32_t w = d->hint[s];   /* a hint only: still unplaced, still at or below the floor? */
            if (w >= 0 && d->off[w] < 0 && d->minoff[w] <= fl) continue;
            for (int32_t q = d->sec_start[s], qe = q + d->ucnt[s]; q < qe; q++) {
                int32_t x = d->sec_mem[q];
                int64_t mo = d->minoff[x];
                if (mo < m) {
                    m = mo;
                    if (m <= fl) { d->hint[s] = x; break; }   /* cannot lift the floor */
                }
            }
            if (m != INT64_MAX && d->floor_[s] < m) {
                if (undo_push(&d->uf_idx, &d->uf_val, &d->uf_n, &d->uf_cap, s, d->floor_[s])) { d->nomem = 1; break; }
                d->floor_[s] = m;
            }
        }
        int ok = !d->nomem;
        for (int s = slo; ok && s < shi; s++) {
            int64_t f = d->floor_[s] > o ? d->floor_[s] : o;
            if (d->total[s] > 0 && f + d->total[s] > d->cap) ok = 0;
        }
        int res = d->nomem ? ST_NOMEM : ST_NOTFOUND;
        if (ok) res = dsa_decompose(d, ord, cnt, o, r, b, slo, shi);
        while (d->uf_n > uf_mark) { d->uf_n--; d->floor_[d->uf_idx[d->uf_n]] = d->uf_val[d->uf_n]; }
        for (int s = d->sec_lo[b]; s < d->sec_hi[b]; s++) { d->total[s] += d->size[b]; d->ucnt[s]++; }
        while (d->um_n > um_mark) { d->um_n--; d->minoff[d->um_idx[d->um_n]] = d->um_val[d->um_n]; }
        d->off[b] = -1;
        if (res != ST_NOTFOUND) { st = res; break; }
    }
    d->arena_top -= (size_t)cnt;
    return st;
}

int pi_dsa_search(pi_dsa *d, int64_t capacity, const int32_t *preorder, const char *heuristic,
                  int64_t node_limit, double seconds, const volatile int32_t *stop,
                  int64_t *offsets_out, int64_t *nodes_out)
{
    int n = d->n;
    if (n == 0) return ST_FOUND;
    for (int i = 0; i < n; i++) { d->off[i] = -1; d->minoff[i] = 0; d->rank[preorder[i]] = i; }
    for (int s = 0; s < d->S; s++) {
        d->floor_[s] = 0; d->total[s] = d->sec_total0[s];
        d->ucnt[s] = d->sec_start[s + 1] - d->sec_start[s];
        d->hint[s] = -1;
    }
    for (int s = 0; s < d->S; s++)
        if (d->sec_total0[s] > capacity) return ST_NOTFOUND;
    for (int i = 0; i < n; i++)
        if (d->size[i] > capacity) return ST_NOTFOUND;
    d->heur[0] = 0;
    if (heuristic) { strncpy(d->heur, heuristic, sizeof(d->heur) - 1); d->heur[sizeof(d->heur) - 1] = 0; }
    d->cap = capacity;
    d->nodes = 0;
    d->node_limit = node_limit;
    d->deadline = seconds > 0 ? now_s() + seconds : 0;
    d->stop = stop;
    d->result = offsets_out;
    d->arena_top = (size_t)n;
    d->cut_top = 0;
    d->um_n = d->uf_n = 0;
    d->nomem = 0;
    for (int s = 0; s < d->S; s++) d->cuts[s] = 0;
    for (int b = 0; b < n; b++)
        for (int s = d->sec_lo[b]; s + 1 < d->sec_hi[b]; s++) d->cuts[s]++;
    for (int i = 0; i < n; i++) d->result[i] = -1;
    int32_t *root = d->arena;
    for (int i = 0; i < n; i++) root[i] = preorder[i];
    int st = dsa_rec(d, root, n, INT64_MIN, -1, 0, d->S);
    if (nodes_out) nodes_out[0] += d->nodes;
    return st;
}
