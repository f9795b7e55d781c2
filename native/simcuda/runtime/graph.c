/* graph.c — simcuda runtime: stream capture and graphs, stream/event queries and waits, and the
 * device-clock knobs of simcuda.h for host stubs. */
#include <dlfcn.h>
#include "../sim_runtime.h"

static cudaError_t begin_capture(cudaStream_t s, int mode, int ptsz)
{
    ENTER(ptsz);
    return CU(d->cuStreamBeginCapture(s, mode));
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, int mode) { return begin_capture(s, mode, 0); }
cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t s, int mode) { return begin_capture(s, mode, 1); }

cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t s, cudaGraph_t g, const void *deps, const void *edata,
                                          size_t numDeps, int mode)
{
    ENTER(0);
    return CU(d->cuStreamBeginCaptureToGraph(s, g, deps, edata, numDeps, mode));
}

static cudaError_t end_capture(cudaStream_t s, cudaGraph_t *g, int ptsz)
{
    ENTER(ptsz);
    return CU(d->cuStreamEndCapture(s, g));
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) { return end_capture(s, g, 0); }
cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t *g) { return end_capture(s, g, 1); }

static cudaError_t is_capturing(cudaStream_t s, int *status, int ptsz)
{
    ENTER(ptsz);
    return CU(d->cuStreamIsCapturing(s, status));
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, int *status) { return is_capturing(s, status, 0); }
cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t s, int *status) { return is_capturing(s, status, 1); }

/* CUDA 12+ signature: flags, not the old error-node/log-buffer form */
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags)
{
    ENTER(0);
    return CU(d->cuGraphInstantiateWithFlags(e, g, flags));
}
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags)
{
    ENTER(0);
    return CU(d->cuGraphInstantiateWithFlags(e, g, flags));
}

/* cudaGraphInstantiateParams has the driver's layout (flags, upload stream, error node, result) */
cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t *e, cudaGraph_t g, void *params)
{
    ENTER(0);
    return CU(d->cuGraphInstantiateWithParams(e, g, params));
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e)
{
    ENTER(0);
    return CU(d->cuGraphExecDestroy(e));
}

cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    ENTER(0);
    return CU(d->cuGraphDestroy(g));
}

/* graph memory (driver: graphmem.c) */
cudaError_t cudaDeviceGraphMemTrim(int device)
{
    ENTER(0);
    return CU(d->cuDeviceGraphMemTrim(device));
}

cudaError_t cudaDeviceGetGraphMemAttribute(int device, int attr, void *value)
{
    ENTER(0);
    return CU(d->cuDeviceGetGraphMemAttribute(device, attr, value));
}

cudaError_t cudaDeviceSetGraphMemAttribute(int device, int attr, void *value)
{
    ENTER(0);
    return CU(d->cuDeviceSetGraphMemAttribute(device, attr, value));
}

static cudaError_t stream_query(cudaStream_t s, int ptsz)
{
    ENTER(ptsz);
    return CU(d->cuStreamQuery(s));
}
cudaError_t cudaStreamQuery(cudaStream_t s) { return stream_query(s, 0); }
cudaError_t cudaStreamQuery_ptsz(cudaStream_t s) { return stream_query(s, 1); }

static cudaError_t stream_wait(cudaStream_t s, cudaEvent_t e, unsigned int flags, int ptsz)
{
    ENTER(ptsz);
    return CU(d->cuStreamWaitEvent(s, e, flags));
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) { return stream_wait(s, e, flags, 0); }
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t s, cudaEvent_t e, unsigned int flags)
{
    return stream_wait(s, e, flags, 1);
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    ENTER(0);
    return CU(d->cuEventQuery(e));
}

/* ---------------- device-clock knobs (simcuda.h) ---------------- */

typedef CUresult (*set_dur_fn)(CUfunction, unsigned long long);
typedef CUresult (*set_next_fn)(unsigned long long);

cudaError_t simcudaSetKernelDuration(const void *hostStub, unsigned long long ns)
{
    cudaError_t e = rt_load();
    if (e) return rt_ret(e);
    set_dur_fn fn = (set_dur_fn)dlsym(rt_cuda_handle(), "simcuSetKernelDuration");
    if (!fn) return rt_ret(cudaErrorNotSupported); /* not the simulated driver */
    CUfunction f = rt_lookup_stub(hostStub);
    if (!f) return rt_ret(cudaErrorInvalidDeviceFunction);
    return rt_ret(rt_from_cu(fn(f, ns)));
}

cudaError_t simcudaSetNextLaunchDuration(unsigned long long ns)
{
    cudaError_t e = rt_load();
    if (e) return rt_ret(e);
    set_next_fn fn = (set_next_fn)dlsym(rt_cuda_handle(), "simcuSetNextLaunchDuration");
    if (!fn) return rt_ret(cudaErrorNotSupported);
    return rt_ret(rt_from_cu(fn(ns)));
}
