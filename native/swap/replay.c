/*
 * replay.c — a swap schedule played on a discrete-event model of the GPU; see swap.h.
 *
 * Ops and transfers are visited once, in one order where everything an item depends on comes
 * first: ops by release (R, seq), each transfer after the ops released by its planned time.
 * That order is valid because a schedule never makes an op wait for a transfer planned to start
 * at or after the op's release, nor a transfer wait for an op released after its planned start
 * (the validator checks both).  While no stream carries a delay, the ops between two items that
 * matter (a waiting op, a transfer) all start on time and are skipped: a replay costs the swaps
 * plus the ops inside delayed stretches, not the whole run.
 */
#include "swap.h"
#include "bound.h"

#include <math.h>
#include <stdlib.h>

#define TOL_NS 1e-3     /* waits shorter than this are rounding, not delays */

/* how late the timeline runs at time t, from op k (released by t): its delay, less the idle
 * time between its recorded end and t (which absorbs a delay as it does on the stream) */
static double shift_at(const double *R, const double *dur, const double *delay, int64_t k, double t) {
    if (k < 0 || !(delay[k] > 0.0)) return 0.0;
    double idle = t - (R[k] + dur[k]);
    double d = delay[k] - (idle > 0.0 ? idle : 0.0);
    return d > 0.0 ? d : 0.0;
}

int pi_swap_replay(pi_swap_replay_args *a) {
    /* the model's names (swap.h): R release, ord release order, xf swaps, x_* transfers, w_* waits */
    const int64_t n_ops = a->n_ops, n_sw = a->n_swaps, n_x = a->n_transfers, n_w = a->n_waits;
    const double *R = a->release, *dur = a->dur;
    const int32_t *sprev = a->stream_prev, *snext = a->stream_next, *ord = a->release_order;
    const pi_swap_xfer *xf = a->swaps;
    const int64_t *x_sw = a->transfer_swap, *x_pos = a->transfer_pos;
    const int8_t *x_dir = a->transfer_dir;
    const int64_t *w_sw = a->wait_swap, *w_pos = a->wait_pos;
    const int8_t *w_dir = a->wait_dir;
    double *delay = a->delay, *sw_t = a->swap_times;
    double d2h_free = -INFINITY, h2d_free = -INFINITY;
    double rec_end = -INFINITY, new_end = -INFINITY;
    if (a->rec_end_known) {
        rec_end = a->rec_end;       /* an earlier replay's: every op not read again (issue 30) */
    } else {
        for (int64_t i = 0; i < n_ops; i++) {
            double e = R[i] + dur[i];
            if (e > rec_end) rec_end = e;
        }
        a->rec_end = rec_end;
        a->rec_end_known = 1;
    }
    a->delayed = 0;
    for (int64_t k = 0; k < n_sw; k++) {
        double *o = sw_t + 5 * k;
        o[0] = o[1] = o[2] = o[3] = NAN;
        o[4] = 0.0;
    }
    /* ops whose delay is > 0 and whose stream successor is not visited yet: while there are
     * none, every op until the next waiting op or transfer starts on time */
    int64_t outstanding = 0;
    char *counted = calloc((size_t)(n_ops > 0 ? n_ops : 1), 1);
    if (!counted) return -1;
    int64_t j = 0, xi = 0, wi = 0;
    while (j < n_ops || xi < n_x) {
        if (xi < n_x && x_pos[xi] <= j) {            /* a transfer: its ops are visited */
            int64_t k = x_sw[xi];
            const pi_swap_xfer *x = &xf[k];
            double *o = sw_t + 5 * k;
            if (x_dir[xi] == 0) {
                double issue = x->out_start + shift_at(R, dur, delay, x->out_anchor, x->out_start);
                double s = issue > d2h_free ? issue : d2h_free;
                o[0] = s;
                o[1] = s + x->t_out;
                d2h_free = o[1];
            } else {
                double issue = x->in_start + shift_at(R, dur, delay, x->in_anchor, x->in_start);
                double s = issue > h2d_free ? issue : h2d_free;
                if (!isnan(o[1]) && o[1] > s) s = o[1];
                o[2] = s;
                o[3] = s + x->t_in;
                h2d_free = o[3];
            }
            xi++;
            continue;
        }
        if (j >= n_ops) break;
        if (outstanding == 0) {                      /* skip the ops that start on time */
            int64_t nxt = n_ops;
            if (wi < n_w && w_pos[wi] < nxt) nxt = w_pos[wi];
            if (xi < n_x && x_pos[xi] < nxt) nxt = x_pos[xi];
            if (nxt > j) {
                j = nxt;
                continue;
            }
        }
        int64_t i = ord ? ord[j] : j;
        double d = 0.0;
        int64_t pv = sprev ? sprev[i] : i - 1;
        if (pv >= 0 && counted[pv]) {
            outstanding--;
            counted[pv] = 0;
            double gap = R[i] - (R[pv] + dur[pv]);    /* idle time on the stream absorbs a delay */
            d = delay[pv] - (gap > 0.0 ? gap : 0.0);
            if (d < 0.0) d = 0.0;
        }
        double base = R[i] + d;
        for (; wi < n_w && w_pos[wi] == j; wi++) {
            double *o = sw_t + 5 * w_sw[wi];
            double x = w_dir[wi] == 0 ? o[1] : o[3];
            if (!(x - base > TOL_NS)) continue;
            o[4] += x - base;                          /* the wait this transfer caused */
            if (x - R[i] > d) d = x - R[i];
        }
        if (!(d > TOL_NS)) d = 0.0;
        if (d > 0.0) {
            /* each op is visited once and delay[] starts zeroed: only the late ones are written */
            delay[i] = d;
            a->delayed++;
            double e = R[i] + dur[i] + d;
            if (e > new_end) new_end = e;
            if (snext ? snext[i] >= 0 : i + 1 < n_ops) {   /* its successor on the stream must be visited */
                counted[i] = 1;
                outstanding++;
            }
        }
        j++;
    }
    free(counted);
    a->slowdown = new_end > rec_end ? new_end - rec_end : 0.0;
    return 0;
}

/* Event i's delta: ev_d[i], or from the running sums (ev_d NULL). */
static inline int64_t ev_delta(const pi_swap_peak_args *a, int64_t i) {
    if (a->ev_d) return a->ev_d[i];
    return a->ev_cum[i] - (i ? a->ev_cum[i - 1] : 0);
}

/* The event's time on the replayed timeline before the running max: its recorded time moved by
 * its anchor op's delay (an allocation's: the first op released at or after it; a free's: the
 * last op released by it; none: not moved).  *k_lo / *k_hi: the last searches' answers (hints). */
static double moved_time(const pi_swap_peak_args *a, int64_t i, int64_t *k_lo, int64_t *k_hi) {
    double t = (double)a->ev_t[i];
    int64_t k;
    if (ev_delta(a, i) > 0) {
        k = *k_lo = gallop_bound(a->release_sorted, a->n_ops, t, *k_lo, 0);
        if (k >= a->n_ops) return t;
    } else {
        *k_hi = gallop_bound(a->release_sorted, a->n_ops, t, *k_hi, 1);
        k = *k_hi - 1;
        if (k < 0) return t;
    }
    return t + a->delay[a->release_order ? a->release_order[k] : k];
}

int64_t pi_swap_replayed_peak(pi_swap_peak_args *a) {
    const int64_t n_ev = a->n_ev, n_sw = a->n_sw;
    const int moved = a->moved && a->n_ops > 0;
    int64_t best = 0, ev_sum = 0, sw_sum = 0, i = 0, j = 0, k_lo = 0, k_hi = 0;
    double run_max = -INFINITY, te = INFINITY;
    if (!a->started) {
        if (n_ev) {
            te = moved ? moved_time(a, 0, &k_lo, &k_hi) : (double)a->ev_t[0];
            run_max = te;
        }
        a->started = 1;
    } else {                        /* the state the last call stopped in */
        best = a->best, ev_sum = a->ev_sum, sw_sum = a->sw_sum, i = a->i, j = a->j;
        k_lo = a->k_lo, k_hi = a->k_hi, run_max = a->run_max, te = a->te;
    }
    /* every instant of the union of the events' (moved) times and the swaps' times, in order:
     * everything at or before it summed, the largest such sum kept */
    while (i < n_ev || j < n_sw) {
        if (i < n_ev && i >= a->ev_stop) {          /* a piece's end: at an instant's start */
            a->best = best, a->ev_sum = ev_sum, a->sw_sum = sw_sum, a->i = i, a->j = j;
            a->k_lo = k_lo, a->k_hi = k_hi, a->run_max = run_max, a->te = te;
            return best;
        }
        double tau = (i < n_ev && (j >= n_sw || te <= a->sw_t[j])) ? te : a->sw_t[j];
        while (i < n_ev && te == tau) {
            ev_sum += ev_delta(a, i);
            i++;
            if (i < n_ev) {
                if (moved) {
                    te = moved_time(a, i, &k_lo, &k_hi);
                    if (te < run_max) te = run_max;       /* none moves before the one before it */
                    run_max = te;
                } else {
                    te = (double)a->ev_t[i];
                }
            }
        }
        while (j < n_sw && a->sw_t[j] == tau) sw_sum += a->sw_d[j++];
        if (ev_sum + sw_sum > best) best = ev_sum + sw_sum;
    }
    a->i = i, a->j = j, a->best = best;
    a->done = 1;
    return best;
}

void pi_swap_search_sorted(const double *a, int64_t n_a, const double *x, int64_t n_x, int right, int64_t *out) {
    int64_t k = 0;
    for (int64_t j = 0; j < n_x; j++) {
        k = gallop_bound(a, n_a, x[j], k, right);
        out[j] = k;
    }
}
