/*
 * planner.h — the offset planners' inner loops (pyinterpose.analysis.pools).
 *
 * Problem form (MiniMalloc's): n buffers, buffer i lives over the half-open
 * interval [lower[i], upper[i]) and needs size[i] bytes.  A plan gives every
 * buffer an offset so that buffers whose lifetimes overlap are disjoint in
 * address.  Python prepares orders, splits problems into independent pieces,
 * drives capacities and time limits, and validates every plan; C only runs
 * the two hot loops:
 *
 *  - pi_greedy_place: place buffers one at a time in a given order, each in
 *    the best-fitting (or first-fitting) gap among the already placed buffers
 *    that overlap it in time, else on top of them (SmartPool, TFLite greedy by
 *    size, XLA's heap simulator).  A segment tree over time keeps, per node,
 *    the merged address spans of the blocks stored there and of its subtree,
 *    so a query unions O(log T) already-merged span sets instead of visiting
 *    every overlapping block.
 *
 *  - pi_dsa_*: an exact depth-first search in the spirit of MiniMalloc
 *    (Moffitt, ASPLOS'23): canonical placements only (each buffer at its lowest
 *    viable offset, placements in non-decreasing offset, ties by static order),
 *    cross-section inference (per maximal clique of live buffers: floor +
 *    unplaced total <= capacity, monotonic floor, floors lifted by the lowest
 *    viable offset of unplaced members), dominance (no buffer placed at or above
 *    the lowest height any unplaced buffer could reach), dynamic ordering by
 *    lowest viable offset, static preorder given by the caller, node limit and
 *    wall-clock deadline.  Written from the paper's and repository's description.
 */
#ifndef PYINTERPOSE_PLANNER_H
#define PYINTERPOSE_PLANNER_H
#include <stdint.h>

/* BEGIN CDEF */
typedef struct pi_dsa pi_dsa;

/* Greedy placement in `order` (a permutation of 0..n-1).  best_fit=1: the
 * smallest gap that fits (lowest offset on ties); 0: the lowest gap that fits.
 * Writes offsets_out[n]; returns the height (max offset+size), -1 on no memory. */
int64_t pi_greedy_place(int n, const int64_t *lower, const int64_t *upper, const int64_t *size,
                        const int32_t *order, int best_fit, int64_t *offsets_out);

/* Build the search context (sweep: maximal cross sections, overlaps). NULL on no memory. */
pi_dsa *pi_dsa_new(int n, const int64_t *lower, const int64_t *upper, const int64_t *size);
void pi_dsa_free(pi_dsa *d);
int pi_dsa_nsections(const pi_dsa *d);
/* Per buffer: the largest section total (sum of sizes live at once) it touches. */
void pi_dsa_totals(const pi_dsa *d, int64_t *total_out);
/* Largest section total (LOAD). */
int64_t pi_dsa_load(const pi_dsa *d);

/* Search for a packing within `capacity` using static `preorder` (a permutation
 * of 0..n-1, most important first).  When the search splits into independent
 * groups (dynamic temporal decomposition) each group is re-ranked by
 * `heuristic` (letters W width, A area, T section total, Z size, all descending;
 * NULL or "" keeps the restriction of `preorder`).  Stops after node_limit nodes (<=0: none),
 * `seconds` of wall time (<=0: none), or as soon as *stop (NULL: never) turns non-zero
 * (another search running in parallel got the answer; reported as 3).
 * Returns 1 found (offsets_out filled), 0 proven infeasible, 2 node limit hit,
 * 3 deadline hit or stopped, -1 no memory.  nodes_out[0] += nodes visited.
 * Contexts are independent: searches on different contexts may run in parallel threads. */
int pi_dsa_search(pi_dsa *d, int64_t capacity, const int32_t *preorder, const char *heuristic,
                  int64_t node_limit, double seconds, const volatile int32_t *stop,
                  int64_t *offsets_out, int64_t *nodes_out);
/* Check a plan (validate.c, independent of the planners): buffers with
 * overlapping half-open lifetimes must not overlap in [offset, offset+size).
 * Returns 0 valid, 1 conflict (conflict_out = the two buffers), -1 no memory. */
int pi_validate_plan(int n, const int64_t *lower, const int64_t *upper, const int64_t *size,
                     const int64_t *offsets, int32_t *conflict_out);
/* END CDEF */

#endif
