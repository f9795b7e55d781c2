/*
 * apply_threads.c — a training loop on the main thread (the plan is made from it alone), and, when
 * HELPERS=N is set, N threads that allocate blocks of the loop's own sizes at the same time (so they
 * compete with the loop for the plan's keys and slots), plus, with DEV1=1 (and SIMCUDA_DEVICES=2), a
 * thread doing the same on device 1; with LOOPDEV=1 the loop itself runs on device 1 (after the weight,
 * allocated on device 0); with MARKS=1 each iteration begins with pyinterpose_mark() (found with dlsym: the
 * shim's marker, as pyinterpose.mark_step() calls it).  Every block gets a pattern of its own, checked before its free:
 * a byte overwritten while live -> exit 1 with a message.  Prints one JSON line: the requests made.
 *
 *   apply_threads ITERS
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pi_cuda.h"

cudaError_t cudaMalloc(void **, size_t);
cudaError_t cudaFree(void *);
cudaError_t cudaSetDevice(int);

#define K 12
static size_t size_of(int i) { return (size_t)4096 * (1 + (i * 5) % 9); } /* repeats: keys with ordinals */
#define ANCHOR ((size_t)3 << 20)                                             /* once per iteration */

static volatile int g_stop;
static uint64_t g_requests[8];

static void fill(void *p, size_t n, uint64_t tag) {
    uint64_t *w = p;
    for (size_t i = 0; i < n / 8; i++) w[i] = tag * 0x9E3779B97F4A7C15ull + i;
}
static int check(void *p, size_t n, uint64_t tag, const char *who) {
    const uint64_t *w = p;
    for (size_t i = 0; i < n / 8; i++)
        if (w[i] != tag * 0x9E3779B97F4A7C15ull + i) {
            fprintf(stderr, "apply_threads: %s: block %p (%zu bytes) overwritten at byte %zu\n", who, p, n, 8 * i);
            return 1;
        }
    return 0;
}

static int one(void **p, size_t n, uint64_t tag, uint64_t *count) {
    if (cudaMalloc(p, n)) return 2;
    (*count)++;
    fill(*p, n, tag);
    return 0;
}

static void *helper(void *arg) {
    int id = (int)(intptr_t)arg, dev = id == 7 ? 1 : 0;
    if (cudaSetDevice(dev)) return (void *)2;
    uint64_t tag = (uint64_t)id << 40;
    unsigned r = 12345u + (unsigned)id;
    while (!g_stop) {
        void *p[3];
        size_t n[3];
        for (int j = 0; j < 3; j++) {
            r = r * 1103515245u + 12345u;
            n[j] = size_of((int)(r >> 16) % K);
            if (one(&p[j], n[j], ++tag, &g_requests[id])) return (void *)2;
        }
        for (int j = 2; j >= 0; j--) {
            if (check(p[j], n[j], tag - (2 - j), "helper")) return (void *)1;
            if (cudaFree(p[j])) return (void *)3;
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 20;
    int helpers = getenv("HELPERS") ? atoi(getenv("HELPERS")) : 0;
    int dev1 = getenv("DEV1") && getenv("DEV1")[0] == '1';
    if (helpers > 6) helpers = 6;
    if (cudaSetDevice(0)) return 2;
    void *w;
    if (one(&w, (size_t)1 << 20, 1, &g_requests[0])) return 2; /* a weight: lives across iterations */
    pthread_t th[8];
    int nth = 0;
    for (int h = 0; h < helpers; h++) pthread_create(&th[nth++], NULL, helper, (void *)(intptr_t)(h + 1));
    if (dev1) pthread_create(&th[nth++], NULL, helper, (void *)(intptr_t)7);
    uint64_t tag = 100;
    int rc = 0;
    if (getenv("LOOPDEV") && cudaSetDevice(atoi(getenv("LOOPDEV")))) return 2;
    int (*mark)(const char *) = NULL;
    if (getenv("MARKS") && getenv("MARKS")[0] == '1') *(void **)&mark = dlsym(RTLD_DEFAULT, "pyinterpose_mark");
    for (int it = 0; it < iters && !rc; it++) {
        void *a, *p[K];
        if (mark) mark("step");
        if ((rc = one(&a, ANCHOR, ++tag, &g_requests[0]))) break;
        uint64_t t0 = tag;
        for (int i = 0; i < K && !rc; i++) rc = one(&p[i], size_of(i), ++tag, &g_requests[0]);
        for (int i = K - 1; i >= 0 && !rc; i -= 2) { /* half freed early, half late */
            rc = check(p[i], size_of(i), t0 + 1 + i, "loop") || cudaFree(p[i]);
        }
        for (int i = K - 2; i >= 0 && !rc; i -= 2) rc = check(p[i], size_of(i), t0 + 1 + i, "loop") || cudaFree(p[i]);
        if (!rc) rc = check(a, ANCHOR, t0, "loop") || cudaFree(a);
    }
    g_stop = 1;
    for (int i = 0; i < nth; i++) {
        void *ret;
        pthread_join(th[i], &ret);
        if (ret) rc = rc ? rc : (int)(intptr_t)ret;
    }
    if (!rc) rc = check(w, (size_t)1 << 20, 1, "weight") || cudaFree(w);
    uint64_t total = 0;
    for (int i = 0; i < 8; i++) total += g_requests[i];
    printf("{\"requests\": %llu, \"loop\": %llu, \"device1\": %llu}\n", (unsigned long long)total,
           (unsigned long long)g_requests[0], (unsigned long long)g_requests[7]);
    return rc;
}
