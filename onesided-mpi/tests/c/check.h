/* CHECK(cond, fmt, ...): on a false condition, print the rank (a variable `rank` in scope),
 * the line and the message, and end the job non-zero. Shared by the C tests. */
#ifndef ONESIDED_CHECK_H
#define ONESIDED_CHECK_H
#include <mpi.h>
#include <stdio.h>

#define CHECK(cond, ...)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      fprintf(stderr, "rank %d: line %d: ", rank, __LINE__);                               \
      fprintf(stderr, __VA_ARGS__);                                                        \
      fprintf(stderr, "\n");                                                               \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                        \
    }                                                                                      \
  } while (0)

#endif
