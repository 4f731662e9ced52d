/* Window memory freed by the program before MPI_Win_free, as MPICH's test utilities do
 * (MTestFreeWin frees a window's malloc'd buffer, then frees the window): the library must
 * neither crash nor print, and must not write over memory the program got since at the
 * same addresses. Under the preload, `create` windows move their pages into shared memory
 * in place and move them back at MPI_Win_free — pages the program no longer owns must be
 * left alone. Three shapes: a large buffer (its own mapping, unmapped by free and mapped
 * again by the next malloc of that size), a small buffer at the top of the heap (the heap
 * trimmed under it), and a buffer still owned (moved back with its contents). */
#include <malloc.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"

static int rank, nprocs;

/* A window over `buf` (`len` bytes) that every process writes into once, at its rank's byte. */
static MPI_Win window_over(unsigned char *buf, size_t len) {
  MPI_Win win;
  MPI_Win_create(buf, (MPI_Aint)len, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
  MPI_Win_fence(0, win);
  unsigned char mark = (unsigned char)(0x40 + rank);
  if (len > 0) MPI_Put(&mark, 1, MPI_BYTE, (rank + 1) % nprocs, rank, 1, MPI_BYTE, win);
  MPI_Win_fence(0, win);
  return win;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
  int from = (rank + nprocs - 1) % nprocs;

  /* 1. A buffer of its own mapping, freed first; the next one of its size reuses the
   * addresses (glibc maps large blocks apart; usually the same range comes back). */
  size_t big = 4 << 20;
  unsigned char *a = malloc(big);
  memset(a, 0x11, big);
  MPI_Win win = window_over(a, big);
  CHECK(a[from] == 0x40 + from, "the put into the large buffer did not land");
  uintptr_t a_addr = (uintptr_t)a;
  free(a);
  unsigned char *b = malloc(big);
  memset(b, 0x22, big);
  MPI_Win_free(&win);
  for (size_t i = 0; i < big; i++)
    CHECK(b[i] == 0x22, "byte %zu of memory allocated after the window's was freed is %#x "
                        "after MPI_Win_free (%s range)", i, b[i], a_addr == (uintptr_t)b ? "same" : "another");
  free(b);

  /* 1b. The program's own mapping, unmapped, and a smaller one made inside its range
   * before MPI_Win_free (deterministic: 1 depends on where glibc maps): the range is now
   * part hole, part the program's new memory. */
  unsigned char *m = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(m != MAP_FAILED, "mmap");
  memset(m, 0x11, big);
  win = window_over(m, big);
  munmap(m, big);
  size_t part = big / 4;
  unsigned char *inside = mmap(m + part, part, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  CHECK(inside == m + part, "mmap inside the freed range");
  memset(inside, 0x22, part);
  MPI_Win_free(&win);
  for (size_t i = 0; i < part; i++)
    CHECK(inside[i] == 0x22, "byte %zu of a mapping made at a freed window's addresses is %#x "
                             "after MPI_Win_free", i, inside[i]);
  munmap(inside, part);

  /* 2. A small buffer at the top of the heap, freed first with trimming on every free: the
   * heap shrinks under the window's pages. */
  mallopt(M_TRIM_THRESHOLD, 0);
  mallopt(M_TOP_PAD, 0);
  unsigned char *small = malloc(64 * (rank + 1));
  memset(small, 0x33, 64 * (rank + 1));
  win = window_over(small, 64 * (rank + 1));
  free(small);
  malloc_trim(0);
  MPI_Win_free(&win);
  unsigned char *again = malloc(64 * 1024);
  memset(again, 0x44, 64 * 1024);
  for (size_t i = 0; i < 64 * 1024; i++) CHECK(again[i] == 0x44, "heap byte %zu changed", i);
  free(again);

  /* 3. Still owned at MPI_Win_free: its contents stay, the put included. */
  unsigned char *kept = malloc(big);
  memset(kept, 0x55, big);
  win = window_over(kept, big);
  MPI_Win_free(&win);
  for (size_t i = 0; i < big; i++) {
    unsigned char want = i == (size_t)from ? 0x40 + from : 0x55;
    CHECK(kept[i] == want, "byte %zu of a window's memory is %#x after MPI_Win_free", i, kept[i]);
  }
  free(kept);

  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("freed_first: ok\n");
  MPI_Finalize();
  return 0;
}
