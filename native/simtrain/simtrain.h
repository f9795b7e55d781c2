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
    unsigned noise_kinds; /* what a noisy step does (SIMTRAIN_NOISE_*); 0 = SIMTRAIN_NOISE_EXTRA */
};

enum simtrain_noise {
    SIMTRAIN_NOISE_EXTRA = 1,   /* an evaluation pass or a logging buffer after the step */
    SIMTRAIN_NOISE_MISSING = 2, /* one layer's forward workspace is not allocated (the output serves) */
    SIMTRAIN_NOISE_STREAM2 = 4  /* the input is freed on a second stream (torch async backend and tf) */
};

/* With SIMCUDA_CHECK=1 in the environment, simtrain writes a pattern of its own into every block it
 * allocates (and again after each copy or memset into it) and checks it before the block is freed:
 * any other writer of those bytes while the block is live makes simtrain_run fail with a message. */

#define SIMTRAIN_MAX_API 32

struct simtrain_truth {
    uint64_t allocs, frees, bytes, accesses, launches;
    uint64_t allocs_per_step; /* allocations of one regular step */
    uint64_t noise_steps;
    uint64_t by_api[SIMTRAIN_MAX_API]; /* index: simtrain_api_name(i) */
    char error[256];                   /* set when simtrain_run returns non-zero */
};

/* number of API names, the name of API i, and its class:
 * 'a' allocation, 'f' free, 'l' launch, 'c' copy, 'm' memset */
int simtrain_api_count(void);
const char *simtrain_api_name(int i);
int simtrain_api_class(int i);

/* runs the loop in this process; 0 on success */
int simtrain_run(const struct simtrain_config *cfg, struct simtrain_truth *out);

#endif
