/*
 * oom.c — the device's free and total memory when an allocation fails for lack of it.
 *
 * Decision: on an out-of-memory result (2: cudaErrorMemoryAllocation / CUDA_ERROR_OUT_OF_MEMORY),
 * and only then, the shim calls the driver's cuMemGetInfo_v2 and cuCtxGetDevice once, from the
 * outermost hooked call (never reentrantly: it calls the real driver functions directly, not
 * through a hook), and records them in a MEMINFO event after the failure.  Failures are rare, so the
 * two calls cost nothing on the normal path.  Never during stream capture: the shim counts the
 * captures in progress in the process (hooks on cudaStreamBeginCapture / cuStreamBeginCapture[_v2] /
 * ...ToGraph and EndCapture, kept by the device clock: cupti.c) and skips the query while any is
 * open (a query in global capture mode could invalidate another thread's capture).  A query that
 * fails (no current context) records nothing.
 */
#include "cupti.h"
#include "shim.h"

typedef CUresult (*meminfo_fn)(size_t *, size_t *);
typedef CUresult (*ctxdev_fn)(int *);

static meminfo_fn volatile g_meminfo;
static ctxdev_fn volatile g_ctxdev;
static int volatile g_resolved;

int pi_meminfo(uint64_t *freeb, uint64_t *total, int *device) {
    if (pi_gpu_capturing()) return 0;
    if (!g_resolved) {
        g_meminfo = (meminfo_fn)pi_sym_near(NULL, "cuMemGetInfo_v2");
        g_ctxdev = (ctxdev_fn)pi_sym_near(NULL, "cuCtxGetDevice");
        g_resolved = 1;
    }
    meminfo_fn mi = g_meminfo;
    if (!mi) return 0;
    size_t f = 0, t = 0;
    if (mi(&f, &t) != CUDA_SUCCESS) return 0;
    int d = -1;
    ctxdev_fn cd = g_ctxdev;
    if (!cd || cd(&d) != CUDA_SUCCESS) d = -1;
    *freeb = f;
    *total = t;
    *device = d;
    return 1;
}
