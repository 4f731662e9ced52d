"""An unchanged mpi4py program under the preloaded C ABI (2 or more ranks): an
MPI.Win.Allocate window, lock_all, put to every rank, flush, accumulate into rank 0, checked.
Exits non-zero on a wrong value or when the window is not onesided's (its info has
"onesided" = "true")."""
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
win = MPI.Win.Allocate(8 * (size + 1), 8, comm=comm)
info = win.Get_info()
ours = info.Get("onesided")
info.Free()
if ours != "true":
    print(f"rank {rank}: the window is not onesided's (info onesided={ours!r})", flush=True)
    comm.Abort(1)
mem = memoryview(win).cast("q")
for i in range(size + 1):
    mem[i] = -1
comm.Barrier()
win.Lock_all()
for target in range(size):
    value = bytearray((100 * rank + target).to_bytes(8, "little", signed=True))
    win.Put([value, MPI.INT64_T], target, target=rank)
win.Flush_all()
one = bytearray((1).to_bytes(8, "little", signed=True))
win.Accumulate([one, MPI.INT64_T], 0, target=size, op=MPI.SUM)
win.Flush(0)
win.Unlock_all()
comm.Barrier()
expected = [100 * r + rank for r in range(size)]
got, total = list(mem[:size]), mem[size]
mem.release()
ok = got == expected and (rank != 0 or total == -1 + size)
win.Free()
print(f"rank {rank}: {'ok' if ok else 'WRONG'} puts {got} accumulated {total}", flush=True)
sys.exit(0 if ok else 1)
