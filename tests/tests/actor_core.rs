//! Specification of the actor core: defining actors, placing them on cores, tell and ask,
//! lifecycle, failures, and zero-copy local delivery.

use lazarus::{
    messages, Actor, AskError, Context, CoreId, FailureKind, Node, ReplyTo, SendError, SpawnError,
    SupervisionEvent,
};
use serde::{Deserialize, Serialize};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

#[derive(Actor, Serialize, Deserialize, Default)]
struct Counter {
    total: u64,
    seen: Vec<u64>,
}

#[messages]
impl Counter {
    /// Adds `amount`; replies with the new total.
    #[message]
    fn add(&mut self, amount: u64) -> u64 {
        self.total += amount;
        self.seen.push(amount);
        self.total
    }

    #[message]
    fn history(&mut self) -> Vec<u64> {
        self.seen.clone()
    }

    #[message]
    fn where_am_i(&mut self, ctx: &mut Context<Self>) -> (usize, Vec<u32>) {
        (
            ctx.core().0,
            lazarus::topology::current_thread_binding().unwrap_or_default(),
        )
    }

    #[message]
    fn fail_if(&mut self, fail: bool) -> u64 {
        assert!(!fail, "asked to fail");
        self.total
    }

    #[message]
    fn sleep_ms(&mut self, ms: u64) {
        std::thread::sleep(Duration::from_millis(ms));
    }

    #[message]
    fn stop_now(&mut self, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

fn node() -> Node {
    Node::builder().build().expect("node starts")
}

#[test]
fn tell_then_ask_sees_every_told_message_in_send_order() {
    let node = node();
    let counter = node.spawn(Counter::default()).unwrap();
    for i in 1..=1000 {
        counter.tell(Add { amount: i }).unwrap();
    }
    let total = node.block_on(counter.ask(Add { amount: 0 })).unwrap();
    assert_eq!(total, 1000 * 1001 / 2);
    let history = node.block_on(counter.ask(History)).unwrap();
    assert_eq!(history, (1..=1000).chain([0]).collect::<Vec<_>>());
    assert!(node.shutdown().drained);
}

#[test]
fn spawn_on_pins_the_actor_to_the_requested_core() {
    let node = node();
    for core in 0..node.num_cores() {
        let a = node.spawn_on(CoreId(core), Counter::default()).unwrap();
        let (on, binding) = node.block_on(a.ask(WhereAmI)).unwrap();
        assert_eq!(on, core);
        assert_eq!(
            Some(binding.as_slice()),
            node.handle().core_pus(CoreId(core))
        );
    }
    node.shutdown();
}

#[test]
fn spawn_places_actors_round_robin_over_all_cores() {
    let node = node();
    let n = node.num_cores();
    let mut cores: Vec<usize> = (0..2 * n)
        .map(|_| {
            let a = node.spawn(Counter::default()).unwrap();
            node.block_on(a.ask(WhereAmI)).unwrap().0
        })
        .collect();
    cores.sort();
    let expected: Vec<usize> = (0..n).flat_map(|c| [c, c]).collect();
    assert_eq!(cores, expected);
    node.shutdown();
}

#[test]
fn a_core_that_does_not_exist_is_an_error_not_a_panic() {
    let node = node();
    let n = node.num_cores();
    let err = node
        .spawn_on(CoreId(n + 3), Counter::default())
        .unwrap_err();
    assert_eq!(
        err,
        SpawnError::NoSuchCore {
            requested: n + 3,
            available: n
        }
    );
    assert!(err.to_string().contains("does not exist"));
    // The node keeps working.
    let a = node.spawn(Counter::default()).unwrap();
    assert_eq!(node.block_on(a.ask(Add { amount: 1 })).unwrap(), 1);
    node.shutdown();
}

#[test]
fn asking_for_more_cores_than_the_machine_has_fails_to_build() {
    let err = Node::builder().cores(100_000).build().err().unwrap();
    assert!(matches!(
        err,
        lazarus::NodeError::NotEnoughCores {
            requested: 100_000,
            ..
        }
    ));
}

#[test]
fn asking_for_no_cores_fails_to_build_with_that_reason() {
    let err = Node::builder().cores(0).build().err().unwrap();
    assert_eq!(err, lazarus::NodeError::NoCores);
    assert!(err.to_string().contains("at least one core"), "{err}");
}

#[test]
fn sending_to_a_stopped_actor_returns_the_message_to_the_sender() {
    let node = node();
    let a = node.spawn(Counter::default()).unwrap();
    a.tell(Add { amount: 5 }).unwrap();
    a.stop();
    let err = a.tell(Add { amount: 7 }).unwrap_err();
    assert!(matches!(err, SendError::ActorStopped { id, .. } if id == a.id()));
    assert_eq!(err.into_message().amount, 7);
    assert_eq!(
        node.block_on(a.ask(History)).unwrap_err(),
        AskError::ActorStopped(a.id())
    );
    node.shutdown();
}

#[test]
fn stop_handles_what_was_enqueued_before_it() {
    let node = node();
    let a = node.spawn(Counter::default()).unwrap();
    let pending = a.ask(Add { amount: 3 });
    a.stop();
    assert_eq!(node.block_on(pending).unwrap(), 3);
    node.shutdown();
}

#[test]
fn an_actor_that_stops_itself_fails_later_asks_with_actor_stopped() {
    let node = node();
    let a = node.spawn_on(CoreId(0), Counter::default()).unwrap();
    let blocker = a.ask(SleepMs { ms: 50 });
    a.tell(StopNow).unwrap();
    let after = a.ask(Add { amount: 1 });
    node.block_on(blocker).unwrap();
    assert_eq!(
        node.block_on(after).unwrap_err(),
        AskError::ActorStopped(a.id())
    );
    node.shutdown();
}

#[test]
fn ask_times_out_with_a_clear_error() {
    let node = node();
    let a = node.spawn(Counter::default()).unwrap();
    let err = node
        .block_on(
            a.ask(SleepMs { ms: 300 })
                .timeout(Duration::from_millis(20)),
        )
        .unwrap_err();
    assert_eq!(
        err,
        AskError::Timeout {
            id: a.id(),
            timeout: Duration::from_millis(20)
        }
    );
    // The actor is unharmed and answers afterwards.
    assert_eq!(node.block_on(a.ask(Add { amount: 2 })).unwrap(), 2);
    node.shutdown();
}

#[test]
fn a_panicking_handler_fails_only_its_actor_and_is_reported() {
    let events: Arc<Mutex<Vec<SupervisionEvent>>> = Arc::default();
    let seen = Arc::clone(&events);
    let node = Node::builder()
        .on_failure(move |e| seen.lock().unwrap().push(e.clone()))
        .build()
        .unwrap();
    // Victim and bystander share a core, so the panic happens on the bystander's thread.
    let victim = node.spawn_on(CoreId(0), Counter::default()).unwrap();
    let bystander = node.spawn_on(CoreId(0), Counter::default()).unwrap();
    for i in 0..100 {
        bystander.tell(Add { amount: i }).unwrap();
    }
    let waiting = victim.ask(Add { amount: 1 });
    victim.tell(FailIf { fail: true }).unwrap();
    let queued_behind = victim.ask(Add { amount: 1 });
    for i in 100..200 {
        bystander.tell(Add { amount: i }).unwrap();
    }

    assert_eq!(node.block_on(waiting).unwrap(), 1);
    assert_eq!(
        node.block_on(queued_behind).unwrap_err(),
        AskError::ActorFailed(victim.id())
    );
    assert!(matches!(
        victim.tell(Add { amount: 1 }),
        Err(SendError::ActorFailed { .. })
    ));
    // No bystander message was lost.
    assert_eq!(
        node.block_on(bystander.ask(History)).unwrap(),
        (0..200).collect::<Vec<_>>()
    );

    let events = events.lock().unwrap().clone();
    assert_eq!(events.len(), 1);
    let e = &events[0];
    assert_eq!(
        (e.actor, e.actor_type, e.core),
        (victim.id(), "Counter", CoreId(0))
    );
    assert_eq!(
        e.kind,
        FailureKind::HandlerPanicked {
            message_type: "FailIf"
        }
    );
    assert!(
        e.panic_message.contains("asked to fail"),
        "{}",
        e.panic_message
    );
    node.shutdown();
}

/// Relays payloads to a sink and records the heap address each one arrives with.
#[derive(Actor, Serialize, Deserialize, Default)]
struct Sink {
    addresses: Vec<usize>,
}

#[messages]
impl Sink {
    #[message]
    fn take(&mut self, payload: Vec<u8>) {
        self.addresses.push(payload.as_ptr() as usize);
    }

    #[message]
    fn addresses(&mut self) -> Vec<usize> {
        self.addresses.clone()
    }
}

#[test]
fn local_messages_move_their_payload_without_copying_it_even_across_cores() {
    let node = node();
    let sink = node
        .spawn_on(CoreId(node.num_cores() - 1), Sink::default())
        .unwrap();
    let mut sent = Vec::new();
    for size in [8usize, 4096, 1 << 20] {
        let payload = vec![7u8; size];
        sent.push(payload.as_ptr() as usize);
        sink.tell(Take { payload }).unwrap();
    }
    assert_eq!(node.block_on(sink.ask(Addresses)).unwrap(), sent);
    node.shutdown();
}

/// Passes a token around a ring of `Hop` actors and answers the original asker at the end:
/// a deferred reply.
#[derive(Actor, Serialize, Deserialize, Default)]
struct Hop {
    next: Option<lazarus::ActorRef<Hop>>,
    waiting: ReplyTo<u64>,
}

#[messages]
impl Hop {
    #[message]
    fn link(&mut self, next: lazarus::ActorRef<Hop>) {
        self.next = Some(next);
    }

    #[message]
    fn start(&mut self, hops: u64, reply: ReplyTo<u64>) {
        self.waiting = reply;
        if let Some(next) = &self.next {
            next.tell(Token {
                left: hops,
                visited: 0,
            })
            .unwrap();
        }
    }

    #[message]
    fn token(&mut self, left: u64, visited: u64) {
        if left == 0 {
            self.waiting.take().send(visited);
        } else if let Some(next) = &self.next {
            next.tell(Token {
                left: left - 1,
                visited: visited + 1,
            })
            .unwrap();
        }
    }
}

#[test]
fn a_handler_can_keep_its_reply_slot_and_answer_later() {
    let node = node();
    let ring: Vec<_> = (0..5)
        .map(|_| node.spawn(Hop::default()).unwrap())
        .collect();
    for (i, hop) in ring.iter().enumerate() {
        hop.tell(Link {
            next: ring[(i + 1) % ring.len()].clone(),
        })
        .unwrap();
    }
    // 100 hops from ring[0]'s successor come back to ring[0] exactly when left reaches 0.
    let visited = node.block_on(ring[0].ask(Start { hops: 99 })).unwrap();
    assert_eq!(visited, 99);
    assert!(node.shutdown().drained);
}

#[test]
fn a_dropped_reply_slot_is_reported_as_no_reply() {
    let node = node();
    let hop = node.spawn(Hop::default()).unwrap();
    hop.tell(Start { hops: 1 }).unwrap();
    // Start with no `next`: the slot is stored; a second Start replaces (drops) it.
    let first = hop.ask(Start { hops: 1 });
    hop.tell(Start { hops: 1 }).unwrap();
    assert_eq!(
        node.block_on(first).unwrap_err(),
        AskError::NoReply(hop.id())
    );
    node.shutdown();
}

#[test]
fn actor_refs_serialize_as_their_id_and_resolve_on_the_node() {
    let node = node();
    let a = node.spawn(Counter::default()).unwrap();
    let bytes = postcard_like_encode(&a);
    let back: lazarus::ActorRef<Counter> = node
        .block_on(async { serde_json_like_decode(&bytes) })
        .unwrap();
    assert_eq!(back, a);
    assert_eq!(node.block_on(back.ask(Add { amount: 4 })).unwrap(), 4);
    // Outside a node, resolution fails with an error rather than a dangling reference.
    assert!(serde_json_like_decode::<lazarus::ActorRef<Counter>>(&bytes).is_err());
    node.shutdown();
}

#[test]
fn a_reference_to_an_actor_that_has_exited_still_resolves_and_refuses_messages_as_stopped() {
    // As a reference kept across the stop does: a message or a checkpointed state that
    // names the actor still decodes.
    let node = node();
    let a = node.spawn(Counter::default()).unwrap();
    let bytes = postcard_like_encode(&a);
    node.block_on(a.ask(StopNow)).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while node.handle().lookup::<Counter>(a.id()).is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the actor never exited"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let back: lazarus::ActorRef<Counter> = node
        .block_on(async { serde_json_like_decode(&bytes) })
        .unwrap();
    assert_eq!(back, a);
    let err = back.tell(Add { amount: 7 }).unwrap_err();
    assert!(matches!(err, SendError::ActorStopped { id, .. } if id == a.id()));
    assert_eq!(
        node.block_on(back.ask(History)).unwrap_err(),
        AskError::ActorStopped(a.id())
    );
    // An id that never named an actor here is still an error.
    let never = lazarus::ActorId::new(a.id().rank(), 999).unwrap();
    assert!(node.handle().actor_ref::<Counter>(never).is_err());
    node.shutdown();
}

fn postcard_like_encode<T: Serialize>(v: &T) -> Vec<u8> {
    lazarus::wire::encode(v).unwrap()
}

fn serde_json_like_decode<T: serde::de::DeserializeOwned>(b: &[u8]) -> Result<T, String> {
    lazarus::wire::decode(b).map_err(|e| e.to_string())
}

/// Records lifecycle hook calls into a shared log (skipped from the checkpointed state).
#[derive(Actor, Serialize, Deserialize, Default)]
#[actor(on_start = started, on_stop = stopped)]
struct Hooked {
    #[serde(skip)]
    log: Option<mpsc::Sender<&'static str>>,
}

impl Hooked {
    fn started(&mut self, _ctx: &mut Context<Self>) {
        let _ = self.log.as_ref().map(|l| l.send("start"));
    }
    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        let _ = self.log.as_ref().map(|l| l.send("stop"));
    }
}

#[messages]
impl Hooked {
    #[message]
    fn ping(&mut self) {
        let _ = self.log.as_ref().map(|l| l.send("ping"));
    }
}

#[test]
fn start_and_stop_hooks_bracket_every_message_and_shutdown_drains_mailboxes() {
    let node = node();
    let (tx, rx) = mpsc::channel();
    let a = node.spawn(Hooked { log: Some(tx) }).unwrap();
    for _ in 0..3 {
        a.tell(Ping).unwrap();
    }
    let report = node.shutdown();
    assert!(report.drained && report.all_stopped);
    let log: Vec<_> = rx.try_iter().collect();
    assert_eq!(log, ["start", "ping", "ping", "ping", "stop"]);
}
