/*
 * vmm_workload.c — the CUDA virtual-memory patterns of real frameworks, on simcuda, printing as JSON
 * what it did (the ground truth for the VMM join):
 *
 *   1. JAX/XLA platform allocator: per buffer reserve + create + map, a kernel, unmap + release + free;
 *   2. one physical handle mapped at two addresses at once (its bytes count once);
 *   3. one handle mapped as two halves (offsets 0 and 2 MiB) at two addresses (both halves count);
 *   4. PyTorch expandable segment: one large reservation, 2 MiB pages mapped into it, one page
 *      unmapped and released, another mapped, then everything torn down.
 *
 * "physical_peak" is the most physical bytes mapped at once, counted by this program.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pi_cuda.h"
#include "simcuda.h"

typedef CUresult (*init_t)(unsigned);
typedef CUresult (*launch_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
typedef CUresult (*reg_t)(const char *, simcu_kernel_fn, unsigned, const size_t *, const size_t *, CUfunction *);
typedef CUresult (*reserve_t)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*addrfree_t)(CUdeviceptr, size_t);
typedef CUresult (*create_t)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
typedef CUresult (*release_t)(CUmemGenericAllocationHandle);
typedef CUresult (*map_t)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*unmap_t)(CUdeviceptr, size_t);

#define CHECK(x) do { int rc_ = (int)(x); if (rc_) { fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #x, rc_); exit(3); } } while (0)
#define MiB ((size_t)1 << 20)

static reserve_t reserve; static addrfree_t afree; static create_t create; static release_t release;
static map_t map; static unmap_t unmap; static launch_t launch;
static CUfunction k2;
static CUmemAllocationProp prop;
static long maps, launches, accesses;
static long long live, peak;

static void k2_body(void **params) { /* writes through both pointer arguments */
    for (int i = 0; i < 2; i++) {
        char *p = *(char **)params[i];
        if (p) p[0] = (char)i;
    }
}

static void counted(long long delta) {
    live += delta;
    if (live > peak) peak = live;
}

static void touch(CUdeviceptr a, CUdeviceptr b) {
    void *kp[2] = {&a, &b};
    CHECK(launch(k2, 1, 1, 1, 1, 1, 1, 0, 0, kp, NULL));
    launches++;
    accesses += (b && b != a) ? 2 : 1;
}

int main(void) {
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!drv) { fprintf(stderr, "dlopen libcuda: %s\n", dlerror()); return 3; }
    CHECK(((init_t)dlsym(drv, "cuInit"))(0));
    CUcontext ctx;
    CHECK(((CUresult(*)(CUcontext *, CUdevice))dlsym(drv, "cuDevicePrimaryCtxRetain"))(&ctx, 0));
    CHECK(((CUresult(*)(CUcontext))dlsym(drv, "cuCtxSetCurrent"))(ctx));
    reserve = (reserve_t)dlsym(drv, "cuMemAddressReserve");
    afree = (addrfree_t)dlsym(drv, "cuMemAddressFree");
    create = (create_t)dlsym(drv, "cuMemCreate");
    release = (release_t)dlsym(drv, "cuMemRelease");
    map = (map_t)dlsym(drv, "cuMemMap");
    unmap = (unmap_t)dlsym(drv, "cuMemUnmap");
    launch = (launch_t)dlsym(drv, "cuLaunchKernel");
    static const size_t off2[] = {0, 8}, sz2[] = {8, 8};
    CHECK(((reg_t)dlsym(drv, "simcuRegisterKernel"))("k2", k2_body, 2, off2, sz2, &k2));
    memset(&prop, 0, sizeof prop);
    prop.type = 1;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    long reservations = 0;

    /* 1. JAX-style buffers, one after another, each touched twice (interior pointer too) */
    for (int i = 0; i < 5; i++) {
        CUdeviceptr va;
        CUmemGenericAllocationHandle h;
        size_t n = (size_t)(i % 2 + 1) * 2 * MiB;
        CHECK(reserve(&va, n, 0, 0, 0)); reservations++;
        CHECK(create(&h, n, &prop, 0));
        CHECK(map(va, n, 0, h, 0)); maps++; counted((long long)n);
        touch(va, 0);
        touch(va + n - 64, 0);
        CHECK(unmap(va, n)); counted(-(long long)n);
        CHECK(release(h));
        CHECK(afree(va, n));
    }

    /* 2. one 4 MiB handle mapped twice at once */
    {
        CUdeviceptr va;
        CUmemGenericAllocationHandle h;
        CHECK(reserve(&va, 8 * MiB, 0, 0, 0)); reservations++;
        CHECK(create(&h, 4 * MiB, &prop, 0));
        CHECK(map(va, 4 * MiB, 0, h, 0)); maps++; counted(4 * MiB);
        CHECK(map(va + 4 * MiB, 4 * MiB, 0, h, 0)); maps++; /* same physical bytes */
        touch(va, va + 4 * MiB);
        CHECK(unmap(va, 4 * MiB));
        CHECK(unmap(va + 4 * MiB, 4 * MiB)); counted(-4 * (long long)MiB);
        CHECK(release(h));
        CHECK(afree(va, 8 * MiB));
    }

    /* 3. one 4 MiB handle mapped as two halves */
    {
        CUdeviceptr va;
        CUmemGenericAllocationHandle h;
        CHECK(reserve(&va, 4 * MiB, 0, 0, 0)); reservations++;
        CHECK(create(&h, 4 * MiB, &prop, 0));
        CHECK(map(va + 2 * MiB, 2 * MiB, 2 * MiB, h, 0)); maps++; counted(2 * MiB);
        CHECK(map(va, 2 * MiB, 0, h, 0)); maps++; counted(2 * MiB);
        touch(va, va + 2 * MiB);
        CHECK(unmap(va, 2 * MiB)); counted(-2 * (long long)MiB);
        CHECK(unmap(va + 2 * MiB, 2 * MiB)); counted(-2 * (long long)MiB);
        CHECK(release(h));
        CHECK(afree(va, 4 * MiB));
    }

    /* 4. an expandable segment: 2 MiB pages in one 32 MiB range */
    {
        CUdeviceptr seg;
        CUmemGenericAllocationHandle pg[5];
        CHECK(reserve(&seg, 32 * MiB, 0, 0, 0)); reservations++;
        for (int k = 0; k < 4; k++) {
            CHECK(create(&pg[k], 2 * MiB, &prop, 0));
            CHECK(map(seg + k * 2 * MiB, 2 * MiB, 0, pg[k], 0)); maps++; counted(2 * MiB);
        }
        touch(seg + 3 * MiB, seg + 6 * MiB + 17); /* interior pointers into pages 1 and 3 */
        CHECK(unmap(seg + 6 * MiB, 2 * MiB)); counted(-2 * (long long)MiB);
        CHECK(release(pg[3]));
        CHECK(create(&pg[4], 2 * MiB, &prop, 0));
        CHECK(map(seg + 8 * MiB, 2 * MiB, 0, pg[4], 0)); maps++; counted(2 * MiB);
        touch(seg + 8 * MiB, seg);
        for (int k = 0; k < 3; k++) {
            CHECK(unmap(seg + k * 2 * MiB, 2 * MiB)); counted(-2 * (long long)MiB);
            CHECK(release(pg[k]));
        }
        CHECK(unmap(seg + 8 * MiB, 2 * MiB)); counted(-2 * (long long)MiB);
        CHECK(release(pg[4]));
        CHECK(afree(seg, 32 * MiB));
    }
    printf("{\"maps\": %ld, \"reservations\": %ld, \"launches\": %ld, \"accesses\": %ld, "
           "\"physical_peak\": %lld, \"live_at_end\": %lld}\n", maps, reservations, launches, accesses, peak, live);
    return 0;
}
