/*
 * simnccl.h — a small simulated collective library on simcuda that allocates the way NCCL does
 * (research note: NVIDIA/nccl src/allocator.cc, src/misc/cudawrap.cc), so that tests know exactly
 * what a collective library held on every rank.
 *
 *   driver functions through cudaGetDriverEntryPointByVersion (as NCCL resolves cuMem*);
 *   its communication buffer like ncclMemAlloc: cuMemCreate with a POSIX-fd handle type,
 *     cuMemAddressReserve, cuMemMap, cuMemSetAccess — mapped twice, the two windows overlapping
 *     by all but 2 MiB at each end (one physical allocation, two live partly overlapping maps);
 *   exports it (cuMemExportToShareableHandle) and imports every peer's (the fd reached through
 *     /proc/<pid>/fd: NCCL passes it over a socket), maps the peer's memory and writes into it;
 *   a legacy IPC buffer (cudaMalloc + cudaIpcGetMemHandle; peers cudaIpcOpenMemHandle it);
 *   a private memory pool (cudaMemPoolCreate + cudaMallocFromPoolAsync, 4 objects);
 *   optionally a multicast object (cuMulticastCreate, AddDevice, BindMem, mapped; Unbind at the end).
 * Rendezvous: files in a directory all ranks share.
 */
#ifndef SIMNCCL_H
#define SIMNCCL_H
#include <stdint.h>

struct simnccl_config {
    int rank, nranks, device;
    const char *dir;      /* rendezvous directory (the same for every rank) */
    uint64_t buf_bytes;   /* communication buffer: a multiple of 2 MiB, at least 6 MiB */
    uint64_t ipc_bytes;   /* IPC buffer: a multiple of 2 MiB, 0 = none */
    uint64_t pool_bytes;  /* the private pool's objects, in all (4 objects) */
    int multicast;        /* 1: a multicast object bound to the buffer's first 2 MiB */
    double timeout_s;     /* how long to wait for the peers */
};

struct simnccl_truth {
    uint64_t owned_bytes;    /* device memory this rank itself holds (each physical byte once) */
    uint64_t buffer_bytes, ipc_bytes, pool_bytes;
    uint64_t maps_own;       /* live mappings of its own buffer (2: overlapping) */
    uint64_t imported;       /* peers' buffers imported and mapped */
    uint64_t ipc_opened;     /* peers' IPC buffers opened */
    uint64_t multicast_bytes;/* size of the multicast object (holds no memory) */
    uint64_t verified;       /* peers whose write into this rank's buffer arrived */
    char error[256];
};

struct simnccl_comm;
/* NULL on failure (out->error says why) */
struct simnccl_comm *simnccl_init(const struct simnccl_config *cfg, struct simnccl_truth *out);
/* frees everything; 0 on success */
int simnccl_finalize(struct simnccl_comm *comm, struct simnccl_truth *out);

#endif
