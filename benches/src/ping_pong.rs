//! The round trips the one-sided and inter-node benches measure against: an actor
//! ping-pong between two nodes (`Ping` on one, `Pong` on the other, a payload of `n`
//! bytes each way) and plain copies of the payload there and back.

// The message structs `#[messages]` generates from the handlers' parameters have fields
// without doc comments; the handlers say what they carry.
#![allow(missing_docs)]

use lazarus::{messages, Actor, ActorRef, Payload, ReplyTo};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Sends every ball back to its `Ping`.
#[derive(Actor, Serialize, Deserialize, Default)]
pub struct Pong;

#[messages]
impl Pong {
    /// A ball from `back`: sent back to it.
    #[message]
    pub fn ball(&mut self, payload: Payload, back: ActorRef<Ping>) {
        let _ = back.tell(Returned { payload });
    }
}

/// Plays `iters` round trips with a `Pong` and replies with the nanoseconds they took.
#[derive(Actor, Serialize, Deserialize, Default)]
pub struct Ping {
    pong: Option<ActorRef<Pong>>,
    left: u64,
    #[serde(skip)]
    started: Option<Instant>,
    done: ReplyTo<u64>,
}

#[messages]
impl Ping {
    /// `iters` round trips of `size` bytes; replies with the elapsed nanoseconds.
    #[message]
    pub fn run(
        &mut self,
        pong: ActorRef<Pong>,
        size: usize,
        iters: u64,
        ctx: &mut lazarus::Context<Self>,
        reply: ReplyTo<u64>,
    ) {
        self.done = reply;
        self.left = iters;
        self.started = Some(Instant::now());
        let _ = pong.tell(Ball {
            payload: Payload(vec![1; size]),
            back: ctx.myself().clone(),
        });
        self.pong = Some(pong);
    }

    /// The ball came back: sent again, or the round trips are over.
    #[message]
    pub fn returned(&mut self, payload: Payload, ctx: &mut lazarus::Context<Self>) {
        self.left -= 1;
        if self.left == 0 {
            let ns = self.started.map_or(0, |s| s.elapsed().as_nanos() as u64);
            self.done.take().send(ns);
        } else if let Some(p) = &self.pong {
            let _ = p.tell(Ball {
                payload,
                back: ctx.myself().clone(),
            });
        }
    }
}

/// `iters` "round trips" of plain copies: the payload copied from one buffer to another
/// and back, what a round trip through shared memory cannot beat.
pub fn memcpy_round_trips(size: usize, iters: u64) -> Duration {
    let mut a = vec![1u8; size];
    let mut b = vec![0u8; size];
    let start = Instant::now();
    for _ in 0..iters {
        b.copy_from_slice(std::hint::black_box(&a));
        a.copy_from_slice(std::hint::black_box(&b));
    }
    std::hint::black_box((&a, &b));
    start.elapsed()
}
