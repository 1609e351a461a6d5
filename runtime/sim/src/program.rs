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
use std::collections::{BTreeMap, BTreeSet, VecDeque};

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
    /// Global numbers of the servers (order-sensitive, unless `awaiting` without them).
    pub servers: Vec<usize>,
    /// Most forwards of one request.
    pub max_hops: u64,
    /// Servers are async handlers (see [`Program::awaiting`]): each request starts a
    /// call that asks other servers and awaits their results before it answers.
    pub awaiting: Option<Awaiting>,
}

/// The shape of an awaiting service: whom each actor may ask.
#[derive(Clone, Debug)]
pub struct Awaiting {
    /// Per actor, the actors it asks (a client: the servers it sends requests to; a
    /// server: those its calls ask). The relation has no cycle, so no call waits for
    /// itself.
    pub asks: Vec<Vec<usize>>,
}

/// The kinds of a service program's messages (first payload byte).
const REQUEST: u8 = 0;
const FORWARD: u8 = 1;
const ANSWER: u8 = 2;
/// A server's ask to another server (awaiting services).
const ASK: u8 = 3;
/// The result of an ask, to the asking server.
const RESULT: u8 = 4;

/// Whether `payload` is the result of an await (what a suspended handler takes).
pub fn is_result(payload: &[u8]) -> bool {
    payload.first() == Some(&RESULT)
}

/// Whether actor state `st` may take message `payload` from `from` now: a suspended call
/// takes only results, and a result is taken by the call that awaits it, or, if its ask
/// is not made yet, kept for it (`ActorState::early_results`), as the runtime's awaits
/// keep it. A result can come before its ask is made again: a restored server's peers
/// resend what they sent after its checkpoint, and a result does not wait for the request
/// that led to it (the protocol promises no causal order to a restored set's deliveries
/// whose requirement did not bind). Taking it then is a delivery like any other (a
/// determinant for an order-sensitive server), as in the runtime.
pub fn may_take(st: &ActorState, from: usize, payload: &[u8]) -> bool {
    match (&st.call, is_result(payload)) {
        (None, false) => true,
        (Some(_), false) => false,
        (call, true) => {
            let key = decode_service(payload).map_or(0, |(_, _, seq, _, _)| seq);
            let awaited = call
                .as_ref()
                .is_some_and(|c| c.pending.contains(&(from, key)));
            awaited || st.asked.get(&from).copied().unwrap_or(0) < key
        }
    }
}

impl Program {
    /// A random program: `sets` sets of 1..=`max_actors` actors, out-degree
    /// 1..=`max_degree`, `rounds` rounds.
    pub fn random(rng: &mut Rng, sets: u16, max_actors: u64, max_degree: u64, rounds: u32) -> Self {
        let (ids, set_of, members) = place(rng, sets, max_actors);
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
                awaiting: None,
            }),
            by_id,
        }
    }

    /// A random awaiting service (see [`Service::awaiting`]): `sets` sets of
    /// 1..=`max_actors` actors, about a third of them clients, the rest servers whose
    /// handlers are async; `ops` requests per client.
    ///
    /// A server's call folds the request into its state, asks up to two of the servers it
    /// may ask and awaits all their results (a join), sometimes asks one more whose
    /// choice depends on those results and awaits it, then answers. Its state changes
    /// before each await, so a re-execution must start from the state the call started
    /// from, and its asks are effects a re-execution must not make twice.
    ///
    /// Without `order_sensitive`, each server has one requester (the asks form a forest
    /// under the clients) and folds results commutatively: the run is send-deterministic
    /// and every crash schedule must end in the failure-free run's states. With it, every
    /// server is order-sensitive and may be asked by every client and every server before
    /// it: the order of requests and of results, and a drawn value per delivery, decide
    /// what it sends, and only the channel checks apply.
    pub fn awaiting(
        rng: &mut Rng,
        sets: u16,
        max_actors: u64,
        ops: u64,
        order_sensitive: bool,
    ) -> Self {
        let (ids, set_of, members) = place(rng, sets, max_actors);
        let n = ids.len();
        // A random order of the actors: the first third are clients, then servers, each
        // asking only servers after it.
        let mut order: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let clients = (n / 3).max(1);
        let servers: Vec<usize> = order[clients..].to_vec();
        let mut asks = vec![Vec::new(); n];
        if order_sensitive {
            for &c in &order[..clients] {
                asks[c] = servers.clone();
            }
            for (i, &a) in servers.iter().enumerate() {
                asks[a] = servers[i + 1..].to_vec();
            }
        } else {
            // A forest: each server's one requester comes before it; every client gets a
            // server first.
            for (i, &a) in order.iter().enumerate().skip(clients) {
                let parent = if i < 2 * clients {
                    order[i - clients]
                } else {
                    order[rng.below(i as u64) as usize]
                };
                asks[parent].push(a);
            }
        }
        let mut outputs = vec![Vec::new(); n];
        for a in 0..n {
            for &b in &asks[a] {
                outputs[a].push(b);
                outputs[b].push(a);
            }
        }
        let mut inputs = vec![Vec::new(); n];
        for (a, outs) in outputs.iter_mut().enumerate() {
            outs.sort_unstable();
            outs.dedup();
            for &b in outs.iter() {
                inputs[b].push(a);
            }
        }
        let mut sensitive = vec![false; n];
        if order_sensitive {
            for &a in &servers {
                sensitive[a] = true;
            }
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
            sensitive,
            service: Some(Service {
                ops,
                servers,
                max_hops: 0,
                awaiting: Some(Awaiting { asks }),
            }),
            by_id,
        }
    }

    /// Whether actor `a`'s handlers are async (a server of an awaiting service).
    pub fn is_async(&self, a: usize) -> bool {
        self.service
            .as_ref()
            .is_some_and(|svc| svc.awaiting.is_some() && svc.servers.contains(&a))
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
                let per_request = match svc.awaiting {
                    Some(_) => 6,
                    None => 2 + svc.max_hops / 2,
                };
                clients * svc.ops * per_request
            }
        }
    }

    /// Whether actor `a` has done all its work in `st` (for a run without an oracle).
    pub fn finished(&self, a: usize, st: &ActorState) -> bool {
        match &self.service {
            None => st.next_round == self.rounds + 1,
            Some(svc) if svc.servers.contains(&a) => svc.awaiting.is_none() || st.call.is_none(),
            Some(svc) => st.seq == svc.ops && st.outstanding.is_none(),
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
            early_results: BTreeMap::new(),
            call: None,
            asked: BTreeMap::new(),
            calls: 0,
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
        if svc.servers.contains(&a) || st.outstanding.is_some() || st.seq >= svc.ops {
            return;
        }
        st.seq += 1;
        let h = mix((a as u64) << 32 ^ st.seq ^ 0x5E7C);
        let servers = match &svc.awaiting {
            Some(w) => &w.asks[a],
            None => &svc.servers,
        };
        let server = servers[(h % servers.len() as u64) as usize];
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
        if self.is_async(a) {
            match kind {
                REQUEST | ASK => self.begin_call(a, st, from, seq, value, draw, out),
                RESULT if client == a as u64 => self.resume(a, st, from, seq, value, draw, out),
                _ => st.violate(format!("server {a} got a {kind} for {client} from {from}")),
            }
            return;
        }
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

    /// An async server starts a call for a request (`key`: the client's request number,
    /// or the asking server's ask number): folds it into its state, asks, awaits.
    #[allow(clippy::too_many_arguments)]
    fn begin_call(
        &self,
        a: usize,
        st: &mut ActorState,
        from: usize,
        key: u64,
        value: u64,
        draw: Draw<'_>,
        out: &mut Vec<(usize, Vec<u8>)>,
    ) {
        if st.call.is_some() {
            st.violate(format!(
                "server {a} took a request from {from} while its call was suspended"
            ));
            return;
        }
        let mut h = mix(value ^ (a as u64) << 32 ^ 0xA5A5);
        if self.sensitive[a] {
            st.order = mix(st.order ^ value ^ (from as u64) << 48);
            st.clock += 1;
            h = mix(h ^ st.order ^ draw(st.clock));
        }
        // The state changes before the first await: a re-execution starts from the state
        // the call started from, or this is counted twice.
        st.acc = st.acc.wrapping_add(mix(h));
        let askable = self.askable(a);
        let mut call = Call {
            requester: from,
            key,
            value: h,
            stage: 1,
            pending: BTreeSet::new(),
            sum: 0,
        };
        let wanted = (h % 3).min(askable.len() as u64);
        let mut k = 0;
        while (call.pending.len() as u64) < wanted {
            let to = askable[((h >> 8).wrapping_add(k) % askable.len() as u64) as usize];
            k += 1;
            if call.pending.iter().any(|&(b, _)| b == to) {
                continue;
            }
            self.ask(a, st, &mut call, to, out);
        }
        self.await_stage(a, st, call, draw, out);
    }

    /// Servers a call of `a` may ask.
    fn askable(&self, a: usize) -> &[usize] {
        match self.service.as_ref().and_then(|s| s.awaiting.as_ref()) {
            Some(w) => &w.asks[a],
            None => &[],
        }
    }

    /// Asks server `to` on behalf of `call`: the ask's key is its number among `a`'s
    /// asks to `to` (the same in every run: a channel's sequence is).
    fn ask(
        &self,
        a: usize,
        st: &mut ActorState,
        call: &mut Call,
        to: usize,
        out: &mut Vec<(usize, Vec<u8>)>,
    ) {
        let n = st.asked.entry(to).or_default();
        *n += 1;
        let key = *n;
        call.pending.insert((to, key));
        let p = self.service_payload(ASK, a as u64, key, 0, mix(call.value ^ to as u64));
        self.sent_on(a, st, to, &p, out);
    }

    /// The result of ask `key` to `from` reaches `a`'s suspended call.
    #[allow(clippy::too_many_arguments)]
    fn resume(
        &self,
        a: usize,
        st: &mut ActorState,
        from: usize,
        key: u64,
        value: u64,
        draw: Draw<'_>,
        out: &mut Vec<(usize, Vec<u8>)>,
    ) {
        let awaited = st
            .call
            .as_ref()
            .is_some_and(|c| c.pending.contains(&(from, key)));
        if !awaited {
            // Its ask is not made yet: kept for it.
            let made = st.asked.get(&from).copied().unwrap_or(0);
            if key <= made || st.early_results.insert((from, key), value).is_some() {
                st.violate(format!(
                    "server {a} got the result of {from}#{key}, which no call awaits"
                ));
            }
            return;
        }
        let Some(mut call) = st.call.take() else {
            return;
        };
        call.pending.remove(&(from, key));
        if self.took(a, st, &mut call, value, draw) {
            st.call = Some(call);
            return;
        }
        self.next_stage(a, st, call, draw, out);
    }

    /// Call `call` of `a` takes a result: false once it awaits nothing more.
    fn took(
        &self,
        a: usize,
        st: &mut ActorState,
        call: &mut Call,
        value: u64,
        draw: Draw<'_>,
    ) -> bool {
        st.acc = st.acc.wrapping_add(value);
        if self.sensitive[a] {
            // Which result came first shows in everything it sends afterwards.
            st.order = mix(st.order ^ value);
            st.clock += 1;
            call.sum = mix(call.sum ^ value ^ draw(st.clock));
        } else {
            call.sum = call.sum.wrapping_add(mix(value));
        }
        !call.pending.is_empty()
    }

    /// Call `call` of `a` has every result of its stage: asks again or completes.
    fn next_stage(
        &self,
        a: usize,
        st: &mut ActorState,
        mut call: Call,
        draw: Draw<'_>,
        out: &mut Vec<(usize, Vec<u8>)>,
    ) {
        let askable = self.askable(a);
        let again = mix(call.sum ^ 0x5EC0);
        if call.stage == 1 && !askable.is_empty() && again % 2 == 0 {
            // A second await, on a server the results chose.
            call.stage = 2;
            let to = askable[((again >> 8) % askable.len() as u64) as usize];
            self.ask(a, st, &mut call, to, out);
            self.await_stage(a, st, call, draw, out);
            return;
        }
        st.call = Some(call);
        self.complete(a, st, out);
    }

    /// Call `call` of `a` has made its stage's asks: it takes the results that came
    /// before them (in ask key order), then suspends, or moves on if it has them all.
    fn await_stage(
        &self,
        a: usize,
        st: &mut ActorState,
        mut call: Call,
        draw: Draw<'_>,
        out: &mut Vec<(usize, Vec<u8>)>,
    ) {
        let came: Vec<(usize, u64)> = call
            .pending
            .iter()
            .copied()
            .filter(|k| st.early_results.contains_key(k))
            .collect();
        if came.is_empty() {
            let done = call.pending.is_empty();
            st.call = Some(call);
            if done {
                self.complete(a, st, out);
            }
            return;
        }
        for k in came {
            let Some(value) = st.early_results.remove(&k) else {
                continue;
            };
            call.pending.remove(&k);
            self.took(a, st, &mut call, value, draw);
        }
        if call.pending.is_empty() {
            self.next_stage(a, st, call, draw, out);
        } else {
            st.call = Some(call);
        }
    }

    /// `a`'s call has every result: it answers its requester.
    fn complete(&self, a: usize, st: &mut ActorState, out: &mut Vec<(usize, Vec<u8>)>) {
        let Some(call) = st.call.take() else {
            return;
        };
        st.calls += 1;
        let v = mix(call.value ^ call.sum);
        let to = call.requester;
        let kind = if self.is_async(to) { RESULT } else { ANSWER };
        let p = self.service_payload(kind, to as u64, call.key, 0, v);
        self.sent_on(a, st, to, &p, out);
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
    /// Async servers: the call awaiting results, if one is suspended.
    pub call: Option<Call>,
    /// Async servers: results that came before their ask was made (again), by (asked
    /// server, key): the ask takes it when it is made.
    pub early_results: BTreeMap<(usize, u64), u64>,
    /// Async servers: asks made so far to each server (the last ask's key).
    pub asked: BTreeMap<usize, u64>,
    /// Async servers: calls completed.
    pub calls: u64,
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

/// `sets` sets of 1..=`max_actors` actors each: every actor's id and set, and each set's
/// actors (global numbers, in local order).
fn place(rng: &mut Rng, sets: u16, max_actors: u64) -> (Vec<ActorId>, Vec<u16>, Vec<Vec<usize>>) {
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
    (ids, set_of, members)
}

/// An async server's call while it awaits (awaiting services).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// Who asked: a client (answered with an answer) or a server (with a result).
    pub requester: usize,
    /// The requester's number for the request: a client's request number, or the
    /// asking server's ask key.
    pub key: u64,
    /// What the request folded into.
    pub value: u64,
    /// 1: awaiting the first asks (a join); 2: awaiting the one their results chose.
    pub stage: u8,
    /// Asks not answered yet: (asked server, key).
    pub pending: BTreeSet<(usize, u64)>,
    /// The results so far: a commutative sum, or for an order-sensitive server a chain
    /// in arrival order.
    pub sum: u64,
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
