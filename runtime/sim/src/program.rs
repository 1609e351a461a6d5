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
//!
//! Order-sensitive actors (when the run has them) break send-determinism on purpose: they
//! fold every delivery into an arrival-order hash and draw a nondeterministic value (a
//! random number or a clock read, supplied by the driver) at every round, and both go into
//! the values they send. Now and then (when that hash says so) one receives selectively
//! (`ctx.receive_only_from`): its next delivery must come from one named input, one of
//! those furthest behind, so the named sender never waits for it (no deadlock); such a
//! delivery is determined by the channel's FIFO order and logs nothing. They also arm
//! timers (`ctx.send_after`) and cancel some, again as their arrival-order hash says; a
//! timer's delivery folds its value into that hash, so where among the other deliveries
//! it is handled shows in everything the actor sends afterwards. Their runs have no
//! oracle; what they must satisfy is that every channel's receiver saw exactly what its
//! sender's final state says it sent.

use super::rng::{mix, Rng};
use lazarus::ActorId;
use std::collections::{BTreeMap, VecDeque};

/// Supplies an order-sensitive actor's nondeterministic value at an event-clock tick.
pub type Draw<'a> = &'a mut dyn FnMut(u64) -> u64;

/// Most timers one actor arms in a run (so runs end).
const MAX_TIMERS: u64 = 6;

/// A timer operation of a start or handler (`ctx.send_after` / `ctx.cancel_timer`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerOp {
    /// Arm timer number `seq` (the actor's arm count, as the runtime numbers them): it
    /// rings `value` after `delay` simulated steps.
    Arm {
        /// The timer's number.
        seq: u64,
        /// Simulated steps until it rings.
        delay: u64,
        /// The payload its ringing delivers.
        value: u64,
    },
    /// Cancel timer `seq` (armed and not handled yet).
    Cancel(u64),
}

/// What a start or handler did: messages sent (destination, payload), in send order, and
/// timer operations, in order.
#[derive(Debug, Default)]
pub struct Effects {
    /// Messages sent: (destination actor, payload).
    pub sends: Vec<(usize, Vec<u8>)>,
    /// Timers armed and cancelled.
    pub timers: Vec<TimerOp>,
}

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
    /// Per actor: whether it is order-sensitive (its sends depend on arrival order and on
    /// drawn values).
    pub sensitive: Vec<bool>,
    /// A request/answer service instead of the dataflow (see [`Service`]).
    pub service: Option<Service>,
    by_id: BTreeMap<ActorId, usize>,
}

/// The shape of a service program ("chains"): order-sensitive *servers* and
/// deterministic *clients*, every client connected to every server and back, every
/// server to every server, itself included. A client keeps exactly one request
/// outstanding: it sends request `seq` to a server it draws from its own generator, and
/// the next one once the answer to `seq` is in. A server folds each delivery into its
/// arrival-order hash and draws a nondeterministic value; from both it decides to answer
/// the client itself or to forward the request to another server (drawn from the same
/// hash: on another set, on its own set, or itself), which decides the same way, up to
/// the request's hop limit. So an order-sensitive delivery causes a send to another
/// order-sensitive actor, and what is forwarded where depends on arrival order: the
/// shape of a bank whose withdrawal decides a deposit elsewhere.
#[derive(Clone, Debug)]
pub struct Service {
    /// Requests per client.
    pub ops: u64,
    /// Global numbers of the servers (order-sensitive).
    pub servers: Vec<usize>,
    /// Most forwards of one request.
    pub max_hops: u64,
}

/// The kinds of a service program's messages (first payload byte).
const REQUEST: u8 = 0;
const FORWARD: u8 = 1;
const ANSWER: u8 = 2;

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
            sensitive: vec![false; n],
            service: None,
            by_id,
        }
    }

    /// A random service program (see [`Service`]): `sets` sets of 1..=`max_actors`
    /// actors, each a server or a client (at least one of each), `ops` requests per
    /// client.
    pub fn service(rng: &mut Rng, sets: u16, max_actors: u64, ops: u64) -> Self {
        let mut ids = Vec::new();
        let mut set_of = Vec::new();
        let mut members = vec![Vec::new(); usize::from(sets)];
        let mut server = Vec::new();
        for s in 0..sets {
            for local in 0..rng.range(1, max_actors) {
                members[usize::from(s)].push(ids.len());
                ids.push(ActorId::new(s, local).expect("small sequence"));
                set_of.push(s);
                server.push(rng.chance(1, 2));
            }
        }
        // Every set has an actor and there are at least two sets: room for a server and a
        // client.
        let n = ids.len();
        if !server.iter().any(|&x| x) {
            server[rng.below(n as u64) as usize] = true;
        }
        if server.iter().all(|&x| x) {
            let mut pick = rng.below(n as u64) as usize;
            // Keep at least one server.
            if server.iter().filter(|&&x| x).count() == 1 {
                pick = (pick + 1) % n;
            }
            server[pick] = false;
        }
        let servers: Vec<usize> = (0..n).filter(|&a| server[a]).collect();
        let mut outputs = vec![Vec::new(); n];
        let mut inputs = vec![Vec::new(); n];
        for a in 0..n {
            // A client talks to every server; a server to every server (itself too) and
            // every client.
            let outs: Vec<usize> = if server[a] {
                (0..n).collect()
            } else {
                servers.clone()
            };
            for &b in &outs {
                inputs[b].push(a);
            }
            outputs[a] = outs;
        }
        let by_id = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
        Program {
            ids,
            set_of,
            members,
            outputs,
            inputs,
            rounds: 0,
            padding: rng.below(48) as usize,
            sensitive: server,
            service: Some(Service {
                ops,
                servers,
                max_hops: rng.range(1, 3),
            }),
            by_id,
        }
    }

    /// Messages a failure-free run sends, about (where crashes are spread).
    pub fn expected_messages(&self) -> u64 {
        match &self.service {
            None => {
                self.outputs.iter().map(|o| o.len() as u64).sum::<u64>()
                    * u64::from(self.rounds + 1)
            }
            Some(svc) => {
                let clients = (self.actors() - svc.servers.len()) as u64;
                clients * svc.ops * (2 + svc.max_hops / 2)
            }
        }
    }

    /// Whether actor `a` has done all its work in `st` (for a run without an oracle).
    pub fn finished(&self, a: usize, st: &ActorState) -> bool {
        match &self.service {
            None => st.next_round == self.rounds + 1,
            Some(svc) => self.sensitive[a] || (st.seq == svc.ops && st.outstanding.is_none()),
        }
    }

    /// Makes each actor order-sensitive with probability 1/2 (at least one).
    pub fn make_order_sensitive(&mut self, rng: &mut Rng) {
        for s in &mut self.sensitive {
            *s = rng.chance(1, 2);
        }
        let pick = rng.below(self.sensitive.len() as u64) as usize;
        self.sensitive[pick] = true;
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
            clock: 0,
            order: 0,
            receive_only: None,
            timers_armed: 0,
            timers_live: Vec::new(),
            timers_handled: 0,
            sent: vec![(0, 0); self.outputs[a].len()],
            seq: 0,
            outstanding: None,
            early: BTreeMap::new(),
            violation: None,
        }
    }

    /// Runs actor `a`'s start: its round-0 messages (and every round, if it has no
    /// inputs). `draw` supplies an order-sensitive actor's nondeterministic values: it
    /// gets the actor's event-clock tick and returns the value.
    pub fn start(&self, a: usize, st: &mut ActorState, draw: Draw<'_>) -> Effects {
        let mut out = Effects::default();
        st.started = true;
        if self.service.is_some() {
            self.next_request(a, st, &mut out.sends);
            self.take_early(a, st, &mut out.sends);
            return out;
        }
        self.emit(a, st, 0, 0, draw, &mut out.sends);
        self.compute(a, st, draw, &mut out.sends);
        out
    }

    /// Runs actor `a`'s handler for a message from actor `from` with channel index
    /// `send_index` (for an order-sensitive actor, the driver has ticked its event clock
    /// for this delivery).
    /// `trusted`: the run promises causal order for this message (no delivery whose
    /// requirement did not bind lies in its causal past, and one set fails at a time): a
    /// service client then refuses an answer to a request it has not sent.
    #[allow(clippy::too_many_arguments)]
    pub fn handle(
        &self,
        a: usize,
        st: &mut ActorState,
        from: usize,
        send_index: u64,
        payload: &[u8],
        trusted: bool,
        draw: Draw<'_>,
    ) -> Effects {
        let mut out = Effects::default();
        let Some(pos) = self.inputs[a].iter().position(|&x| x == from) else {
            st.violate(format!("actor {a} got a message from {from}, not an input"));
            return out;
        };
        if self.service.is_some() {
            self.serve(
                a,
                st,
                pos,
                from,
                send_index,
                payload,
                trusted,
                draw,
                &mut out.sends,
            );
            return out;
        }
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
        if self.sensitive[a] {
            st.order = mix(st.order ^ value ^ (from as u64) << 48);
        }
        self.compute(a, st, draw, &mut out.sends);
        self.choose_receive_filter(a, st);
        self.choose_timer_ops(a, st, &mut out.timers);
        out
    }

    /// Runs order-sensitive actor `a`'s handler for its timer `seq`, which rang `value`
    /// (the driver has ticked its event clock for this delivery). The value goes into the
    /// arrival-order hash: every later send shows where the timer was handled.
    pub fn handle_timer(&self, a: usize, st: &mut ActorState, seq: u64, value: u64) -> Effects {
        let mut out = Effects::default();
        let Some(i) = st.timers_live.iter().position(|&t| t == seq) else {
            st.violate(format!(
                "actor {a} handled timer {seq}, which is not armed (handled before, or \
                 cancelled)"
            ));
            return out;
        };
        st.timers_live.remove(i);
        st.timers_handled += 1;
        st.order = mix(st.order ^ value ^ seq << 56);
        self.choose_receive_filter(a, st);
        self.choose_timer_ops(a, st, &mut out.timers);
        out
    }

    /// An order-sensitive actor decides from its arrival-order hash (so a replay decides
    /// the same) whether to arm a timer and whether to cancel one of those still live.
    fn choose_timer_ops(&self, a: usize, st: &mut ActorState, ops: &mut Vec<TimerOp>) {
        if !self.sensitive[a] {
            return;
        }
        let h = mix(st.order ^ 0x7133);
        if h % 3 == 0 && st.timers_armed < MAX_TIMERS {
            st.timers_armed += 1;
            let seq = st.timers_armed;
            st.timers_live.push(seq);
            ops.push(TimerOp::Arm {
                seq,
                delay: (h >> 8) % 64,
                value: mix(h ^ seq),
            });
        }
        if (h >> 20) % 4 == 0 && !st.timers_live.is_empty() {
            let i = (h >> 32) as usize % st.timers_live.len();
            ops.push(TimerOp::Cancel(st.timers_live.remove(i)));
        }
    }

    /// An order-sensitive actor decides, from its state alone (so a replay decides the
    /// same), whether its next delivery is a selective receive and from whom: one of the
    /// inputs it has received the fewest messages from. That sender's next message needs
    /// nothing this actor has not sent yet, so naming it can never deadlock.
    fn choose_receive_filter(&self, a: usize, st: &mut ActorState) {
        st.receive_only = None;
        if !self.sensitive[a] || st.order % 3 != 0 {
            return;
        }
        let Some(&least) = st.received.iter().min() else {
            return;
        };
        if least > u64::from(self.rounds) {
            return; // every input has sent its last round
        }
        let behind: Vec<usize> = (0..st.received.len())
            .filter(|&p| st.received[p] == least)
            .collect();
        let pick = behind[(st.order >> 8) as usize % behind.len()];
        st.receive_only = Some(self.inputs[a][pick]);
    }

    /// A client's next request, if it has requests left: to a server and with a hop
    /// limit drawn from its own state alone (send-deterministic).
    fn next_request(&self, a: usize, st: &mut ActorState, out: &mut Vec<(usize, Vec<u8>)>) {
        let Some(svc) = &self.service else {
            return;
        };
        if self.sensitive[a] || st.outstanding.is_some() || st.seq >= svc.ops {
            return;
        }
        st.seq += 1;
        let h = mix((a as u64) << 32 ^ st.seq ^ 0x5E7C);
        let server = svc.servers[(h % svc.servers.len() as u64) as usize];
        let hops = (h >> 16) % (svc.max_hops + 1);
        st.outstanding = Some(h);
        let payload = self.service_payload(REQUEST, a as u64, st.seq, hops, h);
        self.sent_on(a, st, server, &payload, out);
    }

    /// Encodes a service message: kind, client, request number, hops left, value.
    fn service_payload(&self, kind: u8, client: u64, seq: u64, hops: u64, value: u64) -> Vec<u8> {
        let mut p = Vec::with_capacity(33 + self.padding);
        p.push(kind);
        for x in [client, seq, hops, value] {
            p.extend_from_slice(&x.to_le_bytes());
        }
        p.resize(33 + self.padding, (value & 0xff) as u8);
        p
    }

    /// Records a send on the channel to `to` (count and hash chain) and queues it.
    fn sent_on(
        &self,
        a: usize,
        st: &mut ActorState,
        to: usize,
        payload: &[u8],
        out: &mut Vec<(usize, Vec<u8>)>,
    ) {
        let Some(k) = self.outputs[a].iter().position(|&b| b == to) else {
            st.violate(format!("actor {a} sent to {to}, not an output"));
            return;
        };
        let f = fingerprint(payload);
        st.sent[k] = (st.sent[k].0 + 1, mix(st.sent[k].1 ^ f));
        out.push((to, payload.to_vec()));
    }

    /// A service program's handler: a server serves or forwards, a client takes answers
    /// in request order and sends its next request.
    #[allow(clippy::too_many_arguments)]
    fn serve(
        &self,
        a: usize,
        st: &mut ActorState,
        pos: usize,
        from: usize,
        send_index: u64,
        payload: &[u8],
        trusted: bool,
        draw: Draw<'_>,
        out: &mut Vec<(usize, Vec<u8>)>,
    ) {
        let expected = st.received[pos];
        if send_index != expected + 1 {
            st.violate(format!(
                "actor {a}: channel from {from} delivered index {send_index} but {expected} \
                 messages were delivered before: duplicate, gap or reorder"
            ));
            return;
        }
        let Some((kind, client, seq, hops, value)) = decode_service(payload) else {
            st.violate(format!("actor {a} got an undecodable payload from {from}"));
            return;
        };
        st.received[pos] += 1;
        st.chain[pos] = mix(st.chain[pos] ^ fingerprint(payload));
        if self.sensitive[a] {
            // Order-sensitive: what happens next depends on every delivery so far, in
            // arrival order, and on a drawn value.
            st.order = mix(st.order ^ value ^ (from as u64) << 48 ^ seq << 20);
            st.clock += 1;
            let h = mix(st.order ^ draw(st.clock));
            st.acc = st.acc.wrapping_add(h);
            let client_actor = client as usize;
            if kind == ANSWER || client_actor >= self.actors() || self.sensitive[client_actor] {
                st.violate(format!(
                    "server {a} got a {kind} for client {client} from {from}"
                ));
                return;
            }
            let servers = &self.service.as_ref().expect("a service program").servers;
            if hops > 0 && h % 4 != 0 {
                let next = servers[((h >> 8) % servers.len() as u64) as usize];
                let p = self.service_payload(FORWARD, client, seq, hops - 1, h);
                self.sent_on(a, st, next, &p, out);
            } else {
                let p = self.service_payload(ANSWER, client, seq, 0, h);
                self.sent_on(a, st, client_actor, &p, out);
            }
            return;
        }
        // A client: answers are taken in request order, whatever order the channels
        // from different servers interleave in (a restored set gets its answers back all
        // at once).
        if kind != ANSWER || client != a as u64 {
            st.violate(format!("client {a} got a {kind} for {client} from {from}"));
            return;
        }
        if seq > st.seq && trusted {
            // Causal order: the answer depends on the request, which this client has
            // not sent (again) yet. Only a delivery that did not bind may do that.
            st.violate(format!(
                "client {a}: the answer to request {seq} came before the client sent it \
                 (it has sent {}): a replay out of causal order",
                st.seq
            ));
            return;
        }
        let answered = seq < st.seq || (seq == st.seq && st.outstanding.is_none());
        if seq == 0 || answered || st.early.insert(seq, value).is_some() {
            st.violate(format!("client {a}: a second answer to request {seq}"));
            return;
        }
        self.take_early(a, st, out);
    }

    /// A client takes the answers to its outstanding request, in request order, as far
    /// as they have come (an answer can even come before the client started, when its set
    /// restored and its peers resent what they logged).
    fn take_early(&self, a: usize, st: &mut ActorState, out: &mut Vec<(usize, Vec<u8>)>) {
        while st.started && st.outstanding.is_some() {
            let Some(v) = st.early.remove(&st.seq) else {
                return;
            };
            st.outstanding = None;
            st.acc = mix(st.acc ^ v);
            self.next_request(a, st, out);
        }
    }

    fn compute(
        &self,
        a: usize,
        st: &mut ActorState,
        draw: Draw<'_>,
        out: &mut Vec<(usize, Vec<u8>)>,
    ) {
        if !st.started {
            return;
        }
        while st.next_round <= self.rounds && st.bufs.iter().all(|b| !b.is_empty()) {
            let mut sum = 0u64;
            for b in &mut st.bufs {
                sum = sum.wrapping_add(b.pop_front().unwrap_or_default());
            }
            st.acc = st.acc.wrapping_add(mix(sum ^ u64::from(st.next_round)));
            self.emit(a, st, st.next_round, sum, draw, out);
            st.next_round += 1;
        }
    }

    fn emit(
        &self,
        a: usize,
        st: &mut ActorState,
        round: u32,
        sum: u64,
        draw: Draw<'_>,
        out: &mut Vec<(usize, Vec<u8>)>,
    ) {
        let nondeterministic = if self.sensitive[a] {
            st.clock += 1;
            st.order ^ draw(st.clock)
        } else {
            0
        };
        for (k, &b) in self.outputs[a].iter().enumerate() {
            let value = mix((a as u64) << 40
                ^ u64::from(round) << 20
                ^ b as u64
                ^ mix(sum)
                ^ nondeterministic);
            st.sent[k] = (st.sent[k].0 + 1, mix(st.sent[k].1 ^ value));
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
        let mut no_draws = |_| unreachable!("the oracle has no order-sensitive actors");
        for a in 0..self.actors() {
            for (b, p) in self.start(a, &mut states[a], &mut no_draws).sends {
                let i = sent[a].entry(b).or_default();
                *i += 1;
                queue.push_back((a, b, *i, p));
            }
        }
        while let Some((a, b, i, p)) = queue.pop_front() {
            for (c, q) in self
                .handle(b, &mut states[b], a, i, &p, true, &mut no_draws)
                .sends
            {
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
    /// Order-sensitive actors: the event clock (one tick per delivery and per draw).
    pub clock: u64,
    /// Order-sensitive actors: hash of the deliveries in arrival order.
    pub order: u64,
    /// Order-sensitive actors in a selective receive: the input (global actor number) the
    /// next delivery must come from.
    pub receive_only: Option<usize>,
    /// Order-sensitive actors: timers armed so far (the last arm number).
    pub timers_armed: u64,
    /// Order-sensitive actors: arm numbers of the timers neither handled nor cancelled.
    pub timers_live: Vec<u64>,
    /// Order-sensitive actors: timer deliveries handled.
    pub timers_handled: u64,
    /// Per output: messages sent and the hash chain of their values.
    pub sent: Vec<(u64, u64)>,
    /// Service clients: the number of the last request sent.
    pub seq: u64,
    /// Service clients: the request awaiting its answer (its value), if any.
    pub outstanding: Option<u64>,
    /// Service clients: answers that came before their turn, by request number.
    pub early: BTreeMap<u64, u64>,
    /// The first application-level violation seen (duplicate, gap, reorder, misroute).
    pub violation: Option<String>,
}

impl ActorState {
    /// Messages delivered and hash chain, per input, in input order.
    pub fn received_on(&self, pos: usize) -> (u64, u64) {
        (self.received[pos], self.chain[pos])
    }

    fn violate(&mut self, what: String) {
        self.violation.get_or_insert(what);
    }
}

/// A service message's kind, client, request number, hops left and value.
fn decode_service(payload: &[u8]) -> Option<(u8, u64, u64, u64, u64)> {
    let kind = *payload.first()?;
    let field = |i: usize| -> Option<u64> {
        Some(u64::from_le_bytes(
            payload.get(1 + 8 * i..9 + 8 * i)?.try_into().ok()?,
        ))
    };
    Some((kind, field(0)?, field(1)?, field(2)?, field(3)?))
}

/// What a service message adds to its channel's hash chain.
fn fingerprint(payload: &[u8]) -> u64 {
    payload
        .iter()
        .fold(payload.len() as u64, |h, &b| mix(h ^ u64::from(b)))
}

fn decode(payload: &[u8]) -> Option<(u32, u64)> {
    let round = u32::from_le_bytes(payload.get(0..4)?.try_into().ok()?);
    let value = u64::from_le_bytes(payload.get(4..12)?.try_into().ok()?);
    Some((round, value))
}
