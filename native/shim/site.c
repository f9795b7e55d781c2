/*
 * site.c — who made each allocation: the owner (calling shared object), the
 * native return-address chain, and the interning of frames and stacks that
 * Python stacks (pystack.c) share.
 *
 * Owner: the return address of the outermost hooked call is looked up in a
 * table of the process's executable segments (one dl_iterate_phdr pass, then
 * rebuilt only when an address falls outside every known segment: a library
 * loaded since).  The hot path is a per-thread "last segment" range check,
 * then a binary search of an immutable snapshot; the owner's basename is
 * interned once per segment.  A segment table is never freed (a racing reader
 * may hold it); a library unloaded and replaced at the same address keeps its
 * old owner name until some miss rebuilds the table (documented limit).
 *
 * Interning: frames and stacks get dense ids from 1.  A frame definition
 * (PI_OP_FRAME + its text) and a stack node (PI_OP_STACK: parent, frame) are
 * written once, when first seen; the definitions are also kept here so that a
 * forked child can write them into its own ring (pi_site_replay).  Lookup
 * tables are lock-free open addressing (claim a slot with CAS, publish the id
 * with a release store).  A slot claimed but not yet published is treated as a
 * miss (an uncached duplicate definition), so nothing ever waits on another
 * thread, and nothing can hang in a child forked mid-insert.
 *
 * Native stacks (--stacks native): _Unwind_Backtrace, bounded depth, frames
 * interned by PC; symbolised after the run by the reader from the object path
 * and the load-bias-relative address in each frame definition.
 */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <unwind.h>

#include "site.h"

enum { MODE_NONE = 0, MODE_PYTHON = 1, MODE_NATIVE = 2 };
static int g_mode = -1;        /* -1: not read yet */
static int g_sites = 1;        /* PYINTERPOSE_SITES=0 turns SITE records off entirely */
int pi_stack_depth = 64;       /* PYINTERPOSE_STACK_DEPTH, read by pystack.c too */

static void read_config(void) {
    const char *m = getenv("PYINTERPOSE_STACKS");
    int mode = MODE_NONE;
    if (m && strcmp(m, "python") == 0) mode = MODE_PYTHON;
    else if (m && strcmp(m, "native") == 0) mode = MODE_NATIVE;
    const char *d = getenv("PYINTERPOSE_STACK_DEPTH");
    if (d) {
        int v = atoi(d);
        if (v >= 1 && v <= 256) pi_stack_depth = v;
    }
    const char *s = getenv("PYINTERPOSE_SITES");
    g_sites = !(s && s[0] == '0');
    __atomic_store_n(&g_mode, mode, __ATOMIC_RELEASE);
}

void *pi_site_table(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* ------------------------------------------------------------------ owners */
typedef struct seg {
    uint64_t lo, hi;          /* [lo, hi) executable segment */
    uint64_t bias;            /* dlpi_addr */
    const char *path;         /* full path (strdup, never freed) */
    const char *base;         /* basename within path */
    _Atomic uint32_t sid;     /* interned basename, 0 = not yet */
} seg;
typedef struct segtab { int n; seg s[]; } segtab;

static segtab *_Atomic g_segs;
static _Atomic int g_seg_lock;
static char g_exe[512];
static PI_TLS const seg *t_last;

static int count_cb(struct dl_phdr_info *info, size_t size, void *data) {
    int *n = data;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_LOAD && (info->dlpi_phdr[i].p_flags & PF_X)) (*n)++;
    return 0;
}

typedef struct { segtab *t; int cap; segtab *old; } fill_ctx;

static const char *keep_path(fill_ctx *c, const char *name) {
    if (c->old) /* reuse the previous table's copy: paths are never freed */
        for (int i = 0; i < c->old->n; i++)
            if (strcmp(c->old->s[i].path, name) == 0) return c->old->s[i].path;
    return strdup(name);
}

static int fill_cb(struct dl_phdr_info *info, size_t size, void *data) {
    fill_ctx *c = data;
    const char *name = info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : g_exe;
    if (!name[0]) name = "[exe]";
    for (int i = 0; i < info->dlpi_phnum && c->t->n < c->cap; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
        seg *s = &c->t->s[c->t->n++];
        s->lo = info->dlpi_addr + ph->p_vaddr;
        s->hi = s->lo + ph->p_memsz;
        s->bias = info->dlpi_addr;
        s->path = keep_path(c, name);
        const char *b = s->path ? strrchr(s->path, '/') : NULL;
        s->base = s->path ? (b ? b + 1 : s->path) : "";
        atomic_store(&s->sid, 0);
    }
    return 0;
}

static int seg_cmp(const void *a, const void *b) {
    const seg *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void rebuild_segs(void) {
    int expect = 0;
    if (!atomic_compare_exchange_strong(&g_seg_lock, &expect, 1)) return; /* another thread rebuilds */
    if (!g_exe[0]) {
        ssize_t k = readlink("/proc/self/exe", g_exe, sizeof g_exe - 1);
        g_exe[k > 0 ? k : 0] = 0;
    }
    int n = 0;
    dl_iterate_phdr(count_cb, &n);
    n += 16;
    segtab *t = malloc(sizeof(segtab) + (size_t)n * sizeof(seg));
    if (t) {
        t->n = 0;
        fill_ctx c = {t, n, atomic_load(&g_segs)};
        dl_iterate_phdr(fill_cb, &c);
        qsort(t->s, (size_t)t->n, sizeof(seg), seg_cmp);
        if (c.old) /* keep interned ids of segments that did not move */
            for (int i = 0; i < t->n; i++)
                for (int j = 0; j < c.old->n; j++)
                    if (c.old->s[j].lo == t->s[i].lo && c.old->s[j].path == t->s[i].path)
                        atomic_store(&t->s[i].sid, atomic_load(&c.old->s[j].sid));
        atomic_store(&g_segs, t); /* the old table is leaked on purpose: readers may hold it */
    }
    atomic_store(&g_seg_lock, 0);
}

static const seg *find_in(segtab *t, uint64_t pc) {
    if (!t) return NULL;
    int lo = 0, hi = t->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const seg *s = &t->s[mid];
        if (pc < s->lo) hi = mid - 1;
        else if (pc >= s->hi) lo = mid + 1;
        else return s;
    }
    return NULL;
}

static const seg *find_seg(uint64_t pc) {
    const seg *s = t_last;
    if (PI_LIKELY(s && pc >= s->lo && pc < s->hi)) return s;
    s = find_in(atomic_load(&g_segs), pc);
    if (!s) {
        rebuild_segs();
        s = find_in(atomic_load(&g_segs), pc);
    }
    if (s) t_last = s;
    return s;
}

static uint32_t seg_sid(const seg *s) {
    uint32_t id = atomic_load_explicit(&((seg *)s)->sid, memory_order_acquire);
    if (PI_LIKELY(id)) return id;
    id = pi_intern(s->base);
    atomic_store(&((seg *)s)->sid, id);
    return id;
}

/* ------------------------------------------------------------------ notes */
void pi_note(const char *text) {
    uint32_t id = pi_intern(text);
    pi_emit(PI_OP_NOTE, 0, 0, 0, 0, 0, id, 0);
}

/* ------------------------------------------------------------------ frames */
#define MAX_FRAMES (1u << 20)
typedef struct framedef {
    uint64_t addr, aux;
    char *text;
    uint32_t len;
    uint16_t kind;
    _Atomic int ready;
} framedef;
static framedef *_Atomic g_fdefs;
static _Atomic uint32_t g_next_frame = 1;

#define MAX_STACKS (1u << 20)
typedef struct stacknode { uint32_t parent, frame; } stacknode;
static stacknode *_Atomic g_nodes;
static _Atomic uint32_t g_next_stack = 1;
#define STACK_SLOTS (1u << 21)
typedef struct stackslot { _Atomic uint64_t key; _Atomic uint32_t id; uint32_t pad; } stackslot;
static stackslot *_Atomic g_stab;

/* Lock-free set-up: every racing thread maps its own tables and publishes them with
 * CAS (losers unmap theirs), so nobody waits and a forked child can never inherit a
 * held lock.  fdefs and nodes are published before stab, so stab != NULL implies all. */
static int ensure_tables(void) {
    if (PI_LIKELY(atomic_load_explicit(&g_stab, memory_order_acquire) != NULL)) return 1;
    if (!atomic_load(&g_fdefs)) {
        framedef *f = pi_site_table(sizeof(framedef) * MAX_FRAMES), *none = NULL;
        if (!f) return 0;
        if (!atomic_compare_exchange_strong(&g_fdefs, &none, f)) munmap(f, sizeof(framedef) * MAX_FRAMES);
    }
    if (!atomic_load(&g_nodes)) {
        stacknode *n = pi_site_table(sizeof(stacknode) * MAX_STACKS), *none = NULL;
        if (!n) return 0;
        if (!atomic_compare_exchange_strong(&g_nodes, &none, n)) munmap(n, sizeof(stacknode) * MAX_STACKS);
    }
    stackslot *t = pi_site_table(sizeof(stackslot) * STACK_SLOTS), *none = NULL;
    if (!t) return 0;
    if (!atomic_compare_exchange_strong(&g_stab, &none, t)) munmap(t, sizeof(stackslot) * STACK_SLOTS);
    return 1;
}

static void emit_frame(uint32_t id, const framedef *d) {
    pi_writer w;
    if (!pi_writer_open(&w, 1 + pi_text_records(d->len))) return;
    pi_put_text(&w, 1, d->text, d->len);
    pi_put(&w, 0, PI_OP_FRAME, 0, 0, d->addr, d->len, d->aux, id, d->kind);
    pi_writer_close(&w);
}

uint32_t pi_frame_define(uint16_t kind, uint64_t addr, uint64_t aux, const char *text, uint32_t len) {
    if (!ensure_tables()) return 0;
    uint32_t id = atomic_fetch_add(&g_next_frame, 1);
    if (id >= MAX_FRAMES) return 0;
    framedef *d = &atomic_load(&g_fdefs)[id];
    if (len > 4096) len = 4096;
    d->text = malloc(len ? len : 1);
    if (!d->text) return 0;
    memcpy(d->text, text, len);
    d->len = len;
    d->addr = addr;
    d->aux = aux;
    d->kind = kind;
    atomic_store_explicit(&d->ready, 1, memory_order_release);
    emit_frame(id, d);
    return id;
}

static inline uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

uint32_t pi_stack_node(uint32_t parent, uint32_t frame) {
    if (!frame || !ensure_tables()) return 0;
    stackslot *tab = atomic_load_explicit(&g_stab, memory_order_acquire);
    uint64_t key = ((uint64_t)parent << 32 | frame) + 1; /* never 0 */
    uint64_t h = mix(key);
    for (uint32_t i = 0; i < 64; i++) {
        stackslot *s = &tab[(h + i) & (STACK_SLOTS - 1)];
        uint64_t cur = atomic_load_explicit(&s->key, memory_order_acquire);
        if (cur == key) {
            uint32_t id = atomic_load_explicit(&s->id, memory_order_acquire);
            if (id) return id;
            break; /* being published by another thread: define a duplicate below */
        }
        if (cur == 0) {
            uint64_t zero = 0;
            if (!atomic_compare_exchange_strong(&s->key, &zero, key)) {
                if (zero == key) break;
                continue;
            }
            uint32_t id = atomic_fetch_add(&g_next_stack, 1);
            if (id >= MAX_STACKS) return 0;
            stacknode *n = &atomic_load(&g_nodes)[id];
            n->parent = parent;
            n->frame = frame;
            pi_emit(PI_OP_STACK, 0, 0, parent, frame, 0, id, 0);
            atomic_store_explicit(&s->id, id, memory_order_release);
            return id;
        }
    }
    uint32_t id = atomic_fetch_add(&g_next_stack, 1); /* uncached duplicate (full or racing) */
    if (id >= MAX_STACKS) return 0;
    stacknode *n = &atomic_load(&g_nodes)[id];
    n->parent = parent;
    n->frame = frame;
    pi_emit(PI_OP_STACK, 0, 0, parent, frame, 0, id, 0);
    return id;
}

void pi_site_replay(void) {
    if (!atomic_load(&g_stab)) return;
    framedef *f = atomic_load(&g_fdefs);
    uint32_t nf = atomic_load(&g_next_frame);
    for (uint32_t i = 1; i < nf && i < MAX_FRAMES; i++)
        if (atomic_load_explicit(&f[i].ready, memory_order_acquire)) emit_frame(i, &f[i]);
    stacknode *n = atomic_load(&g_nodes);
    uint32_t ns = atomic_load(&g_next_stack);
    for (uint32_t i = 1; i < ns && i < MAX_STACKS; i++)
        if (n[i].frame) pi_emit(PI_OP_STACK, 0, 0, n[i].parent, n[i].frame, 0, i, 0);
}

/* ------------------------------------------------------------------ native stacks */
#define PC_SLOTS (1u << 18)
typedef struct pcslot { _Atomic uint64_t pc; _Atomic uint32_t id; uint32_t pad; } pcslot;
static pcslot *_Atomic g_pctab;

static uint32_t native_frame(uint64_t pc) {
    pcslot *tab = atomic_load_explicit(&g_pctab, memory_order_acquire);
    if (!tab) {
        pcslot *t = pi_site_table(sizeof(pcslot) * PC_SLOTS);
        pcslot *none = NULL;
        if (!t) return 0;
        if (!atomic_compare_exchange_strong(&g_pctab, &none, t)) munmap(t, sizeof(pcslot) * PC_SLOTS);
        tab = atomic_load(&g_pctab);
    }
    uint64_t h = mix(pc);
    pcslot *claimed = NULL;
    for (uint32_t i = 0; i < 64; i++) {
        pcslot *s = &tab[(h + i) & (PC_SLOTS - 1)];
        uint64_t cur = atomic_load_explicit(&s->pc, memory_order_acquire);
        if (cur == pc) {
            uint32_t id = atomic_load_explicit(&s->id, memory_order_acquire);
            if (id) return id;
            break;
        }
        if (cur == 0) {
            uint64_t zero = 0;
            if (atomic_compare_exchange_strong(&s->pc, &zero, pc)) { claimed = s; break; }
            if (zero == pc) break;
        }
    }
    const seg *sg = find_seg(pc);
    const char *path = sg ? sg->path : "";
    uint32_t id = pi_frame_define(2, pc, sg ? pc - sg->bias : 0, path, (uint32_t)strlen(path));
    if (claimed && id) atomic_store_explicit(&claimed->id, id, memory_order_release);
    return id;
}

typedef struct { uint64_t pc[256]; int n, max, skip; } bt_ctx;

static _Unwind_Reason_Code bt_cb(struct _Unwind_Context *ctx, void *arg) {
    bt_ctx *b = arg;
    uint64_t ip = (uint64_t)_Unwind_GetIP(ctx);
    if (!ip) return _URC_END_OF_STACK;
    if (b->skip > 0) { b->skip--; return _URC_NO_REASON; }
    if (b->n >= b->max) return _URC_END_OF_STACK;
    b->pc[b->n++] = ip;
    return _URC_NO_REASON;
}

static uint32_t native_stack(uint64_t caller, uint16_t *flags) {
    bt_ctx b;
    b.n = 0;
    b.max = pi_stack_depth + 1;
    b.skip = 0;
    /* frames inside the shim come first: start at the hooked call's caller */
    bt_ctx all;
    all.n = 0;
    all.max = 256 < pi_stack_depth + 16 ? 256 : pi_stack_depth + 16;
    all.skip = 0;
    _Unwind_Backtrace(bt_cb, &all);
    int start = -1;
    for (int i = 0; i < all.n; i++)
        if (all.pc[i] == caller) { start = i; break; }
    if (start < 0) start = all.n ? 0 : 0;
    for (int i = start; i < all.n && b.n < b.max; i++) b.pc[b.n++] = all.pc[i];
    if (b.n == 0) b.pc[b.n++] = caller;
    if (b.n > pi_stack_depth) { b.n = pi_stack_depth; *flags |= PI_SITE_TRUNCATED; }
    uint32_t st = 0;
    for (int i = b.n - 1; i >= 0; i--) { /* root first */
        uint32_t f = native_frame(b.pc[i]);
        if (!f) return 0;
        st = pi_stack_node(st, f);
        if (!st) return 0;
    }
    return st;
}

/* ------------------------------------------------------------------ threads */
/* Read once per thread (PyTorch names its autograd workers before they allocate).
 * A forked child keeps the id: interned strings are replayed into its ring. */
static PI_TLS uint32_t t_name_sid;

static uint32_t thread_name(void) {
    if (PI_LIKELY(t_name_sid)) return t_name_sid;
    char name[17] = {0};
    if (prctl(PR_GET_NAME, name, 0, 0, 0) != 0) name[0] = 0;
    t_name_sid = pi_intern(name);
    return t_name_sid;
}

/* ------------------------------------------------------------------ the site */
int pi_site_capture(uint64_t caller, pi_site *s) {
    int mode = __atomic_load_n(&g_mode, __ATOMIC_ACQUIRE);
    if (PI_UNLIKELY(mode < 0)) {
        read_config();
        mode = g_mode;
    }
    if (!g_sites) return 0;
    s->caller = caller;
    s->flags = 0;
    s->py_stack = 0;
    s->native_stack = 0;
    const seg *sg = caller ? find_seg(caller) : NULL;
    s->owner = sg ? seg_sid(sg) : 0;
    s->thread_name = thread_name();
    if (mode == MODE_PYTHON) {
        s->flags |= PI_SITE_PYTHON;
        s->py_stack = pi_pystack(&s->flags);
    } else if (mode == MODE_NATIVE) {
        s->flags |= PI_SITE_NATIVE;
        s->native_stack = native_stack(caller, &s->flags);
    }
    return 1;
}

void pi_site_put(pi_writer *w, uint64_t i, uint16_t api, const pi_site *s) {
    /* the writer's time, this thread and device: the ALLOC's (no second clock read) */
    pi_put(w, i, PI_OP_SITE, api, (int32_t)s->thread_name, s->caller, s->native_stack, s->owner, s->py_stack,
           s->flags);
}

/* ------------------------------------------------------------------ plan keys (apply.c) */
uint64_t pi_site_owner_hash(uint64_t caller) {
    const seg *sg = caller ? find_seg(caller) : NULL;
    const char *b = sg ? sg->base : "";
    uint64_t h = 14695981039346656037ull; /* FNV-1a 64 offset basis */
    for (; *b; b++) h = (h ^ (unsigned char)*b) * 1099511628211ull;
    return h;
}
