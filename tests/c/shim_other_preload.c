/* A second preloaded library in the style of torch_memory_saver: it defines
 * cudaMalloc/cudaFree itself and forwards with dlsym(RTLD_NEXT, ...).  With
 * pyinterpose's dlsym override in the same process, RTLD_NEXT must still mean
 * "after *this* library", or the call recurses forever. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*malloc_fn)(void **, size_t);
typedef int (*free_fn)(void *);
static long g_calls;

__attribute__((visibility("default"))) int cudaMalloc(void **p, size_t n) {
    static malloc_fn next;
    if (!next) next = (malloc_fn)dlsym(RTLD_NEXT, "cudaMalloc");
    if (!next || (void *)next == (void *)cudaMalloc) { fprintf(stderr, "other: RTLD_NEXT broken\n"); abort(); }
    __atomic_fetch_add(&g_calls, 1, __ATOMIC_RELAXED); /* called from several threads */
    return next(p, n);
}

__attribute__((visibility("default"))) int cudaFree(void *p) {
    static free_fn next;
    if (!next) next = (free_fn)dlsym(RTLD_NEXT, "cudaFree");
    if (!next || (void *)next == (void *)cudaFree) { fprintf(stderr, "other: RTLD_NEXT broken\n"); abort(); }
    return next(p);
}

__attribute__((destructor)) static void report(void) {
    char *path = getenv("OTHER_PRELOAD_REPORT");
    if (path) {
        FILE *f = fopen(path, "a"); /* every process that loaded us appends its count */
        if (f) { fprintf(f, "%ld\n", g_calls); fclose(f); }
    }
}
