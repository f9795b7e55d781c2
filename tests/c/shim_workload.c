/*
 * shim_workload.c — drives every hooked call path of the preload shim on
 * simcuda and prints, as JSON on stdout, exactly what it did (the ground truth
 * the tests compare the trace against).
 *
 *   shim_workload MODE [N] [THREADS]
 *     all      every hook once or more, through PLT, dlsym and cuGetProcAddress
 *     stress   THREADS threads x N cudaMalloc/cudaFree pairs + N launches each
 *     fork     the parent and a fork()ed child (no exec) each allocate N blocks
 *     sleep    allocate N blocks, print, then sleep (to be killed)
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pi_cuda.h"
#include "simcuda.h"

/* runtime, linked (PLT) */
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s);
cudaError_t cudaFreeAsync(void *p, cudaStream_t s);
cudaError_t cudaMallocManaged(void **p, size_t n, unsigned flags);
cudaError_t cudaMallocPitch(void **p, size_t *pitch, size_t w, size_t h);
cudaError_t cudaMallocHost(void **p, size_t n);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemAdvise(const void *p, size_t n, int advice, cudaMemLocation loc);
cudaError_t cudaMemPrefetchAsync(const void *p, size_t n, cudaMemLocation loc, unsigned flags, cudaStream_t s);
cudaError_t cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t smem, cudaStream_t s);
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, int kind);
cudaError_t cudaMemset(void *d, int v, size_t n);
cudaError_t cudaGetDriverEntryPoint(const char *sym, void **fn, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult *st);
cudaError_t cudaDeviceSynchronize(void);

static void k3(void **params) { /* touches its three pointer args */
    for (int i = 0; i < 3; i++) {
        char *p = *(char **)params[i];
        if (p) p[0] = (char)i;
    }
}
static void kstruct(void **params) { (void)params; }

static const size_t off3[] = {0, 8, 16, 24}, sz3[] = {8, 8, 8, 4};
static char stub3, stub4;

typedef CUresult (*gpa2_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*alloc_t)(CUdeviceptr *, size_t);
typedef CUresult (*free_t)(CUdeviceptr);
typedef CUresult (*launch_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
typedef CUresult (*reg_t)(const char *, simcu_kernel_fn, unsigned, const size_t *, const size_t *, CUfunction *);
typedef CUresult (*pool_alloc_t)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef CUresult (*free_async_t)(CUdeviceptr, CUstream);
typedef CUresult (*pool_t)(CUmemoryPool *, CUdevice);
typedef CUresult (*advise_v2_t)(CUdeviceptr, size_t, int, CUmemLocation);
typedef CUresult (*managed_t)(CUdeviceptr *, size_t, unsigned);
typedef CUresult (*reserve_t)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*addrfree_t)(CUdeviceptr, size_t);
typedef CUresult (*create_t)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
typedef CUresult (*release_t)(CUmemGenericAllocationHandle);
typedef CUresult (*map_t)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*unmap_t)(CUdeviceptr, size_t);
typedef CUresult (*exptab_t)(const void **, const void *);
typedef CUresult (*init_t)(unsigned);
typedef CUresult (*launch_ex_t)(const CUlaunchConfig *, CUfunction, void **, void **);

#define CHECK(x) do { int rc_ = (int)(x); if (rc_) { fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #x, rc_); exit(3); } } while (0)

static int mode_all(void) {
    long allocs = 0, frees = 0, launches = 0, accesses = 0, failures = 0, copies = 0, memsets = 0, hints = 0;
    /* --- PLT: runtime --- */
    CHECK(simcudaRegisterFunction(&stub3, "k3_runtime", k3, 3, off3, sz3));
    void *a, *b, *c, *m, *h, *pp;
    size_t pitch;
    CHECK(cudaMalloc(&a, 1000)); allocs++;
    CHECK(cudaMallocAsync(&b, 3 << 20, 0)); allocs++;
    CHECK(cudaMallocManaged(&m, 1 << 20, 1)); allocs++;
    CHECK(cudaMallocPitch(&pp, &pitch, 100, 10)); allocs++;
    CHECK(cudaMallocHost(&h, 4096)); allocs++;
    /* interior pointer + base pointer + a non-pointer word */
    char *interior = (char *)b + 12345;
    void *args[3] = {&a, &interior, &m};
    dim3 g = {1, 1, 1}, bl = {32, 1, 1};
    CHECK(cudaLaunchKernel(&stub3, g, bl, args, 0, 0)); launches++; accesses += 3;
    CHECK(cudaMemcpy(a, h, 100, 1)); copies++; accesses += 2; /* h is pinned host: a block too */
    CHECK(cudaMemset(b, 0, 64)); memsets++; accesses += 1;
    cudaMemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    CHECK(cudaMemAdvise(m, 4096, 1, loc)); hints++;
    CHECK(cudaMemPrefetchAsync(m, 4096, loc, 0, 0)); hints++;
    /* a failed allocation: over simcuda's capacity */
    void *huge = NULL;
    if (cudaMalloc(&huge, (size_t)1 << 50) != 0) failures++;
    CHECK(cudaFree(a)); frees++;
    CHECK(cudaFreeAsync(b, 0)); frees++;
    CHECK(cudaFree(m)); frees++;
    CHECK(cudaFree(pp)); frees++;
    CHECK(cudaFreeHost(h)); frees++;

    /* --- dlopen + dlsym: driver --- */
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!drv) { fprintf(stderr, "dlopen libcuda: %s\n", dlerror()); return 3; }
    ((init_t)dlsym(drv, "cuInit"))(0);
    alloc_t alloc = (alloc_t)dlsym(drv, "cuMemAlloc_v2");
    free_t dfree = (free_t)dlsym(drv, "cuMemFree_v2");
    launch_t launch = (launch_t)dlsym(drv, "cuLaunchKernel");
    reg_t reg = (reg_t)dlsym(drv, "simcuRegisterKernel");
    CUfunction f3, f4;
    static const size_t off4[] = {0, 8}, sz4[] = {8, 24}; /* a pointer, then a struct holding 2 pointers */
    CHECK(reg("k3_driver", k3, 3, off3, sz3, &f3));
    CHECK(reg("kstruct", kstruct, 2, off4, sz4, &f4));
    CUdeviceptr d1, d2, d3;
    CHECK(alloc(&d1, 512)); allocs++;
    CHECK(alloc(&d2, 2048)); allocs++;
    CHECK(alloc(&d3, 4096)); allocs++;
    void *kp[3] = {&d1, &d2, &d3};
    CHECK(launch(f3, 1, 1, 1, 1, 1, 1, 0, 0, kp, NULL)); launches++; accesses += 3;
    /* packed `extra` form: {ptr d1, struct {int x; ptr d2 + 8; ptr d3}} */
    struct { uint64_t p; uint64_t x; uint64_t q; uint64_t r; } buf = {d1, 7, d2 + 8, d3};
    size_t bufsize = sizeof buf;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &bufsize, CU_LAUNCH_PARAM_END};
    CHECK(launch(f4, 1, 1, 1, 1, 1, 1, 0, 0, NULL, extra)); launches++; accesses += 3;
    /* the same block twice in one launch counts once */
    void *kp2[3] = {&d1, &d1, &d2};
    CHECK(launch(f3, 1, 1, 1, 1, 1, 1, 0, 0, kp2, NULL)); launches++; accesses += 2;

    /* --- cuGetProcAddress_v2 (via dlsym) --- */
    gpa2_t gpa = (gpa2_t)dlsym(drv, "cuGetProcAddress_v2");
    CUdriverProcAddressQueryResult st;
    pool_alloc_t palloc;
    free_async_t pfree;
    pool_t getpool;
    advise_v2_t adv2;
    managed_t managed;
    launch_ex_t launch_ex;
    CHECK(gpa("cuMemAllocFromPoolAsync", (void **)&palloc, 12000, 0, &st));
    CHECK(gpa("cuMemFreeAsync", (void **)&pfree, 12000, 2 /* per-thread */, &st));
    CHECK(gpa("cuDeviceGetDefaultMemPool", (void **)&getpool, 12000, 0, &st));
    CHECK(gpa("cuMemAdvise", (void **)&adv2, 12080, 0, &st));
    CHECK(gpa("cuMemAllocManaged", (void **)&managed, 12000, 0, &st));
    CHECK(gpa("cuLaunchKernelEx", (void **)&launch_ex, 12000, 0, &st));
    CUmemoryPool pool;
    CHECK(getpool(&pool, 0));
    CUdeviceptr pa, mm;
    CHECK(palloc(&pa, 8192, pool, 0)); allocs++;
    CHECK(managed(&mm, 65536, 1)); allocs++;
    CUmemLocation l2 = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    CHECK(adv2(mm, 4096, 3, l2)); hints++;
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
    void *kp3[3] = {&pa, &mm, &d3};
    CHECK(launch_ex(&cfg, f3, kp3, NULL)); launches++; accesses += 3;
    CHECK(pfree(pa, 0)); frees++;
    CHECK(dfree(mm)); frees++;
    /* cuGetExportTable passes through untouched: same pointer as the driver's */
    void *et = NULL;
    CHECK(gpa("cuGetExportTable", &et, 12000, 0, &st));
    int exptab_same = et == dlsym(drv, "cuGetExportTable");

    /* --- VMM --- */
    reserve_t reserve; addrfree_t afree; create_t create; release_t release; map_t map; unmap_t unmap;
    CHECK(gpa("cuMemAddressReserve", (void **)&reserve, 12000, 0, &st));
    CHECK(gpa("cuMemAddressFree", (void **)&afree, 12000, 0, &st));
    CHECK(gpa("cuMemCreate", (void **)&create, 12000, 0, &st));
    CHECK(gpa("cuMemRelease", (void **)&release, 12000, 0, &st));
    CHECK(gpa("cuMemMap", (void **)&map, 12000, 0, &st));
    CHECK(gpa("cuMemUnmap", (void **)&unmap, 12000, 0, &st));
    CUdeviceptr va;
    CUmemGenericAllocationHandle hdl;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CHECK(reserve(&va, 4 << 20, 0, 0, 0)); allocs++;
    CHECK(create(&hdl, 2 << 20, &prop, 0)); allocs++;
    CHECK(map(va, 2 << 20, 0, hdl, 0)); allocs++;
    void *kp4[3] = {&va, &d1, &d2};
    CHECK(launch(f3, 1, 1, 1, 1, 1, 1, 0, 0, kp4, NULL)); launches++; accesses += 3;
    CHECK(unmap(va, 2 << 20)); frees++;
    CHECK(release(hdl)); frees++;
    CHECK(afree(va, 4 << 20)); frees++;

    /* --- cudaGetDriverEntryPoint --- */
    alloc_t alloc2 = NULL;
    cudaDriverEntryPointQueryResult dst;
    CHECK(cudaGetDriverEntryPoint("cuMemAlloc", (void **)&alloc2, 0, &dst));
    CUdeviceptr d4;
    CHECK(alloc2(&d4, 777)); allocs++;
    CHECK(dfree(d4)); frees++;
    CHECK(dfree(d1)); frees++;
    CHECK(dfree(d2)); frees++;
    CHECK(dfree(d3)); frees++;
    cudaDeviceSynchronize();
    printf("{\"allocs\": %ld, \"frees\": %ld, \"launches\": %ld, \"accesses\": %ld, \"failures\": %ld, "
           "\"copies\": %ld, \"memsets\": %ld, \"hints\": %ld, \"export_table_untouched\": %d, "
           "\"managed_bytes\": %d}\n",
           allocs, frees, launches, accesses, failures, copies, memsets, hints, exptab_same, (1 << 20) + 65536);
    return 0;
}

static long g_n;
static void *stress_thread(void *arg) {
    (void)arg;
    void *x, *y;
    CHECK(cudaMalloc(&y, 4096));
    for (long i = 0; i < g_n; i++) {
        CHECK(cudaMalloc(&x, 256 + (i & 1023)));
        void *args[3] = {&x, &y, &x};
        dim3 g = {1, 1, 1};
        if ((i & 7) == 0) CHECK(cudaLaunchKernel(&stub3, g, g, args, 0, 0));
        CHECK(cudaFree(x));
    }
    CHECK(cudaFree(y));
    return NULL;
}

static int mode_stress(long n, int threads) {
    CHECK(simcudaRegisterFunction(&stub3, "k3_stress", k3, 3, off3, sz3));
    pthread_t t[64];
    g_n = n;
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, stress_thread, NULL);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    long per = n + 1, launches = (n + 7) / 8;
    printf("{\"allocs\": %ld, \"frees\": %ld, \"launches\": %ld, \"accesses\": %ld}\n", per * threads,
           per * threads, launches * threads, 2 * launches * threads);
    return 0;
}

static int mode_fork(long n) {
    void *keep;
    CHECK(cudaMalloc(&keep, 100)); /* parent only */
    fflush(stdout);
    pid_t pid = fork();
    void *p;
    for (long i = 0; i < n; i++) {
        CHECK(cudaMalloc(&p, 64 + i));
        CHECK(cudaFree(p));
    }
    if (pid == 0) _exit(0);
    int st;
    waitpid(pid, &st, 0);
    CHECK(cudaFree(keep));
    printf("{\"child\": %d, \"parent\": %d, \"parent_allocs\": %ld, \"child_allocs\": %ld}\n", (int)pid,
           (int)getpid(), n + 1, n);
    return 0;
}

static int mode_sleep(long n) {
    void *p;
    for (long i = 0; i < n; i++) CHECK(cudaMalloc(&p, 1024));
    printf("{\"allocs\": %ld, \"pid\": %d}\n", n, (int)getpid());
    fflush(stdout);
    for (;;) pause();
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "all";
    long n = argc > 2 ? atol(argv[2]) : 1000;
    int threads = argc > 3 ? atoi(argv[3]) : 8;
    (void)stub4;
    if (!strcmp(mode, "all")) return mode_all();
    if (!strcmp(mode, "stress")) return mode_stress(n, threads);
    if (!strcmp(mode, "fork")) return mode_fork(n);
    if (!strcmp(mode, "sleep")) return mode_sleep(n);
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
