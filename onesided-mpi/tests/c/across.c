/* Windows across nodes are onesided's in a library built with its network transport, by
 * default (2 ranks, on two hosts or run with ONESIDED_NODES=2: each rank on a
 * virtual node of its own, the other one reached through libfabric): fence, lock, flush, put (short and 1 MiB), get, accumulate,
 * fetch_and_op, compare_and_swap, requests, attributes, error classes, dynamic windows,
 * and MPI_ERR_RMA_SHARED for a shared window over both nodes; a target that waits in the
 * host's blocking calls (MPI_Barrier, MPI_Recv, MPI_Wait, MPI_Probe, MPI_Mprobe, the
 * large-count forms) keeps serving them.
 * forward.c is a job with ONESIDED_ACROSS_NODES=host (the host MPI's windows). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static int ours(MPI_Win w) { return onesided_window(w); }

/* How many different libfabric files the process maps: one at most (the library opens the
 * process's own libfabric when the host MPI brought one, e.g. MPICH 5's bundled 2.x). */
static int libfabrics_mapped(void) {
  FILE *maps = fopen("/proc/self/maps", "r");
  char line[4096], seen[4][1024];
  int n = 0;
  if (!maps) return 0;
  while (fgets(line, sizeof line, maps)) {
    char *path = strchr(line, '/');
    if (!path || !strstr(path, "libfabric.so")) continue;
    path[strcspn(path, "\n")] = 0;
    int known = 0;
    for (int i = 0; i < n; i++) known |= strcmp(seen[i], path) == 0;
    if (!known && n < 4) snprintf(seen[n++], sizeof seen[0], "%s", path);
  }
  fclose(maps);
  return n;
}

#define LONG_ELEMS (1 << 17) /* 1 MiB of long: past the copy limit of a put */

int main(int argc, char **argv) {
  int rank;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int peer = 1 - rank;
  /* Virtual nodes of one host (ONESIDED_NODES=2), or two hosts (scripts/slurm.sh): either
     way each rank shares memory with itself only, and MPI_COMM_TYPE_SHARED says so (under
     virtual nodes the library splits by its node, not the host MPI's machine). */
  MPI_Comm node;
  int node_size;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &node_size);
  CHECK(node_size == 1, "%d processes share this rank's node: run with ONESIDED_NODES=2, or "
        "on two hosts", node_size);
  CHECK(getenv("ONESIDED_ACROSS_NODES") == NULL, "run without ONESIDED_ACROSS_NODES");
  /* A shared window over the node's communicator, as every MPI-3 shared-memory program
     makes one. */
  long *node_base, *queried;
  MPI_Win node_win;
  MPI_Aint node_bytes;
  int node_unit;
  CHECK(MPI_Win_allocate_shared(4 * sizeof(long), sizeof(long), MPI_INFO_NULL, node,
                                &node_base, &node_win) == MPI_SUCCESS,
        "allocate_shared over MPI_COMM_TYPE_SHARED's communicator");
  CHECK(ours(node_win), "the node's shared window is not onesided's");
  MPI_Win_shared_query(node_win, 0, &node_bytes, &node_unit, &queried);
  CHECK(queried == node_base && node_bytes == 4 * sizeof(long) && node_unit == sizeof(long),
        "shared_query of the node's window");
  MPI_Win_free(&node_win);
  MPI_Comm_free(&node);

  long *base;
  MPI_Win win;
  MPI_Win_allocate((8 + LONG_ELEMS) * sizeof(long), sizeof(long), MPI_INFO_NULL,
                   MPI_COMM_WORLD, &base, &win);
  CHECK(ours(win), "a window across nodes is not onesided's");
  /* libfabric's network maps the process's one libfabric; the socket network needs none
     (the host MPI may have mapped its own). */
  const char *network = getenv("ONESIDED_NETWORK");
  if (network != NULL && strcmp(network, "socket") == 0)
    CHECK(libfabrics_mapped() <= 1, "%d libfabrics mapped (at most one expected)",
          libfabrics_mapped());
  else
    CHECK(libfabrics_mapped() == 1, "%d libfabrics mapped (one expected)", libfabrics_mapped());
  for (int i = 0; i < 8; i++) base[i] = 10 * rank + i;
  MPI_Win_fence(0, win);
  long v = 100 + rank, got = -1, one = 1;
  MPI_Put(&v, 1, MPI_LONG, peer, 1, 1, MPI_LONG, win);
  MPI_Get(&got, 1, MPI_LONG, peer, 2, 1, MPI_LONG, win);
  MPI_Accumulate(&one, 1, MPI_LONG, 0, 3, 1, MPI_LONG, MPI_SUM, win);
  MPI_Win_fence(0, win);
  CHECK(base[1] == 100 + peer, "fence put: %ld", base[1]);
  CHECK(got == 10 * peer + 2, "fence get: %ld", got);
  if (rank == 0) CHECK(base[3] == 3 + 2, "accumulate: %ld", base[3]);

  /* A long put from a buffer the program reuses right after the epoch. */
  long *big = malloc(LONG_ELEMS * sizeof(long));
  for (long i = 0; i < LONG_ELEMS; i++) big[i] = i * 3 + rank;
  MPI_Win_lock(MPI_LOCK_EXCLUSIVE, peer, 0, win);
  MPI_Put(big, LONG_ELEMS, MPI_LONG, peer, 8, LONG_ELEMS, MPI_LONG, win);
  MPI_Win_unlock(peer, win);
  for (long i = 0; i < LONG_ELEMS; i++) big[i] = -1;
  MPI_Barrier(MPI_COMM_WORLD);
  for (long i = 0; i < LONG_ELEMS; i += 4099)
    CHECK(base[8 + i] == i * 3 + peer, "long put element %ld: %ld", i, base[8 + i]);
  CHECK(base[8 + LONG_ELEMS - 1] == (LONG_ELEMS - 1) * 3 + peer, "long put, last element");
  free(big);

  MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, win);
  MPI_Request r;
  long w = 200 + rank;
  MPI_Rput(&w, 1, MPI_LONG, peer, 4, 1, MPI_LONG, win, &r);
  MPI_Wait(&r, MPI_STATUS_IGNORE);
  long old = -1, swapped = -1, want = 10 * peer + 6, new_value = 600 + rank;
  MPI_Fetch_and_op(&one, &old, MPI_LONG, peer, 5, MPI_SUM, win);
  MPI_Compare_and_swap(&new_value, &want, &swapped, MPI_LONG, peer, 6, win);
  MPI_Win_flush(peer, win);
  CHECK(old == 10 * peer + 5, "fetch_and_op: %ld", old);
  CHECK(swapped == 10 * peer + 6, "compare_and_swap: %ld", swapped);
  /* MPI_PROC_NULL and zero-size calls on a window across nodes: no effect, no error. */
  MPI_Put(&w, 1, MPI_LONG, MPI_PROC_NULL, 0, 1, MPI_LONG, win);
  MPI_Get(&got, 1, MPI_LONG, MPI_PROC_NULL, 0, 1, MPI_LONG, win);
  MPI_Fetch_and_op(&one, &old, MPI_LONG, MPI_PROC_NULL, 5, MPI_SUM, win);
  MPI_Compare_and_swap(&new_value, &want, &swapped, MPI_LONG, MPI_PROC_NULL, 6, win);
  MPI_Accumulate(NULL, 0, MPI_INT, peer, 0, 0, MPI_DOUBLE, MPI_SUM, win);
  MPI_Rget(&got, 1, MPI_LONG, MPI_PROC_NULL, 0, 1, MPI_LONG, win, &r);
  MPI_Wait(&r, MPI_STATUS_IGNORE);
  MPI_Win_flush(MPI_PROC_NULL, win);
  MPI_Win_unlock(peer, win);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(base[4] == 200 + peer, "rput: %ld", base[4]);
  CHECK(base[5] == 10 * rank + 5 + 1, "fetch_and_op at the target: %ld", base[5]);
  CHECK(base[6] == 600 + peer, "compare_and_swap at the target: %ld", base[6]);

  MPI_Aint *size;
  int flag = 0;
  MPI_Win_get_attr(win, MPI_WIN_SIZE, &size, &flag);
  CHECK(flag && *size == (8 + LONG_ELEMS) * (MPI_Aint)sizeof(long), "MPI_WIN_SIZE");
  MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
  int cls = 0, rc = MPI_Put(&v, 1, MPI_LONG, 7, 0, 1, MPI_LONG, win);
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_RANK, "a put to rank 7: class %d", cls);

  /* A shared window cannot span nodes. */
  long *shared_base;
  MPI_Win shared = MPI_WIN_NULL;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  rc = MPI_Win_allocate_shared(sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD,
                               &shared_base, &shared);
  MPI_Error_class(rc, &cls);
  CHECK(rc != MPI_SUCCESS && cls == MPI_ERR_RMA_SHARED, "allocate_shared across nodes: %d",
        cls);

  /* Dynamic windows across nodes: attach, addresses, put, get. */
  MPI_Win dyn;
  MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &dyn);
  CHECK(ours(dyn), "a dynamic window across nodes is not onesided's");
  long *region = calloc(4, sizeof(long));
  region[2] = 70 + rank;
  MPI_Win_attach(dyn, region, 4 * sizeof(long));
  MPI_Aint mine_addr, addrs[2];
  MPI_Get_address(region, &mine_addr);
  MPI_Allgather(&mine_addr, 1, MPI_AINT, addrs, 1, MPI_AINT, MPI_COMM_WORLD);
  MPI_Win_lock_all(0, dyn);
  MPI_Put(&v, 1, MPI_LONG, peer, addrs[peer] + sizeof(long), 1, MPI_LONG, dyn);
  MPI_Get(&got, 1, MPI_LONG, peer, addrs[peer] + 2 * sizeof(long), 1, MPI_LONG, dyn);
  MPI_Win_unlock_all(dyn);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(region[1] == 100 + peer, "dynamic put: %ld", region[1]);
  CHECK(got == 70 + peer, "dynamic get: %ld", got);
  MPI_Win_detach(dyn, region);
  MPI_Win_free(&dyn);
  free(region);

  /* A target that waits inside the host MPI's blocking calls, or polls its test calls in
   * a loop of its own, keeps serving the window: rank 1 locks rank 0 and accumulates (each
   * flushed), then releases rank 0 from one call after another. scripts/cabi.sh runs this
   * program with ONESIDED_PROGRESS=none too (no progress thread): there only the waiting
   * or polled call itself can serve. */
  enum {
    RECV, WAIT, WAITALL, PROBE, TEST, TESTALL, TESTANY, TESTSOME, GET_STATUS, IPROBE, IMPROBE,
    MPROBE, RECV_C, SENDRECV, BARRIER, BCAST, ALLREDUCE, BCAST_C, ALLREDUCE_C, CALLS
  };
  /* The _c forms are MPI-4's large-count calls (mpi4py's); under an MPI-3 header (Open MPI)
   * check.h maps them to the int forms. */
  const char *names[CALLS] = {"MPI_Recv",       "MPI_Wait",      "MPI_Waitall",
                              "MPI_Probe",      "MPI_Test",      "MPI_Testall",
                              "MPI_Testany",    "MPI_Testsome",  "MPI_Request_get_status",
                              "MPI_Iprobe",     "MPI_Improbe",   "MPI_Mprobe",
                              "MPI_Recv_c",     "MPI_Sendrecv",  "MPI_Barrier",
                              "MPI_Bcast",      "MPI_Allreduce", "MPI_Bcast_c",
                              "MPI_Allreduce_c"};
  MPI_Barrier(MPI_COMM_WORLD);
  long expect = 7; /* base[7] at rank 0, as set above */
  for (int c = 0; c < CALLS; c++) {
    long add = c + 1, token = c, out = -1, before = -1;
    if (rank == 1) {
      MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
      for (int k = 0; k < 20; k++) {
        MPI_Accumulate(&add, 1, MPI_LONG, 0, 7, 1, MPI_LONG, MPI_SUM, win);
        MPI_Win_flush(0, win);
      }
      MPI_Fetch_and_op(&add, &before, MPI_LONG, 0, 7, MPI_SUM, win);
      MPI_Win_unlock(0, win);
      CHECK(before == expect + 20 * add, "%s: fetch_and_op read %ld, not %ld", names[c], before,
            expect + 20 * add);
    }
    expect += 21 * add;
    MPI_Request reqs[2];
    switch (c) {
    case RECV:
    case WAIT:
    case WAITALL:
    case PROBE:
    case TEST:
    case TESTALL:
    case TESTANY:
    case TESTSOME:
    case GET_STATUS:
    case IPROBE:
    case IMPROBE:
    case MPROBE:
    case RECV_C:
      if (rank == 1) {
        MPI_Send(&token, 1, MPI_LONG, 0, c, MPI_COMM_WORLD);
      } else if (c == IPROBE || c == IMPROBE) {
        int flag = 0;
        MPI_Message msg = MPI_MESSAGE_NULL;
        while (!flag) {
          if (c == IPROBE) MPI_Iprobe(1, c, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
          else MPI_Improbe(1, c, MPI_COMM_WORLD, &flag, &msg, MPI_STATUS_IGNORE);
        }
        if (c == IPROBE) MPI_Recv(&out, 1, MPI_LONG, 1, c, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        else MPI_Mrecv(&out, 1, MPI_LONG, &msg, MPI_STATUS_IGNORE);
      } else if (c >= TEST && c <= GET_STATUS) {
        /* The program's own loop over a test call. */
        int flag = 0, index = -1, outcount = 0, indices[1];
        MPI_Status sts[1];
        MPI_Irecv(&out, 1, MPI_LONG, 1, c, MPI_COMM_WORLD, &reqs[0]);
        while (!flag) {
          if (c == TEST) MPI_Test(&reqs[0], &flag, MPI_STATUS_IGNORE);
          else if (c == TESTALL) MPI_Testall(1, reqs, &flag, sts);
          else if (c == TESTANY) MPI_Testany(1, reqs, &index, &flag, MPI_STATUS_IGNORE);
          else if (c == TESTSOME) {
            MPI_Testsome(1, reqs, &outcount, indices, sts);
            flag = outcount == 1;
          } else MPI_Request_get_status(reqs[0], &flag, MPI_STATUS_IGNORE);
        }
        if (c == GET_STATUS) MPI_Wait(&reqs[0], MPI_STATUS_IGNORE);
      } else if (c == RECV) {
        MPI_Recv(&out, 1, MPI_LONG, 1, c, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (c == RECV_C) {
        MPI_Recv_c(&out, 1, MPI_LONG, 1, c, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (c == MPROBE) {
        MPI_Message msg = MPI_MESSAGE_NULL;
        MPI_Status st;
        MPI_Mprobe(1, c, MPI_COMM_WORLD, &msg, &st);
        CHECK(st.MPI_TAG == c, "MPI_Mprobe: tag %d", st.MPI_TAG);
        MPI_Mrecv(&out, 1, MPI_LONG, &msg, MPI_STATUS_IGNORE);
      } else if (c == PROBE) {
        MPI_Status st;
        MPI_Probe(1, c, MPI_COMM_WORLD, &st);
        CHECK(st.MPI_TAG == c, "MPI_Probe: tag %d", st.MPI_TAG);
        MPI_Recv(&out, 1, MPI_LONG, 1, c, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Irecv(&out, 1, MPI_LONG, 1, c, MPI_COMM_WORLD, &reqs[0]);
        if (c == WAIT) MPI_Wait(&reqs[0], MPI_STATUS_IGNORE);
        else {
          MPI_Status sts[2];
          MPI_Waitall(1, reqs, sts);
          CHECK(sts[0].MPI_SOURCE == 1, "MPI_Waitall: source %d", sts[0].MPI_SOURCE);
        }
      }
      if (rank == 0) CHECK(out == c, "%s: received %ld", names[c], out);
      break;
    case SENDRECV: {
      MPI_Status st;
      MPI_Sendrecv(&token, 1, MPI_LONG, peer, c, &out, 1, MPI_LONG, peer, c, MPI_COMM_WORLD, &st);
      CHECK(out == c && st.MPI_SOURCE == peer, "MPI_Sendrecv: %ld from %d", out, st.MPI_SOURCE);
      break;
    }
    case BARRIER:
      MPI_Barrier(MPI_COMM_WORLD);
      break;
    case BCAST:
    case BCAST_C:
      out = rank == 1 ? token : -1;
      if (c == BCAST) MPI_Bcast(&out, 1, MPI_LONG, 1, MPI_COMM_WORLD);
      else MPI_Bcast_c(&out, 1, MPI_LONG, 1, MPI_COMM_WORLD);
      CHECK(out == c, "%s: %ld", names[c], out);
      break;
    case ALLREDUCE:
    case ALLREDUCE_C:
      if (c == ALLREDUCE) MPI_Allreduce(&token, &out, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
      else MPI_Allreduce_c(&token, &out, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
      CHECK(out == 2 * c, "%s: %ld", names[c], out);
      break;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) CHECK(base[7] == expect, "accumulated while waiting: %ld, not %ld", base[7], expect);

  /* An MPI_Sendrecv whose send fails (a rank outside the communicator, errors returned)
   * leaves no receive posted: the peer's next message goes to the next receive. */
  {
    long stale = -5, fresh = -1, token = 4242;
    rc = MPI_Sendrecv(&token, 1, MPI_LONG, 99, 50, &stale, 1, MPI_LONG, peer, 50,
                      MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Error_class(rc, &cls);
    CHECK(rc != MPI_SUCCESS && cls == MPI_ERR_RANK, "MPI_Sendrecv to rank 99: class %d", cls);
    MPI_Sendrecv(&token, 1, MPI_LONG, peer, 50, &fresh, 1, MPI_LONG, peer, 50, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    CHECK(fresh == 4242 && stale == -5, "after a failed MPI_Sendrecv: received %ld, left %ld",
          fresh, stale);
  }

  MPI_Win_free(&win);
  CHECK(win == MPI_WIN_NULL, "free");
  if (rank == 0) printf("across: ok\n");
  MPI_Finalize();
  return 0;
}
