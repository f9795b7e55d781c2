/*
 * sim_driver.h — private to libcuda.so.1 (simcuda driver).
 *
 * Every exported driver function is defined once as a hidden `sim_<name>` and
 * exported as an alias `<name>` (SIM_API).  Internal callers and the
 * cuGetProcAddress table only ever use the hidden names, so a preloaded
 * library that interposes `<name>` never sees simcuda calling itself and
 * cuGetProcAddress always hands out simcuda's own code.
 */
#ifndef SIM_DRIVER_H
#define SIM_DRIVER_H
#include <pthread.h>
#include <stdint.h>
#include "pi_cuda.h"
#include "simcuda.h"
#include "sim_device.h"

#define HIDDEN __attribute__((visibility("hidden")))
#define SIM_API(ret, name, params)                                                    \
    ret name params __attribute__((alias("sim_" #name), visibility("default")));     \
    HIDDEN ret sim_##name params
/* a distinct exported function (own address) that runs `target`: the _ptsz /
 * _ptds per-thread-default-stream entry points */
/* ... in which a NULL stream is the calling thread's per-thread default stream (sim_stream_queue) */
extern __thread int sim_t_ptds HIDDEN;
#define SIM_VARIANT(ret, name, target, params, args)                                  \
    ret name params __attribute__((alias("sim_" #name), visibility("default")));     \
    HIDDEN ret sim_##name params                                                       \
    {                                                                                  \
        sim_t_ptds = 1;                                                                \
        ret r_ = sim_##target args;                                                    \
        sim_t_ptds = 0;                                                                \
        return r_;                                                                     \
    }                                                                                  \
    HIDDEN ret sim_##name params
/* another exported name for an existing sim_ function (same signature, same address) */
#define SIM_ALIAS(ret, name, target, params) \
    ret name params __attribute__((alias("sim_" #target), visibility("default")))

/* CUDA constants not (yet) in pi_cuda.h; values from cuda.h (CUDA 13) */
#define SIM_ERROR_DEINITIALIZED 4
#define SIM_ERROR_INVALID_DEVICE 101
#define SIM_ERROR_ALREADY_MAPPED 208
#define SIM_ERROR_NOT_MAPPED 211
#define SIM_ERROR_NOT_READY 600
#define SIM_ERROR_UNKNOWN 999
#define SIM_STREAM_LEGACY ((CUstream)0x1)
#define SIM_STREAM_PER_THREAD ((CUstream)0x2)
#define SIM_DRIVER_VERSION 13000

typedef struct { char bytes[16]; } sim_CUuuid;           /* CUuuid */
typedef struct { cuuint64_t opaque[16]; } sim_CUtensorMap; /* CUtensorMap, 128 bytes */

#define SIM_MAX_DEVICES 16
#define SIM_GRANULARITY (2u << 20)
#define SIM_ALIGN 256

/* object magics: handles are checked before use */
#define MAGIC_CTX 0x43545853u
#define MAGIC_STREAM 0x5354524du
#define MAGIC_EVENT 0x4556454eu
#define MAGIC_FUNC 0x46554e43u
#define MAGIC_POOL 0x504f4f4cu
#define MAGIC_GRAPH 0x47524150u
#define MAGIC_GEXEC 0x47455845u
#define MAGIC_VMM 0x564d4d48u
#define MAGIC_MODULE 0x4d4f4455u
#define MAGIC_DEAD 0xdeadbeefu

struct CUctx_st { uint32_t magic; int device; int refcount; };
struct CUstream_st { uint32_t magic; int device; unsigned flags; struct sim_queue q; };
struct CUevent_st { uint32_t magic; int recorded; uint64_t t_ns; };
struct CUmemPoolHandle_st { uint32_t magic; int device; int is_default; };
/* a node of a graph captured from a stream (launch.c) */
struct sim_gnode {
    uint64_t id;               /* CUPTI graph node id */
    int kind;                  /* SIMCU_OP_* */
    struct CUfunc_st *f;       /* kernel: the function, a copy of its arguments, pointers into it */
    char *args;
    void **params;
    int has_dur;               /* a duration given for this launch (simcuSetNextLaunchDuration) */
    uint64_t dur_ns;
    uint32_t grid[3], block[3];
    void *dst;                 /* memcpy / memset */
    const void *src;
    uint64_t bytes;
    uint8_t copy_kind, src_kind, dst_kind;
    int engine;
    uint32_t value;
    int elem;                  /* memset element size (1 or 4) */
    int device;                /* memory alloc / free nodes: the device of the graph's pool */
    uint64_t handle;           /* the CUgraphNode handed out for it (its address when made; stays the same
                                  when the node array grows, and in the executable graph's copy) */
    unsigned child;            /* 0: a node of the graph itself; k: copied from its k-th child graph node
                                  (CUPTI numbers those after the graph's own nodes: launch.c, instantiation) */
};
struct CUgraph_st { uint32_t magic; uint32_t id; struct sim_gnode *nodes; unsigned n, cap; };
struct CUgraphExec_st { uint32_t magic; uint32_t id; struct sim_gnode *nodes; unsigned n; };
struct CUfunc_st {
    uint32_t magic;
    char *name;
    simcu_kernel_fn fn;
    unsigned nparams;
    size_t *offsets;
    size_t *sizes;
    size_t argsize; /* max(offset + size) */
    struct CUfunc_st *next_free; /* module.c: unloaded functions are handed out again */
    int has_dur;                 /* simcuSetKernelDuration was called */
    uint64_t dur_ns;
};

/* ---- core.c ---- */
HIDDEN int sim_ndevices(void);
HIDDEN int sim_physical_device(int ordinal);                /* CUDA_VISIBLE_DEVICES remap */
HIDDEN void sim_uuid_bytes(int physical, unsigned char out[16]);
HIDDEN void sim_uuid_text(int physical, char *buf, size_t n); /* GPU-xxxxxxxx-... */
HIDDEN size_t sim_capacity(void);
HIDDEN int sim_initialized(void);
/* CUDA_SUCCESS and *dev = the current context's device, or an error */
HIDDEN CUresult sim_current_device(int *dev);
HIDDEN CUresult sim_check_stream(CUstream s);
HIDDEN uint64_t sim_now_ns(void);
/* residency.c: managed memory on the device clock, resident device bytes */
HIDDEN void sim_res_device_bytes(int device, int64_t delta);
HIDDEN void sim_res_stream_time(uint64_t t);
HIDDEN void sim_res_managed_alloc(uint64_t addr, uint64_t size, int device);
HIDDEN void sim_res_managed_free(uint64_t addr);
HIDDEN CUresult sim_res_prefetch(uint64_t p, uint64_t n, int to_device, int device, struct sim_queue *q);
HIDDEN int sim_res_kernel_begin(struct sim_queue *q, void **params, const size_t *sizes, unsigned nparams,
                                struct sim_opdesc *op, uint64_t *touched, int *fresh, int max);
HIDDEN void sim_res_kernel_end(const uint64_t *touched, const int *fresh, int nt, uint64_t start, uint64_t end);
HIDDEN uint64_t sim_res_managed_resident(int dev);
HIDDEN uint64_t sim_res_peak(int dev);
HIDDEN CUresult sim_res_discard(uint64_t p, struct sim_queue *q);
/* faults, prefetches, prefetch_bytes, evictions, evicted_bytes, no_room */
HIDDEN void sim_res_counts(uint64_t c[7]);
/* the device-clock queue behind stream s (NULL/legacy/per-thread: the current device's) */
HIDDEN CUresult sim_stream_queue(CUstream s, struct sim_queue **q);

/* ---- launch.c ---- */
/* append a node to the graph a stream is capturing into; returns a pointer to fill (NULL: no memory) */
HIDDEN struct sim_gnode *sim_graph_add(struct CUgraph_st *g);
/* a captured node is filled in: tell CUPTI (GRAPHNODE_CREATED), on the capturing thread */
HIDDEN void sim_graph_node_created(struct CUgraph_st *g, struct sim_gnode *n);

/* ---- module.c ---- */
HIDDEN void sim_image_kernel(CUfunction f, void **params); /* body of kernels loaded from an image */

/* ---- memory.c ---- */
enum sim_kind { SK_DEVICE = 1, SK_PITCH, SK_ASYNC, SK_MANAGED, SK_HOST,
                SK_GRAPH /* a graph memory node's address: reserved at capture, memory charged per replay */ };
HIDDEN CUresult sim_mem_alloc(CUdeviceptr *out, size_t size, enum sim_kind kind, int device,
                              CUmemoryPool pool);
HIDDEN CUresult sim_mem_free(CUdeviceptr p, int host);
HIDDEN CUresult sim_mem_used(int device, size_t *used);
/* physical memory outside the allocation table (cuMemCreate): charge against the device's capacity
 * (CUDA_ERROR_OUT_OF_MEMORY when it does not fit) and give back */
HIDDEN CUresult sim_mem_charge(int device, size_t size);
HIDDEN void sim_mem_uncharge(int device, size_t size);
HIDDEN CUmemoryPool sim_default_pool(int device);
/* the bytes of the graph memory node allocation at p (0: not one) and its device */
HIDDEN uint64_t sim_graph_block(CUdeviceptr p, int *dev);
/* ---- graphmem.c: the graph memory pool of each device ---- */
HIDDEN CUresult sim_graph_mem_take(int dev, uint64_t bytes);
HIDDEN void sim_graph_mem_give(int dev, uint64_t bytes);
/* ---- launch.c: memory nodes appended to a graph (capture or explicit construction) ---- */
HIDDEN CUresult sim_graph_alloc_node(struct CUgraph_st *g, CUdeviceptr p, uint64_t bytes, int dev);
HIDDEN CUresult sim_graph_free_node(struct CUgraph_st *g, CUdeviceptr p, uint64_t bytes, int dev);
/* ---- graphbuild.c: a node copied with its own argument buffer (ids and handle of dst kept) ---- */
HIDDEN CUresult sim_graph_node_copy(struct sim_gnode *dst, const struct sim_gnode *src);
/* SIMCUDA_STATS / SIMCUDA_CHECK (memory.c): the device's high-water mark, counters written at exit */
HIDDEN void sim_count_stream_wait(void);
HIDDEN void sim_count_event_record(void);

#endif
