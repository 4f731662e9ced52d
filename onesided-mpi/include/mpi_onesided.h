/* mpi_onesided.h — the extensions of onesided's MPI C ABI (libonesided_mpi.so).
 *
 * Include after <mpi.h>. Every request returned here is a genuine MPI request: complete it
 * with MPI_Wait, MPI_Test, MPI_Waitall (mixed with any other requests) or free it with
 * MPI_Request_free (the operation still completes).
 *
 * Nonblocking synchronization (Zounmevo et al., "Nonblocking epochs in MPI one-sided
 * communication", SC14): each call starts the synchronization and returns at once; RMA
 * calls made after it belong to the epoch it opens, and are deferred until it is active.
 * Epochs complete in the order they were started; MPI_WIN_*_REORDER info keys relax that.
 *
 * Window duplication and remote-completing requests (Schuchart et al., seed 000): a
 * duplicate is a second handle to the same window with its own per-handle info keys
 * (mpi_win_scope, mpi_win_order, mpi_assert_accumulate_intrinsic), freed on its own with
 * MPI_Win_free; MPIX_Rrput/MPIX_Rraccumulate complete when the data is at the target.
 *
 * Notified RMA (the MPI Forum's direction that supersedes seed 000's §5.1 sketch):
 * MPIX_Win_set_num_notify (collective) gives each process counters; MPIX_Put_notify,
 * MPIX_Get_notify and MPIX_Accumulate_notify add one to counter notification_idx of the
 * target once the operation's data is in place there (a get: once the origin has read it).
 * The target reads a counter (MPIX_Win_get_notify_value), swaps it to 0
 * (MPIX_Win_reset_notify_value) or waits for it to reach a value with a genuine request
 * (MPIX_Win_wait_notify); no synchronization epoch is needed at the target. Contiguous
 * datatypes only; an index the target does not have is MPI_ERR_ARG.
 *
 * Memory handles (seed 000 §4, Listing 5): MPIX_Memhandle_create registers memory with a
 * dynamic window (the parent) and writes at most MPIX_MAX_MEMHANDLE_SIZE opaque bytes that
 * may reach any process of the window by any means; MPIX_Win_from_memhandle (local) makes
 * a window of that one target: put, get, accumulate (contiguous datatypes) and the flushes,
 * displacements of disp_unit bytes from the region's start, inside passive-target epochs
 * of the parent (lock and unlock the parent; other calls on it are MPI_ERR_RMA_FLAVOR);
 * free it with MPI_Win_free. MPIX_Memhandle_release ends the exposure: later operations
 * through its windows fail with MPI_ERR_WIN instead of touching the memory.
 *
 * Persistent alltoallv over RMA (Bienz et al., seed 001): MPIX_Alltoallv_init (collective,
 * MPI_Alltoallv's arguments) builds a plan over the program's buffers; each
 * MPIX_Alltoallv_start (collective) runs one exchange and returns a genuine MPI request;
 * the receive buffer holds the result once it completed; MPIX_Alltoallv_plan_free
 * (collective) frees the plan. Info key "onesided_alltoallv": "fence" (default),
 * "hierarchical", "lock" or "auto" (measures the plan against MPI_Alltoallv and keeps the
 * faster). Predefined datatypes without padding. The buffers must stay valid, and be left
 * alone while an exchange runs, until the plan is freed. */
#ifndef MPI_ONESIDED_H
#define MPI_ONESIDED_H

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

int MPIX_Win_ifence(int assert, MPI_Win win, MPI_Request *request);
int MPIX_Win_ilock(int lock_type, int rank, int assert, MPI_Win win, MPI_Request *request);
int MPIX_Win_iunlock(int rank, MPI_Win win, MPI_Request *request);
int MPIX_Win_ilock_all(int assert, MPI_Win win, MPI_Request *request);
int MPIX_Win_iunlock_all(MPI_Win win, MPI_Request *request);
int MPIX_Win_iflush(int rank, MPI_Win win, MPI_Request *request);
int MPIX_Win_iflush_all(MPI_Win win, MPI_Request *request);
int MPIX_Win_iflush_local(int rank, MPI_Win win, MPI_Request *request);
int MPIX_Win_iflush_local_all(MPI_Win win, MPI_Request *request);
int MPIX_Win_ipost(MPI_Group group, int assert, MPI_Win win, MPI_Request *request);
int MPIX_Win_istart(MPI_Group group, int assert, MPI_Win win, MPI_Request *request);
int MPIX_Win_icomplete(MPI_Win win, MPI_Request *request);
int MPIX_Win_iwait(MPI_Win win, MPI_Request *request);

int MPIX_Win_dup_with_info(MPI_Win win, MPI_Info info, MPI_Win *newwin);
int MPIX_Rrput(const void *origin_addr, int origin_count, MPI_Datatype origin_datatype,
               int target_rank, MPI_Aint target_disp, int target_count,
               MPI_Datatype target_datatype, MPI_Win win, MPI_Request *request);
int MPIX_Rraccumulate(const void *origin_addr, int origin_count, MPI_Datatype origin_datatype,
                      int target_rank, MPI_Aint target_disp, int target_count,
                      MPI_Datatype target_datatype, MPI_Op op, MPI_Win win,
                      MPI_Request *request);

#define MPIX_MAX_MEMHANDLE_SIZE 64

int MPIX_Memhandle_create(void *base, MPI_Aint size, MPI_Info info, MPI_Win parentwin,
                          void *memhandle, int *memhandle_size);
int MPIX_Win_from_memhandle(const void *memhandle, MPI_Aint size, int disp_unit, MPI_Info info,
                            int target, MPI_Win parentwin, MPI_Win *newwin);
int MPIX_Memhandle_release(void *memhandle, MPI_Win parentwin);

typedef int MPIX_Alltoallv_plan;
#define MPIX_ALLTOALLV_PLAN_NULL 0

int MPIX_Alltoallv_init(const void *sendbuf, const int sendcounts[], const int sdispls[],
                        MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                        const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm,
                        MPI_Info info, MPIX_Alltoallv_plan *plan);
int MPIX_Alltoallv_start(MPIX_Alltoallv_plan plan, MPI_Request *request);
int MPIX_Alltoallv_plan_free(MPIX_Alltoallv_plan *plan);

int MPIX_Win_set_num_notify(MPI_Win win, int num);
int MPIX_Win_get_num_notify(MPI_Win win, int *num);
int MPIX_Put_notify(const void *origin_addr, int origin_count, MPI_Datatype origin_datatype,
                    int target_rank, MPI_Aint target_disp, int target_count,
                    MPI_Datatype target_datatype, int notification_idx, MPI_Win win);
int MPIX_Get_notify(void *origin_addr, int origin_count, MPI_Datatype origin_datatype,
                    int target_rank, MPI_Aint target_disp, int target_count,
                    MPI_Datatype target_datatype, int notification_idx, MPI_Win win);
int MPIX_Accumulate_notify(const void *origin_addr, int origin_count,
                           MPI_Datatype origin_datatype, int target_rank, MPI_Aint target_disp,
                           int target_count, MPI_Datatype target_datatype, MPI_Op op,
                           int notification_idx, MPI_Win win);
int MPIX_Win_get_notify_value(MPI_Win win, int notification_idx, MPI_Count *value);
int MPIX_Win_reset_notify_value(MPI_Win win, int notification_idx, MPI_Count *value);
int MPIX_Win_wait_notify(MPI_Win win, int notification_idx, MPI_Count value,
                         MPI_Request *request);

#ifdef __cplusplus
}
#endif

#endif /* MPI_ONESIDED_H */
