/* Window attributes, group, info and names, and the large-count forms, through the
 * preloaded C ABI (2 ranks). Exits non-zero on the first wrong answer. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

/* A keyval freed while an attribute uses it stays alive until that attribute goes
 * (MPI-4.1 §7.7.2): its delete callback runs once, with the original keyval and value, when
 * the window is freed — even after 32 new keyvals were created meanwhile. */
static int deleted, deleted_keyval;
static void *deleted_value;

static int count_delete(MPI_Win win, int keyval, void *value, void *extra) {
  (void)win;
  (void)extra;
  deleted++;
  deleted_keyval = keyval;
  deleted_value = value;
  return MPI_SUCCESS;
}

static int other_delete(MPI_Win win, int keyval, void *value, void *extra) {
  (void)win, (void)keyval, (void)value, (void)extra;
  return MPI_ERR_OTHER; /* never run: these keyvals set no attribute */
}

static void freed_keyval(int rank, int flavor) {
  MPI_Win win;
  static int mem[16];
  int *base;
  switch (flavor) {
    case 0: MPI_Win_allocate(64, 4, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win); break;
    case 1: MPI_Win_create(mem, sizeof mem, 4, MPI_INFO_NULL, MPI_COMM_WORLD, &win); break;
    case 2: MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win); break;
    default: MPI_Win_allocate_shared(64, 4, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  }
  int key, original, more[32];
  MPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, count_delete, &key, NULL);
  original = key;
  MPI_Win_set_attr(win, key, &mem[3]);
  MPI_Win_free_keyval(&key);
  CHECK(key == MPI_KEYVAL_INVALID, "MPI_Win_free_keyval left the handle %#x", key);
  for (int i = 0; i < 32; i++) {
    MPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, other_delete, &more[i], NULL);
    CHECK(more[i] != original, "flavor %d: keyval %#x handed out again while in use", flavor,
          original);
  }
  void *value;
  int flag = 0;
  MPI_Win_get_attr(win, original, &value, &flag);
  CHECK(flag && value == &mem[3], "flavor %d: the attribute of a freed keyval is gone", flavor);
  deleted = 0;
  MPI_Win_free(&win);
  CHECK(deleted == 1 && deleted_keyval == original && deleted_value == &mem[3],
        "flavor %d: delete callback ran %d times (keyval %#x, value %p)", flavor, deleted,
        deleted_keyval, deleted_value);
  for (int i = 0; i < 32; i++) MPI_Win_free_keyval(&more[i]);
}

int main(int argc, char **argv) {
  int rank, flag;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int peer = 1 - rank;

  /* MPI_Win_allocate_c with a displacement unit of 4 */
  int *base;
  MPI_Win win;
  MPI_Win_allocate_c(64, 4, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  CHECK(onesided_window(win), "window win is not onesided's");
  void *got_base;
  MPI_Aint *size;
  int *unit, *flavor, *model;
  MPI_Win_get_attr(win, MPI_WIN_BASE, &got_base, &flag);
  CHECK(flag && got_base == base, "MPI_WIN_BASE %p vs %p", got_base, (void *)base);
  MPI_Win_get_attr(win, MPI_WIN_SIZE, &size, &flag);
  CHECK(flag && *size == 64, "MPI_WIN_SIZE %ld", (long)*size);
  MPI_Win_get_attr(win, MPI_WIN_DISP_UNIT, &unit, &flag);
  CHECK(flag && *unit == 4, "MPI_WIN_DISP_UNIT %d", *unit);
  MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flag);
  CHECK(flag && *flavor == MPI_WIN_FLAVOR_ALLOCATE, "MPI_WIN_CREATE_FLAVOR %d", *flavor);
  MPI_Win_get_attr(win, MPI_WIN_MODEL, &model, &flag);
  CHECK(flag && *model == MPI_WIN_UNIFIED, "MPI_WIN_MODEL %d", *model);

  /* The window's group is the communicator's. */
  MPI_Group g, world;
  int cmp;
  MPI_Win_get_group(win, &g);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  MPI_Group_compare(g, world, &cmp);
  CHECK(cmp == MPI_IDENT, "group comparison %d", cmp);
  MPI_Group_free(&g);
  MPI_Group_free(&world);

  /* Info: set a hint collectively, read it back. */
  MPI_Info in, out;
  MPI_Info_create(&in);
  MPI_Info_set(in, "accumulate_ordering", "none");
  MPI_Win_set_info(win, in);
  MPI_Info_free(&in);
  MPI_Win_get_info(win, &out);
  char value[MPI_MAX_INFO_VAL + 1];
  MPI_Info_get(out, "accumulate_ordering", MPI_MAX_INFO_VAL, value, &flag);
  CHECK(flag && strcmp(value, "none") == 0, "accumulate_ordering = %s", flag ? value : "(unset)");
  MPI_Info_free(&out);

  /* Large-count put, get and accumulate. */
  int v[4] = {rank + 1, rank + 2, rank + 3, rank + 4}, back[4] = {0};
  MPI_Win_fence(0, win);
  MPI_Put_c(v, (MPI_Count)4, MPI_INT, peer, 2, (MPI_Count)4, MPI_INT, win);
  MPI_Win_fence(0, win);
  CHECK(base[2] == peer + 1 && base[5] == peer + 4, "put_c landed %d..%d", base[2], base[5]);
  MPI_Get_c(back, (MPI_Count)4, MPI_INT, peer, 2, (MPI_Count)4, MPI_INT, win);
  MPI_Accumulate_c(v, (MPI_Count)1, MPI_INT, peer, 0, (MPI_Count)1, MPI_INT, MPI_SUM, win);
  MPI_Win_fence(0, win);
  CHECK(back[0] == rank + 1 && back[3] == rank + 4, "get_c read %d..%d", back[0], back[3]);
  CHECK(base[0] == peer + 1, "accumulate_c: %d", base[0]);
  MPI_Win_free(&win);

  /* shared_query_c on an allocate_shared_c window */
  int *s;
  MPI_Win_allocate_shared_c(16, 4, MPI_INFO_NULL, MPI_COMM_WORLD, &s, &win);
  MPI_Aint qsize, qunit;
  int *q;
  MPI_Win_shared_query_c(win, peer, &qsize, &qunit, &q);
  CHECK(qsize == 16 && qunit == 4, "shared_query_c %ld %ld", (long)qsize, (long)qunit);
  MPI_Win_free(&win);

  if (rank == 0) printf("attributes: ok\n");
  for (int flavor = 0; flavor < 4; flavor++) freed_keyval(rank, flavor);
  MPI_Finalize();
  return 0;
}
