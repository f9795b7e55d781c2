/*
 * events.h — the capture contract between the preload shim (producer) and the
 * Python drain (consumer).  Single source of truth: pyinterpose/capture/ring.py
 * parses the `cdef` section below with cffi to build the numpy record dtype.
 *
 * A ring is a POSIX shared-memory object named
 *     /pyinterpose-<session>-<pid>-<start_ns>
 * (or, when /dev/shm has no room, a file of that name in $PYINTERPOSE_RING_DIR), fully allocated
 * (posix_fallocate) before it is mapped, so writing it can never SIGBUS.  A process that cannot get
 * a ring writes $PYINTERPOSE_RING_DIR/unrecorded-<pid> (one line: why) and runs on unrecorded.
 * holding one pi_ring_header followed by `capacity` pi_event slots
 * (capacity is a power of two).  Producers take tickets with fetch_add on
 * `head`; ticket T owns slot T & (capacity-1) once T < tail + capacity.  A
 * slot is committed when its `seq` equals its ticket (stored last, release).
 * The consumer advances `tail` after copying committed slots.  The ticket is
 * the record's per-process sequence number, so seq order == ring order.
 *
 * Everything between the BEGIN/END CDEF markers must stay plain C that cffi's
 * cdef parser accepts (no macros, no attributes).
 */
#ifndef PYINTERPOSE_EVENTS_H
#define PYINTERPOSE_EVENTS_H
#include <stdint.h>

#define PI_RING_MAGIC 0x31474e4952495950ULL /* "PYIRING1" little endian */
#define PI_RING_VERSION 3
#define PI_ATTACH_GRACE_NS 10000000000ULL /* 10 s for the drain to find a new ring */
#define PI_MIN_RECORDS 4096             /* the smallest ring (256 KiB) */
#define PI_SHM_PREFIX "/pyinterpose-"
#define PI_STR_PAYLOAD 32 /* bytes of text in one PI_OP_STRDATA record (addr..aux) */

/* BEGIN CDEF */
typedef struct pi_event {
    uint64_t t_ns;    /* CLOCK_MONOTONIC, ns */
    uint64_t seq;     /* per-process ticket; == slot ticket when committed; == ticket | PI_SEQ_HELD while a
                       * call that holds the slot across the real call is in flight (pi_writer_hold) */
    uint64_t addr;    /* ALLOC/FREE/ACCESS: block base; LAUNCH: function handle;
                         COPY/MEMSET: destination; ADVISE/PREFETCH: range start */
    uint64_t size;    /* bytes (ACCESS: the block's size; LAUNCH: param bytes scanned;
                         STRING: text length) */
    uint64_t stream;  /* CUstream / cudaStream_t handle (0 = legacy default) */
    uint64_t aux;     /* op specific, see enum pi_op */
    uint32_t tid;     /* kernel thread id (gettid) */
    uint16_t op;      /* enum pi_op */
    uint16_t api;     /* index of the hooked function in hooks.def (0 = none) */
    int32_t  result;  /* CUDA return code of the real call (0 = success) */
    int16_t  device;  /* current device ordinal, -1 = unknown / host */
    uint16_t flags;   /* ALLOC/FREE: enum pi_kind; ACCESS: enum pi_access_flags */
} pi_event;

/* A slot held across a real call (launch, copy, memset, graph launch, free) is pre-filled before the call
 * with its record as if the call were interrupted (result PI_RESULT_INTERRUPTED) and marked seq = ticket |
 * PI_SEQ_HELD; the record is rewritten and committed when the call returns.  The drain waits on a held slot
 * like on an uncommitted one, except in its final pass (the process is gone: killed by a signal inside the
 * call), which takes the held record as it is: the call was made and never returned, nothing is lost. */
#define PI_SEQ_HELD 0x8000000000000000
enum pi_result { PI_RESULT_INTERRUPTED = -1000 };

enum pi_op {
    PI_OP_NONE = 0,
    PI_OP_ALLOC = 1,        /* aux: pool handle (pool allocs) or VMM handle (CREATE) */
    PI_OP_FREE = 2,         /* aux: VMM handle for RELEASE; size = bytes when known */
    PI_OP_LAUNCH = 3,       /* aux: kernel string id; addr: CUfunction/host stub */
    PI_OP_ACCESS = 4,       /* aux: seq of the block's ALLOC; result: seq delta to the
                               LAUNCH/COPY/MEMSET it belongs to is implicit (it follows it) */
    PI_OP_COPY = 5,         /* addr: dst, aux: src, size: bytes, flags: direction */
    PI_OP_MEMSET = 6,       /* addr: dst, size: bytes */
    PI_OP_ADVISE = 7,       /* addr, size: range; aux: advice; flags: location id */
    PI_OP_PREFETCH = 8,     /* addr, size: range; aux: destination location id */
    PI_OP_GRAPH_LAUNCH = 9, /* addr: CUgraphExec; size: node slots reserved after it (graphs.c: the
                               GRAPH_DEF NODE_SLOT records that follow; node k's seq is this seq + 1 + k) */
    PI_OP_MARKER = 10,      /* aux: label string id (pyinterpose.mark_step) */
    PI_OP_STRING = 11,      /* aux: string id; size: length; followed by
                               ceil(size/32) PI_OP_STRDATA records */
    PI_OP_STRDATA = 12,     /* addr..aux (bytes 16..47) hold 32 bytes of text */
    PI_OP_LOST = 13,        /* a reserved slot its producer could not fill */
    PI_OP_TENSORMAP = 14,   /* addr: globalAddress of a TMA descriptor */
    /* Call sites (native/shim/site.c, pystack.c).  A SITE record follows the
     * ALLOC it describes in the same reservation (its seq is the ALLOC's + 1). */
    PI_OP_SITE = 15,        /* addr: caller PC (return address of the outermost hooked call);
                               stream: owner string id (basename of the calling object, 0 unknown);
                               aux: Python stack id (0 none); size: native stack id (0 none);
                               result: thread-name string id; flags: enum pi_site_flags */
    PI_OP_FRAME = 16,       /* defines a frame: aux: frame id; flags: 1 python, 2 native;
                               addr: line (python) or PC (native); stream: first line of the
                               function (python) or PC minus the object's load bias (native);
                               size: text length, followed by ceil(size/32) STRDATA records:
                               python "filename\0function", native: the object's path */
    PI_OP_STACK = 17,       /* defines a stack (trie node): aux: stack id; addr: parent stack id
                               (0 = root); size: frame id (the innermost frame of this stack) */
    PI_OP_NOTE = 18,        /* aux: string id of a capture note ("python stacks off: ...") */
    /* The device clock (native/shim/cupti.c).  A GPU record is one CUPTI activity record (a kernel,
     * memcpy or memset as it ran on the device), written when CUPTI hands its buffer over, so it
     * comes after the call it belongs to in seq order.  Times are already on the trace's clock
     * (CLOCK_MONOTONIC ns, CUPTI's timestamps plus the offset of the last CLOCK record). */
    PI_OP_GPU = 19,         /* t_ns: device start; addr: device end; size: bytes (memcpy/memset);
                               stream: graph node id (0 unless replayed from a CUDA graph);
                               aux: seq of the LAUNCH/GRAPH_LAUNCH/COPY/MEMSET it belongs to (the
                               external correlation id pushed around the call; 0 none matched);
                               tid: CUPTI's stream id; result: kernel name string id (kernels replayed
                               from a graph or not matched; else 0: the LAUNCH names it) or the copy
                               kind (memcpy); device: device id; flags: enum pi_gpu_kind */
    PI_OP_CLOCK = 20,       /* the process's device clock: flags: enum pi_clock_state; result: enum
                               pi_clock_reason; aux: string id of the note (0 none); addr: offset ns
                               (int64: trace clock = CUPTI clock + offset); size: error bound of the
                               alignment, ns; stream: CUPTI records dropped so far */
    /* The device's memory at a failed allocation (native/shim/oom.c): follows the failed ALLOC (and
     * its SITE) in the same reservation; only for out-of-memory results, only when no stream capture
     * is in progress in the process, at the outermost hooked call. */
    PI_OP_MEMINFO = 21,     /* aux: seq of the failed ALLOC; addr: free bytes, size: total bytes
                               (cuMemGetInfo_v2 right after the failure); device: cuCtxGetDevice
                               (-1 unknown) */
    /* Rank and device context (native/shim/context.c) */
    PI_OP_CONTEXT = 22,     /* aux: string id of "NAME=value": a rank/device variable of the process's
                               environment when its ring was created (RANK, LOCAL_RANK, WORLD_SIZE,
                               JAX_PROCESS_ID, TF_CONFIG, CUDA_VISIBLE_DEVICES, ...; HOST=its host name) */
    PI_OP_DEVICE = 23,      /* a device the process used, recorded at its first allocation there:
                               device: the ordinal the process sees; addr, size: the 16 bytes of its
                               UUID (cuDeviceGetUuid); result: that call's CUDA result */
    PI_OP_OBJECT = 24,      /* a call on a memory object that allocates nothing itself (api says which:
                               shareable-handle export, IPC handle, multicast bind/unbind, memory pool
                               create/destroy): addr: address or offset, size: bytes, aux: the object's
                               handle (pool, multicast or VMM handle), stream: a second handle */
    PI_OP_GRAPH_DEF = 25,  /* how a CUDA graph came to be (so that its replays can be joined to the calls
                               captured into it): flags: enum pi_graph_def; api, result: the call;
                               CAPTURE_BEGIN/END: stream: the stream, aux: the graph (END); INSTANTIATE:
                               addr: the executable graph, aux: the graph; NODE_SLOT: the place of node
                               aux of the replay it follows (addr: the executable graph, size: nodes) */
    /* CUDA graphs (native/shim/graphs.c, hooks.c; 50-59) */
    PI_OP_GRAPH_MEM = 50,   /* the device's graph memory after a graph launch made outside any capture
                               (cuDeviceGetGraphMemAttribute): aux: seq of the GRAPH_LAUNCH; addr: reserved
                               current, size: reserved high, stream: used current, result: the query's
                               CUDA result; device: cuCtxGetDevice (-1 unknown) */
    /* capture windows (native/shim/window.c; 40-49): where a window opens or closes.  The drain
     * (pyinterpose/capture/window.py) decides what reaches the trace; these records mark the program's
     * own requests.  flags: enum pi_window_flags; aux: enum pi_window_source; api, result: the call
     * (cudaProfilerStart/Stop, cuProfilerStart/Stop; 0 for pyinterpose.start()/stop()) */
    PI_OP_WINDOW = 40,
    /* serving from a plan (native/shim/apply.c; 32: well above the others, room for theirs) */
    PI_OP_APPLY = 32,       /* flags: enum pi_apply_record; ARENA: addr base, size capacity, result of the
                               real call; the others: counts as 32-bit pairs: addr served|no_key<<32, size
                               occupied|bigger<<32, stream capture|overlap<<32, aux off|other<<32; result:
                               the iteration (-1: before the first) */
    PI_OP_SWAP = 60         /* the swap engine (native/shim/swap.c), one record per iteration: flags 2 an
                               iteration's counts, 4 the last (at exit); result: the iteration; counts as
                               32-bit pairs: addr out|in<<32 (swaps sent out / brought back), size
                               late|unforeseen<<32 (planned swap-ins sent only at the launch that needed
                               them / launches naming a swapped-out block the plan did not foresee), stream
                               waits|managed<<32 (stream waits for a swap-in / managed requests served),
                               aux real (requests the plan sends to the program's own allocator) */
};

/* what a PI_OP_APPLY record says (its flags); the reader names them by these names, lower case */
enum pi_apply_record {
    PI_APPLY_ARENA = 1,     /* the arena was reserved (or its reservation failed) */
    PI_APPLY_ITERATION = 2, /* one iteration's counts */
    PI_APPLY_REFUSED = 3,   /* the plan was refused: nothing served from now on */
    PI_APPLY_LAST = 4       /* the last iteration's counts (at exit) */
};

enum pi_window_flags {
    PI_WINDOW_START = 1,
    PI_WINDOW_STOP = 2
};

enum pi_window_source {
    PI_WINDOW_PROFILER = 1,   /* cudaProfilerStart/Stop, cuProfilerStart/Stop */
    PI_WINDOW_MARKERS = 2,    /* pyinterpose.start() / pyinterpose.stop() */
    PI_WINDOW_SIGNAL = 3,     /* SIGUSR2 to `run` (the gate only: `run` flips a shared word) */
    PI_WINDOW_STEPS = 4       /* run --steps A:B (the gate only: the shim counts pyinterpose.mark_step markers) */
};

enum pi_graph_def {
    PI_GRAPH_CAPTURE_BEGIN = 1,
    PI_GRAPH_CAPTURE_END = 2,
    PI_GRAPH_INSTANTIATE = 3,
    PI_GRAPH_NODE_SLOT = 4,
    /* graphs built node by node (hooks.c): the node's own record (LAUNCH, COPY, MEMSET, ALLOC, FREE)
     * precedes it; see docs/trace-format.md */
    PI_GRAPH_NODE_ADD = 5,    /* addr: node handle, aux: graph, size: seq of the node's record, stream: deps */
    PI_GRAPH_CHILD = 6,       /* addr: node handle, aux: graph, stream: the child graph */
    PI_GRAPH_EXEC_SET = 7,    /* addr: executable graph, aux: node handle, size: seq of the LAUNCH (COPY, MEMSET)
                                 with the new arguments (cuGraphExec{Kernel,Memcpy,Memset}NodeSetParams) */
    PI_GRAPH_EXEC_UPDATE = 8, /* addr: executable graph, aux: the graph whose parameters it took */
    PI_GRAPH_CREATE = 9,      /* aux: the graph (cuGraphCreate / cudaGraphCreate) */
    PI_GRAPH_EXEC_CHILD = 10  /* addr: executable graph, aux: the child graph node's handle, stream: the child
                                 graph it now runs (cuGraphExecChildGraphNodeSetParams) */
};

enum pi_gpu_kind {
    PI_GPU_KERNEL = 1,
    PI_GPU_MEMCPY = 2,
    PI_GPU_MEMSET = 3
};

enum pi_clock_state {
    PI_CLOCK_CUPTI = 1,       /* device times recorded through CUPTI */
    PI_CLOCK_CPU = 2          /* no device times: the analyses use the CPU clock (reason in result) */
};

enum pi_clock_reason {
    PI_CLOCK_OK = 0,
    PI_CLOCK_OFF = 1,         /* --gpu-clock off */
    PI_CLOCK_NOT_FOUND = 2,   /* no libcupti could be loaded */
    PI_CLOCK_BUSY = 3,        /* another CUPTI subscriber (Nsight, torch.profiler, a debugger) */
    PI_CLOCK_FAILED = 4,      /* a CUPTI call failed (setup, or later: then times stop there) */
    PI_CLOCK_FORKED = 5,      /* a fork() child of a process whose CUPTI state it cannot use */
    PI_CLOCK_UNSUPPORTED = 6  /* the library lacks a function the shim needs */
};

enum pi_site_flags {
    PI_SITE_PYTHON = 1,       /* Python stacks were requested (--stacks python) */
    PI_SITE_NO_PYFRAMES = 2,  /* the thread had no Python frames (or no Python thread state) */
    PI_SITE_TRUNCATED = 4,    /* the stack was cut at the depth limit */
    PI_SITE_NO_GIL = 8,       /* the thread did not hold the GIL at the event */
    PI_SITE_PY_OFF = 16,      /* no usable Python here (none, not running, unsupported, refused) */
    PI_SITE_NATIVE = 32       /* native stacks were requested (--stacks native) */
};

enum pi_kind {
    PI_KIND_DEVICE = 1,   /* cudaMalloc / cuMemAlloc */
    PI_KIND_PITCH = 2,    /* cudaMallocPitch / cuMemAllocPitch (size = pitch*height) */
    PI_KIND_ASYNC = 3,    /* cudaMallocAsync / cuMemAllocAsync (default pool) */
    PI_KIND_POOL = 4,     /* ...FromPoolAsync (aux = pool) */
    PI_KIND_MANAGED = 5,  /* cudaMallocManaged / cuMemAllocManaged */
    PI_KIND_HOST = 6,     /* pinned host: cudaMallocHost / cudaHostAlloc / cuMemAllocHost / cuMemHostAlloc */
    PI_KIND_VMM_RESERVE = 7, /* cuMemAddressReserve (virtual range only) */
    PI_KIND_VMM_CREATE = 8,  /* cuMemCreate (physical, addr = 0, aux = handle) */
    PI_KIND_VMM_MAP = 9,     /* cuMemMap (addressable mapping, aux = handle) */
    PI_KIND_IPC = 10         /* cudaIpcOpenMemHandle / cuIpcOpenMemHandle: another process's memory
                                mapped here (addr; size from cuMemGetAddressRange_v2, 0 = unknown);
                                freed by ...IpcCloseMemHandle */
};

enum pi_access_flags {
    PI_ACC_LAUNCH = 1,  /* a kernel argument points into the block */
    PI_ACC_READ = 2,    /* copy source */
    PI_ACC_WRITE = 4,   /* copy / memset destination */
    PI_ACC_TMA = 8      /* TMA descriptor built on the block */
};

enum pi_ring_flags {
    PI_RING_FORKED = 1,      /* created in a fork() child (no exec) */
    PI_RING_FILE = 2,        /* a file in the ring directory ($PYINTERPOSE_RING_DIR), not /dev/shm */
    PI_RING_REDUCED = 4      /* smaller than asked: space, memory or the file-size limit */
};

/* An intent (version 3): a thread's records written down, whole, before their tickets are taken.  A
 * process killed between taking tickets and committing their records (SIGTERM's default action, SIGKILL)
 * would leave a gap the drain can only count as lost; with the intent, the drain's final pass puts the
 * records into that gap.  state is PI_INTENT_BUILT from before the tickets are taken until the records
 * are committed; ticket is the first ticket + 1, written before it is taken (shim.c reserve_noted: a
 * compare-and-swap of the head), n the records (at most PI_INTENT_RECORDS; any number for
 * PI_INTENT_HELD, which covers a held writer until its slots are marked: shim.h pi_writer_open_held).  One per thread, for the
 * first PI_INTENTS threads of a process; the writers of more records, and the other threads, write into
 * the ring directly as before (pi_writer_stage, shim.h). */
#define PI_INTENTS 64
#define PI_INTENT_RECORDS 2
#define PI_INTENT_BUILT 1
#define PI_INTENT_HELD 2     /* rec[0] is a held writer's record 0; its records 1..n-1 are held NONE records */
typedef struct pi_intent {
    uint64_t state;
    uint64_t ticket;
    uint64_t n;
    uint8_t  pad[40];
    pi_event rec[2];         /* PI_INTENT_RECORDS */
} pi_intent;

typedef struct pi_ring_header {
    uint64_t magic;
    uint32_t version;
    uint32_t record_size;
    uint64_t capacity;       /* records, power of two */
    int32_t  pid;
    int32_t  ppid;
    int32_t  consumer_pid;   /* the drain's pid (liveness: beat_ns/lease_ns, and the shim's pid checks) */
    int32_t  flags;          /* enum pi_ring_flags */
    uint64_t start_ns;       /* CLOCK_MONOTONIC at ring creation */
    uint64_t closed;         /* set to 1 by the process's exit handler */
    uint64_t waits;          /* producer waits on a full ring (back-pressure) */
    uint64_t lost;           /* records that could not be written (consumer gone) */
    uint64_t unscanned_launches; /* launches whose parameter layout was unknown */
    char     exe[256];       /* /proc/self/exe at creation */
    /* drain liveness (version 2): the drain maps the ring, unlinks its name, sets `attached`, and
     * stores CLOCK_MONOTONIC into beat_ns at least every lease_ns/10 from a thread of its own.  A
     * producer waiting on a full ring gives up (counts what it cannot write as lost, never blocks the
     * program again) when the beat is older than lease_ns, or when no drain attached within
     * PI_ATTACH_GRACE_NS of the ring's creation (then it unlinks the ring itself). */
    uint64_t attached;       /* 1 once the drain holds the mapping (the name is gone from the fs) */
    uint64_t beat_ns;        /* the drain's last heartbeat, CLOCK_MONOTONIC */
    uint64_t lease_ns;       /* a heartbeat older than this means the drain is gone */
    uint64_t abandoned;      /* 1 when the producer stopped waiting for a silent drain */
    uint64_t oom_failures;   /* allocations that failed for lack of memory (`run` explains them after) */
    uint8_t  pad0[136];
    uint64_t head;           /* next ticket (own cache line) */
    uint8_t  pad1[56];
    uint64_t tail;           /* consumed tickets (own cache line) */
    uint8_t  pad2[56];
    uint64_t intents_used;   /* intents handed to threads (version 3) */
    uint8_t  pad3[56];
    pi_intent intents[64];   /* PI_INTENTS */
} pi_ring_header;
/* END CDEF */

#endif
