/*
 * shim.c — process state of the preload library: lazy initialisation, the
 * shared-memory ring (producer side), strings, markers, fork handling.
 *
 * Nothing runs at load time: the first hooked call (or marker) initialises.
 * Without PYINTERPOSE_SESSION in the environment the shim is inert (every hook
 * forwards to the real function and records nothing).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <stddef.h>
#include <unistd.h>

#include "shim.h"
#include "site.h"

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ volatile("yield")
#else
#define cpu_relax() ((void)0)
#endif

PI_TLS pi_tls pi_t;

/* ---- process-wide state (the only global state of the project) ---- */
static pthread_mutex_t g_init_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile int g_state;            /* 0 = not initialised, 1 = active, 2 = inert */
static int g_access = 1;
static int g_forked;                    /* this process image started as a fork child */
static char g_session[64];
static uint64_t g_records = 1u << 18;   /* ring capacity, records */
static int g_consumer;
static volatile pid_t g_ring_pid;       /* pid that owns the mapped ring */
static pi_ring_header *g_ring;
static pi_event *g_slots;
static uint64_t g_mask;
static volatile int g_abandoned;        /* consumer gone: count, don't wait */
static _Atomic uint32_t g_next_string = 1;

/* interned strings: a small lock-free table of (hash, pointer-owned copy, id) */
#define PI_STRTAB 4096
typedef struct { _Atomic uint64_t hash; char *text; _Atomic uint32_t id; } pi_str;
static pi_str g_strtab[PI_STRTAB];

uint64_t pi_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint32_t pi_tid(void) {
    pid_t pid = g_ring_pid;
    if (PI_UNLIKELY(pi_t.tid == 0 || pi_t.tid_pid != pid)) {
        pi_t.tid = (uint32_t)syscall(SYS_gettid);
        pi_t.tid_pid = pid;
    }
    return pi_t.tid;
}

static void atfork_prepare(void) {
    pthread_mutex_lock(&g_init_lock);
    pi_map_atfork_prepare();
}
static void atfork_parent(void) {
    pi_map_atfork_parent();
    pthread_mutex_unlock(&g_init_lock);
}
static void atfork_child(void) {
    pi_map_atfork_child();
    pthread_mutex_init(&g_init_lock, NULL);
    /* The child gets its own ring on its next event; the parent's mapping
     * stays mapped but is never written again from here. */
    g_ring_pid = 0;
    g_forked = 1;
    pi_t.tid = 0;
}

static void on_exit_close(void) {
    if (g_ring && g_ring_pid == getpid())
        __atomic_store_n(&g_ring->closed, 1, __ATOMIC_RELEASE);
}

static void read_exe(char *buf, size_t n) {
    ssize_t k = readlink("/proc/self/exe", buf, n - 1);
    buf[k > 0 ? k : 0] = 0;
}

/* Create this process's ring.  Called with g_init_lock held. */
static int open_ring(void) {
    pid_t pid = getpid();
    uint64_t start = pi_now();
    char name[128];
    snprintf(name, sizeof name, PI_SHM_PREFIX "%s-%d-%llu", g_session, (int)pid,
             (unsigned long long)start);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    size_t bytes = sizeof(pi_ring_header) + g_records * sizeof(pi_event);
    if (ftruncate(fd, (off_t)bytes) != 0) {
        close(fd);
        shm_unlink(name);
        return -1;
    }
    /* populate now: no page faults on the recording path later */
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        shm_unlink(name);
        return -1;
    }
    pi_ring_header *h = (pi_ring_header *)m;
    h->version = PI_RING_VERSION;
    h->record_size = sizeof(pi_event);
    h->capacity = g_records;
    h->pid = pid;
    h->ppid = getppid();
    h->consumer_pid = g_consumer;
    h->flags = g_forked ? 1 : 0;
    h->start_ns = start;
    read_exe(h->exe, sizeof h->exe);
    h->head = 1; /* tickets start at 1: a zeroed slot is never "committed" */
    h->tail = 1;
    __atomic_store_n(&h->magic, PI_RING_MAGIC, __ATOMIC_RELEASE); /* published */
    g_ring = h;
    g_slots = (pi_event *)((char *)m + sizeof(pi_ring_header));
    g_mask = g_records - 1;
    g_abandoned = 0;
    g_ring_pid = pid;
    return 0;
}

static void init_once(void) {
    const char *s = getenv("PYINTERPOSE_SESSION");
    if (!s || !*s || strlen(s) >= sizeof g_session) {
        g_state = 2;
        return;
    }
    strcpy(g_session, s);
    const char *a = getenv("PYINTERPOSE_ACCESS");
    g_access = !(a && a[0] == '0');
    const char *r = getenv("PYINTERPOSE_RING_RECORDS");
    if (r) {
        unsigned long long v = strtoull(r, NULL, 10);
        if (v >= 64) {
            uint64_t p = 64;
            while (p < v && p < (1ull << 30)) p <<= 1;
            g_records = p;
        }
    }
    const char *c = getenv("PYINTERPOSE_CONSUMER_PID");
    g_consumer = c ? atoi(c) : 0;
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    atexit(on_exit_close);
    g_state = 1;
}

static void replay_strings(void);

/* Returns 1 when this process records events (ring open for this pid). */
int pi_active(void) {
    if (PI_LIKELY(g_state == 1 && g_ring_pid != 0)) return 1; /* fork resets g_ring_pid */
    if (g_state == 2) return 0;
    pthread_mutex_lock(&g_init_lock);
    if (g_state == 0) init_once();
    if (g_state == 1 && g_ring_pid == 0) {
        if (open_ring() != 0) g_state = 2; /* cannot record: stay out of the way */
        else if (g_forked) {
            replay_strings();
            pi_site_replay(); /* frame and stack definitions, after the strings */
        }
    }
    pthread_mutex_unlock(&g_init_lock);
    return g_state == 1;
}

int pi_access_enabled(void) { return g_access; }

static int consumer_gone(void) {
    if (g_consumer <= 0) return 0;
    return kill(g_consumer, 0) != 0 && errno == ESRCH;
}

int pi_reserve(uint64_t n, uint64_t *ticket) {
    pi_ring_header *h = g_ring;
    if (PI_UNLIKELY(g_abandoned)) {
        __atomic_fetch_add(&h->lost, n, __ATOMIC_RELAXED);
        return 0;
    }
    uint64_t t = __atomic_fetch_add(&h->head, n, __ATOMIC_ACQ_REL);
    uint64_t cap = g_records;
    if (PI_UNLIKELY(t + n > __atomic_load_n(&h->tail, __ATOMIC_ACQUIRE) + cap)) {
        /* Back-pressure: wait for the drain.  Never silently drop; give up only
         * if the consumer process no longer exists. */
        __atomic_fetch_add(&h->waits, 1, __ATOMIC_RELAXED);
        uint64_t spins = 0;
        struct timespec ts = {0, 20000};
        while (t + n > __atomic_load_n(&h->tail, __ATOMIC_ACQUIRE) + cap) {
            if (++spins < 64) {
                cpu_relax();
                continue;
            }
            nanosleep(&ts, NULL);
            if ((spins & 4095) == 0 && consumer_gone()) {
                g_abandoned = 1;
                __atomic_fetch_add(&h->lost, n, __ATOMIC_RELAXED);
                return 0;
            }
        }
    }
    *ticket = t;
    return 1;
}

pi_event *pi_slot(uint64_t ticket) { return &g_slots[ticket & g_mask]; }

void pi_commit(pi_event *e, uint64_t ticket) { __atomic_store_n(&e->seq, ticket, __ATOMIC_RELEASE); }

static inline void fill(pi_event *e, uint64_t t, uint16_t op, uint16_t api, int32_t result, uint64_t addr,
                        uint64_t size, uint64_t stream, uint64_t aux, uint16_t flags) {
    e->t_ns = t;
    e->addr = addr;
    e->size = size;
    e->stream = stream;
    e->aux = aux;
    e->tid = pi_tid();
    e->op = op;
    e->api = api;
    e->result = result;
    e->device = (int16_t)pi_t.device;
    e->flags = flags;
}

void pi_fill(pi_event *e, uint16_t op, uint16_t api, int32_t result, uint64_t addr, uint64_t size,
             uint64_t stream, uint64_t aux, uint16_t flags) {
    fill(e, pi_now(), op, api, result, addr, size, stream, aux, flags);
}

void pi_emit(uint16_t op, uint16_t api, int32_t result, uint64_t addr, uint64_t size, uint64_t stream,
             uint64_t aux, uint16_t flags) {
    uint64_t tk;
    if (!pi_reserve(1, &tk)) return;
    pi_event *e = pi_slot(tk);
    fill(e, pi_now(), op, api, result, addr, size, stream, aux, flags);
    pi_commit(e, tk);
}

void pi_emit_with_accesses(uint16_t op, uint16_t api, int32_t r, uint64_t addr, uint64_t size, uint64_t stream,
                           uint64_t aux, const pi_scan *sc) {
    uint64_t tk;
    int n = sc ? sc->n : 0;
    if (!pi_reserve(1 + (uint64_t)n, &tk)) return;
    uint64_t now = pi_now();
    pi_event *e = pi_slot(tk);
    fill(e, now, op, api, r, addr, size, stream, aux, 0);
    for (int i = 0; i < n; i++) {
        pi_event *a = pi_slot(tk + 1 + i);
        fill(a, now, PI_OP_ACCESS, api, r, sc->hit[i].base, sc->hit[i].size, stream, sc->hit[i].seq, sc->fl[i]);
        pi_commit(a, tk + 1 + i);
    }
    pi_commit(e, tk);
}

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h ? h : 1;
}

static uint32_t emit_string_id(const char *s, uint32_t id) {
    size_t len = strlen(s);
    if (len > 4096) len = 4096;
    uint64_t nrec = (len + PI_STR_PAYLOAD - 1) / PI_STR_PAYLOAD;
    uint64_t tk;
    if (!pi_reserve(1 + nrec, &tk)) return id;
    uint64_t now = pi_now();
    for (uint64_t i = 0; i < nrec; i++) {
        pi_event *d = pi_slot(tk + 1 + i);
        memset(d, 0, sizeof *d);
        size_t off = i * PI_STR_PAYLOAD, k = len - off < PI_STR_PAYLOAD ? len - off : PI_STR_PAYLOAD;
        memcpy((char *)d + offsetof(pi_event, addr), s + off, k); /* addr..aux: 32 bytes of text */
        d->t_ns = now;
        d->op = PI_OP_STRDATA;
        d->tid = pi_tid();
        pi_commit(d, tk + 1 + i);
    }
    pi_event *e = pi_slot(tk);
    fill(e, now, PI_OP_STRING, 0, 0, 0, len, 0, id, 0);
    pi_commit(e, tk);
    return id;
}

static uint32_t emit_string(const char *s) { return emit_string_id(s, atomic_fetch_add(&g_next_string, 1)); }

/* A forked child keeps the parent's string ids (cached kernel layouts refer to
 * them): write every interned string into the child's new ring. */
static void replay_strings(void) {
    for (int i = 0; i < PI_STRTAB; i++) {
        uint32_t id = atomic_load(&g_strtab[i].id);
        if (id && g_strtab[i].text) emit_string_id(g_strtab[i].text, id);
    }
}

uint32_t pi_intern(const char *s) {
    if (!s) return 0;
    uint64_t h = hash_str(s);
    for (unsigned i = 0; i < PI_STRTAB; i++) {
        pi_str *e = &g_strtab[(h + i) & (PI_STRTAB - 1)];
        uint64_t cur = atomic_load(&e->hash);
        if (cur == 0) {
            uint64_t zero = 0;
            if (!atomic_compare_exchange_strong(&e->hash, &zero, h)) {
                if (zero != h) continue; /* someone else took the slot for another string */
            } else {
                e->text = strdup(s);
            }
            cur = h;
        }
        if (cur != h) continue;
        /* same hash: compare text once it is published */
        while (!__atomic_load_n(&e->text, __ATOMIC_ACQUIRE)) sched_yield();
        if (strcmp(e->text, s) != 0) continue;
        uint32_t id = atomic_load(&e->id);
        if (id) return id;
        uint32_t mine = emit_string(s);
        uint32_t expect = 0;
        if (atomic_compare_exchange_strong(&e->id, &expect, mine)) return mine;
        return expect; /* a racing thread emitted it too; both strings are in the trace */
    }
    return emit_string(s); /* table full: emit each time */
}

void pi_count_unscanned(void) { __atomic_fetch_add(&g_ring->unscanned_launches, 1, __ATOMIC_RELAXED); }

/* ---- public: iteration markers (pyinterpose.mark_step) ---- */
__attribute__((visibility("default"))) int pyinterpose_mark(const char *label) {
    if (pi_t.depth > 0 || !pi_active()) return 0;
    pi_t.depth++;
    uint32_t id = pi_intern(label ? label : "step");
    pi_emit(PI_OP_MARKER, 0, 0, 0, 0, 0, id, 0);
    pi_t.depth--;
    return 1;
}

/* ---- public: is the shim recording in this process? ---- */
__attribute__((visibility("default"))) int pyinterpose_active(void) { return pi_active(); }

/* ---- public: stop/restart recording on the calling thread (nests) ---- */
__attribute__((visibility("default"))) void pyinterpose_suspend(void) { pi_t.depth++; }
__attribute__((visibility("default"))) void pyinterpose_resume(void) {
    if (pi_t.depth > 0) pi_t.depth--;
}
