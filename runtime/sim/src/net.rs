//! A hand-driven network of set protocols for scenario tests: the test decides which set
//! sends what, which link is flushed when, who checkpoints, crashes and restarts. One actor
//! per set (actor 0), FIFO links, payloads are short strings.

use lazarus::recovery::{
    Action, ChannelId, Config, ControlMessage, DependencyRule, Incarnation, MessageMeta,
    SendOutcome, SetId, SetProtocol, Snapshot,
};
use lazarus::ActorId;
use std::collections::{BTreeMap, VecDeque};

/// What travels on a link.
#[derive(Debug)]
pub enum Packet {
    /// An application message, with the sender's incarnation whose connection carries it.
    App(MessageMeta, Vec<u8>, Incarnation),
    /// A control message.
    Control(ControlMessage),
}

/// A small cluster driven step by step.
pub struct Net {
    /// The protocols; `None` while a set is down.
    pub sets: Vec<Option<SetProtocol<Vec<u8>>>>,
    links: BTreeMap<(u16, u16), VecDeque<Packet>>,
    committed: Vec<Snapshot<Vec<u8>>>,
    incarnations: Vec<u32>,
    config: Config,
}

/// The channel from set `a`'s actor to set `b`'s actor.
pub fn channel(a: u16, b: u16) -> ChannelId {
    ChannelId::new(
        ActorId::new(a, 0).expect("id"),
        ActorId::new(b, 0).expect("id"),
    )
}

impl Net {
    /// `n` fresh sets with the default dependency rule.
    pub fn new(n: u16) -> Self {
        Self::with_rule(n, DependencyRule::default())
    }

    /// `n` fresh sets; each has committed an empty genesis checkpoint.
    pub fn with_rule(n: u16, rule: DependencyRule) -> Self {
        let config = Config {
            dependency_rule: rule,
            ..Config::default()
        };
        let mut sets = Vec::new();
        let mut committed = Vec::new();
        for s in 0..n {
            let mut p = SetProtocol::with_config(SetId(s), n, config).expect("set");
            let snap = p.checkpoint();
            p.checkpoint_committed(snap.id).expect("commit");
            committed.push(snap);
            sets.push(Some(p));
        }
        Net {
            sets,
            links: BTreeMap::new(),
            committed,
            incarnations: vec![0; usize::from(n)],
            config,
        }
    }

    /// The protocol of live set `s`.
    pub fn set(&mut self, s: u16) -> &mut SetProtocol<Vec<u8>> {
        self.sets[usize::from(s)].as_mut().expect("set is up")
    }

    /// Set `from`'s actor sends `text` to set `to`'s actor; returns whether it was
    /// transmitted (`false`: suppressed).
    pub fn send(&mut self, from: u16, to: u16, text: &str) -> bool {
        let out = self
            .set(from)
            .on_send(SetId(to), channel(from, to), text.as_bytes().to_vec())
            .expect("send");
        match out {
            SendOutcome::Transmit { meta, payload } => {
                let via = Incarnation(self.incarnations[usize::from(from)]);
                self.push(from, to, Packet::App(meta, payload, via));
                true
            }
            SendOutcome::Suppressed { .. } => false,
        }
    }

    fn push(&mut self, from: u16, to: u16, p: Packet) {
        self.links.entry((from, to)).or_default().push_back(p);
    }

    fn execute(&mut self, from: u16, actions: Vec<Action<Vec<u8>>>) {
        for a in actions {
            match a {
                Action::Send { to, meta, payload } => {
                    let via = Incarnation(self.incarnations[usize::from(from)]);
                    self.push(from, to.0, Packet::App(meta, payload, via))
                }
                Action::Control { to, message } => self.push(from, to.0, Packet::Control(message)),
                Action::SendDumped { .. } => panic!("this network never dumps logs"),
            }
        }
    }

    /// Packets waiting on the link `from -> to`.
    pub fn in_flight(&self, from: u16, to: u16) -> usize {
        self.links.get(&(from, to)).map_or(0, VecDeque::len)
    }

    /// Kinds of the packets waiting on `from -> to`, in order ("msg x", "rollback", ...).
    pub fn peek(&self, from: u16, to: u16) -> Vec<String> {
        self.links
            .get(&(from, to))
            .map(|q| {
                q.iter()
                    .map(|p| match p {
                        Packet::App(_, payload, _) => {
                            format!("msg {}", String::from_utf8_lossy(payload))
                        }
                        Packet::Control(c) => c.kind().to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Drops every packet on `from -> to` (lost in flight).
    pub fn lose(&mut self, from: u16, to: u16) {
        self.links.remove(&(from, to));
    }

    /// Takes the packets of `from -> to` out, to re-inject them later ([`Net::inject`]).
    pub fn hold(&mut self, from: u16, to: u16) -> VecDeque<Packet> {
        self.links.remove(&(from, to)).unwrap_or_default()
    }

    /// Puts held packets at the *end* of `from -> to` (as if an old connection delivered
    /// them after the new one).
    pub fn inject(&mut self, from: u16, to: u16, packets: VecDeque<Packet>) {
        self.links.entry((from, to)).or_default().extend(packets);
    }

    /// Delivers one packet of `from -> to` to `to` (lost if `to` is down).
    pub fn step(&mut self, from: u16, to: u16) -> bool {
        let Some(p) = self
            .links
            .get_mut(&(from, to))
            .and_then(VecDeque::pop_front)
        else {
            return false;
        };
        let Some(proto) = self.sets[usize::from(to)].as_mut() else {
            return true;
        };
        match p {
            Packet::App(meta, payload, via) => {
                proto
                    .on_receive(SetId(from), via, meta, payload)
                    .expect("receive");
            }
            Packet::Control(c) => {
                let actions = proto.on_control(SetId(from), c).expect("control");
                self.execute(to, actions);
            }
        }
        true
    }

    /// Delivers everything currently on `from -> to` (and what gets added meanwhile).
    pub fn flush(&mut self, from: u16, to: u16) {
        while self.step(from, to) {}
    }

    /// Flushes every link until the network is empty.
    pub fn flush_all(&mut self) {
        loop {
            let keys: Vec<(u16, u16)> = self
                .links
                .iter()
                .filter(|(_, q)| !q.is_empty())
                .map(|(k, _)| *k)
                .collect();
            if keys.is_empty() {
                return;
            }
            for (a, b) in keys {
                self.flush(a, b);
            }
        }
    }

    /// Hands set `s`'s deliverable messages to its actor; returns their texts in order.
    pub fn deliver(&mut self, s: u16) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(d) = self.set(s).poll_delivery() {
            out.push(String::from_utf8_lossy(&d.payload).into_owned());
        }
        out
    }

    /// Set `s` checkpoints; the checkpoint is committed (and announced) at once.
    pub fn checkpoint(&mut self, s: u16) {
        let snap = self.set(s).checkpoint();
        let actions = self.set(s).checkpoint_committed(snap.id).expect("commit");
        self.committed[usize::from(s)] = snap;
        self.execute(s, actions);
    }

    /// Set `s` takes a checkpoint that never gets committed.
    pub fn checkpoint_uncommitted(&mut self, s: u16) {
        let _ = self.set(s).checkpoint();
    }

    /// Set `s` crashes: its protocol state is gone, and so is everything in flight to it.
    pub fn crash(&mut self, s: u16) {
        self.sets[usize::from(s)] = None;
        self.links.retain(|&(_, to), _| to != s);
    }

    /// Set `s` restarts from its last committed checkpoint with its next incarnation; the
    /// ROLLBACKs are queued on its links.
    pub fn restart(&mut self, s: u16) {
        self.incarnations[usize::from(s)] += 1;
        let snap = self.committed[usize::from(s)].clone();
        let (p, actions) = SetProtocol::restore(
            snap,
            Incarnation(self.incarnations[usize::from(s)]),
            self.config,
        )
        .expect("restore");
        self.sets[usize::from(s)] = Some(p);
        self.execute(s, actions);
    }
}
