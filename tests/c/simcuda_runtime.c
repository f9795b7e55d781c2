/* simcuda_runtime.c — the runtime API through the PLT (linked against
 * libcudart.so.13 only; the runtime finds libcuda.so.1 itself). Prints "ok". */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pi_cuda.h"
#include "simcuda.h"

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); exit(1); } } while (0)
#define CHECK_EQ(a, b) do { long long a_ = (long long)(a), b_ = (long long)(b); if (a_ != b_) { \
    fprintf(stderr, "%s:%d: %s = %lld, expected %lld\n", __FILE__, __LINE__, #a, a_, b_); exit(1); } } while (0)

cudaError_t cudaMalloc(void **, size_t);
cudaError_t cudaFree(void *);
cudaError_t cudaMallocAsync(void **, size_t, cudaStream_t);
cudaError_t cudaFreeAsync(void *, cudaStream_t);
cudaError_t cudaMallocAsync_ptsz(void **, size_t, cudaStream_t);
cudaError_t cudaFreeAsync_ptsz(void *, cudaStream_t);
cudaError_t cudaMallocFromPoolAsync(void **, size_t, cudaMemPool_t, cudaStream_t);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *, int);
cudaError_t cudaMallocManaged(void **, size_t, unsigned int);
cudaError_t cudaMallocHost(void **, size_t);
cudaError_t cudaFreeHost(void *);
cudaError_t cudaMallocPitch(void **, size_t *, size_t, size_t);
cudaError_t cudaMemAdvise(const void *, size_t, int, cudaMemLocation);
cudaError_t cudaMemPrefetchAsync(const void *, size_t, cudaMemLocation, unsigned int, cudaStream_t);
cudaError_t cudaMemcpy(void *, const void *, size_t, int);
cudaError_t cudaMemcpyAsync(void *, const void *, size_t, int, cudaStream_t);
cudaError_t cudaMemset(void *, int, size_t);
cudaError_t cudaMemsetAsync(void *, int, size_t, cudaStream_t);
cudaError_t cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t cudaLaunchKernel_ptsz(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *, const void *, void **);
cudaError_t cudaFuncGetParamInfo(const void *, size_t, size_t *, size_t *);
cudaError_t cudaFuncGetName(const char **, const void *);
cudaError_t cudaGetDeviceCount(int *);
cudaError_t cudaSetDevice(int);
cudaError_t cudaGetDevice(int *);
cudaError_t cudaStreamCreate(cudaStream_t *);
cudaError_t cudaStreamDestroy(cudaStream_t);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMemGetInfo(size_t *, size_t *);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorName(cudaError_t);
cudaError_t cudaRuntimeGetVersion(int *);
cudaError_t cudaDriverGetVersion(int *);
cudaError_t cudaGetDriverEntryPoint(const char *, void **, unsigned long long, cudaDriverEntryPointQueryResult *);
cudaError_t cudaGetDriverEntryPointByVersion(const char *, void **, unsigned int, unsigned long long,
                                             cudaDriverEntryPointQueryResult *);
cudaError_t cudaEventCreate(cudaEvent_t *);
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t);
cudaError_t cudaEventSynchronize(cudaEvent_t);
cudaError_t cudaEventElapsedTime(float *, cudaEvent_t, cudaEvent_t);
cudaError_t cudaEventDestroy(cudaEvent_t);

/* scale(float *v, float k, int n) */
static void scale(void **p)
{
    float *v = *(float **)p[0];
    float k = *(float *)p[1];
    int n = *(int *)p[2];
    for (int i = 0; i < n; i++) v[i] *= k;
}
static void scale_stub(void) {} /* the host stub: any unique address */
static const size_t SC_OFF[] = {0, 8, 12}, SC_SIZE[] = {8, 4, 4};

int main(void)
{
    int v, n, dev;
    CHECK_EQ(cudaRuntimeGetVersion(&v), cudaSuccess);
    CHECK_EQ(v, 13000);
    CHECK_EQ(cudaDriverGetVersion(&v), cudaSuccess);
    CHECK_EQ(v, 13000);
    CHECK_EQ(cudaGetDeviceCount(&n), cudaSuccess);
    CHECK_EQ(n, 2); /* SIMCUDA_DEVICES=2 */
    CHECK_EQ(cudaSetDevice(5), 101);
    CHECK_EQ(cudaGetLastError(), 101);
    CHECK_EQ(cudaGetLastError(), cudaSuccess);
    CHECK_EQ(cudaSetDevice(1), cudaSuccess);
    CHECK_EQ(cudaGetDevice(&dev), cudaSuccess);
    CHECK_EQ(dev, 1);
    CHECK_EQ(cudaSetDevice(0), cudaSuccess);

    /* allocations of every kind; capacity 1 MiB (SIMCUDA_MEMORY_BYTES) */
    void *a, *b, *m, *h, *pp;
    size_t pitch, freeb, total;
    CHECK_EQ(cudaMalloc(&a, 512 << 10), cudaSuccess);
    CHECK_EQ(cudaMalloc(&b, 600 << 10), cudaErrorMemoryAllocation);
    CHECK_EQ(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
    CHECK_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
    CHECK(strcmp(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation") == 0);
    CHECK_EQ(cudaMemGetInfo(&freeb, &total), cudaSuccess);
    CHECK_EQ(total, 1 << 20);
    CHECK_EQ(freeb, 512 << 10);
    cudaStream_t s;
    cudaMemPool_t pool;
    CHECK_EQ(cudaStreamCreate(&s), cudaSuccess);
    CHECK_EQ(cudaMallocAsync(&b, 1000, s), cudaSuccess);
    CHECK_EQ(cudaFreeAsync(b, s), cudaSuccess);
    CHECK_EQ(cudaMallocAsync_ptsz(&b, 1000, s), cudaSuccess);
    CHECK_EQ(cudaFreeAsync_ptsz(b, s), cudaSuccess);
    CHECK_EQ(cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
    CHECK_EQ(cudaMallocFromPoolAsync(&b, 4096, pool, s), cudaSuccess);
    CHECK_EQ(cudaMallocPitch(&pp, &pitch, 100, 10), cudaSuccess);
    CHECK_EQ(pitch, 512);
    CHECK_EQ(cudaMallocManaged(&m, 8192, 1), cudaSuccess);
    CHECK_EQ(cudaMallocHost(&h, 4096), cudaSuccess);
    cudaMemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    CHECK_EQ(cudaMemAdvise(m, 8192, 1, loc), cudaSuccess);
    CHECK_EQ(cudaMemPrefetchAsync(m, 8192, loc, 0, s), cudaSuccess);
    CHECK_EQ(cudaMemPrefetchAsync(a, 8192, loc, 0, s), cudaErrorInvalidValue); /* not managed */
    cudaGetLastError();

    /* copies and memsets */
    float host[16];
    for (int i = 0; i < 16; i++) host[i] = (float)i;
    CHECK_EQ(cudaMemcpy(a, host, sizeof host, cudaMemcpyHostToDevice), cudaSuccess);
    CHECK_EQ(cudaMemcpyAsync(b, a, sizeof host, cudaMemcpyDeviceToDevice, s), cudaSuccess);
    CHECK_EQ(cudaMemset(h, 0, 64), cudaSuccess);
    CHECK_EQ(cudaMemsetAsync(pp, 7, 16, s), cudaSuccess);
    CHECK_EQ(((unsigned char *)pp)[15], 7);

    /* kernels: registered host stubs, launched through cudaLaunchKernel */
    CHECK_EQ(cudaLaunchKernel((const void *)scale_stub, (dim3){1, 1, 1}, (dim3){32, 1, 1}, NULL, 0, s),
             cudaErrorInvalidDeviceFunction);
    cudaGetLastError();
    CHECK_EQ(simcudaRegisterFunction((const void *)scale_stub, "scale", scale, 3, SC_OFF, SC_SIZE), cudaSuccess);
    size_t k = 0, off, sz;
    while (cudaFuncGetParamInfo((const void *)scale_stub, k, &off, &sz) == cudaSuccess) k++;
    CHECK_EQ(k, 3);
    cudaGetLastError();
    const char *name;
    CHECK_EQ(cudaFuncGetName(&name, (const void *)scale_stub), cudaSuccess);
    CHECK(strcmp(name, "scale") == 0);
    float factor = 2.0f;
    int cnt = 16;
    void *args[] = {&b, &factor, &cnt};
    CHECK_EQ(cudaLaunchKernel((const void *)scale_stub, (dim3){1, 1, 1}, (dim3){32, 1, 1}, args, 0, s), cudaSuccess);
    CHECK_EQ(cudaLaunchKernel_ptsz((const void *)scale_stub, (dim3){1, 1, 1}, (dim3){32, 1, 1}, args, 0, s),
             cudaSuccess);
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = (dim3){1, 1, 1};
    cfg.blockDim = (dim3){32, 1, 1};
    cfg.stream = s;
    CHECK_EQ(cudaLaunchKernelExC(&cfg, (const void *)scale_stub, args), cudaSuccess);
    CHECK_EQ(cudaStreamSynchronize(s), cudaSuccess);
    CHECK_EQ(cudaMemcpy(host, b, sizeof host, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < 16; i++) CHECK(host[i] == 8.0f * (float)i);

    /* driver entry points come from the driver's cuGetProcAddress_v2 (an
     * interposer in the way, SIMCUDA_SPY=1, hands out its own pointers) */
    int spy = getenv("SIMCUDA_SPY") != NULL;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(lib != NULL); /* the runtime loaded it */
    void *fn = NULL;
    cudaDriverEntryPointQueryResult st;
    CHECK_EQ(cudaGetDriverEntryPoint("cuMemAlloc", &fn, cudaEnableDefault, &st), cudaSuccess);
    CHECK_EQ(st, cudaDriverEntryPointSuccess);
    CHECK(spy || fn == dlsym(lib, "cuMemAlloc_v2"));
    CHECK_EQ(cudaGetDriverEntryPointByVersion("cuMemAdvise", &fn, 12000, cudaEnableDefault, &st), cudaSuccess);
    CHECK(spy || fn == dlsym(lib, "cuMemAdvise"));
    CHECK_EQ(cudaGetDriverEntryPoint("cuLaunchKernel", &fn, cudaEnablePerThreadDefaultStream, &st), cudaSuccess);
    CHECK(spy || fn == dlsym(lib, "cuLaunchKernel_ptsz"));
    CHECK_EQ(cudaGetDriverEntryPoint("cuNoSuchThing", &fn, cudaEnableDefault, &st), cudaSuccess);
    CHECK_EQ(st, cudaDriverEntryPointSymbolNotFound);
    CHECK(fn == NULL);

    cudaEvent_t e0, e1;
    float ms;
    CHECK_EQ(cudaEventCreate(&e0), cudaSuccess);
    CHECK_EQ(cudaEventCreate(&e1), cudaSuccess);
    CHECK_EQ(cudaEventRecord(e0, s), cudaSuccess);
    CHECK_EQ(cudaEventRecord(e1, s), cudaSuccess);
    CHECK_EQ(cudaEventSynchronize(e1), cudaSuccess);
    CHECK_EQ(cudaEventElapsedTime(&ms, e0, e1), cudaSuccess);
    CHECK_EQ(cudaEventDestroy(e0), cudaSuccess);
    CHECK_EQ(cudaEventDestroy(e1), cudaSuccess);

    CHECK_EQ(cudaFree(a), cudaSuccess);
    CHECK_EQ(cudaFree(a), cudaErrorInvalidValue);
    cudaGetLastError();
    CHECK_EQ(cudaFreeAsync(b, s), cudaSuccess);
    CHECK_EQ(cudaFree(pp), cudaSuccess);
    CHECK_EQ(cudaFree(m), cudaSuccess);
    CHECK_EQ(cudaFreeHost(h), cudaSuccess);
    CHECK_EQ(cudaFree(NULL), cudaSuccess);
    CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
    CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
    CHECK_EQ(cudaMemGetInfo(&freeb, &total), cudaSuccess);
    CHECK_EQ(freeb, total);
    printf("ok runtime\n");
    return 0;
}
