/*
 * allocsim.h — the simulated allocators of pyinterpose.analysis.pools.allocators in C.
 *
 * One call replays a whole request stream (n requests in order: is_alloc[i],
 * block id, size in bytes, stream) through one allocator and returns what the
 * Python reference simulators return.  The specification is the module docstring
 * of pyinterpose/analysis/pools/allocators.py (PyTorch's caching allocator with
 * classic or expandable segments, TF/XLA BFC, NVIDIA CNMeM); the Python simulators
 * are the tests' reference (tests/unit/allocators_reference.py) and
 * tests/unit/test_pools_allocsim.py compares the two on random request streams and
 * on the real GPU traces.
 *
 * Conventions: capacity < 0 means none.  Block ids: a free of an id that is not
 * live is ignored; an alloc of an id that is live replaces it (the older block
 * stays allocated), as the Python dicts do.  Streams are compared by value
 * (unsigned, or signed when streams_signed != 0) where their order matters.
 *
 * reserved_after: NULL, or n int64 that receive the allocator's reserved curve:
 * the most bytes reserved from the device while each request was served — the
 * bytes reserved after it, except where the request grew and then released cached
 * memory to retry (then the high point within it) — so that its maximum is
 * peak_reserved.  cudaMalloc: the live rounded bytes.  After an out-of-memory stop
 * at request k, entry k holds the most reserved while k was tried and k+1..n-1 what
 * stays reserved.
 *
 * Every function returns 0, -1 when out of memory, or -2 when the input leaves
 * the range the C model handles exactly (a 64-bit overflow, a broken
 * invariant); the caller then refuses the input (one line: out of the simulators' range).
 */
#ifndef PYINTERPOSE_ALLOCSIM_H
#define PYINTERPOSE_ALLOCSIM_H
#include <stdint.h>

/* BEGIN CDEF */
typedef struct {
    int64_t peak_reserved;   /* most bytes held from the device at once */
    int64_t backing;         /* device allocations made (see the Python docstring) */
    int64_t peak_allocated;  /* most bytes handed to requests, rounding included */
    int64_t oom_at;          /* request index where the replay stopped, or -1 */
    /* pytorch expandable: segment_maps, pages_mapped, pages_unmapped, ranges, ranges_released
     * cnmem: streams (0/1), child_managers, borrowed, steals */
    int64_t details[8];
} pi_as_result;

/* cudaMalloc per request (below 2 MiB: 512 B rounding; from 2 MiB: whole 2 MiB pages).
 * details[0] = peak requested bytes (unrounded; over the whole stream). */
int pi_as_cudamalloc(int64_t n, const uint8_t *is_alloc, const int64_t *size, int64_t capacity,
                     int64_t *reserved_after, pi_as_result *out);

/* PyTorch caching allocator.  max_split_size: 0 = unset; divisions[16]: the
 * roundup_power2_divisions value of each [2^k, 2^(k+1)) MiB interval. */
int pi_as_pytorch(int64_t n, const uint8_t *is_alloc, const int64_t *bid, const int64_t *size,
                  const uint64_t *stream, int streams_signed, int64_t capacity,
                  int64_t max_split_size, const int64_t *divisions, int64_t max_non_split_rounding,
                  int64_t large_segment_size, int expandable_segments,
                  int64_t *reserved_after, pi_as_result *out);

/* TF/XLA BFC allocator. */
int pi_as_bfc(int64_t n, const uint8_t *is_alloc, const int64_t *bid, const int64_t *size,
              int64_t capacity, int allow_growth, int64_t max_internal_fragmentation,
              int64_t *reserved_after, pi_as_result *out);

/* NVIDIA CNMeM.  streams: 1 on, 0 off, -1 auto (on when the allocations use
 * more than one stream). */
int pi_as_cnmem(int64_t n, const uint8_t *is_alloc, const int64_t *bid, const int64_t *size,
                const uint64_t *stream, int64_t capacity, int64_t initial_bytes, int streams,
                int steal, int64_t *reserved_after, pi_as_result *out);
/* The same replays on requests by block (what pools.evaluate passes: 4 bytes a request):
 * req[i] = s (an allocation of slot s) or ~s (a free of slot s), 0 <= s < nslots; bsize[s]
 * the slot's size; its stream: bsidx[s], an index into svals[0..nstreams) as
 * pi_as_stream_ids numbers them (first seen over the requests).  Equal to the calls above with
 * block id s, size bsize[s] and stream svals[bsidx[s]] at request i. */
int64_t pi_as_stream_ids(int64_t n, const int32_t *req, int64_t nslots, const uint64_t *bstream, int32_t *sidx);
int pi_as_cudamalloc_b(int64_t n, const int32_t *req, int64_t nslots, const int64_t *bsize, int64_t capacity,
                       int64_t *reserved_after, pi_as_result *out);
int pi_as_pytorch_b(int64_t n, const int32_t *req, int64_t nslots, const int64_t *bsize, const int32_t *bsidx,
                    const uint64_t *svals, int64_t nstreams, int streams_signed, int64_t capacity,
                    int64_t max_split_size, const int64_t *divisions, int64_t max_non_split_rounding,
                    int64_t large_segment_size, int expandable_segments,
                    int64_t *reserved_after, pi_as_result *out);
int pi_as_bfc_b(int64_t n, const int32_t *req, int64_t nslots, const int64_t *bsize,
                int64_t capacity, int allow_growth, int64_t max_internal_fragmentation,
                int64_t *reserved_after, pi_as_result *out);
int pi_as_cnmem_b(int64_t n, const int32_t *req, int64_t nslots, const int64_t *bsize, const int32_t *bsidx,
                  const uint64_t *svals, int64_t nstreams, int64_t capacity, int64_t initial_bytes, int streams,
                  int steal, int64_t *reserved_after, pi_as_result *out);
/* END CDEF */

#endif
