/*
 * pi_cupti.h — the part of NVIDIA's CUPTI Activity API that pyinterpose uses, declared by this project
 * (no CUDA toolkit is needed to build).  Shared by the shim (native/shim/cupti.c, the consumer, which
 * dlopen()s libcupti at run time) and simcuda's simulated libcupti (the producer in tests).
 *
 * Values and field offsets are facts of the public CUPTI headers (cupti_result.h, cupti_activity.h of
 * CUDA 13.0; the offsets of every field declared here are the same in CUpti_ActivityKernel5..10,
 * CUpti_ActivityMemcpy5/6 and CUpti_ActivityMemset4).  Records are declared as *prefix views*: only
 * the fields read are named, the rest is reserved bytes, so a view never reads past the fields it
 * names.  tests/c/cupti_layout.c checks every offset against the real header where one is installed.
 * Records are 8-byte aligned and packed (CUPTI's PACKED_ALIGNMENT).
 */
#ifndef PI_CUPTI_H
#define PI_CUPTI_H
#include <stddef.h>
#include <stdint.h>

typedef int pi_CUptiResult;
#define PI_CUPTI_SUCCESS 0
#define PI_CUPTI_ERROR_MAX_LIMIT_REACHED 12
#define PI_CUPTI_ERROR_NOT_COMPATIBLE 14
#define PI_CUPTI_ERROR_NOT_INITIALIZED 15
#define PI_CUPTI_ERROR_INVALID_KIND 21
#define PI_CUPTI_ERROR_INSUFFICIENT_PRIVILEGES 35
#define PI_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED 39
#define PI_CUPTI_ERROR_UNKNOWN 999

/* CUpti_ActivityKind values */
#define PI_CUPTI_KIND_MEMCPY 1
#define PI_CUPTI_KIND_MEMSET 2
#define PI_CUPTI_KIND_KERNEL 3
#define PI_CUPTI_KIND_DRIVER 4
#define PI_CUPTI_KIND_RUNTIME 5
#define PI_CUPTI_KIND_CONCURRENT_KERNEL 10
#define PI_CUPTI_KIND_EXTERNAL_CORRELATION 39

/* CUpti_ExternalCorrelationKind */
#define PI_CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0 3
#define PI_CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1 4
#define PI_CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2 5
/* cuptiActivityFlushAll flag */
#define PI_CUPTI_ACTIVITY_FLAG_FLUSH_FORCED 1u

/* CUpti_ActivityMemcpyKind (copyKind) */
#define PI_CUPTI_MEMCPY_HTOD 1
#define PI_CUPTI_MEMCPY_DTOH 2
#define PI_CUPTI_MEMCPY_DTOD 8
#define PI_CUPTI_MEMCPY_HTOH 9

/* Full sizes of the newest record versions in CUDA 13.0 (what a CUDA 13 libcupti emits). */
#define PI_CUPTI_SIZEOF_KERNEL10 216
#define PI_CUPTI_SIZEOF_MEMCPY6 96
#define PI_CUPTI_SIZEOF_MEMSET4 88
#define PI_CUPTI_SIZEOF_EXTERNAL_CORRELATION 24
#define PI_CUPTI_SIZEOF_API 40

#define PI_CUPTI_PACKED __attribute__((__packed__)) __attribute__((aligned(8)))

/* CUpti_Activity: every record starts with its kind */
typedef struct PI_CUPTI_PACKED {
    uint32_t kind;
} pi_cupti_record;

/* CUpti_ActivityKernel5..10 (kinds KERNEL, CONCURRENT_KERNEL) */
typedef struct PI_CUPTI_PACKED {
    uint32_t kind;             /* 0 */
    uint8_t  reserved0[12];    /* cacheConfig .. partitionedGlobalCacheExecuted */
    uint64_t start;            /* 16, ns on CUPTI's clock (cuptiGetTimestamp) */
    uint64_t end;              /* 24 */
    uint64_t completed;        /* 32 */
    uint32_t deviceId;         /* 40 */
    uint32_t contextId;        /* 44 */
    uint32_t streamId;         /* 48 */
    uint8_t  reserved1[40];    /* grid, block, shared memory, registers ... */
    uint32_t correlationId;    /* 92 */
    int64_t  gridId;           /* 96 */
    const char *name;          /* 104 */
    uint8_t  reserved2[32];    /* reserved0, queued, submitted, launchType, ... */
    uint64_t graphNodeId;      /* 144 (0 unless replayed from a graph) */
    uint8_t  reserved3[4];     /* shmemLimitConfig */
    uint32_t graphId;          /* 156 */
} pi_cupti_kernel;

/* CUpti_ActivityMemcpy5/6 (kind MEMCPY) */
typedef struct PI_CUPTI_PACKED {
    uint32_t kind;             /* 0 */
    uint8_t  copyKind;         /* 4: PI_CUPTI_MEMCPY_* */
    uint8_t  srcKind;          /* 5 */
    uint8_t  dstKind;          /* 6 */
    uint8_t  flags;            /* 7 */
    uint64_t bytes;            /* 8 */
    uint64_t start;            /* 16 */
    uint64_t end;              /* 24 */
    uint32_t deviceId;         /* 32 */
    uint32_t contextId;        /* 36 */
    uint32_t streamId;         /* 40 */
    uint32_t correlationId;    /* 44 */
    uint8_t  reserved0[16];    /* runtimeCorrelationId, pad, reserved0 */
    uint64_t graphNodeId;      /* 64 */
    uint32_t graphId;          /* 72 */
} pi_cupti_memcpy;

/* CUpti_ActivityMemset4 (kind MEMSET) */
typedef struct PI_CUPTI_PACKED {
    uint32_t kind;             /* 0 */
    uint32_t value;            /* 4 */
    uint64_t bytes;            /* 8 */
    uint64_t start;            /* 16 */
    uint64_t end;              /* 24 */
    uint32_t deviceId;         /* 32 */
    uint32_t contextId;        /* 36 */
    uint32_t streamId;         /* 40 */
    uint32_t correlationId;    /* 44 */
    uint8_t  reserved0[16];    /* flags, memoryKind, pad, reserved0 */
    uint64_t graphNodeId;      /* 64 */
    uint32_t graphId;          /* 72 */
} pi_cupti_memset;

/* CUpti_ActivityExternalCorrelation (kind EXTERNAL_CORRELATION): pairs our id with CUPTI's */
typedef struct PI_CUPTI_PACKED {
    uint32_t kind;             /* 0 */
    uint32_t externalKind;     /* 4 */
    uint64_t externalId;       /* 8: the id pushed around the call */
    uint32_t correlationId;    /* 16: CUPTI's, as in the kernel/memcpy/memset record */
    uint32_t reserved0;        /* 20 */
} pi_cupti_external_correlation;

/* CUpti_ActivityAPI (kinds DRIVER, RUNTIME) */
typedef struct PI_CUPTI_PACKED {
    uint32_t kind;             /* 0 */
    uint32_t cbid;             /* 4 */
    uint64_t start;            /* 8 */
    uint64_t end;              /* 16 */
    uint32_t processId;        /* 24 */
    uint32_t threadId;         /* 28 */
    uint32_t correlationId;    /* 32 */
    uint32_t returnValue;      /* 36 */
} pi_cupti_api;

/* The functions used, as pointer types (the shim resolves them with dlsym on a dlopen()ed libcupti). */
typedef void (*pi_cupti_buffer_requested_fn)(uint8_t **buffer, size_t *size, size_t *maxNumRecords);
typedef void (*pi_cupti_buffer_completed_fn)(void *context, uint32_t streamId, uint8_t *buffer,
                                              size_t size, size_t validSize);
typedef pi_CUptiResult (*pi_cuptiActivityRegisterCallbacks_fn)(pi_cupti_buffer_requested_fn,
                                                               pi_cupti_buffer_completed_fn);
typedef pi_CUptiResult (*pi_cuptiActivityEnable_fn)(uint32_t kind);
typedef pi_CUptiResult (*pi_cuptiActivityDisable_fn)(uint32_t kind);
typedef pi_CUptiResult (*pi_cuptiActivityGetNextRecord_fn)(uint8_t *buffer, size_t validBufferSizeBytes,
                                                           pi_cupti_record **record);
typedef pi_CUptiResult (*pi_cuptiActivityFlushAll_fn)(uint32_t flag);
typedef pi_CUptiResult (*pi_cuptiActivityGetNumDroppedRecords_fn)(void *context, uint32_t streamId,
                                                                  size_t *dropped);
typedef pi_CUptiResult (*pi_cuptiActivityPushExternalCorrelationId_fn)(uint32_t kind, uint64_t id);
typedef pi_CUptiResult (*pi_cuptiActivityPopExternalCorrelationId_fn)(uint32_t kind, uint64_t *lastId);
typedef pi_CUptiResult (*pi_cuptiGetTimestamp_fn)(uint64_t *timestamp);
typedef pi_CUptiResult (*pi_cuptiGetResultString_fn)(pi_CUptiResult result, const char **str);
/* ---- the callback API, resource domain: graph nodes created in a stream capture and cloned by
 * instantiation (how a kernel replayed from a graph — its record carries the executable node's
 * graphNodeId — leads back to the captured launch: CLONED gives originalNode -> node) ---- */
#define PI_CUPTI_CB_DOMAIN_RESOURCE 3
#define PI_CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED 13
#define PI_CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED 20
/* CUgraphNodeType */
#define PI_CU_GRAPH_NODE_TYPE_KERNEL 0
#define PI_CU_GRAPH_NODE_TYPE_MEMCPY 1
#define PI_CU_GRAPH_NODE_TYPE_MEMSET 2

/* CUpti_ResourceData (the callback's cbdata in the resource domain) */
typedef struct {
    void *context;             /* 0: CUcontext */
    void *stream;              /* 8: resourceHandle.stream */
    void *resourceDescriptor;  /* 16: a pi_cupti_graph_data for the graph callbacks */
} pi_cupti_resource_data;

/* CUpti_GraphData */
typedef struct {
    void *graph;               /* 0: CUgraph */
    void *originalGraph;       /* 8 */
    void *node;                /* 16: CUgraphNode (for CLONED: the clone) */
    void *originalNode;        /* 24: for CLONED: the node it was cloned from */
    int nodeType;              /* 32: CUgraphNodeType */
    void *dependency;          /* 40 */
    void *graphExec;           /* 48: for CLONED: the executable graph */
} pi_cupti_graph_data;

typedef void (*pi_cupti_callback_fn)(void *userdata, uint32_t domain, uint32_t cbid, const void *cbdata);
typedef struct pi_cupti_subscriber_st *pi_cupti_subscriber;
typedef pi_CUptiResult (*pi_cuptiSubscribe_fn)(pi_cupti_subscriber *subscriber, pi_cupti_callback_fn callback,
                                               void *userdata);
typedef pi_CUptiResult (*pi_cuptiUnsubscribe_fn)(pi_cupti_subscriber subscriber);
typedef pi_CUptiResult (*pi_cuptiEnableCallback_fn)(uint32_t enable, pi_cupti_subscriber subscriber,
                                                    uint32_t domain, uint32_t cbid);
typedef pi_CUptiResult (*pi_cuptiEnableDomain_fn)(uint32_t enable, pi_cupti_subscriber subscriber, uint32_t domain);
typedef pi_CUptiResult (*pi_cuptiGetGraphNodeId_fn)(void *node, uint64_t *nodeId);
typedef pi_CUptiResult (*pi_cuptiGetGraphId_fn)(void *graph, uint32_t *id);
typedef pi_CUptiResult (*pi_cuptiGetGraphExecId_fn)(void *graphExec, uint32_t *id);

/* GetNextRecord returns this when the buffer holds no further record */
#define PI_CUPTI_ERROR_MAX_LIMIT_REACHED_END PI_CUPTI_ERROR_MAX_LIMIT_REACHED

#endif
