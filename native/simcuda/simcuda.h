/*
 * simcuda.h — the simcuda extension API (everything else is the plain CUDA
 * runtime/driver ABI declared in pi_cuda.h).
 *
 * A simcuda "kernel" is a host function `void fn(void **params)` that runs
 * synchronously on the launching thread.  params[i] points at the value of
 * parameter i (exactly like CUDA's kernelParams).  The parameter layout
 * (offset and size of each parameter in the packed argument buffer) is what
 * cuFuncGetParamInfo / cudaFuncGetParamInfo report and what the packed
 * `extra` launch form is decoded with.
 *
 * Environment:
 *   SIMCUDA_DEVICES       number of (physical) devices (default 1); device d's UUID is
 *                         "simcuda-" then d + 1 as 8 big-endian bytes (GPU-73696d63-7564-612d-...)
 *   CUDA_VISIBLE_DEVICES  as on real hardware: indices or UUID prefixes; ordinal i = entry i
 *   SIMCUDA_MEMORY_BYTES  device capacity in bytes, per device (default 16 GiB)
 *
 * The device clock (docs/simcuda-device-clock.md): every stream is a queue on a simulated device clock
 * in CLOCK_MONOTONIC ns; synchronising really waits for it.  Kernels, copies and memsets take no device
 * time unless asked to:
 *   SIMCUDA_KERNEL_NS          duration of a kernel that has none of its own (default 0)
 *   SIMCUDA_LAUNCH_LATENCY_NS  earliest start after the enqueue (default 0)
 *   SIMCUDA_H2D_GBPS, SIMCUDA_D2H_GBPS, SIMCUDA_D2D_GBPS  copy engine bandwidths, GB/s (default 0: instant)
 *   SIMCUDA_COPY_LATENCY_NS    added to every copy (default 0)
 *   SIMCUDA_MEMSET_GBPS        memset speed (default 0: instant)
 *   SIMCUDA_QUEUE_DEPTH        unfinished ops one stream holds before a launch blocks (default 1024)
 *   SIMCUDA_DEVICE_LOG         a file: one line per device op (the ground truth for tests)
 * A kernel's duration: simcuSetNextLaunchDuration (this thread's next launch, captured launches
 * included) > simcuSetKernelDuration (per function) > kernel_ns.
 */
#ifndef SIMCUDA_H
#define SIMCUDA_H
#include "pi_cuda.h"

typedef void (*simcu_kernel_fn)(void **params);

/* libcuda.so.1: register a kernel; *out is a CUfunction usable with every
 * launch API.  offsets/sizes are copied.  nparams may be 0. */
CUresult simcuRegisterKernel(const char *name, simcu_kernel_fn fn, unsigned nparams,
                             const size_t *offsets, const size_t *sizes, CUfunction *out);

/* libcuda.so.1: the device clock.  Per function, per launch (the calling thread's next launch of any
 * kind, cuLaunchKernel* or cudaLaunchKernel*), and the model's parameters by name: "kernel_ns",
 * "launch_latency_ns", "h2d_gbps", "d2h_gbps", "d2d_gbps", "copy_latency_ns", "memset_gbps",
 * "queue_depth" (new streams) — the same as the environment variables above. */
CUresult simcuSetKernelDuration(CUfunction f, unsigned long long ns);
CUresult simcuSetNextLaunchDuration(unsigned long long ns);
CUresult simcuSetDeviceModel(const char *key, double value);
/* now on CLOCK_MONOTONIC and on the (simulated) CUPTI clock */
CUresult simcuGetDeviceTime(unsigned long long *mono_ns, unsigned long long *cupti_ns);

/* libcudart.so.13: the same for a host stub, and this thread's next launch */
cudaError_t simcudaSetKernelDuration(const void *hostStub, unsigned long long ns);
cudaError_t simcudaSetNextLaunchDuration(unsigned long long ns);

/* libcudart.so.13: register a host stub for cudaLaunchKernel & co. */
cudaError_t simcudaRegisterFunction(const void *hostStub, const char *name, simcu_kernel_fn fn,
                                    unsigned nparams, const size_t *offsets, const size_t *sizes);

#endif
