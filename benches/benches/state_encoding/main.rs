//! Encoding a large numeric actor state for a checkpoint, which happens while the node's
//! cores are paused: serde's default for a `Vec<f64>` (one call per value) against
//! `#[serde(with = "lazarus::dense")]` (one byte string), both through the runtime's
//! postcard encoder, encoding and decoding. The state is one jacobi2d tile of the coarse
//! recovery benchmark (n = 4096 on 8 tiles: 1026 x 2050 values with the ghost ring,
//! 16.8 MB). Prints the medians and the ratio. A third encoding, `dense_reused`, goes
//! into the buffer of the previous encoding (`wire::encode_into`), as a checkpoint does
//! since session 20 (each actor gets its stored image's buffer back), against `dense`,
//! a new buffer each time. In this one-thread loop the allocator hands `dense` the
//! memory it freed an iteration before, already mapped, so the two cost the same or
//! the reuse a little more (session 20: 1.65 against 1.92 ms); what the reuse saves in a
//! node (buffers freed on the checkpoint thread after the store, faulted back in huge
//! pages inside the next pause) shows in the checkpoint events' `pause_us`, not here.

use criterion::{BenchmarkId, Criterion};
use lazarus_benches::criterion_data::{criterion_dir, median_ns};
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime};

const GROUP: &str = "state_encoding";
const VALUES: usize = 1026 * 2050;

#[derive(Serialize, Deserialize)]
struct PerValue {
    u: Vec<f64>,
}

#[derive(Serialize, Deserialize)]
struct Dense {
    #[serde(with = "lazarus::dense")]
    u: Vec<f64>,
}

fn bench(c: &mut Criterion) {
    let u: Vec<f64> = (0..VALUES).map(|i| (i as f64 * 0.37).sin().abs()).collect();
    let per_value = PerValue { u: u.clone() };
    let dense = Dense { u };
    let mut group = c.benchmark_group(GROUP);
    group.throughput(criterion::Throughput::Bytes((VALUES * 8) as u64));
    group.bench_function(BenchmarkId::new("encode", "serde_default"), |b| {
        b.iter(|| lazarus::wire::encode(&per_value).unwrap())
    });
    group.bench_function(BenchmarkId::new("encode", "dense"), |b| {
        b.iter(|| lazarus::wire::encode(&dense).unwrap())
    });
    let mut buffer = Vec::new();
    group.bench_function(BenchmarkId::new("encode", "dense_reused"), |b| {
        b.iter(|| {
            lazarus::wire::encode_into(&dense, &mut buffer).unwrap();
            buffer.len()
        })
    });
    let bytes_per_value = lazarus::wire::encode(&per_value).unwrap();
    let bytes_dense = lazarus::wire::encode(&dense).unwrap();
    group.bench_function(BenchmarkId::new("decode", "serde_default"), |b| {
        b.iter(|| lazarus::wire::decode::<PerValue>(&bytes_per_value).unwrap())
    });
    group.bench_function(BenchmarkId::new("decode", "dense"), |b| {
        b.iter(|| lazarus::wire::decode::<Dense>(&bytes_dense).unwrap())
    });
    group.finish();
}

fn main() {
    let started = SystemTime::now();
    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .output_directory(&criterion_dir())
        .configure_from_args();
    bench(&mut c);
    c.final_summary();
    let dir = criterion_dir();
    println!("\nEncoding a 16.8 MB Vec<f64> actor state (medians, same run):");
    for op in ["encode", "decode"] {
        let base = median_ns(&dir, &format!("{GROUP}/{op}/serde_default"), started);
        let dense = median_ns(&dir, &format!("{GROUP}/{op}/dense"), started);
        if let (Some(base), Some(dense)) = (base, dense) {
            println!(
                "  {op}: serde default {:.2} ms, dense {:.2} ms, ratio {:.2}x",
                base / 1e6,
                dense / 1e6,
                base / dense
            );
        }
    }
    let fresh = median_ns(&dir, &format!("{GROUP}/encode/dense"), started);
    let reused = median_ns(&dir, &format!("{GROUP}/encode/dense_reused"), started);
    if let (Some(fresh), Some(reused)) = (fresh, reused) {
        println!(
            "  encode dense: new buffer {:.2} ms, previous image's buffer {:.2} ms, ratio {:.2}x",
            fresh / 1e6,
            reused / 1e6,
            fresh / reused
        );
    }
}
