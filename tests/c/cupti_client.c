/*
 * cupti_client.c — a Kineto-like CUPTI client (what torch.profiler does through libkineto), linked against
 * libcupti.so.13 as Kineto is: it subscribes to the callback API, registers its own activity buffers,
 * enables CONCURRENT_KERNEL, RUNTIME and EXTERNAL_CORRELATION, pushes its own CUSTOM0 ids around its
 * launches, flushes, and counts what came back to *its* buffers.
 *
 *   cupti_client before N   the client starts recording, then N kernels "client_k" (the first kernels of
 *                           the process: the profiler is already recording when the shim's first kernel runs)
 *   cupti_client after N    N kernels "early_k" first (the shim sets CUPTI up), then the client starts
 *                           recording and N kernels "client_k"
 *
 * CLIENT_DLSYM=1: the client finds cuptiSubscribe, cuptiActivityRegisterCallbacks and cuptiActivityEnable
 * with dlopen + dlsym instead (as XLA's CUPTI wrapper does).
 *
 * Built with -DCLIENT_LIBRARY -shared, main becomes client_main and cupti_client_loader.c dlopens it with
 * RTLD_LOCAL, as Python loads torch's extension: libcupti then comes in that local scope, never the global
 * one (where RTLD_NEXT looks), which is how torch.profiler's Kineto reaches CUPTI on a real GPU.
 *
 * Prints one JSON line: client kernels launched and recorded in the client's buffers (each once), its
 * CUSTOM0 correlation records, records of kernels it did not launch while recording, and external
 * correlation records of other kinds (a CUSTOM2 id of the shim's would be one).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pi_cuda.h"
#include "pi_cupti.h"
#include "simcuda.h"

cudaError_t cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t smem, cudaStream_t s);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMalloc(void **p, size_t n);

pi_CUptiResult cuptiSubscribe(pi_cupti_subscriber *, pi_cupti_callback_fn, void *);
pi_CUptiResult cuptiActivityRegisterCallbacks(pi_cupti_buffer_requested_fn, pi_cupti_buffer_completed_fn);
pi_CUptiResult cuptiActivityEnable(uint32_t kind);
pi_CUptiResult cuptiActivityDisable(uint32_t kind);
pi_CUptiResult cuptiActivityFlushAll(uint32_t flag);
pi_CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, pi_cupti_record **record);
pi_CUptiResult cuptiActivityPushExternalCorrelationId(uint32_t kind, uint64_t id);
pi_CUptiResult cuptiActivityPopExternalCorrelationId(uint32_t kind, uint64_t *last);

#define CHECK(x) do { int rc_ = (int)(x); if (rc_) { fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #x, rc_); exit(3); } } while (0)
#define MAXK 4096

static long g_client_seen[MAXK], g_foreign, g_custom0, g_other_ext, g_buffers_ours, g_buffers_foreign;
static uint8_t *g_mine[1024];
static int g_nmine;

static void requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(8, 1 << 20);
    *size = 1 << 20;
    *max_records = 0;
    if (g_nmine < 1024) g_mine[g_nmine++] = *buffer;
}

static void completed(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx, (void)stream, (void)size;
    int mine = 0;
    for (int i = 0; i < g_nmine; i++) mine |= g_mine[i] == buffer;
    if (!mine) { g_buffers_foreign++; return; }   /* never free what we did not allocate */
    g_buffers_ours++;
    pi_cupti_record *r = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &r) == PI_CUPTI_SUCCESS) {
        if (r->kind == PI_CUPTI_KIND_CONCURRENT_KERNEL || r->kind == PI_CUPTI_KIND_KERNEL) {
            const char *name = *(const char **)((uint8_t *)r + 104);
            int idx = -1;
            if (name && sscanf(name, "client_k%d", &idx) == 1 && idx >= 0 && idx < MAXK) g_client_seen[idx]++;
            else g_foreign++;
        } else if (r->kind == PI_CUPTI_KIND_EXTERNAL_CORRELATION) {
            uint32_t ek = *(uint32_t *)((uint8_t *)r + 4);
            if (ek == PI_CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) g_custom0++;
            else g_other_ext++;
        }
    }
    free(buffer);
}

static void on_cb(void *userdata, uint32_t domain, uint32_t cbid, const void *data) {
    (void)userdata, (void)domain, (void)cbid, (void)data;
}

static void k1(void **params) { (void)params; }
static const size_t off1[] = {0}, sz1[] = {8};
static char stubs[2 * MAXK];

static void launch_n(const char *prefix, int n, int base, int push) {
    dim3 g = {1, 1, 1}, b = {32, 1, 1};
    void *a = NULL;
    CHECK(cudaMalloc(&a, 4096));
    void *args[1] = {&a};
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s%d", prefix, i);
        CHECK(simcudaRegisterFunction(&stubs[base + i], strdup(name), k1, 1, off1, sz1));
        if (push) CHECK(cuptiActivityPushExternalCorrelationId(PI_CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 1000 + i));
        CHECK(cudaLaunchKernel(&stubs[base + i], g, b, args, 0, 0));
        uint64_t last = 0;
        if (push) CHECK(cuptiActivityPopExternalCorrelationId(PI_CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last));
    }
    CHECK(cudaDeviceSynchronize());
}

static void start_client(void) {
    pi_cuptiSubscribe_fn subscribe = cuptiSubscribe;
    pi_cuptiActivityRegisterCallbacks_fn reg = cuptiActivityRegisterCallbacks;
    pi_cuptiActivityEnable_fn enable = cuptiActivityEnable;
    const char *by_dlsym = getenv("CLIENT_DLSYM");
    if (by_dlsym && by_dlsym[0] == '1') {
        void *h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
        if (!h) { fprintf(stderr, "dlopen libcupti: %s\n", dlerror()); exit(3); }
        subscribe = (pi_cuptiSubscribe_fn)dlsym(h, "cuptiSubscribe");
        reg = (pi_cuptiActivityRegisterCallbacks_fn)dlsym(h, "cuptiActivityRegisterCallbacks");
        enable = (pi_cuptiActivityEnable_fn)dlsym(h, "cuptiActivityEnable");
        if (!subscribe || !reg || !enable) { fprintf(stderr, "dlsym cupti\n"); exit(3); }
    }
    pi_cupti_subscriber sub;
    CHECK(subscribe(&sub, on_cb, NULL));
    CHECK(reg(requested, completed));
    CHECK(enable(PI_CUPTI_KIND_CONCURRENT_KERNEL));
    CHECK(enable(PI_CUPTI_KIND_RUNTIME));
    CHECK(enable(PI_CUPTI_KIND_EXTERNAL_CORRELATION));
}

#ifdef CLIENT_LIBRARY
__attribute__((visibility("default"))) int client_main(int argc, char **argv) {
#else
int main(int argc, char **argv) {
#endif
    if (argc < 3) return 2;
    int n = atoi(argv[2]);
    if (n <= 0 || n > MAXK) return 2;
    if (strcmp(argv[1], "after") == 0) launch_n("early_k", n, MAXK, 0);
    start_client();
    launch_n("client_k", n, 0, 1);
    CHECK(cuptiActivityFlushAll(PI_CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    CHECK(cuptiActivityDisable(PI_CUPTI_KIND_CONCURRENT_KERNEL));
    long recorded = 0, twice = 0;
    for (int i = 0; i < n; i++) {
        recorded += g_client_seen[i] > 0;
        twice += g_client_seen[i] > 1;
    }
    printf("{\"launched\": %d, \"recorded\": %ld, \"twice\": %ld, \"custom0\": %ld, \"foreign_kernels\": %ld, "
           "\"other_external\": %ld, \"buffers\": %ld, \"foreign_buffers\": %ld}\n", n, recorded, twice, g_custom0,
           g_foreign, g_other_ext, g_buffers_ours, g_buffers_foreign);
    return 0;
}
