/*
 * graphs.c — how many nodes each CUDA graph holds, so that every replay reserves one ticket per node.
 *
 * A replay (cudaGraphLaunch / cuGraphLaunch) runs its graph's nodes in node order; the reader expands
 * it into their accesses and memory blocks (pyinterpose/trace/graphs.py).  To give each node a place of
 * its own in the process's event order, the GRAPH_LAUNCH event reserves 1 + N tickets: the launch, then
 * N GRAPH_DEF NODE_SLOT records (node k's seq is the launch's + 1 + k).  N is known here without any
 * CUDA call: the shim counts the calls recorded on a capturing stream between its BeginCapture and
 * EndCapture (launches, copies, memsets, stream-ordered allocations and frees, graph launches captured
 * as child graphs: their own N), and carries the count from the stream to the graph (EndCapture) and
 * from the graph to its executable graphs (instantiate).  Unknown graphs (made before the shim
 * recorded) reserve no slot: their nodes then share the launch's seq.  Graphs built node by node
 * (cuGraphAdd*Node, and the generic cuGraphAddNode[_v2] / cudaGraphAddNode[_v2]: hooks.c) count their nodes as
 * they are added; a child graph adds its own count.  Only recorded nodes count (kernel, copy, memset, memory
 * alloc and free nodes): a generic node of another type (empty, host, event...) is none, as an unhooked call on a
 * capturing stream is none, so the slots match the nodes the reader expands.
 *
 * Tables are small fixed arrays behind a spin lock (taken for a few instructions, never across a CUDA
 * call); a forked child starts with no capture open.  The fast path of every recorded call is one
 * relaxed atomic load (no capture open in the process).
 */
#include <stdatomic.h>
#include <string.h>

#include "shim.h"

#define PI_GRAPH_STREAMS 64    /* captures open at once */
#define PI_GRAPH_HANDLES 4096  /* graphs and executable graphs remembered (open addressing) */

typedef struct { uint64_t stream; uint32_t nodes; int used; } cap_slot;
typedef struct { uint64_t handle; uint32_t nodes; } handle_slot;

static cap_slot g_caps[PI_GRAPH_STREAMS];
static handle_slot g_graphs[PI_GRAPH_HANDLES], g_execs[PI_GRAPH_HANDLES];
static _Atomic int g_open;            /* captures open (the fast path) */
static atomic_flag g_lock = ATOMIC_FLAG_INIT;

static void lock(void) { while (atomic_flag_test_and_set_explicit(&g_lock, memory_order_acquire)) { } }
static void unlock(void) { atomic_flag_clear_explicit(&g_lock, memory_order_release); }

static size_t hslot(uint64_t h) { return (size_t)((h * 0x9E3779B97F4A7C15ull) >> 52) & (PI_GRAPH_HANDLES - 1); }

/* caller holds the lock: the slot of h (or the one to fill; a full table overwrites the home slot) */
static handle_slot *hfind(handle_slot *t, uint64_t h) {
    size_t i = hslot(h);
    for (size_t k = 0; k < 64; k++) {
        handle_slot *s = &t[(i + k) & (PI_GRAPH_HANDLES - 1)];
        if (s->handle == h || s->handle == 0) return s;
    }
    return &t[i];
}

static uint32_t hget(handle_slot *t, uint64_t h) {
    if (!h) return 0;
    handle_slot *s = hfind(t, h);
    return s->handle == h ? s->nodes : 0;
}

static void hput(handle_slot *t, uint64_t h, uint32_t n) {
    if (!h) return;
    handle_slot *s = hfind(t, h);
    s->handle = h;
    s->nodes = n;
}

void pi_graph_capture_begin(uint64_t stream) {
    lock();
    for (int i = 0; i < PI_GRAPH_STREAMS; i++)
        if (!g_caps[i].used) {
            g_caps[i] = (cap_slot){stream, 0, 1};
            atomic_fetch_add(&g_open, 1);
            break;
        }
    unlock();
}

void pi_graph_capture_end(uint64_t stream, uint64_t graph) {
    lock();
    for (int i = 0; i < PI_GRAPH_STREAMS; i++)
        if (g_caps[i].used && g_caps[i].stream == stream) {
            hput(g_graphs, graph, g_caps[i].nodes);
            g_caps[i].used = 0;
            atomic_fetch_sub(&g_open, 1);
            break;
        }
    unlock();
}

void pi_graph_captured(uint64_t stream, uint32_t nodes) {
    if (PI_LIKELY(atomic_load_explicit(&g_open, memory_order_relaxed) == 0)) return;
    lock();
    for (int i = 0; i < PI_GRAPH_STREAMS; i++)
        if (g_caps[i].used && g_caps[i].stream == stream) {
            g_caps[i].nodes += nodes;
            break;
        }
    unlock();
}

int pi_graph_stream_capturing(uint64_t stream) {
    if (PI_LIKELY(atomic_load_explicit(&g_open, memory_order_relaxed) == 0)) return 0;
    int found = 0;
    lock();
    for (int i = 0; i < PI_GRAPH_STREAMS && !found; i++) found = g_caps[i].used && g_caps[i].stream == stream;
    unlock();
    return found;
}

void pi_graph_instantiated(uint64_t exec, uint64_t graph) {
    lock();
    hput(g_execs, exec, hget(g_graphs, graph));
    unlock();
}

uint32_t pi_graph_exec_nodes(uint64_t exec) {
    lock();
    uint32_t n = hget(g_execs, exec);
    unlock();
    return n;
}

/* explicit construction: nodes added to a graph, a graph made (a handle reused starts from 0) */
void pi_graph_added(uint64_t graph, uint32_t nodes) {
    lock();
    hput(g_graphs, graph, hget(g_graphs, graph) + nodes);
    unlock();
}

uint32_t pi_graph_nodes(uint64_t graph) {
    lock();
    uint32_t n = hget(g_graphs, graph);
    unlock();
    return n;
}

void pi_graph_created(uint64_t graph) {
    lock();
    hput(g_graphs, graph, 0);
    unlock();
}

void pi_graph_atfork_child(void) {
    atomic_flag_clear(&g_lock);
    memset(g_caps, 0, sizeof g_caps);
    atomic_store(&g_open, 0);
}

/* ---- the device's graph memory after a replay (GRAPH_MEM) ----
 * cuDeviceGetGraphMemAttribute (reserved current/high, used current) and cuCtxGetDevice, called directly
 * on the driver (never through a hook), from the outermost hooked call, only when no capture is open in
 * the process (hooks.c checks), resolved once. */
typedef CUresult (*gm_attr_fn)(int, int, void *);
typedef CUresult (*gm_ctxdev_fn)(int *);
static gm_attr_fn volatile g_gm_attr;
static gm_ctxdev_fn volatile g_gm_ctxdev;
static int volatile g_gm_resolved;

void pi_graph_mem_record(int api, uint64_t launch_seq) {
    if (!g_gm_resolved) {
        g_gm_attr = (gm_attr_fn)pi_sym_near(NULL, "cuDeviceGetGraphMemAttribute");
        g_gm_ctxdev = (gm_ctxdev_fn)pi_sym_near(NULL, "cuCtxGetDevice");
        g_gm_resolved = 1;
    }
    gm_attr_fn attr = g_gm_attr;
    gm_ctxdev_fn cd = g_gm_ctxdev;
    int dev = -1;
    if (!attr || !cd || cd(&dev) != CUDA_SUCCESS) return;
    uint64_t used = 0, res = 0, res_high = 0;
    int r = (int)attr(dev, 2, &res);                  /* CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT */
    if (r == 0) r = (int)attr(dev, 3, &res_high);     /* ..._RESERVED_MEM_HIGH */
    if (r == 0) r = (int)attr(dev, 0, &used);         /* ..._USED_MEM_CURRENT */
    pi_writer w;
    if (!pi_writer_open(&w, 1)) return;
    pi_event e = {.t_ns = w.t, .addr = res, .size = res_high, .stream = used, .aux = launch_seq, .tid = pi_tid(),
                  .op = PI_OP_GRAPH_MEM, .api = (uint16_t)api, .result = r, .device = (int16_t)dev};
    pi_put_as(&w, 0, &e);
    pi_writer_close(&w);
}
