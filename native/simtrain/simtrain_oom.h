/* simtrain_oom.h — simtrain's live-allocation record and out-of-memory ground truth (internal). */
#ifndef SIMTRAIN_OOM_H
#define SIMTRAIN_OOM_H
#include <stdarg.h>
#include <stdint.h>

struct oom_failure {
    int step, attempt;
    const char *api, *outcome;
    uint64_t size, cached_bytes, free_bytes, total_bytes;
};

__attribute__((visibility("hidden"))) void oom_track_reset(void);
__attribute__((visibility("hidden"))) int oom_track_add(uint64_t addr, uint64_t size, const char *role);
__attribute__((visibility("hidden"))) void oom_track_remove(uint64_t addr);
__attribute__((visibility("hidden"))) int oom_write_truth(const char *path, const struct oom_failure *f);

#endif
