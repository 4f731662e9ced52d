! An unchanged Fortran 2008 program (use mpi_f08, which calls PMPI_* directly for most
! routines) under the preloaded C ABI, 2 ranks: MPI_Win_allocate, fence, put, get, free.
! Stops with a non-zero code on the first wrong value or when the window is not onesided's.
program win_f08
  use mpi_f08
  use, intrinsic :: iso_c_binding
  implicit none
  integer :: rank, peer
  type(MPI_Win) :: win
  type(c_ptr) :: base
  integer(c_int), pointer :: mem(:)
  integer(kind=MPI_ADDRESS_KIND) :: winsize, disp
  integer(c_int) :: v, got

  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  peer = 1 - rank
  winsize = 16
  call MPI_Win_allocate(winsize, 4, MPI_INFO_NULL, MPI_COMM_WORLD, base, win)
  if (.not. onesided_window(win)) call fail('the window is not onesided''s')
  call c_f_pointer(base, mem, [4])
  mem = 0
  call MPI_Win_fence(0, win)
  v = rank + 70
  disp = 2
  call MPI_Put(v, 1, MPI_INTEGER, peer, disp, 1, MPI_INTEGER, win)
  call MPI_Win_fence(0, win)
  if (mem(3) /= peer + 70) call fail('put')
  call MPI_Get(got, 1, MPI_INTEGER, peer, disp, 1, MPI_INTEGER, win)
  call MPI_Win_fence(0, win)
  if (got /= rank + 70) call fail('get')
  call MPI_Win_free(win)
  if (rank == 0) print '(a)', 'fortran use mpi_f08: ok'
  call MPI_Finalize()
contains
  logical function onesided_window(w)
    type(MPI_Win), intent(in) :: w
    type(MPI_Info) :: info
    character(len=16) :: value
    logical :: found
    call MPI_Win_get_info(w, info)
    value = ' '
    call MPI_Info_get(info, 'onesided', 15, value, found)
    call MPI_Info_free(info)
    onesided_window = found .and. value(1:15) == 'true'
  end function onesided_window

  subroutine fail(what)
    character(len=*), intent(in) :: what
    print '(a,i0,a,a)', 'rank ', rank, ': ', what
    call MPI_Abort(MPI_COMM_WORLD, 1)
  end subroutine fail
end program win_f08
