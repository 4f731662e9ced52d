/* The extensions of mpi_onesided.h through the preload (2 ranks): nonblocking fence, lock,
 * lock_all, flush and PSCW epochs whose puts land, duplicates with their own info, and
 * remote-completing requests. Exits non-zero on the first wrong value. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include "mpi_onesided.h"

#include "check.h"

int main(int argc, char **argv) {
  int rank;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int peer = 1 - rank;
  long *base;
  MPI_Win win;
  MPI_Win_allocate(8 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  for (int i = 0; i < 8; i++) base[i] = 0;
  MPI_Barrier(MPI_COMM_WORLD);

  /* nonblocking fences around a put: the put is deferred until its epoch is active */
  MPI_Request r[2];
  long v = rank + 1;
  MPIX_Win_ifence(0, win, &r[0]);
  MPI_Put(&v, 1, MPI_LONG, peer, 0, 1, MPI_LONG, win);
  MPIX_Win_ifence(0, win, &r[1]);
  MPI_Status st[4];
  MPI_Waitall(2, r, st);
  CHECK(base[0] == peer + 1, "ifence put: %ld", base[0]);

  /* ilock / iflush / iunlock, completed by MPI_Wait, MPI_Test and MPI_Waitall */
  MPI_Request lock, flush, unlock;
  long w = rank + 10;
  MPIX_Win_ilock(MPI_LOCK_EXCLUSIVE, peer, 0, win, &lock);
  MPI_Put(&w, 1, MPI_LONG, peer, 1, 1, MPI_LONG, win);
  MPIX_Win_iflush(peer, win, &flush);
  MPIX_Win_iunlock(peer, win, &unlock);
  int done = 0;
  while (!done) MPI_Test(&flush, &done, MPI_STATUS_IGNORE);
  MPI_Wait(&lock, MPI_STATUS_IGNORE);
  MPI_Wait(&unlock, MPI_STATUS_IGNORE);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(base[1] == peer + 10, "ilock put: %ld", base[1]);

  /* ipost/istart/icomplete/iwait */
  MPI_Group world, pg;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  MPI_Group_incl(world, 1, &peer, &pg);
  MPI_Request p[4];
  long x = rank + 20;
  MPIX_Win_ipost(pg, 0, win, &p[0]);
  MPIX_Win_istart(pg, 0, win, &p[1]);
  MPI_Put(&x, 1, MPI_LONG, peer, 2, 1, MPI_LONG, win);
  MPIX_Win_icomplete(win, &p[2]);
  MPIX_Win_iwait(win, &p[3]);
  MPI_Waitall(4, p, st);
  CHECK(base[2] == peer + 20, "pscw put: %ld", base[2]);
  MPI_Group_free(&pg);
  MPI_Group_free(&world);

  /* a duplicate with mpi_win_order: a put, then an accumulate flag with no flush between */
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mpi_win_order", "true");
  MPI_Win ordered;
  MPIX_Win_dup_with_info(win, info, &ordered);
  MPI_Info_free(&info);
  CHECK(onesided_window(ordered) && ordered != win, "the duplicate is not a new window of onesided's");
  MPI_Request la, ua;
  MPIX_Win_ilock_all(0, win, &la);
  MPI_Wait(&la, MPI_STATUS_IGNORE);
  long y = rank + 30, one = 1;
  MPI_Put(&y, 1, MPI_LONG, peer, 3, 1, MPI_LONG, ordered);
  MPI_Accumulate(&one, 1, MPI_LONG, peer, 4, 1, MPI_LONG, MPI_SUM, ordered);
  /* remote-completing put: done means at the target */
  MPI_Request rr, ra;
  long z = rank + 40;
  MPIX_Rrput(&z, 1, MPI_LONG, peer, 5, 1, MPI_LONG, win, &rr);
  MPIX_Rraccumulate(&one, 1, MPI_LONG, peer, 6, 1, MPI_LONG, MPI_SUM, win, &ra);
  MPI_Wait(&rr, MPI_STATUS_IGNORE);
  MPI_Wait(&ra, MPI_STATUS_IGNORE);
  MPIX_Win_iunlock_all(win, &ua);
  MPI_Wait(&ua, MPI_STATUS_IGNORE);
  MPI_Win_free(&ordered); /* local for a duplicate */
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(base[3] == peer + 30 && base[4] == 1, "ordered put and flag: %ld %ld", base[3], base[4]);
  CHECK(base[5] == peer + 40 && base[6] == 1, "rrput/rraccumulate: %ld %ld", base[5], base[6]);

  /* remote-completing calls with derived datatypes: a strided target, a strided origin */
  long *b3;
  MPI_Win w3;
  MPI_Win_allocate(8 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &b3, &w3);
  for (int i = 0; i < 8; i++) b3[i] = 0;
  MPI_Datatype s2;
  MPI_Type_vector(2, 1, 2, MPI_LONG, &s2);
  MPI_Type_commit(&s2);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Win_lock_all(0, w3);
  long two[2] = {rank + 50, rank + 60}, src[3] = {5, -9, 7};
  MPIX_Rrput(two, 2, MPI_LONG, peer, 0, 1, s2, w3, &rr);
  MPIX_Rraccumulate(src, 1, s2, peer, 4, 2, MPI_LONG, MPI_SUM, w3, &ra);
  MPI_Wait(&rr, MPI_STATUS_IGNORE);
  MPI_Wait(&ra, MPI_STATUS_IGNORE);
  MPI_Win_unlock_all(w3);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(b3[0] == peer + 50 && b3[1] == 0 && b3[2] == peer + 60 && b3[4] == 5 && b3[5] == 7 &&
            b3[6] == 0,
        "strided rrput/rraccumulate: %ld %ld %ld %ld %ld", b3[0], b3[1], b3[2], b3[4], b3[5]);
  MPI_Type_free(&s2);
  MPI_Win_free(&w3);

  /* MPI_Request_get_status drives a pending request. Rank 1 holds an exclusive lock of
   * itself; rank 0's epoch to it opens at once (seed 004: the ilock request completes and
   * the put is deferred), and its iunlock completes only once rank 1 released the lock
   * and the deferred put ran — while rank 0 only asks for the request's status. */
  if (rank == 1) MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Request opened, closed = MPI_REQUEST_NULL;
  int flag = 0;
  long late = 99;
  if (rank == 0) {
    MPIX_Win_ilock(MPI_LOCK_EXCLUSIVE, 1, 0, win, &opened);
    MPI_Wait(&opened, MPI_STATUS_IGNORE);
    MPI_Put(&late, 1, MPI_LONG, 1, 7, 1, MPI_LONG, win);
    MPIX_Win_iunlock(1, win, &closed);
    MPI_Request_get_status(closed, &flag, MPI_STATUS_IGNORE);
    CHECK(!flag, "the epoch closed while rank 1 held the lock");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    CHECK(base[7] == 0, "rank 0's put landed inside rank 1's exclusive epoch");
    MPI_Win_unlock(1, win);
  }
  if (rank == 0) {
    double until = MPI_Wtime() + 20;
    while (!flag && MPI_Wtime() < until) MPI_Request_get_status(closed, &flag, MPI_STATUS_IGNORE);
    CHECK(flag, "MPI_Request_get_status never saw the epoch complete");
    MPI_Wait(&closed, MPI_STATUS_IGNORE);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) CHECK(base[7] == 99, "the deferred put: %ld", base[7]);

  MPI_Win_free(&win);
  if (rank == 0) printf("extensions: ok\n");
  MPI_Finalize();
  return 0;
}
