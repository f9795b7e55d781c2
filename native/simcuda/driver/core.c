/* core.c — simcuda driver: init, devices, contexts, streams, events, errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "../sim_driver.h"

static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;
static int g_ndevices = 1;
static int g_physical[SIM_MAX_DEVICES]; /* visible ordinal -> physical device (CUDA_VISIBLE_DEVICES) */
static size_t g_capacity = (size_t)16 << 30;
static volatile int g_init;
static struct CUctx_st g_primary[SIM_MAX_DEVICES];
static pthread_mutex_t g_ctx_lock = PTHREAD_MUTEX_INITIALIZER;

#define CTX_STACK 16
static __thread CUcontext t_ctx;
static __thread CUcontext t_stack[CTX_STACK];
static __thread int t_depth;

static void ctx_atfork_prepare(void) { pthread_mutex_lock(&g_ctx_lock); }
static void ctx_atfork_parent(void) { pthread_mutex_unlock(&g_ctx_lock); }
static void ctx_atfork_child(void) { pthread_mutex_init(&g_ctx_lock, NULL); }

static void read_env(void)
{
    const char *d = getenv("SIMCUDA_DEVICES");
    const char *m = getenv("SIMCUDA_MEMORY_BYTES");
    if (d && *d) {
        long v = strtol(d, NULL, 10);
        g_ndevices = v < 0 ? 0 : v > SIM_MAX_DEVICES ? SIM_MAX_DEVICES : (int)v;
    }
    if (m && *m) {
        unsigned long long v = strtoull(m, NULL, 10);
        if (v > 0) g_capacity = (size_t)v;
    }
    for (int i = 0; i < SIM_MAX_DEVICES; i++) g_physical[i] = i;
    /* CUDA_VISIBLE_DEVICES: a comma-separated list of physical indices or UUIDs (GPU-...), as the real
     * driver reads it: the list stops at the first entry that names no device; ordinal i is entry i. */
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (vis) {
        int n = 0, used[SIM_MAX_DEVICES] = {0};
        const char *q = vis;
        while (*q && n < SIM_MAX_DEVICES) {
            while (*q == ' ') q++;
            size_t len = strcspn(q, ",");
            int phys = -1;
            char item[64];
            snprintf(item, sizeof item, "%.*s", (int)(len < 63 ? len : 63), q);
            if (item[0] >= '0' && item[0] <= '9') {
                char *end;
                long v = strtol(item, &end, 10);
                if ((*end == 0 || *end == ' ') && v >= 0 && v < g_ndevices) phys = (int)v;
            } else if (strncmp(item, "GPU-", 4) == 0) {
                for (int d = 0; d < g_ndevices && phys < 0; d++) {
                    char u[48];
                    sim_uuid_text(d, u, sizeof u);
                    if (strlen(item) >= 8 && strncmp(u, item, strlen(item)) == 0) phys = d;
                }
            }
            if (phys < 0 || used[phys]) break;
            used[phys] = 1;
            g_physical[n++] = phys;
            q += len;
            if (*q == ',') q++;
        }
        g_ndevices = n;
    }
    for (int i = 0; i < SIM_MAX_DEVICES; i++) {
        g_primary[i].magic = MAGIC_CTX;
        g_primary[i].device = i;
    }
    pthread_atfork(ctx_atfork_prepare, ctx_atfork_parent, ctx_atfork_child);
}

/* the 16 bytes of physical device d's UUID: "simcuda-" then d + 1 (big endian) */
HIDDEN void sim_uuid_bytes(int d, unsigned char out[16])
{
    memcpy(out, "simcuda-", 8);
    uint64_t v = (uint64_t)d + 1;
    for (int i = 0; i < 8; i++) out[15 - i] = (unsigned char)(v >> (8 * i));
}

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi -L and CUDA_VISIBLE_DEVICES write it */
HIDDEN void sim_uuid_text(int d, char *buf, size_t n)
{
    unsigned char b[16];
    sim_uuid_bytes(d, b);
    snprintf(buf, n, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
             b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

HIDDEN int sim_physical_device(int ordinal) { pthread_once(&g_env_once, read_env); return g_physical[ordinal]; }

HIDDEN int sim_ndevices(void) { pthread_once(&g_env_once, read_env); return g_ndevices; }
HIDDEN size_t sim_capacity(void) { pthread_once(&g_env_once, read_env); return g_capacity; }
HIDDEN int sim_initialized(void) { return g_init; }

HIDDEN uint64_t sim_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int valid_ctx(CUcontext c) { return c && c->magic == MAGIC_CTX; }

HIDDEN CUresult sim_current_device(int *dev)
{
    if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
    if (!valid_ctx(t_ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    *dev = t_ctx->device;
    return CUDA_SUCCESS;
}

static CUresult check_device(CUdevice dev)
{
    if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= sim_ndevices()) return SIM_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

HIDDEN CUresult sim_check_stream(CUstream s)
{
    if (s == NULL || s == SIM_STREAM_LEGACY || s == SIM_STREAM_PER_THREAD) return CUDA_SUCCESS;
    return s->magic == MAGIC_STREAM ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* ---------------- init / version / devices ---------------- */

SIM_API(CUresult, cuInit, (unsigned int flags))
{
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (sim_ndevices() == 0) return CUDA_ERROR_NO_DEVICE;
    g_init = 1;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuDriverGetVersion, (int *version))
{
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    *version = SIM_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuDeviceGetCount, (int *count))
{
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
    *count = sim_ndevices();
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuDeviceGet, (CUdevice *device, int ordinal))
{
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_device(ordinal);
    if (r) return r;
    *device = ordinal;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuDeviceGetName, (char *name, int len, CUdevice dev))
{
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_device(dev);
    if (r) return r;
    snprintf(name, (size_t)len, "%s", "simcuda virtual GPU");
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuDeviceTotalMem_v2, (size_t *bytes, CUdevice dev))
{
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_device(dev);
    if (r) return r;
    *bytes = sim_capacity();
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuDeviceGetAttribute, (int *pi, int attrib, CUdevice dev))
{
    if (!pi) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_device(dev);
    if (r) return r;
    int v;
    switch (attrib) {
    case 1: v = 1024; break;            /* MAX_THREADS_PER_BLOCK */
    case 2: case 3: v = 1024; break;    /* MAX_BLOCK_DIM_X/Y */
    case 4: v = 64; break;              /* MAX_BLOCK_DIM_Z */
    case 5: v = 2147483647; break;      /* MAX_GRID_DIM_X */
    case 6: case 7: v = 65535; break;   /* MAX_GRID_DIM_Y/Z */
    case 8: v = 49152; break;           /* MAX_SHARED_MEMORY_PER_BLOCK */
    case 9: v = 65536; break;           /* TOTAL_CONSTANT_MEMORY */
    case 10: v = 32; break;             /* WARP_SIZE */
    case 12: v = 65536; break;          /* MAX_REGISTERS_PER_BLOCK */
    case 13: v = 1755000; break;        /* CLOCK_RATE kHz */
    case 16: v = 132; break;            /* MULTIPROCESSOR_COUNT */
    case 18: v = 0; break;              /* INTEGRATED */
    case 19: v = 1; break;              /* CAN_MAP_HOST_MEMORY */
    case 33: v = sim_physical_device(dev) + 1; break; /* PCI_BUS_ID */
    case 34: v = 0; break;              /* PCI_DEVICE_ID */
    case 36: v = 2619000; break;        /* MEMORY_CLOCK_RATE kHz */
    case 37: v = 5120; break;           /* GLOBAL_MEMORY_BUS_WIDTH */
    case 38: v = 50 << 20; break;       /* L2_CACHE_SIZE */
    case 39: v = 2048; break;           /* MAX_THREADS_PER_MULTIPROCESSOR */
    case 41: v = 1; break;              /* UNIFIED_ADDRESSING */
    case 50: v = 0; break;              /* PCI_DOMAIN_ID */
    case 75: v = 9; break;              /* COMPUTE_CAPABILITY_MAJOR */
    case 76: v = 0; break;              /* COMPUTE_CAPABILITY_MINOR */
    case 83: v = 1; break;              /* MANAGED_MEMORY */
    case 88: v = 0; break;              /* PAGEABLE_MEMORY_ACCESS */
    case 89: v = 1; break;              /* CONCURRENT_MANAGED_ACCESS */
    case 95: v = 1; break;              /* COOPERATIVE_LAUNCH */
    case 102: v = 1; break;             /* VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED */
    case 115: v = 1; break;             /* MEMORY_POOLS_SUPPORTED */
    default:
        if (attrib <= 0 || attrib > 200) return CUDA_ERROR_INVALID_VALUE;
        v = 0;
    }
    *pi = v;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuDeviceGetUuid, (sim_CUuuid *uuid, CUdevice dev))
{
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_device(dev);
    if (r) return r;
    sim_uuid_bytes(sim_physical_device(dev), (unsigned char *)uuid->bytes);
    return CUDA_SUCCESS;
}
SIM_ALIAS(CUresult, cuDeviceGetUuid_v2, cuDeviceGetUuid, (sim_CUuuid *uuid, CUdevice dev));

/* ---------------- contexts ---------------- */

SIM_API(CUresult, cuDevicePrimaryCtxRetain, (CUcontext *pctx, CUdevice dev))
{
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_device(dev);
    if (r) return r;
    pthread_mutex_lock(&g_ctx_lock);
    g_primary[dev].refcount++;
    pthread_mutex_unlock(&g_ctx_lock);
    *pctx = &g_primary[dev];
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuDevicePrimaryCtxRelease_v2, (CUdevice dev))
{
    CUresult r = check_device(dev);
    if (r) return r;
    pthread_mutex_lock(&g_ctx_lock);
    int rc = g_primary[dev].refcount > 0 ? (g_primary[dev].refcount--, 0) : -1;
    pthread_mutex_unlock(&g_ctx_lock);
    return rc ? CUDA_ERROR_INVALID_CONTEXT : CUDA_SUCCESS;
}
SIM_ALIAS(CUresult, cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2, (CUdevice dev));

SIM_API(CUresult, cuDevicePrimaryCtxGetState, (CUdevice dev, unsigned int *flags, int *active))
{
    if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_device(dev);
    if (r) return r;
    *flags = 0;
    *active = g_primary[dev].refcount > 0;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuCtxGetCurrent, (CUcontext *pctx))
{
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
    *pctx = t_ctx;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuCtxSetCurrent, (CUcontext ctx))
{
    if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
    if (ctx && !valid_ctx(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    t_ctx = ctx;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuCtxPushCurrent_v2, (CUcontext ctx))
{
    if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
    if (!valid_ctx(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    if (t_depth >= CTX_STACK) return CUDA_ERROR_INVALID_VALUE;
    t_stack[t_depth++] = t_ctx;
    t_ctx = ctx;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuCtxPopCurrent_v2, (CUcontext *pctx))
{
    if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
    if (!t_ctx) return CUDA_ERROR_INVALID_CONTEXT;
    if (pctx) *pctx = t_ctx;
    t_ctx = t_depth > 0 ? t_stack[--t_depth] : NULL;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuCtxGetDevice, (CUdevice *device))
{
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    CUresult r = sim_current_device(&dev);
    if (r) return r;
    *device = dev;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuCtxSynchronize, (void))
{
    int dev;
    CUresult r = sim_current_device(&dev);
    if (r) return r;
    sim_wait_until(sim_device_done_at(dev));
    return CUDA_SUCCESS;
}

/* ---------------- streams ---------------- */

SIM_API(CUresult, cuStreamCreate, (CUstream *phStream, unsigned int flags))
{
    if (!phStream) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    CUresult r = sim_current_device(&dev);
    if (r) return r;
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    s->magic = MAGIC_STREAM;
    s->device = dev;
    s->flags = flags;
    sim_queue_init(&s->q, dev, (flags & 1) != 0 /* CU_STREAM_NON_BLOCKING */);
    *phStream = s;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuStreamCreateWithPriority, (CUstream *phStream, unsigned int flags, int priority))
{
    return sim_cuStreamCreate(phStream, flags);
}

SIM_API(CUresult, cuStreamDestroy_v2, (CUstream s))
{
    if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
    if (!s || s == SIM_STREAM_LEGACY || s == SIM_STREAM_PER_THREAD || s->magic != MAGIC_STREAM)
        return CUDA_ERROR_INVALID_HANDLE;
    s->magic = MAGIC_DEAD;
    sim_queue_fini(&s->q); /* work still queued completes on its own: nothing to wait for */
    free(s);
    return CUDA_SUCCESS;
}
SIM_ALIAS(CUresult, cuStreamDestroy, cuStreamDestroy_v2, (CUstream s));

/* the queue behind s on the current device (or s's own device) */
HIDDEN __thread int sim_t_ptds;

HIDDEN CUresult sim_stream_queue(CUstream s, struct sim_queue **q)
{
    if (s == NULL && sim_t_ptds) s = SIM_STREAM_PER_THREAD; /* a _ptsz/_ptds entry point */
    CUresult r = sim_check_stream(s);
    if (r) return r;
    int dev;
    if (s != NULL && s != SIM_STREAM_LEGACY && s != SIM_STREAM_PER_THREAD) dev = s->device;
    else if (sim_current_device(&dev)) dev = 0; /* no context: device 0 (simcuda has always allowed it) */
    *q = sim_queue_of(s, dev);
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuStreamSynchronize, (CUstream s))
{
    if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
    struct sim_queue *q;
    CUresult r = sim_stream_queue(s, &q);
    if (r) return r;
    sim_wait_until(sim_queue_done_at(q));
    return CUDA_SUCCESS;
}
SIM_VARIANT(CUresult, cuStreamSynchronize_ptsz, cuStreamSynchronize, (CUstream s), (s));

SIM_API(CUresult, cuStreamQuery, (CUstream s))
{
    if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
    struct sim_queue *q;
    CUresult r = sim_stream_queue(s, &q);
    if (r) return r;
    return sim_now_ns() >= sim_queue_done_at(q) ? CUDA_SUCCESS : SIM_ERROR_NOT_READY;
}
SIM_VARIANT(CUresult, cuStreamQuery_ptsz, cuStreamQuery, (CUstream s), (s));

SIM_API(CUresult, cuStreamIsCapturing, (CUstream s, int *status))
{
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = sim_check_stream(s);
    if (r) return r;
    *status = 0; /* CU_STREAM_CAPTURE_STATUS_NONE */
    struct sim_queue *q;
    if (g_init && sim_stream_queue(s, &q) == CUDA_SUCCESS && q->capture) *status = 1; /* ACTIVE */
    return CUDA_SUCCESS;
}
SIM_VARIANT(CUresult, cuStreamIsCapturing_ptsz, cuStreamIsCapturing, (CUstream s, int *status), (s, status));

SIM_API(CUresult, cuStreamWaitEvent, (CUstream s, CUevent e, unsigned int flags))
{
    CUresult r = sim_check_stream(s);
    if (r) return r;
    if (!e || e->magic != MAGIC_EVENT) return CUDA_ERROR_INVALID_HANDLE;
    sim_count_stream_wait();
    struct sim_queue *q;
    if (g_init && e->recorded && sim_stream_queue(s, &q) == CUDA_SUCCESS) sim_queue_wait_for(q, e->t_ns);
    return CUDA_SUCCESS;
}
SIM_VARIANT(CUresult, cuStreamWaitEvent_ptsz, cuStreamWaitEvent, (CUstream s, CUevent e, unsigned int flags), (s, e, flags));

/* ---------------- events ---------------- */

SIM_API(CUresult, cuEventCreate, (CUevent *phEvent, unsigned int flags))
{
    if (!phEvent) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    CUresult r = sim_current_device(&dev);
    if (r) return r;
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = MAGIC_EVENT;
    *phEvent = e;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuEventRecord, (CUevent e, CUstream s))
{
    if (!e || e->magic != MAGIC_EVENT) return CUDA_ERROR_INVALID_HANDLE;
    struct sim_queue *q;
    CUresult r = sim_stream_queue(s, &q);
    if (r) return r;
    e->t_ns = sim_queue_mark(q); /* the device time when the stream's work so far is done */
    e->recorded = 1;
    sim_count_event_record();
    return CUDA_SUCCESS;
}
SIM_VARIANT(CUresult, cuEventRecord_ptsz, cuEventRecord, (CUevent e, CUstream s), (e, s));

SIM_API(CUresult, cuEventSynchronize, (CUevent e))
{
    if (!e || e->magic != MAGIC_EVENT) return CUDA_ERROR_INVALID_HANDLE;
    if (e->recorded) sim_wait_until(e->t_ns);
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuEventQuery, (CUevent e))
{
    if (!e || e->magic != MAGIC_EVENT) return CUDA_ERROR_INVALID_HANDLE;
    return !e->recorded || sim_now_ns() >= e->t_ns ? CUDA_SUCCESS : SIM_ERROR_NOT_READY;
}

SIM_API(CUresult, cuEventElapsedTime, (float *ms, CUevent start, CUevent end))
{
    if (!ms) return CUDA_ERROR_INVALID_VALUE;
    if (!start || start->magic != MAGIC_EVENT || !end || end->magic != MAGIC_EVENT)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!start->recorded || !end->recorded) return SIM_ERROR_NOT_READY;
    uint64_t now = sim_now_ns();
    if (now < start->t_ns || now < end->t_ns) return SIM_ERROR_NOT_READY; /* not reached on the device yet */
    *ms = (float)(((double)end->t_ns - (double)start->t_ns) / 1e6);
    return CUDA_SUCCESS;
}
SIM_ALIAS(CUresult, cuEventElapsedTime_v2, cuEventElapsedTime, (float *ms, CUevent start, CUevent end));

SIM_API(CUresult, cuEventDestroy_v2, (CUevent e))
{
    if (!e || e->magic != MAGIC_EVENT) return CUDA_ERROR_INVALID_HANDLE;
    e->magic = MAGIC_DEAD;
    free(e);
    return CUDA_SUCCESS;
}
SIM_ALIAS(CUresult, cuEventDestroy, cuEventDestroy_v2, (CUevent e));

/* ---------------- errors ---------------- */

static const struct { CUresult code; const char *name, *text; } g_errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {SIM_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {SIM_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {SIM_ERROR_ALREADY_MAPPED, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
    {SIM_ERROR_NOT_MAPPED, "CUDA_ERROR_NOT_MAPPED", "resource not mapped"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {SIM_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {SIM_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static int error_index(CUresult e)
{
    for (size_t i = 0; i < sizeof g_errors / sizeof g_errors[0]; i++)
        if (g_errors[i].code == e) return (int)i;
    return -1;
}

SIM_API(CUresult, cuGetErrorString, (CUresult error, const char **pStr))
{
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    int i = error_index(error);
    *pStr = i < 0 ? NULL : g_errors[i].text;
    return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

SIM_API(CUresult, cuGetErrorName, (CUresult error, const char **pStr))
{
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    int i = error_index(error);
    *pStr = i < 0 ? NULL : g_errors[i].name;
    return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* one private table: the runtime's calls, bracketed (simcu_hook.h, SIMCU_RT_TRACE_UUID) */
SIM_API(CUresult, cuGetExportTable, (const void **ppExportTable, const sim_CUuuid *id))
{
    if (!ppExportTable || !id) return CUDA_ERROR_INVALID_VALUE;
    if (memcmp(id->bytes, SIMCU_RT_TRACE_UUID, 16) == 0) {
        *ppExportTable = sim_rt_trace_table();
        return CUDA_SUCCESS;
    }
    *ppExportTable = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}
