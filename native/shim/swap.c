/*
 * swap.c — the swap engine beside apply.c's arena (issue 31; docs/swap-run.md).
 *
 * A plan made with `pyinterpose plan --swap` names requests to serve from managed memory and, per
 * swap, three launches keyed as (FNV-1a of the kernel name, ordinal of that kernel's launches within
 * the iteration): the one after which the block leaves for the host, the one after which it is sent
 * back, the one before which it must be back.  apply.c finds the requests (its keys and ordinals) and
 * calls pi_swap_serve for those; hooks.c calls pi_swap_launch before and after every launch.
 *
 * The mechanism is UVM: a swapped request is served by cuMemAllocManaged (its device as the preferred
 * location), moved with cuMemPrefetchAsync on one of two copy streams of our own (non-blocking: one per
 * direction), ordered with events only:
 *   out:  event on the launch's stream -> the D2H stream waits for it -> prefetch to the host -> event;
 *   in:   event on the launch's stream -> the H2D stream waits for it and for the out event -> prefetch
 *         to the device -> event;
 *   use:  a launch whose arguments name the block waits (cuStreamWaitEvent on its own stream) for the in
 *         event.  A block still out when a launch names it is sent back right then, and that launch waits
 *         for it: counted `late` when the plan expected that launch, `unforeseen` when it did not.
 * Nothing waits on the host on the program's threads.  Each managed request has one buffer for the run
 * (its blocks come back at the same address every iteration); a free of its block discards the pages in
 * stream order (cuMemDiscardBatchAsync, CUDA 12.8: after the block's last transfer, where the freeing
 * stream gets to the free; a synchronous free synchronises the device first, as the real one does).
 * Without that call, a thread of ours (started at the first such free) waits for the free's event and
 * the block's last transfer, then frees the buffer, and the next block gets a new one.
 *
 * The plan's section (appended to apply.c's digest; header words reserved[0..2]):
 *   managed[n_managed]: { u64 size, u64 flags }
 *   actions[n_actions]: { u64 kname, u32 ordinal, u16 kind (0 out after, 1 in after, 2 back before),
 *                         u16 pad, u32 managed, u32 swap } sorted by (kname, ordinal)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"
#include "site.h"

typedef struct sw_managed { uint64_t size, flags; } sw_managed;
typedef struct sw_action { uint64_t kname; uint32_t ordinal; uint16_t kind, pad; uint32_t managed, swap; } sw_action;
_Static_assert(sizeof(sw_managed) == 16, "managed entry");
_Static_assert(sizeof(sw_action) == 24, "action entry");
enum { A_OUT = 0, A_IN = 1, A_BEFORE = 2 };
enum { S_NONE = 0, S_RESIDENT, S_OUT, S_IN };
/* K_REFUSED (requests refused managed memory for lack of free device memory) is in the status only */
enum { K_OUT, K_IN, K_LATE, K_UNFORESEEN, K_WAITS, K_MANAGED, K_REAL, K_REFUSED, K_NOROOM, K_POPULATED, K_N };
static const char *const K_NAME[K_N] = {"swap_out", "swap_in", "swap_late", "swap_unforeseen", "swap_waits",
                                        "swap_managed", "swap_real", "swap_refused", "swap_no_room",
                                        "swap_populated"};

typedef struct m_rt {
    uint64_t ptr;                  /* the request's managed buffer, kept across iterations */
    int live;                      /* a block of the program occupies it */
    uint64_t free_stream;          /* where its last block was freed (discarded) */
    void *ev_free;                 /* recorded after that discard */
    int state;
    void *ev_dep, *ev_out, *ev_in; /* created at the block's first transfer, recorded again each time */
    void *ev_in_dep;               /* the launch a planned swap-in follows, on the device */
    int out_pending, in_pending;   /* a transfer recorded that a free must wait for */
    int fresh;                     /* served, no launch has named it yet: its pages are not populated */
} m_rt;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static const sw_managed *g_m;
static const sw_action *g_a;
static uint32_t g_nm, g_na;
static m_rt *g_rt;
static int g_device;
static void *g_d2h, *g_h2d; /* our copy streams */
static int g_streams_failed;
static uint64_t g_cnt[K_N], g_tot[K_N];

/* launch ordinals of the current iteration, per kernel name hash (open addressing, epoch-tagged) */
#define ORD_TAB 8192
typedef struct ord_e { uint64_t kname, epoch; uint32_t n; } ord_e;
static ord_e g_ord[ORD_TAB];
static uint64_t g_epoch = 1;
static __thread uint64_t t_kname;
static __thread uint32_t t_ord;
static __thread int t_have;

/* ---------------------------------------------------------------- driver functions */
typedef int (*alloc_managed_fn)(uint64_t *, size_t, unsigned);
typedef int (*free_fn)(uint64_t);
typedef int (*advise_fn)(uint64_t, size_t, int, int);
typedef struct { int type, id; } mem_loc;
typedef int (*prefetch2_fn)(uint64_t, size_t, mem_loc, unsigned, void *);
typedef int (*prefetch1_fn)(uint64_t, size_t, int, void *);
typedef int (*ev_create_fn)(void **, unsigned);
typedef int (*ev_fn)(void *);
typedef int (*ev_record_fn)(void *, void *);
typedef int (*wait_fn)(void *, void *, unsigned);
typedef int (*stream_create_fn)(void **, unsigned);
typedef int (*sync_fn)(void);
typedef int (*discard_fn)(uint64_t *, size_t *, size_t, unsigned long long, void *);
typedef int (*meminfo_fn)(size_t *, size_t *);
enum { D_ALLOC, D_FREE, D_ADVISE, D_PF2, D_PF1, D_EV_CREATE, D_EV_DESTROY, D_EV_SYNC, D_EV_RECORD, D_WAIT,
       D_STREAM, D_SYNC, D_DISCARD, D_MEMINFO, D_N };
static const char *const D_NAME[D_N] = {"cuMemAllocManaged", "cuMemFree_v2", "cuMemAdvise", "cuMemPrefetchAsync_v2",
                                        "cuMemPrefetchAsync", "cuEventCreate", "cuEventDestroy_v2",
                                        "cuEventSynchronize", "cuEventRecord", "cuStreamWaitEvent",
                                        "cuStreamCreate", "cuCtxSynchronize", "cuMemDiscardBatchAsync",
                                        "cuMemGetInfo_v2"};
static void *g_fn[D_N];
static int g_fn_done;

static void *fn(int which) {
    if (!__atomic_load_n(&g_fn_done, __ATOMIC_ACQUIRE)) {
        void *known = pi_real(PI_API_cuMemAlloc_v2);
        for (int i = 0; i < D_N; i++) g_fn[i] = known ? pi_sym_near(known, D_NAME[i]) : NULL;
        if (!g_fn[D_EV_DESTROY] && known) g_fn[D_EV_DESTROY] = pi_sym_near(known, "cuEventDestroy");
        __atomic_store_n(&g_fn_done, 1, __ATOMIC_RELEASE);
    }
    return g_fn[which];
}

static void *new_event(void) {
    ev_create_fn c = (ev_create_fn)fn(D_EV_CREATE);
    void *ev = NULL;
    if (!c || c(&ev, 2 /* CU_EVENT_DISABLE_TIMING */) != 0) return NULL;
    return ev;
}
static int record(void *ev, void *stream) {
    ev_record_fn r = (ev_record_fn)fn(D_EV_RECORD);
    return ev && r && r(ev, stream) == 0 ? 0 : -1;
}
static int wait_ev(void *stream, void *ev) {
    wait_fn w = (wait_fn)fn(D_WAIT);
    return ev && w && w(stream, ev, 0) == 0 ? 0 : -1;
}
static int prefetch(uint64_t p, uint64_t n, int to_device, void *stream) {
    prefetch2_fn f2 = (prefetch2_fn)fn(D_PF2);
    if (f2) {
        mem_loc loc = {to_device ? 1 /* DEVICE */ : 2 /* HOST */, to_device ? g_device : 0};
        return f2(p, n, loc, 0, stream);
    }
    prefetch1_fn f1 = (prefetch1_fn)fn(D_PF1);
    return f1 ? f1(p, n, to_device ? g_device : -1 /* CU_DEVICE_CPU */, stream) : -1;
}

/* g_lock held: our two copy streams (non-blocking: never ordered with the legacy stream) */
static int copy_streams(void) {
    if (g_d2h && g_h2d) return 0;
    if (g_streams_failed) return -1;
    stream_create_fn c = (stream_create_fn)fn(D_STREAM);
    if (!c || c(&g_d2h, 1) != 0 || c(&g_h2d, 1) != 0) {
        g_streams_failed = 1;
        pi_note("swap: cannot create the copy streams; no block is moved");
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- the plan */
void pi_swap_load(const void *section, uint64_t bytes, int device) {
    const uint64_t *w = section;
    if (!section || bytes < 16) return;
    uint64_t nm = w[0], na = w[1];
    if (16 + nm * sizeof(sw_managed) + na * sizeof(sw_action) > bytes) return;
    g_m = (const sw_managed *)(w + 2);
    g_a = (const sw_action *)(g_m + nm);
    g_rt = calloc(nm ? nm : 1, sizeof *g_rt);
    if (!g_rt) return;
    g_nm = (uint32_t)nm;
    g_na = (uint32_t)na;
    g_device = device;
    if (!pi_access_enabled() && g_na) {
        pi_note("swap: access scanning is off (--no-access): without it the engine cannot see which launch "
                "needs a block, so nothing is swapped (blocks stay resident)");
        g_na = 0;
    }
}

int pi_swap_active(void) { return g_nm != 0; }

/* first action index of (kname, ord), or -1 */
static int64_t find_action(uint64_t kname, uint32_t ord) {
    uint32_t lo = 0, hi = g_na;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        const sw_action *a = &g_a[mid];
        if (a->kname < kname || (a->kname == kname && a->ordinal < ord)) lo = mid + 1;
        else hi = mid;
    }
    return lo < g_na && g_a[lo].kname == kname && g_a[lo].ordinal == ord ? (int64_t)lo : -1;
}

/* g_lock held */
static uint32_t next_ordinal(uint64_t kname) {
    uint32_t i = (uint32_t)(kname * 0x9E3779B97F4A7C15ull >> 51) & (ORD_TAB - 1);
    for (uint32_t k = 0; k < ORD_TAB; k++, i = (i + 1) & (ORD_TAB - 1)) {
        ord_e *e = &g_ord[i];
        if (e->epoch != g_epoch) {
            *e = (ord_e){kname, g_epoch, 1};
            return 0;
        }
        if (e->kname == kname) return e->n++;
    }
    return UINT32_MAX; /* more distinct kernels in one iteration than the table holds: no key */
}

/* ---------------------------------------------------------------- serve and free */
/* Managed memory is never asked for beyond what the device has free (less this headroom): on some
 * systems a managed allocation larger than the free device memory can hang the GPU, not only the
 * program.  Such a request goes to the program's own allocator, and the trace says so once. */
#define SWAP_HEADROOM (64ull << 20)
static int g_refused_noted;

/* g_lock held: the device's free memory (cuMemGetInfo) in *fr; 0 when it cannot be asked */
static int device_free(size_t *fr) {
    meminfo_fn mi = (meminfo_fn)fn(D_MEMINFO);
    size_t tot = 0;
    return mi && mi(fr, &tot) == 0;
}

/* g_lock held: count what the engine turned away (kind k); the trace says why once per kind */
static void turned_away(int k, int *noted, const char *why) {
    g_cnt[k]++;
    g_tot[k]++;
    if (!*noted) {
        *noted = 1;
        pi_note(why);
    }
}

/* g_lock held */
static int managed_fits(uint64_t size) {
    size_t fr = 0;
    if (device_free(&fr) && size + SWAP_HEADROOM <= fr) return 1;
    turned_away(K_REFUSED, &g_refused_noted,
                "swap: a swapped request would need more managed memory than the device has free (or its free "
                "memory is unknown); such requests go to the program's allocator, unswapped");
    return 0;
}

/* g_lock held: a block served from managed memory made resident on the device just before the first launch
 * that names it, on that launch's stream (pi_swap_launch).  A new buffer has no page yet and a discarded one
 * none left: that kernel would populate it page fault by page fault.  On an H100 (PyTorch transformer,
 * 2026-11-28) those first touches were 600 launches taking 684 ms more than without the plan: 0.75 ms for a
 * median 8 MiB block, 30 % of the step.  A prefetch populates in bulk; made at the first launch rather than
 * at the request, the block takes device memory from its first touch, as the plan counts it. */
static void populate(uint32_t m, void *stream) {
    size_t fr = 0;
    if (device_free(&fr) && g_m[m].size > fr) return; /* no room: left to the first touch */
    if (prefetch(g_rt[m].ptr, g_m[m].size, 1, stream) == 0) {
        g_cnt[K_POPULATED]++;
        g_tot[K_POPULATED]++;
    }
}

int pi_swap_serve(uint32_t m, uint64_t size, void *pp, int *result, int device, uint64_t stream, int async) {
    if (m >= g_nm || size > g_m[m].size) return 0;
    if (device >= 0) g_device = device;
    pthread_mutex_lock(&g_lock);
    m_rt *b = &g_rt[m];
    if (b->live) { /* its block of the previous iteration is still live: to the real allocator */
        pthread_mutex_unlock(&g_lock);
        return 0;
    }
    if (!b->ptr) { /* the request's buffer, made once (the address of its blocks never changes in a run) */
        alloc_managed_fn a = (alloc_managed_fn)fn(D_ALLOC);
        uint64_t p = 0;
        if (!a || !managed_fits(g_m[m].size) || a(&p, g_m[m].size, 1 /* CU_MEM_ATTACH_GLOBAL */) != 0 || !p) {
            pthread_mutex_unlock(&g_lock);
            return 0;
        }
        advise_fn adv = (advise_fn)fn(D_ADVISE);
        if (adv) adv(p, g_m[m].size, 3 /* SET_PREFERRED_LOCATION */, g_device);
        b->ptr = p;
    } else if (b->ev_free && (!async || stream != b->free_stream)) {
        /* its last block was discarded on another stream: this one's work comes after that */
        wait_ev((void *)(uintptr_t)(async ? stream : 0), b->ev_free);
    }
    b->live = 1;
    b->state = S_RESIDENT;
    b->out_pending = b->in_pending = 0;
    uint64_t p = b->ptr;
    b->fresh = 1; /* no page on the device: populated before the first launch that names it */
    g_cnt[K_MANAGED]++;
    g_tot[K_MANAGED]++;
    pthread_mutex_unlock(&g_lock);
    memcpy(pp, &p, sizeof p);
    *result = 0;
    return 1;
}

void pi_swap_count_real(void) {
    pthread_mutex_lock(&g_lock);
    g_cnt[K_REAL]++;
    g_tot[K_REAL]++;
    pthread_mutex_unlock(&g_lock);
}

/* g_lock held */
static int64_t managed_of(uint64_t p) {
    for (uint32_t i = 0; i < g_nm; i++)
        if (g_rt[i].live && p >= g_rt[i].ptr && p - g_rt[i].ptr < g_m[i].size) return i;
    return -1;
}

int pi_swap_owns(uint64_t p) {
    if (!g_nm) return 0;
    pthread_mutex_lock(&g_lock);
    int64_t i = managed_of(p);
    int own = i >= 0 && g_rt[i].ptr == p;
    pthread_mutex_unlock(&g_lock);
    return own;
}

/* the thread that frees managed blocks once the device is done with them */
typedef struct reap { uint64_t ptr; void *ev[3]; struct reap *next; } reap;
static pthread_mutex_t g_reap_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_reap_cv = PTHREAD_COND_INITIALIZER;
static reap *g_reap_head, *g_reap_tail;
static int g_reaper;

static void *reaper(void *arg) {
    (void)arg;
    pi_t.depth++; /* our CUDA calls are not the program's */
    for (;;) {
        pthread_mutex_lock(&g_reap_lock);
        while (!g_reap_head) pthread_cond_wait(&g_reap_cv, &g_reap_lock);
        reap *r = g_reap_head;
        g_reap_head = r->next;
        if (!g_reap_head) g_reap_tail = NULL;
        pthread_mutex_unlock(&g_reap_lock);
        ev_fn sync = (ev_fn)fn(D_EV_SYNC), destroy = (ev_fn)fn(D_EV_DESTROY);
        for (int k = 0; k < 3; k++)
            if (r->ev[k] && sync) sync(r->ev[k]);
        ((free_fn)fn(D_FREE))(r->ptr);
        for (int k = 0; k < 3; k++)
            if (r->ev[k] && destroy) destroy(r->ev[k]);
        free(r);
    }
    return NULL;
}

int pi_swap_release(uint64_t p, uint64_t stream, int async, int *result) {
    pthread_mutex_lock(&g_lock);
    int64_t i = managed_of(p);
    if (i < 0 || g_rt[i].ptr != p) {
        pthread_mutex_unlock(&g_lock);
        return 0;
    }
    m_rt *b = &g_rt[i];
    discard_fn dis = (discard_fn)fn(D_DISCARD);
    if (dis) {
        /* stream order: after the block's last transfers, its pages are dropped where the freeing stream
         * gets to the free; the buffer stays for the request's next block */
        uint64_t st = async ? stream : 0;
        if (!async) {
            sync_fn sy = (sync_fn)fn(D_SYNC);
            if (sy) sy();
        }
        if (b->out_pending && b->ev_out) wait_ev((void *)(uintptr_t)st, b->ev_out);
        if (b->in_pending && b->ev_in) wait_ev((void *)(uintptr_t)st, b->ev_in);
        uint64_t p0 = b->ptr;
        size_t n0 = g_m[i].size;
        if (dis(&p0, &n0, 1, 0, (void *)(uintptr_t)st) == 0) {
            if (!b->ev_free) b->ev_free = new_event();
            record(b->ev_free, (void *)(uintptr_t)st);
            b->free_stream = st;
            b->live = 0;
            b->state = S_NONE;
            b->out_pending = b->in_pending = 0;
            pthread_mutex_unlock(&g_lock);
            *result = 0;
            return 1;
        }
    }
    /* no stream-ordered discard (a driver before 12.8): a thread of ours frees the buffer once the device
     * is done with it; the request's next block gets a new one */
    reap *r = calloc(1, sizeof *r);
    int done = 0;
    if (async && r) {
        r->ptr = p;
        r->ev[0] = new_event();
        if (r->ev[0] && record(r->ev[0], (void *)(uintptr_t)stream) == 0) {
            /* the block's last transfers: the reaper waits for them too (events of their own, recorded now
             * on the copy streams after them) */
            if (b->out_pending && g_d2h && (r->ev[1] = new_event())) record(r->ev[1], g_d2h);
            if (b->in_pending && g_h2d && (r->ev[2] = new_event())) record(r->ev[2], g_h2d);
            done = 1;
        }
    }
    b->ptr = 0;
    b->live = 0;
    b->state = S_NONE;
    pthread_mutex_unlock(&g_lock);
    if (done) {
        pthread_mutex_lock(&g_reap_lock);
        if (!g_reaper) {
            pthread_t th;
            pthread_attr_t at;
            pthread_attr_init(&at);
            pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
            g_reaper = pthread_create(&th, &at, reaper, NULL) == 0 ? 1 : -1;
            pthread_attr_destroy(&at);
        }
        if (g_reaper == 1) {
            if (g_reap_tail) g_reap_tail->next = r;
            else g_reap_head = r;
            g_reap_tail = r;
            pthread_cond_signal(&g_reap_cv);
            r = NULL;
        }
        pthread_mutex_unlock(&g_reap_lock);
    }
    if (r) { /* synchronous free (or no event, no thread): the device first, as the real free does */
        sync_fn s = (sync_fn)fn(D_SYNC);
        if (s) s();
        ((free_fn)fn(D_FREE))(p);
        ev_fn destroy = (ev_fn)fn(D_EV_DESTROY);
        for (int k = 0; k < 3; k++)
            if (r->ev[k] && destroy) destroy(r->ev[k]);
        free(r);
    }
    *result = 0;
    return 1;
}

/* ---------------------------------------------------------------- transfers (g_lock held) */
static void send_out(uint32_t m, void *stream) {
    m_rt *b = &g_rt[m];
    if (b->state != S_RESIDENT || copy_streams()) return;
    if (!b->ev_dep) b->ev_dep = new_event();
    if (!b->ev_out) b->ev_out = new_event();
    if (record(b->ev_dep, stream) || wait_ev(g_d2h, b->ev_dep)) return;
    if (prefetch(b->ptr, g_m[m].size, 0, g_d2h) != 0 || record(b->ev_out, g_d2h)) return;
    b->state = S_OUT;
    b->out_pending = 1;
    g_cnt[K_OUT]++;
    g_tot[K_OUT]++;
}

static int g_noroom_noted;
/* g_lock held: the device has room for a block of `size` coming back (cuMemGetInfo: the driver counts
 * resident managed bytes as used memory); unknown: yes.  Without room the driver would evict other managed
 * memory (least recently used first: often a block the program needs before this one) to make it; left on
 * the host, the block comes back when a launch names it (sent then if there is room, else by the launch's
 * page fault).  Measured on simcuda (ResNet-18 replay, devices of 680-720 MB, docs/swap-run.md): half the
 * faults and evictions, 5 % less stall. */
static int room_for(uint64_t size) {
    size_t fr = 0;
    if (!device_free(&fr) || size <= fr) return 1;
    turned_away(K_NOROOM, &g_noroom_noted,
                "swap: the device had no room for a swapped block coming back; it was left on the host to be "
                "brought back by the launch that needs it (a page fault)");
    return 0;
}

/* after_stream: the planned swap-in follows the launch just made there, on the device (the host runs ahead
 * of the device: sent at once it would come back too early); NULL: at once (a launch is waiting for it) */
static void bring_back(uint32_t m, void *after_stream, int after) {
    m_rt *b = &g_rt[m];
    if (b->state != S_OUT || copy_streams()) return;
    if (!room_for(g_m[m].size)) {
        if (!after) b->state = S_RESIDENT; /* a launch needs it now: left to the fault */
        return;
    }
    if (!b->ev_in) b->ev_in = new_event();
    if (after && !b->ev_in_dep) b->ev_in_dep = new_event();
    if (after && (record(b->ev_in_dep, after_stream) || wait_ev(g_h2d, b->ev_in_dep))) return;
    if (wait_ev(g_h2d, b->ev_out) || prefetch(b->ptr, g_m[m].size, 1, g_h2d) != 0 || record(b->ev_in, g_h2d)) {
        /* could not be ordered: leave it to the fault (UVM still brings it back, slowly) */
        b->state = S_RESIDENT;
        return;
    }
    b->state = S_IN;
    b->in_pending = 1;
    g_cnt[K_IN]++;
    g_tot[K_IN]++;
}

/* hooks.c: before (after = 0) and after (1) every launch at depth 0 */
void pi_swap_launch(const pi_scan *sc, uint64_t stream, int after) {
    if (PI_LIKELY(!g_nm)) return;
    void *st = (void *)(uintptr_t)stream;
    pthread_mutex_lock(&g_lock);
    if (!after) {
        t_kname = sc->kname;
        t_ord = next_ordinal(sc->kname);
        t_have = 1;
        int64_t a0 = g_na ? find_action(t_kname, t_ord) : -1;
        /* every block the launch names that is not resident comes back first, and the launch waits */
        for (int h = 0; h < sc->n; h++) {
            int64_t m = managed_of(sc->hit[h].base);
            if (m < 0) continue;
            m_rt *b = &g_rt[m];
            if (b->fresh) {
                b->fresh = 0;
                populate((uint32_t)m, st);
            }
            if (b->state == S_OUT) {
                int planned = 0;
                for (int64_t k = a0; k >= 0 && k < g_na && g_a[k].kname == t_kname && g_a[k].ordinal == t_ord; k++)
                    if (g_a[k].kind == A_BEFORE && g_a[k].managed == (uint32_t)m) planned = 1;
                g_cnt[planned ? K_LATE : K_UNFORESEEN]++;
                g_tot[planned ? K_LATE : K_UNFORESEEN]++;
                bring_back((uint32_t)m, NULL, 0);
            }
            if (b->state == S_IN) {
                if (wait_ev(st, b->ev_in) == 0) {
                    g_cnt[K_WAITS]++;
                    g_tot[K_WAITS]++;
                }
                b->state = S_RESIDENT; /* later launches on this stream are ordered after this one */
            }
        }
    } else if (t_have && g_na) {
        t_have = 0;
        int64_t a0 = find_action(t_kname, t_ord);
        for (int pass = 0; pass < 2 && a0 >= 0; pass++) /* out first: a block may leave and be sent back here */
            for (int64_t k = a0; k < g_na && g_a[k].kname == t_kname && g_a[k].ordinal == t_ord; k++) {
                const sw_action *a = &g_a[k];
                if (a->managed >= g_nm || !g_rt[a->managed].live) continue;
                if (pass == 0 && a->kind == A_OUT) send_out(a->managed, st);
                if (pass == 1 && a->kind == A_IN) bring_back(a->managed, st, 1);
            }
    }
    pthread_mutex_unlock(&g_lock);
}

/* ---------------------------------------------------------------- iterations, status */
static void emit(int64_t iter, const uint64_t *c, uint16_t kind) {
    if (!pi_active()) return;
    pi_emit(PI_OP_SWAP, 0, (int32_t)iter, (c[K_OUT] & 0xffffffffu) | c[K_IN] << 32,
            (c[K_LATE] & 0xffffffffu) | c[K_UNFORESEEN] << 32, (c[K_WAITS] & 0xffffffffu) | c[K_MANAGED] << 32,
            c[K_REAL], kind);
}

void pi_swap_boundary(int64_t finished_iter) {
    if (!g_nm) return;
    uint64_t c[K_N];
    pthread_mutex_lock(&g_lock);
    memcpy(c, g_cnt, sizeof c);
    memset(g_cnt, 0, sizeof g_cnt);
    g_epoch++;
    pthread_mutex_unlock(&g_lock);
    if (finished_iter >= 0 || c[K_MANAGED] || c[K_REAL]) emit(finished_iter, c, 2);
}

void pi_swap_exit(int64_t iter) {
    if (!g_nm) return;
    uint64_t c[K_N];
    pthread_mutex_lock(&g_lock);
    memcpy(c, g_cnt, sizeof c);
    pthread_mutex_unlock(&g_lock);
    emit(iter, c, 4);
}

int pi_swap_status(char *buf, int len) {
    if (!g_nm || len <= 0) return 0;
    int n = 0;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < K_N && n < len; i++) n += snprintf(buf + n, (size_t)(len - n), " %s=%llu", K_NAME[i],
                                                           (unsigned long long)g_tot[i]);
    pthread_mutex_unlock(&g_lock);
    return n < len ? n : len - 1;
}

void pi_swap_atfork_child(void) {
    /* the child's CUDA is not its parent's: nothing of ours is valid there */
    pthread_mutex_init(&g_lock, NULL);
    pthread_mutex_init(&g_reap_lock, NULL);
    g_nm = g_na = 0;
    g_reaper = 0;
    g_reap_head = g_reap_tail = NULL;
}
