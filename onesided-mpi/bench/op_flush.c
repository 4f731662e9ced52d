/* 8-byte RMA operation + MPI_Win_flush, timed with one timer around the whole loop (OSU
 * reads MPI_Wtime twice per iteration, which costs as much as the operation itself under
 * the preload). Rank 0 is the origin, rank 1 the target (it waits in MPI_Barrier); every
 * operation is checked once after its loop.
 *
 *   mpicc -O2 -o op_flush op_flush.c
 *   mpiexec -n 2 ./op_flush [ITERATIONS [FLAVOR]]   # default 200000, both flavors
 *
 * FLAVOR (`allocate` or `create`) runs one window flavor only (for instruction counts).
 * Prints one line per window flavor and operation: "FLAVOR OP NANOSECONDS_PER_OP". Any
 * ABI: nothing here depends on how handles are represented. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PUT, GET, ACC, FOP, CAS, NOPS };
static const char *names[NOPS] = {"put", "get", "accumulate", "fetch_and_op",
                                  "compare_and_swap"};

static void fail(const char *what, long got, long want) {
  fprintf(stderr, "op_flush: %s: got %ld, expected %ld\n", what, got, want);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) fprintf(stderr, "op_flush: run with 2 ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  long iters = argc > 1 ? atol(argv[1]) : 200000;
  long warmup = iters / 10 + 1;
  const char *only = argc > 2 ? argv[2] : NULL;
  /* A flavor an MPI cannot make here (Open MPI 4.1's create windows without its
   * single-copy mechanism) is reported unavailable instead of ending the run. */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  for (int flavor = 0; flavor < 2; flavor++) {
    if (only && strcmp(only, flavor == 0 ? "allocate" : "create") != 0) continue;
    long *base;
    long *own = NULL;
    MPI_Win win;
    int rc;
    if (flavor == 0) {
      rc = MPI_Win_allocate(2 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD,
                            &base, &win);
    } else {
      own = calloc(2, sizeof(long));
      base = own;
      rc = MPI_Win_create(base, 2 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD,
                          &win);
    }
    int ok = rc == MPI_SUCCESS, all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (!all_ok) {
      if (rank == 0) printf("%s unavailable\n", flavor == 0 ? "allocate" : "create");
      if (ok) MPI_Win_free(&win);
      free(own);
      continue;
    }
    for (int op = 0; op < NOPS; op++) {
      base[0] = 0;
      base[1] = 0;
      MPI_Barrier(MPI_COMM_WORLD);
      double ns = 0;
      if (rank == 0) {
        long value = 7, result = 0, compare = 0;
        MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
        double start = 0;
        for (long i = -warmup; i < iters; i++) {
          if (i == 0) start = MPI_Wtime();
          switch (op) {
            case PUT: MPI_Put(&value, 1, MPI_LONG, 1, 0, 1, MPI_LONG, win); break;
            case GET: MPI_Get(&result, 1, MPI_LONG, 1, 0, 1, MPI_LONG, win); break;
            case ACC: MPI_Accumulate(&value, 1, MPI_LONG, 1, 0, 1, MPI_LONG, MPI_SUM, win); break;
            case FOP:
              MPI_Fetch_and_op(&value, &result, MPI_LONG, 1, 0, MPI_SUM, win);
              break;
            case CAS:
              MPI_Compare_and_swap(&value, &compare, &result, MPI_LONG, 1, 0, win);
              break;
          }
          MPI_Win_flush(1, win);
        }
        ns = (MPI_Wtime() - start) * 1e9 / (double)iters;
        /* The check: what the target's word holds now, read back through the window. */
        long word = -1;
        MPI_Get(&word, 1, MPI_LONG, 1, 0, 1, MPI_LONG, win);
        MPI_Win_unlock(1, win);
        long total = iters + warmup;
        long want = op == PUT || op == CAS ? 7 : op == GET ? 0 : 7 * total;
        if (word != want) fail(names[op], word, want);
        if (op == GET && result != 0) fail("get result", result, 0);
        if (op == FOP && result != 7 * (total - 1)) fail("fetch_and_op result", result, 7 * (total - 1));
        printf("%s %s %.1f\n", flavor == 0 ? "allocate" : "create", names[op], ns);
        fflush(stdout);
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Win_free(&win);
    free(own);
  }
  MPI_Finalize();
  return 0;
}
