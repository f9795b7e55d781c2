/*
 * shim_failures.c — allocations that fail, with their out-parameters holding
 * garbage (the driver leaves them alone): the shim must record each failure
 * with the size that was asked for, never read what the call did not write.
 * Prints {"w": W, "h": H, "size": S} (JSON).
 */
#include <stdio.h>
#include <string.h>

#include "pi_cuda.h"

cudaError_t cudaMallocPitch(void **p, size_t *pitch, size_t w, size_t h);
cudaError_t cudaMalloc(void **p, size_t n);

int main(void) {
    void *p = (void *)0x1234567;
    size_t pitch = 0x7777777; /* garbage: a failed call does not write it */
    size_t w = 1 << 20, h = 1 << 26; /* 64 TiB: more than the simulated device */
    cudaError_t e1 = cudaMallocPitch(&p, &pitch, w, h);
    void *q = (void *)0x7654321;
    cudaError_t e2 = cudaMalloc(&q, (size_t)1 << 50);
    if (!e1 || !e2) return 3;
    printf("{\"w\": %zu, \"h\": %zu, \"size\": %zu}\n", w, h, (size_t)1 << 50);
    return 0;
}
