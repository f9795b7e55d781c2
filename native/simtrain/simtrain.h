/*
 * simtrain.h — a training-like workload on simcuda that reaches CUDA through
 * one framework's real call path, and counts exactly what it did (the truth).
 *
 *   torch: libcudart through the PLT (cudaMalloc/cudaFree, or cudaMallocAsync/
 *          cudaFreeAsync when PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF has
 *          backend:cudaMallocAsync), cudaLaunchKernel, cudaMemcpyAsync,
 *          cudaMemsetAsync, pinned staging buffer from cudaMallocHost.
 *   jax:   dlopen("libcuda.so.1") + dlsym: cuMemAlloc_v2, cuMemFree_v2,
 *          cuLaunchKernel (packed `extra` for some kernels, kernelParams for
 *          others), cuMemcpyHtoD_v2 / cuMemcpyDtoH_v2, cuMemsetD8_v2.
 *   tf:    dlopen + dlsym("cuGetProcAddress_v2"), then every driver function
 *          through it: cuMemAllocFromPoolAsync (default pool, and a created
 *          pool for workspaces), cuMemFreeAsync, cuLaunchKernelEx,
 *          cuMemcpyHtoDAsync_v2 / cuMemcpyDtoHAsync_v2, cuMemsetD8Async.
 */
#ifndef SIMTRAIN_H
#define SIMTRAIN_H
#include <stdint.h>

enum simtrain_framework { SIMTRAIN_TORCH = 0, SIMTRAIN_JAX = 1, SIMTRAIN_TF = 2 };

struct simtrain_config {
    int framework;   /* enum simtrain_framework */
    int steps;
    int layers;
    double noise;    /* fraction of steps with extra, unpredictable allocations */
    uint64_t seed;
    int device_time; /* enum simtrain_device_time */
    /* out of memory the way a framework's allocator does (simtrain.c: oom_request) */
    int oom;              /* enum simtrain_oom */
    int oom_step;         /* the step that asks for too much (-1: the last step) */
    const char *oom_truth; /* JSON lines, one per failed request (NULL: not written) */
    int device;      /* device ordinal the loop runs on (cudaSetDevice / cuDeviceGet) */
    unsigned noise_kinds; /* what a noisy step does (SIMTRAIN_NOISE_*); 0 = SIMTRAIN_NOISE_EXTRA */
    int oom_retry;   /* enum simtrain_oom_retry: what the allocator does after a failed request */
    int graphs;      /* > 0: CUDA graphs (torch path, cudaMallocAsync backend): this many eager warm-up steps,
                        then one step captured into a graph, replayed for every later step */
};

/* SIMTRAIN_OOM_RETRY_RELEASE: release the cached blocks, retry the same request (PyTorch, XLA).
 * SIMTRAIN_OOM_RETRY_SMALLER: keep the cache and ask for a smaller batch instead (half the free memory),
 * which succeeds: the request right after the failure is a new allocation (NEAR only). */
enum simtrain_oom_retry { SIMTRAIN_OOM_RETRY_RELEASE = 0, SIMTRAIN_OOM_RETRY_SMALLER = 1 };

enum simtrain_noise {
    SIMTRAIN_NOISE_EXTRA = 1,   /* an evaluation pass or a logging buffer after the step */
    SIMTRAIN_NOISE_MISSING = 2, /* one layer's forward workspace is not allocated (the output serves) */
    SIMTRAIN_NOISE_STREAM2 = 4  /* the input is freed on a second stream (torch async backend and tf) */
};

/* With SIMCUDA_CHECK=1 in the environment, simtrain writes a pattern of its own into every block it
 * allocates (and again after each copy or memset into it) and checks it before the block is freed:
 * any other writer of those bytes while the block is live makes simtrain_run fail with a message. */

/* SIMTRAIN_OOM_NEAR: at oom_step a request larger than the free memory fails, the cached blocks
 * are released (freed for real), the same request is retried and succeeds; the run goes on.
 * SIMTRAIN_OOM_FINAL: the request is larger than free + cached: the retry fails too and the run
 * ends with an out-of-memory error (simtrain_run returns non-zero). */
enum simtrain_oom { SIMTRAIN_OOM_NONE = 0, SIMTRAIN_OOM_NEAR = 1, SIMTRAIN_OOM_FINAL = 2 };

/* SIMTRAIN_DEVICE_H100_LIKE: kernels get device durations on simcuda's device clock (lognormal, sigma 0.7,
 * medians 7-43 us by kernel kind, 2 % of them 0.4-1.2 ms), 12 us of host "dispatch" work before each
 * launch, 5 us launch latency, copies at 25 GB/s + 10 us, and a stream synchronisation at the end of
 * every step (a loop's .item()), so that kernels start on the GPU later than their launch calls, as on
 * the H100 (torch.profiler there: 80 us median, 826 us p90, 1.65 ms p99).  Measured here (torch and tf
 * paths, 6 layers, 60 steps): median 0.10-0.13 ms, p90 0.81-0.87 ms, p99 1.8-1.9 ms; the jax path's
 * synchronous copies and memsets keep its lag lower (median 13 us, p99 1.1 ms).
 * docs/simcuda-device-clock.md. */
enum simtrain_device_time { SIMTRAIN_DEVICE_OFF = 0, SIMTRAIN_DEVICE_H100_LIKE = 1 };

#define SIMTRAIN_MAX_API 32

struct simtrain_truth {
    uint64_t allocs, frees, bytes, accesses, launches;
    uint64_t allocs_per_step; /* allocations of one regular step */
    uint64_t noise_steps;
    uint64_t peak_live_bytes; /* most device bytes (not pinned host) the loop held at once */
    uint64_t by_api[SIMTRAIN_MAX_API]; /* index: simtrain_api_name(i) */
    char error[256];                   /* set when simtrain_run returns non-zero */
    uint64_t failed_allocs;            /* allocation calls that failed (out-of-memory mode) */
    uint64_t result_hash;              /* the trained weights' and moments' first values (FNV-1a) */
    /* --graphs: what one replay of the captured step does, and how many replays ran */
    uint64_t graph_replays, graph_allocs, graph_frees, graph_bytes, graph_accesses, graph_launches;
};

/* number of API names, the name of API i, and its class:
 * 'a' allocation, 'f' free, 'l' launch, 'c' copy, 'm' memset, 'o' a memory-pool object (create/destroy) */
int simtrain_api_count(void);
const char *simtrain_api_name(int i);
int simtrain_api_class(int i);

/* runs the loop in this process; 0 on success */
int simtrain_run(const struct simtrain_config *cfg, struct simtrain_truth *out);

#endif
