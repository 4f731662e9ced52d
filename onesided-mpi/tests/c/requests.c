/* Request-based RMA through the preloaded C ABI (2 ranks): MPI_Rput, MPI_Rget,
 * MPI_Raccumulate and MPI_Rget_accumulate hand out genuine MPICH requests, completed by
 * MPI_Wait, MPI_Test and MPI_Waitall mixed with MPI_Isend/MPI_Irecv, or freed with
 * MPI_Request_free (the operation still completes). */
#include <mpi.h>
#include <stdio.h>

#include "check.h"

int main(int argc, char **argv) {
  int rank;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int peer = 1 - rank;
  long *base;
  MPI_Win win;
  MPI_Win_allocate(8 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  for (int i = 0; i < 8; i++) base[i] = 100 * rank + i;
  MPI_Barrier(MPI_COMM_WORLD);

  MPI_Win_lock_all(0, win);
  long v = rank + 7, got = -1, one = 1, old = -1, seen = -1;
  MPI_Request rq[6];
  MPI_Rput(&v, 1, MPI_LONG, peer, 1, 1, MPI_LONG, win, &rq[0]);
  MPI_Rget(&got, 1, MPI_LONG, peer, 2, 1, MPI_LONG, win, &rq[1]);
  MPI_Raccumulate(&one, 1, MPI_LONG, 0, 3, 1, MPI_LONG, MPI_SUM, win, &rq[2]);
  MPI_Rget_accumulate(&one, 1, MPI_LONG, &old, 1, MPI_LONG, peer, 4, 1, MPI_LONG, MPI_SUM, win,
                      &rq[3]);
  /* two-sided requests in the same array */
  long out = rank, in = -1;
  MPI_Isend(&out, 1, MPI_LONG, peer, 9, MPI_COMM_WORLD, &rq[4]);
  MPI_Irecv(&in, 1, MPI_LONG, peer, 9, MPI_COMM_WORLD, &rq[5]);
  MPI_Status st[6];
  MPI_Waitall(6, rq, st);
  for (int i = 0; i < 6; i++) CHECK(rq[i] == MPI_REQUEST_NULL, "request %d not freed", i);
  CHECK(got == 100 * peer + 2, "rget: %ld", got);
  CHECK(old == 100 * peer + 4, "rget_accumulate fetched %ld", old);
  CHECK(in == peer, "irecv: %ld", in);

  /* MPI_Test until done, and MPI_Request_free of a pending one */
  MPI_Request r;
  int flag = 0;
  MPI_Rget(&seen, 1, MPI_LONG, peer, 5, 1, MPI_LONG, win, &r);
  while (!flag) MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
  CHECK(seen == 100 * peer + 5, "rget + test: %ld", seen);
  MPI_Rput(&v, 1, MPI_LONG, peer, 6, 1, MPI_LONG, win, &r);
  MPI_Request_free(&r);
  MPI_Win_flush_all(win);
  MPI_Win_unlock_all(win);
  MPI_Barrier(MPI_COMM_WORLD);

  CHECK(base[1] == peer + 7, "rput landed %ld", base[1]);
  CHECK(base[6] == peer + 7, "freed rput landed %ld", base[6]);
  CHECK(base[4] == 100 * rank + 5, "rget_accumulate sum %ld", base[4]);
  if (rank == 0) CHECK(base[3] == 3 + 2, "raccumulate total %ld", base[3]);

  /* outside a passive epoch: MPI_ERR_RMA_SYNC through the window's handler */
  MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
  int rc = MPI_Rput(&v, 1, MPI_LONG, peer, 1, 1, MPI_LONG, win, &r), cls = 0;
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_RMA_SYNC, "rput outside an epoch: class %d", cls);
  MPI_Win_free(&win);
  if (rank == 0) printf("requests: ok\n");
  MPI_Finalize();
  return 0;
}
