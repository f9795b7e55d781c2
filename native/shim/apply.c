/*
 * apply.c — serving a program's allocations from a planned arena
 * (`pyinterpose run --apply plan.json`, docs/apply.md).
 *
 * The plan.  `pyinterpose run` digests plan.json into a small binary file and names it in
 * $PYINTERPOSE_APPLY; the shim maps it read-only at its first allocation request (never at load):
 *
 *   header (128 bytes)   magic "PYIPLAN1", version, flags (bit 0: iterations are pyinterpose.mark_step()
 *                        markers), capacity, n_keys, n_slots, anchor (size, site) — the first request
 *                        of the planned iteration —, requests of one iteration, and the number of
 *                        requests after which, with no complete iteration seen, the plan is refused
 *   keys[n_keys]         (size, site, first slot, count, persistent), sorted by (size, site, !persistent)
 *   slots[n_slots]       (offset, size, alt) in the arena; alt: 1 + the index of an alternate slot for a
 *                        request whose block outlives its iteration (the next one's is served there)
 *
 * A request is known by its key: (size, site, ordinal), the site being the FNV-1a hash of the basename
 * of the object that called (the owner, as in the trace's blocks), the ordinal its rank among the
 * requests of that (size, site).  Persistent keys (blocks that live across iterations: weights, optimizer
 * state) count ordinals over the process's life; the others count within one iteration.  An iteration
 * begins at each anchor request (or marker).  A known request whose slot is free, whose size fits, and
 * whose range overlaps no live block of the arena (the live intervals are checked every time: two live
 * blocks never overlap, whatever the program does) is served from the arena; anything else falls through
 * to the real allocator and is counted by reason.  The arena is one real allocation, made at the first
 * request served, through the real function of the request's family (cudaMalloc or cuMemAlloc_v2).
 *
 * Frees of arena blocks never reach the real allocator.  A stream-ordered free records an event on its
 * stream; arena memory is handed out on another stream only after a cudaStreamWaitEvent on the latest such
 * event of every stream that freed since (a synchronous request waits for them on the host): see
 * "Stream order" below.  A synchronous free (cudaFree, cuMemFree)
 * synchronises the device, as the real one does.  Nothing is served, and no event is recorded, while the
 * request's stream is being captured into a graph.
 *
 * The plan is refused (nothing served from then on; blocks already served stay valid and are freed
 * normally) when the first complete iteration's requests are mostly unknown, or when no complete
 * iteration came within the plan's limit: another model, other knobs.
 *
 * Records (PI_OP_APPLY), flags an enum pi_apply_record (events.h): ARENA reserved (addr base, size
 * capacity, result of the real call), ITERATION one iteration's counts, REFUSED the plan, LAST counts of
 * the last, unfinished iteration (at exit).  Counts
 * are 32-bit pairs: addr = served | no_key<<32, size = occupied | bigger<<32, stream = capture |
 * overlap<<32, aux = off | other<<32; result = the iteration (-1 before the first).  A status line for
 * `pyinterpose run` goes to $PYINTERPOSE_RING_DIR/apply-<pid> at exit and when the plan is refused.
 *
 * Thread safety: one mutex over the plan state (held for a few hundred instructions, never across a CUDA
 * call); the arena is reserved under a second one.  Fork: a child never uses its parent's arena (CUDA
 * does not survive fork; its hooks forward everything).  Reentrancy: only the outermost hooked call is
 * served (the runtime's own driver calls are not).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shim.h"
#include "site.h"

#define PLAN_MAGIC 0x314e414c50495950ull /* "PYIPLAN1" little endian */
#define PLAN_VERSION 1
#define PLAN_MARKERS 1u
#define PLAN_NO_SITES 2u /* the trace had no call sites: every request's site is the hash of "" */

typedef struct plan_hdr {
    uint64_t magic;
    uint32_t version, flags;
    uint64_t capacity, n_keys, n_slots;
    uint64_t anchor_size, anchor_site;
    uint64_t iter_requests, judge_after;
    uint64_t reserved[7];
} plan_hdr;
typedef struct plan_key { uint64_t size, site; uint32_t first, count, persistent, pad; } plan_key;
/* alt: 1 + its alternate, 0 none; mode: SLOT_ARENA, SLOT_REAL (the program's own allocator, by plan), or
 * SLOT_MANAGED + i (swap.c's managed request i) */
typedef struct plan_slot { uint64_t offset, size, alt, mode; } plan_slot;
enum { SLOT_ARENA = 0, SLOT_REAL = 1, SLOT_MANAGED = 2 };
_Static_assert(sizeof(plan_hdr) == 128, "plan header");
_Static_assert(sizeof(plan_key) == 32, "plan key");
_Static_assert(sizeof(plan_slot) == 32, "plan slot");

enum { ST_NONE = 0, ST_ARMED = 1, ST_REFUSED = 2 };
enum { C_SERVED, R_NOKEY, R_OCCUPIED, R_BIGGER, R_CAPTURE, R_OVERLAP, R_OFF, R_OTHER, C_N };
static const char *const C_NAME[C_N] = {"served", "no_key", "occupied", "bigger", "capture", "overlap", "off",
                                        "other"};

typedef struct slot_rt { uint8_t live, retired; } slot_rt;

/* Stream order.  The plan hands one address range to different slots at different times, so a block
 * freed on stream A may share bytes with any block handed out later.  Each stream that frees arena memory
 * asynchronously has one event, recorded at each such free (generation + 1); before a block is handed out
 * on stream B, B waits for the latest record of every other stream it has not waited for since (a
 * synchronous request waits on the host).  Waiting on the latest record covers every earlier free of that
 * stream (stream order).  A synchronous free synchronises the device: everything before it is done. */
#define MAX_STREAMS 32
typedef struct ev_stream {
    uint64_t key;     /* the stream handle; the per-thread default stream (2) also carries the thread id */
    uint64_t handle;
    void *ev;
    int fam;
    uint64_t gen;     /* records made */
} ev_stream;
static pthread_mutex_t g_ev_lock = PTHREAD_MUTEX_INITIALIZER;
static ev_stream g_evs[MAX_STREAMS];
static int g_nevs;
static uint64_t g_waited[MAX_STREAMS + 1][MAX_STREAMS]; /* [waiter][freer]: generation waited; row MAX: host */
typedef struct live_iv { uint64_t off, end; uint32_t slot; } live_iv;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_arena_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile int g_loaded;            /* the environment was read (plan mapped or none) */
static volatile int g_state;             /* ST_* */
static const plan_hdr *g_plan;
static const plan_key *g_keys;
static const plan_slot *g_slots;
static uint32_t *g_ord;                  /* per key: next ordinal */
static uint64_t *g_ord_epoch;            /* per key: iteration its ordinal counts in */
static slot_rt *g_srt;
static live_iv *g_live;
static uint32_t g_nlive, g_live_cap;    /* live intervals: the plan's slots, then up to 4096 placed blocks */
static volatile uint64_t g_base;         /* arena base, 0 = not reserved */
static int g_arena_device = -1;          /* the device the arena is on */
static int g_arena_failed;
static int64_t g_iter = -1;              /* current iteration (-1: before the first boundary) */
static uint32_t g_cnt[C_N];              /* counts of the current iteration */
static uint64_t g_tot[C_N];              /* counts of the whole run */
static uint64_t g_iter_req, g_iter_known, g_iter_foreign; /* foreign: a (size, site) the plan never has */
static uint64_t g_requests, g_foreign;   /* requests seen, and those of a (size, site) the plan lacks */
static uint64_t g_placed;                /* warm-up requests served off their planned slot (place_locked) */
static int g_judged;
static char g_refusal[256];

static void kept_ranges(const plan_hdr *h, const plan_key *k, const plan_slot *s);

static inline void lock(void) { pthread_mutex_lock(&g_lock); }
static inline void unlock(void) { pthread_mutex_unlock(&g_lock); }

/* ------------------------------------------------------------------ real CUDA helpers */
typedef int (*ev_create_fn)(void **, unsigned);
typedef int (*ev_record_fn)(void *, uint64_t);
typedef int (*wait_fn)(uint64_t, void *, unsigned);
typedef int (*ev_sync_fn)(void *);
typedef int (*capturing_fn)(uint64_t, int *);
typedef int (*sync_fn)(void);
typedef int (*alloc_fn)(void *, size_t);

/* The real functions apply.c calls besides the hooked ones, by family (0: runtime, found near the real
 * cudaMalloc; 1: driver, near cuMemAlloc_v2), looked up once (a lookup is a dladdr + dlopen + dlsym). */
enum { F_CAPTURING, F_WAIT, F_EV_SYNC, F_EV_CREATE, F_EV_RECORD, F_SYNC, F_GETDEV, F_N };
static const char *const F_NAME[2][F_N] = {
    {"cudaStreamIsCapturing", "cudaStreamWaitEvent", "cudaEventSynchronize", "cudaEventCreateWithFlags",
     "cudaEventRecord", "cudaDeviceSynchronize", "cudaGetDevice"},
    {"cuStreamIsCapturing", "cuStreamWaitEvent", "cuEventSynchronize", "cuEventCreate", "cuEventRecord",
     "cuCtxSynchronize", "cuCtxGetDevice"}};
static void *g_fn[2][F_N];
static int g_fn_done[2][F_N];

static void *near_fn(int fam, int which) {
    if (PI_LIKELY(__atomic_load_n(&g_fn_done[fam][which], __ATOMIC_ACQUIRE))) return g_fn[fam][which];
    void *known = pi_real(fam == 0 ? PI_API_cudaMalloc : PI_API_cuMemAlloc_v2);
    void *f = pi_sym_near(known, F_NAME[fam][which]);
    g_fn[fam][which] = f;
    if (f || known) __atomic_store_n(&g_fn_done[fam][which], 1, __ATOMIC_RELEASE);
    return f;
}

static uint64_t stream_of(uint64_t s, int ptsz) { return (ptsz && s == 0) ? 2 /* per-thread */ : s; }
static uint64_t stream_key(uint64_t s) { return s == 2 ? 2 | (uint64_t)pi_tid() << 8 : s; }

typedef int (*getdev_fn)(int *);
/* the calling thread's current device (-1 unknown) */
static int current_device(int fam) {
    getdev_fn f = (getdev_fn)near_fn(fam, F_GETDEV);
    int d = -1;
    if (!f || f(&d) != 0) return -1;
    return d;
}

static int capturing(int fam, uint64_t stream) {
    capturing_fn f = (capturing_fn)near_fn(fam, F_CAPTURING);
    if (!f) return 0;
    int st = 0;
    if (f(stream, &st) != 0) return 0;
    return st != 0;
}

/* ------------------------------------------------------------------ plan loading */
static void note(const char *fmt, const char *a, unsigned long long b) {
    char text[400];
    snprintf(text, sizeof text, fmt, a, b);
    pi_note(text);
}

static int load_plan(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        note("apply: cannot open the plan %s (errno %llu): serving nothing", path, (unsigned long long)errno);
        return -1;
    }
    struct stat st;
    void *m = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof(plan_hdr))
        m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        note("apply: cannot map the plan %s (%llu bytes): serving nothing", path, (unsigned long long)st.st_size);
        return -1;
    }
    const plan_hdr *h = m;
    uint64_t need = sizeof(plan_hdr) + h->n_keys * sizeof(plan_key) + h->n_slots * sizeof(plan_slot);
    uint64_t swap_bytes = h->reserved[0]; /* swap.c's section, after the slots */
    int ok = h->magic == PLAN_MAGIC && h->version == PLAN_VERSION && h->n_keys < (1u << 26) &&
             h->n_slots < (1u << 26) && swap_bytes < (1ull << 32) && need + swap_bytes == (uint64_t)st.st_size;
    const plan_key *k = (const plan_key *)(h + 1);
    const plan_slot *s = (const plan_slot *)(k + (ok ? h->n_keys : 0));
    for (uint64_t i = 0; ok && i < h->n_keys; i++)
        ok = k[i].count > 0 && (uint64_t)k[i].first + k[i].count <= h->n_slots;
    for (uint64_t i = 0; ok && i < h->n_slots; i++)
        ok = s[i].alt <= h->n_slots && s[i].alt != i + 1 &&
             (s[i].size == 0 || s[i].mode != SLOT_ARENA || /* an ordinal not planned / not in the arena */
              (s[i].offset + s[i].size <= h->capacity && s[i].offset + s[i].size > s[i].offset));
    if (!ok) {
        munmap(m, (size_t)st.st_size);
        note("apply: %s is not a plan this shim understands (format %llu): serving nothing", path, PLAN_VERSION);
        return -1;
    }
    g_ord = calloc(h->n_keys ? h->n_keys : 1, sizeof *g_ord);
    g_ord_epoch = calloc(h->n_keys ? h->n_keys : 1, sizeof *g_ord_epoch);
    g_srt = calloc(h->n_slots ? h->n_slots : 1, sizeof *g_srt);
    g_live_cap = (uint32_t)h->n_slots + 4096;
    g_live = calloc(g_live_cap, sizeof *g_live);
    if (!g_ord || !g_ord_epoch || !g_srt || !g_live) {
        note("apply: out of memory for the plan %s (%llu slots): serving nothing", path, h->n_slots);
        return -1;
    }
    g_plan = h;
    g_keys = k;
    g_slots = s;
    kept_ranges(h, k, s);
    if (swap_bytes) pi_swap_load(s + h->n_slots, swap_bytes, 0);
    return 0;
}

/* Called with g_lock held. */
static void load_once(void) {
    if (g_loaded) return;
    const char *p = getenv("PYINTERPOSE_APPLY");
    if (p && *p && load_plan(p) == 0) g_state = ST_ARMED;
    __atomic_store_n(&g_loaded, 1, __ATOMIC_RELEASE);
}

/* first key index with (size, site), or -1 */
static int64_t find_key(uint64_t size, uint64_t site) {
    int64_t lo = 0, hi = (int64_t)g_plan->n_keys;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        const plan_key *k = &g_keys[mid];
        if (k->size < size || (k->size == size && k->site < site)) lo = mid + 1;
        else hi = mid;
    }
    if (lo < (int64_t)g_plan->n_keys && g_keys[lo].size == size && g_keys[lo].site == site) return lo;
    return -1;
}

/* ------------------------------------------------------------------ live intervals (sorted by offset) */
static uint32_t iv_lower(uint64_t off) { /* first index with .off >= off */
    uint32_t lo = 0, hi = g_nlive;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (g_live[mid].off < off) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}
static int iv_overlaps(uint64_t off, uint64_t end) {
    uint32_t i = iv_lower(off);
    if (i < g_nlive && g_live[i].off < end) return 1;
    if (i > 0 && g_live[i - 1].end > off) return 1;
    return 0;
}
static void iv_insert(uint64_t off, uint64_t end, uint32_t slot) {
    uint32_t i = iv_lower(off);
    memmove(&g_live[i + 1], &g_live[i], (g_nlive - i) * sizeof *g_live);
    g_live[i] = (live_iv){off, end, slot};
    g_nlive++;
}
static void iv_remove_at(uint32_t i) {
    memmove(&g_live[i], &g_live[i + 1], (g_nlive - i - 1) * sizeof *g_live);
    g_nlive--;
}
static int64_t iv_find(uint64_t off) {
    uint32_t i = iv_lower(off);
    return i < g_nlive && g_live[i].off == off ? (int64_t)i : -1;
}

/* Warm-up placement.  Until the plan is judged (the end of the first complete iteration) the program's
 * requests differ from the steady iteration the plan was made on (state created lazily, a first step
 * longer than the others): a request its planned slot cannot take (no key, occupied, bigger, overlap) is
 * placed wherever in the arena it overlaps no live block, in the smallest such gap.  The arena is mostly
 * empty then; sent to the real allocator, the block would sit beside the whole arena (measured: +8 % on
 * the replayed ResNet-18 trace, +7 % on the transformer's).  From then on the plan's slots alone: a block
 * put elsewhere in a steady iteration would take another's range.  Returns the offset, or -1.  g_lock held. */
#define WARMUP_ITERATIONS 2 /* placement before the boundary and in the first two complete iterations */
#define SLOT_PLACED UINT32_MAX /* a live interval of a placed block (no slot of the plan) */
static uint64_t *g_kept;                 /* sorted, merged [start, end) pairs: the persistent slots' ranges */
static uint32_t g_nkept;

/* the persistent slots' ranges, merged (at load): a placed block never goes there, or the block that lives
 * across iterations, when it comes, would find its range taken and go elsewhere for good */
static void kept_ranges(const plan_hdr *h, const plan_key *k, const plan_slot *s) {
    uint64_t n = 0;
    for (uint64_t i = 0; i < h->n_keys; i++)
        if (k[i].persistent) n += k[i].count;
    g_kept = calloc(2 * (n ? n : 1), sizeof *g_kept);
    if (!g_kept) return;
    uint32_t m = 0;
    for (uint64_t i = 0; i < h->n_keys; i++)
        for (uint32_t j = 0; k[i].persistent && j < k[i].count; j++) {
            const plan_slot *p = &s[k[i].first + j];
            if (p->size && p->mode == SLOT_ARENA) {
                g_kept[2 * m] = p->offset;
                g_kept[2 * m + 1] = p->offset + p->size;
                m++;
            }
        }
    for (uint32_t i = 1; i < m; i++) /* insertion sort by start: a few hundred ranges, once */
        for (uint32_t j = i; j > 0 && g_kept[2 * j] < g_kept[2 * (j - 1)]; j--) {
            uint64_t a = g_kept[2 * j], b = g_kept[2 * j + 1];
            g_kept[2 * j] = g_kept[2 * (j - 1)];
            g_kept[2 * j + 1] = g_kept[2 * (j - 1) + 1];
            g_kept[2 * (j - 1)] = a;
            g_kept[2 * (j - 1) + 1] = b;
        }
    uint32_t o = 0;
    for (uint32_t i = 0; i < m; i++) {
        if (o && g_kept[2 * i] <= g_kept[2 * o - 1]) {
            if (g_kept[2 * i + 1] > g_kept[2 * o - 1]) g_kept[2 * o - 1] = g_kept[2 * i + 1];
        } else {
            g_kept[2 * o] = g_kept[2 * i];
            g_kept[2 * o + 1] = g_kept[2 * i + 1];
            o++;
        }
    }
    g_nkept = o;
}

static int64_t place_in(uint64_t size, uint32_t nkept) {
    uint64_t need = (size + 511) & ~(uint64_t)511, prev = 0, best = UINT64_MAX;
    int64_t at = -1;
    /* the free ranges: neither live nor kept; both lists sorted by start */
    uint32_t i = 0, j = 0;
    for (;;) {
        uint64_t ls = i < g_nlive ? g_live[i].off : UINT64_MAX, ks = j < nkept ? g_kept[2 * j] : UINT64_MAX;
        uint64_t next = ls < ks ? ls : ks;
        if (next > g_plan->capacity) next = g_plan->capacity;
        prev = (prev + 511) & ~(uint64_t)511; /* every block 512-aligned in the arena, as the plan's slots */
        if (next > prev && next - prev >= need && next - prev < best) {
            best = next - prev;
            at = (int64_t)prev;
        }
        if (next >= g_plan->capacity) break;
        uint64_t end = ls < ks ? g_live[i++].end : g_kept[2 * j++ + 1];
        if (end > prev) prev = end;
    }
    return at;
}

/* outside the persistent slots' ranges, else (a short-lived block of the first iteration, before the state
 * created at its end) anywhere nothing lives */
static int64_t place_locked(uint64_t size) {
    if (g_nlive >= g_live_cap || !g_kept) return -1;
    int64_t at = place_in(size, g_nkept);
    return at >= 0 ? at : place_in(size, 0);
}

/* ------------------------------------------------------------------ records and status */
typedef struct counts { int64_t iter; uint32_t c[C_N]; } counts;

static void emit_counts(enum pi_apply_record kind, const counts *k) {
    if (!pi_active()) return;
    pi_emit(PI_OP_APPLY, 0, (int32_t)k->iter, k->c[C_SERVED] | (uint64_t)k->c[R_NOKEY] << 32,
            k->c[R_OCCUPIED] | (uint64_t)k->c[R_BIGGER] << 32, k->c[R_CAPTURE] | (uint64_t)k->c[R_OVERLAP] << 32,
            k->c[R_OFF] | (uint64_t)k->c[R_OTHER] << 32, (uint16_t)kind);
}

static void write_status(void) {
    const char *dir = getenv("PYINTERPOSE_RING_DIR");
    if (!dir || !*dir || !g_plan) return;
    char path[512], line[1024];
    snprintf(path, sizeof path, "%s/apply-%d", dir, (int)getpid());
    int n = snprintf(line, sizeof line, "pid=%d state=%s capacity=%llu arena=%s iterations=%lld", (int)getpid(),
                     g_state == ST_REFUSED ? "refused" : "armed", (unsigned long long)g_plan->capacity,
                     g_base ? "reserved" : (g_arena_failed ? "failed" : "none"), (long long)(g_iter + 1));
    for (int i = 0; i < C_N && n < (int)sizeof line; i++)
        n += snprintf(line + n, sizeof line - n, " %s=%llu", C_NAME[i], (unsigned long long)g_tot[i]);
    if (n < (int)sizeof line) n += snprintf(line + n, sizeof line - n, " placed=%llu", (unsigned long long)g_placed);
    if (n < (int)sizeof line) n += pi_swap_status(line + n, (int)sizeof line - n);
    if (g_refusal[0] && n < (int)sizeof line) n += snprintf(line + n, sizeof line - n, "\treason=%s", g_refusal);
    if (n >= (int)sizeof line) n = (int)sizeof line - 1;
    line[n++] = '\n';
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return;
    ssize_t w = write(fd, line, (size_t)n);
    (void)w;
    close(fd);
}

/* g_lock held: count one request in the current iteration */
static inline void count(int what) {
    g_cnt[what]++;
    g_tot[what]++;
}

/* g_lock held: refuse the plan (serve nothing from now on) */
static void refuse_locked(const char *why) {
    g_state = ST_REFUSED;
    snprintf(g_refusal, sizeof g_refusal, "%s", why);
}

/* g_lock held: a new iteration begins; the finished one's counts go to *out (returns 1 when there are some),
 * and the plan is judged at the end of the first complete iteration. */
static int boundary_locked(counts *out, int *refused_now) {
    int have = 0;
    *refused_now = 0;
    if (g_iter >= 0 || g_cnt[C_SERVED] || g_iter_req) {
        out->iter = g_iter;
        memcpy(out->c, g_cnt, sizeof g_cnt);
        have = 1;
    }
    if (g_iter >= 0 && !g_judged && g_state == ST_ARMED) {
        g_judged = 1;
        /* another program: most of its requests are of sizes and sites the plan does not have, or most of
         * the plan's requests did not come (extra requests of the plan's own kinds are noise, not this) */
        if (g_iter_foreign * 2 > g_iter_req || g_iter_known * 2 < g_plan->iter_requests) {
            char why[240];
            snprintf(why, sizeof why, "the first iteration's requests do not match the plan: %llu of %llu of a size "
                     "and call site the plan does not have, %llu of the plan's %llu found",
                     (unsigned long long)g_iter_foreign, (unsigned long long)g_iter_req,
                     (unsigned long long)g_iter_known, (unsigned long long)g_plan->iter_requests);
            refuse_locked(why);
            *refused_now = 1;
        }
    }
    g_iter++;
    memset(g_cnt, 0, sizeof g_cnt);
    g_iter_req = g_iter_known = g_iter_foreign = 0;
    return have;
}

static void after_boundary(int have, const counts *c, int refused_now) {
    if (have) emit_counts(PI_APPLY_ITERATION, c);
    if (refused_now) {
        char text[400];
        snprintf(text, sizeof text, "apply: plan refused, serving nothing from now on: %s", g_refusal);
        pi_note(text);
        if (pi_active()) pi_emit(PI_OP_APPLY, 0, (int32_t)g_iter, 0, 0, 0, 0, PI_APPLY_REFUSED);
        lock();
        write_status();
        unlock();
    }
}

/* ------------------------------------------------------------------ the arena */
static uint64_t arena(int fam, int api) {
    uint64_t b = __atomic_load_n(&g_base, __ATOMIC_ACQUIRE);
    if (PI_LIKELY(b) || g_arena_failed) return b;
    pthread_mutex_lock(&g_arena_lock);
    if (!g_base && !g_arena_failed) {
        alloc_fn f = (alloc_fn)pi_real(fam == 0 ? PI_API_cudaMalloc : PI_API_cuMemAlloc_v2);
        uint64_t p = 0;
        int r = f ? f(&p, g_plan->capacity) : 500;
        g_arena_device = current_device(fam);
        if (r == 0 && p) __atomic_store_n(&g_base, p, __ATOMIC_RELEASE);
        else g_arena_failed = 1;
        if (pi_active()) pi_emit(PI_OP_APPLY, (uint16_t)api, r, p, g_plan->capacity, 0, 0, PI_APPLY_ARENA);
        if (g_arena_failed) {
            char text[200];
            snprintf(text, sizeof text, "apply: cannot reserve the arena (%llu bytes): error %d; serving nothing",
                     (unsigned long long)g_plan->capacity, r);
            pi_note(text);
        }
    }
    pthread_mutex_unlock(&g_arena_lock);
    return g_base;
}

int pi_apply_has_arena(void) { return __atomic_load_n(&g_base, __ATOMIC_RELAXED) != 0 || pi_swap_active(); }

/* ------------------------------------------------------------------ stream order */
/* g_ev_lock held: the table row of stream key k, created (with its event) when asked to; -1 none */
static int ev_row(int fam, uint64_t handle, uint64_t k, int create) {
    for (int i = 0; i < g_nevs; i++)
        if (g_evs[i].key == k) return i;
    if (!create || g_nevs == MAX_STREAMS) return -1;
    ev_create_fn c = (ev_create_fn)near_fn(fam, F_EV_CREATE);
    void *ev = NULL;
    if (!c || c(&ev, 2 /* disable timing */) != 0 || !ev) return -1;
    g_evs[g_nevs] = (ev_stream){k, handle, ev, fam, 0};
    return g_nevs++;
}

/* an asynchronous free of arena memory on stream st: 0, or -1 when it could not be recorded */
static int record_free(int fam, uint64_t st) {
    pthread_mutex_lock(&g_ev_lock);
    int i = ev_row(fam, st, stream_key(st), 1);
    int rc = -1;
    if (i >= 0) {
        ev_record_fn rec = (ev_record_fn)near_fn(g_evs[i].fam, F_EV_RECORD);
        if (rec && rec(g_evs[i].ev, st) == 0) {
            g_evs[i].gen++;
            rc = 0;
        }
    }
    pthread_mutex_unlock(&g_ev_lock);
    return rc;
}

/* before a block is handed out on stream st (or, !async, to the host): wait for other streams' frees */
static int wait_for_frees(int fam, int async, uint64_t st) {
    int rc = 0;
    pthread_mutex_lock(&g_ev_lock);
    if (g_nevs) {
        uint64_t k = stream_key(st);
        int me = async ? ev_row(fam, st, k, 1) : -1;  /* a row to remember what it waited for */
        int row = async ? (me >= 0 ? me : -1) : MAX_STREAMS;
        for (int j = 0; j < g_nevs && rc == 0; j++) {
            ev_stream *e = &g_evs[j];
            if (j == me || e->gen == 0) continue;            /* own stream: stream order holds */
            uint64_t seen = row >= 0 ? g_waited[row][j] : 0;
            if (seen == e->gen) continue;
            if (async) {
                wait_fn w = (wait_fn)near_fn(e->fam, F_WAIT);
                rc = w && w(st, e->ev, 0) == 0 ? 0 : -1;
            } else {
                ev_sync_fn w = (ev_sync_fn)near_fn(e->fam, F_EV_SYNC);
                rc = w && w(e->ev) == 0 ? 0 : -1;
            }
            if (rc == 0 && row >= 0) g_waited[row][j] = e->gen;
        }
    }
    pthread_mutex_unlock(&g_ev_lock);
    return rc;
}

/* the device was synchronised: every recorded free is complete for everyone */
static void device_synced(void) {
    pthread_mutex_lock(&g_ev_lock);
    for (int j = 0; j < g_nevs; j++)
        for (int r = 0; r <= MAX_STREAMS; r++) g_waited[r][j] = g_evs[j].gen;
    pthread_mutex_unlock(&g_ev_lock);
}

/* ------------------------------------------------------------------ serve */
/* undo a slot taken in pi_apply_serve: g_lock NOT held */
static void give_back_slot(uint32_t s, uint64_t off, int why) {
    lock();
    int64_t i = iv_find(off);
    if (i >= 0) iv_remove_at((uint32_t)i);
    if (s != SLOT_PLACED) g_srt[s].live = 0;
    else g_placed--;
    count(why);
    unlock();
}

int pi_apply_serve(int api, void *pp, uint64_t size, uint64_t stream, int fam, int ptsz, int async,
                   uint64_t caller, int *result) {
    if (PI_LIKELY(g_loaded) && g_state == ST_NONE) return 0;
    if (!pp || size == 0) return 0;
    counts fin;
    int have = 0, refused_now = 0, crossed = 0;
    int64_t slot = -1, finished = -1;
    lock();
    load_once();
    if (g_state == ST_NONE) {
        unlock();
        return 0;
    }
    uint64_t site = pi_site_owner_hash((g_plan->flags & PLAN_NO_SITES) ? 0 : caller);
    g_requests++;
    if (find_key(size, site) < 0) g_foreign++;
    if (!(g_plan->flags & PLAN_MARKERS) && size == g_plan->anchor_size && site == g_plan->anchor_site) {
        finished = g_iter;
        crossed = 1;
        have = boundary_locked(&fin, &refused_now);
    }
    g_iter_req++;
    /* requests of the plan's own kinds never refuse it (other threads make them too): only foreign ones */
    if (g_state == ST_ARMED && !g_judged && g_foreign > g_plan->judge_after) {
        char why[200];
        snprintf(why, sizeof why, "no complete iteration within %llu requests of sizes and call sites the plan does "
                 "not have (the plan's loop never came)", (unsigned long long)g_plan->judge_after);
        refuse_locked(why);
        g_judged = refused_now = 1;
    }
    int why = R_NOKEY;
    if (g_state != ST_ARMED) {
        why = R_OFF;
    } else {
        int64_t k = find_key(size, site);
        if (k < 0) g_iter_foreign++;
        if (k >= 0 && g_keys[k].persistent) { /* process-life ordinals first, then the iteration's */
            if (g_ord[k] < g_keys[k].count) {
                uint32_t o = g_keys[k].first + g_ord[k]++;
                if (g_slots[o].size) slot = o;
            }
            if (slot < 0)
                k = (k + 1 < (int64_t)g_plan->n_keys && g_keys[k + 1].size == size && g_keys[k + 1].site == site)
                        ? k + 1 : -1;
        }
        if (slot < 0 && k >= 0 && !g_keys[k].persistent) { /* before the first boundary too: epoch 0 */
            if (g_ord_epoch[k] != (uint64_t)g_iter + 1) {
                g_ord_epoch[k] = (uint64_t)g_iter + 1;
                g_ord[k] = 0;
            }
            if (g_ord[k] < g_keys[k].count) slot = g_keys[k].first + g_ord[k]++;
        }
        if (slot >= 0 && g_slots[slot].mode != SLOT_ARENA) { /* not the arena's: swap.c or the real allocator */
            g_iter_known++;
            uint64_t mode = g_slots[slot].mode;
            unlock();
            if (crossed) pi_swap_boundary(finished);
            if (have || refused_now) after_boundary(have, &fin, refused_now);
            /* never from managed memory into a graph being captured: cuMemAllocManaged is not a call a
             * capture allows, and the graph's memory node belongs to the graph */
            if (mode >= SLOT_MANAGED && g_state == ST_ARMED && !(async && capturing(fam, stream_of(stream, ptsz))) &&
                pi_swap_serve((uint32_t)(mode - SLOT_MANAGED), size, pp, result, current_device(fam),
                              stream_of(stream, ptsz), async)) {
                lock();
                count(C_SERVED);
                unlock();
                return 1;
            }
            pi_swap_count_real();
            return 0;
        }
        if (slot >= 0) {
            g_iter_known++;
            /* its block of the previous iteration still lives there: the alternate slot */
            if ((g_srt[slot].live || g_srt[slot].retired) && g_slots[slot].alt) slot = (int64_t)g_slots[slot].alt - 1;
            const plan_slot *ps = &g_slots[slot];
            if (g_srt[slot].live || g_srt[slot].retired) why = R_OCCUPIED;
            else if (size > ps->size) why = R_BIGGER;
            else if (iv_overlaps(ps->offset, ps->offset + ps->size)) why = R_OVERLAP;
            else why = -1;
            if (why < 0) { /* take it */
                g_srt[slot].live = 1;
                iv_insert(ps->offset, ps->offset + ps->size, (uint32_t)slot);
            } else {
                slot = -1;
            }
        }
    }
    uint64_t off = 0;
    uint32_t sl = 0;
    if (slot >= 0) {
        off = g_slots[slot].offset;
        sl = (uint32_t)slot;
    } else if (g_state == ST_ARMED && g_iter < WARMUP_ITERATIONS &&
               (why == R_OCCUPIED || why == R_BIGGER || why == R_OVERLAP)) {
        int64_t at = place_locked(size);
        if (at >= 0) {
            off = (uint64_t)at;
            sl = SLOT_PLACED;
            iv_insert(off, off + ((size + 511) & ~(uint64_t)511), sl);
            g_placed++;
            slot = 0; /* served: below, at off */
        }
    }
    if (slot < 0) count(why);
    unlock();
    if (crossed) pi_swap_boundary(finished);
    if (have || refused_now) after_boundary(have, &fin, refused_now);
    if (slot < 0) return 0;
    /* outside the lock: the arena, graph capture, the stream order of the slot's last free */
    uint64_t base = arena(fam, api);
    if (!base) {
        give_back_slot(sl, off, R_OTHER);
        return 0;
    }
    if (current_device(fam) != g_arena_device) { /* one arena, on one device */
        give_back_slot(sl, off, R_OTHER);
        return 0;
    }
    uint64_t st = stream_of(stream, ptsz);
    if (async && capturing(fam, st)) {
        give_back_slot(sl, off, R_CAPTURE);
        return 0;
    }
    if (wait_for_frees(fam, async, st) != 0) {
        give_back_slot(sl, off, R_OTHER);
        return 0;
    }
    lock();
    count(C_SERVED);
    unlock();
    uint64_t p = base + off;
    memcpy(pp, &p, sizeof p); /* void ** and CUdeviceptr * alike hold 8 bytes */
    *result = 0;
    return 1;
}

/* ------------------------------------------------------------------ free */
int pi_apply_owns(uint64_t p) {
    uint64_t b = __atomic_load_n(&g_base, __ATOMIC_ACQUIRE);
    return (b && p >= b && p - b < g_plan->capacity) || pi_swap_owns(p);
}

int pi_apply_release(uint64_t p, uint64_t stream, int fam, int ptsz, int async, int *result) {
    uint64_t b = __atomic_load_n(&g_base, __ATOMIC_ACQUIRE);
    if (!(b && p >= b && p - b < g_plan->capacity)) /* a managed block of swap.c */
        return pi_swap_release(p, stream_of(stream, ptsz), async, result);
    uint64_t off = p - g_base;
    lock();
    int64_t i = iv_find(off);
    uint32_t s = i >= 0 ? g_live[i].slot : 0;
    unlock();
    if (i < 0) { /* inside the arena but not a live block: what the real free says of a bad pointer */
        *result = 1; /* cudaErrorInvalidValue == CUDA_ERROR_INVALID_VALUE */
        return 1;
    }
    slot_rt *sr = s == SLOT_PLACED ? NULL : &g_srt[s];
    int retire = 0;
    if (async) {
        uint64_t st = stream_of(stream, ptsz);
        if (capturing(fam, st)) retire = 1;               /* freed inside a graph: never handed out again */
        else if (record_free(fam, st) != 0) retire = 1;   /* no event: the range cannot be reused safely */
    } else {
        sync_fn f = (sync_fn)near_fn(fam, F_SYNC);
        if (f && f() == 0) device_synced();
    }
    lock();
    i = iv_find(off);
    if (i >= 0 && !retire) iv_remove_at((uint32_t)i); /* retired: a placed block's range stays taken */
    if (sr && retire) sr->retired = 1;
    if (sr) sr->live = 0;
    unlock();
    *result = 0;
    return 1;
}

/* ------------------------------------------------------------------ markers, exit, fork */
void pi_apply_mark(void) {
    if (!g_loaded || g_state == ST_NONE || !(g_plan->flags & PLAN_MARKERS)) return;
    counts fin;
    int refused_now;
    lock();
    int64_t finished = g_iter;
    int have = boundary_locked(&fin, &refused_now);
    unlock();
    pi_swap_boundary(finished);
    after_boundary(have, &fin, refused_now);
}

void pi_apply_exit(void) {
    if (!g_loaded || g_state == ST_NONE) return;
    lock();
    counts c = {g_iter, {0}};
    memcpy(c.c, g_cnt, sizeof g_cnt);
    write_status();
    unlock();
    emit_counts(PI_APPLY_LAST, &c);
    pi_swap_exit(c.iter);
}

void pi_apply_atfork_child(void) {
    /* the child's CUDA is not its parent's: nothing is served, nothing of the arena is known */
    pthread_mutex_init(&g_lock, NULL);
    pthread_mutex_init(&g_arena_lock, NULL);
    pthread_mutex_init(&g_ev_lock, NULL);
    g_nevs = 0;
    __atomic_store_n(&g_base, 0, __ATOMIC_RELEASE);
    g_state = ST_NONE;
    g_loaded = 1;
    pi_swap_atfork_child();
}
