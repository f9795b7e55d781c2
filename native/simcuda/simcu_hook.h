/*
 * simcu_hook.h — the private seam between simcuda's driver (libcuda.so.1) and its simulated CUPTI
 * (libcupti.so.13).  Not a CUDA API: a real driver has nothing like it, and the shim never sees it.
 *
 * The simulated libcupti, when activity collection is first enabled, finds the driver already loaded
 * (dlopen("libcuda.so.1", RTLD_NOLOAD), else loads it), looks up simcuInternalAttachCupti and hands it
 * its callbacks.  The driver then calls, on the thread that made the CUDA call:
 *   api_enter()                   when an API call begins (a driver call that enqueues or captures device
 *                                 work, or an outermost runtime call, see below): CUPTI takes the thread's
 *                                 external ids then, so an id pushed inside a runtime call names the driver
 *                                 call begun after it, not the runtime call;
 *   api_exit(kind, corr, cbid, start, end, entered, write)
 *                                 when it ends (nested: last entered, first exited).  kind SIMCU_API_DRIVER
 *                                 or SIMCU_API_RUNTIME; corr the correlation id the driver gave the call
 *                                 (1, 2, ... per process, runtime and driver calls alike); entered 0 when
 *                                 api_enter was not called for it (CUPTI attached in between); write 0: no
 *                                 record (a runtime call that enqueued no device work), the enter is undone;
 *   op(op)                        once per device operation, when it is enqueued: its device start and
 *                                 end are already known (the device clock is computed at enqueue time),
 *                                 both on CLOCK_MONOTONIC; CUPTI must not deliver the record before the
 *                                 host clock reaches op->end_ns (the op has not finished before that).
 * A graph launch makes one API call and one op() per replayed node, all with the launch's corr.
 * A device op carries the correlation id of the OUTERMOST API call that made it, as real CUPTI's kernel
 * records do: the runtime call's when a runtime call (cudaLaunchKernel) made the driver call.  The runtime
 * tells the driver where its calls begin and end through cuGetExportTable with SIMCU_RT_TRACE_UUID (the
 * private channel real libcudart, shared or statically linked into cuBLAS, has to the driver); a library
 * with a runtime of its own linked in (tests/c/staticrt_lib.c) uses the same table.
 *   graph_node(cbid, ...)         a graph node was created by a stream capture (cbid 13, on the capturing
 *                                 thread, inside the captured call) or cloned by instantiation (cbid 20):
 *                                 CUPTI's resource callbacks GRAPHNODE_CREATED / GRAPHNODE_CLONED.
 * CUPTI reads ids of graph handles with simcuInternalGraphId (cuptiGetGraphNodeId & co.).
 *
 * The CUPTI clock (cuptiGetTimestamp, record start/end) is CLOCK_MONOTONIC shifted by an offset and a
 * drift: simcu_cupti_time() below, read by both libraries from the same environment variables.
 */
#ifndef SIMCU_HOOK_H
#define SIMCU_HOOK_H
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define SIMCU_HOOK_VERSION 3

enum { SIMCU_API_DRIVER = 1, SIMCU_API_RUNTIME = 2 };

/* cuGetExportTable(&table, SIMCU_RT_TRACE_UUID): the runtime's calls, bracketed (per thread, nested calls
 * counted; only the outermost is an API call of its own) */
#define SIMCU_RT_TRACE_UUID "simcuda-rt-trace" /* 16 bytes, no terminator used */
struct simcu_rt_trace {
    size_t size;              /* sizeof(struct simcu_rt_trace) */
    void (*enter)(void);      /* a runtime API call begins on this thread */
    void (*leave)(void);      /* it returns */
};

enum simcu_op_kind { SIMCU_OP_KERNEL = 1, SIMCU_OP_MEMCPY = 2, SIMCU_OP_MEMSET = 3,
                     SIMCU_OP_MEMALLOC = 4, SIMCU_OP_MEMFREE = 5 /* graph memory nodes: no device op */ };

struct simcu_op {
    int kind;                 /* SIMCU_OP_* */
    uint8_t copy_kind;        /* PI_CUPTI_MEMCPY_* (memcpy) */
    uint8_t src_kind, dst_kind; /* CUpti_ActivityMemoryKind: 1 pageable, 2 pinned, 3 device, 5 managed */
    uint32_t device;
    uint32_t stream_id;       /* as CUPTI reports it: 7 for the legacy default stream, then 13, 14, ... */
    uint32_t corr_id;
    uint32_t value;           /* memset value */
    uint64_t bytes;           /* memcpy / memset */
    uint64_t start_ns, end_ns; /* device time on CLOCK_MONOTONIC */
    const char *name;         /* kernel name (valid during the call only: copy it) */
    uint32_t grid[3], block[3];
    uint32_t graph_id;        /* 0 unless replayed from a graph: the executable graph's id */
    uint64_t graph_node_id;   /* 0 unless replayed: the executable graph node's id */
};

struct simcu_hooks {
    int version; /* SIMCU_HOOK_VERSION */
    void (*op)(const struct simcu_op *op);
    void (*graph_node)(uint32_t cbid, void *graph, void *original_graph, void *node, void *original_node,
                       int node_type, void *graph_exec);
    void (*api_enter)(void);
    void (*api_exit)(int kind, uint32_t corr_id, uint32_t cbid, uint64_t start_ns, uint64_t end_ns, int entered,
                     int write);
};

/* exported by libcuda.so.1: the id of a graph node (what 0), graph (1) or executable graph (2);
 * 0 on success, -1 for a handle that is not one */
typedef int (*simcu_graph_id_fn)(int what, void *handle, uint64_t *id);
#define SIMCU_GRAPH_ID_SYMBOL "simcuInternalGraphId"

/* exported by libcuda.so.1: returns SIMCU_HOOK_VERSION, or -1 when another CUPTI is attached;
 * detach removes the hooks if they are the attached ones (libcupti's destructor calls it) */
typedef int (*simcu_attach_fn)(const struct simcu_hooks *hooks);
typedef void (*simcu_detach_fn)(const struct simcu_hooks *hooks);
#define SIMCU_ATTACH_SYMBOL "simcuInternalAttachCupti"
#define SIMCU_DETACH_SYMBOL "simcuInternalDetachCupti"

/* ---- the CUPTI clock ----
 * SIMCUPTI_CLOCK_OFFSET_NS  added to CLOCK_MONOTONIC (default 1700000000000000000, about the Unix time
 *                           of late 2023 in ns: CUPTI's timestamps are not CLOCK_MONOTONIC)
 * SIMCUPTI_CLOCK_DRIFT_PPM  the CUPTI clock runs this many parts per million fast (default 0; may be
 *                           negative or fractional): cupti = mono + offset + mono * ppm / 1e6 */
#define SIMCU_DEFAULT_CUPTI_OFFSET 1700000000000000000ull

struct simcu_clock { uint64_t offset; double ppm; };

static inline struct simcu_clock simcu_clock_from_env(void)
{
    struct simcu_clock c = {SIMCU_DEFAULT_CUPTI_OFFSET, 0.0};
    const char *o = getenv("SIMCUPTI_CLOCK_OFFSET_NS"), *d = getenv("SIMCUPTI_CLOCK_DRIFT_PPM");
    if (o && *o) c.offset = strtoull(o, NULL, 10);
    if (d && *d) c.ppm = strtod(d, NULL);
    return c;
}

static inline uint64_t simcu_cupti_time(const struct simcu_clock *c, uint64_t mono_ns)
{
    if (mono_ns == 0) return 0;
    return mono_ns + c->offset + (uint64_t)(int64_t)((double)mono_ns * c->ppm * 1e-6);
}

#endif
