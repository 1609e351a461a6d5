//! Hardware topology: which cores this process may use, and binding threads to them.
//!
//! Discovery and binding go through hwloc (the `hwloc2` crate). Only cores that intersect
//! the process's allowed CPU set are offered, so a node started by Slurm, `taskset` or a
//! cgroup uses exactly the cores it was given.

use crate::error::NodeError;
use hwloc2::{CpuBindFlags, CpuSet, ObjectType, Topology};
use std::sync::{Mutex, OnceLock};

/// One hardware core this process may run on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HwCore {
    /// hwloc's logical index of the core on this machine.
    pub logical_index: u32,
    /// OS indices of the processing units (hardware threads) of this core that the process
    /// is allowed to use.
    pub pus: Vec<u32>,
}

/// hwloc loads the topology once per process; loading is slow (it walks sysfs) and the
/// result does not change while we run.
fn topology() -> Result<&'static Mutex<Topology>, NodeError> {
    static TOPOLOGY: OnceLock<Option<Mutex<Topology>>> = OnceLock::new();
    TOPOLOGY
        .get_or_init(|| Topology::new().map(Mutex::new))
        .as_ref()
        .ok_or_else(|| NodeError::Topology("hwloc could not load the machine topology".into()))
}

/// The cores this process may use, in hwloc's logical order.
pub fn allowed_cores() -> Result<Vec<HwCore>, NodeError> {
    let topo = topology()?
        .lock()
        .map_err(|_| NodeError::Topology("topology lock poisoned".into()))?;
    // Read once, at the first node's start, before any of our threads are pinned: the
    // process binding is the union of its threads' bindings, so once every thread runs
    // pinned (a node built from inside another node's core) it would shrink to those cores.
    static PROCESS_ALLOWED: OnceLock<Option<Vec<u32>>> = OnceLock::new();
    let allowed = PROCESS_ALLOWED.get_or_init(|| {
        topo.get_cpubind(CpuBindFlags::CPUBIND_PROCESS)
            .map(|set| set.into_iter().collect())
    });
    // Machines without a Core level (rare, some VMs) expose only PUs: treat each as a core.
    let objects = match topo.objects_with_type(&ObjectType::Core) {
        Ok(cores) if !cores.is_empty() => cores,
        _ => topo
            .objects_with_type(&ObjectType::PU)
            .map_err(|e| NodeError::Topology(format!("no cores or PUs reported: {e:?}")))?,
    };
    let mut cores = Vec::with_capacity(objects.len());
    for obj in objects {
        let Some(set) = obj.cpuset() else { continue };
        let pus: Vec<u32> = set
            .into_iter()
            .filter(|pu| allowed.as_ref().is_none_or(|a| a.contains(pu)))
            .collect();
        if !pus.is_empty() {
            cores.push(HwCore {
                logical_index: obj.logical_index(),
                pus,
            });
        }
    }
    if cores.is_empty() {
        return Err(NodeError::Topology(
            "the process is not allowed to run on any core".into(),
        ));
    }
    Ok(cores)
}

/// Binds the calling thread to the processing units of `core`.
pub fn bind_current_thread(core: &HwCore) -> Result<(), NodeError> {
    let mut topo = topology()?
        .lock()
        .map_err(|_| NodeError::Topology("topology lock poisoned".into()))?;
    let set: CpuSet = core.pus.iter().copied().collect();
    topo.set_cpubind(set, CpuBindFlags::CPUBIND_THREAD)
        .map_err(|e| NodeError::Pinning {
            core: core.logical_index,
            reason: format!("{e:?}"),
        })
}

/// The processing units the calling thread is bound to, as hwloc reports them.
pub fn current_thread_binding() -> Result<Vec<u32>, NodeError> {
    let topo = topology()?
        .lock()
        .map_err(|_| NodeError::Topology("topology lock poisoned".into()))?;
    topo.get_cpubind(CpuBindFlags::CPUBIND_THREAD)
        .map(|set| set.into_iter().collect())
        .ok_or_else(|| NodeError::Topology("hwloc could not read the thread binding".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovers_at_least_one_allowed_core_with_pus() {
        let cores = allowed_cores().unwrap();
        assert!(!cores.is_empty());
        assert!(cores.iter().all(|c| !c.pus.is_empty()));
    }

    #[test]
    fn a_thread_pinned_to_one_core_still_sees_every_core_of_the_process() {
        let all = allowed_cores().unwrap();
        let first = all[0].clone();
        let seen = std::thread::spawn(move || {
            bind_current_thread(&first).unwrap();
            allowed_cores().unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(seen, all);
    }

    #[test]
    fn a_bound_thread_runs_only_on_its_core() {
        let cores = allowed_cores().unwrap();
        let last = cores.last().unwrap().clone();
        std::thread::spawn(move || {
            bind_current_thread(&last).unwrap();
            assert_eq!(current_thread_binding().unwrap(), last.pus);
        })
        .join()
        .unwrap();
    }
}
