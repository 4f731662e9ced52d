//! What the `pmi` bootstrap needs of a cluster launcher's process-management interface, and
//! the node numbering every launcher's map goes through.

use crate::error::Result;

/// What the `pmi` bootstrap needs of its launcher's process-management interface: PMI-1's
/// wire protocol (`bootstrap::pmi::Pmi`) or a PMIx server reached through its client library
/// (`bootstrap::pmix`).
pub(crate) trait Launcher: Send + std::fmt::Debug {
    /// The interface's name, for messages.
    fn name(&self) -> &'static str;
    /// This process's rank in the job.
    fn rank(&self) -> usize;
    /// The job's number of processes.
    fn size(&self) -> usize;
    /// The node of every rank from the launcher's own map, numbered from 0 in the order of
    /// the nodes' lowest ranks; `None` when the launcher has no map.
    fn node_map(&mut self) -> Result<Option<Vec<usize>>>;
    /// Stores `value` (no whitespace) under `key`, for every rank after the next
    /// [`barrier`](Launcher::barrier).
    fn put(&mut self, key: &str, value: &str) -> Result<()>;
    /// The value rank `owner` stored under `key` before the last barrier; `None` when it
    /// stored none.
    fn get(&mut self, owner: usize, key: &str) -> Result<Option<String>>;
    /// Waits until every rank of the job entered the barrier; publishes the puts before it.
    fn barrier(&mut self) -> Result<()>;
    /// Ends the session (at a clean exit).
    fn finalize(&mut self) -> Result<()>;
    /// Asks the launcher to end the whole job with exit status `status` (this process is
    /// failing): MPI's `MPI_Abort` at the launcher's level. Slurm ends a step so even
    /// without `srun -K`; hydra and Open MPI's launchers would on the exit status alone.
    fn abort(&mut self, status: i32, why: &str);
}

/// Node numbers for ranks whose nodes are named by `ids` (any names: numbers, host names):
/// from 0, in the order of each node's lowest rank, the same at every process.
pub(crate) fn renumber_nodes<T: PartialEq>(ids: &[T]) -> Vec<usize> {
    let mut order: Vec<&T> = Vec::new();
    ids.iter()
        .map(|n| match order.iter().position(|m| *m == n) {
            Some(i) => i,
            None => {
                order.push(n);
                order.len() - 1
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_numbered_by_their_lowest_rank() {
        assert_eq!(renumber_nodes(&["b", "a", "b", "c"]), vec![0, 1, 0, 2]);
        assert_eq!(renumber_nodes(&[7u32, 7, 3]), vec![0, 0, 1]);
        assert!(renumber_nodes::<u32>(&[]).is_empty());
    }
}
