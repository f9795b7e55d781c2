/*
 * sim_device.h — private to libcuda.so.1: simcuda's device clock (native/simcuda/device/).
 *
 * Every stream is a queue on a simulated device clock measured in CLOCK_MONOTONIC nanoseconds, so that
 * waiting for the device is really waiting.  An operation enqueued at host time t starts at
 *     max(t + launch latency, end of the stream's previous op, [legacy-stream ordering], its engine free)
 * and ends after its duration.  The times are computed when the op is enqueued (the host function of a
 * kernel and the bytes of a copy are still done at once, on the calling thread: only *time* is
 * simulated).  Engines: compute (kernels and memsets; kernels of different streams overlap, as
 * concurrent kernels do), and one copy engine each for H2D, D2H and D2D (copies of one direction
 * queue behind each other across streams; copies overlap compute).
 *
 * Synchronisation (cuStreamSynchronize, cuCtxSynchronize, cuEventSynchronize, synchronous copies and
 * memsets) sleeps until CLOCK_MONOTONIC reaches the device time.  A stream holds at most
 * `queue_depth` unfinished ops: enqueueing one more blocks the host until the oldest ends (the bounded
 * launch queue of a real GPU).  Durations: docs/simcuda-device-clock.md and simcuda.h.
 */
#ifndef SIM_DEVICE_H
#define SIM_DEVICE_H
#include <stdint.h>
#include "pi_cuda.h"
#include "simcu_hook.h"

#define HIDDEN __attribute__((visibility("hidden")))

enum sim_engine { SIM_ENGINE_COMPUTE = 0, SIM_ENGINE_H2D, SIM_ENGINE_D2H, SIM_ENGINE_D2D, SIM_NENGINES };

struct sim_queue {
    uint32_t id;             /* CUPTI stream id */
    int device;
    int legacy;              /* the legacy default stream */
    int nonblocking;         /* CU_STREAM_NON_BLOCKING: no implicit ordering with the legacy stream */
    uint64_t tail;           /* device time the last enqueued op ends */
    uint64_t own_tail;       /* the same, not raised by event waits (the stall count: clock.c) */
    uint64_t *ring;          /* ends of the last ring_cap ops (bounded launch queue) */
    unsigned ring_cap, ring_pos;
    struct CUgraph_st *capture; /* non-NULL while the stream is capturing into this graph */
};

/* what to enqueue */
struct sim_opdesc {
    int kind;                /* SIMCU_OP_* */
    enum sim_engine engine;
    uint64_t dur_ns;
    const char *name;
    uint64_t bytes;
    uint32_t value;
    uint8_t copy_kind, src_kind, dst_kind;
    uint32_t grid[3], block[3];
    uint32_t graph_id;
    uint64_t graph_node_id;
    uint64_t not_before;     /* device time before which it cannot start (residency.c), 0 none */
    int unrecorded;          /* no CUPTI record (a managed-memory prefetch) */
    uint64_t fault_ns;       /* of dur_ns, the time its page faults add (residency.c) */
};

/* the queue behind a stream handle (NULL / legacy / per-thread / created) on device dev */
HIDDEN struct sim_queue *sim_queue_of(CUstream s, int dev);
HIDDEN void sim_queue_init(struct sim_queue *q, int dev, int nonblocking);
HIDDEN void sim_queue_fini(struct sim_queue *q);

/* a correlation id for a driver call that enqueues (or captures) device work, then the call's end */
HIDDEN uint32_t sim_api_begin(uint64_t *t0);
HIDDEN void sim_api_end(uint32_t corr, uint32_t cbid, uint64_t t0);
/* the table cuGetExportTable hands out for SIMCU_RT_TRACE_UUID (struct simcu_rt_trace) */
HIDDEN const void *sim_rt_trace_table(void);

/* enqueue op on q (blocks while q is full); returns its device end */
HIDDEN uint64_t sim_dev_submit(struct sim_queue *q, const struct sim_opdesc *op, uint32_t corr);
/* the same, and its device start in *start */
HIDDEN uint64_t sim_dev_submit_at(struct sim_queue *q, const struct sim_opdesc *op, uint32_t corr, uint64_t *start);

/* the earliest device time op could start on q if enqueued now (nothing enqueued) */
HIDDEN uint64_t sim_dev_peek_start(struct sim_queue *q, const struct sim_opdesc *op);
/* device time at which everything enqueued so far on q (with legacy-stream ordering) is done */
HIDDEN uint64_t sim_queue_done_at(struct sim_queue *q);
/* device time at which all work on device dev is done */
HIDDEN uint64_t sim_device_done_at(int dev);
HIDDEN uint64_t sim_dev_stall_ns(int dev);
/* make q's later ops start no earlier than t (cuStreamWaitEvent) and return nothing */
HIDDEN void sim_queue_wait_for(struct sim_queue *q, uint64_t t);
/* an event recorded on q: its device time (q's tail, or now when idle) */
HIDDEN uint64_t sim_queue_mark(struct sim_queue *q);
/* sleep until CLOCK_MONOTONIC >= t */
HIDDEN void sim_wait_until(uint64_t t);

/* kernel durations */
HIDDEN uint64_t sim_default_kernel_ns(void);
HIDDEN int sim_take_next_launch_ns(uint64_t *ns); /* this thread's per-launch duration, consumed */
/* copy and memset durations */
HIDDEN uint64_t sim_copy_ns(enum sim_engine e, uint64_t bytes);
HIDDEN uint64_t sim_memset_ns(uint64_t bytes);

/* the simulated CUPTI's graph callback, or NULL (clock.c) */
typedef void (*sim_graph_hook_fn)(uint32_t, void *, void *, void *, void *, int, void *);
HIDDEN sim_graph_hook_fn sim_graph_hook(void);

/* pointer -> CUpti_ActivityMemoryKind (memory.c): 1 pageable host, 2 pinned, 3 device, 5 managed */
HIDDEN int sim_mem_kind_of(uint64_t p);

#endif
