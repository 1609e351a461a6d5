//! NPB MG: V-cycle multigrid for the 3D Poisson equation on a periodic cube (NPB 3.x
//! `mg.c`).
//!
//! Grids are stored as z-planes of `m x m` points, `m = n + 2`, row-major (`[i2][i1]`,
//! `i1` fastest), including the periodic ghost ring of `mg.c` in x and y. Every operator
//! here computes one output plane from the few input planes it reads (the plane below, at
//! and above in z, or the fine planes under a coarse one), with exactly `mg.c`'s
//! floating-point expressions, and then fills the plane's x/y ghosts as `comm3` does. A
//! decomposition into z-slabs therefore only has to supply the right neighbouring planes
//! (ghost planes in z are periodic copies) to reproduce the serial computation bit for
//! bit.
//!
//! The module also owns the class parameters, `zran3`'s placement of the +1/-1 charges
//! ([`charges`]) and the verification of the final residual norm.

use super::random::randlc;
use super::Class;

/// Relative tolerance of the verification of the residual norm (`epsilon`).
pub const EPSILON: f64 = 1.0e-8;
/// Coefficients of the residual operator `A` (`a` in `mg.c`).
pub const A: [f64; 4] = [-8.0 / 3.0, 0.0, 1.0 / 6.0, 1.0 / 12.0];
/// Coefficients of the smoother for classes S, W and A (`c` in `mg.c`).
pub const C: [f64; 4] = [-3.0 / 8.0, 1.0 / 32.0, -1.0 / 64.0, 0.0];
/// Charges of each sign `zran3` places.
pub const CHARGES: usize = 10;

/// The parameters of one class.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    /// Points per side of the finest grid (a power of two).
    pub n: usize,
    /// V-cycles (`nit`).
    pub nit: usize,
    /// The official L2 norm of the final residual (`verify_value`).
    pub rnm2: f64,
}

/// The parameters of `class` (NPB 3.x: class W is 128^3 with 4 iterations).
pub fn params(class: Class) -> Params {
    match class {
        Class::S => Params {
            n: 32,
            nit: 4,
            rnm2: 0.5307707005734e-04,
        },
        Class::W => Params {
            n: 128,
            nit: 4,
            rnm2: 0.6467329375339e-05,
        },
        Class::A => Params {
            n: 256,
            nit: 4,
            rnm2: 0.2433365309069e-05,
        },
    }
}

impl Params {
    /// The finest level `lt`: level `k` has `2^k` points per side, level 1 is the coarsest.
    pub fn levels(&self) -> usize {
        self.n.trailing_zeros() as usize
    }
}

/// Points per side of level `k`.
pub fn size(k: usize) -> usize {
    1 << k
}

/// Relative error of `rnm2` against the reference and whether it is within [`EPSILON`],
/// exactly as `mg.c` decides.
pub fn verify(p: &Params, rnm2: f64) -> (f64, bool) {
    let err = ((rnm2 - p.rnm2) / p.rnm2).abs();
    (err, err <= EPSILON)
}

/// NPB's "Mop/s total" for MG given the timed seconds.
pub fn mops(p: &Params, seconds: f64) -> f64 {
    58.0 * p.nit as f64 * (p.n * p.n * p.n) as f64 / seconds / 1e6
}

/// `comm3` restricted to one plane: the periodic ghosts in x (interior rows), then whole
/// ghost rows in y.
pub fn comm3_plane(u: &mut [f64], m: usize) {
    for i2 in 1..m - 1 {
        let row = i2 * m;
        u[row + m - 1] = u[row + 1];
        u[row] = u[row + m - 2];
    }
    u.copy_within(m..2 * m, (m - 1) * m);
    u.copy_within((m - 2) * m..(m - 1) * m, 0);
}

/// `resid` for one plane: `r = v - A u`, from the `u` planes below, at and above. With
/// `v = None` the plane's own `r` is `v` (`mg.c` calls `resid(u, r, r)` on coarse levels).
pub fn resid_plane(m: usize, u: [&[f64]; 3], v: Option<&[f64]>, r: &mut [f64]) {
    let [ub, um, ua] = u;
    let (mut u1, mut u2) = (vec![0.0; m], vec![0.0; m]);
    for i2 in 1..m - 1 {
        let (row, up, dn) = (i2 * m, (i2 - 1) * m, (i2 + 1) * m);
        for i1 in 0..m {
            u1[i1] = um[up + i1] + um[dn + i1] + ub[row + i1] + ua[row + i1];
            u2[i1] = ub[up + i1] + ub[dn + i1] + ua[up + i1] + ua[dn + i1];
        }
        for i1 in 1..m - 1 {
            let vv = match v {
                Some(v) => v[row + i1],
                None => r[row + i1],
            };
            // a[1] is zero, and mg.c leaves its term out.
            r[row + i1] = vv
                - A[0] * um[row + i1]
                - A[2] * (u2[i1] + u1[i1 - 1] + u1[i1 + 1])
                - A[3] * (u2[i1 - 1] + u2[i1 + 1]);
        }
    }
    comm3_plane(r, m);
}

/// `psinv` for one plane: the smoother `u = u + C r`, from the `r` planes below, at and
/// above.
pub fn psinv_plane(m: usize, r: [&[f64]; 3], u: &mut [f64]) {
    let [rb, rm, ra] = r;
    let (mut r1, mut r2) = (vec![0.0; m], vec![0.0; m]);
    for i2 in 1..m - 1 {
        let (row, up, dn) = (i2 * m, (i2 - 1) * m, (i2 + 1) * m);
        for i1 in 0..m {
            r1[i1] = rm[up + i1] + rm[dn + i1] + rb[row + i1] + ra[row + i1];
            r2[i1] = rb[up + i1] + rb[dn + i1] + ra[up + i1] + ra[dn + i1];
        }
        for i1 in 1..m - 1 {
            // c[3] is zero, and mg.c leaves its term out.
            u[row + i1] = u[row + i1]
                + C[0] * rm[row + i1]
                + C[1] * (rm[row + i1 - 1] + rm[row + i1 + 1] + r1[i1])
                + C[2] * (r2[i1] + r1[i1 - 1] + r1[i1 + 1]);
        }
    }
    comm3_plane(u, m);
}

/// `rprj3` for one coarse plane `j3`: the restriction from the fine planes `2 j3 - 1`,
/// `2 j3`, `2 j3 + 1` (`r`, fine side `mk`) into the coarse plane `s` (side `mj`).
pub fn rprj3_plane(mk: usize, r: [&[f64]; 3], mj: usize, s: &mut [f64]) {
    // mg.c's d1 = d2 = 1: fine grids here always have at least 2 points per side.
    debug_assert_eq!(mk, 2 * mj - 2);
    let [r0, r1, r2] = r;
    let (mut x1, mut y1) = (vec![0.0; mk], vec![0.0; mk]);
    for j2 in 1..mj - 1 {
        let i2 = 2 * j2 - 1;
        let (a, b, c) = (i2 * mk, (i2 + 1) * mk, (i2 + 2) * mk);
        for j1 in 1..mj {
            let i1 = 2 * j1 - 1;
            x1[i1] = r1[a + i1] + r1[c + i1] + r0[b + i1] + r2[b + i1];
            y1[i1] = r0[a + i1] + r2[a + i1] + r0[c + i1] + r2[c + i1];
        }
        for j1 in 1..mj - 1 {
            let i1 = 2 * j1 - 1;
            let y2 = r0[a + i1 + 1] + r2[a + i1 + 1] + r0[c + i1 + 1] + r2[c + i1 + 1];
            let x2 = r1[a + i1 + 1] + r1[c + i1 + 1] + r0[b + i1 + 1] + r2[b + i1 + 1];
            s[j2 * mj + j1] = 0.5 * r1[b + i1 + 1]
                + 0.25 * (r1[b + i1] + r1[b + i1 + 2] + x2)
                + 0.125 * (x1[i1] + x1[i1 + 2] + y2)
                + 0.0625 * (y1[i1] + y1[i1 + 2]);
        }
    }
    comm3_plane(s, mj);
}

/// `interp` for one fine plane: adds the trilinear interpolation of the coarse correction
/// (side `mm`) to the fine plane `u` (side `2 mm - 2`), ghosts included. Fine plane
/// `2 i3` reads coarse plane `i3` only (`next = None`); fine plane `2 i3 + 1` reads coarse
/// planes `i3` (`z`) and `i3 + 1` (`next`).
pub fn interp_plane(mm: usize, z: &[f64], next: Option<&[f64]>, u: &mut [f64]) {
    let m = 2 * mm - 2;
    let (mut z1, mut z2, mut z3) = (vec![0.0; mm], vec![0.0; mm], vec![0.0; mm]);
    for i2 in 0..mm - 1 {
        let (row, below) = (i2 * mm, (i2 + 1) * mm);
        for i1 in 0..mm {
            z1[i1] = z[below + i1] + z[row + i1];
            if let Some(zn) = next {
                z2[i1] = zn[row + i1] + z[row + i1];
                z3[i1] = zn[below + i1] + zn[row + i1] + z1[i1];
            }
        }
        let (even, odd) = (2 * i2 * m, (2 * i2 + 1) * m);
        if next.is_none() {
            for i1 in 0..mm - 1 {
                u[even + 2 * i1] += z[row + i1];
                u[even + 2 * i1 + 1] += 0.5 * (z[row + i1 + 1] + z[row + i1]);
            }
            for i1 in 0..mm - 1 {
                u[odd + 2 * i1] += 0.5 * z1[i1];
                u[odd + 2 * i1 + 1] += 0.25 * (z1[i1] + z1[i1 + 1]);
            }
        } else {
            for i1 in 0..mm - 1 {
                u[even + 2 * i1] += 0.5 * z2[i1];
                u[even + 2 * i1 + 1] += 0.25 * (z2[i1] + z2[i1 + 1]);
            }
            for i1 in 0..mm - 1 {
                u[odd + 2 * i1] += 0.25 * z3[i1];
                u[odd + 2 * i1 + 1] += 0.125 * (z3[i1] + z3[i1 + 1]);
            }
        }
    }
}

/// `norm2u3`'s contributions of one plane: the sum of squares of its interior points (in
/// `mg.c`'s order, from zero) and their largest magnitude.
pub fn norm_plane(m: usize, r: &[f64]) -> (f64, f64) {
    let (mut s, mut max) = (0.0, 0.0f64);
    for i2 in 1..m - 1 {
        for &x in &r[i2 * m + 1..i2 * m + m - 1] {
            s += x * x;
            let a = x.abs();
            if a > max {
                max = a;
            }
        }
    }
    (s, max)
}

/// `norm2u3`'s results from per-plane contributions given in plane order: the L2 norm
/// `rnm2` and the uniform norm `rnmu`.
pub fn norms(n: usize, planes: impl IntoIterator<Item = (f64, f64)>) -> (f64, f64) {
    let (mut s, mut max) = (0.0, 0.0f64);
    for (ps, pm) in planes {
        s += ps;
        if pm > max {
            max = pm;
        }
    }
    ((s / (n * n * n) as f64).sqrt(), max)
}

/// A grid point `(i1, i2, i3)` in 1-based interior coordinates.
pub type Position = (usize, usize, usize);

/// Where `zran3` puts its charges on an `n^3` grid: the positions of the [`CHARGES`]
/// largest values (`+1`) and of the [`CHARGES`] smallest (`-1`) of the NPB random stream
/// laid over the grid in x, y, z order (seed 314159265, multiplier 5^13; point
/// `(i1, i2, i3)` gets element `(i1 - 1) + n (i2 - 1) + n^2 (i3 - 1)` of the stream).
///
/// The selection is `mg.c`'s: a scan in grid order keeping the ten best so far by bubbling
/// (strict comparisons, so the first of equal values wins). Returns `(plus, minus)`.
pub fn charges(n: usize) -> (Vec<Position>, Vec<Position>) {
    let a = 1220703125.0;
    let mut x = 314159265.0;
    // ten[i] sorted so that ten[0] is the weakest of the kept values.
    let mut large = [(0.0f64, (0, 0, 0)); CHARGES];
    let mut small = [(1.0f64, (0, 0, 0)); CHARGES];
    for i3 in 1..=n {
        for i2 in 1..=n {
            for i1 in 1..=n {
                let z = randlc(&mut x, a);
                if z > large[0].0 {
                    large[0] = (z, (i1, i2, i3));
                    for i in 0..CHARGES - 1 {
                        if large[i].0 > large[i + 1].0 {
                            large.swap(i, i + 1);
                        } else {
                            break;
                        }
                    }
                }
                if z < small[0].0 {
                    small[0] = (z, (i1, i2, i3));
                    for i in 0..CHARGES - 1 {
                        if small[i].0 < small[i + 1].0 {
                            small.swap(i, i + 1);
                        } else {
                            break;
                        }
                    }
                }
            }
        }
    }
    (
        large.iter().map(|&(_, p)| p).collect(),
        small.iter().map(|&(_, p)| p).collect(),
    )
}

/// The planes of the right-hand side `v` that `zran3` builds, for interior planes
/// `planes` (1-based `i3`): zero with the charges, x/y ghosts filled.
pub fn rhs_planes(n: usize, planes: std::ops::Range<usize>) -> Vec<f64> {
    let m = n + 2;
    let mut v = vec![0.0; planes.len() * m * m];
    let (plus, minus) = charges(n);
    // mg.c sets the -1 charges first, then the +1 ones.
    for (list, value) in [(minus, -1.0), (plus, 1.0)] {
        for (i1, i2, i3) in list {
            if planes.contains(&i3) {
                v[(i3 - planes.start) * m * m + i2 * m + i1] = value;
            }
        }
    }
    for plane in v.chunks_exact_mut(m * m) {
        comm3_plane(plane, m);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A whole periodic grid with z ghost planes, as `mg.c` stores it.
    struct Grid {
        m: usize,
        data: Vec<f64>,
    }

    impl Grid {
        fn zeros(n: usize) -> Grid {
            let m = n + 2;
            Grid {
                m,
                data: vec![0.0; m * m * m],
            }
        }

        fn plane(&self, i3: usize) -> &[f64] {
            let p = self.m * self.m;
            &self.data[i3 * p..(i3 + 1) * p]
        }

        fn plane_mut(&mut self, i3: usize) -> &mut [f64] {
            let p = self.m * self.m;
            &mut self.data[i3 * p..(i3 + 1) * p]
        }

        /// The z part of comm3: ghost planes are copies of the opposite interior planes.
        fn wrap(&mut self) {
            let (p, m) = (self.m * self.m, self.m);
            self.data.copy_within((m - 2) * p..(m - 1) * p, 0);
            self.data.copy_within(p..2 * p, (m - 1) * p);
        }
    }

    fn resid(u: &Grid, v: Option<&Grid>, r: &mut Grid) {
        let m = u.m;
        for i3 in 1..m - 1 {
            let planes = [u.plane(i3 - 1), u.plane(i3), u.plane(i3 + 1)];
            resid_plane(m, planes, v.map(|v| v.plane(i3)), r.plane_mut(i3));
        }
        r.wrap();
    }

    fn resid_in_place(u: &Grid, r: &mut Grid) {
        let m = u.m;
        for i3 in 1..m - 1 {
            let planes = [u.plane(i3 - 1), u.plane(i3), u.plane(i3 + 1)];
            resid_plane(m, planes, None, r.plane_mut(i3));
        }
        r.wrap();
    }

    fn psinv(r: &Grid, u: &mut Grid) {
        let m = u.m;
        for i3 in 1..m - 1 {
            let planes = [r.plane(i3 - 1), r.plane(i3), r.plane(i3 + 1)];
            psinv_plane(m, planes, u.plane_mut(i3));
        }
        u.wrap();
    }

    fn rprj3(r: &Grid, s: &mut Grid) {
        for j3 in 1..s.m - 1 {
            let i3 = 2 * j3 - 1;
            let planes = [r.plane(i3), r.plane(i3 + 1), r.plane(i3 + 2)];
            rprj3_plane(r.m, planes, s.m, s.plane_mut(j3));
        }
        s.wrap();
    }

    fn interp(z: &Grid, u: &mut Grid) {
        // mg.c writes all fine planes, ghosts included.
        for i3 in 0..z.m - 1 {
            interp_plane(z.m, z.plane(i3), None, u.plane_mut(2 * i3));
            interp_plane(
                z.m,
                z.plane(i3),
                Some(z.plane(i3 + 1)),
                u.plane_mut(2 * i3 + 1),
            );
        }
    }

    /// mg.c's timed part, sequentially: the final (rnm2, rnmu).
    fn sequential(p: &Params) -> (f64, f64) {
        let lt = p.levels();
        let mut u: Vec<Grid> = (0..=lt).map(|k| Grid::zeros(size(k))).collect();
        let mut r: Vec<Grid> = (0..=lt).map(|k| Grid::zeros(size(k))).collect();
        let mut v = Grid::zeros(p.n);
        v.data[v.m * v.m..(v.m - 1) * v.m * v.m].copy_from_slice(&rhs_planes(p.n, 1..p.n + 1));
        v.wrap();
        resid(&u[lt], Some(&v), &mut r[lt]);
        for _ in 0..p.nit {
            for k in (2..=lt).rev() {
                let (lo, hi) = r.split_at_mut(k);
                rprj3(&hi[0], &mut lo[k - 1]);
            }
            u[1].data.fill(0.0);
            psinv(&r[1], &mut u[1]);
            for k in 2..lt {
                u[k].data.fill(0.0);
                let (lo, hi) = u.split_at_mut(k);
                interp(&lo[k - 1], &mut hi[0]);
                resid_in_place(&u[k], &mut r[k]);
                psinv(&r[k], &mut u[k]);
            }
            let (lo, hi) = u.split_at_mut(lt);
            interp(&lo[lt - 1], &mut hi[0]);
            resid(&u[lt], Some(&v), &mut r[lt]);
            psinv(&r[lt], &mut u[lt]);
            resid(&u[lt], Some(&v), &mut r[lt]);
        }
        norms(
            p.n,
            (1..=p.n).map(|i3| norm_plane(r[lt].m, r[lt].plane(i3))),
        )
    }

    #[test]
    fn a_sequential_class_s_run_verifies() {
        let p = params(Class::S);
        let (rnm2, _) = sequential(&p);
        let (err, ok) = verify(&p, rnm2);
        assert!(ok, "rnm2 {rnm2} is off by {err}");
    }

    #[test]
    fn charges_are_distinct_interior_points() {
        let (plus, minus) = charges(16);
        let mut all: Vec<Position> = plus.iter().chain(&minus).copied().collect();
        assert!(all.iter().all(|&(a, b, c)| (1..=16).contains(&a)
            && (1..=16).contains(&b)
            && (1..=16).contains(&c)));
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 2 * CHARGES);
    }

    #[test]
    fn comm3_plane_makes_a_plane_periodic() {
        let m = 6;
        let mut u: Vec<f64> = (0..m * m).map(|i| i as f64).collect();
        comm3_plane(&mut u, m);
        for i2 in 0..m {
            assert_eq!(u[i2 * m], u[i2 * m + m - 2]);
            assert_eq!(u[i2 * m + m - 1], u[i2 * m + 1]);
        }
        assert_eq!(u[..m], u[(m - 2) * m..(m - 1) * m]);
        assert_eq!(u[(m - 1) * m..], u[m..2 * m]);
    }
}
