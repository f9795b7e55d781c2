/* shim.h — internal interfaces of the preload library (not installed). */
#ifndef PI_SHIM_H
#define PI_SHIM_H
#include <stddef.h>
#include <stdint.h>

#include "events.h"
#include "pi_cuda.h"

#define PI_HIDDEN __attribute__((visibility("hidden")))
#define PI_TLS __thread __attribute__((tls_model("initial-exec")))
#define PI_LIKELY(x) __builtin_expect(!!(x), 1)
#define PI_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* a pause inside spin-wait loops */
#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ volatile("yield")
#else
#define cpu_relax() ((void)0)
#endif

enum pi_lib { PI_LIB_RT = 1, PI_LIB_DRV = 2 };

/* API ids: line order of hooks.def, from 1. */
enum pi_api {
    PI_API_NONE = 0,
#define HOOK(name, lib, base, minver, ptsz, params, args, pre, post) PI_API_##name,
#include "hooks.def"
#undef HOOK
    PI_API_COUNT
};

typedef struct pi_hook_entry {
    const char *name;   /* exact exported symbol */
    const char *base;   /* cuGetProcAddress base name */
    int lib;
    int minver;
    int ptsz;
    void *hook;         /* our wrapper */
} pi_hook_entry;

extern PI_HIDDEN const pi_hook_entry pi_hooks[PI_API_COUNT];
extern PI_HIDDEN void *volatile pi_real_fn[PI_API_COUNT];

/* --- state (shim.c) --- */
typedef struct pi_tls {
    int depth;          /* re-entrancy: only the outermost hooked call records */
    int device;         /* last cudaSetDevice on this thread */
    uint32_t tid;
    int tid_pid;        /* pid for which tid was read (fork) */
    void *intent_ring;  /* the ring whose intent `intent` is (a fork child's ring is another) */
    int intent;         /* index into that ring's intents; -1: none left */
} pi_tls;
extern PI_HIDDEN PI_TLS pi_tls pi_t;

PI_HIDDEN int pi_active(void);           /* recording enabled (lazily initialised) */
PI_HIDDEN int pi_access_enabled(void);
PI_HIDDEN uint64_t pi_now(void);
PI_HIDDEN uint32_t pi_tid(void);

/* --- the record writer (shim.c): the one way into the ring ---
 * A writer holds n consecutive records: n tickets taken at once, so their seqs are adjacent and in this
 * order.  Fill each of them exactly once: pi_put (fields as given, stamped with the writer's time, this
 * thread and its device), pi_put_as (a whole record as given: another clock, thread or device) or
 * pi_put_text (STRDATA payload).  Records 1..n-1 are committed as they are filled, record 0 by
 * pi_writer_close, so the drain (it stops at the first uncommitted slot) sees the reservation whole.
 * A writer whose open failed (not recording, or the drain is gone: the ring counts the records lost)
 * holds nothing; putting into it and closing it do nothing.  Opening may wait for the drain
 * (back-pressure), so never open a writer while holding a lock the drain's progress could need. */
typedef struct pi_writer {
    uint64_t seq; /* seq (ticket) of record 0 (a staged writer: known once closed) */
    uint64_t n;   /* records held */
    uint64_t t;   /* when the writer was opened (CLOCK_MONOTONIC ns; set even when open failed) */
    int ok;       /* the records are held */
    struct pi_intent *in; /* staged: the records go to this thread's intent, the tickets come at close */
} pi_writer;
PI_HIDDEN int pi_writer_open(pi_writer *w, uint64_t n); /* 1 when the n records are held */
/* A writer whose n records are written down in this thread's intent (events.h) and whose tickets are
 * taken at pi_writer_close, so that a kill at any instruction loses nothing: either no ticket was taken,
 * or the drain finds the records in the intent.  For records that need no seq of their own before they
 * are closed (pi_writer_seq is valid after the close).  Falls back to pi_writer_open when n exceeds
 * PI_INTENT_RECORDS or the process's intents are all taken.  pi_put and pi_site_put only. */
PI_HIDDEN int pi_writer_stage(pi_writer *w, uint64_t n);
/* pi_writer_open then pi_writer_hold, with no instruction between the tickets and their held marks at
 * which a kill loses them: record 0 as held is written into the thread's intent (PI_INTENT_HELD) before
 * the tickets are taken.  1 when the n records are held. */
PI_HIDDEN int pi_writer_open_held(pi_writer *w, uint64_t n, uint16_t op, uint16_t api, uint64_t addr,
                                  uint64_t size, uint64_t stream, uint64_t aux, uint16_t flags);
static inline uint64_t pi_writer_seq(const pi_writer *w, uint64_t i) { return w->seq + i; }
PI_HIDDEN void pi_put(pi_writer *w, uint64_t i, uint16_t op, uint16_t api, int32_t result, uint64_t addr,
                      uint64_t size, uint64_t stream, uint64_t aux, uint16_t flags);
PI_HIDDEN void pi_put_as(pi_writer *w, uint64_t i, const pi_event *e); /* e->seq is ignored */
/* records needed for len bytes of text, and putting them from record i (zero-padded, the writer's time) */
static inline uint64_t pi_text_records(size_t len) { return (len + PI_STR_PAYLOAD - 1) / PI_STR_PAYLOAD; }
PI_HIDDEN void pi_put_text(pi_writer *w, uint64_t i, const char *text, size_t len);
PI_HIDDEN void pi_writer_close(pi_writer *w);
/* Before a real call that the writer's records describe: fill record 0 as (op, api, PI_RESULT_INTERRUPTED,
 * addr, size, stream, aux, flags) and records 1..n-1 as NONE, each marked held (events.h, PI_SEQ_HELD),
 * so a process killed inside the call leaves the call recorded as interrupted instead of lost slots.
 * The writer is then filled and closed as usual after the call. */
PI_HIDDEN void pi_writer_hold(pi_writer *w, uint16_t op, uint16_t api, uint64_t addr, uint64_t size,
                              uint64_t stream, uint64_t aux, uint16_t flags);
/* one record, now */
PI_HIDDEN void pi_emit(uint16_t op, uint16_t api, int32_t result, uint64_t addr, uint64_t size,
                       uint64_t stream, uint64_t aux, uint16_t flags);
PI_HIDDEN int pi_pid(void); /* the recording process (valid once pi_active()) */
PI_HIDDEN uint64_t pi_ring_room(void); /* free slots in the ring now (an estimate: producers race for them) */
PI_HIDDEN uint32_t pi_intern(const char *s); /* emits a STRING record once; returns its id */
PI_HIDDEN void pi_count_unscanned(void);
PI_HIDDEN void pi_count_oom(void);          /* an allocation failed for lack of memory */

/* --- rank and device context (context.c) --- */
PI_HIDDEN void pi_context_env(void);   /* CONTEXT records: the rank variables (ring just opened) */
/* a DEVICE record the first time this process allocates on the thread's device; stream-ordered
 * allocations (may be inside a graph capture) first ask cuStreamIsCapturing and wait for a later one */
PI_HIDDEN void pi_context_device(int stream_ordered, uint64_t stream);
PI_HIDDEN void pi_context_atfork_child(void);
/* driver contexts (no CUDA call): a retained primary context's device; a context made current sets the
 * thread's device (push: remembered for the pop) */
PI_HIDDEN void pi_context_remember(CUcontext ctx, int device);
PI_HIDDEN void pi_context_current(CUcontext ctx, int push);
PI_HIDDEN void pi_context_pop(void);
/* bytes of the peer buffer an IPC open just mapped at ptr (cuMemGetAddressRange_v2; 0 unknown) */
PI_HIDDEN uint64_t pi_ipc_size(uint64_t ptr);

/* --- real symbols (resolve.c) --- */
PI_HIDDEN void *pi_real(int api);
PI_HIDDEN void *pi_real_dlsym(void *handle, const char *name);
PI_HIDDEN void *pi_sym_near(void *known_fn, const char *name); /* same library as known_fn */
PI_HIDDEN int pi_rt_major(void); /* major version of the libcudart the hooks forward to */

/* --- out of memory (oom.c) --- */
/* free/total bytes of the current context's device and its ordinal (-1 unknown); 0 = not queried */
PI_HIDDEN int pi_meminfo(uint64_t *freeb, uint64_t *total, int *device);

/* --- live blocks (blockmap.c) --- */
typedef struct pi_block { uint64_t base, size, seq; } pi_block;
PI_HIDDEN void pi_map_insert(uint64_t base, uint64_t size, uint64_t seq);
PI_HIDDEN int pi_map_remove(uint64_t base, pi_block *out);
PI_HIDDEN void pi_map_rdlock(void);
PI_HIDDEN void pi_map_unlock(void);
PI_HIDDEN int pi_map_find_locked(uint64_t p, pi_block *out);
PI_HIDDEN void pi_map_atfork_prepare(void);
PI_HIDDEN void pi_map_atfork_parent(void);
PI_HIDDEN void pi_map_atfork_child(void);

/* --- launch scanning (scan.c) --- */
#define PI_MAX_HITS 64
typedef struct pi_scan {
    int n;
    int kernel;         /* string id of the kernel name, 0 unknown */
    uint64_t kname;     /* FNV-1a 64 of the kernel name (swap.c's launch keys) */
    uint64_t scanned;   /* parameter bytes scanned */
    pi_block hit[PI_MAX_HITS];
    uint16_t fl[PI_MAX_HITS]; /* pi_access_flags per hit */
} pi_scan;
PI_HIDDEN void pi_scan_rt(const void *func, void **args, pi_scan *out);
PI_HIDDEN void pi_scan_drv(CUfunction f, void **params, void **extra, pi_scan *out);
PI_HIDDEN void pi_scan_words(const uint64_t *words, size_t nwords, pi_scan *out); /* blockmap.c; map lock held */
/* a call's event followed by its accesses (1 + sc->n records), now */
PI_HIDDEN void pi_emit_with_accesses(uint16_t op, uint16_t api, int32_t r, uint64_t addr, uint64_t size,
                                     uint64_t stream, uint64_t aux, const pi_scan *sc);
/* the event of a call whose writer of 1 + sc->n records was opened before the real call (the device clock
 * joins CUPTI's records to that seq), at the writer's time, and closes the writer; a failed call's access
 * records become PI_OP_NONE */
PI_HIDDEN void pi_put_call(pi_writer *w, uint16_t op, uint16_t api, int32_t r, uint64_t addr, uint64_t size,
                           uint64_t stream, uint64_t aux, const pi_scan *sc);
/* every module/library unload: before the real call and after it (layout cache epochs) */
PI_HIDDEN void pi_layouts_unload_begin(void);
PI_HIDDEN void pi_layouts_unload_end(void);
PI_HIDDEN void pi_scan_add(pi_scan *sc, const pi_block *b, uint16_t flags); /* dedup by block */

/* --- CUDA graphs: node counts, so that a replay reserves a ticket per node (graphs.c) --- */
PI_HIDDEN void pi_graph_capture_begin(uint64_t stream);
PI_HIDDEN void pi_graph_capture_end(uint64_t stream, uint64_t graph);
PI_HIDDEN void pi_graph_captured(uint64_t stream, uint32_t nodes); /* a call recorded on the stream */
PI_HIDDEN int pi_graph_stream_capturing(uint64_t stream);
PI_HIDDEN void pi_graph_instantiated(uint64_t exec, uint64_t graph);
PI_HIDDEN uint32_t pi_graph_exec_nodes(uint64_t exec);
PI_HIDDEN void pi_graph_added(uint64_t graph, uint32_t nodes);   /* explicit construction */
PI_HIDDEN uint32_t pi_graph_nodes(uint64_t graph);
PI_HIDDEN void pi_graph_created(uint64_t graph);
PI_HIDDEN void pi_graph_atfork_child(void);
PI_HIDDEN void pi_graph_mem_record(int api, uint64_t launch_seq); /* GRAPH_MEM after a replay */
/* --- capture windows (window.c) --- */
PI_HIDDEN void pi_window_edge(int api, int result, int edge, int source); /* a PI_OP_WINDOW record */
/* 0 while a window the shim gates ($PYINTERPOSE_WINDOW_GATE) is closed: launches, copies, memsets and their
 * accesses are then not written (allocations, frees, sites, markers and definitions always are) */
PI_HIDDEN int pi_window_recording(void);
PI_HIDDEN void pi_window_mark_begin(void); /* around a marker's record (the --steps gate counts them) */
PI_HIDDEN void pi_window_mark_end(void);
PI_HIDDEN void pi_window_atfork_child(void);

/* --- serving allocations from a planned arena (apply.c) --- */
/* 1 when the request was served (*pp holds the block, *result the CUDA result); fam: 0 runtime, 1 driver */
PI_HIDDEN int pi_apply_serve(int api, void *pp, uint64_t size, uint64_t stream, int fam, int ptsz, int async,
                             uint64_t caller, int *result);
PI_HIDDEN int pi_apply_has_arena(void);
PI_HIDDEN int pi_apply_owns(uint64_t p);
PI_HIDDEN int pi_apply_release(uint64_t p, uint64_t stream, int fam, int ptsz, int async, int *result);
PI_HIDDEN void pi_apply_mark(void);
PI_HIDDEN void pi_apply_exit(void);
PI_HIDDEN void pi_apply_atfork_child(void);
/* swap.c: the swap engine beside apply.c's arena (issue 31) */
PI_HIDDEN void pi_swap_load(const void *section, uint64_t bytes, int device);
PI_HIDDEN int pi_swap_active(void);
PI_HIDDEN int pi_swap_serve(uint32_t managed, uint64_t size, void *pp, int *result, int device, uint64_t stream,
                            int async);
PI_HIDDEN int pi_swap_owns(uint64_t p);
PI_HIDDEN int pi_swap_release(uint64_t p, uint64_t stream, int async, int *result);
PI_HIDDEN void pi_swap_count_real(void);
PI_HIDDEN void pi_swap_boundary(int64_t finished_iter);
PI_HIDDEN void pi_swap_launch(const pi_scan *sc, uint64_t stream, int after);
PI_HIDDEN int pi_swap_status(char *buf, int len);
PI_HIDDEN void pi_swap_exit(int64_t iter);
PI_HIDDEN void pi_swap_atfork_child(void);
static inline uint64_t pi_fnv1a(const char *s) {
    uint64_t h = 14695981039346656037ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}
#endif
