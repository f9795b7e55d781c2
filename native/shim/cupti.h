/* cupti.h — the device clock (native/shim/cupti.c): internal interface of the preload library. */
#ifndef PI_SHIM_CUPTI_H
#define PI_SHIM_CUPTI_H
#include <stdint.h>

#define PI_GPU_HIDDEN __attribute__((visibility("hidden")))
/* The external correlation kind the shim pushes its seqs under: CUSTOM2, because torch.profiler (Kineto)
 * pushes its own ids under CUSTOM0 and CUSTOM1 (its Default and User flows): an id of ours on top of
 * that stack would take its ops' place in its records. */
#define PI_GPU_CORR_KIND PI_CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2

/* Before a launch / copy / memset / graph launch reserves its event's tickets: sets CUPTI up on first use
 * (never while a stream capture is open) and writes the process's CLOCK event when the state changed.
 * 1 when the device clock is on (then pi_gpu_push once the ticket is reserved). */
PI_GPU_HIDDEN int pi_gpu_ready(void);
/* Pushes the event's seq as the external correlation id (not while a capture is open); the thread holds
 * the uncommitted ticket until pi_gpu_tick.  1 when pushed (then pi_gpu_pop after the real call). */
PI_GPU_HIDDEN int pi_gpu_push(uint64_t seq);
PI_GPU_HIDDEN void pi_gpu_pop(void);
/* After the call's event is committed (`now`: a recent CLOCK_MONOTONIC read, the call's own time): hands
 * CUPTI's finished records to the ring when the flush interval has passed (never during a stream capture). */
PI_GPU_HIDDEN void pi_gpu_tick(uint64_t now);
/* A stream capture began (+1) or ended (-1) in this process: no CUPTI call while one is open. */
PI_GPU_HIDDEN void pi_gpu_capture(int delta);
/* A stream capture is open in this process (oom.c: no cuMemGetInfo then either). */
PI_GPU_HIDDEN int pi_gpu_capturing(void);
/* Another CUPTI client (the program's profiler) makes an activity call (cupti_share.c; `who`: the call and
 * its caller's object): before the setup, the device clock stays off for good; after it, CUPTI is handed
 * back (records flushed into the trace, the shim's kinds disabled, no further CUPTI call). */
PI_GPU_HIDDEN void pi_gpu_yield(const char *who);
/* A client subscribed to CUPTI's callback API through the shim's cuptiSubscribe (cupti_share.c). */
PI_GPU_HIDDEN int pi_gpu_client_subscribed(void);
/* dlsym found `p` for a cupti* `name`: the shim's entry point for the calls it watches, else p. */
PI_GPU_HIDDEN void *pi_cupti_dlsym(const char *name, void *p);
/* In a fork() child: the parent's CUPTI state is never used here. */
PI_GPU_HIDDEN void pi_gpu_atfork_child(void);

#endif
