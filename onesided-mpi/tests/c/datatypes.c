/* Derived datatypes through the preloaded C ABI (2 ranks), checked against MPICH's own
 * MPI_Pack/MPI_Unpack: for 300 random types — vector, hvector (negative strides too),
 * indexed (unsorted), hindexed, indexed_block, struct, resized, subarray (C and Fortran
 * order), dup, nested — an MPI_Put of one instance to a contiguous target must leave
 * exactly the packed bytes there, and an MPI_Get from a contiguous target must fill the
 * origin as MPI_Unpack does; accumulates on derived types of one basic type add element by
 * element. Exits non-zero on the first difference. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

static int rank;
static unsigned seed = 12345;
static int rnd(int n) { seed = seed * 1103515245u + 12345u; return (int)((seed >> 8) % (unsigned)n); }

static void fail(const char *what, int trial) {
  fprintf(stderr, "rank %d: trial %d: %s\n", rank, trial, what);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

/* A random datatype of depth <= depth over basic type `basic`. */
static MPI_Datatype make(int depth, MPI_Datatype basic) {
  MPI_Datatype child = basic, t;
  if (depth > 0 && rnd(3) > 0) child = make(depth - 1, basic);
  MPI_Aint lb, ext;
  MPI_Type_get_extent(child, &lb, &ext);
  int kind = rnd(11);
  int count = 1 + rnd(4), bl = 1 + rnd(3);
  int blens[4], disps[4];
  MPI_Aint adisps[4];
  switch (kind) {
  case 0: MPI_Type_contiguous(count, child, &t); break;
  case 1: MPI_Type_vector(count, bl, bl + rnd(3), child, &t); break;
  case 2: MPI_Type_create_hvector(count, bl, (rnd(2) ? 1 : -1) * (MPI_Aint)(bl + rnd(3)) * ext, child, &t); break;
  case 3: {
    /* unsorted, non-overlapping blocks */
    int order[4] = {0, 1, 2, 3};
    for (int i = 3; i > 0; i--) { int j = rnd(i + 1), x = order[i]; order[i] = order[j]; order[j] = x; }
    for (int i = 0; i < count; i++) { blens[i] = 1 + rnd(2); disps[i] = order[i] * 4; }
    MPI_Type_indexed(count, blens, disps, child, &t);
    break;
  }
  case 4:
    for (int i = 0; i < count; i++) { blens[i] = 1 + rnd(2); adisps[i] = (MPI_Aint)(i * 3 + rnd(2)) * ext; }
    MPI_Type_create_hindexed(count, blens, adisps, child, &t);
    break;
  case 5:
    for (int i = 0; i < count; i++) disps[i] = (count - i) * 3;
    MPI_Type_create_indexed_block(count, bl, disps, child, &t);
    break;
  case 6: {
    MPI_Datatype types[2] = {child, basic};
    int sb[2] = {bl, 1 + rnd(2)};
    MPI_Aint sd[2] = {0, (MPI_Aint)(bl + rnd(2)) * ext + (ext > 8 ? 8 : 0)};
    MPI_Type_create_struct(2, sb, sd, types, &t);
    break;
  }
  case 7: MPI_Type_create_resized(child, 0, ext + (MPI_Aint)(1 + rnd(3)) * 8, &t); break;
  case 8: {
    int sizes[2] = {3 + rnd(3), 3 + rnd(3)}, subs[2], starts[2];
    for (int i = 0; i < 2; i++) { subs[i] = 1 + rnd(sizes[i] - 1); starts[i] = rnd(sizes[i] - subs[i] + 1); }
    MPI_Type_create_subarray(2, sizes, subs, starts, rnd(2) ? MPI_ORDER_C : MPI_ORDER_FORTRAN, child, &t);
    break;
  }
  case 9: {
    /* a darray: one of 2-4 processes' share of a small 2-d array, block or cyclic */
    int psizes[2] = {1 + rnd(2), 1 + rnd(2)}, gsizes[2] = {2 + rnd(5), 2 + rnd(5)};
    int distribs[2], dargs[2];
    for (int i = 0; i < 2; i++) {
      int k = rnd(3);
      distribs[i] = k == 0 ? MPI_DISTRIBUTE_BLOCK : k == 1 ? MPI_DISTRIBUTE_CYCLIC : MPI_DISTRIBUTE_NONE;
      if (distribs[i] == MPI_DISTRIBUTE_NONE) psizes[i] = 1;
      dargs[i] = distribs[i] == MPI_DISTRIBUTE_CYCLIC && rnd(2) ? 1 + rnd(2) : MPI_DISTRIBUTE_DFLT_DARG;
    }
    int nprocs = psizes[0] * psizes[1];
    MPI_Type_create_darray(nprocs, rnd(nprocs), 2, gsizes, distribs, dargs, psizes,
                           rnd(2) ? MPI_ORDER_C : MPI_ORDER_FORTRAN, child, &t);
    break;
  }
  default: MPI_Type_dup(child, &t); break;
  }
  if (child != basic) MPI_Type_free(&child);
  MPI_Type_commit(&t);
  return t;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int peer = 1 - rank;
  enum { WIN = 1 << 16 };
  unsigned char *base;
  MPI_Win win;
  MPI_Win_allocate(WIN, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  if (!onesided_window(win)) fail("the window is not onesided's", -1);
  for (int trial = 0; trial < 300; trial++) {
    MPI_Datatype basic = trial % 2 ? MPI_INT : MPI_DOUBLE;
    MPI_Datatype t = make(2, basic);
    int size;
    MPI_Aint tlb, text;
    MPI_Type_size(t, &size);
    MPI_Type_get_true_extent(t, &tlb, &text);
    if (size > WIN || text > WIN) { MPI_Type_free(&t); continue; }
    unsigned char *buf = malloc(text), *origin = buf - tlb;
    for (MPI_Aint i = 0; i < text; i++) buf[i] = (unsigned char)(i * 7 + trial);
    unsigned char *packed = malloc(size > 0 ? size : 1);
    int pos = 0;
    MPI_Pack(origin, 1, t, packed, size, &pos, MPI_COMM_WORLD);

    /* put: the target holds the packed bytes */
    memset(base, 0, WIN);
    MPI_Win_fence(0, win);
    MPI_Put(origin, 1, t, peer, 0, size, MPI_BYTE, win);
    MPI_Win_fence(0, win);
    if (memcmp(base, packed, size) != 0) fail("put of a derived type differs from MPI_Pack", trial);

    /* get: the origin is filled as MPI_Unpack fills it */
    for (int i = 0; i < size; i++) base[i] = (unsigned char)(255 - i);
    unsigned char *expect = malloc(text), *eorigin = expect - tlb;
    memcpy(expect, buf, text);
    pos = 0;
    MPI_Unpack(base, size, &pos, eorigin, 1, t, MPI_COMM_WORLD);
    MPI_Win_fence(0, win);
    MPI_Get(origin, 1, t, peer, 0, size, MPI_BYTE, win);
    MPI_Win_fence(0, win);
    if (memcmp(buf, expect, text) != 0) fail("get of a derived type differs from MPI_Unpack", trial);

    /* accumulate: the derived origin adds element-wise onto a contiguous target */
    if (basic == MPI_INT) {
      int n = size / (int)sizeof(int);
      pos = 0; /* the origin holds what the get brought: pack it again */
      MPI_Pack(origin, 1, t, packed, size, &pos, MPI_COMM_WORLD);
      int *vals = (int *)packed;
      memset(base, 0, WIN);
      MPI_Win_fence(0, win);
      for (int k = 0; k < 2; k++) {
        int rc = MPI_Accumulate(origin, 1, t, peer, 0, n, MPI_INT, MPI_SUM, win);
        if (rc != MPI_SUCCESS) fail("accumulate of a derived type failed", trial);
      }
      MPI_Win_fence(0, win);
      for (int i = 0; i < n; i++) {
        int got;
        memcpy(&got, base + i * sizeof(int), sizeof(int));
        int want;
        memcpy(&want, (unsigned char *)vals + i * sizeof(int), sizeof(int));
        if (got != 2 * want) {
          fprintf(stderr, "element %d of %d: %d, expected %d\n", i, n, got, 2 * want);
          fail("accumulate of a derived type", trial);
        }
      }
    }
    free(expect);
    free(packed);
    free(buf);
    MPI_Type_free(&t);
  }
  /* mixed basic types cannot accumulate */
  MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
  MPI_Datatype mixed, types[2] = {MPI_INT, MPI_DOUBLE};
  int bl[2] = {1, 1};
  MPI_Aint d[2] = {0, 8};
  MPI_Type_create_struct(2, bl, d, types, &mixed);
  MPI_Type_commit(&mixed);
  unsigned char m[16] = {0};
  MPI_Win_fence(0, win);
  int rc = MPI_Accumulate(m, 1, mixed, peer, 0, 1, mixed, MPI_SUM, win), cls = 0;
  MPI_Error_class(rc, &cls);
  if (cls != MPI_ERR_TYPE) fail("accumulate of a mixed type is not MPI_ERR_TYPE", -1);
  MPI_Win_fence(0, win);
  MPI_Type_free(&mixed);
  MPI_Win_free(&win);

  /* Target datatypes that reach below their displacement (a negative stride): on a window
   * of 8 longs with displacement unit 8, a put at displacement 7 of vector(4, 1, -2) lands
   * at 7, 5, 3, 1; one at displacement 5 reaches below the window: MPI_ERR_RMA_RANGE. */
  long *lw;
  MPI_Win_allocate(8 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &lw, &win);
  for (int i = 0; i < 8; i++) lw[i] = -1;
  MPI_Datatype down;
  MPI_Type_vector(4, 1, -2, MPI_LONG, &down);
  MPI_Type_commit(&down);
  long four[4] = {10, 11, 12, 13};
  MPI_Win_fence(0, win);
  MPI_Put(four, 4, MPI_LONG, peer, 7, 1, down, win);
  MPI_Win_fence(0, win);
  if (lw[7] != 10 || lw[5] != 11 || lw[3] != 12 || lw[1] != 13 || lw[0] != -1 || lw[6] != -1)
  {
    fprintf(stderr, "window: %ld %ld %ld %ld %ld %ld %ld %ld\n", lw[0], lw[1], lw[2], lw[3],
            lw[4], lw[5], lw[6], lw[7]);
    fail("put with a negative-stride target type", -1);
  }
  /* The fence opened the next epoch: the peer's accumulate below may land at once, so both
   * read their window before either goes on. */
  MPI_Barrier(MPI_COMM_WORLD);
  long back[4] = {0};
  MPI_Get(back, 4, MPI_LONG, peer, 7, 1, down, win);
  MPI_Accumulate(four, 4, MPI_LONG, peer, 6, 1, down, MPI_SUM, win);
  MPI_Win_fence(0, win);
  if (back[0] != 10 || back[3] != 13) fail("get with a negative-stride target type", -1);
  if (lw[6] != 9 || lw[0] != 12) fail("accumulate with a negative-stride target type", -1);
  MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
  rc = MPI_Put(four, 4, MPI_LONG, peer, 5, 1, down, win);
  MPI_Error_class(rc, &cls);
  if (cls != MPI_ERR_RMA_RANGE) fail("a target type below the window is not MPI_ERR_RMA_RANGE", -1);
  MPI_Win_fence(0, win);
  MPI_Type_free(&down);
  MPI_Win_free(&win);
  if (rank == 0) printf("datatypes: ok\n");
  MPI_Finalize();
  return 0;
}
