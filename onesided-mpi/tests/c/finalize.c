/* MPI_Finalize frees the windows a program left, collectively, in the order they were
 * created (2 ranks): rank 0 holds a local duplicate for a while, so the collective windows
 * made meanwhile take other slots of the window table at each rank; freeing in slot order
 * would free them in different orders at the two ranks. The job must end, and cleanly. */
#include <mpi.h>
#include <stdio.h>

#include "check.h"
#include "mpi_onesided.h"

int main(int argc, char **argv) {
  int rank;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  long *b0, *ba, *bb, *bc;
  MPI_Win w0, wa, wb, wc, dup = MPI_WIN_NULL;
  MPI_Win_allocate(64, 8, MPI_INFO_NULL, MPI_COMM_WORLD, &b0, &w0);
  if (rank == 0) MPIX_Win_dup_with_info(w0, MPI_INFO_NULL, &dup);
  MPI_Win_allocate(64, 8, MPI_INFO_NULL, MPI_COMM_WORLD, &ba, &wa);
  MPI_Win_allocate(64, 8, MPI_INFO_NULL, MPI_COMM_WORLD, &bb, &wb);
  if (rank == 0) MPI_Win_free(&dup);
  MPI_Win_allocate(64, 8, MPI_INFO_NULL, MPI_COMM_WORLD, &bc, &wc);
  /* Each window still works. */
  MPI_Win ws[4] = {w0, wa, wb, wc};
  for (int i = 0; i < 4; i++) {
    long v = 10 * i + rank;
    MPI_Win_fence(0, ws[i]);
    MPI_Put(&v, 1, MPI_LONG, 1 - rank, 0, 1, MPI_LONG, ws[i]);
    MPI_Win_fence(0, ws[i]);
  }
  CHECK(*b0 == 1 - rank && *bc == 30 + 1 - rank, "puts: %ld %ld", *b0, *bc);
  if (rank == 0) printf("finalize: leaving 4 windows to MPI_Finalize\n");
  MPI_Finalize();
  return 0;
}
