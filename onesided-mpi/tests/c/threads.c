/* MPI_THREAD_MULTIPLE through the preloaded C ABI (2 ranks): four threads per process each
 * create, use and free windows of their own while the others do the same, and all of them
 * accumulate into one shared window at once. Window lookups take counted references at
 * this thread level; the totals must come out exact. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>

#include "check.h"

#define THREADS 4
#define ROUNDS 40

static int rank, peer;
static MPI_Win shared_win;
static MPI_Comm comms[THREADS];

static void *work(void *arg) {
  int t = (int)(long)arg;
  for (int round = 0; round < ROUNDS; round++) {
    /* a window of this thread's own, over its own communicator */
    long *base;
    MPI_Win own;
    MPI_Win_allocate(4 * sizeof(long), sizeof(long), MPI_INFO_NULL, comms[t], &base, &own);
    base[0] = -1;
    MPI_Win_fence(0, own);
    long v = 1000 * rank + 10 * t + round % 10;
    MPI_Put(&v, 1, MPI_LONG, peer, 0, 1, MPI_LONG, own);
    MPI_Win_fence(0, own);
    CHECK(base[0] == 1000 * peer + 10 * t + round % 10, "thread %d round %d: own window %ld", t,
          round, base[0]);
    MPI_Win_free(&own);
    CHECK(own == MPI_WIN_NULL, "thread %d: free did not reset the handle", t);

    /* the shared window, from every thread at once */
    long one = 1;
    MPI_Accumulate(&one, 1, MPI_LONG, peer, t, 1, MPI_LONG, MPI_SUM, shared_win);
    MPI_Win_flush(peer, shared_win);
  }
  return NULL;
}

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  CHECK(provided == MPI_THREAD_MULTIPLE, "provided %d", provided);
  peer = 1 - rank;
  for (int t = 0; t < THREADS; t++) MPI_Comm_dup(MPI_COMM_WORLD, &comms[t]);
  long *counts;
  MPI_Win_allocate(THREADS * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &counts,
                   &shared_win);
  CHECK(onesided_window(shared_win), "window shared_win is not onesided's");
  int flavor_ok = 0;
  MPI_Aint *size_attr;
  MPI_Win_get_attr(shared_win, MPI_WIN_SIZE, &size_attr, &flavor_ok);
  CHECK(flavor_ok && *size_attr == THREADS * (MPI_Aint)sizeof(long), "MPI_WIN_SIZE");
  for (int t = 0; t < THREADS; t++) counts[t] = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Win_lock_all(0, shared_win);

  pthread_t th[THREADS];
  for (long t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, work, (void *)t);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);

  MPI_Win_unlock_all(shared_win);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int t = 0; t < THREADS; t++)
    CHECK(counts[t] == ROUNDS, "thread %d's accumulates: %ld of %d", t, counts[t], ROUNDS);

  /* a stray handle is MPI_ERR_WIN, never a crash */
  MPI_Win gone = shared_win;
  MPI_Win_free(&shared_win);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  long x = 0;
  int rc = MPI_Put(&x, 1, MPI_LONG, peer, 0, 1, MPI_LONG, gone), cls = 0;
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_WIN, "a freed window: class %d", cls);
  for (int t = 0; t < THREADS; t++) MPI_Comm_free(&comms[t]);
  if (rank == 0) printf("threads: ok\n");
  MPI_Finalize();
  return 0;
}
