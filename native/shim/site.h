/* site.h — call sites of allocations: owner object, Python and native stacks
 * (site.c, pystack.c).  Internal to the shim. */
#ifndef PI_SITE_H
#define PI_SITE_H
#include <stdint.h>

#include "shim.h"

typedef struct pi_site {
    uint64_t caller;       /* return address of the outermost hooked call */
    uint32_t owner;        /* string id of the calling object's basename, 0 unknown */
    uint32_t py_stack;     /* Python stack id, 0 none */
    uint32_t native_stack; /* native stack id, 0 none */
    uint32_t thread_name;  /* string id of the thread's name */
    uint16_t flags;        /* enum pi_site_flags */
} pi_site;

/* Fills *s for an allocation made by the code that returns to `caller`.
 * Returns 1 when a SITE record should follow the ALLOC, 0 when sites are off. */
PI_HIDDEN int pi_site_capture(uint64_t caller, pi_site *s);
/* the SITE record, as record i of the writer that holds its ALLOC (record i - 1) */
PI_HIDDEN void pi_site_put(pi_writer *w, uint64_t i, uint16_t api, const pi_site *s);
/* Forked child, new ring: write every frame and stack definition again. */
PI_HIDDEN void pi_site_replay(void);

/* Interning shared by pystack.c and site.c (ids from 1; 0 = none/failed). */
PI_HIDDEN uint32_t pi_frame_define(uint16_t kind, uint64_t addr, uint64_t aux, const char *text, uint32_t len);
PI_HIDDEN uint32_t pi_stack_node(uint32_t parent, uint32_t frame);
PI_HIDDEN void pi_note(const char *text);
PI_HIDDEN void *pi_site_table(size_t bytes); /* zeroed, never freed (lazy pages) */

/* FNV-1a 64 of the basename of the object that holds `caller` ("" when unknown): the call path a plan
 * keys requests by (pyinterpose/analysis/apply_plan.py computes the same from the trace's owner). */
PI_HIDDEN uint64_t pi_site_owner_hash(uint64_t caller);

/* pystack.c: the calling thread's Python stack id (0 none); ORs PI_SITE_* into *flags. */
PI_HIDDEN uint32_t pi_pystack(uint16_t *flags);
#endif
