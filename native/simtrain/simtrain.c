/* simtrain.c — the training-like loop over one framework's CUDA call path.
 * See simtrain.h for the call paths; every CUDA call that allocates, frees,
 * launches, copies or sets memory is counted under the exact name called. */
#include "simtrain.h"

#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../simcuda/simcuda.h"
#include "simtrain_oom.h"

/* ---------------- API names (the truth's by_api keys) ---------------- */

#define APIS(X)                                                                     \
    X(cudaMalloc, 'a') X(cudaFree, 'f') X(cudaMallocAsync, 'a') X(cudaFreeAsync, 'f') \
    X(cudaMallocHost, 'a') X(cudaFreeHost, 'f') X(cudaLaunchKernel, 'l')              \
    X(cudaMemcpyAsync, 'c') X(cudaMemsetAsync, 'm')                                   \
    X(cuMemAlloc_v2, 'a') X(cuMemFree_v2, 'f') X(cuLaunchKernel, 'l')                 \
    X(cuMemcpyHtoD_v2, 'c') X(cuMemcpyDtoH_v2, 'c') X(cuMemsetD8_v2, 'm')             \
    X(cuMemAllocFromPoolAsync, 'a') X(cuMemFreeAsync, 'f') X(cuLaunchKernelEx, 'l')   \
    X(cuMemcpyHtoDAsync_v2, 'c') X(cuMemcpyDtoHAsync_v2, 'c') X(cuMemsetD8Async, 'm')       \
    X(cuMemPoolCreate, 'o') X(cuMemPoolDestroy, 'o') X(cudaGraphLaunch, 'g')

enum api {
#define E(name, cls) API_##name,
    APIS(E)
#undef E
    API_COUNT
};
static const char *const API_NAMES[] = {
#define N(name, cls) #name,
    APIS(N)
#undef N
};
static const char API_CLASS[] = {
#define C(name, cls) cls,
    APIS(C)
#undef C
};
_Static_assert(API_COUNT <= SIMTRAIN_MAX_API, "too many APIs");

int simtrain_api_count(void) { return API_COUNT; }
const char *simtrain_api_name(int i) { return i >= 0 && i < API_COUNT ? API_NAMES[i] : NULL; }
int simtrain_api_class(int i) { return i >= 0 && i < API_COUNT ? API_CLASS[i] : 0; }

/* ---------------- CUDA entry points (runtime through the PLT) ---------------- */

cudaError_t cudaSetDevice(int);
cudaError_t cudaMalloc(void **, size_t);
cudaError_t cudaFree(void *);
cudaError_t cudaMallocAsync(void **, size_t, cudaStream_t);
cudaError_t cudaFreeAsync(void *, cudaStream_t);
cudaError_t cudaMallocHost(void **, size_t);
cudaError_t cudaFreeHost(void *);
cudaError_t cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t cudaMemcpyAsync(void *, const void *, size_t, int, cudaStream_t);
cudaError_t cudaMemsetAsync(void *, int, size_t, cudaStream_t);
cudaError_t cudaStreamCreate(cudaStream_t *);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaStreamDestroy(cudaStream_t);
cudaError_t cudaMemGetInfo(size_t *, size_t *);
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;
cudaError_t cudaStreamBeginCapture(cudaStream_t, int);
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *, cudaGraph_t, unsigned long long);
cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t);
cudaError_t cudaGraphDestroy(cudaGraph_t);

/* driver entry points, found with dlsym (jax) or cuGetProcAddress_v2 (tf) */
struct driver {
    CUresult (*cuInit)(unsigned);
    CUresult (*cuDeviceGet)(CUdevice *, int);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
    CUresult (*cuCtxSetCurrent)(CUcontext);
    CUresult (*cuStreamCreate)(CUstream *, unsigned);
    CUresult (*cuStreamSynchronize)(CUstream);
    CUresult (*cuStreamDestroy)(CUstream);
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
    CUresult (*cuMemFree)(CUdeviceptr);
    CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                               CUstream, void **, void **);
    CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*cuDeviceGetDefaultMemPool)(CUmemoryPool *, CUdevice);
    CUresult (*cuMemPoolCreate)(CUmemoryPool *, const CUmemPoolProps *);
    CUresult (*cuMemPoolDestroy)(CUmemoryPool);
    CUresult (*cuMemAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
    CUresult (*cuLaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **, void **);
    CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
    CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
    CUresult (*cuMemGetInfo)(size_t *, size_t *);
};

/* ---------------- kernels: host functions that touch their buffers ---------------- */

enum kernel { K_FWD, K_LOSS, K_BWD, K_OPT, K_EVAL, K_COUNT };
struct kernel_desc {
    const char *name;
    simcu_kernel_fn fn;
    unsigned nparams, nptrs; /* the first nptrs parameters are device pointers */
    size_t offsets[8], sizes[8];
};

#define PTR(p, i) (*(float **)(p)[i])

static void k_fwd(void **p) /* (W, in, out, ws, n, layer) */
{
    float *w = PTR(p, 0), *in = PTR(p, 1), *out = PTR(p, 2), *ws = PTR(p, 3);
    uint64_t n = *(uint64_t *)p[4];
    ws[0] = w[0] * in[0];
    out[0] = ws[0];
    out[n - 1] = (float)*(int *)p[5];
}
static void k_loss(void **p) /* (act, grad, n) */
{
    float *act = PTR(p, 0), *grad = PTR(p, 1);
    uint64_t n = *(uint64_t *)p[2];
    grad[0] = act[0];
    grad[n - 1] = 1.0f;
}
static void k_bwd(void **p) /* (W, in, out, gout, gin or NULL, G, n_in) */
{
    float *w = PTR(p, 0), *in = PTR(p, 1), *out = PTR(p, 2), *gout = PTR(p, 3), *gin = PTR(p, 4), *g = PTR(p, 5);
    uint64_t n = *(uint64_t *)p[6];
    g[0] = in[0] * gout[0] + out[0];
    if (gin) {
        gin[0] = w[0] * gout[0];
        gin[n - 1] = 0.0f;
    }
}
static void k_opt(void **p) /* (W, G, M, V, lr, step) */
{
    float *w = PTR(p, 0), *g = PTR(p, 1), *m = PTR(p, 2), *v = PTR(p, 3);
    float lr = *(float *)p[4];
    m[0] = 0.9f * m[0] + 0.1f * g[0];
    v[0] = 0.999f * v[0] + 0.001f * g[0] * g[0];
    w[0] -= lr * m[0] * (float)(*(int *)p[5] & 1);
}
static void k_eval(void **p) /* (W, in, out) */
{
    float *w = PTR(p, 0), *in = PTR(p, 1), *out = PTR(p, 2);
    out[0] = w[0] + in[0];
}

static const struct kernel_desc KERNELS[K_COUNT] = {
    [K_FWD] = {"simtrain_fwd", k_fwd, 6, 4, {0, 8, 16, 24, 32, 40}, {8, 8, 8, 8, 8, 4}},
    [K_LOSS] = {"simtrain_loss", k_loss, 3, 2, {0, 8, 16}, {8, 8, 8}},
    [K_BWD] = {"simtrain_bwd", k_bwd, 7, 6, {0, 8, 16, 24, 32, 40, 48}, {8, 8, 8, 8, 8, 8, 8}},
    [K_OPT] = {"simtrain_opt", k_opt, 6, 4, {0, 8, 16, 24, 32, 36}, {8, 8, 8, 8, 4, 4}},
    [K_EVAL] = {"simtrain_eval", k_eval, 3, 3, {0, 8, 16}, {8, 8, 8}},
};

/* ---------------- run state ---------------- */

struct run {
    int fw;
    int async_backend; /* torch: cudaMallocAsync backend */
    struct driver d;
    void *lib;
    CUstream stream;
    CUmemoryPool pool, ws_pool;
    CUfunction fn[K_COUNT];
    struct simtrain_truth *t;
    int regular; /* counting the regular part of the step (allocs_per_step) */
    uint64_t regular_allocs;
    CUstream stream2;        /* SIMTRAIN_NOISE_STREAM2 */
    int check;               /* SIMCUDA_CHECK: patterns in every live block */
    struct chk_block { void *p; size_t n; uint64_t serial; } *chk; /* SIMCUDA_CHECK's live blocks */
    size_t nchk, cap_chk;
    uint64_t serial;
    int device_time;                                  /* enum simtrain_device_time */
    uint64_t dev_rng;                                 /* kernel durations (apart from the noise stream) */
    CUresult (*set_next_duration)(unsigned long long); /* simcuSetNextLaunchDuration */
    /* out-of-memory mode (simtrain.h): the config, what the next allocations are (the truth's
     * "role"), and the blocks a framework-like cache holds (freed by the program, kept from CUDA) */
    const struct simtrain_config *cfg;
    const char *role;
    void *cached[64];
    size_t cached_size[64];
    int n_cached;
    int dev;     /* device ordinal */
    struct { void *p; size_t n; } *live; /* device buffers held now (a few dozen) */
    size_t n_live, cap_live;
    uint64_t live_bytes;
    int capturing; /* --graphs: the step is being captured (no synchronisation) */
};

static uint64_t splitmix(uint64_t *s);
static double uniform(uint64_t *s);

static int live_add(struct run *r, void *p, size_t n)
{
    if (r->n_live == r->cap_live) {
        size_t cap = r->cap_live ? 2 * r->cap_live : 64;
        void *m = realloc(r->live, cap * sizeof *r->live);
        if (!m) return -1;
        r->live = m;
        r->cap_live = cap;
    }
    r->live[r->n_live].p = p;
    r->live[r->n_live++].n = n;
    r->live_bytes += n;
    if (r->live_bytes > r->t->peak_live_bytes) r->t->peak_live_bytes = r->live_bytes;
    return 0;
}

static void live_remove(struct run *r, void *p)
{
    for (size_t i = r->n_live; i-- > 0;)
        if (r->live[i].p == p) {
            r->live_bytes -= r->live[i].n;
            r->live[i] = r->live[--r->n_live];
            return;
        }
}

static int fail(struct run *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->t->error, sizeof r->t->error, fmt, ap);
    va_end(ap);
    return -1;
}

#define TRY(call, api)                                                        \
    do {                                                                      \
        int rc_ = (int)(call);                                                \
        if (rc_ != 0) return fail(r, "%s failed with error %d", api, rc_);    \
    } while (0)

static void count(struct run *r, enum api a) { r->t->by_api[a]++; }

/* ---------------- the data check (SIMCUDA_CHECK=1) ----------------
 * The kernels write a block's first and last words; the pattern covers the bytes in between. */
#define PAT_EDGE 64
static uint64_t pat_word(uint64_t serial, size_t i) { return (serial * 0x9E3779B97F4A7C15ull) ^ (i * 0xD6E8FEB86659FD93ull); }

static struct chk_block *chk_find(struct run *r, void *p)
{
    for (size_t i = r->nchk; i-- > 0;)
        if (r->chk[i].p == p) return &r->chk[i];
    return NULL;
}

#define PAT_MAX ((size_t)256 << 20) /* larger blocks (an out-of-memory probe) are not patterned */
static void pattern_write(const struct chk_block *b)
{
    if (b->n <= 2 * PAT_EDGE || b->n > PAT_MAX) return;
    uint64_t *w = (uint64_t *)((char *)b->p + PAT_EDGE);
    size_t k = (b->n - 2 * PAT_EDGE) / 8;
    for (size_t i = 0; i < k; i++) w[i] = pat_word(b->serial, i);
}

static int pattern_check(struct run *r, const struct chk_block *b)
{
    if (b->n <= 2 * PAT_EDGE || b->n > PAT_MAX) return 0;
    const uint64_t *w = (const uint64_t *)((const char *)b->p + PAT_EDGE);
    size_t k = (b->n - 2 * PAT_EDGE) / 8;
    for (size_t i = 0; i < k; i++)
        if (w[i] != pat_word(b->serial, i))
            return fail(r, "data check: block %p (%zu bytes, allocation #%llu) was overwritten while live "
                        "(byte %zu: %016llx instead of %016llx)", b->p, b->n, (unsigned long long)b->serial,
                        PAT_EDGE + 8 * i, (unsigned long long)w[i], (unsigned long long)pat_word(b->serial, i));
    return 0;
}

static int checked_alloc(struct run *r, void *p, size_t n)
{
    if (!r->check) return 0;
    if (r->nchk == r->cap_chk) {
        size_t c = r->cap_chk ? 2 * r->cap_chk : 256;
        struct chk_block *nl = realloc(r->chk, c * sizeof *nl);
        if (!nl) return fail(r, "out of host memory");
        r->chk = nl, r->cap_chk = c;
    }
    struct chk_block *b = &r->chk[r->nchk++];
    *b = (struct chk_block){p, n, ++r->serial};
    /* the edges the kernels read and write start at zero: the run's results then depend on nothing but
     * the computation (the truth's result_hash can be compared between runs) */
    size_t e = n < PAT_EDGE ? n : PAT_EDGE;
    memset(p, 0, e);
    if (n > e) memset((char *)p + n - (n - e < PAT_EDGE ? n - e : PAT_EDGE), 0, n - e < PAT_EDGE ? n - e : PAT_EDGE);
    pattern_write(b);
    return 0;
}

/* the program wrote the block itself (a copy or memset into it): its pattern again */
static void checked_rewrite(struct run *r, void *p)
{
    struct chk_block *b = r->check ? chk_find(r, p) : NULL;
    if (b) pattern_write(b);
}

static int checked_free(struct run *r, void *p)
{
    if (!r->check) return 0;
    struct chk_block *b = chk_find(r, p);
    if (!b) return fail(r, "data check: freeing %p, which simtrain did not allocate", p);
    if (pattern_check(r, b)) return -1;
    *b = r->chk[--r->nchk];
    return 0;
}

/* one allocation call on the framework's path; its CUDA result (nothing counted) */
static int raw_alloc(struct run *r, void **p, size_t n, int workspace, enum api *a)
{
    CUdeviceptr d = 0;
    int rc;
    switch (r->fw) {
    case SIMTRAIN_TORCH:
        *a = r->async_backend ? API_cudaMallocAsync : API_cudaMalloc;
        return r->async_backend ? (int)cudaMallocAsync(p, n, r->stream) : (int)cudaMalloc(p, n);
    case SIMTRAIN_JAX:
        *a = API_cuMemAlloc_v2;
        rc = (int)r->d.cuMemAlloc(&d, n);
        break;
    default:
        *a = API_cuMemAllocFromPoolAsync;
        rc = (int)r->d.cuMemAllocFromPoolAsync(&d, n, workspace ? r->ws_pool : r->pool, r->stream);
    }
    if (rc == 0) *p = (void *)(uintptr_t)d;
    return rc;
}

static int counted_alloc(struct run *r, void *p, size_t n, enum api a)
{
    count(r, a);
    if (live_add(r, p, n)) return fail(r, "out of host memory");
    r->t->allocs++;
    r->t->bytes += n;
    if (r->regular) r->regular_allocs++;
    if (r->cfg && r->cfg->oom && oom_track_add((uint64_t)(uintptr_t)p, n, r->role ? r->role : "other"))
        return fail(r, "out of host memory");
    return checked_alloc(r, p, n);
}

static int dev_alloc(struct run *r, void **p, size_t n, int workspace)
{
    enum api a;
    int rc = raw_alloc(r, p, n, workspace, &a);
    if (rc != 0) return fail(r, "%s failed with error %d", API_NAMES[a], rc);
    return counted_alloc(r, *p, n, a);
}

static int dev_free_on(struct run *r, void *p, CUstream stream)
{
    enum api a;
    if (checked_free(r, p)) return -1;
    switch (r->fw) {
    case SIMTRAIN_TORCH:
        if (r->async_backend) {
            a = API_cudaFreeAsync;
            TRY(cudaFreeAsync(p, stream), "cudaFreeAsync");
        } else {
            a = API_cudaFree;
            TRY(cudaFree(p), "cudaFree");
        }
        break;
    case SIMTRAIN_JAX:
        a = API_cuMemFree_v2;
        TRY(r->d.cuMemFree((CUdeviceptr)(uintptr_t)p), "cuMemFree_v2");
        break;
    default:
        a = API_cuMemFreeAsync;
        TRY(r->d.cuMemFreeAsync((CUdeviceptr)(uintptr_t)p, stream), "cuMemFreeAsync");
    }
    count(r, a);
    live_remove(r, p);
    r->t->frees++;
    if (r->cfg && r->cfg->oom) oom_track_remove((uint64_t)(uintptr_t)p);
    return 0;
}

static int dev_free(struct run *r, void *p) { return dev_free_on(r, p, r->stream); }

/* torch copies through its cudaMallocHost staging buffer: a CUDA allocation
 * too, so the copy touches two allocations (jax/tf use plain host memory). */
static int pinned_side(const struct run *r) { return r->fw == SIMTRAIN_TORCH; }

static int h2d(struct run *r, void *dst, const void *src, size_t n)
{
    enum api a;
    switch (r->fw) {
    case SIMTRAIN_TORCH:
        a = API_cudaMemcpyAsync;
        TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, r->stream), "cudaMemcpyAsync");
        break;
    case SIMTRAIN_JAX:
        a = API_cuMemcpyHtoD_v2;
        TRY(r->d.cuMemcpyHtoD((CUdeviceptr)(uintptr_t)dst, src, n), "cuMemcpyHtoD_v2");
        break;
    default:
        a = API_cuMemcpyHtoDAsync_v2;
        TRY(r->d.cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dst, src, n, r->stream), "cuMemcpyHtoDAsync_v2");
    }
    count(r, a);
    r->t->accesses += 1 + pinned_side(r); /* the device buffer, plus a pinned staging buffer */
    checked_rewrite(r, dst);
    return 0;
}

static int d2h(struct run *r, void *dst, const void *src, size_t n)
{
    enum api a;
    switch (r->fw) {
    case SIMTRAIN_TORCH:
        a = API_cudaMemcpyAsync;
        TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, r->stream), "cudaMemcpyAsync");
        break;
    case SIMTRAIN_JAX:
        a = API_cuMemcpyDtoH_v2;
        TRY(r->d.cuMemcpyDtoH(dst, (CUdeviceptr)(uintptr_t)src, n), "cuMemcpyDtoH_v2");
        break;
    default:
        a = API_cuMemcpyDtoHAsync_v2;
        TRY(r->d.cuMemcpyDtoHAsync(dst, (CUdeviceptr)(uintptr_t)src, n, r->stream), "cuMemcpyDtoHAsync_v2");
    }
    count(r, a);
    r->t->accesses += 1 + pinned_side(r);
    return 0;
}

static int dev_zero(struct run *r, void *p, size_t n)
{
    enum api a;
    switch (r->fw) {
    case SIMTRAIN_TORCH:
        a = API_cudaMemsetAsync;
        TRY(cudaMemsetAsync(p, 0, n, r->stream), "cudaMemsetAsync");
        break;
    case SIMTRAIN_JAX:
        a = API_cuMemsetD8_v2;
        TRY(r->d.cuMemsetD8((CUdeviceptr)(uintptr_t)p, 0, n), "cuMemsetD8_v2");
        break;
    default:
        a = API_cuMemsetD8Async;
        TRY(r->d.cuMemsetD8Async((CUdeviceptr)(uintptr_t)p, 0, n, r->stream), "cuMemsetD8Async");
    }
    count(r, a);
    r->t->accesses += 1;
    checked_rewrite(r, p);
    return 0;
}

/* distinct non-NULL device pointers among the first nptrs arguments */
static unsigned distinct_pointers(void **args, unsigned nptrs)
{
    unsigned n = 0;
    for (unsigned i = 0; i < nptrs; i++) {
        void *p = *(void **)args[i];
        int seen = p == NULL;
        for (unsigned j = 0; j < i && !seen; j++) seen = *(void **)args[j] == p;
        n += !seen;
    }
    return n;
}

/* ---------------- device time (SIMTRAIN_DEVICE_H100_LIKE) ---------------- */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define HOST_DISPATCH_NS 12000u /* a framework's own work per op before it launches */

/* a kernel's device duration: lognormal around its kind's median, sometimes a long one */
static uint64_t kernel_duration(struct run *r, enum kernel k)
{
    static const double median_ns[K_COUNT] = {29000, 7000, 43000, 10000, 19000}; /* FWD LOSS BWD OPT EVAL */
    double u1 = uniform(&r->dev_rng), u2 = uniform(&r->dev_rng), u3 = uniform(&r->dev_rng);
    if (u3 < 0.02) return (uint64_t)(400000 + 800000 * u1);
    double z = sqrt(-2.0 * log(u1 > 1e-300 ? u1 : 1e-300)) * cos(6.283185307179586 * u2);
    return (uint64_t)(median_ns[k] * exp(0.7 * z));
}

static void before_launch(struct run *r, enum kernel k)
{
    uint64_t until = mono_ns() + HOST_DISPATCH_NS;
    while (mono_ns() < until) {
    }
    r->set_next_duration(kernel_duration(r, k));
}

typedef CUresult (*set_model_fn)(const char *, double);

static int device_time_setup(struct run *r, uint64_t seed)
{
    void *h = r->lib ? r->lib : RTLD_DEFAULT;
    set_model_fn set_model = (set_model_fn)dlsym(h, "simcuSetDeviceModel");
    r->set_next_duration = (CUresult(*)(unsigned long long))dlsym(h, "simcuSetNextLaunchDuration");
    if (!set_model || !r->set_next_duration) return fail(r, "--device-time needs simcuda's driver (libcuda.so.1)");
    static const struct { const char *key; double value; } model[] = {
        {"launch_latency_ns", 5000}, {"h2d_gbps", 25}, {"d2h_gbps", 25}, {"d2d_gbps", 1000},
        {"copy_latency_ns", 10000}, {"memset_gbps", 1000},
    };
    for (size_t i = 0; i < sizeof model / sizeof model[0]; i++)
        TRY(set_model(model[i].key, model[i].value), "simcuSetDeviceModel");
    r->dev_rng = seed ^ 0x5DEECE66Dull;
    return 0;
}

/* the end of a step: wait for the device, as a loop reading its loss (.item()) does */
static int step_sync(struct run *r)
{
    if (r->fw == SIMTRAIN_TORCH) TRY(cudaStreamSynchronize(r->stream), "cudaStreamSynchronize");
    else TRY(r->d.cuStreamSynchronize(r->fw == SIMTRAIN_JAX ? NULL : r->stream), "cuStreamSynchronize");
    return 0;
}

static int launch(struct run *r, enum kernel k, void **args, unsigned grid)
{
    const struct kernel_desc *kd = &KERNELS[k];
    enum api a;
    if (r->device_time) before_launch(r, k);
    switch (r->fw) {
    case SIMTRAIN_TORCH:
        a = API_cudaLaunchKernel;
        TRY(cudaLaunchKernel((const void *)kd->fn, (dim3){grid, 1, 1}, (dim3){128, 1, 1}, args, 0, r->stream),
            "cudaLaunchKernel");
        break;
    case SIMTRAIN_JAX:
        a = API_cuLaunchKernel;
        if (k == K_FWD || k == K_OPT) { /* XLA-style packed argument buffer */
            _Alignas(16) char buf[64];
            size_t size = 0;
            for (unsigned i = 0; i < kd->nparams; i++) {
                memcpy(buf + kd->offsets[i], args[i], kd->sizes[i]);
                if (kd->offsets[i] + kd->sizes[i] > size) size = kd->offsets[i] + kd->sizes[i];
            }
            void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                             CU_LAUNCH_PARAM_END};
            TRY(r->d.cuLaunchKernel(r->fn[k], grid, 1, 1, 128, 1, 1, 0, NULL, NULL, extra), "cuLaunchKernel");
        } else {
            TRY(r->d.cuLaunchKernel(r->fn[k], grid, 1, 1, 128, 1, 1, 0, NULL, args, NULL), "cuLaunchKernel");
        }
        break;
    default: {
        a = API_cuLaunchKernelEx;
        CUlaunchConfig cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.gridDimX = grid, cfg.gridDimY = cfg.gridDimZ = 1;
        cfg.blockDimX = 128, cfg.blockDimY = cfg.blockDimZ = 1;
        cfg.hStream = r->stream;
        TRY(r->d.cuLaunchKernelEx(&cfg, r->fn[k], args, NULL), "cuLaunchKernelEx");
    }
    }
    count(r, a);
    r->t->launches++;
    r->t->accesses += distinct_pointers(args, kd->nptrs);
    return 0;
}

/* ---------------- setup per framework ---------------- */

static int torch_alloc_conf_async(void)
{
    const char *names[] = {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"};
    for (int i = 0; i < 2; i++) {
        const char *v = getenv(names[i]);
        if (v && strstr(v, "backend:cudaMallocAsync")) return 1;
    }
    return 0;
}

typedef CUresult (*getproc_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*register_fn)(const char *, simcu_kernel_fn, unsigned, const size_t *, const size_t *,
                               CUfunction *);

static int setup(struct run *r)
{
    if (r->fw == SIMTRAIN_TORCH) {
        r->async_backend = torch_alloc_conf_async();
        TRY(cudaSetDevice(r->dev), "cudaSetDevice");
        TRY(cudaStreamCreate(&r->stream), "cudaStreamCreate");
        for (int k = 0; k < K_COUNT; k++) {
            const struct kernel_desc *kd = &KERNELS[k];
            TRY(simcudaRegisterFunction((const void *)kd->fn, kd->name, kd->fn, kd->nparams, kd->offsets,
                                        kd->sizes),
                "simcudaRegisterFunction");
        }
        return 0;
    }
    r->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!r->lib) return fail(r, "dlopen libcuda.so.1: %s", dlerror());
    struct { const char *base, *symbol; void **slot; } need[] = {
        {"cuInit", "cuInit", (void **)&r->d.cuInit},
        {"cuDeviceGet", "cuDeviceGet", (void **)&r->d.cuDeviceGet},
        {"cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", (void **)&r->d.cuDevicePrimaryCtxRetain},
        {"cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2", (void **)&r->d.cuDevicePrimaryCtxRelease},
        {"cuCtxSetCurrent", "cuCtxSetCurrent", (void **)&r->d.cuCtxSetCurrent},
        {"cuStreamCreate", "cuStreamCreate", (void **)&r->d.cuStreamCreate},
        {"cuStreamSynchronize", "cuStreamSynchronize", (void **)&r->d.cuStreamSynchronize},
        {"cuStreamDestroy", "cuStreamDestroy_v2", (void **)&r->d.cuStreamDestroy},
        {"cuMemAlloc", "cuMemAlloc_v2", (void **)&r->d.cuMemAlloc},
        {"cuMemFree", "cuMemFree_v2", (void **)&r->d.cuMemFree},
        {"cuLaunchKernel", "cuLaunchKernel", (void **)&r->d.cuLaunchKernel},
        {"cuMemcpyHtoD", "cuMemcpyHtoD_v2", (void **)&r->d.cuMemcpyHtoD},
        {"cuMemcpyDtoH", "cuMemcpyDtoH_v2", (void **)&r->d.cuMemcpyDtoH},
        {"cuMemsetD8", "cuMemsetD8_v2", (void **)&r->d.cuMemsetD8},
        {"cuDeviceGetDefaultMemPool", "cuDeviceGetDefaultMemPool", (void **)&r->d.cuDeviceGetDefaultMemPool},
        {"cuMemPoolCreate", "cuMemPoolCreate", (void **)&r->d.cuMemPoolCreate},
        {"cuMemPoolDestroy", "cuMemPoolDestroy", (void **)&r->d.cuMemPoolDestroy},
        {"cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync", (void **)&r->d.cuMemAllocFromPoolAsync},
        {"cuMemFreeAsync", "cuMemFreeAsync", (void **)&r->d.cuMemFreeAsync},
        {"cuLaunchKernelEx", "cuLaunchKernelEx", (void **)&r->d.cuLaunchKernelEx},
        {"cuMemcpyHtoDAsync", "cuMemcpyHtoDAsync_v2", (void **)&r->d.cuMemcpyHtoDAsync},
        {"cuMemcpyDtoHAsync", "cuMemcpyDtoHAsync_v2", (void **)&r->d.cuMemcpyDtoHAsync},
        {"cuMemsetD8Async", "cuMemsetD8Async", (void **)&r->d.cuMemsetD8Async},
    };
    getproc_t getproc = NULL;
    if (r->fw == SIMTRAIN_TF) {
        getproc = (getproc_t)dlsym(r->lib, "cuGetProcAddress_v2");
        if (!getproc) return fail(r, "libcuda.so.1 has no cuGetProcAddress_v2");
    }
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
        if (getproc) {
            CUdriverProcAddressQueryResult st;
            if (getproc(need[i].base, need[i].slot, 12080, 0, &st) != CUDA_SUCCESS || !*need[i].slot)
                return fail(r, "cuGetProcAddress_v2(%s) failed (status %d)", need[i].base, (int)st);
        } else if (!(*need[i].slot = dlsym(r->lib, need[i].symbol))) {
            return fail(r, "dlsym(libcuda.so.1, %s) failed", need[i].symbol);
        }
    }
    if (r->cfg->oom) { /* out-of-memory mode only: the free memory, as frameworks ask for it */
        CUdriverProcAddressQueryResult st;
        if (getproc ? getproc("cuMemGetInfo", (void **)&r->d.cuMemGetInfo, 12080, 0, &st) != CUDA_SUCCESS
                    : !(r->d.cuMemGetInfo = (CUresult(*)(size_t *, size_t *))dlsym(r->lib, "cuMemGetInfo_v2")))
            return fail(r, "cuMemGetInfo not found");
    }
    register_fn reg = (register_fn)dlsym(r->lib, "simcuRegisterKernel");
    if (!reg) return fail(r, "libcuda.so.1 is not simcuda (no simcuRegisterKernel)");
    CUdevice dev;
    CUcontext ctx;
    TRY(r->d.cuInit(0), "cuInit");
    TRY(r->d.cuDeviceGet(&dev, r->dev), "cuDeviceGet");
    TRY(r->d.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    TRY(r->d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    for (int k = 0; k < K_COUNT; k++) {
        const struct kernel_desc *kd = &KERNELS[k];
        TRY(reg(kd->name, kd->fn, kd->nparams, kd->offsets, kd->sizes, &r->fn[k]), "simcuRegisterKernel");
    }
    if (r->fw == SIMTRAIN_TF) {
        TRY(r->d.cuStreamCreate(&r->stream, 0), "cuStreamCreate");
        TRY(r->d.cuDeviceGetDefaultMemPool(&r->pool, dev), "cuDeviceGetDefaultMemPool");
        CUmemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = 1; /* pinned */
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = dev;
        TRY(r->d.cuMemPoolCreate(&r->ws_pool, &props), "cuMemPoolCreate");
        count(r, API_cuMemPoolCreate);
    }
    return 0;
}

static int teardown(struct run *r)
{
    if (r->fw == SIMTRAIN_TORCH) {
        TRY(cudaStreamSynchronize(r->stream), "cudaStreamSynchronize");
        TRY(cudaStreamDestroy(r->stream), "cudaStreamDestroy");
        return 0;
    }
    if (r->fw == SIMTRAIN_TF) {
        TRY(r->d.cuStreamSynchronize(r->stream), "cuStreamSynchronize");
        TRY(r->d.cuMemPoolDestroy(r->ws_pool), "cuMemPoolDestroy");
        count(r, API_cuMemPoolDestroy);
        TRY(r->d.cuStreamDestroy(r->stream), "cuStreamDestroy");
    }
    TRY(r->d.cuDevicePrimaryCtxRelease(r->dev), "cuDevicePrimaryCtxRelease");
    return 0;
}

/* ---------------- the loop ---------------- */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double uniform(uint64_t *s) { return (double)(splitmix(s) >> 11) / 9007199254740992.0; }

/* sizes vary per layer: a few KiB to a few MiB */
static size_t act_bytes(int i) { return (size_t)4096 * (1 + (i * 7 + 3) % 16); }
static size_t weight_bytes(int i) { return (size_t)32768 * (1 + (i * 11 + 5) % 64); }
static size_t ws_bytes(int i) { return (size_t)8192 * (1 + (i * 13 + 1) % 32); }
#define INPUT_BYTES ((size_t)256 << 10)
#define LOG_BYTES ((size_t)4096)

struct model {
    int layers;
    void **w, **m, **v, **g, **act;
    void *pinned;      /* torch: cudaMallocHost staging buffer */
    char *host;        /* jax / tf: plain host buffer */
};

static void *staging(struct run *r, struct model *md) { return r->fw == SIMTRAIN_TORCH ? md->pinned : md->host; }

static int noise_pass(struct run *r, struct model *md, uint64_t *rng)
{
    if (splitmix(rng) & 1) { /* an evaluation pass */
        void *in, *out;
        size_t n = (size_t)4096 * (1 + splitmix(rng) % 8);
        if (dev_alloc(r, &in, n, 0) || dev_alloc(r, &out, n, 0)) return -1;
        void *args[] = {&md->w[0], &in, &out};
        if (launch(r, K_EVAL, args, 1)) return -1;
        return dev_free(r, in) || dev_free(r, out) ? -1 : 0;
    }
    void *log; /* a logging buffer brought to the host */
    if (dev_alloc(r, &log, LOG_BYTES, 0) || d2h(r, staging(r, md), log, LOG_BYTES)) return -1;
    return dev_free(r, log);
}

/* ---------------- out of memory, the way a framework's allocator meets it ---------------- */

static int mem_info(struct run *r, size_t *freeb, size_t *total)
{
    return r->fw == SIMTRAIN_TORCH ? (int)cudaMemGetInfo(freeb, total) : (int)r->d.cuMemGetInfo(freeb, total);
}

static int release_cache(struct run *r)
{
    while (r->n_cached > 0)
        if (dev_free(r, r->cached[--r->n_cached])) return -1;
    return 0;
}

/* At the OOM step: a few blocks go to the allocator's cache (allocated, freed by the program, kept
 * from CUDA: PyTorch's cached blocks, buffers XLA has not collected yet); then one request larger
 * than the free memory (a batch too large) fails; the cache is released for real (cudaFree /
 * cuMemFree / cuMemFreeAsync of every cached block: PyTorch's release_cached_blocks, XLA's retry
 * after garbage collection) and the same request is tried again.  NEAR: it asks for the free
 * memory plus half the cache, so the retry succeeds (the block is used and freed); FINAL: for more
 * than free + cache, so the retry fails and the run ends with the framework's out-of-memory error.
 * Each failed try writes the live set to cfg->oom_truth (simtrain_oom.c). */
static int oom_request(struct run *r, int s)
{
    const int near = r->cfg->oom == SIMTRAIN_OOM_NEAR;
    size_t freeb, total, cached = 0, n;
    r->role = "cached";
    for (int i = 0; i < 4; i++) {
        size_t sz = (size_t)(256 << 10) * (size_t)(i + 1);
        if (dev_alloc(r, &r->cached[r->n_cached], sz, 0)) return -1;
        r->cached_size[r->n_cached++] = sz;
        cached += sz;
    }
    TRY(mem_info(r, &freeb, &total), "cuMemGetInfo");
    n = near ? freeb + cached / 2 : freeb + cached + ((size_t)1 << 20);
    void *p = NULL;
    enum api a;
    struct oom_failure f = {s, 1, NULL, near ? "near" : "final", n, cached, freeb, total};
    for (;; f.attempt++) {
        int rc = raw_alloc(r, &p, n, 0, &a);
        if (rc == 0) break;
        r->t->failed_allocs++;
        f.api = API_NAMES[a];
        if (oom_write_truth(r->cfg->oom_truth, &f)) return fail(r, "cannot write %s", r->cfg->oom_truth);
        if (f.attempt == 2)
            return fail(r, "CUDA out of memory. Tried to allocate %zu bytes (%s error %d; device: %zu of %zu bytes "
                        "free, %zu bytes released from the cache)", n, f.api, rc, freeb, total, cached);
        if (r->cfg->oom_retry == SIMTRAIN_OOM_RETRY_SMALLER) { /* a smaller batch, the cache kept */
            n = freeb / 2;
            continue;
        }
        if (release_cache(r)) return -1;
        TRY(mem_info(r, &freeb, &total), "cuMemGetInfo");
        f.cached_bytes = 0, f.free_bytes = freeb, f.total_bytes = total;
    }
    if (f.attempt == 1) return fail(r, "the request of %zu bytes (%zu free) did not fail", n, freeb);
    r->role = "request";
    if (counted_alloc(r, p, n, a) || dev_zero(r, p, 4096) || dev_free(r, p)) return -1;
    r->role = "step";
    return 0;
}

static int step(struct run *r, struct model *md, int s, uint64_t *rng, int noisy, unsigned kinds)
{
    int L = md->layers;
    void *x, *loss_grad;
    int skip_ws = noisy && (kinds & SIMTRAIN_NOISE_MISSING) ? (int)(splitmix(rng) % (uint64_t)L) : -1;
    int x_on_stream2 = noisy && (kinds & SIMTRAIN_NOISE_STREAM2) && r->stream2;
    r->role = "step";
    r->regular = 1;
    r->regular_allocs = 0;
    if (dev_alloc(r, &x, INPUT_BYTES, 0) || h2d(r, x, staging(r, md), INPUT_BYTES)) return -1;
    /* forward: one activation per layer, a workspace around each kernel */
    for (int i = 0; i < L; i++) {
        void *ws, *in = i ? md->act[i - 1] : x;
        uint64_t n = act_bytes(i) / sizeof(float);
        int layer = i;
        if (dev_alloc(r, &md->act[i], act_bytes(i), 0)) return -1;
        if (i == skip_ws) ws = md->act[i]; /* noise: no workspace this time */
        else if (dev_alloc(r, &ws, ws_bytes(i), 1)) return -1;
        if (r->cfg->oom && i == L / 2 && s == (r->cfg->oom_step < 0 ? r->cfg->steps - 1 : r->cfg->oom_step) &&
            oom_request(r, s))
            return -1;
        void *args[] = {&md->w[i], &in, &md->act[i], &ws, &n, &layer};
        if (launch(r, K_FWD, args, 4) || (i != skip_ws && dev_free(r, ws))) return -1;
    }
    uint64_t n_out = act_bytes(L - 1) / sizeof(float);
    if (dev_alloc(r, &loss_grad, act_bytes(L - 1), 0)) return -1;
    void *largs[] = {&md->act[L - 1], &loss_grad, &n_out};
    if (launch(r, K_LOSS, largs, 1)) return -1;
    /* backward: activations freed as they are consumed */
    void *gout = loss_grad;
    for (int i = L - 1; i >= 0; i--) {
        void *gin = NULL, *in = i ? md->act[i - 1] : x;
        uint64_t n_in = i ? act_bytes(i - 1) / sizeof(float) : 0;
        if (dev_alloc(r, &md->g[i], weight_bytes(i), 0) || dev_zero(r, md->g[i], weight_bytes(i))) return -1;
        if (i && dev_alloc(r, &gin, act_bytes(i - 1), 0)) return -1;
        void *args[] = {&md->w[i], &in, &md->act[i], &gout, &gin, &md->g[i], &n_in};
        if (launch(r, K_BWD, args, 4) || dev_free(r, md->act[i]) || dev_free(r, gout)) return -1;
        gout = gin;
    }
    if (dev_free_on(r, x, x_on_stream2 ? r->stream2 : r->stream)) return -1;
    /* optimizer (Adam: W, G, M, V), gradients freed */
    for (int i = 0; i < L; i++) {
        float lr = 1e-3f;
        int st = s;
        void *args[] = {&md->w[i], &md->g[i], &md->m[i], &md->v[i], &lr, &st};
        if (launch(r, K_OPT, args, 2) || dev_free(r, md->g[i])) return -1;
    }
    r->regular = 0;
    if (s == 0) r->t->allocs_per_step = r->regular_allocs;
    if (r->device_time && !r->capturing && step_sync(r)) return -1;
    if (noisy) {
        r->t->noise_steps++;
        if ((kinds & SIMTRAIN_NOISE_EXTRA) && noise_pass(r, md, rng)) return -1;
    }
    return 0;
}

/* --graphs: the first `warm` steps run eagerly, the next is captured into a CUDA graph on the loop's stream
 * (its cudaMallocAsync/cudaFreeAsync become the graph's memory nodes, its launches, copies and memsets its
 * kernel, memcpy and memset nodes: none of them runs at capture), and every later step is one replay
 * (cudaGraphLaunch).  The truth counts what ran: the captured step's calls once per replay
 * (graph_allocs, graph_accesses, ... per replay; allocs, accesses, ... the totals), none at capture. */
static int graph_loop(struct run *r, struct model *md, uint64_t *rng)
{
    const struct simtrain_config *cfg = r->cfg;
    struct simtrain_truth *t = r->t;
    int warm = cfg->graphs;
    if (r->fw != SIMTRAIN_TORCH || !r->async_backend)
        return fail(r, "--graphs needs the torch path with the cudaMallocAsync backend "
                       "(PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync): cudaMalloc cannot be captured");
    if (cfg->noise > 0 || cfg->oom || r->check) return fail(r, "--graphs runs without noise, --oom or SIMCUDA_CHECK");
    if (cfg->steps <= warm) return fail(r, "--graphs needs more steps than warm-up steps (%d)", warm);
    for (int s = 0; s < warm; s++)
        if (step(r, md, s, rng, 0, 0)) return -1;
    struct simtrain_truth before = *t;
    cudaGraph_t g = NULL;
    cudaGraphExec_t e = NULL;
    TRY(cudaStreamBeginCapture(r->stream, 0 /* cudaStreamCaptureModeGlobal */), "cudaStreamBeginCapture");
    r->capturing = 1;
    int rc = step(r, md, warm, rng, 0, 0);
    r->capturing = 0;
    cudaError_t ec = cudaStreamEndCapture(r->stream, &g);
    if (rc) return -1;
    TRY(ec, "cudaStreamEndCapture");
    TRY(cudaGraphInstantiate(&e, g, 0), "cudaGraphInstantiate");
    /* what one replay does (the calls made at capture: none of them ran) */
    t->graph_allocs = t->allocs - before.allocs;
    t->graph_frees = t->frees - before.frees;
    t->graph_bytes = t->bytes - before.bytes;
    t->graph_accesses = t->accesses - before.accesses;
    t->graph_launches = t->launches - before.launches;
    t->allocs = before.allocs, t->frees = before.frees, t->bytes = before.bytes;
    t->accesses = before.accesses, t->launches = before.launches;
    uint64_t n = (uint64_t)(cfg->steps - warm);
    for (uint64_t k = 0; k < n; k++) {
        TRY(cudaGraphLaunch(e, r->stream), "cudaGraphLaunch");
        count(r, API_cudaGraphLaunch);
        if (r->device_time && step_sync(r)) return -1;
    }
    t->graph_replays = n;
    t->allocs += n * t->graph_allocs, t->frees += n * t->graph_frees, t->bytes += n * t->graph_bytes;
    t->accesses += n * t->graph_accesses, t->launches += n * t->graph_launches;
    TRY(cudaStreamSynchronize(r->stream), "cudaStreamSynchronize");
    TRY(cudaGraphExecDestroy(e), "cudaGraphExecDestroy");
    TRY(cudaGraphDestroy(g), "cudaGraphDestroy");
    return 0;
}

int simtrain_run(const struct simtrain_config *cfg, struct simtrain_truth *out)
{
    memset(out, 0, sizeof *out);
    struct run run, *r = &run;
    memset(r, 0, sizeof run);
    r->t = out;
    if (!cfg || cfg->framework < 0 || cfg->framework > 2 || cfg->steps < 1 || cfg->layers < 1 ||
        cfg->noise < 0 || cfg->noise > 1 || cfg->device_time < 0 || cfg->device_time > 1 || cfg->oom < 0 ||
        cfg->oom > 2 || cfg->device < 0 || cfg->oom_retry < 0 || cfg->oom_retry > 1)
        return fail(r, "invalid configuration");
    r->fw = cfg->framework;
    r->dev = cfg->device;
    r->device_time = cfg->device_time;
    r->cfg = cfg;
    r->role = "persistent";
    oom_track_reset();
    int L = cfg->layers, rc = -1;
    struct model md = {L, calloc(L, sizeof(void *)), calloc(L, sizeof(void *)), calloc(L, sizeof(void *)),
                       calloc(L, sizeof(void *)), calloc(L, sizeof(void *)), NULL, NULL};
    if (!md.w || !md.m || !md.v || !md.g || !md.act) {
        fail(r, "out of host memory");
        goto done;
    }
    if (setup(r)) goto done;
    unsigned kinds = cfg->noise_kinds ? cfg->noise_kinds : SIMTRAIN_NOISE_EXTRA;
    const char *chk = getenv("SIMCUDA_CHECK");
    r->check = chk && chk[0] && chk[0] != '0';
    if ((kinds & SIMTRAIN_NOISE_STREAM2) && cfg->noise > 0) {
        if (r->fw == SIMTRAIN_TORCH && r->async_backend && cudaStreamCreate(&r->stream2) != cudaSuccess) {
            fail(r, "cudaStreamCreate failed");
            goto done;
        }
        if (r->fw == SIMTRAIN_TF && r->d.cuStreamCreate(&r->stream2, 0) != CUDA_SUCCESS) {
            fail(r, "cuStreamCreate failed");
            goto done;
        }
    }
    if (r->device_time && device_time_setup(r, cfg->seed)) goto done;
    /* persistent state: weights and Adam moments, a host staging buffer */
    if (r->fw == SIMTRAIN_TORCH) {
        if (cudaMallocHost(&md.pinned, INPUT_BYTES) != cudaSuccess) {
            fail(r, "cudaMallocHost failed");
            goto done;
        }
        count(r, API_cudaMallocHost);
        out->allocs++;
        out->bytes += INPUT_BYTES;
        memset(md.pinned, 1, INPUT_BYTES);
    } else if (!(md.host = calloc(1, INPUT_BYTES))) {
        fail(r, "out of host memory");
        goto done;
    }
    for (int i = 0; i < L; i++) {
        if (dev_alloc(r, &md.w[i], weight_bytes(i), 0) || dev_alloc(r, &md.m[i], weight_bytes(i), 0) ||
            dev_alloc(r, &md.v[i], weight_bytes(i), 0) || dev_zero(r, md.m[i], weight_bytes(i)) ||
            dev_zero(r, md.v[i], weight_bytes(i)))
            goto done;
    }
    uint64_t rng = cfg->seed;
    if (cfg->graphs) {
        if (graph_loop(r, &md, &rng)) goto done;
    } else {
        for (int s = 0; s < cfg->steps; s++) {
            int noisy = uniform(&rng) < cfg->noise;
            if (step(r, &md, s, &rng, noisy, kinds)) goto done;
        }
    }
    /* the model's state after training, as the program computed it (FNV-1a of each weight's and moment's
     * first value): the same with and without a plan, when the inputs are (SIMCUDA_CHECK=1 zeroes them) */
    out->result_hash = 14695981039346656037ull;
    for (int i = 0; i < L; i++) {
        const void *vals[3] = {md.w[i], md.m[i], md.v[i]};
        for (int k = 0; k < 3; k++)
            for (int b = 0; b < 4; b++)
                out->result_hash = (out->result_hash ^ ((const unsigned char *)vals[k])[b]) * 1099511628211ull;
    }
    for (int i = 0; i < L; i++)
        if (dev_free(r, md.w[i]) || dev_free(r, md.m[i]) || dev_free(r, md.v[i])) goto done;
    if (md.pinned) {
        if (cudaFreeHost(md.pinned) != cudaSuccess) {
            fail(r, "cudaFreeHost failed");
            goto done;
        }
        md.pinned = NULL;
        count(r, API_cudaFreeHost);
        out->frees++;
    }
    rc = teardown(r);
done:
    if (r->stream2) {
        if (r->fw == SIMTRAIN_TORCH) cudaStreamDestroy(r->stream2);
        else r->d.cuStreamDestroy(r->stream2);
    }
    free(r->live);
    free(md.w), free(md.m), free(md.v), free(md.g), free(md.act), free(md.host);
    free(r->chk);
    if (r->lib) dlclose(r->lib);
    return rc;
}
