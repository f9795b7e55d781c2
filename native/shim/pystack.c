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
 * libpython).  Where the offsets come from:
 *   - 3.10-3.12: a table per minor version (x86_64/aarch64 release builds, from
 *     the 3.10.13, 3.11.7 and 3.12.1 headers);
 *   - 3.13 and later: CPython's own _Py_DebugOffsets, the struct at the start of
 *     _PyRuntime (cookie "xdebugpy", PY_VERSION_HEX, free_threaded; then the
 *     offsets of the thread state, interpreter frame, code, object and str
 *     fields of *this* build), as pystack and py-spy read them.  Only the place
 *     of each needed field inside _Py_DebugOffsets is known here, per minor
 *     version (DBG_LAYOUTS: 3.13, 3.14; a struct that changes between minor
 *     versions only); the values are this interpreter's, so debug and
 *     free-threaded builds are read as they are.  A newer minor version (3.15
 *     grew the struct) is refused with a note until its layout is added.
 *     3.14: f_executable is a tagged _PyStackRef (the low bit is a reference
 *     flag: pointer = bits & ~1; bits == 1 is NULL; bits & 3 == 3 a tagged int);
 *     frame owners were renumbered (INTERPRETER 3, CSTACK 4): owners >= 3 are
 *     not Python frames in every version; free-threaded 3.14 runs thread-local
 *     copies of the bytecode (co_tlbc[tlbc_index]), whose offsets are read too.
 *     The offset of _co_firsttraceable is not in _Py_DebugOffsets: it is known
 *     for the 3.13 release build (184); elsewhere the incomplete-frame test is
 *     skipped (a frame still in its prologue is not running code that allocates);
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
 * process, a version outside 3.10-3.14, on 3.10-3.12 the free-threaded or a
 * debug build (their object layout is not the table's), on 3.13+ a _PyRuntime
 * without the debug offsets' cookie or whose version is not Py_GetVersion's.  Skipped per
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
    long ts_frame;    /* 3.10 tstate->frame; 3.11/12 tstate->cframe; 3.13+ tstate->current_frame */
    long cf_current;  /* 3.11/12: _PyCFrame.current_frame; -1 otherwise */
    long f_code, f_back, f_instr; /* 3.10: PyFrameObject f_code, f_back, f_lasti (int) */
    long f_owner;     /* 3.11+: _PyInterpreterFrame.owner; -1 for 3.10 */
    long co_filename, co_name, co_firstlineno, co_code, co_firsttraceable; /* firsttraceable -1: unknown */
    long uni_ascii, uni_compact, uni_utf8;
    /* set by resolve(): */
    long ob_type, uni_state, uni_length;
    int kind_shift;   /* bit of the str state's kind: 2, or 8 where interned is a whole byte */
    int stackref;     /* 3.14+: f_executable is a tagged _PyStackRef */
    long co_tlbc, f_tlbc_index; /* free-threaded 3.14+: thread-local bytecode; -1 none */
} pyoff;

/* x86_64 / aarch64 (LP64), release builds; from the 3.10.13, 3.11.7, 3.12.1 headers. */
static const pyoff OFFSETS[] = {
    {10, 24, -1, 32, 24, 96, -1, 104, 112, 40, -1, -1, 48, 72, 56, 8, 32, 16, 2, 0, -1, -1},
    {11, 56, 8, 32, 48, 56, 69, 112, 128, 72, 184, 168, 48, 72, 56, 8, 32, 16, 2, 0, -1, -1},
    {12, 56, 0, 0, 8, 56, 70, 112, 128, 68, 192, 176, 40, 56, 48, 8, 32, 16, 2, 0, -1, -1},
};
enum { OWNED_BY_GENERATOR = 1, OWNED_BY_NOT_PYTHON = 3 }; /* 3.11-3.13 CSTACK 3; 3.14 INTERPRETER 3, CSTACK 4 */

/* Where each field the walk needs sits inside _Py_DebugOffsets (byte offsets into the
 * struct), per minor version (Include/internal/pycore_runtime.h in 3.13,
 * pycore_debug_offsets.h in 3.14: 584 and 760 bytes).  -1: not in that version. */
typedef struct dbglayout {
    int minor;
    long size;                                    /* sizeof(_Py_DebugOffsets) */
    long ts_current_frame;
    long fr_previous, fr_executable, fr_instr_ptr, fr_owner, fr_tlbc_index;
    long co_filename, co_name /* co_qualname */, co_firstlineno, co_code_adaptive, co_tlbc;
    long ob_type;
    long uni_state, uni_length, uni_asciiobject_size;
    long co_firsttraceable_value;                 /* _co_firsttraceable's offset (not in the struct); -1 unknown */
} dbglayout;
static const dbglayout DBG_LAYOUTS[] = {
    {13, 584, 184, 232, 240, 248, 264, -1, 280, 296, 312, 344, -1, 360, 544, 552, 560, 184},
    {14, 760, 208, 256, 264, 272, 288, 304, 320, 336, 352, 384, 392, 408, 624, 632, 640, -1},
};
#define DBG_COOKIE "xdebugpy"
static pyoff g_dbg;       /* the offsets read from _PyRuntime (3.13+) */

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

static uint64_t dbg_u64(const char *rt, long at) { return at < 0 ? (uint64_t)-1 : RD(rt, at, uint64_t); }

/* 3.13+: fill g_dbg from this interpreter's _Py_DebugOffsets; 1 ok, 2 off (note written). */
static int resolve_debug_offsets(int minor, const char *v) {
    char msg[256];
    const char *rt = (const char *)sym("_PyRuntime");
    if (!rt || memcmp(rt, DBG_COOKIE, 8) != 0) {
        snprintf(msg, sizeof msg, "python stacks off: CPython 3.%d without _Py_DebugOffsets in _PyRuntime "
                 "(cannot find its frames)", minor);
        pi_note(msg);
        return 2;
    }
    uint64_t hex = RD(rt, 8, uint64_t), ft = RD(rt, 16, uint64_t);
    if ((hex >> 24) != 3 || (int)((hex >> 16) & 0xff) != minor) {
        snprintf(msg, sizeof msg, "python stacks off: _PyRuntime says version 0x%llx, Py_GetVersion %.20s",
                 (unsigned long long)hex, v);
        pi_note(msg);
        return 2;
    }
    const dbglayout *L = NULL;
    for (size_t i = 0; i < sizeof DBG_LAYOUTS / sizeof DBG_LAYOUTS[0]; i++)
        if (DBG_LAYOUTS[i].minor == minor) L = &DBG_LAYOUTS[i];
    if (!L) {
        snprintf(msg, sizeof msg, "python stacks off: CPython 3.%d is not supported (3.10-3.14: the layout of its "
                 "_Py_DebugOffsets is not known to this pyinterpose)", minor);
        pi_note(msg);
        return 2;
    }
    pyoff *o = &g_dbg;
    memset(o, 0, sizeof *o);
    o->minor = minor;
    o->ts_frame = (long)dbg_u64(rt, L->ts_current_frame);
    o->cf_current = -1;
    o->f_code = (long)dbg_u64(rt, L->fr_executable);
    o->f_back = (long)dbg_u64(rt, L->fr_previous);
    o->f_instr = (long)dbg_u64(rt, L->fr_instr_ptr);
    o->f_owner = (long)dbg_u64(rt, L->fr_owner);
    o->co_filename = (long)dbg_u64(rt, L->co_filename);
    o->co_name = (long)dbg_u64(rt, L->co_name);
    o->co_firstlineno = (long)dbg_u64(rt, L->co_firstlineno);
    o->co_code = (long)dbg_u64(rt, L->co_code_adaptive);
    o->co_firsttraceable = ft ? -1 : L->co_firsttraceable_value;
    o->ob_type = (long)dbg_u64(rt, L->ob_type);
    o->uni_state = (long)dbg_u64(rt, L->uni_state);
    o->uni_length = (long)dbg_u64(rt, L->uni_length);
    o->uni_ascii = (long)dbg_u64(rt, L->uni_asciiobject_size);
    o->uni_utf8 = o->uni_ascii + 8;      /* PyCompactUnicodeObject: utf8_length, utf8, then the data */
    o->uni_compact = o->uni_ascii + 16;
    o->kind_shift = (ft && minor >= 14) ? 8 : 2;
    o->stackref = minor >= 14;
    o->co_tlbc = o->f_tlbc_index = -1;
    if (ft && L->co_tlbc >= 0 && L->fr_tlbc_index >= 0) {
        o->co_tlbc = (long)dbg_u64(rt, L->co_tlbc);
        o->f_tlbc_index = (long)dbg_u64(rt, L->fr_tlbc_index);
    }
    /* every offset inside a sane bound: a layout read at the wrong places gives garbage */
    long all[] = {o->ts_frame, o->f_code, o->f_back, o->f_instr, o->f_owner, o->co_filename, o->co_name,
                  o->co_firstlineno, o->co_code, o->ob_type, o->uni_state, o->uni_length, o->uni_ascii};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i] < 0 || all[i] > 65536) {
            snprintf(msg, sizeof msg, "python stacks off: CPython 3.%d's _Py_DebugOffsets look wrong (field %zu "
                     "at %ld)", minor, i, all[i]);
            pi_note(msg);
            return 2;
        }
    P = o;
    return 1;
}

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
    P = NULL;
    if (major == 3 && minor >= 13) {
        if (resolve_debug_offsets(minor, v ? v : "?") != 1) return 2;
    } else {
        if (v && strstr(v, "free-threading")) {
            snprintf(msg, sizeof msg, "python stacks off: the free-threaded CPython build is not supported before "
                     "3.13 (%.60s)", v);
            pi_note(msg);
            return 2;
        }
        if (sym("_Py_GetRefTotal") || sym("_Py_GetGlobalRefTotal") || sym("_Py_PrintReferences")) {
            pi_note("python stacks off: debug builds of CPython before 3.13 are not supported (their object "
                    "layout differs)");
            return 2;
        }
        for (size_t i = 0; i < sizeof OFFSETS / sizeof OFFSETS[0]; i++)
            if (major == 3 && OFFSETS[i].minor == minor) P = &OFFSETS[i];
        if (!P) {
            snprintf(msg, sizeof msg, "python stacks off: CPython %d.%d is not supported (3.10-3.14)", major, minor);
            pi_note(msg);
            return 2;
        }
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
    if (!o || RD(o, P->ob_type, void *) != p_unicode_type || cap < 2) goto unknown;
    uint32_t state = RD(o, P->uni_state, uint32_t);
    int ks = P->kind_shift;
    int kind = (state >> ks) & 7, compact = (state >> (ks + 3)) & 1, ascii = (state >> (ks + 4)) & 1;
    int64_t len = RD(o, P->uni_length, int64_t);
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

/* The frame's code object: f_executable, a tagged _PyStackRef on 3.14+ (NULL when not an object). */
static inline void *executable(void *fr) {
    uintptr_t bits = RD(fr, P->f_code, uintptr_t);
    if (!P->stackref) return (void *)bits;
    if (bits == 1 || (bits & 3) == 3) return NULL;   /* PyStackRef_NULL, a tagged int */
    return (void *)(bits & ~(uintptr_t)1);
}

/* Start of the bytecode the frame runs: co_code_adaptive, or on free-threaded 3.14+ the thread's
 * own copy co_tlbc->entries[tlbc_index] (_PyCodeArray: Py_ssize_t size, char *entries[]). */
static inline char *bytecode(void *c, void *fr) {
    if (P->co_tlbc < 0) return (char *)c + P->co_code;
    int32_t idx = RD(fr, P->f_tlbc_index, int32_t);
    const char *arr = RD(c, P->co_tlbc, const char *);
    if (idx == 0 || !arr) return (char *)c + P->co_code;
    int64_t n = RD(arr, 0, int64_t);
    if (idx < 0 || idx >= n) return NULL;
    return RD(arr, 8 + 8 * (long)idx, char *);
}

/* Innermost first into code[]/lasti[]; returns the count; *more when frames were left. */
static int walk(void *ts, void **code, int *lasti, int max, int *more) {
    int n = 0;
    *more = 0;
    if (P->minor == 10) {
        void *f = RD(ts, P->ts_frame, void *);
        for (int guard = 0; f && guard < 100000; guard++) {
            void *c = RD(f, P->f_code, void *);
            if (c && RD(c, P->ob_type, void *) == p_code_type) {
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
        unsigned char owner = RD(fr, P->f_owner, unsigned char);
        void *c = executable(fr);
        if (owner < OWNED_BY_NOT_PYTHON && c && RD(c, P->ob_type, void *) == p_code_type) {
            char *first = bytecode(c, fr);
            char *instr = RD(fr, P->f_instr, char *);
            int incomplete = !first || (owner != OWNED_BY_GENERATOR && P->co_firsttraceable >= 0 &&
                                        instr < first + 2 * (long)RD(c, P->co_firsttraceable, int));
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
