/*
 * window.c — capture windows: the program's own "record from here" / "stop here".
 *
 * cudaProfilerStart/Stop and cuProfilerStart/Stop (hooks.def, A_WINDOW) and pyinterpose.start()/stop()
 * (the exported pyinterpose_window below) each write one PI_OP_WINDOW record in ring order, so the drain
 * (pyinterpose/capture/window.py) opens or closes the window exactly between the calls before and after.
 * The shim keeps recording the allocation stream (allocations, frees, their call sites, markers) and its
 * live-block map throughout: the drain needs every allocation to write the snapshot of the blocks live
 * when a window opens and the run's per-step history, whatever the window.
 *
 * With $PYINTERPOSE_WINDOW_GATE set by `run`, the shim itself knows when the window is closed, and writes
 * no launch, copy, memset, TMA descriptor or access record meanwhile (hooks.c asks pi_window_recording()):
 * the bulk of a step's records costs nothing outside the window.  Allocations, frees, call sites, markers
 * and window edges are always written.  The drain still cuts the window exactly; the gate only has to be
 * open wherever the drain's window is (it may open a little early and close a little late, never the
 * other way round):
 *   1 (`--capture-range cudaProfilerApi`), 2 (`markers`): the program's own calls (pi_window_edge);
 *   3 (`signal`): one 8-byte word of the file $PYINTERPOSE_WINDOW_GATE_FILE (in run's ring folder), mapped
 *     read-only at the first gated call: `run` writes 2 (open) on the SIGUSR2 that opens the window before
 *     it takes the signal's time, and 1 (closed) after it on the one that closes it
 *     (pyinterpose/capture/window_gate.py).  A process that cannot map it records everything;
 *   4 (`--steps A:B`, with $PYINTERPOSE_WINDOW_STEPS = "A:B"): the shim counts pyinterpose.mark_step()
 *     markers as the drain does (step k begins at the (k+1)-th marker).  Two counts keep the edge safe
 *     between threads: g_marks_begun is raised before a marker's record is written, g_marks_done after it,
 *     so a launch racing with the marker that opens the window is recorded, and one racing with the
 *     marker that closes it too.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shim.h"

static int g_gate = -1;           /* -1: not read yet; 0: no gating; else the pi_window_source that gates */
static volatile int g_open;       /* the gated window is open (gates 1 and 2) */
static uint64_t g_step_a, g_step_b;                 /* gate 4: steps A to B-1 */
static volatile uint64_t g_marks_begun, g_marks_done; /* gate 4: markers written (see above) */
static const uint64_t *g_word;    /* gate 3: run's word (1 closed, 2 open) */

static int map_word(const char *path) {
    if (!path || !*path) return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    void *p = mmap(NULL, sizeof(uint64_t), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return 0;
    const uint64_t *expect = NULL;
    if (!__atomic_compare_exchange_n(&g_word, &expect, (const uint64_t *)p, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        munmap(p, sizeof(uint64_t)); /* a racing thread mapped it first */
    return 1;
}

static int parse_steps(const char *e) {
    char *end;
    if (!e) return 0;
    unsigned long long a = strtoull(e, &end, 10);
    if (end == e || *end != ':') return 0;
    const char *p = end + 1;
    unsigned long long b = strtoull(p, &end, 10);
    if (end == p || *end || b <= a) return 0;
    g_step_a = a;
    g_step_b = b;
    return 1;
}

static int gate(void) {
    int g = __atomic_load_n(&g_gate, __ATOMIC_ACQUIRE);
    if (PI_UNLIKELY(g < 0)) {   /* first use (a hooked call, never at load time) */
        const char *e = getenv("PYINTERPOSE_WINDOW_GATE");
        g = e && e[0] >= '1' && e[0] <= '4' && !e[1] ? e[0] - '0' : 0;
        if (g == PI_WINDOW_STEPS && !parse_steps(getenv("PYINTERPOSE_WINDOW_STEPS"))) g = 0;
        if (g == PI_WINDOW_SIGNAL && !map_word(getenv("PYINTERPOSE_WINDOW_GATE_FILE"))) g = 0;
        __atomic_store_n(&g_gate, g, __ATOMIC_RELEASE);
    }
    return g;
}

int pi_window_recording(void) {
    int g = gate();
    if (PI_LIKELY(!g)) return 1;
    if (g == PI_WINDOW_SIGNAL) return __atomic_load_n(g_word, __ATOMIC_ACQUIRE) != 1;
    if (g == PI_WINDOW_STEPS) /* step k runs from marker k+1 to marker k+2 */
        return __atomic_load_n(&g_marks_begun, __ATOMIC_ACQUIRE) > g_step_a &&
               __atomic_load_n(&g_marks_done, __ATOMIC_ACQUIRE) <= g_step_b;
    return __atomic_load_n(&g_open, __ATOMIC_ACQUIRE);
}

void pi_window_mark_begin(void) { __atomic_fetch_add(&g_marks_begun, 1, __ATOMIC_ACQ_REL); }
void pi_window_mark_end(void) { __atomic_fetch_add(&g_marks_done, 1, __ATOMIC_ACQ_REL); }

/* a fork child is a process of its own for the drain: its steps count from its first marker */
void pi_window_atfork_child(void) {
    g_marks_begun = 0;
    g_marks_done = 0;
}

void pi_window_edge(int api, int result, int edge, int source) {
    if (result == 0 && source == gate())
        __atomic_store_n(&g_open, edge == PI_WINDOW_START, __ATOMIC_RELEASE);
    pi_emit(PI_OP_WINDOW, (uint16_t)api, result, 0, 0, 0, (uint64_t)source, (uint16_t)edge);
}

/* ---- public: pyinterpose.start() (on != 0) / pyinterpose.stop() ---- */
__attribute__((visibility("default"))) int pyinterpose_window(int on) {
    if (pi_t.depth > 0 || !pi_active()) return 0;
    pi_t.depth++;
    pi_window_edge(0, 0, on ? PI_WINDOW_START : PI_WINDOW_STOP, PI_WINDOW_MARKERS);
    pi_t.depth--;
    return 1;
}
