/* vmm.c — simcuda driver: virtual memory management made real.
 *   reserve  = mmap PROT_NONE (aligned to the 2 MiB granularity)
 *   create   = a memfd of the requested size (the "physical" allocation)
 *   map      = mmap MAP_FIXED|MAP_SHARED of the memfd at the address, so two
 *              mappings of one handle alias each other
 *   unmap    = back to an inaccessible PROT_NONE reservation
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "../sim_driver.h"

struct vmm_handle {
    uint32_t magic; int fd; size_t size; int device; int released; int maps;
    int types;      /* requestedHandleTypes (exportable as a POSIX fd when & 1) */
    int imported;   /* made by cuMemImportFromShareableHandle: another process's memory */
    int multicast;  /* a multicast object (cuMulticastCreate): memory is bound to it, it holds none */
    int bound;      /* multicast: bytes bound */
};
struct range { uint64_t addr; size_t size; struct vmm_handle *h; struct range *next; };

static pthread_mutex_t v_lock = PTHREAD_MUTEX_INITIALIZER;
static struct range *g_reserved; /* reservations (h == NULL) */
static struct range *g_mapped;   /* mappings */
static pthread_once_t v_once = PTHREAD_ONCE_INIT;

static void v_prepare(void) { pthread_mutex_lock(&v_lock); }
static void v_parent(void) { pthread_mutex_unlock(&v_lock); }
static void v_child(void) { pthread_mutex_init(&v_lock, NULL); }
static void v_init(void) { pthread_atfork(v_prepare, v_parent, v_child); }
static void vlock(void) { pthread_once(&v_once, v_init); pthread_mutex_lock(&v_lock); }
static void vunlock(void) { pthread_mutex_unlock(&v_lock); }

static int valid_handle(struct vmm_handle *h) { return h && h->magic == MAGIC_VMM && !h->released; }

/* the reservation containing [p, p+n), caller holds the lock */
static struct range *reservation_of(uint64_t p, size_t n)
{
    for (struct range *r = g_reserved; r; r = r->next)
        if (p >= r->addr && p + n <= r->addr + r->size && p + n > p) return r;
    return NULL;
}

static int overlaps_mapping(uint64_t p, size_t n)
{
    for (struct range *r = g_mapped; r; r = r->next)
        if (p < r->addr + r->size && r->addr < p + n) return 1;
    return 0;
}

static void release_if_unused(struct vmm_handle *h)
{
    if (h->released && h->maps == 0) {
        if (!h->imported && !h->multicast) /* (a peer's memory, a multicast object: never charged here) */
            sim_mem_uncharge(h->device, h->size); /* the physical memory goes back to the device */
        h->magic = MAGIC_DEAD;
        free(h);
    }
}

SIM_API(CUresult, cuMemGetAllocationGranularity, (size_t *granularity, const CUmemAllocationProp *prop, int option))
{
    if (!granularity || !prop) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    *granularity = SIM_GRANULARITY;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuMemAddressReserve, (CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                       unsigned long long flags))
{
    if (!ptr || size == 0 || size % SIM_GRANULARITY) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (alignment & (alignment - 1)) return CUDA_ERROR_INVALID_VALUE;
    size_t align = alignment > SIM_GRANULARITY ? alignment : SIM_GRANULARITY;
    struct range *r = malloc(sizeof *r);
    if (!r) return CUDA_ERROR_OUT_OF_MEMORY;
    size_t span = size + align;
    char *base = mmap((void *)(uintptr_t)addr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
        free(r);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uintptr_t start = ((uintptr_t)base + align - 1) & ~(uintptr_t)(align - 1);
    if (start > (uintptr_t)base) munmap(base, start - (uintptr_t)base);
    uintptr_t end = (uintptr_t)base + span;
    if (end > start + size) munmap((void *)(start + size), end - (start + size));
    *r = (struct range){start, size, NULL, NULL};
    vlock();
    r->next = g_reserved;
    g_reserved = r;
    vunlock();
    *ptr = start;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuMemAddressFree, (CUdeviceptr ptr, size_t size))
{
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    vlock();
    struct range **pp = &g_reserved;
    while (*pp && !((*pp)->addr == ptr && (*pp)->size == size)) pp = &(*pp)->next;
    struct range *r = *pp;
    if (!r || overlaps_mapping(ptr, size)) {
        vunlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pp = r->next;
    vunlock();
    munmap((void *)(uintptr_t)ptr, size);
    free(r);
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuMemCreate, (CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                               unsigned long long flags))
{
    if (!handle || !prop || size == 0 || size % SIM_GRANULARITY) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (prop->type != 1 /* PINNED */ || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        prop->location.id < 0 || prop->location.id >= sim_ndevices())
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_mem_charge(prop->location.id, size) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
    struct vmm_handle *h = calloc(1, sizeof *h);
    char name[40]; /* the physical device travels with the memory (an importer reads it back) */
    snprintf(name, sizeof name, "simcuda-vmm-dev%d", sim_physical_device(prop->location.id));
    int fd = h ? memfd_create(name, MFD_CLOEXEC) : -1;
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
        if (fd >= 0) close(fd);
        free(h);
        sim_mem_uncharge(prop->location.id, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *h = (struct vmm_handle){MAGIC_VMM, fd, size, prop->location.id, 0, 0, prop->requestedHandleTypes, 0, 0, 0};
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuMemRelease, (CUmemGenericAllocationHandle handle))
{
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    struct vmm_handle *h = (struct vmm_handle *)(uintptr_t)handle;
    vlock();
    if (!valid_handle(h)) {
        vunlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    h->released = 1; /* the memory lives on while mapped, like the real driver */
    close(h->fd);
    h->fd = -1;
    release_if_unused(h);
    vunlock();
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuMemMap, (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                            unsigned long long flags))
{
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    struct vmm_handle *h = (struct vmm_handle *)(uintptr_t)handle;
    if (size == 0 || size % SIM_GRANULARITY || offset % SIM_GRANULARITY || ptr % SIM_GRANULARITY || flags)
        return CUDA_ERROR_INVALID_VALUE;
    struct range *m = malloc(sizeof *m);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    vlock();
    CUresult r = CUDA_SUCCESS;
    if (!valid_handle(h) || offset > h->size || size > h->size - offset || !reservation_of(ptr, size))
        r = CUDA_ERROR_INVALID_VALUE;
    else if (overlaps_mapping(ptr, size))
        r = SIM_ERROR_ALREADY_MAPPED;
    else if (mmap((void *)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, h->fd,
                  (off_t)offset) == MAP_FAILED)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r) {
        vunlock();
        free(m);
        return r;
    }
    *m = (struct range){ptr, size, h, g_mapped};
    g_mapped = m;
    h->maps++;
    vunlock();
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuMemUnmap, (CUdeviceptr ptr, size_t size))
{
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (size == 0) return CUDA_ERROR_INVALID_VALUE;
    vlock();
    if (!reservation_of(ptr, size)) {
        vunlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    int found = 0;
    for (struct range **pp = &g_mapped; *pp;) {
        struct range *m = *pp;
        if (m->addr >= ptr && m->addr + m->size <= ptr + size) {
            *pp = m->next;
            m->h->maps--;
            release_if_unused(m->h);
            free(m);
            found++;
        } else if (m->addr < ptr + size && ptr < m->addr + m->size) {
            vunlock(); /* partial unmap of a mapping: not allowed */
            return CUDA_ERROR_INVALID_VALUE;
        } else {
            pp = &m->next;
        }
    }
    if (found)
        mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    vunlock();
    return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API(CUresult, cuMemSetAccess, (CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count))
{
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!desc || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
    vlock();
    /* every byte of the range must be mapped */
    uint64_t p = ptr, end = ptr + size;
    int progress = 1;
    while (p < end && progress) {
        progress = 0;
        for (struct range *m = g_mapped; m; m = m->next)
            if (p >= m->addr && p < m->addr + m->size) {
                p = m->addr + m->size;
                progress = 1;
                break;
            }
    }
    vunlock();
    return p >= end ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---------------- shareable handles (POSIX file descriptors) ---------------- */

SIM_API(CUresult, cuMemExportToShareableHandle, (void *shareableHandle, CUmemGenericAllocationHandle handle,
                                                int handleType, unsigned long long flags))
{
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!shareableHandle || flags) return CUDA_ERROR_INVALID_VALUE;
    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
    struct vmm_handle *h = (struct vmm_handle *)(uintptr_t)handle;
    vlock();
    int fd = -1;
    CUresult r = CUDA_SUCCESS;
    if (!valid_handle(h) || !(h->types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        r = CUDA_ERROR_INVALID_VALUE; /* not created exportable, like the real driver */
    else if ((fd = fcntl(h->fd, F_DUPFD_CLOEXEC, 0)) < 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    vunlock();
    if (r == CUDA_SUCCESS) *(int *)shareableHandle = fd;
    return r;
}

/* the physical device named by the memfd (simcuda-vmm-devN), -1 when unknown */
static int device_of_fd(int fd)
{
    char path[64], link[128];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n <= 0) return -1;
    link[n] = 0;
    const char *d = strstr(link, "simcuda-vmm-dev");
    return d ? atoi(d + strlen("simcuda-vmm-dev")) : -1;
}

SIM_API(CUresult, cuMemImportFromShareableHandle, (CUmemGenericAllocationHandle *handle, void *osHandle,
                                                  int shHandleType))
{
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!handle) return CUDA_ERROR_INVALID_VALUE;
    if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
    int src = (int)(intptr_t)osHandle;
    struct stat st;
    if (src < 0 || fstat(src, &st) != 0 || st.st_size <= 0 || st.st_size % SIM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    struct vmm_handle *h = calloc(1, sizeof *h);
    if (!h) return CUDA_ERROR_OUT_OF_MEMORY;
    int fd = fcntl(src, F_DUPFD_CLOEXEC, 0); /* the caller keeps (and closes) its own descriptor */
    if (fd < 0) {
        free(h);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *h = (struct vmm_handle){MAGIC_VMM, fd, (size_t)st.st_size, device_of_fd(fd), 0, 0,
                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 1, 0, 0};
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
    return CUDA_SUCCESS;
}

/* ---------------- multicast objects ----------------
 * A multicast object is a handle that can be mapped (cuMemMap) and to which each device binds
 * memory of its own (cuMulticastBindMem / BindAddr).  It holds no memory itself: simcuda backs its
 * mappings with a private memfd (no data moves between the bound buffers). */

SIM_API(CUresult, cuMulticastCreate, (CUmemGenericAllocationHandle *mcHandle, const CUmulticastObjectProp *prop))
{
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!mcHandle || !prop || prop->size == 0 || prop->size % SIM_GRANULARITY || prop->numDevices == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct vmm_handle *h = calloc(1, sizeof *h);
    if (!h) return CUDA_ERROR_OUT_OF_MEMORY;
    int fd = memfd_create("simcuda-multicast", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)prop->size) != 0) {
        if (fd >= 0) close(fd);
        free(h);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *h = (struct vmm_handle){MAGIC_VMM, fd, prop->size, -1, 0, 0, (int)prop->handleTypes, 0, 1, 0};
    *mcHandle = (CUmemGenericAllocationHandle)(uintptr_t)h;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuMulticastAddDevice, (CUmemGenericAllocationHandle mcHandle, CUdevice dev))
{
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    struct vmm_handle *h = (struct vmm_handle *)(uintptr_t)mcHandle;
    if (dev < 0 || dev >= sim_ndevices()) return SIM_ERROR_INVALID_DEVICE;
    return valid_handle(h) && h->multicast ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult bind_check(struct vmm_handle *mc, size_t mcOffset, size_t size)
{
    if (!valid_handle(mc) || !mc->multicast || size == 0 || mcOffset % SIM_GRANULARITY ||
        size % SIM_GRANULARITY || mcOffset > mc->size || size > mc->size - mcOffset)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

SIM_API(CUresult, cuMulticastBindMem, (CUmemGenericAllocationHandle mcHandle, size_t mcOffset,
                                      CUmemGenericAllocationHandle memHandle, size_t memOffset, size_t size,
                                      unsigned long long flags))
{
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    struct vmm_handle *mc = (struct vmm_handle *)(uintptr_t)mcHandle, *mem = (struct vmm_handle *)(uintptr_t)memHandle;
    vlock();
    CUresult r = bind_check(mc, mcOffset, size);
    if (!r && (!valid_handle(mem) || mem->multicast || memOffset > mem->size || size > mem->size - memOffset))
        r = CUDA_ERROR_INVALID_VALUE;
    if (!r) mc->bound += (int)(size / SIM_GRANULARITY);
    vunlock();
    return r;
}

SIM_API(CUresult, cuMulticastBindAddr, (CUmemGenericAllocationHandle mcHandle, size_t mcOffset, CUdeviceptr memptr,
                                       size_t size, unsigned long long flags))
{
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    struct vmm_handle *mc = (struct vmm_handle *)(uintptr_t)mcHandle;
    vlock();
    CUresult r = bind_check(mc, mcOffset, size);
    if (!r && !memptr) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) mc->bound += (int)(size / SIM_GRANULARITY);
    vunlock();
    return r;
}

SIM_API(CUresult, cuMulticastUnbind, (CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset,
                                     size_t size))
{
    if (!sim_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    struct vmm_handle *mc = (struct vmm_handle *)(uintptr_t)mcHandle;
    vlock();
    CUresult r = bind_check(mc, mcOffset, size);
    if (!r && mc->bound < (int)(size / SIM_GRANULARITY)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) mc->bound -= (int)(size / SIM_GRANULARITY);
    vunlock();
    return r;
}
