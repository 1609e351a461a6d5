//! The life of one actor on its core: start hook, the mailbox loop, stop hook, and what
//! happens to its mailbox when it stops or fails.

use crate::actor::{Actor, MessageSet};
use crate::actor_ref::ActorRef;
use crate::context::Context;
use crate::mailbox::{Inbox, Mailbox, Signal, Status};
use crate::node::{CoreId, NodeHandle};
use crate::supervision::{panic_text, FailureKind, SupervisionEvent};
use crate::telemetry::ActorStats;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// Messages taken from the mailbox per wake-up.
const BATCH: usize = 256;

/// How an actor's loop ended.
enum Exit {
    /// Stopped by request; run `on_stop`.
    Stopped,
    /// A handler or hook panicked.
    Failed(FailureKind, String),
}

/// Runs `actor` until it stops or fails. Spawned on the actor's core executor.
pub(crate) async fn run<A: Actor>(
    mut actor: A,
    mailbox: Arc<Mailbox<A::Msg>>,
    mut inbox: Inbox<A::Msg>,
    node: NodeHandle,
    core: CoreId,
) {
    let id = mailbox.id;
    let mut ctx = Context::new(
        ActorRef::from_mailbox(Arc::clone(&mailbox)),
        node.clone(),
        core,
    );
    let mut stats = ActorStats::new(A::NAME, id.to_string());

    let exit = match catch_unwind(AssertUnwindSafe(|| actor.on_start(&mut ctx))) {
        Err(payload) => Exit::Failed(FailureKind::StartPanicked, panic_text(&*payload)),
        Ok(()) => mailbox_loop(&mut actor, &mut ctx, &mut inbox, &mut stats).await,
    };

    let exit = match exit {
        Exit::Stopped => match catch_unwind(AssertUnwindSafe(|| actor.on_stop(&mut ctx))) {
            Ok(()) => Exit::Stopped,
            Err(payload) => Exit::Failed(FailureKind::StopPanicked, panic_text(&*payload)),
        },
        failed => failed,
    };

    match exit {
        Exit::Stopped => mailbox.set_status(Status::Stopped),
        Exit::Failed(kind, panic_message) => {
            mailbox.set_status(Status::Failed);
            stats.failed();
            let event = SupervisionEvent {
                actor: id,
                actor_type: A::NAME,
                core,
                kind,
                panic_message,
            };
            tracing::error!(%event, "actor failed");
            node.report_failure(&event);
        }
    }

    // Nothing more will be handled: refuse new sends, then account for what is left so
    // that no message disappears silently (askers see their reply slot dropped).
    inbox.close();
    let mut left = 0u64;
    while let Ok(signal) = inbox.try_recv() {
        if let Signal::Msg(msg) = signal {
            tracing::warn!(actor = %id, actor_type = A::NAME, message_type = msg.type_name(), "dead letter");
            left += 1;
        }
    }
    stats.dead_letters(left);
    stats.flush(0, left);
    node.deregister(id);
}

async fn mailbox_loop<A: Actor>(
    actor: &mut A,
    ctx: &mut Context<A>,
    inbox: &mut Inbox<A::Msg>,
    stats: &mut ActorStats,
) -> Exit {
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        // Every sender is gone only if the node dropped the registry entry: treat as stop.
        if inbox.recv_many(&mut batch, BATCH).await == 0 {
            return Exit::Stopped;
        }
        let mut signals = batch.drain(..);
        let mut other = 0u64;
        let mut exit = None;
        for signal in signals.by_ref() {
            match signal {
                Signal::Msg(msg) => {
                    let message_type = msg.type_name();
                    let started = stats.start_handler();
                    let outcome = catch_unwind(AssertUnwindSafe(|| actor.handle(msg, ctx)));
                    stats.end_handler(started);
                    if let Err(payload) = outcome {
                        exit = Some(Exit::Failed(
                            FailureKind::HandlerPanicked { message_type },
                            panic_text(&*payload),
                        ));
                        break;
                    }
                    if ctx.stop_requested() {
                        exit = Some(Exit::Stopped);
                        break;
                    }
                }
                Signal::Stop => {
                    other += 1;
                    exit = Some(Exit::Stopped);
                    break;
                }
                Signal::Barrier(ack) => {
                    other += 1;
                    let _ = ack.send(stats.total_delivered);
                }
            }
        }
        if exit.is_some() {
            // The rest of this batch is never handled: dead letters.
            let mut left = 0;
            for signal in signals {
                if let Signal::Msg(msg) = signal {
                    tracing::warn!(actor = %ctx.id(), actor_type = A::NAME, message_type = msg.type_name(), "dead letter");
                    left += 1;
                }
            }
            stats.dead_letters(left);
            other += left;
        }
        stats.flush(inbox.len() as u64, other);
        if let Some(exit) = exit {
            return exit;
        }
    }
}
