/* graphbuild.c — simcuda: CUDA graphs built node by node (cuGraphAdd*Node), and executable graphs updated
 * in place (cuGraphExec{Kernel,Memcpy,Memset,ChildGraph}NodeSetParams, cuGraphExecNodeSetParams, cuGraphExecUpdate).
 *
 * Nodes run in the order they were added (simcuda runs every graph as one chain: the dependencies given
 * are checked for being nodes of the graph, not used to reorder).  A kernel node copies its arguments
 * (kernelParams, or a packed `extra` buffer) when it is added, as CUDA does; a child graph node copies the
 * child's nodes into the parent (CUDA clones the child at that point; they keep the number of the child
 * graph node they came from, for the executable graph's CUPTI node ids: launch.c); memory alloc / free nodes are the
 * graph memory nodes of graphmem.c (the address is fixed when the node is added).  An update replaces the
 * executable graph's node parameters (same number and kinds of nodes, else
 * CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE); the nodes keep their executable node ids. */
#include <stdlib.h>
#include <string.h>
#include "../sim_driver.h"
#include "../sim_device.h"

#define CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE 910
#define P(x) ((void *)(uintptr_t)(x))

static int valid_graph(CUgraph g) { return g && g->magic == MAGIC_GRAPH; }
static int valid_exec(CUgraphExec e) { return e && e->magic == MAGIC_GEXEC; }

/* the dependencies must be nodes of g */
static CUresult check_deps(CUgraph g, const CUgraphNode *deps, size_t n)
{
    if (n && !deps) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < n; i++) {
        unsigned k = 0;
        while (k < g->n && g->nodes[k].handle != (uint64_t)(uintptr_t)deps[i]) k++;
        if (k == g->n) return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* fill a kernel node's function and a copy of its arguments (kernelParams or a packed extra buffer) */
static CUresult kernel_args(struct sim_gnode *n, const CUDA_KERNEL_NODE_PARAMS *p)
{
    CUfunction f = p->func;
    if (!f || f->magic != MAGIC_FUNC) return CUDA_ERROR_INVALID_HANDLE;
    if (p->kernelParams && p->extra) return CUDA_ERROR_INVALID_VALUE;
    const char *buf = NULL;
    if (p->extra) {
        for (size_t i = 0; p->extra[i] != CU_LAUNCH_PARAM_END; i += 2)
            if (p->extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buf = p->extra[i + 1];
        if (!buf && f->nparams) return CUDA_ERROR_INVALID_VALUE;
    } else if (f->nparams && !p->kernelParams) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    char *args = NULL;
    void **params = NULL;
    if (f->nparams) {
        args = calloc(1, f->argsize ? f->argsize : 1);
        params = calloc(f->nparams, sizeof(void *));
        if (!args || !params) {
            free(args);
            free(params);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        for (unsigned i = 0; i < f->nparams; i++) {
            memcpy(args + f->offsets[i], buf ? buf + f->offsets[i] : (const char *)p->kernelParams[i], f->sizes[i]);
            params[i] = args + f->offsets[i];
        }
    }
    free(n->args);
    free(n->params);
    n->kind = SIMCU_OP_KERNEL;
    n->f = f;
    n->args = args;
    n->params = params;
    n->grid[0] = p->gridDimX, n->grid[1] = p->gridDimY, n->grid[2] = p->gridDimZ;
    n->block[0] = p->blockDimX, n->block[1] = p->blockDimY, n->block[2] = p->blockDimZ;
    return CUDA_SUCCESS;
}

static CUresult added(CUgraph g, struct sim_gnode *n, CUgraphNode *out)
{
    sim_graph_node_created(g, n);
    *out = (CUgraphNode)(uintptr_t)n->handle;
    return CUDA_SUCCESS;
}

static CUresult add_kernel(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t nd,
                           const CUDA_KERNEL_NODE_PARAMS *p)
{
    if (!ph || !valid_graph(g) || !p) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_deps(g, deps, nd);
    if (r) return r;
    struct sim_gnode *n = sim_graph_add(g);
    if (!n) return CUDA_ERROR_OUT_OF_MEMORY;
    if ((r = kernel_args(n, p))) {
        g->n--;
        return r;
    }
    return added(g, n, ph);
}

SIM_API(CUresult, cuGraphAddKernelNode_v2, (CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t nd,
                                            const CUDA_KERNEL_NODE_PARAMS *p))
{
    return add_kernel(ph, g, deps, nd, p);
}
SIM_ALIAS(CUresult, cuGraphAddKernelNode, cuGraphAddKernelNode_v2,
          (CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t nd, const CUDA_KERNEL_NODE_PARAMS *p));

/* a memset node's parameters (also an executable graph's node given new ones) */
static CUresult memset_fill(struct sim_gnode *n, const CUDA_MEMSET_NODE_PARAMS *p)
{
    if (!p || !p->dst || (p->elementSize != 1 && p->elementSize != 4) || p->height > 1)
        return CUDA_ERROR_INVALID_VALUE;
    n->kind = SIMCU_OP_MEMSET;
    n->dst = P(p->dst);
    n->bytes = (uint64_t)p->width * p->elementSize;
    n->value = p->elementSize == 1 ? (unsigned char)p->value : p->value;
    n->elem = (int)p->elementSize;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuGraphAddMemsetNode, (CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t nd,
                                         const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx))
{
    struct sim_gnode tmp;
    memset(&tmp, 0, sizeof tmp);
    if (!ph || !valid_graph(g) || memset_fill(&tmp, p)) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_deps(g, deps, nd);
    if (r) return r;
    struct sim_gnode *n = sim_graph_add(g);
    if (!n) return CUDA_ERROR_OUT_OF_MEMORY;
    memset_fill(n, p);
    return added(g, n, ph);
}

/* one-dimensional copies (Height = Depth = 1): host, device or unified on either side */
static CUresult memcpy_fill(struct sim_gnode *n, const CUDA_MEMCPY3D *p)
{
    if (!p || (p->Height > 1) || (p->Depth > 1) || p->srcArray || p->dstArray) return CUDA_ERROR_INVALID_VALUE;
    const char *src = p->srcMemoryType == CU_MEMORYTYPE_HOST ? p->srcHost : P(p->srcDevice);
    char *dst = p->dstMemoryType == CU_MEMORYTYPE_HOST ? p->dstHost : P(p->dstDevice);
    if (!src || !dst) return CUDA_ERROR_INVALID_VALUE;
    src += p->srcXInBytes;
    dst += p->dstXInBytes;
    int sk = sim_mem_kind_of((uint64_t)(uintptr_t)src), dk = sim_mem_kind_of((uint64_t)(uintptr_t)dst);
    int sdev = sk == 3 || sk == 5, ddev = dk == 3 || dk == 5;
    n->kind = SIMCU_OP_MEMCPY;
    n->dst = dst, n->src = src, n->bytes = p->WidthInBytes;
    n->copy_kind = sdev ? (ddev ? 8 : 2) : (ddev ? 1 : 9); /* CUpti_ActivityMemcpyKind */
    n->src_kind = (uint8_t)sk, n->dst_kind = (uint8_t)dk;
    n->engine = sdev ? (ddev ? SIM_ENGINE_D2D : SIM_ENGINE_D2H) : SIM_ENGINE_H2D;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuGraphAddMemcpyNode, (CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t nd,
                                         const CUDA_MEMCPY3D *p, CUcontext ctx))
{
    struct sim_gnode tmp;
    memset(&tmp, 0, sizeof tmp);
    if (!ph || !valid_graph(g) || memcpy_fill(&tmp, p)) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_deps(g, deps, nd);
    if (r) return r;
    struct sim_gnode *n = sim_graph_add(g);
    if (!n) return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy_fill(n, p);
    return added(g, n, ph);
}

/* a deep copy of src into dst (its own argument buffer) */
HIDDEN CUresult sim_graph_node_copy(struct sim_gnode *dst, const struct sim_gnode *src)
{
    uint64_t id = dst->id, handle = dst->handle;
    *dst = *src;
    dst->id = id, dst->handle = handle;
    dst->args = NULL, dst->params = NULL;
    if (src->kind == SIMCU_OP_KERNEL && src->f->nparams) {
        CUfunction f = src->f;
        dst->args = malloc(f->argsize ? f->argsize : 1);
        dst->params = calloc(f->nparams, sizeof(void *));
        if (!dst->args || !dst->params) return CUDA_ERROR_OUT_OF_MEMORY;
        memcpy(dst->args, src->args, f->argsize);
        for (unsigned k = 0; k < f->nparams; k++) dst->params[k] = dst->args + f->offsets[k];
    }
    return CUDA_SUCCESS;
}

/* the child's nodes, copied into g now (later changes to the child do not reach g) */
SIM_API(CUresult, cuGraphAddChildGraphNode, (CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t nd,
                                             CUgraph child))
{
    if (!ph || !valid_graph(g) || !valid_graph(child) || child == g) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_deps(g, deps, nd);
    if (r) return r;
    unsigned first = g->n, cn = child->n, k = 1;
    for (unsigned i = 0; i < g->n; i++) /* this child graph node is the graph's k-th */
        if (g->nodes[i].child >= k) k = g->nodes[i].child + 1;
    for (unsigned i = 0; i < cn; i++) {
        struct sim_gnode *n = sim_graph_add(g);
        if (!n || sim_graph_node_copy(n, &child->nodes[i])) return CUDA_ERROR_OUT_OF_MEMORY;
        n->child = k;
        sim_graph_node_created(g, n);
    }
    /* the child graph node's handle: its first node's (an empty child: a node that does nothing) */
    if (cn == 0) {
        struct sim_gnode *n = sim_graph_add(g);
        if (!n) return CUDA_ERROR_OUT_OF_MEMORY;
        n->kind = SIMCU_OP_MEMFREE; /* a no-op: frees 0 bytes */
        n->device = -1;
        n->child = k;
    }
    *ph = (CUgraphNode)(uintptr_t)g->nodes[first].handle;
    return CUDA_SUCCESS;
}

/* an empty node: the no-op node (a memory free node of 0 bytes on no device) */
static CUresult add_empty(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t nd)
{
    if (!ph || !valid_graph(g)) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_deps(g, deps, nd);
    if (r) return r;
    struct sim_gnode *n = sim_graph_add(g);
    if (!n) return CUDA_ERROR_OUT_OF_MEMORY;
    n->kind = SIMCU_OP_MEMFREE;
    n->device = -1;
    return added(g, n, ph);
}

SIM_API(CUresult, cuGraphAddMemAllocNode, (CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t nd,
                                           CUDA_MEM_ALLOC_NODE_PARAMS *p))
{
    if (!ph || !valid_graph(g) || !p || !p->bytesize) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_deps(g, deps, nd);
    if (r) return r;
    int dev = p->poolProps.location.id;
    CUdeviceptr d;
    if ((r = sim_mem_alloc(&d, p->bytesize, SK_GRAPH, dev, NULL))) return r;
    if ((r = sim_graph_alloc_node(g, d, p->bytesize, dev))) {
        sim_mem_free(d, 0);
        return r;
    }
    p->dptr = d;
    *ph = (CUgraphNode)(uintptr_t)g->nodes[g->n - 1].handle;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuGraphAddMemFreeNode, (CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t nd,
                                          CUdeviceptr dptr))
{
    if (!ph || !valid_graph(g)) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_deps(g, deps, nd);
    if (r) return r;
    int dev = -1;
    uint64_t bytes = sim_graph_block(dptr, &dev);
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_graph_free_node(g, dptr, bytes, dev))) return r;
    *ph = (CUgraphNode)(uintptr_t)g->nodes[g->n - 1].handle;
    return CUDA_SUCCESS;
}

/* ---------------- the generic node API (CUDA 12.2+): one parameter block, the node type first ----------------
 * Each type runs the typed function above; host, event, semaphore, batch memory op and conditional nodes are
 * not simulated (CUDA_ERROR_NOT_SUPPORTED).  The edge data of cuGraphAddNode_v2 is not used (nodes run in the
 * order they were added). */
static CUresult add_node(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t nd, CUgraphNodeParams *p)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
        return add_kernel(ph, g, deps, nd, &p->kernel);
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        return sim_cuGraphAddMemcpyNode(ph, g, deps, nd, &p->memcpy.copyParams, p->memcpy.copyCtx);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        CUDA_MEMSET_NODE_PARAMS m = {p->memset.dst, p->memset.pitch, p->memset.value, p->memset.elementSize,
                                     p->memset.width, p->memset.height};
        return sim_cuGraphAddMemsetNode(ph, g, deps, nd, &m, p->memset.ctx);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH:
        return sim_cuGraphAddChildGraphNode(ph, g, deps, nd, p->graph.graph);
    case CU_GRAPH_NODE_TYPE_EMPTY:
        return add_empty(ph, g, deps, nd);
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
        return sim_cuGraphAddMemAllocNode(ph, g, deps, nd, &p->alloc);
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
        return sim_cuGraphAddMemFreeNode(ph, g, deps, nd, p->free.dptr);
    default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
}

/* CUDA 12.2 */
SIM_API(CUresult, cuGraphAddNode, (CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t nd,
                                   CUgraphNodeParams *p))
{
    return add_node(ph, g, deps, nd, p);
}

/* CUDA 12.3: with edge data (one per dependency; may be NULL) */
SIM_API(CUresult, cuGraphAddNode_v2, (CUgraphNode *ph, CUgraph g, const CUgraphNode *deps,
                                      const CUgraphEdgeData *edata, size_t nd, CUgraphNodeParams *p))
{
    (void)edata;
    return add_node(ph, g, deps, nd, p);
}

/* ---------------- executable graphs updated in place ---------------- */

SIM_API(CUresult, cuGraphExecKernelNodeSetParams_v2, (CUgraphExec e, CUgraphNode node,
                                                      const CUDA_KERNEL_NODE_PARAMS *p))
{
    if (!valid_exec(e) || !p) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < e->n; i++)
        if (e->nodes[i].handle == (uint64_t)(uintptr_t)node) {
            if (e->nodes[i].kind != SIMCU_OP_KERNEL) return CUDA_ERROR_INVALID_VALUE;
            return kernel_args(&e->nodes[i], p);
        }
    return CUDA_ERROR_INVALID_VALUE;
}
SIM_ALIAS(CUresult, cuGraphExecKernelNodeSetParams, cuGraphExecKernelNodeSetParams_v2,
          (CUgraphExec e, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *p));

/* the executable graph's node with this handle, or NULL */
static struct sim_gnode *exec_node(CUgraphExec e, CUgraphNode node, unsigned *at)
{
    if (!valid_exec(e)) return NULL;
    for (unsigned i = 0; i < e->n; i++)
        if (e->nodes[i].handle == (uint64_t)(uintptr_t)node) {
            if (at) *at = i;
            return &e->nodes[i];
        }
    return NULL;
}

/* CUDA 10.2: a memcpy / memset node's new parameters (same kind of node) */
SIM_API(CUresult, cuGraphExecMemcpyNodeSetParams, (CUgraphExec e, CUgraphNode node, const CUDA_MEMCPY3D *p,
                                                   CUcontext ctx))
{
    struct sim_gnode *n = exec_node(e, node, NULL), tmp;
    if (!n || n->kind != SIMCU_OP_MEMCPY) return CUDA_ERROR_INVALID_VALUE;
    memset(&tmp, 0, sizeof tmp);
    if (memcpy_fill(&tmp, p)) return CUDA_ERROR_INVALID_VALUE;
    return memcpy_fill(n, p);
}

SIM_API(CUresult, cuGraphExecMemsetNodeSetParams, (CUgraphExec e, CUgraphNode node,
                                                   const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx))
{
    struct sim_gnode *n = exec_node(e, node, NULL), tmp;
    if (!n || n->kind != SIMCU_OP_MEMSET) return CUDA_ERROR_INVALID_VALUE;
    memset(&tmp, 0, sizeof tmp);
    if (memset_fill(&tmp, p)) return CUDA_ERROR_INVALID_VALUE;
    return memset_fill(n, p);
}

/* CUDA 11.1: a child graph node runs the nodes of another graph of the same topology (same number and kinds
 * of nodes; copied now, as at cuGraphAddChildGraphNode); the nodes keep their handles and ids */
SIM_API(CUresult, cuGraphExecChildGraphNodeSetParams, (CUgraphExec e, CUgraphNode node, CUgraph child))
{
    unsigned at = 0;
    struct sim_gnode *n = exec_node(e, node, &at);
    if (!n || !n->child || !valid_graph(child)) return CUDA_ERROR_INVALID_VALUE;
    unsigned k = n->child, cn = 0;
    while (at + cn < e->n && e->nodes[at + cn].child == k) cn++;
    if (child->n == 0) /* an empty child: the one no-op node */
        return cn == 1 && e->nodes[at].kind == SIMCU_OP_MEMFREE && e->nodes[at].device == -1
                   ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (cn != child->n) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < cn; i++)
        if (e->nodes[at + i].kind != child->nodes[i].kind) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < cn; i++) {
        struct sim_gnode *x = &e->nodes[at + i];
        free(x->args);
        free(x->params);
        if (sim_graph_node_copy(x, &child->nodes[i])) return CUDA_ERROR_OUT_OF_MEMORY;
        x->child = k;
    }
    return CUDA_SUCCESS;
}

/* CUDA 12.2: a kernel, memcpy, memset or child graph node's new parameters (other node types: not simulated) */
SIM_API(CUresult, cuGraphExecNodeSetParams, (CUgraphExec e, CUgraphNode node, CUgraphNodeParams *p))
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
        return sim_cuGraphExecKernelNodeSetParams_v2(e, node, &p->kernel);
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        return sim_cuGraphExecMemcpyNodeSetParams(e, node, &p->memcpy.copyParams, p->memcpy.copyCtx);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        CUDA_MEMSET_NODE_PARAMS m = {p->memset.dst, p->memset.pitch, p->memset.value, p->memset.elementSize,
                                     p->memset.width, p->memset.height};
        return sim_cuGraphExecMemsetNodeSetParams(e, node, &m, p->memset.ctx);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH:
        return sim_cuGraphExecChildGraphNodeSetParams(e, node, p->graph.graph);
    default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
}

/* the executable graph takes g's node parameters: same number and kinds of nodes */
SIM_API(CUresult, cuGraphExecUpdate_v2, (CUgraphExec e, CUgraph g, CUgraphExecUpdateResultInfo *info))
{
    if (!valid_exec(e) || !valid_graph(g)) return CUDA_ERROR_INVALID_VALUE;
    int ok = g->n == e->n;
    for (unsigned i = 0; ok && i < g->n; i++) ok = g->nodes[i].kind == e->nodes[i].kind;
    if (info) memset(info, 0, sizeof *info);
    if (!ok) {
        if (info) info->result = 2; /* CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED */
        return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    }
    for (unsigned i = 0; i < g->n; i++) {
        free(e->nodes[i].args);
        free(e->nodes[i].params);
        uint64_t handle = g->nodes[i].handle;
        if (sim_graph_node_copy(&e->nodes[i], &g->nodes[i])) return CUDA_ERROR_OUT_OF_MEMORY;
        e->nodes[i].handle = handle; /* node handles of the new graph address the updated nodes */
    }
    return CUDA_SUCCESS;
}
