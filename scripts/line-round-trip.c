// Build and run: cc -O2 -pthread scripts/line-round-trip.c -o /tmp/line-round-trip && /tmp/line-round-trip
// Round trip of one cache line between two threads on two cores: A writes i, B waits for i
// and writes -i-1... here: B echoes; N round trips, median of R.
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
enum { N = 1000000, R = 7 };
static _Alignas(64) _Atomic uint64_t ping;
static _Alignas(64) _Atomic uint64_t pong;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void *echo(void *arg) {
  (void)arg;
  for (uint64_t i = 1; i <= (uint64_t)N * R; i++) {
    while (atomic_load_explicit(&ping, memory_order_acquire) != i) __builtin_ia32_pause();
    atomic_store_explicit(&pong, i, memory_order_release);
  }
  return NULL;
}
static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return (x > y) - (x < y); }
int main(void) {
  pthread_t t; pthread_create(&t, NULL, echo, NULL);
  double rt[R]; uint64_t i = 0;
  for (int r = 0; r < R; r++) {
    double s = now();
    for (int k = 0; k < N; k++) {
      i++;
      atomic_store_explicit(&ping, i, memory_order_release);
      while (atomic_load_explicit(&pong, memory_order_acquire) != i) __builtin_ia32_pause();
    }
    rt[r] = (now() - s) / N * 1e9;
  }
  pthread_join(t, NULL);
  qsort(rt, R, sizeof(double), cmp);
  printf("cache-line round trip between two threads: median %.0f ns (min %.0f, max %.0f)\n", rt[R/2], rt[0], rt[R-1]);
  return 0;
}
