/*
 * cupti_parse.h — turning completed CUPTI activity buffers into device activities joined to the
 * shim's own events (used by cupti.c; self-contained so tests/c/cupti_parse_check.c can drive it with
 * hand-made buffers).
 *
 * The join has two steps.  Around every interposed launch/copy/memset/graph launch the shim pushes
 * the seq of that call's event as an external correlation id (kind CUSTOM2); CUPTI then writes an
 * EXTERNAL_CORRELATION record pairing that id with its own correlationId, and the kernel / memcpy /
 * memset records of the call carry the same correlationId (kernels replayed from a graph carry the
 * graph launch's).  The map keeps correlationId -> external id for a window of recent ids; an
 * activity whose pairing has not been seen yet waits in a pending list until the pairing comes (buffers
 * are parsed in the order CUPTI handed them over, but a pairing may still come in a later buffer than
 * its activity), or the final drain.  The list is bounded (PI_GPU_PENDING_MAX): past it the oldest
 * quarter goes out unmatched, counted in `evicted` (the shim writes a NOTE saying so).
 *
 * Nested API calls.  A device record carries the correlationId of the OUTERMOST API call that made it:
 * a runtime call's (cudaLaunchKernel, in libcudart or a cudart linked into cuBLAS) when the driver call
 * (cuLaunchKernel) was made inside one.  Where the shim interposes only the driver call — the runtime
 * call reached libcudart without passing through the shim — its id is pushed inside the runtime call,
 * and CUPTI pairs it with the inner DRIVER record's correlationId only, which no device record carries.
 * So the API records are kept too, for a few recent calls per thread (PI_API_THREADS threads,
 * PI_API_SPANS calls of each kind): a RUNTIME record with no pairing of its own gets the pairing of a DRIVER
 * record of the same process and thread whose [start, end] lies inside its own.  The three records (the
 * pairing, the driver record, the runtime record) may come in any order and in different buffers: the
 * link is made when the last of them is parsed, and waiting activities are tried again.  Counted in
 * `nested` (the shim notes it).
 */
#ifndef PI_CUPTI_PARSE_H
#define PI_CUPTI_PARSE_H
#include <stddef.h>
#include <stdint.h>

#include "pi_cupti.h"

typedef struct pi_gpu_act {
    uint64_t start, end;      /* CUPTI clock, ns */
    uint64_t bytes;           /* memcpy / memset */
    uint64_t graph_node;      /* 0 unless replayed from a graph */
    uint64_t ext;             /* external id (the event's seq); 0 = none matched */
    const char *name;         /* kernels: CUPTI's name (shared by CUPTI, valid while the session is) */
    uint32_t stream;          /* CUPTI stream id */
    uint32_t corr;            /* CUPTI correlation id */
    uint32_t graph;           /* CUPTI graph id (0 none) */
    int16_t device;
    uint16_t kind;            /* enum pi_gpu_kind (events.h) */
    uint8_t copy_kind;        /* memcpy: PI_CUPTI_MEMCPY_* */
} pi_gpu_act;

#define PI_API_THREADS 128 /* threads whose recent API records are kept (direct mapped on process and thread) */
#define PI_API_SPANS 16    /* recent API records kept per thread, of each kind */
#define PI_API_INDEX 4096  /* correlationId -> thread slot of its driver API record, direct mapped */

typedef struct pi_api_ring {      /* one kind's recent API records of one thread, oldest overwritten */
    uint64_t start[PI_API_SPANS], end[PI_API_SPANS];
    uint32_t corr[PI_API_SPANS];
    uint32_t next, n;
} pi_api_ring;

typedef struct pi_api_thread {
    uint32_t pid, tid;
    uint32_t used;            /* slot holds this thread */
    uint64_t rt_end;          /* the latest end among its runtime records (a driver record ending later has none around it) */
    uint64_t drv_start;       /* the latest start among its driver records (a runtime record starting later has none inside) */
    pi_api_ring drv, rt;
} pi_api_thread;

typedef struct pi_api_nest {
    pi_api_thread t[PI_API_THREADS];
    uint32_t index_corr[PI_API_INDEX];
    uint8_t index_slot[PI_API_INDEX];
} pi_api_nest;

/* correlationId -> external id, direct mapped over the last 2^bits correlation ids */
typedef struct pi_corr_map {
    uint32_t *corr;
    uint64_t *ext;            /* 0 = empty */
    uint32_t mask;
    pi_api_nest *nest;        /* recent API records per thread (the nesting rule above) */
    uint64_t nested;          /* runtime calls paired through the driver call nested in them */
    uint64_t api_runtime, api_driver; /* API records seen, of each kind (diagnostics: the shim notes them) */
} pi_corr_map;

typedef struct pi_gpu_pending {
    pi_gpu_act *a;
    size_t n, cap;
    uint64_t evicted;         /* activities sent unmatched because the list was full (or no memory) */
    uint64_t unmatched;       /* activities sent unmatched by the final drain */
} pi_gpu_pending;

typedef void (*pi_gpu_sink)(void *ctx, const pi_gpu_act *a);

int pi_corr_init(pi_corr_map *m, unsigned bits);  /* 0, or -1 (memory) */
void pi_corr_free(pi_corr_map *m);
void pi_corr_put(pi_corr_map *m, uint32_t corr, uint64_t ext);
uint64_t pi_corr_get(const pi_corr_map *m, uint32_t corr);

#define PI_GPU_PENDING_MAX 65536 /* unpaired activities kept waiting for their pairing (~5 MB) */

/* An API record (kind DRIVER or RUNTIME) seen: kept, and linked by the nesting rule where it can be.
 * Returns 1 when a runtime call got a pairing through it (waiting activities may now pair). */
int pi_api_seen(pi_corr_map *m, uint32_t kind, uint32_t pid, uint32_t tid, uint32_t corr, uint64_t start,
                uint64_t end);

/* Parse one completed buffer (`valid` bytes) with CUPTI's own record iterator, in one pass: external
 * correlation records of kind `ext_kind` (the shim's: CUSTOM2) go into the map, API records through
 * pi_api_seen, kernel / memcpy / memset records to `sink` with their
 * external id; one whose pairing is not known yet is kept in `pending` (when the list is full, its oldest
 * quarter is sent unmatched and counted in pending->evicted).  Then, when the buffer brought pairings, the
 * pending activities are tried again: those now paired go to `sink`, in order; the others keep waiting
 * (no age limit).  Returns the records seen, or -1 when the iterator failed. */
long pi_cupti_parse(pi_cuptiActivityGetNextRecord_fn next, uint32_t ext_kind, uint8_t *buf, size_t valid, pi_corr_map *m,
                    pi_gpu_pending *pending, pi_gpu_sink sink, void *ctx);

/* Send every pending activity (paired where the map now knows it, else unmatched): the final flush. */
void pi_cupti_pending_drain(pi_corr_map *m, pi_gpu_pending *pending, pi_gpu_sink sink, void *ctx);

/* One activity record viewed as a pi_gpu_act (kind 0 when it is no device activity). */
void pi_cupti_view(const pi_cupti_record *r, pi_gpu_act *a);

#endif
