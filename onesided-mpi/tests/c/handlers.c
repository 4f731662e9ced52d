/* User window error handlers and attributes through the preloaded C ABI (2 ranks): a
 * handler made with MPI_Win_create_errhandler is called with the window and the error
 * (also after the program freed it, and through MPI_Win_call_errhandler); keyvals and
 * attributes with their delete callbacks. */
#include <mpi.h>
#include <stdio.h>

#include "check.h"

static int rank, calls, last_class;
static MPI_Win last_win;
static int deletes;

static void on_error(MPI_Win *win, int *code, ...) {
  calls++;
  last_win = *win;
  MPI_Error_class(*code, &last_class);
}

static int on_delete(MPI_Win win, int keyval, void *value, void *extra) {
  (void)win; (void)keyval; (void)value;
  deletes += *(int *)extra;
  return MPI_SUCCESS;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int peer = 1 - rank;
  long *base, v = 1;
  MPI_Win win;
  MPI_Win_allocate(4 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);

  MPI_Errhandler eh;
  MPI_Win_create_errhandler(on_error, &eh);
  MPI_Win_set_errhandler(win, eh);
  MPI_Errhandler_free(&eh); /* still set on the window: must stay callable */
  int rc = MPI_Put(&v, 1, MPI_LONG, peer, 0, 1, MPI_LONG, win); /* no epoch */
  CHECK(rc != MPI_SUCCESS, "the erroneous put succeeded");
  CHECK(calls == 1 && last_win == win && last_class == MPI_ERR_RMA_SYNC,
        "handler: %d calls, window %s, class %d", calls, last_win == win ? "ours" : "another", last_class);
  CHECK(MPI_Win_call_errhandler(win, MPI_ERR_OTHER) == MPI_SUCCESS, "call_errhandler");
  CHECK(calls == 2 && last_class == MPI_ERR_OTHER, "call_errhandler ran the handler");

  int key, one = 1, flag;
  void *val;
  MPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, on_delete, &key, &one);
  MPI_Win_get_attr(win, key, &val, &flag);
  CHECK(!flag, "an attribute before any was set");
  MPI_Win_set_attr(win, key, (void *)0x1234);
  MPI_Win_get_attr(win, key, &val, &flag);
  CHECK(flag && val == (void *)0x1234, "attribute %p", val);
  MPI_Win_set_attr(win, key, (void *)0x5678); /* replaces: deletes the old one */
  CHECK(deletes == 1, "delete callbacks: %d", deletes);
  MPI_Win_delete_attr(win, key);
  CHECK(deletes == 2, "delete callbacks: %d", deletes);
  MPI_Win_set_attr(win, key, (void *)0x9abc);
  MPI_Win_free_keyval(&key);
  CHECK(key == MPI_KEYVAL_INVALID, "free_keyval leaves MPI_KEYVAL_INVALID");
  MPI_Win_free(&win); /* the last attribute is deleted with the window */
  CHECK(deletes == 3, "delete callbacks after free: %d", deletes);
  if (rank == 0) printf("handlers: ok\n");
  MPI_Finalize();
  return 0;
}
