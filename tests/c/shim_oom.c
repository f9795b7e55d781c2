/*
 * shim_oom.c — every allocation API of the hook table asked for more than the simulated device has
 * (run with SIMCUDA_MEMORY_BYTES=64 MiB), on a created stream where the API takes one; once more
 * while a stream capture is open (the shim must not query the device then); then the program ends
 * the way argv[1] says: "exit" (exit status 1, like a framework's OOM error), "crash" (SIGSEGV) or
 * "ok".  Prints, before ending, the truth as one JSON line: the failed calls in order
 * {"api", "size", "capturing", "device"}, the device's free/total bytes during the failures (one 1 MiB
 * block is live on device 0) and the stream handle.  With a second argument "dev1" (run with
 * SIMCUDA_DEVICES=2) it ends with one more failure on device 1 (nothing live there: "free1").
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pi_cuda.h"

cudaError_t cudaSetDevice(int);
cudaError_t cudaMalloc(void **, size_t);
cudaError_t cudaMallocAsync(void **, size_t, cudaStream_t);
cudaError_t cudaMallocFromPoolAsync(void **, size_t, cudaMemPool_t, cudaStream_t);
cudaError_t cudaMallocManaged(void **, size_t, unsigned);
cudaError_t cudaMallocPitch(void **, size_t *, size_t, size_t);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *, int);
cudaError_t cudaStreamCreate(cudaStream_t *);
cudaError_t cudaMemGetInfo(size_t *, size_t *);

#define MiB ((size_t)1 << 20)
#define BIG (128 * MiB)          /* more than the 64 MiB device */
#define HUGE ((size_t)1 << 50)   /* managed memory is not charged to the device: more than the host has */

static char out[8192];
static size_t n_out;
static int first = 1;

static int g_dev;

static void note(const char *api, size_t size, int rc, int capturing) {
    if (rc == 0) {
        fprintf(stderr, "%s(%zu) did not fail\n", api, size);
        exit(3);
    }
    n_out += (size_t)snprintf(out + n_out, sizeof out - n_out,
                              "%s{\"api\": \"%s\", \"size\": %zu, \"capturing\": %d, \"device\": %d}",
                              first ? "" : ", ", api, size, capturing, g_dev);
    first = 0;
}

#define SYM(name) dlsym(drv, name)

int main(int argc, char **argv) {
    const char *how = argc > 1 ? argv[1] : "ok";
    if (cudaSetDevice(0)) return 3;
    void *keep = NULL, *p = NULL;
    if (cudaMalloc(&keep, MiB)) return 3;
    cudaStream_t st;
    if (cudaStreamCreate(&st)) return 3;
    cudaMemPool_t pool;
    if (cudaDeviceGetDefaultMemPool(&pool, 0)) return 3;
    size_t freeb = 0, total = 0;
    if (cudaMemGetInfo(&freeb, &total)) return 3;
    size_t pitch = 0;
    note("cudaMalloc", BIG, cudaMalloc(&p, BIG), 0);
    note("cudaMallocAsync", BIG, cudaMallocAsync(&p, BIG, st), 0);
    note("cudaMallocFromPoolAsync", BIG, cudaMallocFromPoolAsync(&p, BIG, pool, st), 0);
    note("cudaMallocPitch", 1024 * BIG / 1024, cudaMallocPitch(&p, &pitch, 1024, BIG / 1024), 0);
    note("cudaMallocManaged", HUGE, cudaMallocManaged(&p, HUGE, 1), 0);

    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!drv) return 3;
    CUdeviceptr d = 0;
    CUresult (*alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))SYM("cuMemAlloc_v2");
    CUresult (*pitchf)(CUdeviceptr *, size_t *, size_t, size_t, unsigned) =
        (CUresult(*)(CUdeviceptr *, size_t *, size_t, size_t, unsigned))SYM("cuMemAllocPitch_v2");
    CUresult (*managed)(CUdeviceptr *, size_t, unsigned) = (CUresult(*)(CUdeviceptr *, size_t, unsigned))SYM("cuMemAllocManaged");
    CUresult (*async)(CUdeviceptr *, size_t, CUstream) = (CUresult(*)(CUdeviceptr *, size_t, CUstream))SYM("cuMemAllocAsync");
    CUresult (*frompool)(CUdeviceptr *, size_t, CUmemoryPool, CUstream) =
        (CUresult(*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream))SYM("cuMemAllocFromPoolAsync");
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long) =
        (CUresult(*)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long))SYM("cuMemCreate");
    CUresult (*begin)(CUstream, int) = (CUresult(*)(CUstream, int))SYM("cuStreamBeginCapture_v2");
    CUresult (*end)(CUstream, CUgraph *) = (CUresult(*)(CUstream, CUgraph *))SYM("cuStreamEndCapture");
    if (!alloc || !pitchf || !managed || !async || !frompool || !create || !begin || !end) return 3;
    note("cuMemAlloc_v2", BIG, alloc(&d, BIG), 0);
    note("cuMemAllocPitch_v2", 1024 * BIG / 1024, pitchf(&d, &pitch, 1024, BIG / 1024, 4), 0);
    note("cuMemAllocManaged", HUGE, managed(&d, HUGE, 1), 0);
    note("cuMemAllocAsync", BIG, async(&d, BIG, (CUstream)st), 0);
    note("cuMemAllocFromPoolAsync", BIG, frompool(&d, BIG, (CUmemoryPool)pool, (CUstream)st), 0);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    prop.requestedHandleTypes = 1; /* POSIX fd, as NCCL asks: the record's stream field carries it, not a stream */
    CUmemGenericAllocationHandle h;
    note("cuMemCreate", BIG, create(&h, BIG, &prop, 0), 0);
    /* a stream capture is open: the shim records the failure but does not query the device */
    if (begin((CUstream)st, 0)) return 3;
    note("cuMemAlloc_v2", BIG, alloc(&d, BIG), 1);
    CUgraph g;
    if (end((CUstream)st, &g)) return 3;
    note("cuMemAlloc_v2", BIG + MiB, alloc(&d, BIG + MiB), 0);
    size_t free1 = 0;
    if (argc > 2 && strcmp(argv[2], "dev1") == 0) {
        if (cudaSetDevice(1) || cudaMemGetInfo(&free1, &total)) return 3;
        g_dev = 1;
        note("cudaMalloc", BIG, cudaMalloc(&p, BIG), 0);
    }
    printf("{\"failures\": [%s], \"free\": %zu, \"total\": %zu, \"stream\": %llu, \"free1\": %zu}\n", out, freeb,
           total, (unsigned long long)(uintptr_t)st, free1);
    fflush(stdout);
    if (strcmp(how, "crash") == 0) raise(SIGSEGV);
    if (strcmp(how, "exit") == 0) {
        fprintf(stderr, "CUDA out of memory\n");
        exit(1);
    }
    return 0;
}
