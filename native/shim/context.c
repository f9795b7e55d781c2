/*
 * context.c — who this process is in a multi-GPU job, and which devices it uses.
 *
 * Rank variables: read with getenv() when the process's ring is created (its first recorded CUDA
 * call, never at load time), so a variable the program set itself before that (os.environ in
 * Python, setenv) is seen, and a forked child reports its own environment at its own first call.
 * Each one set becomes a CONTEXT record "NAME=value" (an interned string).  This is more robust
 * than the drain reading /proc/<pid>/environ: that file holds only the environment at exec, and a
 * short-lived process may be gone before the drain looks.
 *
 * Devices: at the first allocation a process records on a device ordinal (the thread's last
 * cudaSetDevice), one DEVICE record with cuDeviceGetUuid's 16 bytes: the UUID names the physical
 * GPU whatever CUDA_VISIBLE_DEVICES remapped.  The only CUDA calls the shim adds, once per device
 * and process, never while a stream capture is open in the process (the capture hooks count them); for
 * a stream-ordered allocation (cudaMallocAsync, pools: legal inside a CUDA graph capture) it also asks
 * cuStreamIsCapturing of its stream (a capture begun outside the hooks) and waits for a later one.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cupti.h"
#include "shim.h"

static const char *const g_names[] = {
    /* torchrun / torch.distributed */
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK", "ROLE_RANK",
    "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
    /* JAX (jax.distributed.initialize reads these) */
    "JAX_PROCESS_ID", "JAX_NUM_PROCESSES", "JAX_PROCESS_COUNT", "JAX_LOCAL_DEVICE_IDS", "JAX_COORDINATOR_ADDRESS",
    /* TensorFlow */
    "TF_CONFIG",
    /* launchers */
    "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NODEID", "SLURM_JOB_ID",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK", "PMI_SIZE", "PMIX_RANK",
    /* devices */
    "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
    /* the framework a program (or its launcher) declares: torch|jax|tf (pyinterpose.analysis.owners) */
    "PYINTERPOSE_FRAMEWORK",
    NULL};

static void emit_pair(const char *name, const char *value) {
    char buf[4200];
    snprintf(buf, sizeof buf, "%s=%s", name, value);
    uint32_t id = pi_intern(buf);
    if (id) pi_emit(PI_OP_CONTEXT, 0, 0, 0, 0, 0, id, 0);
}

void pi_context_env(void) {
    for (int i = 0; g_names[i]; i++) {
        const char *v = getenv(g_names[i]);
        if (v) emit_pair(g_names[i], v);
    }
    char host[256];
    if (gethostname(host, sizeof host) == 0) {
        host[sizeof host - 1] = 0;
        emit_pair("HOST", host);
    }
}

/* devices this process has recorded (bit = ordinal); a forked child starts again */
static _Atomic uint64_t g_seen;

void pi_context_atfork_child(void) { atomic_store(&g_seen, 0); }

typedef CUresult (*uuid_fn)(char *, CUdevice);
typedef CUresult (*capturing_fn)(CUstream, int *);

void pi_context_device(int stream_ordered, uint64_t stream) {
    int dev = pi_t.device;
    if (dev < 0 || dev >= 64) return;
    uint64_t bit = 1ull << dev;
    if (PI_LIKELY(atomic_load_explicit(&g_seen, memory_order_relaxed) & bit)) return;
    if (pi_gpu_capturing()) return; /* a stream capture is open in this process (hooks.def counts them) */
    if (stream_ordered) {
        capturing_fn cap = (capturing_fn)pi_sym_near(NULL, "cuStreamIsCapturing");
        int status = 0;
        if (!cap || cap((CUstream)stream, &status) != 0 || status != 0) return; /* capturing: later */
    }
    if (atomic_fetch_or(&g_seen, bit) & bit) return; /* another thread did it */
    /* _v2 (CUDA 11.4+) names a MIG instance by its own UUID; the first one the parent GPU's */
    uuid_fn f = (uuid_fn)pi_sym_near(NULL, "cuDeviceGetUuid_v2");
    if (!f) f = (uuid_fn)pi_sym_near(NULL, "cuDeviceGetUuid");
    char uuid[16];
    memset(uuid, 0, sizeof uuid);
    int r = f ? f(uuid, (CUdevice)dev) : CUDA_ERROR_NOT_FOUND;
    uint64_t lo, hi;
    memcpy(&lo, uuid, 8);
    memcpy(&hi, uuid + 8, 8);
    pi_writer w;
    if (!pi_writer_open(&w, 1)) return;
    pi_event e = {.t_ns = w.t, .addr = lo, .size = hi, .tid = pi_tid(), .op = PI_OP_DEVICE, .result = r,
                  .device = (int16_t)dev};
    pi_put_as(&w, 0, &e);
    pi_writer_close(&w);
}

/* ---- driver contexts -> devices ---- */
#define PI_CTX_SLOTS 64
static _Atomic(uintptr_t) g_ctx[PI_CTX_SLOTS];   /* context pointers (0 = free slot) */
static _Atomic int g_ctx_dev[PI_CTX_SLOTS];

void pi_context_remember(CUcontext ctx, int device) {
    uintptr_t c = (uintptr_t)ctx;
    if (!c || device < 0) return;
    for (int i = 0; i < PI_CTX_SLOTS; i++) {
        uintptr_t cur = atomic_load(&g_ctx[i]);
        if (cur == c) {
            atomic_store(&g_ctx_dev[i], device);
            return;
        }
        if (cur == 0) {
            /* claim the slot, then name its device (the context pointer reaches other threads only
             * after cuDevicePrimaryCtxRetain returned, so none looks it up in between) */
            uintptr_t zero = 0;
            if (atomic_compare_exchange_strong(&g_ctx[i], &zero, c) || zero == c) {
                atomic_store(&g_ctx_dev[i], device);
                return;
            }
        }
    }
}

static int device_of(CUcontext ctx) {
    uintptr_t c = (uintptr_t)ctx;
    for (int i = 0; c && i < PI_CTX_SLOTS; i++) {
        uintptr_t cur = atomic_load(&g_ctx[i]);
        if (cur == c) return atomic_load(&g_ctx_dev[i]);
        if (cur == 0) break;
    }
    return -1;
}

#define PI_CTX_STACK 16
static PI_TLS int t_pushed[PI_CTX_STACK]; /* the device each push replaced */
static PI_TLS int t_npushed;

void pi_context_current(CUcontext ctx, int push) {
    int d = device_of(ctx);
    if (push) {
        if (t_npushed < PI_CTX_STACK) t_pushed[t_npushed] = pi_t.device;
        t_npushed++;
    }
    if (d >= 0) pi_t.device = d; /* a context not retained through the hooks: the device stays */
}

void pi_context_pop(void) {
    if (t_npushed <= 0) return;
    t_npushed--;
    if (t_npushed < PI_CTX_STACK) pi_t.device = t_pushed[t_npushed];
}

/* ---- the size of a peer's buffer opened with cudaIpcOpenMemHandle / cuIpcOpenMemHandle ----
 * The open does not say it; cuMemGetAddressRange_v2 does.  One CUDA call per open (an IPC open never
 * happens inside a stream capture; none is made while one is open in the process anyway); 0 when the
 * driver has no answer (the block is then not resolved from kernel arguments). */
typedef CUresult (*range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);

uint64_t pi_ipc_size(uint64_t ptr) {
    if (!ptr || pi_gpu_capturing()) return 0;
    range_fn f = (range_fn)pi_sym_near(NULL, "cuMemGetAddressRange_v2");
    CUdeviceptr base = 0;
    size_t size = 0;
    if (!f || f(&base, &size, (CUdeviceptr)ptr) != 0 || base != ptr) return 0;
    return size;
}
