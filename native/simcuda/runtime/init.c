/* init.c — simcuda runtime: reaching the driver (dlopen + cuGetProcAddress_v2),
 * per-thread device and context, error state. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include "../sim_runtime.h"
#include "../simcu_hook.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static cudaError_t g_load_error = RT_ERROR_INSUFFICIENT_DRIVER;
static void *g_handle;
static rt_getproc_fn g_getproc;
static struct rt_driver g_drv, g_drv_ptsz;
static int g_ndevices;
static CUcontext g_primary[64];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static __thread int t_device;     /* cudaSetDevice is per thread */
static __thread int t_ctx_device = -1; /* device whose primary context this thread made current */
static __thread cudaError_t t_last;

static void atfork_prepare(void) { pthread_mutex_lock(&g_lock); }
static void atfork_parent(void) { pthread_mutex_unlock(&g_lock); }
static void atfork_child(void) { pthread_mutex_init(&g_lock, NULL); }

static int resolve(struct rt_driver *d, cuuint64_t flags)
{
    CUdriverProcAddressQueryResult st;
#define RESOLVE(ret, name, params)                                                              \
    if (g_getproc(#name, (void **)&d->name, RT_VERSION, flags, &st) != CUDA_SUCCESS || !d->name) { \
        fprintf(stderr, "simcuda runtime: driver has no %s\n", #name);                          \
        return -1;                                                                              \
    }
    DRIVER_FUNCS(RESOLVE)
#undef RESOLVE
    return 0;
}

/* the driver's private table for tracing runtime calls (simcu_hook.h), as real libcudart has one */
static const struct simcu_rt_trace *g_trace;

HIDDEN int rt_trace_enter(void)
{
    const struct simcu_rt_trace *t = g_trace;
    if (!t) return 0;
    t->enter();
    return 1;
}

HIDDEN void rt_trace_leave(int *token)
{
    if (*token && g_trace) g_trace->leave();
}

typedef struct { char bytes[16]; } rt_uuid; /* CUuuid */
typedef CUresult (*export_table_fn)(const void **, const rt_uuid *);

static void load(void)
{
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    g_handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!g_handle) return;
    g_getproc = (rt_getproc_fn)dlsym(g_handle, "cuGetProcAddress_v2");
    if (!g_getproc) return;
    export_table_fn get_table = NULL;
    CUdriverProcAddressQueryResult st;
    if (g_getproc("cuGetExportTable", (void **)&get_table, RT_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &st) ==
            CUDA_SUCCESS && get_table) {
        rt_uuid id;
        memcpy(id.bytes, SIMCU_RT_TRACE_UUID, 16);
        const void *t = NULL;
        if (get_table(&t, &id) == CUDA_SUCCESS && t && ((const struct simcu_rt_trace *)t)->size >= sizeof *g_trace)
            g_trace = t;
    }
    if (resolve(&g_drv, CU_GET_PROC_ADDRESS_DEFAULT) ||
        resolve(&g_drv_ptsz, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return;
    CUresult r = g_drv.cuInit(0);
    if (r == CUDA_SUCCESS) r = g_drv.cuDeviceGetCount(&g_ndevices);
    if (r == CUDA_SUCCESS && g_ndevices == 0) r = CUDA_ERROR_NO_DEVICE;
    if (g_ndevices > 64) g_ndevices = 64;
    g_load_error = r == CUDA_SUCCESS ? cudaSuccess : rt_from_cu(r);
}

HIDDEN cudaError_t rt_load(void)
{
    pthread_once(&g_once, load);
    return g_load_error;
}

HIDDEN rt_getproc_fn rt_getproc(void) { return rt_load() == cudaSuccess ? g_getproc : NULL; }
HIDDEN void *rt_cuda_handle(void) { return rt_load() == cudaSuccess ? g_handle : NULL; }
HIDDEN int rt_device_count(void) { return rt_load() == cudaSuccess ? g_ndevices : 0; }
HIDDEN int rt_current_device(void) { return t_device; }
HIDDEN void rt_set_device(int dev) { t_device = dev; }

HIDDEN cudaError_t rt_enter(int ptsz, const struct rt_driver **drv)
{
    cudaError_t e = rt_load();
    if (e) return e;
    if (t_ctx_device != t_device) {
        int dev = t_device;
        CUresult r = CUDA_SUCCESS;
        pthread_mutex_lock(&g_lock);
        if (!g_primary[dev]) r = g_drv.cuDevicePrimaryCtxRetain(&g_primary[dev], dev);
        CUcontext ctx = g_primary[dev];
        pthread_mutex_unlock(&g_lock);
        if (r == CUDA_SUCCESS) r = g_drv.cuCtxSetCurrent(ctx);
        if (r != CUDA_SUCCESS) return rt_from_cu(r);
        t_ctx_device = dev;
    }
    *drv = ptsz ? &g_drv_ptsz : &g_drv;
    return cudaSuccess;
}

HIDDEN cudaError_t rt_ret(cudaError_t err)
{
    if (err != cudaSuccess) t_last = err;
    return err;
}

/* the runtime's codes equal the driver's for every error simcuda produces
 * (1, 2, 3, 100, 101, 201, 400, 500, 600, 801, 999) */
HIDDEN cudaError_t rt_from_cu(CUresult r) { return (cudaError_t)r; }

/* ---------------- exported: errors, versions, devices ---------------- */

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = t_last;
    t_last = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return t_last; }

static const struct { cudaError_t code; const char *name, *text; } g_errors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {RT_ERROR_INSUFFICIENT_DRIVER, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorInvalidDeviceFunction, "cudaErrorInvalidDeviceFunction", "invalid device function"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {RT_ERROR_INVALID_DEVICE, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {201, "cudaErrorDeviceUninitialized", "invalid device context"},
    {208, "cudaErrorAlreadyMapped", "resource already mapped"},
    {211, "cudaErrorNotMapped", "resource not mapped"},
    {400, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorSymbolNotFound, "cudaErrorSymbolNotFound", "named symbol not found"},
    {600, "cudaErrorNotReady", "device not ready"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {RT_ERROR_UNKNOWN, "cudaErrorUnknown", "unknown error"},
};

static int error_index(cudaError_t e)
{
    for (size_t i = 0; i < sizeof g_errors / sizeof g_errors[0]; i++)
        if (g_errors[i].code == e) return (int)i;
    return -1;
}

const char *cudaGetErrorString(cudaError_t error)
{
    int i = error_index(error);
    return i < 0 ? "unrecognized error code" : g_errors[i].text;
}

const char *cudaGetErrorName(cudaError_t error)
{
    int i = error_index(error);
    return i < 0 ? "cudaErrorUnknown" : g_errors[i].name;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
    if (!v) return rt_ret(cudaErrorInvalidValue);
    *v = RT_VERSION;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
    if (!v) return rt_ret(cudaErrorInvalidValue);
    if (rt_load() != cudaSuccess) {
        *v = 0; /* no driver installed */
        return cudaSuccess;
    }
    return rt_ret(rt_from_cu(g_drv.cuDriverGetVersion(v)));
}

cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count) return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_load();
    *count = e ? 0 : g_ndevices;
    return rt_ret(e);
}

cudaError_t cudaSetDevice(int device)
{
    cudaError_t e = rt_load();
    if (e) return rt_ret(e);
    if (device < 0 || device >= g_ndevices) return rt_ret(RT_ERROR_INVALID_DEVICE);
    t_device = device;
    const struct rt_driver *d;
    return rt_ret(rt_enter(0, &d));
}

cudaError_t cudaGetDevice(int *device)
{
    if (!device) return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_load();
    if (e) return rt_ret(e);
    *device = t_device;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    const struct rt_driver *d;
    cudaError_t e = rt_enter(0, &d);
    return rt_ret(e ? e : rt_from_cu(d->cuCtxSynchronize()));
}

/* cudaGetDriverEntryPoint[ByVersion]: forward to the driver's cuGetProcAddress_v2.
 * A symbol that is not found is cudaSuccess with *funcPtr = NULL (and the status). */
static cudaError_t entry_point(const char *symbol, void **funcPtr, unsigned int version, unsigned long long flags,
                               cudaDriverEntryPointQueryResult *status)
{
    if (!symbol || !funcPtr) return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_load();
    if (e) return rt_ret(e);
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = g_getproc(symbol, funcPtr, (int)version, flags, &st);
    if (status) *status = (cudaDriverEntryPointQueryResult)st;
    if (r == CUDA_ERROR_NOT_FOUND) {
        *funcPtr = NULL;
        return st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ? rt_ret(cudaErrorInvalidValue) : cudaSuccess;
    }
    return rt_ret(rt_from_cu(r));
}

cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult *driverStatus)
{
    return entry_point(symbol, funcPtr, RT_VERSION, flags, driverStatus);
}

cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
                                         cudaDriverEntryPointQueryResult *driverStatus)
{
    return entry_point(symbol, funcPtr, RT_VERSION, flags, driverStatus);
}

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                             unsigned long long flags,
                                             cudaDriverEntryPointQueryResult *driverStatus)
{
    return entry_point(symbol, funcPtr, cudaVersion, flags, driverStatus);
}

cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                                  unsigned long long flags,
                                                  cudaDriverEntryPointQueryResult *driverStatus)
{
    return entry_point(symbol, funcPtr, cudaVersion, flags, driverStatus);
}
