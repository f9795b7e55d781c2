/*
 * swap.h — the host-swap scheduler's greedy loop (pyinterpose.analysis.swap).
 *
 * Python prepares the problem (live-bytes step function, candidate intervals,
 * transfer times, the order of a strategy) and validates every schedule with
 * its own independent checker; C only runs the greedy loop of
 * ``swap.schedule()`` on two data structures:
 *
 *  - the live-bytes curve over the steps that stand above the target (the
 *    others never matter: swaps only lower the curve): a 64-ary tree with range
 *    add, range max and "first / last step above a threshold in a range" (each
 *    query reads a few contiguous blocks of 64 values and one path of nodes);
 *  - each PCIe direction's busy time: disjoint busy runs (touching transfers
 *    merge) in sorted blocks of at most 128, with each block's first start, last
 *    end and widest gap between its runs, so "earliest start >= t with
 *    [s, s + dur) free" and "latest start with s + dur <= deadline" bisect the
 *    blocks and walk the runs, stepping over a block when no gap in it fits.
 *
 * The decisions and the floating-point expressions are exactly those of the
 * Python reference (kept in tests/unit/test_swap_native.py), so the schedules
 * are identical.
 */
#ifndef PYINTERPOSE_SWAP_H
#define PYINTERPOSE_SWAP_H
#include <stdint.h>

/* BEGIN CDEF */
/* One candidate interval, as the scheduler reads it (48 bytes; packed in visiting order). */
typedef struct {
    double start, end, t_out, t_in;   /* previous access, next access, transfer times (ns) */
    int64_t size;                     /* bytes */
    int32_t lo, hi;                   /* hot steps [lo, hi) lying inside [start, end) */
} pi_swap_cand;

/* Greedy swap schedule.
 *   n_hot: the "hot" steps of the live-bytes curve (value > target; the others can never
 *          stand above the target, since swaps only lower the curve); per hot step k:
 *          hot_t[k] its start, hot_end[k] its end (float64 of the int64 step times),
 *          hot_live[k] its live bytes.
 *   cand[n]: the candidates in priority order (those that can never help removed).
 *   hide_pos[n_hide]: positions in cand, increasing, of the candidates whose transfers can
 *          hide (start <= end - t_in - t_out), visited by the hiding pass; NULL: all of them.
 *   budget_mode: 0 no-overhead, 1 budget (two phases: hiding swaps, then stalls).
 *   target: bytes the peak should not exceed (0 = as low as possible).
 * Output (capacity n each): for every swap kept, in acceptance order,
 *   out_pos (position in cand), out_t[7 * k ...] = out_start, out_end, free_t,
 *   realloc_t, in_start, in_end, stall.
 * Returns the number of swaps kept, or -1 when out of memory. */
int64_t pi_swap_schedule(int64_t n_hot, const double *hot_t, const double *hot_end, const int64_t *hot_live,
                         int64_t n, const pi_swap_cand *cand, int64_t n_hide, const int64_t *hide_pos,
                         int budget_mode, int64_t target, int64_t *out_pos, double *out_t);

/* pi_swap_schedule with the candidate at position i read from cand[cand_at[i]] (cand_at NULL:
 * cand[i]): the records are shared by every run and each run passes its visiting order only.
 * drop_hot_live 1: hot_live is clean pages of a shared file map (the caller checked), given back
 * (madvise MADV_DONTNEED, whole pages inside it) once the curve has its copy: never read again. */
int64_t pi_swap_schedule_at(int64_t n_hot, const double *hot_t, const double *hot_end, const int64_t *hot_live,
                            int64_t n, const pi_swap_cand *cand, const int32_t *cand_at, int64_t n_hide,
                            const int64_t *hide_pos, int budget_mode, int64_t target, int64_t *out_pos,
                            double *out_t, int drop_hot_live);

/* ---- replay (replay.c): a schedule played on a discrete-event model of the GPU ----------
 *
 * The compute ops (launches, copies) are released at their recorded start R[i] and keep their
 * stream for dur[i]; an op starts late (delay[i] > 0) when the op before it on its stream ends
 * late, or when it waits for a transfer: a swap-in of a block it accesses (its next access) or
 * the swap-out of a block whose memory must be free before it runs (the budget mode's gate).
 * A delay is absorbed by the idle time before the next op on the stream.  One D2H and one H2D
 * engine serve their transfers in planned order (FIFO); a transfer is issued at its planned
 * time shifted by how late the timeline runs then: its anchor op's delay (the swap-out's: the
 * block's previous access; the swap-in's: the last op released by its planned start) less the
 * idle time between that op's end and the planned time; it starts once its engine is free (a
 * swap-in also once its own swap-out has ended). */
typedef struct {
    double out_start, in_start;       /* planned issue times (ns, the trace's clock) */
    double t_out, t_in;               /* transfer durations */
    int64_t out_anchor, in_anchor;    /* op whose delay shifts the issue (-1: none) */
} pi_swap_xfer;

/* One replay's problem and its outputs (pi_swap_replay). */
typedef struct {
    /* the compute ops, in seq order */
    int64_t n_ops;
    const double *release;             /* recorded start of each op (ns) */
    const double *dur;                 /* how long it keeps its stream */
    const int32_t *stream_prev;        /* previous / next op on its stream (-1 none); both NULL: */
    const int32_t *stream_next;        /*   one stream, in seq order */
    const int32_t *release_order;      /* op indices in release order (release, seq); NULL: seq order */
                                       /* (int32: fewer than 2**31 ops, checked by the caller) */
    /* the swaps */
    int64_t n_swaps;
    const pi_swap_xfer *swaps;
    /* their 2 n_swaps transfers, in planned order */
    int64_t n_transfers;
    const int64_t *transfer_swap;      /* the swap it moves */
    const int8_t *transfer_dir;        /* 0 out (D2H), 1 in (H2D) */
    const int64_t *transfer_pos;       /* how many ops, in release order, are released by its planned time */
    /* the waits, by wait_pos: the op at release position wait_pos waits for swap wait_swap's out end
     * (wait_dir 0) or in end (1) */
    int64_t n_waits;
    const int64_t *wait_swap;
    const int8_t *wait_dir;
    const int64_t *wait_pos;
    int rec_end_known;                 /* 1: rec_end below is the recorded end (an earlier replay's), */
    double rec_end;                    /*   not read again from every op; 0: computed and written here */
    /* outputs */
    double *delay;                     /* [n_ops], zeroed by the caller: how late each op starts (only the */
                                       /*   ops that start late are written: untouched zero pages stay so) */
    double *swap_times;                /* [5 n_swaps]: out start, out end, in start, in end, wait caused (ns) */
    double slowdown;                   /* how much later the last op ends */
    int64_t delayed;                   /* how many ops start late (delay > 0) */
} pi_swap_replay_args;

/* Replays one schedule: fills a's outputs.  0, or -1 (out of memory). */
int pi_swap_replay(pi_swap_replay_args *a);

/* The peak of live bytes on a replayed timeline (pi_swap_replayed_peak): the memory events, each
 * moved by its anchor op's delay and never before the event before it, and the swaps' releases and
 * retakes at their replayed times, merged in time order. */
typedef struct {
    int64_t n_ev;
    const int64_t *ev_t;               /* the memory events' recorded times (ns), ascending */
    const int64_t *ev_d;               /* their deltas: +size (an allocation) or -size (a free); NULL: ev_cum's */
    int64_t n_ops;
    const double *release_sorted;      /* the ops' release times, ascending */
    const int32_t *release_order;      /* the op at each release position; NULL: the same index */
    const double *delay;               /* [n_ops], by op: how late it starts */
    int moved;                         /* 0: no op is late (no event moves) */
    int64_t n_sw;
    const double *sw_t;                /* the swaps' events' replayed times, ascending */
    const int64_t *sw_d;               /* their deltas (-size at a release, +size at a retake) */
    const int64_t *ev_cum;             /* with ev_d NULL: the running sum after each event (ev_d[i] =
                                          ev_cum[i] - ev_cum[i - 1], ev_cum[-1] = 0; issue 30: no deltas held) */
    /* in pieces (issue 30: the caller gives back the pages read between calls): each call stops at the
     * first instant whose first event is at or after ev_stop (n_ev: runs to the end); the merge's
     * state, zeroed by the caller before the first call, carries on from one call to the next */
    int64_t ev_stop;
    int started, done;                 /* done: every instant merged (the peak is the return value) */
    int64_t i, j, k_lo, k_hi, best, ev_sum, sw_sum;
    double te, run_max;
} pi_swap_peak_args;

/* max(0, largest sum of every delta at or before an instant), over the instants of both (so far: the
 * whole merge once a->done). */
int64_t pi_swap_replayed_peak(pi_swap_peak_args *a);

/* np.searchsorted(a, x, side) for needles x in ascending order: out[j] = the first k with a[k] > x[j]
 * (right 1) or a[k] >= x[j] (right 0), a ascending (n_a values); each search gallops on from the
 * answer before it. */
void pi_swap_search_sorted(const double *a, int64_t n_a, const double *x, int64_t n_x, int right, int64_t *out);
/* END CDEF */

#endif
