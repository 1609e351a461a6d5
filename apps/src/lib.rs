//! Shared pieces of the Lazarus miniapps: the machine-readable `RESULT` line every app
//! prints last, how a run ends on every node ([`ending`]), the CPU time of an app's
//! kernel ([`kernel_time`]), the checksum mixer the apps use to fingerprint their
//! answers, and building the binaries for tests and benches ([`binaries`]).

use std::fmt::Display;

pub mod binaries;
pub mod ending;
pub mod kernel_time;
pub mod npb;

/// The `RESULT` line every miniapp prints last: the runtime's own ([`lazarus::ResultLine`]).
pub use lazarus::ResultLine;

/// Checks that a freshly spawned actor got the id the app computed for it (`what` names
/// it in the error): ids are `(rank, spawn order)`, and other nodes, and a restarted
/// node restoring its checkpoint, address actors by them.
pub fn expect_id<A: lazarus::Actor>(
    actor: lazarus::ActorRef<A>,
    expected: lazarus::ActorId,
    what: impl Display,
) -> Result<lazarus::ActorRef<A>, String> {
    if actor.id() == expected {
        Ok(actor)
    } else {
        Err(format!(
            "{what} got id {} instead of {expected}",
            actor.id()
        ))
    }
}

/// Parses a `RESULT` line back into `(key, value)` pairs (including `app` and `verified`).
pub fn parse_result_line(line: &str) -> Option<Vec<(String, String)>> {
    let rest = line.trim().strip_prefix("RESULT ")?;
    rest.split_whitespace()
        .map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect()
}

/// Order-sensitive 64-bit mixing step (FNV-1a style with a final avalanche), used to
/// fingerprint sequences of values.
pub fn mix(acc: u64, value: u64) -> u64 {
    let mut h = (acc ^ value).wrapping_mul(0x0000_0100_0000_01b3);
    h ^= h >> 29;
    h.wrapping_mul(0xbf58_476d_1ce4_e5b9)
}

/// Installs a `tracing` subscriber that writes to stderr, filtered by `RUST_LOG`
/// (default `warn`), in colour only when stderr is a terminal: under `lazarus run` it is a
/// pipe to the launcher, and escape codes would end up in log files.
pub fn init_logging() {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// Ends an app: prints the error (with its `Display` text, not `Debug`) to stderr and
/// exits non-zero, or exits zero.
pub fn exit_with(result: Result<(), Box<dyn std::error::Error>>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_line_round_trips_through_the_parser() {
        let line = ResultLine::new("ring")
            .field("hops", 10)
            .field("checksum", "0xabc")
            .hex("digest", 0xabc)
            .elapsed(1.5)
            .finish(true);
        assert_eq!(
            line,
            "RESULT app=ring hops=10 checksum=0xabc digest=0x0000000000000abc \
             elapsed_s=1.500000 verified=true"
        );
        let parsed = parse_result_line(&line).unwrap();
        assert_eq!(parsed[0], ("app".into(), "ring".into()));
        assert_eq!(parsed.last().unwrap(), &("verified".into(), "true".into()));
    }

    #[test]
    fn mix_depends_on_order() {
        assert_ne!(mix(mix(0, 1), 2), mix(mix(0, 2), 1));
    }
}
