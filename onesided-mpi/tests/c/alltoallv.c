/* Persistent alltoallv plans through the C extensions (seed 001): irregular counts, every
 * variant (fence by default, lock, hierarchical, auto through the info key
 * "onesided_alltoallv"), 12 exchanges each with new data, every result checked against
 * what MPI_Alltoallv gives; the request of each exchange is a genuine MPI request. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "mpi_onesided.h"

#define CYCLES 12

int main(int argc, char **argv) {
  int rank, n;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  int *sc = malloc(n * sizeof(int)), *sd = malloc(n * sizeof(int));
  int *rc = malloc(n * sizeof(int)), *rd = malloc(n * sizeof(int));
  int stot = 0, rtot = 0;
  for (int p = 0; p < n; p++) {
    sc[p] = 3 * (rank + p + 1) + (p == rank ? 0 : rank);
    rc[p] = 3 * (p + rank + 1) + (p == rank ? 0 : p);
    sd[p] = stot;
    rd[p] = rtot;
    stot += sc[p];
    rtot += rc[p];
  }
  long *send = malloc(stot * sizeof(long)), *recv = malloc(rtot * sizeof(long));
  long *ref = malloc(rtot * sizeof(long));
  const char *variants[] = {NULL, "lock", "hierarchical", "auto"};
  for (int v = 0; v < 4; v++) {
    MPI_Info info = MPI_INFO_NULL;
    if (variants[v]) {
      MPI_Info_create(&info);
      MPI_Info_set(info, "onesided_alltoallv", variants[v]);
    }
    MPIX_Alltoallv_plan plan = MPIX_ALLTOALLV_PLAN_NULL;
    MPIX_Alltoallv_init(send, sc, sd, MPI_LONG, recv, rc, rd, MPI_LONG, MPI_COMM_WORLD, info,
                        &plan);
    CHECK(plan != MPIX_ALLTOALLV_PLAN_NULL, "no plan");
    for (int cycle = 0; cycle < CYCLES; cycle++) {
      for (int p = 0; p < n; p++)
        for (int k = 0; k < sc[p]; k++) send[sd[p] + k] = 100000L * cycle + 1000L * rank + 10L * p + k;
      MPI_Request r;
      MPIX_Alltoallv_start(plan, &r);
      MPI_Status st;
      MPI_Wait(&r, &st);
      CHECK(r == MPI_REQUEST_NULL, "request not freed");
      MPI_Alltoallv(send, sc, sd, MPI_LONG, ref, rc, rd, MPI_LONG, MPI_COMM_WORLD);
      for (int i = 0; i < rtot; i++)
        CHECK(recv[i] == ref[i], "%s cycle %d: element %d is %ld, MPI_Alltoallv gives %ld",
              variants[v] ? variants[v] : "fence", cycle, i, recv[i], ref[i]);
    }
    MPIX_Alltoallv_plan_free(&plan);
    CHECK(plan == MPIX_ALLTOALLV_PLAN_NULL, "plan not reset by its free");
    if (info != MPI_INFO_NULL) MPI_Info_free(&info);
  }
  if (rank == 0) printf("alltoallv: ok\n");
  free(send); free(recv); free(ref); free(sc); free(sd); free(rc); free(rd);
  MPI_Finalize();
  return 0;
}
