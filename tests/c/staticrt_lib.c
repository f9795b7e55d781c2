/*
 * staticrt_lib.c — a library with a CUDA runtime of its own linked in, as cuBLAS/cuBLASLt carry a static
 * cudart: it has no NEEDED on libcudart, finds the driver the way a runtime does (dlopen libcuda.so.1,
 * dlsym cuGetProcAddress_v2, every driver function through it — so the shim hands it its driver hooks),
 * and tells the driver where each of its runtime calls begins and ends through the driver's private
 * table (cuGetExportTable, SIMCU_RT_TRACE_UUID: simcu_hook.h), so CUPTI traces them as RUNTIME calls.
 * Its runtime calls are not exported names the shim could interpose: only the driver calls made inside
 * them reach the shim.  That is the real-GPU case the device clock failed on (cuBLAS's cuLaunchKernelEx
 * launches, 0 of 1140 joined; PyTorch's launches recorded under cuLaunchKernel): a kernel record carries
 * the runtime call's correlation id, the shim's external id names the driver call's.
 *
 *   staticrt_init()                         1 on success
 *   staticrt_gemm(stream, ns, use_ex)       one "runtime call": a kernel (staticrt_gemm_ex by
 *                                           cuLaunchKernelEx, staticrt_gemm by cuLaunchKernel) taking ns
 *   staticrt_fill(stream, ptr, bytes)       one "runtime call": cuMemsetD8Async
 *   staticrt_copy(stream, dst, src, bytes)  one "runtime call": cuMemcpyDtoDAsync_v2
 * Each returns the CUresult (0).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "pi_cuda.h"
#include "simcu_hook.h"
#include "simcuda.h"

typedef CUresult (*gpa2_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*launch_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
typedef CUresult (*launch_ex_t)(const CUlaunchConfig *, CUfunction, void **, void **);
typedef CUresult (*reg_t)(const char *, simcu_kernel_fn, unsigned, const size_t *, const size_t *, CUfunction *);
typedef CUresult (*dur_t)(CUfunction, unsigned long long);
typedef CUresult (*memset8_t)(CUdeviceptr, unsigned char, size_t, CUstream);
typedef CUresult (*dtod_t)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
typedef struct { char bytes[16]; } uuid_t16;
typedef CUresult (*export_table_t)(const void **, const uuid_t16 *);

static launch_t g_launch;
static launch_ex_t g_launch_ex;
static memset8_t g_memset8;
static dtod_t g_dtod;
static dur_t g_dur;
static const struct simcu_rt_trace *g_trace;
static CUfunction g_gemm, g_gemm_ex;

static void gemm_body(void **params) { (void)params; }
static const size_t off1[] = {0}, sz1[] = {8};

static int get(gpa2_t gpa, const char *name, void **fn) {
    CUdriverProcAddressQueryResult st;
    return gpa(name, fn, 13000, 0, &st) == CUDA_SUCCESS && *fn;
}

int staticrt_init(void) {
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!drv) return 0;
    gpa2_t gpa = (gpa2_t)dlsym(drv, "cuGetProcAddress_v2");
    reg_t reg = (reg_t)dlsym(drv, "simcuRegisterKernel");
    g_dur = (dur_t)dlsym(drv, "simcuSetKernelDuration");
    if (!gpa || !reg || !g_dur) return 0;
    export_table_t table = NULL;
    if (!get(gpa, "cuLaunchKernel", (void **)&g_launch) || !get(gpa, "cuLaunchKernelEx", (void **)&g_launch_ex) ||
        !get(gpa, "cuMemsetD8Async", (void **)&g_memset8) || !get(gpa, "cuMemcpyDtoDAsync", (void **)&g_dtod) ||
        !get(gpa, "cuGetExportTable", (void **)&table))
        return 0;
    uuid_t16 id;
    memcpy(id.bytes, SIMCU_RT_TRACE_UUID, 16);
    const void *t = NULL;
    if (table(&t, &id) != CUDA_SUCCESS || !t) return 0;
    g_trace = t;
    return reg("staticrt_gemm", gemm_body, 1, off1, sz1, &g_gemm) == CUDA_SUCCESS &&
           reg("staticrt_gemm_ex", gemm_body, 1, off1, sz1, &g_gemm_ex) == CUDA_SUCCESS;
}

int staticrt_gemm(CUstream s, unsigned long long ns, int use_ex) {
    static void *arg;
    void *args[1] = {&arg};
    g_trace->enter();
    CUresult r = g_dur(use_ex ? g_gemm_ex : g_gemm, ns);
    if (r == CUDA_SUCCESS && use_ex) {
        CUlaunchConfig cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
        cfg.blockDimX = 128, cfg.blockDimY = cfg.blockDimZ = 1;
        cfg.hStream = s;
        r = g_launch_ex(&cfg, g_gemm_ex, args, NULL);
    } else if (r == CUDA_SUCCESS) {
        r = g_launch(g_gemm, 2, 1, 1, 64, 1, 1, 0, s, args, NULL);
    }
    g_trace->leave();
    return (int)r;
}

int staticrt_fill(CUstream s, CUdeviceptr p, size_t bytes) {
    g_trace->enter();
    CUresult r = g_memset8(p, 0, bytes, s);
    g_trace->leave();
    return (int)r;
}

int staticrt_copy(CUstream s, CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
    g_trace->enter();
    CUresult r = g_dtod(dst, src, bytes, s);
    g_trace->leave();
    return (int)r;
}
