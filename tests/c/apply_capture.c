/*
 * apply_capture.c — ITERS iterations of 7 stream-ordered requests on one stream (a 3 MiB one first, then
 * 4-24 KiB), freed on the same stream; with CAPTURE_AT=k, iteration k runs inside a stream capture
 * (cudaStreamBeginCapture .. cudaStreamEndCapture, the graph then destroyed).  Prints one JSON line.
 *
 *   apply_capture ITERS
 */
#include <stdio.h>
#include <stdlib.h>

#include "pi_cuda.h"

cudaError_t cudaMallocAsync(void **, size_t, cudaStream_t);
cudaError_t cudaFreeAsync(void *, cudaStream_t);
cudaError_t cudaSetDevice(int);
cudaError_t cudaStreamCreate(cudaStream_t *);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaStreamBeginCapture(cudaStream_t, int);
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *);
cudaError_t cudaGraphDestroy(cudaGraph_t);

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 10;
    int cap = getenv("CAPTURE_AT") ? atoi(getenv("CAPTURE_AT")) : -1;
    cudaStream_t s;
    if (cudaSetDevice(0) || cudaStreamCreate(&s)) return 2;
    long captured = 0;
    for (int it = 0; it < iters; it++) {
        if (it == cap && cudaStreamBeginCapture(s, 0)) return 4;
        void *p[7];
        for (int i = 0; i < 7; i++) {
            size_t n = i == 0 ? (size_t)3 << 20 : (size_t)4096 * i;
            if (cudaMallocAsync(&p[i], n, s)) return 3;
            if (it == cap) captured++;
        }
        for (int i = 6; i >= 0; i--)
            if (cudaFreeAsync(p[i], s)) return 3;
        if (it == cap) {
            cudaGraph_t g;
            if (cudaStreamEndCapture(s, &g) || cudaGraphDestroy(g)) return 4;
        }
    }
    if (cudaStreamSynchronize(s)) return 2;
    printf("{\"requests\": %d, \"captured\": %ld}\n", iters * 7, captured);
    return 0;
}
