/*
 * scan.c — which live blocks a kernel launch touches.
 *
 * The parameter layout (offset, size of each parameter) comes from
 * cuFuncGetParamInfo / cuKernelGetParamInfo (driver) or cudaFuncGetParamInfo
 * (runtime), queried once per function and cached in a lock-free table; the
 * kernel name (cuFuncGetName / cudaFuncGetName) is interned at the same time.
 * These queries enqueue no work and are legal during stream capture.  Every
 * 8-byte-aligned word of every parameter of at least 8 bytes is looked up in
 * the live-block map; hits are deduplicated per launch.
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

#define MAX_PARAMS 512
#define LAYOUT_TAB 8192
#define LAYOUT_PROBE 64
#define STAMP_NEVER UINT64_MAX

/*
 * The layout cache.  Drivers hand the address of an unloaded kernel's
 * CUfunction / CUkernel out again for the next kernel loaded (another layout),
 * so an entry is valid only in the unload epoch it was queried in: every
 * cuModuleUnload / cuLibraryUnload / cudaLibraryUnload bumps g_unload_begun
 * before the real call and g_unload_done after it (hooks.c), whatever the
 * depth, recording or not.  A query is stamped with the epoch only if no
 * unload was in flight from before it started until after it finished; a
 * lookup accepts an entry only if its stamp equals the current g_unload_begun.
 * A handle can be reused only after the unload that freed it began, so a
 * reused handle always finds its old entry stale and queries again.
 *
 * A slot holds one pointer to an immutable layout that carries its own key,
 * so readers never see a key with another key's layout; entries are replaced
 * with a CAS and the replaced one is leaked (a reader may still hold it;
 * bounded by the number of distinct kernels seen).  The hot path is two
 * loads and two compares, no lock.
 */
typedef struct layout {
    const void *key;          /* the function */
    _Atomic uint64_t stamp;   /* unload epoch it is valid in; STAMP_NEVER = use once */
    int n;                    /* parameters; -1 = unknown layout */
    uint32_t name;            /* interned kernel name */
    uint64_t name_hash;       /* FNV-1a 64 of the name (the swap engine's launch keys) */
    uint32_t total;           /* parameter bytes */
    uint32_t off[];           /* then size[] at off + n */
} layout;

static _Atomic(layout *) g_layouts[LAYOUT_TAB];
static _Atomic uint64_t g_unload_begun, g_unload_done;

void pi_layouts_unload_begin(void) { atomic_fetch_add(&g_unload_begun, 1); }
void pi_layouts_unload_end(void) { atomic_fetch_add(&g_unload_done, 1); }

typedef CUresult (*param_info_fn)(void *f, size_t i, size_t *off, size_t *size);
typedef CUresult (*name_fn)(const char **name, void *f);

/* ask the driver/runtime (only param-info and name queries: legal during
 * stream capture); returns a malloc'd layout, or NULL */
static layout *query(void *f, int runtime) {
    param_info_fn info = NULL, kinfo = NULL;
    name_fn nm = NULL, knm = NULL;
    void *anchor = pi_real(runtime ? PI_API_cudaLaunchKernel : PI_API_cuLaunchKernel);
    if (!anchor) anchor = pi_real(runtime ? PI_API_cudaLaunchKernel_ptsz : PI_API_cuLaunchKernelEx);
    if (runtime) {
        info = (param_info_fn)pi_sym_near(anchor, "cudaFuncGetParamInfo");
        nm = (name_fn)pi_sym_near(anchor, "cudaFuncGetName");
    } else {
        info = (param_info_fn)pi_sym_near(anchor, "cuFuncGetParamInfo");
        kinfo = (param_info_fn)pi_sym_near(anchor, "cuKernelGetParamInfo");
        nm = (name_fn)pi_sym_near(anchor, "cuFuncGetName");
        knm = (name_fn)pi_sym_near(anchor, "cuKernelGetName");
    }
    size_t offs[MAX_PARAMS], sizes[MAX_PARAMS];
    int n = 0;
    param_info_fn use = info;
    if (use && use(f, 0, &offs[0], &sizes[0]) != 0) use = NULL;
    if (!use && kinfo && kinfo(f, 0, &offs[0], &sizes[0]) == 0) use = kinfo; /* a CUkernel */
    if (use) {
        for (n = 0; n < MAX_PARAMS; n++)
            if (use(f, (size_t)n, &offs[n], &sizes[n]) != 0) break;
    }
    const char *name = NULL;
    if (!(nm && nm(&name, f) == 0 && name) && knm) {
        name = NULL;
        if (knm(&name, f) != 0) name = NULL;
    }
    layout *L = malloc(sizeof(layout) + 2 * (size_t)(n > 0 ? n : 1) * sizeof(uint32_t));
    if (!L) return NULL;
    L->key = f;
    atomic_init(&L->stamp, STAMP_NEVER);
    L->n = use ? n : -1;
    L->name = pi_intern(name ? name : "<unknown kernel>");
    L->name_hash = pi_fnv1a(name ? name : "<unknown kernel>");
    L->total = 0;
    for (int i = 0; i < n; i++) {
        L->off[i] = (uint32_t)offs[i];
        L->off[n + i] = (uint32_t)sizes[i];
        if (offs[i] + sizes[i] > L->total) L->total = (uint32_t)(offs[i] + sizes[i]);
    }
    return L;
}

/* query, stamped with the unload epoch when no unload overlapped it */
static layout *query_stamped(void *f, int runtime) {
    uint64_t b0 = atomic_load(&g_unload_begun), d0 = atomic_load(&g_unload_done);
    layout *L = query(f, runtime);
    atomic_thread_fence(memory_order_seq_cst);
    uint64_t b1 = atomic_load(&g_unload_begun);
    if (L && b0 == d0 && b1 == b0) atomic_store(&L->stamp, b0);
    return L;
}

static int same_layout(const layout *a, const layout *b) {
    return a->n == b->n && a->name == b->name &&
           (a->n <= 0 || memcmp(a->off, b->off, 2 * (size_t)a->n * sizeof(uint32_t)) == 0);
}

static layout g_unknown = {NULL, STAMP_NEVER, -1, 0, 0, 0};

/* The layout of f.  *owned = 1 when the caller must free it after use (not cached). */
static layout *get_layout(void *f, int runtime, int *owned) {
    uint64_t now = atomic_load_explicit(&g_unload_begun, memory_order_acquire);
    uint64_t h = (uint64_t)(uintptr_t)f * 0x9E3779B97F4A7C15ull;
    _Atomic(layout *) *spare = NULL; /* first empty or stale slot */
    layout *spare_old = NULL;
    *owned = 0;
    for (unsigned i = 0; i < LAYOUT_PROBE; i++) {
        _Atomic(layout *) *slot = &g_layouts[((h >> 40) + i) & (LAYOUT_TAB - 1)];
        layout *L = atomic_load_explicit(slot, memory_order_acquire);
        if (!L) {
            spare = slot, spare_old = NULL; /* an empty slot first: nothing to leak */
            break;
        }
        int fresh = atomic_load_explicit(&L->stamp, memory_order_relaxed) == now;
        if (L->key == f) {
            if (fresh) return L;
            spare = slot, spare_old = L; /* stale: query again, replace it here */
            break;
        }
        if (!fresh && !spare) spare = slot, spare_old = L;
    }
    layout *N = query_stamped(f, runtime);
    if (!N) return &g_unknown;
    if (spare_old && spare_old->key == f && same_layout(spare_old, N)) {
        /* the same kernel again: renew the old entry, keep no second copy */
        uint64_t st = atomic_load(&N->stamp);
        free(N);
        if (st == STAMP_NEVER) return spare_old; /* valid now, not to be cached */
        atomic_store(&spare_old->stamp, st);
        return spare_old;
    }
    if (spare && atomic_load(&N->stamp) != STAMP_NEVER &&
        atomic_compare_exchange_strong(spare, &spare_old, N))
        return N; /* the replaced entry (if any) is leaked: a reader may hold it */
    *owned = 1;
    return N;
}

void pi_scan_add(pi_scan *sc, const pi_block *b, uint16_t flags) {
    for (int i = 0; i < sc->n; i++)
        if (sc->hit[i].base == b->base) {
            sc->fl[i] |= flags;
            return;
        }
    if (sc->n < PI_MAX_HITS) {
        sc->hit[sc->n] = *b;
        sc->fl[sc->n] = flags;
        sc->n++;
    }
}

static void scan_param(const char *p, uint32_t size, pi_scan *sc) {
    if (!p || size < 8) return;
    pi_scan_words((const uint64_t *)p, size / 8, sc);
    sc->scanned += size;
}

static void scan_layout(const layout *L, void **params, void **extra, pi_scan *sc) {
    const char *buf = NULL;
    size_t bufsize = 0;
    if (!params && extra) { /* packed: {BUFFER_POINTER, buf, BUFFER_SIZE, &size, END} */
        for (int i = 0; i < 16 && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buf = (const char *)extra[i + 1];
            else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1]) bufsize = *(size_t *)extra[i + 1];
        }
        if (!buf) return;
        if (!bufsize) { /* the driver refuses it too: never read past a buffer of unknown size */
            pi_count_unscanned();
            return;
        }
    }
    if (L->n < 0) {
        /* layout unknown: a packed buffer can still be scanned whole */
        if (buf && bufsize) {
            pi_map_rdlock();
            scan_param(buf, (uint32_t)(bufsize & ~7ull), sc);
            pi_map_unlock();
        } else {
            pi_count_unscanned();
        }
        return;
    }
    pi_map_rdlock();
    for (int i = 0; i < L->n; i++) {
        uint32_t off = L->off[i], size = L->off[L->n + i];
        if (size < 8) continue;
        if (buf) {
            if ((uint64_t)off + size <= bufsize) scan_param(buf + off, size, sc);
        } else if (params) {
            scan_param((const char *)params[i], size, sc);
        }
    }
    pi_map_unlock();
}

void pi_scan_drv(CUfunction f, void **params, void **extra, pi_scan *sc) {
    int owned;
    sc->n = 0;
    sc->scanned = 0;
    layout *L = get_layout((void *)f, 0, &owned);
    sc->kernel = (int)L->name;
    sc->kname = L->name_hash;
    if (pi_access_enabled()) scan_layout(L, params, extra, sc);
    if (owned) free(L);
}

void pi_scan_rt(const void *func, void **args, pi_scan *sc) {
    int owned;
    sc->n = 0;
    sc->scanned = 0;
    layout *L = get_layout((void *)func, 1, &owned);
    sc->kernel = (int)L->name;
    sc->kname = L->name_hash;
    if (pi_access_enabled()) scan_layout(L, args, NULL, sc);
    if (owned) free(L);
}
