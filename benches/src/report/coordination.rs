//! Set checkpoint coordination time against the number of actors per node: runs the
//! `checkpoint_coordination` criterion benchmark and plots its medians.

use super::{plot, Context, Section, QUICK_CRITERION};
use crate::coordination::{measured, table, ACTORS, GROUP};
use crate::criterion_data::criterion_dir;
use crate::error::{Error, Result};

/// Runs the benchmark and builds the section with its table and plot.
pub fn section(ctx: &Context) -> Result<Section> {
    let args = if ctx.options.quick {
        QUICK_CRITERION
    } else {
        &[]
    };
    let since = ctx.cargo_bench(GROUP, args)?;
    let points = measured(&criterion_dir(), since);
    if points.len() != ACTORS.len() {
        return Err(Error::new(format!(
            "criterion wrote {} of {} fresh estimates under {}",
            points.len(),
            ACTORS.len(),
            criterion_dir().join(GROUP).display()
        )));
    }
    let provenance = ctx.provenance(
        "criterion median of its samples (each sample: many pause + resume cycles), all \
         counts in the same run",
    );
    let svg = ctx.out("coordination.svg");
    plot::lines(
        &svg,
        &plot::LinePlot {
            title: "Set checkpoint coordination: pause + resume every core of a node",
            x_desc: "busy actors on the node",
            y_desc: "coordination time (µs)",
            log_x: true,
            log_y: false,
            lines: vec![plot::Line {
                name: "median".into(),
                points: points.iter().map(|&(k, ns)| (k as f64, ns / 1e3)).collect(),
                color: 0,
                hollow: false,
            }],
            x_format: |v| format!("{v:.0}"),
            footer: &provenance,
        },
    )?;
    let body = format!(
        "`cargo bench -p lazarus-benches --bench checkpoint_coordination`: the time for a \
         node to stop all its cores between two actor turns and let them go again — what a \
         coordinated checkpoint of a correlated set costs before any state is serialized — \
         while every actor keeps a token moving around a ring over all cores (so the cores \
         are busy when the pause is requested).\n\n![coordination]({})\n\n{}\n_{provenance}._\n",
        super::file_name(&svg),
        table(&points),
    );
    Ok(Section {
        title: "4. Set checkpoint coordination".into(),
        body,
    })
}
