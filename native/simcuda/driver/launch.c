/* launch.c — simcuda driver: kernels (host functions with a parameter layout),
 * launches, function attributes, graphs, TMA descriptors. */
#include <stdlib.h>
#include <string.h>
#include "../sim_driver.h"

static int valid_func(CUfunction f) { return f && f->magic == MAGIC_FUNC; }

SIM_API(CUresult, simcuRegisterKernel, (const char *name, simcu_kernel_fn fn, unsigned nparams,
                                       const size_t *offsets, const size_t *sizes, CUfunction *out))
{
    if (!name || !fn || !out || (nparams && (!offsets || !sizes))) return CUDA_ERROR_INVALID_VALUE;
    struct CUfunc_st *f = calloc(1, sizeof *f);
    if (!f) return CUDA_ERROR_OUT_OF_MEMORY;
    f->name = strdup(name);
    f->offsets = calloc(nparams ? nparams : 1, sizeof(size_t));
    f->sizes = calloc(nparams ? nparams : 1, sizeof(size_t));
    if (!f->name || !f->offsets || !f->sizes) {
        free(f->name), free(f->offsets), free(f->sizes), free(f);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (unsigned i = 0; i < nparams; i++) {
        if (sizes[i] == 0) {
            free(f->name), free(f->offsets), free(f->sizes), free(f);
            return CUDA_ERROR_INVALID_VALUE;
        }
        f->offsets[i] = offsets[i];
        f->sizes[i] = sizes[i];
        if (offsets[i] + sizes[i] > f->argsize) f->argsize = offsets[i] + sizes[i];
    }
    f->fn = fn;
    f->nparams = nparams;
    f->magic = MAGIC_FUNC;
    *out = f;
    return CUDA_SUCCESS;
}

#define MAX_STACK_PARAMS 64

static void run(CUfunction f, void **params)
{
    if (f->fn) f->fn(params);
    else sim_image_kernel(f, params);
}

/* run f with kernelParams or the packed `extra` buffer */
static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       CUstream s, void **kernelParams, void **extra)
{
    int dev;
    CUresult r = sim_current_device(&dev);
    if (r) return r;
    if (!valid_func(f)) return CUDA_ERROR_INVALID_HANDLE;
    if (!gx || !gy || !gz || !bx || !by || !bz || (uint64_t)bx * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_check_stream(s))) return r;
    if (kernelParams && extra) return CUDA_ERROR_INVALID_VALUE;
    if (f->nparams == 0 || kernelParams) {
        if (f->nparams && !kernelParams) return CUDA_ERROR_INVALID_VALUE;
        run(f, kernelParams);
        return CUDA_SUCCESS;
    }
    if (!extra) return CUDA_ERROR_INVALID_VALUE;
    char *buf = NULL;
    size_t bufsize = 0;
    int have_size = 0;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
            buf = extra[i + 1];
        } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
            if (!extra[i + 1]) return CUDA_ERROR_INVALID_VALUE;
            bufsize = *(size_t *)extra[i + 1];
            have_size = 1;
        } else {
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    if (!buf || !have_size || bufsize < f->argsize) return CUDA_ERROR_INVALID_VALUE;
    void *stack[MAX_STACK_PARAMS];
    void **params = f->nparams <= MAX_STACK_PARAMS ? stack : malloc(f->nparams * sizeof(void *));
    if (!params) return CUDA_ERROR_OUT_OF_MEMORY;
    for (unsigned i = 0; i < f->nparams; i++) params[i] = buf + f->offsets[i];
    run(f, params);
    if (params != stack) free(params);
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuLaunchKernel, (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                  unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                  unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra))
{
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams, extra);
}
SIM_VARIANT(CUresult, cuLaunchKernel_ptsz, cuLaunchKernel, (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,
           unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
           void **kernelParams, void **extra), (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams, extra));

SIM_API(CUresult, cuLaunchKernelEx, (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra))
{
    if (!config) return CUDA_ERROR_INVALID_VALUE;
    if (config->numAttrs && !config->attrs) return CUDA_ERROR_INVALID_VALUE;
    return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
                  config->blockDimZ, config->hStream, kernelParams, extra);
}
SIM_VARIANT(CUresult, cuLaunchKernelEx_ptsz, cuLaunchKernelEx, (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra), (config, f, kernelParams, extra));

SIM_API(CUresult, cuLaunchCooperativeKernel, (CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                             unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                             unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                             void **kernelParams))
{
    if (valid_func(f) && f->nparams && !kernelParams) return CUDA_ERROR_INVALID_VALUE;
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams, NULL);
}
SIM_VARIANT(CUresult, cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel, (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,
           unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
           void **kernelParams), (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams));

/* ---------------- function / kernel attributes ---------------- */

SIM_API(CUresult, cuFuncGetParamInfo, (CUfunction f, size_t paramIndex, size_t *paramOffset, size_t *paramSize))
{
    if (!valid_func(f)) return CUDA_ERROR_INVALID_HANDLE;
    if (paramIndex >= f->nparams) return CUDA_ERROR_INVALID_VALUE;
    if (paramOffset) *paramOffset = f->offsets[paramIndex];
    if (paramSize) *paramSize = f->sizes[paramIndex];
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuFuncGetName, (const char **name, CUfunction f))
{
    if (!name) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_func(f)) return CUDA_ERROR_INVALID_HANDLE;
    *name = f->name;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuKernelGetParamInfo, (CUkernel k, size_t paramIndex, size_t *paramOffset, size_t *paramSize))
{
    return sim_cuFuncGetParamInfo((CUfunction)(void *)k, paramIndex, paramOffset, paramSize);
}

SIM_API(CUresult, cuKernelGetName, (const char **name, CUkernel k))
{
    return sim_cuFuncGetName(name, (CUfunction)(void *)k);
}

SIM_API(CUresult, cuKernelGetFunction, (CUfunction *pFunc, CUkernel k))
{
    if (!pFunc) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_func((CUfunction)(void *)k)) return CUDA_ERROR_INVALID_HANDLE;
    *pFunc = (CUfunction)(void *)k;
    return CUDA_SUCCESS;
}

/* ---------------- graphs (no nodes: launch is a no-op) ---------------- */

SIM_API(CUresult, cuGraphCreate, (CUgraph *phGraph, unsigned int flags))
{
    if (!phGraph || flags) return CUDA_ERROR_INVALID_VALUE;
    struct CUgraph_st *g = calloc(1, sizeof *g);
    if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
    g->magic = MAGIC_GRAPH;
    *phGraph = g;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuGraphInstantiateWithFlags, (CUgraphExec *phExec, CUgraph g, unsigned long long flags))
{
    if (!phExec || !g || g->magic != MAGIC_GRAPH) return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphExec_st *e = calloc(1, sizeof *e);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = MAGIC_GEXEC;
    *phExec = e;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuGraphLaunch, (CUgraphExec e, CUstream s))
{
    if (!e || e->magic != MAGIC_GEXEC) return CUDA_ERROR_INVALID_VALUE;
    return sim_check_stream(s);
}
SIM_VARIANT(CUresult, cuGraphLaunch_ptsz, cuGraphLaunch, (CUgraphExec e, CUstream s), (e, s));

SIM_API(CUresult, cuGraphExecDestroy, (CUgraphExec e))
{
    if (!e || e->magic != MAGIC_GEXEC) return CUDA_ERROR_INVALID_VALUE;
    e->magic = MAGIC_DEAD;
    free(e);
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuGraphDestroy, (CUgraph g))
{
    if (!g || g->magic != MAGIC_GRAPH) return CUDA_ERROR_INVALID_VALUE;
    g->magic = MAGIC_DEAD;
    free(g);
    return CUDA_SUCCESS;
}

/* ---------------- TMA descriptors ---------------- */

#define TENSORMAP_MAGIC 0x50414d534e4554ull /* "TENSMAP" */

SIM_API(CUresult, cuTensorMapEncodeTiled, (sim_CUtensorMap *tensorMap, int dataType, cuuint32_t tensorRank,
                                          void *globalAddress, const cuuint64_t *globalDim,
                                          const cuuint64_t *globalStrides, const cuuint32_t *boxDim,
                                          const cuuint32_t *elementStrides, int interleave, int swizzle,
                                          int l2Promotion, int oobFill))
{
    if (!tensorMap || !globalAddress || !globalDim || !boxDim || !elementStrides) return CUDA_ERROR_INVALID_VALUE;
    if (tensorRank == 0 || tensorRank > 5 || ((uintptr_t)globalAddress & 15)) return CUDA_ERROR_INVALID_VALUE;
    if (tensorRank > 1 && !globalStrides) return CUDA_ERROR_INVALID_VALUE;
    memset(tensorMap, 0, sizeof *tensorMap);
    tensorMap->opaque[0] = TENSORMAP_MAGIC;
    tensorMap->opaque[1] = (cuuint64_t)(uintptr_t)globalAddress;
    tensorMap->opaque[2] = tensorRank;
    tensorMap->opaque[3] = (cuuint64_t)dataType;
    for (cuuint32_t i = 0; i < tensorRank; i++) tensorMap->opaque[4 + i] = globalDim[i];
    for (cuuint32_t i = 0; i < tensorRank; i++) tensorMap->opaque[9 + i] = boxDim[i];
    return CUDA_SUCCESS;
}
