//! Registered memory: which regions a protection domain registered and with which keys,
//! so that a work request's scatter entry gets the right local key and a region is
//! deregistered exactly once, after the last link using it.
//!
//! The registration itself is behind [`Register`] (verbs on a device; a fake in the unit
//! tests), so everything but the system call is tested without a device.

use std::collections::BTreeMap;

/// Access a registration grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Only this node's adapter reads it (a staging ring, the credit word's source).
    Local,
    /// The peer's adapter writes into it (a receive ring, a credit word).
    RemoteWrite,
}

/// The keys of one registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keys {
    /// For this node's work requests.
    pub lkey: u32,
    /// For the peer's RDMA writes (meaningful with [`Access::RemoteWrite`]).
    pub rkey: u32,
}

/// Registers and deregisters memory with an adapter.
pub trait Register {
    /// What deregistration needs back.
    type Handle;
    /// Registers `len` bytes at `addr`.
    fn register(
        &mut self,
        addr: usize,
        len: usize,
        access: Access,
    ) -> Result<(Keys, Self::Handle), String>;
    /// Undoes a registration.
    fn deregister(&mut self, handle: Self::Handle);
}

struct Region<H> {
    len: usize,
    keys: Keys,
    handle: H,
}

/// The regions registered through `R`, by start address.
pub struct Registry<R: Register> {
    adapter: R,
    regions: BTreeMap<usize, Region<R::Handle>>,
}

impl<R: Register> Registry<R> {
    /// An empty registry over `adapter`.
    pub fn new(adapter: R) -> Registry<R> {
        Registry {
            adapter,
            regions: BTreeMap::new(),
        }
    }

    /// Registers `len` bytes at `addr`; refuses an empty region or one that overlaps a
    /// registered one (its keys would be ambiguous).
    pub fn register(&mut self, addr: usize, len: usize, access: Access) -> Result<Keys, String> {
        let end = addr
            .checked_add(len)
            .filter(|_| len > 0)
            .ok_or_else(|| format!("cannot register {len} B at {addr:#x}"))?;
        let before = self.regions.range(..end).next_back();
        if let Some((&start, r)) = before {
            if start + r.len > addr {
                return Err(format!(
                    "{len} B at {addr:#x} overlap the registration at {start:#x}"
                ));
            }
        }
        let (keys, handle) = self.adapter.register(addr, len, access)?;
        self.regions.insert(addr, Region { len, keys, handle });
        Ok(keys)
    }

    /// The keys of the registration holding all of `len` bytes at `addr`.
    pub fn keys(&self, addr: usize, len: usize) -> Option<Keys> {
        let (&start, r) = self.regions.range(..=addr).next_back()?;
        (addr + len <= start + r.len).then_some(r.keys)
    }

    /// Deregisters the region that starts at `addr`; false if there is none.
    pub fn deregister(&mut self, addr: usize) -> bool {
        match self.regions.remove(&addr) {
            Some(r) => {
                self.adapter.deregister(r.handle);
                true
            }
            None => false,
        }
    }
}

impl<R: Register> Drop for Registry<R> {
    fn drop(&mut self) {
        for (_, r) in std::mem::take(&mut self.regions) {
            self.adapter.deregister(r.handle);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// Hands out increasing keys and remembers what is registered.
    #[derive(Clone, Default)]
    struct Fake {
        live: Rc<RefCell<Vec<(usize, usize, Access)>>>,
        next: u32,
    }

    impl Register for Fake {
        type Handle = usize;
        fn register(
            &mut self,
            addr: usize,
            len: usize,
            a: Access,
        ) -> Result<(Keys, usize), String> {
            self.next += 1;
            self.live.borrow_mut().push((addr, len, a));
            Ok((
                Keys {
                    lkey: self.next,
                    rkey: 1000 + self.next,
                },
                addr,
            ))
        }
        fn deregister(&mut self, addr: usize) {
            self.live.borrow_mut().retain(|&(a, _, _)| a != addr);
        }
    }

    #[test]
    fn a_slice_inside_a_region_gets_its_keys() {
        let mut r = Registry::new(Fake::default());
        let ring = r.register(0x1000, 0x1000, Access::RemoteWrite).unwrap();
        let staging = r.register(0x4000, 0x100, Access::Local).unwrap();
        assert_eq!(r.keys(0x1000, 0x1000), Some(ring));
        assert_eq!(r.keys(0x1800, 0x10), Some(ring));
        assert_eq!(r.keys(0x40f0, 0x10), Some(staging));
        // Past a region's end, or between regions: no keys (never a neighbour's).
        assert_eq!(r.keys(0x1ff0, 0x20), None);
        assert_eq!(r.keys(0x3000, 0x10), None);
        assert_eq!(r.keys(0x10, 0x10), None);
    }

    #[test]
    fn overlapping_or_empty_registrations_are_refused() {
        let mut r = Registry::new(Fake::default());
        r.register(0x1000, 0x1000, Access::Local).unwrap();
        assert!(r.register(0x1800, 0x1000, Access::Local).is_err());
        assert!(r.register(0x0800, 0x1000, Access::Local).is_err());
        assert!(r.register(0x3000, 0, Access::Local).is_err());
        assert!(r.register(usize::MAX - 1, 4, Access::Local).is_err());
        assert!(
            r.register(0x2000, 0x10, Access::Local).is_ok(),
            "adjacent is fine"
        );
    }

    #[test]
    fn every_region_is_deregistered_once() {
        let fake = Fake::default();
        let live = Rc::clone(&fake.live);
        let mut r = Registry::new(fake);
        r.register(0x1000, 0x10, Access::Local).unwrap();
        r.register(0x2000, 0x10, Access::RemoteWrite).unwrap();
        assert!(r.deregister(0x1000));
        assert!(!r.deregister(0x1000));
        assert_eq!(live.borrow().len(), 1);
        drop(r);
        assert!(live.borrow().is_empty());
    }
}
