/* simcuda_clock.c — simcuda's device clock and its simulated CUPTI, used as a real program would:
 * the driver through the PLT, libcupti through dlopen + dlsym (as the shim does).
 *
 * Usage: simcuda_clock <case> [variant]
 *   cupti [full|nodriver|small|graph|runtime|nested]
 *                                               launches/copies/memsets with external ids pushed; prints
 *                                               every CUPTI record ("rec ...") and "done <mono> <cupti>"
 *   busy | fail | absent    CUPTI refusing / failing / missing: prints what each call returned, and the
 *                           program's own work still runs ("work ok")
 *   timing                  durations, sync blocking, bounded queue, copy engines, events (self-checked)
 * Exit 0 and a last line "ok <case>" on success. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "pi_cuda.h"
#include "pi_cupti.h"
#include "simcuda.h"
#include "simcu_hook.h"

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); exit(1); } } while (0)
#define CHECK_EQ(a, b) do { long long a_ = (long long)(a), b_ = (long long)(b); if (a_ != b_) { \
    fprintf(stderr, "%s:%d: %s = %lld, expected %lld\n", __FILE__, __LINE__, #a, a_, b_); exit(1); } } while (0)

CUresult cuInit(unsigned int);
CUresult cuGetExportTable(const void **, const void *);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxSynchronize(void);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemAllocHost_v2(void **, size_t);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr, const void *, size_t, CUstream);
CUresult cuMemcpyDtoHAsync_v2(void *, CUdeviceptr, size_t, CUstream);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t);
CUresult cuMemsetD8Async(CUdeviceptr, unsigned char, size_t, CUstream);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **);
CUresult cuLaunchKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
CUresult cuStreamCreate(CUstream *, unsigned int);
CUresult cuStreamSynchronize(CUstream);
CUresult cuStreamQuery(CUstream);
CUresult cuStreamWaitEvent(CUstream, CUevent, unsigned int);
CUresult cuEventCreate(CUevent *, unsigned int);
CUresult cuEventRecord(CUevent, CUstream);
CUresult cuEventSynchronize(CUevent);
CUresult cuEventElapsedTime(float *, CUevent, CUevent);
CUresult cuStreamBeginCapture_v2(CUstream, int);
CUresult cuStreamEndCapture(CUstream, CUgraph *);
CUresult cuStreamIsCapturing(CUstream, int *);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *, CUgraph, unsigned long long);
CUresult cuGraphLaunch(CUgraphExec, CUstream);

static uint64_t mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int g_counter;
static void k_add(void **params) { g_counter += *(int *)params[0]; }

static CUfunction kernel(const char *name)
{
    size_t off = 0, sz = sizeof(int);
    CUfunction f;
    CHECK_EQ(simcuRegisterKernel(name, k_add, 1, &off, &sz, &f), CUDA_SUCCESS);
    return f;
}

static void launch(CUfunction f, CUstream s, int v)
{
    void *args[] = {&v};
    CHECK_EQ(cuLaunchKernel(f, 2, 1, 1, 32, 1, 1, 0, s, args, NULL), CUDA_SUCCESS);
}

static void setup(void)
{
    CUcontext ctx;
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    CHECK_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    CHECK_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
}

/* ---------------- CUPTI client ---------------- */

static struct {
    pi_cuptiActivityRegisterCallbacks_fn reg;
    pi_cuptiActivityEnable_fn enable;
    pi_cuptiActivityDisable_fn disable;
    pi_cuptiActivityGetNextRecord_fn next;
    pi_cuptiActivityFlushAll_fn flush;
    pi_cuptiActivityGetNumDroppedRecords_fn dropped;
    pi_cuptiActivityPushExternalCorrelationId_fn push;
    pi_cuptiActivityPopExternalCorrelationId_fn pop;
    pi_cuptiGetTimestamp_fn ts;
    pi_cuptiGetResultString_fn str;
} C;
static size_t g_bufsize = 1 << 16;
static pthread_mutex_t g_out = PTHREAD_MUTEX_INITIALIZER;
static pthread_t g_main;

static void *g_cupti;

static void *load_cupti(void)
{
    /* SIMCLOCK_CUPTI: another name to load (an absolute path with nothing there = CUPTI absent: the
     * machine's ld.so cache may know a real libcupti, so taking simcuda's off the path is not enough) */
    const char *name = getenv("SIMCLOCK_CUPTI");
    void *h = dlopen(name && *name ? name : "libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!h) return NULL;
    g_cupti = h;
#define SYM(field, name) CHECK((*(void **)&C.field = dlsym(h, name)) != NULL)
    SYM(reg, "cuptiActivityRegisterCallbacks");
    SYM(enable, "cuptiActivityEnable");
    SYM(disable, "cuptiActivityDisable");
    SYM(next, "cuptiActivityGetNextRecord");
    SYM(flush, "cuptiActivityFlushAll");
    SYM(dropped, "cuptiActivityGetNumDroppedRecords");
    SYM(push, "cuptiActivityPushExternalCorrelationId");
    SYM(pop, "cuptiActivityPopExternalCorrelationId");
    SYM(ts, "cuptiGetTimestamp");
    SYM(str, "cuptiGetResultString");
#undef SYM
    return h;
}

static void buf_requested(uint8_t **buffer, size_t *size, size_t *max)
{
    *buffer = aligned_alloc(8, g_bufsize < 8 ? 8 : g_bufsize);
    *size = g_bufsize;
    *max = 0;
}

static void buf_completed(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    pthread_mutex_lock(&g_out);
    printf("buffer %s %zu\n", pthread_equal(pthread_self(), g_main) ? "main" : "other", valid);
    pi_cupti_record *r = NULL;
    while (C.next(buffer, valid, &r) == PI_CUPTI_SUCCESS) {
        switch (r->kind) {
        case PI_CUPTI_KIND_KERNEL:
        case PI_CUPTI_KIND_CONCURRENT_KERNEL: {
            pi_cupti_kernel *k = (void *)r;
            const int32_t *dims = (const int32_t *)((const char *)k + 52);
            printf("rec kernel %u %u %llu %llu %u %u %llu %s %d %d\n", k->kind, k->correlationId,
                   (unsigned long long)k->start, (unsigned long long)k->end, k->streamId, k->graphId,
                   (unsigned long long)k->graphNodeId, k->name, dims[0], dims[3]);
            break;
        }
        case PI_CUPTI_KIND_MEMCPY: {
            pi_cupti_memcpy *m = (void *)r;
            printf("rec memcpy %u %u %llu %llu %u %u %llu %llu %u %u\n", m->copyKind, m->correlationId,
                   (unsigned long long)m->start, (unsigned long long)m->end, m->streamId, m->graphId,
                   (unsigned long long)m->graphNodeId, (unsigned long long)m->bytes, m->srcKind, m->dstKind);
            break;
        }
        case PI_CUPTI_KIND_MEMSET: {
            pi_cupti_memset *m = (void *)r;
            printf("rec memset %u %u %llu %llu %u %u %llu %llu\n", m->value, m->correlationId,
                   (unsigned long long)m->start, (unsigned long long)m->end, m->streamId, m->graphId,
                   (unsigned long long)m->graphNodeId, (unsigned long long)m->bytes);
            break;
        }
        case PI_CUPTI_KIND_EXTERNAL_CORRELATION: {
            pi_cupti_external_correlation *x = (void *)r;
            printf("rec extcorr %u %u %llu\n", x->externalKind, x->correlationId, (unsigned long long)x->externalId);
            break;
        }
        case PI_CUPTI_KIND_DRIVER:
        case PI_CUPTI_KIND_RUNTIME: {
            pi_cupti_api *a = (void *)r;
            printf("rec api %u %u %u %llu %llu %u\n", a->kind, a->cbid, a->correlationId, (unsigned long long)a->start,
                   (unsigned long long)a->end, a->threadId);
            break;
        }
        default:
            printf("rec unknown %u\n", r->kind);
        }
    }
    size_t dropped = 0;
    CHECK_EQ(C.dropped(NULL, 0, &dropped), PI_CUPTI_SUCCESS);
    if (dropped) printf("dropped %zu\n", dropped);
    pthread_mutex_unlock(&g_out);
    free(buffer);
}

static void with_ext(uint64_t id)
{
    CHECK_EQ(C.push(PI_CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id), PI_CUPTI_SUCCESS);
}
static void end_ext(uint64_t id)
{
    uint64_t last = 0;
    CHECK_EQ(C.pop(PI_CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last), PI_CUPTI_SUCCESS);
    CHECK_EQ(last, id);
}

static int case_cupti(const char *variant)
{
    g_main = pthread_self();
    CHECK(load_cupti());
    if (!strcmp(variant, "small")) g_bufsize = 100; /* room for external ids (24) and API records (40), not kernels */
    CHECK_EQ(C.reg(buf_requested, buf_completed), PI_CUPTI_SUCCESS);
    CHECK_EQ(C.enable(PI_CUPTI_KIND_CONCURRENT_KERNEL), PI_CUPTI_SUCCESS);
    CHECK_EQ(C.enable(PI_CUPTI_KIND_MEMCPY), PI_CUPTI_SUCCESS);
    CHECK_EQ(C.enable(PI_CUPTI_KIND_MEMSET), PI_CUPTI_SUCCESS);
    CHECK_EQ(C.enable(PI_CUPTI_KIND_EXTERNAL_CORRELATION), PI_CUPTI_SUCCESS);
    if (!strcmp(variant, "nested")) CHECK_EQ(C.enable(PI_CUPTI_KIND_RUNTIME), PI_CUPTI_SUCCESS);
    if (!strcmp(variant, "runtime")) CHECK_EQ(C.enable(PI_CUPTI_KIND_RUNTIME), PI_CUPTI_SUCCESS);
    else if (strcmp(variant, "nodriver") != 0) CHECK_EQ(C.enable(PI_CUPTI_KIND_DRIVER), PI_CUPTI_SUCCESS);
    CHECK_EQ(C.enable(77), PI_CUPTI_ERROR_INVALID_KIND);
    CHECK_EQ(C.enable(9 /* CUPTI_ACTIVITY_KIND_CONTEXT */), PI_CUPTI_ERROR_NOT_COMPATIBLE);
    uint64_t dummy;
    CHECK_EQ(C.pop(PI_CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &dummy), 18 /* QUEUE_EMPTY */);
    const char *s = NULL;
    CHECK_EQ(C.str(PI_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, &s), PI_CUPTI_SUCCESS);
    CHECK(!strcmp(s, "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"));

    setup();
    CUstream st;
    CHECK_EQ(cuStreamCreate(&st, 0), CUDA_SUCCESS);
    CUfunction f = kernel("k_one_ms"), g = kernel("k_other");
    CHECK_EQ(simcuSetKernelDuration(f, 1000000), CUDA_SUCCESS);
    CUdeviceptr d;
    CHECK_EQ(cuMemAlloc_v2(&d, 1 << 20), CUDA_SUCCESS);
    void *h;
    CHECK_EQ(cuMemAllocHost_v2(&h, 1 << 20), CUDA_SUCCESS);

    if (!strcmp(variant, "graph")) {
        CHECK_EQ(cuStreamBeginCapture_v2(st, 0), CUDA_SUCCESS);
        int cap = 0;
        CHECK_EQ(cuStreamIsCapturing(st, &cap), CUDA_SUCCESS);
        CHECK_EQ(cap, 1);
        with_ext(500);
        launch(f, st, 1);
        end_ext(500);
        with_ext(501);
        CHECK_EQ(cuMemsetD8Async(d, 7, 4096, st), CUDA_SUCCESS);
        end_ext(501);
        with_ext(502);
        CHECK_EQ(simcuSetNextLaunchDuration(300000), CUDA_SUCCESS);
        launch(g, st, 10);
        end_ext(502);
        CUgraph gr;
        CHECK_EQ(cuStreamEndCapture(st, &gr), CUDA_SUCCESS);
        CHECK_EQ(g_counter, 0); /* captured, not run */
        CUgraphExec ex;
        CHECK_EQ(cuGraphInstantiateWithFlags(&ex, gr, 0), CUDA_SUCCESS);
        for (int i = 0; i < 2; i++) {
            with_ext(600 + i);
            CHECK_EQ(cuGraphLaunch(ex, st), CUDA_SUCCESS);
            end_ext(600 + i);
        }
        CHECK_EQ(cuStreamSynchronize(st), CUDA_SUCCESS);
        CHECK_EQ(g_counter, 22);
    } else if (!strcmp(variant, "nested")) {
        /* runtime calls as a runtime brackets them (the driver's private table, simcu_hook.h) */
        const struct simcu_rt_trace *rt = NULL;
        char uuid[16];
        memcpy(uuid, SIMCU_RT_TRACE_UUID, 16);
        CHECK_EQ(cuGetExportTable((const void **)&rt, uuid), CUDA_SUCCESS);
        CHECK(rt && rt->size >= sizeof *rt);
        rt->enter();           /* 1: the id pushed inside the runtime call (the shim around cuLaunchKernel) */
        with_ext(900);
        launch(f, st, 1);
        end_ext(900);
        rt->leave();
        with_ext(901);         /* 2: the id pushed around the runtime call (the shim around cudaLaunchKernel) */
        rt->enter();
        launch(f, st, 1);
        rt->leave();
        end_ext(901);
        rt->enter();           /* 3: a runtime call that enqueues nothing: no record */
        rt->leave();
        with_ext(902);         /* 4: a driver call of the program's own */
        launch(g, st, 1);
        end_ext(902);
        CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    } else {
        for (int i = 0; i < 3; i++) {
            with_ext(100 + i);
            launch(f, st, 1);
            end_ext(100 + i);
        }
        with_ext(200);
        CHECK_EQ(cuMemcpyHtoDAsync_v2(d, h, 1 << 20, st), CUDA_SUCCESS);
        end_ext(200);
        with_ext(300);
        CHECK_EQ(cuMemsetD8Async(d, 5, 4096, st), CUDA_SUCCESS);
        end_ext(300);
        with_ext(400);
        CHECK_EQ(simcuSetNextLaunchDuration(2000000), CUDA_SUCCESS);
        launch(g, NULL, 1);
        end_ext(400);
        launch(g, st, 1); /* no external id pushed */
        with_ext(700);
        int one = 1;
        void *args[] = {&one};
        /* NULL in a _ptsz entry point: this thread's per-thread default stream, not the legacy one */
        CHECK_EQ(cuLaunchKernel_ptsz(g, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
        end_ext(700);
        CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    }
    if (!strcmp(variant, "small")) {
        struct timespec pause = {0, 100000000}; /* 100 ms: time for CUPTI's thread to hand back full buffers */
        nanosleep(&pause, NULL);
    }
    uint64_t t_host = mono(), t_cupti = 0;
    CHECK_EQ(C.ts(&t_cupti), PI_CUPTI_SUCCESS);
    printf("done %llu %llu\n", (unsigned long long)t_host, (unsigned long long)t_cupti);
    fflush(stdout);
    CHECK_EQ(C.flush(PI_CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), PI_CUPTI_SUCCESS);
    printf("ok cupti\n");
    return 0;
}

static void cupti_on(void)
{
    g_main = pthread_self();
    CHECK(load_cupti());
    CHECK_EQ(C.reg(buf_requested, buf_completed), PI_CUPTI_SUCCESS);
    CHECK_EQ(C.enable(PI_CUPTI_KIND_CONCURRENT_KERNEL), PI_CUPTI_SUCCESS);
    CHECK_EQ(C.enable(PI_CUPTI_KIND_EXTERNAL_CORRELATION), PI_CUPTI_SUCCESS);
    CHECK_EQ(C.enable(PI_CUPTI_KIND_DRIVER), PI_CUPTI_SUCCESS);
}

/* two threads push their own ids around their own launches: each external id must pair with a call
 * made by the thread that pushed it (per-thread stacks) */
static CUfunction g_tf;
static CUcontext g_ctx;
static void *thread_main(void *arg)
{
    int idx = (int)(intptr_t)arg;
    CHECK_EQ(cuCtxSetCurrent(g_ctx), CUDA_SUCCESS);
    CUstream s;
    CHECK_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
    pthread_mutex_lock(&g_out);
    printf("thread %d %ld\n", idx, (long)syscall(SYS_gettid));
    pthread_mutex_unlock(&g_out);
    for (int i = 0; i < 50; i++) {
        uint64_t id = (uint64_t)(idx + 1) * 1000 + (uint64_t)i;
        with_ext(id);
        with_ext(id + 100000); /* nested: the top of the stack is what the call gets */
        launch(g_tf, s, 1);
        end_ext(id + 100000);
        end_ext(id);
    }
    CHECK_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
    return NULL;
}

static int case_threads(void)
{
    cupti_on();
    setup();
    CHECK_EQ(cuDevicePrimaryCtxRetain(&g_ctx, 0), CUDA_SUCCESS);
    g_tf = kernel("k_thread");
    CHECK_EQ(simcuSetKernelDuration(g_tf, 20000), CUDA_SUCCESS);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&t[i], NULL, thread_main, (void *)(intptr_t)i) == 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    CHECK_EQ(C.flush(PI_CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), PI_CUPTI_SUCCESS);
    printf("ok threads\n");
    return 0;
}

/* a forked child gets its own records only, and its CUPTI thread works */
static int case_fork(void)
{
    cupti_on();
    setup();
    CUfunction f = kernel("k_fork");
    CHECK_EQ(simcuSetKernelDuration(f, 3000000), CUDA_SUCCESS);
    with_ext(1);
    launch(f, NULL, 1); /* still running at the fork */
    end_ext(1);
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        printf("child\n");
        with_ext(2);
        launch(f, NULL, 1);
        end_ext(2);
        CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
        CHECK_EQ(C.flush(PI_CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), PI_CUPTI_SUCCESS);
        printf("child end\n");
        fflush(stdout);
        _exit(0);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    printf("parent\n");
    CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    CHECK_EQ(C.flush(PI_CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), PI_CUPTI_SUCCESS);
    printf("ok fork\n");
    return 0;
}

/* the device-clock functions through dlsym and cuGetProcAddress_v2, as the jax- and tf-like paths reach them */
typedef CUresult (*getproc_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
static int case_procaddr(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    CHECK(h);
    getproc_fn gp = (getproc_fn)dlsym(h, "cuGetProcAddress_v2");
    CHECK(gp);
    /* name asked for -> the exported symbol it must resolve to */
    const char *names[][2] = {{"simcuSetKernelDuration", "simcuSetKernelDuration"},
                              {"simcuSetNextLaunchDuration", "simcuSetNextLaunchDuration"},
                              {"simcuSetDeviceModel", "simcuSetDeviceModel"},
                              {"simcuGetDeviceTime", "simcuGetDeviceTime"},
                              {"cuStreamBeginCapture", "cuStreamBeginCapture_v2"},
                              {"cuStreamEndCapture", "cuStreamEndCapture"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult st;
        CHECK_EQ(gp(names[i][0], &fn, 13000, 0, &st), CUDA_SUCCESS);
        CHECK(fn != NULL && fn == dlsym(h, names[i][1]));
    }
    void *ptsz = NULL;
    CHECK_EQ(gp("cuStreamBeginCapture", &ptsz, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL), CUDA_SUCCESS);
    CHECK(ptsz == dlsym(h, "cuStreamBeginCapture_v2_ptsz"));
    /* one launch duration set through the resolved pointer, seen on the device clock */
    CUresult (*set_next)(unsigned long long) = NULL;
    CHECK_EQ(gp("simcuSetNextLaunchDuration", (void **)&set_next, 13000, 0, NULL), CUDA_SUCCESS);
    CUresult (*get_time)(unsigned long long *, unsigned long long *) = NULL;
    CHECK_EQ(gp("simcuGetDeviceTime", (void **)&get_time, 13000, 0, NULL), CUDA_SUCCESS);
    setup();
    CUfunction f = kernel("k_procaddr");
    unsigned long long t0, c0;
    CHECK_EQ(get_time(&t0, &c0), CUDA_SUCCESS);
    CHECK(c0 > t0);
    CHECK_EQ(set_next(30000000), CUDA_SUCCESS);
    launch(f, NULL, 1);
    CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    CHECK(mono() >= t0 + 30000000);
    printf("ok procaddr\n");
    return 0;
}

/* graph nodes through the callback API: a node created inside a captured call (GRAPHNODE_CREATED) is
 * tied to the external id of that call; instantiation's GRAPHNODE_CLONED ties each executable node to
 * its original; a replayed record's graphNodeId then leads back to the captured call */
static uint64_t g_current_ext;           /* the id the program pushed around its current call */
static uint64_t g_created[16][2], g_cloned[16][2];
static int g_ncreated, g_ncloned;
static struct {
    pi_cuptiSubscribe_fn subscribe;
    pi_cuptiEnableCallback_fn enable_cb;
    pi_cuptiEnableDomain_fn enable_domain;
    pi_cuptiGetGraphNodeId_fn node_id;
    pi_cuptiGetGraphId_fn graph_id;
    pi_cuptiGetGraphExecId_fn exec_id;
} CB;

static void on_resource(void *ud, uint32_t domain, uint32_t cbid, const void *cbdata)
{
    const pi_cupti_resource_data *rd = cbdata;
    const pi_cupti_graph_data *gd = rd->resourceDescriptor;
    CHECK_EQ(domain, PI_CUPTI_CB_DOMAIN_RESOURCE);
    CHECK(ud == (void *)&g_current_ext);
    uint64_t id = 0, orig = 0;
    CHECK_EQ(CB.node_id(gd->node, &id), PI_CUPTI_SUCCESS);
    if (cbid == PI_CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED) {
        g_created[g_ncreated][0] = id;
        g_created[g_ncreated++][1] = g_current_ext;
        printf("created %llu %llu %d\n", (unsigned long long)id, (unsigned long long)g_current_ext, gd->nodeType);
    } else if (cbid == PI_CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED) {
        CHECK_EQ(CB.node_id(gd->originalNode, &orig), PI_CUPTI_SUCCESS);
        uint32_t exec = 0;
        CHECK_EQ(CB.exec_id(gd->graphExec, &exec), PI_CUPTI_SUCCESS);
        g_cloned[g_ncloned][0] = id;
        g_cloned[g_ncloned++][1] = orig;
        printf("cloned %llu %llu %u\n", (unsigned long long)id, (unsigned long long)orig, exec);
    }
}

static int case_graphcb(void)
{
    cupti_on();
    void *h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD);
    CHECK(h);
    CHECK((*(void **)&CB.subscribe = dlsym(h, "cuptiSubscribe")));
    CHECK((*(void **)&CB.enable_cb = dlsym(h, "cuptiEnableCallback")));
    CHECK((*(void **)&CB.enable_domain = dlsym(h, "cuptiEnableDomain")));
    CHECK((*(void **)&CB.node_id = dlsym(h, "cuptiGetGraphNodeId")));
    CHECK((*(void **)&CB.graph_id = dlsym(h, "cuptiGetGraphId")));
    CHECK((*(void **)&CB.exec_id = dlsym(h, "cuptiGetGraphExecId")));
    pi_cupti_subscriber sub, other;
    CHECK_EQ(CB.subscribe(&sub, on_resource, &g_current_ext), PI_CUPTI_SUCCESS);
    CHECK_EQ(CB.subscribe(&other, on_resource, NULL), PI_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
    CHECK_EQ(CB.enable_cb(1, sub, PI_CUPTI_CB_DOMAIN_RESOURCE, PI_CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED), PI_CUPTI_SUCCESS);
    CHECK_EQ(CB.enable_cb(1, sub, PI_CUPTI_CB_DOMAIN_RESOURCE, PI_CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED), PI_CUPTI_SUCCESS);
    CHECK_EQ(CB.enable_cb(1, sub, 1 /* DRIVER_API */, 307), PI_CUPTI_ERROR_NOT_COMPATIBLE);
    CHECK_EQ(CB.enable_domain(1, sub, 6 /* STATE */), PI_CUPTI_ERROR_NOT_COMPATIBLE);
    setup();
    CUstream st;
    CHECK_EQ(cuStreamCreate(&st, 0), CUDA_SUCCESS);
    CUfunction f = kernel("k_cb");
    CHECK_EQ(simcuSetKernelDuration(f, 100000), CUDA_SUCCESS);
    CHECK_EQ(C.enable(PI_CUPTI_KIND_MEMSET), PI_CUPTI_SUCCESS);
    CUdeviceptr d;
    CHECK_EQ(cuMemAlloc_v2(&d, 4096), CUDA_SUCCESS);
    CHECK_EQ(cuStreamBeginCapture_v2(st, 0), CUDA_SUCCESS);
    g_current_ext = 500;
    with_ext(500);
    launch(f, st, 1);
    end_ext(500);
    g_current_ext = 501;
    with_ext(501);
    CHECK_EQ(cuMemsetD8Async(d, 1, 4096, st), CUDA_SUCCESS);
    end_ext(501);
    g_current_ext = 502;
    with_ext(502);
    launch(f, st, 1);
    end_ext(502);
    g_current_ext = 0;
    CUgraph gr;
    CHECK_EQ(cuStreamEndCapture(st, &gr), CUDA_SUCCESS);
    uint32_t gid = 0;
    CHECK_EQ(CB.graph_id(gr, &gid), PI_CUPTI_SUCCESS);
    printf("graph %u\n", gid);
    CUgraphExec ex;
    CHECK_EQ(cuGraphInstantiateWithFlags(&ex, gr, 0), CUDA_SUCCESS);
    with_ext(600);
    CHECK_EQ(cuGraphLaunch(ex, st), CUDA_SUCCESS);
    end_ext(600);
    CHECK_EQ(cuStreamSynchronize(st), CUDA_SUCCESS);
    CHECK_EQ(C.flush(PI_CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), PI_CUPTI_SUCCESS);
    CHECK_EQ(g_ncreated, 3);
    CHECK_EQ(g_ncloned, 3);
    printf("ok graphcb\n");
    return 0;
}

/* Disable stops a kind; KERNEL instead of CONCURRENT_KERNEL gives kind-3 records */
static int case_kinds(void)
{
    cupti_on();
    setup();
    CUfunction f = kernel("k_kinds");
    with_ext(1);
    launch(f, NULL, 1);
    end_ext(1);
    CHECK_EQ(C.disable(PI_CUPTI_KIND_CONCURRENT_KERNEL), PI_CUPTI_SUCCESS);
    with_ext(2);
    launch(f, NULL, 1); /* no kernel kind enabled: no device record */
    end_ext(2);
    CHECK_EQ(C.enable(PI_CUPTI_KIND_KERNEL), PI_CUPTI_SUCCESS);
    with_ext(3);
    launch(f, NULL, 1);
    end_ext(3);
    CHECK_EQ(C.disable(PI_CUPTI_KIND_DRIVER), PI_CUPTI_SUCCESS);
    with_ext(4);
    launch(f, NULL, 1); /* a kernel record, but no API or external-correlation record */
    end_ext(4);
    CHECK_EQ(C.disable(77), PI_CUPTI_ERROR_INVALID_KIND);
    CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    CHECK_EQ(C.flush(0), PI_CUPTI_SUCCESS);
    printf("ok kinds\n");
    return 0;
}

/* the program's own work, which must run on whatever CUPTI says */
static void work(void)
{
    setup();
    CUfunction f = kernel("k_work");
    g_counter = 0;
    launch(f, NULL, 3);
    CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    CHECK_EQ(g_counter, 3);
    printf("work ok\n");
}

static int case_refused(const char *name)
{
    if (!load_cupti()) {
        printf("absent\n");
    } else {
        printf("register %d\n", C.reg(buf_requested, buf_completed));
        printf("enable %d\n", C.enable(PI_CUPTI_KIND_CONCURRENT_KERNEL));
        pi_cuptiSubscribe_fn subscribe = (pi_cuptiSubscribe_fn)dlsym(g_cupti, "cuptiSubscribe");
        pi_cupti_subscriber sub;
        if (subscribe) printf("subscribe %d\n", subscribe(&sub, NULL, NULL));
        uint64_t t;
        printf("timestamp %d\n", C.ts(&t));
    }
    work();
    printf("ok %s\n", name);
    return 0;
}

/* ---------------- timing, self-checked against the durations this program set ---------------- */

static int case_timing(void)
{
    setup();
    CUstream a, b;
    CHECK_EQ(cuStreamCreate(&a, 0), CUDA_SUCCESS);
    CHECK_EQ(cuStreamCreate(&b, 0), CUDA_SUCCESS);
    CUfunction f = kernel("k_five_ms");
    const uint64_t D = 20000000; /* 20 ms: the host-side upper bounds below hold on a loaded machine */
    CHECK_EQ(simcuSetKernelDuration(f, D), CUDA_SUCCESS);

    /* 1. queued in order; sync waits for the last end; the host ran ahead */
    uint64_t t0 = mono();
    for (int i = 0; i < 2; i++) launch(f, a, 1);
    uint64_t t_enq = mono();
    CHECK(t_enq - t0 < D); /* two launches enqueue faster than one kernel runs */
    CHECK_EQ(cuStreamQuery(a), 600 /* NOT_READY */);
    CHECK_EQ(cuStreamSynchronize(a), CUDA_SUCCESS);
    uint64_t t_sync = mono();
    CHECK(t_sync >= t0 + 2 * D);
    CHECK_EQ(cuStreamQuery(a), CUDA_SUCCESS);
    printf("sync %llu %llu\n", (unsigned long long)t0, (unsigned long long)t_sync);

    /* 2. events on the device clock. They and the two kernels between them are queued behind a blocker, so
       the host's own pace cannot open gaps on the device: on an idle stream a kernel starts when it is
       launched, and a host descheduled between two calls (a loaded machine; SIMCLOCK_STALL_MS makes one)
       would put that delay between the events. */
    CUevent e0, e1;
    CHECK_EQ(cuEventCreate(&e0, 0), CUDA_SUCCESS);
    CHECK_EQ(cuEventCreate(&e1, 0), CUDA_SUCCESS);
    const uint64_t B = 10 * D; /* the blocker */
    const char *stall = getenv("SIMCLOCK_STALL_MS");
    uint64_t t2 = mono();
    CHECK_EQ(simcuSetNextLaunchDuration(B), CUDA_SUCCESS);
    launch(f, b, 1); /* on the other stream, which stream a then waits for: a's 2-deep queue holds the two kernels */
    CHECK_EQ(cuEventRecord(e1, b), CUDA_SUCCESS);
    CHECK_EQ(cuStreamWaitEvent(a, e1, 0), CUDA_SUCCESS);
    CHECK_EQ(cuEventRecord(e0, a), CUDA_SUCCESS);
    if (stall) usleep((useconds_t)(atoi(stall) * 1000));
    launch(f, a, 1);
    CHECK_EQ(simcuSetNextLaunchDuration(2 * D), CUDA_SUCCESS);
    launch(f, a, 1);
    CHECK_EQ(cuEventRecord(e1, a), CUDA_SUCCESS);
    uint64_t t2e = mono();
    float ms = 0;
    if (t2e - t2 < B) {
        /* all enqueued while the blocker ran (the host clock says so): exact device times */
        CHECK_EQ(cuEventElapsedTime(&ms, e0, e1), 600 /* NOT_READY: not reached yet */);
        CHECK_EQ(cuEventSynchronize(e1), CUDA_SUCCESS);
        CHECK_EQ(cuEventElapsedTime(&ms, e0, e1), CUDA_SUCCESS);
        CHECK(ms > 59.99f && ms < 60.01f); /* D + 2D of device time */
    } else {
        /* the host stalled longer than the blocker: at least the kernels' time, at most that plus the stall */
        CHECK_EQ(cuEventSynchronize(e1), CUDA_SUCCESS);
        CHECK_EQ(cuEventElapsedTime(&ms, e0, e1), CUDA_SUCCESS);
        CHECK(ms > 59.99f && ms < 60.01f + (float)((t2e - t2) / 1e6));
        printf("stalled %llu\n", (unsigned long long)(t2e - t2));
    }

    /* 3. stream b waits for an event of stream a */
    launch(f, a, 1);
    CHECK_EQ(cuEventRecord(e0, a), CUDA_SUCCESS);
    CHECK_EQ(cuStreamWaitEvent(b, e0, 0), CUDA_SUCCESS);
    uint64_t t3 = mono();
    launch(f, b, 1);
    CHECK_EQ(cuStreamSynchronize(b), CUDA_SUCCESS);
    CHECK(mono() >= t3 + 2 * D);

    /* 4. the bounded queue: SIMCUDA_QUEUE_DEPTH=2 (set by the test) makes the third launch wait */
    CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    uint64_t t4 = mono();
    launch(f, a, 1);
    launch(f, a, 1);
    uint64_t t_two = mono();
    launch(f, a, 1);
    uint64_t t_three = mono();
    CHECK(t_two - t4 < D);
    CHECK(t_three >= t4 + D); /* blocked until the first ended */
    CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    CHECK(mono() >= t4 + 3 * D);

    /* 5. copy engines: an H2D copy (40 ms at 0.025 GB/s for 1 MB) overlaps a kernel on another stream;
     *    a second H2D copy on a third stream queues behind the first on the one H2D engine */
    CUstream c;
    CHECK_EQ(cuStreamCreate(&c, 0), CUDA_SUCCESS);
    CHECK_EQ(simcuSetDeviceModel("h2d_gbps", 0.025), CUDA_SUCCESS); /* 1 MB: 40 ms */
    CHECK_EQ(simcuSetDeviceModel("nonsense", 1), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr d;
    CHECK_EQ(cuMemAlloc_v2(&d, 2 << 20), CUDA_SUCCESS);
    void *h;
    CHECK_EQ(cuMemAllocHost_v2(&h, 2 << 20), CUDA_SUCCESS);
    uint64_t t5 = mono();
    CHECK_EQ(cuMemcpyHtoDAsync_v2(d, h, 1000000, a), CUDA_SUCCESS);
    launch(f, b, 1);
    CHECK_EQ(cuMemcpyHtoDAsync_v2(d + 1000000, h, 1000000, c), CUDA_SUCCESS);
    CHECK_EQ(cuStreamSynchronize(b), CUDA_SUCCESS);
    uint64_t t_b = mono();
    CHECK(t_b < t5 + 40000000); /* the kernel did not wait for the copy */
    CHECK_EQ(cuStreamSynchronize(a), CUDA_SUCCESS);
    CHECK(mono() >= t5 + 40000000);
    CHECK_EQ(cuStreamSynchronize(c), CUDA_SUCCESS);
    CHECK(mono() >= t5 + 80000000); /* one H2D engine: the copies ran one after the other */
    /* a synchronous copy returns only when it is done */
    uint64_t t6 = mono();
    CHECK_EQ(cuMemcpyHtoD_v2(d, h, 500000), CUDA_SUCCESS);
    CHECK(mono() >= t6 + 20000000);
    CHECK_EQ(simcuSetDeviceModel("h2d_gbps", 0), CUDA_SUCCESS);
    printf("ok timing\n");
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *c = argc > 1 ? argv[1] : "";
    if (!strcmp(c, "cupti")) return case_cupti(argc > 2 ? argv[2] : "full");
    if (!strcmp(c, "busy") || !strcmp(c, "fail") || !strcmp(c, "absent")) return case_refused(c);
    if (!strcmp(c, "timing")) return case_timing();
    if (!strcmp(c, "threads")) return case_threads();
    if (!strcmp(c, "fork")) return case_fork();
    if (!strcmp(c, "kinds")) return case_kinds();
    if (!strcmp(c, "procaddr")) return case_procaddr();
    if (!strcmp(c, "graphcb")) return case_graphcb();
    fprintf(stderr, "unknown case %s\n", c);
    return 2;
}
