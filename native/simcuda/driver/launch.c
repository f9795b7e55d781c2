/* launch.c — simcuda driver: kernels (host functions with a parameter layout),
 * launches, function attributes, graphs, TMA descriptors. */
#include <stdlib.h>
#include <string.h>
#include "../sim_driver.h"

static int valid_func(CUfunction f) { return f && f->magic == MAGIC_FUNC; }

SIM_API(CUresult, simcuRegisterKernel, (const char *name, simcu_kernel_fn fn, unsigned nparams,
                                       const size_t *offsets, const size_t *sizes, CUfunction *out))
{
    if (!name || !fn || !out || (nparams && (!offsets || !sizes))) return CUDA_ERROR_INVALID_VALUE;
    struct CUfunc_st *f = calloc(1, sizeof *f);
    if (!f) return CUDA_ERROR_OUT_OF_MEMORY;
    f->name = strdup(name);
    f->offsets = calloc(nparams ? nparams : 1, sizeof(size_t));
    f->sizes = calloc(nparams ? nparams : 1, sizeof(size_t));
    if (!f->name || !f->offsets || !f->sizes) {
        free(f->name), free(f->offsets), free(f->sizes), free(f);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (unsigned i = 0; i < nparams; i++) {
        if (sizes[i] == 0) {
            free(f->name), free(f->offsets), free(f->sizes), free(f);
            return CUDA_ERROR_INVALID_VALUE;
        }
        f->offsets[i] = offsets[i];
        f->sizes[i] = sizes[i];
        if (offsets[i] + sizes[i] > f->argsize) f->argsize = offsets[i] + sizes[i];
    }
    f->fn = fn;
    f->nparams = nparams;
    f->magic = MAGIC_FUNC;
    *out = f;
    return CUDA_SUCCESS;
}

#define MAX_STACK_PARAMS 64
#define CBID_LAUNCH_KERNEL 307       /* CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel */
#define CBID_LAUNCH_KERNEL_EX 652
#define CBID_LAUNCH_COOPERATIVE 477
#define CBID_GRAPH_LAUNCH 514

static void run(CUfunction f, void **params)
{
    if (f->fn) f->fn(params);
    else sim_image_kernel(f, params);
}

SIM_API(CUresult, simcuSetKernelDuration, (CUfunction f, unsigned long long ns))
{
    if (!valid_func(f)) return CUDA_ERROR_INVALID_HANDLE;
    f->dur_ns = ns;
    f->has_dur = 1;
    return CUDA_SUCCESS;
}

static uint64_t kernel_ns(CUfunction f, int has_launch_dur, uint64_t launch_ns)
{
    if (has_launch_dur) return launch_ns;
    return f->has_dur ? f->dur_ns : sim_default_kernel_ns();
}

/* a captured launch: the arguments are copied into the node, nothing runs */
static CUresult capture_kernel(struct sim_queue *q, CUfunction f, void **params, const unsigned grid[3],
                               const unsigned block[3], int has_dur, uint64_t dur)
{
    struct sim_gnode *n = sim_graph_add(q->capture);
    if (!n) return CUDA_ERROR_OUT_OF_MEMORY;
    n->kind = SIMCU_OP_KERNEL;
    n->f = f;
    n->has_dur = has_dur;
    n->dur_ns = dur;
    for (int i = 0; i < 3; i++) n->grid[i] = grid[i], n->block[i] = block[i];
    if (f->nparams) {
        n->args = calloc(1, f->argsize ? f->argsize : 1);
        n->params = calloc(f->nparams, sizeof(void *));
        if (!n->args || !n->params) return CUDA_ERROR_OUT_OF_MEMORY;
        for (unsigned i = 0; i < f->nparams; i++) {
            memcpy(n->args + f->offsets[i], params[i], f->sizes[i]);
            n->params[i] = n->args + f->offsets[i];
        }
    }
    sim_graph_node_created(q->capture, n);
    return CUDA_SUCCESS;
}

/* run f now and put it on the stream's device clock, or capture it when the stream is capturing */
static CUresult dispatch(CUfunction f, void **params, const unsigned grid[3], const unsigned block[3], CUstream s,
                         uint32_t cbid)
{
    struct sim_queue *q;
    CUresult r = sim_stream_queue(s, &q);
    if (r) return r;
    uint64_t launch_ns = 0, t0;
    int has_dur = sim_take_next_launch_ns(&launch_ns);
    uint32_t corr = sim_api_begin(&t0);
    if (q->capture) {
        r = capture_kernel(q, f, params, grid, block, has_dur, launch_ns);
    } else {
        run(f, params);
        struct sim_opdesc op = {.kind = SIMCU_OP_KERNEL, .engine = SIM_ENGINE_COMPUTE,
                                .dur_ns = kernel_ns(f, has_dur, launch_ns), .name = f->name,
                                .grid = {grid[0], grid[1], grid[2]}, .block = {block[0], block[1], block[2]}};
        uint64_t touched[64], start;
        int fresh[64];
        int nt = sim_res_kernel_begin(q, params, f->sizes, f->nparams, &op, touched, fresh, 64); /* managed memory */
        uint64_t end = sim_dev_submit_at(q, &op, corr, &start);
        if (!start) start = end = sim_now_ns(); /* the device clock's fast path: done already */
        if (nt) sim_res_kernel_end(touched, fresh, nt, start, end);
    }
    sim_api_end(corr, cbid, t0);
    return r;
}

/* run f with kernelParams or the packed `extra` buffer */
static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       CUstream s, void **kernelParams, void **extra, uint32_t cbid)
{
    int dev;
    CUresult r = sim_current_device(&dev);
    if (r) return r;
    if (!valid_func(f)) return CUDA_ERROR_INVALID_HANDLE;
    if (!gx || !gy || !gz || !bx || !by || !bz || (uint64_t)bx * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_check_stream(s))) return r;
    if (kernelParams && extra) return CUDA_ERROR_INVALID_VALUE;
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    if (f->nparams == 0 || kernelParams) {
        if (f->nparams && !kernelParams) return CUDA_ERROR_INVALID_VALUE;
        return dispatch(f, kernelParams, grid, block, s, cbid);
    }
    if (!extra) return CUDA_ERROR_INVALID_VALUE;
    char *buf = NULL;
    size_t bufsize = 0;
    int have_size = 0;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
            buf = extra[i + 1];
        } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
            if (!extra[i + 1]) return CUDA_ERROR_INVALID_VALUE;
            bufsize = *(size_t *)extra[i + 1];
            have_size = 1;
        } else {
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    if (!buf || !have_size || bufsize < f->argsize) return CUDA_ERROR_INVALID_VALUE;
    void *stack[MAX_STACK_PARAMS];
    void **params = f->nparams <= MAX_STACK_PARAMS ? stack : malloc(f->nparams * sizeof(void *));
    if (!params) return CUDA_ERROR_OUT_OF_MEMORY;
    for (unsigned i = 0; i < f->nparams; i++) params[i] = buf + f->offsets[i];
    r = dispatch(f, params, grid, block, s, cbid);
    if (params != stack) free(params);
    return r;
}

SIM_API(CUresult, cuLaunchKernel, (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                  unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                  unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra))
{
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams, extra,
                  CBID_LAUNCH_KERNEL);
}
SIM_VARIANT(CUresult, cuLaunchKernel_ptsz, cuLaunchKernel, (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,
           unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
           void **kernelParams, void **extra), (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams, extra));

SIM_API(CUresult, cuLaunchKernelEx, (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra))
{
    if (!config) return CUDA_ERROR_INVALID_VALUE;
    if (config->numAttrs && !config->attrs) return CUDA_ERROR_INVALID_VALUE;
    return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
                  config->blockDimZ, config->hStream, kernelParams, extra, CBID_LAUNCH_KERNEL_EX);
}
SIM_VARIANT(CUresult, cuLaunchKernelEx_ptsz, cuLaunchKernelEx, (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra), (config, f, kernelParams, extra));

SIM_API(CUresult, cuLaunchCooperativeKernel, (CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                             unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                             unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                             void **kernelParams))
{
    if (valid_func(f) && f->nparams && !kernelParams) return CUDA_ERROR_INVALID_VALUE;
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams, NULL,
                  CBID_LAUNCH_COOPERATIVE);
}
SIM_VARIANT(CUresult, cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel, (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,
           unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
           void **kernelParams), (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams));

/* ---------------- function / kernel attributes ---------------- */

SIM_API(CUresult, cuFuncGetParamInfo, (CUfunction f, size_t paramIndex, size_t *paramOffset, size_t *paramSize))
{
    if (!valid_func(f)) return CUDA_ERROR_INVALID_HANDLE;
    if (paramIndex >= f->nparams) return CUDA_ERROR_INVALID_VALUE;
    if (paramOffset) *paramOffset = f->offsets[paramIndex];
    if (paramSize) *paramSize = f->sizes[paramIndex];
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuFuncGetName, (const char **name, CUfunction f))
{
    if (!name) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_func(f)) return CUDA_ERROR_INVALID_HANDLE;
    *name = f->name;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuKernelGetParamInfo, (CUkernel k, size_t paramIndex, size_t *paramOffset, size_t *paramSize))
{
    return sim_cuFuncGetParamInfo((CUfunction)(void *)k, paramIndex, paramOffset, paramSize);
}

SIM_API(CUresult, cuKernelGetName, (const char **name, CUkernel k))
{
    return sim_cuFuncGetName(name, (CUfunction)(void *)k);
}

SIM_API(CUresult, cuKernelGetFunction, (CUfunction *pFunc, CUkernel k))
{
    if (!pFunc) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_func((CUfunction)(void *)k)) return CUDA_ERROR_INVALID_HANDLE;
    *pFunc = (CUfunction)(void *)k;
    return CUDA_SUCCESS;
}

/* ---------------- graphs: stream capture, instantiate, launch ----------------
 * A stream in capture mode records kernels, copies and memsets as nodes (in order: one chain, as a
 * single-stream capture makes) instead of running them.  Instantiating clones the nodes (new node ids,
 * as CUDA's executable graphs have); a graph launch runs every node in order on the launch stream's
 * device clock, all with the graph launch's correlation id and the executable graph's id. */

static uint32_t g_next_graph_id;
static uint64_t g_next_node_id;

HIDDEN struct sim_gnode *sim_graph_add(struct CUgraph_st *g)
{
    if (g->n == g->cap) {
        unsigned cap = g->cap ? g->cap * 2 : 16;
        struct sim_gnode *nn = realloc(g->nodes, cap * sizeof *nn);
        if (!nn) return NULL;
        g->nodes = nn;
        g->cap = cap;
    }
    struct sim_gnode *n = &g->nodes[g->n++];
    memset(n, 0, sizeof *n);
    n->id = __atomic_add_fetch(&g_next_node_id, 1, __ATOMIC_RELAXED);
    n->handle = (uint64_t)(uintptr_t)n;
    return n;
}

static int node_type(const struct sim_gnode *n)
{
    switch (n->kind) { /* CUgraphNodeType */
    case SIMCU_OP_KERNEL: return 0;
    case SIMCU_OP_MEMCPY: return 1;
    case SIMCU_OP_MEMALLOC: return 10;
    case SIMCU_OP_MEMFREE: return n->device < 0 && !n->bytes ? 5 : 11; /* the no-op node: an empty node */
    default: return 2;
    }
}

HIDDEN void sim_graph_node_created(struct CUgraph_st *g, struct sim_gnode *n)
{
    sim_graph_hook_fn hook = sim_graph_hook();
    if (hook) hook(13 /* GRAPHNODE_CREATED */, g, NULL, n, NULL, node_type(n), NULL);
}

/* memory nodes (graphmem.c): the address is fixed now, the memory is taken by each replay */
static CUresult mem_node(struct CUgraph_st *g, int kind, CUdeviceptr p, uint64_t bytes, int dev)
{
    struct sim_gnode *n = sim_graph_add(g);
    if (!n) return CUDA_ERROR_OUT_OF_MEMORY;
    n->kind = kind;
    n->dst = (void *)(uintptr_t)p;
    n->bytes = bytes;
    n->device = dev;
    sim_graph_node_created(g, n);
    return CUDA_SUCCESS;
}

HIDDEN CUresult sim_graph_alloc_node(struct CUgraph_st *g, CUdeviceptr p, uint64_t bytes, int dev)
{
    return mem_node(g, SIMCU_OP_MEMALLOC, p, bytes, dev);
}

HIDDEN CUresult sim_graph_free_node(struct CUgraph_st *g, CUdeviceptr p, uint64_t bytes, int dev)
{
    return mem_node(g, SIMCU_OP_MEMFREE, p, bytes, dev);
}

SIM_API(int, simcuInternalGraphId, (int what, void *handle, uint64_t *id))
{
    if (!handle || !id) return -1;
    if (what == 0) *id = ((struct sim_gnode *)handle)->id; /* a node handle is only ever one of ours */
    else if (what == 1 && ((struct CUgraph_st *)handle)->magic == MAGIC_GRAPH) *id = ((struct CUgraph_st *)handle)->id;
    else if (what == 2 && ((struct CUgraphExec_st *)handle)->magic == MAGIC_GEXEC)
        *id = ((struct CUgraphExec_st *)handle)->id;
    else return -1;
    return 0;
}

static struct CUgraph_st *graph_new(void)
{
    struct CUgraph_st *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->magic = MAGIC_GRAPH;
    g->id = __atomic_add_fetch(&g_next_graph_id, 1, __ATOMIC_RELAXED);
    return g;
}

static void nodes_free(struct sim_gnode *nodes, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        free(nodes[i].args);
        free(nodes[i].params);
    }
    free(nodes);
}

SIM_API(CUresult, cuGraphCreate, (CUgraph *phGraph, unsigned int flags))
{
    if (!phGraph || flags) return CUDA_ERROR_INVALID_VALUE;
    struct CUgraph_st *g = graph_new();
    if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
    *phGraph = g;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuStreamBeginCapture_v2, (CUstream s, int mode))
{
    if (s == NULL || s == SIM_STREAM_LEGACY) return CUDA_ERROR_NOT_SUPPORTED; /* as CUDA: not the legacy stream */
    struct sim_queue *q;
    CUresult r = sim_stream_queue(s, &q);
    if (r) return r;
    if (q->capture) return CUDA_ERROR_INVALID_VALUE; /* CUDA_ERROR_ILLEGAL_STATE in CUDA */
    if (!(q->capture = graph_new())) return CUDA_ERROR_OUT_OF_MEMORY;
    return CUDA_SUCCESS;
}
SIM_ALIAS(CUresult, cuStreamBeginCapture, cuStreamBeginCapture_v2, (CUstream s, int mode));
SIM_VARIANT(CUresult, cuStreamBeginCapture_v2_ptsz, cuStreamBeginCapture_v2, (CUstream s, int mode), (s, mode));

/* capture into a graph the caller made (cuGraphCreate): the captured nodes are appended to it, and the
 * end of the capture hands that same graph back.  simcuda keeps no edges: dependencies must be none. */
SIM_API(CUresult, cuStreamBeginCaptureToGraph, (CUstream s, CUgraph g, const void *deps, const void *edata,
                                                size_t numDeps, int mode))
{
    if (s == NULL || s == SIM_STREAM_LEGACY) return CUDA_ERROR_NOT_SUPPORTED;
    if (!g || g->magic != MAGIC_GRAPH || (numDeps && !deps)) return CUDA_ERROR_INVALID_VALUE;
    if (numDeps) return CUDA_ERROR_NOT_SUPPORTED; /* simcuda's graphs have no edges */
    struct sim_queue *q;
    CUresult r = sim_stream_queue(s, &q);
    if (r) return r;
    if (q->capture) return CUDA_ERROR_INVALID_VALUE;
    q->capture = g;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuStreamEndCapture, (CUstream s, CUgraph *phGraph))
{
    if (!phGraph) return CUDA_ERROR_INVALID_VALUE;
    struct sim_queue *q;
    CUresult r = sim_stream_queue(s, &q);
    if (r) return r;
    if (!q->capture) return CUDA_ERROR_INVALID_VALUE; /* CUDA_ERROR_ILLEGAL_STATE in CUDA */
    *phGraph = q->capture;
    q->capture = NULL;
    return CUDA_SUCCESS;
}
SIM_VARIANT(CUresult, cuStreamEndCapture_ptsz, cuStreamEndCapture, (CUstream s, CUgraph *phGraph), (s, phGraph));

SIM_API(CUresult, cuGraphGetNodes, (CUgraph g, void **nodes, size_t *numNodes))
{
    if (!g || g->magic != MAGIC_GRAPH || !numNodes) return CUDA_ERROR_INVALID_VALUE;
    if (nodes)
        for (size_t i = 0; i < *numNodes && i < g->n; i++) nodes[i] = (void *)(uintptr_t)g->nodes[i].handle;
    else *numNodes = g->n;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuGraphInstantiateWithFlags, (CUgraphExec *phExec, CUgraph g, unsigned long long flags))
{
    if (!phExec || !g || g->magic != MAGIC_GRAPH) return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphExec_st *e = calloc(1, sizeof *e);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    e->nodes = calloc(g->n ? g->n : 1, sizeof *e->nodes);
    if (!e->nodes) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* CUPTI graph node ids, as a real driver numbers an executable graph (an H100, XLA's command buffers): the
     * graph's own nodes in the order they were added, each child graph node taking one id there too (it runs
     * nothing itself), then the child graphs' nodes, child by child, in their order */
    unsigned kids = 0;
    for (unsigned i = 0; i < g->n; i++)
        if (g->nodes[i].child > kids) kids = g->nodes[i].child;
    uint64_t base = __atomic_fetch_add(&g_next_node_id, (uint64_t)g->n + kids, __ATOMIC_RELAXED) + 1, next = base;
    for (unsigned i = 0; i < g->n; i++)
        if (!g->nodes[i].child) e->nodes[i].id = next++;
        else if (i == 0 || g->nodes[i - 1].child != g->nodes[i].child) next++; /* the child graph node's own */
    for (unsigned k = 1; k <= kids; k++)
        for (unsigned i = 0; i < g->n; i++)
            if (g->nodes[i].child == k) e->nodes[i].id = next++;
    for (unsigned i = 0; i < g->n; i++) {
        struct sim_gnode *dst = &e->nodes[i];
        const struct sim_gnode *src = &g->nodes[i];
        uint64_t id = dst->id;
        *dst = *src;
        dst->id = id;
        dst->args = NULL;
        dst->params = NULL;
        if (src->kind == SIMCU_OP_KERNEL && src->f->nparams) {
            CUfunction f = src->f;
            dst->args = malloc(f->argsize ? f->argsize : 1);
            dst->params = calloc(f->nparams, sizeof(void *));
            if (!dst->args || !dst->params) {
                e->n = i + 1;
                nodes_free(e->nodes, e->n);
                free(e);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            memcpy(dst->args, src->args, f->argsize);
            for (unsigned k = 0; k < f->nparams; k++) dst->params[k] = dst->args + f->offsets[k];
        }
    }
    e->n = g->n;
    e->id = __atomic_add_fetch(&g_next_graph_id, 1, __ATOMIC_RELAXED);
    e->magic = MAGIC_GEXEC;
    *phExec = e;
    sim_graph_hook_fn hook = sim_graph_hook();
    for (unsigned i = 0; hook && i < g->n; i++) /* GRAPHNODE_CLONED: each executable node and its original */
        hook(20, g, g, &e->nodes[i], &g->nodes[i], node_type(&g->nodes[i]), e);
    return CUDA_SUCCESS;
}

/* CUDA_GRAPH_INSTANTIATE_PARAMS: flags, upload stream, error node (out), result (out) */
typedef struct {
    unsigned long long flags;
    CUstream hUploadStream;
    void *hErrNode_out;
    int result_out;
} sim_instantiate_params;

SIM_API(CUresult, cuGraphInstantiateWithParams, (CUgraphExec *phExec, CUgraph g, void *params))
{
    sim_instantiate_params *p = params;
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = sim_cuGraphInstantiateWithFlags(phExec, g, p->flags);
    p->hErrNode_out = NULL;
    p->result_out = r == CUDA_SUCCESS ? 0 : 1; /* CUDA_GRAPH_INSTANTIATE_SUCCESS / _ERROR */
    return r;
}

SIM_API(CUresult, cuGraphLaunch, (CUgraphExec e, CUstream s))
{
    if (!e || e->magic != MAGIC_GEXEC) return CUDA_ERROR_INVALID_VALUE;
    struct sim_queue *q;
    CUresult r = sim_stream_queue(s, &q);
    if (r) return r;
    if (q->capture) { /* launched into a capture: the graph's nodes become nodes of the captured graph */
        for (unsigned i = 0; i < e->n; i++) {
            struct sim_gnode *n = sim_graph_add(q->capture);
            if (!n || sim_graph_node_copy(n, &e->nodes[i])) return CUDA_ERROR_OUT_OF_MEMORY;
            sim_graph_node_created(q->capture, n);
        }
        return CUDA_SUCCESS;
    }
    uint64_t t0;
    uint32_t corr = sim_api_begin(&t0);
    for (unsigned i = 0; i < e->n; i++) {
        const struct sim_gnode *n = &e->nodes[i];
        struct sim_opdesc op = {.kind = n->kind, .graph_id = e->id, .graph_node_id = n->id, .bytes = n->bytes,
                                .copy_kind = n->copy_kind, .src_kind = n->src_kind, .dst_kind = n->dst_kind,
                                .value = n->value};
        if (n->kind == SIMCU_OP_KERNEL) {
            run(n->f, n->params);
            op.engine = SIM_ENGINE_COMPUTE;
            op.dur_ns = kernel_ns(n->f, n->has_dur, n->dur_ns);
            op.name = n->f->name;
            for (int k = 0; k < 3; k++) op.grid[k] = n->grid[k], op.block[k] = n->block[k];
        } else if (n->kind == SIMCU_OP_MEMALLOC) { /* memory taken now, at the node's fixed address */
            if ((r = sim_graph_mem_take(n->device, n->bytes))) {
                sim_api_end(corr, CBID_GRAPH_LAUNCH, t0);
                return r;
            }
            continue;
        } else if (n->kind == SIMCU_OP_MEMFREE) {
            sim_graph_mem_give(n->device, n->bytes);
            continue;
        } else if (n->kind == SIMCU_OP_MEMCPY) {
            memmove(n->dst, n->src, n->bytes);
            op.engine = (enum sim_engine)n->engine;
            op.dur_ns = sim_copy_ns(op.engine, n->bytes);
        } else {
            if (n->elem == 4) {
                uint32_t *p = n->dst;
                for (uint64_t k = 0; k < n->bytes / 4; k++) p[k] = n->value;
            } else {
                memset(n->dst, (int)n->value, n->bytes);
            }
            op.engine = SIM_ENGINE_COMPUTE;
            op.dur_ns = sim_memset_ns(n->bytes);
        }
        sim_dev_submit(q, &op, corr);
    }
    sim_api_end(corr, CBID_GRAPH_LAUNCH, t0);
    return CUDA_SUCCESS;
}
SIM_VARIANT(CUresult, cuGraphLaunch_ptsz, cuGraphLaunch, (CUgraphExec e, CUstream s), (e, s));

SIM_API(CUresult, cuGraphExecDestroy, (CUgraphExec e))
{
    if (!e || e->magic != MAGIC_GEXEC) return CUDA_ERROR_INVALID_VALUE;
    e->magic = MAGIC_DEAD;
    nodes_free(e->nodes, e->n);
    free(e);
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuGraphDestroy, (CUgraph g))
{
    if (!g || g->magic != MAGIC_GRAPH) return CUDA_ERROR_INVALID_VALUE;
    g->magic = MAGIC_DEAD;
    nodes_free(g->nodes, g->n);
    free(g);
    return CUDA_SUCCESS;
}

/* ---------------- TMA descriptors ---------------- */

#define TENSORMAP_MAGIC 0x50414d534e4554ull /* "TENSMAP" */

SIM_API(CUresult, cuTensorMapEncodeTiled, (sim_CUtensorMap *tensorMap, int dataType, cuuint32_t tensorRank,
                                          void *globalAddress, const cuuint64_t *globalDim,
                                          const cuuint64_t *globalStrides, const cuuint32_t *boxDim,
                                          const cuuint32_t *elementStrides, int interleave, int swizzle,
                                          int l2Promotion, int oobFill))
{
    if (!tensorMap || !globalAddress || !globalDim || !boxDim || !elementStrides) return CUDA_ERROR_INVALID_VALUE;
    if (tensorRank == 0 || tensorRank > 5 || ((uintptr_t)globalAddress & 15)) return CUDA_ERROR_INVALID_VALUE;
    if (tensorRank > 1 && !globalStrides) return CUDA_ERROR_INVALID_VALUE;
    memset(tensorMap, 0, sizeof *tensorMap);
    tensorMap->opaque[0] = TENSORMAP_MAGIC;
    tensorMap->opaque[1] = (cuuint64_t)(uintptr_t)globalAddress;
    tensorMap->opaque[2] = tensorRank;
    tensorMap->opaque[3] = (cuuint64_t)dataType;
    for (cuuint32_t i = 0; i < tensorRank; i++) tensorMap->opaque[4 + i] = globalDim[i];
    for (cuuint32_t i = 0; i < tensorRank; i++) tensorMap->opaque[9 + i] = boxDim[i];
    return CUDA_SUCCESS;
}
