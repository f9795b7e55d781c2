/* simcuda_procaddr.c — reaching the driver like frameworks and the runtime do:
 * dlopen("libcuda.so.1") + dlsym, then cuGetProcAddress[_v2] with base names.
 * Not linked against libcuda (found through LD_LIBRARY_PATH). Prints "ok". */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pi_cuda.h"

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); exit(1); } } while (0)
#define CHECK_EQ(a, b) do { long long a_ = (long long)(a), b_ = (long long)(b); if (a_ != b_) { \
    fprintf(stderr, "%s:%d: %s = %lld, expected %lld\n", __FILE__, __LINE__, #a, a_, b_); exit(1); } } while (0)

typedef CUresult (*getproc_v2_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*getproc_t)(const char *, void **, int, cuuint64_t);

static void *h;
static getproc_v2_t getproc;

/* what cuGetProcAddress_v2(base, version, flags) returns, as a symbol name */
static void expect(const char *base, int version, cuuint64_t flags, const char *symbol)
{
    void *fn = (void *)1;
    CUdriverProcAddressQueryResult st = 99;
    CUresult r = getproc(base, &fn, version, flags, &st);
    if (r != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS || fn != dlsym(h, symbol)) {
        fprintf(stderr, "cuGetProcAddress_v2(%s, %d, %llu): r=%d st=%d fn=%p, expected %s=%p\n", base, version,
                (unsigned long long)flags, r, st, fn, symbol, dlsym(h, symbol));
        exit(1);
    }
}

int main(void)
{
    h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    CHECK(h != NULL);
    CHECK(dlsym(h, "simcuRegisterKernel") != NULL); /* the simulated driver */
    getproc = (getproc_v2_t)dlsym(h, "cuGetProcAddress_v2");
    CHECK(getproc != NULL);
    const int PT = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

    /* ABI chosen by the requested version */
    expect("cuMemAlloc", 3020, 0, "cuMemAlloc_v2");
    expect("cuMemAlloc", 13000, 0, "cuMemAlloc_v2");
    expect("cuMemFree", 12000, 0, "cuMemFree_v2");
    expect("cuMemAdvise", 12010, 0, "cuMemAdvise");
    expect("cuMemAdvise", 12020, 0, "cuMemAdvise_v2");
    expect("cuMemAdvise", 13000, 0, "cuMemAdvise_v2");
    expect("cuMemPrefetchAsync", 11080, 0, "cuMemPrefetchAsync");
    expect("cuMemPrefetchAsync", 12020, 0, "cuMemPrefetchAsync_v2");
    expect("cuStreamDestroy", 13000, 0, "cuStreamDestroy_v2");
    expect("cuMemcpyHtoDAsync", 12000, 0, "cuMemcpyHtoDAsync_v2");
    expect("cuGetProcAddress", 11030, 0, "cuGetProcAddress");
    expect("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2");
    expect("cuGetExportTable", 13000, 0, "cuGetExportTable");
    expect("cuGraphAddNode", 12020, 0, "cuGraphAddNode");       /* the generic node API: 12.2 ABI */
    expect("cuGraphAddNode", 12030, 0, "cuGraphAddNode_v2");    /* 12.3: with edge data */
    expect("cuGraphAddNode", 13000, 0, "cuGraphAddNode_v2");
    expect("cuGraphExecNodeSetParams", 12020, 0, "cuGraphExecNodeSetParams");
    /* the per-thread default stream flag selects _ptsz / _ptds where one exists */
    expect("cuLaunchKernel", 12000, 0, "cuLaunchKernel");
    expect("cuLaunchKernel", 12000, PT, "cuLaunchKernel_ptsz");
    expect("cuLaunchKernelEx", 12000, PT, "cuLaunchKernelEx_ptsz");
    expect("cuMemAllocAsync", 12000, PT, "cuMemAllocAsync_ptsz");
    expect("cuMemAllocFromPoolAsync", 12000, PT, "cuMemAllocFromPoolAsync_ptsz");
    expect("cuMemPrefetchAsync", 12020, PT, "cuMemPrefetchAsync_v2_ptsz");
    expect("cuMemPrefetchAsync", 12010, PT, "cuMemPrefetchAsync_ptsz");
    expect("cuMemcpyHtoD", 12000, PT, "cuMemcpyHtoD_v2_ptds");
    expect("cuMemsetD8Async", 12000, PT, "cuMemsetD8Async_ptsz");
    expect("cuMemAlloc", 12000, PT, "cuMemAlloc_v2"); /* no per-thread variant */
    expect("cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuLaunchKernel");
    CHECK(dlsym(h, "cuLaunchKernel_ptsz") != dlsym(h, "cuLaunchKernel"));

    /* unknown names, versioned names, too-old versions */
    void *fn = (void *)1;
    CUdriverProcAddressQueryResult st = 99;
    CHECK_EQ(getproc("cuNoSuchFunction", &fn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND);
    CHECK_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    CHECK(fn == NULL);
    CHECK_EQ(getproc("cuMemAlloc_v2", &fn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND);
    CHECK_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    CHECK_EQ(getproc("cuMemAllocAsync", &fn, 11000, 0, &st), CUDA_ERROR_NOT_FOUND);
    CHECK_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    CHECK_EQ(getproc("cuMemAlloc", NULL, 13000, 0, &st), CUDA_ERROR_INVALID_VALUE);

    /* the v1 entry point (no status) and the driver used through resolved pointers */
    getproc_t v1 = (getproc_t)dlsym(h, "cuGetProcAddress");
    CHECK(v1 != NULL);
    CUresult (*init)(unsigned) = NULL;
    CUresult (*dget)(CUdevice *, int) = NULL;
    CUresult (*retain)(CUcontext *, CUdevice) = NULL;
    CUresult (*setcur)(CUcontext) = NULL;
    CUresult (*alloc)(CUdeviceptr *, size_t) = NULL;
    CUresult (*freep)(CUdeviceptr) = NULL;
    CUresult (*advise_v2)(CUdeviceptr, size_t, int, CUmemLocation) = NULL;
    CUresult (*alloc_managed)(CUdeviceptr *, size_t, unsigned) = NULL;
    CHECK_EQ(v1("cuInit", (void **)&init, 11030, 0), CUDA_SUCCESS);
    CHECK_EQ(v1("cuDeviceGet", (void **)&dget, 11030, 0), CUDA_SUCCESS);
    CHECK_EQ(v1("cuDevicePrimaryCtxRetain", (void **)&retain, 11030, 0), CUDA_SUCCESS);
    CHECK_EQ(v1("cuCtxSetCurrent", (void **)&setcur, 11030, 0), CUDA_SUCCESS);
    CHECK_EQ(getproc("cuMemAlloc", (void **)&alloc, 13000, 0, NULL), CUDA_SUCCESS);
    CHECK_EQ(getproc("cuMemFree", (void **)&freep, 13000, 0, NULL), CUDA_SUCCESS);
    CHECK_EQ(getproc("cuMemAdvise", (void **)&advise_v2, 13000, 0, NULL), CUDA_SUCCESS);
    CHECK_EQ(getproc("cuMemAllocManaged", (void **)&alloc_managed, 13000, 0, NULL), CUDA_SUCCESS);
    CUdevice dev;
    CUcontext ctx;
    CHECK_EQ(init(0), CUDA_SUCCESS);
    CHECK_EQ(dget(&dev, 0), CUDA_SUCCESS);
    CHECK_EQ(retain(&ctx, dev), CUDA_SUCCESS);
    CHECK_EQ(setcur(ctx), CUDA_SUCCESS);
    CUdeviceptr p, m;
    CHECK_EQ(alloc(&p, 1 << 16), CUDA_SUCCESS);
    CHECK_EQ(alloc_managed(&m, 1 << 16, 1), CUDA_SUCCESS);
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    CHECK_EQ(advise_v2(m, 1 << 16, 1, loc), CUDA_SUCCESS);
    CHECK_EQ(advise_v2(p, 1 << 16, 1, loc), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(freep(p), CUDA_SUCCESS);
    CHECK_EQ(freep(m), CUDA_SUCCESS);
    CHECK_EQ(freep(p), CUDA_ERROR_INVALID_VALUE);
    printf("ok procaddr\n");
    return 0;
}
