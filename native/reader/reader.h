/*
 * reader.h — the trace reader's record pass (pyinterpose.trace.reader).
 *
 * Python finds the chunks of a trace file, checks and inflates them (on
 * threads: zlib releases the GIL; this C links no zlib) and hands the records
 * of every EVENTS chunk, in file order, to pi_split_feed.  One pass over the
 * records splits them by op into what the tables need, so the whole record
 * stream is never held in memory:
 *
 *  - whole records (64 bytes, struct pi_event) with their pid for the rarer
 *    ops: successful allocations, launches (and graph launches), successful copies/memsets and
 *    advise/prefetch hints, failed calls, and the "side" records (strings and
 *    their text, markers, call sites, frames, stacks, notes, device-clock states) and the device
 *    activities (GPU records: their times are the device's, kept out of the time range);
 *  - the accesses (the most numerous records) as narrow columns, each with
 *    the seq, time, op and launch row of the record it follows (its owner);
 *  - counts per op, per API, the time range and each process's last seq.
 *
 * In the same pass allocations are paired with frees (a hash map of the live
 * blocks per (pid, address family, key): a free ends the live allocation of
 * its key, an allocation of a key still live supersedes it) and each access
 * finds its block among the live ones (hash map per (pid, seq of the ALLOC)):
 * both maps hold only the live blocks, so they stay small and in cache.  Seq
 * order is file order for the drain's traces; when not, pi_split_finish pairs
 * again after sorting by seq.  pi_resolve_chunk then gives each access its
 * block id (the rare access to a block no longer live: by a full map), drops
 * the unresolved ones and counts the accesses of each launch, a chunk of
 * accesses at a time.  Tables are in file order; Python regroups them by pid
 * when processes' chunks interleave.
 *
 * For a large trace (pi_split_spill) every record table but the allocations,
 * and the accesses, go to files during the pass: the pass then holds the
 * allocations and the live blocks only, and Python builds one table at a time
 * from the files (issue 30: the first read of 100 M events).
 */
#ifndef PYINTERPOSE_READER_H
#define PYINTERPOSE_READER_H
#include <stdint.h>

/* BEGIN CDEF */
typedef struct pi_rtab {        /* whole records of one kind, file order */
    void *rec;                  /* n * 64 bytes (struct pi_event); NULL when spilled */
    int32_t *pid;
    int64_t n, cap;
    void *f_rec, *f_pid;        /* FILE *: the table spilled to files (pi_split_spill), else NULL */
} pi_rtab;

typedef struct pi_acc {         /* one ACCESS record, with what it needs from its owner (40 bytes) */
    int64_t ref;                /* the ALLOC's seq (record aux) */
    int64_t seq;                /* seq of the owner (the last non-ACCESS record of the pid) */
    int64_t t;                  /* owner's t_ns */
    int32_t pid;
    int32_t row;                /* row in `alloc` of the block, when it was live at the access; else -1 */
    int32_t launch;             /* owner's row in `launch` (-1: not a launch) */
    uint16_t flags;
    uint8_t op;                 /* owner's op, clipped to 0..15 */
    uint8_t pad;
} pi_acc;

typedef struct pi_split {
    pi_rtab alloc, launch, copy, hint, fail, side;
    pi_rtab gpu;                /* device activities (PI_OP_GPU; CLOCK records go to side) */
    /* per allocation (row of `alloc`): how it ended (0 never freed, 1 freed, 2 superseded by another
     * allocation of the same key) and the t_ns and seq of the event that ended it */
    int8_t *al_status;
    int64_t *al_end_t, *al_end_seq;
    int64_t unmatched_free;     /* frees that ended no allocation */
    int64_t n_free;             /* successful frees with a key */
    /* accesses: one pi_acc per ACCESS record, in `acc` or (spilled) in the file f_acc */
    pi_acc *acc;
    int64_t a_n, a_cap, a_pending;
    void *f_acc;
    int64_t n_events;
    int64_t t_min, t_max;       /* of t_ns as int64 */
    int64_t op_count[64];       /* records per op (op >= 63 counted in 63) */
    int64_t op_ok[64];          /* ... whose result is 0 */
    int64_t api_count[65536];   /* call records (alloc, free, launch, ...) per API id */
    int32_t interleaved;        /* a chunk of a smaller pid came after a larger one */
    int32_t seq_disorder;       /* a pid's seq did not grow in file order: pair again in seq order */
    int32_t last_pid;
    int32_t oom;
    int64_t n_pids, cap_pids;   /* per process state, in order of first appearance */
    int32_t *pp_pid;
    int64_t *pp_last_seq;       /* seq of its last record */
    int64_t *pp_count;          /* its records */
    int64_t *pp_own_seq, *pp_own_t, *pp_own_launch;
    int32_t *pp_own_op;         /* -1: no record yet */
    void *internal;             /* hash maps of the live blocks, the frees */
} pi_split;

pi_split *pi_split_new(void);
/* Before the first feed: write every record table but `alloc` and the accesses to files in dir
 * (NAME.rec, NAME.pid, acc.bin) instead of memory, so that the pass holds only the allocations and
 * its hash maps of the live blocks.  0, or -1 (a file could not be made). */
int pi_split_spill(pi_split *s, const char *dir);
/* Split n records (64 bytes each, any alignment) of process pid.  0, or -1 when out of memory. */
int pi_split_feed(pi_split *s, const void *records, int64_t n, int32_t pid);
/* pi_split_feed of k runs of records in turn (run i: n[i] records at records[i], of process pid[i]):
 * one call for many chunks.  0, or -1 when out of memory. */
int pi_split_feed_many(pi_split *s, void *const *records, const int64_t *n, const int32_t *pid, int64_t k);
/* After the last feed: pair allocations with frees again in seq order if the file's order was not
 * that (seq_disorder), drop the pass's hash maps, give each table its exact size and close the spill
 * files (every record written).  0 or -1 (memory, or a spill file could not be written). */
int pi_split_finish(pi_split *s);
/* Free the split and every buffer still attached to it (Python takes a buffer by NULLing its pointer). */
void pi_split_free(pi_split *s);
void pi_free(void *p);

/* The blocks by (pid, seq of their ALLOC): the map pi_resolve_chunk uses for an access whose block
 * was not live at the access (or every access when the file was not in seq order).  nb rows; the
 * smallest id wins on a duplicate key.  NULL when out of memory. */
void *pi_blockmap_new(const int32_t *bpid, const int64_t *bseq, const int64_t *bid, int64_t nb);
void pi_blockmap_free(void *m);

/* Resolve n accesses (pi_acc, in file order) to block ids: through row and row_block (alloc row ->
 * block id) when use_row and the block was live at the access, else by (pid, ref) in map (NULL: none).
 * Drops the accesses of no block (kept rows keep their order) and writes the kept ones to the o_
 * columns: block id, pid, seq, t - t0, kernel (launch_kernel[launch], or -1), op, flags; counts
 * n_access[launch]++ per kept access of a launch row.  Returns the accesses kept. */
int64_t pi_resolve_chunk(const pi_acc *acc, int64_t n, int32_t use_row, const int64_t *row_block, const void *map,
                         const int32_t *launch_kernel, int64_t n_launch, int32_t *n_access, int64_t t0,
                         int32_t *o_block, int32_t *o_pid, int64_t *o_seq, int64_t *o_t, int32_t *o_kernel,
                         int8_t *o_op, uint16_t *o_flags);

/* Access intervals (pyinterpose.analysis.access), step 1.  nb blocks (seq_alloc, seq_free); na accesses
 * with their block row (-1: none), seq and t.  Keeps the accesses inside their block's
 * [seq_alloc, seq_free], groups them by block (stable), orders each block's by seq (stable) and keeps
 * the first of equal seqs: writes cnt[nb] (accesses kept per block) and, block after block, their
 * seq and t in out_seq/out_t (room for na); a_t NULL: t is the access's row k (the device clock reads its
 * times later, a piece at a time).  out_seq / out_t hold int32 values when seq32 / t32 (else int64):
 * -2 when a kept value does not fit (nothing is written then: the caller asks again in int64).
 * Returns the accesses kept, or -1 (memory), or -2. */
int64_t pi_access_touches(int64_t nb, const int64_t *seq_alloc, const int64_t *seq_free, int64_t na,
                          const int32_t *row, const int64_t *a_seq, const int64_t *a_t, int64_t *cnt,
                          void *out_seq, void *out_t, int32_t seq32, int32_t t32);
/* The same in three steps, so that a caller may read the accesses a range at a time (giving their pages
 * back between ranges): count (cnt zeroed by the caller, added to), scatter (off: where each block's next
 * touch goes, advanced), group (returns the touches kept, or -1).  k0: the row of the first access of the
 * range (a_seq, a_t, row point at it); seq_alloc/seq_free: int32 (sa32) or int64 per block. */
int64_t pi_access_touch_count(int64_t nb, const void *seq_alloc, const void *seq_free, int32_t sa32, int64_t k0,
                              int64_t m, const int32_t *row, const int64_t *a_seq, const int64_t *a_t, int64_t *cnt,
                              int32_t seq32, int32_t t32);
void pi_access_touch_scatter(int64_t nb, const void *seq_alloc, const void *seq_free, int32_t sa32, int64_t k0,
                             int64_t m, const int32_t *row, const int64_t *a_seq, const int64_t *a_t, int64_t *off,
                             void *out_seq, void *out_t, int32_t seq32, int32_t t32);
int64_t pi_access_touch_group(int64_t nb, int64_t *cnt, void *out_seq, void *out_t, int32_t seq32, int32_t t32);
/* Step 2: the intervals [alloc, touches...] -> [touches..., free] of every block, block after block
 * (m = touches + nb rows): start/end seq and t, and the kind code (0 alloc_to_first, 1 between,
 * 2 last_to_free, 3 unaccessed). */
void pi_access_intervals(int64_t nb, const int64_t *seq_alloc, const int64_t *seq_free, const int64_t *t_alloc,
                         const int64_t *t_free, const int64_t *cnt, const int64_t *seq, const int64_t *t,
                         int64_t *start_seq, int64_t *end_seq, int64_t *start_t, int64_t *end_t, int8_t *code);
/* END CDEF */

#endif
