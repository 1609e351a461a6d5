//! `jacobi2d`: a 2D Jacobi heat stencil on an N x N grid, split over a 2D grid of tile
//! actors spread over all nodes and cores, with a halo exchange every iteration.
//!
//! Every tile owns a block of the grid plus a one-point ghost ring. Iteration `k` of a tile
//! needs the edges its (up to four) neighbours had after `k` updates; neighbours send them
//! as soon as they have them, tagged with `k`, and nobody waits for anybody else: there is
//! no global barrier per iteration. The boundary is fixed (top edge hot, left edge a ramp,
//! the rest cold) and the interior starts cold.
//!
//! Each point's update is the same floating-point expression evaluated in the same order
//! whatever the decomposition, so the final grid is bit-identical for any number of nodes
//! and any tile grid. The RESULT checksum is taken over the gathered global grid in global
//! row-major order, so it is decomposition-independent too, and rank 0 verifies the grid
//! against a sequential reference computed in-process (see [`Check`]).
//!
//! `--halo put` exchanges the edges with one-sided puts instead: every node's `main` steps
//! one strip of whole rows and puts its top and bottom rows into its neighbours' parts of
//! a window, one fence per step (see [`run_puts`]). The same sweep gives the same
//! checksum as the message version.

use clap::{Parser, ValueEnum};
use lazarus::dense::DenseVec;
use lazarus::{
    messages, Actor, ActorId, ActorRef, Cluster, ClusterSpec, Context, CoreId, Node, ReplyTo,
};
use lazarus_apps::kernel_time::KernelTime;
use lazarus_apps::{expect_id, init_logging, mix, ResultLine};
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// Largest accepted `--n`: the grid is gathered on rank 0 at the end.
const MAX_N: usize = 1 << 15;
/// Largest accepted number of tiles.
const MAX_TILES: usize = 1 << 20;
/// Point updates the automatic check may spend on a sequential reference (about a second
/// in a release build).
const REFERENCE_BUDGET: u128 = 1 << 30;
/// Side of the square windows checked exactly when the whole grid is too expensive.
const WINDOW: usize = 32;
/// Values per gathered message: whole rows, about 1 MiB, far below the transport's frame
/// limit whatever the tile shape.
const GATHER_CHUNK: usize = 1 << 17;

/// Run a 2D Jacobi heat stencil over tile actors on all nodes and cores.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Global grid size: N x N interior points.
    #[arg(long, default_value_t = 512)]
    n: usize,
    /// Jacobi iterations.
    #[arg(long, default_value_t = 100)]
    iters: u64,
    /// Tile grid `<TX>x<TY>`: TX tiles across, TY down (default: a near-square grid of two
    /// tiles per core of the whole cluster). Uneven splits are fine.
    #[arg(long, value_parser = parse_tiles)]
    tiles: Option<TileGrid>,
    /// Cores to use on each node (default: all this process may use).
    #[arg(long)]
    cores: Option<usize>,
    /// How rank 0 verifies the result (`auto`: the most thorough affordable check).
    #[arg(long, value_enum, default_value_t = CheckArg::Auto)]
    check: CheckArg,
    /// How neighbouring blocks exchange their edges: messages between tile actors, or
    /// one-sided puts into a window by each node's `main` (one strip of rows per node,
    /// single-threaded; `--tiles` does not apply).
    #[arg(long, value_enum, default_value_t = HaloPath::Message)]
    halo: HaloPath,
    /// For the test of the runtime's replay order: a tile answers a result request at
    /// once, also before its last step (as this app did until session 10). Exact under
    /// recovery only because the runtime counts same-node messages in a node's interval.
    #[arg(long, hide = true)]
    answer_early: bool,
    /// For the test of the runtime's determinism-contract checker: a restarted process
    /// adds a trace of its incarnation to the halos it sends, so its regenerated halos
    /// differ from the ones its neighbours received before the failure (a contract broken
    /// on purpose; the answer is then not the failure-free one).
    #[arg(long, hide = true)]
    break_contract: bool,
    /// Measure the CPU time of the sweeps and print it per node in a `KERNEL` line, with
    /// the process's CPU over the timed part: what everything else costs is the rest.
    /// Off by default: it reads the thread's CPU clock (a system call) twice per step.
    #[arg(long)]
    kernel_time: bool,
}

/// `--break-contract`: what this process adds to the first value of every halo (zero in
/// the first incarnation). Read from the environment, not the checkpoint, because the
/// point is that a restarted process behaves differently.
static HALO_SKEW: std::sync::OnceLock<f64> = std::sync::OnceLock::new();

/// `--check` choices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum CheckArg {
    /// `full` if affordable, else `windows` if affordable, else `bounds`.
    Auto,
    /// Sequential reference of the whole grid, compared bit for bit.
    Full,
    /// Exact sequential reference of five small windows (corners and centre).
    Windows,
    /// Only the bounds and monotonicity properties every Jacobi run here must have.
    Bounds,
}

/// `--halo`: how edges travel between blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum HaloPath {
    /// Tile actors send their edges to their neighbours as messages.
    Message,
    /// Each node's `main` puts its strip's edges into its neighbours' window parts.
    Put,
}

impl HaloPath {
    fn name(self) -> &'static str {
        match self {
            HaloPath::Message => "message",
            HaloPath::Put => "put",
        }
    }
}

/// What was actually checked (printed as `check=`). Every check also includes the
/// [`Check::Bounds`] properties.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    /// Every point equals the sequential reference bit for bit.
    Full,
    /// The points of five windows equal an exact sequential reference bit for bit.
    Windows,
    /// Every point is finite and within the boundary's range `[0, 1]` (maximum principle),
    /// and did not decrease in the last iteration (from a cold start under a non-negative
    /// boundary Jacobi rises monotonically).
    Bounds,
}

impl Check {
    fn name(self) -> &'static str {
        match self {
            Check::Full => "full",
            Check::Windows => "windows",
            Check::Bounds => "bounds",
        }
    }
}

/// A tile grid: `px` tiles across (columns), `py` tiles down (rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TileGrid {
    px: usize,
    py: usize,
}

fn parse_tiles(s: &str) -> Result<TileGrid, String> {
    let bad = || format!("`{s}` is not a tile grid like `4x2` (tiles across x tiles down)");
    let (x, y) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    let px: usize = x.trim().parse().map_err(|_| bad())?;
    let py: usize = y.trim().parse().map_err(|_| bad())?;
    if px == 0 || py == 0 {
        return Err(format!(
            "tile grid `{s}` must have at least one tile each way"
        ));
    }
    Ok(TileGrid { px, py })
}

/// A near-square grid of `target` tiles (more across than down when it cannot be square),
/// shrunk so that every tile keeps at least one point each way.
fn default_tiles(target: usize, n: usize) -> TileGrid {
    let target = target.max(1);
    let py = (1..=target)
        .take_while(|d| d * d <= target)
        .filter(|d| target % d == 0)
        .last()
        .unwrap_or(1);
    TileGrid {
        px: (target / py).min(n),
        py: py.min(n),
    }
}

/// Part `k` of `0..n` split into `parts` near-equal contiguous blocks.
fn split(n: usize, parts: usize, k: usize) -> Range<usize> {
    k * n / parts..(k + 1) * n / parts
}

/// The fixed value of ghost point (`gi`, `gj`) in padded global coordinates (interior
/// `1..=n` both ways): the top edge is hot, the left edge ramps from hot to cold, the bottom
/// and right edges are cold. Everything lies in `[0, 1]`, which the bounds check relies on.
fn boundary(n: usize, gi: usize, gj: usize) -> f64 {
    if gi == 0 {
        1.0
    } else if gj == 0 {
        1.0 - gi as f64 / (n + 1) as f64
    } else {
        0.0
    }
}

/// CPU time of this node's sweeps (the `KERNEL` line of `--kernel-time`). Only the sweep:
/// it reads and writes nothing but the tile's own grids, so recovery cannot change its
/// cost except through the memory bandwidth it shares; packing and unpacking halos touch
/// the buffers the sender-based log keeps, and count as outside the kernel.
static KERNEL_TIME: KernelTime = KernelTime::new();

/// One Jacobi step over the interior of a padded block of `rows` x `cols` points (row
/// stride `cols + 2`): reads `src`, writes the interior of `dst`, leaves its ghost ring.
///
/// Tiles and the sequential reference both call this, so every point is computed by the
/// very same expression, which is what makes results bit-identical across decompositions.
fn sweep(src: &[f64], dst: &mut [f64], rows: usize, cols: usize) {
    let s = cols + 2;
    for i in 1..=rows {
        let up = &src[(i - 1) * s + 1..i * s - 1];
        let mid = &src[i * s..(i + 1) * s];
        let down = &src[(i + 1) * s + 1..(i + 2) * s - 1];
        let out = &mut dst[i * s + 1..(i + 1) * s - 1];
        for (((o, u), d), w) in out.iter_mut().zip(up).zip(down).zip(mid.windows(3)) {
            *o = 0.25 * ((u + d) + (w[0] + w[2]));
        }
    }
}

/// Ghost sides of a tile, by the neighbour they come from.
const NORTH: usize = 0;
const SOUTH: usize = 1;
const WEST: usize = 2;
const EAST: usize = 3;

/// The side of the neighbour's ghost ring that our edge facing `side` fills.
fn opposite(side: usize) -> usize {
    side ^ 1
}

/// Where every tile lives; computed identically on every node, so any node can name any
/// tile's actor without a lookup service.
///
/// Tiles are numbered row-major. Node `r` owns the contiguous range of tiles
/// `split(tiles, nodes, r)`, i.e. bands of tile rows, so only band edges cross nodes. Rank 0
/// spawns the collector first (id `0:0`) and then its tiles; other nodes spawn only tiles,
/// in increasing order, so tile `t`'s id follows from its position in its node's range.
struct Layout {
    n: usize,
    grid: TileGrid,
    nodes: usize,
}

impl Layout {
    fn tiles(&self) -> usize {
        self.grid.px * self.grid.py
    }

    fn owned_by(&self, rank: usize) -> Range<usize> {
        split(self.tiles(), self.nodes, rank)
    }

    fn collector() -> ActorId {
        ActorId::new(0, 0).expect("0:0 is a valid id")
    }

    fn id(&self, tile: usize) -> Result<ActorId, String> {
        let rank = (0..self.nodes)
            .find(|&r| self.owned_by(r).contains(&tile))
            .ok_or_else(|| format!("tile {tile} is outside the tile grid"))?;
        let seq = tile - self.owned_by(rank).start + usize::from(rank == 0);
        ActorId::new(rank as u16, seq as u64).ok_or_else(|| "too many tiles".to_string())
    }

    /// Global interior rows and columns (0-based) of tile `tile`.
    fn extent(&self, tile: usize) -> (Range<usize>, Range<usize>) {
        let (ty, tx) = (tile / self.grid.px, tile % self.grid.px);
        (
            split(self.n, self.grid.py, ty),
            split(self.n, self.grid.px, tx),
        )
    }

    /// Neighbouring tiles by side (`None` at the global boundary).
    fn neighbours(&self, tile: usize) -> [Option<usize>; 4] {
        let (px, py) = (self.grid.px, self.grid.py);
        let (ty, tx) = (tile / px, tile % px);
        let mut n = [None; 4];
        n[NORTH] = (ty > 0).then(|| tile - px);
        n[SOUTH] = (ty + 1 < py).then(|| tile + px);
        n[WEST] = (tx > 0).then(|| tile - 1);
        n[EAST] = (tx + 1 < px).then(|| tile + 1);
        n
    }
}

/// A padded block of the global grid: `rows` x `cols` interior points at global offset
/// (`row0`, `col0`) plus a ghost ring, initialised cold inside and with the fixed boundary
/// wherever the ring lies on the global boundary (elsewhere the ring is a 0.0 placeholder
/// that halos overwrite).
fn initial_block(n: usize, rows: &Range<usize>, cols: &Range<usize>) -> Vec<f64> {
    let (h, w) = (rows.len(), cols.len());
    let s = w + 2;
    let mut u = vec![0.0; (h + 2) * s];
    // Padded global coordinates of local padded point (i, j) are (row0 + i, col0 + j).
    let on_boundary = |gi: usize, gj: usize| gi == 0 || gj == 0 || gi == n + 1 || gj == n + 1;
    for i in 0..h + 2 {
        for j in 0..s {
            let (gi, gj) = (rows.start + i, cols.start + j);
            if on_boundary(gi, gj) {
                u[i * s + j] = boundary(n, gi, gj);
            }
        }
    }
    u
}

/// One block of the grid, stepping in lockstep with its neighbours through halos.
#[derive(Actor, Serialize, Deserialize)]
struct Tile {
    index: usize,
    row0: usize,
    col0: usize,
    rows: usize,
    cols: usize,
    iters: u64,
    /// Updates done so far: `u` holds the grid after `level` updates.
    level: u64,
    /// Current values with ghost ring, `(rows + 2) x (cols + 2)`. Encoded as one block
    /// (it is encoded while the node's cores are paused for a checkpoint).
    #[serde(with = "lazarus::dense")]
    u: Vec<f64>,
    /// Scratch for the next level; after a step it holds the previous level. Not
    /// checkpointed (half of the state, and rebuilt from `u` before the first step after
    /// a restore): what the end needs of the previous level is in `monotone`.
    #[serde(skip)]
    next: Vec<f64>,
    /// Whether the last step lowered no point (checked when it is taken): Jacobi from a
    /// cold start under a non-negative boundary never lowers one.
    monotone: bool,
    neighbour_ids: [Option<ActorId>; 4],
    neighbours: [Option<ActorRef<Tile>>; 4],
    collector: Option<ActorRef<Collector>>,
    started: bool,
    /// Whether the collector has been told this tile is done.
    reported: bool,
    /// The result was asked for before this tile had finished; it is sent when it has.
    /// `main` asks only after every tile reported, but a restarted node replays its
    /// neighbours' logged messages in another order than they first came. The runtime
    /// keeps the request behind the same-node halo it followed, but the determinism
    /// contract asks handlers not to rely on the order of different senders at all
    /// (docs/semantics.md, "With recovery on"): handled the same whenever it arrives,
    /// the request makes the tile send the same in every execution.
    result_requested: bool,
    /// `--answer-early`: answer a result request at once, finished or not.
    answer_early: bool,
    /// Halos that arrived early, by level and side. In a failure-free run a neighbour is
    /// at most one level ahead (it needs our halo of level `k` to compute level `k + 1`);
    /// while a restarted tile replays, its neighbours' logged halos arrive all at once,
    /// so any number of future levels can be waiting (only per-sender order is
    /// guaranteed: see docs/semantics.md).
    pending: std::collections::BTreeMap<u64, [Option<DenseVec<f64>>; 4]>,
}

#[messages]
impl Tile {
    /// Resolves the neighbours, sends the level-0 halos and steps as far as it can.
    #[message]
    fn start(&mut self, ctx: &mut Context<Self>) {
        for side in 0..4 {
            self.neighbours[side] = self.neighbour_ids[side].map(|id| {
                ctx.node()
                    .actor_ref::<Tile>(id)
                    .unwrap_or_else(|e| panic!("tile {}: neighbour {id}: {e}", self.index))
            });
        }
        self.collector = Some(
            ctx.node()
                .actor_ref::<Collector>(Layout::collector())
                .unwrap_or_else(|e| panic!("tile {}: collector: {e}", self.index)),
        );
        self.started = true;
        if self.iters > 0 {
            self.send_halos();
        }
        self.advance();
    }

    /// A neighbour's edge after `level` updates, for our ghost `side`.
    #[message]
    fn halo(&mut self, level: u64, side: usize, values: DenseVec<f64>) {
        // Anything else would be a protocol bug; failing loudly beats a silent hang (the
        // failure hook ends the process).
        assert!(
            level >= self.level && level < self.iters && side < 4,
            "tile {}: halo for level {level} side {side} arrived at level {}",
            self.index,
            self.level
        );
        let slot = &mut self.pending.entry(level).or_default()[side];
        assert!(
            slot.is_none(),
            "tile {}: second halo for level {level} side {side}",
            self.index
        );
        *slot = Some(values);
        if self.started {
            self.advance();
        }
    }

    /// Asks for the final interior: sent to the collector now if this tile has done its
    /// last step, else as soon as it has.
    #[message]
    fn send_result(&mut self) {
        if self.level < self.iters && !self.answer_early {
            self.result_requested = true;
        } else {
            self.gather();
        }
    }
}

impl Tile {
    /// Whether no interior point of `u` is below its value in `next` (the level before).
    fn lowered_no_point(&self) -> bool {
        let s = self.cols + 2;
        (1..=self.rows).all(|i| (1..=self.cols).all(|j| self.next[i * s + j] <= self.u[i * s + j]))
    }

    /// Sends this tile's final values to the collector, whole rows at a time.
    fn gather(&self) {
        let s = self.cols + 2;
        let sane = self.monotone
            && (1..=self.rows)
                .all(|i| (1..=self.cols).all(|j| (0.0..=1.0).contains(&self.u[i * s + j])));
        let per_message = (GATHER_CHUNK / self.cols).max(1);
        let collector = self.collector.as_ref().expect("started before gathering");
        let mut first = 0;
        while first < self.rows {
            let last = (first + per_message).min(self.rows);
            let mut values = Vec::with_capacity((last - first) * self.cols);
            for i in first + 1..=last {
                values.extend_from_slice(&self.u[i * s + 1..(i + 1) * s - 1]);
            }
            collector
                .tell(Rows {
                    row0: self.row0 + first,
                    col0: self.col0,
                    cols: self.cols,
                    values: values.into(),
                    sane,
                })
                .unwrap_or_else(|e| panic!("tile {}: collector unreachable: {e}", self.index));
            first = last;
        }
    }

    fn new(layout: &Layout, index: usize, iters: u64, answer_early: bool) -> Result<Tile, String> {
        let (rows, cols) = layout.extent(index);
        let u = initial_block(layout.n, &rows, &cols);
        let mut neighbour_ids = [None; 4];
        for (side, t) in layout.neighbours(index).into_iter().enumerate() {
            neighbour_ids[side] = t.map(|t| layout.id(t)).transpose()?;
        }
        Ok(Tile {
            index,
            row0: rows.start,
            col0: cols.start,
            rows: rows.len(),
            cols: cols.len(),
            iters,
            level: 0,
            next: u.clone(),
            u,
            monotone: true,
            neighbour_ids,
            neighbours: Default::default(),
            collector: None,
            started: false,
            reported: false,
            result_requested: false,
            answer_early,
            pending: Default::default(),
        })
    }

    /// Steps while every halo of the current level is here; reports when done.
    fn advance(&mut self) {
        while self.level < self.iters {
            let level = self.level;
            let ready = (0..4).all(|side| {
                self.neighbours[side].is_none()
                    || self.pending.get(&level).is_some_and(|h| h[side].is_some())
            });
            if !ready {
                return;
            }
            let halos = self.pending.remove(&level);
            if self.next.len() != self.u.len() {
                // Restored from a checkpoint: any copy of `u` serves as scratch (its fixed
                // boundary is the same; the ghosts are refilled before they are read).
                self.next = self.u.clone();
            }
            for (side, values) in halos.into_iter().flatten().enumerate() {
                if let Some(values) = values {
                    self.fill_ghost(side, &values);
                }
            }
            KERNEL_TIME.measure(|| sweep(&self.u, &mut self.next, self.rows, self.cols));
            std::mem::swap(&mut self.u, &mut self.next);
            self.level += 1;
            if self.level == self.iters {
                self.monotone = self.lowered_no_point();
                KERNEL_TIME.end_window();
            }
            if self.level < self.iters {
                self.send_halos();
            }
        }
        if !self.reported {
            self.reported = true;
            let collector = self.collector.as_ref().expect("advance runs after start");
            collector
                .tell(Finished { tile: self.index })
                .unwrap_or_else(|e| panic!("tile {}: collector unreachable: {e}", self.index));
        }
        if std::mem::take(&mut self.result_requested) {
            self.gather();
        }
    }

    fn fill_ghost(&mut self, side: usize, values: &[f64]) {
        let (h, w, s) = (self.rows, self.cols, self.cols + 2);
        assert_eq!(
            values.len(),
            if side < WEST { w } else { h },
            "tile {}: halo of the wrong length for side {side}",
            self.index
        );
        match side {
            NORTH => self.u[1..=w].copy_from_slice(values),
            SOUTH => self.u[(h + 1) * s + 1..(h + 1) * s + 1 + w].copy_from_slice(values),
            _ => {
                let j = if side == WEST { 0 } else { w + 1 };
                for (i, v) in values.iter().enumerate() {
                    self.u[(i + 1) * s + j] = *v;
                }
            }
        }
    }

    /// The edge of the current level that faces `side`.
    fn edge(&self, side: usize) -> Vec<f64> {
        let (h, w, s) = (self.rows, self.cols, self.cols + 2);
        match side {
            NORTH => self.u[s + 1..s + 1 + w].to_vec(),
            SOUTH => self.u[h * s + 1..h * s + 1 + w].to_vec(),
            _ => {
                let j = if side == WEST { 1 } else { w };
                (1..=h).map(|i| self.u[i * s + j]).collect()
            }
        }
    }

    fn send_halos(&self) {
        let edges: [Option<Vec<f64>>; 4] =
            std::array::from_fn(|side| self.neighbours[side].as_ref().map(|_| self.edge(side)));
        for (side, edge) in edges.into_iter().enumerate() {
            if let (Some(n), Some(mut values)) = (&self.neighbours[side], edge) {
                if let (Some(&skew), Some(v)) = (HALO_SKEW.get(), values.first_mut()) {
                    *v += skew;
                }
                n.tell(Halo {
                    level: self.level,
                    side: opposite(side),
                    values: values.into(),
                })
                .unwrap_or_else(|e| {
                    panic!("tile {}: neighbour {} unreachable: {e}", self.index, n.id())
                });
            }
        }
    }
}

/// Final grid and whether every tile found its part within bounds.
type Gathered = (DenseVec<f64>, bool);

/// Lives on rank 0: learns when every tile is done and assembles the final grid.
#[derive(Actor, Serialize, Deserialize)]
struct Collector {
    n: usize,
    tiles: usize,
    finished: usize,
    all_finished: ReplyTo<()>,
    #[serde(with = "lazarus::dense")]
    grid: Vec<f64>,
    filled: usize,
    sane: bool,
    all_gathered: ReplyTo<Gathered>,
}

#[messages]
impl Collector {
    #[message]
    fn finished(&mut self, tile: usize) {
        tracing::debug!(tile, "tile finished");
        self.finished += 1;
        self.reply_if_done();
    }

    /// Replies once every tile has done its last iteration.
    #[message]
    fn wait_finished(&mut self, reply: ReplyTo<()>) {
        self.all_finished = reply;
        self.reply_if_done();
    }

    /// Rows `row0..` of the final grid, `cols` wide from column `col0`.
    #[message]
    fn rows(&mut self, row0: usize, col0: usize, cols: usize, values: DenseVec<f64>, sane: bool) {
        if self.grid.is_empty() {
            self.grid = vec![f64::NAN; self.n * self.n];
        }
        for (k, row) in values.chunks(cols).enumerate() {
            let at = (row0 + k) * self.n + col0;
            self.grid[at..at + cols].copy_from_slice(row);
        }
        self.filled += values.len();
        self.sane &= sane;
        self.reply_if_done();
    }

    /// Replies with the final grid once every point has arrived.
    #[message]
    fn wait_gathered(&mut self, reply: ReplyTo<Gathered>) {
        self.all_gathered = reply;
        self.reply_if_done();
    }
}

impl Collector {
    fn reply_if_done(&mut self) {
        if self.finished == self.tiles && self.all_finished.is_requested() {
            self.all_finished.take().send(());
        }
        if self.filled == self.n * self.n && self.all_gathered.is_requested() {
            let grid = std::mem::take(&mut self.grid);
            self.all_gathered.take().send((grid.into(), self.sane));
        }
    }
}

/// Final values of global interior rows `rows` x columns `cols` after `iters` steps,
/// computed sequentially and exactly.
///
/// Information travels one point per step, so the window only depends on the initial grid
/// within `iters` points of it: the computation runs on that enlarged region alone. Where
/// the region is cut off inside the domain its ghost ring holds a wrong placeholder, but
/// the error it causes also advances one point per step and never reaches the window.
/// With the whole grid as the window this is the plain sequential solver.
fn reference_window(n: usize, iters: u64, rows: &Range<usize>, cols: &Range<usize>) -> Vec<f64> {
    let margin = usize::try_from(iters).unwrap_or(usize::MAX).min(n);
    let grow = |r: &Range<usize>| r.start.saturating_sub(margin)..(r.end + margin).min(n);
    let (er, ec) = (grow(rows), grow(cols));
    let mut u = initial_block(n, &er, &ec);
    let mut next = u.clone();
    for _ in 0..iters {
        sweep(&u, &mut next, er.len(), ec.len());
        std::mem::swap(&mut u, &mut next);
    }
    let s = ec.len() + 2;
    let mut out = Vec::with_capacity(rows.len() * cols.len());
    for gi in rows.clone() {
        let i = gi - er.start + 1;
        let j = cols.start - ec.start + 1;
        out.extend_from_slice(&u[i * s + j..i * s + j + cols.len()]);
    }
    out
}

/// The windows [`Check::Windows`] compares: the four corners and the centre.
fn windows(n: usize) -> Vec<(Range<usize>, Range<usize>)> {
    let w = WINDOW.min(n);
    let far = n - w;
    [(0, 0), (0, far), (far, 0), (far, far), (far / 2, far / 2)]
        .into_iter()
        .map(|(r, c)| (r..r + w, c..c + w))
        .collect()
}

/// Point updates the sequential check `check` would cost.
fn check_cost(check: Check, n: usize, iters: u64) -> u128 {
    let area = |len: usize| {
        let margin = usize::try_from(iters).unwrap_or(usize::MAX).min(n);
        (len.saturating_add(2 * margin)).min(n) as u128
    };
    match check {
        Check::Full => (n as u128).pow(2) * u128::from(iters),
        Check::Windows => 5 * area(WINDOW.min(n)).pow(2) * u128::from(iters),
        Check::Bounds => 0,
    }
}

fn choose_check(arg: CheckArg, n: usize, iters: u64) -> Check {
    match arg {
        CheckArg::Full => Check::Full,
        CheckArg::Windows => Check::Windows,
        CheckArg::Bounds => Check::Bounds,
        CheckArg::Auto => [Check::Full, Check::Windows]
            .into_iter()
            .find(|&c| check_cost(c, n, iters) <= REFERENCE_BUDGET)
            .unwrap_or(Check::Bounds),
    }
}

/// Compares `grid` (n x n, row-major) with the sequential reference as `check` says.
fn verify(check: Check, grid: &[f64], n: usize, iters: u64) -> bool {
    let same = |a: &[f64], b: &[f64]| {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
    };
    match check {
        Check::Full => same(grid, &reference_window(n, iters, &(0..n), &(0..n))),
        Check::Windows => windows(n).iter().all(|(rows, cols)| {
            let got: Vec<f64> = rows
                .clone()
                .flat_map(|i| grid[i * n + cols.start..i * n + cols.end].iter().copied())
                .collect();
            same(&got, &reference_window(n, iters, rows, cols))
        }),
        Check::Bounds => true,
    }
}

/// What rank 0 holds at the end of a run: the gathered grid and how long the steps took.
struct Outcome {
    /// The final grid, n x n, row-major.
    values: Vec<f64>,
    /// Every block stayed in bounds and rose monotonically.
    sane: bool,
    /// Seconds of the timed part (the steps, not the gathering).
    elapsed: f64,
    /// The decomposition that ran.
    tiles: TileGrid,
}

/// `--halo message`: tile actors on every core exchange halos as messages; rank 0's
/// collector gathers the grid. `Some` on rank 0 only.
fn run_messages(
    cluster: &Cluster,
    args: &Args,
) -> Result<Option<Outcome>, Box<dyn std::error::Error>> {
    let n = args.n;
    let (rank, size) = (cluster.rank() as usize, cluster.size());
    let cores = cluster.num_cores();
    // Every node must agree on the tile grid: the default assumes every node has this
    // node's core count (as under `lazarus run`), so pass --tiles when nodes differ.
    let grid = args
        .tiles
        .unwrap_or_else(|| default_tiles(2 * cores * size, n));
    let layout = Layout {
        n,
        grid,
        nodes: size,
    };

    let collector = if rank == 0 {
        let c = cluster.spawn_on(
            CoreId(0),
            Collector {
                n,
                tiles: layout.tiles(),
                finished: 0,
                all_finished: ReplyTo::none(),
                grid: Vec::new(),
                filled: 0,
                sane: true,
                all_gathered: ReplyTo::none(),
            },
        )?;
        Some(expect_id(c, Layout::collector(), "the collector")?)
    } else {
        None
    };
    // Contiguous blocks of this node's tiles per core: horizontal neighbours mostly share
    // a core, and the spawn order (hence the ids) stays the one `Layout::id` assumes.
    let mine = layout.owned_by(rank);
    let mut tiles = Vec::with_capacity(mine.len());
    for (k, t) in mine.clone().enumerate() {
        let core = CoreId(k * cores / mine.len());
        let tile = cluster.spawn_on(core, Tile::new(&layout, t, args.iters, args.answer_early)?)?;
        tiles.push(expect_id(tile, layout.id(t)?, format!("tile {t}"))?);
    }
    // Nobody sends a halo to a tile that does not exist yet.
    cluster.barrier()?;
    let started = cluster.begin_timed_part();
    KERNEL_TIME.start_window();
    for tile in &tiles {
        tile.tell(Start).map_err(|e| e.to_string())?;
    }
    let Some(collector) = collector else {
        // Rank 0 gathers the result, then releases everyone.
        cluster.barrier()?;
        return Ok(None);
    };
    cluster.block_on(collector.ask(WaitFinished).no_timeout())?;
    let elapsed = started.elapsed().as_secs_f64();

    // Gathering is outside the timed part: it measures the network, not the stencil.
    for t in 0..layout.tiles() {
        cluster
            .handle()
            .actor_ref::<Tile>(layout.id(t)?)?
            .tell(SendResult)
            .map_err(|e| e.to_string())?;
    }
    let (values, sane) = cluster.block_on(collector.ask(WaitGathered).no_timeout())?;
    cluster.barrier()?;
    Ok(Some(Outcome {
        values: values.into_inner(),
        sane,
        elapsed,
        tiles: grid,
    }))
}

/// `--halo put`: node `r` steps rows `split(n, nodes, r)` (full width) in its `main`. Each
/// step puts the strip's top row into the part of the node above and its bottom row into
/// the part of the node below, fences, reads the two rows its neighbours put into its own
/// part, and sweeps. The part holds two slots of two ghost rows, by step parity: the puts
/// of step `k + 1` go to the other slot than the one this node still reads for step `k`,
/// and no neighbour can start step `k + 2` (same slot again) before this node's fence of
/// step `k + 1`, which comes after its reads. At the end every node writes its strip and
/// a sanity flag into a second window and rank 0 gets them. `Some` on rank 0 only.
fn run_puts(cluster: &Cluster, args: &Args) -> Result<Option<Outcome>, Box<dyn std::error::Error>> {
    let (n, iters) = (args.n, args.iters);
    let (rank, size) = (cluster.rank() as usize, cluster.size());
    if n < size {
        return Err(format!("--halo put needs a row per node: --n {n} < {size} nodes").into());
    }
    let tiles = TileGrid { px: 1, py: size };
    if let Some(given) = args.tiles.filter(|t| *t != tiles) {
        return Err(format!(
            "--halo put runs one strip of rows per node (--tiles 1x{size}), not --tiles {}x{}",
            given.px, given.py
        )
        .into());
    }
    let rows = split(n, size, rank);
    let (h, s) = (rows.len(), n + 2);
    let mut u = initial_block(n, &rows, &(0..n));
    let mut next = u.clone();
    // Ghost rows by step parity and by the neighbour they come from (0: above, 1: below).
    let halos = cluster.window::<f64>(4 * n)?;
    let slot = |step: u64, from: usize| ((step % 2) as usize * 2 + from) * n;
    let above = rank.checked_sub(1).map(|r| r as u16);
    let below = (rank + 1 < size).then_some((rank + 1) as u16);
    let me = rank as u16;

    cluster.barrier()?;
    let started = cluster.begin_timed_part();
    KERNEL_TIME.start_window();
    eprintln!("jacobi2d: node {rank}: steps started");
    for step in 0..iters {
        if let Some(up) = above {
            halos.put(up, slot(step, 1), &u[s + 1..2 * s - 1])?;
        }
        if let Some(down) = below {
            halos.put(down, slot(step, 0), &u[h * s + 1..(h + 1) * s - 1])?;
        }
        halos.fence()?;
        if above.is_some() {
            u[1..s - 1].copy_from_slice(&halos.get(me, slot(step, 0), n)?);
        }
        if below.is_some() {
            u[(h + 1) * s + 1..(h + 2) * s - 1].copy_from_slice(&halos.get(
                me,
                slot(step, 1),
                n,
            )?);
        }
        KERNEL_TIME.measure(|| sweep(&u, &mut next, h, n));
        std::mem::swap(&mut u, &mut next);
    }
    KERNEL_TIME.end_window();
    let elapsed = started.elapsed().as_secs_f64();

    // The strip's interior, then its sanity flag, in a part sized for the tallest strip.
    let tallest = n.div_ceil(size);
    fn interior(grid: &[f64], h: usize, s: usize) -> impl Iterator<Item = f64> + '_ {
        (1..=h).flat_map(move |i| grid[i * s + 1..(i + 1) * s - 1].iter().copied())
    }
    let monotone = iters == 0
        || interior(&next, h, s)
            .zip(interior(&u, h, s))
            .all(|(before, after)| before <= after);
    let sane = monotone && interior(&u, h, s).all(|v| (0.0..=1.0).contains(&v));
    let strips = cluster.window::<f64>(tallest * n + 1)?;
    let mut mine: Vec<f64> = interior(&u, h, s).collect();
    mine.push(if sane { 1.0 } else { 0.0 });
    for (k, chunk) in mine.chunks(GATHER_CHUNK).enumerate() {
        strips.write(k * GATHER_CHUNK, chunk)?;
    }
    strips.fence()?;
    let outcome = if rank == 0 {
        let mut values = Vec::with_capacity(n * n);
        let mut sane = true;
        for r in 0..size {
            let len = split(n, size, r).len() * n;
            let mut offset = 0;
            while offset < len {
                let count = GATHER_CHUNK.min(len - offset);
                values.extend(strips.get(r as u16, offset, count)?);
                offset += count;
            }
            sane &= strips.get(r as u16, len, 1)?.first() == Some(&1.0);
        }
        Some(Outcome {
            values,
            sane,
            elapsed,
            tiles,
        })
    } else {
        None
    };
    // Rank 0's gets are answered before anyone leaves.
    cluster.barrier()?;
    Ok(outcome)
}

fn main() -> std::process::ExitCode {
    init_logging();
    lazarus_apps::exit_with(run())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if args.n == 0 || args.n > MAX_N {
        return Err(format!("--n must be between 1 and {MAX_N}, not {}", args.n).into());
    }
    let n = args.n;
    if args.kernel_time {
        KERNEL_TIME.enable();
    }
    if args.break_contract {
        let incarnation: u32 = std::env::var("LAZARUS_INCARNATION")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let _ = HALO_SKEW.set(f64::from(incarnation) * 1e-9);
    }
    if let Some(TileGrid { px, py }) = args.tiles {
        if px > n || py > n {
            return Err(format!(
                "--tiles {px}x{py} leaves tiles without points: need --n >= {}",
                px.max(py)
            )
            .into());
        }
        if px.saturating_mul(py) > MAX_TILES {
            return Err(format!("--tiles {px}x{py} is more than {MAX_TILES} tiles").into());
        }
    }
    let mut spec = ClusterSpec::from_env()?;
    if let Some(c) = args.cores {
        spec.cores = Some(c);
    }
    // A failed tile means the run can never finish: end the process (the launcher then
    // stops the other nodes) instead of leaving everyone waiting for its halos.
    let builder = Node::builder().on_failure(|event| {
        eprintln!("error: {event}");
        std::process::exit(1);
    });
    let cluster = Cluster::start_with(spec, builder)?;
    let outcome = match args.halo {
        HaloPath::Message => run_messages(&cluster, &args)?,
        HaloPath::Put => run_puts(&cluster, &args)?,
    };
    if KERNEL_TIME.is_enabled() {
        println!("{}", KERNEL_TIME.line("jacobi2d", cluster.rank()));
    }
    let Some(Outcome {
        values,
        sane,
        elapsed,
        tiles,
    }) = outcome
    else {
        cluster.shutdown();
        return Ok(());
    };
    let (size, cores) = (cluster.size(), cluster.num_cores());

    // Seeded with the size so that grids of zeros of different sizes differ.
    let checksum = values
        .iter()
        .fold(mix(0, n as u64), |acc, v| mix(acc, v.to_bits()));
    let sum: f64 = values.iter().sum();
    let check = choose_check(args.check, n, args.iters);
    let verified = sane && verify(check, &values, n, args.iters);
    let updates = (n * n) as f64 * args.iters as f64;
    println!(
        "{}",
        ResultLine::new("jacobi2d")
            .field("nodes", size)
            .field("cores", cores)
            .field("tiles", format!("{}x{}", tiles.px, tiles.py))
            .field("halo", args.halo.name())
            .field("n", n)
            .field("iters", args.iters)
            .field("checksum", format!("{checksum:#018x}"))
            .field("sum", format!("{sum:.17e}"))
            .field("elapsed_s", format!("{elapsed:.6}"))
            .field("mlups", format!("{:.1}", updates / elapsed / 1e6))
            .field("check", check.name())
            .finish(verified)
    );
    // The RESULT is out before the node may leave: a node killed while it waits to leave
    // is not restarted.
    cluster.shutdown();
    if !verified {
        return Err(format!("the result failed the {} check", check.name()).into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tile_grids_parse_and_default_to_near_square() {
        assert_eq!(parse_tiles("4x2"), Ok(TileGrid { px: 4, py: 2 }));
        assert!(parse_tiles("4").is_err());
        assert!(parse_tiles("0x3").is_err());
        assert_eq!(default_tiles(8, 100), TileGrid { px: 4, py: 2 });
        assert_eq!(default_tiles(16, 100), TileGrid { px: 4, py: 4 });
        assert_eq!(default_tiles(7, 100), TileGrid { px: 7, py: 1 });
        assert_eq!(default_tiles(8, 3), TileGrid { px: 3, py: 2 });
    }

    #[test]
    fn every_tile_has_a_distinct_computable_id() {
        for nodes in 1..5 {
            let layout = Layout {
                n: 10,
                grid: TileGrid { px: 3, py: 3 },
                nodes,
            };
            let mut ids: Vec<_> = (0..9).map(|t| layout.id(t).unwrap()).collect();
            assert!(ids.iter().all(|id| *id != Layout::collector()));
            ids.sort();
            ids.dedup();
            assert_eq!(ids.len(), 9);
        }
    }

    #[test]
    fn windowed_reference_matches_the_full_one() {
        let (n, iters) = (40, 7);
        let full = reference_window(n, iters, &(0..n), &(0..n));
        for (rows, cols) in [(3..9, 30..40), (10..20, 0..5), (35..40, 35..40)] {
            let part = reference_window(n, iters, &rows, &cols);
            let expected: Vec<f64> = rows
                .clone()
                .flat_map(|i| full[i * n + cols.start..i * n + cols.end].to_vec())
                .collect();
            assert_eq!(part, expected);
        }
    }
}
