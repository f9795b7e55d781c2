/*
 * window.c — capture windows: the program's own "record from here" / "stop here".
 *
 * cudaProfilerStart/Stop and cuProfilerStart/Stop (hooks.def, A_WINDOW) and pyinterpose.start()/stop()
 * (the exported pyinterpose_window below) each write one PI_OP_WINDOW record in ring order, so the drain
 * (pyinterpose/capture/window.py) opens or closes the window exactly between the calls before and after.
 * The shim itself keeps recording the allocation stream and its live-block map throughout: the drain
 * needs every allocation to write the snapshot of the blocks live when a window opens and the run's
 * per-step history, whatever the window.
 */
#include "shim.h"

void pi_window_edge(int api, int result, int edge, int source) {
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
