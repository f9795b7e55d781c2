/*
 * bound.h — a search both the scheduler (swap.c) and the replay (replay.c) use; not part of the
 * cffi interface (swap.h's CDEF block).
 */
#ifndef PI_SWAP_BOUND_H
#define PI_SWAP_BOUND_H

#include <stdint.h>

/* First k with a[k] >= x (upper 0) or a[k] > x (upper 1), from a hint: gallop from `hint` to bracket the answer, then
 * bisect inside the bracket (same result as the plain searches; O(log d) for an answer d
 * steps from the hint, and the steps of one interval are few and close in memory). */
static inline int64_t gallop_bound(const double *a, int64_t n, double x, int64_t hint, int upper) {
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

#endif
