/* Memory handles through the C extensions (2 ranks, seed 000 §4): each process registers a
 * buffer with a dynamic window, sends the handle with MPI_Allgather, builds a window of
 * its peer from the peer's handle, and puts, accumulates and gets there inside the
 * parent's passive-target epoch; the data lands in the peer's buffer. Calls the handle's
 * windows do not take are MPI_ERR_RMA_FLAVOR; after the owner's release an operation is
 * MPI_ERR_WIN, never a write into the released memory. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "mpi_onesided.h"

int main(int argc, char **argv) {
  int rank;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int peer = 1 - rank;
  MPI_Win parent;
  MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &parent);
  CHECK(((unsigned)parent & 0xfc000000u) == 0x60000000u, "window %#x is not onesided's", parent);
  long *buf = malloc(8 * sizeof(long));
  for (int i = 0; i < 8; i++) buf[i] = 10 * rank + i;

  char mine[MPIX_MAX_MEMHANDLE_SIZE], all[2][MPIX_MAX_MEMHANDLE_SIZE];
  int len = 0;
  MPIX_Memhandle_create(buf, 8 * sizeof(long), MPI_INFO_NULL, parent, mine, &len);
  CHECK(len > 0 && len <= MPIX_MAX_MEMHANDLE_SIZE, "handle of %d bytes", len);
  MPI_Allgather(mine, MPIX_MAX_MEMHANDLE_SIZE, MPI_BYTE, all, MPIX_MAX_MEMHANDLE_SIZE, MPI_BYTE,
                MPI_COMM_WORLD);
  MPI_Win remote;
  MPIX_Win_from_memhandle(all[peer], 8 * sizeof(long), sizeof(long), MPI_INFO_NULL, peer, parent,
                          &remote);
  MPI_Aint *size_attr;
  int flag = 0;
  MPI_Win_get_attr(remote, MPI_WIN_SIZE, &size_attr, &flag);
  CHECK(flag && *size_attr == 8 * (MPI_Aint)sizeof(long), "MPI_WIN_SIZE");

  MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, parent);
  long v = 100 + rank, one = 1, got = -1;
  MPI_Put(&v, 1, MPI_LONG, peer, 2, 1, MPI_LONG, remote);
  MPI_Accumulate(&one, 1, MPI_LONG, peer, 5, 1, MPI_LONG, MPI_SUM, remote);
  MPI_Win_flush(peer, remote);
  MPI_Get(&got, 1, MPI_LONG, peer, 7, 1, MPI_LONG, remote);
  MPI_Win_flush_all(remote);
  CHECK(got == 10 * peer + 7, "get through the handle: %ld", got);

  /* Not for a handle's window: MPI_ERR_RMA_FLAVOR through its handler. */
  MPI_Win_set_errhandler(remote, MPI_ERRORS_RETURN);
  int cls = 0, rc = MPI_Win_lock_all(0, remote);
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_RMA_FLAVOR, "lock_all on a handle's window: class %d", cls);
  MPI_Request r;
  rc = MPI_Rput(&v, 1, MPI_LONG, peer, 0, 1, MPI_LONG, remote, &r);
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_RMA_FLAVOR, "rput on a handle's window: class %d", cls);
  /* Past the region the handle's window reaches. */
  rc = MPI_Put(&v, 1, MPI_LONG, peer, 8, 1, MPI_LONG, remote);
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_RMA_RANGE, "put past the region: class %d", cls);
  MPI_Win_unlock(peer, parent);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(buf[2] == 100 + peer, "the peer's put: %ld", buf[2]);
  CHECK(buf[5] == 10 * rank + 5 + 1, "the peer's accumulate: %ld", buf[5]);

  /* The owner releases; the peer's next operation fails cleanly. */
  MPIX_Memhandle_release(mine, parent);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, parent);
  rc = MPI_Put(&v, 1, MPI_LONG, peer, 3, 1, MPI_LONG, remote);
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_WIN, "put after the release: class %d", cls);
  MPI_Win_unlock(peer, parent);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(buf[3] == 10 * rank + 3, "released memory written: %ld", buf[3]);
  MPI_Win_set_errhandler(parent, MPI_ERRORS_RETURN);
  rc = MPIX_Memhandle_release(mine, parent);
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_WIN, "a second release: class %d", cls);

  MPI_Win_free(&remote);
  CHECK(remote == MPI_WIN_NULL, "free of the handle's window");
  MPI_Win_free(&parent);
  free(buf);
  if (rank == 0) printf("memhandle: ok\n");
  MPI_Finalize();
  return 0;
}
