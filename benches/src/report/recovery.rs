//! Recovery of a node SIGKILLed mid-run: each app on 4 nodes with recovery on, node
//! [`VICTIM`] SIGKILLed on cue between two of its checkpoints; the
//! phases of its recovery from the launcher's timeline, the work it lost and redid, and
//! whether the run still gave the failure-free answer.

use super::apps::{checkpoint_every, yes_no, AppRuns, Mode, Sample};
use super::{plot, Context, Section};
use crate::error::{Error, Result};
use crate::runs::{self, timeline_entry, Cue, TimelineEntry, DIED};
use crate::stats::median;
use std::fmt::Write as _;
use std::time::Duration;

/// The node that is killed (not node 0, which prints the RESULT).
pub const VICTIM: u16 = 2;

/// The phases of a recovery, in order.
pub const PHASES: [&str; 4] = [
    "detection (kill → supervisor sees the death)",
    "restart + checkpoint load",
    "restore actors (→ resumed)",
    "replay (→ every peer answered)",
];

/// What one run with a kill showed.
struct Recovery {
    kill_at: f64,
    phases: [f64; 4],
    reconnected: Option<f64>,
    source: String,
    lost: f64,
    /// False when the restored checkpoint's capture time is only bounded (`lost` is then
    /// an upper bound).
    lost_exact: bool,
    replayed: f64,
    result_at: f64,
    same_answer: bool,
    verified: bool,
}

fn victim<'a>(
    timeline: &'a [TimelineEntry],
    found: impl Fn(&TimelineEntry) -> bool + 'a,
) -> impl Iterator<Item = &'a TimelineEntry> + 'a {
    timeline
        .iter()
        .filter(move |e| e.rank == VICTIM && found(e))
}

/// When to kill the victim: on a cue (a line of the run) and a delay after it.
#[derive(Clone, Copy, Debug)]
struct Plan {
    /// Cue on the victim's first committed checkpoint; else on the launcher starting it.
    on_checkpoint: bool,
    /// Delay after the cue.
    delay: Duration,
}

impl Plan {
    /// Whether `line` is the cue.
    fn is_cue(&self, line: &str) -> bool {
        if self.on_checkpoint {
            timeline_entry(line).is_some_and(|e| e.rank == VICTIM && e.is_event("checkpoint"))
        } else {
            line.starts_with(&format!("node {VICTIM} pid "))
        }
    }
}

/// The kill plan of an app, from its failure-free runs with recovery on: half a
/// checkpoint period after the victim's first committed checkpoint (so it has a
/// checkpoint to restore and loses some work), but no later than half-way from there to
/// the RESULT. If any of those runs committed no checkpoint on the victim before its
/// RESULT (runs about as short as a checkpoint period: a run with a kill may well end
/// before its cue), half-way from its start to the RESULT of the quickest run, and it
/// restarts from the beginning. Cued on the run's own lines rather
/// than a fixed time since the launch, because start-up times vary by up to a second on a
/// loaded host.
fn plan(r: &AppRuns, every: Duration) -> Plan {
    let on = r.of(Mode::On);
    let remaining: Vec<f64> = on
        .iter()
        .filter_map(|s| {
            let first = victim(&s.run.timeline(), |e| e.is_event("checkpoint"))
                .next()?
                .at;
            (first < s.result_at).then_some(s.result_at - first)
        })
        .collect();
    match median(&remaining).filter(|_| remaining.len() == on.len()) {
        Some(left) => Plan {
            on_checkpoint: true,
            delay: Duration::from_secs_f64((every.as_secs_f64() / 2.0).min(left / 2.0)),
        },
        None => Plan {
            on_checkpoint: false,
            delay: Duration::from_secs_f64(
                on.iter().map(|s| s.result_at).fold(f64::INFINITY, f64::min) / 2.0,
            )
            .min(every),
        },
    }
}

/// Tries per run with a kill: a run that ends before its kill was due is repeated with
/// half the delay, the last time with none.
const ATTEMPTS: u32 = 3;

/// The fallback for a run too short to be killed mid-run from outside (npb-ep class W
/// ends within a checkpoint period of the victim's first checkpoint): the `stall`
/// failpoint holds the victim `STALL_K` handler calls after a checkpoint, alive and with
/// work since that checkpoint lost, and the kill lands in the hold.
const STALL_K: u64 = 4;

/// One run with a kill `delay` after `plan`'s cue, or with `stall` in the stall
/// failpoint's hold; `None` if the run ended before the victim was killed.
fn one_run(
    ctx: &Context,
    r: &AppRuns,
    plan: Plan,
    delay: Duration,
    stall: bool,
) -> Result<Option<Recovery>> {
    let every = checkpoint_every(ctx.options.quick);
    let mut launch = Mode::On.launch(&r.app, every);
    if stall {
        launch.env.push((
            "LAZARUS_FAILPOINT".into(),
            format!("stall:{VICTIM}:{STALL_K}:30000"),
        ));
    }
    let stalls = format!("failpoint: node {VICTIM} stalls ");
    // Failure-free reference time, for the timeout of a run that goes wrong.
    let free = r.median_of(Mode::On, |s| Ok(s.run.wall.as_secs_f64()))?;
    launch.timeout = Duration::from_secs_f64(60.0 + 10.0 * free);
    let mut cued = false;
    let mut finished = false;
    let run = runs::run_to_end(&ctx.options.bins, &launch, |line| {
        if timeline_entry(line).is_some_and(|e| e.rank == VICTIM && e.is_event("finished")) {
            // The victim's main finished: a kill now would not interrupt the work this
            // bench measures the recovery of.
            finished = true;
            return Some(Cue::Cancel { rank: VICTIM });
        }
        let cue = if stall {
            line.contains(&stalls)
        } else {
            plan.is_cue(line)
        };
        (!cued && !finished && cue).then(|| {
            cued = true;
            Cue::Kill {
                rank: VICTIM,
                // In a stall: once the checkpoint before it has committed.
                after: if stall {
                    Duration::from_millis(200)
                } else {
                    delay
                },
            }
        })
    })?;
    if !run.success {
        let killed_after_finishing = run.kills.first().is_some_and(|(_, at)| {
            run.lines.iter().any(|l| {
                l.at <= *at
                    && timeline_entry(&l.text)
                        .is_some_and(|e| e.rank == VICTIM && e.is_event("finished"))
            })
        });
        if killed_after_finishing {
            // Raced with the victim's shutdown: not a mid-run failure; try again.
            return Ok(None);
        }
        return Err(Error::new(format!(
            "`{}` failed:\n{}",
            run.command,
            run.tail()
        )));
    }
    let timeline = run.timeline();
    let missing = |what: &str| {
        Error::new(format!(
            "`{}`: no timeline entry for node {VICTIM} {what}:\n{}",
            run.command,
            run.tail()
        ))
    };
    // The kill on the launcher's timeline clock.
    let killed = match (run.kills.first(), run.timeline_origin()) {
        (Some((_, at)), Some(origin)) => at.as_secs_f64() - origin,
        _ => return Ok(None),
    };
    let after = |e: &TimelineEntry| e.at >= killed - 0.002;
    // No death after the kill: the victim had already finished its work.
    let Some(died) = victim(&timeline, |e| after(e) && e.what.starts_with(DIED)).next() else {
        return Ok(None);
    };
    // Killed as the run ended (every other node had finished): nothing to recover.
    if died.what.contains("not restarted") {
        return Ok(None);
    }
    let died = died.at;
    let Some(loaded) = victim(&timeline, |e| after(e) && e.is_event("loaded")).next() else {
        // The others finished while it restarted (it had done its part before the kill;
        // the supervisor stopped the replacement): the kill came too late; try again.
        if victim(&timeline, |e| after(e) && e.what.contains("not restarted"))
            .next()
            .is_some()
        {
            return Ok(None);
        }
        return Err(missing("loading its checkpoint"));
    };
    let source = loaded.field("source").unwrap_or("?").to_string();
    let resumed = victim(&timeline, |e| after(e) && e.is_event("resumed"))
        .next()
        .ok_or_else(|| missing("resuming"))?
        .at;
    let replayed = victim(&timeline, |e| after(e) && e.is_event("replayed"))
        .next()
        .map_or(resumed, |e| e.at);
    // The checkpoint it restored: its id is in the source (`directory:3`, `buddy:3`);
    // its state was captured when that checkpoint started (commit time - duration). A
    // node killed just after storing a checkpoint may not have printed its commit: then
    // the commit before it (or the launch) bounds the capture from below.
    let restored_id: Option<u64> = source.split(':').nth(1).and_then(|id| id.parse().ok());
    let commits: Vec<&TimelineEntry> =
        victim(&timeline, |e| e.at <= killed && e.is_event("checkpoint")).collect();
    let commit_of = |id: u64| {
        commits
            .iter()
            .rev()
            .find(|e| e.field("id").and_then(|v| v.parse().ok()) == Some(id))
    };
    let (captured, exact) = match restored_id {
        None => (0.0, true), // from the beginning: everything since the launch is redone
        Some(id) => match commit_of(id) {
            Some(c) => (c.at - c.number("total_ms")? / 1e3, true),
            None => (
                (1..id).rev().find_map(commit_of).map_or(0.0, |c| c.at),
                false,
            ),
        },
    };
    let mut resent = 0.0;
    for e in timeline.iter().filter(|e| {
        e.rank != VICTIM
            && after(e)
            && e.is_event("peer-rollback")
            && e.field("from") == Some(&VICTIM.to_string())
    }) {
        resent += e.number("resent")?;
    }
    let reconnected = timeline
        .iter()
        .find(|e| e.rank != VICTIM && after(e) && e.is_event("reconnected"))
        .map(|e| e.at - killed);
    let sample = Sample::from_run(run)?;
    let loaded_at = loaded.at;
    let ends = [died, loaded_at.max(died), resumed.max(loaded_at).max(died)];
    let phases = [
        (died - killed).max(0.0),
        ends[1] - died,
        ends[2] - ends[1],
        replayed.max(ends[2]) - ends[2],
    ];
    Ok(Some(Recovery {
        kill_at: killed,
        phases,
        reconnected,
        source,
        lost: killed - captured,
        lost_exact: exact,
        replayed: resent,
        result_at: sample.result_at,
        same_answer: Some(sample.answer()) == r.reference_answer(),
        verified: sample.result.verified(),
    }))
}

/// Runs every app with a kill `reps` times (apps interleaved within a repetition) and
/// builds the section with its table and plot.
pub fn section(ctx: &Context, runs: &[AppRuns]) -> Result<Section> {
    let every = checkpoint_every(ctx.options.quick);
    let plans: Vec<Plan> = runs.iter().map(|r| plan(r, every)).collect();
    let mut missed = 0;
    let mut stalled: Vec<&str> = Vec::new();
    let mut results: Vec<Vec<Recovery>> = runs.iter().map(|_| Vec::new()).collect();
    for rep in 0..ctx.options.reps {
        for (i, r) in runs.iter().enumerate() {
            let mut rec = None;
            for attempt in 0..=ATTEMPTS {
                let stall = attempt == ATTEMPTS;
                let delay = if attempt + 1 >= ATTEMPTS {
                    Duration::ZERO
                } else {
                    plans[i].delay / 2u32.pow(attempt)
                };
                rec = one_run(ctx, r, plans[i], delay, stall).map_err(|e| e.context(r.app.name))?;
                if rec.is_some() {
                    if stall {
                        stalled.push(r.app.name);
                    }
                    break;
                }
                missed += 1;
                ctx.progress(&format!(
                    "rep {} {}: the run ended before node {VICTIM} was killed; again {}",
                    rep + 1,
                    r.app.name,
                    if attempt + 1 == ATTEMPTS {
                        "with the stall failpoint"
                    } else {
                        "with a shorter delay"
                    }
                ));
            }
            let rec = rec.ok_or_else(|| {
                Error::new(format!(
                    "{}: node {VICTIM} was never killed in {ATTEMPTS} runs: each ended first",
                    r.app.name
                ))
            })?;
            ctx.progress(&format!(
                "rep {} {} killed node {VICTIM} at {:.2} s: recovered in {:.3} s, same answer: {}",
                rep + 1,
                r.app.name,
                rec.kill_at,
                rec.phases.iter().sum::<f64>(),
                rec.same_answer
            ));
            results[i].push(rec);
        }
    }
    let med = |v: Vec<f64>| median(&v).unwrap_or(f64::NAN);
    let mut table = String::from(
        "| app | killed at (s) | restored from | detection (s) | restart + load (s) | \
         restore (s) | replay (s) | total (s) | survivors reconnected (s) | lost work (s) | \
         lost work / run | messages resent | time to RESULT vs failure-free | \
         same answer as failure-free | verified |\n\
         |---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n",
    );
    let mut bars = Vec::new();
    for (r, recs) in runs.iter().zip(&results) {
        let free = r.median_of(Mode::On, |s| Ok(s.result_at))?;
        let phases: Vec<f64> = (0..PHASES.len())
            .map(|p| med(recs.iter().map(|x| x.phases[p]).collect()))
            .collect();
        let total: f64 = phases.iter().sum();
        let lost = med(recs.iter().map(|x| x.lost).collect());
        let bound = if recs.iter().all(|x| x.lost_exact) {
            ""
        } else {
            "≤ "
        };
        let mut sources: Vec<&str> = recs.iter().map(|x| x.source.as_str()).collect();
        sources.dedup();
        let reconnected: Vec<f64> = recs.iter().filter_map(|x| x.reconnected).collect();
        let _ = writeln!(
            table,
            "| {} | {:.2} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {total:.3} | {} | {bound}{lost:.2} | {bound}{:.0} % | {:.0} | {:.2}× | {} | {} |",
            r.app.name,
            med(recs.iter().map(|x| x.kill_at).collect()),
            sources.join(", "),
            phases[0],
            phases[1],
            phases[2],
            phases[3],
            median(&reconnected).map_or("-".into(), |v| format!("{v:.3}")),
            100.0 * lost / free,
            med(recs.iter().map(|x| x.replayed).collect()),
            med(recs.iter().map(|x| x.result_at).collect()) / free,
            yes_no(recs.iter().all(|x| x.same_answer)),
            yes_no(recs.iter().all(|x| x.verified)),
        );
        bars.push(phases);
    }
    let provenance = ctx.provenance(&format!(
        "{}; apps interleaved within each repetition; failure-free reference from the \
         overhead runs of the same invocation",
        ctx.reps_text()
    ));
    let svg = ctx.out("recovery.svg");
    plot::stacked_bars(
        &svg,
        &plot::StackedBars {
            title: &format!(
                "Recovery of node {VICTIM} after a SIGKILL (4 nodes, checkpoint every {} ms)",
                every.as_millis()
            ),
            x_desc: "seconds after the SIGKILL",
            rows: runs.iter().map(|r| r.app.name.to_string()).collect(),
            phases: PHASES.iter().map(|p| p.to_string()).collect(),
            values: bars,
            footer: &provenance,
        },
    )?;
    let body = format!(
        "Each app as in the overhead section with recovery on (checkpoint every {every} ms), \
         and node {VICTIM} SIGKILLed half a checkpoint period after its first committed \
         checkpoint (at most half-way from there to the end of the failure-free run; if \
         the failure-free runs took no checkpoint on it before their RESULT, half-way from \
         its start to the quickest one's RESULT: it then restarts from the beginning), \
         cued on the run's own output because start-up times vary on a loaded host. Runs that \
         ended before their kill was due are repeated with half the delay (the last time \
         none); in this report: {missed}. A run that still ended first is repeated with the \
         `stall` failpoint (`LAZARUS_FAILPOINT=stall:{VICTIM}:{STALL_K}:30000`: node {VICTIM} \
         takes a checkpoint after {STALL_K} handler calls, makes {STALL_K} more, then holds) and \
         killed 200 ms into the hold; runs killed that way: {stalled}. Phases, from the launcher's timeline \
         (`timeline ...` lines, built from the nodes' `lazarus-event` lines): \
         **detection** = kill → the supervisor sees the process die (the kill's time is put on \
         the launcher's clock from the arrival times of its timeline lines, to within a few \
         ms); **restart + \
         checkpoint load** = → the new incarnation has loaded its newest intact checkpoint \
         (`loaded`); **restore** = → the app's main has re-spawned its actors and their \
         checkpointed states are back (`resumed`); **replay** = → every peer has answered \
         its rollback, i.e. all logged messages it lost have been resent (`replayed`). \
         **Survivors reconnected** = when the first survivor's connection to the new \
         incarnation is up. **Lost work** = the time from the moment the restored \
         checkpoint was taken (its commit time minus its duration; the launch if it \
         restarted from the beginning) to the kill: the victim's execution that had to be \
         redone (marked ≤ when the victim was killed before it could report the commit of \
         the checkpoint it restored: the commit before bounds it); **lost work / run** divides it by the failure-free run's time from launch \
         to RESULT. **Messages resent** = logged messages the survivors resent to the \
         victim. **Same answer** compares every RESULT field except timings with the \
         failure-free run (checksum for jacobi2d, the verification values for NPB).\n\n\
         ![recovery]({file})\n\n{table}\n_{provenance}._\n",
        every = every.as_millis(),
        file = super::file_name(&svg),
        stalled = if stalled.is_empty() {
            "none".to_string()
        } else {
            stalled.join(", ")
        },
    );
    Ok(Section {
        title: "5. Recovery timeline".into(),
        body,
    })
}
