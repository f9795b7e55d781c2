/* launch.c — simcuda runtime: host-stub registry, launches, function queries. */
#include <dlfcn.h>
#include <stdlib.h>
#include "../sim_runtime.h"

/* host stub (or a cudaKernel_t of a loaded library) -> CUfunction; `lib` is
 * the library that owns a kernel entry (removed when it is unloaded) */
struct stub { const void *host; CUfunction fn; cudaLibrary_t lib; struct stub *next; };

#define NBUCKETS 256
static struct stub *g_stubs[NBUCKETS];
static pthread_rwlock_t g_stub_lock = PTHREAD_RWLOCK_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void atfork_prepare(void) { pthread_rwlock_wrlock(&g_stub_lock); }
static void atfork_parent(void) { pthread_rwlock_unlock(&g_stub_lock); }
static void atfork_child(void) { pthread_rwlock_init(&g_stub_lock, NULL); }
static void stub_init(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

static size_t bucket(const void *p) { return (size_t)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull >> 56) % NBUCKETS; }

HIDDEN CUfunction rt_lookup_stub(const void *host)
{
    CUfunction f = NULL;
    pthread_once(&g_once, stub_init);
    pthread_rwlock_rdlock(&g_stub_lock);
    for (struct stub *s = g_stubs[bucket(host)]; s; s = s->next)
        if (s->host == host) {
            f = s->fn;
            break;
        }
    pthread_rwlock_unlock(&g_stub_lock);
    return f;
}

typedef CUresult (*register_fn)(const char *, simcu_kernel_fn, unsigned, const size_t *, const size_t *,
                                CUfunction *);

cudaError_t simcudaRegisterFunction(const void *hostStub, const char *name, simcu_kernel_fn fn, unsigned nparams,
                                    const size_t *offsets, const size_t *sizes)
{
    if (!hostStub || !name || !fn) return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_load();
    if (e) return rt_ret(e);
    register_fn reg = (register_fn)dlsym(rt_cuda_handle(), "simcuRegisterKernel");
    if (!reg) return rt_ret(cudaErrorNotSupported); /* not the simulated driver */
    CUfunction f = NULL;
    CUresult r = reg(name, fn, nparams, offsets, sizes, &f);
    if (r) return rt_ret(rt_from_cu(r));
    struct stub *s = malloc(sizeof *s);
    if (!s) return rt_ret(cudaErrorMemoryAllocation);
    s->host = hostStub;
    s->fn = f;
    s->lib = NULL;
    pthread_once(&g_once, stub_init);
    pthread_rwlock_wrlock(&g_stub_lock);
    size_t b = bucket(hostStub);
    s->next = g_stubs[b]; /* a re-registration shadows the older one */
    g_stubs[b] = s;
    pthread_rwlock_unlock(&g_stub_lock);
    return cudaSuccess;
}


static cudaError_t launch(const void *func, dim3 grid, dim3 block, void **args, size_t smem, cudaStream_t s,
                          int ptsz)
{
    ENTER(ptsz);
    CUfunction f = rt_lookup_stub(func);
    if (!f) return rt_ret(cudaErrorInvalidDeviceFunction);
    return CU(d->cuLaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)smem, s, args,
                                NULL));
}

cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t smem, cudaStream_t s)
{
    return launch(func, grid, block, args, smem, s, 0);
}
cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 grid, dim3 block, void **args, size_t smem,
                                  cudaStream_t s)
{
    return launch(func, grid, block, args, smem, s, 1);
}

/* nvcc 13's <<<>>>: a cudaKernel_t got once per stub (__cudaGetKernel), launched with __cudaLaunchKernel(_ptsz)
 * (crt/host_runtime.h).  simcuda: a CUkernel is its CUfunction. */
cudaError_t __cudaGetKernel(cudaKernel_t *k, const void *host)
{
    ENTER(0);
    CUfunction f = rt_lookup_stub(host);
    if (!k || !f) return rt_ret(cudaErrorInvalidDeviceFunction);
    *k = (cudaKernel_t)(void *)f;
    return cudaSuccess;
}

static cudaError_t launch_kernel(cudaKernel_t k, dim3 grid, dim3 block, void **args, size_t smem, cudaStream_t s,
                                 int ptsz)
{
    ENTER(ptsz);
    if (!k) return rt_ret(cudaErrorInvalidDeviceFunction);
    return CU(d->cuLaunchKernel((CUfunction)(void *)k, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                (unsigned)smem, s, args, NULL));
}
cudaError_t __cudaLaunchKernel(cudaKernel_t k, dim3 grid, dim3 block, void **args, size_t smem, cudaStream_t s)
{
    return launch_kernel(k, grid, block, args, smem, s, 0);
}
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t k, dim3 grid, dim3 block, void **args, size_t smem, cudaStream_t s)
{
    return launch_kernel(k, grid, block, args, smem, s, 1);
}

static cudaError_t launch_ex(const cudaLaunchConfig_t *config, const void *func, void **args, int ptsz)
{
    if (!config) return rt_ret(cudaErrorInvalidValue);
    ENTER(ptsz);
    CUfunction f = rt_lookup_stub(func);
    if (!f) return rt_ret(cudaErrorInvalidDeviceFunction);
    CUlaunchConfig c = {
        config->gridDim.x, config->gridDim.y, config->gridDim.z,
        config->blockDim.x, config->blockDim.y, config->blockDim.z,
        (unsigned)config->dynamicSmemBytes, config->stream,
        (CUlaunchAttribute *)config->attrs, config->numAttrs,
    };
    return CU(d->cuLaunchKernelEx(&c, f, args, NULL));
}
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args)
{
    return launch_ex(config, func, args, 0);
}
cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func, void **args)
{
    return launch_ex(config, func, args, 1);
}

static cudaError_t launch_coop(const void *func, dim3 grid, dim3 block, void **args, size_t smem, cudaStream_t s,
                               int ptsz)
{
    ENTER(ptsz);
    CUfunction f = rt_lookup_stub(func);
    if (!f) return rt_ret(cudaErrorInvalidDeviceFunction);
    return CU(d->cuLaunchCooperativeKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)smem, s,
                                           args));
}
cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 grid, dim3 block, void **args, size_t smem,
                                        cudaStream_t s)
{
    return launch_coop(func, grid, block, args, smem, s, 0);
}
cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 grid, dim3 block, void **args, size_t smem,
                                             cudaStream_t s)
{
    return launch_coop(func, grid, block, args, smem, s, 1);
}

static cudaError_t graph_launch(cudaGraphExec_t g, cudaStream_t s, int ptsz)
{
    ENTER(ptsz);
    return CU(d->cuGraphLaunch(g, s));
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t g, cudaStream_t s) { return graph_launch(g, s, 0); }
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t g, cudaStream_t s) { return graph_launch(g, s, 1); }

cudaError_t cudaFuncGetParamInfo(const void *func, size_t paramIndex, size_t *paramOffset, size_t *paramSize)
{
    ENTER(0);
    CUfunction f = rt_lookup_stub(func);
    if (!f) return rt_ret(cudaErrorInvalidDeviceFunction);
    return CU(d->cuFuncGetParamInfo(f, paramIndex, paramOffset, paramSize));
}

cudaError_t cudaFuncGetName(const char **name, const void *func)
{
    if (!name) return rt_ret(cudaErrorInvalidValue);
    ENTER(0);
    CUfunction f = rt_lookup_stub(func);
    if (!f) return rt_ret(cudaErrorInvalidDeviceFunction);
    return CU(d->cuFuncGetName(name, f));
}

cudaError_t cudaGetFuncBySymbol(CUfunction *functionPtr, const void *symbolPtr)
{
    if (!functionPtr) return rt_ret(cudaErrorInvalidValue);
    ENTER(0);
    CUfunction f = rt_lookup_stub(symbolPtr);
    if (!f) return rt_ret(cudaErrorInvalidDeviceFunction);
    *functionPtr = f;
    return cudaSuccess;
}

/* ---------------- libraries: cudaKernel_t handles launch like host stubs ---------------- */

cudaError_t cudaLibraryLoadData(cudaLibrary_t *library, const void *code, int *jitOptions, void **jitOptionsValues,
                                unsigned int numJitOptions, int *libraryOptions, void **libraryOptionValues,
                                unsigned int numLibraryOptions)
{
    ENTER(0);
    return CU(d->cuLibraryLoadData(library, code, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                                   libraryOptionValues, numLibraryOptions));
}

cudaError_t cudaLibraryGetKernel(cudaKernel_t *pKernel, cudaLibrary_t library, const char *name)
{
    ENTER(0);
    CUkernel k = NULL;
    cudaError_t e = CU(d->cuLibraryGetKernel(&k, library, name));
    if (e) return e;
    if (!rt_lookup_stub(k)) {
        struct stub *s = malloc(sizeof *s);
        if (!s) return rt_ret(cudaErrorMemoryAllocation);
        s->host = k;
        s->fn = (CUfunction)(void *)k; /* simcuda: a CUkernel is its CUfunction */
        s->lib = library;
        pthread_once(&g_once, stub_init);
        pthread_rwlock_wrlock(&g_stub_lock);
        size_t b = bucket(k);
        s->next = g_stubs[b];
        g_stubs[b] = s;
        pthread_rwlock_unlock(&g_stub_lock);
    }
    *pKernel = k;
    return cudaSuccess;
}

cudaError_t cudaLibraryUnload(cudaLibrary_t library)
{
    ENTER(0);
    pthread_once(&g_once, stub_init);
    pthread_rwlock_wrlock(&g_stub_lock);
    for (size_t b = 0; b < NBUCKETS; b++)
        for (struct stub **pp = &g_stubs[b]; *pp;) {
            struct stub *s = *pp;
            if (s->lib == library && library) {
                *pp = s->next;
                free(s);
            } else {
                pp = &s->next;
            }
        }
    pthread_rwlock_unlock(&g_stub_lock);
    return CU(d->cuLibraryUnload(library));
}
