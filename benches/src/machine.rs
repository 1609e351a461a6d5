//! What a measurement ran on and from which source: the CPU model, core count and
//! whether it is a virtual machine (from `/proc/cpuinfo`), and the git commit of the
//! working tree.

use crate::target::workspace_root;
use std::process::Command;

/// The machine measurements run on.
#[derive(Clone, Debug)]
pub struct Machine {
    /// `model name` from `/proc/cpuinfo`.
    pub cpu: String,
    /// Logical CPUs this process may use.
    pub cores: usize,
    /// The CPU reports the `hypervisor` flag: a virtual machine.
    pub virtual_machine: bool,
}

impl Machine {
    /// Reads this machine's description.
    pub fn this() -> Self {
        let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        Machine::from_cpuinfo(
            &info,
            std::thread::available_parallelism().map_or(0, |n| n.get()),
        )
    }

    /// The description from the text of `/proc/cpuinfo` and the core count.
    pub fn from_cpuinfo(info: &str, cores: usize) -> Self {
        let field = |name: &str| {
            info.lines()
                .find(|l| l.split(':').next().is_some_and(|k| k.trim() == name))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        };
        Machine {
            cpu: field("model name").unwrap_or_else(|| "unknown CPU".into()),
            cores,
            virtual_machine: field("flags")
                .is_some_and(|f| f.split_whitespace().any(|x| x == "hypervisor")),
        }
    }

    /// One line: `AMD EPYC, 2 cores, virtual machine`.
    pub fn describe(&self) -> String {
        format!(
            "{}, {} cores, {}",
            self.cpu,
            self.cores,
            if self.virtual_machine {
                "virtual machine"
            } else {
                "bare metal"
            }
        )
    }
}

/// The short commit of the working tree, with `-dirty` if tracked files differ from it;
/// `unknown` outside a git checkout.
pub fn git_commit() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .current_dir(workspace_root())
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown".into();
    };
    match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(changes) if changes.is_empty() => head,
        _ => format!("{head}-dirty"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_gives_model_and_virtualisation() {
        let info = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse hypervisor\n";
        let m = Machine::from_cpuinfo(info, 2);
        assert_eq!(m.cpu, "AMD EPYC");
        assert!(m.virtual_machine);
        assert_eq!(m.describe(), "AMD EPYC, 2 cores, virtual machine");
        assert!(!Machine::from_cpuinfo("", 1).virtual_machine);
    }
}
