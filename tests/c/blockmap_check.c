/*
 * blockmap_check.c — the shim's live-block map (native/shim/blockmap.c,
 * compiled in) against a plain reference: random inserts and removes of
 * non-overlapping blocks (small ones packed in a granule, large ones over many
 * granules, fresh addresses all the time so that emptied granules must be
 * dropped), every lookup of interior, edge and outside addresses compared.
 * Then 4 threads insert/remove/look up concurrently.  Exit 0 and "ok" when
 * everything matched; also prints the peak RSS growth in KiB.
 *
 *   blockmap_check OPS
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "shim.h"

void pi_scan_add(pi_scan *sc, const pi_block *b, uint16_t flags) {
    if (sc->n < PI_MAX_HITS) sc->hit[sc->n] = *b, sc->fl[sc->n] = flags, sc->n++;
}

#define SLOTS 128
static struct { uint64_t base, size, seq; int live; } ref[SLOTS];
static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }

static int fail(const char *what, uint64_t p) {
    fprintf(stderr, "MISMATCH %s at %#llx\n", what, (unsigned long long)p);
    return 1;
}

static int check_lookup(uint64_t p) {
    pi_block b;
    int want = -1;
    for (int i = 0; i < SLOTS; i++)
        if (ref[i].live && p - ref[i].base < ref[i].size) want = i;
    pi_map_rdlock();
    int got = pi_map_find_locked(p, &b);
    pi_map_unlock();
    if (got != (want >= 0)) return fail("found", p);
    if (got && (b.base != ref[want].base || b.size != ref[want].size || b.seq != ref[want].seq))
        return fail("block", p);
    return 0;
}

static void *worker(void *arg) {
    uint64_t base = (uint64_t)(uintptr_t)arg, seq = 0;
    for (int i = 0; i < 200000; i++) {
        uint64_t a = base + ((uint64_t)(i % 1000) << 22), size = 4096 + (uint64_t)(i % 7) * (1 << 20);
        pi_map_insert(a, size, ++seq);
        pi_block b;
        pi_map_rdlock();
        int ok = pi_map_find_locked(a + size - 1, &b) && b.base == a;
        pi_map_unlock();
        if (!ok || !pi_map_remove(a, &b) || b.size != size) {
            fprintf(stderr, "MISMATCH in thread at %#llx\n", (unsigned long long)a);
            exit(1);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    long ops = argc > 1 ? atol(argv[1]) : 200000;
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    uint64_t window = 1ull << 36, seq = 0;
    for (long op = 0; op < ops; op++) {
        int i = (int)(next() % SLOTS);
        if (ref[i].live) {
            pi_block b;
            if (!pi_map_remove(ref[i].base, &b) || b.size != ref[i].size || b.seq != ref[i].seq)
                return fail("remove", ref[i].base);
            ref[i].live = 0;
        } else {
            /* a fresh region of the address space every 64k ops; blocks inside it */
            uint64_t region = 0x100000000000ull + (uint64_t)(op >> 16) * window;
            uint64_t size = (next() & 3) ? 16 + next() % 70000 : (1 + next() % 8) << 21;
            uint64_t base = region + (next() % (window >> 12)) * 4096 + (next() & 1) * 1000;
            int overlap = 0;
            for (int j = 0; j < SLOTS && !overlap; j++)
                overlap = ref[j].live && base < ref[j].base + ref[j].size && ref[j].base < base + size;
            if (overlap) continue;
            ref[i].base = base, ref[i].size = size, ref[i].seq = ++seq, ref[i].live = 1;
            pi_map_insert(base, size, seq);
        }
        int k = (int)(next() % SLOTS);
        if (ref[k].live) {
            uint64_t b = ref[k].base, s = ref[k].size;
            if (check_lookup(b) || check_lookup(b + s - 1) || check_lookup(b + s) || check_lookup(b - 1) ||
                check_lookup(b + next() % s))
                return 1;
        }
        if (check_lookup(next())) return 1;
    }
    /* the word scan of a launch: every word of a buffer */
    uint64_t words[SLOTS];
    int expect = 0;
    for (int i = 0; i < SLOTS; i++) {
        words[i] = ref[i].live ? ref[i].base + ref[i].size / 2 : next() | 1;
        expect += ref[i].live;
    }
    pi_scan sc;
    memset(&sc, 0, sizeof sc);
    pi_map_rdlock();
    pi_scan_words(words, SLOTS, &sc);
    pi_map_unlock();
    if (sc.n != (expect < PI_MAX_HITS ? expect : PI_MAX_HITS)) return fail("scan_words", (uint64_t)sc.n);
    pthread_t th[4];
    for (int t = 0; t < 4; t++) pthread_create(&th[t], NULL, worker, (void *)(uintptr_t)(0x700000000000ull + ((uint64_t)t << 40)));
    for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);
    getrusage(RUSAGE_SELF, &ru1);
    printf("ok rss_growth_kib=%ld\n", ru1.ru_maxrss - ru0.ru_maxrss);
    return 0;
}
