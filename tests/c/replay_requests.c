/*
 * replay_requests.c — replays a recorded request stream through cudaMallocAsync / cudaFreeAsync on the
 * legacy stream: the file holds int64 triples (op, size, index) in the recorded order, op 1 = allocate
 * block `index` of `size` bytes, op 2 = free it.  Each block gets a tag in its first and last 8 bytes,
 * checked before its free (exit 1 with a message when another block wrote there).  Prints one JSON line.
 *
 *   replay_requests EVENTS.bin
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "pi_cuda.h"

cudaError_t cudaMallocAsync(void **, size_t, cudaStream_t);
cudaError_t cudaFreeAsync(void *, cudaStream_t);
cudaError_t cudaSetDevice(int);

static uint64_t tag(int64_t i, int end) { return (uint64_t)i * 0x9E3779B97F4A7C15ull ^ (end ? 0xABCDu : 0x1234u); }

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    FILE *f = fopen(argv[1], "rb");
    if (!f) return 2;
    fseek(f, 0, SEEK_END);
    long n = ftell(f) / 24;
    fseek(f, 0, SEEK_SET);
    int64_t *ev = malloc((size_t)n * 24);
    if (!ev || fread(ev, 24, (size_t)n, f) != (size_t)n) return 2;
    fclose(f);
    int64_t nblocks = 0;
    for (long i = 0; i < n; i++)
        if (ev[3 * i + 2] + 1 > nblocks) nblocks = ev[3 * i + 2] + 1;
    void **p = calloc((size_t)nblocks, sizeof *p);
    int64_t *size = calloc((size_t)nblocks, sizeof *size);
    if (!p || !size || cudaSetDevice(0)) return 2;
    long allocs = 0, frees = 0;
    for (long i = 0; i < n; i++) {
        int64_t op = ev[3 * i], sz = ev[3 * i + 1], b = ev[3 * i + 2];
        if (op == 1) {
            if (cudaMallocAsync(&p[b], (size_t)sz, 0)) { fprintf(stderr, "replay: allocation %ld failed\n", i); return 3; }
            size[b] = sz;
            allocs++;
            if (sz >= 16) {
                *(uint64_t *)p[b] = tag(b, 0);
                *(uint64_t *)((char *)p[b] + (sz & ~7) - 8) = tag(b, 1);
            }
        } else {
            sz = size[b];
            if (sz >= 16 && (*(uint64_t *)p[b] != tag(b, 0) || *(uint64_t *)((char *)p[b] + (sz & ~7) - 8) != tag(b, 1))) {
                fprintf(stderr, "replay: block %lld (%lld bytes at %p) was overwritten while live\n", (long long)b,
                        (long long)sz, p[b]);
                return 1;
            }
            if (cudaFreeAsync(p[b], 0)) return 3;
            frees++;
        }
    }
    printf("{\"allocs\": %ld, \"frees\": %ld}\n", allocs, frees);
    return 0;
}
