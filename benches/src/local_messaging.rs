//! What the local messaging benchmark measures (its scenarios, contenders and the issue's
//! targets) and the table of its results, read back from criterion's estimates. The
//! benchmark (`benches/local_messaging`) maps each scenario and contender to the code
//! that runs it; the benchmark's own summary and the results report both build their
//! tables from [`measured`] here.

use crate::criterion_data::median_ns;
use std::fmt::Write as _;
use std::path::Path;
use std::time::SystemTime;

/// Messages per round of the tell scenarios (a burst that stays in the caches).
pub const TELLS: u64 = 10_000;
/// Actors per round of the spawn scenario.
pub const SPAWNS: u64 = 100;
/// Asks per round of the actor-ask scenario.
pub const ACTOR_ASKS: u64 = 1_000;

/// Contender: Lazarus (criterion bench ids, so directory names, and table rows).
pub const LAZARUS: &str = "lazarus";
/// Contender: plain Tokio tasks and channels, the baseline.
pub const TOKIO: &str = "tokio_mpsc";
/// Contender: actix.
pub const ACTIX: &str = "actix";
/// Contender: kameo.
pub const KAMEO: &str = "kameo";
/// Contender: ractor.
pub const RACTOR: &str = "ractor";
/// Diagnostic variant of the ask scenario: Lazarus's ask without its timeout timer.
pub const LAZARUS_NO_TIMEOUT: &str = "lazarus_no_timeout";
/// Diagnostic variant of the ask scenario: Lazarus's idle cores park at once.
pub const LAZARUS_NO_SPIN: &str = "lazarus_no_spin";
/// Diagnostic variant of the ask scenario: a Tokio ponger that spins like Lazarus's cores.
pub const TOKIO_SPIN: &str = "tokio_mpsc_spin";
/// Contender of the actor-ask scenario: Lazarus's synchronous continuation
/// (`ctx.ask(..).reply_as::<H>()`, the reply a message of the asker).
pub const LAZARUS_REPLY_AS: &str = "lazarus_reply_as";

/// The contenders that are other runtimes or the baseline (not diagnostic variants), in
/// the order tables and plots show them.
pub const MAIN_CONTENDERS: [&str; 5] = [LAZARUS, TOKIO, ACTIX, KAMEO, RACTOR];

/// Scenario: a sender tells [`TELLS`] messages to a receiver on the same core.
pub const TELL_SAME_CORE: &str = "tell_same_core";
/// Scenario: the same with the receiver on the other core.
pub const TELL_CROSS_CORE: &str = "tell_cross_core";
/// Scenario: one ask and its reply between two cores.
pub const ASK_ROUNDTRIP: &str = "ask_roundtrip_cross_core";
/// Scenario: [`SPAWNS`] actors spawned, messaged and stopped.
pub const SPAWN: &str = "spawn";
/// Scenario: an actor's handler asks an actor on the other core [`ACTOR_ASKS`] times,
/// one after the other, awaiting each reply (Lazarus: an `async fn` handler awaiting
/// `ctx.ask`; kameo: an async handler awaiting `ActorRef::ask`), or continuing in the
/// reply's handler (`lazarus_reply_as`).
pub const ACTOR_ASK: &str = "actor_ask_cross_core";

/// A criterion group: every contender doing the same rounds.
pub struct Scenario {
    /// The criterion group name.
    pub group: &'static str,
    /// Elements in one round (criterion's throughput unit).
    pub elements: u64,
    /// What an element is, for the table.
    pub unit: &'static str,
    /// The contenders measured in this scenario, in order.
    pub contenders: &'static [&'static str],
}

/// Every scenario of the benchmark.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        group: TELL_SAME_CORE,
        elements: TELLS,
        unit: "msg",
        contenders: &MAIN_CONTENDERS,
    },
    Scenario {
        group: TELL_CROSS_CORE,
        elements: TELLS,
        unit: "msg",
        contenders: &MAIN_CONTENDERS,
    },
    Scenario {
        group: ASK_ROUNDTRIP,
        elements: 1,
        unit: "ask",
        contenders: &[
            LAZARUS,
            TOKIO,
            ACTIX,
            KAMEO,
            RACTOR,
            LAZARUS_NO_TIMEOUT,
            LAZARUS_NO_SPIN,
            TOKIO_SPIN,
        ],
    },
    Scenario {
        group: SPAWN,
        elements: SPAWNS,
        unit: "actor",
        contenders: &MAIN_CONTENDERS,
    },
    Scenario {
        group: ACTOR_ASK,
        elements: ACTOR_ASKS,
        unit: "ask",
        contenders: &[LAZARUS, LAZARUS_REPLY_AS, KAMEO],
    },
];

/// A target of the issue: Lazarus's median time at most `max_ratio` times `other`'s.
struct Target {
    group: &'static str,
    other: &'static str,
    max_ratio: f64,
    text: &'static str,
}

const TARGETS: &[Target] = &[
    Target {
        group: TELL_SAME_CORE,
        other: ACTIX,
        max_ratio: 1.0,
        text: "throughput ≥ actix",
    },
    Target {
        group: TELL_SAME_CORE,
        other: KAMEO,
        max_ratio: 0.5,
        text: "throughput ≥ 2× kameo",
    },
    Target {
        group: ASK_ROUNDTRIP,
        other: TOKIO,
        max_ratio: 1.5,
        text: "round trip ≤ 1.5× tokio",
    },
    Target {
        group: ACTOR_ASK,
        other: LAZARUS_REPLY_AS,
        max_ratio: 1.2,
        text: "awaited ask ≤ 1.2× the reply_as continuation",
    },
    Target {
        group: ACTOR_ASK,
        other: KAMEO,
        max_ratio: 1.0,
        text: "awaited ask faster than kameo's",
    },
];

/// One contender's median in one scenario.
pub struct Measured {
    /// The scenario.
    pub scenario: &'static Scenario,
    /// The contender.
    pub contender: &'static str,
    /// Median time of one round, ns.
    pub round_ns: f64,
    /// Lazarus's median round time over this one's (below 1, Lazarus is faster), if
    /// Lazarus was measured too.
    pub lazarus_ratio: Option<f64>,
}

impl Measured {
    /// Median time per element (message, ask or actor), ns.
    pub fn per_element_ns(&self) -> f64 {
        self.round_ns / self.scenario.elements as f64
    }
}

/// Everything criterion measured (at or after `since`) in `dir`, scenario by scenario.
pub fn measured(dir: &Path, since: SystemTime) -> Vec<Measured> {
    let mut out = Vec::new();
    for s in SCENARIOS {
        let lazarus = median_ns(dir, &format!("{}/{LAZARUS}", s.group), since);
        for &contender in s.contenders {
            if let Some(ns) = median_ns(dir, &format!("{}/{contender}", s.group), since) {
                out.push(Measured {
                    scenario: s,
                    contender,
                    round_ns: ns,
                    lazarus_ratio: lazarus.map(|l| l / ns),
                });
            }
        }
    }
    out
}

/// A time in ns in the unit that suits it.
pub fn human_time(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.3} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

fn human_rate(per_sec: f64) -> String {
    if per_sec >= 1e6 {
        format!("{:.2} M", per_sec / 1e6)
    } else if per_sec >= 1e3 {
        format!("{:.1} k", per_sec / 1e3)
    } else {
        format!("{per_sec:.0}")
    }
}

/// The markdown table of medians, ratios and the targets with their verdicts.
pub fn table(measured: &[Measured]) -> String {
    let mut out = String::from(
        "| scenario | contender | median / round | per element | throughput | \
         lazarus / contender (time) | target | verdict |\n\
         |---|---|---:|---:|---:|---:|---|---|\n",
    );
    for m in measured {
        let s = m.scenario;
        let ratio_text = m.lazarus_ratio.map_or("-".into(), |r| format!("{r:.2}"));
        let (target, verdict) = match TARGETS
            .iter()
            .find(|t| t.group == s.group && t.other == m.contender)
        {
            Some(t) => (
                format!("{} (ratio ≤ {})", t.text, t.max_ratio),
                match m.lazarus_ratio {
                    Some(r) if r <= t.max_ratio => "**PASS**",
                    Some(_) => "**MISS**",
                    None => "-",
                },
            ),
            None => (String::new(), ""),
        };
        let per = m.per_element_ns();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {}{}/s | {ratio_text} | {target} | {verdict} |",
            s.group,
            m.contender,
            human_time(m.round_ns),
            human_time(per),
            human_rate(1e9 / per),
            s.unit,
        );
    }
    out
}
