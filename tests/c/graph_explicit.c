/*
 * graph_explicit.c — a CUDA graph built node by node, replayed, its kernel node's arguments changed, then the
 * executable graph updated from a second graph; for tests/integration/test_graphs.py.  Prints its own truth
 * (JSON, last line).
 *
 *   graph_explicit N1 N2 N3
 *     A, B = cudaMalloc(1 MiB)
 *     graph g: alloc node T (2 MiB) -> child graph {k_ab(A, B)} -> k_at(A, T) -> memset B -> memcpy B <- A
 *              -> free node T
 *     N1 replays; cudaGraphExecKernelNodeSetParams: the k_at node now gets (B, T); N2 replays;
 *     graph g2 (same shape, its own alloc node T2, k_at(A, T2)); cudaGraphExecUpdate(exec, g2); N3 replays.
 *   Accesses per replay: A 3 (2 after the set), B 3 (4 after the set), T / T2 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pi_cuda.h"
#include "simcuda.h"

cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaGraphCreate(cudaGraph_t *g, unsigned int flags);
cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *n, cudaGraph_t g, const cudaGraphNode_t *d, size_t nd,
                                   const cudaKernelNodeParams *p);
cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t *n, cudaGraph_t g, const cudaGraphNode_t *d, size_t nd,
                                   const cudaMemsetParams *p);
cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t *n, cudaGraph_t g, const cudaGraphNode_t *d, size_t nd,
                                     void *dst, const void *src, size_t count, int kind);
cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t *n, cudaGraph_t g, const cudaGraphNode_t *d, size_t nd,
                                       cudaGraph_t child);
cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t *n, cudaGraph_t g, const cudaGraphNode_t *d, size_t nd,
                                     cudaMemAllocNodeParams *p);
cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t *n, cudaGraph_t g, const cudaGraphNode_t *d, size_t nd, void *p);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t g, cudaStream_t s);
cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t e, cudaGraphNode_t n, const cudaKernelNodeParams *p);
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t e, cudaGraph_t g, cudaGraphExecUpdateResultInfo *info);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e);
cudaError_t cudaGraphDestroy(cudaGraph_t g);

#define CHECK(x) do { int rc_ = (int)(x); if (rc_) { fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #x, rc_); exit(3); } } while (0)

static void k2(void **params) {
    char *x = *(char **)params[0], *y = *(char **)params[1];
    y[1] = (char)(x[0] + 1);
}
static const size_t off2[] = {0, 8}, sz2[] = {8, 8};
static char stub_ab, stub_at;

static void *a, *b;

/* g: alloc T -> child {k_ab(A, B)} -> k_at(x, T) -> memset B -> memcpy B <- A -> free T
 * (the child before the graph's own kernel: CUPTI numbers the child's node after them all) */
static cudaGraph_t build(void **t, cudaGraphNode_t *kernel_node, void **karg) {
    cudaGraph_t g, c;
    cudaGraphNode_t n[6], nc;
    CHECK(cudaGraphCreate(&g, 0));
    cudaMemAllocNodeParams ap;
    memset(&ap, 0, sizeof ap);
    ap.poolProps.allocType = 1;
    ap.poolProps.location.type = 1, ap.poolProps.location.id = 0;
    ap.bytesize = 2 << 20;
    CHECK(cudaGraphAddMemAllocNode(&n[0], g, NULL, 0, &ap));
    *t = (void *)(uintptr_t)ap.dptr;
    CHECK(cudaGraphCreate(&c, 0));
    void *ab[2] = {&a, &b};
    cudaKernelNodeParams cp = {&stub_ab, {1, 1, 1}, {32, 1, 1}, 0, ab, NULL};
    CHECK(cudaGraphAddKernelNode(&nc, c, NULL, 0, &cp));
    CHECK(cudaGraphAddChildGraphNode(&n[1], g, &n[0], 1, c));
    CHECK(cudaGraphDestroy(c));
    karg[0] = &a, karg[1] = t;
    cudaKernelNodeParams kp = {&stub_at, {1, 1, 1}, {32, 1, 1}, 0, karg, NULL};
    CHECK(cudaGraphAddKernelNode(&n[2], g, &n[1], 1, &kp));
    *kernel_node = n[2];
    cudaMemsetParams mp = {b, 0, 0, 1, 4096, 1};
    CHECK(cudaGraphAddMemsetNode(&n[3], g, &n[2], 1, &mp));
    CHECK(cudaGraphAddMemcpyNode1D(&n[4], g, &n[3], 1, b, a, 4096, 3 /* cudaMemcpyDeviceToDevice */));
    CHECK(cudaGraphAddMemFreeNode(&n[5], g, &n[4], 1, *t));
    return g;
}

int main(int argc, char **argv) {
    int n1 = argc > 1 ? atoi(argv[1]) : 4, n2 = argc > 2 ? atoi(argv[2]) : 3, n3 = argc > 3 ? atoi(argv[3]) : 2;
    CHECK(simcudaRegisterFunction(&stub_ab, "k_ab", k2, 2, off2, sz2));
    CHECK(simcudaRegisterFunction(&stub_at, "k_at", k2, 2, off2, sz2));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaMalloc(&a, 1 << 20));
    CHECK(cudaMalloc(&b, 1 << 20));
    void *t = NULL, *t2 = NULL, *karg[2], *karg2[2];
    cudaGraphNode_t kn, kn2;
    cudaGraph_t g = build(&t, &kn, karg);
    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    for (int i = 0; i < n1; i++) CHECK(cudaGraphLaunch(e, s));
    void *bt[2] = {&b, &t};
    cudaKernelNodeParams kp = {&stub_at, {1, 1, 1}, {32, 1, 1}, 0, bt, NULL};
    CHECK(cudaGraphExecKernelNodeSetParams(e, kn, &kp));
    for (int i = 0; i < n2; i++) CHECK(cudaGraphLaunch(e, s));
    cudaGraph_t g2 = build(&t2, &kn2, karg2);
    cudaGraphExecUpdateResultInfo info;
    CHECK(cudaGraphExecUpdate(e, g2, &info));
    for (int i = 0; i < n3; i++) CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaGraphDestroy(g2));
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    printf("{\"n1\": %d, \"n2\": %d, \"n3\": %d, \"a\": %llu, \"b\": %llu, \"t\": %llu, \"t2\": %llu, "
           "\"a_accesses\": %d, \"b_accesses\": %d, \"nodes\": 6}\n", n1, n2, n3,
           (unsigned long long)(uintptr_t)a, (unsigned long long)(uintptr_t)b, (unsigned long long)(uintptr_t)t,
           (unsigned long long)(uintptr_t)t2, 3 * n1 + 2 * n2 + 3 * n3, 3 * n1 + 4 * n2 + 3 * n3);
    return 0;
}
