/* simtrain_oom.c — simtrain's own record of its live device allocations, and the ground truth it
 * writes at each failed request of an out-of-memory run (simtrain.h: enum simtrain_oom).
 *
 * One JSON object per line, per failed request:
 *   {"pid": P, "step": S, "api": "cudaMalloc", "size": N, "attempt": 1|2,
 *    "outcome": "near"|"final", "cached_bytes": C, "free_bytes": F, "total_bytes": T,
 *    "live_bytes": L, "live": [[address, size, "role"], ...]}
 * attempt 1 is the first try, 2 the retry after the cached blocks were released; "live" is every
 * device allocation the program holds from CUDA at that moment (cached blocks included), in
 * allocation order.  The line is written with one write() on an O_APPEND descriptor, so forked
 * workers can share the file. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "simtrain_oom.h"

struct held {
    uint64_t addr, size;
    const char *role;
};

static struct held *g_held;
static size_t g_n, g_cap;

void oom_track_reset(void)
{
    free(g_held);
    g_held = NULL;
    g_n = g_cap = 0;
}

int oom_track_add(uint64_t addr, uint64_t size, const char *role)
{
    if (g_n == g_cap) {
        size_t cap = g_cap ? 2 * g_cap : 256;
        struct held *h = realloc(g_held, cap * sizeof *h);
        if (!h) return -1;
        g_held = h;
        g_cap = cap;
    }
    g_held[g_n++] = (struct held){addr, size, role};
    return 0;
}

void oom_track_remove(uint64_t addr)
{
    for (size_t i = g_n; i-- > 0;) {
        if (g_held[i].addr == addr) {
            memmove(g_held + i, g_held + i + 1, (g_n - i - 1) * sizeof *g_held);
            g_n--;
            return;
        }
    }
}

struct buf {
    char *p;
    size_t n, cap;
    int bad;
};

static void put(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct buf *b, const char *fmt, ...)
{
    if (b->bad) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->bad = 1;
            return;
        }
        if ((size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = 2 * b->cap + (size_t)k + 64;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->bad = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
}

int oom_write_truth(const char *path, const struct oom_failure *f)
{
    if (!path || !*path) return 0;
    struct buf b = {malloc(4096), 0, 4096, 0};
    if (!b.p) return -1;
    uint64_t live = 0;
    for (size_t i = 0; i < g_n; i++) live += g_held[i].size;
    put(&b, "{\"pid\": %d, \"step\": %d, \"api\": \"%s\", \"size\": %llu, \"attempt\": %d, \"outcome\": \"%s\", "
            "\"cached_bytes\": %llu, \"free_bytes\": %llu, \"total_bytes\": %llu, \"live_bytes\": %llu, \"live\": [",
        (int)getpid(), f->step, f->api, (unsigned long long)f->size, f->attempt, f->outcome,
        (unsigned long long)f->cached_bytes, (unsigned long long)f->free_bytes,
        (unsigned long long)f->total_bytes, (unsigned long long)live);
    for (size_t i = 0; i < g_n; i++)
        put(&b, "%s[%llu, %llu, \"%s\"]", i ? ", " : "", (unsigned long long)g_held[i].addr,
            (unsigned long long)g_held[i].size, g_held[i].role);
    put(&b, "]}\n");
    int rc = -1;
    if (!b.bad) {
        int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            rc = write(fd, b.p, b.n) == (ssize_t)b.n ? 0 : -1;
            close(fd);
        }
    }
    free(b.p);
    return rc;
}
