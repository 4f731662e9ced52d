//! [`Comm`]: the typed collectives of a group of processes over a [`Bootstrap`].

use std::sync::Arc;

use bytemuck::Pod;

use crate::bootstrap::call::Call;
use crate::bootstrap::roster::PeerWatch;
use crate::bootstrap::Bootstrap;
use crate::error::{Error, Result};

/// Reduction operators of [`Comm::allreduce`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// Sum of all contributions.
    Sum,
    /// Minimum of all contributions.
    Min,
    /// Maximum of all contributions.
    Max,
}

/// Element types [`Comm::allreduce`] can reduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceType {
    /// `i32`
    I32,
    /// `i64`
    I64,
    /// `u32`
    U32,
    /// `u64`
    U64,
    /// `usize`
    Usize,
    /// `f32`
    F32,
    /// `f64`
    F64,
}

/// Types that [`Comm::allreduce`] accepts.
pub trait Reducible: Pod {
    /// The runtime tag of the type.
    const TYPE: ReduceType;
}

macro_rules! reducible {
    ($($t:ty => $tag:ident),*) => {$(
        impl Reducible for $t { const TYPE: ReduceType = ReduceType::$tag; }
    )*};
}
reducible!(i32 => I32, i64 => I64, u32 => U32, u64 => U64, usize => Usize, f32 => F32, f64 => F64);

/// A group of processes that communicate: the handle window creation takes.
///
/// `Comm` wraps a [`Bootstrap`] and adds typed collectives. Cloning is cheap.
///
/// ```
/// # onesided::testing::run(2, |_| {
/// let universe = onesided::init()?;
/// let world = universe.world();
/// let sizes = world.allgather(&[world.rank() as u64 * 10])?;
/// assert_eq!(sizes.len(), world.size());
/// # onesided::init()?.world().barrier()?;
/// # Ok(())
/// # });
/// ```
#[derive(Clone, Debug)]
pub struct Comm {
    boot: Arc<dyn Bootstrap>,
}

impl Comm {
    /// A communicator over all processes of `boot`.
    pub fn new(boot: Arc<dyn Bootstrap>) -> Self {
        Comm { boot }
    }

    /// Collective over the host-MPI communicator `comm`: a communicator of the same processes
    /// in the same order, over which windows can be created (feature `mpi`).
    ///
    /// ```
    /// # use mpi::traits::*;
    /// let (mpi_universe, _) = mpi::initialize_with_threading(mpi::Threading::Serialized).unwrap();
    /// let world = mpi_universe.world();
    /// let evens = world.split_by_color(mpi::topology::Color::with_value(world.rank() % 2));
    /// let comm = onesided::Comm::from_mpi(&evens.unwrap())?;
    /// let win = onesided::Window::<u8>::allocate(&comm, 64)?;
    /// win.free()?;
    /// # Ok::<(), onesided::Error>(())
    /// ```
    #[cfg(feature = "mpi")]
    pub fn from_mpi<C: ::mpi::topology::Communicator>(comm: &C) -> Result<Comm> {
        Ok(Comm::new(Arc::new(
            crate::bootstrap::mpi::MpiBootstrap::new(comm)?,
        )))
    }

    /// The underlying bootstrap.
    pub fn bootstrap(&self) -> &Arc<dyn Bootstrap> {
        &self.boot
    }

    /// Rank of this process.
    pub fn rank(&self) -> usize {
        self.boot.rank()
    }

    /// Number of processes.
    pub fn size(&self) -> usize {
        self.boot.size()
    }

    /// Rank of this process on its node.
    pub fn node_rank(&self) -> usize {
        self.boot.node_rank()
    }

    /// Number of processes on this node.
    pub fn node_size(&self) -> usize {
        self.boot.node_size()
    }

    /// The node of process `rank`: nodes are numbered from 0 in the order of their lowest
    /// rank, alike at every process. Processes on one node share memory; under `osrun`
    /// every process is on node 0.
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// let world = onesided::init()?.world().clone();
    /// let here = world.node_of(world.rank())?;
    /// let neighbours = (0..world.size()).filter(|&r| world.node_of(r).is_ok_and(|n| n == here)).count();
    /// assert_eq!(neighbours, world.node_size());
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    pub fn node_of(&self, rank: usize) -> Result<usize> {
        if rank < self.size() {
            Ok(self.boot.node_of(rank))
        } else {
            Err(Error::InvalidRank {
                rank,
                size: self.size(),
            })
        }
    }

    /// The job id (names the job's shared-memory segments).
    pub fn job_id(&self) -> &str {
        self.boot.job_id()
    }

    /// Blocks until all processes have called `barrier`.
    pub fn barrier(&self) -> Result<()> {
        self.boot.barrier(Call::Barrier)
    }

    /// Concatenation, by rank, of every process's `send` (all must have the same length).
    pub fn allgather<T: Pod>(&self, send: &[T]) -> Result<Vec<T>> {
        self.allgather_for(Call::Allgather, send)
    }

    /// [`Comm::allgather`] on behalf of the collective `call`.
    pub(crate) fn allgather_for<T: Pod>(&self, call: Call, send: &[T]) -> Result<Vec<T>> {
        let parts = self.boot.allgatherv(call, bytemuck::cast_slice(send))?;
        let want = std::mem::size_of_val(send);
        let mut out = Vec::with_capacity(send.len() * self.size());
        for (rank, p) in parts.iter().enumerate() {
            if p.len() != want {
                return Err(Error::InvalidArgument(format!(
                    "allgather: rank {rank} contributed {} bytes, this rank {want}",
                    p.len()
                )));
            }
            out.extend_from_slice(&bytemuck::pod_collect_to_vec::<u8, T>(p));
        }
        Ok(out)
    }

    /// Every process's `send`, by rank; lengths may differ.
    pub fn allgatherv<T: Pod>(&self, send: &[T]) -> Result<Vec<Vec<T>>> {
        self.allgatherv_for(Call::Allgather, send)
    }

    /// [`Comm::allgatherv`] on behalf of the collective `call`.
    pub(crate) fn allgatherv_for<T: Pod>(&self, call: Call, send: &[T]) -> Result<Vec<Vec<T>>> {
        let parts = self.boot.allgatherv(call, bytemuck::cast_slice(send))?;
        Ok(parts
            .iter()
            .map(|p| bytemuck::pod_collect_to_vec(p))
            .collect())
    }

    /// Personalised exchange of equal blocks: `send` holds `size()` blocks of equal length,
    /// block `j` goes to rank `j`; the result holds block `i` from rank `i`.
    pub fn alltoall<T: Pod>(&self, send: &[T]) -> Result<Vec<T>> {
        let n = self.size();
        if send.len() % n != 0 {
            return Err(Error::InvalidArgument(format!(
                "alltoall: {} elements do not split into {n} equal blocks",
                send.len()
            )));
        }
        let block = send.len() / n;
        let blocks: Vec<&[T]> = (0..n).map(|j| &send[j * block..(j + 1) * block]).collect();
        let recv = self.alltoallv(&blocks)?;
        let mut out = Vec::with_capacity(send.len());
        for (rank, b) in recv.iter().enumerate() {
            if b.len() != block {
                return Err(Error::InvalidArgument(format!(
                    "alltoall: rank {rank} sent {} elements, expected {block}",
                    b.len()
                )));
            }
            out.extend_from_slice(b);
        }
        Ok(out)
    }

    /// Personalised exchange: `send[j]` goes to rank `j`; returns the data from each rank.
    pub fn alltoallv<T: Pod>(&self, send: &[&[T]]) -> Result<Vec<Vec<T>>> {
        if send.len() != self.size() {
            return Err(Error::InvalidArgument(format!(
                "alltoallv: {} send buffers for {} ranks",
                send.len(),
                self.size()
            )));
        }
        let bytes: Vec<&[u8]> = send.iter().map(|s| bytemuck::cast_slice(s)).collect();
        let parts = self.boot.alltoallv(Call::Alltoall, &bytes)?;
        Ok(parts
            .iter()
            .map(|p| bytemuck::pod_collect_to_vec(p))
            .collect())
    }

    /// Personalised exchange in place (`MPI_Alltoallv`; counts and displacements in elements):
    /// block `j` of `send` goes to rank `j`, the block from rank `i` lands at `recv_displs[i]`.
    /// The caller has checked the layout at every process (see
    /// [`Bootstrap::alltoallv_into`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn alltoallv_into<T: Pod>(
        &self,
        call: Call,
        send: &[T],
        send_counts: &[usize],
        send_displs: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<()> {
        let bytes = |a: &[usize]| -> Vec<usize> {
            a.iter()
                .map(|&v| v.saturating_mul(size_of::<T>()))
                .collect()
        };
        self.boot.alltoallv_into(
            call,
            bytemuck::cast_slice(send),
            &bytes(send_counts),
            &bytes(send_displs),
            bytemuck::cast_slice_mut(recv),
            &bytes(recv_counts),
            &bytes(recv_displs),
        )
    }

    /// Root's `data` overwrites `data` at every process (same length everywhere).
    pub fn bcast<T: Pod>(&self, root: usize, data: &mut [T]) -> Result<()> {
        self.check_rank(root)?;
        let mut bytes = bytemuck::cast_slice::<T, u8>(data).to_vec();
        self.boot.bcast(Call::Bcast, root, &mut bytes)?;
        if bytes.len() != std::mem::size_of_val(data) {
            return Err(Error::InvalidArgument(format!(
                "bcast: root sent {} bytes, this rank expects {}",
                bytes.len(),
                std::mem::size_of_val(data)
            )));
        }
        bytemuck::cast_slice_mut::<T, u8>(data).copy_from_slice(&bytes);
        Ok(())
    }

    /// Root's vector replaces `data` at every process (lengths need not be known).
    pub fn bcast_vec<T: Pod>(&self, root: usize, data: &mut Vec<T>) -> Result<()> {
        self.bcast_vec_for(Call::Bcast, root, data)
    }

    /// [`Comm::bcast_vec`] on behalf of the collective `call`.
    pub(crate) fn bcast_vec_for<T: Pod>(
        &self,
        call: Call,
        root: usize,
        data: &mut Vec<T>,
    ) -> Result<()> {
        self.check_rank(root)?;
        let mut bytes = bytemuck::cast_slice::<T, u8>(data).to_vec();
        self.boot.bcast(call, root, &mut bytes)?;
        *data = bytemuck::pod_collect_to_vec(&bytes);
        Ok(())
    }

    /// Element-wise reduction of `data` over all processes; every process gets the result.
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// # let world = onesided::init()?.world().clone();
    /// let mut v = [world.rank() as f64, 1.0];
    /// world.allreduce(&mut v, onesided::ReduceOp::Sum)?;
    /// assert_eq!(v[1], world.size() as f64);
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    pub fn allreduce<T: Reducible>(&self, data: &mut [T], op: ReduceOp) -> Result<()> {
        self.allreduce_for(Call::Allgather, data, op)
    }

    /// [`Comm::allreduce`] on behalf of the collective `call`.
    pub(crate) fn allreduce_for<T: Reducible>(
        &self,
        call: Call,
        data: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        let parts = self.boot.allgatherv(call, bytemuck::cast_slice(data))?;
        let mut acc: Option<Vec<T>> = None;
        for (rank, p) in parts.iter().enumerate() {
            if p.len() != std::mem::size_of_val(data) {
                return Err(Error::InvalidArgument(format!(
                    "allreduce: rank {rank} contributed {} bytes, this rank {}",
                    p.len(),
                    std::mem::size_of_val(data)
                )));
            }
            let vals: Vec<T> = bytemuck::pod_collect_to_vec(p);
            match acc.as_mut() {
                None => acc = Some(vals),
                Some(a) => reduce_into(a, &vals, op),
            }
        }
        if let Some(a) = acc {
            data.copy_from_slice(&a);
        }
        Ok(())
    }

    /// Collective: a communicator of the processes that pass the same `color`, ranked by
    /// `key` (ties by rank), like `MPI_Comm_split`; `None` for processes passing `None`.
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// # let world = onesided::init()?.world().clone();
    /// // Windows over the even ranks only.
    /// let color = (world.rank() % 2 == 0).then_some(0);
    /// if let Some(evens) = world.split(color, world.rank())? {
    ///     let win = onesided::Window::<u64>::allocate(&evens, 16)?;
    ///     win.free()?;
    /// }
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    pub fn split(&self, color: Option<u32>, key: usize) -> Result<Option<Comm>> {
        Ok(self.boot.split(color, key)?.map(Comm::new))
    }

    /// Collective vote: true when every process passes `ok = true`.
    ///
    /// Collective calls use it so that a local error makes every process return an error
    /// instead of leaving the others waiting forever.
    pub fn agree(&self, ok: bool) -> Result<bool> {
        self.agree_for(Call::Agree, ok)
    }

    fn agree_for(&self, call: Call, ok: bool) -> Result<bool> {
        let mut v = [u32::from(!ok)];
        self.allreduce_for(call, &mut v, ReduceOp::Max)?;
        Ok(v[0] == 0)
    }

    /// Runs the local part of the collective `call`, then makes everyone agree on success.
    ///
    /// Returns the local error at the process where it happened and
    /// [`Error::PeerFailed`] at the others.
    pub(crate) fn agree_on<R>(&self, call: Call, local: Result<R>) -> Result<R> {
        let all_ok = self.agree_for(call, local.is_ok())?;
        match local {
            Err(e) => Err(e),
            Ok(_) if !all_ok => Err(Error::PeerFailed { call: call.name() }),
            Ok(r) => Ok(r),
        }
    }

    /// Error unless `rank < size()`.
    pub(crate) fn check_rank(&self, rank: usize) -> Result<()> {
        if rank < self.size() {
            Ok(())
        } else {
            Err(Error::InvalidRank {
                rank,
                size: self.size(),
            })
        }
    }

    /// True when the job was aborted by the launcher.
    pub(crate) fn aborted(&self) -> bool {
        self.boot.aborted()
    }

    /// True when the job ends for a timeout and asks its waits to report (see
    /// [`Bootstrap::report_requested`]).
    pub(crate) fn report_requested(&self) -> bool {
        self.boot.report_requested()
    }

    /// The roster watch of the members (see [`Bootstrap::watch`]).
    pub(crate) fn watch(&self) -> Option<&PeerWatch> {
        self.boot.watch()
    }
}

fn reduce_into<T: Reducible>(acc: &mut [T], other: &[T], op: ReduceOp) {
    macro_rules! go {
        ($t:ty, $add:expr) => {{
            let a: &mut [$t] = bytemuck::cast_slice_mut(acc);
            let b: &[$t] = bytemuck::cast_slice(other);
            for (x, y) in a.iter_mut().zip(b) {
                *x = match op {
                    ReduceOp::Sum => $add(*x, *y),
                    ReduceOp::Min => {
                        if *y < *x {
                            *y
                        } else {
                            *x
                        }
                    }
                    ReduceOp::Max => {
                        if *y > *x {
                            *y
                        } else {
                            *x
                        }
                    }
                };
            }
        }};
    }
    match T::TYPE {
        ReduceType::I32 => go!(i32, i32::wrapping_add),
        ReduceType::I64 => go!(i64, i64::wrapping_add),
        ReduceType::U32 => go!(u32, u32::wrapping_add),
        ReduceType::U64 => go!(u64, u64::wrapping_add),
        ReduceType::Usize => go!(usize, usize::wrapping_add),
        ReduceType::F32 => go!(f32, |a: f32, b: f32| a + b),
        ReduceType::F64 => go!(f64, |a: f64, b: f64| a + b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reductions() {
        let mut a = [1i64, -5, 7];
        reduce_into(&mut a, &[2, 3, -9], ReduceOp::Sum);
        assert_eq!(a, [3, -2, -2]);
        let mut m = [1.5f64, -2.0];
        reduce_into(&mut m, &[0.5, 4.0], ReduceOp::Max);
        assert_eq!(m, [1.5, 4.0]);
        let mut n = [9u32, 2];
        reduce_into(&mut n, &[3, 8], ReduceOp::Min);
        assert_eq!(n, [3, 2]);
    }
}
