/* Memory handles through the C extensions (2 ranks, seed 000 §4): each process registers a
 * buffer with a dynamic window, sends the handle with MPI_Allgather, builds a window of
 * its peer from the peer's handle, and puts, accumulates and gets there inside the
 * parent's passive-target epoch, with derived datatypes too (a strided target, a strided
 * origin); the data lands in the peer's buffer. Calls the handle's
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
  CHECK(onesided_window(parent), "window parent is not onesided's");
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

  /* Derived datatypes: to elements 1 and 4, from elements 0 and 2 of the origin. */
  MPI_Datatype stride3, stride2;
  MPI_Type_vector(2, 1, 3, MPI_LONG, &stride3);
  MPI_Type_vector(2, 1, 2, MPI_LONG, &stride2);
  MPI_Type_commit(&stride3);
  MPI_Type_commit(&stride2);
  long pair[2] = {500 + rank, 600 + rank}, ones[3] = {1, -7, 1}, got2[3] = {-1, -1, -1};
  MPI_Put(pair, 2, MPI_LONG, peer, 1, 1, stride3, remote);
  MPI_Accumulate(ones, 1, stride2, peer, 5, 2, MPI_LONG, MPI_SUM, remote);
  MPI_Win_flush(peer, remote);
  MPI_Get(got2, 1, stride2, peer, 6, 2, MPI_LONG, remote);
  MPI_Win_flush(peer, remote);
  CHECK(got2[0] == 10 * peer + 6 + 1 && got2[1] == -1 && got2[2] == 10 * peer + 7,
        "strided get through the handle: %ld %ld %ld", got2[0], got2[1], got2[2]);
  MPI_Type_free(&stride3);
  MPI_Type_free(&stride2);

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
  CHECK(buf[5] == 10 * rank + 5 + 2, "the peer's accumulates: %ld", buf[5]);
  CHECK(buf[1] == 500 + peer && buf[4] == 600 + peer, "the peer's strided put: %ld %ld", buf[1],
        buf[4]);
  CHECK(buf[6] == 10 * rank + 6 + 1, "the peer's strided accumulate: %ld", buf[6]);

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
