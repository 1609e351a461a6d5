//! Core executors: one OS thread per core, bound to it with hwloc, each driving its own
//! single-threaded Tokio runtime. Actors are tasks on exactly one of these runtimes, so an
//! actor never migrates between cores.

use crate::error::NodeError;
use crate::node::NodeHandle;
use crate::topology::{self, HwCore};
use std::sync::mpsc as std_mpsc;
use std::thread::JoinHandle;
use tokio::sync::oneshot;

/// One running core executor.
pub(crate) struct CoreExecutor {
    pub(crate) handle: tokio::runtime::Handle,
    pub(crate) hw: Option<HwCore>,
    node_tx: Option<oneshot::Sender<NodeHandle>>,
    shutdown_tx: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl CoreExecutor {
    /// Starts the executor thread for core `index`, pinned to `hw` when given.
    pub(crate) fn start(index: usize, hw: Option<HwCore>) -> Result<Self, NodeError> {
        let (ready_tx, ready_rx) = std_mpsc::channel();
        let (node_tx, node_rx) = oneshot::channel::<NodeHandle>();
        let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
        let pin_to = hw.clone();
        let thread = std::thread::Builder::new()
            .name(format!("lazarus-core-{index}"))
            .spawn(move || {
                if let Some(core) = &pin_to {
                    if let Err(e) = topology::bind_current_thread(core) {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                }
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(NodeError::Executor(e.to_string())));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(rt.handle().clone()));
                rt.block_on(async move {
                    // The node handle exists only once every core has started.
                    if let Ok(node) = node_rx.await {
                        NodeHandle::set_current(Some(node));
                        let _ = shutdown_rx.await;
                        NodeHandle::set_current(None);
                    }
                });
                // Dropping the runtime drops any actor task still on it.
            })
            .map_err(|e| NodeError::Executor(e.to_string()))?;
        let handle = ready_rx.recv().map_err(|_| {
            NodeError::Executor(format!("core {index} executor died while starting"))
        })??;
        Ok(CoreExecutor {
            handle,
            hw,
            node_tx: Some(node_tx),
            shutdown_tx: Some(shutdown_tx),
            thread: Some(thread),
        })
    }

    /// Hands the executor its node once the node is complete.
    pub(crate) fn attach(&mut self, node: NodeHandle) {
        if let Some(tx) = self.node_tx.take() {
            let _ = tx.send(node);
        }
    }

    /// Stops the executor thread and waits for it.
    pub(crate) fn stop(&mut self) {
        self.node_tx.take();
        if let Some(tx) = self.shutdown_tx.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for CoreExecutor {
    fn drop(&mut self) {
        self.stop();
    }
}
