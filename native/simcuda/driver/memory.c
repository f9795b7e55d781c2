/* memory.c — simcuda driver: allocation table, allocations, pools, UVM hints,
 * copies and memsets.  Device memory is host memory (256-byte aligned). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "../sim_driver.h"

/* ---- the allocation table: address -> entry (chained hash, grows) ---- */
struct entry {
    uint64_t addr;
    size_t size;
    enum sim_kind kind;
    int device;
    CUmemoryPool pool;
    int fd;     /* shared memory behind the buffer (IPC-capable, see shareable()), else -1 */
    struct entry *next;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry **g_buckets;
static size_t g_nbuckets, g_count;
static size_t g_used[SIM_MAX_DEVICES];
static struct CUmemPoolHandle_st g_default_pools[SIM_MAX_DEVICES];
static CUmemoryPool g_current_pools[SIM_MAX_DEVICES];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void atfork_prepare(void) { pthread_mutex_lock(&g_lock); }
static void atfork_parent(void) { pthread_mutex_unlock(&g_lock); }
static void atfork_child(void) { pthread_mutex_init(&g_lock, NULL); }

/* ---- SIMCUDA_STATS=path: one JSON line per process, appended at exit (the device's high-water mark of
 * bytes counted against its capacity, and counters); SIMCUDA_CHECK=1: freed memory is poisoned (0xDB) and
 * new memory filled with 0xCD, so a block used after its free, or two blocks sharing bytes, show. ---- */
static size_t g_peak[SIM_MAX_DEVICES];
static uint64_t g_allocs, g_frees, g_waits, g_records;
static int g_check = -1;

HIDDEN void sim_count_stream_wait(void) { __atomic_fetch_add(&g_waits, 1, __ATOMIC_RELAXED); }
HIDDEN void sim_count_event_record(void) { __atomic_fetch_add(&g_records, 1, __ATOMIC_RELAXED); }

static int checking(void)
{
    if (g_check < 0) {
        const char *c = getenv("SIMCUDA_CHECK");
        g_check = c && c[0] && c[0] != '0';
    }
    return g_check;
}

static void write_stats(void)
{
    const char *path = getenv("SIMCUDA_STATS");
    if (!path || !*path) return;
    char line[1024];
    int n = snprintf(line, sizeof line, "{\"pid\": %d, \"allocs\": %llu, \"frees\": %llu, \"stream_waits\": %llu, "
                     "\"event_records\": %llu, \"peak_bytes\": [", (int)getpid(), (unsigned long long)g_allocs,
                     (unsigned long long)g_frees, (unsigned long long)g_waits, (unsigned long long)g_records);
    for (int i = 0; i < sim_ndevices() && n < (int)sizeof line - 64; i++)
        n += snprintf(line + n, sizeof line - n, "%s%llu", i ? ", " : "", (unsigned long long)g_peak[i]);
    n += snprintf(line + n, sizeof line - n, "], \"resident_peak_bytes\": [");
    for (int i = 0; i < sim_ndevices() && n < (int)sizeof line - 64; i++)
        n += snprintf(line + n, sizeof line - n, "%s%llu", i ? ", " : "", (unsigned long long)sim_res_peak(i));
    n += snprintf(line + n, sizeof line - n, "], \"stall_ns\": [");
    for (int i = 0; i < sim_ndevices() && n < (int)sizeof line - 64; i++)
        n += snprintf(line + n, sizeof line - n, "%s%llu", i ? ", " : "", (unsigned long long)sim_dev_stall_ns(i));
    uint64_t c[7];
    sim_res_counts(c);
    n += snprintf(line + n, sizeof line - n, "], \"faults\": %llu, \"prefetches\": %llu, \"prefetch_bytes\": %llu, "
                  "\"evictions\": %llu, \"evicted_bytes\": %llu, \"no_room\": %llu, \"first_touches\": %llu}\n",
                  (unsigned long long)c[0], (unsigned long long)c[1], (unsigned long long)c[2],
                  (unsigned long long)c[3], (unsigned long long)c[4], (unsigned long long)c[5],
                  (unsigned long long)c[6]);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return;
    ssize_t w = write(fd, line, (size_t)n);
    (void)w;
    close(fd);
}

static void table_init(void)
{
    atexit(write_stats);
    for (int i = 0; i < SIM_MAX_DEVICES; i++) {
        g_default_pools[i] = (struct CUmemPoolHandle_st){MAGIC_POOL, i, 1};
        g_current_pools[i] = &g_default_pools[i];
    }
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

static void lock(void) { pthread_once(&g_once, table_init); pthread_mutex_lock(&g_lock); }
static void unlock(void) { pthread_mutex_unlock(&g_lock); }

static size_t hash(uint64_t a, size_t n) { return (size_t)((a >> 8) * 0x9E3779B97F4A7C15ull >> 20) & (n - 1); }

static int table_grow(void)
{
    size_t n = g_nbuckets ? g_nbuckets * 2 : 1024;
    struct entry **b = calloc(n, sizeof *b);
    if (!b) return -1;
    for (size_t i = 0; i < g_nbuckets; i++) {
        for (struct entry *e = g_buckets[i], *nx; e; e = nx) {
            nx = e->next;
            size_t h = hash(e->addr, n);
            e->next = b[h];
            b[h] = e;
        }
    }
    free(g_buckets);
    g_buckets = b;
    g_nbuckets = n;
    return 0;
}

/* caller holds the lock */
static int table_insert(struct entry *e)
{
    if (g_count + 1 > g_nbuckets * 2 && table_grow()) return -1;
    size_t h = hash(e->addr, g_nbuckets);
    e->next = g_buckets[h];
    g_buckets[h] = e;
    g_count++;
    return 0;
}

/* caller holds the lock; unlinks and returns the entry whose base is addr */
static struct entry *table_take(uint64_t addr, int host)
{
    if (!g_nbuckets) return NULL;
    struct entry **pp = &g_buckets[hash(addr, g_nbuckets)];
    for (; *pp; pp = &(*pp)->next) {
        struct entry *e = *pp;
        if (e->addr == addr) {
            if ((e->kind == SK_HOST) != (host != 0)) return NULL;
            *pp = e->next;
            g_count--;
            return e;
        }
    }
    return NULL;
}

/* caller holds the lock; the managed allocation containing [p, p+n) */
static struct entry *find_managed(uint64_t p, size_t n)
{
    for (size_t i = 0; i < g_nbuckets; i++)
        for (struct entry *e = g_buckets[i]; e; e = e->next)
            if (e->kind == SK_MANAGED && p >= e->addr && p + n <= e->addr + e->size && p + n >= p)
                return e;
    return NULL;
}

/* ---- freed buffers kept for the next allocation of the same size ----
 * Device memory is host memory from malloc; handing multi-MiB buffers back
 * to glibc on every free makes it trim and regrow its heap (or munmap and
 * mmap) all the time, and every byte touched again is a page fault: a
 * training loop then spends most of its time in the kernel (2.1 M page
 * faults for 340 k events).  Like a real device allocator, simcuda keeps freed
 * buffers (exact size, up to CACHE_BYTES in all) and hands them out again:
 * the same addresses come back, as from cudaMalloc. */
#define CACHE_MIN ((size_t)64 << 10)
#define CACHE_BYTES ((size_t)1 << 30)
#define CACHE_BUCKETS 1024
static struct entry *g_cache[CACHE_BUCKETS]; /* entry->next chains; entry->size exact */
static size_t g_cache_bytes;

static size_t cache_bucket(size_t size) { return (size_t)((size * 0x9E3779B97F4A7C15ull) >> 54) & (CACHE_BUCKETS - 1); }

/* caller holds the lock: a cached buffer of exactly `size` bytes, or NULL */
static void *cache_take(size_t size)
{
    if (size < CACHE_MIN) return NULL;
    for (struct entry **pp = &g_cache[cache_bucket(size)]; *pp; pp = &(*pp)->next) {
        struct entry *e = *pp;
        if (e->size != size) continue;
        *pp = e->next;
        g_cache_bytes -= size;
        void *p = (void *)(uintptr_t)e->addr;
        free(e);
        return p;
    }
    return NULL;
}

/* caller holds the lock: keep e's buffer (1) or let the caller free it (0) */
static int cache_put(struct entry *e)
{
    if (e->size < CACHE_MIN || e->size > CACHE_BYTES - g_cache_bytes) return 0;
    size_t b = cache_bucket(e->size);
    e->next = g_cache[b];
    g_cache[b] = e;
    g_cache_bytes += e->size;
    return 1;
}

/* cudaMalloc / cuMemAlloc buffers of whole 2 MiB pages live in shared memory (a memfd mapped
 * MAP_SHARED), so that cuIpcGetMemHandle can hand them to another process, which maps the very same
 * pages (cuIpcOpenMemHandle).  Smaller buffers stay on the heap: IPC needs a 2 MiB multiple. */
static int shareable(enum sim_kind k, size_t size)
{
    return k == SK_DEVICE && size >= SIM_GRANULARITY && size % SIM_GRANULARITY == 0;
}

static void *shared_buffer(size_t size, int device, int *fd_out)
{
    char name[32];
    snprintf(name, sizeof name, "simcuda-dev%d", sim_physical_device(device));
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0) return NULL;
    void *p = MAP_FAILED;
    if (ftruncate(fd, (off_t)size) == 0) p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return NULL;
    }
    *fd_out = fd;
    return p;
}

static int counts_against_capacity(enum sim_kind k) { return k == SK_DEVICE || k == SK_PITCH || k == SK_ASYNC; }

HIDDEN CUresult sim_mem_alloc(CUdeviceptr *out, size_t size, enum sim_kind kind, int device,
                              CUmemoryPool pool)
{
    if (!out || size == 0) return CUDA_ERROR_INVALID_VALUE;
    struct entry *e = malloc(sizeof *e);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    int charge = counts_against_capacity(kind);
    lock();
    if (charge && (size > sim_capacity() || g_used[device] > sim_capacity() - size)) {
        unlock();
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (charge) g_used[device] += size;
    if (charge && g_used[device] > g_peak[device]) g_peak[device] = g_used[device];
    g_allocs++;
    unlock();
    void *p = NULL;
    int fd = -1;
    if (shareable(kind, size)) {
        p = shared_buffer(size, device, &fd);
    } else {
        lock();
        p = cache_take(size);
        unlock();
        if (!p && posix_memalign(&p, SIM_ALIGN, size) != 0) p = NULL;
    }
    lock();
    if (!p || (*e = (struct entry){(uint64_t)(uintptr_t)p, size, kind, device, pool, fd, NULL},
               table_insert(e))) {
        if (charge) g_used[device] -= size;
        unlock();
        if (fd >= 0) {
            if (p) munmap(p, size);
            close(fd);
        } else {
            free(p);
        }
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    unlock();
    if (charge) sim_res_device_bytes(device, (int64_t)size);
    if (kind == SK_MANAGED) sim_res_managed_alloc((uint64_t)(uintptr_t)p, size, device);
    if (checking()) memset(p, 0xCD, size);
    *out = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

HIDDEN CUresult sim_mem_free(CUdeviceptr p, int host)
{
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (p == 0) return host ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; /* cuMemFree(0) is a no-op */
    lock();
    struct entry *e = table_take(p, host);
    if (e && counts_against_capacity(e->kind)) g_used[e->device] -= e->size;
    unlock();
    if (!e) return CUDA_ERROR_INVALID_VALUE;
    if (counts_against_capacity(e->kind)) sim_res_device_bytes(e->device, -(int64_t)e->size);
    if (e->kind == SK_MANAGED) sim_res_managed_free(e->addr);
    if (checking()) memset((void *)(uintptr_t)e->addr, 0xDB, e->size);
    if (e->fd >= 0) {
        munmap((void *)(uintptr_t)e->addr, e->size);
        close(e->fd);
        free(e);
        return CUDA_SUCCESS;
    }
    lock();
    g_frees++;
    int kept = cache_put(e);
    unlock();
    if (!kept) {
        free((void *)(uintptr_t)e->addr);
        free(e);
    }
    return CUDA_SUCCESS;
}

HIDDEN CUresult sim_mem_charge(int device, size_t size)
{
    lock();
    if (size > sim_capacity() || g_used[device] > sim_capacity() - size) {
        unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    g_used[device] += size;
    unlock();
    return CUDA_SUCCESS;
}

HIDDEN void sim_mem_uncharge(int device, size_t size)
{
    lock();
    g_used[device] -= size < g_used[device] ? size : g_used[device];
    unlock();
}

HIDDEN CUresult sim_mem_used(int device, size_t *used)
{
    lock();
    *used = g_used[device];
    unlock();
    return CUDA_SUCCESS;
}

HIDDEN CUmemoryPool sim_default_pool(int device)
{
    pthread_once(&g_once, table_init);
    return &g_default_pools[device];
}

/* ---------------- allocation API ---------------- */

static CUresult alloc_current(CUdeviceptr *dptr, size_t n, enum sim_kind kind, CUmemoryPool pool)
{
    int dev;
    CUresult r = sim_current_device(&dev);
    if (r) return r;
    return sim_mem_alloc(dptr, n, kind, dev, pool);
}

SIM_API(CUresult, cuMemAlloc_v2, (CUdeviceptr *dptr, size_t bytesize))
{
    return alloc_current(dptr, bytesize, SK_DEVICE, NULL);
}

SIM_API(CUresult, cuMemFree_v2, (CUdeviceptr dptr)) { return sim_mem_free(dptr, 0); }

SIM_API(CUresult, cuMemAllocPitch_v2, (CUdeviceptr *dptr, size_t *pPitch, size_t width, size_t height,
                                      unsigned int elementSizeBytes))
{
    if (!dptr || !pPitch || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
    if (elementSizeBytes != 4 && elementSizeBytes != 8 && elementSizeBytes != 16) return CUDA_ERROR_INVALID_VALUE;
    size_t pitch = (width + 511) & ~(size_t)511;
    if (height > (size_t)-1 / pitch) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = alloc_current(dptr, pitch * height, SK_PITCH, NULL);
    if (r == CUDA_SUCCESS) *pPitch = pitch;
    return r;
}

SIM_API(CUresult, cuMemAllocManaged, (CUdeviceptr *dptr, size_t bytesize, unsigned int flags))
{
    if (flags != 1 && flags != 2) return CUDA_ERROR_INVALID_VALUE; /* ATTACH_GLOBAL / ATTACH_HOST */
    return alloc_current(dptr, bytesize, SK_MANAGED, NULL);
}

SIM_API(CUresult, cuMemHostAlloc, (void **pp, size_t bytesize, unsigned int flags))
{
    if (!pp) return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr p = 0;
    CUresult r = alloc_current(&p, bytesize, SK_HOST, NULL);
    if (r == CUDA_SUCCESS) *pp = (void *)(uintptr_t)p;
    return r;
}

SIM_API(CUresult, cuMemAllocHost_v2, (void **pp, size_t bytesize))
{
    return sim_cuMemHostAlloc(pp, bytesize, 0);
}

SIM_API(CUresult, cuMemFreeHost, (void *p)) { return sim_mem_free((CUdeviceptr)(uintptr_t)p, 1); }

SIM_API(CUresult, cuMemGetInfo_v2, (size_t *freeb, size_t *total))
{
    if (!freeb || !total) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    CUresult r = sim_current_device(&dev);
    if (r) return r;
    size_t used;
    sim_mem_used(dev, &used);
    used += sim_res_managed_resident(dev); /* resident managed bytes are used memory (residency.c) */
    *total = sim_capacity();
    *freeb = used < *total ? *total - used : 0;
    return CUDA_SUCCESS;
}

/* ---------------- stream-ordered allocation and pools ---------------- */

/* cuMemAllocAsync on a capturing stream: a graph memory node.  Its address is reserved now (an SK_GRAPH
 * entry, not charged against the device) and stays the node's in every replay; each replay takes the
 * memory (graphmem.c). */
static CUresult graph_alloc(struct sim_queue *q, CUdeviceptr *dptr, size_t bytesize, int dev, CUmemoryPool pool)
{
    if (!dptr || !bytesize) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = sim_mem_alloc(dptr, bytesize, SK_GRAPH, dev, pool);
    if (r) return r;
    if ((r = sim_graph_alloc_node(q->capture, *dptr, bytesize, dev))) {
        sim_mem_free(*dptr, 0);
        *dptr = 0;
    }
    return r;
}

/* the bytes of the graph allocation at p (0: p is not one), and its device */
static uint64_t graph_block(CUdeviceptr p, int *dev)
{
    uint64_t n = 0;
    lock();
    if (g_nbuckets)
        for (struct entry *e = g_buckets[hash(p, g_nbuckets)]; e; e = e->next)
            if (e->addr == p) {
                if (e->kind == SK_GRAPH) n = e->size, *dev = e->device;
                break;
            }
    unlock();
    return n;
}

HIDDEN uint64_t sim_graph_block(CUdeviceptr p, int *dev) { return graph_block(p, dev); }


static int valid_pool(CUmemoryPool p) { return p && p->magic == MAGIC_POOL; }

SIM_API(CUresult, cuMemAllocAsync, (CUdeviceptr *dptr, size_t bytesize, CUstream s))
{
    int dev;
    CUresult r = sim_current_device(&dev);
    if (r) return r;
    if ((r = sim_check_stream(s))) return r;
    lock();
    CUmemoryPool pool = g_current_pools[dev];
    unlock();
    struct sim_queue *q;
    if (sim_stream_queue(s, &q) == CUDA_SUCCESS) {
        if (q->capture) return graph_alloc(q, dptr, bytesize, dev, pool);
        sim_res_stream_time(sim_queue_done_at(q));
    }
    return sim_mem_alloc(dptr, bytesize, SK_ASYNC, dev, pool);
}
SIM_VARIANT(CUresult, cuMemAllocAsync_ptsz, cuMemAllocAsync, (CUdeviceptr *dptr, size_t bytesize, CUstream s), (dptr, bytesize, s));

SIM_API(CUresult, cuMemAllocFromPoolAsync, (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s))
{
    int dev;
    CUresult r = sim_current_device(&dev);
    if (r) return r;
    if ((r = sim_check_stream(s))) return r;
    if (!valid_pool(pool)) return CUDA_ERROR_INVALID_VALUE;
    struct sim_queue *q;
    if (sim_stream_queue(s, &q) == CUDA_SUCCESS) {
        if (q->capture) return graph_alloc(q, dptr, bytesize, pool->device, pool);
        sim_res_stream_time(sim_queue_done_at(q));
    }
    return sim_mem_alloc(dptr, bytesize, SK_ASYNC, pool->device, pool);
}
SIM_VARIANT(CUresult, cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync, (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s), (dptr, bytesize, pool, s));

SIM_API(CUresult, cuMemFreeAsync, (CUdeviceptr dptr, CUstream s))
{
    CUresult r = sim_check_stream(s);
    if (r) return r;
    if (dptr == 0) return sim_initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    struct sim_queue *q;
    int dev = -1;
    uint64_t gbytes = graph_block(dptr, &dev);
    if (sim_stream_queue(s, &q) == CUDA_SUCCESS) {
        if (q->capture) {
            if (!gbytes) return CUDA_ERROR_INVALID_VALUE; /* a graph frees only what a graph allocated */
            return sim_graph_free_node(q->capture, dptr, gbytes, dev);
        }
        sim_res_stream_time(sim_queue_done_at(q));
    }
    if (gbytes) { /* a graph's allocation freed outside the graph: back to its pool, the address stays */
        sim_res_stream_time(0);   /* no device bytes counted here: the time is not for the next count */
        sim_graph_mem_give(dev, gbytes);
        return CUDA_SUCCESS;
    }
    return sim_mem_free(dptr, 0);
}
SIM_VARIANT(CUresult, cuMemFreeAsync_ptsz, cuMemFreeAsync, (CUdeviceptr dptr, CUstream s), (dptr, s));

SIM_API(CUresult, cuMemPoolCreate, (CUmemoryPool *pool, const CUmemPoolProps *props))
{
    if (!pool || !props) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || props->location.id < 0 ||
        props->location.id >= sim_ndevices())
        return CUDA_ERROR_INVALID_VALUE;
    struct CUmemPoolHandle_st *p = calloc(1, sizeof *p);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    *p = (struct CUmemPoolHandle_st){MAGIC_POOL, props->location.id, 0};
    *pool = p;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuMemPoolDestroy, (CUmemoryPool pool))
{
    if (!valid_pool(pool) || pool->is_default) return CUDA_ERROR_INVALID_VALUE;
    lock();
    for (int i = 0; i < SIM_MAX_DEVICES; i++)
        if (g_current_pools[i] == pool) g_current_pools[i] = &g_default_pools[i];
    pool->magic = MAGIC_DEAD; /* kept allocated: live allocations may still name it */
    unlock();
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuDeviceGetDefaultMemPool, (CUmemoryPool *pool, CUdevice dev))
{
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= sim_ndevices()) return SIM_ERROR_INVALID_DEVICE;
    *pool = sim_default_pool(dev);
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuDeviceGetMemPool, (CUmemoryPool *pool, CUdevice dev))
{
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= sim_ndevices()) return SIM_ERROR_INVALID_DEVICE;
    lock();
    *pool = g_current_pools[dev];
    unlock();
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuDeviceSetMemPool, (CUdevice dev, CUmemoryPool pool))
{
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= sim_ndevices()) return SIM_ERROR_INVALID_DEVICE;
    if (!valid_pool(pool) || pool->device != dev) return CUDA_ERROR_INVALID_VALUE;
    lock();
    g_current_pools[dev] = pool;
    unlock();
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuMemPoolTrimTo, (CUmemoryPool pool, size_t minBytesToKeep))
{
    return valid_pool(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---------------- UVM hints ---------------- */

static CUresult check_managed(CUdeviceptr p, size_t n)
{
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (p == 0 || n == 0) return CUDA_ERROR_INVALID_VALUE;
    lock();
    struct entry *e = find_managed(p, n);
    unlock();
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult check_location(CUmemLocation loc)
{
    switch (loc.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        return loc.id >= 0 && loc.id < sim_ndevices() ? CUDA_SUCCESS : SIM_ERROR_INVALID_DEVICE;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult check_device_or_cpu(CUdevice d)
{
    return d == -1 /* CU_DEVICE_CPU */ || (d >= 0 && d < sim_ndevices()) ? CUDA_SUCCESS
                                                                         : SIM_ERROR_INVALID_DEVICE;
}

static CUresult check_advice(int advice) { return advice >= 1 && advice <= 6 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }

/* CUDA < 12.2 ABI: CUdevice */
SIM_API(CUresult, cuMemAdvise, (CUdeviceptr p, size_t n, int advice, CUdevice device))
{
    CUresult r = check_managed(p, n);
    if (!r) r = check_advice(advice);
    if (!r) r = check_device_or_cpu(device);
    return r;
}

/* CUDA >= 12.2 ABI: CUmemLocation */
SIM_API(CUresult, cuMemAdvise_v2, (CUdeviceptr p, size_t n, int advice, CUmemLocation location))
{
    CUresult r = check_managed(p, n);
    if (!r) r = check_advice(advice);
    if (!r) r = check_location(location);
    return r;
}

/* the prefetch on the stream's device clock (residency.c) */
static CUresult prefetch(CUdeviceptr p, size_t n, int to_device, int dev, CUstream s)
{
    struct sim_queue *q;
    CUresult r = sim_stream_queue(s, &q);
    if (r) return r;
    return sim_res_prefetch(p, n, to_device, dev, q);
}

SIM_API(CUresult, cuMemPrefetchAsync, (CUdeviceptr p, size_t n, CUdevice dstDevice, CUstream s))
{
    CUresult r = check_managed(p, n);
    if (!r) r = check_device_or_cpu(dstDevice);
    if (!r) r = sim_check_stream(s);
    if (!r) r = prefetch(p, n, dstDevice >= 0, dstDevice, s);
    return r;
}
SIM_VARIANT(CUresult, cuMemPrefetchAsync_ptsz, cuMemPrefetchAsync, (CUdeviceptr p, size_t n, CUdevice dstDevice, CUstream s), (p, n, dstDevice, s));

SIM_API(CUresult, cuMemPrefetchAsync_v2, (CUdeviceptr p, size_t n, CUmemLocation location, unsigned int flags,
                                         CUstream s))
{
    CUresult r = check_managed(p, n);
    if (!r) r = check_location(location);
    if (!r) r = sim_check_stream(s);
    if (!r) r = prefetch(p, n, location.type == CU_MEM_LOCATION_TYPE_DEVICE, location.id, s);
    return r;
}
SIM_VARIANT(CUresult, cuMemPrefetchAsync_v2_ptsz, cuMemPrefetchAsync_v2, (CUdeviceptr p, size_t n, CUmemLocation location, unsigned int flags, CUstream s), (p, n, location, flags, s));

/* CUDA 12.8: discard managed ranges in stream order (their pages freed; contents undefined afterwards) */
SIM_API(CUresult, cuMemDiscardBatchAsync, (CUdeviceptr *dptrs, size_t *sizes, size_t count, unsigned long long flags,
                                          CUstream s))
{
    if (!dptrs || !sizes || count == 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = sim_check_stream(s);
    for (size_t i = 0; !r && i < count; i++) r = check_managed(dptrs[i], sizes[i]);
    struct sim_queue *q = NULL;
    if (!r) r = sim_stream_queue(s, &q);
    for (size_t i = 0; !r && i < count; i++) r = sim_res_discard(dptrs[i], q);
    return r;
}

/* ---------------- copies and memsets on the device clock ----------------
 * The bytes move at once, on the calling thread; the op is put on the stream's queue and its copy
 * engine (sim_device.h).  Synchronous forms run on the legacy stream and return when the device
 * clock has reached the op's end.  On a capturing stream the op becomes a graph node instead. */

HIDDEN int sim_mem_kind_of(uint64_t p)
{
    if (!p) return 1;
    lock();
    int kind = 1; /* pageable host memory: not in the table */
    if (g_nbuckets)
        for (struct entry *e = g_buckets[hash(p, g_nbuckets)]; e; e = e->next)
            if (e->addr == p) {
                kind = e->kind == SK_HOST ? 2 : e->kind == SK_MANAGED ? 5 : 3;
                break;
            }
    unlock();
    return kind;
}

/* CUpti_ActivityMemcpyKind */
enum { CK_HTOD = 1, CK_DTOH = 2, CK_DTOD = 8, CK_HTOH = 9, CK_UNIFIED = 0 };
#define CBID_MEMCPY 305            /* CUPTI_DRIVER_TRACE_CBID_cuMemcpy; the others follow */
#define CBID_MEMCPY_ASYNC 306
#define CBID_MEMCPY_HTOD 276
#define CBID_MEMCPY_HTOD_ASYNC 277
#define CBID_MEMCPY_DTOH 278
#define CBID_MEMCPY_DTOH_ASYNC 279
#define CBID_MEMCPY_DTOD 280
#define CBID_MEMCPY_DTOD_ASYNC 281
#define CBID_MEMSET_D8 249
#define CBID_MEMSET_D32 251
#define CBID_MEMSET_D8_ASYNC 216
#define CBID_MEMSET_D32_ASYNC 220

static int on_device(int memkind) { return memkind == 3 || memkind == 5; }

static CUresult copy(void *dst, const void *src, size_t n, CUstream s, int ck, int sync, uint32_t cbid)
{
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    struct sim_queue *q;
    CUresult r = sim_stream_queue(s, &q);
    if (r) return r;
    if (n == 0) return CUDA_SUCCESS;
    if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
    int sk = sim_mem_kind_of((uint64_t)(uintptr_t)src), dk = sim_mem_kind_of((uint64_t)(uintptr_t)dst);
    if (ck == CK_UNIFIED)
        ck = on_device(sk) ? (on_device(dk) ? CK_DTOD : CK_DTOH) : (on_device(dk) ? CK_HTOD : CK_HTOH);
    if (ck == CK_HTOD) dk = on_device(dk) ? dk : 3;
    if (ck == CK_DTOH) sk = on_device(sk) ? sk : 3;
    enum sim_engine eng = ck == CK_HTOD ? SIM_ENGINE_H2D : ck == CK_DTOH ? SIM_ENGINE_D2H : SIM_ENGINE_D2D;
    uint64_t t0;
    uint32_t corr = sim_api_begin(&t0);
    if (q->capture) {
        struct sim_gnode *g = sim_graph_add(q->capture);
        if (!g) r = CUDA_ERROR_OUT_OF_MEMORY;
        else {
            g->kind = SIMCU_OP_MEMCPY;
            g->dst = dst, g->src = src, g->bytes = n;
            g->copy_kind = (uint8_t)ck, g->src_kind = (uint8_t)sk, g->dst_kind = (uint8_t)dk, g->engine = eng;
            sim_graph_node_created(q->capture, g);
        }
        sim_api_end(corr, cbid, t0);
        return r;
    }
    memmove(dst, src, n);
    struct sim_opdesc op = {.kind = SIMCU_OP_MEMCPY, .engine = eng, .dur_ns = sim_copy_ns(eng, n), .bytes = n,
                            .copy_kind = (uint8_t)ck, .src_kind = (uint8_t)sk, .dst_kind = (uint8_t)dk};
    uint64_t end = sim_dev_submit(q, &op, corr);
    if (sync) sim_wait_until(end);
    sim_api_end(corr, cbid, t0);
    return CUDA_SUCCESS;
}

#define P(x) ((void *)(uintptr_t)(x))

SIM_API(CUresult, cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t n)) { return copy(P(dst), P(src), n, NULL, CK_UNIFIED, 1, CBID_MEMCPY); }
SIM_VARIANT(CUresult, cuMemcpy_ptds, cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n));

SIM_API(CUresult, cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s))
{
    return copy(P(dst), P(src), n, s, CK_UNIFIED, 0, CBID_MEMCPY_ASYNC);
}
SIM_VARIANT(CUresult, cuMemcpyAsync_ptsz, cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s));

SIM_API(CUresult, cuMemcpyHtoD_v2, (CUdeviceptr dst, const void *src, size_t n)) { return copy(P(dst), src, n, NULL, CK_HTOD, 1, CBID_MEMCPY_HTOD); }
SIM_VARIANT(CUresult, cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD_v2, (CUdeviceptr dst, const void *src, size_t n), (dst, src, n));

SIM_API(CUresult, cuMemcpyDtoH_v2, (void *dst, CUdeviceptr src, size_t n)) { return copy(dst, P(src), n, NULL, CK_DTOH, 1, CBID_MEMCPY_DTOH); }
SIM_VARIANT(CUresult, cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH_v2, (void *dst, CUdeviceptr src, size_t n), (dst, src, n));

SIM_API(CUresult, cuMemcpyDtoD_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n)) { return copy(P(dst), P(src), n, NULL, CK_DTOD, 1, CBID_MEMCPY_DTOD); }
SIM_VARIANT(CUresult, cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n));

SIM_API(CUresult, cuMemcpyHtoDAsync_v2, (CUdeviceptr dst, const void *src, size_t n, CUstream s))
{
    return copy(P(dst), src, n, s, CK_HTOD, 0, CBID_MEMCPY_HTOD_ASYNC);
}
SIM_VARIANT(CUresult, cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync_v2, (CUdeviceptr dst, const void *src, size_t n, CUstream s), (dst, src, n, s));

SIM_API(CUresult, cuMemcpyDtoHAsync_v2, (void *dst, CUdeviceptr src, size_t n, CUstream s))
{
    return copy(dst, P(src), n, s, CK_DTOH, 0, CBID_MEMCPY_DTOH_ASYNC);
}
SIM_VARIANT(CUresult, cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync_v2, (void *dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s));

SIM_API(CUresult, cuMemcpyDtoDAsync_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s))
{
    return copy(P(dst), P(src), n, s, CK_DTOD, 0, CBID_MEMCPY_DTOD_ASYNC);
}
SIM_VARIANT(CUresult, cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s));

/* elem: 1 (D8) or 4 (D32); n counts elements */
static CUresult set(CUdeviceptr dst, unsigned v, size_t n, int elem, CUstream s, int sync, uint32_t cbid)
{
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    struct sim_queue *q;
    CUresult r = sim_stream_queue(s, &q);
    if (r) return r;
    if (n == 0) return CUDA_SUCCESS;
    if (!dst || (elem == 4 && (dst & 3))) return CUDA_ERROR_INVALID_VALUE;
    uint64_t bytes = (uint64_t)n * (uint64_t)elem, t0;
    uint32_t value = elem == 1 ? (unsigned char)v : v;
    uint32_t corr = sim_api_begin(&t0);
    if (q->capture) {
        struct sim_gnode *g = sim_graph_add(q->capture);
        if (!g) r = CUDA_ERROR_OUT_OF_MEMORY;
        else {
            g->kind = SIMCU_OP_MEMSET, g->dst = P(dst), g->bytes = bytes, g->value = value, g->elem = elem;
            sim_graph_node_created(q->capture, g);
        }
        sim_api_end(corr, cbid, t0);
        return r;
    }
    if (elem == 1) {
        memset(P(dst), (int)value, n);
    } else {
        uint32_t *p = P(dst);
        for (size_t i = 0; i < n; i++) p[i] = v;
    }
    struct sim_opdesc op = {.kind = SIMCU_OP_MEMSET, .engine = SIM_ENGINE_COMPUTE, .dur_ns = sim_memset_ns(bytes),
                            .bytes = bytes, .value = value, .dst_kind = (uint8_t)sim_mem_kind_of(dst)};
    uint64_t end = sim_dev_submit(q, &op, corr);
    if (sync) sim_wait_until(end);
    sim_api_end(corr, cbid, t0);
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuMemsetD8_v2, (CUdeviceptr dst, unsigned char uc, size_t n)) { return set(dst, uc, n, 1, NULL, 1, CBID_MEMSET_D8); }
SIM_VARIANT(CUresult, cuMemsetD8_v2_ptds, cuMemsetD8_v2, (CUdeviceptr dst, unsigned char uc, size_t n), (dst, uc, n));

SIM_API(CUresult, cuMemsetD32_v2, (CUdeviceptr dst, unsigned int ui, size_t n)) { return set(dst, ui, n, 4, NULL, 1, CBID_MEMSET_D32); }
SIM_VARIANT(CUresult, cuMemsetD32_v2_ptds, cuMemsetD32_v2, (CUdeviceptr dst, unsigned int ui, size_t n), (dst, ui, n));

SIM_API(CUresult, cuMemsetD8Async, (CUdeviceptr dst, unsigned char uc, size_t n, CUstream s))
{
    return set(dst, uc, n, 1, s, 0, CBID_MEMSET_D8_ASYNC);
}
SIM_VARIANT(CUresult, cuMemsetD8Async_ptsz, cuMemsetD8Async, (CUdeviceptr dst, unsigned char uc, size_t n, CUstream s), (dst, uc, n, s));

SIM_API(CUresult, cuMemsetD32Async, (CUdeviceptr dst, unsigned int ui, size_t n, CUstream s))
{
    return set(dst, ui, n, 4, s, 0, CBID_MEMSET_D32_ASYNC);
}
SIM_VARIANT(CUresult, cuMemsetD32Async_ptsz, cuMemsetD32Async, (CUdeviceptr dst, unsigned int ui, size_t n, CUstream s), (dst, ui, n, s));

#define SIM_ERROR_NOT_FOUND_RANGE CUDA_ERROR_INVALID_VALUE

/* ---------------- IPC memory handles ----------------
 * The handle (64 opaque bytes) names the exporting process and its memfd; the importer opens
 * /proc/<pid>/fd/<fd> and maps the same pages.  Opened mappings are tracked for cuIpcCloseMemHandle. */
#define IPC_MAGIC 0x43504953u /* "SIPC" */
struct ipc_handle { uint32_t magic; int32_t pid; int32_t fd; int32_t device; uint64_t size; };
struct ipc_open { uint64_t addr; size_t size; struct ipc_open *next; };
static struct ipc_open *g_ipc_open;

SIM_API(CUresult, cuIpcGetMemHandle, (CUipcMemHandle *handle, CUdeviceptr dptr))
{
    if (!handle) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    lock();
    struct entry *e = NULL;
    if (g_nbuckets)
        for (e = g_buckets[hash(dptr, g_nbuckets)]; e && e->addr != dptr; e = e->next) {}
    struct ipc_handle h = {0};
    if (e && e->fd >= 0) h = (struct ipc_handle){IPC_MAGIC, (int32_t)getpid(), e->fd, sim_physical_device(e->device), e->size};
    unlock();
    if (!h.magic) return CUDA_ERROR_INVALID_VALUE; /* not a cuMemAlloc base pointer of 2 MiB pages */
    memset(handle, 0, sizeof *handle);
    memcpy(handle->reserved, &h, sizeof h);
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuIpcOpenMemHandle_v2, (CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags))
{
    if (!pdptr) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    struct ipc_handle h;
    memcpy(&h, handle.reserved, sizeof h);
    if (h.magic != IPC_MAGIC || h.size == 0) return CUDA_ERROR_INVALID_VALUE;
    if (h.pid == (int32_t)getpid()) return CUDA_ERROR_INVALID_CONTEXT; /* not in the exporting process */
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)h.pid, (int)h.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return CUDA_ERROR_INVALID_HANDLE;
    void *p = mmap(NULL, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    struct ipc_open *o = malloc(sizeof *o);
    if (!o) {
        munmap(p, h.size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    lock();
    *o = (struct ipc_open){(uint64_t)(uintptr_t)p, h.size, g_ipc_open};
    g_ipc_open = o;
    unlock();
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}
SIM_ALIAS(CUresult, cuIpcOpenMemHandle, cuIpcOpenMemHandle_v2, (CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags));

SIM_API(CUresult, cuIpcCloseMemHandle, (CUdeviceptr dptr))
{
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    lock();
    struct ipc_open **pp = &g_ipc_open;
    while (*pp && (*pp)->addr != dptr) pp = &(*pp)->next;
    struct ipc_open *o = *pp;
    if (o) *pp = o->next;
    unlock();
    if (!o) return CUDA_ERROR_INVALID_VALUE;
    munmap((void *)(uintptr_t)o->addr, o->size);
    free(o);
    return CUDA_SUCCESS;
}

/* base and size of the allocation holding dptr: an opened IPC buffer, or a device/managed/host
 * allocation (a scan of the table: for tools, not for every call) */
SIM_API(CUresult, cuMemGetAddressRange_v2, (CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr))
{
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    uint64_t base = 0;
    size_t size = 0;
    lock();
    for (struct ipc_open *o = g_ipc_open; o && !size; o = o->next)
        if (dptr >= o->addr && dptr < o->addr + o->size) base = o->addr, size = o->size;
    for (size_t i = 0; i < g_nbuckets && !size; i++)
        for (struct entry *e = g_buckets[i]; e && !size; e = e->next)
            if (dptr >= e->addr && dptr < e->addr + e->size) base = e->addr, size = e->size;
    unlock();
    if (!size) return SIM_ERROR_NOT_FOUND_RANGE;
    if (pbase) *pbase = base;
    if (psize) *psize = size;
    return CUDA_SUCCESS;
}
