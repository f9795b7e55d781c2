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

typedef struct layout {
    int n;          /* parameters; -1 = unknown layout */
    uint32_t name;  /* interned kernel name */
    uint32_t total; /* parameter bytes */
    uint32_t off[]; /* then size[] at off + n */
} layout;

typedef struct lslot {
    _Atomic(uintptr_t) key;
    _Atomic(layout *) val;
} lslot;

static lslot g_layouts[LAYOUT_TAB];
static layout g_unknown = {-1, 0, 0};

typedef CUresult (*param_info_fn)(void *f, size_t i, size_t *off, size_t *size);
typedef CUresult (*name_fn)(const char **name, void *f);

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
    if (!L) return &g_unknown;
    L->n = use ? n : -1;
    L->name = pi_intern(name ? name : "<unknown kernel>");
    L->total = 0;
    for (int i = 0; i < n; i++) {
        L->off[i] = (uint32_t)offs[i];
        L->off[n + i] = (uint32_t)sizes[i];
        if (offs[i] + sizes[i] > L->total) L->total = (uint32_t)(offs[i] + sizes[i]);
    }
    return L;
}

static layout *get_layout(void *f, int runtime) {
    uintptr_t key = (uintptr_t)f | 1; /* never 0 */
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
    for (unsigned i = 0; i < 64; i++) {
        lslot *s = &g_layouts[((h >> 40) + i) & (LAYOUT_TAB - 1)];
        uintptr_t k = atomic_load_explicit(&s->key, memory_order_acquire);
        if (k == key) {
            layout *L;
            while (!(L = atomic_load_explicit(&s->val, memory_order_acquire))) sched_yield();
            return L;
        }
        if (k == 0) {
            uintptr_t zero = 0;
            if (atomic_compare_exchange_strong(&s->key, &zero, key)) {
                layout *L = query(f, runtime);
                atomic_store_explicit(&s->val, L, memory_order_release);
                return L;
            }
            if (zero == key) {
                layout *L;
                while (!(L = atomic_load_explicit(&s->val, memory_order_acquire))) sched_yield();
                return L;
            }
        }
    }
    return query(f, runtime); /* table crowded: query uncached (leaks a little; rare) */
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

void pi_scan_words(const uint64_t *words, size_t nwords, pi_scan *sc) {
    pi_block b;
    for (size_t i = 0; i < nwords; i++) {
        uint64_t w;
        memcpy(&w, &words[i], 8);
        if (pi_map_find_locked(w, &b)) pi_scan_add(sc, &b, PI_ACC_LAUNCH);
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
            if (off + size <= bufsize || !bufsize) scan_param(buf + off, size, sc);
        } else if (params) {
            scan_param((const char *)params[i], size, sc);
        }
    }
    pi_map_unlock();
}

void pi_scan_drv(CUfunction f, void **params, void **extra, pi_scan *sc) {
    sc->n = 0;
    sc->scanned = 0;
    layout *L = get_layout((void *)f, 0);
    sc->kernel = (int)L->name;
    if (pi_access_enabled()) scan_layout(L, params, extra, sc);
}

void pi_scan_rt(const void *func, void **args, pi_scan *sc) {
    sc->n = 0;
    sc->scanned = 0;
    layout *L = get_layout((void *)func, 1);
    sc->kernel = (int)L->name;
    if (pi_access_enabled()) scan_layout(L, args, NULL, sc);
}
