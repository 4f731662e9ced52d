! An unchanged Fortran program (use mpi) under the preloaded C ABI, 2 ranks: a window over
! an array, fence epochs with put and accumulate, a passive-target fetch_and_op, and the
! window attributes (through MPII_Win_get_attr). Stops with a non-zero code on the first
! wrong value, and when the window is not onesided's (handle bits 31-26 = 0x18).
program win_mpi
  use mpi
  implicit none
  integer :: ierr, rank, peer, win, flag_unit
  integer(kind=MPI_ADDRESS_KIND) :: winsize, disp, attr
  integer(kind=8) :: buf(4), v, one, old
  logical :: flag

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  peer = 1 - rank
  buf = 0
  winsize = 32
  call MPI_Win_create(buf, winsize, 8, MPI_INFO_NULL, MPI_COMM_WORLD, win, ierr)
  if (ishft(win, -26) /= 24) call fail('the window is not onesided''s')

  call MPI_Win_fence(0, win, ierr)
  v = rank + 5
  disp = 1
  call MPI_Put(v, 1, MPI_INTEGER8, peer, disp, 1, MPI_INTEGER8, win, ierr)
  disp = 2
  call MPI_Accumulate(v, 1, MPI_INTEGER8, peer, disp, 1, MPI_INTEGER8, MPI_SUM, win, ierr)
  call MPI_Win_fence(0, win, ierr)
  if (buf(2) /= peer + 5 .or. buf(3) /= peer + 5) call fail('fence put/accumulate')

  call MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win, ierr)
  one = 1
  disp = 3
  call MPI_Fetch_and_op(one, old, MPI_INTEGER8, 0, disp, MPI_SUM, win, ierr)
  call MPI_Win_unlock(0, win, ierr)
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  if (rank == 0 .and. buf(4) /= 2) call fail('fetch_and_op total')

  call MPI_Win_get_attr(win, MPI_WIN_SIZE, attr, flag, ierr)
  if (.not. flag .or. attr /= 32) call fail('MPI_WIN_SIZE')
  call MPI_Win_get_attr(win, MPI_WIN_DISP_UNIT, attr, flag, ierr)
  flag_unit = int(attr)
  if (.not. flag .or. flag_unit /= 8) call fail('MPI_WIN_DISP_UNIT')
  call MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, attr, flag, ierr)
  if (.not. flag .or. attr /= MPI_WIN_FLAVOR_CREATE) call fail('MPI_WIN_CREATE_FLAVOR')

  call MPI_Win_free(win, ierr)
  if (rank == 0) print '(a)', 'fortran use mpi: ok'
  call MPI_Finalize(ierr)
contains
  subroutine fail(what)
    character(len=*), intent(in) :: what
    integer :: e
    print '(a,i0,a,a)', 'rank ', rank, ': ', what
    call MPI_Abort(MPI_COMM_WORLD, 1, e)
  end subroutine fail
end program win_mpi
