/*
 * pystack.c — the allocating thread's Python stack (--stacks python).
 *
 * Design: walk the thread's own frames at the event, in-process, the way
 * py-spy walks them from outside — NOT a shadow stack kept by a profile hook
 * (memray).  Why:
 *   - a profile hook costs on every Python call and return of every thread,
 *     allocating or not, and must be installed in every thread (threads started
 *     from C would be missed); walking costs only at an allocation, and with the
 *     per-thread prefix cache below a depth-30 walk is a few hundred ns;
 *   - frameworks allocate with the GIL *released* (PyTorch drops it around every
 *     op).  A thread that released the GIL is running C code: its own frame
 *     chain cannot change until it takes the GIL back, and every code object on
 *     it is kept alive by its frame.  So the walk reads only objects reachable
 *     from the calling thread's live frames and needs no GIL, no Python call
 *     that could allocate, and no lock another thread could hold (taking the GIL
 *     here, as PyTorch's own history does, can deadlock against a thread that
 *     holds the GIL and waits for a lock held by the allocating thread).
 *
 * CPython is found at run time with dlsym(RTLD_DEFAULT) (no NEEDED on
 * libpython).  Version-specific offsets (checked against the headers of
 * 3.10-3.13 by tests/unit/test_pystack_offsets.py when those are installed)
 * read: the thread state (PyGILState_GetThisThreadState: a TSS lookup, no GIL
 * needed), its current frame, each frame's code object and instruction; the
 * code's file name, qualified name and first line; strings from their compact
 * representation (no PyUnicode_AsUTF8: it may allocate).  The line number comes
 * from PyCode_Addr2Line (a pure read of the immutable line table), computed
 * once per (code object, instruction) and cached.  Incomplete frames and C-stack
 * entry frames (3.11+) are skipped, exactly as CPython's own tracebacks do.
 *
 * Object lifetime: the frame cache is keyed by (code pointer, instruction).  A
 * cached pointer is never dereferenced — only compared with a code pointer read
 * from a live frame, and a hit is validated against that live code object's
 * file name, name and first line (a freed and reused address cannot pass as a
 * different function).  When the thread holds the GIL the cached code object is
 * also pinned with a strong reference (Py_IncRef), so its address cannot be
 * reused at all.
 *
 * Refused or skipped, with a note recorded in the trace: no CPython in the
 * process, a version outside 3.10-3.13, the free-threaded build (Py_GetVersion
 * says "free-threading": its frames are not owned by one thread), a debug build
 * (Py_REF_DEBUG / Py_TRACE_REFS symbols: another object layout).  Skipped per
 * event (PI_SITE_PY_OFF): interpreter not initialised or finalising.  A thread
 * without a Python thread state or frames (PyTorch's autograd workers, any
 * pthread) is recorded as PI_SITE_NO_PYFRAMES with its owner and caller PC.
 * Fork: the child keeps every cache (its memory is a copy, code objects are at
 * the same addresses) and site.c replays the definitions into its new ring.
 */
#include <dlfcn.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "site.h"

extern int pi_stack_depth;

typedef struct pyoff {
    int minor;
    long ts_frame;    /* 3.10 tstate->frame; 3.11/12 tstate->cframe; 3.13 tstate->current_frame */
    long cf_current;  /* 3.11/12: _PyCFrame.current_frame; -1 otherwise */
    long f_code, f_back, f_instr; /* 3.10: PyFrameObject f_code, f_back, f_lasti (int) */
    long f_owner;     /* 3.11+: _PyInterpreterFrame.owner; -1 for 3.10 */
    long co_filename, co_name, co_firstlineno, co_code, co_firsttraceable;
    long uni_ascii, uni_compact, uni_utf8;
} pyoff;

/* x86_64 / aarch64 (LP64), release builds; from the 3.10.13, 3.11.7, 3.12.1, 3.13.0 headers. */
static const pyoff OFFSETS[] = {
    {10, 24, -1, 32, 24, 96, -1, 104, 112, 40, -1, -1, 48, 72, 56},
    {11, 56, 8, 32, 48, 56, 69, 112, 128, 72, 184, 168, 48, 72, 56},
    {12, 56, 0, 0, 8, 56, 70, 112, 128, 68, 192, 176, 40, 56, 48},
    {13, 72, -1, 0, 8, 56, 70, 112, 128, 68, 200, 184, 40, 56, 48},
};
enum { OWNED_BY_GENERATOR = 1, OWNED_BY_CSTACK = 3 };

static const pyoff *P;
static _Atomic int g_state;   /* 0 not tried, 1 ready, 2 off for good */
static _Atomic int g_init_lock;
static void *(*p_this_tstate)(void);
static void *(*p_unchecked_tstate)(void);
static int (*p_gil_check)(void);
static int (*p_initialized)(void);
static int (*p_finalizing)(void);
static int (*p_addr2line)(void *, int);
static void (*p_incref)(void *);
static void *p_code_type, *p_unicode_type;

#define RD(base, off, T) (*(T *)((char *)(base) + (off)))

static void *sym(const char *name) { return pi_real_dlsym(RTLD_DEFAULT, name); }

static int resolve(void) {
    const char *(*version)(void) = (const char *(*)(void))sym("Py_GetVersion");
    char msg[256];
    if (!version) {
        pi_note("python stacks off: no CPython in this process (its owner and caller are still recorded)");
        return 2;
    }
    const char *v = version();
    int major = 0, minor = 0;
    if (!v || sscanf(v, "%d.%d", &major, &minor) != 2) major = 0;
    if (v && strstr(v, "free-threading")) {
        snprintf(msg, sizeof msg, "python stacks off: the free-threaded CPython build is not supported (%.60s)", v);
        pi_note(msg);
        return 2;
    }
    if (sym("_Py_GetRefTotal") || sym("_Py_GetGlobalRefTotal") || sym("_Py_PrintReferences")) {
        pi_note("python stacks off: debug builds of CPython are not supported (their object layout differs)");
        return 2;
    }
    P = NULL;
    for (size_t i = 0; i < sizeof OFFSETS / sizeof OFFSETS[0]; i++)
        if (major == 3 && OFFSETS[i].minor == minor) P = &OFFSETS[i];
    if (!P) {
        snprintf(msg, sizeof msg, "python stacks off: CPython %d.%d is not supported (3.10-3.13)", major, minor);
        pi_note(msg);
        return 2;
    }
    p_this_tstate = (void *(*)(void))sym("PyGILState_GetThisThreadState");
    p_unchecked_tstate = (void *(*)(void))sym(minor >= 13 ? "PyThreadState_GetUnchecked" : "_PyThreadState_UncheckedGet");
    p_gil_check = (int (*)(void))sym("PyGILState_Check");
    p_initialized = (int (*)(void))sym("Py_IsInitialized");
    p_finalizing = (int (*)(void))sym(minor >= 13 ? "Py_IsFinalizing" : "_Py_IsFinalizing");
    p_addr2line = (int (*)(void *, int))sym("PyCode_Addr2Line");
    p_incref = (void (*)(void *))sym("Py_IncRef");
    p_code_type = sym("PyCode_Type");
    p_unicode_type = sym("PyUnicode_Type");
    if (!p_this_tstate || !p_initialized || !p_addr2line || !p_code_type || !p_unicode_type) {
        pi_note("python stacks off: this CPython lacks a function the stack reader needs");
        return 2;
    }
    return 1;
}

/* 1 when stacks can be read now. */
static int ready(void) {
    int s = atomic_load_explicit(&g_state, memory_order_acquire);
    if (PI_UNLIKELY(s == 0)) {
        /* one thread resolves; the others wait for it, boundedly: a child forked while
         * another thread resolved would otherwise wait forever (then: off for good) */
        for (long spin = 0;; spin++) {
            int expect = 0;
            if (atomic_compare_exchange_strong(&g_init_lock, &expect, 1)) {
                if (atomic_load(&g_state) == 0) atomic_store_explicit(&g_state, resolve(), memory_order_release);
                atomic_store(&g_init_lock, 0);
                break;
            }
            if (atomic_load_explicit(&g_state, memory_order_acquire) != 0) break;
            if (spin > 200000) {
                atomic_store(&g_state, 2);
                break;
            }
            sched_yield();
        }
        s = atomic_load(&g_state);
    }
    if (s != 1) return 0;
    if (!p_initialized()) return 0;
    if (p_finalizing && p_finalizing()) return 0;
    return 1;
}

/* UTF-8 text of a str object (compact representation only), appended to buf. */
static size_t read_str(void *o, char *buf, size_t cap) {
    if (!o || RD(o, 8, void *) != p_unicode_type || cap < 2) goto unknown;
    uint32_t state = RD(o, 32, uint32_t);
    int kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
    int64_t len = RD(o, 16, int64_t);
    if (!compact || len < 0) goto unknown;
    if (ascii) {
        size_t n = (size_t)len < cap - 1 ? (size_t)len : cap - 1;
        memcpy(buf, (char *)o + P->uni_ascii, n);
        return n;
    }
    const char *u8 = RD(o, P->uni_utf8, const char *);
    if (u8) {
        size_t n = strnlen(u8, cap - 1);
        memcpy(buf, u8, n);
        return n;
    }
    const unsigned char *d = (const unsigned char *)o + P->uni_compact;
    size_t n = 0;
    for (int64_t i = 0; i < len; i++) {
        uint32_t c = kind == 1 ? d[i] : kind == 2 ? ((const uint16_t *)d)[i] : ((const uint32_t *)d)[i];
        char tmp[4];
        size_t k;
        if (c < 0x80) { tmp[0] = (char)c; k = 1; }
        else if (c < 0x800) { tmp[0] = (char)(0xC0 | c >> 6); tmp[1] = (char)(0x80 | (c & 63)); k = 2; }
        else if (c < 0x10000) {
            tmp[0] = (char)(0xE0 | c >> 12); tmp[1] = (char)(0x80 | ((c >> 6) & 63));
            tmp[2] = (char)(0x80 | (c & 63)); k = 3;
        } else {
            tmp[0] = (char)(0xF0 | c >> 18); tmp[1] = (char)(0x80 | ((c >> 12) & 63));
            tmp[2] = (char)(0x80 | ((c >> 6) & 63)); tmp[3] = (char)(0x80 | (c & 63)); k = 4;
        }
        if (n + k >= cap) break;
        memcpy(buf + n, tmp, k);
        n += k;
    }
    return n;
unknown:
    buf[0] = '?';
    return 1;
}

/* ---- frame cache: (code, lasti) -> frame id ---- */
#define PYF_SLOTS (1u << 18)
typedef struct pyfslot {
    _Atomic uint64_t tag;
    void *code;
    void *filename, *name;
    int32_t lasti, firstlineno;
    _Atomic uint32_t id;
    uint32_t pad;
} pyfslot;
static pyfslot *_Atomic g_ftab;

static inline uint64_t mixp(uint64_t x) {
    x ^= x >> 31;
    x *= 0x9e3779b97f4a7c15ull;
    x ^= x >> 29;
    return x;
}

static uint32_t define_frame(void *code, int lasti) {
    char text[1024];
    size_t n = read_str(RD(code, P->co_filename, void *), text, 700);
    text[n++] = 0;
    n += read_str(RD(code, P->co_name, void *), text + n, sizeof text - n);
    int first = RD(code, P->co_firstlineno, int);
    int line = p_addr2line(code, lasti < 0 ? -1 : lasti * 2);
    return pi_frame_define(1, (uint64_t)(int64_t)line, (uint64_t)(int64_t)first, text, (uint32_t)n);
}

static uint32_t frame_id(void *code, int lasti, int gil) {
    pyfslot *tab = atomic_load_explicit(&g_ftab, memory_order_acquire);
    if (PI_UNLIKELY(!tab)) {
        pyfslot *t = pi_site_table(sizeof(pyfslot) * PYF_SLOTS), *none = NULL;
        if (!t) return define_frame(code, lasti);
        if (!atomic_compare_exchange_strong(&g_ftab, &none, t)) t = none; /* lost the race: leak ours */
        tab = atomic_load(&g_ftab);
    }
    void *fn = RD(code, P->co_filename, void *), *nm = RD(code, P->co_name, void *);
    int first = RD(code, P->co_firstlineno, int);
    uint64_t tag = mixp((uint64_t)(uintptr_t)code * 31 + (uint64_t)(uint32_t)lasti) | 1;
    for (uint32_t i = 0; i < 32; i++) {
        pyfslot *s = &tab[(tag + i) & (PYF_SLOTS - 1)];
        uint64_t cur = atomic_load_explicit(&s->tag, memory_order_acquire);
        if (cur == tag) {
            uint32_t id = atomic_load_explicit(&s->id, memory_order_acquire);
            if (!id) break; /* being published */
            if (s->code != code || s->lasti != lasti) continue;
            if (s->filename == fn && s->name == nm && s->firstlineno == first) return id;
            /* the address now holds another code object: take the slot over */
            if (!atomic_compare_exchange_strong(&s->id, &id, 0)) break;
            s->filename = fn;
            s->name = nm;
            s->firstlineno = first;
            uint32_t nid = define_frame(code, lasti);
            if (gil && p_incref) p_incref(code);
            atomic_store_explicit(&s->id, nid, memory_order_release);
            return nid;
        }
        if (cur == 0) {
            uint64_t zero = 0;
            if (!atomic_compare_exchange_strong(&s->tag, &zero, tag)) {
                if (zero == tag) break;
                continue;
            }
            s->code = code;
            s->lasti = lasti;
            s->filename = fn;
            s->name = nm;
            s->firstlineno = first;
            uint32_t id = define_frame(code, lasti);
            if (gil && p_incref) p_incref(code); /* pinned: the address cannot be reused */
            atomic_store_explicit(&s->id, id, memory_order_release);
            return id;
        }
    }
    return define_frame(code, lasti); /* uncached */
}

/* ---- the walk ---- */
#define MAXD 256
typedef struct tcache { int n; void *code[MAXD]; int lasti[MAXD]; uint32_t stack[MAXD]; } tcache;
static PI_TLS tcache *t_cache;

/* Innermost first into code[]/lasti[]; returns the count; *more when frames were left. */
static int walk(void *ts, void **code, int *lasti, int max, int *more) {
    int n = 0;
    *more = 0;
    if (P->minor == 10) {
        void *f = RD(ts, P->ts_frame, void *);
        for (int guard = 0; f && guard < 100000; guard++) {
            void *c = RD(f, P->f_code, void *);
            if (c && RD(c, 8, void *) == p_code_type) {
                if (n == max) { *more = 1; break; }
                code[n] = c;
                lasti[n++] = RD(f, P->f_instr, int);
            }
            f = RD(f, P->f_back, void *);
        }
        return n;
    }
    void *fr;
    if (P->cf_current >= 0) {
        void *cf = RD(ts, P->ts_frame, void *);
        fr = cf ? RD(cf, P->cf_current, void *) : NULL;
    } else {
        fr = RD(ts, P->ts_frame, void *);
    }
    for (int guard = 0; fr && guard < 100000; guard++) {
        char owner = RD(fr, P->f_owner, char);
        void *c = RD(fr, P->f_code, void *);
        if (owner != OWNED_BY_CSTACK && c && RD(c, 8, void *) == p_code_type) {
            char *first = (char *)c + P->co_code;
            char *instr = RD(fr, P->f_instr, char *);
            int incomplete = owner != OWNED_BY_GENERATOR &&
                             instr < first + 2 * (long)RD(c, P->co_firsttraceable, int);
            if (!incomplete) {
                if (n == max) { *more = 1; break; }
                code[n] = c;
                lasti[n++] = (int)((instr - first) / 2);
            }
        }
        fr = RD(fr, P->f_back, void *);
    }
    return n;
}

uint32_t pi_pystack(uint16_t *flags) {
    if (!ready()) {
        *flags |= PI_SITE_PY_OFF;
        return 0;
    }
    void *ts = p_this_tstate();
    if (!ts) {
        *flags |= PI_SITE_NO_PYFRAMES;
        return 0;
    }
    int gil = p_gil_check ? p_gil_check() : 0;
    if (gil && p_unchecked_tstate && p_unchecked_tstate() != ts) gil = 0;
    if (!gil) *flags |= PI_SITE_NO_GIL;
    tcache *c = t_cache;
    if (PI_UNLIKELY(!c)) {
        c = calloc(1, sizeof *c);
        if (!c) return 0;
        t_cache = c;
    }
    void *code[MAXD];
    int lasti[MAXD], more;
    int max = pi_stack_depth < MAXD ? pi_stack_depth : MAXD;
    int n = walk(ts, code, lasti, max, &more);
    if (more) *flags |= PI_SITE_TRUNCATED;
    if (n == 0) {
        *flags |= PI_SITE_NO_PYFRAMES;
        return 0;
    }
    /* reuse the longest root-side prefix shared with this thread's previous stack */
    int k = 0;
    while (k < n && k < c->n && c->code[k] == code[n - 1 - k] && c->lasti[k] == lasti[n - 1 - k]) k++;
    uint32_t st = k ? c->stack[k - 1] : 0;
    for (int j = k; j < n; j++) {
        int i = n - 1 - j;
        uint32_t f = frame_id(code[i], lasti[i], gil);
        uint32_t nst = f ? pi_stack_node(st, f) : 0;
        if (!nst) {
            c->n = j;
            return st; /* what could be interned (tables full) */
        }
        st = nst;
        c->code[j] = code[i];
        c->lasti[j] = lasti[i];
        c->stack[j] = st;
    }
    c->n = n;
    return st;
}
