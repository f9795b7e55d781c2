/*
 * resolve.c — finding real functions and handing out hooks on every path a
 * program can use to reach CUDA:
 *
 *   PLT            our exported wrappers (hooks.c) bind first (LD_PRELOAD);
 *                  their real function is dlsym(RTLD_NEXT) from the shim.
 *   dlsym(h, n)    overridden here: the real lookup, then an exact-name match
 *                  against hooks.def swaps in the hook (and remembers the real
 *                  pointer).  dlsym(RTLD_NEXT, n) is forwarded as a tail call so
 *                  glibc still sees the *caller's* return address: another
 *                  preloaded library's RTLD_NEXT keeps its meaning.
 *   cuGetProcAddress[_v2], cudaGetDriverEntryPoint[ByVersion]
 *                  the real call, then the returned pointer is mapped to the
 *                  hook of the exact ABI variant it is (by its symbol name when
 *                  dladdr knows it, else by hooks.def's base name, minimum
 *                  version and per-thread-stream flag).  cuGetExportTable and
 *                  every name not in the table pass through untouched.
 */
#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

#include "cupti.h"
#include "shim.h"

typedef void *(*dlsym_fn)(void *, const char *);
static dlsym_fn g_real_dlsym;

void *volatile pi_real_fn[PI_API_COUNT];

static void resolve_dlsym(void) {
    dlsym_fn f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!f) f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    if (!f) f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17");
    g_real_dlsym = f;
}

void *pi_real_dlsym(void *handle, const char *name) {
    if (PI_UNLIKELY(!g_real_dlsym)) resolve_dlsym();
    return g_real_dlsym ? g_real_dlsym(handle, name) : NULL;
}

/* ---- the resolution hooks themselves (not events: kept outside hooks.def) ---- */
typedef CUresult (*gpa_v1_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*gpa_v2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef int (*gdep_fn)(const char *, void **, unsigned long long, void *);
typedef int (*gdepv_fn)(const char *, void **, unsigned int, unsigned long long, void *);

enum { R_GPA1, R_GPA2, R_GDEP, R_GDEPV, R_COUNT };
static const char *const g_rname[R_COUNT] = {"cuGetProcAddress", "cuGetProcAddress_v2", "cudaGetDriverEntryPoint",
                                             "cudaGetDriverEntryPointByVersion"};
static void *volatile g_rreal[R_COUNT];
CUresult cuGetProcAddress(const char *, void **, int, cuuint64_t);
CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
int cudaGetDriverEntryPoint(const char *, void **, unsigned long long, void *);
int cudaGetDriverEntryPointByVersion(const char *, void **, unsigned int, unsigned long long, void *);
/* our own addresses: a constant table, filled by the loader's relocations (no code at load time) */
static void *const g_rhook[R_COUNT] = {(void *)cuGetProcAddress, (void *)cuGetProcAddress_v2,
                                       (void *)cudaGetDriverEntryPoint, (void *)cudaGetDriverEntryPointByVersion};

static int hook_index(const void *p) {
    for (int i = 1; i < PI_API_COUNT; i++)
        if (pi_hooks[i].hook == p) return i;
    return 0;
}

static int is_our_pointer(const void *p) {
    if (hook_index(p)) return 1;
    for (int i = 0; i < R_COUNT; i++)
        if (g_rhook[i] == p) return 1;
    return 0;
}

static int api_by_name(const char *name) {
    if (!name || !((name[0] == 'c' && name[1] == 'u') || (name[0] == '_' && name[1] == '_'))) return 0; /* __cuda* */
    for (int i = 1; i < PI_API_COUNT; i++)
        if (strcmp(pi_hooks[i].name, name) == 0) return i;
    return 0;
}

static int res_by_name(const char *name) {
    if (!name || name[0] != 'c' || name[1] != 'u') return -1;
    for (int i = 0; i < R_COUNT; i++)
        if (strcmp(g_rname[i], name) == 0) return i;
    return -1;
}

static void remember(void *volatile *slot, void *real) {
    if (real && !*slot && !is_our_pointer(real)) *slot = real;
}

static void *fallback_lookup(const char *name, int lib) {
    static const char *const rt[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so", NULL};
    static const char *const drv[] = {"libcuda.so.1", "libcuda.so", NULL};
    const char *const *libs = lib == PI_LIB_RT ? rt : drv;
    for (int i = 0; libs[i]; i++) {
        void *h = dlopen(libs[i], RTLD_LAZY | RTLD_NOLOAD);
        if (!h) continue;
        void *p = pi_real_dlsym(h, name);
        dlclose(h);
        if (p && !is_our_pointer(p)) return p;
    }
    return NULL;
}

static void *lookup_real(const char *name, int lib) {
    void *p = pi_real_dlsym(RTLD_NEXT, name); /* called from the shim: objects after it */
    if (p && is_our_pointer(p)) p = NULL;
    return p ? p : fallback_lookup(name, lib);
}

void *pi_real(int api) {
    void *p = pi_real_fn[api];
    if (PI_LIKELY(p != NULL)) return p;
    p = lookup_real(pi_hooks[api].name, pi_hooks[api].lib);
    remember(&pi_real_fn[api], p);
    return pi_real_fn[api];
}

static void *res_real(int i) {
    void *p = g_rreal[i];
    if (p) return p;
    p = lookup_real(g_rname[i], i < R_GDEP ? PI_LIB_DRV : PI_LIB_RT);
    remember(&g_rreal[i], p);
    return g_rreal[i];
}

void *pi_sym_near(void *known_fn, const char *name) {
    Dl_info info;
    if (known_fn && dladdr(known_fn, &info) && info.dli_fname) {
        void *h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
        if (h) {
            void *p = pi_real_dlsym(h, name);
            dlclose(h);
            if (p) return p;
        }
    }
    return fallback_lookup(name, name[2] == 'd' ? PI_LIB_RT : PI_LIB_DRV);
}

int pi_rt_major(void) {
    static volatile int major;
    if (major) return major;
    void *p = pi_real(PI_API_cudaMalloc);
    Dl_info info;
    int m = 13;
    if (p && dladdr(p, &info) && info.dli_fname) {
        const char *s = strstr(info.dli_fname, "libcudart.so.");
        if (s) m = atoi(s + strlen("libcudart.so."));
        if (m <= 0) m = 13;
    }
    major = m;
    return m;
}

/* Map a driver pointer obtained for `symbol` to our hook of the same ABI. */
static void *translate(const char *symbol, void *pfn, int version, unsigned long long flags) {
    if (!pfn || !symbol || is_our_pointer(pfn)) return pfn;
    Dl_info info;
    const char *exact = NULL;
    if (dladdr(pfn, &info) && info.dli_saddr == pfn) exact = info.dli_sname;
    int r = res_by_name(exact ? exact : symbol);
    if (r < 0 && strcmp(symbol, "cuGetProcAddress") == 0) r = version >= 12000 ? R_GPA2 : R_GPA1;
    if (r == R_GPA1 || r == R_GPA2) {
        remember(&g_rreal[r], pfn);
        return g_rreal[r] == pfn ? g_rhook[r] : pfn;
    }
    int api = exact ? api_by_name(exact) : 0;
    if (!api) {
        int want_ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ? 1 : 0;
        int best = 0;
        for (int pass = 0; pass < 2 && !best; pass++) {
            for (int i = 1; i < PI_API_COUNT; i++) {
                const pi_hook_entry *h = &pi_hooks[i];
                if (h->lib != PI_LIB_DRV || h->ptsz != want_ptsz || strcmp(h->base, symbol) != 0) continue;
                if (h->minver > version) continue;
                if (!best || h->minver > pi_hooks[best].minver) best = i;
            }
            want_ptsz = 0; /* no per-thread variant: the plain one is what the driver gives */
        }
        api = best;
    }
    if (!api) return pfn;
    remember(&pi_real_fn[api], pfn);
    /* only hand out the hook if it forwards to this very function */
    return pi_real_fn[api] == pfn ? pi_hooks[api].hook : pfn;
}

#define EXPORT __attribute__((visibility("default")))

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags) {
    gpa_v1_fn real = (gpa_v1_fn)res_real(R_GPA1);
    if (!real) return CUDA_ERROR_NOT_FOUND;
    CUresult r = real(symbol, pfn, version, flags);
    if (r == CUDA_SUCCESS && pfn) *pfn = translate(symbol, *pfn, version, flags);
    return r;
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status) {
    gpa_v2_fn real = (gpa_v2_fn)res_real(R_GPA2);
    if (!real) return CUDA_ERROR_NOT_FOUND;
    CUresult r = real(symbol, pfn, version, flags, status);
    if (r == CUDA_SUCCESS && pfn) *pfn = translate(symbol, *pfn, version, flags);
    return r;
}

EXPORT int cudaGetDriverEntryPoint(const char *symbol, void **pfn, unsigned long long flags, void *status) {
    gdep_fn real = (gdep_fn)res_real(R_GDEP);
    if (!real) return 500;
    int r = real(symbol, pfn, flags, status);
    if (r == 0 && pfn) *pfn = translate(symbol, *pfn, pi_rt_major() * 1000, flags);
    return r;
}

EXPORT int cudaGetDriverEntryPointByVersion(const char *symbol, void **pfn, unsigned int version,
                                            unsigned long long flags, void *status) {
    gdepv_fn real = (gdepv_fn)res_real(R_GDEPV);
    if (!real) return 500;
    int r = real(symbol, pfn, version, flags, status);
    if (r == 0 && pfn) *pfn = translate(symbol, *pfn, (int)version, flags);
    return r;
}

EXPORT void *dlsym(void *handle, const char *name) {
    if (PI_UNLIKELY(!g_real_dlsym)) {
        resolve_dlsym();
        if (!g_real_dlsym) return NULL;
    }
    if (handle == RTLD_NEXT) return g_real_dlsym(handle, name); /* tail call: caller's RTLD_NEXT */
    void *p = g_real_dlsym(handle, name);
    if (!p || !((name[0] == 'c' && name[1] == 'u') || (name[0] == '_' && name[1] == '_' && name[2] == 'c'))) return p;
    if (name[0] == 'c' && name[2] == 'p' && name[3] == 't' && name[4] == 'i')
        return pi_cupti_dlsym(name, p); /* cupti_share.c */
    int api = api_by_name(name);
    if (api) {
        remember(&pi_real_fn[api], p);
        return pi_real_fn[api] == p ? pi_hooks[api].hook : p;
    }
    int r = res_by_name(name);
    if (r >= 0) {
        remember(&g_rreal[r], p);
        return g_rreal[r] == p ? g_rhook[r] : p;
    }
    return p;
}
