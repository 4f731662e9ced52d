/* Error handler references through the preloaded C ABI (2 ranks). MPI_Win_get_errhandler
 * hands out a reference the program frees with MPI_Errhandler_free (MPI-4.1 §9.3.4), also
 * of a predefined handler; a handler the program frees while a window uses it stays alive
 * until the window lets it go. Open MPI counts both on its objects — predefined ones
 * included, which it frees (a static object: "free(): invalid pointer") when the count
 * reaches zero; MPICH refuses a handle freed once too often. mpi4py's
 * testGetSetErrhandler does the first part on every window kind. */
#include <mpi.h>
#include <stdio.h>

#include "check.h"

static int rank, calls_a, calls_b;

static void on_error_a(MPI_Win *win, int *code, ...) {
  (void)win; (void)code;
  calls_a++;
}

static void on_error_b(MPI_Win *win, int *code, ...) {
  (void)win; (void)code;
  calls_b++;
}

/* mpi4py's testGetSetErrhandler, four rounds: each get's reference freed. */
static void get_set_free(MPI_Win win) {
  MPI_Errhandler handlers[4] = {MPI_ERRORS_ARE_FATAL, MPI_ERRORS_RETURN, MPI_ERRORS_ARE_FATAL,
                                MPI_ERRORS_RETURN};
  for (int i = 0; i < 4; i++) {
    MPI_Errhandler before, now;
    CHECK(MPI_Win_get_errhandler(win, &before) == MPI_SUCCESS, "get_errhandler");
    CHECK(before != MPI_ERRHANDLER_NULL, "get_errhandler gave MPI_ERRHANDLER_NULL");
    MPI_Win_set_errhandler(win, handlers[i]);
    MPI_Win_get_errhandler(win, &now);
    CHECK(now == handlers[i], "round %d: not the handler just set", i);
    CHECK(MPI_Errhandler_free(&now) == MPI_SUCCESS, "round %d: free of the answer", i);
    CHECK(now == MPI_ERRHANDLER_NULL, "round %d: free left the handle set", i);
    MPI_Win_set_errhandler(win, before);
    CHECK(MPI_Errhandler_free(&before) == MPI_SUCCESS, "round %d: free of the first answer", i);
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  static long memory[8];

  /* 1. Every window kind, each twice over: the predefined handlers' counts must stay whole
   * through the windows' frees (their communicators release the handlers) and Finalize. */
  for (int round = 0; round < 2; round++) {
    for (int kind = 0; kind < 3; kind++) {
      MPI_Win win;
      long *base;
      if (kind == 0)
        MPI_Win_allocate(8 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base,
                         &win);
      else if (kind == 1)
        MPI_Win_create(memory, sizeof memory, sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
      else
        MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win);
      get_set_free(win);
      MPI_Win_free(&win);
    }
  }

  /* 2. A user handler freed while set, its get answer freed too, new handlers made (a host
   * that freed the first too early could hand its handle out again): the window still calls
   * the first, until another handler replaces it. */
  MPI_Win win;
  long *base;
  MPI_Win_allocate(8 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  MPI_Errhandler a, got, made[8];
  MPI_Win_create_errhandler(on_error_a, &a);
  MPI_Win_set_errhandler(win, a);
  CHECK(MPI_Errhandler_free(&a) == MPI_SUCCESS, "free of a handler in use");
  CHECK(a == MPI_ERRHANDLER_NULL, "free left the handle set");
  MPI_Win_get_errhandler(win, &got);
  for (int i = 0; i < 8; i++) MPI_Win_create_errhandler(on_error_b, &made[i]);
  MPI_Win_call_errhandler(win, MPI_ERR_OTHER);
  CHECK(calls_a == 1 && calls_b == 0, "after new handlers: %d calls of the first, %d of others",
        calls_a, calls_b);
  CHECK(MPI_Errhandler_free(&got) == MPI_SUCCESS, "free of the get answer");
  MPI_Win_call_errhandler(win, MPI_ERR_OTHER);
  CHECK(calls_a == 2 && calls_b == 0, "handler after the answer's free: %d / %d", calls_a,
        calls_b);
  MPI_Win_set_errhandler(win, made[0]); /* the window lets the first go: freed now */
  MPI_Win_call_errhandler(win, MPI_ERR_OTHER);
  CHECK(calls_a == 2 && calls_b == 1, "the replacing handler: %d / %d", calls_a, calls_b);
  for (int i = 0; i < 8; i++) MPI_Errhandler_free(&made[i]);
  MPI_Win_call_errhandler(win, MPI_ERR_OTHER); /* made[0] is still the window's */
  CHECK(calls_b == 2, "the window's handler after its handle was freed: %d calls", calls_b);
  MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
  MPI_Win_free(&win);

  /* 3. A communicator's handler: the host's, unchanged. */
  MPI_Errhandler world;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &world);
  CHECK(MPI_Errhandler_free(&world) == MPI_SUCCESS, "free of a communicator's handler");
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("errhandler_refs: ok\n");
  MPI_Finalize();
  return 0;
}
