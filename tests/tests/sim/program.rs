//! The application the simulator runs: a send-deterministic dataflow of actors, like a
//! stencil or any bulk-synchronous kernel.
//!
//! Every actor has fixed input and output channels (a random directed graph over all the
//! actors of all sets, so channels run inside sets and between them). In round 0 it sends
//! one message to each output. Round `r >= 1` starts when round `r - 1`'s message has
//! arrived on *every* input: it adds them up (a commutative sum), folds the sum into its
//! accumulator and sends the round-`r` message, whose value depends on that sum, to each
//! output. After round `R` it stops sending.
//!
//! This is send-deterministic and confluent: the sequence of messages on every channel and
//! the final state of every actor depend only on the per-channel sequences delivered, never
//! on how deliveries from different channels interleave. The state also records, per input
//! channel, a hash chain of everything delivered in order and the count: the final state
//! equals the reference only if every channel delivered exactly its sequence, once, in
//! order. A message out of sequence (duplicate, gap) is reported as a violation on the spot.

use super::rng::{mix, Rng};
use lazarus::ActorId;
use std::collections::{BTreeMap, VecDeque};

/// The static shape of one run's program.
#[derive(Clone, Debug)]
pub struct Program {
    /// Every actor's id (index = global actor number).
    pub ids: Vec<ActorId>,
    /// The set of every actor.
    pub set_of: Vec<u16>,
    /// Global actor numbers of each set's actors, in local order.
    pub members: Vec<Vec<usize>>,
    /// Output channels of every actor (global numbers).
    pub outputs: Vec<Vec<usize>>,
    /// Input channels of every actor (global numbers).
    pub inputs: Vec<Vec<usize>>,
    /// Last round.
    pub rounds: u32,
    /// Extra payload bytes per message, to give the log something to weigh.
    pub padding: usize,
    by_id: BTreeMap<ActorId, usize>,
}

impl Program {
    /// A random program: `sets` sets of 1..=`max_actors` actors, out-degree
    /// 1..=`max_degree`, `rounds` rounds.
    pub fn random(rng: &mut Rng, sets: u16, max_actors: u64, max_degree: u64, rounds: u32) -> Self {
        let mut ids = Vec::new();
        let mut set_of = Vec::new();
        let mut members = vec![Vec::new(); usize::from(sets)];
        for s in 0..sets {
            for local in 0..rng.range(1, max_actors) {
                members[usize::from(s)].push(ids.len());
                ids.push(ActorId::new(s, local).expect("small sequence"));
                set_of.push(s);
            }
        }
        let n = ids.len();
        let mut outputs = vec![Vec::new(); n];
        let mut inputs = vec![Vec::new(); n];
        for (a, slot) in outputs.iter_mut().enumerate() {
            let degree = rng.range(1, max_degree).min(n as u64 - 1);
            let mut outs: Vec<usize> = Vec::new();
            while (outs.len() as u64) < degree {
                let b = rng.below(n as u64) as usize;
                if b != a && !outs.contains(&b) {
                    outs.push(b);
                }
            }
            outs.sort_unstable();
            for &b in &outs {
                inputs[b].push(a);
            }
            *slot = outs;
        }
        let by_id = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
        Program {
            ids,
            set_of,
            members,
            outputs,
            inputs,
            rounds,
            padding: rng.below(48) as usize,
            by_id,
        }
    }

    /// Number of actors.
    pub fn actors(&self) -> usize {
        self.ids.len()
    }

    /// Global number of the actor with this id.
    pub fn actor(&self, id: ActorId) -> Option<usize> {
        self.by_id.get(&id).copied()
    }

    /// Initial state of actor `a`.
    pub fn initial(&self, a: usize) -> ActorState {
        let k = self.inputs[a].len();
        ActorState {
            started: false,
            next_round: 1,
            bufs: vec![VecDeque::new(); k],
            received: vec![0; k],
            chain: vec![0; k],
            acc: 0,
            violation: None,
        }
    }

    /// Runs actor `a`'s start: its round-0 messages (and every round, if it has no
    /// inputs). Returns `(destination, payload)` pairs in send order.
    pub fn start(&self, a: usize, st: &mut ActorState) -> Vec<(usize, Vec<u8>)> {
        let mut out = Vec::new();
        st.started = true;
        self.emit(a, 0, 0, &mut out);
        self.compute(a, st, &mut out);
        out
    }

    /// Runs actor `a`'s handler for a message from actor `from` with channel index
    /// `send_index`.
    pub fn handle(
        &self,
        a: usize,
        st: &mut ActorState,
        from: usize,
        send_index: u64,
        payload: &[u8],
    ) -> Vec<(usize, Vec<u8>)> {
        let mut out = Vec::new();
        let Some(pos) = self.inputs[a].iter().position(|&x| x == from) else {
            st.violate(format!("actor {a} got a message from {from}, not an input"));
            return out;
        };
        let Some((round, value)) = decode(payload) else {
            st.violate(format!("actor {a} got an undecodable payload from {from}"));
            return out;
        };
        let expected = st.received[pos];
        if u64::from(round) != expected || send_index != expected + 1 {
            st.violate(format!(
                "actor {a}: channel from {from} delivered round {round} (index {send_index}) \
                 but {expected} messages were delivered before: duplicate, gap or reorder"
            ));
            return out;
        }
        st.received[pos] += 1;
        st.chain[pos] = mix(st.chain[pos] ^ value);
        st.bufs[pos].push_back(value);
        self.compute(a, st, &mut out);
        out
    }

    fn compute(&self, a: usize, st: &mut ActorState, out: &mut Vec<(usize, Vec<u8>)>) {
        if !st.started {
            return;
        }
        while st.next_round <= self.rounds && st.bufs.iter().all(|b| !b.is_empty()) {
            let mut sum = 0u64;
            for b in &mut st.bufs {
                sum = sum.wrapping_add(b.pop_front().unwrap_or_default());
            }
            st.acc = st.acc.wrapping_add(mix(sum ^ u64::from(st.next_round)));
            self.emit(a, st.next_round, sum, out);
            st.next_round += 1;
        }
    }

    fn emit(&self, a: usize, round: u32, sum: u64, out: &mut Vec<(usize, Vec<u8>)>) {
        for &b in &self.outputs[a] {
            let value = mix((a as u64) << 40 ^ u64::from(round) << 20 ^ b as u64 ^ mix(sum));
            let mut payload = Vec::with_capacity(12 + self.padding);
            payload.extend_from_slice(&round.to_le_bytes());
            payload.extend_from_slice(&value.to_le_bytes());
            payload.resize(12 + self.padding, (value & 0xff) as u8);
            out.push((b, payload));
        }
    }

    /// The failure-free result computed without any protocol: every actor started, then
    /// messages handled from one global FIFO queue until none is left.
    pub fn oracle(&self) -> Vec<ActorState> {
        let mut states: Vec<ActorState> = (0..self.actors()).map(|a| self.initial(a)).collect();
        let mut queue = VecDeque::new();
        let mut sent = vec![BTreeMap::<usize, u64>::new(); self.actors()];
        for a in 0..self.actors() {
            for (b, p) in self.start(a, &mut states[a]) {
                let i = sent[a].entry(b).or_default();
                *i += 1;
                queue.push_back((a, b, *i, p));
            }
        }
        while let Some((a, b, i, p)) = queue.pop_front() {
            for (c, q) in self.handle(b, &mut states[b], a, i, &p) {
                let j = sent[b].entry(c).or_default();
                *j += 1;
                queue.push_back((b, c, *j, q));
            }
        }
        states
    }
}

/// The state of one actor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActorState {
    /// Whether its start ran.
    pub started: bool,
    /// The next round it will compute.
    pub next_round: u32,
    /// Per input, values received and not consumed by a round yet.
    pub bufs: Vec<VecDeque<u64>>,
    /// Per input, messages delivered.
    pub received: Vec<u64>,
    /// Per input, hash chain of the values delivered, in order.
    pub chain: Vec<u64>,
    /// Commutative accumulation of the round sums.
    pub acc: u64,
    /// The first application-level violation seen (duplicate, gap, reorder, misroute).
    pub violation: Option<String>,
}

impl ActorState {
    fn violate(&mut self, what: String) {
        self.violation.get_or_insert(what);
    }
}

fn decode(payload: &[u8]) -> Option<(u32, u64)> {
    let round = u32::from_le_bytes(payload.get(0..4)?.try_into().ok()?);
    let value = u64::from_le_bytes(payload.get(4..12)?.try_into().ok()?);
    Some((round, value))
}
