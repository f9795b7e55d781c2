/* simcuda_spy.c — a minimal LD_PRELOAD interposer, the way a profiler hooks
 * the driver: it overrides dlsym, hands out its own cuGetProcAddress_v2, and
 * wraps the resolved cuMemAlloc / cuLaunchKernel to count calls.  At exit it
 * prints what it saw on stderr ("spy: ..." lines) for the test to check. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include "pi_cuda.h"

typedef void *(*dlsym_t)(void *, const char *);
typedef CUresult (*getproc_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*alloc_t)(CUdeviceptr *, size_t);
typedef CUresult (*launch_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);

static dlsym_t real_dlsym;
static getproc_t real_getproc;
static alloc_t real_alloc;
static launch_t real_launch, real_launch_ptsz;
static int n_dlsym_getproc, n_lookups, n_lookups_ptsz, n_alloc, n_launch, n_launch_ptsz;

static CUresult spy_alloc(CUdeviceptr *p, size_t n) { n_alloc++; return real_alloc(p, n); }
static CUresult spy_launch(CUfunction f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g,
                           unsigned smem, CUstream s, void **kp, void **ex)
{
    n_launch++;
    return real_launch(f, a, b, c, d, e, g, smem, s, kp, ex);
}
static CUresult spy_launch_ptsz(CUfunction f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e,
                                unsigned g, unsigned smem, CUstream s, void **kp, void **ex)
{
    n_launch_ptsz++;
    return real_launch_ptsz(f, a, b, c, d, e, g, smem, s, kp, ex);
}

static CUresult spy_getproc(const char *sym, void **pfn, int ver, cuuint64_t flags,
                            CUdriverProcAddressQueryResult *st)
{
    CUresult r = real_getproc(sym, pfn, ver, flags, st);
    n_lookups++;
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) n_lookups_ptsz++;
    if (r == CUDA_SUCCESS && strcmp(sym, "cuMemAlloc") == 0 && !(flags & 2)) {
        real_alloc = (alloc_t)*pfn;
        *pfn = (void *)spy_alloc;
    } else if (r == CUDA_SUCCESS && strcmp(sym, "cuLaunchKernel") == 0) {
        if (flags & 2) {
            real_launch_ptsz = (launch_t)*pfn;
            *pfn = (void *)spy_launch_ptsz;
        } else {
            real_launch = (launch_t)*pfn;
            *pfn = (void *)spy_launch;
        }
    }
    return r;
}

void *dlsym(void *handle, const char *name)
{
    if (!real_dlsym) real_dlsym = (dlsym_t)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!real_dlsym) real_dlsym = (dlsym_t)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    void *p = real_dlsym(handle, name);
    if (p && strcmp(name, "cuGetProcAddress_v2") == 0) {
        n_dlsym_getproc++;
        real_getproc = (getproc_t)p;
        return (void *)spy_getproc;
    }
    return p;
}

__attribute__((destructor)) static void report(void)
{
    fprintf(stderr, "spy: dlsym_getproc=%d lookups=%d lookups_ptsz=%d cuMemAlloc=%d cuLaunchKernel=%d "
                    "cuLaunchKernel_ptsz=%d\n",
            n_dlsym_getproc, n_lookups, n_lookups_ptsz, n_alloc, n_launch, n_launch_ptsz);
}
