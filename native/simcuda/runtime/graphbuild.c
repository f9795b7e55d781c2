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

/* CUDA 12 signature */
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t e, cudaGraph_t g, cudaGraphExecUpdateResultInfo *info)
{
    ENTER(0);
    return CU(d->cuGraphExecUpdate(e, g, info));
}
