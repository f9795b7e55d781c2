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
 * With $PYINTERPOSE_WINDOW_GATE=1 (profiler records) or 2 (markers) -- `run --capture-range
 * cudaProfilerApi|markers` sets it -- the shim itself knows when that window is closed, and writes no
 * launch, copy, memset, TMA descriptor or access record meanwhile (hooks.c asks pi_window_recording()):
 * the bulk of a step's records costs nothing outside the window.  Windows the drain decides alone
 * (SIGUSR2, --steps) are not gated here.
 */
#include <stdlib.h>

#include "shim.h"

static int g_gate = -1;           /* -1: not read yet; 0: no gating; else the pi_window_source that gates */
static volatile int g_open;       /* the gated window is open */

static int gate(void) {
    int g = __atomic_load_n(&g_gate, __ATOMIC_ACQUIRE);
    if (PI_UNLIKELY(g < 0)) {   /* first use (a hooked call, never at load time) */
        const char *e = getenv("PYINTERPOSE_WINDOW_GATE");
        g = e && (e[0] == '1' || e[0] == '2') && !e[1] ? e[0] - '0' : 0;
        __atomic_store_n(&g_gate, g, __ATOMIC_RELEASE);
    }
    return g;
}

int pi_window_recording(void) {
    return !gate() || __atomic_load_n(&g_open, __ATOMIC_ACQUIRE);
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
