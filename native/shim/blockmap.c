/*
 * blockmap.c — live addressable blocks, address -> (base, size, alloc seq),
 * for scanning launch arguments and copy operands.
 *
 * Layout: the address space is cut into 2 MiB granules; a hash table maps a
 * granule to a small vector of the blocks that overlap it, sorted by base.
 * Live blocks never overlap, so the block containing p is the predecessor of
 * p in granule(p)'s vector, if it reaches p.  A block is listed in every
 * granule it overlaps (large blocks are few).  One rwlock: launches read,
 * allocations and frees write.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

#define GRAN_SHIFT 21

typedef struct gvec {
    uint32_t n, cap;
    pi_block b[];
} gvec;

typedef struct gslot {
    uint64_t key; /* granule + 1; 0 = empty */
    gvec *v;
} gslot;

static pthread_rwlock_t g_lock = PTHREAD_RWLOCK_INITIALIZER;
static gslot *g_tab;
static uint64_t g_cap; /* power of two */
static uint64_t g_used;

static inline uint64_t hmix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

static gslot *find_slot(uint64_t key) {
    if (!g_tab) return NULL;
    for (uint64_t i = hmix(key) & (g_cap - 1);; i = (i + 1) & (g_cap - 1)) {
        if (g_tab[i].key == key) return &g_tab[i];
        if (g_tab[i].key == 0) return NULL;
    }
}

static int grow(void) {
    uint64_t ncap = g_cap ? g_cap * 2 : 1024;
    gslot *nt = calloc(ncap, sizeof(gslot));
    if (!nt) return -1;
    for (uint64_t j = 0; j < g_cap; j++) {
        if (!g_tab[j].key) continue;
        uint64_t i = hmix(g_tab[j].key) & (ncap - 1);
        while (nt[i].key) i = (i + 1) & (ncap - 1);
        nt[i] = g_tab[j];
    }
    free(g_tab);
    g_tab = nt;
    g_cap = ncap;
    return 0;
}

static gslot *get_slot(uint64_t key) {
    gslot *s = find_slot(key);
    if (s) return s;
    if ((g_used + 1) * 2 > g_cap && grow() != 0) return NULL;
    uint64_t i = hmix(key) & (g_cap - 1);
    while (g_tab[i].key) i = (i + 1) & (g_cap - 1);
    g_tab[i].key = key;
    g_tab[i].v = NULL;
    g_used++;
    return &g_tab[i];
}

/* index of the first entry with base > p */
static uint32_t upper(const gvec *v, uint64_t p) {
    uint32_t lo = 0, hi = v->n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (v->b[mid].base <= p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static void vec_insert(gslot *s, const pi_block *blk) {
    gvec *v = s->v;
    if (!v || v->n == v->cap) {
        uint32_t ncap = v ? v->cap * 2 : 4;
        gvec *nv = realloc(v, sizeof(gvec) + ncap * sizeof(pi_block));
        if (!nv) return;
        if (!v) nv->n = 0;
        nv->cap = ncap;
        s->v = v = nv;
    }
    uint32_t at = upper(v, blk->base);
    /* an entry with the same base is a stale block (free never seen): replace */
    if (at > 0 && v->b[at - 1].base == blk->base) {
        v->b[at - 1] = *blk;
        return;
    }
    memmove(&v->b[at + 1], &v->b[at], (v->n - at) * sizeof(pi_block));
    v->b[at] = *blk;
    v->n++;
}

static int vec_remove(gslot *s, uint64_t base, pi_block *out) {
    gvec *v = s ? s->v : NULL;
    if (!v) return 0;
    uint32_t at = upper(v, base);
    if (at == 0 || v->b[at - 1].base != base) return 0;
    if (out) *out = v->b[at - 1];
    memmove(&v->b[at - 1], &v->b[at], (v->n - at) * sizeof(pi_block));
    v->n--;
    return 1;
}

void pi_map_insert(uint64_t base, uint64_t size, uint64_t seq) {
    if (!base || !size) return;
    pi_block b = {base, size, seq};
    uint64_t g0 = base >> GRAN_SHIFT, g1 = (base + size - 1) >> GRAN_SHIFT;
    pthread_rwlock_wrlock(&g_lock);
    for (uint64_t g = g0; g <= g1; g++) {
        gslot *s = get_slot(g + 1);
        if (s) vec_insert(s, &b);
    }
    pthread_rwlock_unlock(&g_lock);
}

int pi_map_remove(uint64_t base, pi_block *out) {
    pi_block b;
    int found = 0;
    if (!base) return 0;
    pthread_rwlock_wrlock(&g_lock);
    gslot *s = find_slot((base >> GRAN_SHIFT) + 1);
    if (vec_remove(s, base, &b)) {
        found = 1;
        uint64_t g1 = (b.base + b.size - 1) >> GRAN_SHIFT;
        for (uint64_t g = (base >> GRAN_SHIFT) + 1; g <= g1; g++) vec_remove(find_slot(g + 1), base, NULL);
    }
    pthread_rwlock_unlock(&g_lock);
    if (found && out) *out = b;
    return found;
}

void pi_map_rdlock(void) { pthread_rwlock_rdlock(&g_lock); }
void pi_map_unlock(void) { pthread_rwlock_unlock(&g_lock); }

int pi_map_find_locked(uint64_t p, pi_block *out) {
    if (p < 4096 || !g_tab) return 0;
    gslot *s = find_slot((p >> GRAN_SHIFT) + 1);
    if (!s || !s->v || !s->v->n) return 0;
    uint32_t at = upper(s->v, p);
    if (at == 0) return 0;
    const pi_block *b = &s->v->b[at - 1];
    if (p - b->base < b->size) {
        *out = *b;
        return 1;
    }
    return 0;
}

void pi_map_atfork_prepare(void) { pthread_rwlock_wrlock(&g_lock); }
void pi_map_atfork_parent(void) { pthread_rwlock_unlock(&g_lock); }
void pi_map_atfork_child(void) {
    /* CUDA state does not survive fork: the child starts with no live blocks. */
    for (uint64_t i = 0; i < g_cap; i++) free(g_tab[i].v);
    free(g_tab);
    g_tab = NULL;
    g_cap = g_used = 0;
    pthread_rwlock_t fresh = PTHREAD_RWLOCK_INITIALIZER;
    memcpy(&g_lock, &fresh, sizeof fresh);
}
