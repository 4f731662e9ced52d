/* Accumulates of every kind of predefined type through the preloaded C ABI (2 ranks, both
 * into rank 0's window at once): complex numbers (sum, prod), long double (sum, max),
 * MINLOC/MAXLOC on the C pair types (with their padding; alone and inside derived types),
 * C_BOOL logical ops, and MPI's errors where it forbids (MPI_SUM on a pair, MINLOC on an
 * int, a user-defined op). */
#include <complex.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

#define ROUNDS 40

struct double_int { double v; int i; };
struct long_int { long v; int i; };
struct short_int { short v; int i; };
struct float_int { float v; int i; };
struct two_int { int v; int i; };
struct long_double_int { long double v; int i; };

static void user_op(void *in, void *inout, int *len, MPI_Datatype *t) {
  (void)in; (void)inout; (void)len; (void)t;
}

/* The window's layout (bytes). */
enum {
  ZD = 0,     /* double complex, sum */
  ZF = 16,    /* float complex, sum */
  ZP = 32,    /* double complex, prod */
  LD = 48,    /* long double, sum */
  LM = 64,    /* long double, max */
  LZ = 80,    /* long double complex, sum */
  DI = 112,   /* double_int, minloc */
  LI = 128,   /* long_int, maxloc */
  SI = 144,   /* short_int, minloc */
  FI = 152,   /* float_int, maxloc */
  TI = 160,   /* 2int, minloc */
  LDI = 176,  /* long_double_int, maxloc */
  BL = 208,   /* C_BOOL, lor */
  END = 224
};

int main(int argc, char **argv) {
  int rank;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char *base;
  MPI_Win win;
  MPI_Win_allocate(END, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  CHECK(onesided_window(win), "window win is not onesided's");
  memset(base, 0, END);
  if (rank == 0) {
    double complex one = 1.0;
    memcpy(base + ZP, &one, sizeof one);
    long double lo = -1.0L;
    memcpy(base + LM, &lo, sizeof lo);
    struct double_int di = {1e9, 99};
    memcpy(base + DI, &di, sizeof di);
    struct long_int li = {-5, 99};
    memcpy(base + LI, &li, sizeof li);
    struct short_int si = {1000, 99};
    memcpy(base + SI, &si, sizeof si);
    struct float_int fi = {-1.0f, 99};
    memcpy(base + FI, &fi, sizeof fi);
    struct two_int ti = {1000, 99};
    memcpy(base + TI, &ti, sizeof ti);
    struct long_double_int ldi = {-1.0L, 99};
    memcpy(base + LDI, &ldi, sizeof ldi);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  MPI_Win_lock_all(0, win);
  for (int r = 0; r < ROUNDS; r++) {
    double complex zd = 1.0 + 2.0 * I;
    MPI_Accumulate(&zd, 1, MPI_C_DOUBLE_COMPLEX, 0, ZD, 1, MPI_C_DOUBLE_COMPLEX, MPI_SUM, win);
    float complex zf = 0.5f - 1.0f * I;
    MPI_Accumulate(&zf, 1, MPI_C_FLOAT_COMPLEX, 0, ZF, 1, MPI_C_FLOAT_COMPLEX, MPI_SUM, win);
    long double third = 1.0L / 3.0L;
    MPI_Accumulate(&third, 1, MPI_LONG_DOUBLE, 0, LD, 1, MPI_LONG_DOUBLE, MPI_SUM, win);
    long double m = (long double)(rank * 1000 + r);
    MPI_Accumulate(&m, 1, MPI_LONG_DOUBLE, 0, LM, 1, MPI_LONG_DOUBLE, MPI_MAX, win);
    long double complex lz = 1.0L + 1.0L * I;
    MPI_Accumulate(&lz, 1, MPI_C_LONG_DOUBLE_COMPLEX, 0, LZ, 1, MPI_C_LONG_DOUBLE_COMPLEX,
                   MPI_SUM, win);
    /* Values fall over the rounds; both ranks reach each one: the lower index wins. */
    struct double_int di = {100.0 - r, rank * 1000 + r};
    MPI_Accumulate(&di, 1, MPI_DOUBLE_INT, 0, DI, 1, MPI_DOUBLE_INT, MPI_MINLOC, win);
    struct long_int li = {r, rank};
    MPI_Accumulate(&li, 1, MPI_LONG_INT, 0, LI, 1, MPI_LONG_INT, MPI_MAXLOC, win);
    struct short_int si = {(short)(100 - r), rank};
    MPI_Accumulate(&si, 1, MPI_SHORT_INT, 0, SI, 1, MPI_SHORT_INT, MPI_MINLOC, win);
    struct float_int fi = {(float)r, rank};
    MPI_Accumulate(&fi, 1, MPI_FLOAT_INT, 0, FI, 1, MPI_FLOAT_INT, MPI_MAXLOC, win);
    struct two_int ti = {100 - r, rank};
    MPI_Accumulate(&ti, 1, MPI_2INT, 0, TI, 1, MPI_2INT, MPI_MINLOC, win);
    struct long_double_int ldi = {(long double)r, rank};
    MPI_Accumulate(&ldi, 1, MPI_LONG_DOUBLE_INT, 0, LDI, 1, MPI_LONG_DOUBLE_INT, MPI_MAXLOC,
                   win);
    _Bool b = (rank == 1 && r == ROUNDS - 1);
    MPI_Accumulate(&b, 1, MPI_C_BOOL, 0, BL, 1, MPI_C_BOOL, MPI_LOR, win);
  }
  if (rank == 1) {
    double complex i = I;
    MPI_Accumulate(&i, 1, MPI_C_DOUBLE_COMPLEX, 0, ZP, 1, MPI_C_DOUBLE_COMPLEX, MPI_PROD, win);
  }
  MPI_Win_flush_all(win);

  /* get_accumulate and fetch_and_op of pairs: the previous struct comes back whole. */
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    struct double_int probe = {1e9, 7}, old[2];
    memset(old, 0, sizeof old);
    MPI_Get_accumulate(&probe, 1, MPI_DOUBLE_INT, old, 1, MPI_DOUBLE_INT, 0, DI, 1,
                       MPI_DOUBLE_INT, MPI_MINLOC, win);
    struct double_int fetched;
    MPI_Fetch_and_op(NULL, &fetched, MPI_DOUBLE_INT, 0, DI, MPI_NO_OP, win);
    MPI_Win_flush(0, win);
    CHECK(old[0].v == 61.0 && old[0].i == ROUNDS - 1, "get_accumulate minloc: (%g, %d)",
          old[0].v, old[0].i);
    CHECK(fetched.v == 61.0 && fetched.i == ROUNDS - 1, "fetch_and_op no_op: (%g, %d)",
          fetched.v, fetched.i);
  }

  /* MPI's errors, through MPI_ERRORS_RETURN. */
  MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
  struct double_int p = {1.0, 1};
  int cls = 0, rc = MPI_Accumulate(&p, 1, MPI_DOUBLE_INT, 0, DI, 1, MPI_DOUBLE_INT, MPI_SUM,
                                   win);
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_OP, "MPI_SUM of a pair: class %d", cls);
  int x = 1;
  rc = MPI_Accumulate(&x, 1, MPI_INT, 0, END - 4, 1, MPI_INT, MPI_MINLOC, win);
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_OP, "MINLOC of an int: class %d", cls);
  MPI_Op mine;
  MPI_Op_create(user_op, 1, &mine);
  rc = MPI_Accumulate(&x, 1, MPI_INT, 0, END - 4, 1, MPI_INT, mine, win);
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_OP, "a user op: class %d", cls);
  MPI_Op_free(&mine);
  MPI_Win_unlock_all(win);
  MPI_Barrier(MPI_COMM_WORLD);

  if (rank == 0) {
    double complex zd;
    memcpy(&zd, base + ZD, sizeof zd);
    CHECK(creal(zd) == 2 * ROUNDS && cimag(zd) == 4 * ROUNDS, "complex sum (%g, %g)",
          creal(zd), cimag(zd));
    float complex zf;
    memcpy(&zf, base + ZF, sizeof zf);
    CHECK(crealf(zf) == ROUNDS && cimagf(zf) == -2 * ROUNDS, "float complex sum");
    double complex zp;
    memcpy(&zp, base + ZP, sizeof zp);
    CHECK(creal(zp) == 0.0 && cimag(zp) == 1.0, "complex prod (%g, %g)", creal(zp), cimag(zp));
    long double ld, want = 0.0L;
    for (int k = 0; k < 2 * ROUNDS; k++) want += 1.0L / 3.0L;
    memcpy(&ld, base + LD, sizeof ld);
    /* Same sums in another order differ by a few ulps of long double, far below double's. */
    long double diff = ld - want;
    CHECK(diff < 1e-15L && diff > -1e-15L && (double)ld != 0.0, "long double sum %Lg vs %Lg",
          ld, want);
    long double lm;
    memcpy(&lm, base + LM, sizeof lm);
    CHECK(lm == 1000.0L + ROUNDS - 1, "long double max %Lg", lm);
    long double complex lz;
    memcpy(&lz, base + LZ, sizeof lz);
    CHECK(creall(lz) == 2 * ROUNDS && cimagl(lz) == 2 * ROUNDS, "long double complex sum");
    struct double_int di;
    memcpy(&di, base + DI, sizeof di);
    CHECK(di.v == 61.0 && di.i == ROUNDS - 1, "double_int minloc (%g, %d)", di.v, di.i);
    struct long_int li;
    memcpy(&li, base + LI, sizeof li);
    CHECK(li.v == ROUNDS - 1 && li.i == 0, "long_int maxloc (%ld, %d)", li.v, li.i);
    struct short_int si;
    memcpy(&si, base + SI, sizeof si);
    CHECK(si.v == 100 - (ROUNDS - 1) && si.i == 0, "short_int minloc (%d, %d)", si.v, si.i);
    struct float_int fi;
    memcpy(&fi, base + FI, sizeof fi);
    CHECK(fi.v == ROUNDS - 1 && fi.i == 0, "float_int maxloc (%g, %d)", fi.v, fi.i);
    struct two_int ti;
    memcpy(&ti, base + TI, sizeof ti);
    CHECK(ti.v == 100 - (ROUNDS - 1) && ti.i == 0, "2int minloc (%d, %d)", ti.v, ti.i);
    struct long_double_int ldi;
    memcpy(&ldi, base + LDI, sizeof ldi);
    CHECK(ldi.v == ROUNDS - 1 && ldi.i == 0, "long_double_int maxloc (%Lg, %d)", ldi.v, ldi.i);
    _Bool b;
    memcpy(&b, base + BL, 1);
    CHECK(b == 1, "C_BOOL lor");
    printf("acc_types: ok\n");
  }
  MPI_Win_free(&win);

  /* Pair types inside derived types: two pairs at once (MINLOC), and every other pair of
   * the target (MAXLOC); the pairs in between are left alone. */
  struct double_int *pairs;
  MPI_Win_allocate(6 * sizeof(struct double_int), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &pairs, &win);
  for (int k = 0; k < 6; k++) pairs[k] = (struct double_int){100.0, 99};
  MPI_Datatype two, every_other;
  MPI_Type_contiguous(2, MPI_DOUBLE_INT, &two);
  MPI_Type_vector(2, 1, 2, MPI_DOUBLE_INT, &every_other);
  MPI_Type_commit(&two);
  MPI_Type_commit(&every_other);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Win_lock_all(0, win);
  struct double_int low[2] = {{50.0 - rank, rank}, {60.0, 10 + rank}};
  struct double_int high[2] = {{200.0 + rank, rank}, {300.0, 20 + rank}};
  MPI_Accumulate(low, 1, two, 0, 0, 1, two, MPI_MINLOC, win);
  MPI_Accumulate(high, 2, MPI_DOUBLE_INT, 0, 2 * sizeof(struct double_int), 1, every_other,
                 MPI_MAXLOC, win);
  MPI_Win_unlock_all(win);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    CHECK(pairs[0].v == 49.0 && pairs[0].i == 1, "derived minloc 0: (%g, %d)", pairs[0].v,
          pairs[0].i);
    CHECK(pairs[1].v == 60.0 && pairs[1].i == 10, "derived minloc 1: (%g, %d)", pairs[1].v,
          pairs[1].i);
    CHECK(pairs[2].v == 201.0 && pairs[2].i == 1, "derived maxloc 2: (%g, %d)", pairs[2].v,
          pairs[2].i);
    CHECK(pairs[4].v == 300.0 && pairs[4].i == 20, "derived maxloc 4: (%g, %d)", pairs[4].v,
          pairs[4].i);
    CHECK(pairs[3].v == 100.0 && pairs[3].i == 99 && pairs[5].v == 100.0, "pairs in between");
    printf("acc_types: derived pair types ok\n");
  }
  MPI_Type_free(&two);
  MPI_Type_free(&every_other);
  MPI_Win_free(&win);
  MPI_Finalize();
  return 0;
}
