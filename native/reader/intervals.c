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

int64_t pi_access_touches(int64_t nb, const int64_t *seq_alloc, const int64_t *seq_free, int64_t na,
                          const int32_t *row, const int64_t *a_seq, const int64_t *a_t, int64_t *cnt,
                          int64_t *out_seq, int64_t *out_t)
{
    int64_t *off = malloc((size_t)(nb + 1) * sizeof(*off));
    if (!off)
        return -1;
    memset(cnt, 0, (size_t)nb * sizeof(*cnt));
    for (int64_t k = 0; k < na; k++) {
        int32_t r = row[k];
        if (r >= 0 && r < nb && a_seq[k] >= seq_alloc[r] && a_seq[k] <= seq_free[r])
            cnt[r]++;
    }
    off[0] = 0;
    for (int64_t r = 0; r < nb; r++)
        off[r + 1] = off[r] + cnt[r];
    for (int64_t k = 0; k < na; k++) {     /* group by block, in access order */
        int32_t r = row[k];
        if (r >= 0 && r < nb && a_seq[k] >= seq_alloc[r] && a_seq[k] <= seq_free[r]) {
            int64_t p = off[r]++;
            out_seq[p] = a_seq[k];
            out_t[p] = a_t ? a_t[k] : k;
        }
    }
    /* per block: in seq order (stable), one touch per seq; segments compacted to the front */
    int64_t *ts = NULL, *tt = NULL, cap = 0, w = 0, start = 0;
    for (int64_t r = 0; r < nb; r++) {
        int64_t n = cnt[r];
        int64_t *s = out_seq + start, *t = out_t + start;
        int sorted = 1;
        for (int64_t i = 1; i < n && sorted; i++)
            sorted = s[i] >= s[i - 1];
        if (!sorted) {
            if (n > cap) {
                free(ts);
                free(tt);
                cap = n;
                ts = malloc((size_t)cap * sizeof(*ts));
                tt = malloc((size_t)cap * sizeof(*tt));
                if (!ts || !tt) {
                    free(ts);
                    free(tt);
                    free(off);
                    return -1;
                }
            }
            sort_pairs(s, t, n, ts, tt);
        }
        int64_t kept = 0;
        for (int64_t i = 0; i < n; i++) {
            if (kept && s[i] == out_seq[w - 1])
                continue;
            out_seq[w] = s[i];
            out_t[w] = t[i];
            w++;
            kept++;
        }
        start += n;
        cnt[r] = kept;
    }
    free(ts);
    free(tt);
    free(off);
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
