/* stacks_fakepy.c — a program that claims to be CPython: it exports
 * Py_GetVersion (build with -rdynamic) returning $FAKE_PY_VERSION, then
 * allocates.
 *
 * Without FAKE_PY_RUNTIME the shim must refuse Python stacks with a note and never
 * read it.  FAKE_PY_RUNTIME=3.14 (or 3.15) also exports a _PyRuntime that starts
 * with a _Py_DebugOffsets laid out as CPython 3.14's pycore_debug_offsets.h declares
 * it (the struct below, 760 bytes), and the functions and types the shim looks up;
 * the thread has a chain of 3.14 interpreter frames whose objects sit at offsets
 * no real CPython uses, so only a reader that takes them from the debug offsets
 * finds them:
 *   - f_executable is a tagged _PyStackRef (the code pointer | 1, or 1 for NULL);
 *   - owners are 3.14's: THREAD 0, GENERATOR 1, FRAME_OBJECT 2, INTERPRETER 3,
 *     CSTACK 4 (frames owned by the interpreter or the C stack are not Python's);
 *   - PyCode_Addr2Line(code, byte offset) = co_firstlineno + byte offset / 2.
 * FAKE_PY_FT=1: a free-threaded 3.14 build: free_threaded = 1, the str state's kind after a whole-byte
 * `interned`, and the innermost frame runs a thread-local copy of its bytecode (co_tlbc->entries[1],
 * tlbc_index 1), so its instruction offset is taken from that copy.
 * The expected stack, innermost first: train.py:15 forward, data.py:22 batches,
 * main.py:1 <module> (printed as one JSON line). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cudaMalloc(void **p, size_t n);
int cudaFree(void *p);

const char *Py_GetVersion(void) { return getenv("FAKE_PY_VERSION"); }

/* ---- CPython 3.14's _Py_DebugOffsets, field for field ---- */
typedef struct {
    char cookie[8];
    uint64_t version;
    uint64_t free_threaded;
    struct { uint64_t size, finalizing, interpreters_head; } runtime_state;
    struct {
        uint64_t size, id, next, threads_head, threads_main, gc, imports_modules, sysdict, builtins, ceval_gil,
            gil_runtime_state, gil_runtime_state_enabled, gil_runtime_state_locked, gil_runtime_state_holder,
            code_object_generation, tlbc_generation;
    } interpreter_state;
    struct {
        uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id, datastack_chunk, status;
    } thread_state;
    struct { uint64_t size, previous, executable, instr_ptr, localsplus, owner, stackpointer, tlbc_index; }
        interpreter_frame;
    struct {
        uint64_t size, filename, name, qualname, linetable, firstlineno, argcount, localsplusnames, localspluskinds,
            co_code_adaptive, co_tlbc;
    } code_object;
    struct { uint64_t size, ob_type; } pyobject;
    struct { uint64_t size, tp_name, tp_repr, tp_flags; } type_object;
    struct { uint64_t size, ob_item, ob_size; } tuple_object;
    struct { uint64_t size, ob_item, ob_size; } list_object;
    struct { uint64_t size, used, table, mask; } set_object;
    struct { uint64_t size, ma_keys, ma_values; } dict_object;
    struct { uint64_t size, ob_fval; } float_object;
    struct { uint64_t size, lv_tag, ob_digit; } long_object;
    struct { uint64_t size, ob_size, ob_sval; } bytes_object;
    struct { uint64_t size, state, length, asciiobject_size; } unicode_object;
    struct { uint64_t size, collecting; } gc;
    struct { uint64_t size, gi_name, gi_iframe, gi_frame_state; } gen_object;
    struct { uint64_t next, prev; } llist_node;
    struct {
        uint64_t eval_breaker, remote_debugger_support, remote_debugging_enabled, debugger_pending_call,
            debugger_script_path, debugger_script_path_size;
    } debugger_support;
} DebugOffsets314;
_Static_assert(sizeof(DebugOffsets314) == 760, "3.14's _Py_DebugOffsets is 760 bytes");

/* this fake build's own layout (deliberately unlike any real CPython's) */
enum { OB_TYPE = 16, TS_FRAME = 40, FR_PREV = 0, FR_EXEC = 24, FR_INSTR = 8, FR_OWNER = 34,
       CO_FILE = 48, CO_QUAL = 64, CO_NAME = 56, CO_FIRST = 76, CO_CODE = 128,
       U_LEN = 24, U_STATE = 40, U_ASCII = 56, FR_TLBC = 36, CO_TLBC = 96 };

struct { DebugOffsets314 d; char rest[4096]; } _PyRuntime;
char PyCode_Type[64], PyUnicode_Type[64];
static char tstate[256];
static char frames[8][64];
static char codes[5][256];
static char strs[10][128];
static int want_runtime, free_threaded;
static struct { int64_t size; char *entries[2]; } tlbc;
static char tlbc_copy[256];

void *PyGILState_GetThisThreadState(void) { return want_runtime ? tstate : NULL; }
void *PyThreadState_GetUnchecked(void) { return tstate; }
int PyGILState_Check(void) { return 1; }
int Py_IsInitialized(void) { return 1; }
int Py_IsFinalizing(void) { return 0; }
void Py_IncRef(void *o) { (void)o; }
int PyCode_Addr2Line(void *code, int byte_offset) {
    return *(int *)((char *)code + CO_FIRST) + byte_offset / 2;
}

#define PUT(base, off, T, v) (*(T *)((char *)(base) + (off)) = (v))

static void *mkstr(int i, const char *text) {
    char *o = strs[i];
    PUT(o, OB_TYPE, void *, PyUnicode_Type);
    PUT(o, U_LEN, int64_t, (int64_t)strlen(text));
    int ks = free_threaded ? 8 : 2;     /* `interned` is a whole byte in the free-threaded build */
    PUT(o, U_STATE, uint32_t, (1u << ks) | (1u << (ks + 3)) | (1u << (ks + 4))); /* kind 1, compact, ascii */
    memcpy(o + U_ASCII, text, strlen(text) + 1);
    return o;
}

static void *mkcode(int i, const char *file, const char *name, int first) {
    char *c = codes[i];
    PUT(c, OB_TYPE, void *, PyCode_Type);
    PUT(c, CO_FILE, void *, mkstr(2 * i, file));
    PUT(c, CO_QUAL, void *, mkstr(2 * i + 1, name));
    PUT(c, CO_NAME, void *, NULL);          /* the qualified name is the one to read */
    PUT(c, CO_FIRST, int, first);
    return c;
}

/* frame k: owner, f_executable bits, instruction index */
static void mkframe(int k, int owner, uintptr_t exec_bits, void *code, int index) {
    char *f = frames[k];
    PUT(f, FR_PREV, void *, k + 1 < 8 ? frames[k + 1] : NULL);
    PUT(f, FR_EXEC, uintptr_t, exec_bits);
    PUT(f, FR_INSTR, char *, code ? (char *)code + CO_CODE + 2 * index : NULL);
    PUT(f, FR_OWNER, unsigned char, (unsigned char)owner);
}

static void build(const char *ver) {
    DebugOffsets314 *d = &_PyRuntime.d;
    memcpy(d->cookie, "xdebugpy", 8);
    int minor = 14;
    sscanf(ver, "3.%d", &minor);
    d->version = 0x03000000ull | ((uint64_t)minor << 16) | 0xf0;
    d->free_threaded = (uint64_t)free_threaded;
    if (free_threaded) {
        d->interpreter_frame.tlbc_index = FR_TLBC;
        d->code_object.co_tlbc = CO_TLBC;
    }
    d->thread_state.current_frame = TS_FRAME;
    d->interpreter_frame.previous = FR_PREV;
    d->interpreter_frame.executable = FR_EXEC;
    d->interpreter_frame.instr_ptr = FR_INSTR;
    d->interpreter_frame.owner = FR_OWNER;
    d->code_object.filename = CO_FILE;
    d->code_object.name = CO_NAME;
    d->code_object.qualname = CO_QUAL;
    d->code_object.firstlineno = CO_FIRST;
    d->code_object.co_code_adaptive = CO_CODE;
    d->pyobject.ob_type = OB_TYPE;
    d->unicode_object.state = U_STATE;
    d->unicode_object.length = U_LEN;
    d->unicode_object.asciiobject_size = U_ASCII;

    void *fwd = mkcode(0, "train.py", "forward", 10);
    void *gen = mkcode(1, "data.py", "batches", 20);
    void *mod = mkcode(2, "main.py", "<module>", 1);
    void *entry = mkcode(3, "<entry>", "<interpreter entry>", 1);
    mkframe(0, 0, (uintptr_t)fwd | 1, fwd, 5);        /* tagged: a deferred reference */
    if (free_threaded) {                               /* runs the thread's own copy of the bytecode */
        tlbc.size = 2;
        tlbc.entries[0] = (char *)fwd + CO_CODE;
        tlbc.entries[1] = tlbc_copy;
        PUT(fwd, CO_TLBC, void *, &tlbc);
        PUT(frames[0], FR_TLBC, int32_t, 1);
        PUT(frames[0], FR_INSTR, char *, tlbc_copy + 2 * 5);
    }
    mkframe(1, 3, (uintptr_t)entry, entry, 0);         /* INTERPRETER (3.14): not a Python frame */
    mkframe(2, 1, (uintptr_t)gen, gen, 2);             /* GENERATOR */
    mkframe(3, 0, 1, NULL, 0);                         /* PyStackRef_NULL */
    mkframe(4, 4, (uintptr_t)entry | 1, entry, 0);     /* CSTACK is 4 in 3.14 */
    mkframe(5, 0, (uintptr_t)mod, mod, 0);
    PUT(frames[5], FR_PREV, void *, NULL);
    PUT(tstate, TS_FRAME, void *, frames[0]);
}

int main(void) {
    const char *rt = getenv("FAKE_PY_RUNTIME");
    const char *ft = getenv("FAKE_PY_FT");
    free_threaded = ft && ft[0] == '1';
    if (rt && *rt) {
        want_runtime = 1;
        build(rt);
    }
    void *p = NULL;
    if (cudaMalloc(&p, 4096) != 0) return 1;
    if (want_runtime)
        printf("{\"frames\": [[\"train.py\", \"forward\", 15], [\"data.py\", \"batches\", 22], "
               "[\"main.py\", \"<module>\", 1]]}\n");
    return cudaFree(p) != 0;
}
