/* simnccl.c — see simnccl.h.  Every CUDA call is checked; a failure ends init with the call's
 * name and result in truth->error (what was made so far is freed by simnccl_finalize). */
#include "simnccl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pi_cuda.h"

#define MiB ((uint64_t)1 << 20)
#define GRAN (2 * MiB)
#define POOL_OBJECTS 4
#define MAX_RANKS 64

cudaError_t cudaSetDevice(int);
cudaError_t cudaMalloc(void **, size_t);
cudaError_t cudaFree(void *);
cudaError_t cudaMemcpy(void *, const void *, size_t, int);
cudaError_t cudaStreamCreate(cudaStream_t *);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaStreamDestroy(cudaStream_t);
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *, void *);
cudaError_t cudaIpcOpenMemHandle(void **, cudaIpcMemHandle_t, unsigned);
cudaError_t cudaIpcCloseMemHandle(void *);
cudaError_t cudaMemPoolCreate(cudaMemPool_t *, const cudaMemPoolProps *);
cudaError_t cudaMemPoolDestroy(cudaMemPool_t);
cudaError_t cudaMallocFromPoolAsync(void **, size_t, cudaMemPool_t, cudaStream_t);
cudaError_t cudaFreeAsync(void *, cudaStream_t);
cudaError_t cudaGetDriverEntryPointByVersion(const char *, void **, unsigned, unsigned long long, void *);

struct drv {
    CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
    CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
    CUresult (*cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*cuMemAddressFree)(CUdeviceptr, size_t);
    CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*cuMemUnmap)(CUdeviceptr, size_t);
    CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*cuMemExportToShareableHandle)(void *, CUmemGenericAllocationHandle, int, unsigned long long);
    CUresult (*cuMemImportFromShareableHandle)(CUmemGenericAllocationHandle *, void *, int);
    CUresult (*cuMulticastCreate)(CUmemGenericAllocationHandle *, const CUmulticastObjectProp *);
    CUresult (*cuMulticastAddDevice)(CUmemGenericAllocationHandle, CUdevice);
    CUresult (*cuMulticastBindMem)(CUmemGenericAllocationHandle, size_t, CUmemGenericAllocationHandle, size_t, size_t,
                                   unsigned long long);
    CUresult (*cuMulticastUnbind)(CUmemGenericAllocationHandle, CUdevice, size_t, size_t);
};

struct vrange { CUdeviceptr va; size_t size; int mapped; };

struct simnccl_comm {
    struct simnccl_config cfg;
    char dir[512];
    struct drv d;
    cudaStream_t stream;
    CUmemGenericAllocationHandle buf;       /* own buffer (physical) */
    struct vrange own[2];                   /* its two overlapping windows */
    int exported_fd;
    CUmemGenericAllocationHandle peer_h[MAX_RANKS];
    struct vrange peer[MAX_RANKS];
    void *ipc;                              /* own IPC buffer */
    void *peer_ipc[MAX_RANKS];
    cudaMemPool_t pool;
    void *pool_obj[POOL_OBJECTS];
    CUmemGenericAllocationHandle mc;
    struct vrange mc_map;
    int mc_bound;
};

static void *fail_v(struct simnccl_truth *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->error, sizeof t->error, fmt, ap);
    va_end(ap);
    return NULL;
}

#define CK(call, name)                                                                   \
    do {                                                                                 \
        int rc_ = (int)(call);                                                           \
        if (rc_ != 0) {                                                                  \
            fail_v(t, "%s failed with error %d", name, rc_);                             \
            goto fail;                                                                   \
        }                                                                                \
    } while (0)

static int resolve(struct drv *d)
{
    struct { const char *name; void **slot; } need[] = {
        {"cuMemCreate", (void **)&d->cuMemCreate},
        {"cuMemRelease", (void **)&d->cuMemRelease},
        {"cuMemAddressReserve", (void **)&d->cuMemAddressReserve},
        {"cuMemAddressFree", (void **)&d->cuMemAddressFree},
        {"cuMemMap", (void **)&d->cuMemMap},
        {"cuMemUnmap", (void **)&d->cuMemUnmap},
        {"cuMemSetAccess", (void **)&d->cuMemSetAccess},
        {"cuMemExportToShareableHandle", (void **)&d->cuMemExportToShareableHandle},
        {"cuMemImportFromShareableHandle", (void **)&d->cuMemImportFromShareableHandle},
        {"cuMulticastCreate", (void **)&d->cuMulticastCreate},
        {"cuMulticastAddDevice", (void **)&d->cuMulticastAddDevice},
        {"cuMulticastBindMem", (void **)&d->cuMulticastBindMem},
        {"cuMulticastUnbind", (void **)&d->cuMulticastUnbind},
    };
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
        int status = 0;
        if (cudaGetDriverEntryPointByVersion(need[i].name, need[i].slot, 12080, 0, &status) != 0 || !*need[i].slot)
            return (int)i + 1;
    }
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* write `len` bytes to dir/name atomically (a temporary file, then rename) */
static int put_file(const struct simnccl_comm *c, const char *name, const void *data, size_t len)
{
    char tmp[600], path[600];
    snprintf(path, sizeof path, "%s/%s", c->dir, name);
    snprintf(tmp, sizeof tmp, "%s/.%s.%d", c->dir, name, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    ssize_t w = write(fd, data, len);
    close(fd);
    if (w != (ssize_t)len || rename(tmp, path) != 0) return -1;
    return 0;
}

/* read dir/name (waiting for it up to the timeout); bytes read or -1 */
static ssize_t get_file(const struct simnccl_comm *c, const char *name, void *buf, size_t cap)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", c->dir, name);
    double end = now_s() + c->cfg.timeout_s;
    for (;;) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            ssize_t n = read(fd, buf, cap);
            close(fd);
            return n;
        }
        if (now_s() > end) return -1;
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
}

/* every rank reached `phase` */
static int barrier(const struct simnccl_comm *c, const char *phase)
{
    char name[128], b;
    snprintf(name, sizeof name, "%s-%d", phase, c->cfg.rank);
    if (put_file(c, name, "1", 1)) return -1;
    for (int r = 0; r < c->cfg.nranks; r++) {
        snprintf(name, sizeof name, "%s-%d", phase, r);
        if (get_file(c, name, &b, 1) != 1) return -1;
    }
    return 0;
}

static int map_range(struct simnccl_comm *c, struct vrange *v, CUmemGenericAllocationHandle h, size_t off,
                     size_t size)
{
    int rc = c->d.cuMemAddressReserve(&v->va, size, 0, 0, 0);
    if (rc) return rc;
    v->size = size;
    if ((rc = c->d.cuMemMap(v->va, size, off, h, 0))) return rc;
    v->mapped = 1;
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof acc);
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = c->cfg.device;
    acc.flags = 3; /* READWRITE */
    return c->d.cuMemSetAccess(v->va, size, &acc, 1);
}

static void unmap_range(struct simnccl_comm *c, struct vrange *v)
{
    if (v->mapped) c->d.cuMemUnmap(v->va, v->size);
    if (v->va) c->d.cuMemAddressFree(v->va, v->size);
    memset(v, 0, sizeof *v);
}

struct simnccl_comm *simnccl_init(const struct simnccl_config *cfg, struct simnccl_truth *t)
{
    memset(t, 0, sizeof *t);
    if (!cfg || cfg->nranks < 1 || cfg->nranks > MAX_RANKS || cfg->rank < 0 || cfg->rank >= cfg->nranks ||
        !cfg->dir || cfg->buf_bytes < 3 * GRAN || cfg->buf_bytes % GRAN || cfg->ipc_bytes % GRAN)
        return fail_v(t, "invalid configuration");
    struct simnccl_comm *c = calloc(1, sizeof *c);
    if (!c) return fail_v(t, "out of host memory");
    c->cfg = *cfg;
    snprintf(c->dir, sizeof c->dir, "%s", cfg->dir);
    c->cfg.dir = c->dir;
    c->exported_fd = -1;
    int me = cfg->rank, n = cfg->nranks;
    char name[64];
    int miss = resolve(&c->d);
    if (miss) {
        fail_v(t, "cudaGetDriverEntryPointByVersion: driver function %d not found", miss);
        goto fail;
    }
    CK(cudaSetDevice(cfg->device), "cudaSetDevice");
    CK(cudaStreamCreate(&c->stream), "cudaStreamCreate");

    /* the communication buffer, exportable; two windows [0, B-2MiB) and [2MiB, B) */
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = cfg->device;
    CK(c->d.cuMemCreate(&c->buf, cfg->buf_bytes, &prop, 0), "cuMemCreate");
    t->buffer_bytes = cfg->buf_bytes;
    CK(map_range(c, &c->own[0], c->buf, 0, cfg->buf_bytes - GRAN), "cuMemMap (window 0)");
    CK(map_range(c, &c->own[1], c->buf, GRAN, cfg->buf_bytes - GRAN), "cuMemMap (window 1)");
    t->maps_own = 2;
    CK(c->d.cuMemExportToShareableHandle(&c->exported_fd, c->buf, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
       "cuMemExportToShareableHandle");

    /* the legacy IPC buffer */
    if (cfg->ipc_bytes) {
        CK(cudaMalloc(&c->ipc, cfg->ipc_bytes), "cudaMalloc");
        t->ipc_bytes = cfg->ipc_bytes;
    }
    /* the private pool */
    cudaMemPoolProps pp;
    memset(&pp, 0, sizeof pp);
    pp.allocType = 1;
    pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    pp.location.id = cfg->device;
    CK(cudaMemPoolCreate(&c->pool, &pp), "cudaMemPoolCreate");
    for (int i = 0; i < POOL_OBJECTS && cfg->pool_bytes; i++)
        CK(cudaMallocFromPoolAsync(&c->pool_obj[i], cfg->pool_bytes / POOL_OBJECTS, c->pool, c->stream),
           "cudaMallocFromPoolAsync");
    t->pool_bytes = cfg->pool_bytes ? cfg->pool_bytes / POOL_OBJECTS * POOL_OBJECTS : 0;

    /* publish: "pid fd" of the exported buffer, the IPC handle */
    char line[64];
    int len = snprintf(line, sizeof line, "%d %d\n", (int)getpid(), c->exported_fd);
    snprintf(name, sizeof name, "vmm-%d", me);
    if (put_file(c, name, line, (size_t)len)) {
        fail_v(t, "cannot write %s/%s: %s", c->dir, name, strerror(errno));
        goto fail;
    }
    if (c->ipc) {
        cudaIpcMemHandle_t ih;
        CK(cudaIpcGetMemHandle(&ih, c->ipc), "cudaIpcGetMemHandle");
        snprintf(name, sizeof name, "ipc-%d", me);
        if (put_file(c, name, &ih, sizeof ih)) {
            fail_v(t, "cannot write %s/%s", c->dir, name);
            goto fail;
        }
    }
    /* import every peer's buffer and IPC buffer */
    for (int p = 0; p < n; p++) {
        if (p == me) continue;
        char buf[64];
        snprintf(name, sizeof name, "vmm-%d", p);
        ssize_t k = get_file(c, name, buf, sizeof buf - 1);
        if (k <= 0) {
            fail_v(t, "rank %d did not publish its buffer within %.0f s", p, cfg->timeout_s);
            goto fail;
        }
        buf[k] = 0;
        int pid = 0, pfd = -1;
        if (sscanf(buf, "%d %d", &pid, &pfd) != 2) {
            fail_v(t, "bad %s/%s", c->dir, name);
            goto fail;
        }
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, pfd);
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0) {
            fail_v(t, "cannot open rank %d's buffer (%s): %s", p, path, strerror(errno));
            goto fail;
        }
        int rc = c->d.cuMemImportFromShareableHandle(&c->peer_h[p], (void *)(intptr_t)fd,
                                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        close(fd);
        CK(rc, "cuMemImportFromShareableHandle");
        CK(map_range(c, &c->peer[p], c->peer_h[p], 0, cfg->buf_bytes), "cuMemMap (peer)");
        t->imported++;
        if (c->ipc) {
            cudaIpcMemHandle_t ih;
            snprintf(name, sizeof name, "ipc-%d", p);
            if (get_file(c, name, &ih, sizeof ih) != (ssize_t)sizeof ih) {
                fail_v(t, "rank %d did not publish its IPC handle", p);
                goto fail;
            }
            CK(cudaIpcOpenMemHandle(&c->peer_ipc[p], ih, 1), "cudaIpcOpenMemHandle");
            t->ipc_opened++;
        }
        /* write my mark into the peer's buffer, through the imported mapping */
        uint64_t mark = 0x51a0000000000000ull | (uint64_t)(me + 1);
        CK(cudaMemcpy((void *)(uintptr_t)(c->peer[p].va + 64 * (uint64_t)me), &mark, sizeof mark,
                      cudaMemcpyHostToDevice), "cudaMemcpy (to a peer)");
    }
    /* a multicast object bound to the first 2 MiB of the buffer, and mapped */
    if (cfg->multicast) {
        CUmulticastObjectProp mp = {(unsigned)n, GRAN, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0};
        CK(c->d.cuMulticastCreate(&c->mc, &mp), "cuMulticastCreate");
        CK(c->d.cuMulticastAddDevice(c->mc, cfg->device), "cuMulticastAddDevice");
        CK(c->d.cuMulticastBindMem(c->mc, 0, c->buf, 0, GRAN, 0), "cuMulticastBindMem");
        c->mc_bound = 1;
        CK(map_range(c, &c->mc_map, c->mc, 0, GRAN), "cuMemMap (multicast)");
        t->multicast_bytes = GRAN;
    }
    if (barrier(c, "written")) {
        fail_v(t, "the peers did not all write within %.0f s", cfg->timeout_s);
        goto fail;
    }
    /* every peer's mark arrived in my buffer (real shared memory) */
    for (int p = 0; p < n; p++) {
        if (p == me) continue;
        uint64_t got = 0;
        CK(cudaMemcpy(&got, (void *)(uintptr_t)(c->own[0].va + 64 * (uint64_t)p), sizeof got,
                      cudaMemcpyDeviceToHost), "cudaMemcpy (own buffer)");
        if (got == (0x51a0000000000000ull | (uint64_t)(p + 1))) t->verified++;
    }
    t->owned_bytes = t->buffer_bytes + t->ipc_bytes + t->pool_bytes;
    return c;
fail:
    simnccl_finalize(c, NULL);
    return NULL;
}

int simnccl_finalize(struct simnccl_comm *c, struct simnccl_truth *t)
{
    if (!c) return -1;
    int bad = 0;
    if (c->mc_map.va) unmap_range(c, &c->mc_map);
    if (c->mc_bound) bad |= c->d.cuMulticastUnbind(c->mc, c->cfg.device, 0, GRAN) != 0;
    if (c->mc) bad |= c->d.cuMemRelease(c->mc) != 0;
    for (int p = 0; p < MAX_RANKS; p++) {
        if (c->peer[p].va) unmap_range(c, &c->peer[p]);
        if (c->peer_h[p]) bad |= c->d.cuMemRelease(c->peer_h[p]) != 0;
        if (c->peer_ipc[p]) bad |= cudaIpcCloseMemHandle(c->peer_ipc[p]) != 0;
    }
    for (int i = 0; i < POOL_OBJECTS; i++)
        if (c->pool_obj[i]) bad |= cudaFreeAsync(c->pool_obj[i], c->stream) != 0;
    if (c->stream) bad |= cudaStreamSynchronize(c->stream) != 0;
    if (c->pool) bad |= cudaMemPoolDestroy(c->pool) != 0;
    if (c->ipc) bad |= cudaFree(c->ipc) != 0;
    for (int i = 0; i < 2; i++)
        if (c->own[i].va) unmap_range(c, &c->own[i]);
    if (c->buf) bad |= c->d.cuMemRelease(c->buf) != 0;
    if (c->exported_fd >= 0) close(c->exported_fd);
    if (c->stream) bad |= cudaStreamDestroy(c->stream) != 0;
    free(c);
    if (bad && t) snprintf(t->error, sizeof t->error, "a CUDA call failed while finalizing");
    return bad ? -1 : 0;
}
