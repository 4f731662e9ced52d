/* More windows alive at once than the first chunk of the library's window table holds
 * (256 slots, read with one load from a handle; later slots sit in chunks allocated on
 * demand): every window's 8-byte put, accumulate, fetch_and_op and compare_and_swap +
 * flush go through the C ABI's hot path and land in that window and no other, in the
 * first chunk and past it, and a slot freed and reused gives the new window's handle the
 * new window. */
#include <mpi.h>
#include <stdlib.h>

#include "check.h"

enum { WINDOWS = 300 };

static int rank, nprocs;

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
  int to = (rank + 1) % nprocs, from = (rank + nprocs - 1) % nprocs;
  MPI_Win *win = malloc(WINDOWS * sizeof *win);
  long **base = malloc(WINDOWS * sizeof *base);
  for (int i = 0; i < WINDOWS; i++) {
    MPI_Win_allocate(4 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base[i],
                     &win[i]);
    CHECK(onesided_window(win[i]), "window %d is not onesided's", i);
    for (int k = 0; k < 4; k++) base[i][k] = 0;
  }
  MPI_Barrier(MPI_COMM_WORLD);

  /* Every window gets values of its own: slot i's window holds i + 1000 * rank of the
   * origin, so a handle that reached another window's entry shows. */
  for (int i = 0; i < WINDOWS; i++) {
    long v = i + 1000L * rank, one = 1, old = -1, expected = 0;
    MPI_Win_lock(MPI_LOCK_SHARED, to, 0, win[i]);
    MPI_Put(&v, 1, MPI_LONG, to, 0, 1, MPI_LONG, win[i]);
    MPI_Win_flush(to, win[i]);
    MPI_Accumulate(&v, 1, MPI_LONG, to, 1, 1, MPI_LONG, MPI_SUM, win[i]);
    MPI_Win_flush(to, win[i]);
    MPI_Fetch_and_op(&one, &old, MPI_LONG, to, 2, MPI_SUM, win[i]);
    MPI_Win_flush(to, win[i]);
    CHECK(old == 0, "window %d: fetch_and_op found %ld", i, old);
    MPI_Compare_and_swap(&v, &expected, &old, MPI_LONG, to, 3, win[i]);
    MPI_Win_flush(to, win[i]);
    CHECK(old == 0, "window %d: compare_and_swap found %ld", i, old);
    MPI_Win_unlock(to, win[i]);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < WINDOWS; i++) {
    long want = i + 1000L * from;
    MPI_Win_sync(win[i]);
    CHECK(base[i][0] == want && base[i][1] == want && base[i][2] == 1 && base[i][3] == want,
          "window %d holds %ld %ld %ld %ld, want %ld %ld 1 %ld", i, base[i][0], base[i][1],
          base[i][2], base[i][3], want, want, want);
  }

  /* A slot of the first chunk freed and taken again: the old handle's slot serves the new
   * window. */
  MPI_Win_free(&win[7]);
  MPI_Win_allocate(4 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base[7],
                   &win[7]);
  base[7][0] = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  long mark = 77 + rank;
  MPI_Win_lock(MPI_LOCK_SHARED, to, 0, win[7]);
  MPI_Put(&mark, 1, MPI_LONG, to, 0, 1, MPI_LONG, win[7]);
  MPI_Win_flush(to, win[7]);
  MPI_Win_unlock(to, win[7]);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Win_sync(win[7]);
  CHECK(base[7][0] == 77 + from, "the window in a reused slot holds %ld", base[7][0]);

  for (int i = 0; i < WINDOWS; i++) MPI_Win_free(&win[i]);
  free(win);
  free(base);
  MPI_Finalize();
  return 0;
}
