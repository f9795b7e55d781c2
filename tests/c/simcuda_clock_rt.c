/* simcuda_clock_rt.c — the device clock through the runtime (libcudart through the PLT): per-stub
 * durations, per-launch durations, events, stream capture + graph replay, synchronous cudaMemcpy and
 * cudaDeviceSynchronize.  Self-checked against the durations it sets; prints "ok runtime".
 * Run with SIMCUDA_H2D_GBPS=0.1 (1 MB takes 10 ms). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "pi_cuda.h"
#include "simcuda.h"

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); exit(1); } } while (0)
#define CHECK_EQ(a, b) do { long long a_ = (long long)(a), b_ = (long long)(b); if (a_ != b_) { \
    fprintf(stderr, "%s:%d: %s = %lld, expected %lld\n", __FILE__, __LINE__, #a, a_, b_); exit(1); } } while (0)

cudaError_t cudaMalloc(void **, size_t);
cudaError_t cudaMallocHost(void **, size_t);
cudaError_t cudaMemcpy(void *, const void *, size_t, int);
cudaError_t cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t cudaStreamCreate(cudaStream_t *);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaStreamQuery(cudaStream_t);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaEventCreate(cudaEvent_t *);
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t);
cudaError_t cudaEventSynchronize(cudaEvent_t);
cudaError_t cudaEventQuery(cudaEvent_t);
cudaError_t cudaEventElapsedTime(float *, cudaEvent_t, cudaEvent_t);
cudaError_t cudaStreamBeginCapture(cudaStream_t, int);
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *);
cudaError_t cudaStreamIsCapturing(cudaStream_t, int *);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *, cudaGraph_t, unsigned long long);
cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t);
cudaError_t cudaGraphDestroy(cudaGraph_t);

static uint64_t mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int g_sum;
static void k_add(void **p) { g_sum += *(int *)p[0]; }

static void launch(cudaStream_t s, int v)
{
    void *args[] = {&v};
    CHECK_EQ(cudaLaunchKernel((const void *)k_add, (dim3){1, 1, 1}, (dim3){32, 1, 1}, args, 0, s), cudaSuccess);
}

int main(void)
{
    const uint64_t MS = 4000000; /* the time unit: 4 ms, long enough that the host's own run-ahead
                                    * checks hold on a loaded machine */
    size_t off = 0, sz = sizeof(int);
    CHECK_EQ(simcudaRegisterFunction((const void *)k_add, "k_add", k_add, 1, &off, &sz), cudaSuccess);
    CHECK_EQ(simcudaSetKernelDuration((const void *)k_add, 2 * MS), cudaSuccess);
    CHECK_EQ(simcudaSetKernelDuration((const void *)main, MS), cudaErrorInvalidDeviceFunction);
    cudaStream_t s;
    CHECK_EQ(cudaStreamCreate(&s), cudaSuccess);
    cudaEvent_t e0, e1;
    CHECK_EQ(cudaEventCreate(&e0), cudaSuccess);
    CHECK_EQ(cudaEventCreate(&e1), cudaSuccess);

    /* per stub 2 units, one launch 3 units; e0 is reached when the first kernel ends, e1 when the second
     * does: 3 units of device time apart (an event on an idle stream would be reached at once) */
    uint64_t t0 = mono();
    launch(s, 1);
    CHECK_EQ(cudaEventRecord(e0, s), cudaSuccess);
    CHECK_EQ(simcudaSetNextLaunchDuration(3 * MS), cudaSuccess);
    launch(s, 1);
    CHECK_EQ(cudaEventRecord(e1, s), cudaSuccess);
    CHECK_EQ(cudaEventQuery(e1), 600); /* cudaErrorNotReady */
    CHECK_EQ(cudaStreamQuery(s), 600);
    CHECK_EQ(cudaEventSynchronize(e1), cudaSuccess);
    CHECK(mono() >= t0 + 5 * MS);
    float ms = 0;
    CHECK_EQ(cudaEventElapsedTime(&ms, e0, e1), cudaSuccess);
    CHECK(ms > 11.999f && ms < 12.001f); /* 3 units */

    /* capture: nothing runs; each replay runs 2 + 1 units (the per-launch duration is kept in the node) */
    CHECK_EQ(cudaStreamBeginCapture(s, 0), cudaSuccess);
    int cap = 0;
    CHECK_EQ(cudaStreamIsCapturing(s, &cap), cudaSuccess);
    CHECK_EQ(cap, 1);
    launch(s, 10);
    CHECK_EQ(simcudaSetNextLaunchDuration(MS), cudaSuccess);
    launch(s, 100);
    cudaGraph_t g;
    CHECK_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
    CHECK_EQ(g_sum, 2);
    cudaGraphExec_t ex;
    CHECK_EQ(cudaGraphInstantiate(&ex, g, 0), cudaSuccess);
    uint64_t t1 = mono();
    for (int i = 0; i < 3; i++) CHECK_EQ(cudaGraphLaunch(ex, s), cudaSuccess);
    CHECK(mono() < t1 + 3 * MS); /* the host ran ahead */
    CHECK_EQ(cudaStreamSynchronize(s), cudaSuccess);
    CHECK(mono() >= t1 + 9 * MS);
    CHECK_EQ(g_sum, 2 + 3 * 110);
    CHECK_EQ(cudaGraphExecDestroy(ex), cudaSuccess);
    CHECK_EQ(cudaGraphDestroy(g), cudaSuccess);

    /* cudaMemcpy is synchronous: it returns when the copy (10 ms at 0.1 GB/s) is done */
    void *d, *h;
    CHECK_EQ(cudaMalloc(&d, 1 << 20), cudaSuccess);
    CHECK_EQ(cudaMallocHost(&h, 1 << 20), cudaSuccess);
    uint64_t t2 = mono();
    CHECK_EQ(cudaMemcpy(d, h, 1000000, cudaMemcpyHostToDevice), cudaSuccess);
    CHECK(mono() >= t2 + 10000000); /* 1 MB at 0.1 GB/s */

    /* cudaDeviceSynchronize waits for every stream */
    uint64_t t3 = mono();
    launch(s, 1);
    launch(NULL, 1);
    CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
    CHECK(mono() >= t3 + 4 * MS); /* the legacy-stream launch waits for s's */
    printf("ok runtime\n");
    return 0;
}
