//! Which stashed message an actor takes next.
//!
//! An actor's mailbox is read out of order when an order-sensitive actor replays (it
//! takes the messages its log names, in the logged order), receives selectively (only
//! one sender's), or when an async handler is suspended (only the results its awaits
//! wait for). The messages it cannot take yet wait in its stash, in arrival order. Which
//! of them is a candidate is the same rule in the runtime's actor cell and in the
//! simulator, so it lives here: only the oldest stashed message of each sender is one (a
//! channel stays FIFO), every stashed timer is one (timers ring in deadline order, not
//! arm order), every result is one (a handler awaits its reply, not the messages its
//! replier sent before it), and a timer cancelled after it rang is taken out at once,
//! before any delivery decision (it takes no tick: a replay may cancel it before it
//! rings, and then it never comes), and so is a result whose await was given up (a
//! replay may give it up before the result is made, and then it never comes). While a handler is suspended only results are
//! candidates; during a selective receive results wait (a delivery it makes is not
//! logged, a result's delivery is: the two must not share a tick a replay could see in
//! another order).

/// One stashed message, as the choice sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stashed<K> {
    /// A message from sender `from` (a channel's next message, if it is the oldest stashed
    /// one of that sender).
    Message {
        /// Its sender.
        from: K,
    },
    /// A timer's message; `cancelled`: the timer was cancelled after it rang.
    Timer {
        /// Cancelled after it rang: dropped, never delivered.
        cancelled: bool,
    },
    /// A message with no channel position (the actor's node runs without recovery): taken
    /// in arrival order unless a selective receive waits for a sender.
    Unordered,
    /// The result of an async handler's await (a reply to its ask, or its sleep's end):
    /// a candidate whatever its sender sent before it. `given_up`: its await was made and
    /// dropped unanswered (a `select` that took another branch), so it is dropped, never
    /// delivered.
    Result {
        /// Its await was given up: dropped without a delivery.
        given_up: bool,
    },
}

/// Which stashed messages an actor may take at all now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Receiving {
    /// Any: the delivery order (and `may_take`) decides.
    Anything,
    /// A selective receive waits for one sender (`may_take` names it): messages without a
    /// sender wait too, and so do results (taken once a handler awaits them, or the
    /// receive is lifted).
    Selective,
    /// An async handler is suspended: only results, until it completes.
    Results,
}

/// The position in `stash` (arrival order) of the message to take next: the first timer
/// cancelled after it rang (to drop), or the first candidate `may_take` admits. Only the
/// oldest message of each sender is a candidate, and `may_take` is asked about
/// candidates only, in order, until it says yes: it may decide (and record) the
/// delivery. `receiving` narrows the candidates (see [`Receiving`]).
pub fn next_stashed<K: PartialEq>(
    stash: impl IntoIterator<Item = Stashed<K>>,
    receiving: Receiving,
    mut may_take: impl FnMut(usize, &Stashed<K>) -> bool,
) -> Option<usize> {
    let mut seen: Vec<K> = Vec::new();
    for (pos, h) in stash.into_iter().enumerate() {
        let results_only = receiving == Receiving::Results;
        let selective = receiving == Receiving::Selective;
        match &h {
            Stashed::Timer { cancelled: true } => return Some(pos),
            Stashed::Result { given_up: true } => return Some(pos),
            Stashed::Result { .. } if selective => continue,
            Stashed::Result { .. } => {}
            _ if results_only => continue,
            Stashed::Unordered if selective => continue,
            Stashed::Unordered => return Some(pos),
            Stashed::Timer { cancelled: false } => {}
            Stashed::Message { from } if seen.contains(from) => continue,
            Stashed::Message { .. } => {}
        }
        if may_take(pos, &h) {
            return Some(pos);
        }
        if let Stashed::Message { from } = h {
            seen.push(from);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(k: u8) -> Stashed<u8> {
        Stashed::Message { from: k }
    }

    const RESULT: Stashed<u8> = Stashed::Result { given_up: false };

    #[test]
    fn a_result_whose_await_was_given_up_is_taken_out_first_in_every_mode() {
        let given_up = Stashed::Result { given_up: true };
        for receiving in [
            Receiving::Anything,
            Receiving::Selective,
            Receiving::Results,
        ] {
            let mut asked = 0;
            let pick = next_stashed([RESULT, given_up], receiving, |_, _| {
                asked += 1;
                false
            });
            assert_eq!(pick, Some(1), "{receiving:?}");
            assert!(asked <= 1, "only the live result is asked about");
        }
    }

    #[test]
    fn only_the_oldest_stashed_message_of_each_sender_is_a_candidate() {
        let stash = [from(1), from(1), from(2)];
        let mut asked = Vec::new();
        let pick = next_stashed(stash, Receiving::Anything, |pos, _| {
            asked.push(pos);
            pos == 1 || pos == 2
        });
        // Position 1 is sender 1's second message: never asked about, never taken.
        assert_eq!(pick, Some(2));
        assert_eq!(asked, vec![0, 2]);
    }

    #[test]
    fn every_stashed_timer_is_a_candidate_and_a_cancelled_one_is_taken_out_first() {
        let live: Stashed<u8> = Stashed::Timer { cancelled: false };
        let cancelled = Stashed::Timer { cancelled: true };
        assert_eq!(
            next_stashed([live, live], Receiving::Anything, |pos, _| pos == 1),
            Some(1)
        );
        // Nothing is asked about before the cancelled timer is dropped.
        let mut asked = 0;
        let pick = next_stashed([from(1), cancelled], Receiving::Anything, |_, _| {
            asked += 1;
            false
        });
        assert_eq!((pick, asked), (Some(1), 1));
    }

    #[test]
    fn unordered_messages_go_in_arrival_order_unless_a_selective_receive_waits() {
        let stash = [Stashed::Unordered, from(3)];
        assert_eq!(
            next_stashed(stash, Receiving::Anything, |_, _| false),
            Some(0)
        );
        let selective = Receiving::Selective;
        assert_eq!(
            next_stashed(stash, selective, |_, h| *h == from(3)),
            Some(1)
        );
        assert_eq!(next_stashed(stash, selective, |_, _| false), None);
        // A result waits for a handler to await it.
        let result_first = [RESULT, from(3)];
        assert_eq!(next_stashed(result_first, selective, |_, _| true), Some(1));
    }

    #[test]
    fn a_suspended_handler_takes_only_results_and_a_result_passes_its_senders_messages() {
        let stash = [from(1), Stashed::Unordered, RESULT];
        let mut asked = Vec::new();
        let pick = next_stashed(stash, Receiving::Results, |pos, _| {
            asked.push(pos);
            true
        });
        assert_eq!((pick, asked), (Some(2), vec![2]));
        assert_eq!(
            next_stashed([from(1)], Receiving::Results, |_, _| true),
            None
        );
        // Behind its sender's older stashed message, a result is still a candidate.
        let behind = [from(1), RESULT];
        assert_eq!(
            next_stashed(behind, Receiving::Anything, |pos, _| pos == 1),
            Some(1)
        );
    }
}
