/* replay.c — see replay.h */
#include "replay.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../simcuda/simcuda.h"

cudaError_t cudaMalloc(void **, size_t);
cudaError_t cudaFree(void *);
cudaError_t cudaMallocAsync(void **, size_t, cudaStream_t);
cudaError_t cudaFreeAsync(void *, cudaStream_t);
cudaError_t cudaMallocHost(void **, size_t);
cudaError_t cudaFreeHost(void *);
cudaError_t cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t cudaMemcpyAsync(void *, const void *, size_t, int, cudaStream_t);
cudaError_t cudaStreamCreate(cudaStream_t *);
cudaError_t cudaStreamDestroy(cudaStream_t);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaEventCreate(cudaEvent_t *);
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t);
cudaError_t cudaEventSynchronize(cudaEvent_t);
cudaError_t cudaEventElapsedTime(float *, cudaEvent_t, cudaEvent_t);
cudaError_t cudaEventDestroy(cudaEvent_t);
cudaError_t cudaSetDevice(int);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);

#define SAMPLE_STRIDE ((uint64_t)1 << 20)

/* the run's state, read by the kernel (kernels run on the launching thread in simcuda) */
static const pi_replay_in *g_in;
static pi_replay_out *g_out;
static uint64_t *g_ptr, *g_size, *g_tag;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t)
{
    struct timespec ts = {(time_t)(t / 1000000000ull), (long)(t % 1000000000ull)};
    while (now_ns() < t && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

/* the value written at sampled word k of a block by op `op` */
static uint64_t pattern(uint64_t tag, uint64_t slot, uint64_t k)
{
    return (tag * 0x9E3779B97F4A7C15ull) ^ (slot << 20) ^ k ^ 0x5A5A000000000000ull;
}

static void check_block(int64_t op, int64_t slot, uint64_t p)
{
    uint64_t size = g_size[slot];
    if (size < 8 || !p) return;
    uint64_t last = (size - 8) & ~(uint64_t)7;
    uint64_t n = 1 + last / SAMPLE_STRIDE;              /* every MiB ... */
    if (last % SAMPLE_STRIDE) n++;                      /* ... and the last word, when it is another one */
    uint64_t old = g_tag[slot], tag = (uint64_t)op + 1;
    for (uint64_t k = 0; k < n; k++) {
        uint64_t off = k * SAMPLE_STRIDE < last ? k * SAMPLE_STRIDE : last;
        uint64_t *w = (uint64_t *)(uintptr_t)(p + off);
        if (old) {
            g_out->checked_words++;
            if (*w != pattern(old, (uint64_t)slot, k)) {
                if (!g_out->check_errors) g_out->first_error_op = op;
                g_out->check_errors++;
            }
        }
        *w = pattern(tag, (uint64_t)slot, k);
    }
    g_tag[slot] = tag;
}

static void kernel(void **params)
{
    int64_t op;
    memcpy(&op, params[0], 8);
    if (!g_in || op < 0 || op >= g_in->n_ops) return;
    if (!g_in->check) return;
    int64_t first = g_in->b[op], n = g_in->c[op];
    for (int64_t i = 0; i < n && i < PI_REPLAY_MAX_ARGS; i++) {
        int64_t slot = g_in->acc[first + i];
        uint64_t p;
        memcpy(&p, params[1 + i], 8);
        check_block(op, slot, p);
    }
}

int pi_replay_run(const pi_replay_in *in, pi_replay_out *out, char *err, int errlen)
{
    memset(out, 0, sizeof *out);
    out->first_error_op = -1;
    int rc = -1;
    unsigned np = 1 + PI_REPLAY_MAX_ARGS;
    size_t offs[1 + PI_REPLAY_MAX_ARGS], sizes[1 + PI_REPLAY_MAX_ARGS];
    for (unsigned i = 0; i < np; i++) offs[i] = 8 * i, sizes[i] = 8;
    char *stubs = calloc((size_t)in->n_kernels + 1, 1);
    g_ptr = calloc((size_t)in->n_slots + 1, sizeof *g_ptr);
    g_size = calloc((size_t)in->n_slots + 1, sizeof *g_size);
    g_tag = calloc((size_t)in->n_slots + 1, sizeof *g_tag);
    cudaStream_t *st = calloc((size_t)in->n_streams + 1, sizeof *st);
    void *host = NULL;
    uint64_t host_size = 0;
    cudaEvent_t e0 = NULL, e1 = NULL;
    if (!stubs || !g_ptr || !g_size || !g_tag || !st) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    g_in = in;
    g_out = out;
    if (cudaSetDevice(0) != 0) {
        snprintf(err, errlen, "cudaSetDevice(0) failed: is simcuda on the library path?");
        goto done;
    }
    for (int64_t k = 0; k < in->n_kernels; k++) {
        if (simcudaRegisterFunction(&stubs[k], in->kernel_names[k], kernel, np, offs, sizes) != 0) {
            snprintf(err, errlen, "cannot register kernel %lld (simcuda's runtime is needed)", (long long)k);
            goto done;
        }
    }
    for (int64_t s = 1; s < in->n_streams; s++)
        if (cudaStreamCreate(&st[s]) != 0) {
            snprintf(err, errlen, "cudaStreamCreate failed");
            goto done;
        }
    for (int64_t i = 0; i < in->n_ops; i++)   /* the largest copy's host side */
        if (in->kind[i] == PI_RP_COPY && (uint64_t)in->c[i] > host_size) host_size = (uint64_t)in->c[i];
    if (host_size && cudaMallocHost(&host, host_size) != 0) host = NULL;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    int64_t last_compute = -1;   /* the device's end is the end of the last launch or copy */
    for (int64_t i = 0; i < in->n_ops; i++)
        if (in->kind[i] == PI_RP_LAUNCH || in->kind[i] == PI_RP_COPY) last_compute = i;
    uint64_t t0 = now_ns();
    cudaEventRecord(e0, NULL);
    for (int64_t i = 0; i < in->n_ops; i++) {
        if (in->speed > 0) {
            uint64_t due = t0 + (uint64_t)((double)in->t[i] / in->speed);
            uint64_t now = now_ns();
            if (now < due) sleep_until(due);
            else if ((double)(now - due) > out->late_ns) {
                out->late_ns = (double)(now - due);
                out->latest_op = i;
            }
        }
        cudaStream_t s = st[in->stream[i] >= 0 && in->stream[i] < in->n_streams ? in->stream[i] : 0];
        int64_t a = in->a[i];
        int r = 0;
        switch (in->kind[i]) {
        case PI_RP_ALLOC: {
            uint64_t size = (uint64_t)in->b[i];
            void *p = NULL;
            CUdeviceptr dp = 0;
            if (in->c[i] == PI_RP_API_ASYNC) r = cudaMallocAsync(&p, size, s);
            else if (in->c[i] == PI_RP_API_SYNC) r = cudaMalloc(&p, size);
            else r = cuMemAlloc_v2(&dp, size), p = (void *)(uintptr_t)dp;
            if (r == 0) {
                g_ptr[a] = (uint64_t)(uintptr_t)p;
                g_size[a] = size;
                g_tag[a] = 0;
                out->allocs++;
            }
            break;
        }
        case PI_RP_FREE: {
            void *p = (void *)(uintptr_t)g_ptr[a];
            if (!p) break;
            if (in->c[i] == PI_RP_API_ASYNC) r = cudaFreeAsync(p, s);
            else if (in->c[i] == PI_RP_API_SYNC) r = cudaFree(p);
            else r = cuMemFree_v2((CUdeviceptr)(uintptr_t)p);
            if (r == 0) {
                g_ptr[a] = 0;
                out->frees++;
            }
            break;
        }
        case PI_RP_LAUNCH: {
            int64_t op = i;
            uint64_t ptrs[PI_REPLAY_MAX_ARGS] = {0};
            void *params[1 + PI_REPLAY_MAX_ARGS];
            params[0] = &op;
            for (int64_t k = 0; k < in->c[i] && k < PI_REPLAY_MAX_ARGS; k++) ptrs[k] = g_ptr[in->acc[in->b[i] + k]];
            for (unsigned k = 0; k < PI_REPLAY_MAX_ARGS; k++) params[1 + k] = &ptrs[k];
            double d = in->dur[i] > 0 ? (double)in->dur[i] : 0.0;
            if (in->speed > 0) d /= in->speed;   /* the recorded time, dilated as the pace is */
            simcudaSetNextLaunchDuration((unsigned long long)d);
            r = cudaLaunchKernel(&stubs[a], (dim3){1, 1, 1}, (dim3){1, 1, 1}, params, 0, s);
            if (r == 0) out->launches++;
            break;
        }
        case PI_RP_COPY: {
            uint64_t n = (uint64_t)in->c[i];
            uint64_t d = g_ptr[a];
            if (!d || n > g_size[a] || !host) break;
            if (in->b[i] >= 0 && g_ptr[in->b[i]] && n <= g_size[in->b[i]])
                r = cudaMemcpyAsync((void *)(uintptr_t)d, (void *)(uintptr_t)g_ptr[in->b[i]], n, 3, s);
            else if (in->dur[i])
                r = cudaMemcpyAsync(host, (void *)(uintptr_t)d, n, 2, s);
            else
                r = cudaMemcpyAsync((void *)(uintptr_t)d, host, n, 1, s);
            if (r == 0) out->copies++;
            if (r == 0 && !in->dur[i]) g_tag[a] = 0; /* copied into: no pattern there any more */
            break;
        }
        default:
            break;
        }
        if (r != 0) out->failed_calls++;
        if (i == last_compute) cudaEventRecord(e1, NULL);
    }
    out->host_ns = (double)(now_ns() - t0);
    if (last_compute < 0) cudaEventRecord(e1, NULL);
    cudaEventSynchronize(e1);
    {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, e0, e1) == 0) out->device_ns = (double)ms * 1e6;
    }
    cudaDeviceSynchronize();
    rc = 0;
done:
    for (int64_t k = 0; g_ptr && k < in->n_slots; k++) /* what the trace never freed */
        if (g_ptr[k]) {
            void *p = (void *)(uintptr_t)g_ptr[k];
            if (cudaFree(p) != 0) cuMemFree_v2((CUdeviceptr)(uintptr_t)p);
        }
    if (host) cudaFreeHost(host);
    for (int64_t s = 1; st && s < in->n_streams; s++)
        if (st[s]) cudaStreamDestroy(st[s]);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    g_in = NULL;
    free(st);
    free(g_ptr);
    free(g_size);
    free(g_tag);
    g_ptr = g_size = g_tag = NULL;
    /* stubs stay: the registered kernels keep their addresses */
    return rc;
}
