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
    uint32_t slots;  /* a graph launch: the node slots held after its event (graphs.c) */
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

/* returns the ALLOC's seq (0: nothing recorded) */
static uint64_t rec_alloc(int api, int r, uint64_t addr, uint64_t size, int kind, uint64_t stream, uint64_t aux,
                          uint64_t caller) {
    if (r != 0) { /* a failed allocation is a failure record, never a block */
        rec_failed_alloc(api, r, size, kind, stream, aux, caller);
        return 0;
    }
    pi_site site; /* owner and stacks first: their definitions precede the ALLOC */
    int ns = pi_site_capture(caller, &site);
    pi_writer w; /* staged: a kill anywhere in here leaves the ALLOC recorded or no ticket taken */
    uint64_t seq = 0;
    if (pi_writer_stage(&w, 1 + (uint64_t)ns)) {
        pi_put(&w, 0, PI_OP_ALLOC, (uint16_t)api, 0, addr, size, stream, aux, (uint16_t)kind);
        if (ns) pi_site_put(&w, 1, (uint16_t)api, &site); /* the SITE record follows its ALLOC (seq + 1) */
        pi_writer_close(&w);
        seq = pi_writer_seq(&w, 0); /* 0: nothing recorded */
    }
    if (addressable(kind)) pi_map_insert(addr, size, seq);
    if (!seq) return 0;
    if (kind == PI_KIND_ASYNC || kind == PI_KIND_POOL) pi_graph_captured(stream, 1); /* a memory node */
    if (kind != PI_KIND_HOST && kind != PI_KIND_VMM_RESERVE && kind != PI_KIND_IPC &&
        !(kind == PI_KIND_VMM_CREATE && size == 0))
        pi_context_device(kind == PI_KIND_ASYNC || kind == PI_KIND_POOL, stream);
    return seq;
}

static void free_pre(pi_ctx *c, int api, uint64_t addr, int kind, uint64_t stream, int fam, int ptsz, int async) {
    /* a block served from the arena goes back to it, never to the real free */
    if (PI_UNLIKELY(pi_apply_has_arena()) && pi_apply_owns(addr))
        c->served = pi_apply_release(addr, stream, fam, ptsz, async, &c->r);
    if (c->quiet) return;
    /* Leave the live map and take the ticket *before* the real free, so a
     * racing allocation that reuses the address is always ordered after it. */
    c->addr = addr;
    c->have_b = addressable(kind) ? pi_map_remove(addr, &c->b) : 0;
    /* held across the real free: a kill inside it leaves it recorded */
    pi_writer_open_held(&c->w, 1, PI_OP_FREE, (uint16_t)api, addr, c->have_b ? c->b.size : 0, stream, 0,
                        (uint16_t)kind);
}

static void free_post(pi_ctx *c, int api, int r, int kind, uint64_t stream, uint64_t aux) {
    if (c->quiet) return;
    c->fn = c->w.ok ? pi_writer_seq(&c->w, 0) : 0; /* the FREE's seq (a graph's memory free node names it) */
    if (r != 0 && c->have_b) pi_map_insert(c->b.base, c->b.size, c->b.seq); /* still live */
    c->w.t = pi_now(); /* a free is recorded at its return */
    pi_put(&c->w, 0, PI_OP_FREE, (uint16_t)api, r, c->addr, c->have_b ? c->b.size : 0, stream, aux, (uint16_t)kind);
    pi_writer_close(&c->w);
    if (r == 0 && kind == PI_KIND_ASYNC) pi_graph_captured(stream, 1); /* a free node when capturing */
}

/* Launches, copies, memsets and graph launches reserve their event's tickets (the event and its accesses)
 * before the real call, so the device clock can push that seq around the call as CUPTI's external
 * correlation id (cupti.c): the one place every such call passes through.  The event is filled and
 * committed after the call (call_end); the device clock is ticked once it is committed. */
static void call_begin(pi_ctx *c, const pi_scan *sc, int api, uint16_t op, uint64_t addr, uint64_t size,
                       uint64_t stream, uint64_t aux) {
    if (!pi_window_recording()) return; /* window.c: outside a capture window, the allocation stream only */
    int gpu = pi_gpu_ready(); /* may write the CLOCK event: before any ticket is held */
    int ok = pi_writer_open_held(&c->w, 1 + (uint64_t)sc->n, op, (uint16_t)api, addr, size, stream, aux,
                                 0); /* a kill inside the call */
    c->pushed = ok && gpu ? pi_gpu_push(pi_writer_seq(&c->w, 0)) : 0;
}

static void call_end(pi_ctx *c, int api, int r, uint16_t op, uint64_t addr, uint64_t size, uint64_t stream,
                     uint64_t aux, const pi_scan *sc) {
    if (c->w.t == 0) { /* call_begin wrote nothing (outside a capture window): still a node of a capture */
        if (r == 0) pi_graph_captured(stream, 1);
        return;
    }
    if (c->pushed) pi_gpu_pop();
    uint64_t t = c->w.t;
    pi_put_call(&c->w, op, (uint16_t)api, r, addr, size, stream, aux, sc);
    if (r == 0) pi_graph_captured(stream, 1); /* a node of the graph being captured on the stream */
    pi_gpu_tick(t);
}

/* A graph launch holds its event, then one NODE_SLOT record per node of its graph (graphs.c): node k of
 * this replay has the seq of the launch + 1 + k.  Launched into a capture, it is a child graph: its nodes
 * count for the graph being captured.  After a launch outside any capture, the device's graph memory
 * (GRAPH_MEM). */
static void graph_begin(pi_ctx *c, int api, uint64_t exec, uint64_t stream) {
    int gpu = pi_gpu_ready(); /* may write the CLOCK event: before any ticket is held */
    c->slots = pi_graph_exec_nodes(exec);
    /* a kill inside the call leaves the launch recorded as interrupted (issue 33.7) */
    int ok = pi_writer_open_held(&c->w, 1 + (uint64_t)c->slots, PI_OP_GRAPH_LAUNCH, (uint16_t)api, exec, c->slots,
                                 stream, 0, 0);
    c->pushed = ok && gpu ? pi_gpu_push(pi_writer_seq(&c->w, 0)) : 0;
}

static void graph_end(pi_ctx *c, int api, int r, uint64_t exec, uint64_t stream) {
    if (c->pushed) pi_gpu_pop();
    uint64_t t = c->w.t, seq = pi_writer_seq(&c->w, 0);
    int ok = c->w.ok;
    for (uint32_t k = 0; k < c->slots; k++)
        pi_put(&c->w, 1 + k, PI_OP_GRAPH_DEF, (uint16_t)api, r, exec, c->slots, stream, k, PI_GRAPH_NODE_SLOT);
    pi_put(&c->w, 0, PI_OP_GRAPH_LAUNCH, (uint16_t)api, r, exec, c->slots, stream, 0, 0);
    pi_writer_close(&c->w);
    if (r == 0) pi_graph_captured(stream, c->slots);
    if (r == 0 && ok && !pi_gpu_capturing()) pi_graph_mem_record(api, seq);
    pi_gpu_tick(t);
}

/* the swap engine, when a plan has swaps (no CUDA call of ours while a stream capture is open) */
static inline void swap_launch(const pi_scan *sc, uint64_t stream, int after) {
    if (PI_UNLIKELY(pi_swap_active()) && !pi_gpu_capturing()) pi_swap_launch(sc, stream, after);
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
        call_begin(c, sc, api, op, dst, n, stream, op == PI_OP_COPY ? src : 0);
    } else {
        call_end(c, api, r, op, dst, n, stream, op == PI_OP_COPY ? src : 0, sc);
    }
}

static void rec_tensormap(int api, int r, uint64_t gaddr) {
    if (!pi_window_recording()) return;
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
#define A_FREE_PRE(addr, kind) free_pre(&cx, api, (uint64_t)(addr), kind, 0, (api_lib == PI_LIB_DRV), 0, 0)
#define A_FREE_PRE_ASYNC(addr, kind, s, ptsz) \
    free_pre(&cx, api, (uint64_t)(addr), kind, (uint64_t)(s), (api_lib == PI_LIB_DRV), ptsz, 1)
/* apply.c: serve the request from the plan's arena when it is known (then the real call is skipped) */
#define A_SERVE(pp, size, s, ptsz, async) \
    (cx.served = pi_apply_serve(api, (void *)(pp), (uint64_t)(size), (uint64_t)(s), (api_lib == PI_LIB_DRV), \
                                ptsz, async, cx.caller, &cx.r))
#define A_FREE_POST(kind, stream, aux) AFTER_ONLY(free_post(&cx, api, r, kind, (uint64_t)(stream), (uint64_t)(aux)))
#define A_LAUNCH_RT(f, argv, s) (pi_scan_rt((f), (argv), &sc), cx.fn = (uint64_t)(f), cx.stream = (uint64_t)(s))
#define A_LAUNCH_DRV(f, params, extra, s) \
    (pi_scan_drv((f), (params), (extra), &sc), cx.fn = (uint64_t)(f), cx.stream = (uint64_t)(s))
/* swap.c acts before (stream waits for swap-ins) and after (swap-outs, swap-ins sent) every launch */
#define A_LAUNCH_POST do { if (pi_phase == PI_BEFORE) { swap_launch(&sc, cx.stream, 0); \
        call_begin(&cx, &sc, api, PI_OP_LAUNCH, cx.fn, sc.scanned, cx.stream, (uint64_t)sc.kernel); } \
    else { call_end(&cx, api, r, PI_OP_LAUNCH, cx.fn, sc.scanned, cx.stream, (uint64_t)sc.kernel, &sc); \
           if (r == 0) swap_launch(&sc, cx.stream, 1); } \
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
#define A_GRAPH(g, s) do { if (pi_phase == PI_BEFORE) graph_begin(&cx, api, (uint64_t)(g), (uint64_t)(s)); \
    else graph_end(&cx, api, r, (uint64_t)(g), (uint64_t)(s)); } while (0)
#define A_SET_DEVICE(dev) AFTER_ONLY(if (r == 0) pi_t.device = (dev))
#define A_TENSORMAP(gaddr) AFTER_ONLY(rec_tensormap(api, r, (gaddr)))
#define A_CTX_RETAIN(c, d) AFTER_ONLY(if (r == 0 && (c)) pi_context_remember(*(c), (d)))
#define A_CTX_CURRENT(c, push) AFTER_ONLY(if (r == 0) pi_context_current((c), (push)))
#define A_CTX_POP AFTER_ONLY(if (r == 0) pi_context_pop())
#define A_OBJECT(addr, n, handle, second) AFTER_ONLY( \
    pi_emit(PI_OP_OBJECT, (uint16_t)api, r, (uint64_t)(addr), (uint64_t)(n), (uint64_t)(second), (uint64_t)(handle), 0))
/* window.c: a capture window's edge (PI_OP_WINDOW) */
#define A_WINDOW(edge) AFTER_ONLY(pi_window_edge(api, r, (edge), PI_WINDOW_PROFILER))
#define A_UNLOAD_BEGIN pi_layouts_unload_begin()
#define A_UNLOAD_END AFTER_ONLY(pi_layouts_unload_end())
/* stream captures: no CUPTI call (cupti.c) and no cuMemGetInfo (oom.c) while one is open; begin, end and
 * instantiation are recorded (GRAPH_DEF) so that the reader can join a graph's replayed nodes to the calls captured into it */
#define A_CAPTURE_BEGIN(s) AFTER_ONLY(if (r == 0) { pi_gpu_capture(1); pi_graph_capture_begin((uint64_t)(s)); } \
    pi_emit(PI_OP_GRAPH_DEF, (uint16_t)api, r, 0, 0, (uint64_t)(s), 0, PI_GRAPH_CAPTURE_BEGIN))
#define A_CAPTURE_END(s, pg) AFTER_ONLY(pi_gpu_capture(-1); \
    pi_graph_capture_end((uint64_t)(s), r == 0 && (pg) ? (uint64_t)*(pg) : 0); \
    pi_emit(PI_OP_GRAPH_DEF, (uint16_t)api, r, 0, 0, (uint64_t)(s), r == 0 && (pg) ? (uint64_t)*(pg) : 0, \
            PI_GRAPH_CAPTURE_END))
#define A_INSTANTIATE(pe, g) AFTER_ONLY( \
    if (r == 0 && (pe)) pi_graph_instantiated((uint64_t)*(pe), (uint64_t)(g)); \
    pi_emit(PI_OP_GRAPH_DEF, (uint16_t)api, r, r == 0 && (pe) ? (uint64_t)*(pe) : 0, 0, 0, (uint64_t)(g), \
            PI_GRAPH_INSTANTIATE))
/* ---- CUDA graphs built node by node (cuGraphAdd*Node), executable graphs updated ----
 * A node is recorded as the call it stands for would be (a LAUNCH with the ACCESS records of its scanned
 * arguments, a COPY / MEMSET with theirs, an ALLOC / FREE of a memory node), under the API that added it,
 * followed by a GRAPH_DEF record naming the graph: NODE_ADD (addr: the node handle, aux: the graph, size:
 * the seq of the node's record, stream: the number of dependencies), CHILD (addr: the node handle, aux:
 * the graph, stream: the child graph), EXEC_SET (addr: the executable graph, aux: the node handle, size:
 * the seq of the LAUNCH / COPY / MEMSET holding the new parameters), EXEC_CHILD (addr: the executable graph,
 * aux: the child graph node's handle, stream: the graph it now runs), EXEC_UPDATE (addr: the executable graph,
 * aux: the graph), CREATE (aux: the graph).  graphs.c counts the nodes for the replays' slots.  No extra CUDA call. */
static void rec_node_call(int api, int r, uint16_t op, uint64_t addr, uint64_t size, uint64_t aux,
                          const pi_scan *sc, uint16_t def, uint64_t d_addr, uint64_t d_aux, uint64_t d_stream) {
    pi_writer w;
    uint64_t n = (uint64_t)sc->n;
    if (!pi_writer_open(&w, 2 + n)) return;
    pi_put(&w, 1 + n, PI_OP_GRAPH_DEF, (uint16_t)api, r, d_addr, pi_writer_seq(&w, 0), d_stream, d_aux, def);
    pi_put_call(&w, op, (uint16_t)api, r, addr, size, 0, aux, sc);
}

static void rec_kernel_node(int api, int r, CUgraphNode *ph, CUgraph g, size_t nd, uint64_t fn, pi_scan *sc) {
    rec_node_call(api, r, PI_OP_LAUNCH, fn, sc->scanned, (uint64_t)sc->kernel, sc, PI_GRAPH_NODE_ADD,
                  r == 0 && ph ? (uint64_t)*ph : 0, (uint64_t)g, (uint64_t)nd);
    if (r == 0) pi_graph_added((uint64_t)g, 1);
}

static void rec_copy_node(int api, int r, CUgraphNode *ph, CUgraph g, size_t nd, uint16_t op, uint64_t dst,
                          uint64_t src, uint64_t n) {
    pi_scan sc;
    copy_scan(&sc, op, dst, src);
    rec_node_call(api, r, op, dst, n, op == PI_OP_COPY ? src : 0, &sc, PI_GRAPH_NODE_ADD,
                  r == 0 && ph ? (uint64_t)*ph : 0, (uint64_t)g, (uint64_t)nd);
    if (r == 0) pi_graph_added((uint64_t)g, 1);
}

static void rec_node_def(int api, int r, uint16_t def, uint64_t addr, uint64_t size, uint64_t stream, uint64_t aux) {
    pi_emit(PI_OP_GRAPH_DEF, (uint16_t)api, r, addr, size, stream, aux, def);
}

/* the memory of a CUDA_MEMCPY3D: host or device / unified address of one side */
static uint64_t m3d_src(const CUDA_MEMCPY3D *p) {
    return (p->srcMemoryType == CU_MEMORYTYPE_HOST ? (uint64_t)(uintptr_t)p->srcHost : p->srcDevice) + p->srcXInBytes;
}
static uint64_t m3d_dst(const CUDA_MEMCPY3D *p) {
    return (p->dstMemoryType == CU_MEMORYTYPE_HOST ? (uint64_t)(uintptr_t)p->dstHost : p->dstDevice) + p->dstXInBytes;
}

#define A_GRAPH_CREATE(pg) AFTER_ONLY(if (r == 0 && (pg)) { \
    pi_graph_created((uint64_t)*(pg)); rec_node_def(api, r, PI_GRAPH_CREATE, 0, 0, 0, (uint64_t)*(pg)); })
#define A_NODE_KERNEL_DRV(ph, g, nd, p) AFTER_ONLY(if (p) { pi_scan_drv((p)->func, (p)->kernelParams, (p)->extra, &sc); \
    rec_kernel_node(api, r, ph, g, nd, (uint64_t)(p)->func, &sc); })
#define A_NODE_KERNEL_RT(ph, g, nd, p) AFTER_ONLY(if (p) { pi_scan_rt((p)->func, (p)->kernelParams, &sc); \
    rec_kernel_node(api, r, ph, g, nd, (uint64_t)(p)->func, &sc); })
#define A_NODE_MEMSET(ph, g, nd, dst, n) AFTER_ONLY(rec_copy_node(api, r, ph, g, nd, PI_OP_MEMSET, (uint64_t)(dst), 0, \
    (uint64_t)(n)))
#define A_NODE_MEMCPY(ph, g, nd, dst, src, n) AFTER_ONLY(rec_copy_node(api, r, ph, g, nd, PI_OP_COPY, (uint64_t)(dst), \
    (uint64_t)(src), (uint64_t)(n)))
#define A_NODE_CHILD(ph, g, child) AFTER_ONLY(if (r == 0) pi_graph_added((uint64_t)(g), \
    pi_graph_nodes((uint64_t)(child))); \
    rec_node_def(api, r, PI_GRAPH_CHILD, r == 0 && (ph) ? (uint64_t)*(ph) : 0, 0, (uint64_t)(child), (uint64_t)(g)))
#define A_NODE_MEMALLOC(ph, g, nd, p) AFTER_ONLY(if (p) { \
    uint64_t s_ = rec_alloc(api, r, r == 0 ? (uint64_t)(p)->dptr : 0, (uint64_t)(p)->bytesize, PI_KIND_ASYNC, 0, 0, \
                            cx.caller); \
    if (r == 0) { pi_graph_added((uint64_t)(g), 1); \
        rec_node_def(api, r, PI_GRAPH_NODE_ADD, (ph) ? (uint64_t)*(ph) : 0, s_, (uint64_t)(nd), (uint64_t)(g)); } })
/* a memory free node: the address stays in the live map (kernel nodes added later, and new arguments given
 * to an executable graph, may still name it: it is the graph's, valid in every replay) */
static void free_node_pre(pi_ctx *c, uint64_t addr) {
    if (c->quiet) return;
    c->addr = addr;
    pi_map_rdlock();
    c->have_b = pi_map_find_locked(addr, &c->b);
    pi_map_unlock();
    pi_writer_open(&c->w, 1);
}
#define A_FREE_NODE_PRE(addr) free_node_pre(&cx, (uint64_t)(addr))
#define A_NODE_MEMFREE(ph, g, nd) AFTER_ONLY(if (r != 0) cx.have_b = 0; free_post(&cx, api, r, PI_KIND_ASYNC, 0, 0); \
    if (r == 0) { pi_graph_added((uint64_t)(g), 1); \
        rec_node_def(api, r, PI_GRAPH_NODE_ADD, (ph) ? (uint64_t)*(ph) : 0, cx.fn, (uint64_t)(nd), (uint64_t)(g)); })
#define A_EXEC_SET_DRV(e, node, p) AFTER_ONLY(if (p) { pi_scan_drv((p)->func, (p)->kernelParams, (p)->extra, &sc); \
    rec_node_call(api, r, PI_OP_LAUNCH, (uint64_t)(p)->func, sc.scanned, (uint64_t)sc.kernel, &sc, \
                  PI_GRAPH_EXEC_SET, (uint64_t)(e), (uint64_t)(node), 0); })
#define A_EXEC_SET_RT(e, node, p) AFTER_ONLY(if (p) { pi_scan_rt((p)->func, (p)->kernelParams, &sc); \
    rec_node_call(api, r, PI_OP_LAUNCH, (uint64_t)(p)->func, sc.scanned, (uint64_t)sc.kernel, &sc, \
                  PI_GRAPH_EXEC_SET, (uint64_t)(e), (uint64_t)(node), 0); })
/* a memcpy / memset node of an executable graph given new parameters (cuGraphExecMemcpyNodeSetParams,
 * cuGraphExecMemsetNodeSetParams, the generic exec set): the COPY / MEMSET the node now stands for (its accesses
 * scanned as rec_copy_node's), then EXEC_SET naming it */
static void rec_exec_copy(int api, int r, uint64_t e, uint64_t node, uint16_t op, uint64_t dst, uint64_t src,
                          uint64_t n) {
    pi_scan sc;
    copy_scan(&sc, op, dst, src);
    rec_node_call(api, r, op, dst, n, op == PI_OP_COPY ? src : 0, &sc, PI_GRAPH_EXEC_SET, e, node, 0);
}
#define A_EXEC_MEMCPY(e, node, dst, src, n) AFTER_ONLY(rec_exec_copy(api, r, (uint64_t)(e), (uint64_t)(node), \
    PI_OP_COPY, (uint64_t)(dst), (uint64_t)(src), (uint64_t)(n)))
#define A_EXEC_MEMSET(e, node, dst, n) AFTER_ONLY(rec_exec_copy(api, r, (uint64_t)(e), (uint64_t)(node), \
    PI_OP_MEMSET, (uint64_t)(dst), 0, (uint64_t)(n)))
/* a child graph node of an executable graph now runs another graph (same topology: the slots do not change) */
#define A_EXEC_CHILD(e, node, child) AFTER_ONLY( \
    rec_node_def(api, r, PI_GRAPH_EXEC_CHILD, (uint64_t)(e), 0, (uint64_t)(child), (uint64_t)(node)))
#define A_EXEC_UPDATE(e, g) AFTER_ONLY(if (r == 0) pi_graph_instantiated((uint64_t)(e), (uint64_t)(g)); \
    rec_node_def(api, r, PI_GRAPH_EXEC_UPDATE, (uint64_t)(e), 0, 0, (uint64_t)(g)))

/* ---- the generic node API (cuGraphAddNode[_v2], cudaGraphAddNode[_v2]; CUDA 12.2+) ----
 * One parameter block, the node type first (pi_cuda.h: CUgraphNodeParams, or the runtime's cudaGraphNodeParams:
 * same types, same offsets of the child graph, alloc and free members).  A kernel, memcpy, memset, child graph,
 * memory alloc or free node is recorded exactly as its typed cuGraphAdd*Node (above); any other type (empty,
 * host, event, external semaphore, batch memory op, conditional) records nothing and is no node of the replays,
 * as a captured call the shim does not hook is none (graphs.c counts recorded nodes only).  A conditional
 * node's body graph is not followed. */
static uint64_t m3d_bytes(const CUDA_MEMCPY3D *m) {
    return (uint64_t)m->WidthInBytes * (m->Height ? m->Height : 1) * (m->Depth ? m->Depth : 1);
}

static int node_type(const CUgraphNodeParams *p, const cudaGraphNodeParams *q) {
    return p ? (int)p->type : q ? q->type : -1;
}

/* before the real call: a memory free node looks its block up (free_node_pre) */
static void node_params_pre(pi_ctx *c, const CUgraphNodeParams *p, const cudaGraphNodeParams *q) {
    if (node_type(p, q) == CU_GRAPH_NODE_TYPE_MEM_FREE)
        free_node_pre(c, p ? (uint64_t)p->free.dptr : (uint64_t)(uintptr_t)q->free.dptr);
}

/* after it: p (driver) or q (runtime) */
static void rec_node_params(pi_ctx *c, pi_scan *sc, int api, int r, CUgraphNode *ph, CUgraph g, size_t nd,
                            const CUgraphNodeParams *p, const cudaGraphNodeParams *q) {
    uint64_t node = r == 0 && ph ? (uint64_t)*ph : 0;
    switch (node_type(p, q)) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
        if (p) {
            const CUDA_KERNEL_NODE_PARAMS_v3 *k = &p->kernel;
            CUfunction f = k->func ? k->func : (CUfunction)(void *)k->kern; /* a CUkernel when func is NULL */
            pi_scan_drv(f, k->kernelParams, k->extra, sc);
            rec_kernel_node(api, r, ph, g, nd, (uint64_t)(uintptr_t)f, sc);
        } else {
            pi_scan_rt(q->kernel.func, q->kernel.kernelParams, sc);
            rec_kernel_node(api, r, ph, g, nd, (uint64_t)(uintptr_t)q->kernel.func, sc);
        }
        break;
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        if (p) {
            const CUDA_MEMCPY3D *m = &p->memcpy.copyParams;
            rec_copy_node(api, r, ph, g, nd, PI_OP_COPY, m3d_dst(m), m3d_src(m), m3d_bytes(m));
        } else {
            const cudaMemcpy3DParms *m = &q->memcpy.copyParams;
            const cudaExtent *x = &m->extent;
            rec_copy_node(api, r, ph, g, nd, PI_OP_COPY, (uint64_t)(uintptr_t)m->dstPtr.ptr + m->dstPos.x,
                          (uint64_t)(uintptr_t)m->srcPtr.ptr + m->srcPos.x,
                          (uint64_t)x->width * (x->height ? x->height : 1) * (x->depth ? x->depth : 1));
        }
        break;
    case CU_GRAPH_NODE_TYPE_MEMSET:
        if (p)
            rec_copy_node(api, r, ph, g, nd, PI_OP_MEMSET, p->memset.dst, 0,
                          (uint64_t)p->memset.width * p->memset.elementSize);
        else
            rec_copy_node(api, r, ph, g, nd, PI_OP_MEMSET, (uint64_t)(uintptr_t)q->memset.dst, 0,
                          (uint64_t)q->memset.width * q->memset.elementSize);
        break;
    case CU_GRAPH_NODE_TYPE_GRAPH: {
        uint64_t child = p ? (uint64_t)(uintptr_t)p->graph.graph : (uint64_t)(uintptr_t)q->graph.graph;
        if (r == 0) pi_graph_added((uint64_t)(uintptr_t)g, pi_graph_nodes(child));
        rec_node_def(api, r, PI_GRAPH_CHILD, node, 0, child, (uint64_t)(uintptr_t)g);
        break;
    }
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
        uint64_t bytes = p ? (uint64_t)p->alloc.bytesize : (uint64_t)q->alloc.bytesize;
        uint64_t dptr = p ? (uint64_t)p->alloc.dptr : (uint64_t)q->alloc.dptr; /* filled by the call */
        uint64_t s = rec_alloc(api, r, r == 0 ? dptr : 0, bytes, PI_KIND_ASYNC, 0, 0, c->caller);
        if (r == 0) {
            pi_graph_added((uint64_t)(uintptr_t)g, 1);
            rec_node_def(api, r, PI_GRAPH_NODE_ADD, node, s, (uint64_t)nd, (uint64_t)(uintptr_t)g);
        }
        break;
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
        if (r != 0) c->have_b = 0;
        free_post(c, api, r, PI_KIND_ASYNC, 0, 0);
        if (r == 0) {
            pi_graph_added((uint64_t)(uintptr_t)g, 1);
            rec_node_def(api, r, PI_GRAPH_NODE_ADD, node, c->fn, (uint64_t)nd, (uint64_t)(uintptr_t)g);
        }
        break;
    default:
        break;
    }
}
#define A_NODE_PARAMS_PRE(p) node_params_pre(&cx, (p), NULL)
#define A_NODE_PARAMS(ph, g, nd, p) AFTER_ONLY(rec_node_params(&cx, &sc, api, r, (ph), (g), (nd), (p), NULL))
#define A_NODE_PARAMS_RT_PRE(q) node_params_pre(&cx, NULL, (q))
#define A_NODE_PARAMS_RT(ph, g, nd, q) AFTER_ONLY(rec_node_params(&cx, &sc, api, r, (ph), (g), (nd), NULL, (q)))
/* cudaGraphAddNode: 12.3-12.9 (ph, g, deps, n, p); 13.x (ph, g, deps, edgeData, n, p) */
#define RT_ADD_N(a4, a5) (size_t)(pi_rt_major() >= 13 ? (a5) : (a4))
#define RT_ADD_P(a5, a6) ((cudaGraphNodeParams *)(uintptr_t)(pi_rt_major() >= 13 ? (a6) : (a5)))
/* cuGraphExecNodeSetParams / cudaGraphExecNodeSetParams: a kernel, memcpy, memset or child graph node's new
 * parameters, as the typed exec set; other node types record nothing */
static void rec_exec_params(pi_scan *sc, int api, int r, uint64_t e, uint64_t node, const CUgraphNodeParams *p,
                            const cudaGraphNodeParams *q) {
    switch (node_type(p, q)) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
        if (p) {
            const CUDA_KERNEL_NODE_PARAMS_v3 *k = &p->kernel;
            CUfunction f = k->func ? k->func : (CUfunction)(void *)k->kern;
            pi_scan_drv(f, k->kernelParams, k->extra, sc);
            rec_node_call(api, r, PI_OP_LAUNCH, (uint64_t)(uintptr_t)f, sc->scanned, (uint64_t)sc->kernel, sc,
                          PI_GRAPH_EXEC_SET, e, node, 0);
        } else {
            pi_scan_rt(q->kernel.func, q->kernel.kernelParams, sc);
            rec_node_call(api, r, PI_OP_LAUNCH, (uint64_t)(uintptr_t)q->kernel.func, sc->scanned,
                          (uint64_t)sc->kernel, sc, PI_GRAPH_EXEC_SET, e, node, 0);
        }
        break;
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        if (p) {
            const CUDA_MEMCPY3D *m = &p->memcpy.copyParams;
            rec_exec_copy(api, r, e, node, PI_OP_COPY, m3d_dst(m), m3d_src(m), m3d_bytes(m));
        } else {
            const cudaMemcpy3DParms *m = &q->memcpy.copyParams;
            const cudaExtent *x = &m->extent;
            rec_exec_copy(api, r, e, node, PI_OP_COPY, (uint64_t)(uintptr_t)m->dstPtr.ptr + m->dstPos.x,
                          (uint64_t)(uintptr_t)m->srcPtr.ptr + m->srcPos.x,
                          (uint64_t)x->width * (x->height ? x->height : 1) * (x->depth ? x->depth : 1));
        }
        break;
    case CU_GRAPH_NODE_TYPE_MEMSET:
        if (p)
            rec_exec_copy(api, r, e, node, PI_OP_MEMSET, p->memset.dst, 0,
                          (uint64_t)p->memset.width * p->memset.elementSize);
        else
            rec_exec_copy(api, r, e, node, PI_OP_MEMSET, (uint64_t)(uintptr_t)q->memset.dst, 0,
                          (uint64_t)q->memset.width * q->memset.elementSize);
        break;
    case CU_GRAPH_NODE_TYPE_GRAPH:
        rec_node_def(api, r, PI_GRAPH_EXEC_CHILD, e, 0,
                     p ? (uint64_t)(uintptr_t)p->graph.graph : (uint64_t)(uintptr_t)q->graph.graph, node);
        break;
    default:
        break;
    }
}
#define A_EXEC_SET_PARAMS(e, node, p) AFTER_ONLY(if (p) \
    rec_exec_params(&sc, api, r, (uint64_t)(e), (uint64_t)(node), (p), NULL))
#define A_EXEC_SET_PARAMS_RT(e, node, q) AFTER_ONLY(if (q) \
    rec_exec_params(&sc, api, r, (uint64_t)(e), (uint64_t)(node), NULL, (q)))

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
