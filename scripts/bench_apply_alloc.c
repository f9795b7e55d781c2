/* bench_apply_alloc.c — time of cudaMalloc/cudaFree (or cudaMallocAsync/cudaFreeAsync with ASYNC=1) in a
 * training-like loop of ITERS iterations of K requests (sizes 4 KiB .. K*4 KiB, freed in reverse order),
 * measured in the program itself (per iteration; the median iteration is reported, so that a preempted
 * iteration on a shared machine does not count); prints one JSON line.  Built and run by scripts/bench_apply.py, against
 * simcuda's libcudart, bare, under `pyinterpose run` and under `pyinterpose run --apply`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "pi_cuda.h"

cudaError_t cudaMalloc(void **, size_t);
cudaError_t cudaFree(void *);
cudaError_t cudaMallocAsync(void **, size_t, cudaStream_t);
cudaError_t cudaFreeAsync(void *, cudaStream_t);
cudaError_t cudaSetDevice(int);

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 200, k = argc > 2 ? atoi(argv[2]) : 64;
    const char *a = getenv("ASYNC");
    int async = a && a[0] == '1';
    void **p = calloc((size_t)k, sizeof *p);
    if (!p || cudaSetDevice(0)) return 1;
    double *ta = calloc((size_t)iters, sizeof *ta), *tf = calloc((size_t)iters, sizeof *tf);
    if (!ta || !tf) return 1;
    for (int it = 0; it < iters; it++) {
        double t0 = now();
        for (int i = 0; i < k; i++)
            if ((async ? cudaMallocAsync(&p[i], (size_t)4096 * (i + 1), 0) : cudaMalloc(&p[i], (size_t)4096 * (i + 1))))
                return 2;
        double t1 = now();
        for (int i = k - 1; i >= 0; i--)
            if ((async ? cudaFreeAsync(p[i], 0) : cudaFree(p[i]))) return 3;
        tf[it] = (now() - t1) / k;
        ta[it] = (t1 - t0) / k;
    }
    qsort(ta, (size_t)iters, sizeof *ta, cmp);
    qsort(tf, (size_t)iters, sizeof *tf, cmp);
    printf("{\"iterations\": %d, \"requests\": %d, \"ns_per_alloc\": %.1f, \"ns_per_free\": %.1f}\n", iters,
           iters * k, ta[iters / 2] * 1e9, tf[iters / 2] * 1e9);
    return 0;
}
