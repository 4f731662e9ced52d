/* Operations that span several attached regions of a dynamic window (the regions adjacent in
 * the target's memory, as in MPICH's win_dynamic_rma_flush_get test): put, accumulate and
 * get_accumulate of counts below, at and across the boundary between two regions, checked
 * with a get, for memory of three kinds — a static array, one malloc'd block and one
 * MPI_Alloc_mem block, each attached as two halves (and a static array as three thirds). */
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define HALF 8192
static int static_mem[2 * HALF];
static int static_thirds[3 * 1000];

static int rank, nprocs;

/* Runs every operation kind over `count` ints at the start of `parts` adjacent regions of
 * `len` ints each at `mem` in every process. */
static void exercise(int *mem, int parts, int len, const char *what) {
  MPI_Win win;
  MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win);
  for (int p = 0; p < parts; p++) MPI_Win_attach(win, mem + p * len, (MPI_Aint)len * sizeof(int));
  MPI_Aint mine, *bases = malloc(nprocs * sizeof(MPI_Aint));
  MPI_Get_address(mem, &mine);
  MPI_Allgather(&mine, 1, MPI_AINT, bases, 1, MPI_AINT, MPI_COMM_WORLD);
  int total = parts * len;
  int *local = malloc(total * sizeof(int)), *result = malloc(total * sizeof(int)),
      *check = malloc(total * sizeof(int));
  int counts[] = {1, len - 1, len, len + 1, len + len / 8, total - 1, total};
  int dst = (rank + 1) % nprocs;
  for (int c = 0; c < (int)(sizeof counts / sizeof counts[0]); c++) {
    int count = counts[c];
    for (int op = 0; op < 3; op++) {
      MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win);
      memset(mem, 0, total * sizeof(int));
      MPI_Win_unlock(rank, win);
      MPI_Barrier(MPI_COMM_WORLD);
      int x = 1000 * c + 100 * op + rank;
      for (int i = 0; i < count; i++) local[i] = x + i;
      MPI_Win_lock(MPI_LOCK_SHARED, dst, 0, win);
      if (op == 0)
        MPI_Put(local, count, MPI_INT, dst, bases[dst], count, MPI_INT, win);
      else if (op == 1)
        MPI_Accumulate(local, count, MPI_INT, dst, bases[dst], count, MPI_INT, MPI_SUM, win);
      else
        MPI_Get_accumulate(local, count, MPI_INT, result, count, MPI_INT, dst, bases[dst], count,
                           MPI_INT, MPI_REPLACE, win);
      MPI_Win_flush(dst, win);
      memset(check, 0xff, total * sizeof(int));
      MPI_Get(check, total, MPI_INT, dst, bases[dst], total, MPI_INT, win);
      MPI_Win_unlock(dst, win);
      for (int i = 0; i < total; i++) {
        int want = i < count ? x + i : 0;
        CHECK(check[i] == want, "%s, op %d, count %d: element %d is %d, not %d", what, op, count,
              i, check[i], want);
        if (op == 2 && i < count)
          CHECK(result[i] == 0, "%s: get_accumulate fetched %d at %d, not 0", what, result[i], i);
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
  for (int p = 0; p < parts; p++) MPI_Win_detach(win, mem + p * len);
  MPI_Win_free(&win);
  free(local);
  free(result);
  free(check);
  free(bases);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
  exercise(static_mem, 2, HALF, "static array, halves");
  exercise(static_thirds, 3, 1000, "static array, thirds");
  int *heap = malloc(2 * HALF * sizeof(int));
  exercise(heap, 2, HALF, "malloc'd block, halves");
  free(heap);
  int *alloc;
  MPI_Alloc_mem(2 * HALF * sizeof(int), MPI_INFO_NULL, &alloc);
  exercise(alloc, 2, HALF, "MPI_Alloc_mem block, halves");
  MPI_Free_mem(alloc);
  if (rank == 0) printf("dynamic_regions: ok\n");
  MPI_Finalize();
  return 0;
}
