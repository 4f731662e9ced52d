! An unchanged Fortran program (use mpi) under the preloaded C ABI, 2 ranks: a window over
! an array, fence epochs with put and accumulate, a passive-target fetch_and_op, and the
! window attributes (through MPII_Win_get_attr); Fortran's own types in accumulates
! (2REAL with MAXLOC, LOGICAL with LOR, DOUBLE COMPLEX with SUM). Stops with a non-zero code on the first
! wrong value, and when the window is not onesided's (its info has onesided = true).
program win_mpi
  use mpi
  implicit none
  integer :: ierr, rank, peer, win, flag_unit
  integer(kind=MPI_ADDRESS_KIND) :: winsize, disp, attr
  ! Window memory is written by other processes between MPI calls: volatile, so that the
  ! compiler reads it after each synchronization (MPI-4.1 19.1.17; MPI_F_SYNC_REG would do).
  integer(kind=8), volatile :: buf(4)
  integer(kind=8) :: v, one, old
  logical :: flag
  integer :: win2
  real, volatile :: pairs(2)
  real :: mine(2)
  logical, volatile :: truth(1)
  logical :: said(1)
  double complex, volatile :: z(1)
  double complex :: dz(1)

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  peer = 1 - rank
  buf = 0
  winsize = 32
  call MPI_Win_create(buf, winsize, 8, MPI_INFO_NULL, MPI_COMM_WORLD, win, ierr)
  if (.not. onesided_window(win)) call fail('the window is not onesided''s')

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

  ! Fortran's types: both ranks accumulate into rank 0's window at once.
  pairs = (/ -1.0, 99.0 /)
  truth = .false.
  z = (0.0d0, 0.0d0)
  winsize = 8
  call MPI_Win_create(pairs, winsize, 8, MPI_INFO_NULL, MPI_COMM_WORLD, win, ierr)
  winsize = 4
  call MPI_Win_create(truth, winsize, 4, MPI_INFO_NULL, MPI_COMM_WORLD, win2, ierr)
  call MPI_Win_lock_all(0, win, ierr)
  call MPI_Win_lock_all(0, win2, ierr)
  mine = (/ 7.0, real(rank) /)
  disp = 0
  call MPI_Accumulate(mine, 1, MPI_2REAL, 0, disp, 1, MPI_2REAL, MPI_MAXLOC, win, ierr)
  said = (rank == 1)
  call MPI_Accumulate(said, 1, MPI_LOGICAL, 0, disp, 1, MPI_LOGICAL, MPI_LOR, win2, ierr)
  call MPI_Win_unlock_all(win, ierr)
  call MPI_Win_unlock_all(win2, ierr)
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  if (rank == 0 .and. (pairs(1) /= 7.0 .or. pairs(2) /= 0.0)) call fail('2REAL maxloc')
  if (rank == 0 .and. .not. truth(1)) call fail('LOGICAL lor')
  call MPI_Win_free(win, ierr)
  call MPI_Win_free(win2, ierr)
  winsize = 16
  call MPI_Win_create(z, winsize, 16, MPI_INFO_NULL, MPI_COMM_WORLD, win, ierr)
  call MPI_Win_fence(0, win, ierr)
  dz = (1.5d0, -2.0d0)
  call MPI_Accumulate(dz, 1, MPI_DOUBLE_COMPLEX, 0, disp, 1, MPI_DOUBLE_COMPLEX, MPI_SUM, &
                      win, ierr)
  call MPI_Win_fence(0, win, ierr)
  if (rank == 0 .and. z(1) /= (3.0d0, -4.0d0)) call fail('DOUBLE COMPLEX sum')
  call MPI_Win_free(win, ierr)
  if (rank == 0) print '(a)', 'fortran use mpi: ok'
  call MPI_Finalize(ierr)
contains
  logical function onesided_window(w)
    integer, intent(in) :: w
    integer :: info, e
    character(len=16) :: value
    logical :: found
    call MPI_Win_get_info(w, info, e)
    value = ' '
    call MPI_Info_get(info, 'onesided', 15, value, found, e)
    call MPI_Info_free(info, e)
    onesided_window = found .and. value(1:15) == 'true'
  end function onesided_window

  subroutine fail(what)
    character(len=*), intent(in) :: what
    integer :: e
    print '(a,i0,a,a)', 'rank ', rank, ': ', what
    call MPI_Abort(MPI_COMM_WORLD, 1, e)
  end subroutine fail
end program win_mpi
