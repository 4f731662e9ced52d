/* Window memory the program has not touched yet. Under the preload a `create` window's pages
 * move into shared memory in place and back at MPI_Win_free; pages never written are not
 * copied either way (they read as zero) — unless the memory is a file's private copy, where
 * an untouched page reads the file. Each case checks what peers read and write and what the
 * owner finds after the free, every byte:
 *   1. 64 MiB from malloc (a mapping of its own), a few pages written, one only read, the
 *      rest untouched; peers put into untouched pages and get from all three kinds;
 *   2. an initialized static array (the program's data segment, a private copy of the
 *      executable's pages) whose pages the program never touched before the window;
 *   3. small malloc blocks, whose pages hold the heap's own bookkeeping: the library must
 *      not malloc or free between copying such a page and mapping it (its own write to the
 *      heap would be lost — mpich's winname aborted in malloc under Open MPI 5.0.11). */
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

#define DATA_PAGES 16
/* Initialized: in .data, backed by the executable's file until written. */
static unsigned char data_pages[DATA_PAGES * 4096] __attribute__((aligned(4096))) = {
    [0] = 1, [5 * 4096] = 5, [9 * 4096 + 3] = 9, [DATA_PAGES * 4096 - 1] = 15};

static int rank, nprocs;

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  int to = (rank + 1) % nprocs, from = (rank + nprocs - 1) % nprocs;

  /* 1. Mostly untouched heap memory. Page 3 and pages 40..41 written, page 7 read. */
  size_t len = (size_t)64 << 20, pages = len / page;
  unsigned char *mem = malloc(len);
  CHECK(mem != NULL, "malloc");
  unsigned char *base = (unsigned char *)(((uintptr_t)mem + page - 1) & ~(uintptr_t)(page - 1));
  base[3 * page + 5] = 0xa5;
  memset(base + 40 * page, 0x5a, 2 * page);
  CHECK(*(volatile unsigned char *)(base + 7 * page) == 0, "fresh memory is not zero");
  MPI_Win win;
  MPI_Win_create(mem, (MPI_Aint)len, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
  CHECK(onesided_window(win), "the window is not onesided's");
  MPI_Aint off = base - mem;
  MPI_Win_fence(0, win);
  /* Each rank writes its mark into the next rank's untouched page 100 + rank and the last
   * page, and reads a written, a read-only and an untouched page of it. */
  unsigned char mark = (unsigned char)(0x40 + rank), got[4] = {0xff, 0xff, 0xff, 0xff};
  MPI_Put(&mark, 1, MPI_BYTE, to, off + (MPI_Aint)((100 + rank) * page + 1), 1, MPI_BYTE, win);
  MPI_Put(&mark, 1, MPI_BYTE, to, off + (MPI_Aint)((pages - 2) * page), 1, MPI_BYTE, win);
  MPI_Get(&got[0], 1, MPI_BYTE, to, off + (MPI_Aint)(3 * page + 5), 1, MPI_BYTE, win);
  MPI_Get(&got[1], 1, MPI_BYTE, to, off + (MPI_Aint)(41 * page + 9), 1, MPI_BYTE, win);
  MPI_Get(&got[2], 1, MPI_BYTE, to, off + (MPI_Aint)(7 * page), 1, MPI_BYTE, win);
  MPI_Get(&got[3], 1, MPI_BYTE, to, off + (MPI_Aint)(1000 * page + 17), 1, MPI_BYTE, win);
  MPI_Win_fence(0, win);
  CHECK(got[0] == 0xa5 && got[1] == 0x5a && got[2] == 0 && got[3] == 0,
        "read %#x %#x %#x %#x from a peer's written, read and untouched pages", got[0], got[1],
        got[2], got[3]);
  /* The owner writes an untouched page while the window lives. */
  base[2000 * page + 2] = 0x77;
  MPI_Win_free(&win);
  for (size_t i = 0; i < pages - 1; i++) {
    size_t at = i * page;
    for (size_t b = 0; b < page; b++) {
      unsigned char want = 0;
      if (at + b == 3 * page + 5) want = 0xa5;
      else if (i == 40 || i == 41) want = 0x5a;
      else if (at + b == (100 + (size_t)from) * page + 1) want = (unsigned char)(0x40 + from);
      else if (at + b == (pages - 2) * page) want = (unsigned char)(0x40 + from);
      else if (at + b == 2000 * page + 2) want = 0x77;
      CHECK(base[at + b] == want, "byte %zu of page %zu is %#x after MPI_Win_free, not %#x", b,
            i, base[at + b], want);
    }
  }
  free(mem);

  /* 2. The data segment, untouched pages of it read the executable's bytes. */
  MPI_Win_create(data_pages, sizeof data_pages, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
  MPI_Win_fence(0, win);
  unsigned char seen[3] = {0};
  MPI_Get(&seen[0], 1, MPI_BYTE, to, 5 * 4096, 1, MPI_BYTE, win);
  MPI_Get(&seen[1], 1, MPI_BYTE, to, 9 * 4096 + 3, 1, MPI_BYTE, win);
  MPI_Put(&mark, 1, MPI_BYTE, to, 12 * 4096 + 7, 1, MPI_BYTE, win);
  MPI_Win_fence(0, win);
  MPI_Get(&seen[2], 1, MPI_BYTE, to, DATA_PAGES * 4096 - 1, 1, MPI_BYTE, win);
  MPI_Win_fence(0, win);
  CHECK(seen[0] == 5 && seen[1] == 9 && seen[2] == 15,
        "read %d %d %d from a peer's initialized static array, not 5 9 15", seen[0], seen[1],
        seen[2]);
  MPI_Win_free(&win);
  for (size_t i = 0; i < sizeof data_pages; i++) {
    unsigned char want = 0;
    if (i == 0) want = 1;
    else if (i == 5 * 4096) want = 5;
    else if (i == 9 * 4096 + 3) want = 9;
    else if (i == DATA_PAGES * 4096 - 1) want = 15;
    else if (i == 12 * 4096 + 7) want = (unsigned char)(0x40 + from);
    CHECK(data_pages[i] == want, "byte %zu of the static array is %d after MPI_Win_free, not %d",
          i, data_pages[i], want);
  }

  /* 3. Windows over small heap blocks, freed before and after the window, many times, with
   * the program allocating between them; glibc checks its lists on every call. */
  for (int round = 0; round < 200; round++) {
    size_t n = 16 + (size_t)(round % 7) * 24;
    unsigned char *small = malloc(n), *other = malloc(1 + round % 97);
    memset(small, round & 0xff, n);
    MPI_Win_create(small, (MPI_Aint)n, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Win_fence(0, win);
    MPI_Put(&mark, 1, MPI_BYTE, to, 0, 1, MPI_BYTE, win);
    MPI_Win_fence(0, win);
    CHECK(small[0] == 0x40 + from && (n < 2 || small[n - 1] == (round & 0xff)),
          "round %d: a small heap window holds %#x %#x", round, small[0], small[n - 1]);
    free(other);
    if (round % 2) free(small);
    MPI_Win_free(&win);
    if (round % 2 == 0) free(small);
    void *churn[8];
    for (int k = 0; k < 8; k++) churn[k] = malloc(8 + 8 * (size_t)k);
    for (int k = 7; k >= 0; k--) free(churn[k]);
  }

  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("untouched: ok\n");
  MPI_Finalize();
  return 0;
}
