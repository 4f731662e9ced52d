/* fork() after windows exist (2 ranks): memory the library shares in place (a create
 * window's pages, an attached region) and MPI_Alloc_mem memory are a forked child's own, as
 * natively: the child reads what the parent had, and its stores never reach the parent. The
 * parent's windows keep working afterwards. Also prints what a fork + _exit + waitpid costs
 * with 256 MiB of window memory shared in place (the child handler maps, it copies nothing). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

enum { N = 1 << 18 }; /* ints per buffer: 1 MiB */

static int rank;

/* A child that checks `n` ints of each buffer hold their pattern, overwrites them, and exits
 * 0 when every check held. */
static void fork_and_scribble(int **bufs, int nbufs, int n) {
  pid_t pid = fork();
  CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    int ok = 1;
    for (int b = 0; b < nbufs; b++)
      for (int i = 0; i < n; i++) {
        if (bufs[b][i] != b * 1000000 + i) ok = 0;
        bufs[b][i] = -7;
      }
    _exit(ok ? 0 : 3);
  }
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "the child did not see the parent's contents (status %#x)", status);
  for (int b = 0; b < nbufs; b++)
    for (int i = 0; i < n; i++)
      CHECK(bufs[b][i] == b * 1000000 + i, "buffer %d word %d: the child's store %d reached the parent",
            b, i, bufs[b][i]);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int peer = 1 - rank;

  int *created = malloc(N * sizeof(int));
  int *attached = malloc(N * sizeof(int));
  int *allocated;
  MPI_Alloc_mem(N * sizeof(int), MPI_INFO_NULL, &allocated);
  int *bufs[3] = {created, attached, allocated};
  for (int b = 0; b < 3; b++)
    for (int i = 0; i < N; i++) bufs[b][i] = b * 1000000 + i;

  MPI_Win win, dyn;
  MPI_Win_create(created, N * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
  CHECK(onesided_window(win), "window win is not onesided's");
  MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &dyn);
  MPI_Win_attach(dyn, attached, N * sizeof(int));
  MPI_Barrier(MPI_COMM_WORLD);

  fork_and_scribble(bufs, 3, N);

  /* The parent's windows still work, both ways. */
  MPI_Barrier(MPI_COMM_WORLD);
  int v = 4242 + rank, got = 0;
  MPI_Win_lock(MPI_LOCK_EXCLUSIVE, peer, 0, win);
  MPI_Put(&v, 1, MPI_INT, peer, 5, 1, MPI_INT, win);
  MPI_Win_unlock(peer, win);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(created[5] == 4242 + peer, "a put after the fork: %d", created[5]);
  MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, win);
  MPI_Get(&got, 1, MPI_INT, peer, 7, 1, MPI_INT, win);
  MPI_Win_unlock(peer, win);
  CHECK(got == 7, "a get after the fork: %d", got);
  created[5] = 5;

  /* Again after the parent changed its memory: the child sees the new contents. */
  MPI_Barrier(MPI_COMM_WORLD);
  fork_and_scribble(bufs, 3, N);

  /* What a fork costs with 256 MiB shared in place (4 windows of 64 MiB), against the same
   * memory not in a window. */
  enum { BIG = 64 << 20 };
  char *big[4];
  MPI_Win bigwin[4];
  double t_none, t_big;
  for (int k = 0; k < 4; k++) {
    big[k] = malloc(BIG);
    memset(big[k], k, BIG);
  }
  {
    double t0 = MPI_Wtime();
    for (int k = 0; k < 20; k++) {
      pid_t pid = fork();
      if (pid == 0) _exit(0);
      waitpid(pid, NULL, 0);
    }
    t_none = (MPI_Wtime() - t0) / 20;
  }
  for (int k = 0; k < 4; k++)
    MPI_Win_create(big[k], BIG, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &bigwin[k]);
  {
    double t0 = MPI_Wtime();
    for (int k = 0; k < 20; k++) {
      pid_t pid = fork();
      if (pid == 0) _exit(big[3][BIG - 1] == 3 ? 0 : 1);
      int status;
      waitpid(pid, &status, 0);
      CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child read wrong window memory");
    }
    t_big = (MPI_Wtime() - t0) / 20;
  }
  if (rank == 0)
    printf("fork + _exit + waitpid: %.0f us with 256 MiB of windows shared in place, %.0f us "
           "with the same memory in no window\n",
           t_big * 1e6, t_none * 1e6);
  for (int k = 0; k < 4; k++) {
    MPI_Win_free(&bigwin[k]);
    free(big[k]);
  }

  MPI_Win_detach(dyn, attached);
  MPI_Win_free(&dyn);
  MPI_Win_free(&win);
  MPI_Free_mem(allocated);
  free(attached);
  free(created);
  if (rank == 0) printf("fork: ok\n");
  MPI_Finalize();
  return 0;
}
