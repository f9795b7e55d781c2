/*
 * graph_memnodes.c — a CUDA graph with a memory node, replayed N times, for the graph tests
 * (tests/integration/test_graphs.py).  Prints its own truth (JSON, last line).
 *
 *   graph_memnodes N [M]
 *     eager:    A, B = cudaMalloc(1 MiB); k_ab(A, B); cudaMemsetAsync(A)          A: 2 accesses, B: 1
 *     captured: T = cudaMallocAsync(4 MiB, s); k_at(A, T); k_tb(T, B); k_ab(A, B); cudaFreeAsync(T, s)
 *               (per replay: A 2, B 2, T 2 accesses; T is a graph memory node)
 *     a 64 KiB cudaMalloc while the capture is open (relaxed mode: a private pool segment, as PyTorch's
 *     caching allocator takes for torch.cuda.graph), freed at the end
 *     M > 0: a second graph captured on the same stream: the first graph launched into it (a child graph)
 *     then k_ab(A, B); replayed M times (per replay: A 3, B 3, T 2 accesses; one T block)
 *     N replays (cudaGraphLaunch), then the graph pool (cudaDeviceGetGraphMemAttribute) and the device's
 *     free memory (cudaMemGetInfo) before the replays, after them and after cudaDeviceGraphMemTrim.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pi_cuda.h"
#include "simcuda.h"

cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s);
cudaError_t cudaFreeAsync(void *p, cudaStream_t s);
cudaError_t cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t smem, cudaStream_t s);
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamBeginCapture(cudaStream_t s, int mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t g, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e);
cudaError_t cudaGraphDestroy(cudaGraph_t g);
cudaError_t cudaMemGetInfo(size_t *f, size_t *t);
cudaError_t cudaDeviceGetGraphMemAttribute(int device, int attr, void *value);
cudaError_t cudaDeviceGraphMemTrim(int device);

#define CHECK(x) do { int rc_ = (int)(x); if (rc_) { fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #x, rc_); exit(3); } } while (0)

static void k2(void **params) { /* touches both buffers' first bytes */
    char *x = *(char **)params[0], *y = *(char **)params[1];
    y[0] = (char)(x[0] + 1);
}
static const size_t off2[] = {0, 8}, sz2[] = {8, 8};
static char stub_ab, stub_at, stub_tb;

static unsigned long long attr(int a) {
    unsigned long long v = 0;
    CHECK(cudaDeviceGetGraphMemAttribute(0, a, &v));
    return v;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10, m = argc > 2 ? atoi(argv[2]) : 0;
    CHECK(simcudaRegisterFunction(&stub_ab, "k_ab", k2, 2, off2, sz2));
    CHECK(simcudaRegisterFunction(&stub_at, "k_at", k2, 2, off2, sz2));
    CHECK(simcudaRegisterFunction(&stub_tb, "k_tb", k2, 2, off2, sz2));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    void *a, *b, *t = NULL;
    CHECK(cudaMalloc(&a, 1 << 20));
    CHECK(cudaMalloc(&b, 1 << 20));
    dim3 g = {1, 1, 1}, bl = {32, 1, 1};
    void *ab[2] = {&a, &b}, *at[2] = {&a, &t}, *tb[2] = {&t, &b};
    CHECK(cudaLaunchKernel(&stub_ab, g, bl, ab, 0, s));
    CHECK(cudaMemsetAsync(a, 0, 4096, s));
    CHECK(cudaStreamSynchronize(s));
    size_t free0, total;
    CHECK(cudaMemGetInfo(&free0, &total));

    cudaGraph_t gr;
    cudaGraphExec_t ex;
    void *pool;
    CHECK(cudaStreamBeginCapture(s, 2 /* cudaStreamCaptureModeRelaxed */));
    CHECK(cudaMalloc(&pool, 64 << 10));
    CHECK(cudaMallocAsync(&t, 4 << 20, s));
    CHECK(cudaLaunchKernel(&stub_at, g, bl, at, 0, s));
    CHECK(cudaLaunchKernel(&stub_tb, g, bl, tb, 0, s));
    CHECK(cudaLaunchKernel(&stub_ab, g, bl, ab, 0, s));
    CHECK(cudaFreeAsync(t, s));
    CHECK(cudaStreamEndCapture(s, &gr));
    size_t free_captured;
    CHECK(cudaMemGetInfo(&free_captured, &total));
    CHECK(cudaGraphInstantiate(&ex, gr, 0));
    for (int i = 0; i < n; i++) CHECK(cudaGraphLaunch(ex, s));
    if (m > 0) { /* the graph launched into another capture: a child graph node */
        cudaGraph_t outer;
        cudaGraphExec_t oex;
        CHECK(cudaStreamBeginCapture(s, 0));
        CHECK(cudaGraphLaunch(ex, s));
        CHECK(cudaLaunchKernel(&stub_ab, g, bl, ab, 0, s));
        CHECK(cudaStreamEndCapture(s, &outer));
        CHECK(cudaGraphInstantiate(&oex, outer, 0));
        for (int i = 0; i < m; i++) CHECK(cudaGraphLaunch(oex, s));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaGraphExecDestroy(oex));
        CHECK(cudaGraphDestroy(outer));
    }
    CHECK(cudaStreamSynchronize(s));
    size_t free1;
    CHECK(cudaMemGetInfo(&free1, &total));
    unsigned long long used = attr(0), used_high = attr(1), reserved = attr(2), reserved_high = attr(3);
    CHECK(cudaDeviceGraphMemTrim(0));
    size_t free2;
    CHECK(cudaMemGetInfo(&free2, &total));
    unsigned long long reserved_trimmed = attr(2);
    CHECK(cudaGraphExecDestroy(ex));
    CHECK(cudaGraphDestroy(gr));
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaFree(pool));
    printf("{\"outer_replays\": %d, \"pool\": %llu, \"pool_bytes\": %d, \"replays\": %d, \"a\": %llu, \"b\": %llu, \"t\": %llu, \"t_bytes\": %d, "
           "\"eager_accesses\": {\"a\": 2, \"b\": 1}, \"graph_accesses\": {\"a\": 2, \"b\": 2, \"t\": 2}, "
           "\"graph_kernels\": 3, \"eager_kernels\": 1, "
           "\"used\": %llu, \"used_high\": %llu, \"reserved\": %llu, \"reserved_high\": %llu, "
           "\"reserved_trimmed\": %llu, \"free_before\": %zu, \"free_captured\": %zu, \"free_replayed\": %zu, "
           "\"free_trimmed\": %zu}\n",
           m, (unsigned long long)(uintptr_t)pool, 64 << 10, n, (unsigned long long)(uintptr_t)a, (unsigned long long)(uintptr_t)b, (unsigned long long)(uintptr_t)t,
           4 << 20, used, used_high, reserved, reserved_high, reserved_trimmed, free0, free_captured, free1, free2);
    return 0;
}
