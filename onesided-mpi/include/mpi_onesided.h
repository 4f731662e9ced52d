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
 * MPI_Win_free; MPIX_Rrput/MPIX_Rraccumulate complete when the data is at the target. */
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

#ifdef __cplusplus
}
#endif

#endif /* MPI_ONESIDED_H */
