/*
 * graph_addnode.c — a CUDA graph built with the generic node API (cuGraphAddNode_v2 / cuGraphAddNode reached
 * through cuGetProcAddress, as XLA's command buffers do, and the runtime's cudaGraphAddNode /
 * cudaGraphAddNode_v2), replayed in three phases with kernel nodes given new arguments between them; for
 * tests/integration/test_graphs.py.  Prints its own truth (JSON, last line).
 *
 *   graph_addnode N1 N2 N3
 *     A, B, C = cudaMalloc(1 MiB)
 *     graph g (in node order; "drv2" cuGraphAddNode_v2, "drv1" cuGraphAddNode (12.2 ABI), "rt" cudaGraphAddNode,
 *     "rt2" cudaGraphAddNode_v2):
 *       drv2 alloc T (2 MiB), drv2 kernel k(A, T) (kernelParams), drv2 empty node, drv1 kernel k(B, C) (`extra`),
 *       drv2 memset B, drv2 memcpy C <- A, drv2 child graph {rt kernel k(C, A)}, rt alloc U (1 MiB),
 *       rt kernel k(U, B), rt memcpy B <- U (cudaMemcpy3DParms), rt2 memset U, rt free U, drv2 free T
 *     N1 replays;
 *     cuGraphExecKernelNodeSetParams: k(A, T) -> k(B, T); N2 replays;
 *     cuGraphExecNodeSetParams: k(B, C) -> k(A, C); cudaGraphExecNodeSetParams: k(U, B) -> k(U, C); N3 replays.
 *   The truth is counted from the node table this program keeps while it builds and changes the graph: the
 *   accesses each block gets over all replays, the nodes (the empty node is none: it does nothing), per replay
 *   the kernel and copy/memset nodes, and per phase the addresses each node touches ("touched").
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
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaGraphCreate(cudaGraph_t *g, unsigned int flags);
cudaError_t cudaGraphAddNode(cudaGraphNode_t *n, cudaGraph_t g, const cudaGraphNode_t *d,
                             const cudaGraphEdgeData *e, size_t nd, cudaGraphNodeParams *p);
cudaError_t cudaGraphAddNode_v2(cudaGraphNode_t *n, cudaGraph_t g, const cudaGraphNode_t *d,
                                const cudaGraphEdgeData *e, size_t nd, cudaGraphNodeParams *p);
cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t e, cudaGraphNode_t n, cudaGraphNodeParams *p);
cudaError_t cudaGraphDestroy(cudaGraph_t g);


typedef CUresult (*add_v1_fn)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUgraphNodeParams *);
typedef CUresult (*add_v2_fn)(CUgraphNode *, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t,
                              CUgraphNodeParams *);
static add_v1_fn add_v1;
static add_v2_fn add_v2;


static char stub_k;          /* the runtime's host stub of the same kernel */
static CUfunction kfn;

/* the node table: what each node touches (kernel arguments, copy / memset ends), kept by hand */
enum { MAXN = 32 };
static struct { const char *kind; uint64_t ptr[2]; int np; } nodes[MAXN];
static int nnodes;
static int note(const char *kind, uint64_t p0, uint64_t p1, int np) {
    nodes[nnodes].kind = kind, nodes[nnodes].ptr[0] = p0, nodes[nnodes].ptr[1] = p1, nodes[nnodes].np = np;
    return nnodes++;
}

static CUgraphNodeParams drv(CUgraphNodeType type) {
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = type;
    return p;
}
static cudaGraphNodeParams rt(int type) {
    cudaGraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = type;
    return p;
}

int main(int argc, char **argv) {
    int n1 = argc > 1 ? atoi(argv[1]) : 4, n2 = argc > 2 ? atoi(argv[2]) : 3, n3 = argc > 3 ? atoi(argv[3]) : 2;
    if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) return 2;
    *(void **)&gpa = dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2");
    if (!gpa) return 2;
    void *a, *b, *c;
    CHECK(cudaMalloc(&a, 1 << 20)); /* the runtime's context current on this thread */
    CHECK(cudaMalloc(&b, 1 << 20));
    CHECK(cudaMalloc(&c, 1 << 20));
    uint64_t A = (uint64_t)(uintptr_t)a, B = (uint64_t)(uintptr_t)b, C = (uint64_t)(uintptr_t)c;
    CHECK(((CUresult(*)(const char *, simcu_kernel_fn, unsigned, const size_t *, const size_t *, CUfunction *))
           dlsym(RTLD_DEFAULT, "simcuRegisterKernel"))("k2", k2, 2, off2, sz2, &kfn));
    CHECK(simcudaRegisterFunction(&stub_k, "k2", k2, 2, off2, sz2));
    add_v1 = (add_v1_fn)proc("cuGraphAddNode", 12020);   /* the 12.2 ABI */
    add_v2 = (add_v2_fn)proc("cuGraphAddNode", 13000);   /* the 12.3+ ABI, with edge data */
    CUresult (*graph_create)(CUgraph *, unsigned) = proc("cuGraphCreate", 13000);
    CUresult (*instantiate)(CUgraphExec *, CUgraph, unsigned long long) = proc("cuGraphInstantiateWithFlags", 13000);
    CUresult (*launch)(CUgraphExec, CUstream) = proc("cuGraphLaunch", 13000);
    CUresult (*exec_kset)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS *) =
        proc("cuGraphExecKernelNodeSetParams", 13000);
    CUresult (*exec_set)(CUgraphExec, CUgraphNode, CUgraphNodeParams *) = proc("cuGraphExecNodeSetParams", 13000);
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));

    CUgraph g, child;
    CUgraphNode n[16], prev = NULL, nc;
    int k = 0, id_at, id_bc, id_ub;
    CHECK(graph_create(&g, 0));
#define DEP (prev ? &prev : NULL), (prev ? 1u : 0u)
#define DEP2 (prev ? &prev : NULL), NULL, (prev ? 1u : 0u)
    /* drv2 alloc T */
    CUgraphNodeParams p = drv(CU_GRAPH_NODE_TYPE_MEM_ALLOC);
    p.alloc.poolProps.allocType = 1, p.alloc.poolProps.location.type = 1, p.alloc.poolProps.location.id = 0;
    p.alloc.bytesize = 2 << 20;
    CHECK(add_v2(&n[k], g, DEP2, &p));
    prev = n[k++];
    uint64_t T = p.alloc.dptr;
    note("alloc", 0, 0, 0);
    /* drv2 kernel k(A, T), kernelParams */
    void *at[2] = {&a, &T};
    p = drv(CU_GRAPH_NODE_TYPE_KERNEL);
    p.kernel.func = kfn, p.kernel.gridDimX = p.kernel.gridDimY = p.kernel.gridDimZ = 1;
    p.kernel.blockDimX = 32, p.kernel.blockDimY = p.kernel.blockDimZ = 1, p.kernel.kernelParams = at;
    CHECK(add_v2(&n[k], g, DEP2, &p));
    CUgraphNode kn_at = prev = n[k++];
    id_at = note("kernel", A, T, 2);
    /* drv2 empty */
    p = drv(CU_GRAPH_NODE_TYPE_EMPTY);
    CHECK(add_v2(&n[k], g, DEP2, &p));
    prev = n[k++];
    /* drv1 kernel k(B, C), its arguments packed in `extra` */
    uint64_t bc_buf[2] = {B, C};
    size_t bc_size = sizeof bc_buf;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, bc_buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &bc_size, CU_LAUNCH_PARAM_END};
    p = drv(CU_GRAPH_NODE_TYPE_KERNEL);
    p.kernel.func = kfn, p.kernel.gridDimX = p.kernel.gridDimY = p.kernel.gridDimZ = 1;
    p.kernel.blockDimX = 32, p.kernel.blockDimY = p.kernel.blockDimZ = 1, p.kernel.extra = extra;
    CHECK(add_v1(&n[k], g, DEP, &p));
    CUgraphNode kn_bc = prev = n[k++];
    id_bc = note("kernel", B, C, 2);
    /* drv2 memset B */
    p = drv(CU_GRAPH_NODE_TYPE_MEMSET);
    p.memset.dst = B, p.memset.elementSize = 1, p.memset.width = 4096, p.memset.height = 1;
    CHECK(add_v2(&n[k], g, DEP2, &p));
    prev = n[k++];
    note("memset", B, 0, 1);
    /* drv2 memcpy C <- A */
    p = drv(CU_GRAPH_NODE_TYPE_MEMCPY);
    p.memcpy.copyParams.srcMemoryType = p.memcpy.copyParams.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    p.memcpy.copyParams.srcDevice = A, p.memcpy.copyParams.dstDevice = C;
    p.memcpy.copyParams.WidthInBytes = 4096, p.memcpy.copyParams.Height = p.memcpy.copyParams.Depth = 1;
    CHECK(add_v2(&n[k], g, DEP2, &p));
    prev = n[k++];
    note("copy", C, A, 2);
    /* drv2 child graph {rt kernel k(C, A)} */
    CHECK(cudaGraphCreate(&child, 0));
    void *ca[2] = {&c, &a};
    cudaGraphNodeParams q = rt(CU_GRAPH_NODE_TYPE_KERNEL);
    q.kernel.func = &stub_k, q.kernel.gridDim = (dim3){1, 1, 1}, q.kernel.blockDim = (dim3){32, 1, 1};
    q.kernel.kernelParams = ca;
    CHECK(cudaGraphAddNode(&nc, child, NULL, NULL, 0, &q));
    p = drv(CU_GRAPH_NODE_TYPE_GRAPH);
    p.graph.graph = child;
    CHECK(add_v2(&n[k], g, DEP2, &p));
    prev = n[k++];
    CHECK(cudaGraphDestroy(child));
    note("kernel", C, A, 2);
    /* rt alloc U */
    q = rt(CU_GRAPH_NODE_TYPE_MEM_ALLOC);
    q.alloc.poolProps.allocType = 1, q.alloc.poolProps.location.type = 1, q.alloc.poolProps.location.id = 0;
    q.alloc.bytesize = 1 << 20;
    CHECK(cudaGraphAddNode(&n[k], g, DEP2, &q));
    prev = n[k++];
    void *u = (void *)(uintptr_t)q.alloc.dptr;
    uint64_t U = q.alloc.dptr;
    note("alloc", 0, 0, 0);
    /* rt kernel k(U, B) */
    void *ub[2] = {&u, &b};
    q = rt(CU_GRAPH_NODE_TYPE_KERNEL);
    q.kernel.func = &stub_k, q.kernel.gridDim = (dim3){1, 1, 1}, q.kernel.blockDim = (dim3){32, 1, 1};
    q.kernel.kernelParams = ub;
    CHECK(cudaGraphAddNode(&n[k], g, DEP2, &q));
    CUgraphNode kn_ub = prev = n[k++];
    id_ub = note("kernel", U, B, 2);
    /* rt memcpy B <- U */
    q = rt(CU_GRAPH_NODE_TYPE_MEMCPY);
    q.memcpy.copyParams.srcPtr = (cudaPitchedPtr){u, 4096, 4096, 1};
    q.memcpy.copyParams.dstPtr = (cudaPitchedPtr){b, 4096, 4096, 1};
    q.memcpy.copyParams.extent = (cudaExtent){4096, 1, 1};
    q.memcpy.copyParams.kind = cudaMemcpyDeviceToDevice;
    CHECK(cudaGraphAddNode(&n[k], g, DEP2, &q));
    prev = n[k++];
    note("copy", B, U, 2);
    /* rt2 memset U */
    q = rt(CU_GRAPH_NODE_TYPE_MEMSET);
    q.memset.dst = u, q.memset.elementSize = 4, q.memset.width = 1024, q.memset.height = 1, q.memset.value = 7;
    CHECK(cudaGraphAddNode_v2(&n[k], g, DEP2, &q));
    prev = n[k++];
    note("memset", U, 0, 1);
    /* rt free U */
    q = rt(CU_GRAPH_NODE_TYPE_MEM_FREE);
    q.free.dptr = u;
    CHECK(cudaGraphAddNode(&n[k], g, DEP2, &q));
    prev = n[k++];
    note("free", 0, 0, 0);
    /* drv2 free T */
    p = drv(CU_GRAPH_NODE_TYPE_MEM_FREE);
    p.free.dptr = T;
    CHECK(add_v2(&n[k], g, DEP2, &p));
    prev = n[k++];
    note("free", 0, 0, 0);

    /* the replays, and what each block gets in them (from the node table) */
    uint64_t blocks[5] = {A, B, C, T, U};
    long acc[5] = {0};
    char touched[3][1024]; /* per phase: the addresses each node touches, as JSON */
    CUgraphExec e;
    CHECK(instantiate(&e, g, 0));
    int phases[3] = {n1, n2, n3};
    for (int ph = 0; ph < 3; ph++) {
        if (ph == 1) { /* the typed exec set: k(A, T) -> k(B, T) */
            void *bt[2] = {&b, &T};
            CUDA_KERNEL_NODE_PARAMS kp;
            memset(&kp, 0, sizeof kp);
            kp.func = kfn, kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1, kp.blockDimX = 32;
            kp.blockDimY = kp.blockDimZ = 1, kp.kernelParams = bt;
            CHECK(exec_kset(e, kn_at, &kp));
            nodes[id_at].ptr[0] = B;
        }
        if (ph == 2) { /* the generic exec sets: k(B, C) -> k(A, C) (driver), k(U, B) -> k(U, C) (runtime) */
            void *ac[2] = {&a, &c};
            p = drv(CU_GRAPH_NODE_TYPE_KERNEL);
            p.kernel.func = kfn, p.kernel.gridDimX = p.kernel.gridDimY = p.kernel.gridDimZ = 1;
            p.kernel.blockDimX = 32, p.kernel.blockDimY = p.kernel.blockDimZ = 1, p.kernel.kernelParams = ac;
            CHECK(exec_set(e, kn_bc, &p));
            nodes[id_bc].ptr[0] = A;
            void *uc[2] = {&u, &c};
            q = rt(CU_GRAPH_NODE_TYPE_KERNEL);
            q.kernel.func = &stub_k, q.kernel.gridDim = (dim3){1, 1, 1}, q.kernel.blockDim = (dim3){32, 1, 1};
            q.kernel.kernelParams = uc;
            CHECK(cudaGraphExecNodeSetParams(e, kn_ub, &q));
            nodes[id_ub].ptr[1] = C;
        }
        for (int i = 0; i < phases[ph]; i++) CHECK(launch(e, s));
        size_t o = 0;
        for (int j = 0; j < nnodes; j++) {
            o += (size_t)snprintf(touched[ph] + o, sizeof touched[ph] - o, "%s[", j ? ", " : "");
            for (int x = 0; x < nodes[j].np; x++)
                o += (size_t)snprintf(touched[ph] + o, sizeof touched[ph] - o, "%s%llu", x ? ", " : "",
                                      (unsigned long long)nodes[j].ptr[x]);
            o += (size_t)snprintf(touched[ph] + o, sizeof touched[ph] - o, "]");
        }
        for (int j = 0; j < nnodes; j++)
            for (int x = 0; x < nodes[j].np; x++)
                for (int bi = 0; bi < 5; bi++)
                    if (nodes[j].ptr[x] == blocks[bi]) acc[bi] += phases[ph];
    }
    CHECK(cudaStreamSynchronize(s));
    int kernels = 0, copies = 0;
    printf("{\"n1\": %d, \"n2\": %d, \"n3\": %d, \"a\": %llu, \"b\": %llu, \"c\": %llu, \"t\": %llu, \"u\": %llu, "
           "\"accesses\": {\"a\": %ld, \"b\": %ld, \"c\": %ld, \"t\": %ld, \"u\": %ld}, \"nodes\": [",
           n1, n2, n3, (unsigned long long)A, (unsigned long long)B, (unsigned long long)C, (unsigned long long)T,
           (unsigned long long)U, acc[0], acc[1], acc[2], acc[3], acc[4]);
    for (int j = 0; j < nnodes; j++) {
        printf("%s\"%s\"", j ? ", " : "", nodes[j].kind);
        kernels += strcmp(nodes[j].kind, "kernel") == 0;
        copies += strcmp(nodes[j].kind, "copy") == 0 || strcmp(nodes[j].kind, "memset") == 0;
    }
    printf("], \"kernel_nodes\": %d, \"copy_nodes\": %d, \"added\": %d, \"touched\": [[%s], [%s], [%s]]}\n",
           kernels, copies, k, touched[0], touched[1], touched[2]);
    return 0;
}
