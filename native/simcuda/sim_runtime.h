/*
 * sim_runtime.h — private to libcudart.so.13 (simcuda runtime).
 *
 * The runtime has no NEEDED entry on libcuda: on first use it dlopens
 * "libcuda.so.1", dlsyms cuGetProcAddress_v2 and resolves every driver
 * function it uses through it (base names, cudaVersion 13000), once with the
 * default flags and once with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
 * for the _ptsz/_ptds entry points — like the real runtime.
 */
#ifndef SIM_RUNTIME_H
#define SIM_RUNTIME_H
#include <pthread.h>
#include <stdint.h>
#include "pi_cuda.h"
#include "simcuda.h"

#define HIDDEN __attribute__((visibility("hidden")))
#define RT_VERSION 13000
#define RT_ERROR_INSUFFICIENT_DRIVER 35
#define RT_ERROR_INVALID_DEVICE 101
#define RT_ERROR_UNKNOWN 999

/* X(return, base name, parameter list) — the driver functions the runtime uses */
#define DRIVER_FUNCS(X)                                                                                 \
    X(CUresult, cuInit, (unsigned int))                                                                 \
    X(CUresult, cuDriverGetVersion, (int *))                                                            \
    X(CUresult, cuDeviceGetCount, (int *))                                                              \
    X(CUresult, cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))                                      \
    X(CUresult, cuCtxSetCurrent, (CUcontext))                                                           \
    X(CUresult, cuCtxSynchronize, (void))                                                               \
    X(CUresult, cuProfilerStart, (void))                                                                \
    X(CUresult, cuProfilerStop, (void))                                                                 \
    X(CUresult, cuMemGetInfo, (size_t *, size_t *))                                                     \
    X(CUresult, cuStreamCreate, (CUstream *, unsigned int))                                             \
    X(CUresult, cuStreamDestroy, (CUstream))                                                            \
    X(CUresult, cuStreamSynchronize, (CUstream))                                                        \
    X(CUresult, cuEventCreate, (CUevent *, unsigned int))                                               \
    X(CUresult, cuEventRecord, (CUevent, CUstream))                                                     \
    X(CUresult, cuEventSynchronize, (CUevent))                                                          \
    X(CUresult, cuEventElapsedTime, (float *, CUevent, CUevent))                                        \
    X(CUresult, cuEventDestroy, (CUevent))                                                              \
    X(CUresult, cuMemAlloc, (CUdeviceptr *, size_t))                                                    \
    X(CUresult, cuMemFree, (CUdeviceptr))                                                               \
    X(CUresult, cuMemAllocPitch, (CUdeviceptr *, size_t *, size_t, size_t, unsigned int))               \
    X(CUresult, cuMemAllocManaged, (CUdeviceptr *, size_t, unsigned int))                               \
    X(CUresult, cuMemAllocHost, (void **, size_t))                                                      \
    X(CUresult, cuMemHostAlloc, (void **, size_t, unsigned int))                                        \
    X(CUresult, cuMemFreeHost, (void *))                                                                \
    X(CUresult, cuMemAllocAsync, (CUdeviceptr *, size_t, CUstream))                                     \
    X(CUresult, cuMemFreeAsync, (CUdeviceptr, CUstream))                                                \
    X(CUresult, cuMemAllocFromPoolAsync, (CUdeviceptr *, size_t, CUmemoryPool, CUstream))               \
    X(CUresult, cuMemPoolCreate, (CUmemoryPool *, const CUmemPoolProps *))                              \
    X(CUresult, cuDeviceGetDefaultMemPool, (CUmemoryPool *, CUdevice))                                  \
    X(CUresult, cuMemPoolDestroy, (CUmemoryPool))                                                       \
    X(CUresult, cuIpcGetMemHandle, (CUipcMemHandle *, CUdeviceptr))                                     \
    X(CUresult, cuIpcOpenMemHandle, (CUdeviceptr *, CUipcMemHandle, unsigned int))                      \
    X(CUresult, cuIpcCloseMemHandle, (CUdeviceptr))                                                     \
    X(CUresult, cuMemAdvise, (CUdeviceptr, size_t, int, CUmemLocation))                                 \
    X(CUresult, cuMemPrefetchAsync, (CUdeviceptr, size_t, CUmemLocation, unsigned int, CUstream))       \
    X(CUresult, cuMemcpy, (CUdeviceptr, CUdeviceptr, size_t))                                           \
    X(CUresult, cuMemcpyAsync, (CUdeviceptr, CUdeviceptr, size_t, CUstream))                            \
    X(CUresult, cuMemcpyHtoD, (CUdeviceptr, const void *, size_t))                                      \
    X(CUresult, cuMemcpyDtoH, (void *, CUdeviceptr, size_t))                                            \
    X(CUresult, cuMemcpyDtoD, (CUdeviceptr, CUdeviceptr, size_t))                                       \
    X(CUresult, cuMemcpyHtoDAsync, (CUdeviceptr, const void *, size_t, CUstream))                       \
    X(CUresult, cuMemcpyDtoHAsync, (void *, CUdeviceptr, size_t, CUstream))                             \
    X(CUresult, cuMemcpyDtoDAsync, (CUdeviceptr, CUdeviceptr, size_t, CUstream))                        \
    X(CUresult, cuMemsetD8, (CUdeviceptr, unsigned char, size_t))                                       \
    X(CUresult, cuMemsetD8Async, (CUdeviceptr, unsigned char, size_t, CUstream))                        \
    X(CUresult, cuLaunchKernel, (CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,    \
                                 unsigned int, unsigned int, unsigned int, CUstream, void **, void **)) \
    X(CUresult, cuLaunchKernelEx, (const CUlaunchConfig *, CUfunction, void **, void **))               \
    X(CUresult, cuLaunchCooperativeKernel, (CUfunction, unsigned int, unsigned int, unsigned int,       \
                                            unsigned int, unsigned int, unsigned int, unsigned int,     \
                                            CUstream, void **))                                         \
    X(CUresult, cuFuncGetParamInfo, (CUfunction, size_t, size_t *, size_t *))                           \
    X(CUresult, cuFuncGetName, (const char **, CUfunction))                                             \
    X(CUresult, cuGraphLaunch, (CUgraphExec, CUstream))                                                 \
    X(CUresult, cuLibraryLoadData, (CUlibrary *, const void *, int *, void **, unsigned int, int *,     \
                                    void **, unsigned int))                                             \
    X(CUresult, cuLibraryGetKernel, (CUkernel *, CUlibrary, const char *))                              \
    X(CUresult, cuLibraryUnload, (CUlibrary))                                                           \
    X(CUresult, cuStreamQuery, (CUstream))                                                              \
    X(CUresult, cuStreamWaitEvent, (CUstream, CUevent, unsigned int))                                   \
    X(CUresult, cuEventQuery, (CUevent))                                                                \
    X(CUresult, cuStreamBeginCapture, (CUstream, int))                                                  \
    X(CUresult, cuStreamEndCapture, (CUstream, CUgraph *))                                              \
    X(CUresult, cuStreamIsCapturing, (CUstream, int *))                                                 \
    X(CUresult, cuGraphInstantiateWithFlags, (CUgraphExec *, CUgraph, unsigned long long))              \
    X(CUresult, cuGraphInstantiateWithParams, (CUgraphExec *, CUgraph, void *))                          \
    X(CUresult, cuStreamBeginCaptureToGraph, (CUstream, CUgraph, const void *, const void *, size_t, int))  \
    X(CUresult, cuGraphExecDestroy, (CUgraphExec))                                                      \
    X(CUresult, cuGraphDestroy, (CUgraph))                                                              \
    X(CUresult, cuDeviceGraphMemTrim, (CUdevice))                                                       \
    X(CUresult, cuDeviceGetGraphMemAttribute, (CUdevice, int, void *))                                  \
    X(CUresult, cuDeviceSetGraphMemAttribute, (CUdevice, int, void *))                                  \
    X(CUresult, cuGraphCreate, (CUgraph *, unsigned int))                                               \
    X(CUresult, cuGraphAddKernelNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t,             \
                                       const CUDA_KERNEL_NODE_PARAMS *))                                \
    X(CUresult, cuGraphAddMemsetNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t,             \
                                       const CUDA_MEMSET_NODE_PARAMS *, CUcontext))                     \
    X(CUresult, cuGraphAddMemcpyNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t,             \
                                       const CUDA_MEMCPY3D *, CUcontext))                               \
    X(CUresult, cuGraphAddChildGraphNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUgraph)) \
    X(CUresult, cuGraphAddMemAllocNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t,           \
                                         CUDA_MEM_ALLOC_NODE_PARAMS *))                                 \
    X(CUresult, cuGraphAddMemFreeNode, (CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUdeviceptr)) \
    X(CUresult, cuGraphExecKernelNodeSetParams, (CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS *)) \
    X(CUresult, cuGraphExecUpdate, (CUgraphExec, CUgraph, CUgraphExecUpdateResultInfo *))                 \
    X(CUresult, cuGraphAddNode, (CUgraphNode *, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t, \
                                 CUgraphNodeParams *))                                                      \
    X(CUresult, cuGraphExecNodeSetParams, (CUgraphExec, CUgraphNode, CUgraphNodeParams *)) \
    X(CUresult, cuGraphExecMemcpyNodeSetParams, (CUgraphExec, CUgraphNode, const CUDA_MEMCPY3D *, CUcontext)) \
    X(CUresult, cuGraphExecMemsetNodeSetParams, (CUgraphExec, CUgraphNode, const CUDA_MEMSET_NODE_PARAMS *,  \
                                                 CUcontext))                                                 \
    X(CUresult, cuGraphExecChildGraphNodeSetParams, (CUgraphExec, CUgraphNode, CUgraph))

struct rt_driver {
#define FIELD(ret, name, params) ret(*name) params;
    DRIVER_FUNCS(FIELD)
#undef FIELD
};

typedef CUresult (*rt_getproc_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

/* ---- init.c ---- */
/* resolve the driver and make sure this thread has the current device's
 * primary context; returns cudaSuccess and the table (ptsz: per-thread one) */
HIDDEN cudaError_t rt_enter(int ptsz, const struct rt_driver **drv);
/* cudaSuccess after loading the driver, without touching contexts */
HIDDEN cudaError_t rt_load(void);
HIDDEN rt_getproc_fn rt_getproc(void);
HIDDEN void *rt_cuda_handle(void);
HIDDEN int rt_device_count(void);
HIDDEN int rt_current_device(void);
HIDDEN void rt_set_device(int dev);
/* records a failure as the thread's last error; returns err */
HIDDEN cudaError_t rt_ret(cudaError_t err);
HIDDEN cudaError_t rt_from_cu(CUresult r);

/* the driver's bracket around a runtime call (simcu_hook.h: what CUPTI's RUNTIME records come from);
 * rt_trace_enter returns a token for rt_trace_leave, run when ENTER's scope ends (cleanup attribute) */
HIDDEN int rt_trace_enter(void);
HIDDEN void rt_trace_leave(int *token);

/* The prologue of every runtime entry point: lazy init, then `d` is the
 * driver table (per-thread-stream variant when ptsz); errors go through rt_ret.
 * From here to the function's return the call is a runtime API call on the driver's books. */
#define ENTER(ptsz)                             \
    const struct rt_driver *d;                  \
    do {                                        \
        cudaError_t e_ = rt_enter((ptsz), &d);  \
        if (e_) return rt_ret(e_);              \
    } while (0);                                \
    __attribute__((cleanup(rt_trace_leave))) int rt_trace_ = rt_trace_enter()
#define CU(call) rt_ret(rt_from_cu(call))

/* ---- launch.c ---- */
HIDDEN CUfunction rt_lookup_stub(const void *stub);

#endif
