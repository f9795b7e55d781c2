/* graphbuild.c — simcuda runtime: CUDA graphs built node by node and executable graphs updated, through the
 * driver's cuGraphAdd*Node / cuGraphExecKernelNodeSetParams / cuGraphExecUpdate (driver/graphbuild.c). */
#include <string.h>
#include "../sim_runtime.h"

cudaError_t cudaGraphCreate(cudaGraph_t *g, unsigned int flags)
{
    ENTER(0);
    return CU(d->cuGraphCreate(g, flags));
}

/* cudaKernelNodeParams -> the driver's (the host stub names the function) */
static cudaError_t kernel_params(const cudaKernelNodeParams *p, CUDA_KERNEL_NODE_PARAMS *out)
{
    if (!p) return cudaErrorInvalidValue;
    CUfunction f = rt_lookup_stub(p->func);
    if (!f) return cudaErrorInvalidDeviceFunction;
    memset(out, 0, sizeof *out);
    out->func = f;
    out->gridDimX = p->gridDim.x, out->gridDimY = p->gridDim.y, out->gridDimZ = p->gridDim.z;
    out->blockDimX = p->blockDim.x, out->blockDimY = p->blockDim.y, out->blockDimZ = p->blockDim.z;
    out->sharedMemBytes = p->sharedMemBytes;
    out->kernelParams = p->kernelParams;
    out->extra = p->extra;
    return cudaSuccess;
}

cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *node, cudaGraph_t g, const cudaGraphNode_t *deps, size_t n,
                                   const cudaKernelNodeParams *p)
{
    ENTER(0);
    CUDA_KERNEL_NODE_PARAMS kp;
    cudaError_t e = kernel_params(p, &kp);
    if (e) return rt_ret(e);
    return CU(d->cuGraphAddKernelNode(node, g, deps, n, &kp));
}

cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t *node, cudaGraph_t g, const cudaGraphNode_t *deps, size_t n,
                                   const cudaMemsetParams *p)
{
    ENTER(0);
    if (!p) return rt_ret(cudaErrorInvalidValue);
    CUDA_MEMSET_NODE_PARAMS mp = {(CUdeviceptr)(uintptr_t)p->dst, p->pitch, p->value, p->elementSize, p->width,
                                  p->height};
    return CU(d->cuGraphAddMemsetNode(node, g, deps, n, &mp, NULL));
}

cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t *node, cudaGraph_t g, const cudaGraphNode_t *deps, size_t n,
                                     void *dst, const void *src, size_t count, int kind)
{
    ENTER(0);
    CUDA_MEMCPY3D c;
    memset(&c, 0, sizeof c);
    (void)kind; /* the pointers say where they are (unified addressing), as cudaMemcpyDefault */
    c.srcMemoryType = CU_MEMORYTYPE_UNIFIED, c.srcDevice = (CUdeviceptr)(uintptr_t)src;
    c.dstMemoryType = CU_MEMORYTYPE_UNIFIED, c.dstDevice = (CUdeviceptr)(uintptr_t)dst;
    c.WidthInBytes = count, c.Height = 1, c.Depth = 1;
    return CU(d->cuGraphAddMemcpyNode(node, g, deps, n, &c, NULL));
}

cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t *node, cudaGraph_t g, const cudaGraphNode_t *deps, size_t n,
                                       cudaGraph_t child)
{
    ENTER(0);
    return CU(d->cuGraphAddChildGraphNode(node, g, deps, n, child));
}

cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t *node, cudaGraph_t g, const cudaGraphNode_t *deps, size_t n,
                                     cudaMemAllocNodeParams *p)
{
    ENTER(0);
    return CU(d->cuGraphAddMemAllocNode(node, g, deps, n, p));
}

cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t *node, cudaGraph_t g, const cudaGraphNode_t *deps, size_t n,
                                    void *dptr)
{
    ENTER(0);
    return CU(d->cuGraphAddMemFreeNode(node, g, deps, n, (CUdeviceptr)(uintptr_t)dptr));
}

cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t e, cudaGraphNode_t node, const cudaKernelNodeParams *p)
{
    ENTER(0);
    CUDA_KERNEL_NODE_PARAMS kp;
    cudaError_t err = kernel_params(p, &kp);
    if (err) return rt_ret(err);
    return CU(d->cuGraphExecKernelNodeSetParams(e, node, &kp));
}

cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t e, cudaGraphNode_t node, const cudaMemsetParams *p)
{
    ENTER(0);
    if (!p) return rt_ret(cudaErrorInvalidValue);
    CUDA_MEMSET_NODE_PARAMS mp = {(CUdeviceptr)(uintptr_t)p->dst, p->pitch, p->value, p->elementSize, p->width,
                                  p->height};
    return CU(d->cuGraphExecMemsetNodeSetParams(e, node, &mp, NULL));
}

cudaError_t cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t e, cudaGraphNode_t node, void *dst, const void *src,
                                               size_t count, int kind)
{
    ENTER(0);
    CUDA_MEMCPY3D c;
    memset(&c, 0, sizeof c);
    (void)kind; /* unified addressing, as cudaGraphAddMemcpyNode1D */
    c.srcMemoryType = CU_MEMORYTYPE_UNIFIED, c.srcDevice = (CUdeviceptr)(uintptr_t)src;
    c.dstMemoryType = CU_MEMORYTYPE_UNIFIED, c.dstDevice = (CUdeviceptr)(uintptr_t)dst;
    c.WidthInBytes = count, c.Height = 1, c.Depth = 1;
    return CU(d->cuGraphExecMemcpyNodeSetParams(e, node, &c, NULL));
}

cudaError_t cudaGraphExecChildGraphNodeSetParams(cudaGraphExec_t e, cudaGraphNode_t node, cudaGraph_t child)
{
    ENTER(0);
    return CU(d->cuGraphExecChildGraphNodeSetParams(e, node, child));
}

/* ---- the generic node API: cudaGraphNodeParams -> the driver's CUgraphNodeParams ----
 * Kernel (the host stub names the function), memcpy (cudaMemcpy3DParms of linear memory: unified addresses),
 * memset, child graph, empty, memory alloc (the address comes back in p->alloc.dptr) and free nodes; other
 * types are not simulated (cudaErrorNotSupported). */
static cudaError_t node_params(const cudaGraphNodeParams *p, CUgraphNodeParams *out)
{
    if (!p) return cudaErrorInvalidValue;
    memset(out, 0, sizeof *out);
    out->type = (CUgraphNodeType)p->type;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        cudaKernelNodeParams kp = {p->kernel.func, p->kernel.gridDim, p->kernel.blockDim, p->kernel.sharedMemBytes,
                                   p->kernel.kernelParams, p->kernel.extra};
        return kernel_params(&kp, &out->kernel);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
        const cudaMemcpy3DParms *c = &p->memcpy.copyParams;
        if (c->srcArray || c->dstArray) return cudaErrorInvalidValue;
        CUDA_MEMCPY3D *m = &out->memcpy.copyParams;
        m->srcMemoryType = CU_MEMORYTYPE_UNIFIED, m->srcDevice = (CUdeviceptr)(uintptr_t)c->srcPtr.ptr;
        m->dstMemoryType = CU_MEMORYTYPE_UNIFIED, m->dstDevice = (CUdeviceptr)(uintptr_t)c->dstPtr.ptr;
        m->srcXInBytes = c->srcPos.x, m->dstXInBytes = c->dstPos.x;
        m->WidthInBytes = c->extent.width, m->Height = c->extent.height, m->Depth = c->extent.depth;
        return cudaSuccess;
    }
    case CU_GRAPH_NODE_TYPE_MEMSET:
        out->memset.dst = (CUdeviceptr)(uintptr_t)p->memset.dst, out->memset.pitch = p->memset.pitch;
        out->memset.value = p->memset.value, out->memset.elementSize = p->memset.elementSize;
        out->memset.width = p->memset.width, out->memset.height = p->memset.height;
        return cudaSuccess;
    case CU_GRAPH_NODE_TYPE_GRAPH:
        out->graph.graph = p->graph.graph;
        return cudaSuccess;
    case CU_GRAPH_NODE_TYPE_EMPTY:
        return cudaSuccess;
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
        out->alloc = p->alloc;
        return cudaSuccess;
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
        out->free.dptr = (CUdeviceptr)(uintptr_t)p->free.dptr;
        return cudaSuccess;
    default:
        return cudaErrorNotSupported;
    }
}

/* CUDA 13 signature (with edge data); 12.3-12.9 exported it as cudaGraphAddNode_v2, their cudaGraphAddNode had
 * none (the shim reads the arguments by the library's major version) */
static cudaError_t add_node(cudaGraphNode_t *node, cudaGraph_t g, const cudaGraphNode_t *deps,
                            const cudaGraphEdgeData *edata, size_t n, cudaGraphNodeParams *p)
{
    ENTER(0);
    CUgraphNodeParams np;
    cudaError_t e = node_params(p, &np);
    if (e) return rt_ret(e);
    cudaError_t r = CU(d->cuGraphAddNode(node, g, deps, edata, n, &np));
    if (r == cudaSuccess && p->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) p->alloc.dptr = np.alloc.dptr;
    return r;
}

cudaError_t cudaGraphAddNode(cudaGraphNode_t *node, cudaGraph_t g, const cudaGraphNode_t *deps,
                             const cudaGraphEdgeData *edata, size_t n, cudaGraphNodeParams *p)
{
    return add_node(node, g, deps, edata, n, p);
}

cudaError_t cudaGraphAddNode_v2(cudaGraphNode_t *node, cudaGraph_t g, const cudaGraphNode_t *deps,
                                const cudaGraphEdgeData *edata, size_t n, cudaGraphNodeParams *p)
{
    return add_node(node, g, deps, edata, n, p);
}

cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t e, cudaGraphNode_t node, cudaGraphNodeParams *p)
{
    ENTER(0);
    CUgraphNodeParams np;
    cudaError_t err = node_params(p, &np);
    if (err) return rt_ret(err);
    return CU(d->cuGraphExecNodeSetParams(e, node, &np));
}

/* CUDA 12 signature */
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t e, cudaGraph_t g, cudaGraphExecUpdateResultInfo *info)
{
    ENTER(0);
    return CU(d->cuGraphExecUpdate(e, g, info));
}
