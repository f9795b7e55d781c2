/* intervals.c — the touches and intervals of pyinterpose.analysis.access.access_intervals; see reader.h. */
#include "reader.h"

#include <stdlib.h>
#include <string.h>

/* stable merge sort of (seq, t) pairs by seq */
static void sort_pairs(int64_t *seq, int64_t *t, int64_t n, int64_t *ts, int64_t *tt)
{
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                if (seq[j] < seq[i]) {
                    ts[k] = seq[j];
                    tt[k++] = t[j++];
                } else {
                    ts[k] = seq[i];
                    tt[k++] = t[i++];
                }
            }
            while (i < mid) {
                ts[k] = seq[i];
                tt[k++] = t[i++];
            }
            while (j < hi) {
                ts[k] = seq[j];
                tt[k++] = t[j++];
            }
        }
        memcpy(seq, ts, (size_t)n * sizeof(*seq));
        memcpy(t, tt, (size_t)n * sizeof(*t));
    }
}

/* element i of an output column of int32 (w32) or int64 values */
static inline int64_t col_get(const void *a, int w32, int64_t i)
{
    return w32 ? (int64_t)((const int32_t *)a)[i] : ((const int64_t *)a)[i];
}

static inline void col_put(void *a, int w32, int64_t i, int64_t v)
{
    if (w32)
        ((int32_t *)a)[i] = (int32_t)v;
    else
        ((int64_t *)a)[i] = v;
}

static inline int fits32(int64_t v)
{
    return v >= INT32_MIN && v <= INT32_MAX;
}

/* Step 1a: accesses [k0, k0 + m) (a_seq, a_t, row point at access k0): count the kept ones per block into
 * cnt (added to it).  0, or -2 when a kept value does not fit the int32 asked for. */
int64_t pi_access_touch_count(int64_t nb, const void *seq_alloc, const void *seq_free, int32_t sa32, int64_t k0,
                              int64_t m, const int32_t *row, const int64_t *a_seq, const int64_t *a_t, int64_t *cnt,
                              int32_t seq32, int32_t t32)
{
    if (t32 && !a_t && k0 + m - 1 > INT32_MAX)
        return -2;
    for (int64_t k = 0; k < m; k++) {
        int32_t r = row[k];
        if (r >= 0 && r < nb && a_seq[k] >= col_get(seq_alloc, sa32, r) && a_seq[k] <= col_get(seq_free, sa32, r)) {
            if ((seq32 && !fits32(a_seq[k])) || (t32 && a_t && !fits32(a_t[k])))
                return -2;
            cnt[r]++;
        }
    }
    return 0;
}

/* Step 1b: accesses [k0, k0 + m): each kept one written at off[r]++ (off: where block r's next touch goes). */
void pi_access_touch_scatter(int64_t nb, const void *seq_alloc, const void *seq_free, int32_t sa32, int64_t k0,
                             int64_t m, const int32_t *row, const int64_t *a_seq, const int64_t *a_t, int64_t *off,
                             void *out_seq, void *out_t, int32_t seq32, int32_t t32)
{
    for (int64_t k = 0; k < m; k++) {     /* group by block, in access order */
        int32_t r = row[k];
        if (r >= 0 && r < nb && a_seq[k] >= col_get(seq_alloc, sa32, r) && a_seq[k] <= col_get(seq_free, sa32, r)) {
            int64_t p = off[r]++;
            col_put(out_seq, seq32, p, a_seq[k]);
            col_put(out_t, t32, p, a_t ? a_t[k] : k0 + k);
        }
    }
}

int64_t pi_access_touches(int64_t nb, const int64_t *seq_alloc, const int64_t *seq_free, int64_t na,
                          const int32_t *row, const int64_t *a_seq, const int64_t *a_t, int64_t *cnt,
                          void *out_seq, void *out_t, int32_t seq32, int32_t t32)
{
    memset(cnt, 0, (size_t)nb * sizeof(*cnt));
    int64_t rc = pi_access_touch_count(nb, seq_alloc, seq_free, 0, 0, na, row, a_seq, a_t, cnt, seq32, t32);
    if (rc < 0)
        return rc;
    int64_t *off = malloc((size_t)(nb + 1) * sizeof(*off));
    if (!off)
        return -1;
    off[0] = 0;
    for (int64_t r = 0; r < nb; r++)
        off[r + 1] = off[r] + cnt[r];
    pi_access_touch_scatter(nb, seq_alloc, seq_free, 0, 0, na, row, a_seq, a_t, off, out_seq, out_t, seq32, t32);
    free(off);
    return pi_access_touch_group(nb, cnt, out_seq, out_t, seq32, t32);
}

/* Step 1c: the touches grouped by block (cnt[r] each, block after block) ordered by seq (stable) within a block, one
 * per seq, compacted to the front; cnt[r] becomes the touches kept.  Returns their number, or -1 (memory). */
int64_t pi_access_touch_group(int64_t nb, int64_t *cnt, void *out_seq, void *out_t, int32_t seq32, int32_t t32)
{
    /* per block: in seq order (stable), one touch per seq; segments compacted to the front */
    int64_t *s = NULL, *t = NULL, *ts = NULL, *tt = NULL, cap = 0, w = 0, start = 0;
    for (int64_t r = 0; r < nb; r++) {
        int64_t n = cnt[r];
        int sorted = 1;
        for (int64_t i = 1; i < n && sorted; i++)
            sorted = col_get(out_seq, seq32, start + i) >= col_get(out_seq, seq32, start + i - 1);
        if (!sorted) {
            if (n > cap) {
                free(s);
                free(t);
                free(ts);
                free(tt);
                cap = n;
                s = malloc((size_t)cap * sizeof(*s));
                t = malloc((size_t)cap * sizeof(*t));
                ts = malloc((size_t)cap * sizeof(*ts));
                tt = malloc((size_t)cap * sizeof(*tt));
                if (!s || !t || !ts || !tt) {
                    free(s);
                    free(t);
                    free(ts);
                    free(tt);
                    return -1;
                }
            }
            for (int64_t i = 0; i < n; i++) {
                s[i] = col_get(out_seq, seq32, start + i);
                t[i] = col_get(out_t, t32, start + i);
            }
            sort_pairs(s, t, n, ts, tt);
            for (int64_t i = 0; i < n; i++) {
                col_put(out_seq, seq32, start + i, s[i]);
                col_put(out_t, t32, start + i, t[i]);
            }
        }
        int64_t kept = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t si = col_get(out_seq, seq32, start + i);
            if (kept && si == col_get(out_seq, seq32, w - 1))
                continue;
            col_put(out_seq, seq32, w, si);
            col_put(out_t, t32, w, col_get(out_t, t32, start + i));
            w++;
            kept++;
        }
        start += n;
        cnt[r] = kept;
    }
    free(s);
    free(t);
    free(ts);
    free(tt);
    return w;
}

void pi_access_intervals(int64_t nb, const int64_t *seq_alloc, const int64_t *seq_free, const int64_t *t_alloc,
                         const int64_t *t_free, const int64_t *cnt, const int64_t *seq, const int64_t *t,
                         int64_t *start_seq, int64_t *end_seq, int64_t *start_t, int64_t *end_t, int8_t *code)
{
    int64_t i = 0, k = 0;
    for (int64_t r = 0; r < nb; r++) {
        int64_t n = cnt[r];
        int64_t ps = seq_alloc[r], pt = t_alloc[r];
        for (int64_t j = 0; j <= n; j++, i++) {
            start_seq[i] = ps;
            start_t[i] = pt;
            if (j < n) {
                ps = end_seq[i] = seq[k];
                pt = end_t[i] = t[k];
                k++;
            } else {
                end_seq[i] = seq_free[r];
                end_t[i] = t_free[r];
            }
            code[i] = (int8_t)(n == 0 ? 3 : j == 0 ? 0 : j == n ? 2 : 1);
        }
    }
}
