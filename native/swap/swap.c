/*
 * swap.c — the host-swap scheduler's greedy loop; see swap.h.
 */
#include "swap.h"
#include "bound.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- live-bytes curve: a 64-ary tree with range add / range max --------------------------
 *
 * Level 0 holds the steps' values; a node of level l >= 1 covers 64 nodes of level l - 1
 * (64^l steps) and keeps m = max over its children's m, plus its own pending add lz (an add
 * that covers the whole node stops there).  The root is the single node of level H.  The
 * ranges the scheduler asks about are mostly a few dozen steps: one or two leaf blocks, read
 * and written as contiguous runs of 64 values, and a path of H nodes above them — far fewer
 * cache misses than a binary tree's 2 log2 n scattered nodes. */

#define FSH 6
#define FAN (1 << FSH)
#define MAXH 12

typedef struct {
    int64_t n;
    int H;                 /* levels above the steps; the root is the one node of level H */
    int64_t cnt[MAXH + 1]; /* nodes per level */
    int64_t *m[MAXH + 1];  /* m[0]: the steps' values; m[l]: max of the node's range, its own lz included */
    int64_t *lz[MAXH + 1]; /* lz[l], l >= 1: add pending on the node's whole range */
} curve;

static int curve_init(curve *c, int64_t n, const int64_t *live) {
    memset(c, 0, sizeof *c);
    c->n = n;
    if (n == 0) return 0;
    c->cnt[0] = n;
    c->m[0] = malloc(sizeof(int64_t) * (size_t)n);
    if (!c->m[0]) return -1;
    memcpy(c->m[0], live, sizeof(int64_t) * (size_t)n);
    int l = 0;
    do {
        l++;
        if (l > MAXH) return -1;
        int64_t k = (c->cnt[l - 1] + FAN - 1) >> FSH;
        c->cnt[l] = k;
        c->m[l] = malloc(sizeof(int64_t) * (size_t)k);
        c->lz[l] = calloc((size_t)k, sizeof(int64_t));
        if (!c->m[l] || !c->lz[l]) return -1;
        for (int64_t x = 0; x < k; x++) {
            int64_t a = x << FSH, b = a + FAN < c->cnt[l - 1] ? a + FAN : c->cnt[l - 1];
            int64_t mx = INT64_MIN;
            for (int64_t i = a; i < b; i++) if (c->m[l - 1][i] > mx) mx = c->m[l - 1][i];
            c->m[l][x] = mx;
        }
    } while (c->cnt[l] > 1);
    c->H = l;
    return 0;
}

static void curve_free(curve *c) {
    for (int l = 0; l <= MAXH; l++) {
        free(c->m[l]);
        free(c->lz[l]);
    }
}

static inline void recompute(curve *c, int l, int64_t x) {
    int64_t a = x << FSH, e = c->cnt[l - 1], b = a + FAN < e ? a + FAN : e;
    const int64_t *ch = c->m[l - 1];
    int64_t mx = INT64_MIN;
    for (int64_t i = a; i < b; i++) mx = ch[i] > mx ? ch[i] : mx;
    c->m[l][x] = mx + c->lz[l][x];
}

/* add d to the steps [lo, hi) under node x of level l (the range meets the node) */
static void add_rec(curve *c, int l, int64_t x, int64_t lo, int64_t hi, int64_t d) {
    int sh = FSH * l;
    int64_t a = x << sh, b = (x + 1) << sh;
    if (b > c->n) b = c->n;
    if (lo <= a && b <= hi) {
        c->m[l][x] += d;
        c->lz[l][x] += d;
        return;
    }
    if (l == 1) {
        int64_t i0 = lo > a ? lo : a, i1 = hi < b ? hi : b;
        int64_t *v = c->m[0];
        for (int64_t i = i0; i < i1; i++) v[i] += d;
    } else {
        int csh = sh - FSH;
        int64_t c0 = (lo > a ? lo : a) >> csh, c1 = ((hi < b ? hi : b) - 1) >> csh;
        for (int64_t y = c0; y <= c1; y++) add_rec(c, l - 1, y, lo, hi, d);
    }
    recompute(c, l, x);
}

static void curve_add(curve *c, int64_t lo, int64_t hi, int64_t d) {
    if (hi <= lo) return;
    add_rec(c, c->H, 0, lo, hi, d);
}

/* max over the steps [lo, hi) under node x of level l, without the lz of x's ancestors */
static int64_t max_rec(const curve *c, int l, int64_t x, int64_t lo, int64_t hi) {
    int sh = FSH * l;
    int64_t a = x << sh, b = (x + 1) << sh;
    if (b > c->n) b = c->n;
    if (lo <= a && b <= hi) return c->m[l][x];
    int64_t mx = INT64_MIN;
    if (l == 1) {
        int64_t i0 = lo > a ? lo : a, i1 = hi < b ? hi : b;
        const int64_t *v = c->m[0];
        for (int64_t i = i0; i < i1; i++) mx = v[i] > mx ? v[i] : mx;
    } else {
        int csh = sh - FSH;
        int64_t c0 = (lo > a ? lo : a) >> csh, c1 = ((hi < b ? hi : b) - 1) >> csh;
        for (int64_t y = c0; y <= c1; y++) {
            int64_t v = max_rec(c, l - 1, y, lo, hi);
            if (v > mx) mx = v;
        }
    }
    return mx + c->lz[l][x];
}

/* The ranges the scheduler asks about mostly lie in one or two nodes of level 1 (64 steps each): for
 * those the searches below read the node's pending adds from the levels above (cached: few nodes)
 * and its own steps, instead of descending from the root through every level (at 100 M events ~14 M
 * searches a run, the descent most of their instructions; issue 30).  Wider ranges take the descent,
 * which steps over whole nodes. */
#define NARROW 2

/* the adds pending over level-1 node x: its own and those of the nodes above it.  A step i under x
 * stands at m[0][i] + this */
static inline int64_t node_acc(const curve *c, int64_t x) {
    int64_t acc = 0;
    for (int l = 1; l <= c->H; l++, x >>= FSH) acc += c->lz[l][x];
    return acc;
}

/* max over steps [lo, hi); INT64_MIN when empty */
static int64_t curve_max(const curve *c, int64_t lo, int64_t hi) {
    if (hi <= lo) return INT64_MIN;
    int64_t x0 = lo >> FSH, x1 = (hi - 1) >> FSH;
    if (c->H < 1 || x1 - x0 >= NARROW) return max_rec(c, c->H, 0, lo, hi);
    int64_t mx = INT64_MIN;
    const int64_t *v = c->m[0];
    for (int64_t x = x0; x <= x1; x++) {
        int64_t a = x << FSH, b = a + FAN < c->n ? a + FAN : c->n;
        int64_t acc = node_acc(c, x);
        if (lo <= a && b <= hi) {
            int64_t w = c->m[1][x] - c->lz[1][x] + acc;     /* m[1] holds its own add */
            if (w > mx) mx = w;
            continue;
        }
        int64_t i0 = lo > a ? lo : a, i1 = hi < b ? hi : b, w = INT64_MIN;
        for (int64_t i = i0; i < i1; i++) w = v[i] > w ? v[i] : w;
        if (w + acc > mx) mx = w + acc;
    }
    return mx;
}

static int64_t curve_max_all(const curve *c) { return c->n ? c->m[c->H][0] : 0; }

/* first (dir 0) or last (dir 1) step in [lo, hi) under node x whose value exceeds thr; -1 if
 * none.  acc: pending adds of x's ancestors. */
static int64_t above_rec(const curve *c, int l, int64_t x, int64_t lo, int64_t hi, int64_t thr, int64_t acc,
                         int dir) {
    int sh = FSH * l;
    int64_t a = x << sh, b = (x + 1) << sh;
    if (b > c->n) b = c->n;
    if (lo <= a && b <= hi && c->m[l][x] + acc <= thr) return -1;
    acc += c->lz[l][x];
    int64_t i0 = lo > a ? lo : a, i1 = hi < b ? hi : b;
    if (l == 1) {
        const int64_t *v = c->m[0];
        if (!dir) {
            for (int64_t i = i0; i < i1; i++) if (v[i] + acc > thr) return i;
        } else {
            for (int64_t i = i1 - 1; i >= i0; i--) if (v[i] + acc > thr) return i;
        }
        return -1;
    }
    int csh = sh - FSH;
    int64_t c0 = i0 >> csh, c1 = (i1 - 1) >> csh;
    if (!dir) {
        for (int64_t y = c0; y <= c1; y++) {
            int64_t k = above_rec(c, l - 1, y, lo, hi, thr, acc, dir);
            if (k >= 0) return k;
        }
    } else {
        for (int64_t y = c1; y >= c0; y--) {
            int64_t k = above_rec(c, l - 1, y, lo, hi, thr, acc, dir);
            if (k >= 0) return k;
        }
    }
    return -1;
}

static int64_t curve_above(const curve *c, int64_t lo, int64_t hi, int64_t thr, int dir) {
    if (hi <= lo) return -1;
    int64_t x0 = lo >> FSH, x1 = (hi - 1) >> FSH;
    if (c->H < 1 || x1 - x0 >= NARROW) return above_rec(c, c->H, 0, lo, hi, thr, 0, dir);
    const int64_t *v = c->m[0];
    for (int64_t k = 0; k <= x1 - x0; k++) {
        int64_t x = dir ? x1 - k : x0 + k;
        int64_t acc = node_acc(c, x);
        if (c->m[1][x] - c->lz[1][x] + acc <= thr) continue;     /* no step of the node above thr */
        int64_t a = x << FSH, b = a + FAN < c->n ? a + FAN : c->n;
        int64_t i0 = lo > a ? lo : a, i1 = hi < b ? hi : b;
        if (!dir) {
            for (int64_t i = i0; i < i1; i++) if (v[i] + acc > thr) return i;
        } else {
            for (int64_t i = i1 - 1; i >= i0; i--) if (v[i] + acc > thr) return i;
        }
    }
    return -1;
}

/* ---- one transfer direction: disjoint busy runs in sorted blocks ------------------------
 *
 * The runs, sorted by start (so by end too: they are disjoint), live in blocks of at most
 * BCAP runs; the blocks are in time order and the channel keeps, per block, its first start,
 * last end and widest gap between its consecutive runs in arrays of their own.  A search
 * bisects those arrays, then the block; a walk over busy runs steps over a whole block when
 * its widest gap is clearly too narrow.  Everything a query touches is a few contiguous
 * arrays: far fewer cache misses than a tree of nodes.  The searches and the merging are the
 * Python reference's list walks (kept in tests/unit/test_swap_native.py), step for step. */

#define MERGE_NS 1e-3
#define BCAP 128
#define GRP 16               /* runs per group of a block: 128 bytes of s or of e, two cache lines */
#define NG (BCAP / GRP)

/* A block of runs, 64-byte aligned.  Its first line holds n and, per group of GRP runs but the
 * last, the group's last end (ek); its second line the group's last start (sk); +inf past the runs.
 * A search in the block reads its first (or second) line, picks the group, and bisects the group's
 * two lines only: at 100 M events ~9 M searches a run, each once a bisect over 1 KB (four or five
 * cache misses) after the miss on n (issue 30). */
typedef struct {
    int32_t n;
    int32_t pad_;
    double ek[NG - 1];
    double sk[NG - 1];
    double pad2_;
    double s[BCAP], e[BCAP];
} rblock;

static rblock *new_block(void) {
    void *p = NULL;
    return posix_memalign(&p, 64, sizeof(rblock)) ? NULL : (rblock *)p;
}

typedef struct {
    rblock **b;          /* blocks in time order */
    double *fs, *le, *mg;/* per block: first start, last end, widest inner gap (-inf: none) */
    int32_t nb, cap;
} channel;

static int channel_init(channel *ch, int64_t n_runs) {
    (void)n_runs;
    ch->cap = 16;
    ch->nb = 0;
    ch->b = malloc(sizeof(rblock *) * (size_t)ch->cap);
    ch->fs = malloc(sizeof(double) * (size_t)ch->cap);
    ch->le = malloc(sizeof(double) * (size_t)ch->cap);
    ch->mg = malloc(sizeof(double) * (size_t)ch->cap);
    return ch->b && ch->fs && ch->le && ch->mg ? 0 : -1;
}

static void channel_free(channel *ch) {
    for (int32_t k = 0; k < ch->nb; k++) free(ch->b[k]);
    free(ch->b);
    free(ch->fs);
    free(ch->le);
    free(ch->mg);
}

/* recompute block k's summary */
static void summarise(channel *ch, int32_t k) {
    rblock *b = ch->b[k];
    for (int32_t g = 0; g < NG - 1; g++) {
        int32_t j = g * GRP + GRP - 1;
        b->ek[g] = j < b->n ? b->e[j] : INFINITY;
        b->sk[g] = j < b->n ? b->s[j] : INFINITY;
    }
    ch->fs[k] = b->s[0];
    ch->le[k] = b->e[b->n - 1];
    double g = -INFINITY;
    for (int32_t j = 1; j < b->n; j++) {
        double d = b->s[j] - b->e[j - 1];
        if (d > g) g = d;
    }
    ch->mg[k] = g;
}

/* make room for a block at position k (its pointer set by the caller); 0 or -1 */
static int insert_block(channel *ch, int32_t k, rblock *nb) {
    if (ch->nb == ch->cap) {
        int32_t cap = ch->cap * 2;
        rblock **b = realloc(ch->b, sizeof(rblock *) * (size_t)cap);
        if (b) ch->b = b;
        double *fs = realloc(ch->fs, sizeof(double) * (size_t)cap);
        if (fs) ch->fs = fs;
        double *le = realloc(ch->le, sizeof(double) * (size_t)cap);
        if (le) ch->le = le;
        double *mg = realloc(ch->mg, sizeof(double) * (size_t)cap);
        if (mg) ch->mg = mg;
        if (!b || !fs || !le || !mg) return -1;
        ch->cap = cap;
    }
    size_t m = (size_t)(ch->nb - k);
    memmove(ch->b + k + 1, ch->b + k, m * sizeof *ch->b);
    memmove(ch->fs + k + 1, ch->fs + k, m * sizeof *ch->fs);
    memmove(ch->le + k + 1, ch->le + k, m * sizeof *ch->le);
    memmove(ch->mg + k + 1, ch->mg + k, m * sizeof *ch->mg);
    ch->b[k] = nb;
    ch->nb++;
    return 0;
}

static void remove_block(channel *ch, int32_t k) {
    free(ch->b[k]);
    size_t m = (size_t)(ch->nb - k - 1);
    memmove(ch->b + k, ch->b + k + 1, m * sizeof *ch->b);
    memmove(ch->fs + k, ch->fs + k + 1, m * sizeof *ch->fs);
    memmove(ch->le + k, ch->le + k + 1, m * sizeof *ch->le);
    memmove(ch->mg + k, ch->mg + k + 1, m * sizeof *ch->mg);
    ch->nb--;
}

/* first index in a[0, n) with a[i] > x (upper) or a[i] >= x.  Branch-free: the half kept is chosen by a
 * conditional move, so the unpredictable comparisons cost no mispredicted branches (at 100 M events
 * ~10 M searches a run over a link's blocks, then inside one; issue 30) */
static inline int32_t bisect(const double *a, int32_t n, double x, int upper) {
    if (n <= 0) return 0;
    const double *base = a;
    while (n > 1) {
        int32_t half = n >> 1;
        int before = upper ? base[half] <= x : base[half] < x;
        base = before ? base + half : base;
        n -= half;
    }
    return (int32_t)(base - a) + (upper ? *base <= x : *base < x);
}

/* the group of runs that holds the first a[j] > x (upper) or >= x: the number of groups whose last
 * value (key, sorted) lies before x */
static inline int32_t block_group(const double *key, double x, int upper) {
    int32_t g = 0;
    for (int32_t i = 0; i < NG - 1; i++) g += upper ? key[i] <= x : key[i] < x;
    return g;
}

/* first index j < b->n with a[j] > x (upper) or a[j] >= x, a being b->e (key b->ek) or b->s
 * (key b->sk): the groups whose last value lies before x are counted (the keys are sorted),
 * then the one group left is bisected; the same answer as bisect(a, b->n, x, upper) */
static int32_t bisect_block(const rblock *b, const double *a, const double *key, double x, int upper) {
    int32_t lo = block_group(key, x, upper) * GRP, hi = lo + GRP;
    if (hi > b->n) hi = b->n;
    if (lo > hi) lo = hi;
    return lo + bisect(a + lo, hi - lo, x, upper);
}

/* Slack on the gap pruning: a block is stepped over only when its widest gap is clearly too
 * narrow, so the exact per-run tests decide every answer. */
static double slack(double a, double b) { return 1e-9 * (fabs(a) + fabs(b)) + 1e-6; }

/* earliest s >= t with [s, s + dur) free; returns 0 (and nothing) when that s > limit.
 * As _Channel.earliest: from the first run ending after t, s = t; while s <= limit and the
 * run starts before s + dur: s = max(s, its end), next run. */
static int channel_earliest(channel *ch, double t, double dur, double limit, double *out) {
    double s = t;
    int32_t k = bisect(ch->le, ch->nb, t, 1);        /* first block with a run ending after t */
    if (k < ch->nb) {
        rblock *b = ch->b[k];
        int32_t j = bisect_block(b, b->e, b->ek, t, 1);
        for (;;) {
            if (!(s <= limit)) break;
            if (s + dur <= b->s[j]) break;
            if (b->e[j] > s) s = b->e[j];
            if (++j == b->n) {
                /* next block: its first run exactly, then the rest at once when no gap fits */
                for (;;) {
                    if (++k == ch->nb) goto done;
                    b = ch->b[k];
                    if (!(s <= limit)) goto done;
                    if (s + dur <= b->s[0]) goto done;
                    if (b->e[0] > s) s = b->e[0];
                    if (b->n > 1 && !(ch->mg[k] < dur - slack(dur, ch->le[k]))) {
                        j = 1;
                        break;
                    }
                    if (ch->le[k] > s) s = ch->le[k];   /* every run of the block, in turn */
                }
            }
        }
    }
done:
    if (!(s <= limit)) return 0;
    *out = s;
    return 1;
}

/* latest s with s + dur <= deadline, s >= not_before and [s, s + dur) free.
 * As _Channel.latest: s = deadline - dur; from the last run starting before the deadline,
 * while s >= not_before: done if the run ends by s, else s = min(s, its start - dur). */
static int channel_latest(channel *ch, double deadline, double dur, double not_before, double *out) {
    double s = deadline - dur;
    int32_t k = bisect(ch->fs, ch->nb, deadline, 0) - 1;   /* last block with a run starting before */
    if (k >= 0) {
        rblock *b = ch->b[k];
        int32_t j = bisect_block(b, b->s, b->sk, deadline, 0) - 1;
        for (;;) {
            if (!(s >= not_before)) return 0;
            if (b->e[j] <= s) break;
            double m = b->s[j] - dur;
            if (m < s) s = m;
            if (--j < 0) {
                for (;;) {
                    if (--k < 0) goto done;
                    b = ch->b[k];
                    j = b->n - 1;
                    if (!(s >= not_before)) return 0;
                    if (b->e[j] <= s) goto done;
                    m = b->s[j] - dur;
                    if (m < s) s = m;
                    if (b->n > 1 && !(ch->mg[k] < dur - slack(dur, ch->fs[k]))) {
                        j--;
                        break;
                    }
                    m = ch->fs[k] - dur;                /* every run of the block, in turn */
                    if (m < s) s = m;
                }
            }
        }
    }
done:
    if (!(s >= not_before)) return 0;
    *out = s;
    return 1;
}

/* delete run j of block k (the block goes when it empties); summaries updated */
static void delete_run(channel *ch, int32_t k, int32_t j) {
    rblock *b = ch->b[k];
    memmove(b->s + j, b->s + j + 1, (size_t)(b->n - j - 1) * sizeof(double));
    memmove(b->e + j, b->e + j + 1, (size_t)(b->n - j - 1) * sizeof(double));
    if (--b->n == 0) remove_block(ch, k);
    else summarise(ch, k);
}

/* busy over [s, e): as _Channel.add, merges with a run that ends within MERGE_NS before s
 * and swallows the runs that start within MERGE_NS after the new end.  0 or -1 (memory). */
static int channel_add(channel *ch, double s, double e) {
    if (ch->nb == 0) {
        rblock *nb = new_block();
        if (!nb || insert_block(ch, 0, nb)) { free(nb); return -1; }
        nb->n = 1;
        nb->s[0] = s;
        nb->e[0] = e;
        summarise(ch, 0);
        return 0;
    }
    /* position of the first run with start >= s: block k, index j (j may be b->n) */
    int32_t k = bisect(ch->fs, ch->nb, s, 0) - 1;
    int32_t j;
    if (k < 0) {
        k = 0;
        j = 0;
    } else {
        j = bisect_block(ch->b[k], ch->b[k]->s, ch->b[k]->sk, s, 0);
    }
    /* the run before it */
    int32_t pk = k, pj = j - 1;
    if (pj < 0) {
        pk = k - 1;
        pj = pk >= 0 ? ch->b[pk]->n - 1 : -1;
    }
    int32_t ck, cj;   /* the run that now holds [s, e) */
    if (pk >= 0 && ch->b[pk]->e[pj] >= s - MERGE_NS) {
        rblock *b = ch->b[pk];
        if (e > b->e[pj]) b->e[pj] = e;
        ck = pk;
        cj = pj;
        summarise(ch, ck);
    } else {
        rblock *b = ch->b[k];
        if (b->n == BCAP) {               /* split the full block in two halves */
            rblock *nb = new_block();
            if (!nb || insert_block(ch, k + 1, nb)) { free(nb); return -1; }
            int32_t h = BCAP / 2;
            nb->n = BCAP - h;
            memcpy(nb->s, b->s + h, (size_t)nb->n * sizeof(double));
            memcpy(nb->e, b->e + h, (size_t)nb->n * sizeof(double));
            b->n = h;
            summarise(ch, k);
            summarise(ch, k + 1);
            if (j > h) {
                k++;
                j -= h;
                b = nb;
            }
        }
        memmove(b->s + j + 1, b->s + j, (size_t)(b->n - j) * sizeof(double));
        memmove(b->e + j + 1, b->e + j, (size_t)(b->n - j) * sizeof(double));
        b->s[j] = s;
        b->e[j] = e;
        b->n++;
        summarise(ch, k);
        ck = k;
        cj = j;
    }
    /* swallow the runs that start within MERGE_NS after its end */
    for (;;) {
        rblock *b = ch->b[ck];
        int32_t nk = ck, nj = cj + 1;
        if (nj == b->n) {
            nk = ck + 1;
            nj = 0;
            if (nk == ch->nb) break;
        }
        rblock *c = ch->b[nk];
        if (!(c->s[nj] <= b->e[cj] + MERGE_NS)) break;
        if (c->e[nj] > b->e[cj]) b->e[cj] = c->e[nj];
        summarise(ch, ck);
        delete_run(ch, nk, nj);     /* nk > ck or nj > cj: (ck, cj) stays where it is */
    }
    return 0;
}

/* ---- the greedy loop ------------------------------------------------------------------ */

typedef struct {
    int64_t pos, lo, hi;
    double t[7];
} taken_swap;

#define PF_REC 16
#define PF_STEP 8
#define PF_BLK 4
#define PF_RING 16      /* > PF_STEP: the block found for a visit PF_STEP on, read PF_BLK on */

/* the record of visit kk: at position pos[kk] (pos NULL: kk) of the visiting order */
static inline const pi_swap_cand *visit_rec(const pi_swap_cand *cand, const int32_t *cand_at, const int64_t *pos,
                                            int64_t kk) {
    int64_t i = pos ? pos[kk] : kk;
    return &cand[cand_at ? (int64_t)cand_at[i] : i];
}

int64_t pi_swap_schedule(int64_t n_hot, const double *hot_t, const double *hot_end, const int64_t *hot_live,
                         int64_t n, const pi_swap_cand *cand, int64_t n_hide, const int64_t *hide_pos,
                         int budget_mode, int64_t target, int64_t *out_pos, double *out_t) {
    return pi_swap_schedule_at(n_hot, hot_t, hot_end, hot_live, n, cand, NULL, n_hide, hide_pos, budget_mode,
                               target, out_pos, out_t, 0);
}

int64_t pi_swap_schedule_at(int64_t n_hot, const double *hot_t, const double *hot_end, const int64_t *hot_live,
                            int64_t n, const pi_swap_cand *cand, const int32_t *cand_at, int64_t n_hide,
                            const int64_t *hide_pos, int budget_mode, int64_t target, int64_t *out_pos,
                            double *out_t, int drop_hot_live) {
    curve cv = {0};
    channel d2h = {0}, h2d = {0};
    char *used = calloc((size_t)(n > 0 ? n : 1), 1);
    taken_swap *tk = malloc(sizeof(taken_swap) * (size_t)(n > 0 ? n : 1));
    int64_t ntk = 0, kept = -1;
    if (!used || !tk || curve_init(&cv, n_hot, hot_live) || channel_init(&d2h, n) || channel_init(&h2d, n))
        goto out;
    if (drop_hot_live && n_hot > 0) {
        /* the curve has its copy: the whole pages inside hot_live go back (issue 30: a file's clean
         * pages, mapped again from the page cache if read; at 100 M events 65 MiB a run) */
        uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a0 = (uintptr_t)hot_live;
        uintptr_t lo = (a0 + pg - 1) / pg * pg, hi = (a0 + sizeof(int64_t) * (uintptr_t)n_hot) / pg * pg;
        if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
    }
    int nph = budget_mode ? 2 : 1;
    for (int ph = 0; ph < nph; ph++) {
        /* the hiding pass visits only the candidates that can hide (hide_pos, in order; NULL: all) */
        int64_t nk = (ph == 0 && hide_pos) ? n_hide : n;
        const int64_t *vpos = (ph == 0 && hide_pos) ? hide_pos : NULL;   /* the visits' positions */
        int32_t ring[PF_RING];
        for (int q = 0; q < PF_RING; q++) ring[q] = -1;
        for (int64_t k = 0; k < nk; k++) {
            int64_t i = vpos ? vpos[k] : k;
            const pi_swap_cand *c = visit_rec(cand, cand_at, vpos, k);
            /* the visiting order is by score, the records by candidate: each visit is a cache miss
             * on its record, on its first steps and on the device-to-host link's runs around its start.
             * Ask for them ahead (issue 30: at 100 M events ~9 M visits a run): the record PF_REC visits
             * on; PF_STEP visits on (its record asked for earlier), its first and last steps and the
             * link's block holding its start (bisected over the blocks' last ends, kept in `ring`);
             * PF_BLK visits on, the group of that block's runs the search will bisect (its header,
             * asked for before, says which: the block found then, if it still exists).  The
             * search the visit makes finds the same runs unless the link changed in between.  No
             * effect on what is computed. */
            if (k + PF_REC < nk) {
                const char *rp = (const char *)visit_rec(cand, cand_at, vpos, k + PF_REC);
                __builtin_prefetch(rp);
                __builtin_prefetch(rp + sizeof(pi_swap_cand) - 1);
            }
            if (k + PF_STEP < nk) {
                const pi_swap_cand *cp = visit_rec(cand, cand_at, vpos, k + PF_STEP);
                int64_t lo = cp->lo, hi = cp->hi;
                /* its first and last steps' values and times: where the first and last steps above the
                 * target (k1, k2 below) usually are, read right after (at 100 M events the load of hot_t[k1]
                 * was a third of this loop's own time, a miss per visit) */
                if (lo >= 0 && lo < n_hot) {
                    __builtin_prefetch(&cv.m[0][lo]);
                    __builtin_prefetch(&hot_t[lo]);
                    __builtin_prefetch(&cv.m[1][lo >> FSH]);    /* its level-1 node (curve_above) */
                    __builtin_prefetch(&cv.lz[1][lo >> FSH]);
                }
                if (hi > 0 && hi <= n_hot) {
                    __builtin_prefetch(&cv.m[0][hi - 1]);
                    __builtin_prefetch(&hot_end[hi - 1]);
                }
                int32_t kb = bisect(d2h.le, d2h.nb, cp->start, 1);
                ring[(k + PF_STEP) % PF_RING] = kb;
                if (kb < d2h.nb) __builtin_prefetch(d2h.b[kb]);
            }
            if (k + PF_BLK < nk) {
                int32_t kb = ring[(k + PF_BLK) % PF_RING];
                if (kb >= 0 && kb < d2h.nb) {
                    const rblock *b = d2h.b[kb];
                    double t = visit_rec(cand, cand_at, vpos, k + PF_BLK)->start;
                    int32_t g = block_group(b->ek, t, 1);
                    __builtin_prefetch(&b->e[g * GRP]);
                    __builtin_prefetch(&b->e[g * GRP + GRP - 1]);
                    __builtin_prefetch(&b->s[g * GRP]);
                    __builtin_prefetch(&b->s[g * GRP + GRP - 1]);
                }
            }
            if (curve_max_all(&cv) <= target) break;
            if (used[i]) continue;
            /* a swap that hides needs start <= end - t_in - t_out (the earliest swap-out is at the
             * previous access); tested first, it rejects without touching any structure */
            if (ph == 0 && !(c->start <= c->end - c->t_in - c->t_out)) continue;
            /* with target 0 this never rejects in the hiding pass: the away window's steps lie
             * inside [lo, hi), so the check on them below implies it */
            int64_t k1 = -1, k2 = -1;
            if (budget_mode) {
                /* the first and last steps above the target in the interval; none: the check on
                 * the range max below (or, with target 0 in the hiding pass, the cover test) skips it */
                k1 = curve_above(&cv, c->lo, c->hi, target, 0);
                if (k1 < 0) continue;
                k2 = curve_above(&cv, c->lo, c->hi, target, 1);
            } else if (target > 0 && curve_max(&cv, c->lo, c->hi) <= target) {
                continue;
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
                /* with stalls, but a schedule that can run: the swap-out ends by the next access
                 * and, when it ends after the first over-target moment (where the program waits
                 * for it), starts before that moment; the swap-in starts before the next access
                 * (which waits for it when it ends late) */
                double first_over = hot_t[k1], last_over_end = hot_end[k2];
                /* (the limit at the next access is also implied by the swap-in's: a swap-out
                 * ending after it leaves no swap-in start before it) */
                double lim = c->end - c->t_out;
                if (first_over < lim) lim = first_over;
                if (!channel_earliest(&d2h, c->start, c->t_out, lim, &os)) continue;
                oe = os + c->t_out;
                if (oe > first_over && !(os < first_over)) continue;
                f = first_over < oe ? first_over : oe;
                stall = oe - f;
                double need = last_over_end > oe ? last_over_end : oe;
                if (!channel_latest(&h2d, c->end, c->t_in, need, &is) &&
                    !(channel_earliest(&h2d, need, c->t_in, c->end, &is) && is < c->end))
                    continue;
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
            if (channel_add(&d2h, os, oe) || channel_add(&h2d, is, is + c->t_in)) {
                ntk = -1;
                goto out;
            }
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
        /* giving the swap up would lift the peak above the limit: the curve stays at most the
         * limit outside the window, so that is "window max + size > limit" (no add and undo) */
        int64_t sz = cand[cand_at ? (int64_t)cand_at[tk[j].pos] : tk[j].pos].size;
        if (tk[j].hi > tk[j].lo && curve_max(&cv, tk[j].lo, tk[j].hi) + sz > limit) {
            keep[j] = 1;
        } else {
            curve_add(&cv, tk[j].lo, tk[j].hi, sz);
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
