// A fix for a hang in MPI_Finalize of Debian's MPICH 4.0 over UCX 1.13's TCP
// transport, linked into net-mpi only.  It changes nothing that is measured.
//
// MPICH 4.0's MPI_Finalize calls ucp_disconnect_nb() for every peer, which
// closes the endpoint in flush mode: over TCP a flush sends a zero-length
// put and waits for the peer to acknowledge it.  Each rank then waits in a
// PMI barrier where it no longer runs UCX progress, so a rank whose flush
// arrives after its peer has finished its own waits for ever
// (openucx/ucx#8738; MPICH 4.1 moved the barrier before the flush).  It
// hung one run in three here.
//
// net-mpi calls MPI_Finalize after an MPI_Barrier that follows its last
// message, so once every rank has reached MPICH's PMI barrier each has
// received everything sent to it and nothing needs flushing.  This
// definition, which the dynamic linker prefers to libucp's for libmpich's
// call, leaves the endpoint open; ucp_worker_destroy() after the PMI
// barrier releases it without waiting for the peer.  (A forced close is
// not allowed on MPICH's endpoints: they have no peer error handling.)
#include <ucp/api/ucp.h>

extern "C" ucs_status_ptr_t ucp_disconnect_nb(ucp_ep_h /*ep*/)
{
    return nullptr; // UCS_OK: done, nothing to wait for
}
