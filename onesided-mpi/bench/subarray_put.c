/* Strided puts as a library makes them (a Global-Arrays-style runtime): for each put a new
 * 2-D subarray datatype of MPI_BYTE (rows x row bytes out of an array twice as wide), commit,
 * MPI_Put with it on both sides, MPI_Win_flush_local, MPI_Type_free — and the same with one
 * type made once and reused. Rank 0 puts into rank 1's allocate window inside one lock_all
 * epoch. Prints one line per shape and mode: "rows row new|reused <microseconds per put>",
 * after checking that the target holds what was put (exit 1 otherwise).
 *
 *   mpiexec -n 2 subarray_put [seconds per cell, default 0.2] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static MPI_Datatype subarray(int rows, int row) {
  int sizes[2] = {rows, 2 * row}, subs[2] = {rows, row}, starts[2] = {0, row / 2};
  MPI_Datatype t;
  MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_BYTE, &t);
  MPI_Type_commit(&t);
  return t;
}

int main(int argc, char **argv) {
  int rank;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  double budget = argc > 1 ? atof(argv[1]) : 0.2;
  const size_t max_bytes = 8 << 20; /* 4 MiB selected out of an array twice as wide */
  unsigned char *base, *src = malloc(max_bytes);
  MPI_Win win;
  MPI_Win_allocate(max_bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  memset(base, 0, max_bytes);
  int rows_of[] = {1, 16, 256}, row_of[] = {16, 256, 4096, 65536};
  int failed = 0;
  MPI_Win_lock_all(0, win);
  for (int a = 0; a < 4; a++) {
    for (int b = 0; b < 3; b++) {
      int row = row_of[a], rows = rows_of[b];
      if ((size_t)rows * row > (4 << 20)) continue;
      for (int reuse = 0; reuse < 2; reuse++) {
        unsigned char stamp = (unsigned char)(1 + a * 8 + b * 2 + reuse);
        memset(src, stamp, max_bytes);
        MPI_Barrier(MPI_COMM_WORLD);
        long iters = 0;
        double t0 = MPI_Wtime(), t = t0;
        if (rank == 0) {
          MPI_Datatype kept = reuse ? subarray(rows, row) : MPI_DATATYPE_NULL;
          /* Whole batches of 8 puts until the budget is spent. */
          while (t - t0 < budget || iters == 0) {
            for (int i = 0; i < 8; i++, iters++) {
              MPI_Datatype ty = reuse ? kept : subarray(rows, row);
              MPI_Put(src, 1, ty, 1, 0, 1, ty, win);
              MPI_Win_flush_local(1, win);
              if (!reuse) MPI_Type_free(&ty);
            }
            t = MPI_Wtime();
          }
          MPI_Win_flush(1, win);
          if (reuse) MPI_Type_free(&kept);
          printf("%d %d %s %.3f\n", rows, row, reuse ? "reused" : "new",
                 (t - t0) * 1e6 / (double)iters);
          fflush(stdout);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 1) {
          /* Every selected byte holds the stamp; the bytes around each row do not. */
          for (int r = 0; r < rows && !failed; r++) {
            const unsigned char *line = base + (size_t)r * 2 * row;
            if (line[row / 2] != stamp || line[row / 2 + row - 1] != stamp ||
                (row / 2 > 0 && line[row / 2 - 1] == stamp) ||
                (row / 2 + row < 2 * row && line[row / 2 + row] == stamp)) {
              fprintf(stderr, "rows %d x %d: row %d holds the wrong bytes\n", rows, row, r);
              failed = 1;
            }
          }
        }
      }
    }
  }
  MPI_Win_unlock_all(win);
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Win_free(&win);
  free(src);
  MPI_Finalize();
  return failed;
}
