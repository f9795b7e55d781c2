/* bench_simcuda_clock.c — ns per cuLaunchKernel on simcuda (driver through the PLT), best of 5 rounds.
 * Usage: bench_simcuda_clock N [cupti]   (cupti: the simulated libcupti collects kernels, external
 * correlation and driver records, with an external id pushed around each launch, as the shim will).
 * Driven by scripts/bench_simcuda_clock.py. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "pi_cuda.h"
#include "pi_cupti.h"
#include "simcuda.h"

CUresult cuInit(unsigned int);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxSynchronize(void);
CUresult cuStreamCreate(CUstream *, unsigned int);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **);

static void k(void **p) { (void)p; }
static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static void req(uint8_t **b, size_t *size, size_t *max) { *b = malloc(8 << 20); *size = 8 << 20; *max = 0; }
static void done(void *c, uint32_t s, uint8_t *b, size_t size, size_t valid) { free(b); }

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 200000, cupti = argc > 2 && !strcmp(argv[2], "cupti");
    pi_cuptiActivityPushExternalCorrelationId_fn push = NULL;
    pi_cuptiActivityPopExternalCorrelationId_fn pop = NULL;
    pi_cuptiActivityFlushAll_fn flush = NULL;
    if (cupti) {
        void *h = dlopen("libcupti.so.13", RTLD_NOW);
        if (!h) return 2;
        pi_cuptiActivityRegisterCallbacks_fn reg = (pi_cuptiActivityRegisterCallbacks_fn)dlsym(h, "cuptiActivityRegisterCallbacks");
        pi_cuptiActivityEnable_fn en = (pi_cuptiActivityEnable_fn)dlsym(h, "cuptiActivityEnable");
        push = (pi_cuptiActivityPushExternalCorrelationId_fn)dlsym(h, "cuptiActivityPushExternalCorrelationId");
        pop = (pi_cuptiActivityPopExternalCorrelationId_fn)dlsym(h, "cuptiActivityPopExternalCorrelationId");
        flush = (pi_cuptiActivityFlushAll_fn)dlsym(h, "cuptiActivityFlushAll");
        if (reg(req, done) || en(PI_CUPTI_KIND_CONCURRENT_KERNEL) || en(PI_CUPTI_KIND_EXTERNAL_CORRELATION) ||
            en(PI_CUPTI_KIND_DRIVER))
            return 3;
    }
    CUcontext c;
    CUfunction f;
    CUstream s;
    size_t off = 0, sz = 4;
    int v = 1;
    void *args[] = {&v};
    if (cuInit(0) || cuDevicePrimaryCtxRetain(&c, 0) || cuCtxSetCurrent(c) || cuStreamCreate(&s, 0) ||
        simcuRegisterKernel("k", k, 1, &off, &sz, &f))
        return 4;
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
        double t = now();
        for (int i = 0; i < n; i++) {
            uint64_t last;
            if (push) push(PI_CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, (uint64_t)i);
            cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, args, NULL);
            if (pop) pop(PI_CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last);
        }
        t = now() - t;
        if (t < best) best = t;
        cuCtxSynchronize();
        if (flush) flush(PI_CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    }
    printf("%.1f\n", best / n * 1e9);
    return 0;
}
