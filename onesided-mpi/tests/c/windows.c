/* Every window flavor through the preloaded C ABI, 2 ranks: put, get, accumulate,
 * get_accumulate, fetch_and_op and compare_and_swap under fence, PSCW, lock and lock_all,
 * shared_query and dynamic attach. Exits non-zero on the first wrong value, and when the
 * window handles are not onesided's (the preload was not in effect). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static int rank, peer;

static void check_ours(MPI_Win win) {
  CHECK(onesided_window(win), "window win is not onesided's");
}

/* Transfers and atomics on `win`, whose memory at this rank is `mem` (8 longs); element 0
 * of rank r is at target displacement base[r], element i at base[r] + i * step. */
static void exercise(MPI_Win win, long *mem, const MPI_Aint base[2], MPI_Aint step) {
  for (int i = 0; i < 8; i++) mem[i] = 0;
  MPI_Barrier(MPI_COMM_WORLD);

  /* fence: put my rank + 10 into the peer's element 1, get it back after */
  long v = rank + 10, got = -1;
  MPI_Win_fence(MPI_MODE_NOPRECEDE, win);
  MPI_Put(&v, 1, MPI_LONG, peer, base[peer] + 1 * step, 1, MPI_LONG, win);
  MPI_Win_fence(0, win);
  CHECK(mem[1] == peer + 10, "fence put: %ld", mem[1]);
  MPI_Get(&got, 1, MPI_LONG, peer, base[peer] + 1 * step, 1, MPI_LONG, win);
  MPI_Win_fence(MPI_MODE_NOSUCCEED, win);
  CHECK(got == rank + 10, "fence get: %ld", got);

  /* PSCW: accumulate 5 twice into the peer's element 2 */
  MPI_Group world, pg;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  MPI_Group_incl(world, 1, &peer, &pg);
  MPI_Win_post(pg, 0, win);
  MPI_Win_start(pg, 0, win);
  long five = 5;
  MPI_Accumulate(&five, 1, MPI_LONG, peer, base[peer] + 2 * step, 1, MPI_LONG, MPI_SUM, win);
  MPI_Accumulate(&five, 1, MPI_LONG, peer, base[peer] + 2 * step, 1, MPI_LONG, MPI_SUM, win);
  MPI_Win_complete(win);
  MPI_Win_wait(win);
  CHECK(mem[2] == 10, "pscw accumulate: %ld", mem[2]);
  MPI_Group_free(&pg);
  MPI_Group_free(&world);

  /* lock_all: both ranks fetch-add 1 on rank 0's element 3, 100 times; then CAS */
  MPI_Win_lock_all(0, win);
  long one = 1, old;
  for (int i = 0; i < 100; i++) {
    MPI_Fetch_and_op(&one, &old, MPI_LONG, 0, base[0] + 3 * step, MPI_SUM, win);
    MPI_Win_flush(0, win);
  }
  MPI_Win_unlock_all(win);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) CHECK(mem[3] == 200, "fetch_and_op total: %ld", mem[3]);
  MPI_Barrier(MPI_COMM_WORLD);
  long mine = rank + 1, zero = 0, before = -1;
  MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
  MPI_Compare_and_swap(&mine, &zero, &before, MPI_LONG, 1, base[1] + 4 * step, win);
  MPI_Win_unlock(1, win);
  int won = before == 0, winners = 0;
  MPI_Allreduce(&won, &winners, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  CHECK(winners == 1, "compare_and_swap winners: %d", winners);

  /* get_accumulate with MPI_NO_OP reads atomically */
  long read = -1;
  MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
  MPI_Get_accumulate(NULL, 0, MPI_LONG, &read, 1, MPI_LONG, 0, base[0] + 3 * step, 1, MPI_LONG,
                     MPI_NO_OP, win);
  MPI_Win_unlock(0, win);
  CHECK(read == 200, "get_accumulate no_op: %ld", read);
  MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(size == 2, "run with 2 ranks");
  peer = 1 - rank;

  /* allocate, displacement unit 8 */
  long *a;
  MPI_Win win;
  MPI_Win_allocate(8 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &a, &win);
  check_ours(win);
  const MPI_Aint zeros[2] = {0, 0};
  exercise(win, a, zeros, 1);
  MPI_Win_set_name(win, "allocated");
  char name[MPI_MAX_OBJECT_NAME];
  int len;
  MPI_Win_get_name(win, name, &len);
  CHECK(strcmp(name, "allocated") == 0 && len == 9, "name %s", name);
  MPI_Win_free(&win);
  CHECK(win == MPI_WIN_NULL, "free leaves MPI_WIN_NULL");
  /* MPI-4.1: the null handle's name is its own (MPICH's winname test asks). */
  MPI_Win_get_name(MPI_WIN_NULL, name, &len);
  CHECK(strcmp(name, "MPI_WIN_NULL") == 0 && len == 12, "MPI_WIN_NULL's name %s", name);

  /* create over malloc'd memory, displacement unit 1 (bytes) */
  long *c = malloc(8 * sizeof(long));
  MPI_Win_create(c, 8 * sizeof(long), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
  check_ours(win);
  exercise(win, c, zeros, sizeof(long));
  MPI_Win_free(&win);
  free(c);

  /* create over MPI_Alloc_mem memory */
  long *m;
  MPI_Alloc_mem(8 * sizeof(long), MPI_INFO_NULL, &m);
  MPI_Win_create(m, 8 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
  exercise(win, m, zeros, 1);
  MPI_Win_free(&win);
  MPI_Free_mem(m);

  /* dynamic: displacements are addresses */
  long *d = malloc(8 * sizeof(long));
  MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win);
  check_ours(win);
  MPI_Win_attach(win, d, 8 * sizeof(long));
  MPI_Aint mine_addr, peer_addr;
  MPI_Get_address(d, &mine_addr);
  MPI_Sendrecv(&mine_addr, 1, MPI_AINT, peer, 0, &peer_addr, 1, MPI_AINT, peer, 0, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  MPI_Aint bases[2];
  bases[rank] = mine_addr;
  bases[peer] = peer_addr;
  exercise(win, d, bases, sizeof(long));
  MPI_Win_detach(win, d);
  MPI_Win_free(&win);
  free(d);

  /* allocate_shared: the peer's memory by load and store */
  int *s;
  MPI_Win_allocate_shared(4 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &s, &win);
  check_ours(win);
  s[0] = rank + 100;
  MPI_Win_fence(0, win);
  MPI_Aint qsize;
  int qunit;
  int *q;
  MPI_Win_shared_query(win, peer, &qsize, &qunit, &q);
  CHECK(qsize == 4 * sizeof(int) && qunit == sizeof(int), "shared_query %ld %d", (long)qsize, qunit);
  CHECK(q[0] == peer + 100, "shared load: %d", q[0]);
  MPI_Win_fence(0, win);
  MPI_Win_free(&win);

  if (rank == 0) printf("windows: ok\n");
  MPI_Finalize();
  return 0;
}
