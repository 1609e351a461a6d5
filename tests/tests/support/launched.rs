//! A `lazarus run` cluster under test: its output merged line by line as it comes, the
//! node PIDs the launcher prints, SIGKILL sent from the test process, and what the run
//! left behind (its RESULT line, the recovery totals every node prints at shutdown, which
//! ranks the launcher restarted).

use super::parse_result;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// The longest a test waits for a line it expects.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// The longest a test waits for a run to end once it asked for the end. A run that hangs
/// (a recovery that never completes) fails its test with the output instead of holding
/// the whole suite.
pub const FINISH_TIMEOUT: Duration = Duration::from_secs(300);

/// A running `lazarus run`, its stdout and stderr merged line by line.
pub struct Launched {
    child: Child,
    nodes: u16,
    lines: Receiver<String>,
    seen: Vec<String>,
    started: Instant,
}

/// `lazarus run -n 4 --ft on --checkpoint-every 400ms -- <app> <args>`: the kill suites'
/// cluster (checkpoints often enough that a kill lands a few hundred ms after one).
pub fn four_nodes_recovering(app: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(super::bin("lazarus"));
    cmd.args([
        "run",
        "-n",
        "4",
        "--ft",
        "on",
        "--checkpoint-every",
        "400ms",
    ])
    .arg("--")
    .arg(super::bin(app))
    .args(args);
    cmd
}

impl Launched {
    /// Starts `launcher` (a `lazarus run -n nodes ...` command) with its output piped.
    pub fn spawn(mut launcher: Command, nodes: u16) -> Launched {
        let mut child = launcher
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("launcher starts");
        let (tx, rx) = channel();
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Launched {
            child,
            nodes,
            lines: rx,
            seen: Vec::new(),
            started: Instant::now(),
        }
    }

    /// Reads output until a new line satisfies `pred`; returns it. Kills the run and fails
    /// the test, showing the output, if none comes within [`RUN_TIMEOUT`].
    pub fn wait_for(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + RUN_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if pred(&line) {
                        return line;
                    }
                }
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                    self.kill_all();
                    panic!("never saw {what}; output:\n{}", self.seen.join("\n"));
                }
            }
        }
    }

    /// Like [`Launched::wait_for`], but a line already read counts too.
    pub fn wait_for_seen(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        match self.seen.iter().find(|l| pred(l)) {
            Some(line) => line.clone(),
            None => self.wait_for(what, pred),
        }
    }

    /// Waits until each node of `ranks` has committed its checkpoint `id` (first
    /// incarnation). A line read while waiting for another node counts: the nodes commit
    /// in any order.
    pub fn wait_for_checkpoints(&mut self, ranks: &[u16], id: u64) {
        for &rank in ranks {
            let line = format!("node {rank}: checkpoint committed id={id} ");
            self.wait_for_seen(&format!("checkpoint {id} of node {rank}"), |l| {
                l.contains(&line)
            });
        }
    }

    /// Waits for the next checkpoint commit of a node outside `victims`
    /// (at most a period after the victims' own): by then the victims have sent, and
    /// their peers delivered, messages after the victims' newest checkpoints, which the
    /// replacements regenerate and must not deliver twice. Killed right at their own
    /// commit, there may be none (a fast store leaves no time).
    pub fn wait_for_a_survivors_checkpoint(&mut self, victims: &[u16]) {
        let survivor = (0..self.nodes)
            .find(|r| !victims.contains(r))
            .expect("a survivor");
        let line = format!("node {survivor}: checkpoint committed");
        self.wait_for(&format!("a checkpoint of node {survivor}"), |l| {
            l.contains(&line)
        });
    }

    /// The PID the launcher printed last for node `rank`.
    pub fn pid(&self, rank: u16) -> i32 {
        let prefix = format!("node {rank} pid ");
        self.seen
            .iter()
            .rev()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no pid printed for node {rank}"))
    }

    /// Reads the output that has already come, without waiting, so that [`Launched::pid`]
    /// sees the newest PIDs.
    pub fn read_available(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
    }

    /// Waits until node `rank` runs a live process: if the launcher reported it dead after
    /// the last PID it printed for it, waits for its replacement's PID.
    pub fn wait_alive(&mut self, rank: u16) {
        self.read_available();
        let (pid_line, died) = (format!("node {rank} pid "), format!("node {rank}: died"));
        let last_pid = self.seen.iter().rposition(|l| l.starts_with(&pid_line));
        let last_death = self.seen.iter().rposition(|l| l.contains(&died));
        if last_death > last_pid {
            self.wait_for(&format!("node {rank}'s replacement"), |l| {
                l.starts_with(&pid_line)
            });
        }
    }

    /// SIGKILLs `kills` nodes of the run one after another, each a random node (the same
    /// one again, possibly) after a random 0.3-1.3 s; a node being restarted is killed
    /// once its replacement runs. Returns the victims in order.
    pub fn kill_at_random(&mut self, rng: &mut TestRng, kills: usize) -> Vec<u16> {
        (0..kills)
            .map(|_| {
                std::thread::sleep(Duration::from_millis(300 + rng.below(1000)));
                let victim = rng.below(u64::from(self.nodes)) as u16;
                self.wait_alive(victim);
                let pid = self.kill(victim);
                eprintln!("killed node {victim} (pid {pid})");
                victim
            })
            .collect()
    }

    /// Waits until the launcher has started every node.
    pub fn wait_started(&mut self) {
        for rank in 0..self.nodes {
            self.wait_for(&format!("node {rank}'s pid"), |l| {
                l.starts_with(&format!("node {rank} pid "))
            });
        }
    }

    /// Waits until each of `victims` has started its clients (the app prints
    /// `APP: node V: clients started`) and then committed a checkpoint, and 300 ms more:
    /// the work its order-sensitive actors do after that checkpoint is what a restored
    /// node must do again in the same order. The moment to SIGKILL them mid-run.
    #[allow(dead_code)]
    pub fn wait_mid_run(&mut self, app: &str, victims: &[u16]) {
        self.wait_started();
        for &v in victims {
            self.wait_for_seen(&format!("node {v}'s clients at work"), |l| {
                l.contains(&format!("{app}: node {v}: clients started"))
            });
            self.wait_for(&format!("a checkpoint of node {v} after that"), |l| {
                l.contains(&format!("node {v}: checkpoint committed"))
            });
        }
        std::thread::sleep(Duration::from_millis(300));
    }

    /// Waits until the clients of `app` (`bank`, `kvstore`: they print `APP: node V:
    /// clients started`) are at work on every victim and each has checkpointed since,
    /// then SIGKILLs the victims.
    pub fn kill_mid_run(&mut self, app: &str, victims: &[u16]) {
        self.wait_mid_run(app, victims);
        for &v in victims {
            self.kill(v);
        }
    }

    /// Waits until logger node `index` reports holding at least `blocks` blocks.
    #[allow(dead_code)]
    pub fn wait_for_logger_blocks(&mut self, index: u16, blocks: u64) {
        let prefix = format!("logger {index} blocks=");
        self.wait_for(&format!("logger {index} holding {blocks} blocks"), |l| {
            l.split(&prefix)
                .nth(1)
                .and_then(|r| r.split_whitespace().next()?.parse::<u64>().ok())
                .is_some_and(|b| b >= blocks)
        });
    }

    /// Sends SIGKILL to logger node `index`'s process (the PID the launcher printed for
    /// it); returns the PID.
    #[allow(dead_code)]
    pub fn kill_logger(&mut self, index: u16) -> i32 {
        let prefix = format!("logger {index} pid ");
        let pid: i32 = self
            .seen
            .iter()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no pid printed for logger {index}"));
        // SAFETY: plain kill(2) on a process id the launcher printed.
        let rc = unsafe { kill(pid, SIGKILL) };
        assert_eq!(rc, 0, "kill -9 {pid} (logger {index})");
        pid
    }

    /// Sends SIGKILL to node `rank`'s process (the PID the launcher printed last for it)
    /// from this test process; returns the PID.
    pub fn kill(&mut self, rank: u16) -> i32 {
        self.signal(rank, SIGKILL)
    }

    /// SIGKILLs, from this test process, the process node `rank` last said it runs as
    /// (the timeline's `runs as process pid=` line of a node started through a remote
    /// command, such as an `srun` step); returns the PID.
    #[allow(dead_code)]
    pub fn kill_own_process(&mut self, rank: u16) -> i32 {
        let prefix = format!("node {rank}: runs as process pid=");
        let pid: i32 = self
            .seen
            .iter()
            .rev()
            .find_map(|l| l.split_once(&prefix).map(|(_, rest)| rest))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("node {rank} never said its process"));
        // SAFETY: plain kill(2) on a process id the node printed.
        let rc = unsafe { kill(pid, SIGKILL) };
        assert_eq!(rc, 0, "kill -9 {pid} (node {rank})");
        pid
    }

    /// Sends `signal` to node `rank`'s process; returns the PID.
    pub fn signal(&mut self, rank: u16, signal: i32) -> i32 {
        let pid = self.pid(rank);
        // SAFETY: plain kill(2) on a process id the launcher printed.
        let rc = unsafe { kill(pid, signal) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            std::thread::sleep(Duration::from_millis(500));
            self.read_available();
            self.kill_all();
            panic!(
                "kill -{signal} {pid} (node {rank}): {err}; output:\n{}",
                self.seen.join("\n")
            );
        }
        pid
    }

    /// Ends a run that is not expected to end by itself: SIGKILLs the launcher and
    /// every node; returns the output seen.
    #[allow(dead_code)]
    pub fn abort(mut self) -> Vec<String> {
        self.kill_all();
        std::mem::take(&mut self.seen)
    }

    /// SIGKILLs the launcher and every node process it reported, so that a failed test
    /// leaves nothing running.
    fn kill_all(&mut self) {
        let pids: Vec<i32> = self
            .seen
            .iter()
            .filter_map(|l| {
                let (_, rest) = l.strip_prefix("node ")?.split_once(" pid ")?;
                rest.split_whitespace().next()?.parse().ok()
            })
            .collect();
        let _ = self.child.kill();
        for pid in pids {
            // SAFETY: plain kill(2); a PID that already exited gets ESRCH, which is fine.
            unsafe { kill(pid, 9) };
        }
        let _ = self.child.wait();
    }

    /// Waits for the launcher to end; returns what the run left behind. Fails the test,
    /// showing the output, if the run has not ended within [`FINISH_TIMEOUT`].
    pub fn finish(self) -> Finished {
        self.finish_within(FINISH_TIMEOUT)
    }

    /// [`Launched::finish`], but the run must end within `limit` (from now): a run
    /// expected to end soon by itself (a fatal error, say) fails the test instead of
    /// hanging it.
    pub fn finish_within(mut self, limit: Duration) -> Finished {
        let deadline = Instant::now() + limit;
        let status = loop {
            self.read_available();
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            if Instant::now() > deadline {
                self.kill_all();
                while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(1)) {
                    self.seen.push(line);
                }
                panic!(
                    "the run did not end within {limit:?}; output:\n{}",
                    self.seen.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // The pumps end with the pipes.
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.seen.push(line);
        }
        let took = self.started.elapsed();
        if took > SLOW_RUN {
            // Passing but slow: worth a look (shown with `--nocapture` or on failure).
            eprintln!("slow run ({took:?}); output:\n{}", self.seen.join("\n"));
        }
        let result = self
            .seen
            .iter()
            .rev()
            .find(|l| l.starts_with("RESULT "))
            .and_then(|l| parse_result(l));
        Finished {
            success: status.success(),
            code: status.code(),
            nodes: self.nodes,
            result,
            lines: self.seen,
        }
    }
}

/// A run that takes longer than this prints its output even when it passes.
const SLOW_RUN: Duration = Duration::from_secs(30);

/// A finished `lazarus run`.
pub struct Finished {
    /// Whether the launcher exited 0.
    pub success: bool,
    /// The launcher's exit status (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Nodes in the cluster.
    pub nodes: u16,
    /// The fields of the launcher's last RESULT line, if it printed one.
    pub result: Option<HashMap<String, String>>,
    /// Everything the launcher printed, stdout and stderr merged.
    pub lines: Vec<String>,
}

impl Finished {
    /// The RESULT of a run that must have succeeded and verified.
    pub fn verified(&self) -> &HashMap<String, String> {
        assert!(
            self.success,
            "the run failed; output:\n{}",
            self.lines.join("\n")
        );
        let result = self
            .result
            .as_ref()
            .unwrap_or_else(|| panic!("no RESULT line; output:\n{}", self.lines.join("\n")));
        assert_eq!(result["verified"], "true", "{result:?}");
        result
    }

    /// The `checksum` of a run that must have succeeded and verified (jacobi2d, ring and
    /// pingpong print one).
    pub fn checksum(&self) -> String {
        self.verified()["checksum"].clone()
    }

    /// The `final ...` recovery totals each node printed at shutdown, by rank.
    pub fn finals(&self) -> HashMap<u16, HashMap<String, u64>> {
        self.lines
            .iter()
            .filter_map(|l| {
                let rest = l.split("node ").nth(1)?;
                let (rank, rest) = rest.split_once(": final ")?;
                let fields = rest
                    .split_whitespace()
                    .filter_map(|kv| {
                        let (k, v) = kv.split_once('=')?;
                        Some((k.to_string(), v.parse().ok()?))
                    })
                    .collect();
                Some((rank.parse().ok()?, fields))
            })
            .collect()
    }

    /// Ranks that the launcher restarted (in order of restarts).
    pub fn restarted(&self) -> Vec<u16> {
        self.lines
            .iter()
            .filter_map(|l| {
                let rest = l.strip_prefix("node ")?;
                let (rank, rest) = rest.split_once(" pid ")?;
                rest.contains("incarnation").then(|| rank.parse().ok())?
            })
            .collect()
    }

    /// How many suspended async handlers node `rank`'s restore re-executed (its
    /// `actors restored` line); panics if the node was not restored.
    #[allow(dead_code)]
    pub fn reexecuted_handlers(&self, rank: u16) -> u64 {
        self.lines
            .iter()
            .filter(|l| l.contains(&format!("node {rank}: actors restored")))
            .filter_map(|l| l.split("suspended_handlers=").nth(1))
            .filter_map(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .next()
            .unwrap_or_else(|| panic!("node {rank} was not restored:\n{}", self.lines.join("\n")))
    }

    /// Whether any line contains `needle`.
    pub fn has(&self, needle: &str) -> bool {
        self.lines.iter().any(|l| l.contains(needle))
    }
}

/// Each kill of `victims` (in any order, a node killed twice listed twice) was answered by
/// one restart of that node, and no other node restarted or rolled back.
pub fn assert_one_restart_per_kill(f: &Finished, victims: &[u16]) {
    let (mut restarted, mut killed) = (f.restarted(), victims.to_vec());
    restarted.sort();
    killed.sort();
    assert_eq!(
        restarted, killed,
        "one restart per kill, of the killed nodes only"
    );
    killed.dedup();
    assert_only_restarted(f, &killed);
}

/// Survivors neither restarted nor rolled back; the `killed` nodes (in increasing order)
/// were restarted by the launcher.
/// Each node of `ranks` replayed logged determinants after its restart (its
/// order-sensitive `what` was restored from a checkpoint taken a while before the kill).
pub fn assert_replayed_determinants(f: &Finished, ranks: &[u16], what: &str) {
    let finals = f.finals();
    for r in ranks {
        assert!(
            finals[r]["determinants_replayed"] > 0,
            "node {r}'s restored {what} replayed logged deliveries: {:?}",
            finals[r]
        );
    }
}

pub fn assert_only_restarted(f: &Finished, killed: &[u16]) {
    assert_only_rolled_back(f, killed);
    let mut restarted = f.restarted();
    restarted.sort();
    restarted.dedup();
    assert_eq!(restarted, killed, "exactly the killed nodes were restarted");
}

/// Survivors never rolled back; the `failed` nodes did (in a new process or in place):
/// each one's final totals come from a later incarnation.
pub fn assert_only_rolled_back(f: &Finished, failed: &[u16]) {
    let finals = f.finals();
    assert_eq!(
        finals.len(),
        usize::from(f.nodes),
        "every node reports its totals"
    );
    for (rank, totals) in &finals {
        assert_eq!(
            totals.get("contract_violations"),
            Some(&0),
            "node {rank}: every regenerated message equals the copy delivered before the \
             failure"
        );
        if failed.contains(rank) {
            assert!(totals["incarnation"] > 0, "node {rank} rolled back");
        } else {
            assert_eq!(
                totals["incarnation"], 0,
                "survivor {rank} never rolled back"
            );
        }
    }
}

/// Every node but `restarted` connected to `restarted`'s first replacement at an address
/// starting with `addr` (a spare slot or a spare host).
pub fn assert_peers_reached_replacement(f: &Finished, restarted: u16, addr: &str) {
    for peer in (0..f.nodes).filter(|&p| p != restarted) {
        assert!(
            f.has(&format!(
                "node {peer}: connection to a restarted peer is up peer={restarted} incarnation=1 addr={addr}"
            )),
            "node {peer} did not reach node {restarted}'s replacement at {addr}"
        );
    }
}

/// The random choices of a test (xorshift): seeded from `LAZARUS_TEST_SEED` if set, else
/// from the clock; the seed is printed, so a failing schedule can be run again.
pub struct TestRng(u64);

impl TestRng {
    /// A generator seeded as above.
    pub fn from_env() -> TestRng {
        let seed = std::env::var("LAZARUS_TEST_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .subsec_nanos() as u64
            });
        eprintln!("LAZARUS_TEST_SEED={seed}");
        TestRng(seed | 1)
    }

    /// A number below `bound` (not exactly uniform; good enough for schedules).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

/// SIGKILL's number.
pub const SIGKILL: i32 = 9;
/// SIGSTOP's number (Linux).
pub const SIGSTOP: i32 = 19;
/// SIGCONT's number (Linux).
pub const SIGCONT: i32 = 18;

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}
