/*
 * replay.h — re-run one process of a trace on simcuda (pyinterpose.examples.replay, issue 31).
 *
 * Python reads the trace and hands the process's operations over in time order; this loop issues each
 * at its recorded time (the host sleeps until then: the program's own pace), through the ordinary CUDA
 * runtime (so the shim sees a program like any other):
 *   ALLOC  cudaMallocAsync / cudaMalloc / cuMemAlloc_v2 (as recorded) of the block's size;
 *   FREE   the matching free;
 *   LAUNCH a kernel registered under the recorded kernel's name, its arguments the recorded blocks
 *          (param 0: the op's index, params 1..PI_REPLAY_MAX_ARGS: the blocks' device pointers), with
 *          the recorded device duration (or the gap to the next call on the CPU clock);
 *   COPY   cudaMemcpyAsync between the recorded block(s) and a host buffer.
 * With check on (SIMCUDA_CHECK=1), each kernel verifies the pattern the previous kernel wrote at
 * sampled offsets of every block it touches (the first and last 8 bytes and one word per MiB), then
 * writes its own: a block served at a wrong address, shared with another or not brought back intact
 * shows as a mismatch.
 */
#ifndef PYINTERPOSE_REPLAY_H
#define PYINTERPOSE_REPLAY_H
#include <stdint.h>

/* BEGIN CDEF */
#define PI_REPLAY_MAX_ARGS 64
enum { PI_RP_ALLOC = 0, PI_RP_FREE = 1, PI_RP_LAUNCH = 2, PI_RP_COPY = 3 };
enum { PI_RP_API_ASYNC = 0, PI_RP_API_SYNC = 1, PI_RP_API_DRIVER = 2 };

typedef struct {
    int64_t n_ops;
    const int64_t *kind;      /* PI_RP_* */
    const int64_t *t;         /* release time, ns from the first op */
    const int64_t *a;         /* ALLOC/FREE: block slot; LAUNCH: kernel index; COPY: device slot */
    const int64_t *b;         /* ALLOC: size; LAUNCH: first index into acc; COPY: second slot or -1 */
    const int64_t *c;         /* ALLOC/FREE: PI_RP_API_*; LAUNCH: number of blocks; COPY: bytes */
    const int64_t *dur;       /* LAUNCH: device duration (ns); COPY: 1 device->host, 0 host->device */
    const int64_t *stream;    /* stream index (0: the legacy default stream) */
    const int64_t *acc;       /* LAUNCH: block slots */
    int64_t n_slots, n_kernels, n_streams;
    const char *const *kernel_names;
    int check;                /* verify and write the pattern */
    double speed;             /* 1.0: the recorded pace; 0: as fast as possible */
} pi_replay_in;

typedef struct {
    int64_t allocs, frees, launches, copies, failed_calls, check_errors, checked_words;
    int64_t first_error_op;
    double device_ns;         /* first op's release -> the device's end (cudaEventElapsedTime) */
    double host_ns;           /* first op's release -> the last op issued */
    double late_ns;           /* the most the host was behind its recorded pace */
    int64_t latest_op;        /* the op it was most behind at */
} pi_replay_out;

/* 0 on success; otherwise err holds one line */
int pi_replay_run(const pi_replay_in *in, pi_replay_out *out, char *err, int errlen);
/* END CDEF */

#endif
