/*
 * gpuclock_workload.c — device work through every call path of the shim on simcuda's device clock, for
 * the device-clock tests (tests/integration/test_capture_gpuclock.py).  simcuda's SIMCUDA_DEVICE_LOG is
 * the ground truth of when each op ran; this program prints (JSON, last line) what it did.
 *
 *   gpuclock_workload paths N   N rounds of: a kernel through the runtime (PLT cudaLaunchKernel), through
 *                               the driver by dlsym (cuLaunchKernel) and by cuGetProcAddress
 *                               (cuLaunchKernelEx); cudaMemcpy H2D, cudaMemcpyAsync D2H, cudaMemsetAsync,
 *                               cuMemcpyDtoDAsync (dlsym), cuMemsetD8Async (cuGetProcAddress); two streams
 *   gpuclock_workload graph R   a graph captured on a stream (2 kernels, a memset) replayed R times, by
 *                               cuGraphLaunch (dlsym) and cudaGraphLaunch (PLT) in turn
 *   gpuclock_workload fork N    N launches, fork(): the child launches N and exits, the parent N more
 *   gpuclock_workload many N    N launches of a kernel that takes no device time (benchmark, drops)
 *   gpuclock_workload zero N    N rounds of: a kernel that takes no device time launched on a stream, then
 *                               at once a cudaMalloc of 1 MiB + round bytes (the device reaches the kernel
 *                               only after SIMCUDA_LAUNCH_LATENCY_NS: the allocation's call comes first)
 *   gpuclock_workload staticrt N LIB
 *                               N rounds through LIB (tests/c/staticrt_lib.c: a runtime of its own linked
 *                               in, as cuBLAS has — the shim sees only the driver calls inside its runtime
 *                               calls): a kernel by cuLaunchKernelEx, one by cuLaunchKernel, a memset and a
 *                               copy, each in a runtime call of its own; and a kernel by the PLT
 *                               cudaLaunchKernel; prints the launches and each kernel's duration
 *   gpuclock_workload nvcc13 N  N kernels launched as CUDA 13's nvcc makes <<<>>> launch them: the stub's
 *                               cudaKernel_t from __cudaGetKernel, then __cudaLaunchKernel (a 4 KiB buffer
 *                               as the argument); prints the launches and the buffer's address
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pi_cuda.h"
#include "simcuda.h"

cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t n);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t smem, cudaStream_t s);
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, int kind);
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, int kind, cudaStream_t st);
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaGraphLaunch(cudaGraphExec_t g, cudaStream_t s);

#define CHECK(x) do { int rc_ = (int)(x); if (rc_) { fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #x, rc_); exit(3); } } while (0)

typedef CUresult (*gpa2_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*launch_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
typedef CUresult (*launch_ex_t)(const CUlaunchConfig *, CUfunction, void **, void **);
typedef CUresult (*reg_t)(const char *, simcu_kernel_fn, unsigned, const size_t *, const size_t *, CUfunction *);
typedef CUresult (*dtod_t)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
typedef CUresult (*memset8_t)(CUdeviceptr, unsigned char, size_t, CUstream);
typedef CUresult (*begin_t)(CUstream, int);
typedef CUresult (*end_t)(CUstream, CUgraph *);
typedef CUresult (*inst_t)(CUgraphExec *, CUgraph, unsigned long long);
typedef CUresult (*glaunch_t)(CUgraphExec, CUstream);
typedef CUresult (*dur_t)(unsigned long long);
typedef CUresult (*sync_t)(CUstream);

static void k1(void **params) { (void)params; }
static const size_t off1[] = {0}, sz1[] = {8};
static char stub_rt;

static void *drv;
static gpa2_t gpa;
static launch_t launch;
static reg_t reg;
static dur_t next_dur;

static void *dsym(const char *n) {
    void *p = dlsym(drv, n);
    if (!p) { fprintf(stderr, "no %s\n", n); exit(3); }
    return p;
}

static void setup(void) {
    drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!drv) { fprintf(stderr, "dlopen libcuda: %s\n", dlerror()); exit(3); }
    ((CUresult (*)(unsigned))dsym("cuInit"))(0);
    gpa = (gpa2_t)dsym("cuGetProcAddress_v2");
    launch = (launch_t)dsym("cuLaunchKernel");
    reg = (reg_t)dsym("simcuRegisterKernel");
    next_dur = (dur_t)dsym("simcuSetNextLaunchDuration");
    CHECK(simcudaRegisterFunction(&stub_rt, "k_runtime", k1, 1, off1, sz1));
}

static int mode_paths(int n) {
    long kernels = 0, copies = 0, memsets = 0;
    CUdriverProcAddressQueryResult st;
    launch_ex_t launch_ex;
    memset8_t memset8;
    CHECK(gpa("cuLaunchKernelEx", (void **)&launch_ex, 12000, 0, &st));
    CHECK(gpa("cuMemsetD8Async", (void **)&memset8, 12000, 0, &st));
    dtod_t dtod = (dtod_t)dsym("cuMemcpyDtoDAsync_v2");
    CUfunction fd, fx;
    CHECK(reg("k_driver", k1, 1, off1, sz1, &fd));
    CHECK(reg("k_procaddr", k1, 1, off1, sz1, &fx));
    cudaStream_t s1;
    CHECK(cudaStreamCreate(&s1));
    void *a, *b, *h;
    CHECK(cudaMalloc(&a, 1 << 20));
    CHECK(cudaMalloc(&b, 1 << 20));
    CHECK(cudaMallocHost(&h, 1 << 20));
    dim3 g = {1, 1, 1}, bl = {32, 1, 1};
    void *args[1] = {&a};
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.hStream = (CUstream)s1;
    for (int i = 0; i < n; i++) {
        CHECK(next_dur(20000 + 1000 * (unsigned long long)i));
        CHECK(cudaLaunchKernel(&stub_rt, g, bl, args, 0, i % 2 ? s1 : 0)); kernels++;
        CHECK(next_dur(30000));
        CHECK(launch(fd, 1, 1, 1, 1, 1, 1, 0, (CUstream)s1, args, NULL)); kernels++;
        CHECK(next_dur(15000 + 500 * (unsigned long long)i));
        CHECK(launch_ex(&cfg, fx, args, NULL)); kernels++;
        CHECK(cudaMemcpy(a, h, 4096 + (size_t)i, cudaMemcpyHostToDevice)); copies++;
        CHECK(cudaMemcpyAsync(h, b, 65536, cudaMemcpyDeviceToHost, s1)); copies++;
        CHECK(cudaMemsetAsync(b, 1, 8192, s1)); memsets++;
        CHECK(dtod((CUdeviceptr)b, (CUdeviceptr)a, 2048, (CUstream)s1)); copies++;
        CHECK(memset8((CUdeviceptr)a, 3, 1024, 0)); memsets++;
    }
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaFreeHost(h));
    printf("{\"kernels\": %ld, \"copies\": %ld, \"memsets\": %ld}\n", kernels, copies, memsets);
    return 0;
}

static int mode_graph(int reps) {
    begin_t begin = (begin_t)dsym("cuStreamBeginCapture_v2");
    end_t end = (end_t)dsym("cuStreamEndCapture");
    inst_t inst = (inst_t)dsym("cuGraphInstantiateWithFlags");
    glaunch_t glaunch = (glaunch_t)dsym("cuGraphLaunch");
    CUfunction fa, fb;
    CHECK(reg("node_a", k1, 1, off1, sz1, &fa));
    CHECK(reg("node_b", k1, 1, off1, sz1, &fb));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    void *a;
    CHECK(cudaMalloc(&a, 1 << 20));
    void *args[1] = {&a};
    /* one launch before the capture: the device clock is set up outside it */
    CHECK(next_dur(10000));
    CHECK(launch(fa, 1, 1, 1, 1, 1, 1, 0, (CUstream)s, args, NULL));
    CHECK(begin((CUstream)s, 0));
    CHECK(next_dur(40000));
    CHECK(launch(fa, 1, 1, 1, 1, 1, 1, 0, (CUstream)s, args, NULL));
    CHECK(cudaMemsetAsync(a, 0, 4096, s));
    CHECK(next_dur(25000));
    CHECK(launch(fb, 1, 1, 1, 1, 1, 1, 0, (CUstream)s, args, NULL));
    CUgraph gr;
    CHECK(end((CUstream)s, &gr));
    CUgraphExec ex;
    CHECK(inst(&ex, gr, 0));
    for (int i = 0; i < reps; i++) {
        if (i % 2) CHECK(cudaGraphLaunch((cudaGraphExec_t)ex, s));
        else CHECK(glaunch(ex, (CUstream)s));
    }
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaFree(a));
    printf("{\"graph_launches\": %d, \"nodes\": 3, \"captured\": 3, \"launches_outside\": 1}\n", reps);
    return 0;
}

static void launches(CUfunction f, int n, void **args) {
    for (int i = 0; i < n; i++) {
        CHECK(next_dur(5000));
        CHECK(launch(f, 1, 1, 1, 1, 1, 1, 0, 0, args, NULL));
    }
    CHECK(cudaDeviceSynchronize());
}

static int mode_fork(int n) {
    CUfunction f;
    CHECK(reg("k_fork", k1, 1, off1, sz1, &f));
    void *a;
    CHECK(cudaMalloc(&a, 4096));
    void *args[1] = {&a};
    launches(f, n, args);
    fflush(stdout);
    pid_t c = fork();
    if (c == 0) {
        launches(f, n, args);
        printf("{\"child\": %d, \"launches\": %d}\n", (int)getpid(), n);
        fflush(stdout);
        exit(0);
    }
    int stt = 0;
    waitpid(c, &stt, 0);
    launches(f, n, args);
    printf("{\"parent\": %d, \"child\": %d, \"launches\": %d, \"child_status\": %d}\n", (int)getpid(), (int)c, 2 * n,
           stt);
    return 0;
}

static int mode_many(int n) {
    CUfunction f;
    CHECK(reg("k_many", k1, 1, off1, sz1, &f));
    void *a;
    CHECK(cudaMalloc(&a, 4096));
    void *args[1] = {&a};
    for (int i = 0; i < n; i++) CHECK(launch(f, 1, 1, 1, 1, 1, 1, 0, 0, args, NULL));
    CHECK(cudaDeviceSynchronize());
    printf("{\"launches\": %d}\n", n);
    return 0;
}

cudaError_t __cudaGetKernel(cudaKernel_t *k, const void *host);
cudaError_t __cudaLaunchKernel(cudaKernel_t k, dim3 g, dim3 b, void **args, size_t smem, cudaStream_t s);
static char stub_nvcc13;

static int mode_nvcc13(int n) {
    CHECK(simcudaRegisterFunction(&stub_nvcc13, "k_nvcc13", k1, 1, off1, sz1));
    cudaKernel_t k = NULL;
    CHECK(__cudaGetKernel(&k, &stub_nvcc13)); /* once per stub, as the generated code does */
    void *a;
    CHECK(cudaMalloc(&a, 4096));
    void *args[1] = {&a};
    dim3 one = {1, 1, 1};
    for (int i = 0; i < n; i++) CHECK(__cudaLaunchKernel(k, one, one, args, 0, 0));
    CHECK(cudaDeviceSynchronize());
    printf("{\"launches\": %d, \"buffer\": %llu}\n", n, (unsigned long long)(uintptr_t)a);
    return 0;
}

static int mode_zero(int n) {
    CUfunction f;
    CHECK(reg("k_zero", k1, 1, off1, sz1, &f));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    void *a;
    CHECK(cudaMalloc(&a, 4096));
    void *args[1] = {&a};
    for (int i = 0; i < n; i++) {
        void *b;
        CHECK(launch(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
        CHECK(cudaMalloc(&b, (1u << 20) + (size_t)i));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaFree(b));
    }
    CHECK(cudaFree(a));
    printf("{\"rounds\": %d, \"first_size\": %u}\n", n, 1u << 20);
    return 0;
}

typedef int (*srt_init_t)(void);
typedef int (*srt_gemm_t)(CUstream, unsigned long long, int);
typedef int (*srt_fill_t)(CUstream, CUdeviceptr, size_t);
typedef int (*srt_copy_t)(CUstream, CUdeviceptr, CUdeviceptr, size_t);

static int mode_staticrt(int n, const char *lib) {
    void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!h) { fprintf(stderr, "dlopen %s: %s\n", lib ? lib : "(none)", dlerror()); return 3; }
    srt_init_t init = (srt_init_t)dlsym(h, "staticrt_init");
    srt_gemm_t gemm = (srt_gemm_t)dlsym(h, "staticrt_gemm");
    srt_fill_t fill = (srt_fill_t)dlsym(h, "staticrt_fill");
    srt_copy_t copy = (srt_copy_t)dlsym(h, "staticrt_copy");
    if (!init || !gemm || !fill || !copy || !init()) { fprintf(stderr, "staticrt_init failed\n"); return 3; }
    cudaStream_t s1;
    CHECK(cudaStreamCreate(&s1));
    void *a, *b;
    CHECK(cudaMalloc(&a, 1 << 20));
    CHECK(cudaMalloc(&b, 1 << 20));
    dim3 g = {1, 1, 1}, bl = {32, 1, 1};
    void *args[1] = {&a};
    long kernels = 0, copies = 0, memsets = 0;
    char ex[8192] = "", plain[8192] = "";
    size_t nex = 0, npl = 0;
    for (int i = 0; i < n; i++) {
        unsigned long long d_ex = 20000 + 100 * (unsigned long long)i, d_pl = 35000 + 50 * (unsigned long long)i;
        CHECK(gemm((CUstream)s1, d_ex, 1)); kernels++;
        nex += (size_t)snprintf(ex + nex, sizeof ex - nex, "%s%llu", i ? ", " : "", d_ex);
        CHECK(gemm((CUstream)s1, d_pl, 0)); kernels++;
        npl += (size_t)snprintf(plain + npl, sizeof plain - npl, "%s%llu", i ? ", " : "", d_pl);
        CHECK(fill((CUstream)s1, (CUdeviceptr)a, 4096)); memsets++;
        CHECK(copy((CUstream)s1, (CUdeviceptr)b, (CUdeviceptr)a, 2048)); copies++;
        CHECK(next_dur(10000));
        CHECK(cudaLaunchKernel(&stub_rt, g, bl, args, 0, s1)); kernels++;
    }
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    printf("{\"kernels\": %ld, \"copies\": %ld, \"memsets\": %ld, \"staticrt_gemm_ex\": [%s], "
           "\"staticrt_gemm\": [%s], \"k_runtime\": %d}\n", kernels, copies, memsets, ex, plain, n);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: gpuclock_workload paths|graph|fork|many|zero|staticrt N [LIB]\n");
        return 2;
    }
    int n = argc > 2 ? atoi(argv[2]) : 4;
    setup();
    if (!strcmp(argv[1], "paths")) return mode_paths(n);
    if (!strcmp(argv[1], "graph")) return mode_graph(n);
    if (!strcmp(argv[1], "fork")) return mode_fork(n);
    if (!strcmp(argv[1], "many")) return mode_many(n);
    if (!strcmp(argv[1], "zero")) return mode_zero(n);
    if (!strcmp(argv[1], "nvcc13")) return mode_nvcc13(n);
    if (!strcmp(argv[1], "staticrt")) return mode_staticrt(n, argc > 3 ? argv[3] : NULL);
    fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
}
