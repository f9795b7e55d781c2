/*
 * hooks.c — the wrappers, generated from hooks.def.
 *
 * Every wrapper: find the real function; if this thread is already inside a
 * hooked call (a runtime call reaching the driver, a library calling itself)
 * or the process does not record, forward untouched.  Otherwise run the
 * table's `pre` action, the real call, the `post` action.  Only the outermost
 * call is recorded, under the API name the program called.
 */
#include <string.h>

#include "cupti.h"
#include "shim.h"
#include "site.h"

/* A hook's `post` action runs twice: in phase PI_BEFORE, just before the real call, where only the
 * launch / copy / memset / graph actions act (call_begin: they reserve their tickets), and in phase
 * PI_AFTER, after it, where every action records. */
enum { PI_BEFORE = 0, PI_AFTER = 1 };

typedef struct pi_ctx {
    int served;      /* apply.c served the call: the real function is not called, `r` is cx.r */
    int r;
    int quiet;       /* a free at depth > 0 or in a process that does not record: only the arena is checked */
    pi_writer w;     /* the records of a free, or of a launch / copy / memset / graph launch, held before the call */
    int have_b;      /* the freed block was found in the live map */
    pi_block b;
    uint64_t addr;   /* the address argument of a free */
    uint64_t fn, stream;
    uint64_t caller; /* return address of this (outermost) hooked call: the call site */
    int pushed;      /* its seq was pushed as CUPTI's external correlation id */
} pi_ctx;

static inline int addressable(int kind) { return kind != PI_KIND_VMM_RESERVE && kind != PI_KIND_VMM_CREATE; }

/* A failed allocation: the failure record, its call site (SITE, as for a block) and, for an
 * out-of-memory result, what the device had free (MEMINFO, see oom.c), in one reservation. */
static void rec_failed_alloc(int api, int r, uint64_t size, int kind, uint64_t stream, uint64_t aux,
                             uint64_t caller) {
    pi_site site;
    int ns = pi_site_capture(caller, &site);
    uint64_t freeb = 0, total = 0;
    int dev = -1;
    int nm = r == 2 && kind != PI_KIND_HOST && kind != PI_KIND_VMM_RESERVE && kind != PI_KIND_VMM_MAP &&
             pi_meminfo(&freeb, &total, &dev);
    pi_writer w;
    if (!pi_writer_open(&w, 1 + (uint64_t)ns + (uint64_t)nm)) return;
    if (r == 2) pi_count_oom(); /* after the reservation: a forked child has its own ring by now */
    pi_put(&w, 0, PI_OP_ALLOC, (uint16_t)api, r, 0, size, stream, aux, (uint16_t)kind);
    if (ns) pi_site_put(&w, 1, (uint16_t)api, &site);
    if (nm) {
        pi_event m = {.t_ns = w.t, .addr = freeb, .size = total, .aux = pi_writer_seq(&w, 0), .tid = pi_tid(),
                      .op = PI_OP_MEMINFO, .api = (uint16_t)api, .device = (int16_t)dev};
        pi_put_as(&w, 1 + (uint64_t)ns, &m);
    }
    pi_writer_close(&w);
}

static void rec_alloc(int api, int r, uint64_t addr, uint64_t size, int kind, uint64_t stream, uint64_t aux,
                      uint64_t caller) {
    if (r != 0) { /* a failed allocation is a failure record, never a block */
        rec_failed_alloc(api, r, size, kind, stream, aux, caller);
        return;
    }
    pi_site site; /* owner and stacks first: their definitions precede the ALLOC */
    int ns = pi_site_capture(caller, &site);
    pi_writer w;
    int ok = pi_writer_open(&w, 1 + (uint64_t)ns);
    if (addressable(kind)) pi_map_insert(addr, size, ok ? pi_writer_seq(&w, 0) : 0);
    if (!ok) return;
    pi_put(&w, 0, PI_OP_ALLOC, (uint16_t)api, 0, addr, size, stream, aux, (uint16_t)kind);
    if (ns) pi_site_put(&w, 1, (uint16_t)api, &site); /* the SITE record follows its ALLOC (seq + 1) */
    pi_writer_close(&w);
    if (kind != PI_KIND_HOST && kind != PI_KIND_VMM_RESERVE && kind != PI_KIND_IPC &&
        !(kind == PI_KIND_VMM_CREATE && size == 0))
        pi_context_device(kind == PI_KIND_ASYNC || kind == PI_KIND_POOL, stream);
}

static void free_pre(pi_ctx *c, uint64_t addr, int kind, uint64_t stream, int fam, int ptsz, int async) {
    /* a block served from the arena goes back to it, never to the real free */
    if (PI_UNLIKELY(pi_apply_has_arena()) && pi_apply_owns(addr))
        c->served = pi_apply_release(addr, stream, fam, ptsz, async, &c->r);
    if (c->quiet) return;
    /* Leave the live map and take the ticket *before* the real free, so a
     * racing allocation that reuses the address is always ordered after it. */
    c->addr = addr;
    c->have_b = addressable(kind) ? pi_map_remove(addr, &c->b) : 0;
    pi_writer_open(&c->w, 1);
}

static void free_post(pi_ctx *c, int api, int r, int kind, uint64_t stream, uint64_t aux) {
    if (c->quiet) return;
    if (r != 0 && c->have_b) pi_map_insert(c->b.base, c->b.size, c->b.seq); /* still live */
    c->w.t = pi_now(); /* a free is recorded at its return */
    pi_put(&c->w, 0, PI_OP_FREE, (uint16_t)api, r, c->addr, c->have_b ? c->b.size : 0, stream, aux, (uint16_t)kind);
    pi_writer_close(&c->w);
}

/* Launches, copies, memsets and graph launches reserve their event's tickets (the event and its accesses)
 * before the real call, so the device clock can push that seq around the call as CUPTI's external
 * correlation id (cupti.c): the one place every such call passes through.  The event is filled and
 * committed after the call (call_end); the device clock is ticked once it is committed. */
static void call_begin(pi_ctx *c, const pi_scan *sc) {
    int gpu = pi_gpu_ready(); /* may write the CLOCK event: before any ticket is held */
    int ok = pi_writer_open(&c->w, 1 + (uint64_t)sc->n);
    c->pushed = ok && gpu ? pi_gpu_push(pi_writer_seq(&c->w, 0)) : 0;
}

static void call_end(pi_ctx *c, int api, int r, uint16_t op, uint64_t addr, uint64_t size, uint64_t stream,
                     uint64_t aux, const pi_scan *sc) {
    if (c->pushed) pi_gpu_pop();
    uint64_t t = c->w.t;
    pi_put_call(&c->w, op, (uint16_t)api, r, addr, size, stream, aux, sc);
    pi_gpu_tick(t);
}

/* a copy's destination and source blocks (looked up before the call: the same blocks are live after it) */
static void copy_scan(pi_scan *sc, uint16_t op, uint64_t dst, uint64_t src) {
    sc->n = 0;
    if (!pi_access_enabled()) return;
    pi_block b;
    pi_map_rdlock();
    if (pi_map_find_locked(dst, &b)) pi_scan_add(sc, &b, PI_ACC_WRITE);
    if (op == PI_OP_COPY && pi_map_find_locked(src, &b)) pi_scan_add(sc, &b, PI_ACC_READ);
    pi_map_unlock();
}

static void rec_copy(pi_ctx *c, pi_scan *sc, int phase, int api, int r, uint16_t op, uint64_t dst, uint64_t src,
                     uint64_t n, uint64_t stream) {
    if (phase == PI_BEFORE) {
        copy_scan(sc, op, dst, src);
        call_begin(c, sc);
    } else {
        call_end(c, api, r, op, dst, n, stream, op == PI_OP_COPY ? src : 0, sc);
    }
}

static void rec_tensormap(int api, int r, uint64_t gaddr) {
    pi_scan sc;
    sc.n = 0;
    if (r == 0 && pi_access_enabled()) {
        pi_block b;
        pi_map_rdlock();
        if (pi_map_find_locked(gaddr, &b)) pi_scan_add(&sc, &b, PI_ACC_TMA);
        pi_map_unlock();
    }
    pi_emit_with_accesses(PI_OP_TENSORMAP, (uint16_t)api, r, gaddr, 0, 0, 0, &sc);
}

#define AFTER_ONLY(stmt) do { if (pi_phase == PI_AFTER) { stmt; } } while (0)
#define A_NONE ((void)0)
#define A_ALLOC(addr, size, kind, stream, aux) AFTER_ONLY( \
    rec_alloc(api, r, (uint64_t)(addr), (uint64_t)(size), kind, (uint64_t)(stream), (uint64_t)(aux), cx.caller))
#define A_FREE_PRE(addr, kind) free_pre(&cx, (uint64_t)(addr), kind, 0, (api_lib == PI_LIB_DRV), 0, 0)
#define A_FREE_PRE_ASYNC(addr, kind, s, ptsz) \
    free_pre(&cx, (uint64_t)(addr), kind, (uint64_t)(s), (api_lib == PI_LIB_DRV), ptsz, 1)
/* apply.c: serve the request from the plan's arena when it is known (then the real call is skipped) */
#define A_SERVE(pp, size, s, ptsz, async) \
    (cx.served = pi_apply_serve(api, (void *)(pp), (uint64_t)(size), (uint64_t)(s), (api_lib == PI_LIB_DRV), \
                                ptsz, async, cx.caller, &cx.r))
#define A_FREE_POST(kind, stream, aux) AFTER_ONLY(free_post(&cx, api, r, kind, (uint64_t)(stream), (uint64_t)(aux)))
#define A_LAUNCH_RT(f, argv, s) (pi_scan_rt((f), (argv), &sc), cx.fn = (uint64_t)(f), cx.stream = (uint64_t)(s))
#define A_LAUNCH_DRV(f, params, extra, s) \
    (pi_scan_drv((f), (params), (extra), &sc), cx.fn = (uint64_t)(f), cx.stream = (uint64_t)(s))
#define A_LAUNCH_POST do { if (pi_phase == PI_BEFORE) call_begin(&cx, &sc); \
    else call_end(&cx, api, r, PI_OP_LAUNCH, cx.fn, sc.scanned, cx.stream, (uint64_t)sc.kernel, &sc); \
} while (0)
#define A_COPY(d, s, n, st) \
    rec_copy(&cx, &sc, pi_phase, api, r, PI_OP_COPY, (uint64_t)(d), (uint64_t)(s), (uint64_t)(n), (uint64_t)(st))
#define A_MEMSET(d, n, st) \
    rec_copy(&cx, &sc, pi_phase, api, r, PI_OP_MEMSET, (uint64_t)(d), 0, (uint64_t)(n), (uint64_t)(st))
#define A_ADVISE(p, n, advice, loc) AFTER_ONLY( \
    pi_emit(PI_OP_ADVISE, (uint16_t)api, r, (uint64_t)(p), (uint64_t)(n), (uint64_t)(loc), (uint64_t)(advice), 0))
#define A_PREFETCH(p, n, loc, s) AFTER_ONLY( \
    pi_emit(PI_OP_PREFETCH, (uint16_t)api, r, (uint64_t)(p), (uint64_t)(n), (uint64_t)(s), (uint64_t)(loc), 0))
/* runtime 12.x: (ptr, n, int dev, stream); 13.x: (ptr, n, location, flags, stream) */
#define A_PREFETCH_RT(p, n, a3, a4, a5) A_PREFETCH(p, n, a3, pi_rt_major() >= 13 ? (a5) : (a4))
#define A_GRAPH(g, s) do { if (pi_phase == PI_BEFORE) call_begin(&cx, &sc); \
    else call_end(&cx, api, r, PI_OP_GRAPH_LAUNCH, (uint64_t)(g), 0, (uint64_t)(s), 0, &sc); } while (0)
#define A_SET_DEVICE(dev) AFTER_ONLY(if (r == 0) pi_t.device = (dev))
#define A_TENSORMAP(gaddr) AFTER_ONLY(rec_tensormap(api, r, (gaddr)))
#define A_CTX_RETAIN(c, d) AFTER_ONLY(if (r == 0 && (c)) pi_context_remember(*(c), (d)))
#define A_CTX_CURRENT(c, push) AFTER_ONLY(if (r == 0) pi_context_current((c), (push)))
#define A_CTX_POP AFTER_ONLY(if (r == 0) pi_context_pop())
#define A_OBJECT(addr, n, handle, second) AFTER_ONLY( \
    pi_emit(PI_OP_OBJECT, (uint16_t)api, r, (uint64_t)(addr), (uint64_t)(n), (uint64_t)(second), (uint64_t)(handle), 0))
#define A_UNLOAD_BEGIN pi_layouts_unload_begin()
#define A_UNLOAD_END AFTER_ONLY(pi_layouts_unload_end())
/* stream captures: no CUPTI call (cupti.c) and no cuMemGetInfo (oom.c) while one is open; begin, end and
 * instantiation are recorded (GRAPH_DEF) so that the reader can join a graph's replayed nodes to the calls captured into it */
#define A_CAPTURE_BEGIN(s) AFTER_ONLY(if (r == 0) pi_gpu_capture(1); \
    pi_emit(PI_OP_GRAPH_DEF, (uint16_t)api, r, 0, 0, (uint64_t)(s), 0, PI_GRAPH_CAPTURE_BEGIN))
#define A_CAPTURE_END(s, pg) AFTER_ONLY(pi_gpu_capture(-1); \
    pi_emit(PI_OP_GRAPH_DEF, (uint16_t)api, r, 0, 0, (uint64_t)(s), r == 0 && (pg) ? (uint64_t)*(pg) : 0, \
            PI_GRAPH_CAPTURE_END))
#define A_INSTANTIATE(pe, g) AFTER_ONLY( \
    pi_emit(PI_OP_GRAPH_DEF, (uint16_t)api, r, r == 0 && (pe) ? (uint64_t)*(pe) : 0, 0, 0, (uint64_t)(g), \
            PI_GRAPH_INSTANTIATE))
/* unloads act at every depth and in processes that do not record: the kernel
 * layout cache must see every handle the driver may hand out again */
#define ALWAYS_ACTS(id) ((id) == PI_API_cuModuleUnload || (id) == PI_API_cuLibraryUnload || \
                         (id) == PI_API_cudaLibraryUnload)
/* frees that may hand a block back to apply.c's arena at any depth, recorded or not */
#define APPLY_FREES(id) ((id) == PI_API_cudaFree || (id) == PI_API_cudaFreeAsync || (id) == PI_API_cudaFreeAsync_ptsz || \
                         (id) == PI_API_cuMemFree_v2 || (id) == PI_API_cuMemFreeAsync || \
                         (id) == PI_API_cuMemFreeAsync_ptsz)

#define HOOK(name, lib, base, minver, ptsz, params, args, pre, post)                \
    typedef int (*name##_real_t) params;                                             \
    __attribute__((visibility("default"))) int name params {                        \
        name##_real_t real_ = (name##_real_t)pi_real(PI_API_##name);                 \
        if (PI_UNLIKELY(!real_)) return 500; /* CUDA_ERROR_NOT_FOUND */             \
        int quiet_ = 0;                                                              \
        if (!ALWAYS_ACTS(PI_API_##name) && (pi_t.depth > 0 || !pi_active())) {       \
            if (!APPLY_FREES(PI_API_##name) || PI_LIKELY(!pi_apply_has_arena()))     \
                return real_ args;                                                   \
            quiet_ = 1;                                                              \
        }                                                                            \
        const int api = PI_API_##name;                                               \
        const int api_lib = PI_LIB_##lib;                                            \
        pi_ctx cx;                                                                   \
        pi_scan sc;                                                                  \
        memset(&cx, 0, sizeof cx);                                                   \
        cx.quiet = quiet_;                                                           \
        (void)api_lib;                                                               \
        cx.caller = (uint64_t)__builtin_return_address(0);                           \
        sc.n = 0;                                                                    \
        (void)sc; (void)api;                                                         \
        int r = 0;                                                                   \
        pi_t.depth++;                                                                \
        pre;                                                                         \
        { const int pi_phase = PI_BEFORE; (void)pi_phase; post; }                    \
        r = cx.served ? cx.r : real_ args;                                           \
        { const int pi_phase = PI_AFTER; (void)pi_phase; post; }                     \
        pi_t.depth--;                                                                \
        return r;                                                                    \
    }
#include "hooks.def"
#undef HOOK

const pi_hook_entry pi_hooks[PI_API_COUNT] = {
    {0, 0, 0, 0, 0, 0},
#define HOOK(name, lib, base, minver, ptsz, params, args, pre, post) \
    {#name, #base, PI_LIB_##lib, minver, ptsz, (void *)name},
#include "hooks.def"
#undef HOOK
};
