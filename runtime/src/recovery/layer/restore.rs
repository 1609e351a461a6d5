//! A restarted node: find the newest complete checkpoint (own directory, else the buddy's
//! replica), restart the protocol from it as a new incarnation (ROLLBACK to every peer),
//! and, once the app's `main` has spawned its actors again, put their checkpointed states
//! and mailboxes back before anything runs.
//!
//! The app's code is the same as in a failure-free run: `main` runs again from the top.
//! Actors get the same ids because they are spawned in the same order; `main`'s tells
//! that the checkpoint already contains are skipped; barriers the cluster has passed
//! return at once.

use super::set_checkpoint::{SetImage, SET_IMAGE_FORMAT};
use super::{event, RecoveryLayer, RECOVERY_PHASE, ROLLBACKS};
use crate::actor::lifecycle::Control;
use crate::checkpoint::CheckpointStore;
use crate::node::NodeHandle;
use crate::recovery::{Incarnation, SetId, SetProtocol};
use metrics::{counter, histogram};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a restarted node waits for its buddy's replica.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// The replies of a checkpoint's part of the reply journal.
type Journal = Vec<(u64, bytes::Bytes)>;

/// Where a restarted node's state came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestoreSource {
    /// The node's checkpoint directory.
    Directory(u64),
    /// The buddy's in-memory replica.
    Buddy(u64),
    /// No checkpoint anywhere: the node starts over from the beginning.
    Beginning,
}

impl RecoveryLayer {
    fn decode_image(&self, body: &[u8]) -> Option<SetImage> {
        match crate::wire::decode::<SetImage>(body) {
            Ok(img) if img.format == SET_IMAGE_FORMAT => {
                match img.protocol.validate(SetId(self.rank), self.size) {
                    Ok(()) => Some(img),
                    Err(e) => {
                        counter!(crate::checkpoint::CORRUPT_CHECKPOINTS, "reason" => "invalid")
                            .increment(1);
                        tracing::warn!("checkpoint refused: {e}");
                        None
                    }
                }
            }
            Ok(img) => {
                counter!(crate::checkpoint::CORRUPT_CHECKPOINTS, "reason" => "format").increment(1);
                tracing::warn!(format = img.format, "checkpoint of another format");
                None
            }
            Err(e) => {
                counter!(crate::checkpoint::CORRUPT_CHECKPOINTS, "reason" => "decode").increment(1);
                tracing::warn!("checkpoint does not decode: {e}");
                None
            }
        }
    }

    /// The records of a checkpoint's prefix of the reply journal, if they verify.
    fn journal_records(
        &self,
        image: &SetImage,
        journal: Vec<u8>,
    ) -> Option<Vec<(u64, bytes::Bytes)>> {
        let want = usize::try_from(image.main_replay.journal_len).ok()?;
        let Some(prefix) = journal.get(..want) else {
            tracing::warn!(
                have = journal.len(),
                want,
                "the reply journal is shorter than the checkpoint's; not using it"
            );
            return None;
        };
        let prefix = bytes::Bytes::from(prefix.to_vec());
        match crate::checkpoint::journal::decode_records(&prefix) {
            Ok(records) if records.len() as u64 == image.main_replay.kept => Some(records),
            Ok(records) => {
                counter!(crate::checkpoint::CORRUPT_CHECKPOINTS, "reason" => "journal")
                    .increment(1);
                tracing::warn!(
                    "the reply journal holds {} replies where the checkpoint kept {}; not using it",
                    records.len(),
                    image.main_replay.kept
                );
                None
            }
            Err(e) => {
                counter!(crate::checkpoint::CORRUPT_CHECKPOINTS, "reason" => "journal")
                    .increment(1);
                tracing::warn!("the reply journal does not verify: {e}; not using it");
                None
            }
        }
    }

    /// The newest usable checkpoint of this node, with the replies of its reply journal,
    /// and the epoch of a newer checkpoint file the directory holds that could not be
    /// used (damaged, or its journal does not verify).
    /// The directory is asked first: a checkpoint reaches the buddy only after it is in
    /// the directory, so the buddy is needed only when the directory lost it (or it, or
    /// its journal, does not verify; an intact older file does not do: the peers may
    /// have released their logs for the newer one).
    fn load_newest(&self) -> (Option<(SetImage, Journal)>, RestoreSource, Option<u64>) {
        let local = match self.store.load_latest(self.rank) {
            Ok(Some(c)) => self.decode_image(&c.body).and_then(|i| {
                let journal = self
                    .store
                    .read_journal(self.rank, i.main_replay.journal_len)
                    .inspect_err(|e| tracing::warn!("reply journal: {e}"))
                    .ok()?;
                let records = self.journal_records(&i, journal)?;
                Some((c.epoch, i, records))
            }),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!("checkpoint directory: {e}");
                None
            }
        };
        let newest_file = self.store.newest_epoch(self.rank).unwrap_or_else(|e| {
            tracing::warn!("checkpoint directory: {e}");
            None
        });
        let unusable = newest_file.filter(|n| local.as_ref().is_none_or(|(l, _, _)| n > l));
        let buddy = self.config.buddy && self.size > 1;
        let remote = if (local.is_none() || unusable.is_some()) && buddy {
            self.fetch_replica(FETCH_TIMEOUT)
                .and_then(|(id, body, journal)| {
                    let image = self.decode_image(&body)?;
                    let records = self.journal_records(&image, journal)?;
                    Some((id, image, records))
                })
        } else {
            None
        };
        let chosen = match (local, remote) {
            (Some((l, _, _)), Some((r, ri, rj))) if r > l => {
                (Some((ri, rj)), RestoreSource::Buddy(r))
            }
            (Some((l, li, lj)), _) => (Some((li, lj)), RestoreSource::Directory(l)),
            (None, Some((r, ri, rj))) => (Some((ri, rj)), RestoreSource::Buddy(r)),
            (None, None) => (None, RestoreSource::Beginning),
        };
        if let (Some((_, records)), RestoreSource::Buddy(_)) = (&chosen.0, chosen.1) {
            // The directory's journal continues from the buddy's copy.
            let mut bytes = Vec::new();
            crate::checkpoint::journal::encode_records(records, &mut bytes);
            if let Err(e) = self.store.append_journal(self.rank, 0, &bytes) {
                // Restore anyway: the state is good; this node's checkpoints
                // will fail (and say so) until its directory is writable.
                tracing::error!("cannot write the buddy's reply journal here: {e}");
            }
        }
        if let Some(damaged) = unusable {
            let older = match chosen.1 {
                RestoreSource::Buddy(id) if id >= damaged => None,
                RestoreSource::Buddy(id) | RestoreSource::Directory(id) => {
                    Some(format!("the older checkpoint id={id}"))
                }
                RestoreSource::Beginning => Some("the beginning".to_string()),
            };
            if let Some(older) = older {
                tracing::error!(
                    "the newest checkpoint (id={damaged}) is unusable (see above) and {}: \
                     restarting from {older}; unless its peers still log every message \
                     it delivered since, the run cannot be recovered",
                    if buddy {
                        "the buddy holds no newer intact copy"
                    } else {
                        "no copy of it is kept (--buddy on keeps one in the next node's memory)"
                    }
                );
            }
        }
        (chosen.0, chosen.1, unusable)
    }

    /// Restarts the protocol of this node from its newest checkpoint as the configured
    /// incarnation and sends the ROLLBACKs. Actors are restored later, at
    /// [`RecoveryLayer::restore_point`].
    pub(crate) fn begin_restore(&self, node: &NodeHandle) -> Result<RestoreSource, String> {
        let _span = tracing::info_span!(
            "recovery.load",
            rank = self.rank,
            incarnation = self.config.incarnation
        )
        .entered();
        let started = Instant::now();
        let incarnation = Incarnation(self.config.incarnation);
        let (image, source, unusable) = self.load_newest();
        let (snapshot, actors, main_replay, events, exited, logger_instances) = match image {
            Some((img, journal)) => {
                node.windows().restart(img.windows);
                (
                    img.protocol,
                    img.actors,
                    super::main_replay::MainReplay::restored(img.main_replay, journal)?,
                    img.events,
                    img.exited,
                    img.logger_instances,
                )
            }
            None => {
                node.windows().restart(Vec::new());
                let mut fresh =
                    SetProtocol::new(SetId(self.rank), self.size).map_err(|e| e.to_string())?;
                (
                    fresh.checkpoint(),
                    Vec::new(),
                    super::main_replay::MainReplay::default(),
                    Default::default(),
                    Default::default(),
                    Vec::new(),
                )
            }
        };
        histogram!(RECOVERY_PHASE, "phase" => "load").record(started.elapsed().as_secs_f64());
        let n_actors = actors.len();
        let frames = {
            let mut state = self.lock();
            let image = crate::recovery::NodeImage {
                protocol: snapshot,
                events: events.snapshot,
            };
            let actions = state
                .recovery
                .restore(image, incarnation, self.config.node(self.size))
                .map_err(|e| e.to_string())?;
            self.restore_event_clocks(&mut state, &events);
            state.main_replay = main_replay;
            state.images = actors.into_iter().map(|a| (a.id, a)).collect();
            state.exited = exited;
            state.logger_instances = logger_instances;
            state.rollback_at = Some(Instant::now());
            // Open until the last peer's RESPONSE completes the replay (on another thread).
            state.replay_span = Some(tracing::info_span!(
                "recovery.replay",
                rank = self.rank,
                incarnation = incarnation.0
            ));
            // In the machine's order: the fetches of the determinants logged since the
            // checkpoint, then the ROLLBACKs (control messages only: nothing to fetch
            // from a logger node under the lock).
            self.send_actions(&mut state, actions);
            Self::outgoing(&mut state)
        };
        counter!(ROLLBACKS).increment(1);
        event(
            self.rank,
            &format!(
                "loaded source={} actors={} load_ms={}{}",
                match source {
                    RestoreSource::Directory(id) => format!("directory:{id}"),
                    RestoreSource::Buddy(id) => format!("buddy:{id}"),
                    RestoreSource::Beginning => "beginning".into(),
                },
                n_actors,
                started.elapsed().as_millis(),
                unusable.map_or(String::new(), |id| format!(" unusable=directory:{id}"))
            ),
        );
        self.emit(frames);
        event(
            self.rank,
            &format!("rollback-sent incarnation={}", incarnation.0),
        );
        self.replay_early(node);
        Ok(source)
    }

    /// An actor was spawned while this node is being restored: it starts at the restore
    /// point, with its checkpointed state if it has one. False if the node is running.
    pub(crate) fn defer_start(&self, cell: Arc<dyn Control>) -> bool {
        let mut state = self.lock();
        if state.ready {
            return false;
        }
        state.deferred.push(cell);
        true
    }

    /// The app's main has spawned its actors again and now communicates: restore their
    /// states and mailboxes and let them run.
    pub(crate) fn restore_point(&self, node: &NodeHandle) {
        let _span = tracing::info_span!("recovery.restore", rank = self.rank).entered();
        let started = Instant::now();
        let mut state = self.lock();
        if state.ready {
            return;
        }
        let mut deferred = std::mem::take(&mut state.deferred);
        let mut images = std::mem::take(&mut state.images);
        let exited = std::mem::take(&mut state.exited);
        Self::retire_exited(node, &mut deferred, &images, &exited);
        // Children of actors (spawned from handlers) are not spawned again by `main`:
        // rebuild them, all before any state is decoded, since states hold references to
        // them.
        let children = Self::rebuild_children(node, &images, &deferred);
        deferred.extend(children);
        // States hold actor references: they resolve against this node.
        let current = crate::node::CurrentNode::enter(node);
        let mut restored = 0;
        let mut suspended = 0;
        for cell in &deferred {
            if let Some(image) = images.remove(&cell.id()) {
                match Arc::clone(cell).restore_image(&image) {
                    Ok(()) => {
                        restored += 1;
                        suspended += u64::from(image.suspended.is_some());
                    }
                    Err(e) => {
                        tracing::error!("cannot restore actor {}: {e}", cell.id());
                        event(self.rank, &format!("restore-error actor={} {e}", cell.id()));
                    }
                }
            }
        }
        drop(current);
        for (id, image) in &images {
            if id.is_child() {
                tracing::error!(actor = %id, type_tag = image.type_tag, "actor spawned by a handler could not be rebuilt (no such actor type in this binary, or its id is taken); its state is lost");
                event(
                    self.rank,
                    &format!("restore-error actor={id} child not rebuilt"),
                );
            } else {
                tracing::error!(actor = %id, "actor in the checkpoint was not spawned again by main; its state is lost");
            }
        }
        state.ready = true;
        for cell in deferred {
            cell.wake();
        }
        Self::deliver_ready(&mut state, node);
        histogram!(RECOVERY_PHASE, "phase" => "restore").record(started.elapsed().as_secs_f64());
        event(
            self.rank,
            &format!(
                "resumed actors={restored} suspended_handlers={suspended} \
                 skipped_driver_sends={} restore_ms={}",
                state.main_replay.replayed_upto,
                started.elapsed().as_millis()
            ),
        );
    }

    /// The actors that had exited before the checkpoint stay gone: those `main` spawned
    /// again are ended before they run (no `on_start`, as their first incarnation had
    /// stopped), and all of them are recorded as exited, so the references to them in
    /// states and messages resolve to stopped actors, as they did when the checkpoint
    /// was taken, and logged messages to them are not held for a spawn that will not
    /// come.
    fn retire_exited(
        node: &NodeHandle,
        deferred: &mut Vec<Arc<dyn Control>>,
        images: &std::collections::HashMap<crate::ActorId, crate::actor::lifecycle::ActorImage>,
        exited: &crate::actor::exited_actors::ExitedActors,
    ) {
        node.mark_all_exited(exited);
        deferred.retain(|cell| {
            let gone = node.has_exited(cell.id()) && !images.contains_key(&cell.id());
            if gone {
                Arc::clone(cell).retire();
            }
            !gone
        });
    }

    /// Builds a vacant cell for each image of a child actor (spawned from a handler,
    /// [`crate::ActorId::child`]) that nothing spawned again, on the core it ran on.
    /// Returns them, not started; they are filled from their images with `main`'s actors.
    fn rebuild_children(
        node: &NodeHandle,
        images: &std::collections::HashMap<crate::ActorId, crate::actor::lifecycle::ActorImage>,
        spawned: &[Arc<dyn Control>],
    ) -> Vec<Arc<dyn Control>> {
        let respawned: std::collections::HashSet<_> = spawned.iter().map(|c| c.id()).collect();
        let mut wanted: Vec<_> = images
            .values()
            .filter(|i| i.id.is_child() && !respawned.contains(&i.id))
            .collect();
        wanted.sort_by_key(|i| i.id);
        let mut built = Vec::with_capacity(wanted.len());
        for image in wanted {
            let Some(kind) = crate::actor::actor_kind::find(image.type_tag) else {
                continue;
            };
            let on = crate::node::CoreId(image.core % node.num_cores().max(1));
            match kind.vacant(node, image.id, on) {
                Ok(cell) => built.push(cell),
                Err(e) => {
                    tracing::error!(actor = %image.id, kind = kind.name(), "cannot rebuild child actor: {e}")
                }
            }
        }
        built
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actor::lifecycle::ActorImage;
    use crate::node::CoreId;
    use crate::{messages, Actor, ActorId, ActorRef, SendError};
    use serde::{Deserialize, Serialize};
    use std::collections::HashMap;

    #[derive(Actor, Serialize, Deserialize, Default)]
    struct Probe {
        n: u64,
    }

    #[messages]
    impl Probe {
        #[message]
        fn bump(&mut self) -> u64 {
            self.n += 1;
            self.n
        }
    }

    fn image(id: ActorId, children: u64) -> ActorImage {
        ActorImage {
            id,
            type_tag: 0,
            started: true,
            state: crate::Payload::default(),
            mailbox: Vec::new(),
            stamps: Vec::new(),
            timers: Default::default(),
            receive_only: None,
            children,
            core: 0,
            suspended: None,
            results: Vec::new(),
            asked: Vec::new(),
            sleeps: Vec::new(),
            result_stamps: Vec::new(),
        }
    }

    #[test]
    fn actors_that_had_exited_at_the_checkpoint_stay_exited_and_references_to_them_resolve() {
        let node = crate::Node::builder().cores(1).pin(false).build().unwrap();
        let h = node.handle().clone();
        // What a restarted `main` spawned again before its restore point: one actor that
        // had exited before the checkpoint, one that was alive in it.
        let (gone, alive) = (ActorId::new(0, 0).unwrap(), ActorId::new(0, 1).unwrap());
        let mut deferred: Vec<Arc<dyn Control>> = vec![
            h.spawn_cell(CoreId(0), gone, None::<Probe>).unwrap(),
            h.spawn_cell(CoreId(0), alive, None::<Probe>).unwrap(),
        ];
        // `alive` had spawned two children; the first had exited after spawning a child
        // of its own, which exited too; the second child is imaged.
        let (exited_child, kept_child) = (ActorId::child(alive, 0), ActorId::child(alive, 1));
        let grandchild = ActorId::child(exited_child, 0);
        let images = HashMap::from([(alive, image(alive, 2)), (kept_child, image(kept_child, 0))]);

        RecoveryLayer::retire_exited(
            &h,
            &mut deferred,
            &images,
            &[gone, exited_child, grandchild].into_iter().collect(),
        );

        let left: Vec<ActorId> = deferred.iter().map(|c| c.id()).collect();
        assert_eq!(
            left,
            [alive],
            "only the actor of the checkpoint is restored and run"
        );
        assert!(
            h.lookup::<Probe>(gone).is_none(),
            "the exited one is not live"
        );
        assert!(!h.has_exited(alive) && !h.has_exited(kept_child));
        // A state or message naming any of them decodes to a stopped actor, as before
        // the failure.
        for id in [gone, exited_child, grandchild] {
            let stopped = h.actor_ref::<Probe>(id).unwrap();
            assert!(
                matches!(stopped.tell(Bump), Err(SendError::ActorStopped { .. })),
                "{id} refuses messages as stopped"
            );
        }
        assert!(
            h.actor_ref::<Probe>(ActorId::child(alive, 2)).is_err(),
            "a child not spawned yet is not taken for an exited one"
        );
        // Spawned again later (after the restore point), it still does not run.
        let again = h
            .spawn_cell(CoreId(0), gone, Some(Probe::default()))
            .unwrap();
        assert!(h.lookup::<Probe>(gone).is_none());
        assert!(matches!(
            ActorRef::from_cell(again).tell(Bump),
            Err(SendError::ActorStopped { .. })
        ));
        node.shutdown();
    }
}
