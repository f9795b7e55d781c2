#include "drain.h"

#include <string.h>

#include "events.h"

/* the record of ticket t from an intent whose tickets include t, into *e; 0 when none (final pass only:
 * the process is gone, and a gap can only be a ticket taken and never committed) */
static int intent_for(const pi_ring_header *h, uint64_t t, pi_event *e) {
    uint64_t used = h->intents_used < PI_INTENTS ? h->intents_used : PI_INTENTS;
    for (uint64_t k = 0; k < used; k++) {
        const pi_intent *in = &h->intents[k];
        uint64_t first = in->ticket - 1;
        if (!in->ticket || t < first || t - first >= in->n) continue;
        if (in->state == PI_INTENT_BUILT && in->n <= PI_INTENT_RECORDS) {
            *e = in->rec[t - first];
            return 1;
        }
        if (in->state == PI_INTENT_HELD) { /* record 0 as held; the others NONE, interrupted (pi_writer_hold) */
            *e = in->rec[0];
            if (t != first) {
                e->addr = e->size = e->stream = e->aux = 0;
                e->op = PI_OP_NONE;
                e->flags = 0;
            }
            return 1;
        }
    }
    return 0;
}

int64_t pi_drain(void *ring, void *out, uint64_t max_records, int final, uint64_t *lost) {
    pi_ring_header *h = (pi_ring_header *)ring;
    pi_event *slots = (pi_event *)((char *)ring + sizeof(pi_ring_header));
    pi_event *dst = (pi_event *)out;
    uint64_t cap = h->capacity, mask = cap - 1;
    uint64_t tail = __atomic_load_n(&h->tail, __ATOMIC_RELAXED);
    uint64_t head = __atomic_load_n(&h->head, __ATOMIC_ACQUIRE);
    uint64_t limit = head;
    if (limit > tail + cap) limit = tail + cap; /* tickets beyond wait for room */
    uint64_t n = 0, skipped = 0, t = tail;
    for (; t < limit && n < max_records; t++) {
        pi_event *s = &slots[t & mask];
        uint64_t seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
        if (seq != t) {
            if (!final) break;
            if (seq == (t | PI_SEQ_HELD)) { /* a call the process was killed inside: its record, as held */
                memcpy(&dst[n], s, sizeof(pi_event));
                dst[n++].seq = t;
                continue;
            }
            /* the process was killed between taking this ticket and committing its record: a thread's
             * intent (events.h) that names this ticket holds the record */
            if (intent_for(h, t, &dst[n])) {
                dst[n++].seq = t;
                continue;
            }
            skipped++;
            continue;
        }
        memcpy(&dst[n++], s, sizeof(pi_event));
    }
    if (final && t == limit && head > limit && n < max_records) skipped += head - limit;
    __atomic_store_n(&h->tail, final && head > limit && t == limit ? head : t, __ATOMIC_RELEASE);
    if (lost) *lost = skipped;
    return (int64_t)n;
}
