//! Local messaging against actix, kameo, ractor and the Tokio baseline: runs the
//! `local_messaging` criterion benchmark and shows its table and a grouped bar plot.

use super::{plot, Context, Section, QUICK_CRITERION};
use crate::criterion_data::criterion_dir;
use crate::error::{Error, Result};
use crate::local_messaging::{measured, table, MAIN_CONTENDERS, SCENARIOS};

/// Runs the benchmark and builds the section.
pub fn section(ctx: &Context) -> Result<Section> {
    let args = if ctx.options.quick {
        QUICK_CRITERION
    } else {
        &[]
    };
    let since = ctx.cargo_bench("local_messaging", args)?;
    let rows = measured(&criterion_dir(), since);
    if rows.is_empty() {
        return Err(Error::new(format!(
            "criterion wrote no fresh estimates under {}",
            criterion_dir().display()
        )));
    }
    let provenance =
        ctx.provenance("criterion median of its samples, all contenders in the same run");
    let series = MAIN_CONTENDERS
        .iter()
        .map(|&c| {
            let values = SCENARIOS
                .iter()
                .map(|s| {
                    rows.iter()
                        .find(|m| m.scenario.group == s.group && m.contender == c)
                        .map(|m| m.per_element_ns())
                })
                .collect();
            (c.to_string(), values)
        })
        .collect();
    let svg = ctx.out("local-messaging.svg");
    plot::grouped_bars(
        &svg,
        &plot::BarPlot {
            title: "Local messaging: time per element (lower is better)",
            y_desc: "median time per message / ask / actor (ns, log scale)",
            groups: SCENARIOS
                .iter()
                .map(|s| format!("{} (per {})", s.group, s.unit))
                .collect(),
            series,
            log_y: true,
            reference: None,
            value_format: plot::compact_time,
            footer: &provenance,
        },
    )?;
    let body = format!(
        "`cargo bench -p lazarus-benches --bench local_messaging`: every contender on the \
         layout of a Lazarus node (one pinned thread per core), doing the same work \
         (scenarios and fairness rules in `benches/benches/local_messaging/main.rs`). The \
         `lazarus_no_*` and `tokio_mpsc_spin` rows are diagnostic variants of the ask \
         scenario (see the bench's documentation); the plot shows the five main \
         contenders.\n\n![local messaging]({})\n\n{}\n_{provenance}._\n",
        super::file_name(&svg),
        table(&rows),
    );
    Ok(Section {
        title: "6. Local messaging".into(),
        body,
    })
}
