/* bench_apply_alloc.c — time of cudaMalloc/cudaFree (or cudaMallocAsync/cudaFreeAsync with ASYNC=1) in a
 * training-like loop of ITERS iterations of K requests (sizes 4 KiB .. K*4 KiB, freed in reverse order),
 * measured in the program itself; prints one JSON line.  Built and run by scripts/bench_apply.py, against
 * simcuda's libcudart, bare, under `pyinterpose run` and under `pyinterpose run --apply`. */
#include <stdio.h>
#include <stdlib.h>
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

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 200, k = argc > 2 ? atoi(argv[2]) : 64;
    const char *a = getenv("ASYNC");
    int async = a && a[0] == '1';
    void **p = calloc((size_t)k, sizeof *p);
    if (!p || cudaSetDevice(0)) return 1;
    double t_alloc = 0, t_free = 0;
    for (int it = 0; it < iters; it++) {
        double t0 = now();
        for (int i = 0; i < k; i++)
            if ((async ? cudaMallocAsync(&p[i], (size_t)4096 * (i + 1), 0) : cudaMalloc(&p[i], (size_t)4096 * (i + 1))))
                return 2;
        double t1 = now();
        for (int i = k - 1; i >= 0; i--)
            if ((async ? cudaFreeAsync(p[i], 0) : cudaFree(p[i]))) return 3;
        t_free += now() - t1;
        t_alloc += t1 - t0;
    }
    double n = (double)iters * k;
    printf("{\"iterations\": %d, \"requests\": %d, \"ns_per_alloc\": %.1f, \"ns_per_free\": %.1f}\n", iters,
           iters * k, t_alloc / n * 1e9, t_free / n * 1e9);
    return 0;
}
