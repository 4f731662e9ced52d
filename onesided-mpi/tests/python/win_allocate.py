"""An unchanged mpi4py program under the preloaded C ABI (2 or more ranks): an
MPI.Win.Allocate window, lock_all, put to every rank, flush, accumulate into rank 0, checked.
Exits non-zero on a wrong value or when the window is not onesided's (its info has
"onesided" = "true"). With an argument, also when the MPI library's version text does not
contain it, spaces aside (a build of mpi4py against another MPI than the one meant). The window's error
handler is got, set and freed as mpi4py's own testGetSetErrhandler does."""
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
library = " ".join(MPI.Get_library_version().splitlines()[0].split())
if len(sys.argv) > 1 and " ".join(sys.argv[1].split()) not in library:
    print(f"rank {rank}: mpi4py runs on {library!r}, not {sys.argv[1]!r}", flush=True)
    comm.Abort(1)
win = MPI.Win.Allocate(8 * (size + 1), 8, comm=comm)
info = win.Get_info()
ours = info.Get("onesided")
info.Free()
if ours != "true":
    print(f"rank {rank}: the window is not onesided's (info onesided={ours!r})", flush=True)
    comm.Abort(1)
for handler in [MPI.ERRORS_RETURN, MPI.ERRORS_ARE_FATAL] * 2:
    before = win.Get_errhandler()
    win.Set_errhandler(handler)
    now = win.Get_errhandler()
    assert now == handler
    now.Free()
    win.Set_errhandler(before)
    before.Free()
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
