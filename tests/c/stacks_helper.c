/* stacks_helper.c — a C library (soname libstacks_helper.so) that allocates
 * through libcudart: from the calling thread, and from threads that have no
 * Python thread state (plain pthreads, optionally named like PyTorch's autograd
 * workers).  Used by tests/py/stacks_workload.py. */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>

int cudaMalloc(void **p, size_t n);
int cudaFree(void *p);

__attribute__((noinline)) int helper_alloc(size_t n, void **out) { return cudaMalloc(out, n); }
int helper_free(void *p) { return cudaFree(p); }

typedef struct { size_t n; int count; const char *name; void **out; } job;

static void *worker(void *arg) {
    job *j = arg;
    if (j->name) prctl(PR_SET_NAME, j->name, 0, 0, 0);
    for (int i = 0; i < j->count; i++) cudaMalloc(&j->out[i], j->n);
    return NULL;
}

/* Allocates `count` blocks of n bytes on a new pthread (named `name` if not NULL). */
int helper_thread_alloc(size_t n, int count, const char *name, void **out) {
    pthread_t t;
    job j = {n, count, name, out};
    if (pthread_create(&t, NULL, worker, &j) != 0) return -1;
    pthread_join(t, NULL);
    return 0;
}
