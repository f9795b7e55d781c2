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
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <dlfcn.h>
#include <sys/syscall.h>
#include <time.h>
#include <stddef.h>
#include <unistd.h>

#include "cupti.h"
#include "shim.h"
#include "site.h"

PI_TLS pi_tls pi_t;

/* ---- process-wide state (the only global state of the project) ---- */
static pthread_mutex_t g_init_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile int g_state;            /* 0 = not initialised, 1 = active, 2 = inert */
static int g_access = 1;
static int g_forked;                    /* this process image started as a fork child */
static char g_session[64];
static uint64_t g_records = 1u << 18;   /* ring capacity asked for, records */
static uint64_t g_capacity;             /* capacity of the ring this process got */
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
    pi_apply_atfork_child();
    pi_window_atfork_child();
    pthread_mutex_init(&g_init_lock, NULL);
    /* The child gets its own ring on its next event; the parent's mapping
     * stays mapped but is never written again from here. */
    g_ring_pid = 0;
    g_forked = 1;
    pi_t.tid = 0;
    pi_gpu_atfork_child(); /* the parent's CUPTI state is not the child's */
    pi_context_atfork_child();
    pi_graph_atfork_child();
}

static char g_ring_name[512];           /* the ring's name (shm) or path (file), for unlinking */
static int g_ring_file;                 /* 1 = file-backed ring (path in g_ring_name) */
static char g_ring_dir[256];            /* $PYINTERPOSE_RING_DIR: file-backed rings and status files */

static void unlink_ring(void) {
    if (!g_ring_name[0]) return;
    if (g_ring_file) unlink(g_ring_name);
    else shm_unlink(g_ring_name);
    g_ring_name[0] = 0;
}

/* Is the drain alive?  Once it attached: its heartbeat changed within the last lease (measured on our own
 * clock from when we first saw the current value, so a torn or skewed beat can only look alive); before
 * that, a grace period from the ring's creation.  consumer_dead() first: kill(pid, 0) alone passes a zombie. */
static uint64_t g_seen_beat, g_seen_at;  /* last heartbeat value seen, and when (racy: benign) */
static uint64_t g_suspect_at;            /* when a producer first found that heartbeat older than the lease */

/* Is the drain surely dead?  Seen at once, without waiting out the lease: `run`'s pid is gone (ESRCH), or
 * a zombie, or this process was `run`'s child and has been re-parented.  Only in `run`'s own pid namespace
 * (else its pid means nothing here).  A stopped `run` (SIGSTOP, a paused VM) is alive by all of these. */
static char g_consumer_ns[64];           /* `run`'s /proc/self/ns/pid link, from $PYINTERPOSE_CONSUMER_PIDNS */

static int consumer_dead(void) {
    if (g_consumer <= 0 || !g_consumer_ns[0]) return 0;
    char ns[64];
    ssize_t k = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
    if (k <= 0) return 0;
    ns[k] = 0;
    if (strcmp(ns, g_consumer_ns) != 0) return 0;
    if (g_ring && g_ring_pid == getpid() && g_ring->ppid == g_consumer && getppid() != g_consumer)
        return 1;                                       /* re-parented: `run` exited */
    if (kill(g_consumer, 0) != 0) return errno == ESRCH;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", g_consumer);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    const char *rp = strrchr(buf, ')');                 /* "pid (comm) S ...": comm may hold spaces */
    return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

static int consumer_alive(pi_ring_header *h) {
    if (consumer_dead()) return 0;
    uint64_t now = pi_now();
    if (__atomic_load_n(&h->attached, __ATOMIC_ACQUIRE)) {
        uint64_t beat = __atomic_load_n(&h->beat_ns, __ATOMIC_ACQUIRE);
        uint64_t lease = __atomic_load_n(&h->lease_ns, __ATOMIC_RELAXED);
        if (lease == 0) lease = 5000000000ull;
        if (beat != __atomic_load_n(&g_seen_beat, __ATOMIC_RELAXED) || g_seen_at == 0) {
            __atomic_store_n(&g_seen_beat, beat, __ATOMIC_RELAXED);
            __atomic_store_n(&g_seen_at, now, __ATOMIC_RELAXED);
            __atomic_store_n(&g_suspect_at, 0, __ATOMIC_RELAXED);
            return 1;
        }
        if (now - __atomic_load_n(&g_seen_at, __ATOMIC_RELAXED) < lease) return 1;
        /* Older than the lease.  A pause of the whole process or machine (SIGSTOP, a descheduled VM)
         * stops the drain's heartbeat and these producers alike while the clock runs on, so on
         * resuming the beat looks stale.  Confirm over a grace period this producer itself runs
         * through, in which a live drain beats several times (every lease / 20). */
        uint64_t grace = lease / 4 > 200000000ull ? lease / 4 : 200000000ull;
        uint64_t sus = __atomic_load_n(&g_suspect_at, __ATOMIC_RELAXED);
        if (sus == 0) {
            __atomic_compare_exchange_n(&g_suspect_at, &sus, now, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
            return 1;
        }
        return now - sus < grace;
    }
    return now - h->start_ns < PI_ATTACH_GRACE_NS;
}

static void on_exit_close(void) {
    if (g_ring && g_ring_pid == getpid()) {
        pi_t.depth++;
        pi_apply_exit(); /* the last iteration's counts and the status line for `run` */
        pi_t.depth--;
        __atomic_store_n(&g_ring->closed, 1, __ATOMIC_RELEASE);
        /* never attached and no drain any more: nothing else would remove the ring */
        if (!__atomic_load_n(&g_ring->attached, __ATOMIC_ACQUIRE) && !consumer_alive(g_ring)) unlink_ring();
    }
    /* `run` is gone and cannot remove its folder: the last process out does (rmdir: only when empty) */
    if (g_ring_dir[0] && consumer_dead()) rmdir(g_ring_dir);
}

static void read_exe(char *buf, size_t n) {
    ssize_t k = readlink("/proc/self/exe", buf, n - 1);
    buf[k > 0 ? k : 0] = 0;
}

/* Tell `pyinterpose run` that this process is not recorded, and why (one line in the ring dir). */
static void report_unrecorded(const char *why) {
    if (!g_ring_dir[0]) return;
    char path[400], line[1024], exe[256];
    snprintf(path, sizeof path, "%s/unrecorded-%d", g_ring_dir, (int)getpid());
    read_exe(exe, sizeof exe);
    int n = snprintf(line, sizeof line, "%d %d %d %s\t%s\n", (int)getpid(), (int)getppid(), g_forked, why, exe);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return;
    if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
    ssize_t w = write(fd, line, (size_t)n);
    (void)w;
    close(fd);
}

/* Free bytes of the filesystem holding `dir` (UINT64_MAX when unknown). */
static uint64_t free_bytes(const char *dir) {
    struct statvfs sv;
    if (statvfs(dir, &sv) != 0) return UINT64_MAX;
    return (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
}

/* Try to create a fully allocated ring of `records` records, in /dev/shm (dir == NULL) or as a file in
 * `dir`.  Returns the mapping or NULL with errno set. */
static void *make_ring(const char *dir, const char *base, uint64_t records, size_t *bytes_out) {
    size_t bytes = sizeof(pi_ring_header) + records * sizeof(pi_event);
    char name[512];
    int fd;
    if (dir) {
        snprintf(name, sizeof name, "%s/%s", dir, base);
        fd = open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    } else {
        snprintf(name, sizeof name, "/%s", base);
        fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    }
    if (fd < 0) return NULL;
    /* Allocate every byte now (size and blocks): a full tmpfs fails here with ENOSPC instead of a SIGBUS
     * on some later write.  The drain maps a ring only once it is fully allocated. */
    int err = posix_fallocate(fd, 0, (off_t)bytes);
    void *m = MAP_FAILED;
    if (err == 0) {
        m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
        if (m == MAP_FAILED) err = errno;
    }
    close(fd);
    if (m == MAP_FAILED) {
        if (dir) unlink(name);
        else shm_unlink(name);
        errno = err;
        return NULL;
    }
    snprintf(g_ring_name, sizeof g_ring_name, "%s", name);
    g_ring_file = dir != NULL;
    *bytes_out = bytes;
    return m;
}

/* Create this process's ring.  Called with g_init_lock held.  The ring takes at most a quarter of the
 * free space where it lives (the program may need /dev/shm too) and never more than the file-size
 * limit; it falls back to smaller rings, then to a file in the ring directory. */
static int open_ring(void) {
    pid_t pid = getpid();
    uint64_t start = pi_now();
    char base[160];
    snprintf(base, sizeof base, PI_SHM_PREFIX "%s-%d-%llu", g_session, (int)pid, (unsigned long long)start);
    struct rlimit rl;
    uint64_t fsize_limit = UINT64_MAX;
    if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) fsize_limit = (uint64_t)rl.rlim_cur;
    const char *places[2] = {NULL, g_ring_dir[0] ? g_ring_dir : NULL};
    char why[300] = "";
    void *m = NULL;
    size_t bytes = 0;
    uint64_t records = 0;
    int place = 0;
    for (place = 0; place < 2 && !m; place++) {
        const char *dir = places[place];
        if (place == 1 && !dir) break;
        uint64_t room = free_bytes(dir ? dir : "/dev/shm");
        int last_err = 0;
        uint64_t smallest = g_records < PI_MIN_RECORDS ? g_records : PI_MIN_RECORDS;
        for (records = g_records; records >= smallest && !m; records >>= 1) {
            uint64_t need = sizeof(pi_ring_header) + records * sizeof(pi_event);
            if (need > fsize_limit) { last_err = EFBIG; continue; }  /* would raise SIGXFSZ */
            if (room != UINT64_MAX && need > room / 4) { last_err = ENOSPC; continue; }
            m = make_ring(dir, base, records, &bytes);
            if (!m) {
                last_err = errno;
                if (last_err != ENOSPC && last_err != ENOMEM && last_err != EFBIG) break; /* EROFS, EACCES...*/
            }
        }
        if (!m) {
            size_t k = strlen(why);
            snprintf(why + k, sizeof why - k, "%s%s: %s", k ? "; " : "", dir ? dir : "/dev/shm",
                     last_err == EFBIG ? "the file-size limit (ulimit -f) is too small for a ring"
                     : last_err == ENOSPC ? "no room for a ring" : strerror(last_err));
        }
    }
    if (!m) {
        report_unrecorded(why);
        return -1;
    }
    place--; /* the loop stepped past the place that worked */
    pi_ring_header *h = (pi_ring_header *)m;
    uint64_t cap = (bytes - sizeof(pi_ring_header)) / sizeof(pi_event);
    h->version = PI_RING_VERSION;
    h->record_size = sizeof(pi_event);
    h->capacity = cap;
    h->pid = pid;
    h->ppid = getppid();
    h->consumer_pid = g_consumer;
    h->flags = (g_forked ? PI_RING_FORKED : 0) | (place == 1 ? PI_RING_FILE : 0) |
               (cap < g_records ? PI_RING_REDUCED : 0);
    h->start_ns = start;
    read_exe(h->exe, sizeof h->exe);
    h->head = 1; /* tickets start at 1: a zeroed slot is never "committed" */
    h->tail = 1;
    __atomic_store_n(&h->magic, PI_RING_MAGIC, __ATOMIC_RELEASE); /* published */
    g_ring = h;
    g_slots = (pi_event *)((char *)m + sizeof(pi_ring_header));
    g_mask = cap - 1;
    g_capacity = cap;
    g_abandoned = 0;
    g_seen_beat = g_seen_at = g_suspect_at = 0;
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
    const char *d = getenv("PYINTERPOSE_RING_DIR");
    if (d && strlen(d) < sizeof g_ring_dir) strcpy(g_ring_dir, d);
    const char *c = getenv("PYINTERPOSE_CONSUMER_PID");
    g_consumer = c ? atoi(c) : 0;
    const char *cn = getenv("PYINTERPOSE_CONSUMER_PIDNS");
    if (cn && strlen(cn) < sizeof g_consumer_ns) strcpy(g_consumer_ns, cn);
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    atexit(on_exit_close);
    g_state = 1;
}

/* fork() itself is interposed so that a child forked before the process's first CUDA call still
 * knows it is a fork child (pthread_atfork handlers exist only once the shim initialised). */
typedef pid_t (*fork_fn)(void);
static fork_fn g_real_fork;

__attribute__((visibility("default"))) pid_t fork(void) {
    fork_fn f = __atomic_load_n(&g_real_fork, __ATOMIC_ACQUIRE);
    if (!f) {
        f = (fork_fn)pi_real_dlsym(RTLD_NEXT, "fork");
        if (!f) {
            errno = ENOSYS;
            return -1;
        }
        __atomic_store_n(&g_real_fork, f, __ATOMIC_RELEASE);
    }
    pid_t p = f();
    if (p == 0) {
        g_forked = 1;
        pi_apply_atfork_child();
    }
    return p;
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
        else {
            if (g_forked) {
                replay_strings();
                pi_site_replay(); /* frame and stack definitions, after the strings */
            }
            pi_context_env(); /* this process's rank variables, now (not at load time) */
        }
    }
    pthread_mutex_unlock(&g_init_lock);
    return g_state == 1;
}

int pi_access_enabled(void) { return g_access; }

/* ---- the ring's producer side: only the record writer below takes tickets ---- */

/* reserve n consecutive records; their first ticket in *ticket, or 0 when recording is impossible.
 * With `note` (an intent's ticket word), the ticket + 1 is written there before it is taken: a compare-
 * and-swap of the head instead of an add, so that no instruction lies between taking the ticket and the
 * ticket being known outside the process. */
static int reserve_noted(uint64_t n, uint64_t *ticket, uint64_t *note);
static int reserve(uint64_t n, uint64_t *ticket) { return reserve_noted(n, ticket, NULL); }

static int reserve_noted(uint64_t n, uint64_t *ticket, uint64_t *note) {
    pi_ring_header *h = g_ring;
    if (PI_UNLIKELY(g_abandoned)) {
        __atomic_fetch_add(&h->lost, n, __ATOMIC_RELAXED);
        return 0;
    }
    uint64_t cap = g_capacity;
    if (PI_UNLIKELY(n > cap)) { /* can never fit */
        __atomic_fetch_add(&h->lost, n, __ATOMIC_RELAXED);
        return 0;
    }
    uint64_t t;
    if (!note) t = __atomic_fetch_add(&h->head, n, __ATOMIC_ACQ_REL);
    else {
        t = __atomic_load_n(&h->head, __ATOMIC_RELAXED);
        do __atomic_store_n(note, t + 1, __ATOMIC_RELAXED);
        while (!__atomic_compare_exchange_n(&h->head, &t, t + n, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
    }
    if (PI_UNLIKELY(t + n > __atomic_load_n(&h->tail, __ATOMIC_ACQUIRE) + cap)) {
        /* Back-pressure: wait for the drain.  Never silently drop; give up only when the drain's
         * heartbeat stopped (its lease ran out) or no drain ever attached. */
        __atomic_fetch_add(&h->waits, 1, __ATOMIC_RELAXED);
        uint64_t spins = 0;
        struct timespec ts = {0, 20000};
        while (t + n > __atomic_load_n(&h->tail, __ATOMIC_ACQUIRE) + cap) {
            if (++spins < 64) {
                cpu_relax();
                continue;
            }
            nanosleep(&ts, NULL);
            if ((spins & 63) == 0 && (g_abandoned || !consumer_alive(h))) {
                if (!g_abandoned) {
                    g_abandoned = 1;
                    __atomic_store_n(&h->abandoned, 1, __ATOMIC_RELEASE);
                    if (!__atomic_load_n(&h->attached, __ATOMIC_ACQUIRE)) unlink_ring();
                }
                __atomic_fetch_add(&h->lost, n, __ATOMIC_RELAXED);
                return 0;
            }
        }
    }
    *ticket = t;
    return 1;
}

static inline pi_event *slot(uint64_t ticket) { return &g_slots[ticket & g_mask]; }

static inline void commit(pi_event *e, uint64_t ticket) { __atomic_store_n(&e->seq, ticket, __ATOMIC_RELEASE); }

/* ---- the record writer (shim.h) ---- */
int pi_writer_open(pi_writer *w, uint64_t n) {
    w->n = n;
    w->seq = 0;
    w->in = NULL;
    w->ok = reserve(n, &w->seq);
    w->t = pi_now();
    return w->ok;
}

/* this thread's intent in the current ring (events.h, pi_intent), or NULL when all are taken */
static pi_intent *my_intent(void) {
    pi_ring_header *h = g_ring;
    if (PI_UNLIKELY(pi_t.intent_ring != (void *)h)) {
        uint64_t k = __atomic_fetch_add(&h->intents_used, 1, __ATOMIC_RELAXED);
        pi_t.intent = k < PI_INTENTS ? (int)k : -1;
        pi_t.intent_ring = h;
    }
    return pi_t.intent >= 0 ? &h->intents[pi_t.intent] : NULL;
}

int pi_writer_stage(pi_writer *w, uint64_t n) {
    pi_intent *in = n <= PI_INTENT_RECORDS && !g_abandoned ? my_intent() : NULL;
    if (!in) return pi_writer_open(w, n);
    w->n = n;
    w->seq = 0;
    w->in = in;
    w->ok = 1;
    w->t = pi_now();
    return 1;
}

/* where record i of the writer is written: its ring slot, or its intent's record (staged) */
static inline pi_event *wslot(pi_writer *w, uint64_t i) { return w->in ? &w->in->rec[i] : slot(w->seq + i); }

/* record i of the writer: committed now, except record 0 (pi_writer_close) and a staged writer's */
static inline void put_done(pi_writer *w, uint64_t i, pi_event *e) {
    if (i && !w->in) commit(e, w->seq + i);
}

/* a staged writer's close: the tickets taken (the first one written into the intent before), the records
 * copied into their slots and committed; the intent is let go once they are */
static void close_staged(pi_writer *w) {
    pi_intent *in = w->in;
    uint64_t n = w->n, t;
    __atomic_store_n(&in->n, n, __ATOMIC_RELAXED);
    __atomic_store_n(&in->ticket, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&in->state, PI_INTENT_BUILT, __ATOMIC_RELEASE);
    if (reserve_noted(n, &t, &in->ticket)) {
        w->seq = t;
        for (uint64_t i = 0; i < n; i++) {
            pi_event *e = slot(t + i);
            uint64_t prev = e->seq; /* the slot's previous ticket: stays until the commit */
            *e = in->rec[i];
            e->seq = prev;
            commit(e, t + i);
        }
    } else w->seq = 0; /* nothing recorded (counted lost by reserve) */
    __atomic_store_n(&in->state, 0, __ATOMIC_RELEASE);
}

void pi_put(pi_writer *w, uint64_t i, uint16_t op, uint16_t api, int32_t result, uint64_t addr, uint64_t size,
            uint64_t stream, uint64_t aux, uint16_t flags) {
    if (!w->ok || i >= w->n) return;
    pi_event *e = wslot(w, i);
    e->t_ns = w->t;
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
    put_done(w, i, e);
}

void pi_put_as(pi_writer *w, uint64_t i, const pi_event *src) {
    if (!w->ok || i >= w->n) return;
    pi_event *e = wslot(w, i);
    uint64_t seq = e->seq; /* the slot's previous ticket: stays until the commit */
    *e = *src;
    e->seq = seq;
    put_done(w, i, e);
}

void pi_put_text(pi_writer *w, uint64_t i, const char *text, size_t len) {
    uint64_t nrec = pi_text_records(len);
    if (!w->ok || i + nrec > w->n) return;
    for (uint64_t k = 0; k < nrec; k++) {
        pi_event *d = wslot(w, i + k);
        uint64_t seq = d->seq;
        memset(d, 0, sizeof *d);
        d->seq = seq;
        size_t off = k * PI_STR_PAYLOAD, n = len - off < PI_STR_PAYLOAD ? len - off : PI_STR_PAYLOAD;
        memcpy((char *)d + offsetof(pi_event, addr), text + off, n); /* addr..aux: 32 bytes of text */
        d->t_ns = w->t;
        d->op = PI_OP_STRDATA;
        d->tid = pi_tid();
        put_done(w, i + k, d);
    }
}

/* record i of a held writer, as if its call were interrupted: record 0 the call, the others NONE */
static inline void held_record(pi_event *e, const pi_writer *w, uint64_t i, uint16_t op, uint16_t api,
                               uint64_t addr, uint64_t size, uint64_t stream, uint64_t aux, uint16_t flags) {
    e->t_ns = w->t;
    e->addr = i ? 0 : addr;
    e->size = i ? 0 : size;
    e->stream = i ? 0 : stream;
    e->aux = i ? 0 : aux;
    e->tid = pi_tid();
    e->op = i ? PI_OP_NONE : op;
    e->api = api;
    e->result = PI_RESULT_INTERRUPTED;
    e->device = (int16_t)pi_t.device;
    e->flags = i ? 0 : flags;
}

void pi_writer_hold(pi_writer *w, uint16_t op, uint16_t api, uint64_t addr, uint64_t size, uint64_t stream,
                    uint64_t aux, uint16_t flags) {
    if (!w->ok || w->in) return; /* a staged writer has no slots before its close */
    for (uint64_t i = 0; i < w->n; i++) {
        pi_event *e = slot(w->seq + i);
        held_record(e, w, i, op, api, addr, size, stream, aux, flags);
        __atomic_store_n(&e->seq, (w->seq + i) | PI_SEQ_HELD, __ATOMIC_RELEASE);
    }
}

int pi_writer_open_held(pi_writer *w, uint64_t n, uint16_t op, uint16_t api, uint64_t addr, uint64_t size,
                        uint64_t stream, uint64_t aux, uint16_t flags) {
    pi_intent *in = !g_abandoned ? my_intent() : NULL;
    if (!in) {
        if (!pi_writer_open(w, n)) return 0;
        pi_writer_hold(w, op, api, addr, size, stream, aux, flags);
        return 1;
    }
    w->n = n;
    w->seq = 0;
    w->in = NULL;
    w->t = pi_now();
    held_record(&in->rec[0], w, 0, op, api, addr, size, stream, aux, flags);
    __atomic_store_n(&in->n, n, __ATOMIC_RELAXED);
    __atomic_store_n(&in->ticket, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&in->state, PI_INTENT_HELD, __ATOMIC_RELEASE);
    w->ok = reserve_noted(n, &w->seq, &in->ticket);
    pi_writer_hold(w, op, api, addr, size, stream, aux, flags);
    __atomic_store_n(&in->state, 0, __ATOMIC_RELEASE);
    return w->ok;
}

void pi_writer_close(pi_writer *w) {
    if (!w->ok) return;
    if (w->in) close_staged(w);
    else commit(slot(w->seq), w->seq);
    w->ok = 0;
}

void pi_emit(uint16_t op, uint16_t api, int32_t result, uint64_t addr, uint64_t size, uint64_t stream,
             uint64_t aux, uint16_t flags) {
    pi_writer w;
    if (!pi_writer_stage(&w, 1)) return;
    pi_put(&w, 0, op, api, result, addr, size, stream, aux, flags);
    pi_writer_close(&w);
}

void pi_put_call(pi_writer *w, uint16_t op, uint16_t api, int32_t r, uint64_t addr, uint64_t size,
                 uint64_t stream, uint64_t aux, const pi_scan *sc) {
    int n = sc ? sc->n : 0;
    for (int i = 0; i < n; i++) {
        if (r == 0)
            pi_put(w, 1 + (uint64_t)i, PI_OP_ACCESS, api, r, sc->hit[i].base, sc->hit[i].size, stream,
                   sc->hit[i].seq, sc->fl[i]);
        else
            pi_put(w, 1 + (uint64_t)i, PI_OP_NONE, api, r, 0, 0, 0, 0, 0);
    }
    pi_put(w, 0, op, api, r, addr, size, stream, aux, 0);
    pi_writer_close(w);
}

void pi_emit_with_accesses(uint16_t op, uint16_t api, int32_t r, uint64_t addr, uint64_t size, uint64_t stream,
                           uint64_t aux, const pi_scan *sc) {
    pi_writer w;
    if (!pi_writer_open(&w, 1 + (uint64_t)(sc ? sc->n : 0))) return;
    pi_put_call(&w, op, api, r, addr, size, stream, aux, sc);
}

int pi_pid(void) { return (int)g_ring_pid; }

uint64_t pi_ring_room(void) {
    pi_ring_header *h = g_ring;
    if (!h) return 0;
    uint64_t used = __atomic_load_n(&h->head, __ATOMIC_RELAXED) - __atomic_load_n(&h->tail, __ATOMIC_RELAXED);
    return used >= g_capacity ? 0 : g_capacity - used;
}

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h ? h : 1;
}

static uint32_t emit_string_id(const char *s, uint32_t id) {
    size_t len = strlen(s);
    if (len > 4096) len = 4096;
    pi_writer w;
    if (!pi_writer_open(&w, 1 + pi_text_records(len))) return id;
    pi_put_text(&w, 1, s, len);
    pi_put(&w, 0, PI_OP_STRING, 0, 0, 0, len, 0, id, 0);
    pi_writer_close(&w);
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
                __atomic_store_n(&e->text, strdup(s), __ATOMIC_RELEASE); /* NULL if out of memory */
            }
            cur = h;
        }
        if (cur != h) continue;
        /* same hash: compare text once it is published.  The wait is bounded: the
         * publishing thread may not exist in this process (a fork between its CAS and its
         * store) or its strdup may have failed; then the string is written uncached. */
        const char *text;
        unsigned spins = 0;
        while (!(text = __atomic_load_n(&e->text, __ATOMIC_ACQUIRE)) && ++spins < 4096) sched_yield();
        if (!text) return emit_string(s);
        if (strcmp(text, s) != 0) continue;
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
void pi_count_oom(void) {
    if (g_ring) __atomic_fetch_add(&g_ring->oom_failures, 1, __ATOMIC_RELAXED);
}

/* ---- public: iteration markers (pyinterpose.mark_step) ---- */
__attribute__((visibility("default"))) int pyinterpose_mark(const char *label) {
    if (pi_t.depth > 0 || !pi_active()) return 0;
    pi_t.depth++;
    uint32_t id = pi_intern(label ? label : "step");
    pi_window_mark_begin(); /* window.c: the --steps gate opens before the marker, closes after it */
    pi_emit(PI_OP_MARKER, 0, 0, 0, 0, 0, id, 0);
    pi_window_mark_end();
    pi_apply_mark(); /* a plan keyed by markers begins an iteration here */
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
