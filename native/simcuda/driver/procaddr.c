/* procaddr.c — cuGetProcAddress[_v2]: one table (base name, first CUDA version
 * of this ABI, function, per-thread-default-stream variant) drives symbol
 * resolution.  For a base name the entry with the highest min_version not
 * above the requested cudaVersion wins, as in the real driver:
 *   "cuMemAdvise", 12010 -> cuMemAdvise (CUdevice);  12020 -> cuMemAdvise_v2
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM picks the _ptsz/_ptds code. */
#include <string.h>
#include "../sim_driver.h"

/* every sim_ function the table names; the real prototypes live in the files
 * that define them, only the address is taken here */
#define ENTRIES(X)                                                          \
    X("cuInit", 2000, cuInit, 0)                                            \
    X("cuDriverGetVersion", 2020, cuDriverGetVersion, 0)                    \
    X("cuDeviceGet", 2000, cuDeviceGet, 0)                                  \
    X("cuDeviceGetCount", 2000, cuDeviceGetCount, 0)                        \
    X("cuDeviceGetName", 2000, cuDeviceGetName, 0)                          \
    X("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2, 0)                     \
    X("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute, 0)                \
    X("cuDeviceGetUuid", 9020, cuDeviceGetUuid, 0)                          \
    X("cuDeviceGetUuid", 11040, cuDeviceGetUuid, 0)                         \
    X("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain, 0)        \
    X("cuDevicePrimaryCtxRelease", 7000, cuDevicePrimaryCtxRelease_v2, 0)   \
    X("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2, 0)  \
    X("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState, 0)    \
    X("cuCtxGetCurrent", 4000, cuCtxGetCurrent, 0)                          \
    X("cuCtxSetCurrent", 4000, cuCtxSetCurrent, 0)                          \
    X("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2, 0)                     \
    X("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2, 0)                       \
    X("cuCtxGetDevice", 2000, cuCtxGetDevice, 0)                            \
    X("cuCtxSynchronize", 2000, cuCtxSynchronize, 0)                        \
    X("cuProfilerStart", 4000, cuProfilerStart, 0)                          \
    X("cuProfilerStop", 4000, cuProfilerStop, 0)                            \
    X("cuMemGetInfo", 3020, cuMemGetInfo_v2, 0)                             \
    X("cuGetErrorString", 6000, cuGetErrorString, 0)                        \
    X("cuGetErrorName", 6000, cuGetErrorName, 0)                            \
    X("cuGetExportTable", 3000, cuGetExportTable, 0)                        \
    X("cuStreamCreate", 2000, cuStreamCreate, 0)                            \
    X("cuStreamCreateWithPriority", 5050, cuStreamCreateWithPriority, 0)    \
    X("cuStreamDestroy", 4000, cuStreamDestroy_v2, 0)                       \
    X("cuStreamSynchronize", 2000, cuStreamSynchronize, cuStreamSynchronize_ptsz) \
    X("cuStreamQuery", 2000, cuStreamQuery, cuStreamQuery_ptsz)                  \
    X("cuStreamIsCapturing", 10000, cuStreamIsCapturing, cuStreamIsCapturing_ptsz) \
    X("cuStreamWaitEvent", 3020, cuStreamWaitEvent, cuStreamWaitEvent_ptsz)      \
    X("cuEventCreate", 2000, cuEventCreate, 0)                              \
    X("cuEventRecord", 2000, cuEventRecord, cuEventRecord_ptsz)                  \
    X("cuEventSynchronize", 2000, cuEventSynchronize, 0)                    \
    X("cuEventQuery", 2000, cuEventQuery, 0)                                \
    X("cuEventElapsedTime", 2000, cuEventElapsedTime, 0)                    \
    X("cuEventElapsedTime", 12080, cuEventElapsedTime, 0)                   \
    X("cuEventDestroy", 4000, cuEventDestroy_v2, 0)                         \
    X("cuMemAlloc", 3020, cuMemAlloc_v2, 0)                                 \
    X("cuMemFree", 3020, cuMemFree_v2, 0)                                   \
    X("cuMemAllocPitch", 3020, cuMemAllocPitch_v2, 0)                       \
    X("cuMemAllocManaged", 6000, cuMemAllocManaged, 0)                      \
    X("cuMemAllocHost", 3020, cuMemAllocHost_v2, 0)                         \
    X("cuMemHostAlloc", 2020, cuMemHostAlloc, 0)                            \
    X("cuMemFreeHost", 2000, cuMemFreeHost, 0)                              \
    X("cuMemAllocAsync", 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz)           \
    X("cuMemFreeAsync", 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz)              \
    X("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz) \
    X("cuMemPoolCreate", 11020, cuMemPoolCreate, 0)                         \
    X("cuMemPoolDestroy", 11020, cuMemPoolDestroy, 0)                       \
    X("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo, 0)                         \
    X("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool, 0)     \
    X("cuDeviceGetMemPool", 11020, cuDeviceGetMemPool, 0)                   \
    X("cuDeviceSetMemPool", 11020, cuDeviceSetMemPool, 0)                   \
    X("cuMemAdvise", 8000, cuMemAdvise, 0)                                  \
    X("cuMemAdvise", 12020, cuMemAdvise_v2, 0)                              \
    X("cuMemPrefetchAsync", 8000, cuMemPrefetchAsync, cuMemPrefetchAsync_ptsz)   \
    X("cuMemPrefetchAsync", 12020, cuMemPrefetchAsync_v2, cuMemPrefetchAsync_v2_ptsz) \
    X("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity, 0) \
    X("cuMemAddressReserve", 10020, cuMemAddressReserve, 0)                 \
    X("cuMemAddressFree", 10020, cuMemAddressFree, 0)                       \
    X("cuMemCreate", 10020, cuMemCreate, 0)                                 \
    X("cuMemRelease", 10020, cuMemRelease, 0)                               \
    X("cuMemMap", 10020, cuMemMap, 0)                                       \
    X("cuMemUnmap", 10020, cuMemUnmap, 0)                                   \
    X("cuMemSetAccess", 10020, cuMemSetAccess, 0)                           \
    X("cuMemExportToShareableHandle", 10020, cuMemExportToShareableHandle, 0) \
    X("cuMemImportFromShareableHandle", 10020, cuMemImportFromShareableHandle, 0) \
    X("cuMulticastCreate", 12010, cuMulticastCreate, 0)                     \
    X("cuMulticastAddDevice", 12010, cuMulticastAddDevice, 0)               \
    X("cuMulticastBindMem", 12010, cuMulticastBindMem, 0)                   \
    X("cuMulticastBindAddr", 12010, cuMulticastBindAddr, 0)                 \
    X("cuMulticastUnbind", 12010, cuMulticastUnbind, 0)                     \
    X("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2, 0)              \
    X("cuIpcGetMemHandle", 4010, cuIpcGetMemHandle, 0)                      \
    X("cuIpcOpenMemHandle", 4010, cuIpcOpenMemHandle_v2, 0)                 \
    X("cuIpcOpenMemHandle", 11000, cuIpcOpenMemHandle_v2, 0)                \
    X("cuIpcCloseMemHandle", 4010, cuIpcCloseMemHandle, 0)                  \
    X("cuMemcpy", 4000, cuMemcpy, cuMemcpy_ptds)                                 \
    X("cuMemcpyAsync", 4000, cuMemcpyAsync, cuMemcpyAsync_ptsz)                  \
    X("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds)               \
    X("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds)               \
    X("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds)               \
    X("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz) \
    X("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz) \
    X("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz) \
    X("cuMemsetD8", 3020, cuMemsetD8_v2, cuMemsetD8_v2_ptds)                     \
    X("cuMemsetD32", 3020, cuMemsetD32_v2, cuMemsetD32_v2_ptds)                  \
    X("cuMemsetD8Async", 3020, cuMemsetD8Async, cuMemsetD8Async_ptsz)            \
    X("cuMemsetD32Async", 3020, cuMemsetD32Async, cuMemsetD32Async_ptsz)         \
    X("cuLaunchKernel", 4000, cuLaunchKernel, cuLaunchKernel_ptsz)               \
    X("cuLaunchKernelEx", 11060, cuLaunchKernelEx, cuLaunchKernelEx_ptsz)        \
    X("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz) \
    X("cuFuncGetParamInfo", 12040, cuFuncGetParamInfo, 0)                   \
    X("cuFuncGetName", 12030, cuFuncGetName, 0)                             \
    X("cuKernelGetParamInfo", 12040, cuKernelGetParamInfo, 0)               \
    X("cuKernelGetName", 12030, cuKernelGetName, 0)                         \
    X("cuKernelGetFunction", 12000, cuKernelGetFunction, 0)                 \
    X("cuModuleLoad", 2000, cuModuleLoad, 0)                               \
    X("cuModuleLoadData", 2000, cuModuleLoadData, 0)                       \
    X("cuModuleLoadDataEx", 2010, cuModuleLoadDataEx, 0)                   \
    X("cuModuleGetFunction", 2000, cuModuleGetFunction, 0)                 \
    X("cuModuleUnload", 2000, cuModuleUnload, 0)                           \
    X("cuLibraryLoadData", 12000, cuLibraryLoadData, 0)                    \
    X("cuLibraryGetKernel", 12000, cuLibraryGetKernel, 0)                  \
    X("cuLibraryUnload", 12000, cuLibraryUnload, 0)                        \
    X("cuGraphCreate", 10000, cuGraphCreate, 0)                             \
    X("cuGraphInstantiate", 12000, cuGraphInstantiateWithFlags, 0)          \
    X("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags, 0) \
    X("cuGraphInstantiateWithParams", 12000, cuGraphInstantiateWithParams, 0) \
    X("cuGraphLaunch", 10000, cuGraphLaunch, cuGraphLaunch_ptsz)                 \
    X("cuGraphExecDestroy", 10000, cuGraphExecDestroy, 0)                   \
    X("cuGraphDestroy", 10000, cuGraphDestroy, 0)                           \
    X("cuTensorMapEncodeTiled", 12000, cuTensorMapEncodeTiled, 0)          \
    X("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz) \
    X("cuStreamEndCapture", 10000, cuStreamEndCapture, cuStreamEndCapture_ptsz) \
    X("cuStreamBeginCaptureToGraph", 12030, cuStreamBeginCaptureToGraph, 0) \
    X("cuGraphGetNodes", 10000, cuGraphGetNodes, 0)                         \
    X("cuDeviceGraphMemTrim", 11040, cuDeviceGraphMemTrim, 0)               \
    X("cuGraphAddKernelNode", 10000, cuGraphAddKernelNode_v2, 0)            \
    X("cuGraphAddKernelNode", 12000, cuGraphAddKernelNode_v2, 0)            \
    X("cuGraphAddMemsetNode", 10000, cuGraphAddMemsetNode, 0)               \
    X("cuGraphAddMemcpyNode", 10000, cuGraphAddMemcpyNode, 0)               \
    X("cuGraphAddChildGraphNode", 10000, cuGraphAddChildGraphNode, 0)       \
    X("cuGraphAddMemAllocNode", 11040, cuGraphAddMemAllocNode, 0)           \
    X("cuGraphAddMemFreeNode", 11040, cuGraphAddMemFreeNode, 0)             \
    X("cuGraphExecKernelNodeSetParams", 10010, cuGraphExecKernelNodeSetParams_v2, 0) \
    X("cuGraphExecKernelNodeSetParams", 12000, cuGraphExecKernelNodeSetParams_v2, 0) \
    X("cuGraphExecUpdate", 12000, cuGraphExecUpdate_v2, 0)                  \
    X("cuGraphAddNode", 12020, cuGraphAddNode, 0)                          \
    X("cuGraphAddNode", 12030, cuGraphAddNode_v2, 0)                       \
    X("cuGraphExecNodeSetParams", 12020, cuGraphExecNodeSetParams, 0)      \
    X("cuGraphExecMemcpyNodeSetParams", 10020, cuGraphExecMemcpyNodeSetParams, 0) \
    X("cuGraphExecMemsetNodeSetParams", 10020, cuGraphExecMemsetNodeSetParams, 0) \
    X("cuGraphExecChildGraphNodeSetParams", 11010, cuGraphExecChildGraphNodeSetParams, 0) \
    X("cuDeviceGetGraphMemAttribute", 11040, cuDeviceGetGraphMemAttribute, 0) \
    X("cuDeviceSetGraphMemAttribute", 11040, cuDeviceSetGraphMemAttribute, 0) \
    X("simcuRegisterKernel", 0, simcuRegisterKernel, 0)                     \
    X("simcuSetKernelDuration", 0, simcuSetKernelDuration, 0)               \
    X("simcuSetNextLaunchDuration", 0, simcuSetNextLaunchDuration, 0)       \
    X("simcuSetDeviceModel", 0, simcuSetDeviceModel, 0)                     \
    X("simcuGetDeviceTime", 0, simcuGetDeviceTime, 0)

/* forward declarations (address only); the X-macro lists each at least once */
#define DECL(name, ver, fn, ptsz) HIDDEN void sim_##fn(void);
ENTRIES(DECL)
#undef DECL

#define DECL_PTSZ(name, ver, fn, ptsz) HIDDEN void sim_##ptsz(void);
ENTRIES(DECL_PTSZ)
#undef DECL_PTSZ
#define sim_0 0 /* "no per-thread variant" in the table below */

HIDDEN CUresult sim_cuGetProcAddress(const char *, void **, int, cuuint64_t);
HIDDEN CUresult sim_cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

struct proc_entry { const char *name; int min_version; void *fn; void *fn_ptsz; };

#define ROW(name, ver, fn, ptsz) {name, ver, (void *)sim_##fn, (void *)sim_##ptsz},
static const struct proc_entry g_table[] = {
    ENTRIES(ROW)
    {"cuGetProcAddress", 11030, (void *)sim_cuGetProcAddress, 0},
    {"cuGetProcAddress", 12000, (void *)sim_cuGetProcAddress_v2, 0},
};
#undef ROW

static CUresult lookup(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                       CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    if (flags > (CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    const struct proc_entry *best = NULL;
    int known = 0;
    for (size_t i = 0; i < sizeof g_table / sizeof g_table[0]; i++) {
        if (strcmp(g_table[i].name, symbol) != 0) continue;
        known = 1;
        if (g_table[i].min_version <= cudaVersion && (!best || g_table[i].min_version > best->min_version))
            best = &g_table[i];
    }
    *pfn = NULL;
    if (!best) {
        if (status)
            *status = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && best->fn_ptsz ? best->fn_ptsz : best->fn;
    if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuGetProcAddress_v2, (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *symbolStatus))
{
    return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}

SIM_API(CUresult, cuGetProcAddress, (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags))
{
    return lookup(symbol, pfn, cudaVersion, flags, NULL);
}
