/* Windows across nodes go to the host MPI's RMA when ONESIDED_ACROSS_NODES=host asks (2
 * ranks, run with ONESIDED_NODES=2: each rank on a virtual node of its own). A window over MPI_COMM_WORLD then keeps MPICH's handle
 * and every call on it is MPICH's — fence, lock, flush, put, get, accumulate, requests,
 * attributes, error handlers, dynamic windows — while a window over MPI_COMM_SELF (one
 * node) is onesided's, in the same program. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

static int ours(MPI_Win w) { return onesided_window(w); }

int main(int argc, char **argv) {
  int rank;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int peer = 1 - rank;
  CHECK(getenv("ONESIDED_NODES") != NULL, "run with ONESIDED_NODES=2");
  CHECK(getenv("ONESIDED_ACROSS_NODES") != NULL, "run with ONESIDED_ACROSS_NODES=host");

  long *base;
  MPI_Win win;
  MPI_Win_allocate(8 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  CHECK(!ours(win), "a window across nodes is onesided's");
  for (int i = 0; i < 8; i++) base[i] = 10 * rank + i;
  MPI_Win_fence(0, win);
  long v = 100 + rank, got = -1, one = 1;
  MPI_Put(&v, 1, MPI_LONG, peer, 1, 1, MPI_LONG, win);
  MPI_Get(&got, 1, MPI_LONG, peer, 2, 1, MPI_LONG, win);
  MPI_Accumulate(&one, 1, MPI_LONG, 0, 3, 1, MPI_LONG, MPI_SUM, win);
  MPI_Win_fence(0, win);
  CHECK(base[1] == 100 + peer, "fence put: %ld", base[1]);
  CHECK(got == 10 * peer + 2, "fence get: %ld", got);
  if (rank == 0) CHECK(base[3] == 3 + 2, "accumulate: %ld", base[3]);

  MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, win);
  MPI_Request r;
  long w = 200 + rank;
  MPI_Rput(&w, 1, MPI_LONG, peer, 4, 1, MPI_LONG, win, &r);
  MPI_Wait(&r, MPI_STATUS_IGNORE);
  long old = -1;
  MPI_Fetch_and_op(&one, &old, MPI_LONG, peer, 5, MPI_SUM, win);
  MPI_Win_flush(peer, win);
  CHECK(old == 10 * peer + 5, "fetch_and_op: %ld", old);
  MPI_Win_unlock(peer, win);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(base[4] == 200 + peer, "rput: %ld", base[4]);

  MPI_Aint *size;
  int flag = 0;
  MPI_Win_get_attr(win, MPI_WIN_SIZE, &size, &flag);
  CHECK(flag && *size == 8 * (MPI_Aint)sizeof(long), "MPI_WIN_SIZE");
  MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
  int cls = 0, rc = MPI_Put(&v, 1, MPI_LONG, 7, 0, 1, MPI_LONG, win);
  MPI_Error_class(rc, &cls);
  CHECK(rc != MPI_SUCCESS, "a put to rank 7 succeeded");

  /* One node: onesided's window, next to MPICH's. */
  long *mine;
  MPI_Win self;
  MPI_Win_allocate(sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_SELF, &mine, &self);
  CHECK(ours(self), "a window of one node is not onesided's");
  MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, self);
  long seven = 7;
  MPI_Put(&seven, 1, MPI_LONG, 0, 0, 1, MPI_LONG, self);
  MPI_Win_unlock(0, self);
  CHECK(*mine == 7, "self window: %ld", *mine);
  MPI_Win_free(&self);

  /* Dynamic windows across nodes: attach, addresses, put. */
  MPI_Win dyn;
  MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &dyn);
  CHECK(!ours(dyn), "a dynamic window across nodes is onesided's");
  long *region = calloc(4, sizeof(long));
  MPI_Win_attach(dyn, region, 4 * sizeof(long));
  MPI_Aint mine_addr, addrs[2];
  MPI_Get_address(region, &mine_addr);
  MPI_Allgather(&mine_addr, 1, MPI_AINT, addrs, 1, MPI_AINT, MPI_COMM_WORLD);
  MPI_Win_lock_all(0, dyn);
  MPI_Put(&v, 1, MPI_LONG, peer, addrs[peer] + sizeof(long), 1, MPI_LONG, dyn);
  MPI_Win_unlock_all(dyn);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(region[1] == 100 + peer, "dynamic put: %ld", region[1]);
  MPI_Win_detach(dyn, region);
  MPI_Win_free(&dyn);
  free(region);

  MPI_Win_free(&win);
  CHECK(win == MPI_WIN_NULL, "free");
  if (rank == 0) printf("forward: ok\n");
  MPI_Finalize();
  return 0;
}
