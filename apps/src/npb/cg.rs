//! NPB CG: the inverse power method with conjugate gradient inner solves on a random
//! sparse symmetric matrix (NPB 3.x `cg.c`).
//!
//! This module owns the class parameters, the matrix generator ([`makea`], with `sparse`,
//! `sprnvc` and `vecset` transcribed from `cg.c` so that the matrix, including the order
//! of entries within each row, is NPB's), row slices of the matrix for workers, and the
//! verification of `zeta`.

use super::random::randlc;
use super::Class;
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// Inner conjugate gradient iterations per outer iteration (`cgitmax`).
pub const CGITMAX: usize = 25;
/// Relative tolerance of the verification of `zeta` (`epsilon`).
pub const EPSILON: f64 = 1.0e-10;
/// Condition number parameter of the generated matrix (`RCOND`).
pub const RCOND: f64 = 0.1;

/// The parameters of one class.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    /// Order of the matrix (`NA`).
    pub na: usize,
    /// Nonzeros per generated sparse vector (`NONZER`).
    pub nonzer: usize,
    /// Outer (inverse power) iterations (`NITER`).
    pub niter: usize,
    /// Shift of the eigenvalue (`SHIFT`).
    pub shift: f64,
    /// The official `zeta` after `niter` iterations (`zeta_verify_value`).
    pub zeta: f64,
}

/// The parameters of `class`.
pub fn params(class: Class) -> Params {
    match class {
        Class::S => Params {
            na: 1400,
            nonzer: 7,
            niter: 15,
            shift: 10.0,
            zeta: 8.5971775078648,
        },
        Class::W => Params {
            na: 7000,
            nonzer: 8,
            niter: 15,
            shift: 12.0,
            zeta: 10.362595087124,
        },
        Class::A => Params {
            na: 14000,
            nonzer: 11,
            niter: 15,
            shift: 20.0,
            zeta: 17.130235054029,
        },
    }
}

/// Relative error of `zeta` against the reference and whether it is within [`EPSILON`],
/// exactly as `cg.c` decides.
pub fn verify(p: &Params, zeta: f64) -> (f64, bool) {
    let err = ((zeta - p.zeta) / p.zeta).abs();
    (err, err <= EPSILON)
}

/// NPB's "Mop/s total" for CG given the timed seconds.
pub fn mops(p: &Params, seconds: f64) -> f64 {
    let nz = (p.nonzer * (p.nonzer + 1)) as f64;
    2.0 * p.niter as f64 * p.na as f64 * (3.0 + nz + 25.0 * (5.0 + nz) + 3.0) / seconds / 1e6
}

/// Rows of a sparse matrix in compressed row storage, 0-based. Column indices are global
/// even when the rows are a slice of a bigger matrix.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Matrix {
    /// Row `i`'s entries are `rowstr[i]..rowstr[i + 1]`.
    pub rowstr: Vec<usize>,
    /// Column of each entry.
    pub colidx: Vec<u32>,
    /// Value of each entry.
    pub a: Vec<f64>,
}

impl Matrix {
    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rowstr.len().saturating_sub(1)
    }

    /// Rows `range` as a matrix of their own (row 0 of the result is row `range.start`).
    pub fn slice(&self, range: Range<usize>) -> Matrix {
        let (lo, hi) = (self.rowstr[range.start], self.rowstr[range.end]);
        Matrix {
            rowstr: self.rowstr[range.start..=range.end]
                .iter()
                .map(|k| k - lo)
                .collect(),
            colidx: self.colidx[lo..hi].to_vec(),
            a: self.a[lo..hi].to_vec(),
        }
    }

    /// Row `i` times the vector `v`, summed in storage order as `cg.c` does.
    pub fn row_dot(&self, i: usize, v: &[f64]) -> f64 {
        let mut sum = 0.0;
        for k in self.rowstr[i]..self.rowstr[i + 1] {
            sum += self.a[k] * v[self.colidx[k] as usize];
        }
        sum
    }
}

/// Generates the whole class matrix exactly as `cg.c` does: `na` outer products of random
/// sparse vectors with geometrically decreasing weights, plus `(rcond - shift)` times the
/// identity, duplicates summed.
///
/// The random stream is `cg.c`'s: seed 314159265, multiplier 5^13, with one number drawn
/// before `makea` (`cg.c` stores it in `zeta` and overwrites it).
pub fn makea(p: &Params) -> Matrix {
    let n = p.na;
    let amult = 1220703125.0;
    let mut tran = 314159265.0;
    randlc(&mut tran, amult);

    // The smallest power of two not less than n (at least 2, as cg.c's do-while gives).
    let mut nn1 = 1usize;
    loop {
        nn1 *= 2;
        if nn1 >= n {
            break;
        }
    }
    let ratio = RCOND.powf(1.0 / n as f64);
    let mut size = 1.0;
    // Triples (row, column, value), 1-based like cg.c, in generation order.
    let cap = n * (p.nonzer + 1) * (p.nonzer + 1) + n;
    let (mut arow, mut acol, mut aelt) = (
        Vec::with_capacity(cap),
        Vec::with_capacity(cap),
        Vec::with_capacity(cap),
    );
    let mut mark = vec![false; n + 1];
    let (mut v, mut iv) = (Vec::new(), Vec::new());
    for iouter in 1..=n {
        sprnvc(
            n, p.nonzer, nn1, &mut tran, amult, &mut mark, &mut v, &mut iv,
        );
        vecset(&mut v, &mut iv, iouter, 0.5);
        // firstcol..lastcol and firstrow..lastrow are the whole matrix here.
        for (&jcol, &vj) in iv.iter().zip(&v) {
            let scale = size * vj;
            for (&irow, &vi) in iv.iter().zip(&v) {
                acol.push(jcol);
                arow.push(irow);
                aelt.push(vi * scale);
            }
        }
        size *= ratio;
    }
    // Add the identity times rcond - shift, bounding the spectrum as cg.c explains.
    for i in 1..=n {
        acol.push(i);
        arow.push(i);
        aelt.push(RCOND - p.shift);
    }
    sparse(n, &arow, &acol, &aelt)
}

/// `cg.c`'s `sprnvc`: a random sparse vector of `nz` distinct positions in `1..=n` with
/// random values, drawn as (value, position) pairs, positions from `nn1 * uniform`.
#[allow(clippy::too_many_arguments)]
fn sprnvc(
    n: usize,
    nz: usize,
    nn1: usize,
    tran: &mut f64,
    amult: f64,
    mark: &mut [bool],
    v: &mut Vec<f64>,
    iv: &mut Vec<usize>,
) {
    v.clear();
    iv.clear();
    while v.len() < nz {
        let vecelt = randlc(tran, amult);
        let vecloc = randlc(tran, amult);
        // icnvrt: the integer part of ipwr2 * x.
        let i = (nn1 as f64 * vecloc) as usize + 1;
        if i > n {
            continue;
        }
        if !mark[i] {
            mark[i] = true;
            v.push(vecelt);
            iv.push(i);
        }
    }
    // mark is all false between calls (cg.c resets only what it set).
    for &i in iv.iter() {
        mark[i] = false;
    }
}

/// `cg.c`'s `vecset`: sets position `i` of the sparse vector to `val`, appending it if
/// absent.
fn vecset(v: &mut Vec<f64>, iv: &mut Vec<usize>, i: usize, val: f64) {
    let mut set = false;
    for (k, &pos) in iv.iter().enumerate() {
        if pos == i {
            v[k] = val;
            set = true;
        }
    }
    if !set {
        v.push(val);
        iv.push(i);
    }
}

/// `cg.c`'s `sparse`: bucket-sorts the 1-based triples by row (stable), sums duplicates
/// within each row keeping the columns in order of first nonzero appearance, and drops
/// exact zeros. Returns 0-based storage.
fn sparse(n: usize, arow: &[usize], acol: &[usize], aelt: &[f64]) -> Matrix {
    let nnza = arow.len();
    // 1-based positions, as in cg.c.
    let mut rowstr = vec![0usize; n + 2];
    for &r in arow {
        rowstr[r + 1] += 1;
    }
    rowstr[1] = 1;
    for j in 2..=n + 1 {
        rowstr[j] += rowstr[j - 1];
    }
    let mut a = vec![0.0; nnza + 1];
    let mut colidx = vec![0usize; nnza + 1];
    for ((&r, &c), &e) in arow.iter().zip(acol).zip(aelt) {
        let k = rowstr[r];
        a[k] = e;
        colidx[k] = c;
        rowstr[r] += 1;
    }
    for j in (1..=n).rev() {
        rowstr[j + 1] = rowstr[j];
    }
    rowstr[1] = 1;

    let mut x = vec![0.0; n + 1];
    let mut mark = vec![false; n + 1];
    let mut nzloc = Vec::new();
    let mut nza = 0;
    let mut jajp1 = rowstr[1];
    for j in 1..=n {
        nzloc.clear();
        for k in jajp1..rowstr[j + 1] {
            let i = colidx[k];
            x[i] += a[k];
            if !mark[i] && x[i] != 0.0 {
                mark[i] = true;
                nzloc.push(i);
            }
        }
        for &i in &nzloc {
            mark[i] = false;
            let xi = x[i];
            x[i] = 0.0;
            if xi != 0.0 {
                // Compaction in place: nza never passes the entries still to be read.
                nza += 1;
                a[nza] = xi;
                colidx[nza] = i;
            }
        }
        jajp1 = rowstr[j + 1];
        rowstr[j + 1] = nza + rowstr[1];
    }
    Matrix {
        rowstr: rowstr[1..=n + 1].iter().map(|k| k - 1).collect(),
        colidx: colidx[1..=nza].iter().map(|&c| (c - 1) as u32).collect(),
        a: a[1..=nza].to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cg.c`'s main loop, sequentially: `zeta` after each outer iteration.
    fn sequential_zetas(p: &Params, m: &Matrix) -> Vec<f64> {
        let n = p.na;
        let mut x = vec![1.0; n];
        let mut zetas = Vec::new();
        for _ in 0..p.niter {
            let (mut z, mut r, mut q) = (vec![0.0; n], x.clone(), vec![0.0; n]);
            let mut pv = r.clone();
            let mut rho: f64 = r.iter().map(|v| v * v).sum();
            for _ in 0..CGITMAX {
                for (j, qj) in q.iter_mut().enumerate() {
                    *qj = m.row_dot(j, &pv);
                }
                let d: f64 = pv.iter().zip(&q).map(|(a, b)| a * b).sum();
                let alpha = rho / d;
                let rho0 = rho;
                for j in 0..n {
                    z[j] += alpha * pv[j];
                    r[j] -= alpha * q[j];
                }
                rho = r.iter().map(|v| v * v).sum();
                let beta = rho / rho0;
                for j in 0..n {
                    pv[j] = r[j] + beta * pv[j];
                }
            }
            let t1: f64 = x.iter().zip(&z).map(|(a, b)| a * b).sum();
            let t2: f64 = z.iter().map(|v| v * v).sum();
            let t2 = 1.0 / t2.sqrt();
            zetas.push(p.shift + 1.0 / t1);
            x = z.iter().map(|v| t2 * v).collect();
        }
        zetas
    }

    #[test]
    fn the_class_s_matrix_is_symmetric_with_the_expected_shape() {
        let p = params(Class::S);
        let m = makea(&p);
        assert_eq!(m.rows(), p.na);
        let entry = |i: usize, j: usize| {
            (m.rowstr[i]..m.rowstr[i + 1])
                .find(|&k| m.colidx[k] as usize == j)
                .map(|k| m.a[k])
        };
        for i in 0..p.na {
            for k in m.rowstr[i]..m.rowstr[i + 1] {
                let j = m.colidx[k] as usize;
                let mirrored = entry(j, i).expect("the pattern is symmetric");
                // Sums of the same products in different orders: equal up to rounding.
                assert!((mirrored - m.a[k]).abs() <= 1e-12 * m.a[k].abs().max(1.0));
            }
            assert!(entry(i, i).is_some(), "row {i} has a diagonal");
        }
    }

    #[test]
    fn a_sequential_solve_of_class_s_verifies() {
        let p = params(Class::S);
        let zetas = sequential_zetas(&p, &makea(&p));
        let (err, ok) = verify(&p, *zetas.last().unwrap());
        assert!(ok, "zeta {} off by {err}", zetas.last().unwrap());
    }

    #[test]
    fn slices_keep_rows_and_global_columns() {
        let p = params(Class::S);
        let m = makea(&p);
        let s = m.slice(100..250);
        assert_eq!(s.rows(), 150);
        let v: Vec<f64> = (0..p.na).map(|i| i as f64 * 0.5 + 1.0).collect();
        for i in 0..150 {
            assert_eq!(s.row_dot(i, &v), m.row_dot(100 + i, &v));
        }
    }
}
