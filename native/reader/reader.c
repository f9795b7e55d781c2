/* reader.c — the trace reader's record pass; see reader.h. */
#include "reader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "events.h"

#define REC ((int64_t)sizeof(pi_event))

void pi_free(void *p) { free(p); }

/* ------------------------------------------------------------------ hash maps */
static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

typedef struct {
    uint64_t key;
    int64_t val;      /* -1: empty */
    int32_t pid;
    int32_t fam;
} slot;

typedef struct {      /* open addressing, linear probing, at most half full */
    slot *s;
    uint64_t mask;
    int64_t used;
} table;

static int table_init(table *t, int64_t n)
{
    uint64_t cap = 64;
    while (cap < (uint64_t)n * 2 + 16)
        cap <<= 1;
    t->s = malloc(cap * sizeof(slot));
    if (!t->s)
        return -1;
    for (uint64_t i = 0; i < cap; i++)
        t->s[i].val = -1;
    t->mask = cap - 1;
    t->used = 0;
    return 0;
}

static inline uint64_t home(const table *t, int32_t pid, int32_t fam, uint64_t key)
{
    return mix(key ^ mix(((uint64_t)(uint32_t)pid << 8) ^ (uint64_t)fam)) & t->mask;
}

/* position of the key, or of the empty slot where it would go */
static inline uint64_t find(const table *t, int32_t pid, int32_t fam, uint64_t key)
{
    uint64_t i = home(t, pid, fam, key);
    while (t->s[i].val >= 0 && !(t->s[i].key == key && t->s[i].pid == pid && t->s[i].fam == fam))
        i = (i + 1) & t->mask;
    return i;
}

static int table_grow(table *t)
{
    table n;
    if (table_init(&n, (int64_t)(t->mask + 1)))
        return -1;
    for (uint64_t i = 0; i <= t->mask; i++)
        if (t->s[i].val >= 0) {
            uint64_t h = find(&n, t->s[i].pid, t->s[i].fam, t->s[i].key);
            n.s[h] = t->s[i];
        }
    n.used = t->used;
    free(t->s);
    *t = n;
    return 0;
}

/* set key -> val (insert or replace); 0 or -1 */
static int put(table *t, int32_t pid, int32_t fam, uint64_t key, int64_t val)
{
    if ((uint64_t)(t->used + 1) * 2 > t->mask + 1 && table_grow(t))
        return -1;
    uint64_t h = find(t, pid, fam, key);
    if (t->s[h].val < 0) {
        t->used++;
        t->s[h].key = key;
        t->s[h].pid = pid;
        t->s[h].fam = fam;
    }
    t->s[h].val = val;
    return 0;
}

/* delete slot i (backward shift) */
static void erase(table *t, uint64_t i)
{
    uint64_t j = i;
    t->used--;
    for (;;) {
        t->s[i].val = -1;
        for (;;) {
            j = (j + 1) & t->mask;
            if (t->s[j].val < 0)
                return;
            uint64_t h = home(t, t->s[j].pid, t->s[j].fam, t->s[j].key);
            /* leave j where it is when its home lies cyclically in (i, j] */
            if (i <= j ? (i < h && h <= j) : (i < h || h <= j))
                continue;
            break;
        }
        t->s[i] = t->s[j];
        i = j;
    }
}

/* ------------------------------------------------------------------ the pass */
typedef struct {      /* a successful free, kept in case pairing must be redone in seq order */
    uint64_t key;
    int64_t seq, t;
    int32_t pid, fam;
} free_rec;

typedef struct {
    table live_addr;  /* (pid, family, key) -> alloc row of the live allocation */
    table live_seq;   /* (pid, 0, seq of the ALLOC) -> alloc row, live allocations only */
    free_rec *frees;  /* in memory, or (spilled) in f_free */
    int64_t n_free, cap_free;
    FILE *f_free;
    int64_t *al_seq;  /* per alloc row: its seq and pid (the records themselves may be spilled) */
    int32_t *al_pid;
    int64_t cap_al;
} state;

/* close a spill file (NULL: none); -1 when a write failed */
static int close_spill(void **f)
{
    int rc = 0;
    if (*f) {
        FILE *fp = *f;
        if (ferror(fp))
            rc = -1;
        if (fclose(fp))
            rc = -1;
        *f = NULL;
    }
    return rc;
}

static void rtab_free(pi_rtab *t)
{
    free(t->rec);
    free(t->pid);
    close_spill(&t->f_rec);
    close_spill(&t->f_pid);
    memset(t, 0, sizeof(*t));
}

static void state_free(state *st)
{
    if (!st)
        return;
    free(st->live_addr.s);
    free(st->live_seq.s);
    free(st->frees);
    free(st->al_seq);
    free(st->al_pid);
    if (st->f_free)
        fclose(st->f_free);
    free(st);
}

pi_split *pi_split_new(void)
{
    pi_split *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    state *st = calloc(1, sizeof(*st));
    if (!st || table_init(&st->live_addr, 1024) || table_init(&st->live_seq, 1024)) {
        state_free(st);
        free(s);
        return NULL;
    }
    s->internal = st;
    s->t_min = INT64_MAX;
    s->t_max = INT64_MIN;
    s->last_pid = INT32_MIN;
    return s;
}

void pi_split_free(pi_split *s)
{
    if (!s)
        return;
    rtab_free(&s->alloc);
    rtab_free(&s->launch);
    rtab_free(&s->copy);
    rtab_free(&s->hint);
    rtab_free(&s->fail);
    rtab_free(&s->side);
    rtab_free(&s->gpu);
    free(s->al_status);
    free(s->al_end_t);
    free(s->al_end_seq);
    free(s->acc);
    close_spill(&s->f_acc);
    free(s->pp_pid);
    free(s->pp_last_seq);
    free(s->pp_count);
    free(s->pp_own_seq);
    free(s->pp_own_t);
    free(s->pp_own_launch);
    free(s->pp_own_op);
    state_free(s->internal);
    free(s);
}

/* realloc *p to cap elements of size sz; 0 or -1 */
static int grow(void **p, int64_t cap, size_t sz)
{
    size_t bytes = (size_t)cap * sz;
    void *q = realloc(*p, bytes ? bytes : 1);
    if (!q)
        return -1;
    *p = q;
    return 0;
}

static int rtab_push(pi_rtab *t, const pi_event *e, int32_t pid)
{
    if (t->f_rec) {
        if (fwrite_unlocked(e, REC, 1, t->f_rec) != 1 || fwrite_unlocked(&pid, 4, 1, t->f_pid) != 1)
            return -1;
        t->n++;
        return 0;
    }
    if (t->n == t->cap) {
        int64_t cap = t->cap ? 2 * t->cap : 4096;
        if (grow(&t->rec, cap, REC) || grow((void **)&t->pid, cap, 4))
            return -1;
        t->cap = cap;
    }
    memcpy((char *)t->rec + t->n * REC, e, REC);
    t->pid[t->n] = pid;
    t->n++;
    return 0;
}

static int rtab_trim(pi_rtab *t)
{
    if (t->f_rec)
        return close_spill(&t->f_rec) | close_spill(&t->f_pid);
    if (t->n == t->cap || t->n == 0)
        return 0;
    grow(&t->rec, t->n, REC);      /* a failed shrink keeps the larger buffer: harmless */
    grow((void **)&t->pid, t->n, 4);
    t->cap = t->n;
    return 0;
}

static int64_t pid_slot(pi_split *s, int32_t pid)
{
    for (int64_t i = s->n_pids - 1; i >= 0; i--)
        if (s->pp_pid[i] == pid)
            return i;
    if (s->n_pids == s->cap_pids) {
        int64_t cap = s->cap_pids ? 2 * s->cap_pids : 8;
        if (grow((void **)&s->pp_pid, cap, 4) || grow((void **)&s->pp_last_seq, cap, 8) ||
            grow((void **)&s->pp_count, cap, 8) || grow((void **)&s->pp_own_seq, cap, 8) ||
            grow((void **)&s->pp_own_t, cap, 8) || grow((void **)&s->pp_own_launch, cap, 8) ||
            grow((void **)&s->pp_own_op, cap, 4))
            return -1;
        s->cap_pids = cap;
    }
    int64_t i = s->n_pids++;
    s->pp_pid[i] = pid;
    s->pp_last_seq[i] = 0;
    s->pp_count[i] = 0;
    s->pp_own_seq[i] = 0;
    s->pp_own_t[i] = 0;
    s->pp_own_launch[i] = -1;
    s->pp_own_op[i] = -1;
    return i;
}

static int family(int kind)
{
    switch (kind) {   /* device-like kinds share one address space */
    case PI_KIND_HOST: return 1;
    case PI_KIND_VMM_RESERVE: return 2;
    case PI_KIND_VMM_CREATE: return 3;
    case PI_KIND_VMM_MAP: return 4;
    default: return 0;
    }
}

static inline uint64_t pair_key(const pi_event *e)
{
    return e->flags == PI_KIND_VMM_CREATE ? e->aux : e->addr;
}


/* allocation `row` ended by the event (t, seq): 1 freed, 2 superseded; it is no longer live */
static void end_alloc(pi_split *s, state *st, int64_t row, int status, int64_t t, int64_t seq)
{
    s->al_status[row] = (int8_t)status;
    s->al_end_t[row] = t;
    s->al_end_seq[row] = seq;
    int32_t pid = st->al_pid[row];
    uint64_t h = find(&st->live_seq, pid, 0, (uint64_t)st->al_seq[row]);
    if (st->live_seq.s[h].val == row)
        erase(&st->live_seq, h);
}

static int on_alloc(pi_split *s, state *st, const pi_event *e, int32_t pid)
{
    int64_t row = s->alloc.n;
    if (row == st->cap_al) {
        int64_t cap = st->cap_al ? 2 * st->cap_al : 4096;
        if (grow((void **)&s->al_status, cap, 1) || grow((void **)&s->al_end_t, cap, 8) ||
            grow((void **)&s->al_end_seq, cap, 8) || grow((void **)&st->al_seq, cap, 8) ||
            grow((void **)&st->al_pid, cap, 4))
            return -1;
        st->cap_al = cap;
    }
    if (rtab_push(&s->alloc, e, pid))
        return -1;
    st->al_seq[row] = (int64_t)e->seq;
    st->al_pid[row] = pid;
    s->al_status[row] = 0;
    s->al_end_t[row] = 0;
    s->al_end_seq[row] = 0;
    int fam = family(e->flags);
    uint64_t key = pair_key(e);
    uint64_t h = find(&st->live_addr, pid, fam, key);
    if (st->live_addr.s[h].val >= 0) {
        end_alloc(s, st, st->live_addr.s[h].val, 2, (int64_t)e->t_ns, (int64_t)e->seq);
        st->live_addr.s[h].val = row;
    } else if (put(&st->live_addr, pid, fam, key, row)) {
        return -1;
    }
    return put(&st->live_seq, pid, 0, e->seq, row);
}

static int on_free(pi_split *s, state *st, const pi_event *e, int32_t pid)
{
    int fam = family(e->flags);
    uint64_t key = pair_key(e);
    free_rec fr = {key, (int64_t)e->seq, (int64_t)e->t_ns, pid, fam};
    if (st->f_free) {
        if (fwrite_unlocked(&fr, sizeof(fr), 1, st->f_free) != 1)
            return -1;
        st->n_free++;
    } else {
        if (st->n_free == st->cap_free) {
            int64_t cap = st->cap_free ? 2 * st->cap_free : 4096;
            if (grow((void **)&st->frees, cap, sizeof(free_rec)))
                return -1;
            st->cap_free = cap;
        }
        st->frees[st->n_free++] = fr;
    }
    s->n_free++;
    uint64_t h = find(&st->live_addr, pid, fam, key);
    int64_t row = st->live_addr.s[h].val;
    if (row < 0) {
        s->unmatched_free++;
        return 0;
    }
    erase(&st->live_addr, h);
    end_alloc(s, st, row, 1, (int64_t)e->t_ns, (int64_t)e->seq);
    return 0;
}

static int access_push(pi_split *s, state *st, int32_t pid, const pi_event *e, int64_t pp)
{
    pi_acc a;
    int32_t op = s->pp_own_op[pp];
    a.ref = (int64_t)e->aux;
    a.seq = s->pp_own_seq[pp];
    a.t = s->pp_own_t[pp];
    a.pid = pid;
    a.launch = (int32_t)s->pp_own_launch[pp];
    a.flags = e->flags;
    a.op = (uint8_t)(op < 0 ? 0 : op > 15 ? 15 : op);
    a.pad = 0;
    int64_t row = st->live_seq.s[find(&st->live_seq, pid, 0, e->aux)].val;
    a.row = (int32_t)row;
    if (row < 0)
        s->a_pending++;
    if (s->f_acc) {
        if (fwrite_unlocked(&a, sizeof(a), 1, s->f_acc) != 1)
            return -1;
        s->a_n++;
        return 0;
    }
    if (s->a_n == s->a_cap) {
        int64_t cap = s->a_cap ? 2 * s->a_cap : 16384;
        if (grow((void **)&s->acc, cap, sizeof(pi_acc)))
            return -1;
        s->a_cap = cap;
    }
    s->acc[s->a_n++] = a;
    return 0;
}

static FILE *open_spill(const char *dir, const char *name)
{
    char path[4096];
    if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
        return NULL;
    FILE *f = fopen(path, "w+be");     /* read back by pair_in_seq_order */
    if (f)
        setvbuf(f, NULL, _IOFBF, 1 << 20);
    return f;
}

int pi_split_spill(pi_split *s, const char *dir)
{
    struct { pi_rtab *t; const char *rec, *pid; } tabs[] = {
        {&s->alloc, "alloc.rec", "alloc.pid"}, {&s->launch, "launch.rec", "launch.pid"}, {&s->copy, "copy.rec", "copy.pid"},
        {&s->hint, "hint.rec", "hint.pid"}, {&s->fail, "fail.rec", "fail.pid"},
        {&s->side, "side.rec", "side.pid"}, {&s->gpu, "gpu.rec", "gpu.pid"},
    };
    if (s->n_events)
        return -1;
    for (size_t i = 0; i < sizeof(tabs) / sizeof(tabs[0]); i++) {
        tabs[i].t->f_rec = open_spill(dir, tabs[i].rec);
        tabs[i].t->f_pid = open_spill(dir, tabs[i].pid);
        if (!tabs[i].t->f_rec || !tabs[i].t->f_pid)
            return -1;
    }
    state *st = s->internal;
    st->f_free = open_spill(dir, "frees.bin");
    s->f_acc = open_spill(dir, "acc.bin");
    return s->f_acc && st->f_free ? 0 : -1;
}

static int is_call(int op)
{
    switch (op) {
    case PI_OP_ALLOC: case PI_OP_FREE: case PI_OP_LAUNCH: case PI_OP_COPY: case PI_OP_MEMSET:
    case PI_OP_ADVISE: case PI_OP_PREFETCH: case PI_OP_GRAPH_LAUNCH: case PI_OP_TENSORMAP: case PI_OP_OBJECT:
        return 1;
    default:
        return 0;
    }
}

int pi_split_feed(pi_split *s, const void *records, int64_t n, int32_t pid)
{
    state *st = s->internal;
    if (s->oom)
        return -1;
    if (n <= 0)
        return 0;
    if (s->last_pid != INT32_MIN && pid < s->last_pid)
        s->interleaved = 1;
    s->last_pid = pid;
    int64_t pp = pid_slot(s, pid);
    if (pp < 0)
        goto oom;
    const char *src = records;
    for (int64_t i = 0; i < n; i++) {
        pi_event e;
        memcpy(&e, src + i * REC, REC);
        int op = e.op;
        int ok = e.result == 0;
        int64_t t = (int64_t)e.t_ns, seq = (int64_t)e.seq;
        s->n_events++;
        s->op_count[op < 63 ? op : 63]++;
        if (ok)
            s->op_ok[op < 63 ? op : 63]++;
        if (op == PI_OP_GPU) {      /* device times: not the host's time range, owns no access */
            if (s->pp_count[pp]++ && seq <= s->pp_last_seq[pp])
                s->seq_disorder = 1;
            s->pp_last_seq[pp] = seq;
            if (rtab_push(&s->gpu, &e, pid))
                goto oom;
            continue;
        }
        if (t < s->t_min)
            s->t_min = t;
        if (t > s->t_max)
            s->t_max = t;
        if (s->pp_count[pp]++ && seq <= s->pp_last_seq[pp])
            s->seq_disorder = 1;
        s->pp_last_seq[pp] = seq;
        if (is_call(op)) {
            s->api_count[e.api]++;
            if (!ok && rtab_push(&s->fail, &e, pid))
                goto oom;
        }
        pi_rtab *tab = NULL;
        int64_t launch_row = -1;
        switch (op) {
        case PI_OP_ACCESS:
            if (s->pp_own_op[pp] < 0) {   /* nothing before it in this process: it owns itself */
                s->pp_own_op[pp] = op;
                s->pp_own_seq[pp] = seq;
                s->pp_own_t[pp] = t;
                s->pp_own_launch[pp] = -1;
            }
            if (access_push(s, st, pid, &e, pp))
                goto oom;
            continue;
        case PI_OP_ALLOC:
            if (ok && on_alloc(s, st, &e, pid))
                goto oom;
            break;
        case PI_OP_FREE:
            if (ok && (e.addr != 0 || e.flags == PI_KIND_VMM_CREATE) && on_free(s, st, &e, pid))
                goto oom;
            break;
        case PI_OP_LAUNCH: case PI_OP_GRAPH_LAUNCH:
            tab = &s->launch;
            launch_row = s->launch.n;
            break;
        case PI_OP_COPY: case PI_OP_MEMSET:
            tab = ok ? &s->copy : NULL;
            break;
        case PI_OP_ADVISE: case PI_OP_PREFETCH:
            tab = ok ? &s->hint : NULL;
            break;
        case PI_OP_STRING: case PI_OP_STRDATA: case PI_OP_MARKER: case PI_OP_SITE: case PI_OP_FRAME:
        case PI_OP_STACK: case PI_OP_NOTE: case PI_OP_CLOCK: case PI_OP_MEMINFO: case PI_OP_CONTEXT:
        case PI_OP_DEVICE: case PI_OP_GRAPH_DEF: case PI_OP_APPLY: case PI_OP_GRAPH_MEM: case PI_OP_SWAP:
            tab = &s->side;
            break;
        default:
            break;
        }
        if (tab && rtab_push(tab, &e, pid))
            goto oom;
        s->pp_own_op[pp] = op;
        s->pp_own_seq[pp] = seq;
        s->pp_own_t[pp] = t;
        s->pp_own_launch[pp] = launch_row;
    }
    return 0;
oom:
    s->oom = 1;
    return -1;
}

int pi_split_feed_many(pi_split *s, void *const *records, const int64_t *n, const int32_t *pid, int64_t k)
{
    for (int64_t i = 0; i < k; i++)
        if (pi_split_feed(s, records[i], n[i], pid[i]) < 0)
            return -1;
    return 0;
}

/* ------------------------------------------------------------------ pairing in seq order */
typedef struct {
    int64_t seq;
    int64_t ref;      /* alloc row, or ~free index */
    int32_t pid;
    int32_t is_free;
} pair_ev;

static int cmp_ev(const void *a, const void *b)
{
    const pair_ev *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    if (x->is_free != y->is_free)        /* allocations before frees, each in file order */
        return x->is_free - y->is_free;
    int64_t rx = x->is_free ? ~x->ref : x->ref, ry = y->is_free ? ~y->ref : y->ref;
    return rx < ry ? -1 : rx > ry;
}

/* the records of `alloc` (mapped from its spill file when spilled; *len: the length to unmap, else 0) */
static const char *alloc_records(pi_split *s, size_t *len)
{
    *len = 0;
    if (!s->alloc.f_rec)
        return s->alloc.rec;
    if (fflush(s->alloc.f_rec))
        return NULL;
    size_t n = (size_t)s->alloc.n * REC;
    if (!n)
        return "";
    void *p = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fileno(s->alloc.f_rec), 0);
    if (p == MAP_FAILED)
        return NULL;
    *len = n;
    return p;
}

/* the frees (read back from their spill file when spilled) */
static int load_frees(state *st)
{
    if (!st->f_free)
        return 0;
    FILE *f = st->f_free;
    st->f_free = NULL;
    free(st->frees);
    st->frees = malloc((size_t)(st->n_free + 1) * sizeof(free_rec));
    int rc = !st->frees || fflush(f) || fseek(f, 0, SEEK_SET) ||
             fread(st->frees, sizeof(free_rec), (size_t)st->n_free, f) != (size_t)st->n_free ? -1 : 0;
    fclose(f);
    st->cap_free = st->n_free;
    return rc;
}

static int pair_in_seq_order(pi_split *s, state *st)
{
    int64_t na = s->alloc.n, nf = st->n_free;
    size_t map_len;
    if (load_frees(st))
        return -1;
    const char *arec = alloc_records(s, &map_len);
    if (!arec)
        return -1;
    pair_ev *ev = malloc((size_t)(na + nf + 1) * sizeof(*ev));
    table t;
    if (!ev || table_init(&t, na)) {
        free(ev);
        if (map_len)
            munmap((void *)arec, map_len);
        return -1;
    }
    for (int64_t i = 0; i < na; i++) {
        ev[i].seq = st->al_seq[i];
        ev[i].ref = i;
        ev[i].pid = st->al_pid[i];
        ev[i].is_free = 0;
        s->al_status[i] = 0;
        s->al_end_t[i] = 0;
        s->al_end_seq[i] = 0;
    }
    for (int64_t j = 0; j < nf; j++) {
        ev[na + j].seq = st->frees[j].seq;
        ev[na + j].ref = ~j;
        ev[na + j].pid = st->frees[j].pid;
        ev[na + j].is_free = 1;
    }
    qsort(ev, (size_t)(na + nf), sizeof(*ev), cmp_ev);
    int64_t unmatched = 0;
    for (int64_t k = 0; k < na + nf; k++) {
        int32_t pid = ev[k].pid, fam;
        uint64_t key;
        int64_t tt, seq = ev[k].seq;
        if (ev[k].is_free) {
            const free_rec *f = &st->frees[~ev[k].ref];
            fam = f->fam;
            key = f->key;
            tt = f->t;
        } else {
            pi_event e;
            memcpy(&e, arec + ev[k].ref * REC, REC);
            fam = family(e.flags);
            key = pair_key(&e);
            tt = (int64_t)e.t_ns;
        }
        uint64_t h = find(&t, pid, fam, key);
        int64_t prev = t.s[h].val;
        if (prev >= 0) {
            s->al_status[prev] = ev[k].is_free ? 1 : 2;
            s->al_end_t[prev] = tt;
            s->al_end_seq[prev] = seq;
        }
        if (ev[k].is_free) {
            if (prev >= 0)
                erase(&t, h);
            else
                unmatched++;
        } else {
            if (prev < 0)
                t.used++;
            t.s[h].key = key;
            t.s[h].pid = pid;
            t.s[h].fam = fam;
            t.s[h].val = ev[k].ref;
        }
    }
    s->unmatched_free = unmatched;
    free(t.s);
    free(ev);
    if (map_len)
        munmap((void *)arec, map_len);
    return 0;
}

int pi_split_finish(pi_split *s)
{
    state *st = s->internal;
    if (s->oom)
        return -1;
    if (st) {
        if (s->seq_disorder && pair_in_seq_order(s, st))
            return -1;
        state_free(st);
        s->internal = NULL;
    }
    int rc = rtab_trim(&s->alloc) | rtab_trim(&s->launch) | rtab_trim(&s->copy) | rtab_trim(&s->hint) |
             rtab_trim(&s->fail) | rtab_trim(&s->side) | rtab_trim(&s->gpu) | close_spill(&s->f_acc);
    if (s->alloc.n) {
        grow((void **)&s->al_status, s->alloc.n, 1);
        grow((void **)&s->al_end_t, s->alloc.n, 8);
        grow((void **)&s->al_end_seq, s->alloc.n, 8);
    }
    if (s->acc && s->a_n && s->a_n < s->a_cap) {
        grow((void **)&s->acc, s->a_n, sizeof(pi_acc));
        s->a_cap = s->a_n;
    }
    return rc ? -1 : 0;
}

void *pi_blockmap_new(const int32_t *bpid, const int64_t *bseq, const int64_t *bid, int64_t nb)
{
    table *t = malloc(sizeof(*t));
    if (!t || table_init(t, nb)) {
        free(t);
        return NULL;
    }
    for (int64_t b = 0; b < nb; b++) {
        uint64_t h = find(t, bpid[b], 0, (uint64_t)bseq[b]);
        if (t->s[h].val >= 0 && t->s[h].val <= bid[b])
            continue;
        if (t->s[h].val < 0)
            t->used++;
        t->s[h].key = (uint64_t)bseq[b];
        t->s[h].pid = bpid[b];
        t->s[h].fam = 0;
        t->s[h].val = bid[b];
    }
    return t;
}

void pi_blockmap_free(void *m)
{
    table *t = m;
    if (t) {
        free(t->s);
        free(t);
    }
}

int64_t pi_resolve_chunk(const pi_acc *acc, int64_t n, int32_t use_row, const int64_t *row_block, const void *map,
                         const int32_t *launch_kernel, int64_t n_launch, int32_t *n_access, int64_t t0,
                         int32_t *o_block, int32_t *o_pid, int64_t *o_seq, int64_t *o_t, int32_t *o_kernel,
                         int8_t *o_op, uint16_t *o_flags)
{
    const table *t = map;
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        pi_acc a;
        memcpy(&a, acc + i, sizeof(a));
        int64_t b = -1;
        if (use_row && a.row >= 0)
            b = row_block[a.row];
        else if (t)
            b = t->s[find(t, a.pid, 0, (uint64_t)a.ref)].val;
        if (b < 0)
            continue;
        o_block[k] = (int32_t)b;
        o_pid[k] = a.pid;
        o_seq[k] = a.seq;
        o_t[k] = a.t - t0;
        o_op[k] = (int8_t)a.op;
        o_flags[k] = a.flags;
        if (a.launch >= 0 && a.launch < n_launch) {
            o_kernel[k] = launch_kernel[a.launch];
            n_access[a.launch]++;
        } else {
            o_kernel[k] = -1;
        }
        k++;
    }
    return k;
}
