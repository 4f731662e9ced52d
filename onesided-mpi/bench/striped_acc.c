/* Accumulates the CPU has no atomic for, and short runs atomic as a whole, one call after
 * another from the last rank to rank 0: MPI_DOUBLE_INT pairs (MPI_REPLACE, MPI_MAXLOC,
 * MPI_Get_accumulate and MPI_Fetch_and_op with MPI_NO_OP) and a 16-byte MPI_BYTE run
 * (replace, and read with MPI_Get_accumulate(MPI_NO_OP)) — the MPI-3 linked-list pattern.
 * Across nodes each is an update under the target's lock stripes (onesided's
 * `Wire::post_striped`: one round trip, where taking the stripes, reading, writing and
 * releasing take three).
 *
 *   mpicc -O2 -o striped_acc striped_acc.c
 *   ONESIDED_NODES=2 LD_PRELOAD=.../libonesided_mpi.so mpiexec -n 2 ./striped_acc [COUNT [ITERS]]
 *
 * COUNT pairs per pair call (default 1, at most 100), ITERS calls per kind (default 2000),
 * all inside one lock_all epoch with one flush at the end of each kind; one timer around
 * each kind's loop. Prints "KIND count C: X us/op" per kind, then checks what the last
 * calls left at the target (exit status 1 when it is wrong). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    double a;
    int b;
} pair;

enum { PAIRS = 100, BYTES_AT = 1600 };

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int count = argc > 1 ? atoi(argv[1]) : 1;
    int iters = argc > 2 ? atoi(argv[2]) : 2000;
    if (count < 1 || count > PAIRS || iters < 1) {
        fprintf(stderr, "usage: striped_acc [COUNT (1..%d) [ITERS]]\n", PAIRS);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    pair *buf;
    MPI_Win win;
    MPI_Win_allocate(sizeof(pair) * 2 * PAIRS, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &buf, &win);
    for (int i = 0; i < 2 * PAIRS; i++) {
        buf[i].a = 0;
        buf[i].b = 0;
    }
    pair orig[PAIRS], res[PAIRS];
    unsigned char bytes[16], seen[16];
    int errors = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock_all(0, win);
    if (rank == n - 1) {
        const char *names[] = { "acc replace", "gacc no_op", "acc maxloc", "fop no_op",
            "acc 16 B replace", "gacc 16 B no_op" };
        for (int kind = 0; kind < 6; kind++) {
            double t0 = MPI_Wtime();
            for (int i = 0; i < iters; i++) {
                for (int k = 0; k < count; k++) {
                    orig[k].a = i + k;
                    orig[k].b = i;
                }
                for (int k = 0; k < 16; k++)
                    bytes[k] = (unsigned char) i;
                switch (kind) {
                case 0:
                    MPI_Accumulate(orig, count, MPI_DOUBLE_INT, 0, 0, count, MPI_DOUBLE_INT,
                                   MPI_REPLACE, win);
                    break;
                case 1:
                    MPI_Get_accumulate(orig, count, MPI_DOUBLE_INT, res, count, MPI_DOUBLE_INT,
                                       0, 0, count, MPI_DOUBLE_INT, MPI_NO_OP, win);
                    break;
                case 2:
                    MPI_Accumulate(orig, count, MPI_DOUBLE_INT, 0, 0, count, MPI_DOUBLE_INT,
                                   MPI_MAXLOC, win);
                    break;
                case 3:
                    MPI_Fetch_and_op(orig, res, MPI_DOUBLE_INT, 0, 0, MPI_NO_OP, win);
                    break;
                case 4:
                    MPI_Accumulate(bytes, 16, MPI_BYTE, 0, BYTES_AT, 16, MPI_BYTE, MPI_REPLACE,
                                   win);
                    break;
                default:
                    MPI_Get_accumulate(bytes, 16, MPI_BYTE, seen, 16, MPI_BYTE, 0, BYTES_AT, 16,
                                       MPI_BYTE, MPI_NO_OP, win);
                }
            }
            MPI_Win_flush(0, win);
            double t = MPI_Wtime() - t0;
            printf("%s count %d: %.2f us/op\n", names[kind], count, t / iters * 1e6);
        }
        /* The MAXLOC pass left the last (largest) values: element k holds iters-1+k. */
        MPI_Get_accumulate(orig, count, MPI_DOUBLE_INT, res, count, MPI_DOUBLE_INT, 0, 0, count,
                           MPI_DOUBLE_INT, MPI_NO_OP, win);
        MPI_Win_flush(0, win);
        for (int k = 0; k < count; k++)
            if (res[k].a != iters - 1 + k || res[k].b != iters - 1)
                errors++;
        for (int k = 0; k < 16; k++)
            if (seen[k] != (unsigned char) (iters - 1))
                errors++;
        printf("check: %s\n", errors ? "FAIL" : "ok");
    }
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_free(&win);
    MPI_Finalize();
    return errors ? 1 : 0;
}
