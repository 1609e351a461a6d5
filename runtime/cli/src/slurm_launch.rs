//! `lazarus run` inside a Slurm allocation (`salloc`, `sbatch`): the allocation's hosts
//! and their addresses, how many nodes each takes, and the `srun` step that starts a node,
//! or its replacement, on its host. The launcher stays outside the steps: it supervises
//! the nodes and restarts a dead one with a new step, which a plain `srun` of the app
//! cannot do.

use lazarus::cluster::slurm::{expand_hostlist, expand_tasks_per_node};
use std::collections::HashMap;
use std::net::IpAddr;
use std::process::Command;

/// The allocation `lazarus run` runs in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// `SLURM_JOB_ID`.
    pub job: String,
    /// The allocation's hosts, in Slurm's order.
    pub hosts: Vec<String>,
    /// The tasks Slurm gave each host (`SLURM_TASKS_PER_NODE`): the nodes it takes.
    pub tasks_per_host: Vec<usize>,
}

/// Step ids Slurm gives the job's own scripts and shells, not tasks of an `srun`: the
/// batch script (`sbatch`), the interactive step and the extern step.
const NOT_A_TASK_STEP: [&str; 6] = [
    "batch",
    "interactive",
    "extern",
    "4294967294",
    "4294967293",
    "4294967291",
];

impl Allocation {
    /// The allocation this process runs in, from Slurm's variables: `None` outside one,
    /// and inside a task of an `srun` step (there the app forms its cluster from the step
    /// by itself, see `lazarus::cluster`).
    pub fn detect(var: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, String> {
        let (Some(job), Some(nodelist)) = (var("SLURM_JOB_ID"), var("SLURM_JOB_NODELIST")) else {
            return Ok(None);
        };
        if var("SLURM_STEP_ID").is_some_and(|s| !NOT_A_TASK_STEP.contains(&s.trim())) {
            return Ok(None);
        }
        let hosts = expand_hostlist(&nodelist).map_err(|e| format!("SLURM_JOB_NODELIST: {e}"))?;
        if hosts.is_empty() {
            return Err("SLURM_JOB_NODELIST names no host".into());
        }
        let tasks_per_host = match var("SLURM_TASKS_PER_NODE") {
            Some(spec) => {
                expand_tasks_per_node(&spec).map_err(|e| format!("SLURM_TASKS_PER_NODE: {e}"))?
            }
            None => vec![1; hosts.len()],
        };
        if tasks_per_host.len() != hosts.len() {
            return Err(format!(
                "SLURM_TASKS_PER_NODE gives {} hosts' tasks, SLURM_JOB_NODELIST names {}",
                tasks_per_host.len(),
                hosts.len()
            ));
        }
        Ok(Some(Allocation {
            job: job.trim().to_string(),
            hosts,
            tasks_per_host,
        }))
    }

    /// The nodes of a run that does not say: one per task of the allocation.
    pub fn tasks(&self) -> usize {
        self.tasks_per_host.iter().sum()
    }

    /// `NAME=ADDRESS,...` for the launcher's `--hosts`: each host's address as Slurm knows
    /// it (`NodeAddr` of `scontrol show node`, asked once for all), else its name resolved.
    pub fn host_spec(&self) -> String {
        let addrs = node_addrs();
        self.hosts
            .iter()
            .map(|h| match addrs.get(h) {
                Some(addr) => format!("{h}={addr}"),
                None => h.clone(),
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The launcher's `--remote` in this allocation: a one-task `srun` step on the host,
    /// sharing the allocation's resources with the other nodes' steps (`--overlap`), the
    /// launcher's environment passed on, and nothing killed with it when it fails (the
    /// launcher decides what a death means).
    pub fn remote_template(&self) -> String {
        format!(
            "srun --jobid={} --nodes=1 --ntasks=1 --nodelist={{host}} --overlap --export=ALL \
             --kill-on-bad-exit=0 --quiet --unbuffered",
            self.job
        )
    }
}

/// The addresses Slurm has for its nodes (`NodeAddr=` of `scontrol show node -o`, one
/// line per node), by node name; empty if `scontrol` does not answer.
fn node_addrs() -> HashMap<String, IpAddr> {
    match Command::new("scontrol")
        .args(["show", "node", "-o"])
        .output()
    {
        Ok(out) if out.status.success() => parse_node_addrs(&String::from_utf8_lossy(&out.stdout)),
        _ => HashMap::new(),
    }
}

/// The `NodeName=` and `NodeAddr=` pairs of `scontrol show node -o`'s lines, where the
/// address is an IP address.
fn parse_node_addrs(text: &str) -> HashMap<String, IpAddr> {
    text.lines()
        .filter_map(|line| {
            let field = |key: &str| line.split_whitespace().find_map(|w| w.strip_prefix(key));
            Some((
                field("NodeName=")?.to_string(),
                field("NodeAddr=")?.parse().ok()?,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn an_allocation_gives_its_hosts_and_their_tasks() {
        let a = Allocation::detect(env(&[
            ("SLURM_JOB_ID", "42"),
            ("SLURM_JOB_NODELIST", "n[01-03]"),
            ("SLURM_TASKS_PER_NODE", "2(x2),1"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(a.job, "42");
        assert_eq!(a.hosts, ["n01", "n02", "n03"]);
        assert_eq!(a.tasks_per_host, [2, 2, 1]);
        assert_eq!(a.tasks(), 5);
        assert!(a.remote_template().contains("--jobid=42"));
        assert!(a.remote_template().contains("--nodelist={host}"));
    }

    #[test]
    fn outside_an_allocation_or_inside_an_srun_task_there_is_none() {
        assert_eq!(Allocation::detect(env(&[])).unwrap(), None);
        let in_a_task = env(&[
            ("SLURM_JOB_ID", "42"),
            ("SLURM_JOB_NODELIST", "n1"),
            ("SLURM_STEP_ID", "0"),
        ]);
        assert_eq!(Allocation::detect(in_a_task).unwrap(), None);
        // The batch script of `sbatch` is a step of its own, not an `srun` task.
        let batch = env(&[
            ("SLURM_JOB_ID", "42"),
            ("SLURM_JOB_NODELIST", "n1"),
            ("SLURM_STEP_ID", "4294967294"),
        ]);
        assert!(Allocation::detect(batch).unwrap().is_some());
    }

    #[test]
    fn node_addresses_are_read_from_scontrols_one_line_per_node() {
        let text = "NodeName=n01 Arch=x86_64 CoresPerSocket=1 NodeAddr=10.0.0.1 NodeHostName=n01\n\
                    NodeName=n02 NodeAddr=n02.cluster NodeHostName=n02\n\
                    NodeName=n03 State=IDLE NodeAddr=10.0.0.3\n";
        let addrs = parse_node_addrs(text);
        assert_eq!(
            addrs.len(),
            2,
            "a name for an address is resolved later: {addrs:?}"
        );
        assert_eq!(addrs["n01"].to_string(), "10.0.0.1");
        assert_eq!(addrs["n03"].to_string(), "10.0.0.3");
    }

    #[test]
    fn a_malformed_allocation_says_which_variable() {
        let e = Allocation::detect(env(&[
            ("SLURM_JOB_ID", "42"),
            ("SLURM_JOB_NODELIST", "n[1-"),
        ]))
        .unwrap_err();
        assert!(e.contains("SLURM_JOB_NODELIST"), "{e}");
        let e = Allocation::detect(env(&[
            ("SLURM_JOB_ID", "42"),
            ("SLURM_JOB_NODELIST", "n[1-2]"),
            ("SLURM_TASKS_PER_NODE", "4"),
        ]))
        .unwrap_err();
        assert!(e.contains("SLURM_TASKS_PER_NODE"), "{e}");
    }
}
