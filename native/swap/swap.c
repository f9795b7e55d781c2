/*
 * swap.c — the host-swap scheduler's greedy loop; see swap.h.
 */
#include "swap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NEG_INF_BYTES (INT64_MIN / 4)

/* ---- live-bytes curve: segment tree with range add / range max ------------------------ */

typedef struct {
    int64_t n, size;      /* steps, leaves (power of two) */
    int height;           /* log2(size) */
    int64_t *mx;          /* [2 * size]: max of the node's range, its own pending add included */
    int64_t *lz;          /* [size]: add pending on an internal node's children */
} curve;

static int curve_init(curve *c, int64_t n, const int64_t *live) {
    int64_t size = 1;
    int height = 0;
    while (size < n) {
        size <<= 1;
        height++;
    }
    c->height = height;
    c->n = n;
    c->size = size;
    c->mx = malloc(sizeof(int64_t) * 2 * size);
    c->lz = calloc(size, sizeof(int64_t));
    if (!c->mx || !c->lz) return -1;
    for (int64_t i = 0; i < size; i++) c->mx[size + i] = i < n ? live[i] : NEG_INF_BYTES;
    for (int64_t i = size - 1; i >= 1; i--)
        c->mx[i] = c->mx[2 * i] > c->mx[2 * i + 1] ? c->mx[2 * i] : c->mx[2 * i + 1];
    return 0;
}

static void curve_free(curve *c) {
    free(c->mx);
    free(c->lz);
}

/* Bottom-up range add and range max (the non-recursive lazy segment tree: mx[p] is the max
 * of p's range with p's own pending add included; lz[p] is what p's children still miss). */
static inline void apply_add(curve *c, int64_t p, int64_t d) {
    c->mx[p] += d;
    if (p < c->size) c->lz[p] += d;
}

static void rebuild_up(curve *c, int64_t p) {
    while (p > 1) {
        p >>= 1;
        int64_t a = c->mx[2 * p], b = c->mx[2 * p + 1];
        c->mx[p] = (a > b ? a : b) + c->lz[p];
    }
}

static void push_down(curve *c, int64_t p) {
    for (int s = c->height; s > 0; s--) {
        int64_t i = p >> s;
        if (c->lz[i]) {
            apply_add(c, 2 * i, c->lz[i]);
            apply_add(c, 2 * i + 1, c->lz[i]);
            c->lz[i] = 0;
        }
    }
}

static void curve_add(curve *c, int64_t lo, int64_t hi, int64_t d) {
    if (hi <= lo) return;
    int64_t l = lo + c->size, r = hi + c->size, l0 = l, r0 = r - 1;
    for (; l < r; l >>= 1, r >>= 1) {
        if (l & 1) apply_add(c, l++, d);
        if (r & 1) apply_add(c, --r, d);
    }
    rebuild_up(c, l0);
    rebuild_up(c, r0);
}

/* max over steps [lo, hi); INT64_MIN when empty */
static int64_t curve_max(curve *c, int64_t lo, int64_t hi) {
    if (hi <= lo) return INT64_MIN;
    int64_t l = lo + c->size, r = hi + c->size;
    push_down(c, l);
    push_down(c, r - 1);
    int64_t m = INT64_MIN;
    for (; l < r; l >>= 1, r >>= 1) {
        if (l & 1) { if (c->mx[l] > m) m = c->mx[l]; l++; }
        if (r & 1) { --r; if (c->mx[r] > m) m = c->mx[r]; }
    }
    return m;
}

static int64_t curve_max_all(const curve *c) { return c->n ? c->mx[1] : 0; }

/* first (dir 0) or last (dir 1) step in [lo, hi) whose value exceeds thr; -1 if none.
 * acc: pending adds of the ancestors. */
static int64_t above_rec(const curve *c, int64_t node, int64_t nl, int64_t nr, int64_t lo, int64_t hi,
                         int64_t thr, int64_t acc, int dir) {
    if (hi <= nl || nr <= lo || c->mx[node] + acc <= thr) return -1;
    if (nr - nl == 1) return nl;
    int64_t mid = (nl + nr) / 2, a2 = acc + c->lz[node];
    int64_t first = dir ? 2 * node + 1 : 2 * node, second = dir ? 2 * node : 2 * node + 1;
    int64_t fl = dir ? mid : nl, fr = dir ? nr : mid, sl = dir ? nl : mid, sr = dir ? mid : nr;
    int64_t k = above_rec(c, first, fl, fr, lo, hi, thr, a2, dir);
    return k >= 0 ? k : above_rec(c, second, sl, sr, lo, hi, thr, a2, dir);
}

static int64_t curve_above(const curve *c, int64_t lo, int64_t hi, int64_t thr, int dir) {
    if (hi <= lo) return -1;
    return above_rec(c, 1, 0, c->size, lo, hi, thr, 0, dir);
}

/* ---- one transfer direction: treap of disjoint busy runs ------------------------------ */

#define MERGE_NS 1e-3
#define NIL (-1)

typedef struct {
    double s, e;            /* the run [s, e) */
    double first_s, last_s, last_e; /* of the subtree */
    double maxgap;          /* widest gap between consecutive runs inside the subtree (-inf: none) */
    uint32_t prio;
    int32_t l, r;
} run;

typedef struct {
    run *t;
    int32_t root, free_head, used, cap;
    uint64_t rng;
} channel;

static int channel_init(channel *ch, int64_t cap) {
    ch->cap = (int32_t)(cap + 4);
    ch->t = malloc(sizeof(run) * (size_t)ch->cap);
    ch->root = NIL;
    ch->free_head = NIL;
    ch->used = 0;
    ch->rng = 0x9E3779B97F4A7C15ull;
    return ch->t ? 0 : -1;
}

static void channel_free(channel *ch) { free(ch->t); }

static void pull(channel *ch, int32_t x) {
    run *n = &ch->t[x];
    n->first_s = n->s;
    n->last_s = n->s;
    n->last_e = n->e;
    n->maxgap = -INFINITY;
    if (n->l != NIL) {
        run *a = &ch->t[n->l];
        n->first_s = a->first_s;
        double g = n->s - a->last_e;
        n->maxgap = a->maxgap > g ? a->maxgap : g;
    }
    if (n->r != NIL) {
        run *b = &ch->t[n->r];
        n->last_s = b->last_s;
        n->last_e = b->last_e;
        double g = b->first_s - n->e;
        if (g > n->maxgap) n->maxgap = g;
        if (b->maxgap > n->maxgap) n->maxgap = b->maxgap;
    }
}

static int32_t t_merge(channel *ch, int32_t a, int32_t b) {
    if (a == NIL) return b;
    if (b == NIL) return a;
    if (ch->t[a].prio > ch->t[b].prio) {
        ch->t[a].r = t_merge(ch, ch->t[a].r, b);
        pull(ch, a);
        return a;
    }
    ch->t[b].l = t_merge(ch, a, ch->t[b].l);
    pull(ch, b);
    return b;
}

/* L: runs with s < key, R: s >= key */
static void t_split(channel *ch, int32_t x, double key, int32_t *L, int32_t *R) {
    if (x == NIL) {
        *L = *R = NIL;
        return;
    }
    if (ch->t[x].s < key) {
        t_split(ch, ch->t[x].r, key, &ch->t[x].r, R);
        pull(ch, x);
        *L = x;
    } else {
        t_split(ch, ch->t[x].l, key, L, &ch->t[x].l);
        pull(ch, x);
        *R = x;
    }
}

static int32_t new_run(channel *ch, double s, double e) {
    int32_t x;
    if (ch->free_head != NIL) {
        x = ch->free_head;
        ch->free_head = ch->t[x].l;
    } else {
        x = ch->used++;
    }
    ch->rng ^= ch->rng << 13;
    ch->rng ^= ch->rng >> 7;
    ch->rng ^= ch->rng << 17;
    run *n = &ch->t[x];
    n->s = s;
    n->e = e;
    n->prio = (uint32_t)(ch->rng >> 32);
    n->l = n->r = NIL;
    pull(ch, x);
    return x;
}

static void drop_run(channel *ch, int32_t x) {
    ch->t[x].l = ch->free_head;
    ch->free_head = x;
}

/* remove the leftmost run of subtree x; returns the new subtree, *out = the run removed */
static int32_t pop_min(channel *ch, int32_t x, int32_t *out) {
    if (ch->t[x].l == NIL) {
        *out = x;
        return ch->t[x].r;
    }
    ch->t[x].l = pop_min(ch, ch->t[x].l, out);
    pull(ch, x);
    return x;
}

static int32_t pop_max(channel *ch, int32_t x, int32_t *out) {
    if (ch->t[x].r == NIL) {
        *out = x;
        return ch->t[x].l;
    }
    ch->t[x].r = pop_max(ch, ch->t[x].r, out);
    pull(ch, x);
    return x;
}

/* busy over [s, e): merges with a run that ends within MERGE_NS before s and swallows the
 * runs that start within MERGE_NS after the new end (as the Python reference) */
static void channel_add(channel *ch, double s, double e) {
    int32_t L, R, p;
    t_split(ch, ch->root, s, &L, &R);
    double cs = s, ce = e;
    if (L != NIL) {
        L = pop_max(ch, L, &p);
        if (ch->t[p].e >= s - MERGE_NS) {
            cs = ch->t[p].s;
            ce = ch->t[p].e > e ? ch->t[p].e : e;
            drop_run(ch, p);
        } else {
            ch->t[p].l = ch->t[p].r = NIL;
            pull(ch, p);
            L = t_merge(ch, L, p);
        }
    }
    while (R != NIL) {
        int32_t m = R;
        while (ch->t[m].l != NIL) m = ch->t[m].l;
        if (!(ch->t[m].s <= ce + MERGE_NS)) break;
        R = pop_min(ch, R, &p);
        if (ch->t[p].e > ce) ce = ch->t[p].e;
        drop_run(ch, p);
    }
    int32_t x = new_run(ch, cs, ce);
    ch->root = t_merge(ch, t_merge(ch, L, x), R);
}

/* Slack on the gap pruning: a subtree is skipped only when its widest gap is clearly too
 * narrow, so the exact per-run tests below decide every answer. */
static double slack(double a, double b) { return 1e-9 * (fabs(a) + fabs(b)) + 1e-6; }

typedef struct {
    double t, dur, s;
    int started, found;
} fwd_state;

/* in-order walk over the runs that end after t, as _Channel.earliest */
static void fwd(channel *ch, int32_t x, fwd_state *st) {
    if (x == NIL || st->found) return;
    run *n = &ch->t[x];
    if (!st->started) {
        if (n->last_e <= st->t) return;   /* every run here ends by t */
    } else if (!(st->s + st->dur <= n->first_s) && n->maxgap < st->dur - slack(st->dur, n->last_e)) {
        st->s = n->last_e;                 /* no gap here fits */
        return;
    }
    fwd(ch, n->l, st);
    if (st->found) return;
    if (!st->started) {
        if (n->e > st->t) {
            st->started = 1;
            if (st->t + st->dur <= n->s) {
                st->s = st->t;
                st->found = 1;
                return;
            }
            st->s = n->e;
        }
    } else {
        if (st->s + st->dur <= n->s) {
            st->found = 1;
            return;
        }
        st->s = n->e;
    }
    fwd(ch, n->r, st);
}

/* earliest s >= t with [s, s + dur) free; returns 0 (and nothing) when that s > limit */
static int channel_earliest(channel *ch, double t, double dur, double limit, double *out) {
    fwd_state st = {t, dur, t, 0, 0};
    fwd(ch, ch->root, &st);
    double s = st.started ? st.s : t;
    if (!(s <= limit)) return 0;
    *out = s;
    return 1;
}

typedef struct {
    double deadline, dur, s;
    int found;
} bwd_state;

/* reverse in-order walk over the runs that start before the deadline, as _Channel.latest */
static void bwd(channel *ch, int32_t x, bwd_state *st) {
    if (x == NIL || st->found) return;
    run *n = &ch->t[x];
    if (n->first_s >= st->deadline) return;        /* every run here starts at or after it */
    if (n->s >= st->deadline) {                    /* only the left subtree is before it */
        bwd(ch, n->l, st);
        return;
    }
    /* the whole subtree lies before the deadline: skip it if nothing fits */
    if (n->last_s < st->deadline && !(n->last_e <= st->s) && n->maxgap < st->dur - slack(st->dur, n->first_s)) {
        double m = n->first_s - st->dur;
        if (m < st->s) st->s = m;
        return;
    }
    bwd(ch, n->r, st);
    if (st->found) return;
    if (n->e <= st->s) {
        st->found = 1;
        return;
    }
    double m = n->s - st->dur;
    if (m < st->s) st->s = m;
    bwd(ch, n->l, st);
}

/* latest s with s + dur <= deadline, s >= not_before and [s, s + dur) free */
static int channel_latest(channel *ch, double deadline, double dur, double not_before, double *out) {
    bwd_state st = {deadline, dur, deadline - dur, 0};
    bwd(ch, ch->root, &st);
    if (!(st.s >= not_before)) return 0;
    *out = st.s;
    return 1;
}

/* ---- the greedy loop ------------------------------------------------------------------ */

/* First k with a[k] >= x (upper 0) or a[k] > x (upper 1), from a hint: gallop from `hint` to bracket the answer, then
 * bisect inside the bracket (same result as the plain searches; O(log d) for an answer d
 * steps from the hint, and the steps of one interval are few and close in memory). */
static int64_t gallop_bound(const double *a, int64_t n, double x, int64_t hint, int upper) {
#define BEFORE(k) (upper ? a[k] <= x : a[k] < x)   /* a[k] lies before the answer */
    if (hint < 0) hint = 0;
    if (hint > n) hint = n;
    int64_t lo, hi;   /* answer in [lo, hi] */
    if (hint < n && BEFORE(hint)) {
        int64_t step = 1;
        lo = hint + 1;
        hi = hint + 1;
        while (hi < n && BEFORE(hi)) {
            lo = hi + 1;
            hi = hint + (step <<= 1);
            if (hi > n) hi = n;
        }
    } else {
        int64_t step = 1;
        hi = hint;
        lo = hint;
        while (lo > 0 && !BEFORE(lo - 1)) {
            hi = lo - 1;
            lo = hint - (step <<= 1);
            if (lo < 0) lo = 0;
        }
    }
    while (lo < hi) {
        int64_t m = lo + (hi - lo) / 2;
        if (BEFORE(m)) lo = m + 1; else hi = m;
    }
    return lo;
#undef BEFORE
}

typedef struct {
    int64_t pos, lo, hi;
    double t[7];
} taken_swap;

int64_t pi_swap_schedule(int64_t n_hot, const double *hot_t, const double *hot_end, const int64_t *hot_live,
                         int64_t n, const pi_swap_cand *cand, int64_t n_hide, const int64_t *hide_pos,
                         int budget_mode, int64_t target, int64_t *out_pos, double *out_t) {
    curve cv = {0};
    channel d2h = {0}, h2d = {0};
    char *used = calloc((size_t)(n > 0 ? n : 1), 1);
    taken_swap *tk = malloc(sizeof(taken_swap) * (size_t)(n > 0 ? n : 1));
    int64_t ntk = 0, kept = -1;
    if (!used || !tk || curve_init(&cv, n_hot, hot_live) || channel_init(&d2h, n) || channel_init(&h2d, n))
        goto out;
    int nph = budget_mode ? 2 : 1;
    for (int ph = 0; ph < nph; ph++) {
        /* the hiding pass visits only the candidates that can hide (hide_pos, in order; NULL: all) */
        int64_t nk = (ph == 0 && hide_pos) ? n_hide : n;
        for (int64_t k = 0; k < nk; k++) {
            int64_t i = (ph == 0 && hide_pos) ? hide_pos[k] : k;
            const pi_swap_cand *c = &cand[i];
            if (curve_max_all(&cv) <= target) break;
            if (used[i]) continue;
            /* a swap that hides needs start <= end - t_in - t_out (the earliest swap-out is at the
             * previous access); tested first, it rejects without touching any structure */
            if (ph == 0 && !(c->start <= c->end - c->t_in - c->t_out)) continue;
            /* with target 0 this never rejects in the hiding pass: the away window's steps lie
             * inside [lo, hi), so the check on them below implies it */
            if ((ph == 1 || target > 0) && curve_max(&cv, c->lo, c->hi) <= target) continue;
            int64_t k1 = -1, k2 = -1;
            if (budget_mode) {
                k1 = curve_above(&cv, c->lo, c->hi, target, 0);
                k2 = curve_above(&cv, c->lo, c->hi, target, 1);
            }
            if (budget_mode && ph == 0) {
                /* a hiding swap must cover every over-budget step of its interval; its away window
                 * starts at or after start + t_out and ends by end - t_in (see below), so test
                 * those bounds before touching the links (the same test as after, on a superset) */
                int64_t lo_min = gallop_bound(hot_t, n_hot, c->start + c->t_out, c->lo, 0);
                int64_t hi_max = gallop_bound(hot_end, n_hot, c->end - c->t_in, c->hi, 1);
                if (lo_min > k1 || hi_max <= k2) continue;
            }
            double os = 0, oe, is = 0, f, r, stall;
            if (ph == 0) {
                if (!channel_earliest(&d2h, c->start, c->t_out, c->end - c->t_in - c->t_out, &os)) continue;
                oe = os + c->t_out;
                if (!channel_latest(&h2d, c->end, c->t_in, oe, &is)) continue;
                f = oe;
                r = is;
                stall = 0.0;
            } else {
                channel_earliest(&d2h, c->start, c->t_out, INFINITY, &os);
                oe = os + c->t_out;
                double first_over = hot_t[k1], last_over_end = hot_end[k2];
                f = first_over < oe ? first_over : oe;
                stall = oe - f;
                double need = last_over_end > oe ? last_over_end : oe;
                if (!channel_latest(&h2d, c->end, c->t_in, need, &is))
                    channel_earliest(&h2d, need, c->t_in, INFINITY, &is);
                r = c->end < is ? c->end : is;
                double late = is + c->t_in - c->end;
                stall += late > 0.0 ? late : 0.0;
            }
            if (r <= f) continue;
            /* the hot steps lying inside the away window [f, r) */
            int64_t lo = gallop_bound(hot_t, n_hot, f, c->lo, 0);
            int64_t hi = gallop_bound(hot_end, n_hot, r, c->hi, 1);
            if (hi < lo) hi = lo;
            if (curve_max(&cv, lo, hi) <= target) continue;
            if (budget_mode && ph == 0 && (lo > k1 || hi <= k2)) continue;
            curve_add(&cv, lo, hi, -c->size);
            channel_add(&d2h, os, oe);
            channel_add(&h2d, is, is + c->t_in);
            used[i] = 1;
            taken_swap *t = &tk[ntk++];
            t->pos = i;
            t->lo = lo;
            t->hi = hi;
            double v[7] = {os, oe, f, r, is, is + c->t_in, stall};
            memcpy(t->t, v, sizeof v);
        }
    }
    /* drop swaps the reached peak does not need (lowest priority first) */
    int64_t limit = curve_max_all(&cv);
    if (target > limit) limit = target;
    char *keep = used;   /* reuse: one flag per taken swap */
    for (int64_t j = ntk - 1; j >= 0; j--) {
        curve_add(&cv, tk[j].lo, tk[j].hi, cand[tk[j].pos].size);
        if (curve_max_all(&cv) > limit) {
            curve_add(&cv, tk[j].lo, tk[j].hi, -cand[tk[j].pos].size);
            keep[j] = 1;
        } else {
            keep[j] = 0;
        }
    }
    kept = 0;
    for (int64_t j = 0; j < ntk; j++) {
        if (!keep[j]) continue;
        out_pos[kept] = tk[j].pos;
        memcpy(out_t + 7 * kept, tk[j].t, sizeof tk[j].t);
        kept++;
    }
out:
    free(used);
    free(tk);
    curve_free(&cv);
    channel_free(&d2h);
    channel_free(&h2d);
    return kept;
}
