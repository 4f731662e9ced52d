// Build and run: cc -O2 scripts/locked-cost.c -o /tmp/locked-cost && /tmp/locked-cost
// Cost of an uncontended locked instruction on this machine: a loop of N lock-prefixed
// compare-and-swaps (and of swaps) on one private cache line, against the same loop with
// a plain store, median of several repetitions.
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return (x > y) - (x < y); }
int main(void) {
  enum { N = 20000000, R = 9 };
  static _Alignas(64) _Atomic uint64_t w;
  double cas[R], xchg[R], add[R], plain[R];
  for (int r = 0; r < R; r++) {
    double t = now();
    for (uint64_t i = 0; i < N; i++) { uint64_t e = i; atomic_compare_exchange_strong_explicit(&w, &e, i + 1, memory_order_acquire, memory_order_relaxed); }
    cas[r] = (now() - t) / N * 1e9;
    t = now();
    for (uint64_t i = 0; i < N; i++) atomic_exchange_explicit(&w, i, memory_order_relaxed);
    xchg[r] = (now() - t) / N * 1e9;
    t = now();
    for (uint64_t i = 0; i < N; i++) atomic_fetch_add_explicit(&w, 1, memory_order_release);
    add[r] = (now() - t) / N * 1e9;
    t = now();
    for (uint64_t i = 0; i < N; i++) { atomic_store_explicit(&w, i, memory_order_release); __asm__ volatile("" ::: "memory"); }
    plain[r] = (now() - t) / N * 1e9;
  }
  qsort(cas, R, sizeof(double), cmp); qsort(xchg, R, sizeof(double), cmp);
  qsort(add, R, sizeof(double), cmp); qsort(plain, R, sizeof(double), cmp);
  printf("ns per op, median of %d x %d: lock cmpxchg %.2f  xchg %.2f  lock xadd %.2f  plain store %.2f\n", R, N, cas[R/2], xchg[R/2], add[R/2], plain[R/2]);
  return 0;
}
