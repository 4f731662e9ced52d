/* Misuse through the preloaded C ABI gets MPI's error classes through the window's error
 * handler (MPI_ERRORS_RETURN), never a crash or a hang; an invalid window handle goes to
 * the communicator's handler. With argument "fatal", rank 0 makes an erroneous call under
 * the default handler (MPI_ERRORS_ARE_FATAL): the job must end non-zero. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static int rank;

static void expect(int rc, int want, const char *what) {
  int cls = MPI_SUCCESS;
  if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
  if (cls != want) {
    fprintf(stderr, "rank %d: %s: class %d, expected %d\n", rank, what, cls, want);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int peer = 1 - rank;
  long *base, v = 1;
  MPI_Win win;
  MPI_Win_allocate(4 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);

  if (argc > 1 && strcmp(argv[1], "fatal") == 0) {
    if (rank == 0) MPI_Put(&v, 1, MPI_LONG, peer, 0, 1, MPI_LONG, win); /* no epoch */
    MPI_Barrier(MPI_COMM_WORLD);
    fprintf(stderr, "rank %d: the fatal handler returned\n", rank);
    MPI_Finalize();
    return 0; /* the harness expects a non-zero exit: reaching this is the failure */
  }

  MPI_Errhandler eh;
  MPI_Win_get_errhandler(win, &eh);
  if (eh != MPI_ERRORS_ARE_FATAL) {
    fprintf(stderr, "the default window handler is not MPI_ERRORS_ARE_FATAL\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
  expect(MPI_Put(&v, 1, MPI_LONG, peer, 0, 1, MPI_LONG, win), MPI_ERR_RMA_SYNC, "put outside an epoch");
  expect(MPI_Win_unlock(peer, win), MPI_ERR_RMA_SYNC, "unlock of an unlocked rank");
  expect(MPI_Win_lock(12345, peer, 0, win), MPI_ERR_LOCKTYPE, "lock type");
  expect(MPI_Win_lock(MPI_LOCK_SHARED, peer, 1 << 30, win), MPI_ERR_ASSERT, "assert bits");
  expect(MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, win), MPI_SUCCESS, "lock");
  expect(MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, win), MPI_ERR_RMA_SYNC, "lock twice");
  expect(MPI_Put(&v, 1, MPI_LONG, peer, 4, 1, MPI_LONG, win), MPI_ERR_RMA_RANGE, "put past the end");
  expect(MPI_Put(&v, 1, MPI_LONG, 7, 0, 1, MPI_LONG, win), MPI_ERR_RANK, "put to rank 7");
  expect(MPI_Accumulate(&v, 1, MPI_LONG, peer, 0, 1, MPI_LONG, MPI_MINLOC, win),
         MPI_ERR_OP, "MINLOC on a long");
  double d = 1;
  expect(MPI_Accumulate(&d, 1, MPI_DOUBLE, peer, 0, 1, MPI_DOUBLE, MPI_BAND, win), MPI_ERR_OP,
         "bitwise and on a double");
  expect(MPI_Put(&v, 1, MPI_LONG, peer, 0, 1, MPI_INT, win), MPI_ERR_TYPE,
         "origin and target of different sizes");
  expect(MPI_Win_unlock(peer, win), MPI_SUCCESS, "unlock");
  expect(MPI_Win_fence(0, win), MPI_SUCCESS, "fence");

  /* A handle that is no window goes to the communicator's handler. */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  expect(MPI_Win_fence(0, (MPI_Win)0x60001234), MPI_ERR_WIN, "fence on a stray handle");
  MPI_Win_free(&win);
  if (rank == 0) printf("errors: ok\n");
  MPI_Finalize();
  return 0;
}
