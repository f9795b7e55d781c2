/*
 * bench_capture.c — cost the shim adds per intercepted call, measured in one
 * process: the same calls through the PLT (hooked when the shim is preloaded)
 * and through the real functions (dlvsym on the versioned libcudart symbols,
 * which the shim does not intercept, with the thread's recording suspended so
 * the runtime's own driver calls are not recorded either), interleaved in
 * blocks so that both see the same machine state.  Prints JSON.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pi_cuda.h"
#include "simcuda.h"

cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t smem, cudaStream_t s);
typedef cudaError_t (*malloc_t)(void **, size_t);
typedef cudaError_t (*free_t)(void *);
typedef cudaError_t (*launch_t)(const void *, dim3, dim3, void **, size_t, cudaStream_t);

static void k4(void **params) { (void)params; }
static char stub;
static void nop(void) {}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define BLOCK 2000
#define ROUNDS 100

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : ROUNDS;
    void *rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
    malloc_t real_malloc = (malloc_t)dlvsym(rt, "cudaMalloc", "libcudart.so.13");
    free_t real_free = (free_t)dlvsym(rt, "cudaFree", "libcudart.so.13");
    launch_t real_launch = (launch_t)dlvsym(rt, "cudaLaunchKernel", "libcudart.so.13");
    if (!real_malloc || !real_free || !real_launch) { fprintf(stderr, "dlvsym failed\n"); return 2; }
    void (*suspend)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "pyinterpose_suspend");
    void (*resume)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "pyinterpose_resume");
    if (!suspend) suspend = resume = nop;
    static const size_t off[] = {0, 8, 16, 24}, sz[] = {8, 8, 8, 8};
    if (simcudaRegisterFunction(&stub, "k4", k4, 4, off, sz)) return 2;
    void *live[64];
    for (int i = 0; i < 64; i++) cudaMalloc(&live[i], 4096 * (i + 1)); /* a populated live map */
    void *a, *b, *c, *d;
    cudaMalloc(&a, 1 << 20); cudaMalloc(&b, 1 << 20); cudaMalloc(&c, 1 << 20); cudaMalloc(&d, 1 << 20);
    void *args[4] = {&a, &b, &c, &d};
    dim3 g = {1, 1, 1};
    double *hp = malloc(sizeof(double) * rounds), *rp = malloc(sizeof(double) * rounds);
    double *hl = malloc(sizeof(double) * rounds), *rl = malloc(sizeof(double) * rounds);
    for (int r = 0; r < rounds; r++) {
        void *p;
        double t0 = now();
        for (int i = 0; i < BLOCK; i++) { cudaMalloc(&p, 256 + i); cudaFree(p); }
        suspend();
        double t1 = now();
        for (int i = 0; i < BLOCK; i++) { real_malloc(&p, 256 + i); real_free(p); }
        double t2 = now();
        resume();
        for (int i = 0; i < BLOCK; i++) cudaLaunchKernel(&stub, g, g, args, 0, 0);
        suspend();
        double t3 = now();
        for (int i = 0; i < BLOCK; i++) real_launch(&stub, g, g, args, 0, 0);
        double t4 = now();
        resume();
        hp[r] = (t1 - t0) / (2.0 * BLOCK); /* per event: an alloc or a free */
        rp[r] = (t2 - t1) / (2.0 * BLOCK);
        hl[r] = (t3 - t2) / BLOCK;
        rl[r] = (t4 - t3) / BLOCK;
    }
    qsort(hp, rounds, sizeof(double), cmp); qsort(rp, rounds, sizeof(double), cmp);
    qsort(hl, rounds, sizeof(double), cmp); qsort(rl, rounds, sizeof(double), cmp);
    int m = rounds / 2;
    printf("{\"alloc_free_hooked_ns\": %.1f, \"alloc_free_real_ns\": %.1f, \"alloc_free_added_ns\": %.1f, "
           "\"launch_hooked_ns\": %.1f, \"launch_real_ns\": %.1f, \"launch_added_ns\": %.1f, "
           "\"events\": %d}\n",
           hp[m], rp[m], hp[m] - rp[m], hl[m], rl[m], hl[m] - rl[m], rounds * BLOCK * 3);
    return 0;
}
