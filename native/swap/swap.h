/*
 * swap.h — the host-swap scheduler's greedy loop (pyinterpose.analysis.swap).
 *
 * Python prepares the problem (live-bytes step function, candidate intervals,
 * transfer times, the order of a strategy) and validates every schedule with
 * its own independent checker; C only runs the greedy loop of
 * ``swap.schedule()`` on two data structures:
 *
 *  - the live-bytes curve: a segment tree over the steps with range add,
 *    range max and "first / last step above a threshold in a range", each
 *    O(log n);
 *  - each PCIe direction's busy time: a treap of disjoint busy runs (touching
 *    transfers merge) whose subtrees carry their first start, last end and the
 *    widest gap between consecutive runs, so "earliest start >= t with
 *    [s, s + dur) free" and "latest start with s + dur <= deadline" are
 *    O(log n) descents instead of walks over the runs.
 *
 * The decisions and the floating-point expressions are exactly those of the
 * Python reference (kept in tests/unit/test_swap_native.py), so the schedules
 * are identical.
 */
#ifndef PYINTERPOSE_SWAP_H
#define PYINTERPOSE_SWAP_H
#include <stdint.h>

/* BEGIN CDEF */
/* Greedy swap schedule.
 *   n_steps: steps of the live-bytes curve; steps_t[n_steps + 1] (float64 of the
 *            int64 step times), live[n_steps].
 *   n: candidates; start, end, t_out, t_in (ns, float64), size (bytes),
 *      lo_iv/hi_iv: step range [lo, hi) lying inside each candidate's interval.
 *   order[n_order]: candidate indices in priority order.
 *   budget_mode: 0 no-overhead, 1 budget (two phases: hiding swaps, then stalls).
 *   target: bytes the peak should not exceed (0 = as low as possible).
 * Output (capacity n each): for every swap kept, in acceptance order,
 *   out_idx (candidate index), out_t[7 * k ...] = out_start, out_end, free_t,
 *   realloc_t, in_start, in_end, stall.
 * Returns the number of swaps kept, or -1 when out of memory. */
int64_t pi_swap_schedule(int64_t n_steps, const double *steps_t, const int64_t *live,
                         int64_t n, const double *start, const double *end, const int64_t *size,
                         const double *t_out, const double *t_in, const int64_t *lo_iv,
                         const int64_t *hi_iv, int64_t n_order, const int64_t *order,
                         int budget_mode, int64_t target, int64_t *out_idx, double *out_t);
/* END CDEF */

#endif
