/* Valid calls at the edges of the RMA chapter, on every window flavor and epoch kind (2
 * ranks), under the default handler (MPI_ERRORS_ARE_FATAL: a refused call ends the job):
 *   - MPI_PROC_NULL as target of every communication call is a no-op that succeeds, in every
 *     epoch or none (MPI-4.1 §12.3; MPICH does not ask for an epoch); the R-forms return a
 *     completed request; lock, unlock, flush and flush_local of MPI_PROC_NULL succeed (as
 *     MPICH); MPI_Win_shared_query(MPI_PROC_NULL) gives the lowest non-empty segment;
 *   - zero-size operations (count 0, or a derived type of size 0, with NULL buffers and types
 *     that would not match) succeed and change nothing;
 *   - MPI_BYTE in compare-and-swap and in accumulates (bitwise ops, replace, no-op, and sum as
 *     MPICH: a signed char);
 *   - an info hint that differs between ranks (mpi_accumulate_granularity) creates windows;
 * then, under MPI_ERRORS_RETURN, the error classes MPICH gives — with nothing printed. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static int rank;

enum { N = 16 }; /* ints per window */

/* Every communication call with MPI_PROC_NULL as target, and the zero-size forms of every
 * call towards `peer` (NULL buffers, mismatched types); `in_passive` adds the R-forms. */
static void edge_ops(MPI_Win win, int peer, int in_passive, MPI_Datatype empty) {
  int x[N], y[N], z[N];
  for (int i = 0; i < N; i++) x[i] = 1000 + i, y[i] = -1, z[i] = -2;
  const int P = MPI_PROC_NULL;
  MPI_Put(x, N, MPI_INT, P, 0, N, MPI_INT, win);
  MPI_Put(x, 1, MPI_INT, P, 0, 1, MPI_DOUBLE, win); /* types not even matching */
  MPI_Get(y, N, MPI_INT, P, 0, N, MPI_INT, win);
  MPI_Accumulate(x, N, MPI_INT, P, 0, N, MPI_INT, MPI_SUM, win);
  MPI_Accumulate(x, 1, MPI_INT, P, 0, 1, MPI_DOUBLE, MPI_SUM, win);
  MPI_Get_accumulate(x, N, MPI_INT, y, N, MPI_INT, P, 0, N, MPI_INT, MPI_SUM, win);
  MPI_Fetch_and_op(x, y, MPI_INT, P, 0, MPI_SUM, win);
  MPI_Compare_and_swap(x, z, y, MPI_INT, P, 0, win);
  for (int i = 0; i < N; i++) CHECK(y[i] == -1, "MPI_PROC_NULL wrote the result buffer");
  if (in_passive) {
    MPI_Request r[4];
    MPI_Rput(x, N, MPI_INT, P, 0, N, MPI_INT, win, &r[0]);
    MPI_Rget(y, N, MPI_INT, P, 0, N, MPI_INT, win, &r[1]);
    MPI_Raccumulate(x, N, MPI_INT, P, 0, N, MPI_INT, MPI_SUM, win, &r[2]);
    MPI_Rget_accumulate(x, N, MPI_INT, y, N, MPI_INT, P, 0, N, MPI_INT, MPI_SUM, win, &r[3]);
    for (int i = 0; i < 4; i++) {
      int done = 0;
      MPI_Test(&r[i], &done, MPI_STATUS_IGNORE);
      CHECK(done, "request %d of MPI_PROC_NULL is not complete at once", i);
    }
  }
  MPI_Win_flush(P, win);
  MPI_Win_flush_local(P, win);

  /* Zero-size: counts of 0 on any side, a derived type of size 0, NULL buffers. */
  MPI_Put(NULL, 0, MPI_INT, peer, 0, 0, MPI_DOUBLE, win);
  MPI_Put(x, 0, MPI_INT, peer, 0, 3, MPI_INT, win);
  MPI_Put(x, 2, empty, peer, 0, 1, MPI_DOUBLE, win);
  MPI_Get(NULL, 0, MPI_DOUBLE, peer, 0, 0, MPI_INT, win);
  MPI_Accumulate(NULL, 0, MPI_INT, peer, 0, 0, MPI_DOUBLE, MPI_SUM, win);
  MPI_Accumulate(x, 1, empty, peer, 0, 1, MPI_DOUBLE, MPI_SUM, win);
  MPI_Get_accumulate(NULL, 0, MPI_INT, NULL, 0, MPI_SHORT, peer, 0, 0, MPI_DOUBLE, MPI_SUM, win);
  MPI_Get_accumulate(NULL, 7, MPI_INT, NULL, 0, MPI_INT, peer, 0, 0, MPI_INT, MPI_NO_OP, win);
  if (in_passive) {
    MPI_Request r[4];
    MPI_Rput(NULL, 0, MPI_INT, peer, 0, 0, MPI_DOUBLE, win, &r[0]);
    MPI_Rget(NULL, 0, MPI_INT, peer, 0, 0, MPI_INT, win, &r[1]);
    MPI_Raccumulate(NULL, 0, MPI_INT, peer, 0, 0, MPI_DOUBLE, MPI_SUM, win, &r[2]);
    /* A dangling, unaligned result pointer: nothing may look at it. */
    MPI_Rget_accumulate(NULL, 0, MPI_INT, (char *)y + 1, 0, MPI_INT, peer, 0, 0, MPI_DOUBLE,
                        MPI_SUM, win, &r[3]);
    for (int i = 0; i < 4; i++) MPI_Wait(&r[i], MPI_STATUS_IGNORE);
  }
}

/* The window of rank `owner` still holds its initial values (owner*100 + i). */
static void unchanged(const int *mine, const char *where) {
  for (int i = 0; i < N; i++)
    CHECK(mine[i] == rank * 100 + i, "%s: word %d is %d, not %d", where, i, mine[i],
          rank * 100 + i);
}

/* Runs edge_ops in every epoch kind on `win`, whose local memory is `mine`. */
static void every_epoch(MPI_Win win, int *mine, const char *flavor) {
  int peer = 1 - rank;
  MPI_Datatype empty;
  MPI_Type_contiguous(0, MPI_INT, &empty);
  MPI_Type_commit(&empty);
  MPI_Group world, other;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  MPI_Group_incl(world, 1, &peer, &other);

  MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win);
  for (int i = 0; i < N; i++) mine[i] = rank * 100 + i;
  MPI_Win_unlock(rank, win);
  MPI_Barrier(MPI_COMM_WORLD);

  /* No epoch: MPI_PROC_NULL still succeeds (MPICH asks for none). */
  int x = 5, y = 0, z = 0;
  MPI_Put(&x, 1, MPI_INT, MPI_PROC_NULL, 0, 1, MPI_INT, win);
  MPI_Get(&y, 1, MPI_INT, MPI_PROC_NULL, 0, 1, MPI_INT, win);
  MPI_Fetch_and_op(&x, &y, MPI_INT, MPI_PROC_NULL, 0, MPI_SUM, win);
  MPI_Compare_and_swap(&x, &z, &y, MPI_INT, MPI_PROC_NULL, 0, win);
  MPI_Win_lock(MPI_LOCK_EXCLUSIVE, MPI_PROC_NULL, 0, win);
  MPI_Win_unlock(MPI_PROC_NULL, win);

  MPI_Win_fence(0, win);
  edge_ops(win, peer, 0, empty);
  MPI_Win_fence(0, win);

  MPI_Win_post(other, 0, win);
  MPI_Win_start(other, 0, win);
  edge_ops(win, peer, 0, empty);
  MPI_Win_complete(win);
  MPI_Win_wait(win);

  MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, win);
  edge_ops(win, peer, 1, empty);
  MPI_Win_unlock(peer, win);

  MPI_Win_lock_all(0, win);
  edge_ops(win, peer, 1, empty);
  MPI_Win_unlock_all(win);

  MPI_Barrier(MPI_COMM_WORLD);
  unchanged(mine, flavor);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Group_free(&other);
  MPI_Group_free(&world);
  MPI_Type_free(&empty);
}

/* MPI_BYTE in compare-and-swap and the accumulate family. */
static void byte_ops(void) {
  unsigned char *b;
  MPI_Win win;
  MPI_Win_allocate(16, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &b, &win);
  memset(b, 0x0f, 16);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    unsigned char v[2] = {0xf3, 0x30}, old = 0, cmp = 0x0f, res[2] = {0, 0};
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
    MPI_Compare_and_swap(v, &cmp, &old, MPI_BYTE, 0, 0, win);
    MPI_Win_flush(0, win);
    CHECK(old == 0x0f, "cas on MPI_BYTE fetched %#x", old);
    MPI_Accumulate(v, 2, MPI_BYTE, 0, 2, 2, MPI_BYTE, MPI_BXOR, win);
    MPI_Accumulate(v, 2, MPI_BYTE, 0, 4, 2, MPI_BYTE, MPI_BAND, win);
    MPI_Accumulate(v, 2, MPI_BYTE, 0, 6, 2, MPI_BYTE, MPI_BOR, win);
    MPI_Accumulate(v, 2, MPI_BYTE, 0, 8, 2, MPI_BYTE, MPI_REPLACE, win);
    MPI_Accumulate(v, 2, MPI_BYTE, 0, 10, 2, MPI_BYTE, MPI_SUM, win);
    MPI_Get_accumulate(NULL, 0, MPI_BYTE, res, 2, MPI_BYTE, 0, 12, 2, MPI_BYTE, MPI_NO_OP, win);
    MPI_Fetch_and_op(v, &old, MPI_BYTE, 0, 14, MPI_BXOR, win);
    MPI_Win_unlock(0, win);
    CHECK(res[0] == 0x0f && res[1] == 0x0f, "no_op on MPI_BYTE fetched %#x %#x", res[0], res[1]);
    CHECK(old == 0x0f, "fetch_and_op on MPI_BYTE fetched %#x", old);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    unsigned char want[16] = {0xf3, 0x0f, 0xfc, 0x3f, 0x03, 0x00, 0xff, 0x3f,
                              0xf3, 0x30, 0x02, 0x3f, 0x0f, 0x0f, 0xfc, 0x0f};
    for (int i = 0; i < 16; i++)
      CHECK(b[i] == want[i], "MPI_BYTE byte %d is %#x, not %#x", i, b[i], want[i]);
  }
  MPI_Win_free(&win);
}

static void expect(int rc, int want, const char *what) {
  int cls = MPI_SUCCESS;
  if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
  CHECK(cls == want, "%s: class %d, expected %d", what, cls, want);
}

/* The error classes MPICH gives, under MPI_ERRORS_RETURN, with stderr captured: nothing may
 * be printed for an error the program asked to have returned. */
static void error_classes(void) {
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  char path[] = "/tmp/onesided-edge-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  unlink(path);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);

  int peer = 1 - rank, *base, v = 1, r = 0, c = 0;
  double d = 1, dr;
  MPI_Win win, bad;
  MPI_Win_allocate(N * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
  MPI_Win_lock_all(0, win);
  expect(MPI_Put(&v, -1, MPI_INT, peer, 0, -1, MPI_INT, win), MPI_ERR_COUNT, "count -1");
  expect(MPI_Get(&v, 1, MPI_INT, peer, 0, -3, MPI_INT, win), MPI_ERR_COUNT, "target count -3");
  expect(MPI_Put(&v, 1, MPI_INT, peer, -1, 1, MPI_INT, win), MPI_ERR_DISP, "disp -1");
  expect(MPI_Put(&v, 0, MPI_INT, peer, -1, 0, MPI_INT, win), MPI_ERR_DISP, "disp -1, size 0");
  expect(MPI_Put(&v, 1, MPI_INT, MPI_PROC_NULL, -1, 1, MPI_INT, win), MPI_ERR_DISP,
         "disp -1 to MPI_PROC_NULL");
  expect(MPI_Compare_and_swap(&d, &d, &dr, MPI_DOUBLE, peer, 0, win), MPI_ERR_TYPE,
         "compare_and_swap on MPI_DOUBLE");
  expect(MPI_Compare_and_swap(&v, &c, &r, MPI_INT, peer, -2, win), MPI_ERR_DISP,
         "compare_and_swap at disp -2");
  expect(MPI_Put(&v, 0, MPI_INT, 5, 0, 0, MPI_INT, win), MPI_ERR_RANK, "zero-size to rank 5");
  MPI_Win_unlock_all(win);
  expect(MPI_Put(&v, 0, MPI_INT, peer, 0, 0, MPI_INT, win), MPI_ERR_RMA_SYNC,
         "zero-size outside an epoch");
  MPI_Win_free(&win);
  void *p;
  expect(MPI_Win_allocate(-1, 4, MPI_INFO_NULL, MPI_COMM_WORLD, &p, &bad), MPI_ERR_SIZE,
         "size -1");
  expect(MPI_Win_allocate(8, 0, MPI_INFO_NULL, MPI_COMM_WORLD, &p, &bad), MPI_ERR_DISP,
         "disp_unit 0");
  expect(MPI_Win_create(&v, sizeof v, -4, MPI_INFO_NULL, MPI_COMM_WORLD, &bad), MPI_ERR_DISP,
         "disp_unit -4");
  expect(MPI_Win_create(&v, sizeof v, 1, MPI_INFO_NULL, MPI_COMM_NULL, &bad), MPI_ERR_COMM,
         "MPI_COMM_NULL");

  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char text[512] = {0};
  ssize_t n = pread(fd, text, sizeof text - 1, 0);
  close(fd);
  CHECK(n <= 0, "errors returned to the program were also printed: %s", text);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

/* Hints are never fatal: a granularity each rank sets from its own size (as a library does
 * for an irregular allocation) creates every flavor, with the largest in effect. */
static void differing_hints(void) {
  MPI_Info info;
  MPI_Info_create(&info);
  char value[32];
  snprintf(value, sizeof value, "%d", rank == 0 ? 1048576 : 64);
  MPI_Info_set(info, "mpi_accumulate_granularity", value);
  int *base, mem[N];
  MPI_Win wins[4];
  MPI_Win_allocate(N * sizeof(int), sizeof(int), info, MPI_COMM_WORLD, &base, &wins[0]);
  MPI_Win_create(mem, sizeof mem, sizeof(int), info, MPI_COMM_WORLD, &wins[1]);
  MPI_Win_create_dynamic(info, MPI_COMM_WORLD, &wins[2]);
  MPI_Win_allocate_shared(N * sizeof(int), sizeof(int), info, MPI_COMM_WORLD, &base, &wins[3]);
  for (int i = 0; i < 4; i++) {
    MPI_Info got;
    int flag = 0;
    char v[32] = {0};
    MPI_Win_get_info(wins[i], &got);
    MPI_Info_get(got, "mpi_accumulate_granularity", sizeof v - 1, v, &flag);
    CHECK(flag && strcmp(v, "1048576") == 0, "window %d: granularity %s in effect", i, v);
    MPI_Info_free(&got);
    MPI_Win_free(&wins[i]);
  }
  MPI_Info_free(&info);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int *base;
  MPI_Win win;

  MPI_Win_allocate(N * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  CHECK(onesided_window(win), "window win is not onesided's");
  every_epoch(win, base, "allocate");
  MPI_Win_free(&win);

  int *mem = malloc(N * sizeof(int));
  MPI_Win_create(mem, N * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
  every_epoch(win, mem, "create");
  MPI_Win_free(&win);

  /* Dynamic: the attached region's address, as a displacement, is where zero-size ops go. */
  MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win);
  MPI_Win_attach(win, mem, N * sizeof(int));
  every_epoch(win, mem, "dynamic");
  MPI_Win_detach(win, mem);
  MPI_Win_free(&win);
  free(mem);

  /* Shared: rank 0's segment is empty, so MPI_PROC_NULL's query answers rank 1's. */
  MPI_Aint size = rank == 0 ? 0 : N * sizeof(int);
  MPI_Win_allocate_shared(size, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  MPI_Aint qsize;
  int qunit;
  int *qbase, *one;
  MPI_Win_shared_query(win, MPI_PROC_NULL, &qsize, &qunit, &qbase);
  MPI_Win_shared_query(win, 1, &qsize, &qunit, &one);
  CHECK(qbase == one && qsize == N * (MPI_Aint)sizeof(int) && qunit == sizeof(int),
        "shared_query(MPI_PROC_NULL) is not rank 1's segment");
  MPI_Win_free(&win);
  /* ... and with alloc_shared_noncontig, rank 0's empty segment has no address (NULL, as
     MPICH answers). */
  MPI_Info noncontig;
  MPI_Info_create(&noncontig);
  MPI_Info_set(noncontig, "alloc_shared_noncontig", "true");
  MPI_Win_allocate_shared(size, sizeof(int), noncontig, MPI_COMM_WORLD, &base, &win);
  MPI_Info_free(&noncontig);
  int *zero = base;
  MPI_Win_shared_query(win, 0, &qsize, &qunit, &zero);
  CHECK(zero == NULL && qsize == 0, "noncontig: rank 0's empty segment at %p", (void *)zero);
  MPI_Win_shared_query(win, 1, &qsize, &qunit, &one);
  CHECK(one != NULL && qsize == N * (MPI_Aint)sizeof(int), "noncontig: rank 1's segment");
  MPI_Win_free(&win);
  MPI_Win_allocate_shared(N * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &base,
                          &win);
  every_epoch(win, base, "shared");
  MPI_Win_free(&win);

  byte_ops();
  differing_hints();
  error_classes();
  if (rank == 0) printf("edge calls: ok\n");
  MPI_Finalize();
  return 0;
}
