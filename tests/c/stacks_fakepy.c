/* stacks_fakepy.c — a program that claims to be CPython: it exports
 * Py_GetVersion (build with -rdynamic) returning $FAKE_PY_VERSION, then
 * allocates.  The shim must refuse Python stacks with a note, never read it. */
#include <stdlib.h>

int cudaMalloc(void **p, size_t n);
int cudaFree(void *p);

const char *Py_GetVersion(void) { return getenv("FAKE_PY_VERSION"); }

int main(void) {
    void *p = NULL;
    if (cudaMalloc(&p, 4096) != 0) return 1;
    return cudaFree(p) != 0;
}
