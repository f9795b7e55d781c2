/*
 * hook_each.c — calls every function of native/shim/hooks.def once, on simcuda, each between two
 * pyinterpose.mark_step markers named after it, and prints what it did: one JSON line per hook, the
 * record the shim must have written for that call (tests/integration/test_hook_each.py reads them back).
 *
 *   hook_each            (run under `pyinterpose run --simulated-gpu`, SIMCUDA_DEVICES=2)
 *
 * Every function is reached by its exported name (dlsym(RTLD_DEFAULT): the preloaded shim's wrapper).
 * A line: {"hook": H, "pid": P, "api": A, "op": OP, "kind": K, "addr": .., "size": .., "stream": ..,
 * "aux": .., "flags": F, "device": D, "acc": [block bases the call's ACCESS records name]}; fields left out
 * are not checked.  `api` is H except for the hooks that write no record of their own (the device and
 * context hooks, the unloads): their line describes a probe call made right after them, whose record
 * shows their effect (the device it is on; the layout a kernel handle is scanned with).  The IPC opens
 * and closes run in a fork() child (simcuda, like CUDA, refuses to open a process's own handle).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pi_cuda.h"
#include "simcuda.h"

#define CHECK(x)                                                                                     \
    do {                                                                                             \
        long rc_ = (long)(x);                                                                        \
        if (rc_) {                                                                                   \
            fprintf(stderr, "hook_each: %s:%d %s -> %ld\n", __FILE__, __LINE__, #x, rc_);            \
            exit(3);                                                                                 \
        }                                                                                            \
    } while (0)

static void *fn(const char *name) {
    void *p = dlsym(RTLD_DEFAULT, name);
    if (!p) {
        fprintf(stderr, "hook_each: no %s\n", name);
        exit(2);
    }
    return p;
}
/* call the exported function NAME with the prototype PROTO */
#define CALL(name, proto, ...) (((int(*) proto)fn(#name))(__VA_ARGS__))

static int (*g_mark)(const char *);
static void mark(const char *label) {
    if (g_mark) g_mark(label);
}

/* ---- the expected record, as one JSON line ---- */
typedef struct {
    const char *hook, *api, *op, *kind;
    int has_addr, has_size, has_stream, has_aux, has_device, has_flags;
    uint64_t addr, size, stream, aux;
    int device;
    const char *flags; /* a name of an events.h enum (pi_graph_def, pi_access_flags...) */
    int nacc;
    uint64_t acc[4];
} expect;

#define E(h, o) expect e = {.hook = #h, .api = #h, .op = o}
#define ADDR(v) (e.has_addr = 1, e.addr = (uint64_t)(v))
#define SIZE(v) (e.has_size = 1, e.size = (uint64_t)(v))
#define STREAM(v) (e.has_stream = 1, e.stream = (uint64_t)(uintptr_t)(v))
#define AUX(v) (e.has_aux = 1, e.aux = (uint64_t)(v))
#define DEVICE(v) (e.has_device = 1, e.device = (v))
#define ACC(v) (e.acc[e.nacc++] = (uint64_t)(v))

static void emit(const expect *e) {
    printf("{\"hook\": \"%s\", \"pid\": %d, \"api\": \"%s\", \"op\": \"%s\"", e->hook, (int)getpid(), e->api, e->op);
    if (e->kind) printf(", \"kind\": \"%s\"", e->kind);
    if (e->flags) printf(", \"flags\": \"%s\"", e->flags);
    if (e->has_addr) printf(", \"addr\": %llu", (unsigned long long)e->addr);
    if (e->has_size) printf(", \"size\": %llu", (unsigned long long)e->size);
    if (e->has_stream) printf(", \"stream\": %llu", (unsigned long long)e->stream);
    if (e->has_aux) printf(", \"aux\": %llu", (unsigned long long)e->aux);
    if (e->has_device) printf(", \"device\": %d", e->device);
    printf(", \"acc\": [");
    for (int i = 0; i < e->nacc; i++) printf("%s%llu", i ? ", " : "", (unsigned long long)e->acc[i]);
    printf("]}\n");
    fflush(stdout);
    mark("done"); /* the hook's window ends here: the next case's setup is outside it */
}

/* ---- state shared by the cases ---- */
static CUstream g_s;            /* a created stream (captures need one) */
static CUmemoryPool g_pool;
static CUfunction g_kfn;        /* a driver kernel: one pointer parameter */
static char g_stub;             /* a runtime host stub: one pointer parameter */
static CUgraphExec g_exec;      /* a graph with one kernel node */
static CUcontext g_ctx[2];      /* the two devices' primary contexts */
static const size_t g_off1[] = {0}, g_size1[] = {8};
static void kernel(void **params) { (void)params; }

static uint64_t dalloc(size_t n) { /* a device block, through the driver */
    CUdeviceptr p = 0;
    CHECK(CALL(cuMemAlloc_v2, (CUdeviceptr *, size_t), &p, n));
    return p;
}
static void dfree(uint64_t p) { CHECK(CALL(cuMemFree_v2, (CUdeviceptr), p)); }
static uint64_t loc_dev(int id) { return 1ull | (uint64_t)(unsigned)id << 32; } /* CUmemLocation device id */

/* ================================================================ allocations */
static void c_rt_alloc(const char *hook, const char *kind, int form) {
    void *p = NULL;
    size_t n = 4096 + 64 * (size_t)form, pitch = 0;
    expect e = {.hook = hook, .api = hook, .op = "ALLOC", .kind = kind};
    STREAM(0);
    mark(hook);
    switch (form) {
    case 0: CHECK(CALL(cudaMalloc, (void **, size_t), &p, n)); break;
    case 1: CHECK(((int (*)(void **, size_t, CUstream))fn(hook))(&p, n, g_s)); STREAM(g_s); break;
    case 2: CHECK(((int (*)(void **, size_t, CUmemoryPool, CUstream))fn(hook))(&p, n, g_pool, g_s));
        STREAM(g_s); AUX(g_pool); break;
    case 3: CHECK(CALL(cudaMallocManaged, (void **, size_t, unsigned), &p, n, 1)); AUX(1); break;
    case 4: CHECK(CALL(cudaMallocPitch, (void **, size_t *, size_t, size_t), &p, &pitch, 100, 3)); n = pitch * 3; break;
    case 5: CHECK(CALL(cudaMallocHost, (void **, size_t), &p, n)); break;
    case 6: CHECK(CALL(cudaHostAlloc, (void **, size_t, unsigned), &p, n, 2)); AUX(2); break;
    }
    ADDR(p);
    SIZE(n);
    DEVICE(0);
    emit(&e);
}

static void c_drv_alloc(const char *hook, const char *kind, int form) {
    CUdeviceptr p = 0;
    void *hp = NULL;
    size_t n = 8192 + 64 * (size_t)form, pitch = 0;
    expect e = {.hook = hook, .api = hook, .op = "ALLOC", .kind = kind};
    STREAM(0);
    mark(hook);
    switch (form) {
    case 0: CHECK(CALL(cuMemAlloc_v2, (CUdeviceptr *, size_t), &p, n)); break;
    case 1: CHECK(CALL(cuMemAllocPitch_v2, (CUdeviceptr *, size_t *, size_t, size_t, unsigned), &p, &pitch, 100, 3, 4));
        n = pitch * 3; break;
    case 2: CHECK(CALL(cuMemAllocManaged, (CUdeviceptr *, size_t, unsigned), &p, n, 1)); AUX(1); break;
    case 3: CHECK(((int (*)(CUdeviceptr *, size_t, CUstream))fn(hook))(&p, n, g_s)); STREAM(g_s); break;
    case 4: CHECK(((int (*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream))fn(hook))(&p, n, g_pool, g_s));
        STREAM(g_s); AUX(g_pool); break;
    case 5: CHECK(CALL(cuMemAllocHost_v2, (void **, size_t), &hp, n)); p = (CUdeviceptr)(uintptr_t)hp; break;
    case 6: CHECK(CALL(cuMemHostAlloc, (void **, size_t, unsigned), &hp, n, 2)); p = (CUdeviceptr)(uintptr_t)hp;
        AUX(2); break;
    }
    ADDR(p);
    SIZE(n);
    DEVICE(0);
    emit(&e);
}

/* ================================================================ frees */
static void c_free(const char *hook, const char *kind, int form) {
    size_t n = 12288 + 64 * (size_t)form;
    void *p = NULL;
    CUdeviceptr d = 0;
    expect e = {.hook = hook, .api = hook, .op = "FREE", .kind = kind};
    STREAM(0);
    SIZE(n);
    switch (form) {
    case 0: CHECK(CALL(cudaMalloc, (void **, size_t), &p, n)); mark(hook); CHECK(CALL(cudaFree, (void *), p)); break;
    case 1: CHECK(CALL(cudaMallocAsync, (void **, size_t, CUstream), &p, n, g_s)); mark(hook);
        CHECK(((int (*)(void *, CUstream))fn(hook))(p, g_s)); STREAM(g_s); break;
    case 2: CHECK(CALL(cudaMallocHost, (void **, size_t), &p, n)); mark(hook); CHECK(CALL(cudaFreeHost, (void *), p)); break;
    case 3: d = dalloc(n); p = (void *)(uintptr_t)d; mark(hook); CHECK(CALL(cuMemFree_v2, (CUdeviceptr), d)); break;
    case 4: CHECK(CALL(cuMemAllocAsync, (CUdeviceptr *, size_t, CUstream), &d, n, g_s)); p = (void *)(uintptr_t)d;
        mark(hook); CHECK(((int (*)(CUdeviceptr, CUstream))fn(hook))(d, g_s)); STREAM(g_s); break;
    case 5: CHECK(CALL(cuMemAllocHost_v2, (void **, size_t), &p, n)); mark(hook); CHECK(CALL(cuMemFreeHost, (void *), p));
        break;
    }
    ADDR(p);
    emit(&e);
}

/* ================================================================ UVM hints */
static void c_hint(const char *hook, int form) {
    void *m = NULL;
    size_t n = 1 << 16;
    CHECK(CALL(cudaMallocManaged, (void **, size_t, unsigned), &m, n, 1));
    uint64_t p = (uint64_t)(uintptr_t)m;
    expect e = {.hook = hook, .api = hook};
    ADDR(p);
    SIZE(n / 2);
    mark(hook);
    switch (form) {
    case 0: /* (ptr, n, advice, location or device) */
        e.op = "ADVISE";
        CHECK(((int (*)(uint64_t, size_t, int, uint64_t))fn(hook))(p, n / 2, 3, loc_dev(0)));
        AUX(3); STREAM(loc_dev(0)); break;
    case 1: /* cuMemAdvise: (ptr, n, advice, CUdevice) */
        e.op = "ADVISE";
        CHECK(((int (*)(uint64_t, size_t, int, int))fn(hook))(p, n / 2, 3, 0));
        AUX(3); STREAM(0); break;
    case 2: /* runtime 13: (ptr, n, location, flags, stream) */
        e.op = "PREFETCH";
        CHECK(((int (*)(uint64_t, size_t, uint64_t, unsigned, CUstream))fn(hook))(p, n / 2, loc_dev(0), 0, g_s));
        AUX(loc_dev(0)); STREAM(g_s); break;
    case 3: /* cuMemPrefetchAsync: (ptr, n, CUdevice, stream) */
        e.op = "PREFETCH";
        CHECK(((int (*)(uint64_t, size_t, int, CUstream))fn(hook))(p, n / 2, 0, g_s));
        AUX(0); STREAM(g_s); break;
    }
    emit(&e);
    CHECK(CALL(cudaFree, (void *), m));
}

/* ================================================================ launches */
static void c_launch(const char *hook, int form) {
    size_t n = 20480;
    uint64_t b = dalloc(n);
    void *arg = (void *)(uintptr_t)b;
    void *params[] = {&arg};
    dim3 one = {1, 1, 1};
    expect e = {.hook = hook, .api = hook, .op = "LAUNCH"};
    STREAM(g_s);
    SIZE(8); /* parameter bytes scanned: one pointer */
    ACC(b);
    mark(hook);
    switch (form) {
    case 0: /* runtime (stub, grid, block, args, smem, stream) */
        CHECK(((int (*)(const void *, dim3, dim3, void **, size_t, CUstream))fn(hook))(&g_stub, one, one, params, 0, g_s));
        ADDR(&g_stub); break;
    case 1: { /* cudaLaunchKernelExC */
        cudaLaunchConfig_t cfg = {one, one, 0, g_s, NULL, 0};
        CHECK(((int (*)(const cudaLaunchConfig_t *, const void *, void **))fn(hook))(&cfg, &g_stub, params));
        ADDR(&g_stub); break;
    }
    case 2: /* cuLaunchKernel */
        CHECK(((int (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **))fn(hook))(g_kfn, 1, 1, 1, 1, 1, 1, 0, g_s, params, NULL));
        ADDR(g_kfn); break;
    case 3: { /* cuLaunchKernelEx */
        CUlaunchConfig cfg = {1, 1, 1, 1, 1, 1, 0, g_s, NULL, 0};
        CHECK(((int (*)(const CUlaunchConfig *, CUfunction, void **, void **))fn(hook))(&cfg, g_kfn, params, NULL));
        ADDR(g_kfn); break;
    }
    case 5: { /* __cudaLaunchKernel: what nvcc 13's <<<>>> calls, with the cudaKernel_t of the stub */
        cudaKernel_t k = NULL;
        CHECK(CALL(__cudaGetKernel, (cudaKernel_t *, const void *), &k, &g_stub)); /* not hooked: no record */
        CHECK(((int (*)(cudaKernel_t, dim3, dim3, void **, size_t, CUstream))fn(hook))(k, one, one, params, 0, g_s));
        ADDR(k); break;
    }
    case 4: /* cuLaunchCooperativeKernel */
        CHECK(((int (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **))fn(hook))(g_kfn, 1, 1, 1, 1, 1, 1, 0, g_s, params));
        ADDR(g_kfn); break;
    }
    emit(&e);
    CHECK(CALL(cuStreamSynchronize, (CUstream), g_s));
    dfree(b);
}

static void c_graph_launch(const char *hook) {
    expect e = {.hook = hook, .api = hook, .op = "GRAPH_LAUNCH"};
    ADDR(g_exec);
    STREAM(g_s);
    mark(hook);
    CHECK(((int (*)(CUgraphExec, CUstream))fn(hook))(g_exec, g_s));
    emit(&e);
    CHECK(CALL(cuStreamSynchronize, (CUstream), g_s));
}

/* ================================================================ copies and sets */
enum { D2D, H2D, D2H };
static void c_copy(const char *hook, int form, int dir, int async) {
    size_t n = 24576;
    uint64_t a = dalloc(n), b = dalloc(n);
    char *host = calloc(1, n);
    uint64_t dst = dir == D2H ? (uint64_t)(uintptr_t)host : a, src = dir == H2D ? (uint64_t)(uintptr_t)host : b;
    expect e = {.hook = hook, .api = hook, .op = "COPY"};
    ADDR(dst);
    AUX(src);
    SIZE(n / 2);
    STREAM(async ? (uint64_t)(uintptr_t)g_s : 0);
    if (dir != D2H) ACC(a);
    if (dir != H2D) ACC(b);
    mark(hook);
    if (form == 0) { /* runtime: (dst, src, n, kind[, stream]) */
        int kind = dir == D2D ? 3 : dir == H2D ? 1 : 2;
        if (async) CHECK(((int (*)(uint64_t, uint64_t, size_t, int, CUstream))fn(hook))(dst, src, n / 2, kind, g_s));
        else CHECK(((int (*)(uint64_t, uint64_t, size_t, int))fn(hook))(dst, src, n / 2, kind));
    } else { /* driver: (dst, src, n[, stream]) */
        if (async) CHECK(((int (*)(uint64_t, uint64_t, size_t, CUstream))fn(hook))(dst, src, n / 2, g_s));
        else CHECK(((int (*)(uint64_t, uint64_t, size_t))fn(hook))(dst, src, n / 2));
    }
    emit(&e);
    CHECK(CALL(cuStreamSynchronize, (CUstream), g_s));
    dfree(a);
    dfree(b);
    free(host);
}

static void c_memset(const char *hook, int form, int async) {
    size_t n = 28672;
    uint64_t a = dalloc(n);
    expect e = {.hook = hook, .api = hook, .op = "MEMSET"};
    ADDR(a);
    STREAM(async ? (uint64_t)(uintptr_t)g_s : 0);
    ACC(a);
    mark(hook);
    switch (form) {
    case 0: /* runtime: (dst, value, n[, stream]) */
        if (async) CHECK(((int (*)(uint64_t, int, size_t, CUstream))fn(hook))(a, 7, 1000, g_s));
        else CHECK(((int (*)(uint64_t, int, size_t))fn(hook))(a, 7, 1000));
        SIZE(1000); break;
    case 1: /* cuMemsetD8: n bytes */
        if (async) CHECK(((int (*)(uint64_t, unsigned char, size_t, CUstream))fn(hook))(a, 7, 1000, g_s));
        else CHECK(((int (*)(uint64_t, unsigned char, size_t))fn(hook))(a, 7, 1000));
        SIZE(1000); break;
    case 2: /* cuMemsetD32: n words */
        if (async) CHECK(((int (*)(uint64_t, unsigned, size_t, CUstream))fn(hook))(a, 7, 1000, g_s));
        else CHECK(((int (*)(uint64_t, unsigned, size_t))fn(hook))(a, 7, 1000));
        SIZE(4000); break;
    }
    emit(&e);
    CHECK(CALL(cuStreamSynchronize, (CUstream), g_s));
    dfree(a);
}

static void c_tensormap(const char *hook) {
    size_t n = 32768;
    uint64_t a = dalloc(n);
    _Alignas(64) char map[128];
    uint64_t dims[2] = {64, 64}, strides[1] = {256};
    unsigned box[2] = {8, 8}, estr[2] = {1, 1};
    expect e = {.hook = hook, .api = hook, .op = "TENSORMAP"};
    ADDR(a);
    ACC(a);
    mark(hook);
    CHECK(CALL(cuTensorMapEncodeTiled, (void *, int, unsigned, void *, const uint64_t *, const uint64_t *,
                                        const unsigned *, const unsigned *, int, int, int, int),
               map, 7, 2, (void *)(uintptr_t)a, dims, strides, box, estr, 0, 0, 0, 0));
    emit(&e);
    dfree(a);
}

/* ================================================================ VMM */
static CUmemAllocationProp vmm_prop(int handle_types) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;
    prop.requestedHandleTypes = handle_types;
    prop.location.type = 1;
    prop.location.id = 0;
    return prop;
}
#define VMM_SIZE (2u << 20)

static void c_vmm(const char *hook) {
    CUdeviceptr va = 0;
    CUmemGenericAllocationHandle h = 0;
    CUmemAllocationProp prop = vmm_prop(1);
    expect e = {.hook = hook, .api = hook};
    STREAM(0);
    int reserve = !strcmp(hook, "cuMemAddressReserve"), create = !strcmp(hook, "cuMemCreate"),
        map = !strcmp(hook, "cuMemMap"), unmap = !strcmp(hook, "cuMemUnmap"),
        release = !strcmp(hook, "cuMemRelease"), afree = !strcmp(hook, "cuMemAddressFree");
    if (reserve) mark(hook);
    CHECK(CALL(cuMemAddressReserve, (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long), &va, VMM_SIZE,
               0, 0, 0));
    if (reserve) { e.op = "ALLOC"; e.kind = "VMM_RESERVE"; ADDR(va); SIZE(VMM_SIZE); }
    if (create) mark(hook);
    CHECK(CALL(cuMemCreate, (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long),
               &h, VMM_SIZE, &prop, 0));
    if (create) { e.op = "ALLOC"; e.kind = "VMM_CREATE"; ADDR(0); SIZE(VMM_SIZE); STREAM(1); AUX(h); }
    if (map) mark(hook);
    CHECK(CALL(cuMemMap, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long), va, VMM_SIZE,
               0, h, 0));
    if (map) { e.op = "ALLOC"; e.kind = "VMM_MAP"; ADDR(va); SIZE(VMM_SIZE); AUX(h); }
    if (unmap) mark(hook);
    CHECK(CALL(cuMemUnmap, (CUdeviceptr, size_t), va, VMM_SIZE));
    if (unmap) { e.op = "FREE"; e.kind = "VMM_MAP"; ADDR(va); SIZE(VMM_SIZE); }
    if (release) mark(hook);
    CHECK(CALL(cuMemRelease, (CUmemGenericAllocationHandle), h));
    if (release) { e.op = "FREE"; e.kind = "VMM_CREATE"; ADDR(0); AUX(h); }
    if (afree) mark(hook);
    CHECK(CALL(cuMemAddressFree, (CUdeviceptr, size_t), va, VMM_SIZE));
    if (afree) { e.op = "FREE"; e.kind = "VMM_RESERVE"; ADDR(va); }
    emit(&e);
}

/* ================================================================ graphs built node by node */
static CUgraph new_graph(void) {
    CUgraph g = NULL;
    CHECK(CALL(cuGraphCreate, (CUgraph *, unsigned), &g, 0));
    return g;
}

static CUgraphNode kernel_node(CUgraph g, void **params) {
    CUgraphNode n = NULL;
    CUDA_KERNEL_NODE_PARAMS kp;
    memset(&kp, 0, sizeof kp);
    kp.func = g_kfn, kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1, kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = params;
    CHECK(CALL(cuGraphAddKernelNode_v2, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                         const CUDA_KERNEL_NODE_PARAMS *), &n, g, NULL, 0, &kp));
    return n;
}

/* form: 0 create, 1 kernel node (driver), 2 kernel node (runtime), 3 memset node (driver), 4 memset (runtime),
 * 5 memcpy node (driver), 6 memcpy 1D (runtime), 7 child graph, 8 memory alloc node, 9 memory free node,
 * 10 exec kernel node set params (driver), 11 (runtime), 12 exec update;
 * the generic node API: 13 cuGraphAddNode (12.2 ABI) kernel node, 14 cuGraphAddNode_v2 memcpy node,
 * 15 cudaGraphAddNode (13.x ABI) memory alloc node after one dependency (its NODE_ADD record: the dependency
 * count is read from the right argument), 16 cudaGraphAddNode_v2 memset node, 17 cuGraphExecNodeSetParams
 * (kernel), 18 cudaGraphExecNodeSetParams (kernel);
 * an executable graph's memcpy, memset and child graph nodes given new parameters: 19 cuGraphExecMemcpyNodeSetParams,
 * 20 cuGraphExecMemsetNodeSetParams, 21 cuGraphExecChildGraphNodeSetParams, 22 cudaGraphExecMemcpyNodeSetParams1D,
 * 23 cudaGraphExecMemsetNodeSetParams, 24 cudaGraphExecChildGraphNodeSetParams */
static void c_graph_build(const char *hook, int form) {
    expect e = {.hook = hook, .api = hook};
    uint64_t b = dalloc(4096), b2 = dalloc(4096);
    void *arg = (void *)(uintptr_t)b, *params[] = {&arg};
    CUgraph g = form == 0 ? NULL : new_graph(), g2 = NULL;
    CUgraphNode n = NULL;
    CUgraphExec x = NULL;
    CUDA_MEM_ALLOC_NODE_PARAMS ap;
    memset(&ap, 0, sizeof ap);
    ap.poolProps.allocType = 1, ap.poolProps.location.type = 1, ap.bytesize = 1 << 16;
    if (form == 9)
        CHECK(CALL(cuGraphAddMemAllocNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                            CUDA_MEM_ALLOC_NODE_PARAMS *), &n, g, NULL, 0, &ap));
    CUgraph child = NULL;
    if (form == 7) { /* the child and its own node: outside the window */
        child = new_graph();
        kernel_node(child, params);
    }
    int exec_form = (form >= 10 && form <= 12) || form == 17 || form == 18;
    if (form == 15) { /* the dependency: an empty node */
        CUgraphNodeParams ep;
        memset(&ep, 0, sizeof ep);
        ep.type = CU_GRAPH_NODE_TYPE_EMPTY;
        CHECK(CALL(cuGraphAddNode_v2, (CUgraphNode *, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t,
                                       CUgraphNodeParams *), &n, g, NULL, NULL, 0, &ep));
    }
    int exec2 = form >= 19 && form <= 24;
    CUgraph child2 = NULL;
    if (exec2) { /* the node to update, in an executable graph: outside the window */
        if (form == 19 || form == 22) {
            CUDA_MEMCPY3D c;
            memset(&c, 0, sizeof c);
            c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
            c.srcDevice = b, c.dstDevice = b2, c.WidthInBytes = 2048, c.Height = c.Depth = 1;
            CHECK(CALL(cuGraphAddMemcpyNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                              const CUDA_MEMCPY3D *, CUcontext), &n, g, NULL, 0, &c, NULL));
        } else if (form == 20 || form == 23) {
            CUDA_MEMSET_NODE_PARAMS mp = {b, 0, 0, 1, 4096, 1};
            CHECK(CALL(cuGraphAddMemsetNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                              const CUDA_MEMSET_NODE_PARAMS *, CUcontext), &n, g, NULL, 0, &mp, NULL));
        } else {
            child = new_graph();
            kernel_node(child, params);
            child2 = new_graph();
            kernel_node(child2, params);
            CHECK(CALL(cuGraphAddChildGraphNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUgraph), &n,
                       g, NULL, 0, child));
        }
        CHECK(CALL(cuGraphInstantiateWithFlags, (CUgraphExec *, CUgraph, unsigned long long), &x, g, 0));
    }
    if (exec_form) {
        n = kernel_node(g, params);
        if (form == 12) {
            g2 = new_graph();
            kernel_node(g2, params);
        }
        CHECK(CALL(cuGraphInstantiateWithFlags, (CUgraphExec *, CUgraph, unsigned long long), &x, g, 0));
    }
    mark(hook);
    switch (form) {
    case 0:
        CHECK(((int (*)(CUgraph *, unsigned))fn(hook))(&g, 0));
        e.op = "GRAPH_DEF", e.flags = "PI_GRAPH_CREATE", AUX(g);
        break;
    case 1: case 2: {
        if (form == 1) {
            CUDA_KERNEL_NODE_PARAMS kp;
            memset(&kp, 0, sizeof kp);
            kp.func = g_kfn, kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
            kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1, kp.kernelParams = params;
            CHECK(((int (*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, const CUDA_KERNEL_NODE_PARAMS *))
                   fn(hook))(&n, g, NULL, 0, &kp));
            ADDR(g_kfn);
        } else {
            cudaKernelNodeParams kp = {&g_stub, {1, 1, 1}, {1, 1, 1}, 0, params, NULL};
            CHECK(((int (*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, const cudaKernelNodeParams *))
                   fn(hook))(&n, g, NULL, 0, &kp));
            ADDR(&g_stub);
        }
        e.op = "LAUNCH", ACC(b);
        break;
    }
    case 3: case 4:
        if (form == 3) {
            CUDA_MEMSET_NODE_PARAMS mp = {b, 0, 0, 1, 4096, 1};
            CHECK(((int (*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, const CUDA_MEMSET_NODE_PARAMS *,
                            CUcontext))fn(hook))(&n, g, NULL, 0, &mp, NULL));
        } else {
            cudaMemsetParams mp = {(void *)(uintptr_t)b, 0, 0, 1, 4096, 1};
            CHECK(((int (*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, const cudaMemsetParams *))
                   fn(hook))(&n, g, NULL, 0, &mp));
        }
        e.op = "MEMSET", ADDR(b), SIZE(4096), ACC(b);
        break;
    case 5: case 6:
        if (form == 5) {
            CUDA_MEMCPY3D c;
            memset(&c, 0, sizeof c);
            c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
            c.srcDevice = b, c.dstDevice = b2, c.WidthInBytes = 2048, c.Height = c.Depth = 1;
            CHECK(((int (*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, const CUDA_MEMCPY3D *, CUcontext))
                   fn(hook))(&n, g, NULL, 0, &c, NULL));
        } else {
            CHECK(((int (*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, void *, const void *, size_t, int))
                   fn(hook))(&n, g, NULL, 0, (void *)(uintptr_t)b2, (void *)(uintptr_t)b, 2048, 3));
        }
        e.op = "COPY", ADDR(b2), SIZE(2048), AUX(b), ACC(b2), ACC(b);
        break;
    case 7: {
        CHECK(((int (*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUgraph))fn(hook))(&n, g, NULL, 0, child));
        e.op = "GRAPH_DEF", e.flags = "PI_GRAPH_CHILD", ADDR(n), STREAM(child), AUX(g);
        CHECK(CALL(cuGraphDestroy, (CUgraph), child));
        break;
    }
    case 8:
        CHECK(((int (*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUDA_MEM_ALLOC_NODE_PARAMS *))
               fn(hook))(&n, g, NULL, 0, &ap));
        e.op = "ALLOC", e.kind = "ASYNC", ADDR(ap.dptr), SIZE(1 << 16), STREAM(0);
        break;
    case 9: {
        CUgraphNode f = NULL;
        CHECK(((int (*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUdeviceptr))fn(hook))(&f, g, &n, 1,
                                                                                                   ap.dptr));
        e.op = "FREE", e.kind = "ASYNC", ADDR(ap.dptr), SIZE(1 << 16);
        break;
    }
    case 10: case 11: {
        void *arg2 = (void *)(uintptr_t)b2, *params2[] = {&arg2};
        if (form == 10) {
            CUDA_KERNEL_NODE_PARAMS kp;
            memset(&kp, 0, sizeof kp);
            kp.func = g_kfn, kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
            kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1, kp.kernelParams = params2;
            CHECK(((int (*)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS *))fn(hook))(x, n, &kp));
            ADDR(g_kfn);
        } else {
            cudaKernelNodeParams kp = {&g_stub, {1, 1, 1}, {1, 1, 1}, 0, params2, NULL};
            CHECK(((int (*)(CUgraphExec, CUgraphNode, const cudaKernelNodeParams *))fn(hook))(x, n, &kp));
            ADDR(&g_stub);
        }
        e.op = "LAUNCH", ACC(b2);
        break;
    }
    case 13: case 14: {
        CUgraphNodeParams np;
        memset(&np, 0, sizeof np);
        if (form == 13) {
            np.type = CU_GRAPH_NODE_TYPE_KERNEL;
            np.kernel.func = g_kfn, np.kernel.gridDimX = np.kernel.gridDimY = np.kernel.gridDimZ = 1;
            np.kernel.blockDimX = np.kernel.blockDimY = np.kernel.blockDimZ = 1, np.kernel.kernelParams = params;
            CHECK(((int (*)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUgraphNodeParams *))fn(hook))(
                &n, g, NULL, 0, &np));
            e.op = "LAUNCH", ADDR(g_kfn), ACC(b);
        } else {
            np.type = CU_GRAPH_NODE_TYPE_MEMCPY;
            CUDA_MEMCPY3D *c = &np.memcpy.copyParams;
            c->srcMemoryType = c->dstMemoryType = CU_MEMORYTYPE_DEVICE;
            c->srcDevice = b, c->dstDevice = b2, c->WidthInBytes = 2048, c->Height = c->Depth = 1;
            CHECK(((int (*)(CUgraphNode *, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t,
                            CUgraphNodeParams *))fn(hook))(&n, g, NULL, NULL, 0, &np));
            e.op = "COPY", ADDR(b2), SIZE(2048), AUX(b), ACC(b2), ACC(b);
        }
        break;
    }
    case 15: case 16: {
        cudaGraphNodeParams np;
        memset(&np, 0, sizeof np);
        CUgraphNode dep = n;
        if (form == 15) {
            np.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
            np.alloc.poolProps.allocType = 1, np.alloc.poolProps.location.type = 1, np.alloc.bytesize = 1 << 16;
        } else {
            np.type = CU_GRAPH_NODE_TYPE_MEMSET;
            np.memset.dst = (void *)(uintptr_t)b, np.memset.elementSize = 1, np.memset.width = 4096;
            np.memset.height = 1;
        }
        CHECK(((int (*)(CUgraphNode *, CUgraph, const CUgraphNode *, const cudaGraphEdgeData *, size_t,
                        cudaGraphNodeParams *))fn(hook))(&n, g, form == 15 ? &dep : NULL, NULL, form == 15, &np));
        if (form == 15) e.op = "GRAPH_DEF", e.flags = "PI_GRAPH_NODE_ADD", ADDR(n), STREAM(1), AUX(g);
        else e.op = "MEMSET", ADDR(b), SIZE(4096), ACC(b);
        if (form == 15) CHECK(CALL(cuGraphAddMemFreeNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                                           CUdeviceptr), &dep, g, &n, 1, np.alloc.dptr));
        break;
    }
    case 17: case 18: {
        void *arg2 = (void *)(uintptr_t)b2, *params2[] = {&arg2};
        if (form == 17) {
            CUgraphNodeParams np;
            memset(&np, 0, sizeof np);
            np.type = CU_GRAPH_NODE_TYPE_KERNEL;
            np.kernel.func = g_kfn, np.kernel.gridDimX = np.kernel.gridDimY = np.kernel.gridDimZ = 1;
            np.kernel.blockDimX = np.kernel.blockDimY = np.kernel.blockDimZ = 1, np.kernel.kernelParams = params2;
            CHECK(((int (*)(CUgraphExec, CUgraphNode, CUgraphNodeParams *))fn(hook))(x, n, &np));
            ADDR(g_kfn);
        } else {
            cudaGraphNodeParams np;
            memset(&np, 0, sizeof np);
            np.type = CU_GRAPH_NODE_TYPE_KERNEL;
            np.kernel.func = &g_stub, np.kernel.gridDim = (dim3){1, 1, 1}, np.kernel.blockDim = (dim3){1, 1, 1};
            np.kernel.kernelParams = params2;
            CHECK(((int (*)(CUgraphExec, CUgraphNode, cudaGraphNodeParams *))fn(hook))(x, n, &np));
            ADDR(&g_stub);
        }
        e.op = "LAUNCH", ACC(b2);
        break;
    }
    case 19: case 22: { /* the copy now b <- b2 */
        if (form == 19) {
            CUDA_MEMCPY3D c;
            memset(&c, 0, sizeof c);
            c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
            c.srcDevice = b2, c.dstDevice = b, c.WidthInBytes = 1024, c.Height = c.Depth = 1;
            CHECK(((int (*)(CUgraphExec, CUgraphNode, const CUDA_MEMCPY3D *, CUcontext))fn(hook))(x, n, &c, NULL));
        } else {
            CHECK(((int (*)(CUgraphExec, CUgraphNode, void *, const void *, size_t, int))fn(hook))(
                x, n, (void *)(uintptr_t)b, (void *)(uintptr_t)b2, 1024, 3));
        }
        e.op = "COPY", ADDR(b), SIZE(1024), AUX(b2), ACC(b), ACC(b2);
        break;
    }
    case 20: case 23: /* the memset now on b2 */
        if (form == 20) {
            CUDA_MEMSET_NODE_PARAMS mp = {b2, 0, 0, 1, 2048, 1};
            CHECK(((int (*)(CUgraphExec, CUgraphNode, const CUDA_MEMSET_NODE_PARAMS *, CUcontext))fn(hook))(
                x, n, &mp, NULL));
        } else {
            cudaMemsetParams mp = {(void *)(uintptr_t)b2, 0, 0, 1, 2048, 1};
            CHECK(((int (*)(CUgraphExec, CUgraphNode, const cudaMemsetParams *))fn(hook))(x, n, &mp));
        }
        e.op = "MEMSET", ADDR(b2), SIZE(2048), ACC(b2);
        break;
    case 21: case 24:
        CHECK(((int (*)(CUgraphExec, CUgraphNode, CUgraph))fn(hook))(x, n, child2));
        e.op = "GRAPH_DEF", e.flags = "PI_GRAPH_EXEC_CHILD", ADDR(x), STREAM(child2), AUX(n);
        CHECK(CALL(cuGraphDestroy, (CUgraph), child));
        CHECK(CALL(cuGraphDestroy, (CUgraph), child2));
        break;
    case 12: {
        CUgraphExecUpdateResultInfo info;
        CHECK(((int (*)(CUgraphExec, CUgraph, CUgraphExecUpdateResultInfo *))fn(hook))(x, g2, &info));
        e.op = "GRAPH_DEF", e.flags = "PI_GRAPH_EXEC_UPDATE", ADDR(x), AUX(g2);
        break;
    }
    }
    emit(&e);
    if (x) CHECK(CALL(cuGraphExecDestroy, (CUgraphExec), x));
    if (g2) CHECK(CALL(cuGraphDestroy, (CUgraph), g2));
    CHECK(CALL(cuGraphDestroy, (CUgraph), g));
    dfree(b);
    dfree(b2);
}

/* ================================================================ stream capture, instantiation */
static void c_capture(const char *hook, int form) {
    CUgraph g = NULL, into = NULL;
    expect e = {.hook = hook, .api = hook, .op = "GRAPH_DEF"};
    STREAM(g_s);
    int end = strstr(hook, "EndCapture") != NULL;
    if (form == 2) CHECK(CALL(cuGraphCreate, (CUgraph *, unsigned), &into, 0));
    if (!end) mark(hook);
    if (end) /* begun through the other family's plain form */
        CHECK(CALL(cuStreamBeginCapture_v2, (CUstream, int), g_s, 0));
    else if (form == 0) CHECK(((int (*)(CUstream))fn(hook))(g_s));            /* cuStreamBeginCapture */
    else if (form == 1) CHECK(((int (*)(CUstream, int))fn(hook))(g_s, 0));    /* (stream, mode) */
    else CHECK(((int (*)(CUstream, CUgraph, const void *, const void *, size_t, int))fn(hook))(g_s, into, NULL, NULL, 0, 0));
    if (end) mark(hook);
    if (end) CHECK(((int (*)(CUstream, CUgraph *))fn(hook))(g_s, &g));
    else CHECK(CALL(cuStreamEndCapture, (CUstream, CUgraph *), g_s, &g));
    if (end) { e.flags = "PI_GRAPH_CAPTURE_END"; AUX(g); }
    else { e.flags = "PI_GRAPH_CAPTURE_BEGIN"; AUX(0); }
    emit(&e);
    CHECK(CALL(cuGraphDestroy, (CUgraph), g));
}

static void c_instantiate(const char *hook, int form) {
    CUgraph g = NULL;
    CUgraphExec x = NULL;
    CHECK(CALL(cuStreamBeginCapture_v2, (CUstream, int), g_s, 0));
    CHECK(CALL(cuStreamEndCapture, (CUstream, CUgraph *), g_s, &g));
    mark(hook);
    if (form == 0) CHECK(((int (*)(CUgraphExec *, CUgraph, unsigned long long))fn(hook))(&x, g, 0));
    else {
        struct { unsigned long long flags; CUstream upload; void *err_node; int result; } params = {0, NULL, NULL, -1};
        CHECK(((int (*)(CUgraphExec *, CUgraph, void *))fn(hook))(&x, g, &params));
        if (params.result != 0) exit(5);
    }
    expect e = {.hook = hook, .api = hook, .op = "GRAPH_DEF", .flags = "PI_GRAPH_INSTANTIATE"};
    ADDR(x);
    AUX(g);
    emit(&e);
    CHECK(CALL(cuGraphExecDestroy, (CUgraphExec), x));
    CHECK(CALL(cuGraphDestroy, (CUgraph), g));
}

/* ================================================================ shareable handles, multicast, IPC, pools */
static void c_share(const char *hook) {
    CUmemAllocationProp prop = vmm_prop(1);
    CUmemGenericAllocationHandle h = 0, h2 = 0, mc = 0;
    CHECK(CALL(cuMemCreate, (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long),
               &h, VMM_SIZE, &prop, 0));
    expect e = {.hook = hook, .api = hook};
    if (!strcmp(hook, "cuMemExportToShareableHandle") || !strcmp(hook, "cuMemImportFromShareableHandle")) {
        int fd = -1, exp = hook[5] == 'E';
        if (exp) mark(hook);
        CHECK(CALL(cuMemExportToShareableHandle, (void *, CUmemGenericAllocationHandle, int, unsigned long long), &fd, h,
                   1, 0));
        if (!exp) mark(hook);
        if (!exp) CHECK(CALL(cuMemImportFromShareableHandle, (CUmemGenericAllocationHandle *, void *, int), &h2,
                             (void *)(intptr_t)fd, 1));
        if (exp) { e.op = "OBJECT"; ADDR(0); SIZE(0); STREAM(1); AUX(h); }
        else { e.op = "ALLOC"; e.kind = "VMM_CREATE"; ADDR(0); SIZE(0); AUX(h2); }
        if (h2) CHECK(CALL(cuMemRelease, (CUmemGenericAllocationHandle), h2));
        close(fd);
    } else { /* multicast */
        CUmulticastObjectProp mp = {1, VMM_SIZE, 1, 0};
        CUdeviceptr va = 0;
        int create = !strcmp(hook, "cuMulticastCreate"), bmem = !strcmp(hook, "cuMulticastBindMem"),
            baddr = !strcmp(hook, "cuMulticastBindAddr"), unbind = !strcmp(hook, "cuMulticastUnbind");
        if (create) mark(hook);
        CHECK(CALL(cuMulticastCreate, (CUmemGenericAllocationHandle *, const CUmulticastObjectProp *), &mc, &mp));
        if (create) { e.op = "ALLOC"; e.kind = "VMM_CREATE"; ADDR(0); SIZE(VMM_SIZE); STREAM(1); AUX(mc); }
        CHECK(CALL(cuMulticastAddDevice, (CUmemGenericAllocationHandle, CUdevice), mc, 0));
        if (bmem) {
            mark(hook);
            CHECK(CALL(cuMulticastBindMem, (CUmemGenericAllocationHandle, size_t, CUmemGenericAllocationHandle, size_t,
                                            size_t, unsigned long long), mc, 0, h, 0, VMM_SIZE, 0));
            e.op = "OBJECT"; ADDR(0); SIZE(VMM_SIZE); STREAM(h); AUX(mc);
        } else if (baddr || unbind) {
            CHECK(CALL(cuMemAddressReserve, (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long), &va,
                       VMM_SIZE, 0, 0, 0));
            CHECK(CALL(cuMemMap, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long), va,
                       VMM_SIZE, 0, h, 0));
            if (baddr) mark(hook);
            CHECK(CALL(cuMulticastBindAddr, (CUmemGenericAllocationHandle, size_t, CUdeviceptr, size_t,
                                             unsigned long long), mc, 0, va, VMM_SIZE, 0));
            if (baddr) { e.op = "OBJECT"; ADDR(va); SIZE(VMM_SIZE); STREAM(0); AUX(mc); }
        }
        if (unbind || bmem) {
            if (unbind) mark(hook);
            CHECK(CALL(cuMulticastUnbind, (CUmemGenericAllocationHandle, CUdevice, size_t, size_t), mc, 0, 0, VMM_SIZE));
            if (unbind) { e.op = "OBJECT"; ADDR(0); SIZE(VMM_SIZE); STREAM(0); AUX(mc); }
        }
        if (va) {
            if (!unbind && !bmem)
                CHECK(CALL(cuMulticastUnbind, (CUmemGenericAllocationHandle, CUdevice, size_t, size_t), mc, 0, 0,
                           VMM_SIZE));
            CHECK(CALL(cuMemUnmap, (CUdeviceptr, size_t), va, VMM_SIZE));
            CHECK(CALL(cuMemAddressFree, (CUdeviceptr, size_t), va, VMM_SIZE));
        }
        CHECK(CALL(cuMemRelease, (CUmemGenericAllocationHandle), mc));
    }
    CHECK(CALL(cuMemRelease, (CUmemGenericAllocationHandle), h));
    emit(&e);
}

static void c_pool(const char *hook) {
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = 1;
    props.location.type = 1;
    props.location.id = 0;
    props.maxSize = 1 << 26;
    CUmemoryPool pool = NULL;
    int create = strstr(hook, "Create") != NULL;
    expect e = {.hook = hook, .api = hook, .op = "OBJECT"};
    if (create) mark(hook);
    CHECK(((int (*)(CUmemoryPool *, const CUmemPoolProps *))fn(hook[1] == 'u' && hook[2] == 'd' ? "cudaMemPoolCreate"
                                                                                                : "cuMemPoolCreate"))(
        &pool, &props));
    if (!create) mark(hook);
    CHECK(((int (*)(CUmemoryPool))fn(hook[1] == 'u' && hook[2] == 'd' ? "cudaMemPoolDestroy" : "cuMemPoolDestroy"))(pool));
    ADDR(0);
    AUX(pool);
    if (create) { SIZE(1 << 26); STREAM(1); }
    else { SIZE(0); STREAM(2); }
    emit(&e);
}

/* the IPC hooks: the exporter's gets here, the opens and closes in a fork() child */
static void c_ipc(void) {
    uint64_t blk = dalloc(VMM_SIZE); /* a 2 MiB cuMemAlloc base: exportable */
    CUipcMemHandle h;
    {
        expect e = {.hook = "cuIpcGetMemHandle", .api = "cuIpcGetMemHandle", .op = "OBJECT"};
        ADDR(blk); SIZE(0); STREAM(0); AUX(0);
        mark(e.hook);
        CHECK(CALL(cuIpcGetMemHandle, (CUipcMemHandle *, CUdeviceptr), &h, blk));
        emit(&e);
    }
    {
        expect e = {.hook = "cudaIpcGetMemHandle", .api = "cudaIpcGetMemHandle", .op = "OBJECT"};
        ADDR(blk); SIZE(0); STREAM(0); AUX(0);
        mark(e.hook);
        CHECK(CALL(cudaIpcGetMemHandle, (CUipcMemHandle *, void *), &h, (void *)(uintptr_t)blk));
        emit(&e);
    }
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        static const char *const opens[] = {"cuIpcOpenMemHandle", "cuIpcOpenMemHandle_v2", "cudaIpcOpenMemHandle"};
        for (int i = 0; i < 3; i++) {
            CUdeviceptr p = 0;
            expect e = {.hook = opens[i], .api = opens[i], .op = "ALLOC", .kind = "IPC"};
            mark(opens[i]);
            CHECK(((int (*)(CUdeviceptr *, CUipcMemHandle, unsigned))fn(opens[i]))(&p, h, 1));
            ADDR(p); SIZE(VMM_SIZE); STREAM(0);
            emit(&e);
            const char *closer = i == 2 ? "cudaIpcCloseMemHandle" : "cuIpcCloseMemHandle";
            if (i == 1) { /* the driver's close, once */
                expect c = {.hook = closer, .api = closer, .op = "FREE", .kind = "IPC"};
                c.has_addr = 1, c.addr = p, c.has_size = 1, c.size = VMM_SIZE;
                mark(closer);
                CHECK(((int (*)(CUdeviceptr))fn(closer))(p));
                emit(&c);
            } else if (i == 2) {
                expect c = {.hook = closer, .api = closer, .op = "FREE", .kind = "IPC"};
                c.has_addr = 1, c.addr = p, c.has_size = 1, c.size = VMM_SIZE;
                mark(closer);
                CHECK(((int (*)(void *))fn(closer))((void *)(uintptr_t)p));
                emit(&c);
            } else {
                CHECK(CALL(cuIpcCloseMemHandle, (CUdeviceptr), p));
            }
        }
        fflush(stdout);
        _exit(0);
    }
    int st = 0;
    waitpid(child, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "hook_each: the IPC child failed (%d)\n", st);
        exit(6);
    }
    dfree(blk);
}

/* ================================================================ hooks that record nothing themselves */
/* a probe allocation on a fresh thread after `act`: its record's device is the act's effect */
typedef struct { const char *hook; int form; } probe_arg;

static void *probe_thread(void *argp) {
    const probe_arg *a = argp;
    const char *hook = a->hook;
    CUcontext prev = NULL;
    /* a fresh thread: its device starts at 0 (and the driver's current context is device 0's) */
    mark(hook);
    switch (a->form) {
    case 0: CHECK(CALL(cudaSetDevice, (int), 1)); break;
    case 1: { /* retain device 1's primary context here, then make it current */
        CUcontext c = NULL;
        CHECK(CALL(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice), &c, 1));
        CHECK(CALL(cuCtxSetCurrent, (CUcontext), c));
        break;
    }
    case 2: CHECK(CALL(cuCtxSetCurrent, (CUcontext), g_ctx[1])); break;
    case 3: CHECK(CALL(cuCtxPushCurrent_v2, (CUcontext), g_ctx[1])); break;
    case 4: /* on device 1, push device 0's context, pop it: back on device 1 */
        CHECK(CALL(cuCtxSetCurrent, (CUcontext), g_ctx[1]));
        CHECK(CALL(cuCtxPushCurrent_v2, (CUcontext), g_ctx[0]));
        CHECK(CALL(cuCtxPopCurrent_v2, (CUcontext *), &prev));
        break;
    }
    CUdeviceptr p = 0;
    size_t n = 36864 + 64 * (size_t)a->form;
    CHECK(CALL(cuMemAlloc_v2, (CUdeviceptr *, size_t), &p, n));
    expect e = {.hook = hook, .api = "cuMemAlloc_v2", .op = "ALLOC", .kind = "DEVICE"};
    ADDR(p); SIZE(n); DEVICE(1);
    emit(&e);
    CHECK(CALL(cuMemFree_v2, (CUdeviceptr), p));
    return NULL;
}

static void c_probe_device(const char *hook, int form) {
    probe_arg a = {hook, form};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, probe_thread, &a));
    CHECK(pthread_join(t, NULL));
}

/* unloads: a kernel handle the driver hands out again after the unload must be scanned with its new
 * layout (two pointers: 16 bytes, two accesses), never with the unloaded kernel's (one pointer) */
static void c_unload(const char *hook, int form) {
    uint64_t b = dalloc(40960), b2 = dalloc(45056);
    void *arg = (void *)(uintptr_t)b, *arg2 = (void *)(uintptr_t)b2;
    void *params1[] = {&arg}, *params2[] = {&arg, &arg2};
    static const char img1[] = "simcuda-module\nunload_a 8\n", img2[] = "simcuda-module\nunload_b 8 8\n";
    CUfunction f1 = NULL, f2 = NULL;
    CUmodule m = NULL;
    CUlibrary l = NULL;
    CUkernel k = NULL;
    typedef int (*launch_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            CUstream, void **, void **);
    launch_t launch = (launch_t)fn("cuLaunchKernel");
    for (int round = 0; round < 2; round++) {
        const char *img = round ? img2 : img1, *kname = round ? "unload_b" : "unload_a";
        CUfunction f = NULL;
        if (form == 0) {
            CHECK(CALL(cuModuleLoadData, (CUmodule *, const void *), &m, img));
            CHECK(CALL(cuModuleGetFunction, (CUfunction *, CUmodule, const char *), &f, m, kname));
        } else {
            CHECK(CALL(cuLibraryLoadData, (CUlibrary *, const void *, int *, void **, unsigned, int *, void **, unsigned),
                       &l, img, NULL, NULL, 0, NULL, NULL, 0));
            CHECK(CALL(cuLibraryGetKernel, (CUkernel *, CUlibrary, const char *), &k, l, kname));
            CHECK(CALL(cuKernelGetFunction, (CUfunction *, CUkernel), &f, k));
        }
        if (round == 0) {
            f1 = f;
            CHECK(launch(f, 1, 1, 1, 1, 1, 1, 0, g_s, params1, NULL));
            mark(hook);
            if (form == 0) CHECK(CALL(cuModuleUnload, (CUmodule), m));
            else CHECK(((int (*)(CUlibrary))fn(hook))(l));
        } else {
            f2 = f;
            CHECK(launch(f, 1, 1, 1, 1, 1, 1, 0, g_s, params2, NULL));
            if (form == 0) CHECK(CALL(cuModuleUnload, (CUmodule), m));
            else CHECK(CALL(cuLibraryUnload, (CUlibrary), l));
        }
    }
    if (f1 != f2) { /* the probe needs the handle handed out again */
        fprintf(stderr, "hook_each: %s: the driver did not hand the unloaded handle out again\n", hook);
        exit(7);
    }
    expect e = {.hook = hook, .api = "cuLaunchKernel", .op = "LAUNCH"};
    ADDR(f2); SIZE(16); STREAM(g_s); ACC(b); ACC(b2);
    emit(&e);
    CHECK(CALL(cuStreamSynchronize, (CUstream), g_s));
    dfree(b);
    dfree(b2);
}

/* ================================================================ capture windows (window.c) */
static void c_window(const char *hook, int start) {
    mark(hook);
    CHECK(((int (*)(void))fn(hook))());
    expect e = {.hook = hook, .api = hook, .op = "WINDOW", .flags = start ? "PI_WINDOW_START" : "PI_WINDOW_STOP"};
    AUX(1); /* PI_WINDOW_PROFILER */
    emit(&e);
}

/* ================================================================ the table */
typedef struct { const char *hook; void (*run)(const char *, int); int form; } kase;
static void r_rt_alloc(const char *h, int f) {
    static const char *const kinds[] = {"DEVICE", "ASYNC", "POOL", "MANAGED", "PITCH", "HOST", "HOST"};
    c_rt_alloc(h, kinds[f], f);
}
static void r_drv_alloc(const char *h, int f) {
    static const char *const kinds[] = {"DEVICE", "PITCH", "MANAGED", "ASYNC", "POOL", "HOST", "HOST"};
    c_drv_alloc(h, kinds[f], f);
}
static void r_free(const char *h, int f) {
    static const char *const kinds[] = {"DEVICE", "ASYNC", "HOST", "DEVICE", "ASYNC", "HOST"};
    c_free(h, kinds[f], f);
}
static void r_hint(const char *h, int f) { c_hint(h, f); }
static void r_launch(const char *h, int f) { c_launch(h, f); }
static void r_graph(const char *h, int f) { (void)f; c_graph_launch(h); }
/* copies: form = family (0 runtime, 1 driver) * 100 + dir * 10 + async */
static void r_copy(const char *h, int f) { c_copy(h, f / 100, (f / 10) % 10, f % 10); }
static void r_memset(const char *h, int f) { c_memset(h, f / 10, f % 10); }
static void r_tmap(const char *h, int f) { (void)f; c_tensormap(h); }
static void r_vmm(const char *h, int f) { (void)f; c_vmm(h); }
static void r_capture(const char *h, int f) { c_capture(h, f); }
static void r_inst(const char *h, int f) { c_instantiate(h, f); }
static void r_build(const char *h, int f) { c_graph_build(h, f); }
static void r_share(const char *h, int f) { (void)f; c_share(h); }
static void r_pool(const char *h, int f) { (void)f; c_pool(h); }
static void r_probe(const char *h, int f) { c_probe_device(h, f); }
static void r_unload(const char *h, int f) { c_unload(h, f); }

static const kase g_cases[] = {
    {"cudaMalloc", r_rt_alloc, 0}, {"cudaMallocAsync", r_rt_alloc, 1}, {"cudaMallocAsync_ptsz", r_rt_alloc, 1},
    {"cudaMallocFromPoolAsync", r_rt_alloc, 2}, {"cudaMallocFromPoolAsync_ptsz", r_rt_alloc, 2},
    {"cudaMallocManaged", r_rt_alloc, 3}, {"cudaMallocPitch", r_rt_alloc, 4}, {"cudaMallocHost", r_rt_alloc, 5},
    {"cudaHostAlloc", r_rt_alloc, 6},
    {"cudaFree", r_free, 0}, {"cudaFreeAsync", r_free, 1}, {"cudaFreeAsync_ptsz", r_free, 1}, {"cudaFreeHost", r_free, 2},
    {"cudaMemAdvise", r_hint, 0}, {"cudaMemAdvise_v2", r_hint, 0}, {"cudaMemPrefetchAsync", r_hint, 2},
    {"cudaMemPrefetchAsync_ptsz", r_hint, 2}, {"cudaMemPrefetchAsync_v2", r_hint, 2},
    {"cudaLaunchKernel", r_launch, 0}, {"cudaLaunchKernel_ptsz", r_launch, 0},
    {"cudaLaunchCooperativeKernel", r_launch, 0}, {"cudaLaunchCooperativeKernel_ptsz", r_launch, 0},
    {"cudaLaunchKernelExC", r_launch, 1}, {"cudaLaunchKernelExC_ptsz", r_launch, 1},
    {"__cudaLaunchKernel", r_launch, 5}, {"__cudaLaunchKernel_ptsz", r_launch, 5},
    {"cudaMemcpy", r_copy, 0 + D2D * 10}, {"cudaMemcpyAsync", r_copy, 0 + H2D * 10 + 1},
    {"cudaMemcpyAsync_ptsz", r_copy, 0 + D2H * 10 + 1},
    {"cudaMemset", r_memset, 0}, {"cudaMemsetAsync", r_memset, 1}, {"cudaMemsetAsync_ptsz", r_memset, 1},
    {"cudaGraphLaunch", r_graph, 0}, {"cudaGraphLaunch_ptsz", r_graph, 0},
    {"cudaSetDevice", r_probe, 0},
    {"cuMemAlloc_v2", r_drv_alloc, 0}, {"cuMemAllocPitch_v2", r_drv_alloc, 1}, {"cuMemAllocManaged", r_drv_alloc, 2},
    {"cuMemAllocAsync", r_drv_alloc, 3}, {"cuMemAllocAsync_ptsz", r_drv_alloc, 3},
    {"cuMemAllocFromPoolAsync", r_drv_alloc, 4}, {"cuMemAllocFromPoolAsync_ptsz", r_drv_alloc, 4},
    {"cuMemAllocHost_v2", r_drv_alloc, 5}, {"cuMemHostAlloc", r_drv_alloc, 6},
    {"cuMemFree_v2", r_free, 3}, {"cuMemFreeAsync", r_free, 4}, {"cuMemFreeAsync_ptsz", r_free, 4},
    {"cuMemFreeHost", r_free, 5},
    {"cuMemAddressReserve", r_vmm, 0}, {"cuMemAddressFree", r_vmm, 0}, {"cuMemCreate", r_vmm, 0},
    {"cuMemRelease", r_vmm, 0}, {"cuMemMap", r_vmm, 0}, {"cuMemUnmap", r_vmm, 0},
    {"cuMemAdvise", r_hint, 1}, {"cuMemAdvise_v2", r_hint, 0}, {"cuMemPrefetchAsync", r_hint, 3},
    {"cuMemPrefetchAsync_ptsz", r_hint, 3}, {"cuMemPrefetchAsync_v2", r_hint, 2},
    {"cuMemPrefetchAsync_v2_ptsz", r_hint, 2},
    {"cuLaunchKernel", r_launch, 2}, {"cuLaunchKernel_ptsz", r_launch, 2}, {"cuLaunchKernelEx", r_launch, 3},
    {"cuLaunchKernelEx_ptsz", r_launch, 3}, {"cuLaunchCooperativeKernel", r_launch, 4},
    {"cuLaunchCooperativeKernel_ptsz", r_launch, 4},
    {"cuGraphLaunch", r_graph, 0}, {"cuGraphLaunch_ptsz", r_graph, 0},
    {"cuMemcpy", r_copy, 100 + D2D * 10}, {"cuMemcpy_ptds", r_copy, 100 + D2D * 10},
    {"cuMemcpyAsync", r_copy, 100 + D2D * 10 + 1}, {"cuMemcpyAsync_ptsz", r_copy, 100 + D2D * 10 + 1},
    {"cuMemcpyHtoD_v2", r_copy, 100 + H2D * 10}, {"cuMemcpyDtoH_v2", r_copy, 100 + D2H * 10},
    {"cuMemcpyDtoD_v2", r_copy, 100 + D2D * 10},
    {"cuMemcpyHtoDAsync_v2", r_copy, 100 + H2D * 10 + 1}, {"cuMemcpyHtoDAsync_v2_ptsz", r_copy, 100 + H2D * 10 + 1},
    {"cuMemcpyDtoHAsync_v2", r_copy, 100 + D2H * 10 + 1}, {"cuMemcpyDtoHAsync_v2_ptsz", r_copy, 100 + D2H * 10 + 1},
    {"cuMemcpyDtoDAsync_v2", r_copy, 100 + D2D * 10 + 1}, {"cuMemcpyDtoDAsync_v2_ptsz", r_copy, 100 + D2D * 10 + 1},
    {"cuMemsetD8_v2", r_memset, 10}, {"cuMemsetD32_v2", r_memset, 20}, {"cuMemsetD8Async", r_memset, 11},
    {"cuMemsetD8Async_ptsz", r_memset, 11}, {"cuMemsetD32Async", r_memset, 21},
    {"cuMemsetD32Async_ptsz", r_memset, 21},
    {"cuTensorMapEncodeTiled", r_tmap, 0},
    {"cuModuleUnload", r_unload, 0}, {"cuLibraryUnload", r_unload, 1}, {"cudaLibraryUnload", r_unload, 1},
    {"cudaStreamBeginCapture", r_capture, 1}, {"cudaStreamBeginCapture_ptsz", r_capture, 1},
    {"cudaStreamBeginCaptureToGraph", r_capture, 2}, {"cudaStreamEndCapture", r_capture, 1},
    {"cudaStreamEndCapture_ptsz", r_capture, 1},
    {"cuStreamBeginCapture", r_capture, 0}, {"cuStreamBeginCapture_v2", r_capture, 1},
    {"cuStreamBeginCapture_v2_ptsz", r_capture, 1}, {"cuStreamBeginCaptureToGraph", r_capture, 2},
    {"cuStreamEndCapture", r_capture, 1}, {"cuStreamEndCapture_ptsz", r_capture, 1},
    {"cuMemExportToShareableHandle", r_share, 0}, {"cuMemImportFromShareableHandle", r_share, 0},
    {"cuMulticastCreate", r_share, 0}, {"cuMulticastBindMem", r_share, 0}, {"cuMulticastBindAddr", r_share, 0},
    {"cuMulticastUnbind", r_share, 0},
    /* cuIpc* / cudaIpc*: c_ipc, below */
    {"cudaMemPoolCreate", r_pool, 0}, {"cudaMemPoolDestroy", r_pool, 0}, {"cuMemPoolCreate", r_pool, 0},
    {"cuMemPoolDestroy", r_pool, 0},
    {"cuDevicePrimaryCtxRetain", r_probe, 1}, {"cuCtxSetCurrent", r_probe, 2}, {"cuCtxPushCurrent_v2", r_probe, 3},
    {"cuCtxPopCurrent_v2", r_probe, 4},
    {"cuGraphInstantiateWithFlags", r_inst, 0}, {"cuGraphInstantiateWithParams", r_inst, 1},
    {"cudaGraphInstantiate", r_inst, 0}, {"cudaGraphInstantiateWithFlags", r_inst, 0},
    {"cudaGraphInstantiateWithParams", r_inst, 1},
    {"cuGraphCreate", r_build, 0}, {"cudaGraphCreate", r_build, 0},
    {"cuGraphAddKernelNode", r_build, 1}, {"cuGraphAddKernelNode_v2", r_build, 1},
    {"cudaGraphAddKernelNode", r_build, 2}, {"cuGraphAddMemsetNode", r_build, 3},
    {"cudaGraphAddMemsetNode", r_build, 4}, {"cuGraphAddMemcpyNode", r_build, 5},
    {"cudaGraphAddMemcpyNode1D", r_build, 6}, {"cuGraphAddChildGraphNode", r_build, 7},
    {"cudaGraphAddChildGraphNode", r_build, 7}, {"cuGraphAddMemAllocNode", r_build, 8},
    {"cudaGraphAddMemAllocNode", r_build, 8}, {"cuGraphAddMemFreeNode", r_build, 9},
    {"cudaGraphAddMemFreeNode", r_build, 9}, {"cuGraphExecKernelNodeSetParams", r_build, 10},
    {"cuGraphExecKernelNodeSetParams_v2", r_build, 10}, {"cudaGraphExecKernelNodeSetParams", r_build, 11},
    {"cuGraphExecUpdate_v2", r_build, 12}, {"cudaGraphExecUpdate", r_build, 12},
    {"cuGraphAddNode", r_build, 13}, {"cuGraphAddNode_v2", r_build, 14}, {"cudaGraphAddNode", r_build, 15},
    {"cudaGraphAddNode_v2", r_build, 16}, {"cuGraphExecNodeSetParams", r_build, 17},
    {"cudaGraphExecNodeSetParams", r_build, 18},
    {"cuGraphExecMemcpyNodeSetParams", r_build, 19}, {"cuGraphExecMemsetNodeSetParams", r_build, 20},
    {"cuGraphExecChildGraphNodeSetParams", r_build, 21}, {"cudaGraphExecMemcpyNodeSetParams1D", r_build, 22},
    {"cudaGraphExecMemsetNodeSetParams", r_build, 23}, {"cudaGraphExecChildGraphNodeSetParams", r_build, 24},
    {"cudaProfilerStart", c_window, 1}, {"cudaProfilerStop", c_window, 0}, {"cuProfilerStart", c_window, 1},
    {"cuProfilerStop", c_window, 0},
};

int main(void) {
    if (!dlopen("libcudart.so.13", RTLD_NOW | RTLD_GLOBAL) || !dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) {
        fprintf(stderr, "hook_each: no libcudart.so.13 / libcuda.so.1\n");
        return 2;
    }
    *(void **)&g_mark = dlsym(RTLD_DEFAULT, "pyinterpose_mark");
    CHECK(CALL(cuInit, (unsigned), 0));
    void *warm = NULL;
    CHECK(CALL(cudaMalloc, (void **, size_t), &warm, 256)); /* the runtime's context current on this thread */
    CHECK(CALL(cudaFree, (void *), warm));
    CHECK(CALL(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice), &g_ctx[0], 0));
    CHECK(CALL(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice), &g_ctx[1], 1));
    CHECK(CALL(cuStreamCreate, (CUstream *, unsigned), &g_s, 1));
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = 1;
    props.location.type = 1;
    CHECK(CALL(cuMemPoolCreate, (CUmemoryPool *, const CUmemPoolProps *), &g_pool, &props));
    CHECK(CALL(simcuRegisterKernel, (const char *, simcu_kernel_fn, unsigned, const size_t *, const size_t *,
                                     CUfunction *), "hook_each_k", kernel, 1, g_off1, g_size1, &g_kfn));
    CHECK(CALL(simcudaRegisterFunction, (const void *, const char *, simcu_kernel_fn, unsigned, const size_t *,
                                         const size_t *), &g_stub, "hook_each_stub", kernel, 1, g_off1, g_size1));
    { /* one graph: one kernel node */
        CUgraph g = NULL;
        uint64_t b = dalloc(4096);
        void *arg = (void *)(uintptr_t)b, *params[] = {&arg};
        CHECK(CALL(cuStreamBeginCapture_v2, (CUstream, int), g_s, 0));
        CHECK(CALL(cuLaunchKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    CUstream, void **, void **), g_kfn, 1, 1, 1, 1, 1, 1, 0, g_s, params, NULL));
        CHECK(CALL(cuStreamEndCapture, (CUstream, CUgraph *), g_s, &g));
        CHECK(CALL(cuGraphInstantiateWithFlags, (CUgraphExec *, CUgraph, unsigned long long), &g_exec, g, 0));
    }
    for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++) g_cases[i].run(g_cases[i].hook, g_cases[i].form);
    c_ipc();
    mark("end");
    return 0;
}
