/*
 * graph_execset.c — a CUDA graph built node by node (a memcpy node, a memset node, a child graph node whose graph
 * was captured from a stream), replayed, then its executable graph's nodes given new buffers twice, as XLA's
 * command buffers do when buffer addresses change; for tests/integration/test_graphs.py.  Prints its own truth
 * (JSON, last line).
 *
 *   graph_execset N1 N2 N3
 *     graph g (driver, through cuGetProcAddress): memcpy B0 <- A0 -> memset M0 -> child graph {k(C0, D0)} (captured)
 *     N1 replays;
 *     cuGraphExecMemcpyNodeSetParams B1 <- A1, cuGraphExecMemsetNodeSetParams M1,
 *     cuGraphExecChildGraphNodeSetParams {k(C1, D1)} (captured); N2 replays;
 *     cudaGraphExecNodeSetParams (memcpy) B0 <- A1, cudaGraphExecMemsetNodeSetParams M2,
 *     cuGraphExecNodeSetParams (child graph) {k(C2, D2)} (captured); N3 replays.
 *   (cudaGraphExecMemcpyNodeSetParams1D and cudaGraphExecChildGraphNodeSetParams: tests/c/hook_each.c)
 *   Each phase's data is checked on the device memory (the memset's value, the copy, the kernel's write).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pi_cuda.h"
#include "simcuda.h"
#include "graph_common.h"

cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t smem, cudaStream_t s);
cudaError_t cudaStreamBeginCapture(cudaStream_t s, int mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t g, cudaStream_t s);
cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t e, cudaGraphNode_t n, const cudaMemsetParams *p);
cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t e, cudaGraphNode_t n, cudaGraphNodeParams *p);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e);
cudaError_t cudaGraphDestroy(cudaGraph_t g);




static char stub_k;

enum { SZ = 1 << 16 };
static cudaStream_t s;

/* a graph captured from the stream: k(c, d) */
static cudaGraph_t captured(void *c, void *d) {
    cudaGraph_t g;
    void *args[2] = {&c, &d};
    CHECK(cudaStreamBeginCapture(s, 2 /* relaxed */));
    CHECK(cudaLaunchKernel(&stub_k, (dim3){1, 1, 1}, (dim3){32, 1, 1}, args, 0, s));
    CHECK(cudaStreamEndCapture(s, &g));
    return g;
}

static CUDA_MEMCPY3D copy1d(void *dst, const void *src) {
    CUDA_MEMCPY3D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = (CUdeviceptr)(uintptr_t)src, c.dstDevice = (CUdeviceptr)(uintptr_t)dst;
    c.WidthInBytes = 4096, c.Height = c.Depth = 1;
    return c;
}

static CUDA_MEMSET_NODE_PARAMS set1d(void *dst, unsigned v) {
    CUDA_MEMSET_NODE_PARAMS m = {(CUdeviceptr)(uintptr_t)dst, 0, v, 1, 4096, 1};
    return m;
}

/* the device memory after a phase: the memset's value in m, a's bytes in b, d[1] = c[0] + 1 */
static void check(void *a, void *b, void *m, unsigned v, void *c, void *d) {
    unsigned char ha[4], hb[4], hm[4], hc[4], hd[4];
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(ha, a, 4, 2));
    CHECK(cudaMemcpy(hb, b, 4, 2));
    CHECK(cudaMemcpy(hm, m, 4, 2));
    CHECK(cudaMemcpy(hc, c, 4, 2));
    CHECK(cudaMemcpy(hd, d, 4, 2));
    if (hm[0] != (unsigned char)v || memcmp(ha, hb, 4) || hd[1] != (unsigned char)(hc[0] + 1)) {
        fprintf(stderr, "graph_execset: the replays did not do what the updated graph says\n");
        exit(5);
    }
}

int main(int argc, char **argv) {
    int n[3] = {argc > 1 ? atoi(argv[1]) : 4, argc > 2 ? atoi(argv[2]) : 3, argc > 3 ? atoi(argv[3]) : 2};
    if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) return 2;
    *(void **)&gpa = dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2");
    if (!gpa) return 2;
    CHECK(simcudaRegisterFunction(&stub_k, "k2", k2, 2, off2, sz2));
    CHECK(cudaStreamCreate(&s));
    void *A[2], *B[2], *M[3], *C[3], *D[3];
    for (int i = 0; i < 3; i++) {
        if (i < 2) {
            CHECK(cudaMalloc(&A[i], SZ));
            CHECK(cudaMalloc(&B[i], SZ));
        }
        CHECK(cudaMalloc(&M[i], SZ));
        CHECK(cudaMalloc(&C[i], SZ));
        CHECK(cudaMalloc(&D[i], SZ));
    }
    unsigned char init[4] = {11, 12, 13, 14};
    CHECK(cudaMemcpy(A[0], init, 4, 1));
    CHECK(cudaMemcpy(A[1], init + 1, 3, 1));
    CUresult (*create)(CUgraph *, unsigned) = proc("cuGraphCreate", 13000);
    CUresult (*add_cp)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, const CUDA_MEMCPY3D *, CUcontext) =
        proc("cuGraphAddMemcpyNode", 13000);
    CUresult (*add_ms)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, const CUDA_MEMSET_NODE_PARAMS *,
                       CUcontext) = proc("cuGraphAddMemsetNode", 13000);
    CUresult (*add_ch)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUgraph) =
        proc("cuGraphAddChildGraphNode", 13000);
    CUresult (*set_cp)(CUgraphExec, CUgraphNode, const CUDA_MEMCPY3D *, CUcontext) =
        proc("cuGraphExecMemcpyNodeSetParams", 13000);
    CUresult (*set_ms)(CUgraphExec, CUgraphNode, const CUDA_MEMSET_NODE_PARAMS *, CUcontext) =
        proc("cuGraphExecMemsetNodeSetParams", 13000);
    CUresult (*set_ch)(CUgraphExec, CUgraphNode, CUgraph) = proc("cuGraphExecChildGraphNodeSetParams", 13000);
    CUresult (*set_any)(CUgraphExec, CUgraphNode, CUgraphNodeParams *) = proc("cuGraphExecNodeSetParams", 13000);

    CUgraph g, child[3];
    CUgraphNode cp, ms, ch;
    CHECK(create(&g, 0));
    CUDA_MEMCPY3D c = copy1d(B[0], A[0]);
    CHECK(add_cp(&cp, g, NULL, 0, &c, NULL));
    CUDA_MEMSET_NODE_PARAMS m = set1d(M[0], 5);
    CHECK(add_ms(&ms, g, &cp, 1, &m, NULL));
    child[0] = captured(C[0], D[0]);
    CHECK(add_ch(&ch, g, &ms, 1, child[0]));
    CUgraphExec x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    for (int i = 0; i < n[0]; i++) CHECK(cudaGraphLaunch(x, s));
    check(A[0], B[0], M[0], 5, C[0], D[0]);

    c = copy1d(B[1], A[1]);
    CHECK(set_cp(x, cp, &c, NULL));
    m = set1d(M[1], 6);
    CHECK(set_ms(x, ms, &m, NULL));
    child[1] = captured(C[1], D[1]);
    CHECK(set_ch(x, ch, child[1]));
    for (int i = 0; i < n[1]; i++) CHECK(cudaGraphLaunch(x, s));
    check(A[1], B[1], M[1], 6, C[1], D[1]);

    cudaGraphNodeParams rp; /* the runtime's generic exec set: a memcpy node */
    memset(&rp, 0, sizeof rp);
    rp.type = CU_GRAPH_NODE_TYPE_MEMCPY;
    rp.memcpy.copyParams.srcPtr.ptr = A[1], rp.memcpy.copyParams.dstPtr.ptr = B[0];
    rp.memcpy.copyParams.extent.width = 4096, rp.memcpy.copyParams.extent.height = 1;
    rp.memcpy.copyParams.extent.depth = 1, rp.memcpy.copyParams.kind = 3 /* device to device */;
    CHECK(cudaGraphExecNodeSetParams(x, cp, &rp));
    cudaMemsetParams mp = {M[2], 0, 7, 1, 4096, 1};
    CHECK(cudaGraphExecMemsetNodeSetParams(x, ms, &mp));
    child[2] = captured(C[2], D[2]);
    CUgraphNodeParams np; /* the driver's: a child graph node */
    memset(&np, 0, sizeof np);
    np.type = CU_GRAPH_NODE_TYPE_GRAPH;
    np.graph.graph = child[2];
    CHECK(set_any(x, ch, &np));
    for (int i = 0; i < n[2]; i++) CHECK(cudaGraphLaunch(x, s));
    check(A[1], B[0], M[2], 7, C[2], D[2]);

    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(g));
    for (int i = 0; i < 3; i++) CHECK(cudaGraphDestroy(child[i]));
    /* what each node of each phase's replays touched (node order: memcpy, memset, the child's kernel) */
    void *touched[3][3][2] = {{{A[0], B[0]}, {M[0], M[0]}, {C[0], D[0]}},
                              {{A[1], B[1]}, {M[1], M[1]}, {C[1], D[1]}},
                              {{A[1], B[0]}, {M[2], M[2]}, {C[2], D[2]}}};
    printf("{\"n1\": %d, \"n2\": %d, \"n3\": %d, \"touched\": [", n[0], n[1], n[2]);
    for (int p = 0; p < 3; p++) {
        printf("%s[", p ? ", " : "");
        for (int k = 0; k < 3; k++)
            printf("%s[%llu, %llu]", k ? ", " : "", (unsigned long long)(uintptr_t)touched[p][k][0],
                   (unsigned long long)(uintptr_t)touched[p][k][1]);
        printf("]");
    }
    printf("]}\n");
    for (int i = 0; i < 3; i++) {
        if (i < 2) {
            CHECK(cudaFree(A[i]));
            CHECK(cudaFree(B[i]));
        }
        CHECK(cudaFree(M[i]));
        CHECK(cudaFree(C[i]));
        CHECK(cudaFree(D[i]));
    }
    return 0;
}
