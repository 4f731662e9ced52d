/* Notified RMA through the C extensions (2 ranks): rank 1 fills rank 0's window with
 * MPIX_Put_notify and adds with MPIX_Accumulate_notify, rank 0 waits for the counts with
 * MPIX_Win_wait_notify requests (mixed with a two-sided request in one MPI_Waitall) and
 * finds the data in place without any synchronization epoch of its own; then the counters
 * are read, reset, and misused. Then the same with derived datatypes: a put into a strided
 * target, an accumulate from a strided origin and a get into one, each counted. */
#include <mpi.h>
#include <stdio.h>

#include "check.h"
#include "mpi_onesided.h"

#define PUTS 5

int main(int argc, char **argv) {
  int rank;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  long *base;
  MPI_Win win;
  MPI_Win_allocate(16 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  CHECK(onesided_window(win), "window win is not onesided's");
  for (int i = 0; i < 16; i++) base[i] = 0;
  MPIX_Win_set_num_notify(win, 2);
  int n = 0;
  MPIX_Win_get_num_notify(win, &n);
  CHECK(n == 2, "num_notify %d", n);

  if (rank == 1) {
    MPI_Win_lock_all(0, win);
    for (int i = 0; i < PUTS; i++) {
      long v[2] = {100 + i, 200 + i};
      MPIX_Put_notify(v, 2, MPI_LONG, 0, 2 * i, 2, MPI_LONG, 0, win);
    }
    long one = 1;
    MPIX_Accumulate_notify(&one, 1, MPI_LONG, 0, 12, 1, MPI_LONG, MPI_SUM, 1, win);
    MPIX_Accumulate_notify(&one, 1, MPI_LONG, 0, 12, 1, MPI_LONG, MPI_SUM, 1, win);
    long seen = -1;
    MPIX_Get_notify(&seen, 1, MPI_LONG, 0, 15, 1, MPI_LONG, 1, win);
    CHECK(seen == 0, "get_notify read %ld", seen);
    MPI_Win_unlock_all(win);
    int token = 7;
    MPI_Send(&token, 1, MPI_INT, 0, 3, MPI_COMM_WORLD);
  } else {
    MPI_Request rq[3];
    int token = 0;
    MPIX_Win_wait_notify(win, 0, PUTS, &rq[0]);
    MPIX_Win_wait_notify(win, 1, 3, &rq[1]); /* two accumulates and a get */
    MPI_Irecv(&token, 1, MPI_INT, 1, 3, MPI_COMM_WORLD, &rq[2]);
    MPI_Status st[3];
    MPI_Waitall(3, rq, st);
    for (int i = 0; i < PUTS; i++)
      CHECK(base[2 * i] == 100 + i && base[2 * i + 1] == 200 + i, "put %d: %ld %ld", i,
            base[2 * i], base[2 * i + 1]);
    CHECK(base[12] == 2, "accumulates: %ld", base[12]);
    CHECK(token == 7, "the two-sided message");
    MPI_Count v = -1;
    MPIX_Win_get_notify_value(win, 0, &v);
    CHECK(v == PUTS, "counter 0: %ld", (long)v);
    MPIX_Win_reset_notify_value(win, 1, &v);
    CHECK(v == 3, "counter 1 before the reset: %ld", (long)v);
    MPIX_Win_get_notify_value(win, 1, &v);
    CHECK(v == 0, "counter 1 after the reset: %ld", (long)v);
    /* An index this process does not have: MPI_ERR_ARG through the window's handler. */
    MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
    int cls = 0, rc = MPIX_Win_get_notify_value(win, 2, &v);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_ARG, "index 2: class %d", cls);
    printf("notify: ok\n");
  }
  MPI_Barrier(MPI_COMM_WORLD);

  MPI_Datatype every_other;
  MPI_Type_vector(4, 1, 2, MPI_LONG, &every_other);
  MPI_Type_commit(&every_other);
  long *b2;
  MPI_Win w2;
  MPI_Win_allocate(32 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &b2, &w2);
  for (int i = 0; i < 32; i++) b2[i] = 0;
  MPIX_Win_set_num_notify(w2, 1);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    MPI_Win_lock_all(0, w2);
    long v[4] = {1, 2, 3, 4};
    MPIX_Put_notify(v, 4, MPI_LONG, 0, 0, 1, every_other, 0, w2); /* to 0, 2, 4, 6 */
    long src[8] = {10, -1, 20, -1, 30, -1, 40, -1};
    MPIX_Accumulate_notify(src, 1, every_other, 0, 10, 4, MPI_LONG, MPI_SUM, 0, w2);
    long back[8] = {0};
    MPIX_Get_notify(back, 1, every_other, 0, 10, 4, MPI_LONG, 0, w2);
    CHECK(back[0] == 10 && back[2] == 20 && back[4] == 30 && back[6] == 40 && back[1] == 0 &&
              back[7] == 0,
          "strided get_notify: %ld %ld %ld %ld %ld", back[0], back[1], back[2], back[4], back[6]);
    MPI_Win_unlock_all(w2);
  } else {
    MPI_Request rq;
    MPIX_Win_wait_notify(w2, 0, 3, &rq);
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    CHECK(b2[0] == 1 && b2[1] == 0 && b2[2] == 2 && b2[4] == 3 && b2[6] == 4 && b2[7] == 0,
          "strided put_notify: %ld %ld %ld %ld %ld", b2[0], b2[1], b2[2], b2[4], b2[6]);
    CHECK(b2[10] == 10 && b2[11] == 20 && b2[12] == 30 && b2[13] == 40 && b2[14] == 0,
          "accumulate_notify from a strided origin: %ld %ld %ld %ld", b2[10], b2[11], b2[12],
          b2[13]);
    printf("notify (derived datatypes): ok\n");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Type_free(&every_other);
  MPI_Win_free(&w2);
  MPI_Win_free(&win);
  MPI_Finalize();
  return 0;
}
