/*
 * cupti.c — the device clock: when each kernel, memcpy and memset ran on the GPU, through CUPTI's
 * Activity API, joined to the shim's own events.
 *
 * Setup is lazy: on the first interposed launch / copy / memset / graph launch of a recording process
 * that is not made while a stream capture is open (never at load time, never from a constructor).
 * libcupti is found at run time and never linked (see find_cupti); the activity kinds CONCURRENT_KERNEL,
 * MEMCPY, MEMSET, EXTERNAL_CORRELATION, DRIVER and RUNTIME are enabled (without an API kind CUPTI
 * writes no external correlation records).  Around each of those calls hooks.c reserves the event's
 * ticket first and pushes its seq as a CUSTOM2 external correlation id (cupti.h: why not CUSTOM0) (pi_gpu_push / pi_gpu_pop), so
 * a record of the device activity names the event it belongs to (cupti_parse.c does the join); a
 * graph's replayed kernels carry the graph launch's.  A device record carries the outermost API call's
 * correlationId: where the shim interposed only the driver call inside a runtime call, the runtime
 * record is joined through the driver record nested in it (cupti_parse.h; counted in a NOTE at exit).
 *
 * Records reach the ring as PI_OP_GPU events (events.h), their times already on the trace's clock:
 * the CUPTI clock is aligned by reading cuptiGetTimestamp between two CLOCK_MONOTONIC reads many
 * times and keeping the tightest pair; the offset and its error bound (half that pair's width) go
 * into a PI_OP_CLOCK event, again at every flush (the clocks may drift apart).  CUPTI hands buffers
 * over when they fill (from its own thread) and when flushed: the shim flushes from its own call
 * path, after a call's event is committed, once per PYINTERPOSE_GPU_FLUSH_MS (100 ms), and at exit
 * (atexit, registered after the ring's exit handler, so it runs first).  No CUPTI call is made while a
 * stream capture is open (hooks on Begin/EndCapture count them) — not the setup, not the push, not a
 * flush.  Records CUPTI dropped are counted (cuptiActivityGetNumDroppedRecords, per buffer) into the
 * CLOCK events.
 *
 * Sharing (cupti_share.c): a CUPTI client of the program's own (torch.profiler/Kineto) that starts
 * activity recording before the setup keeps the device clock off; one that starts after it gets CUPTI
 * handed back (pi_gpu_yield).  At setup, a cuptiSubscribe/cuptiUnsubscribe probe finds a subscriber the
 * shim did not see subscribe (a tool attached another way): off too.
 *
 * Never harm: when libcupti is missing, refuses (another subscriber: Nsight, torch.profiler, a
 * debugger) or fails, the program runs on untouched, no further CUPTI call is made, and the process's
 * ring gets a NOTE and a CLOCK event (state cpu, the reason).  $PYINTERPOSE_GPU_CLOCK=off never loads
 * it.  A fork() child never uses its parent's CUPTI state (a child forked before the parent set CUPTI
 * up sets up its own).
 */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cupti.h"
#include "cupti_parse.h"
#include "pi_cupti.h"
#include "shim.h"

#define BUF_SIZE (4u << 20) /* CUPTI recommends 1-10 MB; Kineto uses 4 MB */
#define POOL_MAX 8          /* spare buffers kept for reuse */
#define ALIGN_TRIES 32
#define CORR_BITS 18

enum { CLOCK_UNTRIED = 0, CLOCK_ON = 1, CLOCK_OFF = 2 };

static struct {
    pi_cuptiActivityRegisterCallbacks_fn register_callbacks;
    pi_cuptiActivityEnable_fn enable;
    pi_cuptiActivityDisable_fn disable;
    pi_cuptiActivityGetNextRecord_fn next_record;
    pi_cuptiActivityFlushAll_fn flush_all;
    pi_cuptiActivityGetNumDroppedRecords_fn dropped_records;
    pi_cuptiActivityPushExternalCorrelationId_fn push_external_id;
    pi_cuptiActivityPopExternalCorrelationId_fn pop_external_id;
    pi_cuptiGetTimestamp_fn timestamp;
    pi_cuptiGetResultString_fn result_string; /* optional */
} g_cupti; /* the CUPTI entry points in use (setup_locked) */

static pthread_mutex_t g_setup_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_parse_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile int g_clock;            /* CLOCK_*: the device clock untried, on or off */
static volatile pid_t g_owner;          /* the process that set CUPTI up */
static int g_reason;                    /* enum pi_clock_reason while off */
static char g_note[1024];                /* why off (or why the times stopped) */
static volatile int g_noted_pid;        /* process whose ring has the CLOCK event of the current state */
static int g_was_on;                    /* this process recorded device times (then stopped: state stays cupti) */
static PI_TLS int t_holds_ticket;       /* this thread holds an uncommitted ticket (between push and tick) */
static PI_TLS int t_ticking;            /* this thread flushes from a call path (holding nothing): it may wait */
static _Atomic int g_capturing;         /* stream captures open */
static _Atomic int64_t g_offset;        /* trace clock = CUPTI clock + offset (the latest alignment) */
/* CUPTI time -> trace time: linear between the last two alignments (the clocks may drift apart; a
 * flush's records mostly ran between them), written under g_parse_lock, read by emit_gpu_record() under it */
static int64_t g_prev_cupti, g_prev_offset, g_last_cupti, g_last_offset;
static double g_slope;
static _Atomic uint64_t g_err;          /* largest alignment error bound so far, ns */
static _Atomic uint64_t g_dropped;      /* records CUPTI dropped */
static _Atomic uint64_t g_next_flush;
static uint64_t g_setup_ns;             /* when CUPTI was set up (pi_now) */
static uint64_t g_flush_ns = 100000000ull;
static char g_lib[800];                 /* the libcupti in use */
static pi_corr_map g_map;
static pi_gpu_pending g_pending;
static size_t g_buf_size = BUF_SIZE;   /* PYINTERPOSE_CUPTI_BUFFER (bytes; tests make CUPTI drop records) */
static uint8_t *g_pool[POOL_MAX];
static int g_npool;
/* the queue of handed-over buffers (see buffer_completed) */
#define QUEUE_MAX 4096     /* entries; g_queue_cap = 64 MB of buffers, 16..QUEUE_MAX */
#define QUEUE_BYTES (64u << 20)
static struct { void *ctx; uint32_t stream; uint8_t *buf; size_t valid; } g_queue[QUEUE_MAX];
static int g_queue_head;             /* under g_pool_lock */
static volatile int g_queued;        /* written under g_pool_lock; read without it as a hint */
static int g_draining;              /* a thread is parsing the queue's oldest buffer (under g_pool_lock) */
static int g_outstanding;           /* buffers CUPTI holds (requested, not completed) */
static int g_queue_cap = 16;
static _Atomic uint64_t g_refused;  /* buffers refused to CUPTI (queue full) */
static uint64_t g_evicted_noted;    /* pending activities evicted, as far as a NOTE said so */

/* ------------------------------------------------------------------ state and notes */
static void emit_clock(int state, int reason, const char *note) {
    uint32_t id = note && note[0] ? pi_intern(note) : 0;
    if (id) pi_emit(PI_OP_NOTE, 0, 0, 0, 0, 0, id, 0);
    pi_emit(PI_OP_CLOCK, 0, reason, (uint64_t)atomic_load(&g_offset), atomic_load(&g_err),
            atomic_load(&g_dropped), id, (uint16_t)state);
}

/* the process's CLOCK event for the current (off) state, once per recording process */
static void note_state(void) {
    int pid = pi_pid();
    if (g_noted_pid == pid) return;
    g_noted_pid = pid;
    emit_clock(g_was_on ? PI_CLOCK_CUPTI : PI_CLOCK_CPU, g_reason, g_note);
}

static const char *result_name(pi_CUptiResult r) {
    const char *s = NULL;
    if (g_cupti.result_string && g_cupti.result_string(r, &s) != PI_CUPTI_SUCCESS) s = NULL;
    return s ? s : "";
}

static void set_off(int reason, const char *fmt_note) {
    g_reason = reason;
    g_noted_pid = 0; /* the next call path writes the CLOCK event saying so */
    snprintf(g_note, sizeof g_note, "%s", fmt_note);
    __atomic_store_n(&g_clock, CLOCK_OFF, __ATOMIC_RELEASE);
}

/* a CUPTI call failed: off, with the reason named after the call and its result */
static void cupti_failed(const char *call, pi_CUptiResult r, int setup) {
    char note[1024];
    const char *name = result_name(r);
    if (r == PI_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
        snprintf(note, sizeof note, "device clock off: CUPTI busy — another subscriber holds it (Nsight Systems or "
                 "Compute, torch.profiler/Kineto, a debugger): %s returned %d%s%s; analyses use the CPU clock",
                 call, r, name[0] ? " " : "", name);
    else
        snprintf(note, sizeof note, "device clock %s: CUPTI failed: %s returned %d%s%s (%s)%s", setup ? "off" : "stopped",
                 call, r, name[0] ? " " : "", name, g_lib, setup ? "; analyses use the CPU clock"
                 : "; device times end here");
    set_off(r == PI_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED ? PI_CLOCK_BUSY : PI_CLOCK_FAILED, note);
}

/* ------------------------------------------------------------------ finding libcupti */
typedef struct { char dirs[8][300]; int n; } loaded_dirs;

static int collect_dir(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    loaded_dirs *d = arg;
    const char *path = info->dlpi_name;
    if (!path || !path[0] || d->n >= 8) return 0;
    const char *base = strrchr(path, '/');
    if (!base) return 0;
    base++;
    if (strncmp(base, "libcudart.so", 12) && strncmp(base, "libcupti.so", 11) && strncmp(base, "libcublas.so", 12) &&
        strncmp(base, "libtorch_cuda.so", 16) && strncmp(base, "libcuda.so", 10))
        return 0;
    size_t len = (size_t)(base - 1 - path);
    if (len >= sizeof d->dirs[0]) return 0;
    for (int i = 0; i < d->n; i++)
        if (strlen(d->dirs[i]) == len && strncmp(d->dirs[i], path, len) == 0) return 0;
    memcpy(d->dirs[d->n], path, len);
    d->dirs[d->n][len] = 0;
    d->n++;
    return 0;
}

static void *open_path(const char *path, char *err, size_t errn) {
    if (access(path, F_OK) != 0) return NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h && err[0] == 0) {
        const char *e = dlerror();
        snprintf(err, errn, "%.280s", e ? e : path);
    }
    if (h) snprintf(g_lib, sizeof g_lib, "%s", path);
    return h;
}

/* dir/sub/libcupti.so.<major> for each major asked for */
static void *in_dir(const char *dir, const char *sub, const int *majors, char *err, size_t errn) {
    char p[800];
    for (int i = 0; majors[i] >= 0; i++) {
        if (majors[i]) snprintf(p, sizeof p, "%s%s/libcupti.so.%d", dir, sub, majors[i]);
        else snprintf(p, sizeof p, "%s%s/libcupti.so", dir, sub);
        void *h = open_path(p, err, errn);
        if (h) return h;
    }
    return NULL;
}

/* Where libcupti is looked for, in order: $PYINTERPOSE_CUPTI (only there, when set); one already loaded
 * (torch.profiler's); beside the CUDA libraries the process loaded (a wheel's nvidia/cuda_cupti/lib or
 * nvidia/cu13/lib, a toolkit's extras/CUPTI/lib64: the libcupti that matches the runtime in use);
 * $CUDA_HOME and $CUDA_PATH; the library path (LD_LIBRARY_PATH, ldconfig); /usr/local/cuda.  The major
 * version of the loaded runtime is tried first. */
static void *find_cupti(char *why, size_t whyn) {
    char err[300] = "";
    const char *env = getenv("PYINTERPOSE_CUPTI");
    if (env && env[0]) {
        void *h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (h) {
            snprintf(g_lib, sizeof g_lib, "%s", env);
            return h;
        }
        const char *e = dlerror();
        snprintf(why, whyn, "libcupti not found ($PYINTERPOSE_CUPTI=%.200s cannot be loaded: %.200s)", env, e ? e : "?");
        return NULL;
    }
    int rt = pi_rt_major();
    int majors[4] = {rt, rt == 13 ? 12 : 13, 0, -1};
    char soname[32];
    for (int i = 0; majors[i] > 0; i++) { /* already in the process */
        snprintf(soname, sizeof soname, "libcupti.so.%d", majors[i]);
        void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
        if (h) {
            snprintf(g_lib, sizeof g_lib, "%s (already loaded)", soname);
            return h;
        }
    }
    loaded_dirs d;
    d.n = 0;
    dl_iterate_phdr(collect_dir, &d);
    static const char *const beside[] = {"", "/../extras/CUPTI/lib64", "/../../cuda_cupti/lib",
                                         "/../../nvidia/cuda_cupti/lib", "/../../nvidia/cu13/lib",
                                         "/../../nvidia/cu12/lib", NULL};
    for (int i = 0; i < d.n; i++)
        for (int j = 0; beside[j]; j++) {
            void *h = in_dir(d.dirs[i], beside[j], majors, err, sizeof err);
            if (h) return h;
        }
    static const char *const homes[] = {"CUDA_HOME", "CUDA_PATH", NULL};
    for (int i = 0; homes[i]; i++) {
        const char *home = getenv(homes[i]);
        if (!home || !home[0]) continue;
        void *h = in_dir(home, "/extras/CUPTI/lib64", majors, err, sizeof err);
        if (!h) h = in_dir(home, "/lib64", majors, err, sizeof err);
        if (h) return h;
    }
    for (int i = 0; majors[i] >= 0; i++) {
        if (majors[i]) snprintf(soname, sizeof soname, "libcupti.so.%d", majors[i]);
        else snprintf(soname, sizeof soname, "libcupti.so");
        void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
        if (h) {
            snprintf(g_lib, sizeof g_lib, "%s", soname);
            return h;
        }
    }
    void *h = in_dir("/usr/local/cuda", "/extras/CUPTI/lib64", majors, err, sizeof err);
    if (!h) h = in_dir("/usr/local/cuda", "/lib64", majors, err, sizeof err);
    if (h) return h;
    snprintf(why, whyn, "libcupti not found (looked beside the loaded CUDA libraries, in $CUDA_HOME, $CUDA_PATH, "
             "on the library path and in /usr/local/cuda; $PYINTERPOSE_CUPTI names one)%s%s",
             err[0] ? "; " : "", err);
    return NULL;
}

/* ------------------------------------------------------------------ buffers and records */
static void buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    uint8_t *b = NULL;
    int refuse;
    pthread_mutex_lock(&g_pool_lock);
    refuse = g_queued + g_outstanding >= g_queue_cap; /* bounded memory: the queue is full */
    if (!refuse && g_npool) b = g_pool[--g_npool];
    pthread_mutex_unlock(&g_pool_lock);
    if (!refuse && !b && posix_memalign((void **)&b, 8, g_buf_size) != 0) b = NULL;
    if (b) {
        pthread_mutex_lock(&g_pool_lock);
        g_outstanding++;
        pthread_mutex_unlock(&g_pool_lock);
    } else if (refuse) {
        atomic_fetch_add(&g_refused, 1);
    }
    *buffer = b;
    *size = b ? g_buf_size : 0; /* no buffer: CUPTI drops the records and counts them */
    *max_records = 0;
}

static void buffer_give_back(uint8_t *b) {
    pthread_mutex_lock(&g_pool_lock);
    if (g_npool < POOL_MAX) {
        g_pool[g_npool++] = b;
        b = NULL;
    }
    pthread_mutex_unlock(&g_pool_lock);
    free(b);
}

static inline uint64_t to_trace(uint64_t t) {
    if (!t) return 0;
    double d = g_slope * (double)((int64_t)t - g_last_cupti);
    return (uint64_t)((int64_t)t + g_last_offset + (int64_t)(d < 0 ? d - 0.5 : d + 0.5));
}

/* a new alignment point (c: a CUPTI time, off: trace - CUPTI there); under g_parse_lock */
static void clock_model_add(int64_t off) {
    int64_t c = (int64_t)pi_now() - off;
    if (g_last_cupti == 0) {
        g_prev_cupti = g_last_cupti = c;
        g_prev_offset = g_last_offset = off;
        g_slope = 0;
    } else if (c > g_last_cupti) {
        g_prev_cupti = g_last_cupti, g_prev_offset = g_last_offset;
        g_last_cupti = c, g_last_offset = off;
        g_slope = (double)(g_last_offset - g_prev_offset) / (double)(g_last_cupti - g_prev_cupti);
    }
    atomic_store(&g_offset, off);
}

/* one device activity -> one PI_OP_GPU event (its own clock, CUPTI's stream id and the device's id) */
static void emit_gpu_record(void *ctx, const pi_gpu_act *a) {
    (void)ctx;
    int32_t res = 0;
    if (a->kind == PI_GPU_KERNEL) {
        /* a launch names its kernel; a graph's replayed nodes and unmatched kernels are named here */
        if ((a->graph_node || !a->ext) && a->name) res = (int32_t)pi_intern(a->name);
    } else if (a->kind == PI_GPU_MEMCPY) {
        res = a->copy_kind;
    }
    pi_writer w;
    if (!pi_writer_open(&w, 1)) return;
    uint64_t start = to_trace(a->start), end = to_trace(a->end);
    if (!start || !end) start = end = 0; /* CUPTI writes 0 for a time it could not take */
    pi_event e = {.t_ns = start, .addr = end, .size = a->bytes, .stream = a->graph_node, .aux = a->ext,
                  .tid = a->stream, .op = PI_OP_GPU, .result = res, .device = a->device, .flags = a->kind};
    pi_put_as(&w, 0, &e);
    pi_writer_close(&w);
}

static void process_buffer(void *context, uint32_t stream, uint8_t *buffer, size_t valid);

/* The queue of handed-over buffers.  Every buffer CUPTI completes is appended here, in the order CUPTI
 * handed it over, and parsed from here, oldest first, by one thread at a time (g_draining): a pairing is
 * always parsed before the activities of later buffers, whichever thread got which buffer.  A thread
 * parses only when it may write to the ring: never while it holds an uncommitted ticket (CUPTI may
 * complete a buffer inside a call: writing there could wait for a drain that waits for that ticket), and
 * CUPTI's own thread only while the ring has room for the buffer's events (it must not wait for the
 * drain while CUPTI may hold a lock that a launch, holding a ticket the drain waits for, needs); the
 * rest waits for a call path's tick.  Nobody waits for the thread that is parsing: it takes whatever
 * was appended meanwhile.  Bounded: buffer_requested gives CUPTI no buffer while the queued buffers and
 * those CUPTI holds reach g_queue_cap (CUPTI then drops records and counts them: gpu_dropped). */

static int may_parse(size_t valid) {
    if (t_holds_ticket) return 0;
    return t_ticking || pi_ring_room() >= valid / PI_CUPTI_SIZEOF_MEMSET4 + 1024;
}

/* parse queued buffers, oldest first, while this thread may and no other thread is parsing */
static void drain_queue(void) {
    for (;;) {
        pthread_mutex_lock(&g_pool_lock);
        if (g_draining || g_queued == 0 || !may_parse(g_queue[g_queue_head].valid)) {
            pthread_mutex_unlock(&g_pool_lock);
            return;
        }
        g_draining = 1;
        int h = g_queue_head;
        void *ctx = g_queue[h].ctx;
        uint32_t st = g_queue[h].stream;
        uint8_t *b = g_queue[h].buf;
        size_t v = g_queue[h].valid;
        g_queue_head = (h + 1) % QUEUE_MAX;
        g_queued--;
        pthread_mutex_unlock(&g_pool_lock);
        process_buffer(ctx, st, b, v);
        pthread_mutex_lock(&g_pool_lock);
        g_draining = 0;
        pthread_mutex_unlock(&g_pool_lock);
    }
}

/* the final flush: every queued buffer parsed (by this thread, or the one parsing now) */
static void drain_queue_all(void) {
    struct timespec ts = {0, 50000};
    for (;;) {
        drain_queue();
        pthread_mutex_lock(&g_pool_lock);
        int done = g_queued == 0 && !g_draining;
        pthread_mutex_unlock(&g_pool_lock);
        if (done || t_holds_ticket) return;
        nanosleep(&ts, NULL);
    }
}

/* records in a buffer that cannot be queued (cannot happen: buffer_requested bounds them): counted dropped */
static void drop_buffer(uint8_t *buffer, size_t valid) {
    uint64_t n = 0;
    pi_cupti_record *r = NULL;
    while (g_cupti.next_record && g_cupti.next_record(buffer, valid, &r) == PI_CUPTI_SUCCESS) n++;
    atomic_fetch_add(&g_dropped, n);
    buffer_give_back(buffer);
}

static void buffer_completed(void *context, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)size;
    if (!buffer) return;
    pthread_mutex_lock(&g_pool_lock);
    if (g_outstanding > 0) g_outstanding--;
    int queued = g_queued < QUEUE_MAX;
    if (queued) {
        int t = (g_queue_head + g_queued) % QUEUE_MAX;
        g_queue[t].ctx = context;
        g_queue[t].stream = stream;
        g_queue[t].buf = buffer;
        g_queue[t].valid = valid;
        g_queued++;
    }
    pthread_mutex_unlock(&g_pool_lock);
    if (!queued) {
        drop_buffer(buffer, valid);
        return;
    }
    drain_queue();
}

static void process_buffer(void *context, uint32_t stream, uint8_t *buffer, size_t valid) {
    /* only the process that set CUPTI up turns records into events (a fork child never does) */
    if (g_owner == getpid() && valid && g_cupti.next_record && pi_active()) {
        int depth = pi_t.depth++;
        pthread_mutex_lock(&g_parse_lock);
        pi_cupti_parse(g_cupti.next_record, PI_GPU_CORR_KIND, buffer, valid, &g_map, &g_pending, emit_gpu_record, NULL);
        pthread_mutex_unlock(&g_parse_lock);
        size_t dropped = 0;
        if (g_cupti.dropped_records && g_cupti.dropped_records(context, stream, &dropped) == PI_CUPTI_SUCCESS && dropped)
            atomic_fetch_add(&g_dropped, dropped);
        pi_t.depth = depth;
    }
    buffer_give_back(buffer);
}

/* offset and error bound of the CUPTI clock against CLOCK_MONOTONIC; 0 or the failing result */
static pi_CUptiResult measure_offset(int tries, int64_t *offset, uint64_t *err) {
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < tries; i++) {
        uint64_t c = 0, a = pi_now();
        pi_CUptiResult r = g_cupti.timestamp(&c);
        uint64_t b = pi_now();
        if (r != PI_CUPTI_SUCCESS) return r;
        if (b - a < best) {
            best = b - a;
            *offset = (int64_t)(a + (b - a) / 2) - (int64_t)c;
        }
    }
    *err = (best + 1) / 2;
    return PI_CUPTI_SUCCESS;
}

/* ------------------------------------------------------------------ setup, flushes, exit */
static void at_exit(void);

#define CUPTI_SYM(field, name)                                                       \
    do {                                                                       \
        *(void **)&g_cupti.field = pi_real_dlsym(h, name);                           \
        if (!g_cupti.field) {                                                        \
            snprintf(why, sizeof why, "device clock off: %.400s has no %s (CUPTI too old?); analyses use the CPU clock", \
                     g_lib, name);                                             \
            set_off(PI_CLOCK_UNSUPPORTED, why);                                \
            return;                                                            \
        }                                                                      \
    } while (0)

/* Another subscriber that did not subscribe through the shim (cupti_share.c saw none): a tool that
 * holds CUPTI (attached without CUDA_INJECTION64_PATH, a debugger).  The probe holds nothing: a
 * subscription it gets is given back at once.  1 when the clock must stay off (set). */
static int probe_subscriber(void *h) {
    pi_cuptiSubscribe_fn sub = (pi_cuptiSubscribe_fn)pi_real_dlsym(h, "cuptiSubscribe");
    pi_cuptiUnsubscribe_fn unsub = (pi_cuptiUnsubscribe_fn)pi_real_dlsym(h, "cuptiUnsubscribe");
    if (!sub || !unsub) return 0;
    pi_cupti_subscriber s = NULL;
    pi_CUptiResult r = sub(&s, NULL, NULL);
    if (r == PI_CUPTI_SUCCESS) {
        unsub(s);
        return 0;
    }
    if (r == PI_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED && !pi_gpu_client_subscribed()) {
        cupti_failed("cuptiSubscribe (probe)", r, 1);
        return 1;
    }
    return 0; /* the program's own client's subscription (seen): it is watched; or the probe failed */
}

static void setup_locked(void) {
    char why[600];
    const char *mode = getenv("PYINTERPOSE_GPU_CLOCK");
    if (mode && strcmp(mode, "off") == 0) {
        set_off(PI_CLOCK_OFF, "device clock off: --gpu-clock off; analyses use the CPU clock");
        return;
    }
    const char *inj = getenv("CUDA_INJECTION64_PATH");
    if (inj && inj[0]) {
        /* Nsight Systems / Compute (or another CUPTI-based tool) is injected into CUDA and drives CUPTI;
         * registering our callbacks would take its activity buffers away */
        snprintf(why, sizeof why, "device clock off: CUPTI busy — another tool is injected into CUDA "
                 "(CUDA_INJECTION64_PATH=%.300s: Nsight Systems or Compute?); analyses use the CPU clock", inj);
        set_off(PI_CLOCK_BUSY, why);
        return;
    }
    const char *flush_ms = getenv("PYINTERPOSE_GPU_FLUSH_MS");
    if (flush_ms && atoi(flush_ms) > 0) g_flush_ns = (uint64_t)atoi(flush_ms) * 1000000ull;
    const char *buffer_env = getenv("PYINTERPOSE_CUPTI_BUFFER");
    if (buffer_env && atol(buffer_env) >= 64) g_buf_size = (size_t)atol(buffer_env) & ~(size_t)7;
    size_t queue_cap = QUEUE_BYTES / g_buf_size;
    g_queue_cap = queue_cap < 16 ? 16 : queue_cap > QUEUE_MAX ? QUEUE_MAX : (int)queue_cap;
    void *h = find_cupti(why, sizeof why);
    if (!h) {
        char note[700];
        snprintf(note, sizeof note, "device clock off: %s; analyses use the CPU clock", why);
        set_off(PI_CLOCK_NOT_FOUND, note);
        return;
    }
    *(void **)&g_cupti.result_string = pi_real_dlsym(h, "cuptiGetResultString");
    CUPTI_SYM(register_callbacks, "cuptiActivityRegisterCallbacks");
    CUPTI_SYM(enable, "cuptiActivityEnable");
    CUPTI_SYM(disable, "cuptiActivityDisable");
    CUPTI_SYM(next_record, "cuptiActivityGetNextRecord");
    CUPTI_SYM(flush_all, "cuptiActivityFlushAll");
    CUPTI_SYM(dropped_records, "cuptiActivityGetNumDroppedRecords");
    CUPTI_SYM(push_external_id, "cuptiActivityPushExternalCorrelationId");
    CUPTI_SYM(pop_external_id, "cuptiActivityPopExternalCorrelationId");
    CUPTI_SYM(timestamp, "cuptiGetTimestamp");
    if (probe_subscriber(h)) return;
    if (!g_map.ext && pi_corr_init(&g_map, CORR_BITS) != 0) {
        set_off(PI_CLOCK_FAILED, "device clock off: out of memory; analyses use the CPU clock");
        return;
    }
    int64_t off = 0;
    uint64_t err = 0;
    pi_CUptiResult r = measure_offset(ALIGN_TRIES, &off, &err);
    if (r != PI_CUPTI_SUCCESS) {
        cupti_failed("cuptiGetTimestamp", r, 1);
        return;
    }
    atomic_store(&g_err, err);
    clock_model_add(off);
    g_owner = getpid(); /* before the callbacks can run */
    r = g_cupti.register_callbacks(buffer_requested, buffer_completed);
    if (r != PI_CUPTI_SUCCESS) {
        cupti_failed("cuptiActivityRegisterCallbacks", r, 1);
        return;
    }
    static const uint32_t kinds[] = {PI_CUPTI_KIND_CONCURRENT_KERNEL, PI_CUPTI_KIND_MEMCPY, PI_CUPTI_KIND_MEMSET,
                                     PI_CUPTI_KIND_EXTERNAL_CORRELATION, PI_CUPTI_KIND_DRIVER,
                                     PI_CUPTI_KIND_RUNTIME};
    static const char *const kind_names[] = {"CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "EXTERNAL_CORRELATION",
                                             "DRIVER", "RUNTIME"};
    for (unsigned i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        r = g_cupti.enable(kinds[i]);
        if (r != PI_CUPTI_SUCCESS) {
            char call[96];
            snprintf(call, sizeof call, "cuptiActivityEnable(%s)", kind_names[i]);
            for (unsigned j = 0; j < i; j++) g_cupti.disable(kinds[j]); /* leave nothing of ours enabled */
            cupti_failed(call, r, 1);
            return;
        }
    }
    g_setup_ns = pi_now();
    atomic_store(&g_next_flush, g_setup_ns + g_flush_ns);
    atexit(at_exit); /* after the ring's exit handler: runs before it */
    __atomic_store_n(&g_clock, CLOCK_ON, __ATOMIC_RELEASE);
}

static void setup(void) {
    pthread_mutex_lock(&g_setup_lock);
    if (g_clock == CLOCK_UNTRIED) setup_locked();
    pthread_mutex_unlock(&g_setup_lock);
    if (g_clock == CLOCK_ON) {
        g_was_on = 1;
        g_noted_pid = pi_pid();
        emit_clock(PI_CLOCK_CUPTI, PI_CLOCK_OK, NULL);
    }
}

/* a NOTE when activities went out unmatched because the pending list hit its bound, or CUPTI got no
 * buffer because the queue was full (its dropped records are counted apart, in the CLOCK events) */
static void note_losses(void) {
    static uint64_t refused_noted;
    char note[400];
    pthread_mutex_lock(&g_parse_lock);
    uint64_t evicted = g_pending.evicted;
    pthread_mutex_unlock(&g_parse_lock);
    if (evicted > g_evicted_noted) {
        snprintf(note, sizeof note, "device clock: %llu device records went out unmatched (seq -1): their pairing "
                 "had not come while %d other unpaired records waited (the bound)",
                 (unsigned long long)evicted, PI_GPU_PENDING_MAX);
        g_evicted_noted = evicted;
        pi_emit(PI_OP_NOTE, 0, 0, 0, 0, 0, pi_intern(note), 0);
    }
    uint64_t refused = atomic_load(&g_refused);
    if (refused > refused_noted) {
        snprintf(note, sizeof note, "device clock: CUPTI got no buffer %llu times: %d buffers were waiting to be "
                 "parsed (the bound); the records it dropped are counted", (unsigned long long)refused, g_queue_cap);
        refused_noted = refused;
        pi_emit(PI_OP_NOTE, 0, 0, 0, 0, 0, pi_intern(note), 0);
    }
}

/* measure_offset the clocks again, then hand CUPTI's records over; flag: 0 or FLUSH_FORCED */
static void flush(uint32_t flag, int final) {
    int64_t off = 0;
    uint64_t err;
    if (measure_offset(final ? ALIGN_TRIES : 8, &off, &err) == PI_CUPTI_SUCCESS) {
        /* a much worse pair (a preemption between the reads) does not move the model */
        uint64_t best = atomic_load(&g_err);
        if (err <= 2 * best + 1000) {
            pthread_mutex_lock(&g_parse_lock);
            clock_model_add(off);
            pthread_mutex_unlock(&g_parse_lock);
            if (err > best) atomic_store(&g_err, err);
        }
    }
    drain_queue(); /* the flush's buffers queue behind the ones waiting */
    pi_CUptiResult r = g_cupti.flush_all(flag);
    if (r != PI_CUPTI_SUCCESS) {
        cupti_failed("cuptiActivityFlushAll", r, 0);
        note_state(); /* the times so far stay: state cupti, the note says where they end */
        return;
    }
    if (final) {
        drain_queue_all();
        pthread_mutex_lock(&g_parse_lock);
        pi_cupti_pending_drain(&g_map, &g_pending, emit_gpu_record, NULL);
        uint64_t nested = g_map.nested, rt = g_map.api_runtime, drv = g_map.api_driver;
        uint64_t unmatched = g_pending.unmatched + g_pending.evicted;
        pthread_mutex_unlock(&g_parse_lock);
        if (nested || unmatched) { /* with what tells why (were there driver records inside runtime calls?) */
            char note[400];
            snprintf(note, sizeof note, "device clock: %llu runtime API calls joined through the driver call nested "
                     "in them (the shim interposed the driver call only); %llu device records joined to no call; "
                     "CUPTI API records: %llu runtime, %llu driver", (unsigned long long)nested,
                     (unsigned long long)unmatched, (unsigned long long)rt, (unsigned long long)drv);
            pi_emit(PI_OP_NOTE, 0, 0, 0, 0, 0, pi_intern(note), 0);
        }
    } else {
        drain_queue();
    }
    note_losses();
    emit_clock(PI_CLOCK_CUPTI, PI_CLOCK_OK, NULL);
}

static void at_exit(void) {
    if (g_clock != CLOCK_ON || g_owner != getpid() || !pi_active()) return;
    pi_t.depth++;
    if (atomic_load(&g_capturing) > 0) {
        set_off(PI_CLOCK_FAILED, "device clock: the records CUPTI still held at exit were not flushed (a stream "
                "capture was still open)");
        note_state();
    } else {
        t_ticking = 1;
        flush(PI_CUPTI_ACTIVITY_FLAG_FLUSH_FORCED, 1);
        t_ticking = 0;
        __atomic_store_n(&g_clock, CLOCK_OFF, __ATOMIC_RELEASE); /* no CUPTI call after this */
    }
    pi_t.depth--;
}

/* ------------------------------------------------------------------ sharing: another client */
static const uint32_t g_kinds[] = {PI_CUPTI_KIND_CONCURRENT_KERNEL, PI_CUPTI_KIND_MEMCPY, PI_CUPTI_KIND_MEMSET,
                                   PI_CUPTI_KIND_EXTERNAL_CORRELATION, PI_CUPTI_KIND_DRIVER, PI_CUPTI_KIND_RUNTIME};

void pi_gpu_yield(const char *who) {
    char note[900];
    if (__atomic_load_n(&g_clock, __ATOMIC_ACQUIRE) == CLOCK_OFF) return;  /* off already (or handed back) */
    pthread_mutex_lock(&g_setup_lock);
    int s = g_clock;
    if (s == CLOCK_UNTRIED) {
        snprintf(note, sizeof note, "device clock off: CUPTI busy — the program's own CUPTI client (torch.profiler/"
                 "Kineto?) started activity recording before the first kernel (%.300s): CUPTI is left to it, so its "
                 "profile is whole; analyses use the CPU clock", who);
        set_off(PI_CLOCK_BUSY, note);
    } else if (s == CLOCK_ON && g_owner == getpid()) {
        /* no new push or flush from here on; everything CUPTI holds for us goes into the trace first */
        __atomic_store_n(&g_clock, CLOCK_OFF, __ATOMIC_RELEASE);
        int depth = pi_t.depth++;
        uint64_t at = pi_now();
        int ticking = t_ticking;
        t_ticking = 1;
        if (atomic_load(&g_capturing) == 0) flush(PI_CUPTI_ACTIVITY_FLAG_FLUSH_FORCED, 1);
        t_ticking = ticking;
        for (unsigned i = 0; i < sizeof g_kinds / sizeof g_kinds[0]; i++) g_cupti.disable(g_kinds[i]);
        snprintf(note, sizeof note, "device clock stopped: the program's own CUPTI client (torch.profiler/Kineto?) "
                 "started (%.300s) after %.3f s of device times; CUPTI was handed back to it, so its profile is whole; "
                 "device times end here", who, (double)(at - g_setup_ns) / 1e9);
        set_off(PI_CLOCK_BUSY, note);
        pi_t.depth = depth;
        note_state();
    } else if (s == CLOCK_ON) {
        set_off(PI_CLOCK_FORKED, "device clock off: a fork() child (CUPTI was set up by the parent process, whose "
                "state a child cannot use); analyses use the CPU clock");
    }
    pthread_mutex_unlock(&g_setup_lock);
}

/* ------------------------------------------------------------------ the call path */
int pi_gpu_ready(void) {
    int s = __atomic_load_n(&g_clock, __ATOMIC_ACQUIRE);
    if (PI_LIKELY(s == CLOCK_ON)) return 1;
    if (s == CLOCK_UNTRIED && atomic_load_explicit(&g_capturing, memory_order_relaxed) == 0) setup();
    if (g_clock == CLOCK_ON) return 1;
    if (g_clock == CLOCK_OFF) note_state();
    return 0;
}

int pi_gpu_push(uint64_t seq) {
    t_holds_ticket = 1; /* this thread holds an uncommitted ticket until pi_gpu_tick */
    if (PI_UNLIKELY(g_clock != CLOCK_ON) || atomic_load_explicit(&g_capturing, memory_order_relaxed) > 0) return 0;
    pi_CUptiResult r = g_cupti.push_external_id(PI_GPU_CORR_KIND, seq);
    if (PI_UNLIKELY(r != PI_CUPTI_SUCCESS)) {
        cupti_failed("cuptiActivityPushExternalCorrelationId", r, 0); /* noted by pi_gpu_tick */
        return 0;
    }
    return 1;
}

void pi_gpu_pop(void) {
    uint64_t last = 0;
    pi_CUptiResult r = g_cupti.pop_external_id(PI_GPU_CORR_KIND, &last);
    if (PI_UNLIKELY(r != PI_CUPTI_SUCCESS) && g_clock == CLOCK_ON) cupti_failed("cuptiActivityPopExternalCorrelationId", r, 0);
}

void pi_gpu_tick(uint64_t now) {
    t_holds_ticket = 0;
    int s = g_clock;
    if (PI_UNLIKELY(s != CLOCK_ON)) {
        if (s == CLOCK_OFF) note_state();
        return;
    }
    if (PI_UNLIKELY(g_queued)) {
        t_ticking = 1;
        drain_queue();
        t_ticking = 0;
    }
    uint64_t due = atomic_load_explicit(&g_next_flush, memory_order_relaxed);
    if (PI_LIKELY(now < due) || atomic_load_explicit(&g_capturing, memory_order_relaxed) > 0) return;
    if (!atomic_compare_exchange_strong(&g_next_flush, &due, now + g_flush_ns)) return; /* another thread does it */
    t_ticking = 1;
    flush(0, 0);
    t_ticking = 0;
}

void pi_gpu_capture(int delta) {
    if (delta > 0) {
        atomic_fetch_add(&g_capturing, 1);
        return;
    }
    int c = atomic_load(&g_capturing);
    while (c > 0 && !atomic_compare_exchange_weak(&g_capturing, &c, c - 1)) {
    }
}

int pi_gpu_capturing(void) { return atomic_load(&g_capturing) > 0; }

void pi_gpu_atfork_child(void) {
    pthread_mutex_init(&g_setup_lock, NULL);
    pthread_mutex_init(&g_parse_lock, NULL);
    pthread_mutex_init(&g_pool_lock, NULL);
    atomic_store(&g_capturing, 0); /* captures belong to the parent's threads */
    g_queued = 0;
    g_queue_head = 0;
    g_draining = 0;
    g_outstanding = 0;
    t_holds_ticket = 0;
    int was = g_clock == CLOCK_ON || g_was_on;
    g_was_on = 0;
    if (was)
        set_off(PI_CLOCK_FORKED, "device clock off: a fork() child (CUPTI was set up by the parent process, whose "
                "state a child cannot use); analyses use the CPU clock");
    g_pending.n = 0;
}
