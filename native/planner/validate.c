/*
 * validate.c — check a plan independently of the planners (see planner.h).
 *
 * Sweep over time (ends before starts at equal times, since lifetimes are
 * half-open); the address axis is compressed to the distinct offsets and ends,
 * and a segment tree with range add / range max counts how many live buffers
 * cover each address cell.  A newcomer whose cells already have a non-zero
 * maximum overlaps a live buffer.  O(n log n); shares no code with the search
 * or the greedy placement.
 */
#include "planner/planner.h"

#include <stdlib.h>

typedef struct { int64_t t; int32_t kind, b; } vev;   /* kind 0 end, 1 start */

static int cmp_vev(const void *x, const void *y)
{
    const vev *a = x, *b = y;
    if (a->t != b->t) return a->t < b->t ? -1 : 1;
    if (a->kind != b->kind) return a->kind - b->kind;
    return a->b - b->b;
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

static int lower_idx(const int64_t *v, int n, int64_t key)
{
    int l = 0, r = n;
    while (l < r) { int m = (l + r) >> 1; if (v[m] < key) l = m + 1; else r = m; }
    return l;
}

typedef struct { int32_t *mx, *lz; int sz; } seg;

static void seg_add(seg *s, int node, int nl, int nr, int l, int r, int v)
{
    if (r <= nl || nr <= l) return;
    if (l <= nl && nr <= r) { s->mx[node] += v; s->lz[node] += v; return; }
    int mid = (nl + nr) >> 1;
    seg_add(s, 2 * node, nl, mid, l, r, v);
    seg_add(s, 2 * node + 1, mid, nr, l, r, v);
    int a = s->mx[2 * node], b = s->mx[2 * node + 1];
    s->mx[node] = (a > b ? a : b) + s->lz[node];
}

static int32_t seg_max(const seg *s, int node, int nl, int nr, int l, int r)
{
    if (r <= nl || nr <= l) return INT32_MIN;
    if (l <= nl && nr <= r) return s->mx[node];
    int mid = (nl + nr) >> 1;
    int32_t a = seg_max(s, 2 * node, nl, mid, l, r), b = seg_max(s, 2 * node + 1, mid, nr, l, r);
    return (a > b ? a : b) + s->lz[node];
}

int pi_validate_plan(int n, const int64_t *lower, const int64_t *upper, const int64_t *size,
                     const int64_t *offsets, int32_t *conflict_out)
{
    conflict_out[0] = conflict_out[1] = -1;
    vev *ev = malloc(sizeof(vev) * (size_t)(2 * n + 1));
    int64_t *ac = malloc(sizeof(int64_t) * (size_t)(2 * n + 1));
    seg s = {0};
    int m = 0, A = 0, rc = -1;
    if (!ev || !ac) goto out;
    for (int i = 0; i < n; i++) {
        if (upper[i] <= lower[i] || size[i] <= 0) continue;
        ev[m++] = (vev){lower[i], 1, i};
        ev[m++] = (vev){upper[i], 0, i};
        ac[A++] = offsets[i];
        ac[A++] = offsets[i] + size[i];
    }
    qsort(ev, (size_t)m, sizeof(vev), cmp_vev);
    qsort(ac, (size_t)A, sizeof(int64_t), cmp_i64);
    int U = 0;
    for (int k = 0; k < A; k++) if (U == 0 || ac[U - 1] != ac[k]) ac[U++] = ac[k];
    int cells = U > 1 ? U - 1 : 1;   /* cell c = [ac[c], ac[c+1]) */
    s.sz = cells;
    s.mx = calloc((size_t)(4 * cells + 4), sizeof(int32_t));
    s.lz = calloc((size_t)(4 * cells + 4), sizeof(int32_t));
    if (!s.mx || !s.lz) goto out;
    rc = 0;
    for (int k = 0; k < m; k++) {
        int b = ev[k].b;
        int l = lower_idx(ac, U, offsets[b]), r = lower_idx(ac, U, offsets[b] + size[b]);
        if (ev[k].kind == 0) { seg_add(&s, 1, 0, cells, l, r, -1); continue; }
        if (seg_max(&s, 1, 0, cells, l, r) > 0) {
            conflict_out[0] = b;
            for (int o = 0; o < n; o++)   /* name the other buffer (once, so a plain scan) */
                if (o != b && upper[o] > lower[o] && size[o] > 0 && lower[o] < upper[b] && lower[b] < upper[o] &&
                    offsets[o] < offsets[b] + size[b] && offsets[b] < offsets[o] + size[o]) { conflict_out[1] = o; break; }
            rc = 1;
            goto out;
        }
        seg_add(&s, 1, 0, cells, l, r, +1);
    }
out:
    free(ev); free(ac); free(s.mx); free(s.lz);
    return rc;
}
