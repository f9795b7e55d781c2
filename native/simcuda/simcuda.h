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
 */
#ifndef SIMCUDA_H
#define SIMCUDA_H
#include "pi_cuda.h"

typedef void (*simcu_kernel_fn)(void **params);

/* libcuda.so.1: register a kernel; *out is a CUfunction usable with every
 * launch API.  offsets/sizes are copied.  nparams may be 0. */
CUresult simcuRegisterKernel(const char *name, simcu_kernel_fn fn, unsigned nparams,
                             const size_t *offsets, const size_t *sizes, CUfunction *out);

/* libcudart.so.13: register a host stub for cudaLaunchKernel & co. */
cudaError_t simcudaRegisterFunction(const void *hostStub, const char *name, simcu_kernel_fn fn,
                                    unsigned nparams, const size_t *offsets, const size_t *sizes);

#endif
