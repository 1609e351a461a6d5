//! Reply slots: how a handler answers an `ask`.
//!
//! A handler that returns a value replies synchronously; one that takes a [`ReplyTo`]
//! parameter may keep it (for example until a token comes back around a ring) and reply
//! later. For a `tell` the slot is empty and replying is a no-op.

use tokio::sync::oneshot;

/// The right to answer one request. Dropping it unanswered makes the asker's `ask` fail
/// with [`crate::AskError::NoReply`].
#[must_use = "dropping a ReplyTo fails the asker's request"]
pub struct ReplyTo<R> {
    tx: Option<oneshot::Sender<R>>,
}

impl<R> ReplyTo<R> {
    /// A slot for a message sent with `tell`: nobody waits for the answer.
    pub fn none() -> Self {
        ReplyTo { tx: None }
    }

    pub(crate) fn channel() -> (Self, oneshot::Receiver<R>) {
        let (tx, rx) = oneshot::channel();
        (ReplyTo { tx: Some(tx) }, rx)
    }

    /// Whether somebody is waiting for the answer (the message came from `ask`).
    pub fn is_requested(&self) -> bool {
        self.tx.is_some()
    }

    /// Answers the request. Returns `false` if nobody was waiting any more (the asker timed
    /// out or went away) or the message came from `tell`.
    pub fn send(mut self, reply: R) -> bool {
        match self.tx.take() {
            Some(tx) => tx.send(reply).is_ok(),
            None => false,
        }
    }
}

impl<R> std::fmt::Debug for ReplyTo<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyTo")
            .field("requested", &self.is_requested())
            .finish()
    }
}

impl<R> Default for ReplyTo<R> {
    /// An empty slot, so a `ReplyTo` kept in actor state can be `#[serde(skip)]`ped.
    fn default() -> Self {
        ReplyTo::none()
    }
}
