/* memory.c — simcuda runtime: allocations, pools, UVM hints, copies, memsets,
 * streams and events; each is a call of the driver function the runtime
 * resolved through cuGetProcAddress_v2. */
#include <string.h>
#include "../sim_runtime.h"

#define DP(p) ((CUdeviceptr)(uintptr_t)(p))

/* ---------------- allocation ---------------- */

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    if (!devPtr) return rt_ret(cudaErrorInvalidValue);
    ENTER(0);
    if (size == 0) {
        *devPtr = NULL;
        return cudaSuccess;
    }
    CUdeviceptr p = 0;
    cudaError_t e = CU(d->cuMemAlloc(&p, size));
    *devPtr = e ? NULL : (void *)(uintptr_t)p;
    return e;
}

cudaError_t cudaFree(void *devPtr)
{
    ENTER(0);
    if (!devPtr) return cudaSuccess;
    return CU(d->cuMemFree(DP(devPtr)));
}

static cudaError_t malloc_async(void **devPtr, size_t size, cudaStream_t s, int ptsz)
{
    if (!devPtr) return rt_ret(cudaErrorInvalidValue);
    ENTER(ptsz);
    CUdeviceptr p = 0;
    cudaError_t e = CU(d->cuMemAllocAsync(&p, size, s));
    *devPtr = e ? NULL : (void *)(uintptr_t)p;
    return e;
}
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s) { return malloc_async(p, n, s, 0); }
cudaError_t cudaMallocAsync_ptsz(void **p, size_t n, cudaStream_t s) { return malloc_async(p, n, s, 1); }

static cudaError_t free_async(void *devPtr, cudaStream_t s, int ptsz)
{
    ENTER(ptsz);
    return CU(d->cuMemFreeAsync(DP(devPtr), s));
}
cudaError_t cudaFreeAsync(void *p, cudaStream_t s) { return free_async(p, s, 0); }
cudaError_t cudaFreeAsync_ptsz(void *p, cudaStream_t s) { return free_async(p, s, 1); }

static cudaError_t malloc_pool(void **devPtr, size_t size, cudaMemPool_t pool, cudaStream_t s, int ptsz)
{
    if (!devPtr) return rt_ret(cudaErrorInvalidValue);
    ENTER(ptsz);
    CUdeviceptr p = 0;
    cudaError_t e = CU(d->cuMemAllocFromPoolAsync(&p, size, pool, s));
    *devPtr = e ? NULL : (void *)(uintptr_t)p;
    return e;
}
cudaError_t cudaMallocFromPoolAsync(void **p, size_t n, cudaMemPool_t pool, cudaStream_t s)
{
    return malloc_pool(p, n, pool, s, 0);
}
cudaError_t cudaMallocFromPoolAsync_ptsz(void **p, size_t n, cudaMemPool_t pool, cudaStream_t s)
{
    return malloc_pool(p, n, pool, s, 1);
}

cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    if (!devPtr) return rt_ret(cudaErrorInvalidValue);
    ENTER(0);
    CUdeviceptr p = 0;
    cudaError_t e = CU(d->cuMemAllocManaged(&p, size, flags));
    *devPtr = e ? NULL : (void *)(uintptr_t)p;
    return e;
}

cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
    if (!devPtr || !pitch) return rt_ret(cudaErrorInvalidValue);
    ENTER(0);
    CUdeviceptr p = 0;
    cudaError_t e = CU(d->cuMemAllocPitch(&p, pitch, width, height, 4));
    *devPtr = e ? NULL : (void *)(uintptr_t)p;
    return e;
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    if (!ptr) return rt_ret(cudaErrorInvalidValue);
    ENTER(0);
    return CU(d->cuMemAllocHost(ptr, size));
}

cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags)
{
    if (!ptr) return rt_ret(cudaErrorInvalidValue);
    ENTER(0);
    return CU(d->cuMemHostAlloc(ptr, size, flags));
}

cudaError_t cudaFreeHost(void *ptr)
{
    ENTER(0);
    return CU(d->cuMemFreeHost(ptr));
}

cudaError_t cudaMemGetInfo(size_t *freeb, size_t *total)
{
    ENTER(0);
    return CU(d->cuMemGetInfo(freeb, total));
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device)
{
    ENTER(0);
    if (device < 0 || device >= rt_device_count()) return rt_ret(RT_ERROR_INVALID_DEVICE);
    return CU(d->cuDeviceGetDefaultMemPool(pool, device));
}

cudaError_t cudaMemPoolCreate(cudaMemPool_t *pool, const CUmemPoolProps *props)
{
    ENTER(0);
    return CU(d->cuMemPoolCreate(pool, props));
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool)
{
    ENTER(0);
    return CU(d->cuMemPoolDestroy(pool));
}

/* ---------------- IPC memory handles ---------------- */

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
    ENTER(0);
    return CU(d->cuIpcGetMemHandle(handle, DP(devPtr)));
}

cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags)
{
    ENTER(0);
    if (!devPtr) return rt_ret(cudaErrorInvalidValue);
    CUdeviceptr p = 0;
    cudaError_t e = CU(d->cuIpcOpenMemHandle(&p, handle, flags));
    if (e == cudaSuccess) *devPtr = (void *)(uintptr_t)p;
    return e;
}

cudaError_t cudaIpcCloseMemHandle(void *devPtr)
{
    ENTER(0);
    return CU(d->cuIpcCloseMemHandle(DP(devPtr)));
}

/* ---------------- UVM hints (CUDA 13 signatures) ---------------- */

cudaError_t cudaMemAdvise(const void *devPtr, size_t count, int advice, cudaMemLocation location)
{
    ENTER(0);
    return CU(d->cuMemAdvise(DP(devPtr), count, advice, location));
}

/* CUDA 12.2+: the location form of cudaMemAdvise (13.x made it the only one) */
cudaError_t cudaMemAdvise_v2(const void *devPtr, size_t count, int advice, cudaMemLocation location)
{
    ENTER(0);
    return CU(d->cuMemAdvise(DP(devPtr), count, advice, location));
}

static cudaError_t prefetch(const void *devPtr, size_t count, cudaMemLocation location, unsigned int flags,
                            cudaStream_t s, int ptsz)
{
    ENTER(ptsz);
    return CU(d->cuMemPrefetchAsync(DP(devPtr), count, location, flags, s));
}
cudaError_t cudaMemPrefetchAsync(const void *p, size_t n, cudaMemLocation loc, unsigned int flags, cudaStream_t s)
{
    return prefetch(p, n, loc, flags, s, 0);
}
cudaError_t cudaMemPrefetchAsync_ptsz(const void *p, size_t n, cudaMemLocation loc, unsigned int flags,
                                      cudaStream_t s)
{
    return prefetch(p, n, loc, flags, s, 1);
}

/* CUDA 12.2+: the location form of cudaMemPrefetchAsync (13.x made it the only one) */
cudaError_t cudaMemPrefetchAsync_v2(const void *p, size_t n, cudaMemLocation loc, unsigned int flags, cudaStream_t s)
{
    return prefetch(p, n, loc, flags, s, 0);
}

/* ---------------- copies and memsets ---------------- */

static cudaError_t memcpy_sync(void *dst, const void *src, size_t n, int kind, int ptsz)
{
    ENTER(ptsz);
    switch (kind) {
    case cudaMemcpyHostToDevice: return CU(d->cuMemcpyHtoD(DP(dst), src, n));
    case cudaMemcpyDeviceToHost: return CU(d->cuMemcpyDtoH(dst, DP(src), n));
    case cudaMemcpyDeviceToDevice: return CU(d->cuMemcpyDtoD(DP(dst), DP(src), n));
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault: return CU(d->cuMemcpy(DP(dst), DP(src), n));
    default: return rt_ret(cudaErrorInvalidValue);
    }
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind) { return memcpy_sync(dst, src, n, kind, 0); }
cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t n, int kind) { return memcpy_sync(dst, src, n, kind, 1); }

static cudaError_t memcpy_async(void *dst, const void *src, size_t n, int kind, cudaStream_t s, int ptsz)
{
    ENTER(ptsz);
    switch (kind) {
    case cudaMemcpyHostToDevice: return CU(d->cuMemcpyHtoDAsync(DP(dst), src, n, s));
    case cudaMemcpyDeviceToHost: return CU(d->cuMemcpyDtoHAsync(dst, DP(src), n, s));
    case cudaMemcpyDeviceToDevice: return CU(d->cuMemcpyDtoDAsync(DP(dst), DP(src), n, s));
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault: return CU(d->cuMemcpyAsync(DP(dst), DP(src), n, s));
    default: return rt_ret(cudaErrorInvalidValue);
    }
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, cudaStream_t s)
{
    return memcpy_async(dst, src, n, kind, s, 0);
}
cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t n, int kind, cudaStream_t s)
{
    return memcpy_async(dst, src, n, kind, s, 1);
}

static cudaError_t memset_sync(void *p, int value, size_t n, int ptsz)
{
    ENTER(ptsz);
    return CU(d->cuMemsetD8(DP(p), (unsigned char)value, n));
}
cudaError_t cudaMemset(void *p, int value, size_t n) { return memset_sync(p, value, n, 0); }
cudaError_t cudaMemset_ptds(void *p, int value, size_t n) { return memset_sync(p, value, n, 1); }

static cudaError_t memset_async(void *p, int value, size_t n, cudaStream_t s, int ptsz)
{
    ENTER(ptsz);
    return CU(d->cuMemsetD8Async(DP(p), (unsigned char)value, n, s));
}
cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t s) { return memset_async(p, value, n, s, 0); }
cudaError_t cudaMemsetAsync_ptsz(void *p, int value, size_t n, cudaStream_t s) { return memset_async(p, value, n, s, 1); }

/* ---------------- streams and events ---------------- */

cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    if (!s) return rt_ret(cudaErrorInvalidValue);
    ENTER(0);
    return CU(d->cuStreamCreate(s, 0));
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    if (!s) return rt_ret(cudaErrorInvalidValue);
    ENTER(0);
    return CU(d->cuStreamCreate(s, flags));
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    ENTER(0);
    return CU(d->cuStreamDestroy(s));
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    ENTER(0);
    return CU(d->cuStreamSynchronize(s));
}
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s)
{
    ENTER(1);
    return CU(d->cuStreamSynchronize(s));
}

cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    if (!e) return rt_ret(cudaErrorInvalidValue);
    ENTER(0);
    return CU(d->cuEventCreate(e, 0));
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
    if (!e) return rt_ret(cudaErrorInvalidValue);
    ENTER(0);
    return CU(d->cuEventCreate(e, flags));
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    ENTER(0);
    return CU(d->cuEventRecord(e, s));
}
cudaError_t cudaEventRecord_ptsz(cudaEvent_t e, cudaStream_t s)
{
    ENTER(1);
    return CU(d->cuEventRecord(e, s));
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    ENTER(0);
    return CU(d->cuEventSynchronize(e));
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    ENTER(0);
    return CU(d->cuEventElapsedTime(ms, start, end));
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    ENTER(0);
    return CU(d->cuEventDestroy(e));
}
