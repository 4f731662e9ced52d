/* The pointer of the MPI-3 distributed linked list, as every RMA course writes it: a 16-byte
 * {rank, displacement} pair in a dynamic window, replaced whole with MPI_Accumulate(MPI_BYTE,
 * MPI_REPLACE) and read whole with MPI_Get_accumulate(MPI_NO_OP), then followed with MPI_Get.
 * Every rank writes pointers to its own attached memory into rank 0's slot and follows what
 * it reads; a torn read (one rank's half with another's) would point at memory the named rank
 * never attached. MPI promises atomicity per byte here; MPICH and Open MPI give the whole
 * operation, and so must we for such programs to run. */
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define ROUNDS 5000
#define ELEMS 64

struct pointer {
  int rank;
  MPI_Aint disp;
};

/* A list element as the example lays it out: the pointer 8 bytes in, not 16-byte aligned. */
struct element {
  int value;
  struct pointer next;
};

static int rank, nprocs;

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
  MPI_Win win;
  MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win);
  CHECK(onesided_window(win), "the dynamic window is not onesided's");
  int *values;
  struct element *head;
  MPI_Alloc_mem(ELEMS * sizeof(int), MPI_INFO_NULL, &values);
  MPI_Alloc_mem(sizeof(struct element), MPI_INFO_NULL, &head);
  for (int i = 0; i < ELEMS; i++) values[i] = 1000 * rank + i;
  head->value = -1;
  head->next.rank = rank;
  MPI_Get_address(&values[0], &head->next.disp);
  MPI_Win_attach(win, values, ELEMS * sizeof(int));
  MPI_Win_attach(win, head, sizeof *head);
  MPI_Aint mine, slot, *bases = malloc(nprocs * sizeof(MPI_Aint));
  MPI_Get_address(values, &mine);
  MPI_Allgather(&mine, 1, MPI_AINT, bases, 1, MPI_AINT, MPI_COMM_WORLD);
  MPI_Get_address(&head->next, &slot);
  MPI_Bcast(&slot, 1, MPI_AINT, 0, MPI_COMM_WORLD);

  MPI_Win_lock_all(0, win);
  for (int round = 0; round < ROUNDS; round++) {
    struct pointer to = {rank, bases[rank] + (MPI_Aint)((round % ELEMS) * sizeof(int))}, seen;
    MPI_Accumulate(&to, sizeof to, MPI_BYTE, 0, slot, sizeof to, MPI_BYTE, MPI_REPLACE, win);
    MPI_Win_flush(0, win);
    MPI_Get_accumulate(NULL, 0, MPI_DATATYPE_NULL, &seen, sizeof seen, MPI_BYTE, 0, slot,
                       sizeof seen, MPI_BYTE, MPI_NO_OP, win);
    MPI_Win_flush(0, win);
    CHECK(seen.rank >= 0 && seen.rank < nprocs, "round %d: a pointer to rank %d", round,
          seen.rank);
    MPI_Aint index = (seen.disp - bases[seen.rank]) / (MPI_Aint)sizeof(int);
    CHECK(index >= 0 && index < ELEMS,
          "round %d: a torn pointer: rank %d, displacement %ld outside its memory", round,
          seen.rank, (long)seen.disp);
    int value = -1;
    MPI_Get(&value, 1, MPI_INT, seen.rank, seen.disp, 1, MPI_INT, win);
    MPI_Win_flush(seen.rank, win);
    CHECK(value == 1000 * seen.rank + (int)index, "round %d: followed to %d, not %d", round,
          value, 1000 * seen.rank + (int)index);
  }
  MPI_Win_unlock_all(win);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Win_detach(win, head);
  MPI_Win_detach(win, values);
  MPI_Win_free(&win);
  MPI_Free_mem(head);
  MPI_Free_mem(values);
  free(bases);
  if (rank == 0) printf("pointer_swap: %d rounds on %d ranks: ok\n", ROUNDS, nprocs);
  MPI_Finalize();
  return 0;
}
