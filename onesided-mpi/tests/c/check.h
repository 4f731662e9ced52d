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
