/* profiler.c — simcuda runtime: cudaProfilerStart / cudaProfilerStop (cuda_profiler_api.h), which the
 * real runtime implements by calling the driver's cuProfilerStart / cuProfilerStop (reached, like every
 * driver call of the runtime, through cuGetProcAddress). */
#include "../sim_runtime.h"

cudaError_t cudaProfilerStart(void)
{
    const struct rt_driver *d;
    cudaError_t e = rt_enter(0, &d);
    return rt_ret(e ? e : rt_from_cu(d->cuProfilerStart()));
}

cudaError_t cudaProfilerStop(void)
{
    const struct rt_driver *d;
    cudaError_t e = rt_enter(0, &d);
    return rt_ret(e ? e : rt_from_cu(d->cuProfilerStop()));
}
