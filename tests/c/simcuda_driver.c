/* simcuda_driver.c — the driver API through the PLT (linked against libcuda.so.1).
 * Usage: simcuda_driver <case>; prints "ok <case>" and exits 0 on success. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "pi_cuda.h"
#include "simcuda.h"

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); exit(1); } } while (0)
#define CHECK_EQ(a, b) do { long long a_ = (long long)(a), b_ = (long long)(b); if (a_ != b_) { \
    fprintf(stderr, "%s:%d: %s = %lld, expected %lld\n", __FILE__, __LINE__, #a, a_, b_); exit(1); } } while (0)

CUresult cuInit(unsigned int);
CUresult cuDriverGetVersion(int *);
CUresult cuDeviceGet(CUdevice *, int);
CUresult cuDeviceGetCount(int *);
CUresult cuDeviceGetName(char *, int, CUdevice);
CUresult cuDeviceTotalMem_v2(size_t *, CUdevice);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxGetCurrent(CUcontext *);
CUresult cuCtxGetDevice(CUdevice *);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemAllocManaged(CUdeviceptr *, size_t, unsigned int);
CUresult cuMemAllocHost_v2(void **, size_t);
CUresult cuMemFreeHost(void *);
CUresult cuMemAllocAsync(CUdeviceptr *, size_t, CUstream);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
CUresult cuMemPoolCreate(CUmemoryPool *, const CUmemPoolProps *);
CUresult cuMemPoolDestroy(CUmemoryPool);
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *, CUdevice);
CUresult cuMemAdvise(CUdeviceptr, size_t, int, CUdevice);
CUresult cuMemAdvise_v2(CUdeviceptr, size_t, int, CUmemLocation);
CUresult cuMemPrefetchAsync_v2(CUdeviceptr, size_t, CUmemLocation, unsigned int, CUstream);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t);
CUresult cuMemcpyDtoH_v2(void *, CUdeviceptr, size_t);
CUresult cuMemcpyDtoD_v2(CUdeviceptr, CUdeviceptr, size_t);
CUresult cuMemsetD8_v2(CUdeviceptr, unsigned char, size_t);
CUresult cuMemsetD32_v2(CUdeviceptr, unsigned int, size_t);
CUresult cuMemGetAllocationGranularity(size_t *, const CUmemAllocationProp *, int);
CUresult cuMemAddressReserve(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
CUresult cuMemAddressFree(CUdeviceptr, size_t);
CUresult cuMemCreate(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuMemMap(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
CUresult cuMemUnmap(CUdeviceptr, size_t);
CUresult cuMemSetAccess(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **);
CUresult cuLaunchKernelEx(const CUlaunchConfig *, CUfunction, void **, void **);
CUresult cuFuncGetParamInfo(CUfunction, size_t, size_t *, size_t *);
CUresult cuFuncGetName(const char **, CUfunction);
CUresult cuStreamCreate(CUstream *, unsigned int);
CUresult cuStreamDestroy_v2(CUstream);
CUresult cuEventCreate(CUevent *, unsigned int);
CUresult cuEventRecord(CUevent, CUstream);
CUresult cuEventElapsedTime(float *, CUevent, CUevent);
CUresult cuEventDestroy_v2(CUevent);
CUresult cuGetErrorName(CUresult, const char **);
CUresult cuLaunchCooperativeKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   CUstream, void **);
CUresult cuLaunchKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
CUresult cuKernelGetParamInfo(CUkernel, size_t, size_t *, size_t *);
CUresult cuKernelGetName(const char **, CUkernel);
CUresult cuKernelGetFunction(CUfunction *, CUkernel);
CUresult cuGraphCreate(CUgraph *, unsigned int);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *, CUgraph, unsigned long long);
CUresult cuGraphLaunch(CUgraphExec, CUstream);
CUresult cuGraphExecDestroy(CUgraphExec);
CUresult cuGraphDestroy(CUgraph);
CUresult cuTensorMapEncodeTiled(void *, int, cuuint32_t, void *, const cuuint64_t *, const cuuint64_t *,
                                const cuuint32_t *, const cuuint32_t *, int, int, int, int);
CUresult cuStreamIsCapturing(CUstream, int *);
CUresult cuMemAllocPitch_v2(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
CUresult cuMemHostAlloc(void **, size_t, unsigned int);
CUresult cuCtxSynchronize(void);
CUresult cuGetExportTable(const void **, const void *);

static void init(void)
{
    CUdevice dev;
    CUcontext ctx;
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    CHECK_EQ(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    CHECK_EQ(cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
}

/* a kernel `axpy(float *y, const float *x, float a, int n)`: y[i] += a * x[i] */
static void axpy(void **p)
{
    float *y = *(float **)p[0];
    const float *x = *(const float **)p[1];
    float a = *(float *)p[2];
    int n = *(int *)p[3];
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}
static const size_t AXPY_OFF[] = {0, 8, 16, 20}, AXPY_SIZE[] = {8, 8, 4, 4};

static int case_basics(void)
{
    CUdeviceptr p;
    CHECK_EQ(cuMemAlloc_v2(&p, 64), CUDA_ERROR_NOT_INITIALIZED); /* before cuInit */
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    CHECK_EQ(cuMemAlloc_v2(&p, 64), CUDA_ERROR_INVALID_CONTEXT); /* no current context */
    init();
    int v, n;
    char name[64];
    size_t total, freeb;
    CHECK_EQ(cuDriverGetVersion(&v), CUDA_SUCCESS);
    CHECK_EQ(v, 13000);
    CHECK_EQ(cuDeviceGetCount(&n), CUDA_SUCCESS);
    CHECK_EQ(n, 3); /* SIMCUDA_DEVICES=3 set by the test */
    CHECK_EQ(cuDeviceGetName(name, sizeof name, 0), CUDA_SUCCESS);
    CHECK(strcmp(name, "simcuda virtual GPU") == 0);
    CHECK_EQ(cuDeviceTotalMem_v2(&total, 0), CUDA_SUCCESS);
    CHECK_EQ(total, 16ll << 30);
    CHECK_EQ(cuMemAlloc_v2(&p, 1000), CUDA_SUCCESS);
    CHECK_EQ(p % 256, 0);
    CHECK_EQ(cuMemGetInfo_v2(&freeb, &total), CUDA_SUCCESS);
    CHECK_EQ(total - freeb, 1000);
    CHECK_EQ(cuMemsetD32_v2(p, 0x01020304u, 250), CUDA_SUCCESS);
    unsigned int host[250];
    CHECK_EQ(cuMemcpyDtoH_v2(host, p, sizeof host), CUDA_SUCCESS);
    CHECK_EQ(host[249], 0x01020304u);
    CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
    CHECK_EQ(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);     /* double free */
    CHECK_EQ(cuMemFree_v2(p + 16), CUDA_ERROR_INVALID_VALUE); /* not a base */
    CHECK_EQ(cuMemGetInfo_v2(&freeb, &total), CUDA_SUCCESS);
    CHECK_EQ(total - freeb, 0);
    /* pinned host memory is freed only by cuMemFreeHost */
    void *h;
    CHECK_EQ(cuMemAllocHost_v2(&h, 4096), CUDA_SUCCESS);
    CHECK_EQ(cuMemFree_v2((CUdeviceptr)(uintptr_t)h), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemFreeHost(h), CUDA_SUCCESS);
    /* async and pool allocations */
    CUstream s;
    CUmemoryPool dflt, pool;
    CHECK_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
    CHECK_EQ(cuMemAllocAsync(&p, 4096, s), CUDA_SUCCESS);
    CHECK_EQ(cuMemFreeAsync(p, s), CUDA_SUCCESS);
    CHECK_EQ(cuDeviceGetDefaultMemPool(&dflt, 0), CUDA_SUCCESS);
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = 1;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 1;
    CHECK_EQ(cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
    CHECK(pool != dflt);
    CHECK_EQ(cuMemAllocFromPoolAsync(&p, 512, pool, s), CUDA_SUCCESS);
    CHECK_EQ(cuMemFreeAsync(p, s), CUDA_SUCCESS);
    CHECK_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);
    CHECK_EQ(cuMemAllocFromPoolAsync(&p, 512, pool, s), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuMemPoolDestroy(dflt), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
    /* events */
    CUevent a, b;
    float ms = -1;
    CHECK_EQ(cuEventCreate(&a, 0), CUDA_SUCCESS);
    CHECK_EQ(cuEventCreate(&b, 0), CUDA_SUCCESS);
    CHECK_EQ(cuEventRecord(a, NULL), CUDA_SUCCESS);
    CHECK_EQ(cuEventRecord(b, NULL), CUDA_SUCCESS);
    CHECK_EQ(cuEventElapsedTime(&ms, a, b), CUDA_SUCCESS);
    CHECK(ms >= 0);
    CHECK_EQ(cuEventDestroy_v2(a), CUDA_SUCCESS);
    CHECK_EQ(cuEventDestroy_v2(b), CUDA_SUCCESS);
    const char *en;
    CHECK_EQ(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &en), CUDA_SUCCESS);
    CHECK(strcmp(en, "CUDA_ERROR_OUT_OF_MEMORY") == 0);
    const void *tbl = (void *)1;
    char uuid[16] = {0};
    CHECK_EQ(cuGetExportTable(&tbl, uuid), CUDA_ERROR_NOT_SUPPORTED);
    return 0;
}

static int case_oom(void) /* run with SIMCUDA_MEMORY_BYTES=1048576 */
{
    init();
    CUdeviceptr a, b, c;
    CHECK_EQ(cuMemAlloc_v2(&a, 600 << 10), CUDA_SUCCESS);
    CHECK_EQ(cuMemAlloc_v2(&b, 600 << 10), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(cuMemAllocAsync(&b, 600 << 10, NULL), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(cuMemAlloc_v2(&b, 400 << 10), CUDA_SUCCESS);
    CHECK_EQ(cuMemFree_v2(a), CUDA_SUCCESS);
    CHECK_EQ(cuMemAlloc_v2(&c, 600 << 10), CUDA_SUCCESS); /* room again */
    CHECK_EQ(cuMemFree_v2(b), CUDA_SUCCESS);
    CHECK_EQ(cuMemFree_v2(c), CUDA_SUCCESS);
    return 0;
}

static int case_managed(void)
{
    init();
    CUdeviceptr m, d;
    CUmemLocation dev0 = {CU_MEM_LOCATION_TYPE_DEVICE, 0}, bad = {CU_MEM_LOCATION_TYPE_DEVICE, 7};
    CHECK_EQ(cuMemAllocManaged(&m, 1 << 20, 1), CUDA_SUCCESS);
    CHECK_EQ(cuMemAlloc_v2(&d, 4096), CUDA_SUCCESS);
    CHECK_EQ(cuMemAdvise(m, 1 << 20, 1, 0), CUDA_SUCCESS);
    CHECK_EQ(cuMemAdvise_v2(m + 4096, 4096, 3, dev0), CUDA_SUCCESS);
    CHECK_EQ(cuMemAdvise_v2(m + 4096, 1 << 20, 3, dev0), CUDA_ERROR_INVALID_VALUE); /* past the end */
    CHECK_EQ(cuMemAdvise_v2(d, 4096, 3, dev0), CUDA_ERROR_INVALID_VALUE);           /* not managed */
    CHECK_EQ(cuMemPrefetchAsync_v2(m, 1 << 20, dev0, 0, NULL), CUDA_SUCCESS);
    CHECK_EQ(cuMemPrefetchAsync_v2(m, 1 << 20, bad, 0, NULL), 101);
    CHECK_EQ(cuMemFree_v2(m), CUDA_SUCCESS);
    CHECK_EQ(cuMemPrefetchAsync_v2(m, 1 << 20, dev0, 0, NULL), CUDA_ERROR_INVALID_VALUE); /* freed */
    CHECK_EQ(cuMemFree_v2(d), CUDA_SUCCESS);
    return 0;
}

static int case_vmm(void)
{
    init();
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t g;
    CHECK_EQ(cuMemGetAllocationGranularity(&g, &prop, 0), CUDA_SUCCESS);
    CHECK_EQ(g, 2 << 20);
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    CHECK_EQ(cuMemAddressReserve(&va, 4 * g, 0, 0, 0), CUDA_SUCCESS);
    CHECK_EQ(va % g, 0);
    CHECK_EQ(cuMemCreate(&h, g, &prop, 0), CUDA_SUCCESS);
    CHECK_EQ(cuMemMap(va, g, 0, h, 0), CUDA_SUCCESS);
    CHECK_EQ(cuMemMap(va + 2 * g, g, 0, h, 0), CUDA_SUCCESS); /* a second view of the same memory */
    CHECK_EQ(cuMemMap(va, g, 0, h, 0), 208);                   /* ALREADY_MAPPED */
    CHECK_EQ(cuMemMap(va + 8 * g, g, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* outside the reservation */
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, 3};
    CHECK_EQ(cuMemSetAccess(va, g, &acc, 1), CUDA_SUCCESS);
    CHECK_EQ(cuMemSetAccess(va, 2 * g, &acc, 1), CUDA_ERROR_INVALID_VALUE); /* second granule unmapped */
    char *a = (char *)(uintptr_t)va, *b = (char *)(uintptr_t)(va + 2 * g);
    strcpy(a + 100, "aliased");
    CHECK(strcmp(b + 100, "aliased") == 0); /* both mappings alias one allocation */
    CHECK_EQ(cuMemsetD8_v2(va + 2 * g + 5000, 0x5a, 10), CUDA_SUCCESS);
    CHECK_EQ(a[5009], 0x5a);
    CHECK_EQ(cuMemRelease(h), CUDA_SUCCESS); /* memory stays while mapped */
    CHECK_EQ(a[5009], 0x5a);
    CHECK_EQ(cuMemAddressFree(va, 4 * g), CUDA_ERROR_INVALID_VALUE); /* still mapped */
    CHECK_EQ(cuMemUnmap(va, g), CUDA_SUCCESS);
    CHECK_EQ(cuMemUnmap(va, g), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(b[100], 'a');
    CHECK_EQ(cuMemUnmap(va + 2 * g, g), CUDA_SUCCESS);
    CHECK_EQ(cuMemAddressFree(va, 4 * g), CUDA_SUCCESS);
    return 0;
}

static int case_launch(void)
{
    init();
    CUfunction f;
    CHECK_EQ(simcuRegisterKernel("axpy", axpy, 4, AXPY_OFF, AXPY_SIZE, &f), CUDA_SUCCESS);
    /* callers count parameters by asking until CUDA_ERROR_INVALID_VALUE */
    size_t n = 0, off, sz;
    while (cuFuncGetParamInfo(f, n, &off, &sz) == CUDA_SUCCESS) {
        CHECK_EQ(off, AXPY_OFF[n]);
        CHECK_EQ(sz, AXPY_SIZE[n]);
        n++;
    }
    CHECK_EQ(n, 4);
    CHECK_EQ(cuFuncGetParamInfo(f, 4, &off, &sz), CUDA_ERROR_INVALID_VALUE);
    const char *name;
    CHECK_EQ(cuFuncGetName(&name, f), CUDA_SUCCESS);
    CHECK(strcmp(name, "axpy") == 0);
    CUdeviceptr x, y;
    float hx[8], hy[8];
    for (int i = 0; i < 8; i++) hx[i] = (float)i, hy[i] = 1.0f;
    CHECK_EQ(cuMemAlloc_v2(&x, sizeof hx), CUDA_SUCCESS);
    CHECK_EQ(cuMemAlloc_v2(&y, sizeof hy), CUDA_SUCCESS);
    CHECK_EQ(cuMemcpyHtoD_v2(x, hx, sizeof hx), CUDA_SUCCESS);
    CHECK_EQ(cuMemcpyHtoD_v2(y, hy, sizeof hy), CUDA_SUCCESS);
    float a = 2.0f;
    int cnt = 8;
    void *params[] = {&y, &x, &a, &cnt};
    CHECK_EQ(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS); /* y = 1 + 2x */
    /* packed `extra` form: y += 3 x */
    struct { CUdeviceptr y, x; float a; int n; } buf = {y, x, 3.0f, 8};
    size_t bufsize = sizeof buf;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &bufsize, CU_LAUNCH_PARAM_END};
    CHECK_EQ(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra), CUDA_SUCCESS);
    size_t small = 12;
    void *extra_short[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &small, CU_LAUNCH_PARAM_END};
    CHECK_EQ(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra_short), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, extra), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuLaunchKernel(f, 0, 1, 1, 32, 1, 1, 0, NULL, params, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    /* cuLaunchKernelEx: y += 1 x */
    a = 1.0f;
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = 64, cfg.blockDimY = cfg.blockDimZ = 1;
    CHECK_EQ(cuLaunchKernelEx(&cfg, f, params, NULL), CUDA_SUCCESS);
    CHECK_EQ(cuMemcpyDtoH_v2(hy, y, sizeof hy), CUDA_SUCCESS);
    for (int i = 0; i < 8; i++) CHECK(hy[i] == 1.0f + 6.0f * (float)i);
    CHECK_EQ(cuLaunchKernel((CUfunction)(void *)hy, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), CUDA_ERROR_INVALID_HANDLE);
    CHECK_EQ(cuMemFree_v2(x), CUDA_SUCCESS);
    CHECK_EQ(cuMemFree_v2(y), CUDA_SUCCESS);
    return 0;
}

/* fork without exec, with allocations live: the child keeps using simcuda
 * (the table lock is re-armed), and its table is its own copy */
static int case_fork(void)
{
    init();
    CUdeviceptr keep;
    CHECK_EQ(cuMemAlloc_v2(&keep, 4096), CUDA_SUCCESS);
    for (int k = 0; k < 3; k++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            CUdeviceptr p;
            for (int i = 0; i < 100; i++) {
                if (cuMemAlloc_v2(&p, 1024 + i) != CUDA_SUCCESS) _exit(2);
                if (cuMemFree_v2(p) != CUDA_SUCCESS) _exit(3);
            }
            if (cuMemFree_v2(keep) != CUDA_SUCCESS) _exit(4);
            _exit(0);
        }
        int st;
        CHECK_EQ(waitpid(pid, &st, 0), pid);
        CHECK(WIFEXITED(st));
        CHECK_EQ(WEXITSTATUS(st), 0);
    }
    CHECK_EQ(cuMemFree_v2(keep), CUDA_SUCCESS); /* the parent's table still has it */
    return 0;
}

static int case_misc(void)
{
    init();
    CUfunction f, g;
    CHECK_EQ(simcuRegisterKernel("axpy", axpy, 4, AXPY_OFF, AXPY_SIZE, &f), CUDA_SUCCESS);
    CUkernel k = (CUkernel)(void *)f; /* simcuda: CUkernel == CUfunction */
    size_t off, sz;
    const char *name;
    CHECK_EQ(cuKernelGetParamInfo(k, 2, &off, &sz), CUDA_SUCCESS);
    CHECK_EQ(off, 16);
    CHECK_EQ(sz, 4);
    CHECK_EQ(cuKernelGetParamInfo(k, 4, &off, &sz), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuKernelGetName(&name, k), CUDA_SUCCESS);
    CHECK(strcmp(name, "axpy") == 0);
    CHECK_EQ(cuKernelGetFunction(&g, k), CUDA_SUCCESS);
    CHECK(g == f);
    CUdeviceptr x, y;
    CHECK_EQ(cuMemAlloc_v2(&x, 64), CUDA_SUCCESS);
    CHECK_EQ(cuMemAlloc_v2(&y, 64), CUDA_SUCCESS);
    CHECK_EQ(cuMemsetD32_v2(x, 0x3f800000u, 16), CUDA_SUCCESS); /* 1.0f */
    CHECK_EQ(cuMemsetD8_v2(y, 0, 64), CUDA_SUCCESS);
    float a = 5.0f;
    int n = 16;
    void *params[] = {&y, &x, &a, &n};
    CHECK_EQ(cuLaunchCooperativeKernel(f, 1, 1, 1, 16, 1, 1, 0, NULL, params), CUDA_SUCCESS);
    CHECK_EQ(cuLaunchKernel_ptsz(f, 1, 1, 1, 16, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
    CHECK(((float *)(uintptr_t)y)[15] == 10.0f);
    int capturing = -1;
    CHECK_EQ(cuStreamIsCapturing(NULL, &capturing), CUDA_SUCCESS);
    CHECK_EQ(capturing, 0);
    CUgraph gr;
    CUgraphExec ex;
    CHECK_EQ(cuGraphCreate(&gr, 0), CUDA_SUCCESS);
    CHECK_EQ(cuGraphInstantiateWithFlags(&ex, gr, 0), CUDA_SUCCESS);
    CHECK_EQ(cuGraphLaunch(ex, NULL), CUDA_SUCCESS);
    CHECK_EQ(cuGraphExecDestroy(ex), CUDA_SUCCESS);
    CHECK_EQ(cuGraphDestroy(gr), CUDA_SUCCESS);
    _Alignas(128) unsigned long long tmap[16];
    cuuint64_t dims[2] = {4, 4}, strides[1] = {16};
    cuuint32_t box[2] = {4, 4}, estr[2] = {1, 1};
    CHECK_EQ(cuTensorMapEncodeTiled(tmap, 7, 2, (void *)(uintptr_t)x, dims, strides, box, estr, 0, 0, 0, 0),
             CUDA_SUCCESS);
    CHECK_EQ(tmap[1], x); /* the descriptor holds the global address */
    CHECK_EQ(cuTensorMapEncodeTiled(tmap, 7, 0, (void *)(uintptr_t)x, dims, strides, box, estr, 0, 0, 0, 0),
             CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr pp;
    size_t pitch;
    CHECK_EQ(cuMemAllocPitch_v2(&pp, &pitch, 1000, 3, 4), CUDA_SUCCESS);
    CHECK_EQ(pitch, 1024);
    CHECK_EQ(cuMemAllocPitch_v2(&pp, &pitch, 1000, 3, 3), CUDA_ERROR_INVALID_VALUE);
    void *h;
    CHECK_EQ(cuMemHostAlloc(&h, 100, 0), CUDA_SUCCESS);
    CHECK_EQ(cuMemFreeHost(h), CUDA_SUCCESS);
    CHECK_EQ(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    CHECK_EQ(cuMemFree_v2(x), CUDA_SUCCESS);
    CHECK_EQ(cuMemFree_v2(y), CUDA_SUCCESS);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct { const char *name; int (*fn)(void); } cases[] = {
        {"basics", case_basics}, {"oom", case_oom}, {"managed", case_managed},
        {"vmm", case_vmm}, {"launch", case_launch}, {"fork", case_fork}, {"misc", case_misc},
    };
    if (argc != 2) return 2;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[1], cases[i].name) == 0) {
            int r = cases[i].fn();
            if (r == 0) printf("ok %s\n", argv[1]);
            return r;
        }
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
