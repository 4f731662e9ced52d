/* CHECK(cond, fmt, ...): on a false condition, print the rank (a variable `rank` in scope),
 * the line and the message, and end the job non-zero. Shared by the C tests. */
#ifndef ONESIDED_CHECK_H
#define ONESIDED_CHECK_H
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#define CHECK(cond, ...)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      fprintf(stderr, "rank %d: line %d: ", rank, __LINE__);                               \
      fprintf(stderr, __VA_ARGS__);                                                        \
      fprintf(stderr, "\n");                                                               \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                        \
    }                                                                                      \
  } while (0)

#if MPI_VERSION < 4
/* An MPI-3 library (Open MPI 4.1) has no large-count forms: the tests' calls of them go to
 * the int forms (with the preload, MPI-3 programs reach those only). */
#define MPI_Win_allocate_c(size, unit, info, comm, base, win) \
  MPI_Win_allocate(size, (int)(unit), info, comm, base, win)
#define MPI_Win_allocate_shared_c(size, unit, info, comm, base, win) \
  MPI_Win_allocate_shared(size, (int)(unit), info, comm, base, win)
#define MPI_Put_c(o, oc, ot, r, d, tc, tt, w) MPI_Put(o, (int)(oc), ot, r, d, (int)(tc), tt, w)
#define MPI_Recv_c(b, n, t, s, tag, c, st) MPI_Recv(b, (int)(n), t, s, tag, c, st)
#define MPI_Bcast_c(b, n, t, root, c) MPI_Bcast(b, (int)(n), t, root, c)
#define MPI_Allreduce_c(s, r, n, t, op, c) MPI_Allreduce(s, r, (int)(n), t, op, c)
#define MPI_Get_c(o, oc, ot, r, d, tc, tt, w) MPI_Get(o, (int)(oc), ot, r, d, (int)(tc), tt, w)
#define MPI_Accumulate_c(o, oc, ot, r, d, tc, tt, op, w) \
  MPI_Accumulate(o, (int)(oc), ot, r, d, (int)(tc), tt, op, w)
static inline int MPI_Win_shared_query_c(MPI_Win win, int rank, MPI_Aint *size, MPI_Aint *unit,
                                         void *base) {
  int u = 0;
  int rc = MPI_Win_shared_query(win, rank, size, &u, base);
  *unit = u;
  return rc;
}
#endif

/* 1 when `win` is onesided's, under any MPI ABI: the library adds the info key
 * "onesided" = "true" to what MPI_Win_get_info returns for its windows (a window left to the
 * host MPI, or a program run without the preload, has no such key). */
static inline int onesided_window(MPI_Win win) {
  MPI_Info info;
  char value[16] = "";
  int flag = 0;
  if (MPI_Win_get_info(win, &info) != MPI_SUCCESS) return 0;
#if MPI_VERSION >= 4
  int len = (int)sizeof value;
  MPI_Info_get_string(info, "onesided", &len, value, &flag);
#else
  MPI_Info_get(info, "onesided", (int)sizeof value - 1, value, &flag);
#endif
  MPI_Info_free(&info);
  return flag && strcmp(value, "true") == 0;
}

#endif
