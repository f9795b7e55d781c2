/* drain.h — consumer side of the event ring (see native/shim/events.h). */
#ifndef PI_DRAIN_H
#define PI_DRAIN_H
#include <stdint.h>

/* BEGIN CDEF */
/* Copy committed records from the ring at `ring` (a mapped pi_ring_header)
 * into `out` (room for max_records pi_event), in ticket order, and advance
 * the ring's tail.  Non-final: stops at the first uncommitted slot.  Final (the
 * producer process is gone): skips slots that were reserved but never
 * committed and counts them, plus tickets taken beyond the ring, in *lost.
 * Returns the number of records copied. */
int64_t pi_drain(void *ring, void *out, uint64_t max_records, int final, uint64_t *lost);
/* END CDEF */
#endif
