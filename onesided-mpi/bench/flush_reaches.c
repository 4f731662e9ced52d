/* Does MPI_Win_flush complete a put at the target? MPI-4.1 §12.5.4: "The operations are
 * completed both at the origin and at the target." An MPI whose network progresses only
 * inside its calls (manual progress, as every libfabric provider here and UCX's tcp) can
 * complete a put at the target only while the target calls into it — or through a
 * progress thread of its own. So: the target stops calling MPI, the origin puts 8 bytes,
 * flushes, and says over a channel outside MPI (a shared file) that its flush returned;
 * the target, still outside MPI, then looks at its window memory.
 *
 *   mpicc -O2 -o flush_reaches flush_reaches.c
 *   mpiexec -n 2 ./flush_reaches [PATIENCE_MS [TRIALS]]   # default 200 ms, 10 trials
 *
 * Prints one line: "flush returned after X ms (median of N trials); the target held the
 * value K of N times" — K < N means a flush returned before its put reached the target's
 * memory (complete at the origin only; a provider's own progress thread may land it a
 * little later, so K can vary from run to run); a flush that waits for the target to call
 * MPI again returns only after the target's patience ran out (X ≥ PATIENCE_MS). The target
 * spins on the channel (yielding), so it looks within microseconds of the flush's return.
 * Exit status 0 in every case: this is a probe, not a test of the MPI. Any ABI. */
#include <mpi.h>
#include <sched.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) fprintf(stderr, "flush_reaches: run with 2 ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  double patience = argc > 1 ? atof(argv[1]) : 200.0;
  int trials = argc > 2 ? atoi(argv[2]) : 10;
  if (trials < 1 || trials > 1000) trials = 10;

  /* The channel outside MPI: two words in a file both ranks map (both run on this
   * machine; rank 0 names it). said[0]: the trial whose flush returned (origin);
   * said[1]: 2 * trial + 1 if the target held that trial's value, 2 * trial if not. */
  char path[64] = {0};
  if (rank == 0) snprintf(path, sizeof path, "/tmp/flush_reaches.%ld", (long)getpid());
  MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
  int fd = open(path, O_RDWR | O_CREAT, 0600);
  if (fd < 0 || ftruncate(fd, 64) != 0) {
    perror("flush_reaches: channel");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  _Atomic uint64_t *said = mmap(NULL, 64, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (said == MAP_FAILED) {
    perror("flush_reaches: mmap");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) unlink(path);

  uint64_t *mem;
  MPI_Win win;
  MPI_Win_allocate(8, 8, MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win);
  *mem = 0;
  MPI_Win_lock_all(0, win);
  /* One put + flush first, so that connections exist before the target leaves MPI. */
  if (rank == 0) {
    uint64_t zero = 0;
    MPI_Put(&zero, 1, MPI_UINT64_T, 1, 0, 1, MPI_UINT64_T, win);
    MPI_Win_flush(1, win);
  }
  double took[1000];
  int held = 0;
  for (int t = 1; t <= trials; t++) {
    uint64_t value = 0x5eed000000000000ull + (uint64_t)t;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      double start = now_ms();
      MPI_Put(&value, 1, MPI_UINT64_T, 1, 0, 1, MPI_UINT64_T, win);
      MPI_Win_flush(1, win);
      took[t - 1] = now_ms() - start;
      atomic_store(&said[0], (uint64_t)t);
      while (atomic_load(&said[1]) < 2 * (uint64_t)t) sched_yield();
      held += atomic_load(&said[1]) == 2 * (uint64_t)t + 1;
    } else {
      /* Outside MPI until the origin says its flush returned, or the patience ran out. */
      double start = now_ms();
      while (atomic_load(&said[0]) < (uint64_t)t && now_ms() - start < patience)
        sched_yield();
      while (atomic_load(&said[0]) < (uint64_t)t) {
        /* Patience ran out: let the MPI progress (the flush may wait for it). MPI_Iprobe
         * drives MPICH's progress; MPI_Win_sync need not. */
        int flag;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
      }
      atomic_thread_fence(memory_order_acquire);
      uint64_t seen = *(volatile uint64_t *)mem;
      atomic_store(&said[1], 2 * (uint64_t)t + (seen == value));
    }
  }
  if (rank == 0) {
    qsort(took, trials, sizeof took[0], by_value);
    printf("flush returned after %.3f ms (median of %d trials); the target held the value %d "
           "of %d times\n",
           took[trials / 2], trials, held, trials);
  }
  MPI_Win_unlock_all(win);
  MPI_Win_free(&win);
  munmap((void *)said, 64);
  close(fd);
  MPI_Finalize();
  return 0;
}
