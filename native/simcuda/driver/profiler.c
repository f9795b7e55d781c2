/* profiler.c — simcuda driver: cuProfilerStart / cuProfilerStop.  The real driver tells an attached
 * profiler (Nsight Systems' --capture-range=cudaProfilerApi) to start or stop collecting; here they
 * check for a current context, as the real ones do, and keep the state (simcuProfilerActive). */
#include "../sim_driver.h"

static volatile int g_profiling;

SIM_API(CUresult, cuProfilerStart, (void))
{
    int dev;
    CUresult r = sim_current_device(&dev);
    if (r) return r;
    __atomic_store_n(&g_profiling, 1, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuProfilerStop, (void))
{
    int dev;
    CUresult r = sim_current_device(&dev);
    if (r) return r;
    __atomic_store_n(&g_profiling, 0, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

/* 1 between cuProfilerStart and cuProfilerStop (tests) */
__attribute__((visibility("default"))) int simcuProfilerActive(void)
{
    return __atomic_load_n(&g_profiling, __ATOMIC_ACQUIRE);
}
