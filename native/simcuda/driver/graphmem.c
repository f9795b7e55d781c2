/* graphmem.c — simcuda: the memory of CUDA graphs' memory nodes (cudaMallocAsync / cudaFreeAsync captured
 * into a graph, or cuGraphAddMemAllocNode / cuGraphAddMemFreeNode).
 *
 * As in CUDA: the address of a memory node is fixed when the node is made (capture or explicit
 * construction) and is the same in every replay; the memory behind it is taken when a replay reaches the
 * alloc node and given back to the device's graph pool at its free node.  The pool keeps what it took
 * (reserved) until cuDeviceGraphMemTrim hands the unused part back to the device: a second replay
 * reuses the reserve, and only the reserve counts against the device's capacity (cuMemGetInfo).
 * cuDeviceGetGraphMemAttribute reports used/reserved, current and high. */
#include <pthread.h>
#include <string.h>
#include "../sim_driver.h"
#include "../sim_device.h"

static pthread_mutex_t g_gm_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_gm_used[SIM_MAX_DEVICES], g_gm_used_high[SIM_MAX_DEVICES];
static uint64_t g_gm_reserved[SIM_MAX_DEVICES], g_gm_reserved_high[SIM_MAX_DEVICES];

static int dev_ok(int dev) { return dev >= 0 && dev < SIM_MAX_DEVICES; }

/* a replay reached an alloc node of `bytes` on dev: taken from the graph pool, growing its reserve
 * (charged against the device) when the pool has too little unused */
HIDDEN CUresult sim_graph_mem_take(int dev, uint64_t bytes)
{
    if (!dev_ok(dev)) return SIM_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_gm_lock);
    uint64_t used = g_gm_used[dev] + bytes;
    if (used > g_gm_reserved[dev]) {
        CUresult r = sim_mem_charge(dev, used - g_gm_reserved[dev]);
        if (r) {
            pthread_mutex_unlock(&g_gm_lock);
            return r;
        }
        g_gm_reserved[dev] = used;
        if (used > g_gm_reserved_high[dev]) g_gm_reserved_high[dev] = used;
    }
    g_gm_used[dev] = used;
    if (used > g_gm_used_high[dev]) g_gm_used_high[dev] = used;
    pthread_mutex_unlock(&g_gm_lock);
    return CUDA_SUCCESS;
}

/* a free node (or a free of the graph's address outside the graph): back to the pool, still reserved */
HIDDEN void sim_graph_mem_give(int dev, uint64_t bytes)
{
    if (!dev_ok(dev)) return;
    pthread_mutex_lock(&g_gm_lock);
    g_gm_used[dev] -= bytes < g_gm_used[dev] ? bytes : g_gm_used[dev];
    pthread_mutex_unlock(&g_gm_lock);
}

SIM_API(CUresult, cuDeviceGraphMemTrim, (CUdevice device))
{
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!dev_ok(device) || device >= sim_ndevices()) return SIM_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_gm_lock);
    uint64_t spare = g_gm_reserved[device] - g_gm_used[device];
    g_gm_reserved[device] = g_gm_used[device];
    pthread_mutex_unlock(&g_gm_lock);
    if (spare) sim_mem_uncharge(device, spare);
    return CUDA_SUCCESS;
}

/* CUgraphMem_attribute: 0 used current, 1 used high, 2 reserved current, 3 reserved high (a cuuint64_t) */
SIM_API(CUresult, cuDeviceGetGraphMemAttribute, (CUdevice device, int attr, void *value))
{
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!dev_ok(device) || device >= sim_ndevices()) return SIM_ERROR_INVALID_DEVICE;
    if (!value || attr < 0 || attr > 3) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_gm_lock);
    uint64_t v = attr == 0 ? g_gm_used[device] : attr == 1 ? g_gm_used_high[device]
               : attr == 2 ? g_gm_reserved[device] : g_gm_reserved_high[device];
    pthread_mutex_unlock(&g_gm_lock);
    memcpy(value, &v, sizeof v);
    return CUDA_SUCCESS;
}

/* only the high marks can be set, and only to 0: they restart from the current values */
SIM_API(CUresult, cuDeviceSetGraphMemAttribute, (CUdevice device, int attr, void *value))
{
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!dev_ok(device) || device >= sim_ndevices()) return SIM_ERROR_INVALID_DEVICE;
    uint64_t v;
    if (!value || (attr != 1 && attr != 3)) return CUDA_ERROR_INVALID_VALUE;
    memcpy(&v, value, sizeof v);
    if (v) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_gm_lock);
    if (attr == 1) g_gm_used_high[device] = g_gm_used[device];
    else g_gm_reserved_high[device] = g_gm_reserved[device];
    pthread_mutex_unlock(&g_gm_lock);
    return CUDA_SUCCESS;
}
